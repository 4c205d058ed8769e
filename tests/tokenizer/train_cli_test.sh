#!/usr/bin/env bash
# Tests `dspark tokenizer train` and `dspark tokenizer stats`.
#   train_cli_test.sh DSPARK_BINARY
set -u
dspark=$1
failures=0
passes=0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

check() {  # check NAME EXPECTED ACTUAL
  if [ "$2" == "$3" ]; then
    passes=$((passes + 1))
  else
    failures=$((failures + 1))
    printf 'FAIL %s\n  expected: %q\n  actual:   %q\n' "$1" "$2" "$3"
  fi
}
status() { "$@" >/dev/null 2>&1; echo $?; }

# Some text: prose, code, numbers, special tokens.
for i in $(seq 1 300); do
  echo "The quick brown fox $i jumps over the lazy dog; speculative decoding drafts tokens."
  echo "def f$i(x):"
  printf '    return x * %d  # comment\n' "$i"
  echo "<|im_start|>user"
  echo "hello there, general kenobi<|im_end|>"
done >"$work/a.txt"
for i in $(seq 1 200); do echo "Zażółć gęślą jaźń, café naïve 日本語 🎉 $i"; done >"$work/b.txt"

check "help" 0 "$(status "$dspark" tokenizer --help)"
check "train help" 0 "$(status "$dspark" tokenizer train --help)"
check "no subcommand" 2 "$(status "$dspark" tokenizer)"
check "unknown subcommand" 1 "$(status "$dspark" tokenizer fly)"
check "no input" 1 "$(status "$dspark" tokenizer train --vocab-size 300 --out "$work/x/tokenizer.json")"
check "both inputs" 1 "$(status "$dspark" tokenizer train --corpus "$work" --input "$work/a.txt" --vocab-size 300 --out "$work/x/tokenizer.json")"
check "no out" 1 "$(status "$dspark" tokenizer train --input "$work/a.txt" --vocab-size 300)"
check "vocab too small" 1 "$(status "$dspark" tokenizer train --input "$work/a.txt" --vocab-size 200 --out "$work/x/tokenizer.json")"
msg=$("$dspark" tokenizer train --input "$work/missing.txt" --vocab-size 300 --out "$work/x/tokenizer.json" 2>&1)
case "$msg" in *missing.txt*) passes=$((passes + 1)) ;; *) failures=$((failures + 1)); echo "FAIL missing file message: $msg" ;; esac

# Several files after one --input; the files land next to each other.
"$dspark" tokenizer train --input "$work/a.txt" "$work/b.txt" --vocab-size 400 --out "$work/t1/tokenizer.json" 2>"$work/log1"
check "train exit" 0 "$?"
check "tokenizer.json written" yes "$([ -s "$work/t1/tokenizer.json" ] && echo yes)"
check "tokenizer_config.json written" yes "$([ -s "$work/t1/tokenizer_config.json" ] && echo yes)"
check "progress on stderr" yes "$(grep -q 'merges:' "$work/log1" && grep -q 'wrote ' "$work/log1" && echo yes)"
# 400 tokens: 384 learned, then <|endoftext|> 384 ... <|mask|> 387 ... <|reserved_11|> 399.
tok="$work/t1/tokenizer.json"
check "endoftext id" 384 "$(printf '<|endoftext|>' | "$dspark" tokenize --tokenizer "$tok")"
check "mask id" 387 "$(printf '<|mask|>' | "$dspark" tokenize --tokenizer "$tok")"
check "last reserved id" 399 "$(printf '<|reserved_11|>' | "$dspark" tokenize --tokenizer "$tok")"
check "learned word" 1 "$(printf ' jumps' | "$dspark" tokenize --tokenizer "$tok" --json | grep -o '"count":[0-9]*' | cut -d: -f2)"
text=$'def f7(x):\n    return x * 7  # comment\nZażółć 🎉'
check "round trip" "$text" "$(printf '%s' "$text" | "$dspark" tokenize --tokenizer "$tok" | "$dspark" tokenize --tokenizer "$tok" --decode)"

# Same input, same file (also with another thread count).
"$dspark" tokenizer train --input "$work/a.txt" "$work/b.txt" --vocab-size 400 --out "$work/t2/tokenizer.json" --threads 1 --quiet
check "deterministic" same "$(cmp -s "$work/t1/tokenizer.json" "$work/t2/tokenizer.json" && echo same)"
check "quiet" "" "$("$dspark" tokenizer train --input "$work/a.txt" --vocab-size 300 --out "$work/t3/tokenizer.json" --quiet 2>&1)"

# A corpus directory: DIR/<domain>/train.jsonl; stats on the validation split.
mkdir -p "$work/corpus/prose" "$work/corpus/code"
for i in $(seq 1 200); do
  printf '{"text": "The fox %d jumps over the dog.\\nAnother line here."}\n' "$i"
done >"$work/corpus/prose/train.jsonl"
for i in $(seq 1 200); do
  printf '{"text": "int main() {\\n    return %d;\\n}\\n"}\n' "$i"
done >"$work/corpus/code/train.jsonl"
printf '{"text": "The fox jumps over the dog."}\n' >"$work/corpus/prose/validation.jsonl"
printf '{"text": "int main() {\\n    return 0;\\n}\\n"}\n{"text": "int x;"}\n' >"$work/corpus/code/validation.jsonl"
"$dspark" tokenizer train --corpus "$work/corpus" --vocab-size 320 --out "$work/t4/tokenizer.json" --quiet
check "corpus train" 0 "$?"
stats=$("$dspark" tokenizer stats --tokenizer "$work/t4/tokenizer.json" --corpus "$work/corpus")
check "stats rows" "code prose all" "$(echo "$stats" | awk 'NR > 1 {print $1}' | xargs)"
check "stats documents" "2 1 3" "$(echo "$stats" | awk 'NR > 1 {print $2}' | xargs)"
check "stats compresses" yes "$(echo "$stats" | awk '$1 == "all" {print ($5 > 1.5) ? "yes" : "no"}')"
check "stats json" yes "$("$dspark" tokenizer stats --tokenizer "$work/t4/tokenizer.json" --input "$work/a.txt" --json | grep -q '"bytes_per_token"' && echo yes)"
check "corpus without the split" 1 "$(status "$dspark" tokenizer stats --tokenizer "$work/t4/tokenizer.json" --corpus "$work/corpus" --split test)"

echo "$passes passed, $failures failed"
[ "$failures" -eq 0 ]
