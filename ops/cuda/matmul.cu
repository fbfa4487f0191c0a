// ops/cuda/matmul.cu — y = x W^T (+ bias) on an NVIDIA (or AMD) GPU.
//
// Three paths; devices/cuda/gpu_ops.c picks one per call from m:
//   GEMV   m <= 8 (decode). Memory-bound: each weight row is read from HBM
//          once and applied to all m rows of x held in registers. A warp
//          owns RG_CUK_GEMV_ROWS rows of W; each lane reads 16 bytes of a
//          row per step (8 bf16/f16 values, two float4 of f32) with a
//          streaming (evict-first) load, so a block of 8 warps has 8 KiB of
//          weights in flight per unrolled step; x comes through L1 at half
//          the weight bytes (its 8 values feed both rows). q8_0 rows are
//          2-byte aligned 34-byte blocks: a lane takes one block per step,
//          which keeps the warp's reads contiguous (1088 bytes) but costs
//          17 two-byte loads per block.
//   tiled  9 <= m below the cuBLAS threshold, or any m without cuBLAS: a
//          64x64 output tile per block, 4x4 per thread, k in steps of 16
//          through shared memory, weights widened to f32 as they are staged.
//          f32 FMA on the SIMT cores: exact to f32 rounding, no tensor cores.
//   cuBLAS large m with bf16/f16 weights: x is narrowed to the weight's type
//          (rg_rows_to_16) and cublasGemmEx runs on the tensor cores with
//          f32 accumulation (the host side is in devices/cuda/cuda_blas.c).
// All paths accumulate in f32.
#include "ops/cuda/common.cuh"

// ----- GEMV --------------------------------------------------------------------
//
// grid.x = ceil(n / (RG_CUK_GEMV_ROWS * 8 / ksplit)), 256 threads.

// 16 bytes of weights: 8 bf16/f16 values, or half of 8 f32 values.
struct w16_t {
  uint4 u[2];  // f32 uses both, 16-bit types the first
};

template <int T>
RG_DEV w16_t w_load(const unsigned char *row, int64_t i) {
  w16_t v;
  if (T == RG_CUK_F32) {
    const uint4 *p = (const uint4 *)(row + i * 4);
    v.u[0] = rg_ld_stream(p), v.u[1] = rg_ld_stream(p + 1);
  } else {
    v.u[0] = rg_ld_stream((const uint4 *)(row + i * 2));
  }
  return v;
}

// The 8 weights of a w16_t as f32.
template <int T>
RG_DEV void w_widen(const w16_t &v, float *out) {
  if (T == RG_CUK_F32) {
    const uint32_t b[8] = {v.u[0].x, v.u[0].y, v.u[0].z, v.u[0].w,
                           v.u[1].x, v.u[1].y, v.u[1].z, v.u[1].w};
#pragma unroll
    for (int j = 0; j < 8; j++) out[j] = __uint_as_float(b[j]);
  } else {
    const uint32_t b[4] = {v.u[0].x, v.u[0].y, v.u[0].z, v.u[0].w};
#pragma unroll
    for (int j = 0; j < 4; j++) {
      uint16_t lo = (uint16_t)(b[j] & 0xffffu), hi = (uint16_t)(b[j] >> 16);
      out[2 * j] = T == RG_CUK_BF16 ? rg_bf16_f32(lo) : rg_f16_f32(lo);
      out[2 * j + 1] = T == RG_CUK_BF16 ? rg_bf16_f32(hi) : rg_f16_f32(hi);
    }
  }
}

RG_DEV void x8(const float *x, int64_t i, float *out) {
  const float4 *p = (const float4 *)(x + i);
  float4 a = rg_ldg(p), b = rg_ldg(p + 1);
  out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w;
  out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
}

// Steps of 8 weights per lane whose loads are all issued before any is
// used: with RG_CUK_GEMV_ROWS rows that is 4 KiB (8 KiB of f32) in flight
// per warp, which is what keeps HBM busy when a matrix has few rows (2048
// rows make only ~8 warps per SM on an H100).
#define GEMV_UNROLL 4

template <int T, int M>
RG_DEV void gemv(const rg_cuk_matmul_t &a) {
  const int R = RG_CUK_GEMV_ROWS, NW = RG_CUK_GEMV_THREADS / RG_WARP;
  const int lane = threadIdx.x % RG_WARP, warp = threadIdx.x / RG_WARP;
  // ksplit warps share a group of R rows, each taking one slice of k: a
  // matrix with few rows still spreads over every SM (512 rows would fill
  // only 32 blocks otherwise). Slices are whole steps of the loops below.
  const int W = a.ksplit, group = warp / W, slice = warp % W;
  const int64_t row0 = ((int64_t)blockIdx.x * (NW / W) + group) * R;
  const float *x = RG_P(const float, a.x);
  const unsigned char *w = RG_P(const unsigned char, a.w);
  const int64_t k = a.k;
  const int64_t unit = !a.aligned ? RG_WARP : T == RG_CUK_Q8_0 ? 32 * RG_WARP : 8 * RG_WARP;
  const int64_t per = ((k + unit - 1) / unit + W - 1) / W * unit;
  const int64_t k_lo = slice * per;
  // A warp past the last row keeps an empty slice: it still reaches the
  // block barrier below.
  const int64_t k_hi = row0 >= a.n ? k_lo : k_lo + per < k ? k_lo + per : k;
  const unsigned char *rows[R];
  bool live[R];
#pragma unroll
  for (int r = 0; r < R; r++) {
    live[r] = row0 + r < a.n;
    rows[r] = w + (live[r] ? row0 + r : 0) * a.w_row_bytes;
  }
  float acc[R][M];
#pragma unroll
  for (int r = 0; r < R; r++)
#pragma unroll
    for (int m = 0; m < M; m++) acc[r][m] = 0.0f;

  if (T == RG_CUK_Q8_0 && a.aligned) {
    // One 32-element block per lane per step; x is 16-byte aligned.
#pragma unroll 1
    for (int64_t b = k_lo / 32 + lane; b < k_hi / 32; b += RG_WARP) {
#pragma unroll
      for (int r = 0; r < R; r++) {
        const uint16_t *blk = (const uint16_t *)(rows[r] + b * 34);
        const float d = rg_f16_f32(rg_ld_stream(blk));
        float s[M];
#pragma unroll
        for (int m = 0; m < M; m++) s[m] = 0.0f;
          // 8 quants at a time, so that M rows of x need few registers.
#pragma unroll
        for (int j = 0; j < 32; j += 8) {
          float q[8];
#pragma unroll
          for (int e = 0; e < 4; e++) {
            uint16_t u = rg_ld_stream(blk + 1 + j / 2 + e);
            q[2 * e] = (float)(int8_t)(u & 0xff);
            q[2 * e + 1] = (float)(int8_t)(u >> 8);
          }
#pragma unroll
          for (int m = 0; m < M; m++) {
            float xv[8];
            x8(x + m * k + b * 32, j, xv);
#pragma unroll
            for (int e = 0; e < 8; e++) s[m] += q[e] * xv[e];
          }
        }
#pragma unroll
        for (int m = 0; m < M; m++) acc[r][m] += d * s[m];
      }
    }
  } else if (T != RG_CUK_Q8_0 && a.aligned) {
    const int64_t step = RG_WARP * 8;
    for (int64_t i0 = k_lo + (int64_t)lane * 8; i0 < k_hi; i0 += step * GEMV_UNROLL) {
      w16_t wr[GEMV_UNROLL][R];
#pragma unroll
      for (int u = 0; u < GEMV_UNROLL; u++)
#pragma unroll
        for (int r = 0; r < R; r++)
          if (i0 + u * step < k_hi) wr[u][r] = w_load<T>(rows[r], i0 + u * step);
#pragma unroll
      for (int u = 0; u < GEMV_UNROLL; u++) {
        const int64_t i = i0 + u * step;
        if (i >= k_hi) break;
        float wv[R][8];
#pragma unroll
        for (int r = 0; r < R; r++) w_widen<T>(wr[u][r], wv[r]);
#pragma unroll
        for (int m = 0; m < M; m++) {
          float xv[8];
          x8(x + m * k, i, xv);
#pragma unroll
          for (int r = 0; r < R; r++)
#pragma unroll
            for (int e = 0; e < 8; e++) acc[r][m] += wv[r][e] * xv[e];
        }
      }
    }
  } else {
    // Unaligned operands: element loads (q8_0 bytewise).
    for (int64_t i = k_lo + lane; i < k_hi; i += RG_WARP) {
#pragma unroll
      for (int r = 0; r < R; r++) {
        float wv = rg_load(rows[r], T, i);
#pragma unroll
        for (int m = 0; m < M; m++) acc[r][m] += wv * x[m * k + i];
      }
    }
  }
  // Each warp's sums, then the group's first warp adds its slices' in order.
  __shared__ float part[NW][R][M];
#pragma unroll
  for (int r = 0; r < R; r++)
#pragma unroll
    for (int m = 0; m < M; m++) {
      float s = rg_warp_sum(acc[r][m]);
      if (lane == 0) part[warp][r][m] = s;
    }
  __syncthreads();
  if (slice != 0 || lane != 0) return;
  const float *bias = RG_P(const float, a.bias);
  float *y = RG_P(float, a.y);
#pragma unroll
  for (int r = 0; r < R; r++) {
    if (!live[r]) continue;
#pragma unroll
    for (int m = 0; m < M; m++) {
      float s = 0.0f;
      for (int j = 0; j < W; j++) s += part[warp + j][r][m];
      y[m * a.n + row0 + r] = s + (bias ? bias[row0 + r] : 0.0f);
    }
  }
}

#define RG_GEMV_(T, t, M)                                           \
  extern "C" __global__ void __launch_bounds__(RG_CUK_GEMV_THREADS) \
      rg_gemv_##t##_##M(const rg_cuk_matmul_t a) {                  \
    gemv<T, M>(a);                                                  \
  }
#define RG_GEMV_ALL_(T, t) \
  RG_GEMV_(T, t, 1)        \
  RG_GEMV_(T, t, 2)        \
  RG_GEMV_(T, t, 3)        \
  RG_GEMV_(T, t, 4) RG_GEMV_(T, t, 5) RG_GEMV_(T, t, 6) RG_GEMV_(T, t, 7) RG_GEMV_(T, t, 8)
RG_GEMV_ALL_(RG_CUK_F32, f32)
RG_GEMV_ALL_(RG_CUK_BF16, bf16)
RG_GEMV_ALL_(RG_CUK_F16, f16)
RG_GEMV_ALL_(RG_CUK_Q8_0, q8_0)

// ----- Tiled GEMM --------------------------------------------------------------

#define TK 16
extern "C" __global__ void __launch_bounds__(RG_CUK_TILE_THREADS)
    rg_gemm_tiled(const rg_cuk_gemm_t a) {
  __shared__ float xs[TK][RG_CUK_TILE_M + 1];
  __shared__ float ws[TK][RG_CUK_TILE_N + 1];
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  const int64_t m0 = (int64_t)blockIdx.y * RG_CUK_TILE_M, n0 = (int64_t)blockIdx.x * RG_CUK_TILE_N;
  const float *x = RG_P(const float, a.x);
  const unsigned char *w = RG_P(const unsigned char, a.w);
  float acc[4][4] = {{0}};
  for (int64_t k0 = 0; k0 < a.k; k0 += TK) {
    // 64 rows x 16 columns of each operand: 4 elements per thread, k the
    // fastest index so that the reads of a row are contiguous.
#pragma unroll
    for (int e = 0; e < 4; e++) {
      int idx = tid + e * RG_CUK_TILE_THREADS, r = idx / TK, c = idx % TK;
      int64_t kk = k0 + c, mr = m0 + r, nr = n0 + r;
      xs[c][r] = mr < a.m && kk < a.k ? x[mr * a.k + kk] : 0.0f;
      ws[c][r] = nr < a.n && kk < a.k ? rg_load(w + nr * a.w_row_bytes, a.wtype, kk) : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int c = 0; c < TK; c++) {
      float xv[4], wv[4];
#pragma unroll
      for (int i = 0; i < 4; i++) xv[i] = xs[c][ty + 16 * i], wv[i] = ws[c][tx + 16 * i];
#pragma unroll
      for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[i][j] += xv[i] * wv[j];
    }
    __syncthreads();
  }
  const float *bias = RG_P(const float, a.bias);
  float *y = RG_P(float, a.y);
#pragma unroll
  for (int i = 0; i < 4; i++)
#pragma unroll
    for (int j = 0; j < 4; j++) {
      int64_t mr = m0 + ty + 16 * i, nc = n0 + tx + 16 * j;
      if (mr < a.m && nc < a.n) y[mr * a.n + nc] = acc[i][j] + (bias ? bias[nc] : 0.0f);
    }
}

// ----- Helpers of the cuBLAS path ------------------------------------------------

extern "C" __global__ void rg_rows_to_16(const rg_cuk_rows16_t a) {
  const float *src = RG_P(const float, a.src);
  uint16_t *dst = RG_P(uint16_t, a.dst);
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < a.n;
       i += (int64_t)gridDim.x * blockDim.x)
    dst[i] = a.to16 == 1 ? rg_f32_bf16(src[i]) : rg_f32_f16(src[i]);
}

extern "C" __global__ void rg_bias_add(const rg_cuk_bias_t a) {
  float *y = RG_P(float, a.y);
  const float *bias = RG_P(const float, a.bias);
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < a.m * a.n;
       i += (int64_t)gridDim.x * blockDim.x)
    y[i] += bias[i % a.n];
}

// ----- Bandwidth probe -----------------------------------------------------------

extern "C" __global__ void rg_stream_read(const rg_cuk_stream_t a) {
  const uint4 *src = RG_P(const uint4, a.src);
  uint32_t acc = 0;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < a.n16;
       i += (int64_t)gridDim.x * blockDim.x) {
    uint4 v = rg_ld_stream(src + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  for (int o = RG_WARP / 2; o > 0; o >>= 1) acc ^= rg_shfl_xor(acc, o);
  if (threadIdx.x % RG_WARP == 0) atomicXor(RG_P(unsigned int, a.out) + blockIdx.x % 64, acc);
}
