// ops/opencl/rows.cl — the row and elementwise ops: rmsnorm, rope, softmax,
// swiglu, add. All f32. The reductions (rmsnorm, softmax) take one
// work-group per row and sum in f32 with a tree in local memory.

// Work-items per row of the reducing kernels.
#define RW 128

// Sums v over the group into *total (all items see it); part: (RW) local.
inline float rg_group_sum(__local float *part, float v) {
  int li = get_local_id(0);
  part[li] = v;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int st = RW / 2; st > 0; st >>= 1) {
    if (li < st) part[li] += part[li + st];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  float r = part[0];
  barrier(CLK_LOCAL_MEM_FENCE);
  return r;
}

inline float rg_group_max(__local float *part, float v) {
  int li = get_local_id(0);
  part[li] = v;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int st = RW / 2; st > 0; st >>= 1) {
    if (li < st) part[li] = fmax(part[li], part[li + st]);
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  float r = part[0];
  barrier(CLK_LOCAL_MEM_FENCE);
  return r;
}

// Global (rows * RW), local (RW). y may be x: each item reads and writes
// only its own elements after the sum.
__kernel __attribute__((reqd_work_group_size(RW, 1, 1))) void rmsnorm(PC(x), PC(w), P(y),
                                                                         int dim, float eps) {
  __local float part[RW];
  int li = get_local_id(0);
  ulong r = get_group_id(0);
  __global const float *x = ATC(float, x) + r * dim;
  __global const float *w = ATC(float, w);
  __global float *y = AT(float, y) + r * dim;
  float s = 0.0f;
  for (int i = li; i < dim; i += RW) s = RG_MAD(x[i], x[i], s);
  float scale = 1.0f / sqrt(rg_group_sum(part, s) / (float)dim + eps);
  for (int i = li; i < dim; i += RW) y[i] = x[i] * scale * w[i];
}

// Global (head_dim / 2 rounded up, n_heads, n_tokens). Rotate-half layout;
// the angle is the f32 product pos * inv_freq[i] as in ops/ref, its cosine
// and sine taken in double where the device has it.
__kernel void rope(P(x), PC(pos), PC(inv), int n_heads, int hd) {
  int i = get_global_id(0), h = get_global_id(1), t = get_global_id(2), hh = hd / 2;
  if (i >= hh) return;
  __global float *v = AT(float, x) + ((ulong)t * n_heads + h) * hd;
  float angle = (float)ATC(int, pos)[t] * ATC(float, inv)[i];
#ifdef RG_FP64
  float c = (float)cos((double)angle), s = (float)sin((double)angle);
#else
  float c = cos(angle), s = sin(angle);
#endif
  float a = v[i], b = v[i + hh];
  v[i] = a * c - b * s;
  v[i + hh] = b * c + a * s;
}

// Global (rows * RW), local (RW). A row that is all -inf becomes zeros.
__kernel __attribute__((reqd_work_group_size(RW, 1, 1))) void softmax(P(x), int n) {
  __local float part[RW];
  int li = get_local_id(0);
  __global float *v = AT(float, x) + (ulong)get_group_id(0) * n;
  float mx = -INFINITY;
  for (int i = li; i < n; i += RW)
    if (v[i] > mx) mx = v[i];
  mx = rg_group_max(part, mx);
  if (mx == -INFINITY) {
    for (int i = li; i < n; i += RW) v[i] = 0.0f;
    return;
  }
  float s = 0.0f;
  for (int i = li; i < n; i += RW) s += exp(v[i] - mx);
  float inv = 1.0f / rg_group_sum(part, s);
  for (int i = li; i < n; i += RW) v[i] = exp(v[i] - mx) * inv;
}

// Global (n rounded up). out may be gate or up.
__kernel void swiglu(PC(g), PC(u), P(out), int n) {
  int i = get_global_id(0);
  if (i >= n) return;
  float g = ATC(float, g)[i];
  AT(float, out)[i] = g / (1.0f + exp(-g)) * ATC(float, u)[i];
}

// Global (n rounded up). out may be a or b.
__kernel void add(PC(a), PC(b), P(out), int n) {
  int i = get_global_id(0);
  if (i >= n) return;
  AT(float, out)[i] = ATC(float, a)[i] + ATC(float, b)[i];
}
