"""The retrieval pipeline: understand, retrieve, fuse, adjust, filter, assemble, explain."""

from recalld.retrieval.config import PRESETS, RetrievalConfig, get_preset

__all__ = ["PRESETS", "RetrievalConfig", "get_preset"]
