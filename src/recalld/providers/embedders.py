"""The registry that resolves ``"provider:model"`` strings to embedders, importing each
implementation only when it is asked for; the interface itself lives in
:mod:`recalld.providers.embedding` and is re-exported here for callers."""

from __future__ import annotations

from typing import TYPE_CHECKING

from recalld.errors import InvalidInputError
from recalld.providers.embedding import (
    Embedder,
    EmbeddingBatch,
    FakeEmbedder,
    Fingerprint,
    Vectors,
    cores_shared,
    l2_normalize,
    plan_batches,
    sharing_cores,
)

if TYPE_CHECKING:
    from recalld.config import Settings

__all__ = [
    "Embedder",
    "EmbeddingBatch",
    "FakeEmbedder",
    "Fingerprint",
    "Vectors",
    "cores_shared",
    "l2_normalize",
    "plan_batches",
    "resolve_embedder",
    "sharing_cores",
]


def resolve_embedder(spec: str, settings: Settings | None = None) -> Embedder:
    """Build an embedder from ``local``, ``onnx:FOLDER``, ``openai:MODEL`` or ``fake[:DIM]``.

    Implementations are imported lazily, so ``import recalld`` stays cheap.
    """
    kind, _, arg = spec.partition(":")
    int8_queries = settings.int8_queries if settings else True
    batching: dict[str, int] = {}
    query_prefix = settings.embed_query_prefix if settings else None
    document_prefix = settings.embed_document_prefix if settings else None
    if settings is not None:
        batching = {
            "batch_size": settings.embed_batch_size,
            "threads": settings.embed_threads,
            "batch_tokens": settings.embed_batch_tokens,
        }
    if kind == "local" and not arg:
        from recalld.providers.onnx import OnnxEmbedder

        return OnnxEmbedder.packaged(int8_queries=int8_queries, **batching)
    if kind == "multilingual" and not arg:
        from recalld.providers.multilingual import multilingual_embedder

        return multilingual_embedder(settings, **batching)
    if kind == "onnx" and arg:
        from pathlib import Path

        from recalld.providers.onnx import OnnxEmbedder

        return OnnxEmbedder.from_folder(
            Path(arg),
            int8_queries=int8_queries,
            **batching,
            query_prefix=query_prefix,
            document_prefix=document_prefix,
        )
    if kind == "openai" and arg:
        from recalld.providers.openai import OpenAIEmbedder

        if settings is None:
            raise InvalidInputError("the openai embedder needs settings (base URL, API key)")
        return OpenAIEmbedder(
            model=arg,
            base_url=settings.openai_base_url,
            api_key=settings.openai_api_key,
            dimensions=settings.openai_dimensions,
            query_prefix=query_prefix or "",
            document_prefix=document_prefix or "",
        )
    if kind == "fake":
        return FakeEmbedder(int(arg) if arg else 64)
    raise InvalidInputError(
        f"unknown embedder {spec!r}: use 'local', 'multilingual', 'onnx:/path/to/model-folder', "
        "'openai:MODEL' or 'fake'"
    )
