#!/usr/bin/env bash
# The online-training topology across separate network hosts: Linux network namespaces joined by
# veth pairs on one bridge, each process on its own host, talking only over the network:
#   dsp-redis   10.77.0.1  redis-server (AOF)
#   dsp-serve1  10.77.0.2  dspark serve (DSpark, exporting hidden states to redis)
#   dsp-serve2  10.77.0.3  dspark serve
#   dsp-train   10.77.0.4  dspark train drafter --online --servers both --store redis
# Then checks what tests/connector/topology_test.sh checks on loopback: every prompt trained once,
# no sample left in the store. Needs root (ip netns) and bridge support; says so plainly and exits
# 77 where the machine does not allow it.
#   sudo scripts/topology-netns.sh [--build build] [--prompts 24] [--keep]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=build N=24 KEEP=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) BUILD="$2"; shift 2 ;;
    --prompts) N="$2"; shift 2 ;;
    --keep) KEEP=1; shift ;;
    *) echo "topology-netns: unknown argument $1" >&2; exit 2 ;;
  esac
done
DSPARK="$PWD/$BUILD/dspark"
MODELS="$PWD/models"
[[ -x "$DSPARK" && -x "$PWD/$BUILD/dspark-train" ]] || { echo "topology-netns: build dspark and dspark-train first (make build)" >&2; exit 2; }
if [[ $(id -u) != 0 ]]; then
  echo "topology-netns: network namespaces need root; this user is $(id -un). Run it with sudo, or use"
  echo "  tests/connector/topology_test.sh (the same topology on loopback, part of make test)."
  exit 77
fi
if ! ip netns add dsp-probe 2> /dev/null; then
  echo "topology-netns: this machine does not allow network namespaces (ip netns add failed: a"
  echo "container without CAP_SYS_ADMIN?). The loopback topology test still runs in make test."
  exit 77
fi
ip netns del dsp-probe

HOSTS=(redis serve1 serve2 train)
WORK=$(mktemp -d /tmp/dspark-netns.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -9 "$p" 2> /dev/null || true; done
  wait 2> /dev/null || true
  for h in "${HOSTS[@]}"; do ip netns del "dsp-$h" 2> /dev/null || true; done
  ip link del dsp-br 2> /dev/null || true
  [[ $KEEP == 1 ]] && echo "kept $WORK" || rm -rf "$WORK"
}
trap cleanup EXIT

ip link add dsp-br type bridge
ip link set dsp-br up
i=1
for h in "${HOSTS[@]}"; do
  ip netns add "dsp-$h"
  ip link add "dsp-$h-h" type veth peer name "dsp-$h-br"
  ip link set "dsp-$h-h" netns "dsp-$h"
  ip link set "dsp-$h-br" master dsp-br
  ip link set "dsp-$h-br" up
  ip -n "dsp-$h" addr add "10.77.0.$i/24" dev "dsp-$h-h"
  ip -n "dsp-$h" link set "dsp-$h-h" up
  ip -n "dsp-$h" link set lo up
  i=$((i + 1))
done
on() { local h=$1; shift; ip netns exec "dsp-$h" "$@"; }

on redis redis-server --bind 10.77.0.1 --port 6379 --protected-mode no --dir "$WORK" --save "" \
  --appendonly yes --appendfsync always > "$WORK/redis.log" 2>&1 &
PIDS+=("$!")
for _ in $(seq 100); do on train redis-cli -h 10.77.0.1 ping > /dev/null 2>&1 && break; sleep 0.1; done
for h in serve1 serve2 train; do  # every host reaches the store across the bridge
  on "$h" redis-cli -h 10.77.0.1 ping > /dev/null 2>&1 ||
    { echo "topology-netns: host $h cannot reach 10.77.0.1 over the bridge" >&2; exit 1; }
done
STORE="redis://10.77.0.1:6379/0"
KVT='{"kv_connector": "HiddenStatesConnector", "kv_role": "kv_producer", "kv_connector_extra_config": {"store": "'"$STORE"'"}}'
SPEC='{"method": "dspark", "model": "'"$MODELS/demo-dspark"'", "num_speculative_tokens": 8}'
for s in 1 2; do
  on "serve$s" "$DSPARK" serve --model "$MODELS/demo" --host "10.77.0.$((s + 1))" --port 8000 --threads 1 \
    --speculative-config "$SPEC" --kv-transfer-config "$KVT" > "$WORK/serve$s.log" 2>&1 &
  PIDS+=("$!")
done
for s in 1 2; do
  for _ in $(seq 600); do grep -q "listening on" "$WORK/serve$s.log" && break; sleep 0.1; done
  grep -q "listening on" "$WORK/serve$s.log" || { echo "server $s did not start" >&2; cat "$WORK/serve$s.log" >&2; exit 1; }
done

python3 - "$N" > "$WORK/prompts.jsonl" << 'EOF'
import json, sys
for i in range(int(sys.argv[1])):
    print(json.dumps({"prompt": f"What is {3 + i} times {2 + i % 5}? Explain briefly."}))
EOF
start=$(date +%s)
on train "$DSPARK" train drafter --online --method dspark --target "$MODELS/demo" --init "$MODELS/demo-dspark" \
  --prompts "$WORK/prompts.jsonl" --servers http://10.77.0.2:8000,http://10.77.0.3:8000 --store "$STORE" \
  --out "$WORK/run" --max-tokens 16 --batch 2 --save-every 4 --threads 1 2>&1 | tee "$WORK/train.log" | tail -n 3
echo "trainer finished in $(($(date +%s) - start)) s"
python3 - "$WORK/run" "$N" << 'EOF'
import json, sys, collections
out, n = sys.argv[1], int(sys.argv[2])
lines = [json.loads(l) for l in open(out + "/online_consumed.jsonl") if l.strip()]
count = collections.Counter(l["prompt"] for l in lines)
print(f"trained {len(lines)} samples for {len(count)} of {n} prompts; by server "
      f"{dict(collections.Counter(l.get('server', '?') for l in lines))}")
bad = [p for p in range(n) if count.get(p, 0) != 1]
if bad: sys.exit(f"prompts not trained exactly once: {bad}")
EOF
left=$(on train redis-cli -h 10.77.0.1 dbsize)
[[ "$left" == 0 ]] || { echo "FAIL: $left keys left in the store" >&2; exit 1; }
echo "PASS: 4 hosts (10.77.0.1-4), every prompt trained exactly once, the store empty"
