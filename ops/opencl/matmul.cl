// ops/opencl/matmul.cl — y (m, n) = x (m, k) W^T (+ bias), W (n, k) stored
// as f32, bf16, f16 or q8_0 and widened in the kernel, so a weight crosses
// memory once, in its compact form.
//
// Two paths, chosen by the host from m:
//   gemv<MR>  m <= 8 (decode): one work-item per output column j streams
//             W's row j once and dots it with MR rows of x at a time (MR =
//             1, 4 or 8, the smallest that covers m; the rows of x stay in
//             cache). Bound by reading W: on a CPU device a work-item is a
//             loop iteration, so one contiguous row per item is what the
//             hardware prefetchers want, and 16-wide vector loads are what
//             its SIMD units want.
//   gemm      m > 8 (prefill): 64 x 64 output tiles per 16 x 16 work-group,
//             4 x 4 outputs per item; x and W tiles of 32 columns are staged
//             in local memory (W widened to f32 on the way in), stored
//             k-major so that the items of a row read consecutive words.
//             32 columns are one q8_0 block.
// Accumulation is f32 with mad() on both paths.

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
  float d = vload_half(0, (__global const half *)blk);
  return convert_float16(vload16(0, (__global const char *)(blk + 2 + p % 32))) * d;
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
  return vload_half(0, (__global const half *)blk) * (float)(char)blk[2 + p % 32];
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
    for (; p + 16 <= k; p += 16) {                                                   \
      float16 wv = w16_##T(row, p);                                                  \
      _Pragma("unroll") for (int r = 0; r < MR; r++) acc[r] =                        \
          mad(vload16(0, xr[r] + p), wv, acc[r]);                                    \
    }                                                                                \
    float s[MR];                                                                     \
    _Pragma("unroll") for (int r = 0; r < MR; r++) s[r] = hsum16(acc[r]);            \
    for (; p < k; p++) {                                                             \
      float wv = w1_##T(row, p);                                                     \
      _Pragma("unroll") for (int r = 0; r < MR; r++) s[r] = mad(xr[r][p], wv, s[r]); \
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
                mad(a[r], b[c], acc[r][c]);                                             \
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

#define MATMUL(T) GEMV(T, 1) GEMV(T, 4) GEMV(T, 8) GEMM(T)
MATMUL(f32)
MATMUL(bf16)
MATMUL(f16)
MATMUL(q8_0)
