#!/usr/bin/env bash
# The online-training topology on loopback: redis-server (AOF, appendfsync always), two
# `dspark serve` exporting hidden states while speculating with DSpark, and one
# `dspark train drafter --online` that sends them the prompts, trains on the samples and deletes
# them. Checks: every prompt trained exactly once (OUT/online_consumed.jsonl), no sample left in
# the store. With a fault:
#   kill_server     kill -9 one server mid-run: its prompts complete on the other
#   restart_redis   kill -9 redis mid-run and start it again: writers and trainer reconnect
#   corrupt         overwrite bytes of the first stored tensors: CRC catches them, prompts redone
#   maxmemory       (no trainer) redis at a tiny maxmemory: every request still answers, exports
#                   are counted as dropped in /metrics
#   resume_trainer  kill -9 the trainer mid-run, then --resume: nothing trained twice or lost
#   topology_test.sh --dspark BIN --models DIR --fault none|kill_server|... [--prompts N]
# Exit 77 (skipped) when redis-server or the trainer binary is missing.
set -euo pipefail

DSPARK="" MODELS="" FAULT=none N=16
while [[ $# -gt 0 ]]; do
  case "$1" in
    --dspark) DSPARK="$2"; shift 2 ;;
    --models) MODELS="$2"; shift 2 ;;
    --fault) FAULT="$2"; shift 2 ;;
    --prompts) N="$2"; shift 2 ;;
    *) echo "topology_test: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ -x "$DSPARK" && -d "$MODELS/demo" ]] || { echo "topology_test: give --dspark BIN and --models DIR" >&2; exit 2; }
REDIS=$(command -v redis-server || true)
[[ -n "$REDIS" ]] || { echo "SKIP: redis-server is not installed (scripts/install-deps.sh installs it)"; exit 77; }
if [[ "$FAULT" != maxmemory && ! -x "$(dirname "$DSPARK")/dspark-train" ]]; then
  echo "SKIP: the trainer binary dspark-train is not built (DSPARK_TRAIN=OFF)"; exit 77
fi

WORK=$(mktemp -d /tmp/dspark-topology.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [[ "${KEEP:-0}" != 1 ]]; then rm -rf "$WORK"; else echo "kept $WORK"; fi
}
trap cleanup EXIT
die() { echo "FAIL ($FAULT): $*" >&2; for f in "$WORK"/*.log; do echo "--- $f" >&2; tail -n 15 "$f" >&2; done; exit 1; }

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
RPORT=$(free_port)
REDIS_PID=""
start_redis() {
  local extra=("$@")
  "$REDIS" --port "$RPORT" --bind 127.0.0.1 --dir "$WORK" --save "" --appendonly yes \
    --appendfsync always --appenddirname aof "${extra[@]}" > "$WORK/redis.log" 2>&1 &
  REDIS_PID=$!
  PIDS+=("$REDIS_PID")
  for _ in $(seq 100); do redis-cli -p "$RPORT" ping > /dev/null 2>&1 && return 0; sleep 0.1; done
  die "redis-server did not start"
}
rcli() { redis-cli -p "$RPORT" "$@"; }

STORE="redis://127.0.0.1:$RPORT/0"
KVT='{"kv_connector": "HiddenStatesConnector", "kv_role": "kv_producer", "kv_connector_extra_config": {"store": "'"$STORE"'"}}'
SPEC='{"method": "dspark", "model": "'"$MODELS/demo-dspark"'", "num_speculative_tokens": 8}'
URLS=() SPIDS=()
start_server() {
  local i=$1 log="$WORK/serve$1.log"
  "$DSPARK" serve --model "$MODELS/demo" --port 0 --threads 1 --max-num-seqs 4 \
    --speculative-config "$SPEC" --kv-transfer-config "$KVT" > "$log" 2>&1 &
  SPIDS[$i]=$!
  PIDS+=("$!")
  for _ in $(seq 600); do
    if grep -q "listening on" "$log"; then
      URLS[$i]=$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' "$log" | head -1)
      return 0
    fi
    kill -0 "${SPIDS[$i]}" 2>/dev/null || die "server $i exited"
    sleep 0.1
  done
  die "server $i did not start"
}

start_redis
start_server 0
start_server 1

if [[ "$FAULT" == maxmemory ]]; then
  # A 31-token sample of 4 layers x 512 bf16 is about 127 KiB: room for about five of them over
  # what the empty server uses.
  used=$(rcli info memory | tr -d '\r' | sed -n 's/^used_memory:\([0-9]*\)$/\1/p')
  rcli config set maxmemory $((used + 700000)) > /dev/null
  rcli config set maxmemory-policy noeviction > /dev/null
  ok=0
  for i in $(seq 12); do
    body='{"model": "'"$MODELS/demo"'", "prompt": "Count to ten: '"$i"'", "max_tokens": 16, "temperature": 0, "kv_transfer_params": {"include_output_tokens": true}}'
    code=$(curl -s -o "$WORK/resp.json" -w '%{http_code}' -m 120 "${URLS[0]}/v1/completions" -H 'content-type: application/json' -d "$body")
    [[ "$code" == 200 ]] || die "request $i answered $code: $(cat "$WORK/resp.json")"
    grep -q '"handle"' "$WORK/resp.json" || die "request $i has no kv_transfer_params.handle"
    ok=$((ok + 1))
  done
  sleep 2
  m=$(curl -s "${URLS[0]}/metrics")
  written=$(echo "$m" | sed -n 's/^dspark:hidden_states_exports_total{.*result="written"} //p')
  dropped=$(echo "$m" | sed -n 's/^dspark:hidden_states_exports_total{.*result="dropped_store_full"} //p')
  echo "maxmemory: $ok/12 requests answered 200; exports written $written, dropped_store_full $dropped"
  [[ "${dropped:-0}" -gt 0 ]] || die "no export was counted as dropped at maxmemory"
  [[ "${written:-0}" -gt 0 ]] || die "no export was written before the store filled"
  [[ $((written + dropped)) -eq 12 ]] || die "written + dropped = $((written + dropped)), want 12"
  curl -sf "${URLS[0]}/health" > /dev/null || die "the server stopped serving"
  echo "PASS ($FAULT)"
  exit 0
fi

# Prompts of several kinds, none from the evaluation sets.
python3 - "$N" > "$WORK/prompts.jsonl" <<'EOF'
import json, sys
n = int(sys.argv[1])
kinds = ["What is {a} times {b}?", "Write one sentence about the number {a}.",
         "Tom has {a} apples and buys {b} more. How many does he have?",
         "List {b} words that start with the letter {c}."]
for i in range(n):
    a, b = 3 + i, 2 + i % 5
    print(json.dumps({"prompt": kinds[i % len(kinds)].format(a=a, b=b, c="abcdefgh"[i % 8])}))
EOF

OUT="$WORK/run"
TRAIN=("$DSPARK" train drafter --online --method dspark --target "$MODELS/demo" --init "$MODELS/demo-dspark"
       --prompts "$WORK/prompts.jsonl" --servers "${URLS[0]},${URLS[1]}" --store "$STORE" --out "$OUT"
       --max-tokens 12 --batch 2 --save-every 2 --threads 1 --sample-timeout 20)
consumed() { [[ -f "$OUT/online_consumed.jsonl" ]] && wc -l < "$OUT/online_consumed.jsonl" || echo 0; }
wait_consumed() {  # until at least $1 samples are trained (or the trainer ends)
  for _ in $(seq 1200); do
    [[ $(consumed) -ge $1 ]] && return 0
    kill -0 "$TPID" 2>/dev/null || return 0
    sleep 0.1
  done
  die "the trainer made no progress"
}

"${TRAIN[@]}" > "$WORK/train.log" 2>&1 &
TPID=$!
PIDS+=("$TPID")
CORRUPTED=0
case "$FAULT" in
  none) ;;
  kill_server)
    wait_consumed 2
    kill -9 "${SPIDS[1]}"
    echo "killed server 1 after $(consumed) samples" ;;
  restart_redis)
    wait_consumed 3
    kill -9 "$REDIS_PID"
    echo "killed redis after $(consumed) samples"
    sleep 2
    start_redis ;;
  corrupt)
    # Overwrite 4 bytes of hidden_states tensors that the trainer cannot have read yet: the
    # trainer is stopped (SIGSTOP) while a server has a request running, and only tensors that
    # appear in the store after the stop (the requests in flight, which the servers finish
    # meanwhile) are overwritten, then it continues. A tensor already in the store at the stop
    # may have been fetched, so it is left alone; every overwritten one must then be caught. Only
    # first attempts (the trainer's request ids end in -a<attempt>): a prompt's redo is left
    # alone, or hits on one prompt would use up its attempts.
    first_attempts() { rcli --scan --pattern '*-a0-*:hidden_states' 2>/dev/null | sort; }
    in_flight() {  # requests running or waiting on both servers together
      local n=0 v
      for u in "${URLS[@]}"; do
        v=$(curl -s -m 5 "$u/metrics" | sed -n 's/^vllm:num_requests_\(running\|waiting\){[^}]*} \([0-9]*\).*/\2/p')
        for x in $v; do n=$((n + x)); done
      done
      echo "$n"
    }
    for _ in $(seq 3000); do
      kill -0 "$TPID" 2>/dev/null || break
      kill -STOP "$TPID"
      before=$(first_attempts)
      new=""
      if [[ $(in_flight) -gt 0 ]]; then  # in flight after the snapshot: its tensors must appear
        for _ in $(seq 600); do
          new=$(comm -13 <(echo "$before") <(first_attempts))
          [[ -n "$new" ]] && break
          sleep 0.1
        done
      fi
      for k in $new; do
        r=$(rcli eval "if redis.call('exists', KEYS[1]) == 1 then redis.call('setrange', KEYS[1], 64, 'ZZZZ') return 1 end return 0" 1 "$k")
        [[ "$r" == 1 ]] && CORRUPTED=$((CORRUPTED + 1))
      done
      kill -CONT "$TPID"
      [[ $CORRUPTED -ge 1 ]] && break
      sleep 0.02
    done
    echo "corrupted $CORRUPTED stored tensors" ;;
  resume_trainer)
    wait_consumed 4
    kill -9 "$TPID"
    wait "$TPID" 2>/dev/null || true
    echo "killed the trainer after $(consumed) samples; resuming"
    "${TRAIN[@]}" --resume > "$WORK/train2.log" 2>&1 &
    TPID=$!
    PIDS+=("$TPID") ;;
  *) die "unknown fault $FAULT" ;;
esac
rc=0
wait "$TPID" || rc=$?
[[ $rc -eq 0 ]] || die "the trainer exited $rc"

python3 - "$OUT" "$N" <<'EOF' || die "exactly-once check failed"
import json, sys, collections
out, n = sys.argv[1], int(sys.argv[2])
lines = [json.loads(l) for l in open(out + "/online_consumed.jsonl") if l.strip()]
count = collections.Counter(l["prompt"] for l in lines)
twice = [p for p, c in count.items() if c > 1]
missing = [p for p in range(n) if p not in count]
handles = collections.Counter(l["handle"] for l in lines)
print(f"trained {len(lines)} samples for {len(count)} of {n} prompts; "
      f"servers {dict(collections.Counter(l.get('server', '?') for l in lines))}")
if twice: sys.exit(f"prompts trained twice: {twice}")
if missing: sys.exit(f"prompts never trained: {missing}")
if any(c > 1 for c in handles.values()): sys.exit("a handle was trained twice")
EOF
left=$(rcli dbsize)
[[ "$left" == 0 ]] || die "$left keys left in the store: $(rcli --scan | head -5 | tr '\n' ' ')"
if [[ "$FAULT" == corrupt ]]; then
  [[ $CORRUPTED -ge 1 ]] || die "nothing was corrupted: no request of the trainer was seen in flight"
  # Every overwritten tensor was written after the trainer stopped, so each must be caught.
  caught=$(grep -c '"event":"corrupt_sample".*CRC32' "$OUT/train_log.jsonl" || true)
  echo "CRC failures reported: $caught of $CORRUPTED overwritten"
  [[ $caught -ge $CORRUPTED ]] || die "only $caught of $CORRUPTED overwritten tensors were caught by the CRC"
fi
if [[ "$FAULT" == kill_server ]]; then
  s0=$(grep -c . "$WORK/serve0.log" || true)
  echo "server 0 log lines: $s0"
fi
echo "PASS ($FAULT): every one of $N prompts trained exactly once, the store empty"
