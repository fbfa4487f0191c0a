// The cuda backend beyond the conformance suite: the host-side choices
// (which matmul path, how attention splits a context), and cases a GPU run
// must get right that the suite's small shapes do not reach — prefill-sized
// matmuls (cuBLAS or the tiled kernel), contexts long enough to be split
// and merged, metadata the kernels must clamp, queues ordered by events.
//
// The cuda_gpu_* tests need a CUDA device and skip without one. Where
// there is none, cuda_kernels_on_the_cpu_emulator runs them, and every
// conformance_cuda_* test, in a child process whose libcuda is the
// emulator of tests/cuda_emu.cpp: ridge's kernel sources executed on CPU
// threads. That checks the kernels' logic against the references; it is
// not a GPU run, and says so.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "devices/cuda/cuda_api.h"
#include "devices/cuda/gpu_images.h"
#include "devices/cuda/gpu_ops.h"
#include "devices/devices.h"
#include "ops/cuda/kernels.h"
#include "ops/matmul.h"
#include "ops/ops.h"
#include "tests/test.h"

// ----- Host-side choices -------------------------------------------------------------

RG_TEST(cuda_matmul_path_follows_m_and_the_weight_type) {
  RG_CHECK(!strcmp(rg__gpu_matmul_path(1, RG_BF16, 1), "gemv"));
  RG_CHECK(!strcmp(rg__gpu_matmul_path(8, RG_Q8_0, 1), "gemv"));
  RG_CHECK(!strcmp(rg__gpu_matmul_path(9, RG_BF16, 1), "tiled"));
  RG_CHECK(!strcmp(rg__gpu_matmul_path(127, RG_F16, 1), "tiled"));
  RG_CHECK(!strcmp(rg__gpu_matmul_path(128, RG_BF16, 1), "blas"));
  RG_CHECK(!strcmp(rg__gpu_matmul_path(512, RG_F32, 1), "blas"));
  // q8_0 has no cuBLAS type; without cuBLAS everything large is tiled.
  RG_CHECK(!strcmp(rg__gpu_matmul_path(512, RG_Q8_0, 1), "tiled"));
  RG_CHECK(!strcmp(rg__gpu_matmul_path(512, RG_BF16, 0), "tiled"));
}

RG_TEST(cuda_gemv_splits_rows_of_small_matrices_across_warps) {
  int32_t w;
  // The 1b model on an H100's 132 SMs: k and v (512 rows) would make 32
  // blocks; eight warps a row group make 256.
  rg__gpu_gemv_split(512, 2048, RG_BF16, 1, 132, &w);
  RG_CHECK(w == 8);
  rg__gpu_gemv_split(2048, 2048, RG_BF16, 1, 132, &w);  // q, o
  RG_CHECK(w == 4);
  rg__gpu_gemv_split(2048, 8192, RG_Q8_0, 1, 132, &w);  // down
  RG_CHECK(w == 4);
  rg__gpu_gemv_split(8192, 2048, RG_BF16, 1, 132, &w);  // gate, up: enough rows
  RG_CHECK(w == 1);
  // Never more slices than k has whole steps (256 elements; q8_0 1024).
  rg__gpu_gemv_split(512, 256, RG_F16, 1, 132, &w);
  RG_CHECK(w == 1);
  rg__gpu_gemv_split(512, 2048, RG_Q8_0, 1, 132, &w);
  RG_CHECK(w == 2);
  rg__gpu_gemv_split(512, 64, RG_F32, 0, 132, &w);  // element loads: steps of 32
  RG_CHECK(w == 2);
}

RG_TEST(cuda_attention_splits_only_what_leaves_the_gpu_idle) {
  int64_t splits, len;
  // Decode of one sequence on 132 SMs: 8 (token, head) blocks would idle
  // the GPU, so a 4096-position context is cut into 16 parts of 256.
  rg__gpu_attention_split(1, 8, 4096, 132, &splits, &len);
  RG_CHECK(splits == 16 && len == 256);
  // A prefill chunk fills the GPU by itself: one pass over the context.
  rg__gpu_attention_split(512, 8, 512, 132, &splits, &len);
  RG_CHECK(splits == 1 && len == 512);
  // Short contexts are never split; lengths are whole warps of keys.
  rg__gpu_attention_split(1, 8, 10, 132, &splits, &len);
  RG_CHECK(splits == 1 && len == 32);
  rg__gpu_attention_split(2, 1, 1000, 4, &splits, &len);
  RG_CHECK(splits == 4 && len == 256 && splits * len >= 1000);
}

// ----- On a CUDA device ---------------------------------------------------------------

typedef struct {
  rg_device_t *dev;
  rg_queue_t *q;
} gpu_t;

// Opens cuda:0 with a queue, or says why the test cannot run.
static const char *gpu_open(gpu_t *g, char *why, size_t len) {
  rg_status_t s = rg_device_open("cuda", 0, NULL, &g->dev);
  if (s) {
    snprintf(why, len, "no CUDA device: %s", rg_status_message(s));
    rg_status_free(s);
    return why;
  }
  if (!rg_device_supports_op(g->dev, RG_OP_MATMUL)) {
    rg_op_t op = {.kind = RG_OP_ADD};
    s = rg_device_check_op(g->dev, &op);
    snprintf(why, len, "%s", s ? rg_status_message(s) : "cuda:0 runs no ops");
    rg_status_free(s);
    rg_device_close(g->dev);
    return why;
  }
  s = rg_queue_create(g->dev, &g->q);
  if (s) {
    snprintf(why, len, "cuda:0 has no queue: %s", rg_status_message(s));
    rg_status_free(s);
    rg_device_close(g->dev);
    return why;
  }
  return NULL;
}

static void gpu_close(gpu_t *g) {
  rg_queue_destroy(g->q);
  rg_device_close(g->dev);
}

#define GPU_OR_SKIP(g)                                  \
  gpu_t g;                                              \
  do {                                                  \
    char why_[400];                                     \
    if (gpu_open(&g, why_, sizeof why_)) RG_SKIP(why_); \
  } while (0)

// A device buffer holding bytes (or zeros).
static rg_buffer_t *up(rg_test_ctx_t *t, gpu_t *g, const void *data, size_t bytes) {
  rg_buffer_t *b = NULL;
  rg_status_t s = rg_buffer_alloc(g->dev, bytes, &b);
  if (!s) {
    void *zero = data ? NULL : calloc(1, bytes);
    s = rg_buffer_write(b, 0, data ? data : zero, bytes);
    free(zero);
  }
  if (s) {
    rg_test_fail(t, __FILE__, __LINE__, "upload of %zu bytes: %s", bytes, rg_status_message(s));
    rg_status_free(s);
  }
  return b;
}

static void *down(rg_test_ctx_t *t, rg_buffer_t *b, size_t bytes) {
  void *p = malloc(bytes);
  rg_status_t s = rg_buffer_read(b, 0, p, bytes);
  if (s) {
    rg_test_fail(t, __FILE__, __LINE__, "download: %s", rg_status_message(s));
    rg_status_free(s);
  }
  return p;
}

static double nmse(const float *got, const float *want, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    if (!isfinite(got[i])) return INFINITY;
    double d = (double)got[i] - want[i];
    num += d * d, den += (double)want[i] * want[i];
  }
  return den > 0 ? num / den : num;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(float lo, float hi) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return lo + (hi - lo) * (float)((rng >> 40) * 0x1p-24);
}

// Prefill-sized matmuls take cuBLAS (bf16/f16/f32, x narrowed to the weight
// type for the tensor cores) or the tiled kernel (q8_0, or no cuBLAS);
// k = 40 takes the GEMV's element loads (rows not whole 16-byte steps), and
// long rows its unrolled loads with a partial last step.
RG_TEST(cuda_gpu_matmul_prefill_shapes_and_odd_rows) {
  GPU_OR_SKIP(g);
  const struct {
    rg_dtype_t wt;
    int64_t m, n, k;
    double tol;
  } cases[] = {
      {RG_BF16, 200, 160, 256, 2e-5},
      {RG_F16, 200, 160, 256, 1e-6},
      {RG_F32, 130, 96, 128, 1e-9},
      {RG_Q8_0, 150, 64, 96, 1e-9},
      {RG_F32, 3, 70, 40, 1e-9},
      {RG_BF16, 7, 33, 40, 1e-9},
      // Rows longer than the GEMV's unrolled steps, with a partial last one.
      {RG_BF16, 1, 50, 2056, 1e-9},
      {RG_F32, 8, 20, 1032, 1e-9},
      {RG_Q8_0, 2, 40, 1056, 1e-9},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    int64_t m = cases[c].m, n = cases[c].n, k = cases[c].k;
    rg_dtype_t wt = cases[c].wt;
    float *x = malloc((size_t)(m * k) * 4), *w = malloc((size_t)(n * k) * 4),
          *wf = malloc((size_t)(n * k) * 4), *bias = malloc((size_t)n * 4),
          *want = malloc((size_t)(m * n) * 4);
    for (int64_t i = 0; i < m * k; i++) x[i] = frand(-1, 1);
    for (int64_t i = 0; i < n * k; i++) w[i] = frand(-0.2f, 0.2f);
    for (int64_t i = 0; i < n; i++) bias[i] = frand(-1, 1);
    int ok;
    size_t wb = rg_dtype_nbytes(wt, n * k, &ok);
    void *wq = malloc(wb);
    RG_CHECK_OK(rg_dtype_from_f32(wt, w, wq, n * k));
    RG_CHECK_OK(rg_dtype_to_f32(wt, wq, wf, n * k));
    rg_wmat_t ref = {wf, RG_F32, n, k, RG_WLAYOUT_ROWS};
    RG_CHECK_OK(rg_matmul_ref(x, m, &ref, bias, want));
    rg_buffer_t *bx = up(t, &g, x, (size_t)(m * k) * 4), *bw = up(t, &g, wq, wb),
                *bb = up(t, &g, bias, (size_t)n * 4), *by = up(t, &g, NULL, (size_t)(m * n) * 4);
    rg_op_t op = {.kind = RG_OP_MATMUL,
                  .matmul = {{bx, 0}, {bw, 0}, {bb, 0}, {by, 0}, wt, m, n, k, 0}};
    RG_CHECK_OK(rg_queue_submit(g.q, &op));
    RG_CHECK_OK(rg_queue_wait(g.q));
    float *got = down(t, by, (size_t)(m * n) * 4);
    double e = nmse(got, want, (size_t)(m * n));
    printf("    %s m=%lld n=%lld k=%lld: nmse %.2g (tol %.0g)\n", rg_dtype_name(wt), (long long)m,
           (long long)n, (long long)k, e, cases[c].tol);
    RG_CHECK(e <= cases[c].tol);
    free(got), free(x), free(w), free(wf), free(bias), free(want), free(wq);
    rg_buffer_release(bx), rg_buffer_release(bw), rg_buffer_release(bb), rg_buffer_release(by);
  }
  gpu_close(&g);
}

// Two sequences long enough to be split and merged (a decode token at 300,
// and two at 599 and 600: few enough (token, head) blocks that the context
// is split even on the emulator's four SMs), with a sliding window and sinks.
RG_TEST(cuda_gpu_attention_long_contexts_split_and_merge) {
  GPU_OR_SKIP(g);
  const int64_t bs = 16, nkv = 2, hd = 64, nh = 8, n_blocks = 64;
  const int32_t lens[2] = {301, 601};
  int32_t table[64], off[3] = {0, 0, 0};
  int64_t nt = 0;
  for (int s = 0; s < 2; s++) {
    int64_t nb = (lens[s] + bs - 1) / bs;
    for (int64_t j = 0; j < nb; j++, nt++) table[nt] = (int32_t)((nt * 37) % n_blocks);
    off[s + 1] = (int32_t)nt;
  }
  int32_t seq[3] = {0, 1, 1}, pos[3] = {300, 599, 600};
  size_t pool = (size_t)(n_blocks * nkv * bs * hd);
  uint16_t *k16 = malloc(pool * 2), *v16 = malloc(pool * 2);
  float *kf = malloc(pool * 4), *vf = malloc(pool * 4);
  for (size_t i = 0; i < pool; i++) kf[i] = frand(-1, 1), vf[i] = frand(-1, 1);
  RG_CHECK_OK(rg_dtype_from_f32(RG_BF16, kf, k16, (int64_t)pool));
  RG_CHECK_OK(rg_dtype_from_f32(RG_BF16, vf, v16, (int64_t)pool));
  size_t qn = (size_t)(3 * nh * hd);
  float *q = malloc(qn * 4), *want = malloc(qn * 4), sinks[8];
  for (size_t i = 0; i < qn; i++) q[i] = frand(-1, 1);
  for (int i = 0; i < 8; i++) sinks[i] = frand(-1, 2);
  rg_block_table_t tabs[2] = {{table, (size_t)off[1]}, {table + off[1], (size_t)(off[2] - off[1])}};
  rg_kv_layer_t ref = {RG_BF16, (size_t)n_blocks, (size_t)bs, (size_t)nkv, (size_t)hd, k16, v16};
  rg_attn_batch_t ab = {3, seq, pos, tabs, 2};
  rg_buffer_t *bk = up(t, &g, k16, pool * 2), *bv = up(t, &g, v16, pool * 2),
              *bq = up(t, &g, q, qn * 4), *bo = up(t, &g, NULL, qn * 4),
              *bsk = up(t, &g, sinks, sizeof sinks), *bseq = up(t, &g, seq, sizeof seq),
              *bpos = up(t, &g, pos, sizeof pos), *boff = up(t, &g, off, sizeof off),
              *btab = up(t, &g, table, (size_t)nt * 4);
  // Variant 2 places the pool 2 bytes into its buffers: K rows are then
  // read an element at a time.
  rg_buffer_t *bk2 = up(t, &g, NULL, pool * 2 + 2), *bv2 = up(t, &g, NULL, pool * 2 + 2);
  RG_CHECK_OK(rg_buffer_write(bk2, 2, k16, pool * 2));
  RG_CHECK_OK(rg_buffer_write(bv2, 2, v16, pool * 2));
  for (int variant = 0; variant < 3; variant++) {
    rg_attn_params_t ap = {(size_t)nh, 0, variant == 1 ? 200 : 0, variant == 1 ? sinks : NULL, 0};
    RG_CHECK_OK(rg_op_attention_ref(NULL, &ref, &ab, &ap, q, want));
    rg_op_t op = {.kind = RG_OP_ATTENTION};
    op.attention.kv = variant == 2
                          ? (rg_kv_ref_t){{bk2, 2}, {bv2, 2}, RG_BF16, n_blocks, bs, nkv, hd}
                          : (rg_kv_ref_t){{bk, 0}, {bv, 0}, RG_BF16, n_blocks, bs, nkv, hd};
    op.attention.meta = (rg_attn_meta_t){3, 2, nt, {bseq, 0}, {bpos, 0}, {boff, 0}, {btab, 0}};
    op.attention.q = (rg_ref_t){bq, 0};
    op.attention.o = (rg_ref_t){bo, 0};
    op.attention.sinks = variant == 1 ? (rg_ref_t){bsk, 0} : (rg_ref_t){0};
    op.attention.n_heads = nh;
    op.attention.window = variant == 1 ? 200 : 0;
    RG_CHECK_OK(rg_queue_submit(g.q, &op));
    RG_CHECK_OK(rg_queue_wait(g.q));
    float *got = down(t, bo, qn * 4);
    double e = nmse(got, want, qn);
    printf("    bf16 contexts 301/601%s: nmse %.2g (tol 1e-8)\n",
           variant == 1   ? ", window 200, sinks"
           : variant == 2 ? ", pool at a 2-byte offset"
                          : "",
           e);
    RG_CHECK(e <= 1e-8);
    free(got);
  }
  rg_buffer_t *bufs[] = {bk, bv, bk2, bv2, bq, bo, bsk, bseq, bpos, boff, btab};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) rg_buffer_release(bufs[i]);
  free(k16), free(v16), free(kf), free(vf), free(q), free(want);
  gpu_close(&g);
}

// The host never reads the GPU's metadata before a launch, so the kernels
// clamp it: what each bad entry gives, next to good entries that must
// still be right.
RG_TEST(cuda_gpu_bad_metadata_is_clamped_inside_the_operands) {
  GPU_OR_SKIP(g);
  // embed: an id past the vocabulary and a negative one give zero rows.
  {
    float tab[4 * 32];
    for (int i = 0; i < 4 * 32; i++) tab[i] = (float)i;
    int32_t ids[3] = {2, 9, -1};
    rg_buffer_t *bt = up(t, &g, tab, sizeof tab), *bi = up(t, &g, ids, sizeof ids),
                *bo = up(t, &g, NULL, 3 * 32 * 4);
    rg_op_t op = {.kind = RG_OP_EMBED, .embed = {{bt, 0}, {bi, 0}, {bo, 0}, RG_F32, 4, 3, 32}};
    RG_CHECK_OK(rg_queue_submit(g.q, &op));
    RG_CHECK_OK(rg_queue_wait(g.q));
    float *o = down(t, bo, 3 * 32 * 4);
    RG_CHECK(o[0] == 64 && o[31] == 95 && o[32] == 0 && o[63] == 0 && o[64] == 0 && o[95] == 0);
    free(o);
    rg_buffer_release(bt), rg_buffer_release(bi), rg_buffer_release(bo);
  }
  // kv_write and attention: a sequence index past the batch, a position past
  // the table and a block id past the pool. The bad tokens write nothing and
  // attend to nothing (zeros); the good one matches the reference.
  {
    const int64_t bs = 4, hd = 32, nb = 4;
    int32_t seq[4] = {0, 5, 0, 0}, pos[4] = {3, 0, 99, 5}, off[2] = {0, 2}, table[2] = {1, 7};
    float pool[4 * 4 * 32] = {0}, k[4 * 32], v[4 * 32], q[4 * 32];
    for (int i = 0; i < 4 * 32; i++) k[i] = frand(-1, 1), v[i] = frand(-1, 1), q[i] = frand(-1, 1);
    rg_buffer_t *bk = up(t, &g, pool, sizeof pool), *bv = up(t, &g, pool, sizeof pool),
                *bseq = up(t, &g, seq, sizeof seq), *bpos = up(t, &g, pos, sizeof pos),
                *boff = up(t, &g, off, sizeof off), *btab = up(t, &g, table, sizeof table),
                *bkin = up(t, &g, k, sizeof k), *bvin = up(t, &g, v, sizeof v),
                *bq = up(t, &g, q, sizeof q), *bo = up(t, &g, NULL, sizeof q);
    rg_kv_ref_t kv = {{bk, 0}, {bv, 0}, RG_F32, nb, bs, 1, hd};
    rg_attn_meta_t meta = {4, 1, 2, {bseq, 0}, {bpos, 0}, {boff, 0}, {btab, 0}};
    rg_op_t w = {.kind = RG_OP_KV_WRITE, .kv_write = {kv, meta, {bkin, 0}, {bvin, 0}}};
    RG_CHECK_OK(rg_queue_submit(g.q, &w));
    rg_op_t a = {.kind = RG_OP_ATTENTION};
    a.attention.kv = kv, a.attention.meta = meta;
    a.attention.q = (rg_ref_t){bq, 0}, a.attention.o = (rg_ref_t){bo, 0};
    a.attention.n_heads = 1;
    RG_CHECK_OK(rg_queue_submit(g.q, &a));
    RG_CHECK_OK(rg_queue_wait(g.q));
    float *pk = down(t, bk, sizeof pool), *o = down(t, bo, sizeof q);
    // Token 0 (position 3) went to block 1, slot 3; tokens 1 and 2 nowhere;
    // token 3 (position 5) names block 7, outside the pool of 4.
    int only_token0 = !memcmp(pk + (1 * bs + 3) * hd, k, hd * 4);
    for (int i = 0; i < 4 * 4 * 32; i++)
      if (i / hd != 1 * bs + 3 && pk[i] != 0) only_token0 = 0;
    RG_CHECK(only_token0);
    // Token 0 sees positions 0..3 of block 1: slots 0..2 are zeros (scores
    // 0), slot 3 its own key; softmax over those four.
    double sc[4] = {0, 0, 0, 0}, mx = 0, den = 0;
    for (int i = 0; i < hd; i++) sc[3] += (double)q[i] * k[i];
    sc[3] /= sqrt((double)hd);
    mx = sc[3] > 0 ? sc[3] : 0;
    for (int j = 0; j < 4; j++) den += exp(sc[j] - mx);
    float want0[32];
    for (int i = 0; i < hd; i++) want0[i] = (float)(exp(sc[3] - mx) / den * v[i]);
    RG_CHECK(nmse(o, want0, (size_t)hd) <= 1e-10);
    int zeros = 1;
    for (int i = hd; i < 3 * hd; i++) zeros &= o[i] == 0;
    RG_CHECK(zeros);
    // Token 3's context is positions 0..5: block 1 (0..3), then block 7,
    // which is not in the pool, so its keys are left out.
    double den3 = 0, mx3 = -INFINITY, s3[4];
    for (int j = 0; j < 4; j++) {
      s3[j] = 0;
      for (int i = 0; j == 3 && i < hd; i++) s3[j] += (double)q[3 * hd + i] * k[i];
      s3[j] /= sqrt((double)hd);
      if (s3[j] > mx3) mx3 = s3[j];
    }
    for (int j = 0; j < 4; j++) den3 += exp(s3[j] - mx3);
    float want3[32];
    for (int i = 0; i < hd; i++) want3[i] = (float)(exp(s3[3] - mx3) / den3 * v[i]);
    RG_CHECK(nmse(o + 3 * hd, want3, (size_t)hd) <= 1e-10);
    free(pk), free(o);
    rg_buffer_t *bufs[] = {bk, bv, bseq, bpos, boff, btab, bkin, bvin, bq, bo};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) rg_buffer_release(bufs[i]);
  }
  // moe_group: a pair routed to expert 7 of 3 goes after every expert's
  // rows, and offsets[E] counts only the valid pairs.
  {
    int32_t idx[6] = {2, 0, 7, 1, 0, 2}, off[4], rows[6];
    rg_buffer_t *bi = up(t, &g, idx, sizeof idx), *bo = up(t, &g, NULL, sizeof off),
                *br = up(t, &g, NULL, sizeof rows);
    rg_op_t op = {.kind = RG_OP_MOE_GROUP, .moe_group = {{bi, 0}, {bo, 0}, {br, 0}, 3, 2, 3}};
    RG_CHECK_OK(rg_queue_submit(g.q, &op));
    RG_CHECK_OK(rg_queue_wait(g.q));
    int32_t *go = down(t, bo, sizeof off), *gr = down(t, br, sizeof rows);
    int32_t want_off[4] = {0, 2, 3, 5}, want_rows[6] = {1, 4, 3, 0, 5, 2};
    RG_CHECK(!memcmp(go, want_off, sizeof want_off));
    RG_CHECK(!memcmp(gr, want_rows, sizeof want_rows));
    free(go), free(gr);
    rg_buffer_release(bi), rg_buffer_release(bo), rg_buffer_release(br);
  }
  gpu_close(&g);
}

// q8_0 cannot hold NaN: the GPU writes the block with a NaN scale and zero
// quants (the CPU refuses it with an error), so it never passes for data.
RG_TEST(cuda_gpu_q8_0_of_nan_is_a_nan_block) {
  GPU_OR_SKIP(g);
  float x[64];
  for (int i = 0; i < 64; i++) x[i] = (float)i - 30;
  x[40] = NAN;
  rg_buffer_t *bs = up(t, &g, x, sizeof x), *bd = up(t, &g, NULL, 68);
  rg_op_t op = {.kind = RG_OP_CONVERT, .convert = {{bs, 0}, {bd, 0}, RG_F32, RG_Q8_0, 64}};
  RG_CHECK_OK(rg_queue_submit(g.q, &op));
  RG_CHECK_OK(rg_queue_wait(g.q));
  unsigned char *d = down(t, bd, 68), want[34];
  RG_CHECK_OK(rg_q8_0_quantize_row(x, want, 32));
  RG_CHECK(!memcmp(d, want, 34));  // the first block is exact
  RG_CHECK(d[34] == 0x00 && d[35] == 0x7e);
  int zero = 1;
  for (int i = 36; i < 68; i++) zero &= d[i] == 0;
  RG_CHECK(zero);
  free(d);
  rg_buffer_release(bs), rg_buffer_release(bd);
  gpu_close(&g);
}

// Two queues ordered by an event on the device; copies on the stream.
RG_TEST(cuda_gpu_queues_ordered_by_events) {
  GPU_OR_SKIP(g);
  rg_queue_t *q2;
  RG_REQUIRE_OK(rg_queue_create(g.dev, &q2));
  enum { N = 1 << 16 };
  float *a = malloc(N * 4), *back = malloc(N * 4);
  for (int i = 0; i < N; i++) a[i] = (float)i;
  rg_buffer_t *ba = up(t, &g, NULL, N * 4), *bb = up(t, &g, NULL, N * 4);
  RG_CHECK_OK(rg_queue_write(g.q, ba, 0, a, N * 4));
  rg_op_t add = {.kind = RG_OP_ADD, .add = {{ba, 0}, {ba, 0}, {ba, 0}, N}};
  RG_CHECK_OK(rg_queue_submit(g.q, &add));
  rg_event_t *ev;
  RG_REQUIRE_OK(rg_queue_record(g.q, &ev));
  RG_CHECK_OK(rg_queue_wait_event(q2, ev));
  RG_CHECK_OK(rg_queue_copy(q2, bb, 0, ba, 0, N * 4));
  RG_CHECK_OK(rg_queue_read(q2, bb, 0, back, N * 4));
  RG_CHECK_OK(rg_queue_wait(q2));
  RG_CHECK_OK(rg_event_wait(ev, 10.0));
  RG_CHECK(rg_event_done(ev));
  int same = 1;
  for (int i = 0; i < N; i++) same &= back[i] == 2.0f * i;
  RG_CHECK(same);
  rg_event_release(ev);
  free(a), free(back);
  rg_buffer_release(ba), rg_buffer_release(bb);
  rg_queue_destroy(q2);
  gpu_close(&g);
}

// ----- Without a GPU: the same tests on the CPU emulator -------------------------------

RG_TEST(cuda_kernels_on_the_cpu_emulator) {
#ifndef RIDGE_CUDA_EMU
  RG_SKIP("the emulator was not built (no C++ compiler when ridge was configured)");
#else
  if (!rg__cuda_image_count) RG_SKIP(rg__cuda_images_note);
  // A real driver (the usual library, not one named by RIDGE_CUDA_LIBRARY)
  // ran the cuda_gpu_* and conformance_cuda_* tests on the GPU already.
  const rg_cuda_syms_t *cu;
  rg_status_t s = rg__cuda_load(&cu);
  int real = !s && !getenv("RIDGE_CUDA_LIBRARY") && !strncmp(cu->lib_name, "libcuda.so", 10);
  rg_status_free(s);
  if (real) RG_SKIP("a CUDA driver is present: the GPU ran the cuda tests");
  // A child process: this one may already hold another libcuda (a process
  // keeps the first it loads), and the child's conformance run must see
  // the emulator. cuBLAS is kept out: it needs a real driver.
  char cmd[2048];
  snprintf(cmd, sizeof cmd,
           "cd '%s' && RIDGE_CUDA_LIBRARY='%s' RIDGE_CUBLAS_LIBRARY=/nonexistent/libcublas.so "
           "/proc/%d/exe conformance_cuda_ cuda_gpu_ 2>&1",
           rg_test_tmpdir(t), RIDGE_CUDA_EMU, (int)getpid());
  FILE *p = popen(cmd, "r");
  RG_REQUIRE(p != NULL);
  char line[1024], last[1024] = "";
  int failed_lines = 0;
  while (fgets(line, sizeof line, p)) {
    if (!strncmp(line, "FAIL", 4) || !strncmp(line, "skip", 4) || strstr(line, ": check failed") ||
        strstr(line, "required:")) {
      printf("    emulator: %s", line);
      failed_lines++;
    }
    if (strstr(line, " passed, ")) snprintf(last, sizeof last, "%s", line);
  }
  int st = pclose(p);
  printf("    on the CPU emulation of the kernels (not a GPU): %s", last);
  RG_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  RG_CHECK(failed_lines == 0);
  int passed = 0, failed = -1, skipped = -1;
  RG_REQUIRE(sscanf(last, "%d passed, %d failed, %d skipped", &passed, &failed, &skipped) == 3);
  RG_CHECK(failed == 0 && skipped == 0);
  RG_CHECK(passed == RG_OP_COUNT + 5);  // every op, and the five cuda_gpu_* tests
#endif
}

// ----- What the build embedded ------------------------------------------------------

static const unsigned char *find_bytes(const unsigned char *h, size_t n, const void *needle,
                                       size_t len, size_t from) {
  return from <= n ? memmem(h + from, n - from, needle, len) : NULL;
}

// Every kernel the backend looks up is in the fatbins, as SASS for each
// SM version the build names ("for sm 80;90") and as PTX of the last one;
// an image missing a kernel or an architecture fails here, not on a GPU.
RG_TEST(cuda_embedded_fatbins_hold_every_kernel_for_each_sm) {
  if (!rg__cuda_image_count) RG_SKIP(rg__cuda_images_note);
  const char *at = strstr(rg__cuda_images_note, "for sm ");
  RG_REQUIRE(at != NULL);
  int archs[8], n_archs = 0;
  for (const char *p = at + 7; *p && n_archs < 8;) {
    archs[n_archs++] = atoi(p);
    while (*p && *p != ';') p++;
    if (*p == ';') p++;
  }
  RG_REQUIRE(n_archs > 0);
  static const char *const names[] = {
#define RG_X_(e, s, a) #s,
      RG_CUDA_KERNELS(RG_X_)
#undef RG_X_
  };
  int found[RG_CUK_COUNT] = {0};
  for (size_t i = 0; i < rg__cuda_image_count; i++) {
    const unsigned char *img = rg__cuda_images[i].data;
    size_t size = rg__cuda_image_size(i);
    RG_CHECK(size > 16 && img[0] == 0x50 && img[1] == 0xed && img[2] == 0x55 && img[3] == 0xba);
    // The CUDA ELFs (e_machine 190) in the image and their SM versions.
    size_t elf[16];
    int sm[16], n_elf = 0;
    for (const unsigned char *e = img; n_elf < 16 && (e = find_bytes(img, size,
                                                                     "\x7f"
                                                                     "ELF",
                                                                     4, (size_t)(e - img)));
         e += 4) {
      if ((size_t)(e - img) + 64 > size || e[18] != 190 || e[19] != 0) continue;
      uint32_t flags;
      memcpy(&flags, e + 48, 4);
      elf[n_elf] = (size_t)(e - img);
      sm[n_elf++] = e[8] >= 8 ? (int)((flags >> 8) & 0xff) : (int)(flags & 0xff);
    }
    for (int a = 0; a < n_archs; a++) {
      int have = 0;
      for (int j = 0; j < n_elf; j++) have |= sm[j] == archs[a];
      if (!have)
        rg_test_fail(t, __FILE__, __LINE__, "ops/cuda/%s.cu: no SASS for sm_%d in its fatbin",
                     rg__cuda_images[i].name, archs[a]);
    }
    char ptx_target[32];
    snprintf(ptx_target, sizeof ptx_target, ".target sm_%d", archs[n_archs - 1]);
    RG_CHECK(find_bytes(img, size, ptx_target, strlen(ptx_target), 0) != NULL);
    // A kernel of this image is an entry of its PTX and a symbol of every
    // ELF in it.
    for (int k = 0; k < RG_CUK_COUNT; k++) {
      char entry[80], sym[80];
      snprintf(entry, sizeof entry, ".entry %s(", names[k]);
      snprintf(sym, sizeof sym, "%c%s", 0, names[k]);
      if (!find_bytes(img, size, entry, strlen(entry), 0)) continue;
      int in_all = n_elf > 0;
      for (int j = 0; j < n_elf; j++) {
        size_t end = j + 1 < n_elf ? elf[j + 1] : size;
        const unsigned char *hit = find_bytes(img, end, sym, strlen(names[k]) + 1, elf[j]);
        in_all &= hit != NULL && hit[strlen(names[k]) + 1] == 0;
      }
      if (!in_all)
        rg_test_fail(t, __FILE__, __LINE__, "kernel %s is missing from an ELF of ops/cuda/%s.cu",
                     names[k], rg__cuda_images[i].name);
      found[k]++;
    }
  }
  for (int k = 0; k < RG_CUK_COUNT; k++)
    if (found[k] != 1)
      rg_test_fail(t, __FILE__, __LINE__, "kernel %s is in %d images, not 1", names[k], found[k]);
}
