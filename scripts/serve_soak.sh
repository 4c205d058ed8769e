#!/usr/bin/env bash
# Soak test of `dspark serve`, a proof of flat memory (a benchmark, not part of `make test`; the
# ctest server_soak_short runs the same driver for about 40 seconds):
# tests/server/soak_test.mjs on loopback against a server with the demo target and its DSpark
# drafter. Each round is a mix of ROUND_SIZE requests from CLIENTS concurrent clients: streaming
# and not, chat and completions, greedy and seeded, streams the client aborts after the first
# content chunk, bad requests (each must get 400 and an OpenAI error object) and requests whose
# prompt + max_tokens fill --max-model-len exactly; every response is checked. After a high-water
# round and a round of 144 connections at once, warm-up rounds run until RSS is steady
# (two consecutive rounds within 0.5%, after at least WARMUP_MIN_ROUNDS); then rounds run for
# about DURATION seconds, RSS read after each once the server is idle, and the run FAILS when the
# least-squares slope of RSS against the requests sent exceeds MAX_SLOPE bytes/request or RSS at
# the end grew more than MAX_GROWTH over RSS after warm-up, or when a response or the /metrics
# counters (which must add up over the measured rounds) are wrong. It prints RSS after every
# round and a JSON summary line ("soak summary: {...}"; also written to JSON=FILE). The server's
# glibc malloc is set to hand memory back (SERVER_ENV): with its defaults free memory stays
# resident and absorbs a small leak (tests/server/CMakeLists.txt, at server_soak_short, has the
# figures).
#   scripts/serve_soak.sh [DURATION_S=1800] [BUILD=build]
# Environment: DSPARK (the binary, default $BUILD/dspark), MODEL, DRAFTER, THREADS (default 0:
# every core), CLIENTS (64), ROUND_SIZE (1024), MAX_TOKENS (32), MAX_MODEL_LEN (512), DTYPE (bf16
# or f32), NO_SPEC=1 (no drafter), MAX_SLOPE (16), MAX_GROWTH (0.02), WARMUP_MIN_ROUNDS (4),
# JSON (a file for the summary), SERVER_ENV (the server's extra environment, NAME=VALUE,...;
# default MALLOC_ARENA_MAX=1,MALLOC_MMAP_THRESHOLD_=65536,MALLOC_TRIM_THRESHOLD_=0,
# MALLOC_TOP_PAD_=0,DSPARK_FEATURE_POOL_RELEASE=1, so that glibc and the drafter's feature pool
# hand free memory back; set it empty for the defaults), CONNECTOR=1 (redis-server on a free
# loopback port, --save "" --appendonly no, and a HiddenStatesConnector exporting every request;
# nobody else consumes the exports, so the soak deletes the exported samples after each round,
# keeping redis bounded, and prints redis-server's RSS and the samples it deleted).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
duration=${1:-1800}
build=${2:-build}
dspark=${DSPARK:-$root/$build/dspark}
[ -x "$dspark" ] || { echo "serve_soak: $dspark not found (make build first, or set DSPARK)"; exit 1; }
command -v node >/dev/null || { echo "serve_soak: node not found (scripts/install-deps.sh installs Node.js)"; exit 1; }
extra=()
[ "${CONNECTOR:-0}" = 1 ] && extra+=(--connector 1)
[ "${NO_SPEC:-0}" = 1 ] && extra+=(--no-spec 1)
[ -n "${JSON:-}" ] && extra+=(--json "$JSON")
server_env=${SERVER_ENV-MALLOC_ARENA_MAX=1,MALLOC_MMAP_THRESHOLD_=65536,MALLOC_TRIM_THRESHOLD_=0,MALLOC_TOP_PAD_=0,DSPARK_FEATURE_POOL_RELEASE=1}
[ -n "$server_env" ] && extra+=(--server-env "$server_env")
exec node "$root/tests/server/soak_test.mjs" --dspark "$dspark" \
  --model "${MODEL:-$root/models/demo}" --drafter "${DRAFTER:-$root/models/demo-dspark}" \
  --threads "${THREADS:-0}" --clients "${CLIENTS:-64}" --round-size "${ROUND_SIZE:-1024}" \
  --max-tokens "${MAX_TOKENS:-32}" --max-model-len "${MAX_MODEL_LEN:-512}" --dtype "${DTYPE:-bf16}" \
  --max-slope "${MAX_SLOPE:-16}" --max-growth "${MAX_GROWTH:-0.02}" --warmup-min-rounds "${WARMUP_MIN_ROUNDS:-4}" \
  --duration "$duration" "${extra[@]}"
