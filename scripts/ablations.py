"""Ablations: each pipeline stage switched off (or an optional one on) against the default,
side by side on the same stores, through the benchmark harness.

    PYTHONPATH=src .venv/bin/python scripts/ablations.py longmemeval FILE [--out out.md]
    PYTHONPATH=src .venv/bin/python scripts/ablations.py locomo FILE [--out out.md]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from recalld.bench.runner import run_locomo, run_longmemeval
from recalld.retrieval.config import PRESETS, RetrievalConfig

BASE = PRESETS["balanced"]


def weights(config: RetrievalConfig, **changes: float) -> RetrievalConfig:
    return config.with_changes(channel_weights={**config.fusion.channel_weights, **changes})


VARIANTS: dict[str, RetrievalConfig] = {
    "default (balanced)": BASE,
    "- role preference": BASE.with_changes(role_boost=1.0),
    "- speaker preference": BASE.with_changes(speaker_boost=1.0),
    "- event anchors": BASE.with_changes(anchor_events=False),
    "- event statements": BASE.with_changes(event_boost=1.0),
    "- only-asks penalty": BASE.with_changes(asks_penalty=1.0),
    "event statements 1.2": BASE.with_changes(event_boost=1.2),
    "+ earliest/latest order 0.2": BASE.with_changes(order_weight=0.2),
    "neighbour 0.5 / session 0.3 (before)": BASE.with_changes(
        neighbor_weight=0.5, session_boost=0.3
    ),
    "- session support": BASE.with_changes(session_boost=0.0),
    "- session topic (advice)": BASE.with_changes(topic_weight=0.0),
    "- neighbour support": BASE.with_changes(neighbor_weight=0.0),
    "- temporal channel": BASE.with_changes(channels=("semantic", "bm25")),
    "- top-rank bonus": BASE.with_changes(rank_bonus_first=0.0, rank_bonus_top3=0.0),
    "+ entity channel": BASE.with_changes(channels=("semantic", "bm25", "entity", "temporal")),
    "+ BM25 weight 1.5": weights(BASE, bm25=1.5),
    "+ knowledge updates x0.8": BASE.with_changes(kupdate_factor=0.8),
    "+ MMR 0.7 (cosine)": BASE.with_changes(mmr_lambda=0.7),
    "+ session-diverse aggregation": BASE.with_changes(diverse_aggregation=True),
    "+ hyperbolic decay 60 d": BASE.with_changes(decay="hyperbolic"),
    "linear fusion 0.7/0.3": BASE.with_changes(fusion="linear"),
    "fast preset": PRESETS["fast"],
    "thorough preset": PRESETS["thorough"],
}
COLUMNS = {
    "longmemeval": ["session.recall_any@1", "session.recall_any@5", "session.recall_all@10",
                    "session.ndcg_any@10", "turn.recall_all@10", "context.evidence@2000"],
    "locomo": ["turn.recall_any@1", "turn.recall_any@10", "turn.evidence_recall@10",
               "session.recall_all@10", "context.evidence@2000"],
}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("benchmark", choices=sorted(COLUMNS))
    parser.add_argument("file")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--only", help="comma-separated variant names (default: all)")
    args = parser.parse_args()
    run = run_longmemeval if args.benchmark == "longmemeval" else run_locomo
    started = time.time()
    chosen = VARIANTS
    if args.only:
        names = [n.strip() for n in args.only.split(",")]
        chosen = {n: VARIANTS[n] for n in names}
    report = run(args.file, configs=chosen, baselines=False)
    columns = COLUMNS[args.benchmark]
    command = " ".join(["scripts/ablations.py", args.benchmark, args.file]
                       + ([f"--only '{args.only}'"] if args.only else []))  # fmt: skip
    lines = [
        f"Ablations on `{args.file}` ({report['questions']['scored']} questions scored), "
        f"{time.strftime('%Y-%m-%d')}, 2 cores, `{command}`, {time.time() - started:.0f} s",
        "",
        "| variant | " + " | ".join(columns) + " | p50 ms |",
        "|---|" + "---:|" * (len(columns) + 1),
    ]
    for name, system in report["systems"].items():
        metrics = system["overall"]["metrics"]
        cells = [f"{metrics.get(c, float('nan')):.3f}" for c in columns]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {system['latency_ms']['p50']:.1f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text, encoding="utf-8")
        args.out.with_suffix(".json").write_text(json.dumps(report, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
