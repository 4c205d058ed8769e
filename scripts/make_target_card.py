#!/usr/bin/env python3
"""Writes the model card (README.md) and loss curve of a trained target into its directory.

Usage: make_target_card.py --run RUN_DIR --model MODEL_DIR --eval EVAL.json
                           --validation VALIDATION.json --matmul MATMUL.json [--title NAME]
"""
import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from plot_svg import line_plot  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--eval", required=True)
    ap.add_argument("--validation", required=True)
    ap.add_argument("--matmul", required=True)
    ap.add_argument("--title", default="dspark demo target")
    a = ap.parse_args()

    log = [json.loads(l) for l in open(os.path.join(a.run, "train_log.jsonl")) if l.strip()]
    steps = [e for e in log if "loss" in e and "step" in e and "event" not in e]
    evals = [e for e in log if e.get("event") == "eval"]
    start = next(e for e in log if e.get("event") == "start")
    cfg = json.load(open(os.path.join(a.model, "config.json")))
    tcfg = json.load(open(os.path.join(a.run, "train_config.json")))
    val = json.load(open(a.validation))
    ev = json.load(open(a.eval))
    mm = json.load(open(a.matmul))

    # Loss curves: training (smoothed over 20 steps) and validation per domain.
    smooth, window = [], []
    for e in steps:
        window.append(e["loss"])
        window = window[-20:]
        smooth.append((e["step"] + 1, sum(window) / len(window)))
    series = [("train (20-step mean)", smooth)]
    for d in sorted(evals[-1]["validation_loss"]) if evals else []:
        series.append((f"val {d}", [(e["step"], e["validation_loss"][d]) for e in evals if d in e["validation_loss"]]))
    line_plot(os.path.join(a.model, "loss.svg"), a.title + ": loss", "optimizer step", "next-token loss", series)

    # A resumed run restarts elapsed_s at its checkpoint: split the log into segments and add them up
    # (steps between the checkpoint and the interruption are computed twice and counted twice).
    segments, seg = [], [steps[0]]
    for e in steps[1:]:
        if e["elapsed_s"] < seg[-1]["elapsed_s"]:
            segments.append(seg)
            seg = []
        seg.append(e)
    segments.append(seg)
    elapsed = sum(sg[-1]["elapsed_s"] for sg in segments)
    step_tokens = tcfg["batch"] * tcfg["seq_len"]
    # elapsed_s starts at the end of each segment's first step, so that step is not in `elapsed`.
    computed = sum(len(sg) - 1 for sg in segments) * step_tokens
    tokens = steps[-1]["tokens"]
    done = next((e for e in log if e.get("event") == "done"), {})
    process_s = done.get("process_s") if len(segments) == 1 else None
    tok_s = computed / elapsed
    dts = sorted(b["elapsed_s"] - a["elapsed_s"] for sg in segments for a, b in zip(sg, sg[1:]))
    median_tok_s = step_tokens / dts[len(dts) // 2]
    H, L, I, V = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["intermediate_size"], cfg["vocab_size"]
    q, kv = cfg["num_attention_heads"] * cfg["head_dim"], cfg["num_key_value_heads"] * cfg["head_dim"]
    layer = H * (q + 2 * kv) + q * H + 3 * H * I
    T = tcfg["seq_len"]
    # 6 N per token for the matrices (forward + backward), plus attention scores and values.
    flops_tok = 6 * (L * layer + V * H) + 6 * L * T * q
    tflops = tok_s * flops_tok / 1e12
    median_gflops = median_tok_s * flops_tok / 1e9

    lines = [f"# {a.title}", "",
             "A Qwen3-architecture causal LM trained from scratch by dspark on its Debian-sourced corpus",
             "(Python standard library, generated math word problems with checked answers, GCIDE definitions,",
             "the KJV Bible, GNU manuals, FreeDict translations, and ChatML instructions built from them).",
             "It exists so that dspark's engine and drafters have a real, in-domain target to run on.", "",
             "## Shape", "",
             f"| parameters | layers | hidden | heads (q/kv) | head dim | MLP | vocabulary | context (trained) |",
             "|---|---|---|---|---|---|---|---|",
             f"| {start['parameters'] / 1e6:.1f} M | {L} | {H} | {cfg['num_attention_heads']}/{cfg['num_key_value_heads']} | "
             f"{cfg['head_dim']} | {I} | {V} (byte-level BPE) | {T} |", "",
             "## Training", "",
             f"- {tcfg['steps']} AdamW steps of {tcfg['batch']} x {T} tokens ({tokens / 1e6:.2f} M tokens), lr {tcfg['lr']} "
             f"with {tcfg['warmup']} warmup steps then cosine to {tcfg['min_lr_ratio']} x, weight decay {tcfg['weight_decay']}, "
             f"clip {tcfg['clip']}, precision {start.get('precision')}, {start.get('threads')} threads.",
             (f"- Wall time: {process_s / 3600:.2f} h ({process_s:.0f} s) on 2 cores in one uninterrupted run, "
              f"from the trainer's start to the saved model, {len(evals)} evaluations and the checkpoints "
              f"included (`process_s` of the `done` event); the training steps alone took {elapsed / 3600:.2f} h, "
              if process_s is not None else
              f"- Wall time: {elapsed / 3600:.2f} h of training on 2 cores in one uninterrupted run "
              f"(with {len(evals)} evaluations), "
              if len(segments) == 1 else
              f"- Wall time: {elapsed / 3600:.2f} h of training on 2 cores in {len(segments)} segments "
              f"(resumed from checkpoints; the machine was shared with other work part of the time), ") +
             f"{tok_s:.0f} training tok/s on average, {median_tok_s:.0f} tok/s at the median step.",
             f"- Model arithmetic ({flops_tok / 1e6:.0f} MFLOP per token): {tflops * 1e3:.1f} GFLOP/s on average, "
             f"{median_gflops:.1f} GFLOP/s at the median step. libtorch on this CPU (`dspark train bench-matmul`, "
             f"{mm['m']}x{mm['k']}x{mm['n']}): f32 {mm['f32_gflops']:.1f} GFLOP/s, bf16 {mm['bf16_gflops']:.1f} GFLOP/s "
             f"(AVX2 only, no bf16 matrix units: libtorch emulates bf16), so `--precision auto` trained in f32. "
             f"That is {100 * tflops * 1e3 / mm['f32_gflops']:.0f}% (average) and "
             f"{100 * median_gflops / mm['f32_gflops']:.0f}% (median step) of the machine's fastest matrix rate.",
             "- Log: `train_log.jsonl`; curve: `loss.svg`.", "", "![loss](loss.svg)", "",
             "## Validation (held-out split, 64 windows of 512 tokens per domain)", "",
             "| domain | loss | perplexity |", "|---|---|---|"]
    for d, v in sorted(val.items()):
        lines.append(f"| {d} | {v['loss']:.3f} | {v['perplexity']:.2f} |")
    dm = ev["domains"]
    lines += ["", "## Held-out prompts (greedy, chat template)", ""]
    if "math" in dm:
        lines.append(f"- Math word problems: exact-answer accuracy **{100 * dm['math']['exact_answer_accuracy']:.1f}%** "
                     f"of {dm['math']['prompts']} (the number after `Answer:` equals the reference).")
    if "code" in dm:
        lines.append(f"- Python: **{100 * dm['code']['ast_parse_fraction']:.1f}%** of {dm['code']['prompts']} "
                     "completions of a signature + docstring parse with `ast.parse`.")
    lines += ["", "Samples (greedy):", ""]
    for d in ["math", "code", "translation", "prose", "instructions"]:
        if d not in dm:
            continue
        lines.append(f"### {d}")
        for s in dm[d]["samples"][:2]:
            lines += ["", "Prompt:", "", "```", s["prompt"].strip()[:600], "```", "", "Completion:", "", "```",
                      s["completion"].strip()[:600], "```"]
        lines.append("")
    lines += ["## Reproduce", "", "```sh", "make build", "scripts/train-demo-target.sh build/demo-target   # corpus, tokenizer, "
              "shards, training, evaluation", "```", "",
              "`scripts/train-demo-target.sh` runs `dspark corpus build`, `dspark tokenizer train`, `dspark corpus tokenize`,",
              "`dspark train lm` (resumable) and `dspark train eval`; this card is written by `scripts/make_target_card.py`.",
              "", "## Licence", "",
              "Weights: trained by dspark; the training text comes from Debian packages under their own licences",
              "(PSF-2.0, GPL, public domain, GFDL, FreeDict licences), listed per source in the corpus manifest."]
    with open(os.path.join(a.model, "README.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote", os.path.join(a.model, "README.md"))


if __name__ == "__main__":
    main()
