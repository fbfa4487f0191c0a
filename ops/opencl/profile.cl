// ops/opencl/profile.cl — kernels that measure a device's own limits, for
// `ridge profile` and bench/bench_opencl (devices/opencl/opencl_profile.h).

// Read bandwidth: global (items), each item sums float16 vectors strided by
// the whole grid (consecutive items read consecutive vectors, as a GPU
// wants; on a CPU each item's stream is one core's), and writes one float
// so that nothing is optimised away.
__kernel void stream_read(PC(src), P(out), long n16) {
  long i = get_global_id(0), stride = get_global_size(0);
  __global const float16 *s = ATC(float16, src);
  float16 a = (float16)(0.0f), b = a;
  for (; i + stride < n16; i += 2 * stride) {
    a += s[i];
    b += s[i + stride];
  }
  if (i < n16) a += s[i];
  a += b;
  float8 c = a.lo + a.hi;
  float4 e = c.lo + c.hi;
  AT(float, out)[get_global_id(0)] = e.x + e.y + e.z + e.w;
}

// FMA peak: each item runs `iters` rounds of 8 independent float16
// multiply-adds (8 chains hide the FMA latency): 256 flops a round.
__kernel void fma_peak(P(out), int iters, float m) {
  float16 a0 = (float16)(get_global_id(0) * 1e-9f), a1 = a0 + 1e-3f, a2 = a0 + 2e-3f,
          a3 = a0 + 3e-3f, a4 = a0 + 4e-3f, a5 = a0 + 5e-3f, a6 = a0 + 6e-3f, a7 = a0 + 7e-3f;
  float16 mm = (float16)(m), c = (float16)(1e-7f);
  for (int i = 0; i < iters; i++) {
    a0 = mad(a0, mm, c);
    a1 = mad(a1, mm, c);
    a2 = mad(a2, mm, c);
    a3 = mad(a3, mm, c);
    a4 = mad(a4, mm, c);
    a5 = mad(a5, mm, c);
    a6 = mad(a6, mm, c);
    a7 = mad(a7, mm, c);
  }
  float16 s = ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7));
  float8 t = s.lo + s.hi;
  float4 u = t.lo + t.hi;
  AT(float, out)[get_global_id(0)] = u.x + u.y + u.z + u.w;
}
