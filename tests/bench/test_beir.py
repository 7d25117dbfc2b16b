"""The BEIR documents benchmark: graded metrics, the folder loader, the runner and the CLI."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from recalld.bench.beir import load_beir, run_beir
from recalld.bench.metrics import beir_scores, graded_ndcg
from recalld.bench.report import markdown_report
from recalld.errors import InvalidInputError
from recalld.interfaces.cli import cli
from recalld.providers.embedders import FakeEmbedder

DOCUMENTS = [
    {"_id": "d1", "title": "Iguana diet", "text": "Green iguanas eat leaves and flowers."},
    {"_id": "d2", "title": "Iguana care", "text": "An iguana needs warm light and leaves."},
    {"_id": "d3", "title": "Bicycle chains", "text": "Oil the bicycle chain every month."},
    {"_id": "d4", "title": "", "text": "Sourdough bread rises slowly overnight."},
    {"_id": "d5", "title": "Tide pools", "text": "Starfish and anemones live in tide pools."},
    {"_id": "d6", "title": "", "text": "   "},
    {"_id": 7, "title": "Volcano", "text": "Basalt lava cools into dark volcanic rock."},
]
QUERIES = [
    {"_id": "q1", "text": "what do iguanas eat leaves"},
    {"_id": "q2", "text": "bicycle chain oil"},
    {"_id": "q3", "text": "sourdough bread overnight"},
    {"_id": "q4", "text": "an unjudged question"},
    {"_id": "q5", "text": "starfish tide pools"},
]
QRELS = "query-id\tcorpus-id\tscore\nq1\td1\t2\nq1\td2\t1\nq2\td3\t1\nq3\td4\t1\nq5\td5\t1\n"


def make_beir(folder: Path, qrels: str = QRELS, split: str = "test") -> Path:
    """A BEIR folder (corpus, queries, qrels/SPLIT.tsv) holding the given judgements."""
    (folder / "qrels").mkdir(parents=True)
    for name, rows in (("corpus.jsonl", DOCUMENTS), ("queries.jsonl", QUERIES)):
        text = "\n".join(json.dumps(r) for r in rows) + "\n"
        (folder / name).write_text(text, encoding="utf-8")
    (folder / "qrels" / f"{split}.tsv").write_text(qrels, encoding="utf-8")
    return folder


# -- metrics -----------------------------------------------------------------------------------


def test_graded_ndcg_hand_computed() -> None:
    grades = {"a": 2, "b": 1, "z": 0}
    # DCG: b (1) at 1 -> 1/log2(2); a (2) at 3 -> 2/log2(4). Ideal: 2, then 1/log2(3).
    expected = (1 + 2 / 2) / (2 + 1 / math.log2(3))
    assert graded_ndcg(["b", "x", "a"], grades, 10) == pytest.approx(expected)
    assert graded_ndcg(["a", "b"], grades, 10) == pytest.approx(1.0)
    # a judged document the ranking never found still counts in the ideal
    assert graded_ndcg(["a"], grades, 10) == pytest.approx(2 / (2 + 1 / math.log2(3)))
    assert graded_ndcg(["x", "a"], grades, 1) == 0.0
    with pytest.raises(ValueError, match="empty"):
        graded_ndcg(["a"], {"a": 0}, 10)


def test_beir_scores_cut_offs() -> None:
    ranked = [f"x{i}" for i in range(10)] + ["a"]  # the relevant id at 11
    scores = beir_scores(ranked, {"a": 1, "b": 1})
    assert scores == {"doc.ndcg@10": 0.0, "doc.recall@100": 0.5, "doc.mrr@10": 0.0}
    assert beir_scores(["x", "b"], {"a": 1, "b": 1})["doc.mrr@10"] == 0.5


# -- loader ------------------------------------------------------------------------------------


def test_loader_reads_documents_queries_and_grades(tmp_path: Path) -> None:
    data = load_beir(make_beir(tmp_path), "test")
    contents = dict(data.documents)
    assert contents["d1"] == "Iguana diet\n\nGreen iguanas eat leaves and flowers."
    assert contents["d4"] == "Sourdough bread rises slowly overnight."  # no title
    assert contents["7"].startswith("Volcano")  # a numeric _id is read as text
    assert data.empty_documents == 1 and "d6" not in contents
    assert list(data.qrels) == ["q1", "q2", "q3", "q5"]
    assert data.qrels["q1"] == {"d1": 2, "d2": 1}


@pytest.mark.parametrize(
    ("qrels", "split", "message"),
    [(QRELS, "dev", "no qrels/dev.tsv in"),
     ("query-id\tcorpus-id\tscore\nq1\td1\n", "test", "test.tsv line 2: expected"),
     ("query-id\tcorpus-id\tscore\nq9\td1\t1\n", "test", "lacks or leaves empty: q9")],
)  # fmt: skip
def test_loader_errors_are_clear(tmp_path: Path, qrels: str, split: str, message: str) -> None:
    make_beir(tmp_path, qrels)
    with pytest.raises(InvalidInputError, match=message):
        load_beir(tmp_path, split)


def test_a_broken_corpus_line_is_named(tmp_path: Path) -> None:
    make_beir(tmp_path)
    with open(tmp_path / "corpus.jsonl", "a", encoding="utf-8") as corpus:
        corpus.write("{not json\n")
    with pytest.raises(InvalidInputError, match="corpus.jsonl line 8 is not valid JSON"):
        load_beir(tmp_path, "test")


# -- runner ------------------------------------------------------------------------------------


def test_run_scores_every_judged_query_against_plain_rrf(tmp_path: Path) -> None:
    folder = make_beir(tmp_path / "set")
    report = run_beir(folder, embedder=FakeEmbedder(), cache_dir=tmp_path / "c",
                      variant={"rrf_k": 10})  # fmt: skip
    assert report["benchmark"] == "beir"
    assert list(report["systems"]) == ["recalld", "variant", "rrf", "bm25", "vector"]
    assert report["questions"]["documents"] == 6 and report["questions"]["scored"] == 4
    assert report["questions"]["empty_documents"] == 1
    bm25 = report["systems"]["bm25"]["overall"]["metrics"]
    # every query shares rare words with its judged documents only
    assert bm25["doc.recall@100"] == 1.0 and bm25["doc.mrr@10"] == 1.0
    q1 = report["probes"][0]
    assert q1["id"] == "q1" and q1["gold"] == {"d1": 2, "d2": 1}
    assert q1["systems"]["bm25"]["top"][:2] in (["d1", "d2"], ["d2", "d1"])  # BEIR ids kept
    pairs = {(c["system"], c["against"], c["metric"]) for c in report["comparisons"]}
    assert ("recalld", "rrf", "doc.ndcg@10") in pairs
    assert ("variant", "recalld", "doc.mrr@10") in pairs
    assert all(len(c["wins"]) + len(c["losses"]) + c["ties"] == 4 for c in report["comparisons"])
    markdown = markdown_report(report)
    assert "## Document level" in markdown and "| ndcg@10 |" in markdown
    assert "**recalld vs rrf** at doc.ndcg@10" in markdown


def test_run_selects_queries(tmp_path: Path) -> None:
    folder = make_beir(tmp_path / "set")
    report = run_beir(folder, embedder=FakeEmbedder(), cache_dir=tmp_path / "c", limit=2,
                      baselines=False)  # fmt: skip
    assert [p["id"] for p in report["probes"]] == ["q1", "q2"]
    assert list(report["systems"]) == ["recalld"]
    with pytest.raises(InvalidInputError, match="no query with id q4"):
        run_beir(folder, embedder=FakeEmbedder(), cache_dir=tmp_path / "c", query_ids=["q4"])


# -- CLI ---------------------------------------------------------------------------------------


def test_cli_smoke(tmp_path: Path) -> None:
    folder = make_beir(tmp_path / "set", split="train")
    config = tmp_path / "empty.toml"
    config.write_text("", encoding="utf-8")
    out, report_dir = tmp_path / "beir.json", tmp_path / "report"
    args = ["bench", "beir", str(folder), "--split", "train", "--limit", "3", "--cache-dir",
            str(tmp_path / "c"), "--json", str(out), "--report", str(report_dir)]  # fmt: skip
    env = {"RECALLD_CONFIG": str(config), "RECALLD_EMBEDDER": "local"}
    result = CliRunner().invoke(cli, args, env=env, prog_name="recalld")
    assert result.exit_code == 0, result.output
    assert "# BEIR documents retrieval benchmark" in result.output
    report = json.loads(out.read_text())
    assert report["command"].startswith("recalld bench beir ")
    assert "--split train" in report["command"]
    assert report["options"]["split"] == "train" and report["questions"]["scored"] == 3
    assert report["systems"]["recalld"]["overall"]["metrics"]["doc.recall@100"] == 1.0
    assert (report_dir / "report.md").read_text().startswith("# BEIR documents")
    wrong = CliRunner().invoke(cli, ["bench", "beir", str(folder)], env=env, prog_name="recalld")
    assert wrong.exit_code == 2 and "no qrels/test.tsv" in wrong.output and "train" in wrong.output
