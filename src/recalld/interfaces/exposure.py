"""What a client of a server (HTTP or MCP) may learn about the server itself.

The library and the CLI speak to the person who runs them and name the store file, the DSN
or the model folder. A server's client is someone else: a store or model failure reaches it
as one plain sentence, the details going to the server's log, and a tenant's status leaves
out where the store lives and which folders of the server are indexed (admin keys see them).
"""

from __future__ import annotations

import logging
from dataclasses import replace

from recalld.engine import Status
from recalld.errors import EmbedderError, EmbedderMismatchError, RecalldError, StoreError

STORE_PROBLEM = "store problem: the store could not answer this request; the server's log says why"
MODEL_PROBLEM = (
    "embedder problem: the embedding model could not answer this request; the server's log says why"
)
HIDDEN = "(shown to admin keys only)"
KEYLESS_WARNING = (
    "warning: without API keys every user of this machine can reach this server (loopback "
    "stops other machines and web pages, not other accounts) and read or change this "
    "store's memories; on a shared machine create a key (`recalld keys create --tenant NAME`)"
)
"""What ``serve`` says when it starts without keys: the Host and Origin checks stop web
pages, not other accounts of the machine."""

log = logging.getLogger("recalld.server")


def public_message(exc: RecalldError) -> str:
    """The message a client sees for ``exc``; a store or model failure is logged in full
    and answered in general words (its text may carry a DSN, a user, a socket or a path).
    A store of another embedder's vectors keeps its own message: it names no location and
    says what to do."""
    if isinstance(exc, StoreError) and not isinstance(exc, EmbedderMismatchError):
        log.error("store error: %s", exc)
        return STORE_PROBLEM
    if isinstance(exc, EmbedderError):
        log.error("embedder error: %s", exc)
        return MODEL_PROBLEM
    return str(exc)


def public_status(status: Status) -> Status:
    """``status`` without the store's location and the indexed folders."""
    return replace(status, store=replace(status.store, path=HIDDEN), sources=None)


def too_large_answer(size: int, limit: int) -> str:
    """Why an answer of ``size`` bytes is refused (over ``limit``, the answers' cap of
    :mod:`recalld.request_limits`), and what to ask instead: every door says the same."""
    return (
        f"the answer would be {size:,} bytes, over the limit of {limit:,}: ask for fewer "
        "hits or memories (limit)"
    )
