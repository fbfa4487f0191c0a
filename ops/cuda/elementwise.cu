// ops/cuda/elementwise.cu — the row and elementwise ops on a GPU: rmsnorm,
// rope, softmax, swiglu, add, embed, convert, and greedy sampling (argmax).
//
// They follow ops/ref's arithmetic where the conformance tolerances need it
// (rope's cosine and sine in double, as the reference does; conversions by
// the same integer code as base/dtype.h, so their bytes match exactly) and
// use f32 elsewhere: a row's sum in f32 differs from the reference's double
// sum by ~1e-7 relative, far inside the suite's tolerances.
#include "ops/cuda/common.cuh"

#define GRID_STRIDE(i, n)                                                   \
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
       i += (int64_t)gridDim.x * blockDim.x)

extern "C" __global__ void rg_rmsnorm(const rg_cuk_rmsnorm_t a) {
  __shared__ float red[32];
  const float *x = RG_P(const float, a.x) + (int64_t)blockIdx.x * a.dim;
  const float *wt = RG_P(const float, a.weight);
  float *y = RG_P(float, a.y) + (int64_t)blockIdx.x * a.dim;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < a.dim; i += blockDim.x) ss += x[i] * x[i];
  ss = rg_block_sum(ss, red);
  // The reference rounds 1/sqrt(mean + eps) to f32 once; so does this.
  float scale = (float)(1.0 / sqrt((double)ss / (double)a.dim + (double)a.eps));
  // y may be x: every thread has read its elements of x above, and each
  // writes only the elements it read.
  for (int64_t i = threadIdx.x; i < a.dim; i += blockDim.x) y[i] = x[i] * scale * wt[i];
}

extern "C" __global__ void rg_rope(const rg_cuk_rope_t a) {
  const int64_t t = blockIdx.x, h = blockIdx.y, half = a.head_dim / 2;
  float *v = RG_P(float, a.x) + (t * a.n_heads + h) * a.head_dim;
  const float *inv = RG_P(const float, a.inv_freq);
  const int32_t p = RG_P(const int32_t, a.pos)[t];
  for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
    float angle = __fmul_rn((float)p, inv[i]);  // f32, as HF
    double s, c;
    sincos((double)angle, &s, &c);
    float cf = (float)c, sf = (float)s, x0 = v[i], x1 = v[i + half];
    v[i] = x0 * cf - x1 * sf;
    v[i + half] = x1 * cf + x0 * sf;
  }
}

extern "C" __global__ void rg_softmax(const rg_cuk_softmax_t a) {
  __shared__ float red[32];
  float *v = RG_P(float, a.x) + (int64_t)blockIdx.x * a.n;
  float mx = -INFINITY;
  for (int64_t i = threadIdx.x; i < a.n; i += blockDim.x) mx = fmaxf(mx, v[i]);
  mx = rg_block_max(mx, red);
  if (mx == -INFINITY) {  // fully masked: no mass anywhere, as the reference
    for (int64_t i = threadIdx.x; i < a.n; i += blockDim.x) v[i] = 0.0f;
    return;
  }
  // fmaxf drops NaN; the reference's row becomes NaN. Keep that: a NaN in
  // the row makes the sum NaN below.
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < a.n; i += blockDim.x) sum += expf(v[i] - mx);
  sum = rg_block_sum(sum, red);
  for (int64_t i = threadIdx.x; i < a.n; i += blockDim.x) v[i] = expf(v[i] - mx) / sum;
}

extern "C" __global__ void rg_swiglu(const rg_cuk_binary_t a) {
  const float *g = RG_P(const float, a.a), *u = RG_P(const float, a.b);
  float *out = RG_P(float, a.out);
  GRID_STRIDE(i, a.n) {
    float gv = g[i];
    out[i] = gv / (1.0f + expf(-gv)) * u[i];
  }
}

extern "C" __global__ void rg_add(const rg_cuk_binary_t a) {
  const float *x = RG_P(const float, a.a), *y = RG_P(const float, a.b);
  float *out = RG_P(float, a.out);
  GRID_STRIDE(i, a.n) out[i] = x[i] + y[i];
}

extern "C" __global__ void rg_embed(const rg_cuk_embed_t a) {
  const int64_t i = blockIdx.x;
  const int32_t id = RG_P(const int32_t, a.ids)[i];
  float *out = RG_P(float, a.out) + i * a.dim;
  const bool ok = id >= 0 && id < a.vocab;
  const unsigned char *row = RG_P(const unsigned char, a.table) + (ok ? id : 0) * a.row_bytes;
  for (int64_t d = threadIdx.x; d < a.dim; d += blockDim.x)
    out[d] = ok ? rg_load(row, a.type, d) : 0.0f;
}

// One warp per 32 elements: a q8_0 block when either side is q8_0.
extern "C" __global__ void rg_convert(const rg_cuk_convert_t a) {
  const int lane = threadIdx.x % RG_WARP;
  const int64_t blk = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / RG_WARP;
  const int64_t i = blk * 32 + lane;
  if (blk * 32 >= a.n) return;  // whole warps leave together
  const bool in = i < a.n;
  float v = in ? rg_load(RG_P(const unsigned char, a.src), a.from, i) : 0.0f;
  unsigned char *dst = RG_P(unsigned char, a.dst);
  if (a.to == RG_CUK_F32) {
    if (in) ((float *)dst)[i] = v;
  } else if (a.to == RG_CUK_BF16) {
    if (in) ((uint16_t *)dst)[i] = rg_f32_bf16(v);
  } else if (a.to == RG_CUK_F16) {
    if (in) ((uint16_t *)dst)[i] = rg_f32_f16(v);
  } else {
    // ggml's reference quantizer, as base/dtype.c: d = max|x| / 127 stored
    // as f16, q = round-half-away(x / d) with the unrounded d.
    int bad = !isfinite(v);
    float amax = rg_warp_max(fabsf(v));
    for (int o = RG_WARP / 2; o > 0; o >>= 1) bad |= rg_shfl_xor(bad, o);
    float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    uint16_t h = rg_f32_f16(d);
    if ((h & 0x7c00u) == 0x7c00u) bad = 1;
    unsigned char *out = dst + blk * 34;
    float q = fminf(127.0f, fmaxf(-127.0f, roundf(v * id)));
    out[2 + lane] = bad ? 0 : (unsigned char)(int8_t)q;
    if (lane == 0) {
      if (bad) h = 0x7e00u;
      out[0] = (unsigned char)(h & 0xff);
      out[1] = (unsigned char)(h >> 8);
    }
  }
}

extern "C" __global__ void rg_argmax(const rg_cuk_argmax_t a) {
  __shared__ float bv[32];
  __shared__ int32_t bi[32];
  const float *l = RG_P(const float, a.logits) + (int64_t)blockIdx.x * a.vocab;
  float best = -INFINITY;
  int32_t id = -1;
  for (int64_t i = threadIdx.x; i < a.vocab; i += blockDim.x) {
    float v = l[i];
    // Strictly greater keeps this thread's lower id on ties; NaN never wins.
    if (v > best || (id < 0 && v == -INFINITY)) best = v, id = (int32_t)i;
  }
  const int lane = threadIdx.x % RG_WARP, w = threadIdx.x / RG_WARP;
  for (int o = RG_WARP / 2; o > 0; o >>= 1) {
    float ov = rg_shfl_xor(best, o);
    int32_t oi = rg_shfl_xor(id, o);
    if (oi >= 0 && (id < 0 || ov > best || (ov == best && oi < id))) best = ov, id = oi;
  }
  if (lane == 0) bv[w] = best, bi[w] = id;
  __syncthreads();
  if (w == 0) {
    int nw = blockDim.x / RG_WARP;
    best = lane < nw ? bv[lane] : -INFINITY;
    id = lane < nw ? bi[lane] : -1;
    for (int o = RG_WARP / 2; o > 0; o >>= 1) {
      float ov = rg_shfl_xor(best, o);
      int32_t oi = rg_shfl_xor(id, o);
      if (oi >= 0 && (id < 0 || ov > best || (ov == best && oi < id))) best = ov, id = oi;
    }
    if (lane == 0) RG_P(int32_t, a.out)[blockIdx.x] = id < 0 ? 0 : id;
  }
}
