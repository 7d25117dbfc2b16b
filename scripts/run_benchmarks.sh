#!/usr/bin/env bash
# Runs the retrieval benchmarks recorded in docs/benchmarks.md, one report folder each.
# Usage: scripts/run_benchmarks.sh [DATA_DIR] [OUT_DIR]
#   DATA_DIR  holds longmemeval/ and locomo/ (default: ../shared/benchmarks)
#   OUT_DIR   gets one folder per run: report.md, chart.png, results.json (default: bench-out)
# Extra recalld options can be given in RECALLD_BENCH_ARGS (e.g. "--cache-dir /tmp/c").
set -euo pipefail

DATA="${1:-../shared/benchmarks}"
OUT="${2:-bench-out}"
RECALLD="${RECALLD:-recalld}"
read -r -a EXTRA <<< "${RECALLD_BENCH_ARGS:-}"

run() {
    local name="$1"; shift
    echo "== $name" >&2
    "$RECALLD" bench "$@" --report "$OUT/$name" "${EXTRA[@]}" > "$OUT/$name.txt"
}

mkdir -p "$OUT"
run longmemeval_s longmemeval "$DATA/longmemeval/longmemeval_s.json.gz"
run longmemeval_s_synth longmemeval "$DATA/longmemeval/longmemeval_s_synth.json.gz"
run longmemeval_oracle longmemeval "$DATA/longmemeval/longmemeval_oracle.json"
run locomo locomo "$DATA/locomo/locomo.json"
echo "reports in $OUT/*/report.md" >&2
