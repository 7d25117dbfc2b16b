"""What the optional model stages add to a search's latency, the model's own time excluded.

A loopback server (the tests' ``model_server``) answers the chat and ``/v1/rerank`` calls at
once with valid answers, so the figures are recalld's overhead: prompts, HTTP, parsing,
the extra query vectors and store calls, the blend. MaxSim runs for real (its cost is
ours). Systems are interleaved query by query, so machine noise hits them alike; read the
ratios to ``none``.

    python scripts/bench_model_stages.py --rounds 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "models"))

from model_server import Reply, chat, model_server  # noqa: E402

import recalld  # noqa: E402
from recalld.bench.report import print_json  # noqa: E402
from recalld.config import Settings  # noqa: E402
from recalld.providers.embedders import resolve_embedder  # noqa: E402
from recalld.providers.llm import ModelCache, OpenAIChat  # noqa: E402
from recalld.providers.rerankers import HttpReranker, packaged_maxsim  # noqa: E402
from recalld.records import NewMemory  # noqa: E402
from recalld.retrieval.models import Models  # noqa: E402

EXPANSION = {"lex": ["keyword query one", "keyword two"], "vec": ["a paraphrase of it"],
             "hyde": "A sentence that would answer the question."}  # fmt: skip


def answer(path: str, body: dict[str, Any]) -> Reply:
    if path.endswith("/rerank"):
        return Reply({"results": [{"index": i, "relevance_score": 1 / (i + 1)}
                                  for i in range(len(body["documents"]))]})  # fmt: skip
    prompt = body["messages"][-1]["content"]
    if "Classify" in prompt:
        return chat({"complexity": "complex", "domains": 1})
    return chat(EXPANSION)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    data = json.loads((ROOT / "tests" / "fixtures" / "eval_corpus.json").read_text())
    queries = [q["query"] for q in data["queries"]]
    embedder = resolve_embedder("local")
    with model_server() as server, tempfile.TemporaryDirectory() as folder:
        server.answer = answer
        llm = OpenAIChat("tiny", server.url + "/v1", timeout=5.0)
        http = HttpReranker(server.url + "/v1/rerank", timeout=5.0)
        warm = ModelCache(None)
        systems: dict[str, Models | None] = {
            "none": None,
            "route+expand (uncached)": Models(llm, None, None),
            "route+expand (cached)": Models(llm, None, warm),
            "rerank http (uncached)": Models(None, http, None),
            "rerank maxsim (uncached)": Models(None, packaged_maxsim(), None),
            "all, http rerank (uncached)": Models(llm, http, None),
        }
        settings = Settings(db=Path(folder) / "m.db", cache_dir=None)
        times: dict[str, list[float]] = {name: [] for name in systems}
        with recalld.open(settings=settings, embedder=embedder) as engine:
            engine.add_many([NewMemory(**{**m, "type": "turn", "event_time":
                                          datetime.fromisoformat(m["event_time"])})
                             for m in data["memories"]])  # fmt: skip
            for rounds in range(args.rounds + 1):
                for query in queries:
                    for name, models in systems.items():
                        engine._models = models
                        started = time.perf_counter()
                        engine.search(query, limit=10)
                        if rounds:  # the first round warms caches and sessions
                            times[name].append((time.perf_counter() - started) * 1000)
            engine._models = None
    base = statistics.median(times["none"])
    report = {
        "command": " ".join(["python", *sys.argv]),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load_average": os.getloadavg(),
        "searches_per_system": len(times["none"]),
        "corpus": "tests/fixtures/eval_corpus.json (packaged MiniLM)",
        "p50_ms": {n: round(statistics.median(v), 2) for n, v in times.items()},
        "p50_ratio_to_none": {n: round(statistics.median(v) / base, 2) for n, v in times.items()},
    }
    print_json(report, args.out)


if __name__ == "__main__":
    main()
