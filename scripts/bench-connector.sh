#!/usr/bin/env bash
# Connector throughput: hidden-state samples per second from a writer (a server's exporter) to a
# reader (the online trainer) through a redis-server started here, next to redis-benchmark's raw
# SET and GET rates for the same value size, in one run. Writes docs/bench/connector/<cpu>.json.
#   scripts/bench-connector.sh [--build build] [--samples 300] [--tokens 160]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=build SAMPLES=300 TOKENS=160 LAYERS=4 HIDDEN=512
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) BUILD="$2"; shift 2 ;;
    --samples) SAMPLES="$2"; shift 2 ;;
    --tokens) TOKENS="$2"; shift 2 ;;
    *) echo "bench-connector: unknown argument $1" >&2; exit 2 ;;
  esac
done
command -v redis-server > /dev/null && command -v redis-benchmark > /dev/null ||
  { echo "bench-connector: redis-server and redis-benchmark are needed (scripts/install-deps.sh)" >&2; exit 2; }
WORK=$(mktemp -d)
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$PORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$WORK" > "$WORK/redis.log" 2>&1 &
RPID=$!
trap 'kill $RPID 2>/dev/null; rm -rf "$WORK"' EXIT
for _ in $(seq 50); do redis-cli -p "$PORT" ping > /dev/null 2>&1 && break; sleep 0.1; done

BYTES=$((TOKENS * LAYERS * HIDDEN * 2))  # the hidden_states value, bf16
ours=$("$BUILD/dspark" bench connector --store "redis://127.0.0.1:$PORT/0" --samples "$SAMPLES" \
  --tokens "$TOKENS" --layers "$LAYERS" --hidden "$HIDDEN" --json)
# One client, like the connector's one writer and one reader; -n scaled to the value size.
N=$(( SAMPLES * 2 ))
raw=$(redis-benchmark -p "$PORT" -c 1 -n "$N" -d "$BYTES" -t set,get --csv -q 2>/dev/null | tr -d '"')
set_rps=$(echo "$raw" | awk -F, '$1=="SET"{print $2}')
get_rps=$(echo "$raw" | awk -F, '$1=="GET"{print $2}')
CPU=$(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1)
python3 - "$ours" "$set_rps" "$get_rps" "$BYTES" "$CPU" "$(nproc)" << 'PY'
import json, sys, re, os
ours = json.loads(sys.argv[1]); set_rps, get_rps = float(sys.argv[2]), float(sys.argv[3])
b, cpu, cores = int(sys.argv[4]), sys.argv[5], int(sys.argv[6])
# A sample is one SET of its hidden states (plus two small SETs) and one GET of it (MGET of three):
# the raw ceiling for one writer and one reader at once is about min(SET, GET) value rate.
out = {"cpu": cpu, "cores": cores, "connector": ours,
       "redis_benchmark": {"value_bytes": b, "clients": 1, "set_per_s": set_rps, "get_per_s": get_rps,
                           "set_mb_per_s": set_rps * b / 1e6, "get_mb_per_s": get_rps * b / 1e6},
       "ratio_to_raw_set": ours["samples_per_s"] / set_rps}
name = re.sub(r"[^A-Za-z0-9]+", "-", cpu).strip("-").lower() or "cpu"
path = f"docs/bench/connector/{name}-{cores}c.json"
json.dump(out, open(path, "w"), indent=2)
print(f"connector: {ours['samples_per_s']:.1f} samples/s ({ours['mb_per_s']:.1f} MB/s) of {ours['sample_bytes']} bytes")
print(f"redis-benchmark, {b}-byte values, 1 client: SET {set_rps:.0f}/s ({set_rps*b/1e6:.1f} MB/s), "
      f"GET {get_rps:.0f}/s ({get_rps*b/1e6:.1f} MB/s)")
print(f"connector / raw SET rate: {out['ratio_to_raw_set']:.2f}   -> {path}")
PY
