// Reference matmul: plain loops, double accumulation, scalar conversions from
// base/dtype.h only, so it shares no code with the vector kernels it checks.
#include <stdlib.h>

#include "ops/matmul.h"

rg_status_t rg_matmul_check(const float *x, int64_t m, const rg_wmat_t *w, const float *bias,
                            const float *y) {
  (void)bias;  // optional
  if (!w) return rg_status_make(RG_INVALID_ARGUMENT, "matmul: no weight matrix");
  if ((unsigned)w->type >= RG_DTYPE_COUNT)
    return rg_status_make(RG_INVALID_ARGUMENT, "matmul: unknown weight type %d", (int)w->type);
  if (!rg_dtype_has_codec(w->type))
    return rg_status_make(RG_UNIMPLEMENTED,
                          "matmul: no CPU kernel for %s weights (f32, bf16, f16, q8_0, q4_K, q6_K)",
                          rg_dtype_name(w->type));
  if (m < 0) return rg_status_make(RG_INVALID_ARGUMENT, "matmul: negative m (%lld)", (long long)m);
  if (w->rows < 1 || w->cols < 1)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "matmul: %s weight has shape (%lld, %lld); both must be >= 1",
                          rg_dtype_name(w->type), (long long)w->rows, (long long)w->cols);
  // OpenBLAS here takes 32-bit sizes; no transformer layer comes near.
  if (m > INT32_MAX || w->rows > INT32_MAX || w->cols > INT32_MAX)
    return rg_status_make(RG_INVALID_ARGUMENT, "matmul: shape m=%lld n=%lld k=%lld exceeds 2^31-1",
                          (long long)m, (long long)w->rows, (long long)w->cols);
  if ((unsigned)w->layout > RG_WLAYOUT_F16_PANELS)
    return rg_status_make(RG_INVALID_ARGUMENT, "matmul: unknown weight layout %d", (int)w->layout);
  if ((w->layout == RG_WLAYOUT_BF16_PANELS && w->type != RG_BF16) ||
      (w->layout == RG_WLAYOUT_F16_PANELS && w->type != RG_F16))
    return rg_status_make(RG_INVALID_ARGUMENT, "matmul: %s weights have no %s packed-panel layout",
                          rg_dtype_name(w->type),
                          w->layout == RG_WLAYOUT_F16_PANELS ? "f16" : "bf16");
  size_t row_bytes;
  rg_status_t s = rg_dtype_row_bytes(w->type, w->cols, &row_bytes);
  if (s)
    return rg_status_wrap(s, "matmul: weight (%lld, %lld)", (long long)w->rows, (long long)w->cols);
  if (m > 0 && (!x || !y || !w->data))
    return rg_status_make(RG_INVALID_ARGUMENT, "matmul: %s is NULL",
                          !x   ? "x"
                          : !y ? "y"
                               : "weight data");
  return NULL;
}

// One weight of row `row` (bytes of one row), widened exactly.
static float weight_at(rg_dtype_t t, const unsigned char *row, int64_t p) {
  float f;
  uint16_t h;
  switch (t) {
    case RG_F32:
      memcpy(&f, row + 4 * p, 4);
      return f;
    case RG_BF16:
      memcpy(&h, row + 2 * p, 2);
      return rg_bf16_to_f32(h);
    case RG_F16:
      memcpy(&h, row + 2 * p, 2);
      return rg_f16_to_f32(h);
    case RG_Q8_0: {
      const unsigned char *blk = row + 34 * (p / 32);
      memcpy(&h, blk, 2);
      return rg_f16_to_f32(h) * (float)(int8_t)blk[2 + p % 32];
    }
    default:
      return 0.0f;
  }
}

rg_status_t rg_matmul_ref(const float *x, int64_t m, const rg_wmat_t *w, const float *bias,
                          float *y) {
  RG_RETURN_IF_ERROR(rg_matmul_check(x, m, w, bias, y));
  if (m == 0) return NULL;
  int64_t n = w->rows, k = w->cols;
  size_t row_bytes;
  RG_RETURN_IF_ERROR(rg_dtype_row_bytes(w->type, k, &row_bytes));
  float *wr = malloc((size_t)k * sizeof(float));
  if (!wr)
    return rg_status_make(RG_OUT_OF_MEMORY, "matmul_ref: no memory for a row of %lld",
                          (long long)k);
  // Packed panels (ops/matmul.h): row j's pair q is the word at
  // ((j / 32) * (k32 / 2) + q) * 32 + j % 32, its even value in the low half.
  const int64_t k32 = (k + 31) / 32 * 32;
  for (int64_t j = 0; j < n; j++) {
    const unsigned char *row = (const unsigned char *)w->data + (size_t)j * row_bytes;
    if (w->layout != RG_WLAYOUT_ROWS) {
      const uint32_t *panel = (const uint32_t *)w->data + (size_t)(j / 32) * (size_t)(k32 / 2) * 32;
      for (int64_t p = 0; p < k; p++) {
        uint32_t word = panel[(size_t)(p / 2) * 32 + (size_t)(j % 32)];
        uint16_t h = (uint16_t)(p % 2 ? word >> 16 : word & 0xffff);
        wr[p] = w->layout == RG_WLAYOUT_F16_PANELS ? rg_f16_to_f32(h) : rg_bf16_to_f32(h);
      }
    } else if (rg_dtype_block_elems(w->type) == 256) {
      // The k-quants' scales are shared by a whole super-block: decode the
      // row with base/dtype.c's reference, itself checked against llama.cpp.
      rg_status_t s = rg_dtype_to_f32(w->type, row, wr, k);
      if (s) {
        free(wr);
        return s;
      }
    } else {
      for (int64_t p = 0; p < k; p++) wr[p] = weight_at(w->type, row, p);
    }
    for (int64_t i = 0; i < m; i++) {
      const float *xi = x + i * k;
      double acc = bias ? (double)bias[j] : 0.0;
      for (int64_t p = 0; p < k; p++) acc += (double)xi[p] * (double)wr[p];
      y[i * n + j] = (float)acc;
    }
  }
  free(wr);
  return NULL;
}
