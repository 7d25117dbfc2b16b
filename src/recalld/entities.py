"""Offline entity extraction: names, proper-noun runs, numbers with units, quoted strings.

Entities are stored lower-cased and matched by overlap (the entity channel). The extractor
is deliberately simple and fast; an LLM-backed extractor can replace it. They are computed
when a memory is written (unless the caller gives its own), so a change here applies to
memories written after it.

Capital letters mark names only away from the start of a sentence: there every word is
capitalised ("Sit up straight", "Wow, that's great"). A lone capitalised word that opens a
sentence, a list item or a line is kept only if the text also capitalises it elsewhere, or
if it labels a speaker (``Caroline: ...``); a run of capitalised words that opens a sentence
loses a first word that is a common opener ("Hey Mel" -> "mel"). The price: a name that only
ever opens sentences ("Sarah went home.") is not found; the BM25 channel still matches it.
"""

from __future__ import annotations

import re

from recalld.text import STOPWORDS

_PROPER = re.compile(r"\b([A-Z][\w'’-]*(?:\s+(?:of|de|van|von|the)?\s*[A-Z][\w'’-]*)*)")
_QUOTED = re.compile(r"[\"“]([^\"”]{2,60})[\"”]")
# A number, then a unit or a counted word ("5 km", "3.5kg", "20%", "2 kids"); a list marker
# ("1. Sit") is not one: the number may not end in a full stop or a comma.
_NUMBER_UNIT = re.compile(r"\b(\d+(?:[.,]\d+)*(?:%|\s?[a-zA-Z]{1,12}\b))")
# What comes just before a word that opens a sentence, a line or a list item: the end of a
# sentence or a line, then any bullet, heading mark, quote or item number. Looked for in the
# few characters before each capitalised run, not over the whole text.
_OPENING = r"[\s\-*•#>\"“(]*(?:\d+[.)]\s+)?\Z"
_AFTER_BREAK = re.compile(r"(?:[.!?:;]\s+|\n)" + _OPENING)
_AT_TEXT_START = re.compile(r"\A" + _OPENING)
_LOOK_BACK = 24
# After a name that opens a line: "Caroline: ..." labels a speaker ("Tips:" ending its line
# is a heading).
_SPEAKER_COLON = re.compile(r":[ \t]+\S")
_NOT_NAMES = STOPWORDS | {"what", "when", "where", "who", "why", "how", "which", "can", "could"}
_OPENERS = frozenset(
    """
    hey hi hello dear wow oh ah yes yeah no nope okay ok sure well so good great nice cool
    awesome amazing thanks thank congrats congratulations sorry please happy welcome
    """.split()  # noqa: SIM905 - a word list reads best as text
)
# Contractions whose first part is a pronoun or a question word: "I'm", "What's", "That's".
_CONTRACTION = re.compile(r"^(?:i|you|we|they|he|she|it|that|there|what|who|let|here)['’]\w+$")


def extract_entities(text: str, limit: int = 32) -> list[str]:
    """Lower-cased entity strings in order of first appearance."""
    runs = _capital_runs(text)
    capitalised_inside = {w for opens, _, words in runs for w in (words[1:] if opens else words)}
    found: dict[str, None] = {}
    for opens, speaker, words in runs:
        if (
            opens
            and not speaker
            and words[0] not in capitalised_inside
            and (len(words) == 1 or words[0].lower() in _OPENERS)
        ):
            words = words[1:]
        phrase = " ".join(words)
        if not words or phrase.isupper() and len(phrase) < 2:
            continue
        found.setdefault(phrase.lower().strip("'’"), None)
        if len(words) > 1:
            for word in words:
                if not _ordinary(word) and len(word) > 1:
                    found.setdefault(word.lower().strip("'’"), None)
    for match in _QUOTED.finditer(text):
        found.setdefault(match.group(1).lower().strip(), None)
    for match in _NUMBER_UNIT.finditer(text):
        value = match.group(1).lower()
        if value.rsplit(maxsplit=1)[-1].lstrip("0123456789.,") not in STOPWORDS:  # "2020 and"
            found.setdefault(value, None)
    return list(found)[:limit]


def _capital_runs(text: str) -> list[tuple[bool, bool, list[str]]]:
    """Runs of capitalised words, each with whether it opens a sentence and whether it
    labels a speaker. "Yesterday I met" is one run of capitals: a capitalised pronoun or
    stopword splits it."""
    runs: list[tuple[bool, bool, list[str]]] = []
    for match in _PROPER.finditer(text):
        start = match.start(1)
        opens = _opens_sentence(text, start)
        speaker = (
            opens
            and not text[text.rfind("\n", 0, start) + 1 : start].strip()
            and _SPEAKER_COLON.match(text, match.end(1)) is not None
        )
        segment: list[str] = []
        for word in [*match.group(1).split(), ""]:
            if word and not (_ordinary(word) and word[0].isupper()):
                segment.append(word)
                continue
            if segment:
                runs.append((opens, speaker, segment))
            opens, speaker, segment = False, False, []
    return runs


def _opens_sentence(text: str, start: int) -> bool:
    if start <= _LOOK_BACK and _AT_TEXT_START.search(text, 0, start):
        return True
    return _AFTER_BREAK.search(text, max(0, start - _LOOK_BACK), start) is not None


def _ordinary(word: str) -> bool:
    """A stopword, a question word or a pronoun's contraction: never a name."""
    lowered = word.lower()
    return lowered in _NOT_NAMES or _CONTRACTION.match(lowered) is not None
