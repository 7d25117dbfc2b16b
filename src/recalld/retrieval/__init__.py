"""The retrieval pipeline: understand, retrieve, fuse, adjust, filter, assemble, explain."""

from recalld.retrieval.config import FLAT, PRESETS, SECTIONS, RetrievalConfig, get_preset

__all__ = ["FLAT", "PRESETS", "SECTIONS", "RetrievalConfig", "get_preset"]
