// ops/opencl/moe.cl — mixture-of-experts routing and dispatch: moe_route
// (top-k experts and weights per token), moe_group (a stable counting sort
// of the (token, slot) pairs by expert), moe_gather (an expert's rows) and
// moe_scatter_add (the weighted rows back, in order). Routing ids and pair
// indices are clamped before they address memory; the first bad one is
// reported through the error word.

// Global (T rounded up): one item per token. Picks k times the best expert
// not yet taken ('>' keeps the lower index on ties), as ops/ref does.
__kernel void moe_route(PC(logits), P(idx), P(w), int T, int E, int k, int mode) {
  int t = get_global_id(0);
  if (t >= T) return;
  __global const float *l = ATC(float, logits) + (ulong)t * E;
  __global int *id = AT(int, idx) + (ulong)t * k;
  __global float *wv = AT(float, w) + (ulong)t * k;
  for (int j = 0; j < k; j++) {
    int best = -1;
    for (int x = 0; x < E; x++) {
      int taken = 0;
      for (int i = 0; i < j; i++) taken |= id[i] == x;
      if (!taken && (best < 0 || l[x] > l[best])) best = x;
    }
    id[j] = best;
  }
  float mx = l[id[0]], all = 0.0f, top = 0.0f;
  for (int x = 0; x < E; x++) all += exp(l[x] - mx);
  for (int j = 0; j < k; j++) top += exp(l[id[j]] - mx);
  for (int j = 0; j < k; j++) {
    float p = exp(l[id[j]] - mx);
    wv[j] = mode == RG_MOE_SOFTMAX_TOPK_RENORM ? (p / all) / (top / all)
            : mode == RG_MOE_SOFTMAX_TOPK      ? p / all
                                               : p / top;
  }
}

// An expert id clamped into 0 .. E-1.
inline int rg_expert(__global const int *idx, int r, int k, int E, __global int *err) {
  int x = idx[r];
  if (x < 0 || x >= E) {
    rg_flag(err, RG_E_EXPERT, r / k, r % k, x);
    x = rg_clamp_i(x, 0, E - 1);
  }
  return x;
}

// Global (E + 1 rounded up): item e < E finds where expert e's rows start
// (the pairs routed to lower experts) and writes its rows in pair order;
// item E writes the total. Deterministic, and stable like ops/ref's.
__kernel void moe_group(PC(idx), P(off), P(rows), int T, int k, int E, __global int *err) {
  int e = get_global_id(0), n = T * k;
  if (e > E) return;
  if (e == E) {
    AT(int, off)[E] = n;
    return;
  }
  __global const int *idx = ATC(int, idx);
  int start = 0;
  for (int r = 0; r < n; r++) start += rg_expert(idx, r, k, E, err) < e;
  AT(int, off)[e] = start;
  __global int *rows = AT(int, rows);
  for (int r = 0; r < n; r++)
    if (rg_expert(idx, r, k, E, err) == e) rows[start++] = r;
}

// A pair index clamped into 0 .. T*k - 1 (T > 0).
inline int rg_pair(__global const int *rows, int i, int T, int k, __global int *err) {
  int r = rows[i];
  if (r < 0 || r / k >= T) {
    rg_flag(err, RG_E_PAIR, i, r, T * k);
    r = rg_clamp_i(r, 0, T * k - 1);
  }
  return r;
}

// Global (dim rounded up, n): out[i] = x[rows[i] / k].
__kernel void moe_gather(PC(x), PC(rows), P(out), int T, int k, int dim, __global int *err) {
  int d = get_global_id(0), i = get_global_id(1);
  if (d >= dim) return;
  __global float *out = AT(float, out) + (ulong)i * dim;
  if (T == 0) {
    if (d == 0) rg_flag(err, RG_E_PAIR, i, ATC(int, rows)[i], 0);
    out[d] = 0.0f;
    return;
  }
  int r = rg_pair(ATC(int, rows), i, T, k, err);
  out[d] = ATC(float, x)[(ulong)(r / k) * dim + d];
}

// Global (dim rounded up): each item walks the n rows in order, so equal
// pairs add up the same way on every device (and as ops/ref does).
__kernel void moe_scatter_add(PC(y), PC(rows), PC(w), P(out), int T, int n, int k, int dim,
                              __global int *err) {
  int d = get_global_id(0);
  if (d >= dim) return;
  __global const int *rows = ATC(int, rows);
  if (T == 0) {
    if (d == 0 && n > 0) rg_flag(err, RG_E_PAIR, 0, rows[0], 0);
    return;
  }
  __global const float *y = ATC(float, y), *w = ATC(float, w);
  __global float *out = AT(float, out);
  for (int i = 0; i < n; i++) {
    int r = rg_pair(rows, i, T, k, err);
    ulong o = (ulong)(r / k) * dim + d;
    out[o] = out[o] + w[r] * y[(ulong)i * dim + d];
  }
}
