#!/usr/bin/env bash
# `dspark datagen prompts` on a real corpus (the Debian packages of scripts/corpus-deps.sh):
# every kind is there, the file is deterministic, and, at the drafter recipe's size, no training
# prompt shares an 8-word n-gram with the evaluation sets: the repository's demo prompt set
# (bench/prompts/demo.jsonl) always, and MT-Bench and Spec-Bench when they are in ../shared/data
# beside the checkout (else that part is left out, saying so); `datagen overlap` must catch a
# planted copy, and bad flags are refused.
#   prompt_mix_test.sh DSPARK DEMO_PROMPTS SHARED_DATA_DIR
set -euo pipefail
dspark="$1"
demo="$2"
shared="$3"
t="$(mktemp -d)"
trap 'rm -rf "$t"' EXIT
here="$(cd "$(dirname "$0")" && pwd)"

if ! bash "$here/../../scripts/corpus-deps.sh" --check > "$t/deps" 2>&1; then
  echo "SKIP: the corpus packages are missing ($(cat "$t/deps")); scripts/install-deps.sh installs them"
  exit 77
fi
[ -f "$demo" ] || { echo "the demo prompt set $demo is missing"; exit 1; }
evals="$demo"
if [ -f "$shared/spec_bench.jsonl" ] && [ -f "$shared/mt_bench.jsonl" ]; then
  have_shared=1
  evals="$evals,$shared/spec_bench.jsonl,$shared/mt_bench.jsonl"
else
  have_shared=0
  echo "note: Spec-Bench and MT-Bench are not at $shared: the training prompts are checked against the demo prompt set only"
fi

"$dspark" corpus build --out "$t/c" --seed 1 --no-install > /dev/null 2> "$t/log" || { cat "$t/log"; exit 1; }
# The size and seed of scripts/train-demo-drafters.sh (MIX_PROMPTS).
"$dspark" datagen prompts --corpus "$t/c" --count 40000 --seed 1 --out "$t/p.jsonl" > "$t/out"
"$dspark" datagen prompts --corpus "$t/c" --count 40000 --seed 1 --out "$t/p2.jsonl" > /dev/null
cmp -s "$t/p.jsonl" "$t/p2.jsonl" || { echo "the same corpus, count and seed gave two files"; exit 1; }
test "$(wc -l < "$t/p.jsonl")" -eq 40000 || { echo "not 40000 prompts"; exit 1; }
python3 - "$t/p.jsonl" <<'PY'
import json, sys, collections
kinds = collections.Counter()
two = 0
for line in open(sys.argv[1]):
    j = json.loads(line)
    kinds[j["kind"]] += 1
    turns = j.get("turns") or [j["prompt"]]
    assert all(isinstance(x, str) and x.strip() for x in turns), j
    two += len(turns) == 2
want = {"corpus_instruction", "manual", "manual_multi", "scripture", "words", "translate", "code", "math",
        "writing", "multi_turn"}
assert set(kinds) == want, sorted(kinds)
assert two == kinds["multi_turn"], (two, kinds["multi_turn"])
# any prefix is a mix: every kind in the first 1000
first = collections.Counter(json.loads(l)["kind"] for l in open(sys.argv[1]).readlines()[:1000])
assert set(first) == want, sorted(first)
PY

"$dspark" datagen overlap --prompts "$t/p.jsonl" --against "$evals" > "$t/ov" \
  || { echo "training prompts share an 8-word n-gram with the evaluation sets:"; cat "$t/ov"; exit 1; }
grep -q '^overlap: 0 of 40000' "$t/ov" || { cat "$t/ov"; exit 1; }

# A planted copy, re-cased and re-punctuated, is caught and named: a demo prompt (line 13), and
# a Spec-Bench prompt (line 201) when Spec-Bench is there.
plant() {  # plant EVAL_FILE LINE NAME
  python3 - "$1" "$2" "$t/p.jsonl" "$t/planted.jsonl" <<'PY'
import json, sys
rec = json.loads(open(sys.argv[1]).readlines()[int(sys.argv[2]) - 1])
copy = "Please help. " + rec["turns"][0].upper().replace(",", " ;")
lines = open(sys.argv[3]).readlines()[:100]
lines.insert(50, json.dumps({"kind": "writing", "prompt": copy}) + "\n")
open(sys.argv[4], "w").writelines(lines)
PY
  if "$dspark" datagen overlap --prompts "$t/planted.jsonl" --against "$evals" > "$t/ov2"; then
    echo "a planted copy of a $3 prompt went undetected"; cat "$t/ov2"; exit 1
  fi
  grep -q 'prompt 50 shares' "$t/ov2" && grep -q "$(basename "$1"):$2" "$t/ov2" || { cat "$t/ov2"; exit 1; }
}
plant "$demo" 13 "demo"
if [ "$have_shared" = 1 ]; then plant "$shared/spec_bench.jsonl" 201 "Spec-Bench"; fi

# --exclude replaces a prompt that copies an evaluation record by one of the same kind.
"$dspark" datagen prompts --corpus "$t/c" --count 100 --seed 3 --out "$t/small.jsonl" > /dev/null
python3 - "$t/small.jsonl" "$t/eval.jsonl" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
pick = next(j for j in lines if len((j.get("prompt") or j["turns"][0]).split()) >= 12)
open(sys.argv[2], "w").write(json.dumps({"question_id": 1, "category": "x", "turns": [pick.get("prompt") or pick["turns"][0]]}) + "\n")
PY
"$dspark" datagen prompts --corpus "$t/c" --count 100 --seed 3 --exclude "$t/eval.jsonl" --out "$t/small2.jsonl" > "$t/out"
grep -Eq '\(([1-9][0-9]*) replaced' "$t/out" || { echo "--exclude replaced nothing"; cat "$t/out"; exit 1; }
"$dspark" datagen overlap --prompts "$t/small2.jsonl" --against "$t/eval.jsonl" > /dev/null \
  || { echo "--exclude left a copy"; exit 1; }
test "$(wc -l < "$t/small2.jsonl")" -eq 100

# Errors name the flag or the file.
if "$dspark" datagen prompts --corpus "$t/c" --count 0 --out "$t/x" 2> "$t/err"; then echo "--count 0 accepted"; exit 1; fi
grep -q -- '--count' "$t/err" || { cat "$t/err"; exit 1; }
if "$dspark" datagen prompts --corpus "$t/nowhere" --count 5 --out "$t/x" 2> "$t/err"; then echo "a missing corpus accepted"; exit 1; fi
grep -q 'nowhere/instructions/train.jsonl' "$t/err" || { cat "$t/err"; exit 1; }
if "$dspark" datagen overlap --prompts "$t/p.jsonl" --against "$t/missing.jsonl" 2> "$t/err"; then echo "a missing eval file accepted"; exit 1; fi
grep -q 'missing.jsonl' "$t/err" || { cat "$t/err"; exit 1; }
echo "prompt mix: 40000 prompts, every kind, deterministic, no 8-word n-gram shared with $evals"
