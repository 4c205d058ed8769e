#!/usr/bin/env bash
# TTFT with and without automatic prefix caching: `dspark bench serve --dataset-name
# prefix_repetition` (questions about a few long documents; the warm-ups put each prefix in the
# cache) against a server with the default caching and one with --no-enable-prefix-caching,
# one request at a time, then the ratio of the median TTFTs.
#   scripts/bench-prefix-cache.sh [--model DIR] [--prefix-len TOKENS] [--prompts N] [-- SERVE_ARGS...]
# The default is the demo target stretched to 32,768 positions with YaRN x16, and a 16,384-token
# prefix: the uncached TTFT is that prefill.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=models/demo
PREFIX=16384
PROMPTS=6
EXTRA=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --model) MODEL="$2"; shift 2 ;;
    --prefix-len) PREFIX="$2"; shift 2 ;;
    --prompts) PROMPTS="$2"; shift 2 ;;
    --) shift; EXTRA=("$@"); break ;;
    *) echo "bench-prefix-cache.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
BIN=${DSPARK:-build/dspark}
[[ -x "$BIN" ]] || { echo "bench-prefix-cache.sh: $BIN is not built (make build)" >&2; exit 1; }
if [[ "$MODEL" == models/demo && ${#EXTRA[@]} -eq 0 ]]; then
  EXTRA=(--hf-overrides '{"rope_scaling": {"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 2048}}')
fi
SERVE=()
for a in "${EXTRA[@]}"; do SERVE+=("--serve-arg=$a"); done
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
run() {  # name, more serve args
  local name=$1; shift
  "$BIN" bench serve --model "$MODEL" "${SERVE[@]}" "$@" --dataset-name prefix_repetition \
    --prefix-repetition-prefix-len "$PREFIX" --prefix-repetition-suffix-len 32 \
    --prefix-repetition-num-prefixes 2 --num-prompts "$PROMPTS" --max-concurrency 1 \
    --max-tokens 8 --endpoint /v1/completions --json "$OUT/$name.json" > "$OUT/$name.txt" 2>&1 ||
    { cat "$OUT/$name.txt" >&2; exit 1; }
}
run cached
run uncached --serve-arg=--no-enable-prefix-caching
python3 - "$OUT" "$PREFIX" <<'PY'
import json, sys
d, prefix = sys.argv[1], sys.argv[2]
r = {k: json.load(open(f"{d}/{k}.json")) for k in ("cached", "uncached")}
med = {k: v["ttft_ms"]["median"] for k, v in r.items()}
print(f"prefix {prefix} tokens, {r['cached']['completed']} requests each, one at a time")
print("| prefix caching | median TTFT (ms) | mean input tokens |")
print("|---|---|---|")
for k in ("uncached", "cached"):
    v = r[k]
    print(f"| {'on' if k == 'cached' else 'off'} | {med[k]:.1f} | {v['total_input_tokens'] / max(v['completed'], 1):.0f} |")
print(f"cached / uncached median TTFT: {med['cached'] / med['uncached']:.4f}")
PY
