// ops/opencl/tables.cl — embedding lookup and element-type conversion: the
// ops that read a table or a tensor in its stored type and write another.
// Conversions give the bits base/dtype.h's codecs give (common.cl holds the
// same code), q8_0 included: ggml's reference quantizer, d = max|x| / 127
// stored as f16, q = round-half-away(x / d) with the unrounded d (the host
// builds with correctly rounded division so d and 1/d are the CPU's).

// Global (dim rounded up, n): out[i] = table[ids[i]] widened to f32; an id
// outside the vocabulary is clamped into it and reported.
__kernel void embed(PC(table), int type, int vocab, PC(ids), P(out), int dim,
                    __global int *err) {
  int d = get_global_id(0), i = get_global_id(1);
  if (d >= dim) return;
  int id = ATC(int, ids)[i];
  if (id < 0 || id >= vocab) {
    if (d == 0) rg_flag(err, RG_E_TOKEN, i, id, vocab);
    id = rg_clamp_i(id, 0, vocab - 1);
  }
  __global const uchar *row = ATC(uchar, table) + (ulong)id * rg_row_bytes(type, dim);
  AT(float, out)[(ulong)i * dim + d] = rg_load(row, type, d);
}

inline void rg_store(__global uchar *row, int t, long e, float v) {
  if (t == RG_T_F32)
    ((__global float *)row)[e] = v;
  else if (t == RG_T_BF16)
    ((__global ushort *)row)[e] = rg_f32_to_bf16(v);
  else
    ((__global ushort *)row)[e] = rg_f32_to_f16(v);
}

// Global (n / per rounded up), per = 32 when either side is q8_0 (one
// block per item), else 1.
__kernel void convert(PC(src), int from, P(dst), int to, long n, __global int *err) {
  long per = from == RG_T_Q8_0 || to == RG_T_Q8_0 ? 32 : 1;
  long e0 = (long)get_global_id(0) * per;
  if (e0 >= n) return;
  __global const uchar *src = ATC(uchar, src);
  __global uchar *dst = AT(uchar, dst);
  if (to != RG_T_Q8_0) {
    for (long e = e0; e < e0 + per; e++) rg_store(dst, to, e, rg_load(src, from, e));
    return;
  }
  // What the CPU refuses (a value q8_0 cannot hold, a scale past f16) is
  // reported; the block is still written, with such values as 0, so that its
  // bytes are defined.
  int b = (int)min(e0 / 32, (long)INT_MAX);
  float x[32], amax = 0.0f;
  for (int j = 0; j < 32; j++) {
    x[j] = rg_load(src, from, e0 + j);
    if (!isfinite(x[j])) {
      rg_flag(err, RG_E_Q8_VALUE, b, j, 0);
      x[j] = 0.0f;
    }
    amax = fmax(amax, fabs(x[j]));
  }
  float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
  ushort h = rg_f32_to_f16(d);
  if ((h & 0x7c00u) == 0x7c00u) rg_flag(err, RG_E_Q8_SCALE, b, 0, 0);
  __global uchar *blk = dst + (e0 / 32) * 34;
  *(__global ushort *)blk = h;
  for (int j = 0; j < 32; j++) {
    float q = clamp(round(x[j] * id), -127.0f, 127.0f);
    blk[2 + j] = (uchar)(char)q;
  }
}
