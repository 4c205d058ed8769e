#!/usr/bin/env bash
# Speculators' trainer against `dspark serve`, unchanged: with "method": "extract_hidden_states"
# and a hidden-states connector, a request shaped as Speculators sends it ({prompt: [ids],
# max_tokens: 1, return_token_ids: true}, no kv_transfer_params) is exported and answered with
# kv_transfer_params.handle and the prompt's token ids, and its sample is committed in the store
# (file backend: DIR/{handle}.meta.json). A DSpark server with the same connector keeps export
# opt-in: the same request gets no handle, one with kv_transfer_params does.
#   speculators_test.sh DSPARK MODELS_DIR
set -euo pipefail
dspark="$1" models="$2"
t="$(mktemp -d)"
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2> /dev/null || true; done; wait 2> /dev/null || true; rm -rf "$t"; }
trap cleanup EXIT
mkdir -p "$t/store"
KVT='{"kv_connector": "HiddenStatesConnector", "kv_role": "kv_producer", "kv_connector_extra_config": {"store": "file:'"$t/store"'"}}'
start() {  # start NAME SPEC: a server; sets URL
  "$dspark" serve --model "$models/demo" --port 0 --threads 1 --speculative-config "$2" --kv-transfer-config "$KVT" \
    > "$t/$1.log" 2>&1 &
  PIDS+=("$!")
  for _ in $(seq 600); do
    grep -q "listening on" "$t/$1.log" && break
    kill -0 "$!" 2> /dev/null || { cat "$t/$1.log"; echo "server $1 exited"; exit 1; }
    sleep 0.1
  done
  URL=$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' "$t/$1.log" | head -1)
  [[ -n "$URL" ]] || { cat "$t/$1.log"; echo "server $1 did not start"; exit 1; }
}
post() { curl -s -m 60 "$URL/v1/completions" -H 'content-type: application/json' -d "$1"; }

EXTRACT='{"method": "extract_hidden_states", "num_speculative_tokens": 1, "draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 6]}}}'
start extract "$EXTRACT"
ids="[3, 141, 592, 653, 589, 79, 323, 846]"
post '{"model": "'"$models/demo"'", "prompt": '"$ids"', "max_tokens": 1, "return_token_ids": true}' > "$t/r1.json"
python3 - "$t/r1.json" "$ids" "$t/store" <<'PY'
import json, os, sys, time
r = json.load(open(sys.argv[1]))
ids = json.loads(sys.argv[2])
handle = (r.get("kv_transfer_params") or {}).get("handle")
assert handle, f"no kv_transfer_params.handle: {r}"
assert r["choices"][0].get("prompt_token_ids") == ids, r["choices"][0]
meta = os.path.join(sys.argv[3], handle + ".meta.json")
for _ in range(200):  # the store write follows the response (vLLM's order too)
    if os.path.exists(meta):
        break
    time.sleep(0.05)
assert os.path.exists(meta), f"no committed sample {meta}: {os.listdir(sys.argv[3])}"
m = json.load(open(meta))
print("extract_hidden_states: handle", handle, "committed;", "manifest keys", sorted(m)[:6])
PY

# DSpark serving with the same connector: export stays opt-in per request.
start dspark '{"method": "dspark", "model": "'"$models/demo-dspark"'", "num_speculative_tokens": 8}'
post '{"model": "'"$models/demo"'", "prompt": '"$ids"', "max_tokens": 1, "return_token_ids": true}' > "$t/r2.json"
post '{"model": "'"$models/demo"'", "prompt": '"$ids"', "max_tokens": 1, "kv_transfer_params": {}}' > "$t/r3.json"
python3 - "$t/r2.json" "$t/r3.json" <<'PY'
import json, sys
plain, asked = (json.load(open(p)) for p in sys.argv[1:3])
assert "kv_transfer_params" not in plain, f"a request that did not ask was exported: {plain}"
assert (asked.get("kv_transfer_params") or {}).get("handle"), f"a request that asked got no handle: {asked}"
print("dspark: export opt-in per request")
PY
echo "speculators: ok"
