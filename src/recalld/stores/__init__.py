"""Stores: one typed protocol, backend-specific SQL only inside each backend's package."""

from recalld.stores.base import CandidateRequest, ChannelCandidate, Store, StoreStats

__all__ = ["CandidateRequest", "ChannelCandidate", "Store", "StoreStats"]
