from __future__ import annotations

from hypothesis import given, settings, strategies as st

from recalld.sources.chunking import chunk_markdown
from recalld.sources.graphemes import is_boundary, split_text
from recalld.text import estimate_tokens

# Each string is ONE user-perceived character (grapheme cluster).
CLUSTERS = [
    "a", "語", "😀",  # an astral character: a surrogate pair in UTF-16
    "e\u0301",  # e + combining acute (decomposed)
    "q\u0303\u0323",  # q + two combining marks, no precomposed form
    "👍🏽",  # emoji + skin-tone modifier
    "👩\u200d💻",  # ZWJ sequence
    "👨\u200d👩\u200d👧\u200d👦",  # family: four people joined by ZWJ
    "🇩🇪", "🇯🇵",  # flags: pairs of regional indicators
    "❤\ufe0f",  # variation selector
    "क्ष",  # Devanagari conjunct (virama joins)
    "कि",  # consonant + spacing vowel sign (Mc)
    "\u1100\u1161\u11a8",  # Hangul syllable as conjoining jamo
    "🏴\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f",  # tag sequence flag
    " ", "。",
]  # fmt: skip


def _boundaries(clusters: list[str]) -> set[int]:
    out, position = {0}, 0
    for cluster in clusters:
        position += len(cluster)
        out.add(position)
    return out


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(CLUSTERS), min_size=1, max_size=3000), st.integers(8, 120))
def test_cuts_fall_only_between_clusters(clusters: list[str], target: int) -> None:
    text = "".join(clusters)
    allowed = _boundaries(clusters)
    pieces = split_text(text, target, target // 5)
    assert "".join(pieces) == text or len(pieces) > 1
    position = 0
    for piece in pieces:
        start = text.index(piece, max(0, position - len(piece)))
        assert start in allowed and start + len(piece) in allowed, (piece, start)
        position = start + len(piece)
        piece.encode("utf-8")  # no lone surrogates
    assert pieces[-1] == text[len(text) - len(pieces[-1]) :]


def test_each_cluster_is_a_single_unit() -> None:
    for cluster in CLUSTERS:
        inner = [is_boundary(cluster, i) for i in range(1, len(cluster))]
        assert not any(inner), cluster


def test_surrogates_and_combining_marks_survive_chunking_intact() -> None:
    unit = "Zoë e\u0301 😀 👩\u200d💻 🇩🇪 क्ष 한국어 {} "
    text = "# Ünïcödé\n\n" + "".join(unit.format(i) for i in range(400))  # one long line
    chunks = chunk_markdown(text)
    assert len(chunks) > 2
    for chunk in chunks:
        assert estimate_tokens(chunk.body) <= 401
        chunk.body.encode("utf-8")
        # Every cut lies between whole units of the repeated text here.
        assert chunk.body[0] not in "\u0301\u200d"
        for mark in ("\u0301", "\u200d", "\U0001f1e9"):
            for i, ch in enumerate(chunk.body):
                if ch == mark:
                    assert i > 0
    joined = "".join(c.body for c in chunks)
    for cluster in ("e\u0301", "😀", "👩\u200d💻", "🇩🇪", "क्ष"):
        assert cluster in joined
    # The pieces of the long line, overlaps removed, rebuild it exactly.
    line = text.splitlines()[2]
    pieces = [c.body for c in chunks if c.line_start == 3]
    rebuilt = pieces[0]
    for piece in pieces[1:]:
        k = next(k for k in range(len(piece), 0, -1) if rebuilt.endswith(piece[:k]))
        rebuilt += piece[k:]
    assert rebuilt == line
