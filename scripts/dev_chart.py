"""Chart the dev sets: each set's headline metric for the default and the plain baselines.

    PYTHONPATH=src .venv/bin/python scripts/dev_eval.py --sets workloads,helix,locomo \\
        --json /tmp/dev.json
    PYTHONPATH=src .venv/bin/python scripts/dev_chart.py /tmp/dev.json \\
        docs/reports/DATE-dev-sets.json docs/images/dev-sets.png

Writes the means (a small summary, kept in git) and a bar chart of them (the bench extra's
matplotlib). Each set is scored on its headline metric, the one docs/benchmarks.md leads
with.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

HEADLINES = {
    "workloads": ("hit@1", "Workloads\nhit@1"),
    "helix": ("section.hit@1", "Helix docs\nsection hit@1"),
    "locomo": ("turn.recall_any@1", "LoCoMo\nturn R@1"),
    "lme": ("session.recall_any@1", "LongMemEval_S\nsession R@1"),
    "scifact": ("doc.ndcg@10", "SciFact\nnDCG@10"),
}
"""Each set's headline metric and its label under the bars."""
SYSTEMS = ("default", "rrf", "bm25", "vector")
LABELS = {"default": "recalld default", "rrf": "plain RRF", "bm25": "BM25", "vector": "vector"}


def means(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per set: its metric, question count and each system's mean."""
    out: dict[str, dict[str, Any]] = {}
    for name, found in report.items():
        if name not in HEADLINES:
            continue
        metric = HEADLINES[name][0]
        probes = found["probes"]
        values = {s: [p["systems"][s]["scores"][metric] for p in probes if s in p["systems"]
                      and metric in p["systems"][s]["scores"]] for s in SYSTEMS}  # fmt: skip
        out[name] = {"metric": metric, "questions": len(probes),
                     **{s: round(sum(v) / len(v), 4) for s, v in values.items() if v}}  # fmt: skip
    return out


def chart(figures: dict[str, dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sets = list(figures)
    width = 0.8 / len(SYSTEMS)
    figure, axis = plt.subplots(figsize=(2.2 * len(sets) + 2, 4))
    for i, system in enumerate(SYSTEMS):
        values = [figures[s].get(system, 0.0) for s in sets]
        positions = [x + (i - (len(SYSTEMS) - 1) / 2) * width for x in range(len(sets))]
        bars = axis.bar(positions, values, width, label=LABELS[system])
        axis.bar_label(bars, fmt="%.2f", fontsize=7)
    axis.set_xticks(range(len(sets)), [HEADLINES[s][1] for s in sets], fontsize=9)
    axis.set_ylim(0, 1.0)
    axis.grid(axis="y", alpha=0.3)
    axis.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    axis.set_title("Dev sets: the default and plain baselines, one run", fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    source, summary, picture = (Path(a) for a in argv)
    figures = means(json.loads(source.read_text(encoding="utf-8")))
    summary.write_text(json.dumps(figures, indent=1) + "\n", encoding="utf-8")
    chart(figures, picture)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
