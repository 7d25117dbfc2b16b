"""Small text helpers shared by the store, the embedder and the pipeline."""

from __future__ import annotations

import functools
import hashlib
import re
import unicodedata

_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*", re.UNICODE)
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")

STOPWORDS = frozenset(
    """
    a about above after again against all am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from further
    had has have having he her here hers herself him himself his how i if in into is it its
    itself just me more most my myself no nor not now of off on once only or other our ours
    ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were
    what when where which while who whom why will with would you your yours yourself yourselves
    im ive id youre dont didnt doesnt also get got one much many tell remember thing things
    know like really yeah okay ok oh hi hello thanks thank please us let lets may might must
    shall
    """.split()  # noqa: SIM905 - a word list reads best as text
)


def normalize_content(text: str) -> str:
    """NFC-normalise and strip; the form that is hashed and stored."""
    return unicodedata.normalize("NFC", text).strip()


def content_hash(text: str) -> str:
    """sha256 of the normalised content, hex."""
    return hashlib.sha256(normalize_content(text).encode("utf-8")).hexdigest()


def words(text: str) -> list[str]:
    """Lower-cased word tokens (letters and digits, apostrophes kept inside words)."""
    return [w.lower().replace("’", "'") for w in _WORD.findall(text)]


def keywords(text: str) -> list[str]:
    """Words minus stopwords, in order, without repeats."""
    seen: dict[str, None] = {}
    for w in words(text):
        bare = w.replace("'", "")
        if bare not in STOPWORDS and w not in STOPWORDS and len(bare) > 1 or bare.isdigit():
            seen.setdefault(w, None)
    return list(seen)


def has_cjk(text: str) -> bool:
    return _CJK.search(text) is not None


def estimate_tokens(text: str) -> int:
    """A fast token estimate: CJK characters count one each, other text four characters a token."""
    cjk = len(_CJK.findall(text))
    return max(1, cjk + (len(text) - cjk + 3) // 4)


_EVENT_VERBS = (
    "got",
    "bought",
    "visited",
    "attended",
    "went",
    "took",
    "received",
    "saw",
    "met",
    "started",
    "finished",
    "completed",
    "joined",
    "moved",
    "picked up",
    "tried",
    "made",
    "had",
    "participated",
    "spent",
    "found",
    "learned",
    "signed up",
    "adopted",
    "sold",
    "won",
    "ran",
)
_FIRST_PERSON_EVENT = re.compile(
    r"[^\w'\u2019](?:i|we)(?:['\u2019]ve| have| had)?\s+"
    rf"(?:(?:just|recently|finally|also|actually)\s+)?(?:{'|'.join(_EVENT_VERBS)})\b"
    r"(?! no idea\b)"  # "I had no idea ..." is surprise, not something that happened
)
_RECENT_DAY = re.compile(r"\b(?:today|yesterday|last (?:week|night|weekend|month))\b")


_SELF_STATEMENT = re.compile(
    r"\bmy\b|\bi(?:['\u2019]m| am|['\u2019]ve been| have been)\s+(?:a|an|currently|working|"
    r"living|trying|planning|thinking|learning|training|using|taking|doing)\b"
)


def only_asks(text: str, tells_event: bool | None = None) -> bool:
    """Whether ``text`` only asks: it ends in a question mark, tells of no event and says
    nothing of its speaker (no "my", no "I'm a ...", "I've been working ..."). "Which
    climbing gyms are open late?" only asks; "My gym closes at 9, which ones are open
    late?" does not. ``tells_event`` is :func:`states_event`'s answer if the caller has it.
    """
    if not text.rstrip().endswith("?"):
        return False
    if tells_event is None:
        tells_event = states_event(text)
    return not tells_event and _SELF_STATEMENT.search(text.lower()) is None


def states_event(text: str) -> bool:
    """Whether ``text`` tells of something that happened to its speaker: "I visited the Met
    today", "we adopted a puppy last week" (first person and a past-tense verb of doing or
    getting, or a recent day). Questions, advice and small talk rarely match.

    Stores keep the answer with each memory (``Memory.tells_event``), computed when it is
    written; a change to these patterns needs a migration that recomputes it.
    """
    lowered = f" {text.lower()}"
    # Lower-cased text, no leading word boundary, day words looked for as plain substrings
    # first: several times faster than one case-blind pattern.
    if any(day in lowered for day in ("today", "yesterday", "last ")) and _RECENT_DAY.search(
        lowered
    ):
        return True
    return _FIRST_PERSON_EVENT.search(lowered) is not None


_CHANGE_CUES = re.compile(
    # English: a value that changed, or a plan that moved.
    r"\b(?:now|no longer|not any ?more|anymore|instead|changed?|changing|change of plan|"
    r"mov(?:e|ed|es|ing) (?:over |back )?(?:to|from|up|back|forward)|(?:got|was|been|were) moved|"
    r"switch(?:ed|ing)?\b|no more|from today|becom(?:e|es|ing)|became|"
    r"bump(?:ed|ing)?|upgrad(?:ed|ing)|downgrad(?:ed|ing)|updated?|"
    r"resched\w*|rebook\w*|postponed|cancell?ed|pushed (?:back|to)|brought forward|slipped|"
    r"migrated|renamed|from now on|going forward|starting (?:from|on|next)|as of|"
    r"(?:from|starting) next (?:week|month)|effective|(?:was|were) (?:\d|£|\$|€))\b"
    # German, French, Spanish, Portuguese, Italian, Dutch: the commonest such words.
    r"|\b(?:jetzt|nun|ab sofort|stattdessen|verschoben|geändert|neu(?:er|e|es)? termin|"
    r"maintenant|désormais|à la place|reporté|déplacé|changé|annulé|"
    r"ahora|en su lugar|cambi(?:ó|ado|amos)|aplazad[oa]|movid[oa]|pasa a|"
    r"agora|adiad[oa]|mudou|invece|spostat[oa]|rinviat[oa]|nu|verplaatst|voortaan)\b"
    # Japanese and Chinese: "changed", "moved (a date)", "from now on", "instead".
    r"|変更|変わ|延期|振替|これから|代わりに|改为|改成|推迟|取消",
)


_VALUE = re.compile(r"\d|[〇一二三四五六七八九十百千]")


def states_value(text: str) -> bool:
    """Whether ``text`` gives a value: a digit of any script, or a CJK numeral (a date, a
    time, a price, a version, an id). An update that moves a fact to a new value names it:
    "now lands on April 14th", "bumped to 24.2", "五月七日から"."""
    return _VALUE.search(text) is not None


@functools.lru_cache(maxsize=8192)
def gives_new_value(text: str) -> bool:
    """:func:`says_change` and :func:`states_value` both: a memory that says its fact
    changed to a value it names. Cached by text: a search asks it of its top candidates,
    and the next searches of a store ask it of many of the same memories."""
    return states_value(text) and says_change(text)


def says_change(text: str) -> bool:
    """Whether ``text`` says that something changed: "the ride is moving to Thursdays",
    "free delivery now starts at £35 (was £25)", "bumped the SDK to 24.2", "rebooked for 28
    April" (English, and the commonest such words of a few other languages). A memory that
    says so, on the same subject as an older one, is the newer value of that fact."""
    # Lower-cased once, then a case-sensitive pattern (all its words are lower case): four
    # times as fast as matching the long alternation with IGNORECASE.
    return _CHANGE_CUES.search(text.lower()) is not None
