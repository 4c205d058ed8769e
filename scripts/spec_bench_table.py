#!/usr/bin/env python3
"""Prints a markdown table, one column per category, from `dspark bench spec --per-category N --json`
outputs (Spec-Bench or MT-Bench). A reporting tool, not part of dspark: it only reads JSON files.

Usage: spec_bench_table.py [--tau] LABEL=FILE.json [LABEL=FILE.json ...]
  For each file: a row of tokens per round and a row of speedups (and, when the length policy chose
  lengths, a row of the mean drafts verified per round), with the unweighted mean over categories.
  --tau: the DSpark paper's Table 1 layout instead: one row per file with its accepted length tau
  (tokens per round, the bonus included) per category and the mean, then the last file's mean
  over each other file's (e.g. eagle3=... dflash=... dspark=...: DSpark / EAGLE-3, DSpark / DFlash).
"""
import json
import sys


def rows(label, path):
    d = json.load(open(path))
    order = d["category_order"]
    cats = d["categories"]
    mean = d["mean_over_categories"]
    out = [(f"{label}: tokens per round", [cats[c]["mean_accepted_length"] for c in order],
            mean["mean_accepted_length"], "{:.2f}"),
           (f"{label}: speedup", [cats[c]["speedup"] for c in order], mean["speedup"], "{:.2f}x")]
    if any(cats[c].get("verify_length_hist", [0])[0] for c in order):
        out.append((f"{label}: drafts verified per round", [cats[c]["mean_verified_drafts"] for c in order],
                    mean["mean_verified_drafts"], "{:.2f}"))
    return order, out


def main(argv):
    tau = bool(argv) and argv[0] == "--tau"
    if tau:
        argv = argv[1:]
    if not argv:
        sys.exit(__doc__)
    order, table = None, []
    for arg in argv:
        if "=" not in arg:
            sys.exit(f"argument {arg!r}: expected LABEL=FILE.json")
        label, path = arg.split("=", 1)
        o, r = rows(label, path)
        if order is not None and o != order:
            sys.exit(f"{path}: categories {o} differ from the first file's {order}")
        order = o
        table += r[:1] if tau else r
    if tau:
        print("| drafter | " + " | ".join(order) + " | mean |")
        print("|---" * (len(order) + 2) + "|")
        for name, vals, mean, fmt in table:
            print(f"| {name.split(':')[0]} | " + " | ".join(fmt.format(v) for v in vals) + f" | **{fmt.format(mean)}** |")
        last = table[-1]
        for name, _, mean, _ in table[:-1]:
            print(f"\n{last[0].split(':')[0]} / {name.split(':')[0]}: {last[2] / mean:.2f}", end="")
        print()
        return
    print("| run | " + " | ".join(order) + " | mean |")
    print("|---" * (len(order) + 2) + "|")
    for name, vals, mean, fmt in table:
        print(f"| {name} | " + " | ".join(fmt.format(v) for v in vals) + f" | **{fmt.format(mean)}** |")


if __name__ == "__main__":
    main(sys.argv[1:])
