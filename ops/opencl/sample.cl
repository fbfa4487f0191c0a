// ops/opencl/sample.cl — greedy sampling on the device: the argmax of each
// row of logits, ties to the lower id, as the CPU's sampler. NaN logits are
// passed over (a row of NaN gives 0). Rows that draw (temperature > 0) are
// finished on the host by the CPU's sampler: top-k and top-p want a sort of
// a few candidates, which is cheap on the host and branchy on a device, and
// reading one row of logits costs less than a kernel launch or two.

#define SW 128

// Global (rows * SW), local (SW).
__kernel __attribute__((reqd_work_group_size(SW, 1, 1))) void argmax(PC(logits), P(out),
                                                                        int vocab) {
  __local float bv[SW];
  __local int bi[SW];
  int li = get_local_id(0), r = get_group_id(0);
  __global const float *l = ATC(float, logits) + (ulong)r * vocab;
  float v = -INFINITY;
  int at = INT_MAX;
  for (int i = li; i < vocab; i += SW)
    if (l[i] > v || (l[i] == v && i < at)) v = l[i], at = i;
  bv[li] = v;
  bi[li] = at;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int st = SW / 2; st > 0; st >>= 1) {
    if (li < st) {
      float ov = bv[li + st];
      int oi = bi[li + st];
      if (ov > bv[li] || (ov == bv[li] && oi < bi[li])) bv[li] = ov, bi[li] = oi;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (li == 0) AT(int, out)[r] = bi[0] == INT_MAX ? 0 : bi[0];
}
