#!/usr/bin/env bash
# Runs the retrieval benchmarks, one report folder each (with the full JSON report, every
# question's ranking), and keeps each run's summary under docs/reports/ as
# DATE-COMMIT-NAME.json (the history of recorded figures, no per-query dump).
# Usage: scripts/run_benchmarks.sh [DATA_DIR] [OUT_DIR]
#   DATA_DIR  holds workloads/, longmemeval/, locomo/ and scifact/ (default: ../shared/benchmarks)
#   OUT_DIR   gets one folder per run: report.md, chart.png, results.json (default: bench-out)
# ONLY="workloads locomo" runs only those (names below); REPORTS=DIR changes docs/reports.
# Extra recalld options can be given in RECALLD_BENCH_ARGS (e.g. "--cache-dir /tmp/c").
set -euo pipefail

DATA="${1:-../shared/benchmarks}"
OUT="${2:-bench-out}"
RECALLD="${RECALLD:-recalld}"
REPORTS="${REPORTS:-docs/reports}"
ONLY="${ONLY:-workloads_dev longmemeval_s longmemeval_s_synth longmemeval_oracle locomo scifact_train}"
STAMP="$(date -u +%F)-$(git rev-parse --short HEAD)"
read -r -a EXTRA <<< "${RECALLD_BENCH_ARGS:-}"

run() {
    local name="$1"; shift
    case " $ONLY " in *" $name "*) ;; *) return 0 ;; esac
    echo "== $name ($(uptime))" >&2
    "$RECALLD" bench "$@" --report "$OUT/$name" --json "$OUT/$name/full.json" \
        "${EXTRA[@]}" > "$OUT/$name.txt"
    python3 "$(dirname "$0")/summarize_report.py" "$OUT/$name/full.json" \
        "$REPORTS/$STAMP-$name.json"
}

mkdir -p "$OUT" "$REPORTS"
run workloads_dev workloads "$DATA/workloads/dev.json"
run longmemeval_s longmemeval "$DATA/longmemeval/longmemeval_s.json.gz"
run longmemeval_s_synth longmemeval "$DATA/longmemeval/longmemeval_s_synth.json.gz"
run longmemeval_oracle longmemeval "$DATA/longmemeval/longmemeval_oracle.json"
run locomo locomo "$DATA/locomo/locomo.json"
run scifact_train beir "$DATA/scifact" --split train
echo "reports in $OUT/*/report.md (full JSON beside them), summaries in $REPORTS/$STAMP-*.json" >&2
