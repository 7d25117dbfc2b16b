from __future__ import annotations

from hypothesis import example, given, strategies as st

from recalld.retrieval.fusion import Fused, RankedList, linear, rrf
from recalld.stores.base import ChannelCandidate

ids = st.lists(st.sampled_from([f"m{i}" for i in range(12)]), unique=True, max_size=10)


def ranked(name: str, members: list[str], weight: float = 1.0, original: bool = True) -> RankedList:
    cands = [ChannelCandidate(m, r, 1.0 / r) for r, m in enumerate(members, start=1)]
    return RankedList(name, cands, weight, original)


def scores(fused):  # type: ignore[no-untyped-def]
    return {f.memory_id: f.score for f in fused}


def test_rrf_hand_computed() -> None:
    fused = rrf([ranked("a", ["x", "y"]), ranked("b", ["y", "z"], weight=2.0)], k=60)
    got = scores(fused)
    assert abs(got["x"] - (1 / 61 + 0.05)) < 1e-12
    assert abs(got["y"] - (1 / 62 + 2 / 61 + 0.05)) < 1e-12
    assert abs(got["z"] - (2 / 62 + 0.02)) < 1e-12
    assert [f.memory_id for f in fused] == ["y", "x", "z"]


def test_rrf_contributions_sum_to_score() -> None:
    for item in rrf([ranked("a", ["x", "y", "z", "w"]), ranked("b", ["w", "x"])]):
        assert abs(sum(item.contributions.values()) - item.score) < 1e-12


def test_bonus_only_for_original_lists() -> None:
    fused = rrf([ranked("expansion", ["x"], original=False)], k=60)
    assert "top_rank_bonus" not in fused[0].contributions
    assert abs(fused[0].score - 1 / 61) < 1e-12


@given(ids, ids, ids)
# An exact tie (1.5/61 + 1.5/62 both ways) that float addition in list order used to break.
@example(["m6", "m0"], ["m0", "m6"], ["m6", "m0"])
def test_rrf_is_permutation_invariant(a: list[str], b: list[str], c: list[str]) -> None:
    lists = [ranked("a", a), ranked("b", b, 1.5), ranked("c", c, 0.5)]
    forward = rrf(lists)
    backward = rrf(list(reversed(lists)))
    assert [f.memory_id for f in forward] == [f.memory_id for f in backward]
    for x, y in zip(forward, backward, strict=True):
        assert abs(x.score - y.score) < 1e-12


@given(ids, ids, st.floats(0.1, 5.0), st.floats(0.0, 5.0))
def test_rrf_is_monotone_in_weights(a: list[str], b: list[str], w: float, extra: float) -> None:
    """Raising a list's weight never lowers the score of any memory it contains."""
    low = scores(rrf([ranked("a", a, w), ranked("b", b)]))
    high = scores(rrf([ranked("a", a, w + extra), ranked("b", b)]))
    for memory in a:
        assert high[memory] >= low[memory] - 1e-12


@given(ids)
def test_rrf_preserves_single_list_order(a: list[str]) -> None:
    assert [f.memory_id for f in rrf([ranked("a", a)])] == a


@given(ids, ids)
def test_linear_scores_are_bounded_and_order_invariant(a: list[str], b: list[str]) -> None:
    weights = {"semantic": 0.7, "bm25": 0.3}
    lists = [ranked("semantic", a), ranked("bm25", b)]
    fused = linear(lists, weights)
    assert all(-1e-9 <= f.score <= 1 + 1e-9 for f in fused)
    assert [f.memory_id for f in fused] == [f.memory_id for f in linear(lists[::-1], weights)]


def test_linear_hand_computed() -> None:
    lists = [ranked("semantic", ["x", "y", "z"]), ranked("bm25", ["z", "x"])]
    got = scores(linear(lists, {"semantic": 0.7, "bm25": 0.3}))
    # semantic scores 1, 1/2, 1/3 -> normalised 1, 0.25, 0; bm25 1, 1/2 -> 1, 0
    assert abs(got["x"] - 0.7) < 1e-12
    assert abs(got["y"] - 0.7 * 0.25) < 1e-12
    assert abs(got["z"] - 0.3) < 1e-12


def test_fused_results_carry_every_field_and_stay_frozen() -> None:
    import dataclasses

    import pytest

    (first, *_) = rrf([RankedList("bm25", [ChannelCandidate("a", 1, 2.0)])])
    assert set(vars(first)) == {f.name for f in dataclasses.fields(Fused)}
    assert first == Fused("a", first.score, {"bm25": 1 / 61, "top_rank_bonus": 0.05})
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.score = 1.0  # type: ignore[misc]
