"""``recalld bench ingest`` through the real CLI: the fake embedder, then the packaged model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from recalld.bench.ingest import generated_abstracts, load_corpus
from recalld.interfaces.cli import cli

FIXTURES = Path(__file__).parent.parent / "fixtures"
LOCOMO = FIXTURES / "locomo_tiny.json"
PATHS = ("model", "add_many", "model_input_order")


@pytest.fixture
def invoke(tmp_path: Path):  # type: ignore[no-untyped-def]
    config = tmp_path / "empty.toml"
    config.write_text("", encoding="utf-8")

    def run(*args: str, embedder: str = "fake") -> tuple[int, str]:
        env = {"RECALLD_CONFIG": str(config), "RECALLD_EMBEDDER": embedder}
        result = CliRunner().invoke(cli, list(args), env=env, prog_name="recalld")
        return result.exit_code, result.output

    return run


def test_turns_and_markdown_measured_side_by_side(invoke, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    notes = tmp_path / "notes"
    notes.mkdir()
    body = "\n\n".join(f"## Part {i}\n\n" + "A line about deploys and caches. " * 40
                       for i in range(4))  # fmt: skip
    (notes / "MEMORY.md").write_text(f"# Notes\n\n{body}\n", encoding="utf-8")
    out = tmp_path / "ingest.json"
    code, output = invoke("bench", "ingest", str(LOCOMO), str(notes), "--rounds", "2",
                          "--json", str(out))  # fmt: skip
    assert code == 0, output
    assert "| add_many |" in output and f"wrote {out}" in output
    assert "ingest: 14/14 (" in output  # 2 rounds x (4 paths for turns + 3 for chunks)
    report = json.loads(out.read_text())
    assert report["command"] == f"recalld bench ingest {LOCOMO} {notes} --rounds 2 --json {out}"
    assert report["rounds"] == 2 and len(report["machine"]["load_before"]) == 3
    turns, chunks = report["corpora"]
    assert turns["kind"] == "turns" and chunks["kind"] == "documents"
    assert turns["texts"] == len(load_corpus(LOCOMO, None).texts)
    assert set(turns["rates"]) == {*PATHS, "add_many_reply_context"}
    assert set(chunks["rates"]) == set(PATHS)
    for corpus in (turns, chunks):
        assert corpus["tokens"] >= corpus["texts"]
        for rate in corpus["rates"].values():
            assert rate["texts_per_s"] > 0 and rate["tokens_per_s"] > 0
        assert set(corpus["ratio_to_model"]) == set(corpus["rates"]) - {"model"}


def test_generated_abstracts_on_the_packaged_model(invoke) -> None:  # type: ignore[no-untyped-def]
    code, output = invoke("--json", "bench", "ingest", "--generated", "6", "--rounds", "1",
                          embedder="local")  # fmt: skip
    assert code == 0, output
    report = json.loads(output)
    (corpus,) = report["corpora"]
    assert corpus["texts"] == 6 and corpus["mean_tokens"] > 100
    assert report["embedder"]["setting"] == "local"
    assert "all-MiniLM-L6-v2" in report["embedder"]["described"]
    assert report["batching"]["batch_tokens"] > 0


def test_the_embedder_option_overrides_the_setting(invoke) -> None:  # type: ignore[no-untyped-def]
    code, output = invoke("--json", "bench", "ingest", "--generated", "3", "--rounds", "1",
                          "--embedder", "fake:24", embedder="local")  # fmt: skip
    assert code == 0, output
    embedder = json.loads(output)["embedder"]
    assert embedder["setting"] == "fake:24" and embedder["details"]["dimension"] == 24


def test_generated_abstracts_are_deterministic() -> None:
    first, again = generated_abstracts(5), generated_abstracts(5)
    assert first.texts == again.texts and len(set(first.texts)) == 5
    assert all(120 <= len(t.split()) < 320 for t in first.texts)


def test_a_file_of_another_kind_is_refused(invoke, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    other = tmp_path / "notes.txt"
    other.write_text("just some words\n", encoding="utf-8")
    code, output = invoke("bench", "ingest", str(other))
    assert code == 2
    assert "is not a LoCoMo or LongMemEval JSON file" in output


def test_nothing_to_measure_is_refused(invoke) -> None:  # type: ignore[no-untyped-def]
    code, output = invoke("bench", "ingest", "--generated", "0")
    assert code == 2 and "nothing to measure" in output
