"""Errors recalld raises. Every one says what went wrong and what to do about it."""

from __future__ import annotations


def install_hint(extra: str) -> str:
    """How to add an optional extra: recalld is installed from its repository, not PyPI."""
    return (
        f"pip install '.[{extra}]' in a clone of recalld "
        f"(or pip install 'recalld[{extra}] @ git+URL-of-the-repository')"
    )


class RecalldError(Exception):
    """Base class of every error recalld raises on purpose."""

    exit_code = 1


class InvalidInputError(RecalldError, ValueError):
    """The caller gave content or arguments recalld cannot store or use."""

    exit_code = 2


class ConflictError(InvalidInputError):
    """The input clashes with what is stored (an id that exists with other content)."""


class NotFoundError(RecalldError, KeyError):
    """No memory has the given id."""

    exit_code = 3

    def __str__(self) -> str:  # KeyError quotes its message; people should not see the quotes.
        return str(self.args[0]) if self.args else "not found"


class StoreError(RecalldError):
    """The store file is missing, corrupt, foreign, locked or not writable."""

    exit_code = 4


class EmbedderMismatchError(StoreError):
    """The store's vectors were made by another embedder than the one configured."""

    exit_code = 5


class EmbedderError(RecalldError):
    """The embedding model could not be loaded or did not answer."""

    exit_code = 6


class ModelError(RecalldError):
    """An optional LLM or reranker failed (unreachable, timed out, or answered nonsense).

    The search pipeline catches it and skips the stage; it reaches callers only when they
    call a provider directly.
    """

    exit_code = 7
