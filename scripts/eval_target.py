#!/usr/bin/env python3
"""Evaluates a target model on the corpus's held-out prompts (for model cards).

Runs `dspark generate` (greedy) on held-out prompts of each domain and reports:
  - math: exact-answer accuracy (the number after "Answer:" equals the reference);
  - code: the fraction of Python completions that parse with ast.parse (signature +
    docstring + completion, cut at the first top-level line after the body);
  - a few greedy samples per domain.
This is an evaluation tool, not part of dspark: it only drives the dspark binary.

Usage: eval_target.py --dspark build/dspark --model DIR --prompts CORPUS/prompts [--n 100] [--out FILE.json]
"""
import argparse
import ast
import json
import os
import re
import subprocess
import sys

ANSWER = re.compile(r"Answer:\s*\$?\s*(-?[0-9][0-9,]*(?:\.[0-9]+)?)")


def generate(args, prompt, chat, max_tokens):
    cmd = [args.dspark, "generate", "--model", args.model, "--prompt", prompt, "--max-tokens", str(max_tokens),
           "--temperature", "0", "--json", "--threads", str(args.threads)]
    if chat:
        cmd.append("--chat")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def number(s):
    try:
        return float(s.replace(",", ""))
    except ValueError:
        return None


def code_completion(prompt, text):
    """The completion up to the first non-indented line (the end of the function body)."""
    lines = text.split("\n")
    body = []
    for line in lines:
        if line.strip() and not line.startswith((" ", "\t")):
            break
        body.append(line)
    return prompt + "\n".join(body)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dspark", default="build/dspark")
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompts", required=True, help="corpus prompts directory (dspark corpus build)")
    ap.add_argument("--n", type=int, default=100, help="prompts per domain")
    ap.add_argument("--samples", type=int, default=3, help="greedy samples shown per domain")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", help="write the results as JSON here")
    args = ap.parse_args()

    results = {"model": args.model, "domains": {}}
    for domain in ["math", "code", "translation", "prose", "instructions"]:
        path = os.path.join(args.prompts, domain + ".jsonl")
        if not os.path.exists(path):
            continue
        rows = [json.loads(l) for l in open(path, encoding="utf-8") if l.strip()][: args.n]
        stats = {"prompts": len(rows), "samples": []}
        correct = parsed = 0
        tok_s = []
        for i, row in enumerate(rows):
            if domain == "code":
                r = generate(args, row["prompt"], chat=False, max_tokens=160)
                program = code_completion(row["prompt"], r["text"])
                try:
                    ast.parse(program)
                    parsed += 1
                except SyntaxError:
                    pass
            else:
                r = generate(args, row["prompt"], chat=True, max_tokens=160 if domain == "math" else 64)
                if domain == "math":
                    m = ANSWER.search(r["text"])
                    got = number(m.group(1)) if m else None
                    want = number(row["reference"])
                    if got is not None and want is not None and abs(got - want) < 1e-6 * max(1.0, abs(want)):
                        correct += 1
            tok_s.append(r["decode_tok_s"])
            if i < args.samples:
                stats["samples"].append({"prompt": row["prompt"], "completion": r["text"], "reference": row["reference"]})
            print(f"{domain} {i + 1}/{len(rows)}", file=sys.stderr, end="\r")
        if domain == "math":
            stats["exact_answer_accuracy"] = correct / max(1, len(rows))
        if domain == "code":
            stats["ast_parse_fraction"] = parsed / max(1, len(rows))
        stats["mean_decode_tok_s"] = sum(tok_s) / max(1, len(tok_s))
        results["domains"][domain] = stats
        print(f"{domain}: {json.dumps({k: v for k, v in stats.items() if k != 'samples'})}", file=sys.stderr)
    text = json.dumps(results, indent=2, ensure_ascii=False)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    else:
        print(text)


if __name__ == "__main__":
    main()
