// base/dtype.h — ridge's one table of element types: what a tensor's
// elements are, how many bytes a block of them takes, what the file formats
// call them, and the reference codecs between them and f32.
//
// Every layer uses this table: the planner prices weights and KV by
// rg_dtype_bytes(), the weight loaders map safetensors and GGUF type ids
// through it, the file writers quantize with its one quantizer, and the
// kernels in ops/ widen rows with vectorised versions of its codecs that must
// give the same bits (ops/convert.h).
//
// The first RG_DTYPE_COMPUTE_COUNT entries are the types ridge *plans* with:
// those a device class publishes a peak rate for (f32, bf16, f16, fp8, int8,
// fp4). The rest are storage types: block formats (q8_0), the other fp8
// flavour, and the integer and f64 types checkpoints carry. Each storage type
// names the compute type it runs at (q8_0 is dequantized to f32 on the CPU,
// but a GPU runs it in int8 units: the planner uses `compute`).
//
// Invariants:
// - bf16 and f16 widen to f32 exactly. Narrowing rounds to nearest, ties to
//   even; overflow gives ±inf; NaN stays NaN (quiet). So every bf16 and f16
//   value that is not NaN round-trips bit for bit, subnormals included.
// - A q8_0 row is cols/32 blocks of {f16 d; int8 q[32]} (34 bytes, GGUF's
//   block_q8_0), and w = d*q; cols must be a multiple of 32. Dequantized q8_0
//   is exact in f32 (d carries 11 significant bits, q 8).
// - q4_K and q6_K are GGUF's k-quants: super-blocks of 256 weights (144 and
//   210 bytes; ggml's block_q4_K and block_q6_K). ridge only dequantizes
//   them, with ggml's reference arithmetic (dequantize_row_q4_K/_q6_K) to
//   the bit: q4_K w = (d*sc)*q - dmin*m and q6_K w = (d*sc)*q, in that
//   order. For q4_K every product is exact in f32 (11 + 6 + 4 bits), so only
//   the difference rounds and a fused multiply-subtract gives the same bits;
//   for q6_K the second product rounds (11 + 8 + 6 bits), so the order
//   (d*sc first) is what makes kernels agree with llama.cpp.
// - The one q8_0 quantizer is ggml's reference rule (quantize_row_q8_0_ref):
//   d = max|x| / 127, stored as f16; q = round-half-away(x / d) with the
//   unrounded d. So ridge writes the same bytes llama.cpp's quantizer writes.
//   Each |x - d_stored*q| is within d/2 plus the f16 rounding of d (at most
//   127 * |d - d_stored| <= 0.032 d).
//
// Ownership: every function reads and writes caller memory and keeps nothing;
// names are static strings.
#ifndef RG_BASE_DTYPE_H
#define RG_BASE_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/status.h"

// X-macro list: enum, ridge name, elements per block, bytes per block, ggml
// type id (-1: GGUF has none), safetensors name (NULL: none), the compute
// type it runs at, and ridge's codecs for it: 0 none, 1 to and from f32, 2
// to f32 only (the k-quants, which ridge reads but never writes).
// fp4 is MXFP4: 32 four-bit values share one e8m0 scale (17 bytes, 4.25 bits).
// clang-format off
#define RG_DTYPE_MAP(X)                                                        \
  /* the types ridge plans with, first */                                      \
  X(RG_F32,       "f32",      1,  4,  0,  "F32",     RG_F32,  1)               \
  X(RG_BF16,      "bf16",     1,  2,  30, "BF16",    RG_BF16, 1)               \
  X(RG_F16,       "f16",      1,  2,  1,  "F16",     RG_F16,  1)               \
  X(RG_FP8,       "fp8",      1,  1,  -1, "F8_E4M3", RG_FP8,  0) /* e4m3 */    \
  X(RG_INT8,      "int8",     1,  1,  24, "I8",      RG_INT8, 0)               \
  X(RG_FP4,       "fp4",      32, 17, 39, NULL,      RG_FP4,  0) /* MXFP4 */   \
  /* storage types */                                                          \
  X(RG_Q8_0,      "q8_0",     32, 34, 8,  NULL,      RG_INT8, 1)               \
  X(RG_Q4_K,      "q4_K",     256, 144, 12, NULL,    RG_INT8, 2)               \
  X(RG_Q6_K,      "q6_K",     256, 210, 14, NULL,    RG_INT8, 2)               \
  X(RG_FP8_E5M2,  "fp8_e5m2", 1,  1,  -1, "F8_E5M2", RG_FP8,  0)               \
  X(RG_F64,       "f64",      1,  8,  28, "F64",     RG_F32,  0)               \
  X(RG_I16,       "i16",      1,  2,  25, "I16",     RG_INT8, 0)               \
  X(RG_I32,       "i32",      1,  4,  26, "I32",     RG_INT8, 0)               \
  X(RG_I64,       "i64",      1,  8,  27, "I64",     RG_INT8, 0)               \
  X(RG_U8,        "u8",       1,  1,  -1, "U8",      RG_INT8, 0)               \
  X(RG_BOOL,      "bool",     1,  1,  -1, "BOOL",    RG_INT8, 0)

typedef enum {
#define RG_X_(e, n, be, bb, gg, st, cp, cv) e,
  RG_DTYPE_MAP(RG_X_)
#undef RG_X_
  RG_DTYPE_COUNT
} rg_dtype_t;
// clang-format on

// Entries [0, RG_DTYPE_COMPUTE_COUNT) are the types a device class has
// peaks for and a plan's weight_dtype / kv_dtype may name.
#define RG_DTYPE_COMPUTE_COUNT (RG_FP4 + 1)

// "f32", "bf16", ...; "?" outside the enum.
const char *rg_dtype_name(rg_dtype_t t);
// Bytes per element, block formats included (fp4 4.25/8, q8_0 34/32); 0
// outside the enum.
double rg_dtype_bytes(rg_dtype_t t);
// Elements per block (32 for q8_0 and fp4, 256 for the k-quants, else 1) and bytes per block; 0
// outside the enum.
int64_t rg_dtype_block_elems(rg_dtype_t t);
int64_t rg_dtype_block_bytes(rg_dtype_t t);
// The compute type t runs at (itself for the first six).
rg_dtype_t rg_dtype_compute(rg_dtype_t t);
// 1 when ridge's codecs widen t to f32 (f32, bf16, f16, q8_0, q4_K, q6_K):
// the types an engine can hold weights in.
int rg_dtype_has_codec(rg_dtype_t t);
// 1 when they also narrow f32 to t (f32, bf16, f16, q8_0): the types ridge
// writes, and an engine can hold KV in. The k-quants are read-only.
int rg_dtype_can_narrow(rg_dtype_t t);
// 1 for the floating-point types a checkpoint stores weights in (f32, bf16,
// f16, fp8 e4m3/e5m2, q8_0, fp4), 0 for integers, bool and f64.
int rg_dtype_is_weight(rg_dtype_t t);

// Parses a type for planning: the six compute names and the Hugging Face
// and PyTorch spellings (bfloat16, float16, float32, fp16, half,
// float8_e4m3fn, float8_e5m2, e4m3, mxfp4), case-insensitive. Returns 0 on
// success, -1 otherwise (*out untouched).
int rg_dtype_parse(const char *s, rg_dtype_t *out);
// Parses any name in the table (and the spellings above), for storage
// types: "q8_0", "i32", "F8_E5M2". Returns 0 on success.
int rg_dtype_parse_any(const char *s, rg_dtype_t *out);

// File formats. The safetensors name ("BF16") or NULL; the type of a
// safetensors name (exact, as the format spells it). ggml's type id or -1;
// the type of a ggml id. Both return 0 on success, -1 when ridge has no
// such type.
const char *rg_dtype_safetensors_name(rg_dtype_t t);
int rg_dtype_from_safetensors(const char *name, rg_dtype_t *out);
int64_t rg_dtype_ggml_id(rg_dtype_t t);
int rg_dtype_from_ggml(int64_t id, rg_dtype_t *out);

// Bytes one row of `cols` elements takes. Fails for an unknown type, cols
// < 1, or cols that is not a whole number of blocks ("q8_0 rows must be a
// multiple of 32 wide").
RG_MUST_USE rg_status_t rg_dtype_row_bytes(rg_dtype_t t, int64_t cols, size_t *out_bytes);
// Bytes of n elements; 0 and *ok = 0 on overflow, n < 0, or n not a whole
// number of blocks; *ok = 1 otherwise.
uint64_t rg_dtype_nbytes(rg_dtype_t t, int64_t n, int *ok);

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

// ---- Rows: the reference codecs (plain loops) ----------------------------

// n elements of t (n a whole number of blocks) to f32 for the types
// rg_dtype_has_codec() accepts, and back for those rg_dtype_can_narrow()
// accepts. The q8_0 quantizer refuses values it cannot hold (NaN, inf, or a
// block whose scale overflows f16) naming the index; other narrowing never
// fails. ops/convert.h has vectorised versions that give the same bits.
RG_MUST_USE rg_status_t rg_dtype_to_f32(rg_dtype_t t, const void *src, float *dst, int64_t n);
RG_MUST_USE rg_status_t rg_dtype_from_f32(rg_dtype_t t, const float *src, void *dst, int64_t n);
// The q8_0 quantizer on its own (same rules).
RG_MUST_USE rg_status_t rg_q8_0_quantize_row(const float *src, void *dst, int64_t n);
// The k-quant references on their own: n / 256 super-blocks to f32.
RG_MUST_USE rg_status_t rg_q4_K_dequantize_row_ref(const void *src, float *dst, int64_t n);
RG_MUST_USE rg_status_t rg_q6_K_dequantize_row_ref(const void *src, float *dst, int64_t n);
// The 6-bit scale and min of sub-block j (0..7) of a q4_K block's 12 packed
// scale bytes (ggml's get_scale_min_k4), shared by the vector kernels.
static inline void rg_q4_K_scale_min(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

#endif  // RG_BASE_DTYPE_H
