#!/usr/bin/env python3
"""Share of the target's output tokens outside a drafter's draft vocabulary, per category.

  scripts/draft_vocab_coverage.py --drafter models/demo-dspark --model models/demo \
      --outputs outputs.jsonl [--dspark build/dspark] [--json]

OUTPUTS is `dspark bench spec --outputs FILE`: one line per prompt with its category and the
plain (non-speculative) output, as ids ("plain_token_ids") or text ("plain_text", re-tokenized with
`dspark tokenize`). A token outside the draft vocabulary can never be drafted, so this share is
acceptance that no draft can win back.
"""
import argparse, json, struct, subprocess, sys
from collections import defaultdict



def draft_ids(drafter):
    path = f"{drafter}/model.safetensors"
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        if "d2t" not in header:
            sys.exit(f"{path}: no d2t tensor (the drafter has no draft vocabulary)")
        info = header["d2t"]
        if info["dtype"] != "I64":
            sys.exit(f"{path}: d2t is {info['dtype']}, expected I64")
        s, e = info["data_offsets"]
        f.seek(8 + n + s)
        raw = f.read(e - s)
        d2t = struct.unpack(f"<{len(raw) // 8}q", raw)
    return {i + d for i, d in enumerate(d2t)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--drafter", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--outputs", required=True)
    ap.add_argument("--dspark", default="build/dspark")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    kept = draft_ids(a.drafter)
    outside, total = defaultdict(int), defaultdict(int)
    with open(a.outputs) as f:
        for no, line in enumerate(f, 1):
            j = json.loads(line)
            cat = j.get("category", "all")
            ids = j.get("plain_token_ids")
            if ids is None:
                text = j.get("plain_text", j.get("plain"))
                if not isinstance(text, str):
                    sys.exit(f"{a.outputs}:{no}: neither plain_ids nor a plain text field")
                out = subprocess.run([a.dspark, "tokenize", "--model", a.model, "--json"], input=text.encode(),
                                     capture_output=True, check=True)
                ids = json.loads(out.stdout)["ids"]
            for cat_key in (cat, "all"):
                total[cat_key] += len(ids)
                outside[cat_key] += sum(1 for t in ids if t not in kept)
    rows = {c: {"tokens": total[c], "outside": outside[c], "share_outside": outside[c] / total[c] if total[c] else 0.0}
            for c in sorted(total, key=lambda c: (c == "all", c))}
    if a.json:
        print(json.dumps({"draft_vocab_size": len(kept), "categories": rows}, indent=1))
        return
    print(f"draft vocabulary: {len(kept)} ids")
    print(f"{'category':16} {'tokens':>8} {'outside':>8} {'share':>7}")
    for c, r in rows.items():
        print(f"{c:16} {r['tokens']:8d} {r['outside']:8d} {100 * r['share_outside']:6.2f}%")


if __name__ == "__main__":
    main()
