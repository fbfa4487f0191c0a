// ops/convert.h — vectorised row conversions between the element types of
// base/dtype.h and f32, and the CPU instruction-set levels the kernels pick
// from at run time.
//
// ridge keeps weights in the type the checkpoint ships (safetensors f32, bf16,
// f16; GGUF q8_0, q4_K, q6_K) and widens them inside the kernels, so a weight is read from
// memory once in its compact form. The element-type table, the scalar codecs
// and the one q8_0 quantizer live in base/dtype.h; the row functions here are
// their vectorised versions and give the same bits (tests compare them over
// every 16-bit pattern, every q8_0 scale, and llama.cpp's k-quant vectors).
//
// Ownership: every function reads and writes caller memory and keeps nothing.
#ifndef RG_OPS_CONVERT_H
#define RG_OPS_CONVERT_H

#include <stddef.h>
#include <stdint.h>
#include "base/dtype.h"
#include "base/status.h"

// Instruction-set levels the CPU kernels are built for, lowest first after
// AUTO. Each level includes the ones below it:
//   avx2         AVX2 + FMA + F16C
//   avx512       AVX-512 F, BW, VL, DQ
//   avx512-bf16  avx512 + AVX512_BF16 (vdpbf16ps)
//   amx          avx512-bf16 + AMX-TILE, AMX-BF16 and AMX-INT8 (Intel Sapphire
//                Rapids and later), and Linux's permission to use the tile
//                state: detection asks for it once per process with
//                arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA), and
//                when the kernel refuses, the level stops at avx512-bf16 and
//                rg_cpu_isa_resolve(RG_CPU_ISA_AMX) says why.
// Levels from avx512-bf16 up round activations to bf16 in the matmul for
// speed (ops/matmul.h); avx512 and below keep them in f32.
// AUTO means "the highest this CPU has"; it is the zero value so a zeroed
// options struct asks for the default.
#define RG_CPU_ISA_MAP(X)                  \
  X(RG_CPU_ISA_AUTO, "auto")               \
  X(RG_CPU_ISA_SCALAR, "scalar")           \
  X(RG_CPU_ISA_AVX2, "avx2")               \
  X(RG_CPU_ISA_AVX512, "avx512")           \
  X(RG_CPU_ISA_AVX512_BF16, "avx512-bf16") \
  X(RG_CPU_ISA_AMX, "amx")

typedef enum {
#define RG_X_(i, n) i,
  RG_CPU_ISA_MAP(RG_X_)
#undef RG_X_
  RG_CPU_ISA_COUNT
} rg_cpu_isa_t;

const char *rg_cpu_isa_name(rg_cpu_isa_t isa);
// A level by its name ("auto", "scalar", ..., "amx"); RG_INVALID_ARGUMENT
// naming `flag` and listing every name otherwise.
RG_MUST_USE rg_status_t rg_cpu_isa_parse(const char *flag, const char *s, rg_cpu_isa_t *out);
// The highest level this CPU and OS support (checked once, then cached).
rg_cpu_isa_t rg_cpu_isa_best(void);
// Resolves AUTO to the best level; fails with RG_UNAVAILABLE, naming the
// missing feature, when `want` is above what this CPU has.
RG_MUST_USE rg_status_t rg_cpu_isa_resolve(rg_cpu_isa_t want, rg_cpu_isa_t *out);
// Why the next level above the best is out of reach ("avx512bf16", "AMX
// (cpuid)", "permission for AMX tile state: ..."); NULL when the best is the
// top level. A static string, for reports.
const char *rg_cpu_isa_missing(rg_cpu_isa_t level);

// ---- Rows: vectorised with the best instruction set this CPU has. -------

void rg_bf16_to_f32_row(const uint16_t *src, float *dst, int64_t n);
void rg_f32_to_bf16_row(const float *src, uint16_t *dst, int64_t n);
void rg_f16_to_f32_row(const uint16_t *src, float *dst, int64_t n);
void rg_f32_to_f16_row(const float *src, uint16_t *dst, int64_t n);
// q8_0 needs n % 32 == 0. Quantizing is base/dtype.h's rg_q8_0_quantize_row.
RG_MUST_USE rg_status_t rg_q8_0_dequantize_row(const void *src, float *dst, int64_t n);
// The k-quants need n % 256 == 0; they are dequantize-only (read from GGUF).
RG_MUST_USE rg_status_t rg_q4_K_dequantize_row(const void *src, float *dst, int64_t n);
RG_MUST_USE rg_status_t rg_q6_K_dequantize_row(const void *src, float *dst, int64_t n);

// Any type to or from f32: n weights of one row, n a whole number of blocks
// (from f32 only for the types base/dtype.h's rg_dtype_can_narrow accepts).
// rg_row_to_f32_isa() runs one chosen level (tests compare every level; the
// matmul uses it to honour a forced level); the others use the best level.
RG_MUST_USE rg_status_t rg_row_to_f32(rg_dtype_t t, const void *src, float *dst, int64_t n);
RG_MUST_USE rg_status_t rg_row_from_f32(rg_dtype_t t, const float *src, void *dst, int64_t n);
RG_MUST_USE rg_status_t rg_row_to_f32_isa(rg_cpu_isa_t isa, rg_dtype_t t, const void *src,
                                          float *dst, int64_t n);
RG_MUST_USE rg_status_t rg_row_from_f32_isa(rg_cpu_isa_t isa, rg_dtype_t t, const float *src,
                                            void *dst, int64_t n);

#endif  // RG_OPS_CONVERT_H
