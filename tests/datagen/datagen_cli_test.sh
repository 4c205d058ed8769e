#!/usr/bin/env bash
# `dspark datagen regenerate` and `dspark datagen hidden` end to end on a tiny random model:
# corpus prompts, batch independence, resume, --drafter layers, the manifest, error messages.
set -euo pipefail
dspark="$1"
t="$(mktemp -d)"
trap 'rm -rf "$t"' EXIT

"$dspark" model init --shape tiny-qwen3 --out "$t/m" > /dev/null
mkdir -p "$t/c/instructions"
for i in 0 1 2 3 4; do
  printf '{"text": "<|im_start|>user\\nQuestion %s?<|im_end|>\\n<|im_start|>assistant\\nAnswer.<|im_end|>\\n"}\n' "$i"
done > "$t/c/instructions/train.jsonl"

common=(--model "$t/m" --corpus "$t/c" --max-tokens 6 --seed 1 --dtype f32 --threads 1 --no-progress)
"$dspark" datagen regenerate "${common[@]}" --out "$t/b1.jsonl" --batch 1 > "$t/out1"
"$dspark" datagen regenerate "${common[@]}" --out "$t/b4.jsonl" --batch 4 > "$t/out4"
grep -q '5 generated' "$t/out4" || { echo "no summary"; cat "$t/out4"; exit 1; }
cmp "$t/b1.jsonl" "$t/b4.jsonl" || { echo "--batch changed the output"; exit 1; }
test -s "$t/b4.jsonl.meta.json"

# Resume after a crash mid-line.
head -c 300 "$t/b4.jsonl" > "$t/r.jsonl"
"$dspark" datagen regenerate "${common[@]}" --out "$t/r.jsonl" --batch 2 > /dev/null 2> "$t/log"
grep -q 'partial line' "$t/log" || { echo "no warning about the partial line"; cat "$t/log"; exit 1; }
cmp "$t/r.jsonl" "$t/b4.jsonl" || { echo "resumed file differs"; exit 1; }
# Resuming with another seed is refused.
if "$dspark" datagen regenerate "${common[@]}" --out "$t/r.jsonl" --seed 2 2> "$t/err"; then
  echo "a different seed was accepted"; exit 1
fi
grep -q 'seed' "$t/err" || { cat "$t/err"; exit 1; }
# --sample 2 of the 5 prompts answers prompts 0 and 2 (spread evenly, ids kept); it is a setting.
"$dspark" datagen regenerate "${common[@]}" --out "$t/s.jsonl" --sample 2 > "$t/outs"
grep -q '2 generated' "$t/outs" || { cat "$t/outs"; exit 1; }
python3 - "$t/s.jsonl" <<'PY'
import json, sys
ids = [json.loads(l)["id"] for l in open(sys.argv[1])]
assert ids == [0, 2], ids
PY
if "$dspark" datagen regenerate "${common[@]}" --out "$t/s.jsonl" --sample 3 2> "$t/err"; then
  echo "resuming with another --sample was accepted"; exit 1
fi
grep -q 'source' "$t/err" || { cat "$t/err"; exit 1; }
if "$dspark" datagen regenerate "${common[@]}" --out "$t/s2.jsonl" --sample 2 --limit 2 2> "$t/err"; then exit 1; fi
grep -q 'at most one of --limit and --sample' "$t/err" || { cat "$t/err"; exit 1; }

python3 - "$t/b4.jsonl" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
assert [r["id"] for r in recs] == list(range(5)), [r["id"] for r in recs]
for r in recs:
    assert len(r["input_ids"]) == len(r["loss_mask"])
    p = r["prompt_tokens"]
    assert r["loss_mask"] == [0] * p + [1] * (len(r["input_ids"]) - p)
    assert r["finish_reason"] in ("stop", "length")
PY

# Hidden states, layers from a z-lab DFlash drafter config (target_layer_ids 0-based).
python3 - "$t/m/config.json" "$t/d/config.json" <<'PY'
import json, os, sys
c = json.load(open(sys.argv[1]))
c["architectures"] = ["DFlashDraftModel"]
c["num_hidden_layers"] = 1
c["block_size"] = 4
c["num_target_layers"] = 2
c["dflash_config"] = {"mask_token_id": 0, "target_layer_ids": [0, 1]}
os.makedirs(os.path.dirname(sys.argv[2]), exist_ok=True)
json.dump(c, open(sys.argv[2], "w"))
PY
"$dspark" datagen hidden --model "$t/m" --data "$t/b4.jsonl" --drafter "$t/d" --out "$t/hs" --shard-size 2 \
  --dtype f32 --threads 1 --no-progress > "$t/out"
grep -q '5 written' "$t/out" || { cat "$t/out"; exit 1; }
python3 - "$t/hs" "$t/b4.jsonl" <<'PY'
import json, os, struct, sys, zlib
d = sys.argv[1]
m = json.load(open(os.path.join(d, "manifest.json")))
recs = [json.loads(l) for l in open(sys.argv[2])]
assert m["layer_ids"] == [0, 1] and m["speculators_layer_ids"] == [1, 2], m
assert m["complete"] and len(m["samples"]) == 5
for e, r in zip(m["samples"], recs):
    data = open(os.path.join(d, e["file"]), "rb").read()
    assert "%08x" % zlib.crc32(data) == e["crc32"], e
    n = struct.unpack("<Q", data[:8])[0]
    h = json.loads(data[8:8 + n])
    T = len(r["input_ids"])
    assert h["hidden_states"]["shape"] == [T, 3, 64] and h["hidden_states"]["dtype"] == "BF16", h
    assert h["token_ids"]["dtype"] == "I64" and h["loss_mask"]["dtype"] == "U8"
    assert e["tokens"] == T and e["loss_tokens"] == sum(r["loss_mask"])
assert os.path.exists(os.path.join(d, "shard-00002", "sample-000004.safetensors"))
PY
# Rerun: everything is skipped.
"$dspark" datagen hidden --model "$t/m" --data "$t/b4.jsonl" --layers 0,1 --out "$t/hs" --shard-size 2 \
  --dtype f32 --threads 1 --no-progress | grep -q '5 already done, 0 written'
# Another --data into a finished directory (5 samples, then 1 record) is refused, naming both
# files; the manifest stays as it was.
head -n 1 "$t/b4.jsonl" > "$t/one.jsonl"
cp "$t/hs/manifest.json" "$t/manifest.before"
if "$dspark" datagen hidden --model "$t/m" --data "$t/one.jsonl" --layers 0,1 --out "$t/hs" --shard-size 2 \
  --dtype f32 --threads 1 --no-progress > /dev/null 2> "$t/err"; then
  echo "another source was accepted"; exit 1
fi
grep -q "b4.jsonl" "$t/err" && grep -q "one.jsonl" "$t/err" || { cat "$t/err"; exit 1; }
cmp "$t/hs/manifest.json" "$t/manifest.before" || { echo "a refused run changed the manifest"; exit 1; }
# A record longer than max_position_embeddings is refused, naming the file and the record.
cp -r "$t/m" "$t/short"
python3 - "$t/short/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["max_position_embeddings"] = 8
json.dump(c, open(sys.argv[1], "w"))
PY
if "$dspark" datagen hidden --model "$t/short" --data "$t/b4.jsonl" --layers 0 --out "$t/z" --dtype f32 \
  --threads 1 --no-progress 2> "$t/err"; then
  echo "a record past max_position_embeddings was accepted"; exit 1
fi
grep -q "b4.jsonl: record 0" "$t/err" && grep -q "maximum model length of 8" "$t/err" || { cat "$t/err"; exit 1; }
# Errors.
if "$dspark" datagen hidden --model "$t/m" --data "$t/b4.jsonl" --layers 0,7 --out "$t/x" 2> "$t/err"; then exit 1; fi
grep -q 'outside' "$t/err" || { cat "$t/err"; exit 1; }
if "$dspark" datagen regenerate --model "$t/m" --out "$t/y.jsonl" 2> "$t/err"; then exit 1; fi
grep -q 'corpus' "$t/err" || { cat "$t/err"; exit 1; }
echo ok
