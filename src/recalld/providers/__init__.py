"""Embedding providers: a small base class, a registry keyed by name, and a fake."""

from recalld.providers.embedders import (
    Embedder,
    EmbeddingBatch,
    FakeEmbedder,
    Fingerprint,
    resolve_embedder,
)

__all__ = ["Embedder", "EmbeddingBatch", "FakeEmbedder", "Fingerprint", "resolve_embedder"]
