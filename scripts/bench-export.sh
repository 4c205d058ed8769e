#!/usr/bin/env bash
# What exporting hidden states while serving DSpark costs: two `dspark serve` with the same DSpark
# config, one exporting every request (export_fraction 1) to a redis-server started here, one
# not; `dspark bench serve` at --max-concurrency 8 against each in turn, interleaved, REPS times.
# Prints output tok/s per run and the ratio of the medians; writes docs/bench/export/<cpu>.json.
#   scripts/bench-export.sh [--build build] [--reps 3] [--num-prompts 32] [--max-tokens 64]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=build REPS=3 NP=32 MT=64 C=8
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) BUILD="$2"; shift 2 ;;
    --reps) REPS="$2"; shift 2 ;;
    --num-prompts) NP="$2"; shift 2 ;;
    --max-tokens) MT="$2"; shift 2 ;;
    --concurrency) C="$2"; shift 2 ;;
    *) echo "bench-export: unknown argument $1" >&2; exit 2 ;;
  esac
done
WORK=$(mktemp -d)
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill $p 2>/dev/null; done; wait 2>/dev/null; rm -rf "$WORK"' EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
RP=$(port)
redis-server --port "$RP" --bind 127.0.0.1 --save "" --appendonly no --dir "$WORK" > "$WORK/redis.log" 2>&1 &
PIDS+=("$!")
SPEC='{"method": "dspark", "model": "models/demo-dspark", "num_speculative_tokens": 8, "enable_adaptive_verification": true}'
KVT='{"kv_connector": "HiddenStatesConnector", "kv_role": "kv_producer", "kv_connector_extra_config": {"store": "redis://127.0.0.1:'"$RP"'/0", "export_fraction": 1.0}}'
URL=""
start() {  # name, extra args...; sets URL (not a $(...) subshell: PIDS must keep the pid)
  local name=$1; shift
  "$BUILD/dspark" serve --model models/demo --port 0 --speculative-config "$SPEC" "$@" > "$WORK/$name.log" 2>&1 &
  PIDS+=("$!")
  for _ in $(seq 900); do grep -q "listening on" "$WORK/$name.log" && break; sleep 0.2; done
  URL=$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' "$WORK/$name.log" | head -1)
}
start off
OFF=$URL
start on --kv-transfer-config "$KVT"
ON=$URL
[[ -n "$OFF" && -n "$ON" ]] || { echo "bench-export: a server did not start" >&2; cat "$WORK"/*.log >&2; exit 1; }
run() {  # url, json out
  "$BUILD/dspark" bench serve --base-url "$1" --max-concurrency "$C" --num-prompts "$NP" --max-tokens "$MT" \
    --num-warmups 2 --json "$2" > /dev/null
  python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); r=j[0] if isinstance(j,list) else j; r=r.get("result",r); print(r["output_throughput"])' "$2"
}
offs=() ons=()
for r in $(seq "$REPS"); do
  offs+=("$(run "$OFF" "$WORK/off$r.json")")
  ons+=("$(run "$ON" "$WORK/on$r.json")")
  redis-cli -p "$RP" flushdb > /dev/null  # the trainer's deletes, done here
  echo "rep $r: export off ${offs[-1]} tok/s, export on ${ons[-1]} tok/s"
done
written=$(curl -s "$ON/metrics" | sed -n 's/^dspark:hidden_states_exports_total{.*result="written"} //p')
dropped=$(curl -s "$ON/metrics" | grep -E 'result="(dropped|failed)' | awk '{s+=$2} END {print s+0}')
CPU=$(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1)
mkdir -p docs/bench/export
python3 - "$CPU" "$(nproc)" "$C" "$NP" "$MT" "$written" "$dropped" "${offs[*]}" "${ons[*]}" << 'PY'
import json, re, statistics, sys
cpu, cores, c, np_, mt, written, dropped = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6] or 0), int(sys.argv[7] or 0)
off = [float(x) for x in sys.argv[8].split()]; on = [float(x) for x in sys.argv[9].split()]
# Each rep runs the two servers back to back: the ratio within a rep is paired against the load
# of that moment, and the median over reps is the figure (the medians' ratio is kept too).
paired = [b / a for a, b in zip(off, on)]
ratio = statistics.median(paired)
out = {"cpu": cpu, "cores": cores, "concurrency": c, "num_prompts": np_, "max_tokens": mt,
       "output_tok_s_export_off": off, "output_tok_s_export_on": on, "paired_ratios": paired,
       "median_paired_ratio_on_off": ratio, "mean_paired_ratio_on_off": statistics.mean(paired),
       "ratio_of_medians": statistics.median(on) / statistics.median(off),
       "exports_written": written, "exports_dropped_or_failed": dropped, "goal": "ratio >= 0.95"}
name = re.sub(r"[^A-Za-z0-9]+", "-", cpu).strip("-").lower()
json.dump(out, open(f"docs/bench/export/{name}-{cores}c.json", "w"), indent=2)
print(f"export on / off, output tok/s at concurrency {c}: median of {len(paired)} paired ratios {ratio:.3f} "
      f"(mean {statistics.mean(paired):.3f}, ratio of medians {out['ratio_of_medians']:.3f}); "
      f"({'meets' if ratio >= 0.95 else 'misses'} the 0.95 goal); {written} exports written, {dropped} dropped or failed")
PY
