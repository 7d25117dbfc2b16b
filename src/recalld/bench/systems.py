"""What a benchmark run compares and is built on: the systems (a retrieval config and a
search mode each, recalld's and the plain baselines), the embedder behind the persistent
cache, and the optional models."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from recalld.config import Settings, default_cache_dir
from recalld.errors import InvalidInputError
from recalld.providers.cache import CachedEmbedder, EmbeddingCache
from recalld.providers.embedders import Embedder, resolve_embedder
from recalld.records import SEARCH_MODES, SearchMode
from recalld.retrieval.config import RetrievalConfig, get_preset
from recalld.retrieval.models import Models, build_models

CACHE_FILE = "embeddings.sqlite"
"""The same file the engine uses under ``cache_dir``, so benchmarks and normal use share it."""

Progress = Callable[[int, int, str], None]
"""``progress(advance, total, label)``: called as probes are answered."""


@dataclass(frozen=True)
class System:
    """One retrieval system to compare: a name, retrieval settings and a search mode."""

    name: str
    config: RetrievalConfig
    mode: SearchMode = "auto"


def build_systems(
    configs: Mapping[str, RetrievalConfig | System] | None = None,
    *,
    mode: SearchMode = "auto",
    baselines: bool = True,
    base: RetrievalConfig | None = None,
) -> list[System]:
    """The systems of a run: the named configs (default: recalld's pipeline) and baselines.

    Baselines are plain RRF (BM25 and vectors fused, hybrid), plain BM25 only
    (``channels=("bm25",)``) and plain vector only (``mode="vector"``): ``base.plain()``, so
    no adjustment, session or neighbour support reorders them; what a user of a plain index
    would get.
    """
    if mode not in SEARCH_MODES:
        raise InvalidInputError(f"mode must be one of {', '.join(SEARCH_MODES)}")
    default = base or get_preset("balanced")
    named = configs if configs is not None else {"recalld": default}
    systems = [c if isinstance(c, System) else System(n, c, mode) for n, c in named.items()]
    if baselines:
        plain = default.plain()
        systems += [
            System("rrf", plain, "hybrid"),
            System("bm25", plain.with_changes(channels=("bm25",)), "hybrid"),
            System("vector", plain, "vector"),
        ]
    names = [s.name for s in systems]
    if len(set(names)) != len(names):
        raise InvalidInputError(f"system names must be unique, got {', '.join(names)}")
    return systems


def load_embedder(embedder: Embedder, cache_dir: Path | None) -> Embedder:
    """The embedder, behind the persistent cache when ``cache_dir`` is set."""
    if cache_dir is None or isinstance(embedder, CachedEmbedder):
        return embedder
    return CachedEmbedder(embedder, EmbeddingCache(Path(cache_dir) / CACHE_FILE))


def check_run(limit: int | None, depth: int) -> None:
    """A run's question limit and search depth, or a clear error."""
    if limit is not None and limit < 1:
        raise InvalidInputError("limit must be at least 1")
    if not 1 <= depth <= 1000:
        raise InvalidInputError("depth must be between 1 and 1000")


def run_models(settings: Settings | None, cache_dir: Path) -> Models | None:
    """The LLM and reranker the settings name (``--llm``, ``--reranker``), if any, their
    answers cached beside the run's embeddings."""
    if settings is None or not (settings.llm or settings.reranker):
        return None
    return build_models(settings.model_copy(update={"cache_dir": cache_dir}))


class Resources(NamedTuple):
    """What a run is built on, resolved from the call's arguments and the settings."""

    embedder: Embedder
    """The embedder, behind the persistent cache."""
    cache_dir: Path
    base: RetrievalConfig
    """recalld's default settings, from which the baselines derive."""
    embedder_setting: str | None
    """The setting that chose the embedder (``None`` for an object given in code)."""


def resources(
    embedder: Embedder | str | None,
    cache_dir: Path | None,
    settings: Settings | None,
    base: RetrievalConfig | None,
) -> Resources:
    """The embedder (behind the cache), the cache folder and recalld's default settings."""
    folder = cache_dir or (settings.cache_dir if settings else None) or default_cache_dir()
    spec: str | None = None
    if isinstance(embedder, Embedder):
        model = embedder
    else:
        spec = embedder or (settings.embedder if settings else "local")
        model = resolve_embedder(spec, settings)
    preset = get_preset(settings.preset) if settings else get_preset("balanced")
    return Resources(load_embedder(model, Path(folder)), Path(folder), base or preset, spec)
