#!/usr/bin/env bash
# `dspark corpus build` / `dspark corpus tokenize` end to end on the generated math domain
# (no packages needed), and their error messages.
set -euo pipefail
dspark="$1"
here="$(cd "$(dirname "$0")" && pwd)"
t="$(mktemp -d)"
trap 'rm -rf "$t"' EXIT

"$dspark" corpus build --out "$t/c" --domains math --max-mb 0.05 --seed 5 --no-install > "$t/out" 2> "$t/log"
grep -q '^math ' "$t/out" || { echo "no summary line for math"; cat "$t/out"; exit 1; }
for f in math/train.jsonl math/validation.jsonl math/test.jsonl prompts/math.jsonl manifest.json; do
  test -e "$t/c/$f" || { echo "missing $f"; exit 1; }
done
"$dspark" corpus build --out "$t/c" --domains math --max-mb 0.05 --seed 5 --no-install 2> /dev/null | grep -q 'up to date' \
  || { echo "second build was not up to date"; exit 1; }

# The repository's tiny tokenizer plus <|endoftext|>.
python3 "$here/with_endoftext.py" "$here/../tokenizer/data/tiny_tokenizer.json" "$t/tok.json"
"$dspark" corpus tokenize --corpus "$t/c" --tokenizer "$t/tok.json" --out "$t/s" --threads 2 > "$t/out" 2> "$t/log"
grep -q 'tokens' "$t/out"
test -s "$t/s/math/train.bin" && test -s "$t/s/manifest.json"
python3 - "$t/s/manifest.json" "$t/s" <<'PY'
import json, os, sys, zlib
m = json.load(open(sys.argv[1]))
assert m["dtype"] == "uint16", m["dtype"]
for d in m["domains"]:
    for split, s in d["splits"].items():
        data = open(os.path.join(sys.argv[2], s["file"]), "rb").read()
        assert len(data) == 2 * s["tokens"], (s, len(data))
        assert "%08x" % zlib.crc32(data) == s["crc32"], s
PY

# Errors name what is wrong.
if "$dspark" corpus tokenize --corpus "$t/nope" --tokenizer "$t/tok.json" --out "$t/s2" 2> "$t/err"; then
  echo "tokenize of a missing corpus succeeded"; exit 1
fi
grep -q "$t/nope/manifest.json" "$t/err" || { cat "$t/err"; exit 1; }
if "$dspark" corpus build --out "$t/d" --domains poetry 2> "$t/err"; then echo "unknown domain accepted"; exit 1; fi
grep -q "poetry" "$t/err" || { cat "$t/err"; exit 1; }
if "$dspark" corpus build 2> "$t/err"; then echo "build without --out succeeded"; exit 1; fi
grep -q -- "--out" "$t/err" || { cat "$t/err"; exit 1; }
"$dspark" corpus --help | grep -q tokenize
echo "corpus CLI: ok"
