#!/usr/bin/env bash
# --hf-overrides (vLLM's flag): rope_scaling and max_position_embeddings set without editing the
# checkpoint, the longest context derived as vLLM does (pretrained length x factor), and
# --max-model-len accepted up to it; bad overrides are refused naming the flag and the field.
set -euo pipefail
dspark="$1" models="$2"
model="$models/demo"
t="$(mktemp -d)"
trap 'rm -rf "$t"' EXIT
[ -f "$model/config.json" ] || { echo "no demo target in $models"; exit 1; }

yarn='{"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048}}'
"$dspark" model info --model "$model" --json > "$t/plain.json"
"$dspark" model info --model "$model" --json --hf-overrides "$yarn" > "$t/yarn.json"
"$dspark" model info --model "$model" --json --hf-overrides '{"max_position_embeddings": 4096}' > "$t/len.json"
python3 - "$t" <<'PY'
import json, math, sys
t = sys.argv[1]
plain, yarn, length = (json.load(open(f"{t}/{n}.json")) for n in ("plain", "yarn", "len"))
assert plain["max_model_len"] == 2048 and plain["rope_attention_factor"] == 1.0, plain
assert yarn["max_model_len"] == 8192, yarn["max_model_len"]
assert yarn["rope_scaling"]["rope_type"] == "yarn", yarn["rope_scaling"]
assert abs(yarn["rope_attention_factor"] - (0.1 * math.log(4) + 1)) < 1e-9, yarn["rope_attention_factor"]
assert length["max_model_len"] == 4096, length
print("max_model_len", plain["max_model_len"], "->", yarn["max_model_len"], "with YaRN x4")
PY

# Generation at the derived limit works; past it, --max-model-len is refused.
"$dspark" generate --model "$model" --hf-overrides "$yarn" --max-model-len 8192 --prompt "Tom has 15 apples." \
  --max-tokens 4 > "$t/out" 2> "$t/err" || { cat "$t/err"; exit 1; }
if "$dspark" generate --model "$model" --max-model-len 8192 --prompt "x" --max-tokens 1 > /dev/null 2> "$t/err"; then
  echo "--max-model-len 8192 accepted without the override"; exit 1
fi
grep -q -- "--max-model-len" "$t/err" || { cat "$t/err"; exit 1; }

expect_error() {  # expect_error WORD OVERRIDES: model info refuses and stderr names WORD
  if "$dspark" model info --model "$model" --hf-overrides "$2" > /dev/null 2> "$t/err"; then
    echo "accepted: $2"; exit 1
  fi
  grep -q -- "$1" "$t/err" || { echo "error does not name $1:"; cat "$t/err"; exit 1; }
}
expect_error "--hf-overrides" '{"rope_scaling": '
expect_error "--hf-overrides" '[1, 2]'
expect_error "su" '{"rope_scaling": {"rope_type": "su", "factor": 2}}'
expect_error "factor" '{"rope_scaling": {"rope_type": "yarn"}}'
expect_error "beta_fast" '{"rope_scaling": {"rope_type": "yarn", "factor": 4, "beta_fast": 1, "beta_slow": 2}}'
expect_error "max_position_embeddings" '{"max_position_embeddings": -1}'
grep -q "with --hf-overrides" "$t/err" || { echo "the error does not say the overrides were applied:"; cat "$t/err"; exit 1; }
echo "hf overrides: ok"
