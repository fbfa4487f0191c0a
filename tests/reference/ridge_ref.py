#!/usr/bin/python3
"""ridge_ref: an independent numpy reference for ridge's LLM inference engine.

It reads Hugging Face checkpoints (config.json + *.safetensors) with its own
safetensors parser and runs the forward pass the way Hugging Face transformers
does for these architectures:

    LlamaForCausalLM     (Llama 2/3.x, incl. rope_scaling rope_type "llama3")
    MistralForCausalLM   (same as Llama, optional sliding window)
    Qwen2ForCausalLM     (q/k/v projection biases)
    Qwen3ForCausalLM     (per-head q_norm/k_norm RMSNorm before RoPE, explicit head_dim)
    MixtralForCausalLM   (block_sparse_moe: softmax router, top-k, renormalised)
    Qwen3MoeForCausalLM  (mlp.gate / mlp.experts.E.*, norm_topk_prob)

Two independent paths compute the same logits:
  * forward_full(tokens)            -- whole sequence at once, T x T causal mask,
                                       no state (what HF does without a cache);
  * forward_cached(tokens, cache)   -- incremental, appends K/V to a KVCache and
                                       attends each new query over the cache.
A self-check (selftest, generate --check) asserts they agree.

Only numpy is used; run it with /usr/bin/python3.  Everything is computed in
float32 by default (bf16/f16 weights are upcast exactly to f32), or in float64
with --f64 for a higher-precision "truth".

CLI (see README.md):
  ridge_ref.py generate --model DIR --prompt-ids 1,2,3 -n 33 --out ref.npy
  ridge_ref.py compare  --model DIR --prompt-ids 1,2,3 --logits ridge.npy [--ids ..] [--tol 1e-4]
  ridge_ref.py selftest
"""

import argparse
import json
import math
import os
import struct
import sys
import tempfile

import numpy as np

# ----------------------------------------------------------------------------
# safetensors: reader and writer (format: u64 LE header length N, N bytes of
# JSON header {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__"},
# then the raw little-endian data section; offsets are relative to its start).
# ----------------------------------------------------------------------------

_ST_PLAIN = {
    "F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "F16": np.dtype("<f2"),
    "I64": np.dtype("<i8"), "I32": np.dtype("<i4"), "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"), "U8": np.dtype("u1"), "BOOL": np.dtype("?"),
}


def bf16_bits_to_f32(u16):
    """bf16 bit patterns (uint16 array) -> float32, exactly (bits << 16)."""
    return (u16.astype(np.uint32) << np.uint32(16)).view(np.float32)


def f32_to_bf16_bits(x):
    """float32 array -> bf16 bit patterns (uint16), round-to-nearest-even."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16)


# ----------------------------------------------------------------------------
# GGUF k-quants (read-only), written from ggml's block layout: super-blocks of
# 256 weights. Vectorised over blocks; every step is float32 and in ggml's
# order, so the results are llama.cpp's to the bit.
# ----------------------------------------------------------------------------

def dequant_q4_K(raw):
    """q4_K blocks (144 bytes: f16 d, f16 dmin, 12 bytes of 6-bit scales and
    mins, 128 bytes of nibbles) -> float32 (n_blocks * 256)."""
    b = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 144)
    d = b[:, 0:2].copy().view("<f2").astype(np.float32)          # (nb, 1)
    dmin = b[:, 2:4].copy().view("<f2").astype(np.float32)
    sc = b[:, 4:16].astype(np.uint8)
    # Sub-blocks 0-3: low 6 bits of bytes 0-3 (scales) and 4-7 (mins);
    # 4-7: low nibble of bytes 8-11 plus the top 2 bits of bytes 0-3 (scales),
    # high nibble of 8-11 plus the top 2 bits of bytes 4-7 (mins).
    scales = np.concatenate([sc[:, 0:4] & 63, (sc[:, 8:12] & 0xF) | ((sc[:, 0:4] >> 6) << 4)], axis=1)
    mins = np.concatenate([sc[:, 4:8] & 63, (sc[:, 8:12] >> 4) | ((sc[:, 4:8] >> 6) << 4)], axis=1)
    qs = b[:, 16:144].reshape(-1, 4, 32)                          # 4 groups of 32 bytes
    q = np.stack([qs & 0xF, qs >> 4], axis=2).reshape(-1, 8, 32)  # sub-block 2g: low, 2g+1: high
    d1 = d * scales.astype(np.float32)                            # (nb, 8), exact
    m1 = dmin * mins.astype(np.float32)
    y = (d1[:, :, None] * q.astype(np.float32)) - m1[:, :, None]
    return y.astype(np.float32).reshape(-1)


def dequant_q6_K(raw):
    """q6_K blocks (210 bytes: 128 bytes of low 4 bits, 64 of high 2 bits, 16
    int8 scales, f16 d) -> float32 (n_blocks * 256)."""
    b = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 210)
    d = b[:, 208:210].copy().view("<f2").astype(np.float32)      # (nb, 1)
    sc = b[:, 192:208].view(np.int8).astype(np.float32)           # (nb, 16)
    out = np.empty((b.shape[0], 256), dtype=np.float32)
    for half in range(2):
        ql = b[:, 64 * half:64 * half + 64].astype(np.int32)
        qh = b[:, 128 + 32 * half:128 + 32 * half + 32].astype(np.int32)
        q = [(ql[:, 0:32] & 0xF) | (((qh >> 0) & 3) << 4),
             (ql[:, 32:64] & 0xF) | (((qh >> 2) & 3) << 4),
             (ql[:, 0:32] >> 4) | (((qh >> 4) & 3) << 4),
             (ql[:, 32:64] >> 4) | (((qh >> 6) & 3) << 4)]
        for u in range(4):
            # One scale per 16 weights: (d * sc) first, then the quant.
            s = np.repeat(d * sc[:, 8 * half + 2 * u:8 * half + 2 * u + 2], 16, axis=1)
            out[:, 128 * half + 32 * u:128 * half + 32 * u + 32] = s * (q[u] - 32).astype(np.float32)
    return out.reshape(-1)


def _read_safetensors_file(path, out):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n).decode("utf-8"))
    size = os.path.getsize(path)
    data = None
    if size > 8 + n:
        data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dt, shape = info["dtype"], tuple(info["shape"])
        b, e = info["data_offsets"]
        raw = data[b:e] if data is not None else np.zeros(0, np.uint8)
        if dt == "BF16":
            arr = bf16_bits_to_f32(raw.view("<u2"))
        elif dt in ("F32", "F16", "F64"):
            arr = raw.view(_ST_PLAIN[dt]).astype(np.float32, copy=(dt != "F32"))
        elif dt in _ST_PLAIN:
            arr = raw.view(_ST_PLAIN[dt])
        else:
            raise ValueError("%s: tensor %s has unsupported dtype %s" % (path, name, dt))
        expect = int(np.prod(shape)) if shape else 1
        if arr.size != expect:
            raise ValueError("%s: tensor %s: %d elements for shape %s" % (path, name, arr.size, shape))
        out[name] = arr.reshape(shape)


def read_safetensors(path):
    """Read a .safetensors file, a directory holding model.safetensors, or a
    sharded checkpoint (model.safetensors.index.json + shards).

    Returns {name: np.ndarray}; floating tensors are float32 (F32 is a
    read-only memmap view, BF16/F16 are upcast exactly)."""
    out = {}
    if os.path.isdir(path):
        index = os.path.join(path, "model.safetensors.index.json")
        single = os.path.join(path, "model.safetensors")
        if os.path.exists(index):
            with open(index) as f:
                weight_map = json.load(f)["weight_map"]
            for shard in sorted(set(weight_map.values())):
                _read_safetensors_file(os.path.join(path, shard), out)
            missing = [k for k in weight_map if k not in out]
            if missing:
                raise ValueError("index lists tensors not found in shards: %s" % missing[:5])
        elif os.path.exists(single):
            _read_safetensors_file(single, out)
        else:
            files = sorted(p for p in os.listdir(path) if p.endswith(".safetensors"))
            if not files:
                raise FileNotFoundError("no .safetensors in %s" % path)
            for p in files:
                _read_safetensors_file(os.path.join(path, p), out)
    else:
        _read_safetensors_file(path, out)
    return out


def write_safetensors(path, tensors, metadata=None):
    """Write {name: (array, dtype)} with dtype in F32/F16/BF16 (or {name: array},
    stored as F32).  Used by the selftest to exercise read_safetensors."""
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        v = tensors[name]
        arr, dt = v if isinstance(v, tuple) else (v, "F32")
        arr = np.asarray(arr)
        if dt == "BF16":
            raw = f32_to_bf16_bits(arr).astype("<u2").tobytes()
        else:
            raw = np.ascontiguousarray(arr, dtype=_ST_PLAIN[dt]).tobytes()
        header[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    if metadata:
        header["__metadata__"] = metadata
    h = json.dumps(header).encode("utf-8")
    h += b" " * ((-len(h)) % 8)  # pad so the data section is 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for raw in blobs:
            f.write(raw)


# ----------------------------------------------------------------------------
# config.json
# ----------------------------------------------------------------------------

SUPPORTED = {
    "LlamaForCausalLM": "llama", "MistralForCausalLM": "llama",
    "Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3",
    "MixtralForCausalLM": "mixtral", "Qwen3MoeForCausalLM": "qwen3_moe",
}
_MODEL_TYPES = {"llama": "llama", "mistral": "llama", "qwen2": "qwen2", "qwen3": "qwen3",
                "mixtral": "mixtral", "qwen3_moe": "qwen3_moe"}


class Config:
    """The handful of config.json fields the forward pass needs."""

    def __init__(self, d):
        self.raw = d
        archs = d.get("architectures") or []
        kind = None
        for a in archs:
            kind = SUPPORTED.get(a, kind)
        if kind is None:
            kind = _MODEL_TYPES.get(d.get("model_type"))
        if kind is None:
            raise ValueError("unsupported architecture %s / model_type %s" % (archs, d.get("model_type")))
        self.kind = kind
        self.hidden = d["hidden_size"]
        self.n_layers = d["num_hidden_layers"]
        self.n_heads = d["num_attention_heads"]
        self.n_kv = d.get("num_key_value_heads") or self.n_heads
        # LlamaAttention: head_dim = getattr(config, "head_dim", hidden // heads)
        self.head_dim = d.get("head_dim") or self.hidden // self.n_heads
        self.vocab = d["vocab_size"]
        self.eps = d.get("rms_norm_eps", 1e-6)
        self.intermediate = d.get("intermediate_size")
        self.tie = bool(d.get("tie_word_embeddings", False))
        act = d.get("hidden_act", "silu")
        if act not in ("silu", "swish"):
            raise ValueError("hidden_act %s not supported (only silu)" % act)
        # rope: transformers <= 4.x keeps rope_theta + rope_scaling; v5 uses rope_parameters
        rp = d.get("rope_parameters") or {}
        self.rope_theta = float(rp.get("rope_theta", d.get("rope_theta", 10000.0)))
        scaling = d.get("rope_scaling") or (rp if rp.get("rope_type", "default") != "default" else None)
        self.rope_scaling = scaling
        self.partial_rotary = float(d.get("partial_rotary_factor", 1.0))
        # sliding window: Mistral/Mixtral apply it when set; Qwen2/3 only with use_sliding_window
        sw = d.get("sliding_window")
        if kind in ("qwen2", "qwen3", "qwen3_moe") and not d.get("use_sliding_window", False):
            sw = None
        self.sliding_window = sw
        self.max_window_layers = d.get("max_window_layers", self.n_layers)
        # MoE
        if kind == "mixtral":
            self.n_experts = d["num_local_experts"]
            self.top_k = d["num_experts_per_tok"]
            self.norm_topk = True  # MixtralSparseMoeBlock always renormalises
        elif kind == "qwen3_moe":
            self.n_experts = d["num_experts"]
            self.top_k = d["num_experts_per_tok"]
            self.norm_topk = bool(d.get("norm_topk_prob", False))
            self.sparse_step = d.get("decoder_sparse_step", 1)
            self.mlp_only_layers = set(d.get("mlp_only_layers") or [])
        else:
            self.n_experts = 0

    def layer_is_moe(self, i):
        if self.kind == "mixtral":
            return True
        if self.kind == "qwen3_moe":
            # Qwen3MoeDecoderLayer: sparse iff not in mlp_only_layers, num_experts > 0
            # and (layer_idx + 1) % decoder_sparse_step == 0
            return (i not in self.mlp_only_layers and self.n_experts > 0
                    and (i + 1) % self.sparse_step == 0)
        return False

    def layer_window(self, i):
        """Sliding window for layer i, or None (Qwen2/3: only layers >= max_window_layers)."""
        if self.sliding_window is None:
            return None
        if self.kind in ("qwen2", "qwen3", "qwen3_moe") and i < self.max_window_layers:
            return None
        return int(self.sliding_window)


def load_config(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        return Config(json.load(f))


# ----------------------------------------------------------------------------
# Layers.  x is (T, hidden) for T tokens unless said otherwise.
# ----------------------------------------------------------------------------

def rms_norm(x, w, eps):
    """RMSNorm over the last axis: x (..., d), w (d,) -> (..., d).
    Mirrors LlamaRMSNorm / Qwen3RMSNorm: compute in float32 (or wider),
    x * rsqrt(mean(x^2) + eps), then multiply by the weight."""
    xf = x.astype(np.float64) if x.dtype == np.float64 else x.astype(np.float32)
    var = np.mean(xf * xf, axis=-1, keepdims=True)
    return (w * (xf / np.sqrt(var + xf.dtype.type(eps)))).astype(x.dtype)


def linear(x, w, b=None):
    """nn.Linear: x (T, in), w (out, in), b (out,) or None -> (T, out)."""
    y = x @ w.T
    if b is not None:
        y = y + b
    return y


def silu(x):
    return x / (1.0 + np.exp(-x))


def swiglu_mlp(x, w_gate, w_up, w_down):
    """LlamaMLP / Qwen*MLP / Mixtral expert: down(silu(gate(x)) * up(x)).
    x (T, h); w_gate, w_up (I, h); w_down (h, I) -> (T, h)."""
    return linear(silu(linear(x, w_gate)) * linear(x, w_up), w_down)


def softmax(x, axis=-1):
    m = np.max(x, axis=axis, keepdims=True)
    e = np.exp(x - m)
    return e / np.sum(e, axis=axis, keepdims=True)


def moe_block(x, w_router, experts, top_k, normalize):
    """Sparse MoE (MixtralSparseMoeBlock / Qwen3MoeSparseMoeBlock).
    x (T, h); w_router (E, h); experts: list of (w_gate, w_up, w_down).
    router_logits = gate(x); p = softmax over ALL experts (float32);
    take top_k by probability; if normalize, divide the k weights by their sum;
    out = sum_k weight_k * expert_k(x)."""
    T = x.shape[0]
    probs = softmax(linear(x, w_router).astype(np.float32 if x.dtype == np.float32 else x.dtype), -1)
    # torch.topk: largest first; a stable sort on -p keeps the lower index on ties
    top = np.argsort(-probs, axis=-1, kind="stable")[:, :top_k]  # (T, k)
    wts = np.take_along_axis(probs, top, axis=-1)  # (T, k)
    if normalize:
        wts = wts / np.sum(wts, axis=-1, keepdims=True)
    wts = wts.astype(x.dtype)
    out = np.zeros_like(x)
    for e in np.unique(top):
        rows, slot = np.nonzero(top == e)
        g, u, d = experts[e]
        out[rows] += wts[rows, slot][:, None] * swiglu_mlp(x[rows], g, u, d)
    return out


def rope_inv_freq(cfg):
    """Inverse frequencies (rot_dim/2,), as transformers' ROPE_INIT_FUNCTIONS:
    default: 1 / theta^(2i/d); "linear": default / factor;
    "llama3": _compute_llama3_parameters (low frequencies divided by factor,
    high frequencies kept, a smooth blend in between)."""
    dim = int(cfg.head_dim * cfg.partial_rotary)
    inv = 1.0 / (cfg.rope_theta ** (np.arange(0, dim, 2, dtype=np.int64).astype(np.float64) / dim))
    sc = cfg.rope_scaling
    rtype = (sc or {}).get("rope_type", (sc or {}).get("type", "default"))
    if rtype in (None, "default"):
        return inv
    if rtype == "linear":
        return inv / float(sc["factor"])
    if rtype == "llama3":
        factor = float(sc["factor"])
        lo, hi = float(sc["low_freq_factor"]), float(sc["high_freq_factor"])
        old_ctx = float(sc["original_max_position_embeddings"])
        lo_wavelen, hi_wavelen = old_ctx / lo, old_ctx / hi
        wavelen = 2.0 * math.pi / inv
        scaled = np.where(wavelen > lo_wavelen, inv / factor, inv)
        smooth = (old_ctx / wavelen - lo) / (hi - lo)
        smoothed = (1.0 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < hi_wavelen) & ~(wavelen > lo_wavelen)
        return np.where(medium, smoothed, scaled)
    raise ValueError("rope_scaling type %r not supported" % rtype)


def rope_cos_sin(positions, inv_freq, dtype):
    """cos, sin of shape (T, rot_dim) as LlamaRotaryEmbedding:
    freqs = pos * inv_freq; emb = cat(freqs, freqs).  In float32 mode this is
    done in float32 like transformers (inv_freq is a float32 buffer)."""
    wd = np.float64 if dtype == np.float64 else np.float32
    freqs = np.asarray(positions, dtype=wd)[:, None] * inv_freq.astype(wd)[None, :]
    emb = np.concatenate([freqs, freqs], axis=-1)
    return np.cos(emb).astype(dtype), np.sin(emb).astype(dtype)


def apply_rope(x, cos, sin):
    """Rotate-half RoPE (apply_rotary_pos_emb): x (T, H, D), cos/sin (T, R), R <= D.
    x_rot * cos + rotate_half(x_rot) * sin, rotate_half(a) = cat(-a2, a1);
    dimensions beyond R (partial rotary) pass through."""
    R = cos.shape[-1]
    xr, xp = x[..., :R], x[..., R:]
    half = R // 2
    rot = np.concatenate([-xr[..., half:], xr[..., :half]], axis=-1)
    out = xr * cos[:, None, :] + rot * sin[:, None, :]
    return np.concatenate([out, xp], axis=-1) if xp.shape[-1] else out


def attention(q, k, v, allowed, scale):
    """Scaled dot-product attention with GQA (eager_attention_forward).
    q (T, H, D); k, v (S, KV, D); allowed (T, S) bool mask -> (T, H, D).
    KV head j serves query heads j*n_rep .. j*n_rep+n_rep-1 (repeat_kv);
    softmax in float32 (or wider)."""
    H, KV = q.shape[1], k.shape[1]
    n_rep = H // KV
    kh = np.repeat(k, n_rep, axis=1).transpose(1, 2, 0)  # (H, D, S)
    vh = np.repeat(v, n_rep, axis=1).transpose(1, 0, 2)  # (H, S, D)
    scores = (q.transpose(1, 0, 2) @ kh) * q.dtype.type(scale)  # (H, T, S)
    scores = np.where(allowed[None], scores, -np.inf)
    p = softmax(scores, -1)
    return (p @ vh).transpose(1, 0, 2)  # (T, H, D)


# ----------------------------------------------------------------------------
# Model
# ----------------------------------------------------------------------------

class KVCache:
    """Per-layer K and V, each (S, KV, D), with post-RoPE keys."""

    def __init__(self, n_layers):
        self.k = [None] * n_layers
        self.v = [None] * n_layers
        self.pos = 0


class Model:
    def __init__(self, cfg, weights, dtype=np.float32):
        self.cfg, self.dtype = cfg, dtype
        self.w = weights
        self._used = set()
        self.inv_freq = rope_inv_freq(cfg)
        # check every layer's tensors up front so a missing name fails early
        for i in range(cfg.n_layers):
            self._layer(i)
        self.embed = self._get("model.embed_tokens.weight")
        if cfg.tie:  # tie_word_embeddings: lm_head shares embed_tokens
            self.lm_head = self.embed
        else:
            self.lm_head = self._get("lm_head.weight")
        self.final_norm = self._get("model.norm.weight")
        self._layers = [self._layer(i) for i in range(cfg.n_layers)]
        if self.embed.shape != (cfg.vocab, cfg.hidden):
            raise ValueError("embed_tokens shape %s != (%d, %d)" % (self.embed.shape, cfg.vocab, cfg.hidden))

    def _get(self, name, optional=False):
        if name not in self.w:
            if optional:
                return None
            raise KeyError("checkpoint lacks tensor %s" % name)
        a = self.w[name]
        if a.dtype != self.dtype:
            a = a.astype(self.dtype)
            self.w[name] = a
        return a

    def _layer(self, i):
        c, g, p = self.cfg, self._get, "model.layers.%d." % i
        L = {
            "in_norm": g(p + "input_layernorm.weight"),
            "post_norm": g(p + "post_attention_layernorm.weight"),
            "q": g(p + "self_attn.q_proj.weight"), "k": g(p + "self_attn.k_proj.weight"),
            "v": g(p + "self_attn.v_proj.weight"), "o": g(p + "self_attn.o_proj.weight"),
            # Qwen2: q/k/v biases; Llama with attention_bias: all four
            "qb": g(p + "self_attn.q_proj.bias", True), "kb": g(p + "self_attn.k_proj.bias", True),
            "vb": g(p + "self_attn.v_proj.bias", True), "ob": g(p + "self_attn.o_proj.bias", True),
            "q_norm": None, "k_norm": None, "window": c.layer_window(i),
        }
        if c.kind in ("qwen3", "qwen3_moe"):
            L["q_norm"] = g(p + "self_attn.q_norm.weight")
            L["k_norm"] = g(p + "self_attn.k_norm.weight")
        if c.kind == "qwen2" and L["qb"] is None:
            raise KeyError("Qwen2 checkpoint lacks %sself_attn.q_proj.bias" % p)
        if c.layer_is_moe(i):
            if c.kind == "mixtral":
                m = p + "block_sparse_moe."
                L["router"] = g(m + "gate.weight")
                L["experts"] = [(g(m + "experts.%d.w1.weight" % e), g(m + "experts.%d.w3.weight" % e),
                                 g(m + "experts.%d.w2.weight" % e)) for e in range(c.n_experts)]
            else:
                m = p + "mlp."
                L["router"] = g(m + "gate.weight")
                L["experts"] = [(g(m + "experts.%d.gate_proj.weight" % e), g(m + "experts.%d.up_proj.weight" % e),
                                 g(m + "experts.%d.down_proj.weight" % e)) for e in range(c.n_experts)]
        else:
            L["mlp"] = (g(p + "mlp.gate_proj.weight"), g(p + "mlp.up_proj.weight"), g(p + "mlp.down_proj.weight"))
        return L

    # -- pieces shared by both paths -------------------------------------------------

    def _qkv(self, L, x, positions):
        """Projections + (Qwen3) per-head q/k RMSNorm + RoPE.
        x (T, h) normed -> q (T, H, D), k, v (T, KV, D)."""
        c = self.cfg
        T = x.shape[0]
        q = linear(x, L["q"], L["qb"]).reshape(T, c.n_heads, c.head_dim)
        k = linear(x, L["k"], L["kb"]).reshape(T, c.n_kv, c.head_dim)
        v = linear(x, L["v"], L["vb"]).reshape(T, c.n_kv, c.head_dim)
        if L["q_norm"] is not None:  # Qwen3Attention: q_norm/k_norm over head_dim, before RoPE
            q = rms_norm(q, L["q_norm"], c.eps)
            k = rms_norm(k, L["k_norm"], c.eps)
        cos, sin = rope_cos_sin(positions, self.inv_freq, self.dtype)
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v

    def _ffn(self, L, x):
        if "mlp" in L:
            return swiglu_mlp(x, *L["mlp"])
        return moe_block(x, L["router"], L["experts"], self.cfg.top_k, self.cfg.norm_topk)

    def _finish(self, h):
        """Final RMSNorm + lm_head: (T, h) -> logits (T, vocab)."""
        return linear(rms_norm(h, self.final_norm, self.cfg.eps), self.lm_head)

    def _block(self, L, h, positions, attend):
        """One decoder layer (pre-norm residual), attend(q, k, v) -> (T, H, D)."""
        c = self.cfg
        T = h.shape[0]
        q, k, v = self._qkv(L, rms_norm(h, L["in_norm"], c.eps), positions)
        a = attend(q, k, v).reshape(T, c.n_heads * c.head_dim)
        h = h + linear(a, L["o"], L["ob"])
        return h + self._ffn(L, rms_norm(h, L["post_norm"], c.eps))

    def _embed(self, tokens):
        tokens = np.asarray(tokens, dtype=np.int64)
        if tokens.size and (tokens.min() < 0 or tokens.max() >= self.cfg.vocab):
            raise ValueError("token id out of range [0, %d)" % self.cfg.vocab)
        return self.embed[tokens].astype(self.dtype)

    # -- path 1: full recompute ------------------------------------------------------

    def forward_full(self, tokens):
        """Whole sequence, no cache: tokens (T,) -> logits (T, vocab).
        Causal mask: query i sees keys j <= i (and i - j < window if sliding)."""
        T = len(tokens)
        pos = np.arange(T)
        scale = 1.0 / math.sqrt(self.cfg.head_dim)
        h = self._embed(tokens)
        for L in self._layers:
            allowed = np.tril(np.ones((T, T), dtype=bool))
            if L["window"] is not None:
                allowed &= ~np.tril(np.ones((T, T), dtype=bool), -L["window"])
            h = self._block(L, h, pos, lambda q, k, v, m=allowed: attention(q, k, v, m, scale))
        return self._finish(h)

    # -- path 2: incremental with a KV cache -----------------------------------------

    def new_cache(self):
        return KVCache(self.cfg.n_layers)

    def forward_cached(self, tokens, cache):
        """Feed tokens (T,) after cache.pos earlier ones; appends K/V to the cache.
        Returns logits (T, vocab) for the fed positions."""
        T = len(tokens)
        start = cache.pos
        pos = np.arange(start, start + T)
        scale = 1.0 / math.sqrt(self.cfg.head_dim)
        h = self._embed(tokens)
        for li, L in enumerate(self._layers):
            def attend(q, k, v, li=li, L=L):
                if cache.k[li] is None:
                    cache.k[li], cache.v[li] = k, v
                else:
                    cache.k[li] = np.concatenate([cache.k[li], k], axis=0)
                    cache.v[li] = np.concatenate([cache.v[li], v], axis=0)
                kpos = np.arange(cache.k[li].shape[0])
                allowed = kpos[None, :] <= pos[:, None]
                if L["window"] is not None:
                    allowed &= (pos[:, None] - kpos[None, :]) < L["window"]
                return attention(q, cache.k[li], cache.v[li], allowed, scale)
            h = self._block(L, h, pos, attend)
        cache.pos += T
        return self._finish(h)


def load_model(model_dir, dtype=np.float32):
    return Model(load_config(model_dir), read_safetensors(model_dir), dtype)


# ----------------------------------------------------------------------------
# Rollouts and metrics
# ----------------------------------------------------------------------------

def greedy_rollout(model, prompt, n, prefill_chunked=True):
    """Greedy decode n tokens with the KV cache.
    Returns (rows (n, vocab) float32, ids (n,)): row 0 = logits at the last
    prompt position after prefill, row i = logits after feeding ids[i-1];
    ids[i] = argmax(rows[i])."""
    cache = model.new_cache()
    if prefill_chunked:
        last = model.forward_cached(list(prompt), cache)[-1]
    else:
        for t in prompt:
            last = model.forward_cached([t], cache)[-1]
    rows, ids = [], []
    for i in range(n):
        rows.append(last)
        ids.append(int(np.argmax(last)))
        if i + 1 < n:
            last = model.forward_cached([ids[-1]], cache)[-1]
    return np.stack(rows).astype(np.float32), ids


def teacher_forced_rows(model, prompt, fed, incremental=False):
    """Logits rows for prompt followed by fed tokens (len n-1): row 0 at the
    last prompt position, row i after fed[i-1].  One full-recompute pass by
    default, or the cached path (prefill, then one token at a time)."""
    P = len(prompt)
    if not incremental:
        return model.forward_full(list(prompt) + list(fed))[P - 1:].astype(np.float32)
    cache = model.new_cache()
    rows = [model.forward_cached(list(prompt), cache)[-1]]
    for t in fed:
        rows.append(model.forward_cached([t], cache)[-1])
    return np.stack(rows).astype(np.float32)


def row_metrics(a, b):
    """a = candidate, b = reference, both (n, V).  Returns per-row max abs
    error, NMSE = sum (a-b)^2 / sum b^2 (float64), argmax agreement, and the
    reference's top-2 margin."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    d = a64 - b64
    maxabs = np.max(np.abs(d), axis=1)
    nmse = np.sum(d * d, axis=1) / np.maximum(np.sum(b64 * b64, axis=1), 1e-300)
    agree = np.argmax(a, axis=1) == np.argmax(b, axis=1)
    top2 = np.sort(b64, axis=1)[:, -2:]
    margin = top2[:, 1] - top2[:, 0]
    return maxabs, nmse, agree, margin


# ----------------------------------------------------------------------------
# CLI
# ----------------------------------------------------------------------------

def _ids(s):
    s = s.strip()
    return [int(t) for t in s.replace(" ", "").split(",") if t != ""] if s else []


def _load_logits(path, vocab):
    if path.endswith(".npy"):
        a = np.load(path)
    else:  # raw little-endian float32 rows
        a = np.fromfile(path, dtype="<f4")
        if a.size % vocab:
            raise ValueError("%s: %d floats is not a multiple of vocab %d" % (path, a.size, vocab))
        a = a.reshape(-1, vocab)
    if a.ndim != 2:
        raise ValueError("%s: expected a 2-D (n, vocab) array, got shape %s" % (path, a.shape))
    return a.astype(np.float32)


def cmd_generate(args):
    dtype = np.float64 if args.f64 else np.float32
    model = load_model(args.model, dtype)
    prompt = _ids(args.prompt_ids)
    if not prompt:
        sys.exit("generate: empty --prompt-ids")
    rows, ids = greedy_rollout(model, prompt, args.n)
    if args.check:
        full = teacher_forced_rows(model, prompt, ids[:-1])
        _, nmse, agree, _ = row_metrics(rows, full)
        print("check: cached vs full recompute: worst nmse %.3e, argmax agree %d/%d"
              % (nmse.max(), agree.sum(), len(agree)))
        if nmse.max() > 1e-9 or not agree.all():
            sys.exit("check FAILED: KV-cached and full-recompute logits differ")
    if args.out:
        np.save(args.out, rows.astype(np.float32))
    print(",".join(str(i) for i in ids))
    return 0


def cmd_compare(args):
    dtype = np.float64 if args.f64 else np.float32
    model = load_model(args.model, dtype)
    prompt = _ids(args.prompt_ids)
    if not prompt:
        sys.exit("compare: empty --prompt-ids")
    got = _load_logits(args.logits, model.cfg.vocab)
    n, V = got.shape
    if V != model.cfg.vocab:
        print("FAIL: ridge logits have %d columns, model vocab_size is %d" % (V, model.cfg.vocab))
        return 1
    if not np.all(np.isfinite(got)):
        bad = int(np.nonzero(~np.all(np.isfinite(got), axis=1))[0][0])
        print("FAIL: ridge logits row %d has non-finite values" % bad)
        return 1
    ridge_argmax = [int(i) for i in np.argmax(got, axis=1)]
    fed = ridge_argmax[: n - 1]
    if args.ids:
        ids = _ids(args.ids)
        if len(ids) < n - 1:
            print("FAIL: --ids has %d ids, need at least %d (rows - 1)" % (len(ids), n - 1))
            return 1
        mism = [i for i in range(min(len(ids), n)) if ids[i] != ridge_argmax[i]]
        if mism:
            r = mism[0]
            print("FAIL: ridge's generated id %d at step %d is not the argmax (%d) of its own row %d "
                  "(greedy decoding and dumped logits disagree)" % (ids[r], r, ridge_argmax[r], r))
            return 1
        fed = ids[: n - 1]
    ref = teacher_forced_rows(model, prompt, fed, incremental=args.incremental)
    maxabs, nmse, agree, margin = row_metrics(got, ref)
    ref_argmax = np.argmax(ref, axis=1)
    if not args.quiet:
        print("row  fed_token  max_abs      nmse         argmax(ridge/ref)  ref_margin")
        for r in range(n):
            tok = prompt[-1] if r == 0 else fed[r - 1]
            print("%3d  %9d  %.4e  %.4e  %7d/%-7d %s  %.4g" % (
                r, tok, maxabs[r], nmse[r], ridge_argmax[r], ref_argmax[r],
                "ok" if agree[r] else "!!", margin[r]))
    worst = int(np.argmax(nmse))
    print("rows %d, worst nmse %.3e at row %d, max abs %.3e, argmax agree %d/%d"
          % (n, nmse[worst], worst, maxabs.max(), int(agree.sum()), n))
    fails = []
    bad_nmse = np.nonzero(nmse > args.tol)[0]
    if bad_nmse.size:
        fails.append("%d row(s) with nmse > tol %.1e; worst row %d: nmse %.3e, max abs %.3e"
                     % (bad_nmse.size, args.tol, worst, nmse[worst], maxabs[worst]))
    bad_arg = np.nonzero((~agree) & (margin > args.argmax_eps))[0]
    if bad_arg.size:
        r = int(bad_arg[0])
        fails.append("argmax differs at %d row(s) where the reference's top-2 margin > %g; first row %d: "
                     "ridge %d, reference %d (margin %.4g)"
                     % (bad_arg.size, args.argmax_eps, r, ridge_argmax[r], ref_argmax[r], margin[r]))
    if fails:
        for f in fails:
            print("FAIL: " + f)
        return 1
    print("OK")
    return 0


# ----------------------------------------------------------------------------
# selftest: tiny random models written with write_safetensors, read back,
# cached vs token-by-token vs full recompute, plus the compare path.
# ----------------------------------------------------------------------------

def _tiny_checkpoint(kind, rng):
    """Return (config dict, {name: (array, dtype)}) for a tiny random model."""
    h, H, KV, V, I, nl = 64, 4, 2, 97, 96, 2
    arch = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
            "mixtral": "MixtralForCausalLM", "qwen3_moe": "Qwen3MoeForCausalLM"}[kind]
    D = 24 if kind in ("qwen3", "qwen3_moe") else h // H  # explicit head_dim != hidden/heads
    cfg = {"architectures": [arch], "model_type": kind, "hidden_size": h, "num_hidden_layers": nl,
           "num_attention_heads": H, "num_key_value_heads": KV, "vocab_size": V,
           "intermediate_size": I, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu",
           "tie_word_embeddings": kind == "llama"}
    if kind in ("qwen3", "qwen3_moe"):
        cfg["head_dim"] = D
    if kind == "llama":
        cfg["rope_theta"] = 500000.0
        cfg["rope_scaling"] = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0, "original_max_position_embeddings": 16}
    if kind == "mixtral":
        cfg.update(num_local_experts=4, num_experts_per_tok=2, sliding_window=4)  # window < sequence
    if kind == "qwen3_moe":
        cfg.update(num_experts=4, num_experts_per_tok=2, norm_topk_prob=False, moe_intermediate_size=40,
                   decoder_sparse_step=1, mlp_only_layers=[1])
    dt = {"llama": "BF16", "qwen2": "F16", "qwen3": "BF16", "mixtral": "F32", "qwen3_moe": "BF16"}[kind]
    t = {}

    def W(name, *shape, scale=None, base=0.0):
        s = scale if scale is not None else 1.0 / math.sqrt(shape[-1])
        t[name] = ((base + s * rng.standard_normal(shape)).astype(np.float32), dt)

    W("model.embed_tokens.weight", V, h, scale=0.2 if cfg["tie_word_embeddings"] else 1.0)
    W("model.norm.weight", h, scale=0.1, base=1.0)
    if not cfg["tie_word_embeddings"]:
        W("lm_head.weight", V, h, scale=0.3)
    for i in range(nl):
        p = "model.layers.%d." % i
        W(p + "input_layernorm.weight", h, scale=0.1, base=1.0)
        W(p + "post_attention_layernorm.weight", h, scale=0.1, base=1.0)
        W(p + "self_attn.q_proj.weight", H * D, h, scale=0.4)
        W(p + "self_attn.k_proj.weight", KV * D, h, scale=0.4)
        W(p + "self_attn.v_proj.weight", KV * D, h)
        W(p + "self_attn.o_proj.weight", h, H * D)
        if kind == "qwen2":
            for x, n_out in (("q", H * D), ("k", KV * D), ("v", KV * D)):
                W(p + "self_attn.%s_proj.bias" % x, n_out, scale=0.3)
        if kind in ("qwen3", "qwen3_moe"):
            W(p + "self_attn.q_norm.weight", D, scale=0.1, base=1.0)
            W(p + "self_attn.k_norm.weight", D, scale=0.1, base=1.0)
        if kind == "mixtral":
            W(p + "block_sparse_moe.gate.weight", 4, h, scale=0.5)
            for e in range(4):
                W(p + "block_sparse_moe.experts.%d.w1.weight" % e, I, h)
                W(p + "block_sparse_moe.experts.%d.w3.weight" % e, I, h)
                W(p + "block_sparse_moe.experts.%d.w2.weight" % e, h, I)
        elif kind == "qwen3_moe" and i not in cfg["mlp_only_layers"]:
            W(p + "mlp.gate.weight", 4, h, scale=0.5)
            for e in range(4):
                W(p + "mlp.experts.%d.gate_proj.weight" % e, 40, h)
                W(p + "mlp.experts.%d.up_proj.weight" % e, 40, h)
                W(p + "mlp.experts.%d.down_proj.weight" % e, h, 40)
        else:
            W(p + "mlp.gate_proj.weight", I, h)
            W(p + "mlp.up_proj.weight", I, h)
            W(p + "mlp.down_proj.weight", h, I)
    return cfg, t


def _quantized(arr, dt):
    """What read_safetensors must return for arr stored as dt."""
    if dt == "BF16":
        return bf16_bits_to_f32(f32_to_bf16_bits(arr))
    if dt == "F16":
        return arr.astype(np.float16).astype(np.float32)
    return arr


def _write_checkpoint(d, cfg, t, shards):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f)
    if shards == 1:
        write_safetensors(os.path.join(d, "model.safetensors"), t, {"format": "pt"})
        return
    names = sorted(t)
    wm = {}
    for s in range(shards):
        fn = "model-%05d-of-%05d.safetensors" % (s + 1, shards)
        part = {n: t[n] for n in names[s::shards]}
        write_safetensors(os.path.join(d, fn), part, {"format": "pt"})
        wm.update({n: fn for n in part})
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": wm}, f)


def _selftest_units():
    # bf16 conversion round trip and known values
    x = np.array([1.0, -2.5, 3.140625, 0.0, 65280.0], np.float32)
    assert np.array_equal(bf16_bits_to_f32(f32_to_bf16_bits(x)), x)
    assert f32_to_bf16_bits(np.array([1.0], np.float32))[0] == 0x3F80
    # llama3 rope: factor 1 with any thresholds is the identity on inv_freq
    class C:  # minimal config stand-in
        head_dim, partial_rotary, rope_theta = 64, 1.0, 500000.0
        rope_scaling = None
    base = rope_inv_freq(C)
    C.rope_scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
    sc = rope_inv_freq(C)
    wl = 2 * math.pi / base
    assert np.allclose(sc[wl < 8192 / 4], base[wl < 8192 / 4])          # high freq kept
    assert np.allclose(sc[wl > 8192], base[wl > 8192] / 8.0)            # low freq / factor
    mid = (wl >= 2048) & (wl <= 8192)
    assert np.all((sc[mid] <= base[mid]) & (sc[mid] >= base[mid] / 8.0))
    # rotate-half RoPE preserves norms and is a rotation of pairs (i, i + D/2)
    rng = np.random.default_rng(1)
    q = rng.standard_normal((3, 2, 8)).astype(np.float32)
    cos, sin = rope_cos_sin([0, 5, 9], base[:4], np.float32)
    r = apply_rope(q, cos, sin)
    assert np.allclose(np.linalg.norm(r, axis=-1), np.linalg.norm(q, axis=-1), rtol=1e-5)
    assert np.allclose(r[0], q[0])  # position 0: identity
    # MoE routing: hand check one token
    xs = rng.standard_normal((1, 4)).astype(np.float32)
    wr = rng.standard_normal((3, 4)).astype(np.float32)
    ex = [tuple(rng.standard_normal(s).astype(np.float32) for s in ((5, 4), (5, 4), (4, 5))) for _ in range(3)]
    p = softmax(xs @ wr.T)[0]
    k = np.argsort(-p)[:2]
    want = sum(p[e] / p[k].sum() * swiglu_mlp(xs, *ex[e])[0] for e in k)
    assert np.allclose(moe_block(xs, wr, ex, 2, True)[0], want, rtol=1e-5, atol=1e-6)
    want = sum(p[e] * swiglu_mlp(xs, *ex[e])[0] for e in k)
    assert np.allclose(moe_block(xs, wr, ex, 2, False)[0], want, rtol=1e-5, atol=1e-6)


def cmd_selftest(args):
    import time
    t0 = time.time()
    _selftest_units()
    print("units: safetensors bf16, llama3 rope, rotate-half, moe routing ... ok")
    rng = np.random.default_rng(1234)
    prompt, n = [3, 17, 42, 5, 88], 9  # prefill + 8 decode steps
    with tempfile.TemporaryDirectory() as tmp:
        for kind, shards in (("llama", 1), ("qwen2", 1), ("qwen3", 2), ("mixtral", 3), ("qwen3_moe", 2)):
            cfg, t = _tiny_checkpoint(kind, rng)
            d = os.path.join(tmp, kind)
            _write_checkpoint(d, cfg, t, shards)
            w = read_safetensors(d)
            assert set(w) == set(t), kind
            for name, (arr, dt) in t.items():
                assert w[name].dtype == np.float32 and np.array_equal(w[name], _quantized(arr, dt)), name
            model = Model(load_config(d), w)
            rows, ids = greedy_rollout(model, prompt, n)
            rows_tbt, ids_tbt = greedy_rollout(model, prompt, n, prefill_chunked=False)
            full = teacher_forced_rows(model, prompt, ids[:-1])
            m64 = Model(load_config(d), read_safetensors(d), np.float64)
            full64 = teacher_forced_rows(m64, prompt, ids[:-1])
            inc64 = teacher_forced_rows(m64, prompt, ids[:-1], incremental=True)
            _, nm_tbt, ag_tbt, _ = row_metrics(rows_tbt, rows)
            _, nm_full, ag_full, _ = row_metrics(rows, full)
            _, nm_64, _, _ = row_metrics(inc64, full64)
            _, nm_32v64, _, _ = row_metrics(rows, full64)
            assert ids == ids_tbt and ag_tbt.all() and ag_full.all(), kind
            assert nm_tbt.max() < 1e-10 and nm_full.max() < 1e-10, (kind, nm_tbt.max(), nm_full.max())
            assert nm_64.max() < 1e-24, (kind, nm_64.max())
            assert nm_32v64.max() < 1e-10, (kind, nm_32v64.max())
            # the compare path: our own rows pass, a perturbed row fails
            np.save(os.path.join(d, "good.npy"), rows)
            bad = rows.copy()
            # perturb the last row (it feeds no later token, so teacher forcing is unaffected)
            bad[-1] += 0.05 * np.abs(bad[-1]).max() * rng.standard_normal(bad.shape[1]).astype(np.float32)
            np.save(os.path.join(d, "bad.npy"), bad)
            ns = argparse.Namespace(model=d, prompt_ids=",".join(map(str, prompt)), ids=",".join(map(str, ids)),
                                    tol=1e-4, argmax_eps=1e-3, incremental=False, quiet=True, f64=False,
                                    logits=os.path.join(d, "good.npy"))
            import io
            import contextlib
            buf = io.StringIO()
            with contextlib.redirect_stdout(buf):
                rc_good = cmd_compare(ns)
                ns.logits, ns.ids = os.path.join(d, "bad.npy"), None
                rc_bad = cmd_compare(ns)
            assert rc_good == 0 and rc_bad == 1, (kind, buf.getvalue())
            summary = [l for l in buf.getvalue().splitlines() if l.startswith("rows ")]
            assert len(summary) == 2 and "worst nmse" in summary[1] and "at row %d," % (n - 1) in summary[1], buf.getvalue()
            print("%-9s (%s, %d shard%s): ids %s | cached-vs-tokenwise nmse %.1e, cached-vs-full %.1e, "
                  "f64 cached-vs-full %.1e, f32-vs-f64 %.1e, compare ok"
                  % (kind, t[next(iter(t))][1], shards, "s" if shards > 1 else "", ids,
                     nm_tbt.max(), nm_full.max(), nm_64.max(), nm_32v64.max()))
    print("selftest OK (%.1fs)" % (time.time() - t0))
    return 0


def cmd_make(args):
    """Write a tiny random checkpoint of one family, for the C engine's tests.

    The variants the C engine does not run yet are left out: Mixtral gets no
    sliding window and Qwen3-MoE no dense-only layers.
    """
    rng = np.random.default_rng(args.seed)
    cfg, t = _tiny_checkpoint(args.kind, rng)
    if args.kind == "mixtral":
        cfg.pop("sliding_window", None)
    if args.kind == "qwen3_moe":
        cfg["mlp_only_layers"] = []
        h = cfg["hidden_size"]
        p = "model.layers.1."
        for n in ("gate_proj", "up_proj", "down_proj"):
            t.pop(p + "mlp.%s.weight" % n, None)
        t[p + "mlp.gate.weight"] = ((0.5 * rng.standard_normal((4, h))).astype(np.float32), "BF16")
        for e in range(4):
            for n, shape in (("gate_proj", (40, h)), ("up_proj", (40, h)), ("down_proj", (h, 40))):
                arr = (rng.standard_normal(shape) / math.sqrt(shape[-1])).astype(np.float32)
                t[p + "mlp.experts.%d.%s.weight" % (e, n)] = (arr, "BF16")
    _write_checkpoint(args.out, cfg, t, args.shards)
    print(args.out)
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description="numpy reference forward pass for ridge")
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("generate", help="greedy rollout; write (n, vocab) float32 logits")
    g.add_argument("--model", required=True, help="HF model directory (config.json + safetensors)")
    g.add_argument("--prompt-ids", required=True, help="comma-separated token ids")
    g.add_argument("-n", type=int, default=33, help="rows / generated tokens (default 33)")
    g.add_argument("--out", help="write logits rows to this .npy")
    g.add_argument("--check", action="store_true", help="also assert cached == full recompute")
    g.add_argument("--f64", action="store_true", help="compute in float64")
    c = sub.add_parser("compare", help="check ridge's dumped logits against the reference")
    c.add_argument("--model", required=True)
    c.add_argument("--prompt-ids", required=True)
    c.add_argument("--logits", required=True, help="ridge's (n, vocab) float32 .npy (or raw f32)")
    c.add_argument("--ids", help="ridge's generated ids; default: argmax of each ridge row")
    c.add_argument("--tol", type=float, default=1e-4, help="max NMSE per row (default 1e-4)")
    c.add_argument("--argmax-eps", type=float, default=1e-3,
                   help="argmax must agree where the reference's top-2 margin exceeds this (default 1e-3)")
    c.add_argument("--incremental", action="store_true", help="reference via the KV-cached path")
    c.add_argument("--f64", action="store_true", help="reference in float64")
    c.add_argument("-q", "--quiet", action="store_true", help="no per-row table, just the summary")
    sub.add_parser("selftest", help="tiny random models: cached vs full recompute")
    m = sub.add_parser("make", help="write a tiny random checkpoint of one family")
    m.add_argument("--kind", required=True, choices=["llama", "qwen2", "qwen3", "mixtral", "qwen3_moe"])
    m.add_argument("--out", required=True, help="directory to write config.json and safetensors into")
    m.add_argument("--seed", type=int, default=1)
    m.add_argument("--shards", type=int, default=1)
    q = sub.add_parser("dequant", help="dequantize raw GGUF k-quant blocks to float32")
    q.add_argument("--type", required=True, choices=["q4_K", "q6_K"])
    q.add_argument("--in", dest="inp", required=True, help="raw blocks")
    q.add_argument("--out", required=True, help="raw little-endian float32")
    args = ap.parse_args(argv)
    return {"generate": cmd_generate, "compare": cmd_compare, "selftest": cmd_selftest,
            "make": cmd_make, "dequant": cmd_dequant}[args.cmd](args)


def cmd_dequant(args):
    with open(args.inp, "rb") as f:
        raw = f.read()
    y = (dequant_q4_K if args.type == "q4_K" else dequant_q6_K)(raw)
    y.astype("<f4").tofile(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
