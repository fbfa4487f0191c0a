// The element-type table and its reference codecs (see base/dtype.h).
#include "base/dtype.h"

#include <math.h>

typedef struct {
  const char *name;
  int64_t block_elems, block_bytes, ggml;
  const char *safetensors;
  rg_dtype_t compute;
  int codec;
} dtype_info_t;

static const dtype_info_t info[] = {
#define RG_X_(e, n, be, bb, gg, st, cp, cv) {n, be, bb, gg, st, cp, cv},
    RG_DTYPE_MAP(RG_X_)
#undef RG_X_
};
_Static_assert(sizeof info / sizeof info[0] == RG_DTYPE_COUNT,
               "dtype table out of step with RG_DTYPE_MAP");
_Static_assert(RG_DTYPE_COMPUTE_COUNT == 6, "the planner's compute types come first");

static int ok_type(rg_dtype_t t) {
  return (unsigned)t < RG_DTYPE_COUNT;
}

const char *rg_dtype_name(rg_dtype_t t) {
  return ok_type(t) ? info[t].name : "?";
}
double rg_dtype_bytes(rg_dtype_t t) {
  return ok_type(t) ? (double)info[t].block_bytes / (double)info[t].block_elems : 0.0;
}
int64_t rg_dtype_block_elems(rg_dtype_t t) {
  return ok_type(t) ? info[t].block_elems : 0;
}
int64_t rg_dtype_block_bytes(rg_dtype_t t) {
  return ok_type(t) ? info[t].block_bytes : 0;
}
rg_dtype_t rg_dtype_compute(rg_dtype_t t) {
  return ok_type(t) ? info[t].compute : RG_F32;
}
int rg_dtype_has_codec(rg_dtype_t t) {
  return ok_type(t) && info[t].codec != 0;
}
int rg_dtype_can_narrow(rg_dtype_t t) {
  return ok_type(t) && info[t].codec == 1;
}
int rg_dtype_is_weight(rg_dtype_t t) {
  switch (t) {
    case RG_F32:
    case RG_BF16:
    case RG_F16:
    case RG_FP8:
    case RG_FP8_E5M2:
    case RG_Q8_0:
    case RG_Q4_K:
    case RG_Q6_K:
    case RG_FP4:
      return 1;
    default:
      return 0;
  }
}

// Case-insensitive equality; strcasecmp is POSIX, not C17.
static int same_text(const char *a, const char *b) {
  for (; *a && *b; a++, b++) {
    char ca = (*a >= 'A' && *a <= 'Z') ? (char)(*a - 'A' + 'a') : *a;
    char cb = (*b >= 'A' && *b <= 'Z') ? (char)(*b - 'A' + 'a') : *b;
    if (ca != cb) return 0;
  }
  return *a == *b;
}

// Hugging Face and PyTorch spellings. Both fp8 formats are one byte, which is
// all the cost model needs, so for planning e5m2 reads as fp8.
static const struct {
  const char *name;
  rg_dtype_t plan, any;
} aliases[] = {
    {"float32", RG_F32, RG_F32},       {"fp32", RG_F32, RG_F32},
    {"bfloat16", RG_BF16, RG_BF16},    {"float16", RG_F16, RG_F16},
    {"fp16", RG_F16, RG_F16},          {"half", RG_F16, RG_F16},
    {"float8_e4m3fn", RG_FP8, RG_FP8}, {"float8_e4m3", RG_FP8, RG_FP8},
    {"e4m3", RG_FP8, RG_FP8},          {"float8_e5m2", RG_FP8, RG_FP8_E5M2},
    {"mxfp4", RG_FP4, RG_FP4},
};

static int parse(const char *s, rg_dtype_t *out, int any) {
  if (!s || !out) return -1;
  int n = any ? RG_DTYPE_COUNT : RG_DTYPE_COMPUTE_COUNT;
  for (int i = 0; i < n; i++)
    if (same_text(s, info[i].name) ||
        (any && info[i].safetensors && same_text(s, info[i].safetensors))) {
      *out = (rg_dtype_t)i;
      return 0;
    }
  for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
    if (same_text(s, aliases[i].name)) {
      *out = any ? aliases[i].any : aliases[i].plan;
      return 0;
    }
  return -1;
}

int rg_dtype_parse(const char *s, rg_dtype_t *out) {
  return parse(s, out, 0);
}
int rg_dtype_parse_any(const char *s, rg_dtype_t *out) {
  return parse(s, out, 1);
}

const char *rg_dtype_safetensors_name(rg_dtype_t t) {
  return ok_type(t) ? info[t].safetensors : NULL;
}
int rg_dtype_from_safetensors(const char *name, rg_dtype_t *out) {
  for (int i = 0; name && i < RG_DTYPE_COUNT; i++)
    if (info[i].safetensors && !strcmp(name, info[i].safetensors)) {
      *out = (rg_dtype_t)i;
      return 0;
    }
  return -1;
}
int64_t rg_dtype_ggml_id(rg_dtype_t t) {
  return ok_type(t) ? info[t].ggml : -1;
}
int rg_dtype_from_ggml(int64_t id, rg_dtype_t *out) {
  for (int i = 0; id >= 0 && i < RG_DTYPE_COUNT; i++)
    if (info[i].ggml == id) {
      *out = (rg_dtype_t)i;
      return 0;
    }
  return -1;
}

rg_status_t rg_dtype_row_bytes(rg_dtype_t t, int64_t cols, size_t *out_bytes) {
  *out_bytes = 0;
  if (!ok_type(t)) return rg_status_make(RG_INVALID_ARGUMENT, "unknown element type %d", (int)t);
  if (cols < 1)
    return rg_status_make(RG_INVALID_ARGUMENT, "a %s row needs at least one column, not %lld",
                          info[t].name, (long long)cols);
  int64_t be = info[t].block_elems;
  if (cols % be)
    return rg_status_make(
        RG_INVALID_ARGUMENT,
        "%s rows must be a multiple of %lld wide (whole blocks); this one has %lld columns",
        info[t].name, (long long)be, (long long)cols);
  if (cols / be > (int64_t)(SIZE_MAX / 2) / info[t].block_bytes)
    return rg_status_make(RG_INVALID_ARGUMENT, "a %s row of %lld columns is too large",
                          info[t].name, (long long)cols);
  *out_bytes = (size_t)(cols / be * info[t].block_bytes);
  return NULL;
}

uint64_t rg_dtype_nbytes(rg_dtype_t t, int64_t n, int *ok) {
  *ok = 0;
  if (!ok_type(t) || n < 0 || n % info[t].block_elems) return 0;
  uint64_t blocks = (uint64_t)(n / info[t].block_elems), bb = (uint64_t)info[t].block_bytes;
  if (blocks > UINT64_MAX / bb) return 0;
  *ok = 1;
  return blocks * bb;
}

// ---- Reference codecs -------------------------------------------------------

static rg_status_t check_row(rg_dtype_t t, int64_t n) {
  if (!rg_dtype_has_codec(t))
    return rg_status_make(
        RG_UNIMPLEMENTED,
        "ridge has no %s <-> f32 conversion (it converts f32, bf16, f16, q8_0; reads q4_K, q6_K)",
        rg_dtype_name(t));
  if (n < 0 || n % info[t].block_elems)
    return rg_status_make(
        RG_INVALID_ARGUMENT,
        "%s rows must be a multiple of %lld wide (whole blocks); this one has %lld values",
        info[t].name, (long long)info[t].block_elems, (long long)n);
  return NULL;
}

rg_status_t rg_q8_0_quantize_row(const float *src, void *dst, int64_t n) {
  RG_RETURN_IF_ERROR(check_row(RG_Q8_0, n));
  uint8_t *out = dst;
  for (int64_t b = 0; b < n / 32; b++, src += 32, out += 34) {
    float amax = 0.0f;
    for (int j = 0; j < 32; j++) {
      if (!isfinite(src[j]))
        return rg_status_make(RG_INVALID_ARGUMENT, "q8_0 cannot hold value %g at index %lld",
                              (double)src[j], (long long)(b * 32 + j));
      amax = fmaxf(amax, fabsf(src[j]));
    }
    float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    uint16_t h = rg_f32_to_f16(d);
    if ((h & 0x7c00u) == 0x7c00u)
      return rg_status_make(
          RG_INVALID_ARGUMENT,
          "q8_0 block %lld has magnitude %g; its scale overflows f16 (limit 127 * 65504)",
          (long long)b, (double)amax);
    memcpy(out, &h, 2);
    for (int j = 0; j < 32; j++) {
      float q = roundf(src[j] * id);  // half away from zero, as ggml's reference
      q = fminf(127.0f, fmaxf(-127.0f, q));
      out[2 + j] = (uint8_t)(int8_t)q;
    }
  }
  return NULL;
}

// ggml's reference dequantization, operation for operation (see base/dtype.h
// for why the order matters). Blocks are read with memcpy: GGUF places them
// at any 2-byte boundary.
rg_status_t rg_q4_K_dequantize_row_ref(const void *src, float *dst, int64_t n) {
  RG_RETURN_IF_ERROR(check_row(RG_Q4_K, n));
  const uint8_t *b = src;
  for (int64_t i = 0; i < n / 256; i++, b += 144) {
    uint16_t hd, hm;
    memcpy(&hd, b, 2);
    memcpy(&hm, b + 2, 2);
    const float d = rg_f16_to_f32(hd), dmin = rg_f16_to_f32(hm);
    const uint8_t *scales = b + 4, *q = b + 16;
    for (int j = 0; j < 8; j += 2, q += 32) {
      uint8_t sc, m;
      rg_q4_K_scale_min(j, scales, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      rg_q4_K_scale_min(j + 1, scales, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      for (int l = 0; l < 32; l++) {
        float p = d1 * (float)(q[l] & 0xF);
        *dst++ = p - m1;
      }
      for (int l = 0; l < 32; l++) {
        float p = d2 * (float)(q[l] >> 4);
        *dst++ = p - m2;
      }
    }
  }
  return NULL;
}

rg_status_t rg_q6_K_dequantize_row_ref(const void *src, float *dst, int64_t n) {
  RG_RETURN_IF_ERROR(check_row(RG_Q6_K, n));
  const uint8_t *b = src;
  for (int64_t i = 0; i < n / 256; i++, b += 210) {
    uint16_t hd;
    memcpy(&hd, b + 208, 2);
    const float d = rg_f16_to_f32(hd);
    const uint8_t *ql = b, *qh = b + 128;
    const int8_t *sc = (const int8_t *)(b + 192);
    for (int half = 0; half < 2; half++, dst += 128, ql += 64, qh += 32, sc += 8)
      for (int l = 0; l < 32; l++) {
        int is = l / 16;
        int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        float s1 = d * (float)sc[is], s2 = d * (float)sc[is + 2], s3 = d * (float)sc[is + 4],
              s4 = d * (float)sc[is + 6];
        dst[l] = s1 * (float)q1;
        dst[l + 32] = s2 * (float)q2;
        dst[l + 64] = s3 * (float)q3;
        dst[l + 96] = s4 * (float)q4;
      }
  }
  return NULL;
}

rg_status_t rg_dtype_to_f32(rg_dtype_t t, const void *src, float *dst, int64_t n) {
  RG_RETURN_IF_ERROR(check_row(t, n));
  const uint8_t *p = src;
  switch (t) {
    case RG_F32:
      if (n) memmove(dst, src, (size_t)n * sizeof(float));
      return NULL;
    case RG_BF16:
    case RG_F16:
      for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        dst[i] = t == RG_F16 ? rg_f16_to_f32(h) : rg_bf16_to_f32(h);
      }
      return NULL;
    case RG_Q8_0:
      for (int64_t b = 0; b < n / 32; b++, p += 34) {
        uint16_t h;
        memcpy(&h, p, 2);
        float d = rg_f16_to_f32(h);
        for (int j = 0; j < 32; j++) dst[b * 32 + j] = d * (float)(int8_t)p[2 + j];
      }
      return NULL;
    case RG_Q4_K:
      return rg_q4_K_dequantize_row_ref(src, dst, n);
    case RG_Q6_K:
      return rg_q6_K_dequantize_row_ref(src, dst, n);
    default:
      return rg_status_make(RG_INTERNAL, "no codec for %s", rg_dtype_name(t));
  }
}

rg_status_t rg_dtype_from_f32(rg_dtype_t t, const float *src, void *dst, int64_t n) {
  RG_RETURN_IF_ERROR(check_row(t, n));
  if (!rg_dtype_can_narrow(t))
    return rg_status_make(RG_UNIMPLEMENTED,
                          "ridge reads %s weights but does not quantize to %s (llama.cpp's "
                          "quantizer writes them)",
                          rg_dtype_name(t), rg_dtype_name(t));
  uint8_t *p = dst;
  switch (t) {
    case RG_F32:
      if (n) memmove(dst, src, (size_t)n * sizeof(float));
      return NULL;
    case RG_BF16:
    case RG_F16:
      for (int64_t i = 0; i < n; i++) {
        uint16_t h = t == RG_F16 ? rg_f32_to_f16(src[i]) : rg_f32_to_bf16(src[i]);
        memcpy(p + 2 * i, &h, 2);
      }
      return NULL;
    case RG_Q8_0:
      return rg_q8_0_quantize_row(src, dst, n);
    default:
      return rg_status_make(RG_INTERNAL, "no codec for %s", rg_dtype_name(t));
  }
}
