#!/usr/bin/env bash
# A GGUF target through the command line: the demo target written as one GGUF file (BF16
# matrices, by tests/reference/gguf_reference.py) gives, at --dtype f32, the same tokens as its HF
# directory, alone and with its DSpark drafter; `model info` and `tokenize` read it; a directory
# holding it stands for it; a truncated copy and a second .gguf beside it are refused naming the file;
# --quantization q4_k on load (model info, lossless speculation on the quantized target).
#   gguf_cli_test.sh DSPARK_BINARY MODELS_DIR PYTHON REFERENCE_SCRIPT
set -u
dspark=$1 models=$2 python=$3 script=$4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
passes=0 failures=0
check() {  # check NAME EXPECTED ACTUAL
  if [ "$2" == "$3" ]; then passes=$((passes + 1)); else
    failures=$((failures + 1)); printf 'FAIL %s:\n  want %s\n  got  %s\n' "$1" "$2" "$3"; fi
}
contains() {  # contains NAME FRAGMENT TEXT
  if [[ "$3" == *"$2"* ]]; then passes=$((passes + 1)); else
    failures=$((failures + 1)); printf 'FAIL %s: lacks %q\n  %s\n' "$1" "$2" "$3"; fi
}

jget() {  # jget PATH: a field of the JSON on stdin, compact (strings bare)
  "$python" -c "import json, sys; v = json.load(sys.stdin)$1; print(v if isinstance(v, str) else json.dumps(v, separators=(',', ':')))"
}

mkdir -p "$work/dir"
"$python" "$script" --convert "$models/demo=$work/dir/demo.gguf" >/dev/null || { echo "FAIL: conversion"; exit 1; }
gguf=$work/dir/demo.gguf

info=$("$dspark" model info --model "$gguf" --json)
check "model info format" "gguf v3" "$(jget "['source_format']" <<<"$info")"
check "model info types" '{"BF16":43,"F32":25}' "$(jget "['tensor_types']" <<<"$info")"
check "model info vocab" "8192" "$(jget "['tokenizer_vocab']" <<<"$info")"

text='Tom has 12 apples and buys 30 more. How many apples does he have? 日本語 ünïcode'
check "tokenize" "$("$dspark" tokenize --model "$models/demo" <<<"$text")" "$("$dspark" tokenize --model "$gguf" <<<"$text")"

spec='{"model": "'$models/demo-dspark'", "method": "dspark", "num_speculative_tokens": 8}'
for prompt in "Tom has 12 apples and buys 30 more. How many apples does he have?" "Write a haiku about the sea."; do
  want=$("$dspark" generate --model "$models/demo" --dtype f32 --chat --prompt "$prompt" --max-tokens 40 --json | jget "['token_ids']")
  check "plain: $prompt" "$want" "$("$dspark" generate --model "$gguf" --dtype f32 --chat --prompt "$prompt" --max-tokens 40 --json | jget "['token_ids']")"
  check "dspark: $prompt" "$want" "$("$dspark" generate --model "$work/dir" --dtype f32 --chat --prompt "$prompt" --max-tokens 40 --json --speculative-config "$spec" | jget "['token_ids']")"
done

# --quantization q4_k on load: the demo's 1,408-wide down_proj rows fall back to Q5_0, the tied
# embedding (the output head) is kept in Q6_K, and speculative greedy output on the quantized
# target equals its plain greedy output.
info=$("$dspark" model info --model "$models/demo" --quantization q4_k --json)
check "q4_k on load: types" '{"Q4_K":36,"Q5_0":6,"Q6_K":1}' "$(jget "['quantized_to']" <<<"$info")"
check "q4_k on load: fallbacks" "6" "$(jget "['quantization_fallbacks'].__len__()" <<<"$info")"
check "q4_k on load: the output head" 'Q6_K' "$(jget "['output_head_type']" <<<"$info")"
check "q4_k on load: held for the quantized kernels" '{"Q4_K":36,"Q5_0":6,"Q6_K":1}' "$(jget "['held_as']" <<<"$info")"
info=$("$dspark" model info --model "$models/demo" --quantization q4_k --dtype f32 --json)
check "q4_k on load, f32: held dequantized" '{"F32":43}' "$(jget "['held_as']" <<<"$info")"
prompt="Tom has 12 apples and buys 30 more. How many apples does he have?"
q_plain=$("$dspark" generate --model "$models/demo" --quantization q4_k --dtype f32 --chat --prompt "$prompt" --max-tokens 40 --json | jget "['token_ids']")
check "q4_k: dspark equals plain" "$q_plain" "$("$dspark" generate --model "$models/demo" --quantization q4_k --dtype f32 --chat --prompt "$prompt" --max-tokens 40 --json --speculative-config "$spec" | jget "['token_ids']")"
q_plain=$("$dspark" generate --model "$models/demo" --quantization q4_k --chat --prompt "$prompt" --max-tokens 40 --json | jget "['token_ids']")
check "q4_k, default precision: dspark equals plain" "$q_plain" "$("$dspark" generate --model "$models/demo" --quantization q4_k --chat --prompt "$prompt" --max-tokens 40 --json --speculative-config "$spec" | jget "['token_ids']")"
err=$("$dspark" generate --model "$models/demo" --quantization q2_k --prompt hi 2>&1 >/dev/null); rc=$?
check "bad --quantization: exit 1" "1" "$rc"
contains "bad --quantization: names the flag" "flag --quantization" "$err"

head -c 30000000 "$gguf" > "$work/cut.gguf"
err=$("$dspark" generate --model "$work/cut.gguf" --prompt hi 2>&1 >/dev/null); rc=$?
check "truncated: exit 1" "1" "$rc"
contains "truncated: names the file and a tensor" "$work/cut.gguf: tensor '" "$err"
cp "$gguf" "$work/dir/other.gguf"
err=$("$dspark" generate --model "$work/dir" --prompt hi 2>&1 >/dev/null); rc=$?
check "two files: exit 1" "1" "$rc"
contains "two files: names them" "holds 2 .gguf files" "$err"

echo "gguf_cli: $passes passed, $failures failed"
[ "$failures" -eq 0 ]
