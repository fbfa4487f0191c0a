// ops/opencl/profile.cl — kernels that measure a device's own limits, for
// `ridge profile` and bench/bench_opencl (devices/opencl/opencl_profile.h).

// Read bandwidth: global (items), each item sums float16 vectors and
// writes one float so that nothing is optimised away. chunked = 0: strided
// by the whole grid (consecutive items read consecutive vectors, as a GPU
// wants); 1: a contiguous share per item (a CPU device runs a work-item as
// a loop iteration on one core, and a core streams best through memory in
// order: on PoCL the strided form reads 1.0-1.5 GB/s where this reads 5-6,
// as fast as a hand-written AVX-512 sum on the same 2 cores).
__kernel void stream_read(PC(src), P(out), long n16, int chunked) {
  __global const float16 *s = ATC(float16, src);
  long items = get_global_size(0), i = get_global_id(0), per = (n16 + items - 1) / items;
  long b = chunked ? i * per : i, step = chunked ? 1 : items;
  long e = chunked ? min(b + per, n16) : n16;
  float16 a = (float16)(0.0f), c = a;
  for (i = b; i + step < e; i += 2 * step) {
    a += s[i];
    c += s[i + step];
  }
  if (i < e) a += s[i];
  a += c;
  float8 h = a.lo + a.hi;
  float4 q = h.lo + h.hi;
  AT(float, out)[get_global_id(0)] = q.x + q.y + q.z + q.w;
}

// Write bandwidth: the same two layouts as stream_read, storing float16
// vectors of a value the host passes (so the stores cannot be elided).
__kernel void stream_write(P(dst), long n16, int chunked, float v) {
  __global float16 *d = AT(float16, dst);
  long items = get_global_size(0), i = get_global_id(0), per = (n16 + items - 1) / items;
  long b = chunked ? i * per : i, step = chunked ? 1 : items;
  long e = chunked ? min(b + per, n16) : n16;
  float16 x = (float16)(v);
  for (i = b; i < e; i += step) d[i] = x;
}

// FMA peak: each item runs `iters` rounds of 8 independent float16
// multiply-adds (8 chains hide the FMA latency): 256 flops a round.
__kernel void fma_peak(P(out), int iters, float m) {
  float16 a0 = (float16)(get_global_id(0) * 1e-9f), a1 = a0 + 1e-3f, a2 = a0 + 2e-3f,
          a3 = a0 + 3e-3f, a4 = a0 + 4e-3f, a5 = a0 + 5e-3f, a6 = a0 + 6e-3f, a7 = a0 + 7e-3f;
  float16 mm = (float16)(m), c = (float16)(1e-7f);
  for (int i = 0; i < iters; i++) {
    a0 = RG_MAD(a0, mm, c);
    a1 = RG_MAD(a1, mm, c);
    a2 = RG_MAD(a2, mm, c);
    a3 = RG_MAD(a3, mm, c);
    a4 = RG_MAD(a4, mm, c);
    a5 = RG_MAD(a5, mm, c);
    a6 = RG_MAD(a6, mm, c);
    a7 = RG_MAD(a7, mm, c);
  }
  float16 s = ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7));
  float8 t = s.lo + s.hi;
  float4 u = t.lo + t.hi;
  AT(float, out)[get_global_id(0)] = u.x + u.y + u.z + u.w;
}
