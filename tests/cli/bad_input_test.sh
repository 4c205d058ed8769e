#!/usr/bin/env bash
# Bad input across the commands (issue 18's probe): each case must exit non-zero by itself (not
# by a signal, not by the time-out that guards against hangs) with a message that names the flag,
# field, variable or file. Also the length rule end to end: prompts over the maximum model length
# are refused before any work, and generation that reaches it ends with finish_reason "length".
#   bad_input_test.sh DSPARK_BINARY MODELS_DIR
set -u
dspark=$1
models=$2
target=$models/demo
drafter=$models/demo-dspark
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
passes=0
failures=0
spec='{"model": "'$drafter'", "method": "dspark", "num_speculative_tokens": 8}'

# refused NAME FRAGMENT [ENV=VALUE ...] -- ARGS...: non-zero exit below 124, FRAGMENT in stderr.
refused() {
  local name=$1 fragment=$2
  shift 2
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  local err rc
  err=$(env "${envs[@]}" timeout 120 "$dspark" "$@" 2>&1 >/dev/null)
  rc=$?
  if [ $rc -eq 0 ] || [ $rc -ge 124 ]; then
    failures=$((failures + 1))
    printf 'FAIL %s: exit %d (want a plain non-zero exit)\n  %s\n' "$name" "$rc" "$err"
  elif [[ "$err" != *"$fragment"* ]]; then
    failures=$((failures + 1))
    printf 'FAIL %s: message lacks %q\n  %s\n' "$name" "$fragment" "$err"
  else
    passes=$((passes + 1))
  fi
}

check() {  # check NAME EXPECTED ACTUAL
  if [ "$2" == "$3" ]; then
    passes=$((passes + 1))
  else
    failures=$((failures + 1))
    printf 'FAIL %s\n  expected: %q\n  actual:   %q\n' "$1" "$2" "$3"
  fi
}

gen=(generate --model "$target" --max-tokens 4)

# --- integer and number flags: parsed once, range-checked, never narrowed
refused "max-tokens 2^32+8" "flag --max-tokens must be from 0 to 2147483647, got 4294967304" -- "${gen[@]}" --prompt hi --max-tokens 4294967304
refused "max-tokens 2^31" "flag --max-tokens must be from 0" -- "${gen[@]}" --prompt hi --max-tokens 2147483648
refused "top-k 2^32-3" "flag --top-k must be from 0" -- "${gen[@]}" --prompt hi --top-k 4294967293
refused "temperature nan" "flag --temperature expects a finite number" -- "${gen[@]}" --prompt hi --temperature nan
refused "top-p 0" "flag --top-p must be in (0, 1]" -- "${gen[@]}" --prompt hi --top-p 0
refused "seed -1" "flag --seed must be from 0" -- "${gen[@]}" --prompt hi --seed -1
refused "presence-penalty 3" "flag --presence-penalty must be from -2 to 2" -- "${gen[@]}" --prompt hi --presence-penalty 3
refused "repetition-penalty 0" "flag --repetition-penalty must be > 0" -- "${gen[@]}" --prompt hi --repetition-penalty 0
refused "response-format not JSON" "flag --response-format: not valid JSON" -- "${gen[@]}" --prompt hi --response-format '{'
refused "response-format type" "flag --response-format: 'response_format.type' must be" -- "${gen[@]}" --prompt hi \
  --response-format '{"type": "xml"}'
refused "response-format pattern" 'unsupported keyword "pattern"' -- "${gen[@]}" --prompt hi \
  --response-format '{"type": "json_schema", "json_schema": {"schema": {"type": "string", "pattern": "a"}}}'
refused "kv-tokens huge" "flag --kv-tokens must be from" -- "${gen[@]}" --prompt hi --kv-tokens 99999999999
refused "threads 1e9" "flag --threads must be from 0 to 1024" -- "${gen[@]}" --prompt hi --threads 1000000000
refused "bench spec limit 2^32+1" "flag --limit must be from 0" -- bench spec --model "$target" --speculative-config "$spec" \
  --prompts "$drafter/math_prompts.jsonl" --limit 4294967297
refused "datagen hidden shard-size 0" "flag --shard-size must be from 1" -- datagen hidden --model "$target" --layers 1 \
  --data "$work/none.jsonl" --out "$work/h" --shard-size 0
refused "datagen layers" "flag --layers expects integers" -- datagen hidden --model "$target" --layers 1,,2 \
  --data "$work/none.jsonl" --out "$work/h"

# --- bench step: a crash (empty median) and unbounded memory
for reps in 0 -1 4294967296; do
  refused "bench step --reps $reps" "flag --reps must be from 1" -- bench step --model "$target" --reps $reps \
    --prefill-tokens 0 --contexts 16 --batches 1 --tokens 1
done
refused "bench step --contexts 1e9" "flag --contexts expects integers from 1 to" -- bench step --model "$target" \
  --contexts 1000000000 --batches 1 --tokens 1 --prefill-tokens 0
refused "bench step memory" "GiB of KV cache and activations" -- bench step --model "$target" --contexts 16000000 \
  --batches 64 --tokens 1 --prefill-tokens 0
refused "bench step --gemm" "flag --gemm must be auto, reference, avx2, avx512bf16 or onednn" -- bench step \
  --model "$target" --gemm fast

# --- the length rule
head -c 1000000 /dev/zero | tr '\0' 'a' | fold -w 80 > "$work/big.txt"
refused "1 MB prompt" "which leaves no room to generate under the maximum model length of 2048" -- "${gen[@]}" \
  --prompt-file "$work/big.txt"
refused "1 MB prompt, speculative" "maximum model length of 2048" -- "${gen[@]}" --prompt-file "$work/big.txt" \
  --speculative-config "$spec"
refused "max-model-len over the config" "--max-model-len 4096 exceeds the model's max_position_embeddings 2048" -- \
  "${gen[@]}" --prompt hi --max-model-len 4096
python3 - "$work/big.txt" "$work/long.jsonl" <<'PY'
import json, sys
text = open(sys.argv[1]).read()[:20000]
with open(sys.argv[2], "w") as f:
    f.write(json.dumps({"prompt": "short one"}) + "\n")
    f.write(json.dumps({"prompt": text}) + "\n")
PY
refused "bench spec long prompt" "long.jsonl: prompt 2 (all): the prompt has" -- bench spec --model "$target" \
  --speculative-config "$spec" --prompts "$work/long.jsonl"
refused "calibrate long prompt" "long.jsonl: prompt 2: the prompt has" -- calibrate --model "$target" --drafter "$drafter" \
  --prompts "$work/long.jsonl" --max-tokens 4 --dry-run
for side in plain spec; do
  extra=()
  [ $side = spec ] && extra=(--speculative-config "$spec")
  out=$("$dspark" generate --model "$target" --prompt "Tom has 15 apples" --max-model-len 12 --max-tokens 100 --json \
        "${extra[@]}" | python3 -c 'import json,sys; j=json.load(sys.stdin); print(j["prompt_tokens"] + j["completion_tokens"], j["finish_reason"])')
  check "generation stops at --max-model-len ($side)" "12 length" "$out"
done

# --- files, directories and environment variables
refused "prompt-file is a directory" "$work: is a directory" -- "${gen[@]}" --prompt-file "$work"
refused "bench spec prompts is a directory" "$work: is a directory" -- bench spec --model "$target" \
  --speculative-config "$spec" --prompts "$work"
mkdir -p "$work/cfgdir/config.json"
refused "config.json is a directory" "config.json: is a directory" -- model info --model "$work/cfgdir"
refused "DSPARK_THREADS=abc" "environment variable DSPARK_THREADS must be an integer" DSPARK_THREADS=abc -- "${gen[@]}" --prompt hi
refused "DSPARK_GEMM=fast" "environment variable DSPARK_GEMM must be auto, reference, avx2, avx512bf16 or onednn" \
  DSPARK_GEMM=fast -- "${gen[@]}" --prompt hi
if grep -qw avx512_bf16 /proc/cpuinfo; then
  echo "note: this CPU has AVX512-BF16, so DSPARK_GEMM=avx512bf16 is valid here; its refusal is checked on CPUs without it"
else
  refused "DSPARK_GEMM=avx512bf16 on this CPU" "environment variable DSPARK_GEMM=avx512bf16: gemm backend avx512bf16 needs" \
    DSPARK_GEMM=avx512bf16 -- "${gen[@]}" --prompt hi
fi
refused "--system without --chat" "flag --system needs --chat" -- "${gen[@]}" --prompt hi --system "be brief"

# --- speculative settings whose length must match the block
refused "sps curve length" "field 'dspark_sps_curve' has 2 entries but needs at least 9" -- "${gen[@]}" --prompt hi \
  --speculative-config '{"model": "'$drafter'", "num_speculative_tokens": 8, "enable_adaptive_verification": true, "dspark_sps_curve": [100, 60]}'
cp -r "$drafter" "$work/drafter"
python3 -c 'import json,sys; p=sys.argv[1]; c=json.load(open(p)); c["sts_temperatures"]=c["sts_temperatures"][:3]; json.dump(c, open(p,"w"))' \
  "$work/drafter/config.json"
refused "sts_temperatures length" "field 'sts_temperatures' has 3 entries but the block has 8" -- "${gen[@]}" --prompt hi \
  --speculative-config '{"model": "'$work/drafter'"}'
refused "calibrate --draft-sample beam" "flag --draft-sample must be greedy or probabilistic, got 'beam'" -- calibrate \
  --model "$target" --drafter "$drafter" --prompts "$drafter/math_prompts.jsonl" --draft-sample beam

# --- bench serve: flags and settings refused before any timed request (port 9: nothing listens)
srv=(bench serve --base-url http://127.0.0.1:9 --prompts "$drafter/math_prompts.jsonl")
refused "bench serve --max-concurrency -1" "flag --max-concurrency must be from 0" -- "${srv[@]}" --max-concurrency -1
refused "bench serve --request-rate 0" "flag --request-rate must be > 0 or inf" -- "${srv[@]}" --request-rate 0
refused "bench serve --request-rate nan" "flag --request-rate expects a finite number" -- "${srv[@]}" --request-rate nan
refused "bench serve --endpoint" "flag --endpoint must be /v1/chat/completions or /v1/completions" -- "${srv[@]}" \
  --endpoint /v1/embeddings
refused "bench serve --sweep 0" "flag --sweep expects integers from 1" -- "${srv[@]}" --sweep 0,1
refused "bench serve https" "flag --base-url: 'https://x' is not an http:// URL" -- bench serve --base-url https://x
refused "bench serve --model and --base-url" "give one of --model and --base-url" -- "${srv[@]}" --model "$target"
refused "bench serve --plot without --sweep" "flag --plot needs --sweep" -- "${srv[@]}" --plot "$work/p.svg"
refused "bench serve --sweep-rounds without --sweep" "flag --sweep-rounds needs --sweep" -- "${srv[@]}" \
  --sweep-rounds 3
refused "bench serve --sweep-rounds 0" "flag --sweep-rounds" -- "${srv[@]}" --sweep 1 --sweep-rounds 0
refused "bench serve --threads with --base-url" "flag --threads applies to a server started with --model" -- \
  "${srv[@]}" --threads 2
refused "bench serve --json unwritable" "flag --json: cannot write" -- "${srv[@]}" --json "$work/nodir/x.json"
refused "bench serve no server" "cannot connect (is the server running?)" -- "${srv[@]}"
refused "bench serve --prompts is a directory" "$work: is a directory" -- "${srv[@]}" --prompts "$work"
refused "bench serve bad speculative config" "field 'num_speculative_tokens'" -- bench serve --model "$target" \
  --prompts "$drafter/math_prompts.jsonl" --speculative-config '{"model": "'$drafter'", "num_speculative_tokens": -3}'
refused "bench serve --sweep-configs field" "flag --sweep-configs entry 0: unknown field 'x'" -- "${srv[@]}" --sweep 1 \
  --sweep-configs '[{"name": "a", "x": 1}]'

# --- model init never overwrites a model silently
"$dspark" model init --shape tiny-qwen3 --out "$work/m" 2>/dev/null
before=$(sha1sum "$work/m/model.safetensors")
refused "model init over a model" "already holds a model (config.json); give --force" -- model init --shape tiny-qwen3 \
  --out "$work/m" --seed 5
check "the refused init left the model as it was" "$before" "$(sha1sum "$work/m/model.safetensors")"
"$dspark" model init --shape tiny-qwen3 --out "$work/m" --seed 5 --force 2>/dev/null
check "--force overwrites" "changed" "$([ "$before" != "$(sha1sum "$work/m/model.safetensors")" ] && echo changed)"

echo "$passes passed, $failures failed"
[ $failures -eq 0 ]
