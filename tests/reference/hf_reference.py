#!/usr/bin/env python3
"""Independent reference for dspark's engine tests, written with PyTorch only.

Writes random tiny Qwen3 / Qwen2 / Llama checkpoints in real HF layout (config.json plus
model.safetensors or a sharded index) and, for each, the reference logits of a few
prompts and a greedy continuation, computed in float64 by a plain PyTorch forward pass
that follows the HF modeling code (rotate_half RoPE, repeat_kv GQA, causal softmax).

Usage: hf_reference.py --out DIR
Outputs DIR/<case>/ (the checkpoint) and DIR/<case>/reference.json:
  {"prompts": [[ids...], ...], "logits_file": "logits.f32", "logits_shape": [P, T, V],
   "greedy": [[ids...], ...], "greedy_tokens": N}
"""
import argparse
import json
import math
import os
import struct

import torch

torch.set_grad_enabled(False)


# ---------------------------------------------------------------- safetensors I/O

DTYPES = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16"}
NP = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}


def tensor_bytes(t):
    t = t.contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().tobytes()
    return t.numpy().tobytes()


def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        b = tensor_bytes(t)
        header[name] = {"dtype": DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def safetensors_entries(path):
    """(name, dtype, shape, start, end) for each tensor of a safetensors file, in header order;
    start and end are byte offsets into the file."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    return [(name, e["dtype"], e["shape"], 8 + n + e["data_offsets"][0], 8 + n + e["data_offsets"][1])
            for name, e in header.items() if name != "__metadata__"]


def checkpoint_files(d):
    """An HF checkpoint directory's safetensors files: model.safetensors, or its index's shards."""
    if os.path.exists(os.path.join(d, "model.safetensors")):
        return [os.path.join(d, "model.safetensors")]
    idx = json.load(open(os.path.join(d, "model.safetensors.index.json")))
    return [os.path.join(d, shard) for shard in sorted(set(idx["weight_map"].values()))]


def read_tensor(f, path, name, dtype, shape, a, b):
    """One tensor of safetensors file `path`, open as f (the fields of safetensors_entries), as a
    torch tensor of its own dtype."""
    if dtype not in NP:
        raise ValueError(f"{path}: tensor {name}: dtype {dtype} is not BF16, F16 or F32")
    f.seek(a)
    raw = bytearray(f.read(b - a))
    dt = NP[dtype]
    if dt == torch.bfloat16:
        return torch.frombuffer(raw, dtype=torch.int16).view(torch.bfloat16).reshape(shape)
    return torch.frombuffer(raw, dtype=dt).reshape(shape)


def read_safetensors(path):
    out = {}
    with open(path, "rb") as f:
        for entry in safetensors_entries(path):
            out[entry[0]] = read_tensor(f, path, *entry).clone()
    return out


def load_dir(d):
    out = {}
    for path in checkpoint_files(d):
        out.update(read_safetensors(path))
    return out


# ---------------------------------------------------------------- the model (float64)

def rms_norm(x, w, eps):
    var = x.pow(2).mean(-1, keepdim=True)
    return x * torch.rsqrt(var + eps) * w


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def rope_params(cfg):
    """(inverse frequencies, cos/sin scale) in float64, from the published formulas: llama3 (Meta),
    yarn (Peng et al. 2023, as HF's _compute_yarn_parameters and vLLM read the config: `factor`
    as written), linear, and dynamic NTK at its longest length (vLLM's static form)."""
    hd = cfg["head_dim"]
    base = float(cfg["rope_theta"])
    rs = cfg.get("rope_scaling") or {}
    kind = rs.get("rope_type", rs.get("type"))
    idx = torch.arange(0, hd, 2, dtype=torch.float64)
    if kind == "dynamic":
        f = rs["factor"]
        base = base * (f * f - (f - 1)) ** (hd / (hd - 2))
    inv = 1.0 / (base ** (idx / hd))
    scale = 1.0
    if kind == "linear":
        inv = inv / rs["factor"]
    elif kind == "yarn":
        f = rs["factor"]
        old = rs.get("original_max_position_embeddings") or cfg["max_position_embeddings"]
        fast, slow = rs.get("beta_fast") or 32, rs.get("beta_slow") or 1

        def dim_of(rot):  # the dimension index that rotates `rot` times over the old context
            return hd * math.log(old / (rot * 2 * math.pi)) / (2 * math.log(float(cfg["rope_theta"])))
        lo, hi = dim_of(fast), dim_of(slow)
        if rs.get("truncate", True):
            lo, hi = math.floor(lo), math.ceil(hi)
        lo, hi = max(lo, 0), min(hi, hd - 1)
        if lo == hi:
            hi += 0.001
        ramp = ((torch.arange(hd // 2, dtype=torch.float64) - lo) / (hi - lo)).clamp(0, 1)
        extrapolate = 1 - ramp
        inv = inv / f * (1 - extrapolate) + inv * extrapolate
        if rs.get("attention_factor"):
            scale = rs["attention_factor"]
        else:
            m = lambda x: 1.0 if f <= 1 else 0.1 * x * math.log(f) + 1.0
            scale = m(rs["mscale"]) / m(rs["mscale_all_dim"]) if rs.get("mscale") and rs.get("mscale_all_dim") else m(1)
    elif kind == "llama3":
        factor, low, high = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
        old = rs["original_max_position_embeddings"]
        low_wl, high_wl = old / low, old / high
        wl = 2 * math.pi / inv
        scaled = torch.where(wl > low_wl, inv / factor, inv)
        smooth = (old / wl - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = (wl >= high_wl) & (wl <= low_wl)
        inv = torch.where(medium, smoothed, scaled)
    return inv, scale


def inv_freq(cfg):
    return rope_params(cfg)[0]


def forward(cfg, w, ids):
    """Logits [T, V] for one sequence, float64, causal attention."""
    L, H = cfg["num_hidden_layers"], cfg["hidden_size"]
    nh, nkv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    eps = cfg["rms_norm_eps"]
    qwen = cfg["architectures"][0] == "Qwen3ForCausalLM"
    T = len(ids)
    x = w["model.embed_tokens.weight"][torch.tensor(ids)]
    pos = torch.arange(T, dtype=torch.float64)
    freqs = torch.outer(pos, inv_freq(cfg))
    emb = torch.cat((freqs, freqs), dim=-1)
    scale = rope_params(cfg)[1]
    cos, sin = emb.cos() * scale, emb.sin() * scale
    mask = torch.full((T, T), float("-inf"), dtype=torch.float64).triu(1)
    for i in range(L):
        p = f"model.layers.{i}."
        h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        def proj(name, heads):
            y = h @ w[p + f"self_attn.{name}.weight"].T
            if p + f"self_attn.{name}.bias" in w:  # Qwen2
                y = y + w[p + f"self_attn.{name}.bias"]
            return y.view(T, heads, hd).transpose(0, 1)
        q, k, v = proj("q_proj", nh), proj("k_proj", nkv), proj("v_proj", nkv)
        if qwen:
            q = rms_norm(q, w[p + "self_attn.q_norm.weight"], eps)
            k = rms_norm(k, w[p + "self_attn.k_norm.weight"], eps)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(nh // nkv, dim=0)
        v = v.repeat_interleave(nh // nkv, dim=0)
        att = (q @ k.transpose(1, 2)) / math.sqrt(hd) + mask
        o = (att.softmax(-1) @ v).transpose(0, 1).reshape(T, nh * hd)
        x = x + o @ w[p + "self_attn.o_proj.weight"].T
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        g = h @ w[p + "mlp.gate_proj.weight"].T
        u = h @ w[p + "mlp.up_proj.weight"].T
        x = x + (torch.nn.functional.silu(g) * u) @ w[p + "mlp.down_proj.weight"].T
    x = rms_norm(x, w["model.norm.weight"], eps)
    head = w["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else w["lm_head.weight"]
    return x @ head.T


# ---------------------------------------------------------------- random checkpoints

CASES = {
    # name: (arch, dtype, tied, sharded, rope scaling, heads, kv heads, head_dim, hidden, layers, inter, vocab)
    "qwen3_f32_untied": ("Qwen3ForCausalLM", torch.float32, False, False, None, 4, 2, 16, 64, 3, 160, 384),
    "qwen3_bf16_tied": ("Qwen3ForCausalLM", torch.bfloat16, True, False, None, 8, 2, 16, 96, 2, 192, 320),
    "llama3_f16_sharded_scaled": ("LlamaForCausalLM", torch.float16, False, True, "llama3", 8, 4, 8, 64, 2, 128, 400),
    "llama_f32_mqa_tied": ("LlamaForCausalLM", torch.float32, True, False, None, 4, 1, 32, 128, 2, 256, 300),
    "qwen2_bf16_bias": ("Qwen2ForCausalLM", torch.bfloat16, True, False, "linear", 4, 2, 32, 128, 2, 256, 352),
    "qwen3_f32_yarn": ("Qwen3ForCausalLM", torch.float32, False, False, "yarn", 2, 1, 128, 128, 2, 256, 300),
    "llama_f32_dynamic": ("LlamaForCausalLM", torch.float32, True, False, "dynamic", 4, 2, 32, 128, 2, 256, 300),
}
# rope_scaling per kind. YaRN over a pretrained context of 64 (so the prompts, up to 150 tokens,
# and their continuations reach past it), Qwen3's documented factor of 4.
SCALINGS = {
    "llama3": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 256},
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64},
    "linear": {"rope_type": "linear", "factor": 2.0},
    "dynamic": {"type": "dynamic", "factor": 2.0},
}
# Positions where the RoPE tables are checked, to 128K.
ROPE_POSITIONS = [0, 1, 63, 4097, 16384, 32767, 65537, 131071]


def make_case(out, name, seed):
    arch, dtype, tied, sharded, scaling, nh, nkv, hd, H, L, I, V = CASES[name]
    g = torch.Generator().manual_seed(seed)
    cfg = {
        "architectures": [arch], "model_type": arch[: -len("ForCausalLM")].lower(),
        "vocab_size": V, "hidden_size": H, "intermediate_size": I, "num_hidden_layers": L,
        "num_attention_heads": nh, "num_key_value_heads": nkv, "head_dim": hd, "rms_norm_eps": 1e-6,
        "rope_theta": {None: 10000.0, "yarn": 1000000.0}.get(scaling, 500000.0), "max_position_embeddings": 4096,
        "tie_word_embeddings": tied, "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2,
        "torch_dtype": {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}[dtype],
    }
    if scaling:
        cfg["rope_scaling"] = SCALINGS[scaling]

    def rnd(*shape, std):
        return (torch.randn(*shape, generator=g) * std).to(dtype)

    def norm(n):
        return (1.0 + 0.2 * torch.randn(n, generator=g)).to(dtype)

    w = {"model.embed_tokens.weight": rnd(V, H, std=1.0)}
    for i in range(L):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = norm(H)
        w[p + "self_attn.q_proj.weight"] = rnd(nh * hd, H, std=H ** -0.5)
        w[p + "self_attn.k_proj.weight"] = rnd(nkv * hd, H, std=H ** -0.5)
        w[p + "self_attn.v_proj.weight"] = rnd(nkv * hd, H, std=H ** -0.5)
        w[p + "self_attn.o_proj.weight"] = rnd(H, nh * hd, std=(nh * hd) ** -0.5)
        if arch.startswith("Qwen3"):
            w[p + "self_attn.q_norm.weight"] = norm(hd)
            w[p + "self_attn.k_norm.weight"] = norm(hd)
        if arch.startswith("Qwen2"):  # q/k/v biases, large as in the published Qwen2 checkpoints
            w[p + "self_attn.q_proj.bias"] = rnd(nh * hd, std=0.5)
            w[p + "self_attn.k_proj.bias"] = rnd(nkv * hd, std=2.0)
            w[p + "self_attn.v_proj.bias"] = rnd(nkv * hd, std=0.5)
        w[p + "post_attention_layernorm.weight"] = norm(H)
        w[p + "mlp.gate_proj.weight"] = rnd(I, H, std=H ** -0.5)
        w[p + "mlp.up_proj.weight"] = rnd(I, H, std=H ** -0.5)
        w[p + "mlp.down_proj.weight"] = rnd(H, I, std=I ** -0.5)
    w["model.norm.weight"] = norm(H)
    if not tied:
        w["lm_head.weight"] = rnd(V, H, std=2.0 * H ** -0.5)

    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"), indent=2)
    if sharded:
        names = list(w)
        half = len(names) // 2
        shards = {"model-00001-of-00002.safetensors": names[:half], "model-00002-of-00002.safetensors": names[half:]}
        wm = {}
        for fn, ns in shards.items():
            write_safetensors(os.path.join(d, fn), {n: w[n] for n in ns})
            wm.update({n: fn for n in ns})
        json.dump({"metadata": {}, "weight_map": wm}, open(os.path.join(d, "model.safetensors.index.json"), "w"))
    else:
        write_safetensors(os.path.join(d, "model.safetensors"), w)
    return d, cfg, V


def reference(d, cfg, V, seed, greedy_tokens):
    w = {k: v.to(torch.float64) for k, v in load_dir(d).items()}  # from the file, as the engine sees it
    g = torch.Generator().manual_seed(seed + 1)
    prompts = [torch.randint(3, V, (n,), generator=g).tolist() for n in (1, 7, 40, 150)]
    T = max(len(p) for p in prompts)
    logits = torch.zeros(len(prompts), T, V, dtype=torch.float32)
    for i, p in enumerate(prompts):
        logits[i, : len(p)] = forward(cfg, w, p).to(torch.float32)
    greedy = []
    for p in prompts[1:3]:
        seq = list(p)
        for _ in range(greedy_tokens):
            seq.append(int(forward(cfg, w, seq)[-1].argmax()))
        greedy.append(seq[len(p):])
    logits.numpy().tofile(os.path.join(d, "logits.f32"))
    inv, scale = rope_params(cfg)
    angles = torch.outer(torch.tensor(ROPE_POSITIONS, dtype=torch.float64), inv)
    rope = {"positions": ROPE_POSITIONS, "cos": (angles.cos() * scale).tolist(), "sin": (angles.sin() * scale).tolist()}
    json.dump({"prompts": prompts, "logits_file": "logits.f32", "logits_shape": [len(prompts), T, V],
               "greedy": greedy, "greedy_prompts": [1, 2], "greedy_tokens": greedy_tokens, "rope": rope},
              open(os.path.join(d, "reference.json"), "w"))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--greedy-tokens", type=int, default=64)
    args = ap.parse_args()
    for i, name in enumerate(CASES):
        d, cfg, V = make_case(args.out, name, seed=100 + i)
        reference(d, cfg, V, seed=100 + i, greedy_tokens=args.greedy_tokens)
        print("wrote", d)


if __name__ == "__main__":
    main()
