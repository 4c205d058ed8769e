#!/usr/bin/env python3
"""Independent reference for dspark's GGUF reading, written with numpy (and hf_reference's
float64 PyTorch forward).

Writes GGUF v3 files with its own writer, following the published format:
  * DIR/dequant/blocks.gguf: one [3, 512] tensor per ggml type dspark reads (F32, F16, BF16, Q8_0,
    Q4_0, Q5_0, Q4_K, Q6_K) of random blocks, and DIR/dequant/<type>.f64 their values dequantized
    in float64 by the block formulas below;
  * DIR/<case>/model.gguf + reference.json: tiny random Qwen3, Qwen2 and Llama models whose matrices are
    random blocks of one type (or a Q4_K_M-like mix), norms in F32, with the logits of a float64
    forward over the dequantized weights, in the layout of hf_reference.py (the same C++ test
    reads both). Llama's q/k rows are stored interleaved per head, as llama.cpp's converter
    writes them, and its RoPE frequencies carry a rope_freqs.weight tensor;
  * with --tokenizer NAME=tokenizer.json[:pre[:add_bos]]: DIR/tokenizers/NAME.gguf, the tokenizer
    metadata llama.cpp's converter writes for that tokenizer.json (no tensors).

  * DIR/quantize/qwen3_q8_0.gguf: the qwen3_f32 case's matrices quantized to Q8_0 here, and
    qwen3_attn_k_q4_k.gguf its blk.0.attn_k.weight in Q4_K (what `--quantization` on load must give);
  * DIR/quantize/input.f32 and DIR/quantize/<type>.bin: rows of weights and their Q8_0, Q4_0,
    Q5_0, Q4_K and Q6_K blocks by llama.cpp's reference rounding, emulated here in float32 scalar
    arithmetic, the order of operations of the reference;
  * with --convert HF_DIR=OUT.gguf[:TYPE]: the Qwen3 checkpoint HF_DIR (config.json, safetensors,
    tokenizer.json) as one GGUF file, matrices stored as TYPE (F32, F16 or BF16; default BF16),
    for the command-line tests.

Usage: gguf_reference.py --out DIR [--tokenizer qwen3=PATH:qwen2] [--tokenizer llama3=PATH:llama-bpe:bos]
       gguf_reference.py --convert HF_DIR=OUT.gguf[:TYPE]
"""
import argparse
import json
import os
import struct
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_reference  # noqa: E402

# ---------------------------------------------------------------- the GGUF writer

U32, I32, F32, BOOL, STRING, ARRAY, U64 = 4, 5, 6, 7, 8, 9, 10
GGML = {"F32": (0, 1, 4), "F16": (1, 1, 2), "Q4_0": (2, 32, 18), "Q5_0": (6, 32, 22), "Q8_0": (8, 32, 34),
        "Q4_K": (12, 256, 144), "Q6_K": (14, 256, 210), "BF16": (30, 1, 2)}


def gguf_string(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def gguf_value(vtype, v):
    if vtype == STRING:
        return gguf_string(v)
    if vtype == ARRAY:
        etype, items = v
        out = struct.pack("<IQ", etype, len(items))
        return out + b"".join(gguf_value(etype, x) for x in items)
    return struct.pack({U32: "<I", I32: "<i", F32: "<f", BOOL: "<?", U64: "<Q"}[vtype], v)


def write_gguf(path, kvs, tensors, alignment=32):
    """kvs: [(key, type, value)]; tensors: [(name, type name, ne (ggml order), raw bytes or a
    function that returns them)]. Written tensor by tensor, each function called in turn, so that
    a model larger than memory can be converted."""
    head = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)))
    for key, vtype, v in kvs:
        head += gguf_string(key) + struct.pack("<I", vtype) + gguf_value(vtype, v)
    offset, blobs = 0, []
    for name, tname, ne, raw in tensors:
        code, be, bb = GGML[tname]
        size = len(raw) if isinstance(raw, (bytes, bytearray)) else int(np.prod(ne)) // be * bb
        head += gguf_string(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne)
        head += struct.pack("<IQ", code, offset)
        blobs.append((offset, size, raw))
        offset += (size + alignment - 1) // alignment * alignment
    head += b"\0" * ((alignment - len(head) % alignment) % alignment)
    start = len(head)
    with open(path, "wb") as f:
        f.write(head)
        for off, size, raw in blobs:
            f.write(b"\0" * (start + off - f.tell()))
            data = raw if isinstance(raw, (bytes, bytearray)) else raw()
            assert len(data) == size, (len(data), size)
            f.write(data)


# ---------------------------------------------------------------- blocks: random, and dequantized in float64

def f16_bits(x):
    return np.asarray(x, dtype=np.float16).view(np.uint16)


def f16_value(bits):
    return bits.astype(np.uint16).view(np.float16).astype(np.float64)


def random_blocks(rng, tname, n_elems, std):
    """Random raw bytes of n_elems weights of type tname, scales chosen so the weights have about
    the given standard deviation."""
    _, be, bb = GGML[tname]
    nb = n_elems // be
    if tname == "F32":
        return (rng.standard_normal(n_elems) * std).astype(np.float32).tobytes()
    if tname == "F16":
        return (rng.standard_normal(n_elems) * std).astype(np.float16).tobytes()
    if tname == "BF16":
        f = (rng.standard_normal(n_elems) * std).astype(np.float32).view(np.uint32)
        return (f >> 16).astype(np.uint16).tobytes()
    raw = rng.integers(0, 256, size=(nb, bb), dtype=np.uint8)
    d_scale = {"Q8_0": 1 / 73.0, "Q4_0": 1 / 4.6, "Q5_0": 1 / 9.2, "Q4_K": 1 / 256.0, "Q6_K": 1 / 1350.0}[tname]
    d = f16_bits(np.abs(rng.standard_normal(nb)) * 0.5 * std * d_scale + 0.75 * std * d_scale)
    if tname == "Q4_K":
        raw[:, 0:2] = d.view(np.uint8).reshape(nb, 2)
        raw[:, 2:4] = f16_bits(f16_value(d) * 7.5).view(np.uint8).reshape(nb, 2)
    elif tname == "Q6_K":
        raw[:, 208:210] = d.view(np.uint8).reshape(nb, 2)
    else:
        raw[:, 0:2] = d.view(np.uint8).reshape(nb, 2)
    return raw.tobytes()


def dequant(tname, raw, n_elems):
    """Float64 values of n_elems weights of type tname held in raw (the published block formulas)."""
    _, be, bb = GGML[tname]
    if tname == "F32":
        return np.frombuffer(raw, dtype=np.float32).astype(np.float64)
    if tname == "F16":
        return np.frombuffer(raw, dtype=np.float16).astype(np.float64)
    if tname == "BF16":
        return (np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    b = np.frombuffer(raw, dtype=np.uint8).reshape(-1, bb)
    nb = b.shape[0]
    if tname == "Q8_0":
        return (f16_value(b[:, 0:2].copy().view(np.uint16)) * b[:, 2:].view(np.int8).astype(np.float64)).ravel()
    if tname == "Q4_0":
        d = f16_value(b[:, 0:2].copy().view(np.uint16))
        q = np.concatenate([b[:, 2:] & 15, b[:, 2:] >> 4], axis=1).astype(np.float64) - 8
        return (d * q).ravel()
    if tname == "Q5_0":
        d = f16_value(b[:, 0:2].copy().view(np.uint16))
        qh = b[:, 2:6].copy().view(np.uint32)[:, 0]
        bits = (qh[:, None] >> np.arange(32, dtype=np.uint32)) & 1
        q = np.concatenate([b[:, 6:] & 15, b[:, 6:] >> 4], axis=1).astype(np.int64) | (bits.astype(np.int64) << 4)
        return (d * (q - 16)).ravel()
    if tname == "Q4_K":
        d = f16_value(b[:, 0:2].copy().view(np.uint16))[:, 0]
        dmin = f16_value(b[:, 2:4].copy().view(np.uint16))[:, 0]
        s = b[:, 4:16].astype(np.int64)
        sc = np.zeros((nb, 8), np.int64)
        mn = np.zeros((nb, 8), np.int64)
        sc[:, :4], mn[:, :4] = s[:, 0:4] & 63, s[:, 4:8] & 63
        sc[:, 4:] = (s[:, 8:12] & 15) | ((s[:, 0:4] >> 6) << 4)
        mn[:, 4:] = (s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4)
        qs = b[:, 16:].reshape(nb, 4, 32).astype(np.int64)
        q = np.stack([qs & 15, qs >> 4], axis=2).reshape(nb, 8, 32)  # group 2i: low nibbles, 2i+1: high
        y = d[:, None, None] * sc[:, :, None] * q - (dmin[:, None] * mn)[:, :, None]
        return y.ravel()
    if tname == "Q6_K":
        ql = b[:, 0:128].reshape(nb, 2, 64).astype(np.int64)
        qh = b[:, 128:192].reshape(nb, 2, 32).astype(np.int64)
        sc = b[:, 192:208].view(np.int8).astype(np.int64).reshape(nb, 2, 8)
        d = f16_value(b[:, 208:210].copy().view(np.uint16))[:, 0]
        y = np.zeros((nb, 2, 128))
        for half in range(2):
            lo, hi = ql[:, half], qh[:, half]
            parts = [(lo[:, :32] & 15) | ((hi & 3) << 4), (lo[:, 32:] & 15) | (((hi >> 2) & 3) << 4),
                     (lo[:, :32] >> 4) | (((hi >> 4) & 3) << 4), (lo[:, 32:] >> 4) | (((hi >> 6) & 3) << 4)]
            for k, q in enumerate(parts):  # 32 values, scales of 16 each: k*2 and k*2+1
                s = np.repeat(sc[:, half, 2 * k:2 * k + 2], 16, axis=1)
                y[:, half, 32 * k:32 * k + 32] = d[:, None] * s * (q - 32)
        return y.ravel()
    raise ValueError(tname)


def write_dequant_case(out, rng):
    d = os.path.join(out, "dequant")
    os.makedirs(d, exist_ok=True)
    tensors, manifest = [], {}
    for tname in GGML:
        rows, cols = 3, 512
        raw = random_blocks(rng, tname, rows * cols, std=0.05)
        tensors.append((f"t.{tname}", tname, [cols, rows], raw))
        dequant(tname, raw, rows * cols).tofile(os.path.join(d, f"{tname}.f64"))
        manifest[f"t.{tname}"] = {"type": tname, "rows": rows, "cols": cols, "values": f"{tname}.f64"}
    write_gguf(os.path.join(d, "blocks.gguf"), [("general.architecture", STRING, "none")], tensors)
    json.dump(manifest, open(os.path.join(d, "manifest.json"), "w"), indent=1)


# ---------------------------------------------------------------- quantization, in float32 as the reference does it

f32 = np.float32


def nearest_int(v):
    return int(np.rint(f32(v)))  # round half to even, as the reference's magic-number trick


def roundf(v):
    return int(np.sign(v) * np.floor(abs(float(v)) + 0.5))


def q8_0_exact(x):
    out = bytearray()
    for blk in x.reshape(-1, 32):
        amax = f32(0)
        for v in blk:
            amax = max(amax, f32(abs(v)))
        d = f32(amax / f32(127))
        idv = f32(f32(1) / d) if d != 0 else f32(0)
        out += f16_bits(d).tobytes()
        out += bytes(roundf(f32(v * idv)) & 0xFF for v in blk)
    return bytes(out)


def q8_0_rows(rows):
    """q8_0_exact over whole rows at once (the same float32 operations, vectorized)."""
    b = rows.astype(np.float32).reshape(-1, 32)
    amax = np.abs(b).max(axis=1)
    d = (amax / np.float32(127)).astype(np.float32)
    idv = np.where(d != 0, np.float32(1) / np.where(d != 0, d, np.float32(1)), np.float32(0)).astype(np.float32)
    v = (b * idv[:, None]).astype(np.float32)
    q = (np.sign(v) * np.floor(np.abs(v.astype(np.float64)) + 0.5)).astype(np.int64).astype(np.int8)
    out = np.concatenate([f16_bits(d).view(np.uint8).reshape(-1, 2), q.view(np.uint8)], axis=1)
    return out.tobytes()


def q45_0(x, bits):
    half = f32(1 << (bits - 1))
    out = bytearray()
    for blk in x.reshape(-1, 32):
        amax, mx = f32(0), f32(0)
        for v in blk:
            if amax < abs(v):
                amax, mx = f32(abs(v)), v
        d = f32(mx / -half)
        idv = f32(f32(1) / d) if d != 0 else f32(0)
        q = [min(int(2 * half - 1), int(f32(f32(v * idv) + f32(half + f32(0.5))))) for v in blk]  # trunc toward 0
        out += f16_bits(d).tobytes()
        if bits == 5:
            qh = 0
            for j in range(16):
                qh |= ((q[j] & 16) >> 4) << j
                qh |= ((q[j + 16] & 16) >> 4) << (j + 16)
            out += struct.pack("<I", qh)
        out += bytes((q[j] & 15) | ((q[j + 16] & 15) << 4) for j in range(16))
    return bytes(out)


def fit_scale_min(x, w, nmax, rmin, rdelta, nstep):
    n = len(x)
    mn, mx, sum_w = x[0], x[0], w[0]
    sum_x = f32(sum_w * x[0])
    for i in range(1, n):
        mn = min(mn, x[i])
        mx = max(mx, x[i])
        sum_w = f32(sum_w + w[i])
        sum_x = f32(sum_x + f32(w[i] * x[i]))
    if mn > 0:
        mn = f32(0)
    if mx == mn:
        return f32(0), [0] * n, f32(-mn)
    iscale = f32(f32(nmax) / f32(mx - mn))
    scale = f32(f32(1) / iscale)
    L, best = [0] * n, f32(0)
    for i in range(n):
        L[i] = max(0, min(nmax, nearest_int(f32(iscale * f32(x[i] - mn)))))
        diff = f32(f32(f32(scale * f32(L[i])) + mn) - x[i])
        best = f32(best + f32(w[i] * f32(diff * diff)))
    for step in range(nstep + 1):
        iscale = f32(f32(f32(rmin + f32(rdelta * f32(step))) + f32(nmax)) / f32(mx - mn))
        sl = sl2 = sxl = f32(0)
        aux = [0] * n
        for i in range(n):
            l = max(0, min(nmax, nearest_int(f32(iscale * f32(x[i] - mn)))))
            aux[i] = l
            wl = f32(w[i] * f32(l))
            sl = f32(sl + wl)
            sl2 = f32(sl2 + f32(wl * f32(l)))
            sxl = f32(sxl + f32(wl * x[i]))
        D = f32(f32(sum_w * sl2) - f32(sl * sl))
        if D > 0:
            this_scale = f32(f32(f32(sum_w * sxl) - f32(sum_x * sl)) / D)
            this_min = f32(f32(f32(sl2 * sum_x) - f32(sl * sxl)) / D)
            if this_min > 0:
                this_min = f32(0)
                this_scale = f32(sxl / sl2)
            cur = f32(0)
            for i in range(n):
                diff = f32(f32(f32(this_scale * f32(aux[i])) + this_min) - x[i])
                cur = f32(cur + f32(w[i] * f32(diff * diff)))
            if cur < best:
                L, best, scale, mn = list(aux), cur, this_scale, this_min
    return scale, L, f32(-mn)


def q4_k(x):
    out = bytearray()
    for sb in x.reshape(-1, 256):
        L, scales, mins = [0] * 256, [], []
        for j in range(8):
            g = sb[32 * j:32 * j + 32]
            s2 = f32(0)
            for v in g:
                s2 = f32(s2 + f32(v * v))
            av = f32(np.sqrt(f32(s2 / f32(32))))
            w = [f32(av + abs(v)) for v in g]
            sc, Lg, m = fit_scale_min(g, w, 15, f32(-1), f32(0.1), 20)
            L[32 * j:32 * j + 32] = Lg
            scales.append(sc)
            mins.append(m)
        max_scale, max_min = f32(0), f32(0)
        for j in range(8):
            max_scale = max(max_scale, scales[j])
            max_min = max(max_min, mins[j])
        inv_scale = f32(f32(63) / max_scale) if max_scale > 0 else f32(0)
        inv_min = f32(f32(63) / max_min) if max_min > 0 else f32(0)
        sc = [0] * 12
        for j in range(8):
            ls = min(63, nearest_int(f32(inv_scale * scales[j])) & 0xFF)
            lm = min(63, nearest_int(f32(inv_min * mins[j])) & 0xFF)
            if j < 4:
                sc[j], sc[j + 4] = ls, lm
            else:
                sc[j + 4] = (ls & 15) | ((lm & 15) << 4)
                sc[j - 4] |= (ls >> 4) << 6
                sc[j] |= (lm >> 4) << 6
        d_bits, dmin_bits = f16_bits(f32(max_scale / f32(63))), f16_bits(f32(max_min / f32(63)))
        d_all, dmin_all = f32(f16_value(d_bits)), f32(f16_value(dmin_bits))
        for j in range(8):
            if j < 4:
                s, m = sc[j] & 63, sc[j + 4] & 63
            else:
                s, m = (sc[j + 4] & 15) | ((sc[j - 4] >> 6) << 4), (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4)
            d = f32(d_all * f32(s))
            if d == 0:
                continue
            dm = f32(dmin_all * f32(m))
            for l in range(32):
                L[32 * j + l] = max(0, min(15, nearest_int(f32(f32(sb[32 * j + l] + dm) / d))))
        out += d_bits.tobytes() + dmin_bits.tobytes() + bytes(sc)
        out += bytes(L[j + l] | (L[j + l + 32] << 4) for j in range(0, 256, 64) for l in range(32))
    return bytes(out)


def fit_scale_symmetric(x, nmax):
    """Q6_K's fit of a group: levels [-nmax, nmax - 1], weights x^2, 18 trial scales around
    -nmax / (the value of largest magnitude), the largest sum(w x l)^2 / sum(w l^2) winning."""
    n = len(x)
    mx, amax = f32(0), f32(0)
    for v in x:
        if abs(v) > amax:
            amax, mx = f32(abs(v)), v
    if amax < f32(1e-15):
        return f32(0), [0] * n

    def levels(iscale):
        return [max(-nmax, min(nmax - 1, nearest_int(f32(iscale * v)))) for v in x]

    def sums(ls):
        slx = sl2 = f32(0)
        for v, l in zip(x, ls):
            w = f32(v * v)
            slx = f32(slx + f32(f32(w * v) * f32(l)))
            sl2 = f32(sl2 + f32(f32(w * f32(l)) * f32(l)))
        return slx, sl2

    ls = levels(f32(f32(-nmax) / mx))
    L = [l + nmax for l in ls]
    slx, sl2 = sums(ls)
    scale = f32(slx / sl2) if sl2 != 0 else f32(0)
    best = f32(scale * slx)
    for step in range(-9, 10):
        if step == 0:
            continue
        iscale = f32(f32(-f32(f32(nmax) + f32(f32(0.1) * f32(step)))) / mx)
        ls = levels(iscale)
        slx, sl2 = sums(ls)
        if sl2 > 0 and f32(slx * slx) > f32(best * sl2):
            L = [l + nmax for l in ls]
            scale = f32(slx / sl2)
            best = f32(scale * slx)
    return scale, L


def q6_k(x):
    out = bytearray()
    for sb in x.reshape(-1, 256):
        L, scales = [0] * 256, []
        for ib in range(16):
            s, Lg = fit_scale_symmetric(sb[16 * ib:16 * ib + 16], 32)
            scales.append(s)
            L[16 * ib:16 * ib + 16] = Lg
        max_scale, max_abs = f32(0), f32(0)
        for s in scales:
            if abs(s) > max_abs:
                max_abs, max_scale = f32(abs(s)), s
        if max_abs < f32(1e-15):
            out += bytes(210)
            continue
        iscale = f32(f32(-128) / max_scale)
        d_bits = f16_bits(f32(f32(1) / iscale))
        sc = [min(127, nearest_int(f32(iscale * s))) for s in scales]
        d_all = f32(f16_value(d_bits))
        for j in range(16):
            d = f32(d_all * f32(sc[j]))
            if d == 0:
                continue
            for i in range(16):
                L[16 * j + i] = max(-32, min(31, nearest_int(f32(sb[16 * j + i] / d)))) + 32
        ql, qh = bytearray(128), bytearray(64)
        for h in range(2):
            j = 128 * h
            for l in range(32):
                q1, q2, q3, q4 = L[j + l], L[j + l + 32], L[j + l + 64], L[j + l + 96]
                ql[64 * h + l] = (q1 & 15) | ((q3 & 15) << 4)
                ql[64 * h + l + 32] = (q2 & 15) | ((q4 & 15) << 4)
                qh[32 * h + l] = (q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6)
        out += bytes(ql) + bytes(qh) + bytes(s & 0xFF for s in sc) + d_bits.tobytes()
    return bytes(out)


def write_quantize_case(out, rng):
    d = os.path.join(out, "quantize")
    os.makedirs(d, exist_ok=True)
    rows = [rng.standard_normal(512) * 0.02, rng.standard_normal(512) * 3.0, np.zeros(512),
            np.full(512, 0.25), np.concatenate([rng.standard_normal(511) * 0.01, [5.0]]),
            rng.uniform(0.0, 1.0, 512), -rng.uniform(0.0, 1.0, 512), rng.standard_t(2, 512) * 0.05]
    x = np.stack(rows).astype(np.float32)
    x.tofile(os.path.join(d, "input.f32"))
    for name, fn in (("Q8_0", q8_0_exact), ("Q4_0", lambda r: q45_0(r, 4)), ("Q5_0", lambda r: q45_0(r, 5)),
                     ("Q4_K", q4_k), ("Q6_K", q6_k)):
        with open(os.path.join(d, name + ".bin"), "wb") as f:
            for r in x:
                f.write(fn(r))
    json.dump({"rows": len(rows), "cols": 512, "types": ["Q8_0", "Q4_0", "Q5_0", "Q4_K", "Q6_K"]},
              open(os.path.join(d, "manifest.json"), "w"))


# ---------------------------------------------------------------- tiny models

MODEL_CASES = {
    # name: (arch, matrix type, per-tensor overrides (Q4_K_M-like), tied)
    **{f"qwen3_{t.lower()}": ("qwen3", t, {}, False) for t in GGML},
    "qwen3_q4_k_m": ("qwen3", "Q4_K", {"attn_v": "Q6_K", "ffn_down": "Q6_K", "token_embd": "Q6_K"}, False),
    "llama_f32": ("llama", "F32", {}, True),
    "llama_q8_0": ("llama", "Q8_0", {}, True),
    "llama_q4_k": ("llama", "Q4_K", {}, True),
    "qwen2_q8_0": ("qwen2", "Q8_0", {}, True),
    "qwen2_q4_k_m": ("qwen2", "Q4_K", {"attn_v": "Q6_K", "ffn_down": "Q6_K", "token_embd": "Q6_K"}, True),
}
H, NH, NKV, HD, I, L, V = 256, 4, 2, 64, 512, 2, 300


def llama_permute(w, n_head):
    """llama.cpp's converter: rows of each head reordered from (half, index) to (index, half)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def make_model_case(out, name, seed):
    arch, mtype, overrides, tied = MODEL_CASES[name]
    rng = np.random.default_rng(seed)
    hf_arch = {"qwen3": "Qwen3ForCausalLM", "qwen2": "Qwen2ForCausalLM", "llama": "LlamaForCausalLM"}[arch]
    cfg = {"architectures": [hf_arch], "vocab_size": V, "hidden_size": H, "intermediate_size": I,
           "num_hidden_layers": L, "num_attention_heads": NH, "num_key_value_heads": NKV, "head_dim": HD,
           "rms_norm_eps": 1e-6, "rope_theta": 10000.0 if arch == "llama" else 1000000.0, "tie_word_embeddings": tied}
    kvs = [("general.architecture", STRING, arch), ("general.alignment", U32, 64),
           (f"{arch}.block_count", U32, L), (f"{arch}.context_length", U32, 4096),
           (f"{arch}.embedding_length", U32, H), (f"{arch}.feed_forward_length", U32, I),
           (f"{arch}.attention.head_count", U32, NH), (f"{arch}.attention.head_count_kv", U32, NKV),
           (f"{arch}.attention.key_length", U32, HD), (f"{arch}.attention.value_length", U32, HD),
           (f"{arch}.attention.layer_norm_rms_epsilon", F32, 1e-6), (f"{arch}.rope.freq_base", F32, cfg["rope_theta"])]
    tensors, w = [], {}

    def matrix(gguf, hf, rows, cols, std, heads=0):
        base = gguf.split(".")[-2] if gguf.startswith("blk.") else gguf.split(".")[0]
        t = overrides.get(base, mtype)
        raw = random_blocks(rng, t, rows * cols, std)
        tensors.append((gguf, t, [cols, rows], raw))
        m = dequant(t, raw, rows * cols).reshape(rows, cols)
        if heads:  # undo the converter's interleave: HF row (head, half, j) is stored at (head, j, half)
            m = m.reshape(heads, HD // 2, 2, cols).swapaxes(1, 2).reshape(rows, cols)
            assert np.array_equal(llama_permute(m, heads), dequant(t, raw, rows * cols).reshape(rows, cols))
        w[hf] = torch.from_numpy(m)

    def norm(gguf, hf, n):
        v = (1.0 + 0.2 * rng.standard_normal(n)).astype(np.float32)
        tensors.append((gguf, "F32", [n], v.tobytes()))
        w[hf] = torch.from_numpy(v.astype(np.float64))

    matrix("token_embd.weight", "model.embed_tokens.weight", V, H, 1.0)
    for i in range(L):
        p, g = f"model.layers.{i}.", f"blk.{i}."
        norm(g + "attn_norm.weight", p + "input_layernorm.weight", H)
        perm = arch == "llama"
        matrix(g + "attn_q.weight", p + "self_attn.q_proj.weight", NH * HD, H, H ** -0.5, NH if perm else 0)
        matrix(g + "attn_k.weight", p + "self_attn.k_proj.weight", NKV * HD, H, H ** -0.5, NKV if perm else 0)
        matrix(g + "attn_v.weight", p + "self_attn.v_proj.weight", NKV * HD, H, H ** -0.5)
        matrix(g + "attn_output.weight", p + "self_attn.o_proj.weight", H, NH * HD, (NH * HD) ** -0.5)
        if arch == "qwen3":
            norm(g + "attn_q_norm.weight", p + "self_attn.q_norm.weight", HD)
            norm(g + "attn_k_norm.weight", p + "self_attn.k_norm.weight", HD)
        if arch == "qwen2":  # q/k/v biases, F32 as llama.cpp's converter writes them
            for t, n, std in (("q", NH * HD, 0.5), ("k", NKV * HD, 2.0), ("v", NKV * HD, 0.5)):
                b = (std * rng.standard_normal(n)).astype(np.float32)
                tensors.append((g + f"attn_{t}.bias", "F32", [n], b.tobytes()))
                w[p + f"self_attn.{t}_proj.bias"] = torch.from_numpy(b.astype(np.float64))
        norm(g + "ffn_norm.weight", p + "post_attention_layernorm.weight", H)
        matrix(g + "ffn_gate.weight", p + "mlp.gate_proj.weight", I, H, H ** -0.5)
        matrix(g + "ffn_up.weight", p + "mlp.up_proj.weight", I, H, H ** -0.5)
        matrix(g + "ffn_down.weight", p + "mlp.down_proj.weight", H, I, I ** -0.5)
    norm("output_norm.weight", "model.norm.weight", H)
    if not tied:
        matrix("output.weight", "lm_head.weight", V, H, 2.0 * H ** -0.5)
    factors = None
    if arch == "llama":  # Llama 3's RoPE scaling, as the converter stores it
        factors = (1.0 + 3.0 * rng.random(HD // 2)).astype(np.float32)
        tensors.append(("rope_freqs.weight", "F32", [HD // 2], factors.tobytes()))
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    write_gguf(os.path.join(d, "model.gguf"), kvs, tensors, alignment=64)
    if name == "qwen3_f32":  # the same model quantized here, for --quantization on load
        qt, k = [], None
        for tn, tt, ne, raw in tensors:
            rows = np.frombuffer(raw, dtype=np.float32).reshape(-1, ne[0])
            qt.append((tn, "Q8_0", ne, q8_0_rows(rows)) if len(ne) == 2 else (tn, tt, ne, raw))
            if tn == "blk.0.attn_k.weight":  # Q4_K in float32 scalar steps is slow: one matrix
                k = (tn, "Q4_K", ne, b"".join(q4_k(r) for r in rows))
        os.makedirs(os.path.join(out, "quantize"), exist_ok=True)
        write_gguf(os.path.join(out, "quantize", "qwen3_q8_0.gguf"), kvs, qt)
        write_gguf(os.path.join(out, "quantize", "qwen3_attn_k_q4_k.gguf"), kvs[:1], [k])
    return d, cfg, w, factors


def model_reference(d, cfg, w, factors, seed, greedy_tokens):
    inv_freq = hf_reference.inv_freq
    if factors is not None:
        hf_reference.inv_freq = lambda c: inv_freq(c) / torch.from_numpy(factors.astype(np.float64))
    try:
        g = torch.Generator().manual_seed(seed + 1)
        prompts = [torch.randint(3, V, (n,), generator=g).tolist() for n in (1, 7, 40, 150)]
        T = max(len(p) for p in prompts)
        logits = torch.zeros(len(prompts), T, V, dtype=torch.float32)
        for i, p in enumerate(prompts):
            logits[i, : len(p)] = hf_reference.forward(cfg, w, p).to(torch.float32)
        greedy = []
        for p in prompts[1:3]:
            seq = list(p)
            for _ in range(greedy_tokens):
                seq.append(int(hf_reference.forward(cfg, w, seq)[-1].argmax()))
            greedy.append(seq[len(p):])
    finally:
        hf_reference.inv_freq = inv_freq
    logits.numpy().tofile(os.path.join(d, "logits.f32"))
    json.dump({"prompts": prompts, "logits_file": "logits.f32", "logits_shape": [len(prompts), T, V],
               "greedy": greedy, "greedy_prompts": [1, 2], "greedy_tokens": greedy_tokens},
              open(os.path.join(d, "reference.json"), "w"))


# ---------------------------------------------------------------- tokenizers

def tokenizer_kvs(path, pre, add_bos, vocab_size=0):
    """The tokenizer.ggml.* keys llama.cpp's converter writes for a byte-level BPE tokenizer.json:
    as many tokens as the model's vocab_size when it has more rows than the tokenizer has ids (the
    rest "[PADi]", unused), as llama.cpp checks the embedding's rows against the token count."""
    j = json.load(open(path, encoding="utf-8"))
    added = {a["id"]: a for a in j.get("added_tokens", [])}
    vocab = j["model"]["vocab"]
    n = max(max(vocab.values()) + 1, max(added) + 1 if added else 0, vocab_size)
    tokens, types = [f"[PAD{i}]" for i in range(n)], [5] * n  # gaps: unused
    for t, i in vocab.items():
        tokens[i], types[i] = t, 1
    for i, a in added.items():
        tokens[i], types[i] = a["content"], 3 if a.get("special") else 4
    merges = [m if isinstance(m, str) else " ".join(m) for m in j["model"]["merges"]]
    bos = next((i for i, a in added.items() if a["content"] in ("<|begin_of_text|>", "<|endoftext|>")), 0)
    kvs = [("general.architecture", STRING, "none"), ("tokenizer.ggml.model", STRING, "gpt2"),
           ("tokenizer.ggml.pre", STRING, pre), ("tokenizer.ggml.tokens", ARRAY, (STRING, tokens)),
           ("tokenizer.ggml.token_type", ARRAY, (I32, types)), ("tokenizer.ggml.merges", ARRAY, (STRING, merges)),
           ("tokenizer.ggml.bos_token_id", U32, bos), ("tokenizer.ggml.add_bos_token", BOOL, add_bos)]
    return kvs[1:]


def write_tokenizer_case(out, name, path, pre, add_bos):
    kvs = [("general.architecture", STRING, "none")] + tokenizer_kvs(path, pre, add_bos)
    d = os.path.join(out, "tokenizers")
    os.makedirs(d, exist_ok=True)
    write_gguf(os.path.join(d, name + ".gguf"), kvs, [])


def convert(hf_dir, out, tname):
    """An HF Qwen3 checkpoint as one GGUF file (the names and keys of llama.cpp's converter)."""
    cfg = json.load(open(os.path.join(hf_dir, "config.json")))
    assert cfg["architectures"] == ["Qwen3ForCausalLM"], cfg["architectures"]
    w = lazy_tensors(hf_dir)
    tok = json.load(open(os.path.join(hf_dir, "tokenizer.json"), encoding="utf-8"))
    split = json.dumps(tok.get("pre_tokenizer"))
    pre = "qwen2" if "\\\\p{N}|" in split else "llama-bpe" if "\\\\p{N}{1,3}" in split else None
    assert pre, "unknown pre-tokenizer: " + split
    eos = cfg.get("eos_token_id", [])
    eos = eos if isinstance(eos, list) else [eos]
    a = "qwen3"
    kvs = [("general.architecture", STRING, a), (f"{a}.block_count", U32, cfg["num_hidden_layers"]),
           (f"{a}.context_length", U32, cfg.get("max_position_embeddings", 32768)),
           (f"{a}.embedding_length", U32, cfg["hidden_size"]), (f"{a}.feed_forward_length", U32, cfg["intermediate_size"]),
           (f"{a}.attention.head_count", U32, cfg["num_attention_heads"]),
           (f"{a}.attention.head_count_kv", U32, cfg["num_key_value_heads"]),
           (f"{a}.attention.key_length", U32, cfg["head_dim"]),
           (f"{a}.attention.value_length", U32, cfg["head_dim"]),
           (f"{a}.attention.layer_norm_rms_epsilon", F32, cfg["rms_norm_eps"]),
           (f"{a}.rope.freq_base", F32, cfg["rope_theta"])]
    kvs += tokenizer_kvs(os.path.join(hf_dir, "tokenizer.json"), pre, False, cfg["vocab_size"])
    if eos:
        kvs.append(("tokenizer.ggml.eos_token_id", U32, eos[-1]))
    if len(eos) > 1:
        kvs.append(("tokenizer.ggml.eot_token_id", U32, eos[0]))
    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    layer = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm", "self_attn.q_proj": "attn_q",
             "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
             "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm", "mlp.gate_proj": "ffn_gate",
             "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
    def encode(read, t):
        m = read()
        if t == "F32":
            return m.astype(np.float32).tobytes()
        if t == "F16":
            return m.astype(np.float16).tobytes()
        return (m.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16).tobytes()  # BF16: exact for bf16 weights

    tensors = []
    for hf, (shape, read) in w.items():
        if hf in names:
            g = names[hf]
        else:
            parts = hf.split(".")
            g = f"blk.{parts[2]}.{layer['.'.join(parts[3:-1])]}.weight"
        t = tname if len(shape) == 2 else "F32"
        tensors.append((g, t, list(reversed(shape)), lambda read=read, t=t: encode(read, t)))
    write_gguf(out, kvs, tensors)


def lazy_tensors(hf_dir):
    """{name: (shape, read)} for an HF checkpoint's tensors, in file order; read() returns one
    tensor as float32, read from its file only when called (an 8B checkpoint does not fit in
    memory as float32)."""
    out = {}
    for path in hf_reference.checkpoint_files(hf_dir):
        for entry in hf_reference.safetensors_entries(path):

            def read(path=path, entry=entry):
                with open(path, "rb") as f:
                    return hf_reference.read_tensor(f, path, *entry).to(torch.float32).numpy()
            out[entry[0]] = (entry[2], read)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out")
    ap.add_argument("--convert", help="HF_DIR=OUT.gguf[:TYPE]")
    ap.add_argument("--greedy-tokens", type=int, default=16)
    ap.add_argument("--tokenizer", action="append", default=[], help="NAME=tokenizer.json:pre[:bos]")
    args = ap.parse_args()
    if args.convert:
        hf_dir, rest = args.convert.split("=", 1)
        out, _, tname = rest.partition(":")
        convert(hf_dir, out, tname or "BF16")
        print("wrote", out)
        return
    if not args.out:
        ap.error("--out or --convert is required")
    rng = np.random.default_rng(7)
    write_dequant_case(args.out, rng)
    write_quantize_case(args.out, rng)
    x = np.random.default_rng(3).standard_normal((5, 256)).astype(np.float32)
    assert q8_0_rows(x) == b"".join(q8_0_exact(r) for r in x)
    for i, name in enumerate(MODEL_CASES):
        d, cfg, w, factors = make_model_case(args.out, name, seed=200 + i)
        model_reference(d, cfg, w, factors, seed=200 + i, greedy_tokens=args.greedy_tokens)
        print("wrote", d)
    for spec in args.tokenizer:
        name, rest = spec.split("=", 1)
        parts = rest.split(":")
        if not os.path.exists(parts[0]):
            print(f"skipped tokenizer {name}: {parts[0]} is absent")
            continue
        write_tokenizer_case(args.out, name, parts[0], parts[1], len(parts) > 2 and parts[2] == "bos")
        print("wrote tokenizer", name)


if __name__ == "__main__":
    main()
