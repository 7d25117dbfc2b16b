"""Smoke runs of ``recalld bench`` through the real CLI and the packaged model."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from recalld.interfaces.cli import cli
from recalld.providers.embedders import resolve_embedder
from recalld.retrieval.calibration import calibrate

FIXTURES = Path(__file__).parent.parent / "fixtures"
LME = FIXTURES / "longmemeval_tiny.json"
LOCOMO = FIXTURES / "locomo_tiny.json"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def invoke(tmp_path: Path):  # type: ignore[no-untyped-def]
    config = tmp_path / "empty.toml"  # no user config file can leak into the test
    config.write_text("", encoding="utf-8")
    env = {"RECALLD_CONFIG": str(config), "RECALLD_EMBEDDER": "local"}

    def run(*args: str) -> tuple[int, str]:
        result = CliRunner().invoke(cli, list(args), env=env, prog_name="recalld")
        return result.exit_code, result.output

    return run


def test_longmemeval_smoke(invoke, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # the embedder's chance level is measured once a process (retrieval/calibration.py):
    # measure it here, so the count below is this run's turns whatever ran before
    calibrate(resolve_embedder("local"))
    out = tmp_path / "lme.json"
    report_dir = tmp_path / "report"
    code, output = invoke("bench", "longmemeval", str(LME), "--cache-dir", str(tmp_path / "c"),
                          "--json", str(out), "--report", str(report_dir))  # fmt: skip
    assert code == 0, output
    assert "# LongMemEval retrieval benchmark" in output
    report = json.loads(out.read_text())
    assert report["command"].startswith("recalld bench longmemeval ")
    assert report["benchmark"] == "longmemeval"
    assert report["questions"]["scored"] == 2 and report["questions"]["abstention_in_file"] == 1
    assert [p["id"] for p in report["probes"]] == ["q_iguana", "q_bike"]
    assert set(report["systems"]) == {"recalld", "rrf", "bm25", "vector"}
    for name in ("recalld", "vector"):
        metrics = report["systems"][name]["overall"]["metrics"]
        # every haystack has <= 4 sessions and 8 short turns: all fit in 4000 tokens
        assert metrics["session.recall_all@10"] == 1.0
        assert metrics["context.evidence@4000"] == 1.0
    iguana = report["probes"][0]["systems"]["bm25"]["scores"]
    # only the gold session mentions an iguana
    assert iguana["session.recall_any@1"] == 1.0
    assert set(report["speed"]) >= {"ingest_memories_per_s", "embedding_cache", "peak_rss_mb"}
    assert report["speed"]["embedding_cache"]["misses"] == 16  # the 16 turns
    markdown = (report_dir / "report.md").read_text()
    assert "| recalld |" in markdown and "single-session-user" in markdown
    assert (report_dir / "chart.png").read_bytes().startswith(PNG_MAGIC)
    assert json.loads((report_dir / "results.json").read_text())["file"] == str(LME)


def test_locomo_smoke_json_mode(invoke, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    code, output = invoke("--json", "bench", "locomo", str(LOCOMO), "--adversarial",
                          "--cache-dir", str(tmp_path / "c"), "--budget", "30")  # fmt: skip
    assert code == 0, output
    report = json.loads(output)
    assert "probes" not in report  # the summary only; --json FILE keeps every question
    assert report["questions"]["selected"] == 5 and report["questions"]["scored"] == 4
    assert report["options"]["budgets"] == [30]
    vector = report["systems"]["vector"]["overall"]
    assert vector["metrics"]["turn.recall_any@10"] == 1.0
    assert "context.evidence@30" in vector["metrics"]
    assert "5 adversarial" in report["systems"]["recalld"]["by_group"]


def test_bad_input_is_a_clear_error(invoke, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    code, output = invoke("bench", "longmemeval", str(LME), "--questions", "q_bike,nope",
                          "--cache-dir", str(tmp_path / "c"))  # fmt: skip
    assert code == 2 and "no question with id nope" in output
    broken = tmp_path / "broken.json"
    broken.write_text("not json")
    code, output = invoke("bench", "locomo", str(broken), "--cache-dir", str(tmp_path / "c"))
    assert code == 2 and "not valid JSON" in output
    assert not (tmp_path / "c").exists() or not any((tmp_path / "c").iterdir())


def test_bench_help_lists_every_benchmark(invoke) -> None:  # type: ignore[no-untyped-def]
    code, output = invoke("bench", "--help")
    assert code == 0 and "longmemeval" in output and "locomo" in output
    assert "scale" in output


WORKLOADS = FIXTURES / "workloads_tiny.json"


def test_workloads_smoke(invoke, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "wl.json"
    report_dir = tmp_path / "report"
    code, output = invoke("bench", "workloads", str(WORKLOADS), "--cache-dir",
                          str(tmp_path / "c"), "--set", "event_boost=1.0", "--json", str(out),
                          "--report", str(report_dir))  # fmt: skip
    assert code == 0, output
    assert "# Agent-memory workloads retrieval benchmark" in output
    report = json.loads(out.read_text())
    assert report["command"].startswith("recalld bench workloads ")
    assert "--set event_boost=1.0" in report["command"]
    assert list(report["systems"]) == ["recalld", "variant", "rrf", "bm25", "vector"]
    assert report["systems"]["variant"]["config"]["event_boost"] == 1.0
    assert report["questions"]["queries"] == 5
    markdown = (report_dir / "report.md").read_text()
    assert "## By query kind" in markdown and "**variant vs recalld**" in markdown
    assert (report_dir / "chart.png").read_bytes().startswith(PNG_MAGIC)


@pytest.mark.parametrize(
    ("args", "message"),
    [(("--set", "event_boost"), "--set expects NAME=VALUE"),
     (("--set", "no_such=1"), "unknown retrieval setting"),
     (("--scenarios", "nope"), "no scenario with id nope")],
)  # fmt: skip
def test_workloads_bad_options(invoke, tmp_path: Path, args: tuple[str, ...],  # type: ignore[no-untyped-def]
                               message: str) -> None:  # fmt: skip
    code, output = invoke("bench", "workloads", str(WORKLOADS), "--cache-dir",
                          str(tmp_path / "c"), *args)  # fmt: skip
    assert code != 0 and message in output


def test_every_report_carries_the_embedder(invoke, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out, report_dir = tmp_path / "wl.json", tmp_path / "report"
    code, output = invoke("bench", "workloads", str(WORKLOADS), "--embedder", "fake:48",
                          "--cache-dir", str(tmp_path / "c"), "--no-baselines", "--json", str(out),
                          "--report", str(report_dir))  # fmt: skip
    assert code == 0, output
    embedder = json.loads(out.read_text())["embedder"]
    assert embedder["setting"] == "fake:48" and embedder["details"]["dimension"] == 48
    assert len(embedder["fingerprint"]) == 16
    line = "- embedder: `fake:48`: fake-hash (48-d, hash-bow pooling); fingerprint "
    assert line + embedder["fingerprint"] in (report_dir / "report.md").read_text()
    code, output = invoke("--json", "bench", "locomo", str(LOCOMO), "--embedder", "fake",
                          "--cache-dir", str(tmp_path / "c"), "--budget", "30")  # fmt: skip
    assert code == 0, output
    assert json.loads(output)["embedder"]["setting"] == "fake"


def test_report_folder_without_matplotlib(invoke, tmp_path: Path,  # type: ignore[no-untyped-def]
                                          monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if the bench extra were absent
    report_dir = tmp_path / "report"
    code, output = invoke("bench", "longmemeval", str(LME), "--embedder", "fake", "--budget",
                          "100", "--cache-dir", str(tmp_path / "c"), "--report",
                          str(report_dir))  # fmt: skip
    assert code == 0, output
    assert "chart skipped: it needs matplotlib" in output
    assert sorted(p.name for p in report_dir.iterdir()) == ["report.md", "results.json"]
    assert "## Session level" in (report_dir / "report.md").read_text()
