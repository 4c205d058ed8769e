#!/usr/bin/env python3
"""Writes a copy of tokenizer.json IN to OUT with <|endoftext|> added as a special token after the
highest id (`dspark corpus tokenize` needs one; the repository's tiny tokenizer has none).
Usage: with_endoftext.py IN OUT"""
import json
import sys

t = json.load(open(sys.argv[1]))
top = max(list(t["model"]["vocab"].values()) + [a["id"] for a in t["added_tokens"]])
t["added_tokens"].append({"id": top + 1, "content": "<|endoftext|>", "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True})
json.dump(t, open(sys.argv[2], "w"))
