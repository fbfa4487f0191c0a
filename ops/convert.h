// ops/convert.h — weight storage types, and conversions between them and f32.
//
// ridge keeps weights in the type the checkpoint ships (safetensors f32, bf16,
// f16; GGUF q8_0) and widens them inside the kernels, so a weight is read
// from memory once in its compact form. This header names those types, says
// how many bytes a row of each takes, converts single values (inline, exact,
// portable) and whole rows (vectorised, picked at run time for this CPU).
//
// Invariants:
// - bf16 and f16 widen to f32 exactly. Narrowing rounds to nearest, ties to
//   even; overflow gives ±inf; NaN stays NaN (quiet). So every bf16 and f16
//   value that is not NaN round-trips bit for bit, subnormals included.
// - A q8_0 row is cols/32 blocks of {f16 d; int8 q[32]} (34 bytes, GGUF's
//   block_q8_0), and w = d*q. cols must be a multiple of 32. A dequantized
//   q8_0 weight is exact in f32 (d carries 11 significant bits, q 8).
// - Quantizing to q8_0 takes d from the block's largest magnitude, rounded to
//   f16, and rounds x/d half away from zero: |x - d*q| <= d/2 for every x of
//   a block whose d is a normal f16 (largest magnitude >= 127 * 2^-14).
//
// Ownership: every function reads and writes caller memory and keeps nothing.
#ifndef RG_OPS_CONVERT_H
#define RG_OPS_CONVERT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/status.h"

// X-macro list: type, name, weights per block, bytes per block.
#define RG_WTYPE_MAP(X)          \
  X(RG_WTYPE_F32, "f32", 1, 4)   \
  X(RG_WTYPE_BF16, "bf16", 1, 2) \
  X(RG_WTYPE_F16, "f16", 1, 2)   \
  X(RG_WTYPE_Q8_0, "q8_0", 32, 34)

typedef enum {
#define RG_X_(t, n, be, bb) t,
  RG_WTYPE_MAP(RG_X_)
#undef RG_X_
  RG_WTYPE_COUNT
} rg_wtype_t;

// "f32", "bf16", "f16", "q8_0"; "?" for a value outside the enum.
const char *rg_wtype_name(rg_wtype_t t);
// Weights per block (32 for q8_0, else 1) and bytes per block; 0 outside the enum.
int64_t rg_wtype_block_elems(rg_wtype_t t);
int64_t rg_wtype_block_bytes(rg_wtype_t t);
// Bytes one row of `cols` weights takes. Fails for an unknown type, cols < 1,
// or cols that is not a whole number of blocks ("q8_0 rows must be a
// multiple of 32 wide").
RG_MUST_USE rg_status_t rg_wtype_row_bytes(rg_wtype_t t, int64_t cols, size_t *out_bytes);

// Instruction-set levels the CPU kernels are built for, lowest first after
// AUTO. Each level includes the ones below it:
//   avx2         AVX2 + FMA + F16C
//   avx512       AVX-512 F, BW, VL, DQ
//   avx512-bf16  avx512 + AVX512_BF16 (vdpbf16ps)
// AUTO means "the highest this CPU has"; it is the zero value so a zeroed
// options struct asks for the default.
#define RG_CPU_ISA_MAP(X)        \
  X(RG_CPU_ISA_AUTO, "auto")     \
  X(RG_CPU_ISA_SCALAR, "scalar") \
  X(RG_CPU_ISA_AVX2, "avx2")     \
  X(RG_CPU_ISA_AVX512, "avx512") \
  X(RG_CPU_ISA_AVX512_BF16, "avx512-bf16")

typedef enum {
#define RG_X_(i, n) i,
  RG_CPU_ISA_MAP(RG_X_)
#undef RG_X_
  RG_CPU_ISA_COUNT
} rg_cpu_isa_t;

const char *rg_cpu_isa_name(rg_cpu_isa_t isa);
// The highest level this CPU and OS support (checked once, then cached).
rg_cpu_isa_t rg_cpu_isa_best(void);
// Resolves AUTO to the best level; fails with RG_UNAVAILABLE, naming the
// missing feature, when `want` is above what this CPU has.
RG_MUST_USE rg_status_t rg_cpu_isa_resolve(rg_cpu_isa_t want, rg_cpu_isa_t *out);

// ---- Single values: exact, portable reference conversions. -------------

static inline float rg_bf16_to_f32(uint16_t h) {
  uint32_t b = (uint32_t)h << 16;
  float f;
  memcpy(&f, &b, sizeof f);
  return f;
}

static inline uint16_t rg_f32_to_bf16(float f) {
  uint32_t b;
  memcpy(&b, &f, sizeof b);
  if ((b & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((b >> 16) | 0x40u);  // quiet NaN
  b += 0x7fffu + ((b >> 16) & 1u);  // round to nearest even; carries into the exponent
  return (uint16_t)(b >> 16);
}

static inline float rg_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu, mant = h & 0x3ffu, b;
  if (e == 0x1f) {
    // ±inf, or NaN made quiet as the hardware conversion does.
    b = sign | 0x7f800000u | (mant ? 0x400000u | (mant << 13) : 0);
  } else if (e == 0) {
    float v = (float)mant * 0x1p-24f;  // zero or subnormal: exact
    memcpy(&b, &v, sizeof b);
    b |= sign;
  } else {
    b = sign | ((e + 112u) << 23) | (mant << 13);
  }
  float f;
  memcpy(&f, &b, sizeof f);
  return f;
}

static inline uint16_t rg_f32_to_f16(float f) {
  uint32_t b;
  memcpy(&b, &f, sizeof b);
  uint16_t sign = (uint16_t)((b >> 16) & 0x8000u);
  uint32_t a = b & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  // NaN
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);  // >= 65520 rounds to inf
  if (a < 0x38800000u) {
    // Below 2^-14 the result is subnormal: its integer mantissa is
    // |f| * 2^24 rounded to nearest even, which adding 2^23 does in f32.
    float v;
    memcpy(&v, &a, sizeof v);
    v = v * 0x1p24f + 0x1p23f;
    uint32_t r;
    memcpy(&r, &v, sizeof r);
    return (uint16_t)(sign | (r - 0x4b000000u));
  }
  a -= 112u << 23;                 // rebias the exponent from 127 to 15
  a += 0xfffu + ((a >> 13) & 1u);  // round 23 mantissa bits to 10, ties to even
  return (uint16_t)(sign | (a >> 13));
}

// ---- Rows: vectorised with the best instruction set this CPU has. -------

void rg_bf16_to_f32_row(const uint16_t *src, float *dst, int64_t n);
void rg_f32_to_bf16_row(const float *src, uint16_t *dst, int64_t n);
void rg_f16_to_f32_row(const uint16_t *src, float *dst, int64_t n);
void rg_f32_to_f16_row(const float *src, uint16_t *dst, int64_t n);
// q8_0 needs n % 32 == 0 and finite values whose scale fits an f16
// (largest magnitude < 127 * 65520); anything else fails with a message.
RG_MUST_USE rg_status_t rg_q8_0_quantize_row(const float *src, void *dst, int64_t n);
RG_MUST_USE rg_status_t rg_q8_0_dequantize_row(const void *src, float *dst, int64_t n);

// Any type to or from f32: n weights of one row, n a whole number of blocks.
// rg_row_to_f32_isa() runs one chosen level (tests compare every level; the
// matmul uses it to honour a forced level); the others use the best level.
RG_MUST_USE rg_status_t rg_row_to_f32(rg_wtype_t t, const void *src, float *dst, int64_t n);
RG_MUST_USE rg_status_t rg_row_from_f32(rg_wtype_t t, const float *src, void *dst, int64_t n);
RG_MUST_USE rg_status_t rg_row_to_f32_isa(rg_cpu_isa_t isa, rg_wtype_t t, const void *src,
                                          float *dst, int64_t n);
RG_MUST_USE rg_status_t rg_row_from_f32_isa(rg_cpu_isa_t isa, rg_wtype_t t, const float *src,
                                            void *dst, int64_t n);

#endif  // RG_OPS_CONVERT_H
