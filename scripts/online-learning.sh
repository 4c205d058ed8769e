#!/usr/bin/env bash
# Online training from live traffic, measured: redis-server, two `dspark serve` (DSpark, exporting
# hidden states), and `dspark train drafter --online` that streams prompts of a domain the drafter
# was not trained on through the servers, learns from the exported hidden states and hot-reloads
# both servers' drafter every RELOAD steps. /metrics of both servers is polled every POLL seconds;
# the acceptance length (1 + accepted / rounds, vLLM's mean acceptance length) is reported per
# drafter version and over time. Writes docs/bench/online/<cpu>.json and acceptance.svg (gnuplot).
#   scripts/online-learning.sh [--build build] [--init models/demo-dspark] [--kind code]
#                              [--seconds 600] [--prompts 400] [--reload 10]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=build INIT=models/demo-dspark KIND=code SECONDS_=600 NPROMPTS=400 RELOAD=10 POLL=10 LR=2e-4
MIX=build/drafters-mix/prompts.jsonl
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) BUILD="$2"; shift 2 ;;
    --init) INIT="$2"; shift 2 ;;
    --kind) KIND="$2"; shift 2 ;;
    --seconds) SECONDS_="$2"; shift 2 ;;
    --prompts) NPROMPTS="$2"; shift 2 ;;
    --reload) RELOAD="$2"; shift 2 ;;
    --lr) LR="$2"; shift 2 ;;
    --mix) MIX="$2"; shift 2 ;;
    *) echo "online-learning: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ -f "$MIX" ]] || { echo "online-learning: no prompt mix at $MIX (dspark datagen prompts --corpus ... --out $MIX)" >&2; exit 2; }
WORK=$(mktemp -d /tmp/dspark-online.XXXXXX)
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill $p 2>/dev/null; done; wait 2>/dev/null' EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
RP=$(port)
redis-server --port "$RP" --bind 127.0.0.1 --save "" --appendonly no --dir "$WORK" > "$WORK/redis.log" 2>&1 &
PIDS+=("$!")
STORE="redis://127.0.0.1:$RP/0"
SPEC='{"method": "dspark", "model": "'"$INIT"'", "num_speculative_tokens": 8}'
KVT='{"kv_connector": "HiddenStatesConnector", "kv_role": "kv_producer", "kv_connector_extra_config": {"store": "'"$STORE"'"}}'
URLS=()
for s in 0 1; do
  "$BUILD/dspark" serve --model models/demo --port 0 --threads 1 --speculative-config "$SPEC" \
    --kv-transfer-config "$KVT" --enable-drafter-reload --allowed-drafter-root "$WORK" > "$WORK/serve$s.log" 2>&1 &
  PIDS+=("$!")
  for _ in $(seq 900); do grep -q "listening on" "$WORK/serve$s.log" && break; sleep 0.2; done
  URLS+=("$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' "$WORK/serve$s.log" | head -1)")
done
# The held-out domain: prompts of one kind from the training mix (never the evaluation sets).
python3 - "$MIX" "$KIND" "$NPROMPTS" > "$WORK/prompts.jsonl" << 'EOF'
import json, sys
mix, kind, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
k = 0
for line in open(mix):
    r = json.loads(line)
    if r.get("kind") == kind and "prompt" in r:
        print(json.dumps({"prompt": r["prompt"]})); k += 1
        if k == n: break
if k == 0: sys.exit(f"no prompt of kind {kind} in {mix}")
EOF

poll() {  # t, then per server the per-version counters
  python3 - "$1" "${URLS[@]}" << 'EOF'
import re, sys, urllib.request, json
t, urls = float(sys.argv[1]), sys.argv[2:]
row = {"t": t, "versions": {}}
for u in urls:
    text = urllib.request.urlopen(u + "/metrics", timeout=10).read().decode()
    for name, key in (("num_drafts", "drafts"), ("num_accepted_tokens", "accepted")):
        for m in re.finditer(r'^dspark:spec_decode_%s_by_drafter_total\{.*drafter_version="(\d+)"\} (\S+)' % name, text, re.M):
            v = row["versions"].setdefault(m.group(1), {"drafts": 0, "accepted": 0})
            v[key] += float(m.group(2))
print(json.dumps(row))
EOF
}
T0=$(date +%s)
"$BUILD/dspark" train drafter --online --method dspark --target models/demo --init "$INIT" \
  --prompts "$WORK/prompts.jsonl" --servers "${URLS[0]},${URLS[1]}" --store "$STORE" --out "$WORK/run" \
  --max-tokens 64 --batch 4 --lr "$LR" --save-every "$RELOAD" --reload-every "$RELOAD" --threads 1 \
  > "$WORK/train.log" 2>&1 &
TPID=$!
PIDS+=("$TPID")
: > "$WORK/metrics.jsonl"
while kill -0 "$TPID" 2> /dev/null && (( $(date +%s) - T0 < SECONDS_ )); do
  sleep "$POLL"
  poll "$(( $(date +%s) - T0 ))" >> "$WORK/metrics.jsonl" || true
done
kill "$TPID" 2> /dev/null || true
wait "$TPID" 2> /dev/null || true
poll "$(( $(date +%s) - T0 ))" >> "$WORK/metrics.jsonl"
reloads=$(grep -c '"event":"reload"' "$WORK/run/train_log.jsonl" 2> /dev/null || true)
CPU=$(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1)
mkdir -p docs/bench/online
python3 - "$WORK/metrics.jsonl" "$CPU" "$(nproc)" "$KIND" "$INIT" "${reloads:-0}" "$LR" "$RELOAD" << 'EOF'
import json, re, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
cpu, cores, kind, init, reloads, lr, every = sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5], int(sys.argv[6]), sys.argv[7], int(sys.argv[8])
last = rows[-1]["versions"]
per_version = {v: {"rounds": d["drafts"], "accepted": d["accepted"],
                   "acceptance_length": 1 + d["accepted"] / d["drafts"] if d["drafts"] else None}
               for v, d in sorted(last.items(), key=lambda x: int(x[0]))}
# Over time: acceptance of the rounds in each poll interval, all versions together.
series, prev = [], {"drafts": 0, "accepted": 0}
for r in rows:
    tot = {k: sum(v[k] for v in r["versions"].values()) for k in ("drafts", "accepted")}
    dd, da = tot["drafts"] - prev["drafts"], tot["accepted"] - prev["accepted"]
    newest = max((int(v) for v in r["versions"]), default=1)
    if dd > 0: series.append({"t": r["t"], "acceptance_length": 1 + da / dd, "newest_version": newest})
    prev = tot
vs = [v for v in per_version if per_version[v]["acceptance_length"]]
out = {"cpu": cpu, "cores": cores, "held_out_kind": kind, "init": init, "lr": lr, "reload_every_steps": every,
       "reloads": reloads, "per_version": per_version, "over_time": series,
       "first_version": vs[0] if vs else None, "last_version": vs[-1] if vs else None}
name = re.sub(r"[^A-Za-z0-9]+", "-", cpu).strip("-").lower()
json.dump(out, open(f"docs/bench/online/{name}-{cores}c.json", "w"), indent=2)
with open("/tmp/online-series.dat", "w") as f:
    for s in series: f.write(f"{s['t']} {s['acceptance_length']:.4f} {s['newest_version']}\n")
for v, d in per_version.items():
    al = d["acceptance_length"]
    print(f"drafter version {v}: {int(d['rounds'])} rounds, acceptance length {al:.3f}" if al else f"drafter version {v}: no rounds")
EOF
# Before and after on the same held-out prompts (the next ones of the kind, never sent to the
# servers): the starting drafter and the last one the servers loaded, with `dspark bench spec`.
python3 - "$MIX" "$KIND" "$NPROMPTS" 16 > "$WORK/heldout.jsonl" << 'EOF'
import json, sys
mix, kind, skip, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
k = 0
for line in open(mix):
    r = json.loads(line)
    if r.get("kind") != kind or "prompt" not in r: continue
    k += 1
    if k > skip: print(json.dumps({"prompt": r["prompt"]}))
    if k >= skip + n: break
EOF
LAST=$(ls -d "$WORK"/run/drafter-step-* 2> /dev/null | sort -V | tail -1 || true)
if [[ -n "$LAST" && -s "$WORK/heldout.jsonl" ]]; then
  for d in "$INIT" "$LAST"; do
    "$BUILD/dspark" bench spec --model models/demo --prompts "$WORK/heldout.jsonl" --max-tokens 64 --json \
      --speculative-config '{"method": "dspark", "model": "'"$d"'", "num_speculative_tokens": 8}' > "$WORK/spec-$(basename "$d").json"
  done
  python3 - "$WORK/spec-$(basename "$INIT").json" "$WORK/spec-$(basename "$LAST").json" "$LAST" << 'EOF'
import json, sys, glob
def get(p):
    a = json.load(open(p))["all"]
    return {"mean_accepted_length": a["mean_accepted_length"], "speedup": a["speedup"]}
a, b = get(sys.argv[1]), get(sys.argv[2])
last = sys.argv[3].rsplit("/", 1)[-1]
print(f"same 16 held-out prompts (bench spec, full blocks): start {a['mean_accepted_length']:.2f} tokens per round "
      f"({a['speedup']:.2f}x), {last} {b['mean_accepted_length']:.2f} ({b['speedup']:.2f}x)")
f = sorted(glob.glob("docs/bench/online/*c.json"))[-1]
j = json.load(open(f)); j["heldout_bench_spec"] = {"start": a, "last": b, "last_drafter": last}
json.dump(j, open(f, "w"), indent=2)
EOF
fi
if command -v gnuplot > /dev/null && [[ -s /tmp/online-series.dat ]]; then
  gnuplot << EOF
set terminal svg size 720,360 font "sans,11"
set output "docs/bench/online/acceptance.svg"
set title "Online training on held-out '$KIND' prompts ($CPU, $(nproc) cores)"
set xlabel "seconds"
set ylabel "acceptance length (tokens per round)"
set y2label "drafter version"
set y2tics
set key bottom right
plot "/tmp/online-series.dat" using 1:2 with linespoints title "acceptance length (per poll interval)", \
     "" using 1:3 axes x1y2 with steps title "newest drafter version"
EOF
  echo "plot: docs/bench/online/acceptance.svg"
fi
echo "work dir: $WORK"
