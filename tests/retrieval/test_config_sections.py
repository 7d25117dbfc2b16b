"""The retrieval config in sections: the flat names still mean what they meant, one table maps
them, and a config made either way is the same config."""

from __future__ import annotations

from dataclasses import fields, replace

import pytest

from recalld.errors import InvalidInputError
from recalld.retrieval.config import (
    BALANCED,
    FAST,
    FLAT,
    PRESETS,
    SECTIONS,
    THOROUGH,
    RetrievalConfig,
)
from recalld.retrieval.sections import FusionSettings, SessionSettings


def test_the_flat_table_names_every_setting_of_every_section_once() -> None:
    reached = {(s, f.name) for s, kind in SECTIONS.items() for f in fields(kind)}
    mapped = [
        (path.partition(".")[0], path.partition(".")[2] or name) for name, path in FLAT.items()
    ]
    assert sorted(mapped) == sorted(reached) and len(set(mapped)) == len(mapped)
    assert not set(FLAT) & set(SECTIONS) - {"fusion"}  # only fusion= is both (str or section)


def test_flat_names_dotted_names_and_sections_make_the_same_config() -> None:
    by_section = RetrievalConfig(fusion=FusionSettings(rrf_k=30, method="linear"))
    assert RetrievalConfig(rrf_k=30, fusion="linear") == by_section
    assert BALANCED.with_changes(**{"fusion.rrf_k": 30, "fusion.method": "linear"}) == by_section
    assert replace(BALANCED, rrf_k=30, fusion="linear") == by_section
    assert by_section.flat()["fusion"] == "linear" and by_section.fusion.rrf_k == 30


def test_a_change_keeps_the_rest_of_its_section_and_the_other_sections() -> None:
    changed = THOROUGH.with_changes(rrf_k=30).with_changes(fusion="linear")
    assert changed.fusion.rrf_k == 30 and changed.fusion.method == "linear"
    assert changed.candidates == THOROUGH.candidates and changed.sessions == THOROUGH.sessions
    whole = FAST.with_changes(sessions=SessionSettings(), topic_weight=0.5)
    assert whole.sessions == SessionSettings(topic_weight=0.5)
    assert whole.candidates == FAST.candidates


def test_flat_settings_round_trip_in_table_order() -> None:
    for config in PRESETS.values():
        flat = config.flat()
        assert list(flat) == list(FLAT)
        assert RetrievalConfig(**flat) == config


def test_presets_differ_from_the_default_only_where_they_say() -> None:
    default = BALANCED.flat()
    changed = {
        name: {k for k, v in config.flat().items() if v != default[k]}
        for name, config in PRESETS.items()
    }
    assert changed == {
        "fast": {"channels", "candidate_multiplier", "min_candidates", "session_boost",
                 "neighbor_weight", "min_adjust", "stable_limit"},
        "balanced": set(),
        "thorough": {"candidate_multiplier", "min_candidates", "neighbor_radius"},
    }  # fmt: skip


def test_an_unknown_name_is_refused_with_the_closest_known_one() -> None:
    with pytest.raises(InvalidInputError, match=r"kupdate_factr \(did you mean kupdate_factor\?\)"):
        BALANCED.with_changes(kupdate_factr=0.5)
    with pytest.raises(InvalidInputError, match="unknown retrieval setting"):
        RetrievalConfig(**{"fusion.nope": 1})
    with pytest.raises(InvalidInputError, match="unknown retrieval setting"):
        RetrievalConfig(candidates={"channels": ("bm25",)})


def test_a_bad_value_is_refused_whichever_way_it_comes() -> None:
    with pytest.raises(InvalidInputError, match="fusion must be"):
        FusionSettings(method="max")
    with pytest.raises(InvalidInputError, match="unknown channel"):
        BALANCED.with_changes(**{"candidates.channels": ("bm25", "nope")})
    with pytest.raises(InvalidInputError, match="rrf_k"):
        RetrievalConfig(rrf_k=0)


def test_mappings_and_lists_given_plain_are_frozen() -> None:
    config = BALANCED.with_changes(channels=["bm25"], type_boosts={"insight": 1.2})
    assert config.candidates.channels == ("bm25",)
    with pytest.raises(TypeError):
        config.memory.type_boosts["insight"] = 2.0  # type: ignore[index]
