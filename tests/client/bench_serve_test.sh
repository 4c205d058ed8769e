#!/usr/bin/env bash
# dspark bench serve against a real dspark serve it starts: every request completes, the report
# has the latency table and the acceptance read from /metrics, and the JSON agrees.
set -euo pipefail
dspark=$1 models=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
spec='{"model": "'$models'/demo-dspark", "method": "dspark", "num_speculative_tokens": 8, "draft_sample_method": "probabilistic", "rejection_sample_method": "block", "enable_adaptive_verification": true}'
"$dspark" bench serve --model "$models/demo" --speculative-config "$spec" --threads 1 \
  --prompts "$models/demo-dspark/math_prompts.jsonl" --num-prompts 6 --max-concurrency 3 --max-tokens 24 --json "$out/r.json" > "$out/report.txt" 2>&1 || {
  cat "$out/report.txt"; echo "bench serve failed"; exit 1; }
for want in "Median TTFT" "Median TPOT" "Output token throughput" "Acceptance length"; do
  grep -q "$want" "$out/report.txt" || { cat "$out/report.txt"; echo "missing: $want"; exit 1; }
done
python3 - "$out/r.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
r = j["runs"][0] if "runs" in j else (j["points"][0] if "points" in j else j)
s = json.dumps(r)
def find(d, key):
    if isinstance(d, dict):
        if key in d: return d[key]
        for v in d.values():
            x = find(v, key)
            if x is not None: return x
    if isinstance(d, list):
        for v in d:
            x = find(v, key)
            if x is not None: return x
    return None
done, failed = find(r, "completed"), find(r, "failed")
assert done == 6 and failed == 0, f"completed {done}, failed {failed}"
acc = find(r, "acceptance_length")
assert acc is not None and acc >= 1.0, f"acceptance length {acc}"
print(f"bench serve: 6 of 6 completed, acceptance length {acc:.2f}")
PY
