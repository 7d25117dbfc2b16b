"""Vector-only turn recall_any@10 on LoCoMo for three ways of writing a turn as a memory.

A diagnostic behind docs/benchmarks.md: exact cosine ranking with the packaged model over
(a) "speaker: text [image: caption]" (what `recalld bench locomo` stores), (b) the text with
its caption, (c) the text alone. Categories 1-4, questions with evidence.

Usage: python scripts/locomo_vector_formats.py ../shared/benchmarks/locomo/locomo.json
"""

from __future__ import annotations

import sys

import numpy as np

from recalld.bench.locomo import DEFAULT_CATEGORIES, Turn, load_locomo
from recalld.bench.metrics import recall_any
from recalld.bench.systems import load_embedder
from recalld.config import default_cache_dir
from recalld.providers.embedders import resolve_embedder

FORMATS = {
    "speaker: text [image: caption]": lambda t: f"{t.speaker}: {t.text}",
    "text [image: caption]": lambda t: t.text,
    "text only": lambda t: t.text.split(" [image: ")[0] or t.text,
}


def main(path: str) -> None:
    embedder = load_embedder(resolve_embedder("local"), default_cache_dir())
    conversations = load_locomo(path)
    for name, render in FORMATS.items():
        scores = []
        for conversation in conversations:
            turns: list[Turn] = [t for s in conversation.sessions for t in s.turns]
            matrix = embedder.embed_documents([render(t) for t in turns]).vectors
            for q in conversation.questions:
                if q.category not in DEFAULT_CATEGORIES or not q.evidence:
                    continue
                order = np.argsort(-(matrix @ embedder.embed_query(q.question)), kind="stable")
                scores.append(recall_any([turns[i].dia_id for i in order[:10]], q.evidence, 10))
        print(f"{name}: recall_any@10 = {sum(scores) / len(scores):.3f} over {len(scores)}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
