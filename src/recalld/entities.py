"""Offline entity extraction: names, proper-noun runs, numbers with units, quoted strings.

Entities are stored lower-cased and matched by overlap (the entity channel). The extractor
is deliberately simple and fast; an LLM-backed extractor can replace it.
"""

from __future__ import annotations

import re

from recalld.text import STOPWORDS

_PROPER = re.compile(r"\b([A-Z][\w'’-]*(?:\s+(?:of|de|van|von|the)?\s*[A-Z][\w'’-]*)*)")
_QUOTED = re.compile(r"[\"“]([^\"”]{2,60})[\"”]")
_NUMBER_UNIT = re.compile(r"\b(\d[\d,.]*\s?(?:%|[a-zA-Z]{1,12}))\b")
_SENTENCE_START = re.compile(r"(?:^|[.!?]\s+|\n)([A-Z][\w'’-]*)")
_NOT_NAMES = STOPWORDS | {"what", "when", "where", "who", "why", "how", "which", "can", "could"}


def extract_entities(text: str, limit: int = 32) -> list[str]:
    """Lower-cased entity strings in order of first appearance."""
    starts = {m.start(1) for m in _SENTENCE_START.finditer(text)}
    found: dict[str, None] = {}
    for match in _PROPER.finditer(text):
        phrase = match.group(1)
        words = phrase.split()
        if match.start(1) in starts and len(words) == 1 and words[0].lower() in _NOT_NAMES:
            continue
        if phrase.lower() in _NOT_NAMES or phrase.isupper() and len(phrase) < 2:
            continue
        found.setdefault(phrase.lower().strip("'’"), None)
        if len(words) > 1:
            for word in words:
                if word.lower() not in _NOT_NAMES and len(word) > 1:
                    found.setdefault(word.lower().strip("'’"), None)
    for match in _QUOTED.finditer(text):
        found.setdefault(match.group(1).lower().strip(), None)
    for match in _NUMBER_UNIT.finditer(text):
        found.setdefault(match.group(1).lower(), None)
    return list(found)[:limit]
