#!/usr/bin/env bash
# Soak test of `dspark serve` (a benchmark, not part of `make test`): tests/server/load_test.mjs
# for about DURATION seconds: rounds of 64 concurrent streaming clients on loopback against a
# server with the demo target and its DSpark drafter, every response checked complete, and RSS at
# the end within 10% of RSS after the warm-up round (RSS is printed after every round). With
# DTYPE=f32 a request's text must also be the same in every round and alone; in bf16 (the default,
# as served) texts that differ between rounds are counted, not failed: the kernels' summation
# order follows a step's row count (docs/serving.md, "Reproducibility").
#   scripts/serve_soak.sh [DURATION_S=600] [BUILD=build]
# Environment: DSPARK (the binary, default $BUILD/dspark), MODEL, DRAFTER, THREADS (default 0:
# every core), CLIENTS (64), MAX_TOKENS (64), WARMUP_ROUNDS (1: RSS is measured after these),
# DTYPE (bf16 or f32).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
duration=${1:-600}
build=${2:-build}
dspark=${DSPARK:-$root/$build/dspark}
[ -x "$dspark" ] || { echo "serve_soak: $dspark not found (make build first, or set DSPARK)"; exit 1; }
command -v node >/dev/null || { echo "serve_soak: node not found (scripts/install-deps.sh installs Node.js)"; exit 1; }
exec node "$root/tests/server/load_test.mjs" --dspark "$dspark" \
  --model "${MODEL:-$root/models/demo}" --drafter "${DRAFTER:-$root/models/demo-dspark}" \
  --threads "${THREADS:-0}" --clients "${CLIENTS:-64}" --max-tokens "${MAX_TOKENS:-64}" --warmup-rounds "${WARMUP_ROUNDS:-1}" \
  --dtype "${DTYPE:-bf16}" --duration "$duration"
