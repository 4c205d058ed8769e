#!/usr/bin/env bash
# Tests `dspark tokenize` on a small tokenizer.json.
#   cli_test.sh DSPARK_BINARY DATA_DIR
# DATA_DIR/tiny_tokenizer.json: 256 byte tokens, merges that make "Hello" (259) and
# " world" (264), added tokens <|begin_of_text|> (300, added by the post-processor),
# <|im_start|> (301), <|im_end|> (302), <think> (303, not special); NFC normalizer.
set -u
dspark=$1
data=$2
tok="$data/tiny_tokenizer.json"
failures=0
passes=0

check() {  # check NAME EXPECTED ACTUAL
  if [ "$2" == "$3" ]; then
    passes=$((passes + 1))
  else
    failures=$((failures + 1))
    printf 'FAIL %s\n  expected: %q\n  actual:   %q\n' "$1" "$2" "$3"
  fi
}

check "encode" "259 264" "$(printf 'Hello world' | "$dspark" tokenize --tokenizer "$tok")"
check "encode json" '{"ids":[259,264],"count":2}' "$(printf 'Hello world' | "$dspark" tokenize --tokenizer "$tok" --json)"
check "add special tokens" "300 259 264" "$(printf 'Hello world' | "$dspark" tokenize --tokenizer "$tok" --add-special-tokens)"
check "literal special token" "301 259 302" "$(printf '<|im_start|>Hello<|im_end|>' | "$dspark" tokenize --tokenizer "$tok")"
check "empty input" "" "$(printf '' | "$dspark" tokenize --tokenizer "$tok")"
check "empty input json" '{"ids":[],"count":0}' "$(printf '' | "$dspark" tokenize --tokenizer "$tok" --json)"

# --model DIR reads DIR/tokenizer.json.
model_dir=$(mktemp -d)
trap 'rm -rf "$model_dir"' EXIT
cp "$tok" "$model_dir/tokenizer.json"
check "model dir" "259 264" "$(printf 'Hello world' | "$dspark" tokenize --model "$model_dir")"

# NFC: e + U+0301 encodes like U+00E9 (bytes C3 A9).
check "nfc" "195 169" "$(printf 'e\xcc\x81' | "$dspark" tokenize --tokenizer "$tok")"

# Decoding: whitespace-separated ids, a JSON array, or the --json output.
check "decode ids" "Hello world" "$(printf '259 264\n' | "$dspark" tokenize --tokenizer "$tok" --decode)"
check "decode json array" "Hello world" "$(printf '[259, 264]' | "$dspark" tokenize --tokenizer "$tok" --decode)"
check "decode json object" "Hello world" "$(printf '{"ids":[259,264],"count":2}' | "$dspark" tokenize --tokenizer "$tok" --decode)"
check "decode specials" "<|im_start|>Hello<|im_end|>" "$(printf '301 259 302' | "$dspark" tokenize --tokenizer "$tok" --decode)"
check "decode skip specials" "Hello<think>" "$(printf '301 259 302 303' | "$dspark" tokenize --tokenizer "$tok" --decode --skip-special-tokens)"
check "decode partial utf8" $'\xef\xbf\xbd' "$(printf '228 184' | "$dspark" tokenize --tokenizer "$tok" --decode)"
check "decode json output" '{"text":"Hello world"}' "$(printf '259 264' | "$dspark" tokenize --tokenizer "$tok" --decode --json)"
text=$'Hi there,\tCaf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x98\x80\r\n  <|im_end|> end'
check "round trip" "$text" "$(printf '%s' "$text" | "$dspark" tokenize --tokenizer "$tok" | "$dspark" tokenize --tokenizer "$tok" --decode)"

# --help succeeds; errors exit 1 with a message naming the problem.
out=$("$dspark" tokenize --help); rc=$?
check "help rc" "0" "$rc"
case "$out" in *"usage: dspark tokenize"*"--decode"*) passes=$((passes + 1)) ;; *) failures=$((failures + 1)); echo "FAIL help text: $out" ;; esac

expect_error() {  # expect_error NAME NEEDLE INPUT ARGS...
  local name=$1 needle=$2 input=$3
  shift 3
  local err rc
  err=$(printf '%s' "$input" | "$dspark" tokenize "$@" 2>&1 >/dev/null); rc=$?
  if [ "$rc" -ne 0 ] && [[ "$err" == *"$needle"* ]]; then
    passes=$((passes + 1))
  else
    failures=$((failures + 1))
    printf 'FAIL %s: rc=%s stderr=%q (wanted %q)\n' "$name" "$rc" "$err" "$needle"
  fi
}
expect_error "no tokenizer" "--model" "x"
expect_error "both sources" "exactly one" "x" --model "$model_dir" --tokenizer "$tok"
expect_error "missing file" "/nonexistent/tokenizer.json" "x" --model /nonexistent
expect_error "bad id" "'abc' is not a token id" "1 abc" --tokenizer "$tok" --decode
expect_error "unknown id" "999999" "999999" --tokenizer "$tok" --decode
expect_error "bad json ids" "not an integer" '[1, "x"]' --tokenizer "$tok" --decode
expect_error "unknown flag" "--bogus" "x" --tokenizer "$tok" --bogus

echo "$passes passed, $failures failed"
[ "$failures" -eq 0 ]
