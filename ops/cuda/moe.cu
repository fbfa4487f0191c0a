// ops/cuda/moe.cu — mixture-of-experts bookkeeping on a GPU: route (top-k
// experts per token), group (pairs by expert), gather (dispatch) and
// scatter_add (combine). Bound by memory and latency, not arithmetic.
//
// route follows ops/ref exactly: k passes of "the best expert not yet
// taken, ties to the lower index", then the weights from exponentials in
// double. group is a stable counting sort in one block (one thread per
// expert scans the pairs in order), so its output is the reference's bit
// for bit. scatter_add gives each thread one column and walks the rows in
// order, so its sums are added in the reference's order too.
#include "ops/cuda/common.cuh"

// The ref's pick among experts not taken: the first candidate, replaced by
// any later one strictly greater. Over a warp: the lowest candidate index f
// decides when its logit is NaN (nothing compares greater); otherwise the
// greatest non-NaN logit, lowest index on ties.
RG_DEV int32_t pick(const float *l, const unsigned char *taken, int64_t E) {
  const int lane = threadIdx.x;
  int32_t first = 0x7fffffff, best = -1;
  float bv = -INFINITY;
  for (int64_t x = lane; x < E; x += RG_WARP) {
    if (taken[x]) continue;
    if (first == 0x7fffffff) first = (int32_t)x;
    float v = l[x];
    if (!isnan(v) && (best < 0 || v > bv)) bv = v, best = (int32_t)x;
  }
  for (int o = RG_WARP / 2; o > 0; o >>= 1) {
    int32_t of = rg_shfl_xor(first, o), ob = rg_shfl_xor(best, o);
    float ov = rg_shfl_xor(bv, o);
    first = of < first ? of : first;
    if (ob >= 0 && (best < 0 || ov > bv || (ov == bv && ob < best))) bv = ov, best = ob;
  }
  if (first == 0x7fffffff) return 0;
  return isnan(l[first]) || best < 0 ? first : best;
}

extern "C" __global__ void rg_moe_route(const rg_cuk_moe_route_t a) {
  RG_DYNAMIC_SHARED(unsigned char, taken);  // (E)
  const int64_t t = blockIdx.x;
  const float *l = RG_P(const float, a.logits) + t * a.E;
  int32_t *idx = RG_P(int32_t, a.idx) + t * a.k;
  float *w = RG_P(float, a.w) + t * a.k;
  for (int64_t x = threadIdx.x; x < a.E; x += RG_WARP) taken[x] = 0;
  rg_syncwarp();
  for (int64_t j = 0; j < a.k; j++) {
    int32_t b = pick(l, taken, a.E);
    if (threadIdx.x == 0) idx[j] = b, taken[b] = 1;
    rg_syncwarp();
  }
  const double mx = l[idx[0]];
  double all = 0, top = 0;
  for (int64_t x = threadIdx.x; x < a.E; x += RG_WARP) all += exp((double)l[x] - mx);
  for (int64_t j = threadIdx.x; j < a.k; j += RG_WARP) top += exp((double)l[idx[j]] - mx);
  all = rg_warp_sum_d(all);
  top = rg_warp_sum_d(top);
  for (int64_t j = threadIdx.x; j < a.k; j += RG_WARP) {
    double p = exp((double)l[idx[j]] - mx);
    w[j] = a.mode == 0   ? (float)((p / all) / (top / all))
           : a.mode == 1 ? (float)(p / all)
                         : (float)(p / top);
  }
}

extern "C" __global__ void rg_moe_group(const rg_cuk_moe_group_t a) {
  const int32_t *idx = RG_P(const int32_t, a.idx);
  int32_t *off = RG_P(int32_t, a.offsets), *rows = RG_P(int32_t, a.rows);
  const int64_t n = a.T * a.k;
  for (int64_t e = threadIdx.x; e < a.E; e += blockDim.x) {
    int32_t c = 0;
    for (int64_t r = 0; r < n; r++) c += idx[r] == e;
    off[e + 1] = c;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    off[0] = 0;
    for (int64_t e = 0; e < a.E; e++) off[e + 1] += off[e];
  }
  __syncthreads();
  for (int64_t e = threadIdx.x; e < a.E; e += blockDim.x) {
    int32_t at = off[e];
    for (int64_t r = 0; r < n; r++)
      if (idx[r] == e) rows[at++] = (int32_t)r;
  }
  // Pairs routed nowhere valid go last, in order, so rows stays a
  // permutation and no expert's range includes them.
  if (threadIdx.x == 0) {
    int32_t at = off[a.E];
    for (int64_t r = 0; r < n; r++)
      if (idx[r] < 0 || idx[r] >= a.E) rows[at++] = (int32_t)r;
  }
}

extern "C" __global__ void rg_moe_gather(const rg_cuk_moe_rows_t a) {
  const int64_t i = blockIdx.x;
  const int32_t r = RG_P(const int32_t, a.rows)[i];
  const bool ok = r >= 0 && r / a.k < a.T;
  const float *x = RG_P(const float, a.x) + (ok ? r / a.k : 0) * a.dim;
  float *out = RG_P(float, a.out) + i * a.dim;
  for (int64_t d = threadIdx.x; d < a.dim; d += blockDim.x) out[d] = ok ? x[d] : 0.0f;
}

extern "C" __global__ void rg_moe_scatter_add(const rg_cuk_moe_rows_t a) {
  const int64_t d = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (d >= a.dim) return;
  const int32_t *rows = RG_P(const int32_t, a.rows);
  const float *y = RG_P(const float, a.x), *w = RG_P(const float, a.w);
  float *out = RG_P(float, a.out);
  for (int64_t i = 0; i < a.n; i++) {
    const int32_t r = rows[i];
    if (r < 0 || r >= a.T * a.k) continue;
    out[(r / a.k) * a.dim + d] += w[r] * y[i * a.dim + d];
  }
}
