// ops/opencl/common.cl — what every ridge OpenCL program starts with: the
// element-type codecs of base/dtype.h (bit for bit), operand addressing, and
// the error word through which kernels report bad metadata they clamped.
//
// The host prepends this file to each program's source and defines, with -D,
// the element-type numbers (RG_T_F32 ...) and error codes (RG_E_...) from its
// own tables, so a kernel can never disagree with them.
//
// Contraction of a*b+c into fma is off: the conversions below and the q8_0
// quantizer must give the same bits as the CPU. Ops that want fused
// multiply-adds (matmul, attention, the norms) ask for them with RG_MAD:
// fma() where the device has it in hardware (the host defines RG_HAS_FMA
// from CL_FP_FMA), else mad(). Not mad() everywhere: PoCL turns mad() into
// a multiply and an add, half the rate of one FMA (its FMA-peak kernel read
// 40-85 GFLOP/s with mad(), below the 146 its GEMM reached).
#pragma OPENCL FP_CONTRACT OFF
#ifdef RG_HAS_FMA
#define RG_MAD(a, b, c) fma(a, b, c)
#else
#define RG_MAD(a, b, c) mad(a, b, c)
#endif
#if defined(cl_khr_fp64)
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#define RG_FP64 1
#endif

// Operands are (buffer, byte offset) pairs: a kernel argument "P(x)" is a
// buffer and its offset, and AT(type, x) the typed pointer to the operand.
// The host checks each offset is a multiple of the element's alignment.
#define P(x) __global uchar *x##_b, ulong x##_o
#define PC(x) __global const uchar *x##_b, ulong x##_o
#define AT(type, x) ((__global type *)(x##_b + x##_o))
#define ATC(type, x) ((__global const type *)(x##_b + x##_o))

// ----- Element types ------------------------------------------------------

inline float rg_bf16_to_f32(ushort h) {
  return as_float((uint)h << 16);
}

inline ushort rg_f32_to_bf16(float f) {
  uint b = as_uint(f);
  if ((b & 0x7fffffffu) > 0x7f800000u) return (ushort)((b >> 16) | 0x40u);  // quiet NaN
  b += 0x7fffu + ((b >> 16) & 1u);  // round to nearest even
  return (ushort)(b >> 16);
}

inline float rg_f16_to_f32(ushort h) {
  uint sign = (uint)(h & 0x8000u) << 16;
  uint e = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (e == 0x1fu) return as_float(sign | 0x7f800000u | (mant ? 0x400000u | (mant << 13) : 0u));
  if (e == 0u) return as_float(as_uint((float)mant * 0x1p-24f) | sign);  // exact
  return as_float(sign | ((e + 112u) << 23) | (mant << 13));
}

inline ushort rg_f32_to_f16(float f) {
  uint b = as_uint(f);
  ushort sign = (ushort)((b >> 16) & 0x8000u);
  uint a = b & 0x7fffffffu;
  if (a > 0x7f800000u) return (ushort)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  // NaN
  if (a >= 0x477ff000u) return (ushort)(sign | 0x7c00u);  // rounds to inf
  if (a < 0x38800000u) {
    // Subnormal: |f| * 2^24 rounded to nearest even, which adding 2^23
    // does in f32 (the product is exact: a power-of-two scaling).
    float v = as_float(a) * 0x1p24f + 0x1p23f;
    return (ushort)(sign | (as_uint(v) - 0x4b000000u));
  }
  a -= 112u << 23;
  a += 0xfffu + ((a >> 13) & 1u);
  return (ushort)(sign | (a >> 13));
}

// Element e of a row of type t (f32, bf16, f16, or q8_0: blocks of
// {f16 d; int8 q[32]}), widened exactly.
inline float rg_load(__global const uchar *row, int t, long e) {
  if (t == RG_T_F32) return ((__global const float *)row)[e];
  if (t == RG_T_BF16) return rg_bf16_to_f32(((__global const ushort *)row)[e]);
  if (t == RG_T_F16) return rg_f16_to_f32(((__global const ushort *)row)[e]);
  __global const uchar *blk = row + (e / 32) * 34;
  return rg_f16_to_f32(*(__global const ushort *)blk) * (float)(char)blk[2 + e % 32];
}

// Bytes one row of n elements of type t takes.
inline ulong rg_row_bytes(int t, long n) {
  return t == RG_T_F32 ? (ulong)n * 4 : t == RG_T_Q8_0 ? (ulong)(n / 32) * 34 : (ulong)n * 2;
}

// ----- Bad metadata -------------------------------------------------------

// err: (4) ints per queue. The first kernel to find bad input stores its code
// and three figures; the host reads them at rg_queue_wait and reports them.
// Kernels clamp what they were given so that nothing is read or written
// outside an operand either way.
inline void rg_flag(__global int *err, int code, int a, int b, int c) {
  if (atomic_cmpxchg(err, 0, code) == 0) {
    err[1] = a;
    err[2] = b;
    err[3] = c;
  }
}

inline int rg_clamp_i(int v, int lo, int hi) {
  return v < lo ? lo : v > hi ? hi : v;
}

// The type names kernels are generated for (matmul_gemv1_bf16 ...).
#define RG_T_f32 RG_T_F32
#define RG_T_bf16 RG_T_BF16
#define RG_T_f16 RG_T_F16
#define RG_T_q8_0 RG_T_Q8_0
