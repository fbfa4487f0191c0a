// ops/opencl/matmul.cl — y (m, n) = x (m, k) W^T (+ bias), W (n, k) stored
// as f32, bf16, f16 or q8_0 and widened in the kernel, so a weight crosses
// memory once, in its compact form.
//
// Three paths, chosen by the host from m and the kind of device:
//   gemv<MR>  m <= 8 (decode): one work-item per output column j streams
//             W's row j once and dots it with MR rows of x at a time (MR =
//             1, 4 or 8, the smallest that covers m; the rows of x stay in
//             cache). Bound by reading W: on a CPU device a work-item is a
//             loop iteration, so one contiguous row per item is what the
//             hardware prefetchers want, and 16-wide vector loads are what
//             its SIMD units want.
//   gemm      m > 8 on GPUs and accelerators (prefill): 64 x 64 output
//             tiles per 16 x 16 work-group, 4 x 4 outputs per item; x and W
//             tiles of 32 columns are staged in local memory (W widened to
//             f32 on the way in), stored k-major so that the items of a row
//             read consecutive words. 32 columns are one q8_0 block.
//   rgemm     m > 8 on CPU devices: each work-item keeps an 8 x 2 block of
//             outputs in registers as 16-wide partial sums along k, reading
//             x and W straight from memory (the caches hold the reuse). A
//             CPU device's local memory is ordinary memory and every
//             barrier splits the work-item loop, so the tiled kernel ran at
//             1.8 GFLOP/s on PoCL (2 cores) where this one runs at 12-14,
//             0.35-0.45 of the measured FMA peak. 8 rows per weight vector
//             spread its widening over 8 multiply-adds (4 x 4 measured 0.31-0.34).
// Accumulation is f32 with RG_MAD() on every path.

// ----- Widening 16 weights at column p of a row --------------------------

inline float16 w16_f32(__global const uchar *row, int p) {
  return vload16(0, (__global const float *)row + p);
}
inline float16 w16_bf16(__global const uchar *row, int p) {
  return as_float16(convert_uint16(vload16(0, (__global const ushort *)row + p)) << 16);
}
inline float16 w16_f16(__global const uchar *row, int p) {
  return vload_half16(0, (__global const half *)row + p);
}
inline float16 w16_q8_0(__global const uchar *row, int p) {
  __global const uchar *blk = row + (p / 32) * 34;
  float d = rg_f16_to_f32(*(__global const ushort *)blk);
  return convert_float16(vload16(0, (__global const char *)(blk + 2 + p % 32))) * d;
}

// 32 weights at column p (a multiple of 32) as two vectors: one q8_0 block,
// its scale loaded once.
#define W32(T)                                                                              \
  inline void w32_##T(__global const uchar *row, int p, float16 *a, float16 *b) {           \
    *a = w16_##T(row, p);                                                                   \
    *b = w16_##T(row, p + 16);                                                              \
  }
W32(f32)
W32(bf16)
W32(f16)
inline void w32_q8_0(__global const uchar *row, int p, float16 *a, float16 *b) {
  __global const uchar *blk = row + (p / 32) * 34;
  float d = rg_f16_to_f32(*(__global const ushort *)blk);
  *a = convert_float16(vload16(0, (__global const char *)(blk + 2))) * d;
  *b = convert_float16(vload16(0, (__global const char *)(blk + 18))) * d;
}

// One weight (the scalar tail and the GEMM's tile loads).
inline float w1_f32(__global const uchar *row, int p) {
  return ((__global const float *)row)[p];
}
inline float w1_bf16(__global const uchar *row, int p) {
  return rg_bf16_to_f32(((__global const ushort *)row)[p]);
}
inline float w1_f16(__global const uchar *row, int p) {
  return vload_half(p, (__global const half *)row);
}
inline float w1_q8_0(__global const uchar *row, int p) {
  __global const uchar *blk = row + (p / 32) * 34;
  return rg_f16_to_f32(*(__global const ushort *)blk) * (float)(char)blk[2 + p % 32];
}

inline float hsum16(float16 v) {
  float8 a = v.lo + v.hi;
  float4 b = a.lo + a.hi;
  float2 c = b.lo + b.hi;
  return c.x + c.y;
}

// ----- GEMV ---------------------------------------------------------------

// Global (n, ceil(m / MR)): item (j, g) computes y[g*MR .. g*MR+MR)[j]. Rows
// past m repeat row m-1 and are not stored.
#define GEMV(T, MR)                                                                  \
  __kernel void matmul_gemv##MR##_##T(PC(x), PC(w), PC(bias), P(y), int m, int n,   \
                                      int k, int has_bias) {                         \
    int j = get_global_id(0);                                                        \
    if (j >= n) return;                                                              \
    int i0 = get_global_id(1) * MR;                                                  \
    __global const float *x = ATC(float, x);                                         \
    __global const uchar *row = ATC(uchar, w) + (ulong)j * rg_row_bytes(RG_T_##T, k); \
    __global const float *xr[MR];                                                    \
    float16 acc[MR];                                                                 \
    _Pragma("unroll") for (int r = 0; r < MR; r++) {                                 \
      xr[r] = x + (ulong)min(i0 + r, m - 1) * (ulong)k;                             \
      acc[r] = (float16)(0.0f);                                                      \
    }                                                                                \
    int p = 0;                                                                       \
    /* Two chains per row, so that consecutive multiply-adds do not wait on */      \
    /* each other. */                                                                \
    float16 acc2[MR];                                                                \
    _Pragma("unroll") for (int r = 0; r < MR; r++) acc2[r] = (float16)(0.0f);        \
    for (; p + 32 <= k; p += 32) {                                                   \
      float16 w0, w1;                                                                \
      w32_##T(row, p, &w0, &w1);                                                     \
      _Pragma("unroll") for (int r = 0; r < MR; r++) {                               \
        acc[r] = RG_MAD(vload16(0, xr[r] + p), w0, acc[r]);                             \
        acc2[r] = RG_MAD(vload16(0, xr[r] + p + 16), w1, acc2[r]);                      \
      }                                                                              \
    }                                                                                \
    _Pragma("unroll") for (int r = 0; r < MR; r++) acc[r] += acc2[r];                \
    for (; p + 16 <= k; p += 16) {                                                   \
      float16 wv = w16_##T(row, p);                                                  \
      _Pragma("unroll") for (int r = 0; r < MR; r++) acc[r] =                        \
          RG_MAD(vload16(0, xr[r] + p), wv, acc[r]);                                    \
    }                                                                                \
    float s[MR];                                                                     \
    _Pragma("unroll") for (int r = 0; r < MR; r++) s[r] = hsum16(acc[r]);            \
    for (; p < k; p++) {                                                             \
      float wv = w1_##T(row, p);                                                     \
      _Pragma("unroll") for (int r = 0; r < MR; r++) s[r] = RG_MAD(xr[r][p], wv, s[r]); \
    }                                                                                \
    float b = has_bias ? ATC(float, bias)[j] : 0.0f;                                 \
    __global float *y = AT(float, y);                                                \
    _Pragma("unroll") for (int r = 0; r < MR; r++) if (i0 + r < m)                   \
        y[(ulong)(i0 + r) * (ulong)n + j] = s[r] + b;                                \
  }

// ----- GEMM ---------------------------------------------------------------

#define TM 64
#define TN 64
#define TK 32

// Global (ceil(n / 64) * 16, ceil(m / 64) * 16), local (16, 16).
#define GEMM(T)                                                                         \
  __kernel __attribute__((reqd_work_group_size(16, 16, 1))) void matmul_gemm_##T(     \
      PC(x), PC(w), PC(bias), P(y), int m, int n, int k, int has_bias) {              \
    __local float xs[TK][TM + 1];                                                       \
    __local float ws[TK][TN + 1];                                                       \
    int tx = get_local_id(0), ty = get_local_id(1), lid = ty * 16 + tx;                 \
    int col0 = get_group_id(0) * TN, row0 = get_group_id(1) * TM;                       \
    __global const float *x = ATC(float, x);                                            \
    __global const uchar *w = ATC(uchar, w);                                            \
    ulong rb = rg_row_bytes(RG_T_##T, k);                                               \
    float acc[4][4];                                                                    \
    _Pragma("unroll") for (int r = 0; r < 4; r++)                                       \
        _Pragma("unroll") for (int c = 0; c < 4; c++) acc[r][c] = 0.0f;                 \
    for (int p0 = 0; p0 < k; p0 += TK) {                                                \
      _Pragma("unroll") for (int u = 0; u < TM * TK / 256; u++) {                       \
        int e = lid + 256 * u, r = e / TK, kk = e % TK, gi = row0 + r, gp = p0 + kk;    \
        xs[kk][r] = gi < m && gp < k ? x[(ulong)gi * (ulong)k + gp] : 0.0f;             \
        int gj = col0 + r;                                                              \
        ws[kk][r] = gj < n && gp < k ? w1_##T(w + (ulong)gj * rb, gp) : 0.0f;           \
      }                                                                                 \
      barrier(CLK_LOCAL_MEM_FENCE);                                                     \
      for (int kk = 0; kk < TK; kk++) {                                                 \
        float a[4], b[4];                                                               \
        _Pragma("unroll") for (int r = 0; r < 4; r++) a[r] = xs[kk][ty + 16 * r];       \
        _Pragma("unroll") for (int c = 0; c < 4; c++) b[c] = ws[kk][tx + 16 * c];       \
        _Pragma("unroll") for (int r = 0; r < 4; r++)                                   \
            _Pragma("unroll") for (int c = 0; c < 4; c++) acc[r][c] =                   \
                RG_MAD(a[r], b[c], acc[r][c]);                                             \
      }                                                                                 \
      barrier(CLK_LOCAL_MEM_FENCE);                                                     \
    }                                                                                   \
    __global float *y = AT(float, y);                                                   \
    _Pragma("unroll") for (int c = 0; c < 4; c++) {                                     \
      int j = col0 + tx + 16 * c;                                                       \
      if (j >= n) continue;                                                             \
      float b = has_bias ? ATC(float, bias)[j] : 0.0f;                                  \
      _Pragma("unroll") for (int r = 0; r < 4; r++) {                                   \
        int i = row0 + ty + 16 * r;                                                     \
        if (i < m) y[(ulong)i * (ulong)n + j] = acc[r][c] + b;                          \
      }                                                                                 \
    }                                                                                   \
  }

// ----- Register-blocked GEMM for CPU devices ----------------------------------

// Global (ceil(n / 2) rounded up to 8, ceil(m / 8)), local (8, 1). Rows and
// columns past the ends repeat the last one and are not stored.
#define RGEMM(T)                                                                         \
  __kernel void matmul_rgemm_##T(PC(x), PC(w), PC(bias), P(y), int m, int n, int k,     \
                                 int has_bias) {                                         \
    int j0 = get_global_id(0) * 2, i0 = get_global_id(1) * 8;                            \
    if (j0 >= n) return;                                                                 \
    __global const float *x = ATC(float, x), *xr[8];                                     \
    __global const uchar *wr[2];                                                         \
    ulong rb = rg_row_bytes(RG_T_##T, k);                                                \
    _Pragma("unroll") for (int r = 0; r < 8; r++) xr[r] =                                \
        x + (ulong)min(i0 + r, m - 1) * (ulong)k;                                        \
    _Pragma("unroll") for (int c = 0; c < 2; c++) wr[c] =                                \
        ATC(uchar, w) + (ulong)min(j0 + c, n - 1) * rb;                                  \
    float16 acc[8][2];                                                                   \
    _Pragma("unroll") for (int r = 0; r < 8; r++) acc[r][0] = acc[r][1] = (float16)(0.0f); \
    int p = 0;                                                                           \
    for (; p + 16 <= k; p += 16) {                                                       \
      float16 b0 = w16_##T(wr[0], p), b1 = w16_##T(wr[1], p);                            \
      _Pragma("unroll") for (int r = 0; r < 8; r++) {                                    \
        float16 a = vload16(0, xr[r] + p);                                               \
        acc[r][0] = RG_MAD(a, b0, acc[r][0]);                                               \
        acc[r][1] = RG_MAD(a, b1, acc[r][1]);                                               \
      }                                                                                  \
    }                                                                                    \
    float s[8][2];                                                                       \
    _Pragma("unroll") for (int r = 0; r < 8; r++) {                                      \
      s[r][0] = hsum16(acc[r][0]);                                                       \
      s[r][1] = hsum16(acc[r][1]);                                                       \
    }                                                                                    \
    for (; p < k; p++) {                                                                 \
      float b0 = w1_##T(wr[0], p), b1 = w1_##T(wr[1], p);                                \
      _Pragma("unroll") for (int r = 0; r < 8; r++) {                                    \
        s[r][0] = RG_MAD(xr[r][p], b0, s[r][0]);                                            \
        s[r][1] = RG_MAD(xr[r][p], b1, s[r][1]);                                            \
      }                                                                                  \
    }                                                                                    \
    __global float *y = AT(float, y);                                                    \
    _Pragma("unroll") for (int c = 0; c < 2; c++) {                                      \
      int j = j0 + c;                                                                    \
      if (j >= n) break;                                                                 \
      float b = has_bias ? ATC(float, bias)[j] : 0.0f;                                   \
      _Pragma("unroll") for (int r = 0; r < 8; r++) if (i0 + r < m)                      \
          y[(ulong)(i0 + r) * (ulong)n + j] = s[r][c] + b;                               \
    }                                                                                    \
  }

#define MATMUL(T) GEMV(T, 1) GEMV(T, 4) GEMV(T, 8) GEMM(T) RGEMM(T)
MATMUL(f32)
MATMUL(bf16)
MATMUL(f16)
MATMUL(q8_0)
