// ops/cuda/attention.cu — the paged KV cache on a GPU: kv_write, and causal
// attention over the pool (GQA/MQA, many sequences of mixed lengths, sliding
// window, sinks) with an online softmax.
//
// Work split (flash-decoding, as vLLM's paged attention v2): a block owns
// one (token, KV head) and one split of RG_CUK_ATTN_SPLIT positions of its
// context; each of its warps is one query head of the GQA group, so the
// group's heads read the same keys and values from L1. A warp takes its
// keys 32 at a time: lane j scores key j (q from shared memory, broadcast to
// all lanes), one max and one sum over the warp update the running softmax,
// then the 32 probabilities are broadcast in turn and each lane adds its
// head_dim / 32 elements of the weighted values. With one split the block
// normalises and writes o; with more, each writes its (max, sum, partial
// output) and rg_attention_merge combines the splits, adding the sink.
//
// Metadata is clamped, never trusted (see ops/cuda/kernels.h): a token whose
// sequence index or position falls outside its table gets zeros, a key whose
// block id is outside the pool is left out of the softmax, and table offsets
// are clamped to the table.
#include "ops/cuda/common.cuh"

template <int T>
RG_DEV float kv_load(const void *base, int64_t e) {
  if (T == RG_CUK_F32) return ((const float *)base)[e];
  uint16_t h = ((const uint16_t *)base)[e];
  return T == RG_CUK_BF16 ? rg_bf16_f32(h) : rg_f16_f32(h);
}

// 8 elements of a K row from element e (e % 8 == 0, the pool 16-byte
// aligned): one 16-byte load for bf16/f16, two for f32.
template <int T>
RG_DEV void kv_load8(const void *base, int64_t e, float *out) {
  if (T == RG_CUK_F32) {
    const float4 *p = (const float4 *)((const float *)base + e);
    float4 a = p[0], b = p[1];
    out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w;
    out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
  } else {
    uint4 u = *(const uint4 *)((const uint16_t *)base + e);
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int j = 0; j < 4; j++) {
      uint16_t lo = (uint16_t)(w[j] & 0xffffu), hi = (uint16_t)(w[j] >> 16);
      out[2 * j] = T == RG_CUK_BF16 ? rg_bf16_f32(lo) : rg_f16_f32(lo);
      out[2 * j + 1] = T == RG_CUK_BF16 ? rg_bf16_f32(hi) : rg_f16_f32(hi);
    }
  }
}

// The token's table and position, or 0 when its metadata is out of range.
struct rg_tok {
  int64_t lo, p;  // the sequence's first table entry; the token's position
};

RG_DEV bool token_view(const rg_cuk_kv_t &kv, int64_t t, rg_tok *out) {
  const int32_t s = RG_P(const int32_t, kv.seq)[t];
  if (s < 0 || s >= kv.n_seqs) return false;
  const int32_t *off = RG_P(const int32_t, kv.table_off);
  int64_t lo = off[s], hi = off[s + 1];
  lo = lo < 0 ? 0 : lo > kv.n_table ? kv.n_table : lo;
  hi = hi < lo ? lo : hi > kv.n_table ? kv.n_table : hi;
  const int64_t p = RG_P(const int32_t, kv.pos)[t];
  if (p < 0 || p >= (hi - lo) * kv.block_size) return false;
  out->lo = lo, out->p = p;
  return true;
}

// Element offset of (position j, kv head h, dim 0), or -1 when j's block is
// not in the pool.
RG_DEV int64_t kv_row(const rg_cuk_kv_t &kv, const rg_tok &tk, int64_t j, int64_t h) {
  const int32_t blk = RG_P(const int32_t, kv.table)[tk.lo + j / kv.block_size];
  if (blk < 0 || blk >= kv.n_blocks) return -1;
  return (((int64_t)blk * kv.n_kv_heads + h) * kv.block_size + j % kv.block_size) * kv.head_dim;
}

extern "C" __global__ void rg_kv_write(const rg_cuk_kv_write_t a) {
  const int64_t t = blockIdx.x, h = blockIdx.y, hd = a.kv.head_dim;
  rg_tok tk;
  if (!token_view(a.kv, t, &tk)) return;
  const int64_t row = kv_row(a.kv, tk, tk.p, h);
  if (row < 0) return;
  const float *k = RG_P(const float, a.k_in) + (t * a.kv.n_kv_heads + h) * hd;
  const float *v = RG_P(const float, a.v_in) + (t * a.kv.n_kv_heads + h) * hd;
  for (int64_t i = threadIdx.x; i < hd; i += blockDim.x) {
    if (a.kv.dtype == RG_CUK_F32) {
      RG_P(float, a.kv.k)[row + i] = k[i];
      RG_P(float, a.kv.v)[row + i] = v[i];
    } else if (a.kv.dtype == RG_CUK_BF16) {
      RG_P(uint16_t, a.kv.k)[row + i] = rg_f32_bf16(k[i]);
      RG_P(uint16_t, a.kv.v)[row + i] = rg_f32_bf16(v[i]);
    } else {
      RG_P(uint16_t, a.kv.k)[row + i] = rg_f32_f16(k[i]);
      RG_P(uint16_t, a.kv.v)[row + i] = rg_f32_f16(v[i]);
    }
  }
}

// The output of one head from its softmax state and sink: acc e^(m - M) /
// (l e^(m - M) + e^(sink - M)), M = max(m, sink); zeros when nothing was
// attended to and there is no sink.
RG_DEV float finish(float m, float l, float acc, float sink) {
  float M = fmaxf(m, sink);
  if (M == -INFINITY) return 0.0f;
  float c = m == -INFINITY ? 0.0f : expf(m - M);
  float den = l * c + (sink == -INFINITY ? 0.0f : expf(sink - M));
  return den > 0.0f ? acc * c / den : 0.0f;
}

template <int T, int EPL>
RG_DEV void attention(const rg_cuk_attention_t &a) {
  RG_DYNAMIC_SHARED(float, qs);  // (group, head_dim)
  const rg_cuk_kv_t &kv = a.kv;
  const int64_t t = blockIdx.x, kvh = blockIdx.y, split = blockIdx.z, hd = kv.head_dim;
  const int lane = threadIdx.x % RG_WARP, w = threadIdx.x / RG_WARP;
  const int64_t group = a.n_heads / kv.n_kv_heads, qh = kvh * group + w;
  float *q = qs + w * hd;
  for (int64_t i = lane; i < hd; i += RG_WARP)
    q[i] = RG_P(const float, a.q)[(t * a.n_heads + qh) * hd + i];
  rg_syncwarp();

  float m = -INFINITY, l = 0.0f, acc[EPL];
#pragma unroll
  for (int e = 0; e < EPL; e++) acc[e] = 0.0f;
  rg_tok tk;
  const bool ok = token_view(kv, t, &tk);
  if (ok) {
    const int64_t start = a.window && tk.p + 1 > a.window ? tk.p + 1 - a.window : 0;
    const int64_t lo = start > split * a.split_len ? start : split * a.split_len;
    const int64_t hi = tk.p < (split + 1) * a.split_len - 1 ? tk.p : (split + 1) * a.split_len - 1;
    const void *K = RG_P(const void, kv.k), *V = RG_P(const void, kv.v);
    for (int64_t j0 = lo; j0 <= hi; j0 += RG_WARP) {
      const int64_t j = j0 + lane;
      float score = -INFINITY;
      int64_t row = -1;
      if (j <= hi) {
        row = kv_row(kv, tk, j, kvh);
        if (row >= 0) {
          float d = 0.0f;
          if (a.k_vec) {
            // Each lane reads its own key's row: 16-byte loads cut the
            // instructions per key eightfold (bf16/f16).
            for (int64_t i = 0; i < hd; i += 8) {
              float kv8[8];
              kv_load8<T>(K, row + i, kv8);
#pragma unroll
              for (int e = 0; e < 8; e++) d += q[i + e] * kv8[e];
            }
          } else {
            for (int64_t i = 0; i < hd; i++) d += q[i] * kv_load<T>(K, row + i);
          }
          score = d * a.scale;
        }
      }
      const float nm = fmaxf(m, rg_warp_max(score));
      if (nm == -INFINITY) continue;  // every key so far left out
      const float pj = score == -INFINITY ? 0.0f : expf(score - nm);
      const float corr = m == -INFINITY ? 0.0f : expf(m - nm);
      l = l * corr + rg_warp_sum(pj);
#pragma unroll
      for (int e = 0; e < EPL; e++) acc[e] *= corr;
      for (int jj = 0; jj < RG_WARP; jj++) {
        const float pb = rg_shfl(pj, jj);
        const int64_t rb = rg_shfl(row, jj);
        if (pb == 0.0f) continue;  // the same on every lane: no divergence
#pragma unroll
        for (int e = 0; e < EPL; e++) {
          const int64_t d = lane + RG_WARP * e;
          if (d < hd) acc[e] += pb * kv_load<T>(V, rb + d);
        }
      }
      m = nm;
    }
  }
  if (a.splits == 1) {
    const float sink = ok && a.sinks ? RG_P(const float, a.sinks)[qh] : -INFINITY;
    float *o = RG_P(float, a.o) + (t * a.n_heads + qh) * hd;
#pragma unroll
    for (int e = 0; e < EPL; e++) {
      const int64_t d = lane + RG_WARP * e;
      if (d < hd) o[d] = ok ? finish(m, l, acc[e], sink) : 0.0f;
    }
  } else {
    float *rec = RG_P(float, a.part) + ((t * a.n_heads + qh) * a.splits + split) * (hd + 2);
    if (lane == 0) rec[0] = ok ? m : -INFINITY, rec[1] = l;
#pragma unroll
    for (int e = 0; e < EPL; e++) {
      const int64_t d = lane + RG_WARP * e;
      if (d < hd) rec[2 + d] = acc[e];
    }
  }
}

#define RG_ATTN_(T, t, E)                                                         \
  extern "C" __global__ void rg_attention_##t##_##E(const rg_cuk_attention_t a) { \
    attention<T, E>(a);                                                           \
  }
#define RG_ATTN_ALL_(T, t) RG_ATTN_(T, t, 1) RG_ATTN_(T, t, 2) RG_ATTN_(T, t, 4) RG_ATTN_(T, t, 8)
RG_ATTN_ALL_(RG_CUK_F32, f32)
RG_ATTN_ALL_(RG_CUK_BF16, bf16)
RG_ATTN_ALL_(RG_CUK_F16, f16)

// grid (n_tokens, n_heads); threads over head_dim.
extern "C" __global__ void rg_attention_merge(const rg_cuk_attention_t a) {
  const int64_t t = blockIdx.x, qh = blockIdx.y, hd = a.kv.head_dim, S = a.splits;
  const float *rec = RG_P(const float, a.part) + (t * a.n_heads + qh) * S * (hd + 2);
  // A token with bad metadata wrote max -inf in every split: zeros, and its
  // sink is not added.
  float M = -INFINITY;
  for (int64_t s = 0; s < S; s++) M = fmaxf(M, rec[s * (hd + 2)]);
  const bool any = M != -INFINITY;
  const float sink = a.sinks && any ? RG_P(const float, a.sinks)[qh] : -INFINITY;
  M = fmaxf(M, sink);
  float den = sink == -INFINITY ? 0.0f : expf(sink - M);
  for (int64_t s = 0; s < S; s++) {
    float ms = rec[s * (hd + 2)];
    if (ms != -INFINITY) den += rec[s * (hd + 2) + 1] * expf(ms - M);
  }
  float *o = RG_P(float, a.o) + (t * a.n_heads + qh) * hd;
  for (int64_t d = threadIdx.x; d < hd; d += blockDim.x) {
    float num = 0.0f;
    for (int64_t s = 0; s < S; s++) {
      float ms = rec[s * (hd + 2)];
      if (ms != -INFINITY) num += rec[s * (hd + 2) + 2 + d] * expf(ms - M);
    }
    o[d] = any && den > 0.0f ? num / den : 0.0f;
  }
}
