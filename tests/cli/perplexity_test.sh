#!/usr/bin/env bash
# `dspark model perplexity` on the demo target: in f32 it equals the trainer's `dspark train eval`
# (libtorch, an independent forward) on the same windows; quantized on load it moves a little and
# reports its greedy agreement with bf16; bad input is refused naming the flag or file.
#   perplexity_test.sh DSPARK MODELS_DIR TOKENIZER_FIXTURE [DSPARK_TRAIN]
set -euo pipefail
dspark="$1" models="$2" tiny_tok="$3" train="${4:-}"
here="$(cd "$(dirname "$0")" && pwd)"
t="$(mktemp -d)"
trap 'rm -rf "$t"' EXIT
model="$models/demo"
[ -f "$model/config.json" ] || { echo "no demo target in $models"; exit 1; }

"$dspark" corpus build --out "$t/c" --domains math --max-mb 0.05 --seed 5 --no-install > /dev/null 2>&1
"$dspark" corpus tokenize --corpus "$t/c" --tokenizer "$model/tokenizer.json" --out "$t/s" --threads 2 > /dev/null 2>&1

"$dspark" model perplexity --model "$model" --data "$t/s" --windows 3 --seq-len 96 --dtype f32 --json > "$t/f32.json"
"$dspark" model perplexity --model "$model" --data "$t/s" --windows 3 --seq-len 96 --json > "$t/bf16.json"
"$dspark" model perplexity --model "$model" --data "$t/s" --windows 3 --seq-len 96 --quantization q4_k \
  --agreement-with "$model" --json > "$t/q4k.json"
if [ -n "$train" ] && [ -x "$train" ]; then
  "$train" eval --model "$model" --data "$t/s" --windows 3 --seq-len 96 --threads 2 > "$t/torch.json"
else
  echo "{}" > "$t/torch.json"
  echo "dspark-train not built: the comparison with train eval is skipped"
fi
python3 - "$t" <<'PY'
import json, math, sys
t = sys.argv[1]
f32, bf16, q4k, ref = (json.load(open(f"{t}/{n}.json")) for n in ("f32", "bf16", "q4k", "torch"))
m = f32["math"]
assert m["windows"] == 3 and m["tokens"] == 3 * 96, m
assert abs(math.log(m["perplexity"]) - m["loss"]) < 1e-9, m
if ref:
    assert abs(m["loss"] - ref["math"]["loss"]) < 2e-4, (m, ref["math"])  # f32 vs libtorch f32
    print(f"f32 loss {m['loss']:.6f}, train eval {ref['math']['loss']:.6f}")
assert abs(bf16["math"]["loss"] - m["loss"]) < 0.05 * m["loss"] + 0.01, (bf16, m)
q = q4k["math"]
assert q["loss"] != bf16["math"]["loss"], "quantization changed nothing"
assert abs(q["loss"] - m["loss"]) < 0.25 * m["loss"] + 0.05, (q, m)
assert 0.5 < q["greedy_agreement"] <= 1.0, q
assert "greedy_agreement" not in bf16["math"]
print(f"bf16 loss {bf16['math']['loss']:.4f}, q4_k loss {q['loss']:.4f}, agreement {q['greedy_agreement']:.3f}")
PY

# Bad input names what is wrong.
expect_error() {  # expect_error WORD ARGS...: the command fails and stderr names WORD
  local word="$1"; shift
  if "$dspark" model perplexity "$@" > /dev/null 2> "$t/err"; then echo "accepted: $*"; exit 1; fi
  grep -q -- "$word" "$t/err" || { echo "error does not name $word:"; cat "$t/err"; exit 1; }
}
expect_error "--seq-len" --model "$model" --data "$t/s" --seq-len 4096
expect_error "--windows" --model "$model" --data "$t/s" --windows 0
expect_error "$t/none" --model "$model" --data "$t/none"
expect_error "--data" --model "$model"
expect_error "$t/none" --model "$model" --data "$t/s" --agreement-with "$t/none"
# The repository's tiny tokenizer (plus <|endoftext|>, which tokenize needs): not the model's.
python3 "$here/../data/with_endoftext.py" "$tiny_tok" "$t/tok.json"
"$dspark" corpus tokenize --corpus "$t/c" --tokenizer "$t/tok.json" --out "$t/other" --threads 2 > /dev/null 2>&1
expect_error "tokenizer" --model "$model" --data "$t/other"
echo "model perplexity: ok"
