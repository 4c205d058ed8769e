#!/usr/bin/env bash
# Per-category speculative decoding figures of one drafter on Spec-Bench (13 categories) and
# MT-Bench (8), read from ../shared/data (never copied into the repository), in one run so that
# the rows compare: full blocks at T=0, the prefix length policy (adaptive verification) at T=0
# and at T=1. Then the markdown table of docs/drafters.md (scripts/spec_bench_table.py).
#
#   scripts/bench-spec-bench.sh OUT_DIR [DRAFTER_DIR] [TARGET_DIR]
#     defaults: models/demo-dspark, models/demo
#
# Environment: PER_CATEGORY (prompts per category, 3), MAX_TOKENS (64), SETS ("spec_bench mt_bench"),
# RUNS ("full-T0 sched-T0 sched-T1"), QUANT (int8 drafter weights: auto = where the CPU has
# AVX512-BF16, as make demo), DATA (../shared/data). A run whose JSON exists is kept.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: scripts/bench-spec-bench.sh OUT_DIR [DRAFTER_DIR] [TARGET_DIR]}
DRAFTER=${2:-models/demo-dspark}
TARGET=${3:-models/demo}
BIN=${BIN:-build}
DATA=${DATA:-../shared/data}
PER_CATEGORY=${PER_CATEGORY:-3}
MAX_TOKENS=${MAX_TOKENS:-64}
SETS=${SETS:-spec_bench mt_bench}
RUNS=${RUNS:-full-T0 sched-T0 sched-T1}
QUANT=${QUANT:-auto}
if [ "$QUANT" = auto ]; then
  QUANT=none
  grep -qw avx512_bf16 /proc/cpuinfo && QUANT=int8
fi
for set in $SETS; do
  [ -f "$DATA/$set.jsonl" ] || { echo "bench-spec-bench: $DATA/$set.jsonl is not there (set DATA=)" >&2; exit 1; }
done
mkdir -p "$OUT"
quant=""
[ "$QUANT" = int8 ] && quant=', "quantization": "int8"'
for set in $SETS; do
  for run in $RUNS; do
    out="$OUT/$set-$run.json"
    [ -f "$out" ] && continue
    sched=""
    case $run in sched-*) sched=', "enable_adaptive_verification": true' ;; esac
    temp=${run##*-T}
    cfg="{\"model\": \"$DRAFTER\", \"method\": \"dspark\", \"num_speculative_tokens\": 8, \"draft_sample_method\": \"probabilistic\", \"rejection_sample_method\": \"block\"$quant$sched}"
    echo "== $set $run: $cfg" >&2
    "$BIN/dspark" bench spec --model "$TARGET" --speculative-config "$cfg" --prompts "$DATA/$set.jsonl" \
      --per-category "$PER_CATEGORY" --max-tokens "$MAX_TOKENS" --temperature "$temp" --json > "$out.tmp"
    mv "$out.tmp" "$out"
  done
  args=()
  for run in $RUNS; do args+=("$run=$OUT/$set-$run.json"); done
  echo "## $set ($PER_CATEGORY prompts per category, $MAX_TOKENS tokens, drafter $DRAFTER, quantization $QUANT)"
  python3 scripts/spec_bench_table.py "${args[@]}"
done
