// ops/cuda/common.cuh — what every kernel source shares: element codecs
// that give the same bits as base/dtype.h's, loads of each stored type, and
// warp and block reductions.
//
// The codecs are integer code, not the hardware conversion instructions, so
// they round exactly as the host's reference does (nearest even) and treat
// NaN the same way: the conformance suite compares converted bytes exactly.
#ifndef RG_OPS_CUDA_COMMON_CUH
#define RG_OPS_CUDA_COMMON_CUH

#include "ops/cuda/kernels.h"
#include "ops/cuda/vendor.cuh"

#define RG_DEV static __device__ __forceinline__

RG_DEV float rg_bits_f32(uint32_t b) {
  return __uint_as_float(b);
}
RG_DEV uint32_t rg_f32_bits(float f) {
  return __float_as_uint(f);
}

RG_DEV float rg_bf16_f32(uint16_t h) {
  return rg_bits_f32((uint32_t)h << 16);
}

RG_DEV uint16_t rg_f32_bf16(float f) {
  uint32_t b = rg_f32_bits(f);
  if ((b & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((b >> 16) | 0x40u);
  b += 0x7fffu + ((b >> 16) & 1u);
  return (uint16_t)(b >> 16);
}

RG_DEV float rg_f16_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu, mant = h & 0x3ffu, b;
  if (e == 0x1f) {
    b = sign | 0x7f800000u | (mant ? 0x400000u | (mant << 13) : 0);
  } else if (e == 0) {
    b = rg_f32_bits((float)mant * 0x1p-24f) | sign;
  } else {
    b = sign | ((e + 112u) << 23) | (mant << 13);
  }
  return rg_bits_f32(b);
}

RG_DEV uint16_t rg_f32_f16(float f) {
  uint32_t b = rg_f32_bits(f);
  uint16_t sign = (uint16_t)((b >> 16) & 0x8000u);
  uint32_t a = b & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);
  if (a < 0x38800000u) {
    // __fadd_rn/__fmul_rn: the same two roundings the host performs, never
    // fused into one.
    float v = __fadd_rn(__fmul_rn(rg_bits_f32(a), 0x1p24f), 0x1p23f);
    return (uint16_t)(sign | (rg_f32_bits(v) - 0x4b000000u));
  }
  a -= 112u << 23;
  a += 0xfffu + ((a >> 13) & 1u);
  return (uint16_t)(sign | (a >> 13));
}

// Element i of a row of type t (f32, bf16, f16, q8_0) widened to f32.
RG_DEV float rg_load(const unsigned char *row, int32_t t, int64_t i) {
  switch (t) {
    case RG_CUK_F32:
      return ((const float *)row)[i];
    case RG_CUK_BF16:
      return rg_bf16_f32(((const uint16_t *)row)[i]);
    case RG_CUK_F16:
      return rg_f16_f32(((const uint16_t *)row)[i]);
    default: {
      // q8_0: blocks of {f16 d; int8 q[32]}; the block is 2-byte aligned.
      const unsigned char *blk = row + (i / 32) * 34;
      uint16_t d = (uint16_t)(blk[0] | (blk[1] << 8));
      return rg_f16_f32(d) * (float)(int8_t)blk[2 + i % 32];
    }
  }
}

// Bytes of n elements of t (n whole blocks).
RG_DEV int64_t rg_bytes(int32_t t, int64_t n) {
  return t == RG_CUK_F32 ? n * 4 : t == RG_CUK_Q8_0 ? n / 32 * 34 : n * 2;
}

RG_DEV float rg_warp_sum(float v) {
  for (int o = RG_WARP / 2; o > 0; o >>= 1) v += rg_shfl_xor(v, o);
  return v;
}
RG_DEV float rg_warp_max(float v) {
  for (int o = RG_WARP / 2; o > 0; o >>= 1) v = fmaxf(v, rg_shfl_xor(v, o));
  return v;
}
RG_DEV double rg_warp_sum_d(double v) {
  for (int o = RG_WARP / 2; o > 0; o >>= 1) v += rg_shfl_xor(v, o);
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every
// thread gets the result. `red` is 32 floats of shared memory.
RG_DEV float rg_block_sum(float v, float *red) {
  int lane = threadIdx.x % RG_WARP, w = threadIdx.x / RG_WARP, nw = blockDim.x / RG_WARP;
  v = rg_warp_sum(v);
  __syncthreads();
  if (lane == 0) red[w] = v;
  __syncthreads();
  v = lane < nw ? red[lane] : 0.0f;
  return rg_warp_sum(v);
}
RG_DEV double rg_block_sum_d(double v, double *red) {
  int lane = threadIdx.x % RG_WARP, w = threadIdx.x / RG_WARP, nw = blockDim.x / RG_WARP;
  v = rg_warp_sum_d(v);
  __syncthreads();
  if (lane == 0) red[w] = v;
  __syncthreads();
  v = lane < nw ? red[lane] : 0.0;
  return rg_warp_sum_d(v);
}
RG_DEV float rg_block_max(float v, float *red) {
  int lane = threadIdx.x % RG_WARP, w = threadIdx.x / RG_WARP, nw = blockDim.x / RG_WARP;
  v = rg_warp_max(v);
  __syncthreads();
  if (lane == 0) red[w] = v;
  __syncthreads();
  v = lane < nw ? red[lane] : -INFINITY;
  return rg_warp_max(v);
}

#define RG_P(T, a) ((T *)(uintptr_t)(a))

#endif  // RG_OPS_CUDA_COMMON_CUH
