"""Stage 1c: ``auto`` routing. The offline rule decides (:func:`understand`); with an LLM
configured, CEMS's complexity routing: a simple question goes to the vector channel alone,
a complex one, one that needs reasoning, or one spanning more than two domains to hybrid.
Any failure or malformed answer keeps the offline decision."""

from __future__ import annotations

import json
import re

from recalld.providers.llm import CallFailed, Usage, ask
from recalld.records import SearchMode
from recalld.retrieval.models import Models, StageNote

PROMPT_VERSION = "route-v1"
MAX_SIMPLE_DOMAINS = 2
"""CEMS: a question touching more than this many domains is searched in hybrid mode."""
COMPLEXITIES = ("simple", "complex", "reasoning")

ROUTE_PROMPT = """Classify this question asked of a person's memory store. Reply with JSON \
only: {{"complexity": "simple" | "complex" | "reasoning", "domains": <how many distinct \
topics it spans, an integer>}}

Question: {query}"""


def parse_route(answer: str) -> SearchMode | None:
    """``vector`` or ``hybrid`` from the model's answer, or ``None`` if it is malformed."""
    found = re.search(r"\{.*\}", answer, re.DOTALL)
    try:
        data = json.loads(found.group(0)) if found else None
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    complexity, domains = data.get("complexity"), data.get("domains")
    if complexity not in COMPLEXITIES:
        return None
    if isinstance(domains, bool) or not isinstance(domains, int) or domains < 0:
        return None
    if complexity == "simple" and domains <= MAX_SIMPLE_DOMAINS:
        return "vector"
    return "hybrid"


def route(
    query: str, offline: SearchMode, models: Models, enabled: bool
) -> tuple[SearchMode, StageNote]:
    """The mode an ``auto`` search runs in, and the stage's note."""
    if models.llm is None or not enabled:
        reason = "no LLM configured" if models.llm is None else "llm_routing is off"
        return offline, StageNote("route", False, reason)
    usage = Usage()
    try:
        answer, usage = ask(
            models.llm,
            [{"role": "user", "content": ROUTE_PROMPT.format(query=query)}],
            PROMPT_VERSION,
            models.cache,
        )
    except CallFailed as exc:
        return offline, StageNote("route", False, f"LLM failed: {exc}", exc.usage)
    mode = parse_route(answer)
    if mode is None:
        return offline, StageNote("route", False, "malformed routing answer", usage)
    return mode, StageNote("route", True, f"routed to {mode}", usage)
