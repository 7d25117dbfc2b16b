"""What a cosine means for this embedder: similarity measured above its own chance level.

Embedders disagree on the scale of a cosine. For the packaged MiniLM two unrelated
sentences score about 0.0-0.1; for multilingual-e5 they score 0.75-0.85, so a fixed "0.85
means the same thing said again" holds for one model and fires on every pair for the
other. The pipeline therefore never compares a bare cosine with a constant: it measures the
embedder once per fingerprint on a packaged set of unrelated texts (:data:`TOPICS`: one
statement and one question each, on topics that share nothing) and expresses each cosine
as its lift above that chance level, ``(cosine - chance) / (1 - chance)``: 0 is what two
unrelated texts score, 1 is identity, whatever the model. Thresholds in
:class:`~recalld.retrieval.config.RetrievalConfig` are on that scale.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from recalld.providers.embedders import Embedder, Fingerprint

TOPICS: tuple[tuple[str, str], ...] = (
    (
        "The sourdough starter needs feeding with flour and water every twelve hours.",
        "how often should I feed the starter?",
    ),
    (
        "Our quarterly invoice for cloud hosting came to 1,240 euros.",
        "how much was the hosting bill?",
    ),
    (
        "The kestrel hovered over the motorway verge before diving for a vole.",
        "what bird did we see by the road?",
    ),
    (
        "Run the migrations with `make migrate` before starting the API server.",
        "how do I set up the database schema?",
    ),
    (
        "My grandmother taught me to knit socks on four double-pointed needles.",
        "who taught me knitting?",
    ),
    (
        "The ferry to the island leaves at 7:15 from pier three on weekdays.",
        "when does the boat depart?",
    ),
    (
        "Photosynthesis converts light energy into chemical energy stored in glucose.",
        "how do plants make sugar?",
    ),
    (
        "The left rear tyre keeps losing pressure; the garage found a nail in it.",
        "what was wrong with the car?",
    ),
    (
        "She prefers aisle seats on long-haul flights and always books vegetarian meals.",
        "what are her travel preferences?",
    ),
    ("The violin concerto ends with a fast rondo in D major.", "how does the piece finish?"),
    (
        "Mortgage rates rose by half a point after the central bank meeting.",
        "what happened to interest rates?",
    ),
    ("The tomatoes on the balcony got blight after two weeks of rain.", "why did my plants die?"),
    ("Der Zug nach München fällt heute wegen eines Streiks aus.", "warum fährt der Zug nicht?"),
    ("La réunion du conseil municipal est reportée à jeudi soir.", "quand a lieu la réunion ?"),
    ("El médico me recetó antibióticos durante diez días.", "qué me recetó el médico?"),
    ("猫は毎朝六時にご飯を欲しがって鳴きます。", "猫はいつご飯を欲しがりますか？"),
    (
        "The unit tests fail on Windows because of a path separator bug.",
        "why is CI red on one platform?",
    ),
    (
        "We hiked the ridge trail in fog and turned back before the summit.",
        "did we reach the top of the mountain?",
    ),
    (
        "The museum's new wing displays Bronze Age pottery from Crete.",
        "what is in the new exhibition?",
    ),
    (
        "Glacier retreat in the Alps accelerated during the last two decades.",
        "how fast are the glaciers melting?",
    ),
    ("The quarterback threw three interceptions in the second half.", "how did the game go?"),
    (
        "Ibuprofen should be taken with food to protect the stomach lining.",
        "how should I take the painkiller?",
    ),
    (
        "The landlord agreed to replace the broken boiler by Friday.",
        "when will the heating be fixed?",
    ),
    (
        "A haiku has three lines of five, seven and five syllables.",
        "what is the structure of the poem form?",
    ),
)
"""Unrelated statements, each with a question on its own topic (several languages, since
multilingual models place languages differently)."""


@dataclass(frozen=True)
class Calibration:
    """An embedder's chance levels: the mean cosine of two unrelated statements, and of a
    question to statements on other topics."""

    chance: float
    query_chance: float

    def lift(self, cosine: float) -> float:
        """A cosine between two stored memories, on the calibrated scale."""
        return _lift(cosine, self.chance)

    def query_lift(self, cosine: float) -> float:
        """A cosine between a query and a memory, on the calibrated scale."""
        return _lift(cosine, self.query_chance)

    def lift_all(self, cosines: np.ndarray) -> np.ndarray:
        """:meth:`lift` of every cosine of an array, in float64: the very numbers
        :meth:`lift` gives for each (the same operations on the same doubles)."""
        if self.chance >= 1.0:
            return np.zeros(cosines.shape)
        return (cosines.astype(np.float64) - self.chance) / (1.0 - self.chance)


UNCALIBRATED = Calibration(0.0, 0.0)
"""Raw cosines (chance taken as 0): for callers that have no embedder at hand."""


def _lift(cosine: float, chance: float) -> float:
    return (cosine - chance) / (1.0 - chance) if chance < 1.0 else 0.0


_lock = threading.Lock()
_measured: dict[Fingerprint, Calibration] = {}


def calibrate(embedder: Embedder) -> Calibration:
    """The embedder's :class:`Calibration`, measured once per fingerprint and process (the
    texts go through the embedder, so a cached embedder reads them from its cache)."""
    key = embedder.fingerprint
    with _lock:
        found = _measured.get(key)
    if found is not None:
        return found
    statements = embedder.embed_documents([s for s, _ in TOPICS]).vectors
    questions = np.stack([embedder.embed_query(q) for _, q in TOPICS])
    pairs = statements @ statements.T
    asked = questions @ statements.T
    off = ~np.eye(len(TOPICS), dtype=bool)
    found = Calibration(float(pairs[off].mean()), float(asked[off].mean()))
    with _lock:
        _measured.setdefault(key, found)
    return found
