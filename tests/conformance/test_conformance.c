// The HAL conformance suite: every op of devices/op.h written once as a set
// of cases, run on every device present, each against the plain-loop
// references of ops/ref (ggml's test-backend-ops, IREE's CTS).
//
// One test per (driver, op), named conformance_<driver>_<op>. Each case
// uploads its inputs into buffers placed at an offset with sentinel bytes
// before and after, runs the op through rg_queue_submit, reads the outputs
// back and checks: normalized mean squared error against the reference
// within the op's tolerance, no NaN or Inf the reference does not have,
// sentinels intact, and inputs unchanged. Integer outputs (ids, routing)
// must match exactly. An absent device skips its tests with the driver's
// reason; a case the device refuses (RG_UNIMPLEMENTED) makes the test a
// skip naming it, after the cases it does run have been checked — never a
// pass.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "devices/devices.h"
#include "ops/matmul.h"
#include "ops/ops.h"
#include "tests/test.h"

#define GUARD 64       // sentinel bytes on each side of an operand
#define SENTINEL 0x5a  // byte pattern of the guards and of fresh outputs

// Per-op tolerance on NMSE. Widening stored types is exact and every path
// accumulates in f32, so most ops agree to f32 rounding; matmuls over
// narrow weights may round activations to bf16 (vdpbf16ps and AMX tiles on
// the CPU, tensor cores on GPUs), and a GPU's exp and rsqrt are a few ulps
// off. Only f32 weights keep f32 activations everywhere. Likewise attention
// over a bf16 KV cache may round queries and probabilities to bf16 (the CPU's
// AMX prefill blocks: NMSE ~4e-6, see tests/test_ops.c).
static double tolerance(rg_op_kind_t op, rg_dtype_t t) {
  switch (op) {
    case RG_OP_MATMUL:
      return t == RG_F32 ? 1e-9 : 2e-5;
    case RG_OP_ATTENTION:
      return t == RG_BF16 ? 2e-5 : 1e-8;
    case RG_OP_ROPE:
      return 1e-10;
    default:
      return 1e-10;
  }
}

// ----- The harness -----------------------------------------------------------

typedef struct {
  const char *name;
  rg_buffer_t *buf;
  void *host;  // what was uploaded (inputs), for the unchanged check
  size_t bytes;
  int written;
} operand_t;

typedef struct {
  rg_test_ctx_t *t;
  rg_device_t *dev;
  rg_queue_t *q;
  rg_op_kind_t op;
  operand_t ops[16];
  int n_ops;
  int ran, skipped_cases;
  char skipped[512];  // the cases refused, for the skip reason
  uint64_t rng;
} conf_t;

static uint64_t next(conf_t *c) {  // splitmix64
  uint64_t z = (c->rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static float uniform(conf_t *c, float lo, float hi) {
  return lo + (hi - lo) * (float)((next(c) >> 40) * 0x1p-24);
}
static float *rand_f32(conf_t *c, size_t n, float lo, float hi) {
  float *p = malloc(n * sizeof(float) + 1);
  for (size_t i = 0; i < n; i++) p[i] = uniform(c, lo, hi);
  return p;
}

static void release(conf_t *c) {
  for (int i = 0; i < c->n_ops; i++) {
    rg_buffer_release(c->ops[i].buf);
    free(c->ops[i].host);
  }
  c->n_ops = 0;
}

// A device buffer of GUARD + bytes + GUARD, sentinels around, `data` (or
// sentinel bytes) inside; the operand starts at offset GUARD.
static rg_ref_t operand(conf_t *c, const char *name, const void *data, size_t bytes, int written) {
  rg_buffer_t *b = NULL;
  size_t total = bytes + 2 * GUARD;
  unsigned char *img = malloc(total);
  memset(img, SENTINEL, total);
  if (data) memcpy(img + GUARD, data, bytes);
  rg_status_t s = rg_buffer_alloc(c->dev, total, &b);
  if (!s) s = rg_buffer_write(b, 0, img, total);
  if (s) {
    rg_test_fail(c->t, __FILE__, __LINE__, "%s: %s", name, rg_status_message(s));
    rg_status_free(s);
  }
  void *keep = NULL;
  if (data) {
    keep = malloc(bytes + 1);
    memcpy(keep, data, bytes);
  }
  free(img);
  c->ops[c->n_ops++] = (operand_t){name, b, keep, bytes, written};
  return (rg_ref_t){b, GUARD};
}
static rg_ref_t in(conf_t *c, const char *name, const void *data, size_t bytes) {
  return operand(c, name, data, bytes, 0);
}
static rg_ref_t out(conf_t *c, const char *name, size_t bytes) {
  return operand(c, name, NULL, bytes, 1);
}
static rg_ref_t inout(conf_t *c, const char *name, const void *data, size_t bytes) {
  return operand(c, name, data, bytes, 1);
}

static operand_t *find(conf_t *c, rg_ref_t r) {
  for (int i = 0; i < c->n_ops; i++)
    if (c->ops[i].buf == r.buf) return &c->ops[i];
  return NULL;
}

// Runs the op. 1: ran; 0: the device refused the case (recorded), or it
// failed (a test failure).
static int run(conf_t *c, rg_op_t *op, const char *cs) {
  op->label = cs;
  rg_status_t s = rg_queue_submit(c->q, op);
  if (!s) s = rg_queue_wait(c->q);
  if (s && rg_status_code(s) == RG_UNIMPLEMENTED) {
    size_t used = strlen(c->skipped);
    snprintf(c->skipped + used, sizeof c->skipped - used, "%s%s", used ? "; " : "",
             rg_status_message(s));
    c->skipped_cases++;
    rg_status_free(s);
    release(c);
    return 0;
  }
  if (s) {
    rg_test_fail(c->t, __FILE__, __LINE__, "%s %s: %s", rg_device_info(c->dev)->driver, cs,
                 rg_status_message(s));
    rg_status_free(s);
    release(c);
    return 0;
  }
  c->ran++;
  return 1;
}

// Reads an operand back whole; checks its guards, and for inputs that they
// are unchanged. Returns the bytes inside the guards (caller frees).
static unsigned char *fetch(conf_t *c, rg_ref_t r, const char *cs) {
  operand_t *o = find(c, r);
  if (!o) return NULL;
  size_t total = o->bytes + 2 * GUARD;
  unsigned char *img = malloc(total);
  rg_status_t s = rg_buffer_read(o->buf, 0, img, total);
  if (s) {
    rg_test_fail(c->t, __FILE__, __LINE__, "%s: reading %s: %s", cs, o->name, rg_status_message(s));
    rg_status_free(s);
    free(img);
    return NULL;
  }
  for (size_t i = 0; i < GUARD; i++)
    if (img[i] != SENTINEL || img[GUARD + o->bytes + i] != SENTINEL) {
      rg_test_fail(c->t, __FILE__, __LINE__, "%s %s: wrote outside operand %s (guard byte %zu)",
                   rg_device_info(c->dev)->driver, cs, o->name, i);
      break;
    }
  unsigned char *body = malloc(o->bytes + 1);
  memcpy(body, img + GUARD, o->bytes);
  free(img);
  return body;
}

static void check_inputs(conf_t *c, const char *cs) {
  for (int i = 0; i < c->n_ops; i++) {
    if (c->ops[i].written) continue;
    unsigned char *got = fetch(c, (rg_ref_t){c->ops[i].buf, GUARD}, cs);
    if (got && c->ops[i].host && memcmp(got, c->ops[i].host, c->ops[i].bytes))
      rg_test_fail(c->t, __FILE__, __LINE__, "%s %s: input %s was modified",
                   rg_device_info(c->dev)->driver, cs, c->ops[i].name);
    free(got);
  }
}

static void expect_f32(conf_t *c, rg_ref_t r, const float *want, size_t n, double tol,
                       const char *cs) {
  float *got = (float *)fetch(c, r, cs);
  if (!got) return;
  double num = 0, den = 0;
  size_t bad = n;
  for (size_t i = 0; i < n; i++) {
    if (isfinite(want[i]) != isfinite(got[i]) || (isnan(want[i]) != isnan(got[i]))) {
      if (bad == n) bad = i;
      continue;
    }
    if (!isfinite(want[i])) continue;
    double d = (double)got[i] - want[i];
    num += d * d;
    den += (double)want[i] * want[i];
  }
  double nmse = den > 0 ? num / den : num;
  if (bad < n)
    rg_test_fail(c->t, __FILE__, __LINE__, "%s %s: element %zu is %g, the reference %g",
                 rg_device_info(c->dev)->driver, cs, bad, (double)got[bad], (double)want[bad]);
  else if (!(nmse <= tol))
    rg_test_fail(c->t, __FILE__, __LINE__, "%s %s: nmse %.3g above the tolerance %.1g",
                 rg_device_info(c->dev)->driver, cs, nmse, tol);
  else
    printf("    %s:%d %s: nmse %.2g (tol %.0g)\n", rg_device_info(c->dev)->driver,
           rg_device_info(c->dev)->index, cs, nmse, tol);
  free(got);
}

static void expect_bytes(conf_t *c, rg_ref_t r, const void *want, size_t n, const char *cs) {
  unsigned char *got = fetch(c, r, cs);
  if (!got) return;
  size_t i = 0;
  while (i < n && got[i] == ((const unsigned char *)want)[i]) i++;
  if (i < n)
    rg_test_fail(c->t, __FILE__, __LINE__, "%s %s: byte %zu differs from the reference",
                 rg_device_info(c->dev)->driver, cs, i);
  else
    printf("    %s:%d %s: exact\n", rg_device_info(c->dev)->driver, rg_device_info(c->dev)->index,
           cs);
  free(got);
}

static void done(conf_t *c, const char *cs) {
  check_inputs(c, cs);
  release(c);
}

// Weights of type t for an (rows, cols) f32 matrix: the reference sees the
// same values the device does (the stored type, widened).
static void *to_type(rg_dtype_t t, const float *w, size_t n, float *widened) {
  int ok;
  size_t bytes = rg_dtype_nbytes(t, (int64_t)n, &ok);
  void *p = malloc(bytes + 1);
  rg_status_free(rg_dtype_from_f32(t, w, p, (int64_t)n));
  rg_status_free(rg_dtype_to_f32(t, p, widened, (int64_t)n));
  return p;
}

// ----- The cases, once for every device -----------------------------------------

static const rg_dtype_t weight_types[] = {RG_F32, RG_BF16, RG_F16, RG_Q8_0};
static const rg_dtype_t kv_types[] = {RG_F32, RG_BF16, RG_F16};

static void case_matmul(conf_t *c) {
  const int64_t ms[] = {1, 5, 64}, n = 96, k = 128;
  for (size_t ti = 0; ti < 4; ti++)
    for (size_t mi = 0; mi < 3; mi++) {
      rg_dtype_t wt = weight_types[ti];
      int64_t m = ms[mi];
      int bias = mi == 1;
      char cs[64];
      snprintf(cs, sizeof cs, "%s m=%lld%s", rg_dtype_name(wt), (long long)m, bias ? " +bias" : "");
      float *x = rand_f32(c, (size_t)(m * k), -1, 1),
            *w = rand_f32(c, (size_t)(n * k), -0.1f, 0.1f);
      float *wf = malloc((size_t)(n * k) * 4), *b = rand_f32(c, (size_t)n, -1, 1),
            *want = malloc((size_t)(m * n) * 4);
      void *wq = to_type(wt, w, (size_t)(n * k), wf);
      rg_wmat_t ref = {wf, RG_F32, n, k, RG_WLAYOUT_ROWS};
      rg_status_free(rg_matmul_ref(x, m, &ref, bias ? b : NULL, want));
      int ok;
      rg_op_t op = {.kind = RG_OP_MATMUL};
      op.matmul = (rg_op_matmul_t){.x = in(c, "x", x, (size_t)(m * k) * 4),
                                   .w = in(c, "w", wq, rg_dtype_nbytes(wt, n * k, &ok)),
                                   .bias = bias ? in(c, "bias", b, (size_t)n * 4) : (rg_ref_t){0},
                                   .y = out(c, "y", (size_t)(m * n) * 4),
                                   .wtype = wt,
                                   .m = m,
                                   .n = n,
                                   .k = k};
      if (run(c, &op, cs)) {
        expect_f32(c, op.matmul.y, want, (size_t)(m * n), tolerance(RG_OP_MATMUL, wt), cs);
        done(c, cs);
      }
      free(x), free(w), free(wf), free(b), free(want), free(wq);
    }
}

static void case_rmsnorm(conf_t *c) {
  for (int inplace = 0; inplace < 2; inplace++) {
    const size_t rows = 3, dim = 96;
    const char *cs = inplace ? "in place" : "rows 3 x 96";
    float *x = rand_f32(c, rows * dim, -3, 3), *w = rand_f32(c, dim, 0.5f, 1.5f),
          *want = malloc(rows * dim * 4);
    rg_op_rmsnorm_ref(NULL, x, w, want, rows, dim, 1e-5f);
    rg_op_t op = {.kind = RG_OP_RMSNORM};
    op.rmsnorm.x = inplace ? inout(c, "x", x, rows * dim * 4) : in(c, "x", x, rows * dim * 4);
    op.rmsnorm.weight = in(c, "weight", w, dim * 4);
    op.rmsnorm.y = inplace ? op.rmsnorm.x : out(c, "y", rows * dim * 4);
    op.rmsnorm.rows = (int64_t)rows, op.rmsnorm.dim = (int64_t)dim, op.rmsnorm.eps = 1e-5f;
    if (run(c, &op, cs)) {
      expect_f32(c, op.rmsnorm.y, want, rows * dim, tolerance(RG_OP_RMSNORM, RG_F32), cs);
      done(c, cs);
    }
    free(x), free(w), free(want);
  }
}

static void case_rope(conf_t *c) {
  const size_t T = 6, H = 4, hd = 32;
  rg_rope_scaling_t llama3 = {8, 1, 4, 8192};
  for (int scaled = 0; scaled < 2; scaled++) {
    const char *cs = scaled ? "llama3 scaling" : "theta 10000";
    rg_rope_t rope;
    if (rg_rope_init(&rope, hd, scaled ? 500000.0 : 10000.0, scaled ? &llama3 : NULL)) return;
    int32_t pos[6] = {0, 1, 17, 4095, 100000, -3};
    float *x = rand_f32(c, T * H * hd, -2, 2), *want = malloc(T * H * hd * 4);
    memcpy(want, x, T * H * hd * 4);
    rg_op_rope_ref(NULL, &rope, want, T, H, pos);
    rg_op_t op = {.kind = RG_OP_ROPE};
    op.rope = (rg_op_rope_t){inout(c, "x", x, T * H * hd * 4),
                             in(c, "pos", pos, sizeof pos),
                             in(c, "inv_freq", rope.inv_freq, hd / 2 * 4),
                             (int64_t)T,
                             (int64_t)H,
                             (int64_t)hd};
    if (run(c, &op, cs)) {
      expect_f32(c, op.rope.x, want, T * H * hd, tolerance(RG_OP_ROPE, RG_F32), cs);
      done(c, cs);
    }
    free(x), free(want);
    rg_rope_deinit(&rope);
  }
}

static void case_softmax(conf_t *c) {
  const size_t rows = 4, n = 300;
  float *x = rand_f32(c, rows * n, -20, 20), *want = malloc(rows * n * 4);
  for (size_t i = 0; i < n; i += 7) x[i] = -INFINITY;       // masked entries
  for (size_t i = 0; i < n; i++) x[3 * n + i] = -INFINITY;  // a fully masked row: zeros
  memcpy(want, x, rows * n * 4);
  rg_op_softmax_ref(NULL, want, rows, n);
  rg_op_t op = {.kind = RG_OP_SOFTMAX};
  op.softmax = (rg_op_softmax_t){inout(c, "x", x, rows * n * 4), (int64_t)rows, (int64_t)n};
  if (run(c, &op, "masked rows")) {
    expect_f32(c, op.softmax.x, want, rows * n, tolerance(RG_OP_SOFTMAX, RG_F32), "masked rows");
    done(c, "masked rows");
  }
  free(x), free(want);
}

// A paged batch over three sequences of mixed lengths: a decode token at
// position 37, a prefill chunk at 10..14, and a new sequence's first token.
typedef struct {
  int32_t seq[7], pos[7], off[4], table[32];
  int64_t n_tokens, n_table;
  rg_block_table_t tables[3];
} batch_t;

static void make_batch(batch_t *b, int64_t block_size) {
  int32_t seq[7] = {0, 1, 1, 1, 1, 1, 2}, pos[7] = {37, 10, 11, 12, 13, 14, 0};
  memcpy(b->seq, seq, sizeof seq), memcpy(b->pos, pos, sizeof pos);
  b->n_tokens = 7;
  int64_t lens[3] = {38, 15, 1}, next = 0;
  b->off[0] = 0;
  // Blocks handed out interleaved, as a scheduler's free list would.
  int32_t order[32];
  for (int i = 0; i < 32; i++) order[i] = (int32_t)((i * 7) % 32);
  for (int s = 0; s < 3; s++) {
    int64_t nb = (lens[s] + block_size - 1) / block_size;
    for (int64_t j = 0; j < nb; j++) b->table[next + j] = order[next + j];
    b->tables[s] = (rg_block_table_t){b->table + next, (size_t)nb};
    next += nb;
    b->off[s + 1] = (int32_t)next;
  }
  b->n_table = next;
}

static rg_attn_meta_t meta_refs(conf_t *c, const batch_t *b) {
  return (rg_attn_meta_t){b->n_tokens,
                          3,
                          b->n_table,
                          in(c, "meta.seq", b->seq, (size_t)b->n_tokens * 4),
                          in(c, "meta.pos", b->pos, (size_t)b->n_tokens * 4),
                          in(c, "meta.table_off", b->off, 16),
                          in(c, "meta.table", b->table, (size_t)b->n_table * 4)};
}

static void case_kv_write(conf_t *c) {
  const int64_t blocks = 32, bs = 4, nkv = 2, hd = 16;
  for (size_t ti = 0; ti < 3; ti++) {
    rg_dtype_t kt = kv_types[ti];
    char cs[64];
    snprintf(cs, sizeof cs, "%s pool", rg_dtype_name(kt));
    batch_t b;
    make_batch(&b, bs);
    size_t pool_elems = (size_t)(blocks * nkv * bs * hd);
    int ok;
    size_t pool_bytes = rg_dtype_nbytes(kt, (int64_t)pool_elems, &ok);
    float *pk = rand_f32(c, pool_elems, -1, 1), *pv = rand_f32(c, pool_elems, -1, 1);
    float *wk = malloc(pool_elems * 4), *wv = malloc(pool_elems * 4);
    void *k0 = to_type(kt, pk, pool_elems, wk), *v0 = to_type(kt, pv, pool_elems, wv);
    void *rk = malloc(pool_bytes), *rv = malloc(pool_bytes);
    memcpy(rk, k0, pool_bytes), memcpy(rv, v0, pool_bytes);
    size_t rows = (size_t)(b.n_tokens * nkv * hd);
    float *k = rand_f32(c, rows, -1, 1), *v = rand_f32(c, rows, -1, 1);
    rg_kv_layer_t ref = {kt, (size_t)blocks, (size_t)bs, (size_t)nkv, (size_t)hd, rk, rv};
    rg_attn_batch_t ab = {(size_t)b.n_tokens, b.seq, b.pos, b.tables, 3};
    rg_status_free(rg_op_kv_write_ref(NULL, &ref, &ab, k, v));
    rg_op_t op = {.kind = RG_OP_KV_WRITE};
    op.kv_write.kv = (rg_kv_ref_t){inout(c, "kv.k", k0, pool_bytes),
                                   inout(c, "kv.v", v0, pool_bytes),
                                   kt,
                                   blocks,
                                   bs,
                                   nkv,
                                   hd};
    op.kv_write.meta = meta_refs(c, &b);
    op.kv_write.k = in(c, "k", k, rows * 4);
    op.kv_write.v = in(c, "v", v, rows * 4);
    if (run(c, &op, cs)) {
      expect_bytes(c, op.kv_write.kv.k, rk, pool_bytes, cs);
      expect_bytes(c, op.kv_write.kv.v, rv, pool_bytes, cs);
      done(c, cs);
    }
    free(pk), free(pv), free(wk), free(wv), free(k0), free(v0), free(rk), free(rv), free(k),
        free(v);
  }
}

static void case_attention(conf_t *c) {
  const int64_t blocks = 32, bs = 4, nkv = 2, hd = 32, nh = 8;
  for (size_t ti = 0; ti < 3; ti++)
    for (int variant = 0; variant < 3; variant++) {
      rg_dtype_t kt = kv_types[ti];
      char cs[64];
      snprintf(cs, sizeof cs, "%s GQA 8/2%s", rg_dtype_name(kt),
               variant == 1   ? " window 8"
               : variant == 2 ? " sinks"
                              : "");
      batch_t b;
      make_batch(&b, bs);
      size_t pool_elems = (size_t)(blocks * nkv * bs * hd);
      int ok;
      size_t pool_bytes = rg_dtype_nbytes(kt, (int64_t)pool_elems, &ok);
      float *pk = rand_f32(c, pool_elems, -1, 1), *pv = rand_f32(c, pool_elems, -1, 1);
      float *wk = malloc(pool_elems * 4), *wv = malloc(pool_elems * 4);
      void *k0 = to_type(kt, pk, pool_elems, wk), *v0 = to_type(kt, pv, pool_elems, wv);
      size_t qn = (size_t)(b.n_tokens * nh * hd);
      float *q = rand_f32(c, qn, -1, 1), *want = malloc(qn * 4),
            *sinks = rand_f32(c, (size_t)nh, -1, 1);
      rg_kv_layer_t ref = {kt, (size_t)blocks, (size_t)bs, (size_t)nkv, (size_t)hd, k0, v0};
      rg_attn_batch_t ab = {(size_t)b.n_tokens, b.seq, b.pos, b.tables, 3};
      rg_attn_params_t ap = {(size_t)nh, 0, variant == 1 ? 8 : 0, variant == 2 ? sinks : NULL, 0};
      rg_status_free(rg_op_attention_ref(NULL, &ref, &ab, &ap, q, want));
      rg_op_t op = {.kind = RG_OP_ATTENTION};
      op.attention.kv = (rg_kv_ref_t){
          in(c, "kv.k", k0, pool_bytes), in(c, "kv.v", v0, pool_bytes), kt, blocks, bs, nkv, hd};
      op.attention.meta = meta_refs(c, &b);
      op.attention.q = in(c, "q", q, qn * 4);
      op.attention.o = out(c, "o", qn * 4);
      op.attention.sinks = variant == 2 ? in(c, "sinks", sinks, (size_t)nh * 4) : (rg_ref_t){0};
      op.attention.n_heads = nh;
      op.attention.window = variant == 1 ? 8 : 0;
      if (run(c, &op, cs)) {
        expect_f32(c, op.attention.o, want, qn, tolerance(RG_OP_ATTENTION, kt), cs);
        done(c, cs);
      }
      free(pk), free(pv), free(wk), free(wv), free(k0), free(v0), free(q), free(want), free(sinks);
    }
}

static void case_swiglu(conf_t *c) {
  const size_t n = 1000;
  float *g = rand_f32(c, n, -8, 8), *u = rand_f32(c, n, -2, 2), *want = malloc(n * 4);
  rg_op_swiglu_ref(NULL, g, u, want, n);
  rg_op_t op = {.kind = RG_OP_SWIGLU};
  op.swiglu = (rg_op_swiglu_t){in(c, "gate", g, n * 4), in(c, "up", u, n * 4), out(c, "out", n * 4),
                               (int64_t)n};
  if (run(c, &op, "n 1000")) {
    expect_f32(c, op.swiglu.out, want, n, tolerance(RG_OP_SWIGLU, RG_F32), "n 1000");
    done(c, "n 1000");
  }
  free(g), free(u), free(want);
}

static void case_moe_route(conf_t *c) {
  const size_t T = 7, E = 8, k = 2;
  for (int mode = 0; mode < RG_MOE_MODE_COUNT; mode++) {
    const char *cs = rg_moe_mode_name((rg_moe_mode_t)mode);
    float *logits = rand_f32(c, T * E, -3, 3), *ww = malloc(T * k * 4);
    logits[3] = logits[4];  // a tie, broken by the lower expert index
    int32_t *wi = malloc(T * k * 4);
    rg_status_free(rg_op_moe_route_ref(NULL, logits, T, E, k, (rg_moe_mode_t)mode, wi, ww));
    rg_op_t op = {.kind = RG_OP_MOE_ROUTE};
    op.moe_route = (rg_op_moe_route_t){in(c, "logits", logits, T * E * 4),
                                       out(c, "idx", T * k * 4),
                                       out(c, "w", T * k * 4),
                                       (int64_t)T,
                                       (int64_t)E,
                                       (int64_t)k,
                                       (rg_moe_mode_t)mode};
    if (run(c, &op, cs)) {
      expect_bytes(c, op.moe_route.idx, wi, T * k * 4, cs);
      expect_f32(c, op.moe_route.w, ww, T * k, tolerance(RG_OP_MOE_ROUTE, RG_F32), cs);
      done(c, cs);
    }
    free(logits), free(ww), free(wi);
  }
}

static void case_moe_group(conf_t *c) {
  const size_t T = 9, k = 2, E = 5;
  int32_t idx[18], off[6], rows[18];
  for (size_t i = 0; i < T * k; i++) idx[i] = (int32_t)(next(c) % E);
  rg_status_free(rg_op_moe_group_ref(idx, T, k, E, off, rows));
  rg_op_t op = {.kind = RG_OP_MOE_GROUP};
  op.moe_group = (rg_op_moe_group_t){in(c, "idx", idx, sizeof idx),
                                     out(c, "offsets", sizeof off),
                                     out(c, "rows", sizeof rows),
                                     (int64_t)T,
                                     (int64_t)k,
                                     (int64_t)E};
  if (run(c, &op, "9 tokens x 2 of 5")) {
    expect_bytes(c, op.moe_group.offsets, off, sizeof off, "offsets");
    expect_bytes(c, op.moe_group.rows, rows, sizeof rows, "rows");
    done(c, "9 tokens x 2 of 5");
  }
}

static void case_moe_gather_scatter(conf_t *c, int scatter) {
  const size_t T = 6, k = 2, dim = 40, n = 5;
  int32_t rows[5] = {11, 0, 3, 3, 7};  // a pair twice: combine adds both, in order
  float *x = rand_f32(c, T * dim, -1, 1), *y = rand_f32(c, n * dim, -1, 1),
        *w = rand_f32(c, T * k, 0, 1);
  float *want = malloc(T * dim * 4);
  rg_op_t op = {.kind = scatter ? RG_OP_MOE_SCATTER_ADD : RG_OP_MOE_GATHER};
  const char *cs = scatter ? "combine into a residual" : "dispatch 5 rows";
  if (scatter) {
    memcpy(want, x, T * dim * 4);
    rg_op_moe_scatter_add_ref(NULL, y, rows, n, k, w, dim, want);
    op.moe_scatter_add = (rg_op_moe_scatter_add_t){in(c, "y", y, n * dim * 4),
                                                   in(c, "rows", rows, sizeof rows),
                                                   in(c, "w", w, T * k * 4),
                                                   inout(c, "out", x, T * dim * 4),
                                                   (int64_t)T,
                                                   (int64_t)n,
                                                   (int64_t)k,
                                                   (int64_t)dim};
  } else {
    rg_op_moe_gather_ref(NULL, x, rows, n, k, dim, want);
    op.moe_gather = (rg_op_moe_gather_t){in(c, "x", x, T * dim * 4),
                                         in(c, "rows", rows, sizeof rows),
                                         out(c, "out", n * dim * 4),
                                         (int64_t)T,
                                         (int64_t)n,
                                         (int64_t)k,
                                         (int64_t)dim};
  }
  if (run(c, &op, cs)) {
    expect_f32(c, scatter ? op.moe_scatter_add.out : op.moe_gather.out, want,
               scatter ? T * dim : n * dim, tolerance(op.kind, RG_F32), cs);
    done(c, cs);
  }
  free(x), free(y), free(w), free(want);
}

static void case_embed(conf_t *c) {
  const size_t vocab = 50, dim = 64, n = 6;
  int32_t ids[6] = {0, 49, 7, 7, 23, 1};
  for (size_t ti = 0; ti < 4; ti++) {
    rg_dtype_t tt = weight_types[ti];
    char cs[32];
    snprintf(cs, sizeof cs, "%s table", rg_dtype_name(tt));
    float *tab = rand_f32(c, vocab * dim, -1, 1), *wide = malloc(vocab * dim * 4),
          *want = malloc(n * dim * 4);
    void *tq = to_type(tt, tab, vocab * dim, wide);
    rg_status_free(rg_op_embed_ref(NULL, wide, RG_F32, vocab, ids, n, dim, want));
    int ok;
    rg_op_t op = {.kind = RG_OP_EMBED};
    op.embed = (rg_op_embed_t){in(c, "table", tq, rg_dtype_nbytes(tt, (int64_t)(vocab * dim), &ok)),
                               in(c, "ids", ids, sizeof ids),
                               out(c, "out", n * dim * 4),
                               tt,
                               (int64_t)vocab,
                               (int64_t)n,
                               (int64_t)dim};
    if (run(c, &op, cs)) {
      expect_f32(c, op.embed.out, want, n * dim, tolerance(RG_OP_EMBED, tt), cs);
      done(c, cs);
    }
    free(tab), free(wide), free(want), free(tq);
  }
}

static void case_add(conf_t *c) {
  const size_t n = 777;
  float *a = rand_f32(c, n, -1, 1), *b = rand_f32(c, n, -1, 1), *want = malloc(n * 4);
  rg_op_add_ref(NULL, a, b, want, n);
  rg_op_t op = {.kind = RG_OP_ADD};
  op.add.a = inout(c, "a", a, n * 4);
  op.add.b = in(c, "b", b, n * 4);
  op.add.out = op.add.a;  // the residual add, in place
  op.add.n = (int64_t)n;
  if (run(c, &op, "in place")) {
    expect_f32(c, op.add.out, want, n, tolerance(RG_OP_ADD, RG_F32), "in place");
    done(c, "in place");
  }
  free(a), free(b), free(want);
}

static void case_convert(conf_t *c) {
  const struct {
    rg_dtype_t from, to;
  } pairs[] = {{RG_F32, RG_BF16}, {RG_F32, RG_F16},  {RG_F32, RG_Q8_0}, {RG_BF16, RG_F32},
               {RG_F16, RG_F32},  {RG_Q8_0, RG_F32}, {RG_BF16, RG_F16}, {RG_F16, RG_Q8_0}};
  const size_t n = 32 * 40;
  for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
    char cs[48];
    snprintf(cs, sizeof cs, "%s -> %s", rg_dtype_name(pairs[i].from), rg_dtype_name(pairs[i].to));
    float *x = rand_f32(c, n, -100, 100), *wide = malloc(n * 4);
    x[0] = 0x1p-20f, x[1] = -0.0f, x[2] = 65504.0f;  // an f16 subnormal, signed zero, the f16 limit
    void *src = to_type(pairs[i].from, x, n, wide);
    int ok;
    size_t db = rg_dtype_nbytes(pairs[i].to, (int64_t)n, &ok),
           sb = rg_dtype_nbytes(pairs[i].from, (int64_t)n, &ok);
    void *want = malloc(db);
    rg_status_free(rg_dtype_from_f32(pairs[i].to, wide, want, (int64_t)n));
    rg_op_t op = {.kind = RG_OP_CONVERT};
    op.convert = (rg_op_convert_t){in(c, "src", src, sb), out(c, "dst", db), pairs[i].from,
                                   pairs[i].to, (int64_t)n};
    if (run(c, &op, cs)) {
      expect_bytes(c, op.convert.dst, want, db, cs);
      done(c, cs);
    }
    free(x), free(wide), free(src), free(want);
  }
}

static void case_sample(conf_t *c) {
  const size_t rows = 4, vocab = 500;
  rg_sampler_config_t cfg[4] = {
      {0, 0, 1, 0}, {0.8f, 40, 1, 0}, {1.0f, 0, 0.9f, 0}, {0.7f, 20, 0.5f, 0}};
  double u[4] = {0.3, 0.99, 0.5, 0.01};
  float *logits = rand_f32(c, rows * vocab, -5, 5);
  int32_t want[4], *si = malloc(vocab * 4);
  float *sp = malloc(vocab * 4);
  for (size_t r = 0; r < rows; r++)
    want[r] = rg_sample_draw_ref(&cfg[r], logits + r * vocab, vocab, u[r], si, sp);
  rg_op_t op = {.kind = RG_OP_SAMPLE};
  op.sample = (rg_op_sample_t){in(c, "logits", logits, rows * vocab * 4),
                               out(c, "out", sizeof want),
                               (int64_t)rows,
                               (int64_t)vocab,
                               cfg,
                               u};
  if (run(c, &op, "greedy, top-k, top-p")) {
    expect_bytes(c, op.sample.out, want, sizeof want, "greedy, top-k, top-p");
    done(c, "greedy, top-k, top-p");
  }
  free(logits), free(si), free(sp);
}

// Bad metadata never writes out of bounds; on a device whose memory the host
// sees it is an error naming what was wrong, with the output untouched.
static void bad_metadata(conf_t *c) {
  if (c->op != RG_OP_EMBED && c->op != RG_OP_ATTENTION) return;
  const char *cs = c->op == RG_OP_EMBED ? "an id past the vocabulary" : "a block past the pool";
  rg_op_t op = {.kind = c->op};
  float tab[8 * 32] = {0}, q[1 * 4 * 16] = {0};
  int32_t ids[2] = {3, 8}, seq[1] = {0}, pos[1] = {5}, off[2] = {0, 2}, table[2] = {0, 9};
  if (c->op == RG_OP_EMBED) {
    op.embed = (rg_op_embed_t){in(c, "table", tab, sizeof tab),
                               in(c, "ids", ids, sizeof ids),
                               out(c, "out", 2 * 32 * 4),
                               RG_F32,
                               8,
                               2,
                               32};
  } else {
    float pool[4 * 1 * 4 * 16] = {0};
    op.attention.kv = (rg_kv_ref_t){
        in(c, "kv.k", pool, sizeof pool), in(c, "kv.v", pool, sizeof pool), RG_F32, 4, 4, 1, 16};
    op.attention.meta = (rg_attn_meta_t){1,
                                         1,
                                         2,
                                         in(c, "meta.seq", seq, 4),
                                         in(c, "meta.pos", pos, 4),
                                         in(c, "meta.table_off", off, 8),
                                         in(c, "meta.table", table, 8)};
    op.attention.q = in(c, "q", q, sizeof q);
    op.attention.o = out(c, "o", sizeof q);
    op.attention.n_heads = 4;
  }
  rg_ref_t o = c->op == RG_OP_EMBED ? op.embed.out : op.attention.o;
  op.label = cs;
  rg_status_t s = rg_queue_submit(c->q, &op);
  if (!s) s = rg_queue_wait(c->q);
  int host_visible = rg_buffer_host_ptr(o.buf) != NULL;
  if (s && rg_status_code(s) == RG_UNIMPLEMENTED) {
    rg_status_free(s);
    release(c);
    return;
  }
  if (host_visible && !s)
    rg_test_fail(c->t, __FILE__, __LINE__, "%s: %s was accepted", rg_device_info(c->dev)->driver,
                 cs);
  if (s)
    printf("    %s:%d %s: refused: %s\n", rg_device_info(c->dev)->driver,
           rg_device_info(c->dev)->index, cs, rg_status_message(s));
  rg_status_free(s);
  unsigned char *got = fetch(c, o, cs);  // checks the guards
  if (got && host_visible)
    for (size_t i = 0; i < find(c, o)->bytes; i++)
      if (got[i] != SENTINEL) {
        rg_test_fail(c->t, __FILE__, __LINE__, "%s: %s: the output was written before the check",
                     cs, rg_device_info(c->dev)->driver);
        break;
      }
  free(got);
  release(c);
}

static void run_cases(conf_t *c) {
  switch (c->op) {
    case RG_OP_MATMUL:
      case_matmul(c);
      break;
    case RG_OP_RMSNORM:
      case_rmsnorm(c);
      break;
    case RG_OP_ROPE:
      case_rope(c);
      break;
    case RG_OP_SOFTMAX:
      case_softmax(c);
      break;
    case RG_OP_KV_WRITE:
      case_kv_write(c);
      break;
    case RG_OP_ATTENTION:
      case_attention(c);
      break;
    case RG_OP_SWIGLU:
      case_swiglu(c);
      break;
    case RG_OP_MOE_ROUTE:
      case_moe_route(c);
      break;
    case RG_OP_MOE_GROUP:
      case_moe_group(c);
      break;
    case RG_OP_MOE_GATHER:
      case_moe_gather_scatter(c, 0);
      break;
    case RG_OP_MOE_SCATTER_ADD:
      case_moe_gather_scatter(c, 1);
      break;
    case RG_OP_EMBED:
      case_embed(c);
      break;
    case RG_OP_ADD:
      case_add(c);
      break;
    case RG_OP_CONVERT:
      case_convert(c);
      break;
    case RG_OP_SAMPLE:
      case_sample(c);
      break;
    default:
      break;
  }
  bad_metadata(c);
}

// ----- One test per (driver, op) ------------------------------------------------

typedef struct {
  char name[64];
  const char *driver;
  rg_op_kind_t op;
} conf_test_t;

static const char *const drivers[] = {"cpu", "opencl", "cuda", "hip", "level_zero"};
static conf_test_t conf_tests[sizeof drivers / sizeof drivers[0]][RG_OP_COUNT];

static void conformance(rg_test_ctx_t *t) {
  const conf_test_t *ct = rg_test_arg(t);
  rg_device_t *dev = NULL;
  rg_status_t s = rg_device_open(ct->driver, 0, NULL, &dev);
  if (s) {
    char why[300];
    snprintf(why, sizeof why, "no %s device: %s", ct->driver, rg_status_message(s));
    rg_status_free(s);
    RG_SKIP(why);
  }
  if (!rg_device_supports_op(dev, ct->op)) {
    char why[300];
    snprintf(why, sizeof why, "%s:0 (%s) has no %s kernel", ct->driver, rg_device_info(dev)->name,
             rg_op_name(ct->op));
    rg_device_close(dev);
    RG_SKIP(why);
  }
  conf_t c = {.t = t, .dev = dev, .op = ct->op, .rng = 0x1234 + (uint64_t)ct->op};
  s = rg_queue_create(dev, &c.q);
  if (s) {
    rg_test_fail(t, __FILE__, __LINE__, "queue: %s", rg_status_message(s));
    rg_status_free(s);
    rg_device_close(dev);
    return;
  }
  run_cases(&c);
  rg_queue_destroy(c.q);
  rg_device_close(dev);
  if (c.skipped_cases) {
    char why[700];
    snprintf(why, sizeof why, "%d of %d cases refused (%s)", c.skipped_cases,
             c.ran + c.skipped_cases, c.skipped);
    RG_SKIP(why);
  }
  RG_CHECK(c.ran > 0);
}

__attribute__((constructor)) static void register_conformance(void) {
  for (size_t d = 0; d < sizeof drivers / sizeof drivers[0]; d++)
    for (int op = 0; op < RG_OP_COUNT; op++) {
      conf_test_t *ct = &conf_tests[d][op];
      snprintf(ct->name, sizeof ct->name, "conformance_%s_%s", drivers[d],
               rg_op_name((rg_op_kind_t)op));
      ct->driver = drivers[d];
      ct->op = (rg_op_kind_t)op;
      rg_test_register_arg(ct->name, __FILE__, conformance, ct);
    }
}

// The null backend runs no op, and says so for every one.
RG_TEST(conformance_null_refuses_every_op_by_name) {
  rg_device_t *dev;
  rg_queue_t *q;
  RG_REQUIRE_OK(rg_device_open("null", 0, NULL, &dev));
  RG_REQUIRE_OK(rg_queue_create(dev, &q));
  rg_buffer_t *b;
  RG_REQUIRE_OK(rg_buffer_alloc(dev, 4096, &b));
  rg_op_t op = {.kind = RG_OP_ADD, .add = {{b, 0}, {b, 0}, {b, 0}, 16}};
  RG_CHECK_ERR(rg_queue_submit(q, &op), "null:0 has no add kernel (the null backend runs no ops)");
  for (int k = 0; k < RG_OP_COUNT; k++) RG_CHECK(!rg_device_supports_op(dev, (rg_op_kind_t)k));
  rg_buffer_release(b);
  rg_queue_destroy(q);
  rg_device_close(dev);
}

// The queue's own checks, before any backend: ranges, devices, shapes.
RG_TEST(conformance_queue_checks_operands_first) {
  rg_device_t *cpu, *null;
  rg_queue_t *q;
  RG_REQUIRE_OK(rg_device_open("cpu", 0, NULL, &cpu));
  RG_REQUIRE_OK(rg_device_open("null", 0, NULL, &null));
  RG_REQUIRE_OK(rg_queue_create(cpu, &q));
  rg_buffer_t *small, *other;
  RG_REQUIRE_OK(rg_buffer_alloc(cpu, 64, &small));
  RG_REQUIRE_OK(rg_buffer_alloc(null, 4096, &other));
  rg_op_t op = {.kind = RG_OP_ADD,
                .label = "layer 0 residual",
                .add = {{small, 0}, {small, 0}, {small, 0}, 32}};
  RG_CHECK_ERR(rg_queue_submit(q, &op),
               "add layer 0 residual on cpu:0: operand a needs 128 bytes at offset 0 but its "
               "buffer holds 64");
  op.add.b = (rg_ref_t){other, 0};
  op.add.n = 8;
  RG_CHECK_ERR(rg_queue_submit(q, &op), "operand b is a buffer of null:0; copy it to cpu:0 first");
  op.add.b = (rg_ref_t){NULL, 0};
  RG_CHECK_ERR(rg_queue_submit(q, &op), "operand b has no buffer");
  rg_op_t mm = {.kind = RG_OP_MATMUL,
                .matmul = {{small, 0}, {small, 0}, {NULL, 0}, {small, 0}, RG_Q8_0, 1, 1, 16, 0}};
  RG_CHECK_ERR(rg_queue_submit(q, &mm), "16 q8_0 elements are not whole blocks of 32");
  mm.matmul.wtype = RG_FP8, mm.matmul.k = 4;
  RG_CHECK_ERR(rg_queue_submit(q, &mm), "cpu:0 has no matmul kernel for fp8");
  rg_op_t rope = {.kind = RG_OP_ROPE, .rope = {{small, 0}, {small, 0}, {small, 0}, 1, 1, 3}};
  RG_CHECK_ERR(rg_queue_submit(q, &rope), "rope: head_dim must be even, not 3");
  rg_buffer_release(small);
  rg_buffer_release(other);
  rg_queue_destroy(q);
  rg_device_close(null);
  rg_device_close(cpu);
}

// Copies across devices and events, on what is present.
RG_TEST(conformance_copies_and_events) {
  rg_device_t *cpu, *null;
  rg_queue_t *q;
  RG_REQUIRE_OK(rg_device_open("cpu", 0, NULL, &cpu));
  RG_REQUIRE_OK(rg_device_open("null", 0, NULL, &null));
  RG_REQUIRE_OK(rg_queue_create(cpu, &q));
  rg_buffer_t *a, *b;
  RG_REQUIRE_OK(rg_buffer_alloc(cpu, 256, &a));
  RG_REQUIRE_OK(rg_buffer_alloc(null, 256, &b));
  unsigned char src[256], back[256];
  for (int i = 0; i < 256; i++) src[i] = (unsigned char)(i * 13);
  RG_CHECK_OK(rg_queue_write(q, a, 0, src, 256));
  RG_CHECK_OK(rg_queue_copy(q, b, 16, a, 0, 200));  // cpu -> null, staged through host pointers
  RG_CHECK_OK(rg_buffer_read(b, 16, back, 200));
  RG_CHECK(!memcmp(back, src, 200));
  RG_CHECK_ERR(rg_queue_copy(q, b, 100, a, 0, 200),
               "copy destination of 200 bytes at offset 100 runs past the end");
  RG_CHECK_ERR(rg_queue_read(q, b, 0, back, 8),
               "queue read on cpu:0: the buffer belongs to null:0");
  rg_event_t *ev;
  RG_REQUIRE_OK(rg_queue_record(q, &ev));
  RG_CHECK(rg_event_done(ev));
  RG_CHECK_OK(rg_event_wait(ev, 0.0));
  RG_CHECK_OK(rg_queue_wait_event(q, ev));
  rg_event_release(ev);
  // Wrapped host memory runs in place.
  float mem[4] = {1, 2, 3, 4};
  rg_buffer_t *w;
  RG_REQUIRE_OK(rg_buffer_wrap(cpu, mem, sizeof mem, NULL, NULL, &w));
  rg_op_t op = {.kind = RG_OP_ADD, .add = {{w, 0}, {w, 0}, {w, 0}, 4}};
  RG_CHECK_OK(rg_queue_submit(q, &op));
  RG_CHECK(mem[0] == 2 && mem[3] == 8);
  rg_buffer_release(w);
  RG_CHECK_ERR(rg_buffer_wrap(null, mem, sizeof mem, NULL, NULL, &w),
               "null:0 cannot use host memory in place");
  rg_buffer_release(a);
  rg_buffer_release(b);
  rg_queue_destroy(q);
  rg_device_close(null);
  rg_device_close(cpu);
}
