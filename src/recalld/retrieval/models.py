"""What the optional model stages share: the models a search may use, and the note each
stage leaves in the search's details (ran or skipped, why, and what its calls cost)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from recalld.providers.llm import LLM, ModelCache, Usage, resolve_llm
from recalld.providers.rerankers import Reranker, resolve_reranker

if TYPE_CHECKING:
    from recalld.config import Settings


@dataclass(frozen=True)
class Models:
    """The optional models of a search; with neither, the pipeline calls none."""

    llm: LLM | None = None
    reranker: Reranker | None = None
    cache: ModelCache | None = None
    """Answers and scores already computed, keyed by (model, prompt version, input hash)."""

    def close(self) -> None:
        """Close the HTTP clients and the cache (the packaged MaxSim model stays loaded)."""
        for part in (self.llm, self.reranker, self.cache):
            close = getattr(part, "close", None)
            if callable(close):
                close()


@dataclass(frozen=True)
class StageNote:
    """One optional stage's outcome, for ``SearchResult.details["stages"]``."""

    stage: str
    ran: bool
    reason: str = ""
    """Why it was skipped, or what it did."""
    usage: Usage = field(default_factory=Usage)

    def as_dict(self) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "status": "ran" if self.ran else "skipped",
            "reason": self.reason,
            **self.usage.as_dict(),
        }


def build_models(settings: Settings) -> Models:
    """The LLM and reranker the settings name, with the answer cache under ``cache_dir``
    (in memory when there is none). Bad specs raise ``InvalidInputError``."""
    llm = resolve_llm(settings)
    reranker = resolve_reranker(settings, llm)
    folder = settings.cache_dir
    return Models(
        llm, reranker, ModelCache(None if folder is None else Path(folder) / "models.sqlite")
    )
