#!/usr/bin/env python3
"""A long-context prompt set from Debian-shipped documents, for `dspark bench spec` at depth.

Each prompt is a document excerpt of about 1K, 4K, 16K or 30K tokens (counted with the model's
tokenizer through `dspark tokenize`) followed by a task that needs the excerpt: summarise it,
continue it, or answer a question about its beginning. The category of a prompt is its bucket
("1k", "4k", "16k", "30k"), so `bench spec` reports tokens per round, drafting cost and speedup per
context length. The documents are GNU info manuals, Debian changelogs and the GPL, whatever of
them this machine has; nothing comes from ../shared/data.

  scripts/make_long_prompts.py [--model models/demo] [--per-bucket 3] [--buckets 1k,4k,16k,30k]
                               [--out build/long_prompts.jsonl]

Then, for the demo target (2,048 positions) stretched to 32,768 with YaRN x16:
  build/dspark bench spec --model models/demo --prompts build/long_prompts.jsonl \\
    --hf-overrides '{"rope_scaling": {"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 2048}}' \\
    --speculative-config '{"model": "models/demo-dspark", "num_speculative_tokens": 8}' --max-tokens 64
"""
import argparse
import glob
import gzip
import json
import os
import subprocess
import sys

# (name, tokens). A bucket's place in this list sets which documents and tasks its prompts take, so
# a bucket added later goes last and leaves the others' prompts as they were; they are written in
# order of length.
BUCKETS = [("4k", 4096), ("16k", 16384), ("30k", 30720), ("1k", 1024)]
# Bucket names in order of length, the order they are written in.
BY_LENGTH = [n for n, _ in sorted(BUCKETS, key=lambda b: b[1])]
# Documents shorter than this are not used (the 1k bucket draws from the same documents as 4k).
MIN_DOC_TOKENS = 4096
# Tokens left for the task, the chat template and the answer.
RESERVE = 192
SOURCES = [
    "/usr/share/info/coreutils.info.gz",
    "/usr/share/info/gettext.info.gz",
    "/usr/share/info/diffutils.info.gz",
    "/usr/share/info/find.info.gz",
    "/usr/share/info/grep.info.gz",
    "/usr/share/info/gnupg.info.gz",
    "/usr/share/doc/git/changelog.gz",
    "/usr/share/doc/linux-libc-dev/changelog.Debian.gz",
    "/usr/share/common-licenses/GPL-3",
]
TASKS = [
    "Summarize the text above in a few sentences.",
    "Continue the text above from where it stops, in the same style.",
    "What is the text above about, and what does its first section explain?",
]


def read(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as f:
        return f.read()


def dspark(binary, args, text):
    r = subprocess.run([binary] + args, input=text, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"make_long_prompts.py: {binary} {' '.join(args)} failed: {r.stderr.strip()}")
    return r.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="models/demo", help="model directory (its tokenizer counts the tokens)")
    ap.add_argument("--per-bucket", type=int, default=3, help="prompts per length bucket")
    ap.add_argument("--buckets", default=",".join(BY_LENGTH),
                    help="the length buckets to write, a comma list of " + ", ".join(n for n, _ in BUCKETS))
    ap.add_argument("--out", default="build/long_prompts.jsonl")
    ap.add_argument("--dspark", default=os.environ.get("DSPARK", "build/dspark"))
    a = ap.parse_args()
    wanted = a.buckets.split(",")
    unknown = [w for w in wanted if w not in dict(BUCKETS)]
    if unknown:
        sys.exit(f"make_long_prompts.py: --buckets: unknown bucket {unknown[0]!r} "
                 f"(known: {', '.join(n for n, _ in BUCKETS)})")
    if not os.access(a.dspark, os.X_OK):
        sys.exit(f"make_long_prompts.py: {a.dspark} is not built (make build)")
    docs = []
    for path in SOURCES + sorted(glob.glob("/usr/share/info/*.info.gz")):
        if not os.path.exists(path) or any(d[0] == path for d in docs):
            continue
        ids = json.loads(dspark(a.dspark, ["tokenize", "--model", a.model, "--json"], read(path)))["ids"]
        if len(ids) >= MIN_DOC_TOKENS:
            docs.append((path, ids))
        if len(docs) >= 3 * a.per_bucket:
            break
    if not docs:
        sys.exit(f"make_long_prompts.py: no Debian document of {MIN_DOC_TOKENS} tokens or more was found")
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    written = 0
    with open(a.out, "w") as out:
        # A bucket's prompts are the same whichever other buckets are asked for.
        for b, (name, size) in sorted(enumerate(BUCKETS), key=lambda e: e[1][1]):
            if name not in wanted:
                continue
            budget = size - RESERVE
            usable = [d for d in docs if len(d[1]) >= budget]
            if not usable:
                print(f"make_long_prompts.py: no document holds {budget} tokens; bucket {name} skipped",
                      file=sys.stderr)
                continue
            for i in range(a.per_bucket):
                # Documents and tasks rotate across buckets; prompts from one document start at
                # different places.
                path, ids = usable[(b + i) % len(usable)]
                start = ((b + i) // len(usable)) * max(0, (len(ids) - budget) // a.per_bucket)
                text = dspark(a.dspark, ["tokenize", "--model", a.model, "--decode"],
                              json.dumps(ids[start:start + budget]))
                task = TASKS[(b + i) % len(TASKS)]
                out.write(json.dumps({"category": name, "prompt": text + "\n\n" + task,
                                      "source": os.path.basename(path), "context_tokens": budget}) + "\n")
                written += 1
    print(f"make_long_prompts.py: {written} prompts ({a.per_bucket} per bucket of "
          f"{', '.join(n for n in BY_LENGTH if n in wanted)}) from {len(docs)} documents -> {a.out}")


if __name__ == "__main__":
    main()
