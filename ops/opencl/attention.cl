// ops/opencl/attention.cl — the paged KV cache: writing each token's K and V
// into its slot, and causal attention over it (GQA/MQA, mixed lengths,
// sliding window, sinks) with an online softmax.
//
// A layer's pool holds K and V each as (n_blocks, n_kv_heads, block_size,
// head_dim) elements of f32, bf16 or f16 (ops/ops.h). Token t belongs to
// sequence seq[t] at position pos[t]; sequence s's blocks are
// table[table_off[s] .. table_off[s+1]). Every one of those numbers is
// clamped before it addresses memory, and the first bad one is reported
// through the error word (common.cl), so no metadata makes a kernel read or
// write outside its operands.

// Where token t's sequence keeps its blocks: *tb0 (first table entry), *nb
// (blocks) and *p (its position, clamped into them). *nb = 0 when the
// sequence has no blocks, and then nothing may be read.
inline void rg_token_slots(__global const int *seq, __global const int *pos,
                           __global const int *toff, int t, int n_seqs, int n_table, int bs,
                           __global int *err, int *tb0, int *nb, int *p) {
  *nb = 0;
  *tb0 = 0;
  *p = 0;
  int s = seq[t];
  if (s < 0 || s >= n_seqs) {
    rg_flag(err, RG_E_SEQ, t, s, n_seqs);
    if (n_seqs <= 0) return;
    s = rg_clamp_i(s, 0, n_seqs - 1);
  }
  int a = toff[s], b = toff[s + 1];
  if (a < 0 || a > n_table || b < a || b > n_table) {
    rg_flag(err, RG_E_TABLE_OFF, s, b, n_table);
    a = rg_clamp_i(a, 0, n_table);
    b = rg_clamp_i(b, a, n_table);
  }
  long cap = (long)(b - a) * bs;
  int q = pos[t];
  if (q < 0 || q >= cap) {
    rg_flag(err, RG_E_POS, t, q, (int)min(cap, (long)INT_MAX));
    if (cap == 0) return;
    q = (int)clamp((long)q, 0L, cap - 1);
  }
  *tb0 = a;
  *nb = b - a;
  *p = q;
}

// The block holding position j of a sequence whose blocks start at table
// entry tb0, clamped into the pool.
inline int rg_block_at(__global const int *table, int tb0, int j, int bs, int n_blocks,
                       __global int *err) {
  int blk = table[tb0 + j / bs];
  if (blk < 0 || blk >= n_blocks) {
    rg_flag(err, RG_E_BLOCK, tb0 + j / bs, blk, n_blocks);
    blk = rg_clamp_i(blk, 0, n_blocks - 1);
  }
  return blk;
}

inline float rg_kv_load(__global const uchar *base, int t, ulong e) {
  if (t == RG_T_F32) return ((__global const float *)base)[e];
  if (t == RG_T_BF16) return rg_bf16_to_f32(((__global const ushort *)base)[e]);
  return vload_half(e, (__global const half *)base);
}

inline void rg_kv_store(__global uchar *base, int t, ulong e, float v) {
  if (t == RG_T_F32)
    ((__global float *)base)[e] = v;
  else if (t == RG_T_BF16)
    ((__global ushort *)base)[e] = rg_f32_to_bf16(v);
  else
    ((__global ushort *)base)[e] = rg_f32_to_f16(v);
}

// ----- KV write -------------------------------------------------------------

// Global (n_tokens * n_kv_heads, rounded up): one item per (token, kv head)
// row of head_dim elements.
__kernel void kv_write(P(kk), P(vv), int dtype, int n_blocks, int bs, int nkv, int hd,
                       PC(seq), PC(pos), PC(toff), PC(table), int n_tokens, int n_seqs,
                       int n_table, PC(k), PC(v), __global int *err) {
  int r = get_global_id(0);
  if (r >= n_tokens * nkv) return;
  int t = r / nkv, h = r % nkv, tb0, nb, p;
  rg_token_slots(ATC(int, seq), ATC(int, pos), ATC(int, toff), t, n_seqs, n_table, bs, err, &tb0,
                 &nb, &p);
  if (nb == 0) return;
  int blk = rg_block_at(ATC(int, table), tb0, p, bs, n_blocks, err);
  ulong dst = ((ulong)(blk * nkv + h) * bs + p % bs) * hd, src = (ulong)r * hd;
  __global const float *kr = ATC(float, k) + src, *vr = ATC(float, v) + src;
  for (int i = 0; i < hd; i++) {
    rg_kv_store(AT(uchar, kk), dtype, dst + i, kr[i]);
    rg_kv_store(AT(uchar, vv), dtype, dst + i, vr[i]);
  }
}

// ----- Attention --------------------------------------------------------------

// Work-items per group, which is also the positions per tile.
#define AW 64
// Query heads one group serves at most (the host splits larger GQA groups).
#define MAXGC 16

// Global (AW * chunks, n_kv_heads, n_tokens), local (AW, 1, 1). Group
// (chunk, h, t) serves query heads h*G + chunk*gc .. + gc of token t, G =
// n_heads / n_kv_heads, and streams kv head h's keys and values once for
// all of them, a tile of AW positions at a time:
//   scores   item jj dots position j0+jj's key with the gc queries (scaled);
//   softmax  per head: m' = max(m, tile max), c = e^(m - m'),
//            p_j = e^(s_j - m'), l' = l c + sum p_j;
//   values   acc' = acc c + sum_j p_j v_j, items over (head, dim).
// Local memory, all passed in and sized by the host: lq, lacc (gc,
// head_dim) floats; ls (gc, AW); lst (3, MAXGC): each head's running max,
// denominator and correction; lrow (AW) the tile's row offsets.
#define ATTENTION(T)                                                                          \
  __kernel __attribute__((reqd_work_group_size(AW, 1, 1))) void attention_##T(               \
      PC(kk), PC(vv), int n_blocks, int bs, int nkv, int hd, PC(seq), PC(pos), PC(toff),      \
      PC(table), int n_seqs, int n_table, PC(q), P(o), PC(sinks), int has_sinks,              \
      int n_heads, float scale, int window, int gc, __global int *err, __local float *lq,    \
      __local float *ls, __local float *lacc, __local float *lst, __local ulong *lrow) {      \
    __local float *lm = lst, *ll = lst + MAXGC, *lc = lst + 2 * MAXGC;                        \
    int li = get_local_id(0), chunk = get_group_id(0), h = get_group_id(1),                   \
        t = get_group_id(2);                                                                  \
    int G = n_heads / nkv, g0 = chunk * gc, ng = min(gc, G - g0);                             \
    ulong head0 = (ulong)t * n_heads + (ulong)h * G + g0;                                     \
    __global float *ob = AT(float, o) + head0 * hd;                                           \
    int tb0, nb, p;                                                                           \
    rg_token_slots(ATC(int, seq), ATC(int, pos), ATC(int, toff), t, n_seqs, n_table, bs, err, \
                   &tb0, &nb, &p);                                                            \
    if (nb == 0) {                                                                            \
      for (int e = li; e < ng * hd; e += AW) ob[e] = 0.0f;                                    \
      return;                                                                                 \
    }                                                                                         \
    __global const float *qb = ATC(float, q) + head0 * hd;                                    \
    for (int e = li; e < ng * hd; e += AW) {                                                  \
      lq[e] = qb[e] * scale;                                                                  \
      lacc[e] = 0.0f;                                                                         \
    }                                                                                         \
    if (li < ng) {                                                                            \
      lm[li] = -INFINITY;                                                                     \
      ll[li] = 0.0f;                                                                          \
    }                                                                                         \
    barrier(CLK_LOCAL_MEM_FENCE);                                                             \
    __global const uchar *K = ATC(uchar, kk), *V = ATC(uchar, vv);                            \
    __global const int *table = ATC(int, table);                                              \
    int start = window > 0 && p + 1 > window ? p + 1 - window : 0;                            \
    for (int j0 = start; j0 <= p; j0 += AW) {                                                 \
      int cnt = min(AW, p - j0 + 1);                                                          \
      if (li < cnt) {                                                                         \
        int j = j0 + li;                                                                      \
        int blk = rg_block_at(table, tb0, j, bs, n_blocks, err);                              \
        ulong row = ((ulong)(blk * nkv + h) * bs + j % bs) * hd;                              \
        lrow[li] = row;                                                                       \
        float s[MAXGC];                                                                       \
        for (int g = 0; g < ng; g++) s[g] = 0.0f;                                             \
        for (int i = 0; i < hd; i++) {                                                        \
          float kv = rg_kv_load(K, RG_T_##T, row + i);                                        \
          for (int g = 0; g < ng; g++) s[g] = RG_MAD(lq[g * hd + i], kv, s[g]);                  \
        }                                                                                     \
        for (int g = 0; g < ng; g++) ls[g * AW + li] = s[g];                                  \
      }                                                                                       \
      barrier(CLK_LOCAL_MEM_FENCE);                                                           \
      if (li < ng) {                                                                          \
        float mx = lm[li];                                                                    \
        for (int jj = 0; jj < cnt; jj++) mx = fmax(mx, ls[li * AW + jj]);                     \
        lc[li] = exp(lm[li] - mx);                                                            \
        lm[li] = mx;                                                                          \
      }                                                                                       \
      barrier(CLK_LOCAL_MEM_FENCE);                                                           \
      for (int e = li; e < ng * AW; e += AW) {                                                \
        int g = e / AW, jj = e % AW;                                                          \
        ls[e] = jj < cnt ? exp(ls[e] - lm[g]) : 0.0f;                                         \
      }                                                                                       \
      barrier(CLK_LOCAL_MEM_FENCE);                                                           \
      if (li < ng) {                                                                          \
        float sum = 0.0f;                                                                     \
        for (int jj = 0; jj < cnt; jj++) sum += ls[li * AW + jj];                             \
        ll[li] = ll[li] * lc[li] + sum;                                                       \
      }                                                                                       \
      /* Not needed by the memory model, but PoCL 3.1 drops the sum above */                 \
      /* when the loop below shares its barrier region. */                                    \
      barrier(CLK_LOCAL_MEM_FENCE);                                                           \
      for (int e = li; e < ng * hd; e += AW) {                                                \
        int g = e / hd, d = e % hd;                                                           \
        float a = lacc[e] * lc[g];                                                            \
        for (int jj = 0; jj < cnt; jj++)                                                      \
          a = RG_MAD(ls[g * AW + jj], rg_kv_load(V, RG_T_##T, lrow[jj] + d), a);                 \
        lacc[e] = a;                                                                          \
      }                                                                                       \
      barrier(CLK_LOCAL_MEM_FENCE);                                                           \
    }                                                                                         \
    /* A sink is one more logit in each head's denominator, with no value. */                 \
    if (li < ng) {                                                                            \
      if (has_sinks) {                                                                        \
        float sk = ATC(float, sinks)[h * G + g0 + li], mx = fmax(lm[li], sk);                 \
        lc[li] = exp(lm[li] - mx);                                                            \
        ll[li] = ll[li] * lc[li] + exp(sk - mx);                                              \
      } else {                                                                                \
        lc[li] = 1.0f;                                                                        \
      }                                                                                       \
    }                                                                                         \
    barrier(CLK_LOCAL_MEM_FENCE);                                                             \
    for (int e = li; e < ng * hd; e += AW) {                                                  \
      int g = e / hd;                                                                         \
      ob[e] = lacc[e] * lc[g] / ll[g];                                                        \
    }                                                                                         \
  }

ATTENTION(f32)
ATTENTION(bf16)
ATTENTION(f16)

// ----- Attention for CPU devices -------------------------------------------------

// 8 elements of a K or V row at element e, widened.
inline float8 rg_kv_load8(__global const uchar *base, int t, ulong e) {
  if (t == RG_T_F32) return vload8(0, (__global const float *)base + e);
  if (t == RG_T_BF16)
    return as_float8(convert_uint8(vload8(0, (__global const ushort *)base + e)) << 16);
  return vload_half8(0, (__global const half *)base + e);
}

// q (local, head_dim) . the row at element e: 8 lanes at a time, because a
// scalar chain of dependent multiply-adds is what strict f32 leaves the
// compiler, and its latency, not its rate, would bound the kernel.
inline float rg_kv_dot(__local const float *q, __global const uchar *base, int t, ulong e, int hd) {
  float8 a = (float8)(0.0f);
  int i = 0;
  for (; i + 8 <= hd; i += 8) a = RG_MAD(vload8(0, q + i), rg_kv_load8(base, t, e + i), a);
  float4 b = a.lo + a.hi;
  float s = (b.x + b.y) + (b.z + b.w);
  for (; i < hd; i++) s = RG_MAD(q[i], rg_kv_load(base, t, e + i), s);
  return s;
}

// A CPU device runs a work-group as loops on one core, and each barrier of
// the kernel above splits them: on PoCL it read the cache at 0.6 GB/s, 3 %
// of the read bandwidth. Here one work-item (groups of 1) serves the same
// (token, kv head, query heads) and walks the context alone, 16 positions a
// tile: the tile's scores for each head, one rescale per tile, then the
// weighted value rows, each loop over head_dim for the compiler to
// vectorise. lq, lacc: (gc, head_dim) local floats, private to the item.
#define TP 16
// Query heads one item serves at most: a constant, so that the per-head
// partial sums can live in registers.
#define CG 8
#define ATTENTION_CPU(T)                                                                       \
  __kernel __attribute__((reqd_work_group_size(1, 1, 1))) void attention_cpu_##T(            \
      PC(kk), PC(vv), int n_blocks, int bs, int nkv, int hd, PC(seq), PC(pos), PC(toff),      \
      PC(table), int n_seqs, int n_table, PC(q), P(o), PC(sinks), int has_sinks,              \
      int n_heads, float scale, int window, int gc, __global int *err, __local float *lq,    \
      __local float *lacc) {                                                                  \
    int chunk = get_group_id(0), h = get_group_id(1), t = get_group_id(2);                    \
    int G = n_heads / nkv, g0 = chunk * gc, ng = min(gc, G - g0);                             \
    ulong head0 = (ulong)t * n_heads + (ulong)h * G + g0;                                     \
    __global float *ob = AT(float, o) + head0 * hd;                                           \
    int tb0, nb, p;                                                                           \
    rg_token_slots(ATC(int, seq), ATC(int, pos), ATC(int, toff), t, n_seqs, n_table, bs, err, \
                   &tb0, &nb, &p);                                                            \
    if (nb == 0) {                                                                            \
      for (int e = 0; e < ng * hd; e++) ob[e] = 0.0f;                                         \
      return;                                                                                 \
    }                                                                                         \
    __global const float *qb = ATC(float, q) + head0 * hd;                                    \
    for (int e = 0; e < ng * hd; e++) {                                                       \
      lq[e] = qb[e] * scale;                                                                  \
      lacc[e] = 0.0f;                                                                         \
    }                                                                                         \
    float m[CG], l[CG];                                                                 \
    _Pragma("unroll") for (int g = 0; g < CG; g++) if (g < ng) m[g] = -INFINITY, l[g] = 0.0f;                               \
    __global const uchar *K = ATC(uchar, kk), *V = ATC(uchar, vv);                            \
    __global const int *table = ATC(int, table);                                              \
    int start = window > 0 && p + 1 > window ? p + 1 - window : 0;                            \
    for (int j0 = start; j0 <= p; j0 += TP) {                                                 \
      int cnt = min(TP, p - j0 + 1);                                                          \
      ulong row[TP];                                                                          \
      for (int jj = 0; jj < cnt; jj++) {                                                      \
        int j = j0 + jj, blk = rg_block_at(table, tb0, j, bs, n_blocks, err);                 \
        row[jj] = ((ulong)(blk * nkv + h) * bs + j % bs) * hd;                                \
      }                                                                                       \
      /* Scores: each key row is loaded and widened once for all the heads. */               \
      float sc[CG][TP];                                                                    \
      for (int jj = 0; jj < TP; jj++) {                                                       \
        if (jj >= cnt) {                                                                      \
          _Pragma("unroll") for (int g = 0; g < CG; g++) if (g < ng) sc[g][jj] = -INFINITY;                                 \
          continue;                                                                           \
        }                                                                                     \
        float8 s8[CG];                                                                     \
        _Pragma("unroll") for (int g = 0; g < CG; g++) if (g < ng) s8[g] = (float8)(0.0f);                                  \
        int i = 0;                                                                            \
        for (; i + 8 <= hd; i += 8) {                                                         \
          float8 k8 = rg_kv_load8(K, RG_T_##T, row[jj] + i);                                  \
          _Pragma("unroll") for (int g = 0; g < CG; g++) if (g < ng) s8[g] = RG_MAD(vload8(0, lq + g * hd + i), k8, s8[g]); \
        }                                                                                     \
        _Pragma("unroll") for (int g = 0; g < CG; g++) if (g < ng) {                                                        \
          float4 b4 = s8[g].lo + s8[g].hi;                                                    \
          float sg = (b4.x + b4.y) + (b4.z + b4.w);                                           \
          for (int r = i; r < hd; r++)                                                        \
            sg = RG_MAD(lq[g * hd + r], rg_kv_load(K, RG_T_##T, row[jj] + r), sg);            \
          sc[g][jj] = sg;                                                                     \
        }                                                                                     \
      }                                                                                       \
      /* Per head: the tile's 16 exponentials as one vector (0 past cnt). */                  \
      float corr[CG];                                                                      \
      _Pragma("unroll") for (int g = 0; g < CG; g++) if (g < ng) {                                                          \
        float16 sv = vload16(0, sc[g]);                                                       \
        float8 m8 = fmax(sv.lo, sv.hi);                                                       \
        float4 m4 = fmax(m8.lo, m8.hi);                                                       \
        float mx = fmax(m[g], fmax(fmax(m4.x, m4.y), fmax(m4.z, m4.w)));                     \
        float16 pv = exp(sv - mx);                                                            \
        vstore16(pv, 0, sc[g]);                                                               \
        float8 p8 = pv.lo + pv.hi;                                                            \
        float4 p4 = p8.lo + p8.hi;                                                            \
        corr[g] = exp(m[g] - mx);                                                             \
        m[g] = mx;                                                                            \
        l[g] = l[g] * corr[g] + ((p4.x + p4.y) + (p4.z + p4.w));                              \
      }                                                                                       \
      /* Values: each row loaded and widened once, 8 lanes of every head. */                 \
      int i = 0;                                                                              \
      for (; i + 8 <= hd; i += 8) {                                                           \
        float8 a8[CG];                                                                     \
        _Pragma("unroll") for (int g = 0; g < CG; g++) if (g < ng) a8[g] = vload8(0, lacc + g * hd + i) * corr[g];          \
        for (int jj = 0; jj < cnt; jj++) {                                                    \
          float8 v8 = rg_kv_load8(V, RG_T_##T, row[jj] + i);                                  \
          _Pragma("unroll") for (int g = 0; g < CG; g++) if (g < ng) a8[g] = RG_MAD((float8)(sc[g][jj]), v8, a8[g]);       \
        }                                                                                     \
        _Pragma("unroll") for (int g = 0; g < CG; g++) if (g < ng) vstore8(a8[g], 0, lacc + g * hd + i);                    \
      }                                                                                       \
      for (; i < hd; i++)                                                                     \
        _Pragma("unroll") for (int g = 0; g < CG; g++) if (g < ng) {                                                        \
          float a1 = lacc[g * hd + i] * corr[g];                                              \
          for (int jj = 0; jj < cnt; jj++)                                                    \
            a1 = RG_MAD(sc[g][jj], rg_kv_load(V, RG_T_##T, row[jj] + i), a1);                 \
          lacc[g * hd + i] = a1;                                                              \
        }                                                                                     \
    }                                                                                         \
    _Pragma("unroll") for (int g = 0; g < CG; g++) if (g < ng) {                                                            \
      float c = 1.0f;                                                                         \
      if (has_sinks) {                                                                        \
        float sk = ATC(float, sinks)[h * G + g0 + g], mx = fmax(m[g], sk);                    \
        c = exp(m[g] - mx);                                                                   \
        l[g] = l[g] * c + exp(sk - mx);                                                       \
      }                                                                                       \
      for (int i = 0; i < hd; i++) ob[g * hd + i] = lacc[g * hd + i] * c / l[g];              \
    }                                                                                         \
  }

ATTENTION_CPU(f32)
ATTENTION_CPU(bf16)
ATTENTION_CPU(f16)
