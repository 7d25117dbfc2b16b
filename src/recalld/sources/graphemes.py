"""Cutting long text at user-perceived character (grapheme cluster) boundaries.

A chunk boundary inside one line must not separate a letter from its combining marks, an
emoji from its modifier or variation selector, the halves of a ZWJ sequence or a flag, a
Hangul syllable's jamo, or an Indic consonant from the virama joining it to the next. This
follows the main rules of Unicode's grapheme-cluster segmentation (UAX #29) closely enough
for chunking; Python strings hold code points, so UTF-16 surrogate pairs are never split.
"""

from __future__ import annotations

import unicodedata
from itertools import accumulate

from recalld.text import has_cjk

ZWJ = "\u200d"
SOFT_CUT_SPAN = 0.2
"""A cut may move back this share of a piece to land after a space or punctuation mark."""
_SOFT_CUT_AFTER = frozenset(" \t.!?;:,)]}」』）。！？；：，、")
_VIRAMA_CLASS = 9
"""Canonical combining class of viramas (``unicodedata.combining``)."""


def _is_extend(ch: str) -> bool:
    code = ord(ch)
    return (
        unicodedata.category(ch) in ("Mn", "Me", "Mc")
        or ch == ZWJ
        or 0x1F3FB <= code <= 0x1F3FF  # emoji skin-tone modifiers
        or 0xE0020 <= code <= 0xE007F  # emoji tag sequences (subdivision flags)
    )


def _is_regional(ch: str) -> bool:
    return 0x1F1E6 <= ord(ch) <= 0x1F1FF


def _hangul_joins(before: str, after: str) -> bool:
    a, b = ord(before), ord(after)
    leading = 0x1100 <= a <= 0x115F or 0xA960 <= a <= 0xA97C
    vowel_or_trailing = 0x1160 <= b <= 0x11FF or 0xD7B0 <= b <= 0xD7FB
    return leading or vowel_or_trailing


def is_boundary(text: str, i: int) -> bool:
    """Whether a cut between ``text[i-1]`` and ``text[i]`` keeps every cluster whole."""
    if i <= 0 or i >= len(text):
        return True
    before, after = text[i - 1], text[i]
    if _is_extend(after) or before == ZWJ or _hangul_joins(before, after):
        return False
    if unicodedata.combining(before) == _VIRAMA_CLASS and after.isalpha():
        return False
    if _is_regional(before) and _is_regional(after):
        run = 0
        while i - 1 - run >= 0 and _is_regional(text[i - 1 - run]):
            run += 1
        return run % 2 == 0
    return True


def char_costs(text: str) -> list[float]:
    """Token cost of each character, matching :func:`recalld.text.estimate_tokens`."""
    return [1.0 if has_cjk(ch) else 0.25 for ch in text]


def split_text(text: str, target_tokens: float, overlap_tokens: float) -> list[str]:
    """Cut ``text`` into pieces of about ``target_tokens`` sharing ``overlap_tokens``.

    Every cut is at a cluster boundary, after a space or punctuation mark where one is near.
    """
    if not text:
        return []
    prefix = [0.0, *accumulate(char_costs(text))]
    pieces: list[str] = []
    start = 0
    while start < len(text):
        end = _furthest(prefix, start, target_tokens)
        if end >= len(text):
            pieces.append(text[start:])
            break
        end = _soft_cut(text, start, end)
        pieces.append(text[start:end])
        start = _next_start(text, prefix, start, end, overlap_tokens)
    return pieces


def _furthest(prefix: list[float], start: int, budget: float) -> int:
    """The largest end with cost(start, end) <= budget, and at least start + 1."""
    lo, hi = start + 1, len(prefix) - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if prefix[mid] - prefix[start] <= budget:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _soft_cut(text: str, start: int, end: int) -> int:
    floor = end - int((end - start) * SOFT_CUT_SPAN)
    for p in range(end, max(floor, start + 1) - 1, -1):
        if text[p - 1] in _SOFT_CUT_AFTER and is_boundary(text, p):
            return p
    p = end
    while p > start + 1 and not is_boundary(text, p):
        p -= 1
    if is_boundary(text, p):
        return p
    p = end  # one cluster longer than a whole piece: extend to its end instead
    while p < len(text) and not is_boundary(text, p):
        p += 1
    return p


def _next_start(text: str, prefix: list[float], start: int, end: int, overlap: float) -> int:
    """Where the next piece starts: ``overlap`` tokens before ``end``, at a boundary."""
    s = end
    while s > start + 1 and prefix[end] - prefix[s - 1] <= overlap:
        s -= 1
    for p in range(s, end):  # prefer starting just after a space or punctuation mark
        if text[p - 1] in _SOFT_CUT_AFTER and is_boundary(text, p):
            return p
    while s < end and not is_boundary(text, s):
        s += 1
    return s if s > start else end
