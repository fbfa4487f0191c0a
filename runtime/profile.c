// runtime/profile.c — measuring a device and deriving its calibrated class
// (see profile.h for what is measured and how the class figures follow).
#include "runtime/profile.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/units.h"
#include "devices/cuda/cuda_bench.h"
#include "devices/opencl/opencl_profile.h"
#include "graphs/weights.h"
#include "ops/matmul.h"
#include "runtime/engine.h"
#include "runtime/limits.h"
#include "runtime/serve.h"

static const rg_dtype_t profile_dtypes[] = {
#define RG_X_(w, c) w,
    RG_PROFILE_DTYPE_MAP(RG_X_)
#undef RG_X_
};
static const rg_dtype_t profile_compute[] = {
#define RG_X_(w, c) c,
    RG_PROFILE_DTYPE_MAP(RG_X_)
#undef RG_X_
};
_Static_assert(sizeof profile_dtypes / sizeof profile_dtypes[0] == RG_PROFILE_DTYPES,
               "RG_PROFILE_DTYPES counts RG_PROFILE_DTYPE_MAP");
_Static_assert(RG_PROFILE_MAX_M <= RG_EFF_POINTS, "a curve the loader can read");

// How much work each part gets. The full profile is sized to take under a
// minute on two shared cores; quick to take a few seconds there (under
// AddressSanitizer too), at the cost of fewer points and buffers that a
// large last-level cache may partly hold.
typedef struct {
  int n_m;
  int64_t m[RG_PROFILE_MAX_M];
  int n_shapes;         // the layer's matrices measured: 7 (all) or 4 (attention's)
  size_t footprint;     // weights cycled through at least this many bytes
  double point_s;       // seconds of matmuls per (type, M) point
  double limits_s;      // runtime/limits.h's budget
  size_t stream_bytes;  // read and write buffers
  size_t copy_bytes;    // copies within the device and with the host
  int reps;
  int n_ctx;
  int64_t ctx[RG_PROFILE_MAX_CTX];
  int attn_seqs;
  int launch_ops;
  int64_t gemm;  // cuBLAS peak GEMM edge
} plan_t;

static const plan_t full_plan = {
    .n_m = 8,
    .m = {1, 4, 8, 16, 64, 256, 1024, 4096},
    .n_shapes = 7,
    .footprint = (size_t)256 << 20,
    .point_s = 0.25,
    .limits_s = 0.5,
    .stream_bytes = (size_t)256 << 20,
    .copy_bytes = (size_t)256 << 20,
    .reps = 4,
    .n_ctx = 5,
    .ctx = {128, 256, 1024, 4096, 16384},
    .attn_seqs = 4,
    .launch_ops = 2000,
    .gemm = 8192,
};

static const plan_t quick_plan = {
    .n_m = 5,
    .m = {1, 4, 8, 16, 256},
    .n_shapes = 7,
    .footprint = (size_t)64 << 20,
    .point_s = 0.02,
    .limits_s = 0.1,
    .stream_bytes = (size_t)64 << 20,
    .copy_bytes = (size_t)32 << 20,
    .reps = 2,
    .n_ctx = 3,
    .ctx = {128, 512, 4096},
    .attn_seqs = 2,
    .launch_ops = 200,
    .gemm = 4096,
};

typedef struct {
  rg_device_t *dev;
  const rg_profile_options_t *o;
  const plan_t *p;
  rg_profile_result_t *r;
  int step, total;
  enum { DRV_OTHER, DRV_CPU, DRV_OPENCL, DRV_CUDA } drv;
  size_t footprint;  // the plan's, or more where the host's cache is larger
  // Weights the decode points (M <= RG_PROFILE_MEM_MAX_M) cycle through:
  // the footprint, or past the host's cache in a quick profile too.
  size_t mem_footprint;
  int host_memory;  // the device computes in the host's memory and caches (CPU, PoCL)
} prof_t;

static void progress(prof_t *P, const char *fmt, ...) RG_PRINTF(2, 3);
static void progress(prof_t *P, const char *fmt, ...) {
  P->step++;
  if (!P->o->progress) return;
  char what[128];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  P->o->progress(P->o->progress_ctx, P->step, P->total, what);
}

// Control characters become spaces: the text goes into YAML comments,
// where a newline would end the comment.
static void one_line(char *s) {
  for (; *s; s++)
    if ((unsigned char)*s < 0x20) *s = ' ';
}

// A measurement that failed for a reason of the device (it lacks the op, the
// memory) is recorded as a skip with that reason; the profile goes on.
static void skip(char *reason, size_t len, rg_status_t s) {
  snprintf(reason, len, "%s", rg_status_message(s));
  one_line(reason);
  rg_status_free(s);
}

static void bw_set(rg_profile_bw_t *b, double rate, const char *how_fmt, ...) RG_PRINTF(3, 4);
static void bw_set(rg_profile_bw_t *b, double rate, const char *how_fmt, ...) {
  b->rate = rate;
  va_list ap;
  va_start(ap, how_fmt);
  vsnprintf(b->how, sizeof b->how, how_fmt, ap);
  va_end(ap);
}

static void bw_skip(rg_profile_bw_t *b, rg_status_t s) {
  b->rate = 0;
  skip(b->reason, sizeof b->reason, s);
}

static const char *mib(size_t bytes, char *buf, size_t len) {
  return rg_fmt_bytes_iec((double)bytes, buf, len);
}

void rg_profile_class_from(const rg_device_class_t *c, rg_profile_class_t *out) {
  memset(out, 0, sizeof(*out));
  const rg_device_class_t *d = c->calibrated && c->datasheet ? c->datasheet : c;
  snprintf(out->name, sizeof out->name, "%s", d->name);
  snprintf(out->path, sizeof out->path, "%s", d->path);
  for (int t = 0; t < RG_DTYPE_COMPUTE_COUNT; t++) out->peak[t] = d->peak[t];
  if (d->n_mem > 0) {
    snprintf(out->tier, sizeof out->tier, "%s", d->mem[0].name);
    out->bandwidth = d->mem[0].bandwidth;
  }
}

// ----- Limits: read bandwidth and matrix peaks -----------------------------------------

// The limits are measured before the sweep and again after it, and the
// higher figure kept (`again`): on a shared machine one measurement can land
// in another job's burst and read low, which would make every fraction of it
// read high.
static rg_status_t cpu_limits(prof_t *P, int again) {
  rg_profile_result_t *r = P->r;
  rg_limits_t l;
  RG_RETURN_IF_ERROR(rg_limits_measure(rg_device_cpu_pool(P->dev), P->p->limits_s, &l));
  if (l.read_bandwidth > r->read.rate)
    bw_set(&r->read, l.read_bandwidth, "runtime/limits.h: a streaming sum over 256 MiB%s",
           again ? ", best of two" : "");
  for (int i = 0; i < RG_PROFILE_DTYPES; i++) {
    rg_profile_matmul_t *mm = &r->matmul[i];
    const char *path = NULL;
    double peak = rg_limits_matrix_peak(&l, mm->dtype, RG_CPU_ISA_AUTO, &path);
    if (peak <= mm->peak) continue;
    mm->peak = peak;
    snprintf(mm->peak_path, sizeof mm->peak_path, "%s%s%s", path,
             !strcmp(path, "f32 fma") ? ", " : "", !strcmp(path, "f32 fma") ? l.fma_isa : "");
  }
  return NULL;
}

static rg_status_t opencl_limits(prof_t *P, int again) {
  rg_profile_result_t *r = P->r;
  rg_opencl_measure_t m;
  char b[32];
  rg_status_t s = rg_opencl_measure_read(P->dev, P->p->stream_bytes, P->p->reps, &m);
  if (s && !again)
    bw_skip(&r->read, s);
  else if (s)
    rg_status_free(s);
  else if (m.rate > r->read.rate)
    bw_set(&r->read, m.rate, "OpenCL streaming-read kernel over %s%s",
           mib((size_t)m.work, b, sizeof b), again ? ", best of two" : "");
  if (again) return NULL;
  s = rg_opencl_measure_fma(P->dev, P->p->reps, &m);
  for (int i = 0; i < RG_PROFILE_DTYPES; i++) {
    rg_profile_matmul_t *mm = &r->matmul[i];
    // The kernels widen every weight type to f32, so one peak bounds all.
    mm->peak = s ? 0 : m.rate;
    snprintf(mm->peak_path, sizeof mm->peak_path, "OpenCL f32 multiply-add kernel");
  }
  if (s) {
    char why[200];
    skip(why, sizeof why, s);
    for (int i = 0; i < RG_PROFILE_DTYPES; i++)
      snprintf(r->matmul[i].peak_path, sizeof r->matmul[i].peak_path, "none: %.150s", why);
  }
  return NULL;
}

// CUDA: ridge's streaming kernel over a buffer, ten reads a pass; cuBLAS
// GEMMs at a large square shape for the f32, bf16 and f16 peaks.
static rg_status_t cuda_limits(prof_t *P, int again) {
  rg_profile_result_t *r = P->r;
  rg_buffer_t *src = NULL, *sink = NULL, *a = NULL, *w = NULL, *y = NULL;
  rg_queue_t *q = NULL;
  size_t bytes = P->p->stream_bytes * 4;  // HBM: a larger buffer for a steady figure
  rg_status_t s = rg_queue_create(P->dev, &q);
  if (!s) s = rg_buffer_alloc(P->dev, bytes, &src);
  if (!s) s = rg_buffer_alloc(P->dev, 256, &sink);
  double best = 0;
  for (int rep = -1; rep < P->p->reps && !s; rep++) {
    double t0 = rg_clock_now();
    for (int i = 0; i < 10 && !s; i++) s = rg__cuda_stream_read(q, src, sink);
    if (!s) s = rg_queue_wait(q);
    double rate = 10.0 * (double)bytes / (rg_clock_now() - t0);
    if (rep >= 0 && rate > best) best = rate;
  }
  char b[32];
  if (s && !again)
    bw_skip(&r->read, s);
  else if (s)
    rg_status_free(s);
  else if (best > r->read.rate)
    bw_set(&r->read, best, "ridge's CUDA streaming kernel over %s%s", mib(bytes, b, sizeof b),
           again ? ", best of two" : "");
  rg_buffer_release(src);
  src = NULL;
  const int64_t G = P->p->gemm;
  // The peaks: a failure to allocate their operands leaves them unmeasured
  // (the curves then divide by the sweep's best), not the profile failed.
  s = again ? rg_status_make(RG_UNAVAILABLE, "measured once")
            : rg_buffer_alloc(P->dev, (size_t)(G * G * 4), &a);
  if (!s) s = rg_buffer_alloc(P->dev, (size_t)(G * G * 4), &w);
  if (!s) s = rg_buffer_alloc(P->dev, (size_t)(G * G * 4), &y);
  // Zeros: finite in every type, and cuBLAS's rate does not depend on them.
  if (!s) {
    void *z = calloc(1, (size_t)(G * G * 4));
    s = z ? rg_buffer_write(a, 0, z, (size_t)(G * G * 4))
          : rg_status_make(RG_OUT_OF_MEMORY, "no host memory for the GEMM operands");
    if (!s) s = rg_buffer_write(w, 0, z, (size_t)(G * G * 4));
    free(z);
  }
  for (int i = 0; i < RG_PROFILE_DTYPES && !s; i++) {
    rg_profile_matmul_t *mm = &r->matmul[i];
    if (mm->dtype == RG_Q8_0) {
      snprintf(mm->peak_path, sizeof mm->peak_path, "none: cuBLAS has no q8_0 GEMM");
      continue;
    }
    double peak = 0;
    rg_status_t g = NULL;
    for (int rep = -1; rep < P->p->reps && !g; rep++) {
      double t0 = rg_clock_now();
      g = rg__cuda_blas_gemm(q, mm->dtype, a, w, y, G, G, G);
      if (!g) g = rg_queue_wait(q);
      double f = 2.0 * (double)G * G * G / (rg_clock_now() - t0);
      if (!g && rep >= 0 && f > peak) peak = f;
    }
    if (g) {
      char why[200];
      skip(why, sizeof why, g);
      snprintf(mm->peak_path, sizeof mm->peak_path, "none: %.150s", why);
    } else {
      mm->peak = peak;
      snprintf(mm->peak_path, sizeof mm->peak_path, "cuBLAS %s GEMM %lld^3",
               rg_dtype_name(mm->dtype), (long long)G);
    }
  }
  rg_buffer_release(y);
  rg_buffer_release(w);
  rg_buffer_release(a);
  rg_buffer_release(sink);
  rg_buffer_release(src);
  rg_queue_destroy(q);
  rg_status_free(s);
  return NULL;
}

static rg_status_t limits(prof_t *P, int again) {
  switch (P->drv) {
    case DRV_CPU:
      return cpu_limits(P, again);
    case DRV_OPENCL:
      return opencl_limits(P, again);
    case DRV_CUDA:
      return cuda_limits(P, again);
    default:
      snprintf(P->r->read.reason, sizeof P->r->read.reason,
               "%s has no streaming-read kernel ridge knows of", P->r->device);
      return NULL;
  }
}

// ----- Write bandwidth -------------------------------------------------------------------

typedef struct {
  uint8_t *p;
  size_t chunk, bytes;
  int value;
} fill_ctx_t;

static void fill_range(void *ctx, size_t b, size_t e, int thread) {
  (void)thread;
  const fill_ctx_t *c = ctx;
  for (size_t i = b; i < e; i++) {
    size_t off = i * c->chunk, len = c->bytes - off < c->chunk ? c->bytes - off : c->chunk;
    memset(c->p + off, c->value, len);
  }
}

// The CPU: every thread of its pool storing 1 MiB chunks (memset streams
// large stores past the cache).
static rg_status_t cpu_write(prof_t *P, double *out) {
  size_t bytes = P->p->stream_bytes;
  rg_buffer_t *buf = NULL;
  rg_queue_t *q = NULL;
  rg_status_t s = rg_buffer_alloc(P->dev, bytes, &buf);
  if (!s) s = rg_queue_create(P->dev, &q);
  fill_ctx_t c = {buf ? rg_buffer_host_ptr(buf) : NULL, (size_t)1 << 20, bytes, 0};
  size_t chunks = (bytes + c.chunk - 1) / c.chunk;
  double best = 0;
  for (int rep = -1; rep < P->p->reps && !s; rep++) {
    c.value = rep & 0x7f;
    double t0 = rg_clock_now();
    s = rg_queue_parallel_for(q, chunks, 1, fill_range, &c);
    if (!s) s = rg_queue_wait(q);
    double rate = (double)bytes / (rg_clock_now() - t0);
    if (rep >= 0 && rate > best) best = rate;  // pass -1 faults the pages in
  }
  rg_queue_destroy(q);
  rg_buffer_release(buf);
  *out = best;
  return s;
}

// Any other device: the HAL's embed op copying one row of a small table
// (which stays in cache) into every row of a large output, so what crosses
// memory is almost all writes.
static rg_status_t embed_write(prof_t *P, double *out) {
  const int64_t vocab = 16, dim = 4096;
  int64_t n = (int64_t)(P->p->stream_bytes / (size_t)(dim * 4));
  rg_buffer_t *table = NULL, *ids = NULL, *o = NULL;
  rg_queue_t *q = NULL;
  void *zeros = calloc(
      1, (size_t)(vocab * dim * 4) > (size_t)n * 4 ? (size_t)(vocab * dim * 4) : (size_t)n * 4);
  rg_status_t s = zeros ? NULL : rg_status_make(RG_OUT_OF_MEMORY, "no host memory");
  if (!s) s = rg_buffer_alloc(P->dev, (size_t)(vocab * dim * 4), &table);
  if (!s) s = rg_buffer_alloc(P->dev, (size_t)n * 4, &ids);
  if (!s) s = rg_buffer_alloc(P->dev, (size_t)(n * dim * 4), &o);
  if (!s) s = rg_buffer_write(table, 0, zeros, (size_t)(vocab * dim * 4));
  if (!s) s = rg_buffer_write(ids, 0, zeros, (size_t)n * 4);
  if (!s) s = rg_queue_create(P->dev, &q);
  rg_op_t op = {.kind = RG_OP_EMBED, .label = "profile write"};
  op.embed = (rg_op_embed_t){{table, 0}, {ids, 0}, {o, 0}, RG_F32, vocab, n, dim};
  double best = 0;
  for (int rep = -1; rep < P->p->reps && !s; rep++) {
    double t0 = rg_clock_now();
    s = rg_queue_submit(q, &op);
    if (!s) s = rg_queue_wait(q);
    double rate = (double)(n * dim * 4) / (rg_clock_now() - t0);
    if (rep >= 0 && rate > best) best = rate;
  }
  rg_queue_destroy(q);
  rg_buffer_release(o);
  rg_buffer_release(ids);
  rg_buffer_release(table);
  free(zeros);
  *out = best;
  return s;
}

static void measure_write(prof_t *P) {
  rg_profile_result_t *r = P->r;
  char b[32];
  mib(P->p->stream_bytes, b, sizeof b);
  double rate = 0;
  rg_status_t s;
  if (P->drv == DRV_CPU) {
    s = cpu_write(P, &rate);
    if (!s) bw_set(&r->write, rate, "every thread storing 1 MiB chunks of %s", b);
  } else if (P->drv == DRV_OPENCL) {
    rg_opencl_measure_t m;
    s = rg_opencl_measure_write(P->dev, P->p->stream_bytes, P->p->reps, &m);
    if (!s) bw_set(&r->write, m.rate, "OpenCL streaming-write kernel over %s", b);
  } else {
    s = embed_write(P, &rate);
    if (!s) bw_set(&r->write, rate, "the embed op broadcasting a cached row into %s", b);
  }
  if (s) bw_skip(&r->write, s);
}

// ----- Copies, launch cost, attention ----------------------------------------------------

static void measure_copies(prof_t *P) {
  rg_profile_result_t *r = P->r;
  char b[32];
  mib(P->p->copy_bytes, b, sizeof b);
  rg_opencl_measure_t m;
  progress(P, "copy within the device (%s)", b);
  rg_status_t s = rg_opencl_measure_copy(P->dev, P->p->copy_bytes, P->p->reps, &m);
  if (s)
    bw_skip(&r->copy, s);
  else
    bw_set(&r->copy, m.rate, "rg_queue_copy of %s (bytes copied per second)", b);
  progress(P, "host -> device (%s)", b);
  s = rg_opencl_measure_host_copy(P->dev, P->p->copy_bytes, 1, P->p->reps, &m);
  if (s)
    bw_skip(&r->to_device, s);
  else
    bw_set(&r->to_device, m.rate, "rg_buffer_write of %s", b);
  progress(P, "device -> host (%s)", b);
  s = rg_opencl_measure_host_copy(P->dev, P->p->copy_bytes, 0, P->p->reps, &m);
  if (s)
    bw_skip(&r->to_host, s);
  else
    bw_set(&r->to_host, m.rate, "rg_buffer_read of %s", b);
}

static void measure_launch(prof_t *P) {
  rg_profile_result_t *r = P->r;
  progress(P, "per-op cost (%d small ops)", P->p->launch_ops);
  rg_op_t add = {.kind = RG_OP_ADD, .add = {.n = 16}};
  rg_status_t s = rg_device_check_op(P->dev, &add);
  if (!s) s = rg_opencl_measure_launch(P->dev, P->p->launch_ops, &r->launch);
  if (s) {
    r->launch = 0;
    skip(r->launch_reason, sizeof r->launch_reason, s);
  }
}

// The prompt the prefill attention is measured on: long enough that its
// multiplies, not each tile's fixed work, decide the rate (on the 1b model's
// shapes a Zen 4 VM ran 130 GFLOP/s at 500 tokens, 175-180 from 1500).
enum { ATTN_PREFILL_TOKENS = 1024 };

static void measure_attention(prof_t *P) {
  rg_profile_result_t *r = P->r;
  r->kv = RG_BF16;
  r->attn_seqs = P->p->attn_seqs;
  // No probe first: a device without the kernel says so from the
  // measurement's own submit, which becomes the reason.
  rg_status_t s = NULL;
  for (int i = 0; i < P->p->n_ctx; i++) {
    progress(P, "attention, %lld positions of %s KV", (long long)P->p->ctx[i],
             rg_dtype_name(r->kv));
    if (s) continue;
    rg_opencl_measure_t m;
    s = rg_opencl_measure_attention(P->dev, r->kv, P->p->attn_seqs, P->p->ctx[i], r->n_heads,
                                    r->n_kv_heads, r->head_dim, P->p->reps, &m);
    if (s) continue;
    r->ctx[r->n_ctx] = P->p->ctx[i];
    r->attn_rate[r->n_ctx++] = m.rate;
  }
  if (s) skip(r->attn_reason, sizeof r->attn_reason, s);
  // A prompt's attention, whose multiplies the planner prices apart from
  // the matmuls' (a CPU's runs at a fraction of their rate).
  r->attn_prefill_tokens = ATTN_PREFILL_TOKENS;
  progress(P, "attention, a %lld-token prompt", (long long)r->attn_prefill_tokens);
  rg_opencl_measure_t m;
  s = rg_opencl_measure_attention_prefill(P->dev, r->kv, r->attn_prefill_tokens, r->n_heads,
                                          r->n_kv_heads, r->head_dim, P->p->reps, &m);
  if (s)
    skip(r->attn_prefill_reason, sizeof r->attn_prefill_reason, s);
  else
    r->attn_prefill_rate = m.rate;
}

// ----- Matmul sweep ---------------------------------------------------------------------

typedef struct {
  const char *name;
  int64_t n, k;  // W (n, k)
} shape_t;

// One layer's matrices in the order the engine runs them (runtime/stage.c):
// the attention projections first, so the quick profile's first four are a
// layer's attention.
static void layer_shapes(const rg_profile_result_t *r, shape_t out[7]) {
  int64_t d = r->d_model, q = r->n_heads * r->head_dim, kv = r->n_kv_heads * r->head_dim,
          ff = r->d_ff;
  out[0] = (shape_t){"q", q, d};
  out[1] = (shape_t){"k", kv, d};
  out[2] = (shape_t){"v", kv, d};
  out[3] = (shape_t){"o", d, q};
  out[4] = (shape_t){"gate", ff, d};
  out[5] = (shape_t){"up", ff, d};
  out[6] = (shape_t){"down", d, ff};
}

#define MAX_COPIES 64

typedef struct {
  rg_buffer_t *w[MAX_COPIES][7];
  size_t wbytes[7];
  int copies;  // copies allocated, spanning the decode points' footprint
  int small;   // of which the first `small` span the plan's (points past M = 16)
  int layout;  // as the device asked for them (rg_device_weight_layout), as stages load them
  rg_buffer_t *x, *y;
} weights_t;

static void weights_free(weights_t *W) {
  for (int c = 0; c < MAX_COPIES; c++)
    for (int i = 0; i < 7; i++) rg_buffer_release(W->w[c][i]);
  rg_buffer_release(W->x);
  rg_buffer_release(W->y);
  memset(W, 0, sizeof(*W));
}

// Uploads the layer's matrices in type t (one host conversion per shape),
// then copies them on the device until the set spans the footprint: at
// small M a matmul streams its weights, and they must come from memory as a
// model's layers do, not from a cache that holds one layer.
// Copies of a layer of `set` bytes that span `footprint`: at least 1, at
// most `max`.
static int copies_for(size_t footprint, size_t set, int max) {
  size_t n = set ? (footprint + set - 1) / set : 1;
  return n < 1 ? 1 : n > (size_t)max ? max : (int)n;
}

static rg_status_t weights_init(prof_t *P, rg_queue_t *q, rg_dtype_t t, const shape_t *sh, int n_sh,
                                weights_t *W) {
  memset(W, 0, sizeof(*W));
  int64_t most = 0, most_k = 0, most_n = 0;
  for (int i = 0; i < n_sh; i++) {
    if (sh[i].n * sh[i].k > most) most = sh[i].n * sh[i].k;
    if (sh[i].k > most_k) most_k = sh[i].k;
    if (sh[i].n > most_n) most_n = sh[i].n;
  }
  int64_t mmax = P->p->m[P->p->n_m - 1];
  float *host = malloc((size_t)most * sizeof(float));
  void *packed = malloc((size_t)most * sizeof(float));
  rg_status_t s =
      host && packed
          ? NULL
          : rg_status_make(RG_OUT_OF_MEMORY, "no host memory for %lld weights", (long long)most);
  // Ordinary values, no denormals, so no path runs slow on them.
  uint64_t seed = 0x9e3779b97f4a7c15ull;
  for (int64_t i = 0; !s && i < most; i++) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    host[i] = (float)((double)(seed >> 40) / (double)(1 << 24) - 0.5);
  }
  size_t set = 0;
  // Laid out as a stage loads them: the matmuls measured are the ones a
  // run makes.
  W->layout = rg_device_weight_layout(P->dev, t);
  void *laid = NULL;
  for (int i = 0; i < n_sh && !s; i++) {
    int ok = 0;
    W->wbytes[i] = (size_t)rg_dtype_nbytes(t, sh[i].n * sh[i].k, &ok);
    s = rg_dtype_from_f32(t, host, packed, sh[i].n * sh[i].k);
    const void *src = packed;
    if (!s && W->layout) {
      rg_wmat_t rows = {packed, t, sh[i].n, sh[i].k, RG_WLAYOUT_ROWS};
      W->wbytes[i] = rg_matmul_layout_bytes((rg_wlayout_t)W->layout, t, sh[i].n, sh[i].k);
      free(laid);
      laid = aligned_alloc(64, (W->wbytes[i] + 63) / 64 * 64);
      s = laid ? rg_matmul_relayout(NULL, &rows, (rg_wlayout_t)W->layout, laid)
               : rg_status_make(RG_OUT_OF_MEMORY, "no host memory to pack %s weights",
                                rg_dtype_name(t));
      src = laid;
    }
    if (!s) s = rg_buffer_alloc(P->dev, W->wbytes[i], &W->w[0][i]);
    if (!s) s = rg_buffer_write(W->w[0][i], 0, src, W->wbytes[i]);
    set += W->wbytes[i];
  }
  free(laid);
  W->copies = copies_for(P->mem_footprint, set, MAX_COPIES);
  W->small = copies_for(P->footprint, set, W->copies);
  for (int c = 1; c < W->copies && !s; c++)
    for (int i = 0; i < n_sh && !s; i++) {
      s = rg_buffer_alloc(P->dev, W->wbytes[i], &W->w[c][i]);
      if (!s) s = rg_queue_copy(q, W->w[c][i], 0, W->w[0][i], 0, W->wbytes[i]);
    }
  if (!s) s = rg_buffer_alloc(P->dev, (size_t)(mmax * most_k) * sizeof(float), &W->x);
  if (!s) s = rg_buffer_alloc(P->dev, (size_t)(mmax * most_n) * sizeof(float), &W->y);
  // x: the same ordinary values, a prefix of them repeated.
  for (int64_t off = 0; !s && off < mmax * most_k; off += most) {
    int64_t len = mmax * most_k - off < most ? mmax * most_k - off : most;
    s = rg_buffer_write(W->x, (size_t)off * sizeof(float), host, (size_t)len * sizeof(float));
  }
  if (!s) s = rg_queue_wait(q);
  free(packed);
  free(host);
  if (s) weights_free(W);
  return s;
}

static rg_op_t matmul_op(const weights_t *W, int c, int i, const shape_t *sh, rg_dtype_t t,
                         int64_t m) {
  rg_op_t op = {.kind = RG_OP_MATMUL, .label = "profile matmul"};
  op.matmul = (rg_op_matmul_t){{W->x, 0}, {W->w[c][i], 0}, {NULL, 0}, {W->y, 0}, t,
                               m,         sh[i].n,         sh[i].k,   W->layout};
  return op;
}

// Submits the ops of rounds [from, to) — a round is the layer's matrices of
// one copy, in turn — and adds their work, then waits. With `budget` > 0 (a
// first pass, whose length is not known yet) it stops after the op that
// passes the budget (a slow device at large M), and waits after each round,
// so a queue that runs ahead of the host (a GPU) holds at most a layer when
// time is up; *out_done says whether all rounds ran. Without, the rounds
// go back to back and only the end is waited for: a GPU streams one layer
// at m = 1 in tens of microseconds, about what a wait costs.
static rg_status_t run_rounds(rg_queue_t *q, const weights_t *W, int copies, const shape_t *sh,
                              int n_sh, rg_dtype_t t, int64_t m, long from, long to, double t0,
                              double budget, double *flops, double *bytes, int *out_done) {
  *out_done = 0;
  for (long rd = from; rd < to; rd++)
    for (int i = 0; i < n_sh; i++) {
      rg_op_t op = matmul_op(W, (int)(rd % copies), i, sh, t, m);
      RG_RETURN_IF_ERROR(rg_queue_submit(q, &op));
      *flops += 2.0 * (double)m * (double)sh[i].n * (double)sh[i].k;
      *bytes += (double)W->wbytes[i];
      if (budget <= 0) continue;
      if (i == n_sh - 1) RG_RETURN_IF_ERROR(rg_queue_wait(q));
      if (rg_clock_now() - t0 >= budget) return rg_queue_wait(q);
    }
  *out_done = 1;
  return rg_queue_wait(q);
}

// One (type, M) point. One untimed op first (kernels built, paths warmed),
// then one pass over every copy of the layer, stopped early when it alone
// outlasts the budget (then that part is the point: the first matrices of
// the layer). Otherwise passes of as many rounds as take an eighth of the
// budget each, until the budget is spent, and the fastest pass counts, as
// everywhere in ridge's measurements: a busy machine then reads low rather
// than noisy, and waits between passes cost little.
static rg_status_t sweep_point(prof_t *P, rg_queue_t *q, const weights_t *W, const shape_t *sh,
                               int n_sh, rg_dtype_t t, int64_t m, double *flops_s,
                               double *bytes_s) {
  rg_op_t op = matmul_op(W, 0, 1, sh, t, m);
  RG_RETURN_IF_ERROR(rg_queue_submit(q, &op));
  RG_RETURN_IF_ERROR(rg_queue_wait(q));
  // Decode points stream the weights, from memory as a model's layers do;
  // larger M reuse them and need no more than the plan's footprint.
  const int copies = m <= RG_PROFILE_MEM_MAX_M ? W->copies : W->small;
  double budget = P->p->point_s, flops = 0, bytes = 0, start = rg_clock_now();
  int done;
  RG_RETURN_IF_ERROR(
      run_rounds(q, W, copies, sh, n_sh, t, m, 0, copies, start, budget, &flops, &bytes, &done));
  double dt = rg_clock_now() - start;
  *flops_s = flops / dt;
  *bytes_s = bytes / dt;
  if (!done) {
    // That pass was every matrix's first call at this M but one's (x's
    // packing buffers, the allocator's first mappings): a quick profile's
    // M = 256 read 0.37 of the bf16 peak this way where the same kernels
    // run at 0.63 warm. Where it was short, the same span again, warm, and
    // the faster counts.
    if (dt > 4 * budget) return NULL;
    double f = 0, b = 0, t1 = rg_clock_now();
    RG_RETURN_IF_ERROR(
        run_rounds(q, W, copies, sh, n_sh, t, m, 0, copies, t1, budget, &f, &b, &done));
    double d = rg_clock_now() - t1;
    if (f / d > *flops_s) {
      *flops_s = f / d;
      *bytes_s = b / d;
    }
    return NULL;
  }
  long rounds = (long)ceil(budget / 8 / (dt / copies));
  if (rounds < 1) rounds = 1;
  for (long next = copies; rg_clock_now() - start < budget; next += rounds) {
    double f = 0, b = 0, t0 = rg_clock_now();
    RG_RETURN_IF_ERROR(
        run_rounds(q, W, copies, sh, n_sh, t, m, next, next + rounds, t0, 0, &f, &b, &done));
    double d = rg_clock_now() - t0;
    if (f / d > *flops_s) {
      *flops_s = f / d;
      *bytes_s = b / d;
    }
  }
  return NULL;
}

static rg_status_t sweep_dtype(prof_t *P, rg_profile_matmul_t *mm) {
  rg_profile_result_t *r = P->r;
  shape_t sh[7];
  layer_shapes(r, sh);
  int n_sh = P->p->n_shapes;
  // Asked with the first real shape (a backend checks shapes with types)
  // before the weights are uploaded for nothing.
  rg_op_t probe = {.kind = RG_OP_MATMUL};
  probe.matmul.wtype = mm->dtype;
  probe.matmul.m = 1;
  probe.matmul.n = sh[0].n;
  probe.matmul.k = sh[0].k;
  rg_status_t s = rg_device_check_op(P->dev, &probe);
  for (int i = 0; !s && i < n_sh; i++)
    if (sh[i].k % rg_dtype_block_elems(mm->dtype))
      s = rg_status_make(RG_UNIMPLEMENTED,
                         "the %s matrix (%lld x %lld) is not whole %s blocks of %lld", sh[i].name,
                         (long long)sh[i].n, (long long)sh[i].k, rg_dtype_name(mm->dtype),
                         (long long)rg_dtype_block_elems(mm->dtype));
  progress(P, "matmul %s: the layer's weights", rg_dtype_name(mm->dtype));
  if (s) {
    skip(mm->reason, sizeof mm->reason, s);
    for (int j = 0; j < P->p->n_m; j++) progress(P, "matmul %s: skipped", rg_dtype_name(mm->dtype));
    return NULL;
  }
  rg_queue_t *q = NULL;
  weights_t W;
  memset(&W, 0, sizeof W);
  s = rg_queue_create(P->dev, &q);
  if (!s) s = weights_init(P, q, mm->dtype, sh, n_sh, &W);
  for (int j = 0; j < P->p->n_m; j++) {
    progress(P, "matmul %s, M = %lld", rg_dtype_name(mm->dtype), (long long)P->p->m[j]);
    if (s) continue;
    s = sweep_point(P, q, &W, sh, n_sh, mm->dtype, P->p->m[j], &mm->flops[mm->n],
                    &mm->stream[mm->n]);
    if (!s) mm->m[mm->n++] = P->p->m[j];
  }
  weights_free(&W);
  rg_queue_destroy(q);
  // Out of memory for the weights is the device's limit, not a failure.
  if (s && (rg_status_code(s) == RG_OUT_OF_MEMORY || rg_status_code(s) == RG_UNIMPLEMENTED)) {
    skip(mm->reason, sizeof mm->reason, s);
    mm->n = 0;
    return NULL;
  }
  return rg_status_wrap(s, "measuring %s matmuls on %s", rg_dtype_name(mm->dtype), r->device);
}

// ----- The class figures ---------------------------------------------------------------

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double clamp_eff(double e) {
  if (!(e > 0)) return 1e-6;  // NaN too: the loader needs more than zero
  if (e < 1e-6) return 1e-6;
  return e > 1 ? 1 : e;
}

// The fastest m = 1 weight stream of the sweep (0: none), and its type.
static double best_m1_stream(const rg_profile_result_t *r, const char **which) {
  double best = 0;
  *which = NULL;
  for (int i = 0; i < RG_PROFILE_DTYPES; i++)
    if (r->matmul[i].n > 0 && r->matmul[i].m[0] == 1 && r->matmul[i].stream[0] > best)
      best = r->matmul[i].stream[0], *which = rg_dtype_name(r->matmul[i].dtype);
  return best;
}

static void derive(rg_profile_result_t *r, const rg_profile_class_t *cls) {
  rg_profile_derived_t *d = &r->cls;
  memset(d, 0, sizeof(*d));
  d->step = d->layer = d->process_first = -1;
  if (cls) {
    d->have_class = 1;
    d->sheet = *cls;
  }
  char b[32], b2[32];
  // A device without a streaming kernel: its best m = 1 weight stream is
  // the read bandwidth it shows.
  const char *which;
  const double m1 = best_m1_stream(r, &which);
  if (r->read.rate <= 0 && m1 > 0) {
    char why[sizeof r->read.reason];
    snprintf(why, sizeof why, "%s", r->read.reason);
    bw_set(&r->read, m1, "m = 1 %s matmuls' weight stream (no streaming kernel: %.40s)", which,
           why);
  }
  d->bandwidth = r->read.rate;
  snprintf(d->bandwidth_why, sizeof d->bandwidth_why, "the read bandwidth");
  // By the profile's own rule a reading on a shared machine can fall short
  // of the limit but never run over it: an m = 1 matmul whose weights came
  // from memory (the decode points span past the caches) and streamed them
  // faster than the plain sum read is the better reading of the bandwidth.
  // The sum read low (a busy moment, or fewer lines in flight than the
  // kernels' software prefetch keeps), and dividing by it had put every
  // stream above 1, so a quick profile wrote no streaming figures at all.
  if (r->decode_past_cache && d->bandwidth > 0 && m1 > d->bandwidth) {
    snprintf(d->bandwidth_why, sizeof d->bandwidth_why,
             "the m = 1 %s matmul's weight stream from memory, above the read bandwidth's %s "
             "(a reading only falls short)",
             which, rg_fmt_quantity(d->bandwidth, RG_UNIT_BANDWIDTH, b, sizeof b));
    d->bandwidth = m1;
  }
  double fr[RG_PROFILE_DTYPES];
  int n_fr = 0;
  char list[128] = "";
  for (int i = 0; i < RG_PROFILE_DTYPES && d->bandwidth > 0; i++) {
    const rg_profile_matmul_t *mm = &r->matmul[i];
    if (mm->n == 0 || mm->m[0] != 1) continue;
    fr[n_fr++] = mm->stream[0] / d->bandwidth;
    size_t at = strlen(list);
    snprintf(list + at, sizeof list - at, "%s%s %.2f", at ? ", " : "", rg_dtype_name(mm->dtype),
             mm->stream[0] / d->bandwidth);
  }
  if (n_fr) {
    qsort(fr, (size_t)n_fr, sizeof fr[0], cmp_double);
    double med = n_fr % 2 ? fr[n_fr / 2] : 0.5 * (fr[n_fr / 2 - 1] + fr[n_fr / 2]);
    d->eff_memory = clamp_eff(med);
    snprintf(d->eff_memory_why, sizeof d->eff_memory_why,
             "m = 1 matmuls' weight stream over the memory bandwidth, median of %s%s", list,
             med > 1 ? " (above 1: the weights sat partly in cache; held at 1)" : "");
    // A quick profile's weights fit a large cache, and a stream from cache
    // says nothing of one from memory: the class keeps its own figure.
    if (med > 1 && r->quick) {
      d->eff_memory = 0;
      snprintf(d->eff_memory_why, sizeof d->eff_memory_why,
               "not written: the quick profile's m = 1 weight stream (median of %s) outran the "
               "read bandwidth, so its weights sat in cache",
               list);
    }
  }
  if (r->n_ctx > 0 && d->bandwidth > 0) {
    double e = r->attn_rate[r->n_ctx - 1] / d->bandwidth;
    d->eff_attention = clamp_eff(e);
    snprintf(d->eff_attention_why, sizeof d->eff_attention_why,
             "decode attention's %s KV read rate at %lld positions over the read bandwidth%s",
             rg_dtype_name(r->kv), (long long)r->ctx[r->n_ctx - 1],
             e > 1 ? " (above 1: the KV sat partly in cache; held at 1)" : "");
    // Every context measured, as a curve: short contexts read slower.
    d->n_attn = r->n_ctx > 1 ? r->n_ctx : 0;
    for (int i = 0; i < d->n_attn; i++)
      d->attn_ctx[i] = r->ctx[i], d->attn_eff[i] = clamp_eff(r->attn_rate[i] / d->bandwidth);
  }
  if (r->launch > 0) {
    d->step = 3 * r->launch;
    d->layer = 8 * r->launch;
  }
  for (int i = 0; i < RG_PROFILE_DTYPES; i++) {
    const rg_profile_matmul_t *mm = &r->matmul[i];
    rg_profile_curve_t *c = &d->curve[i];
    c->compute = mm->compute;
    c->weights = mm->dtype;
    if (mm->n == 0) continue;
    double best = 0;
    for (int j = 0; j < mm->n; j++)
      if (mm->flops[j] > best) best = mm->flops[j];
    double sheet = d->have_class ? d->sheet.peak[mm->compute] : 0;
    const char *ct = rg_dtype_name(mm->compute);
    if (sheet > 0 && best <= sheet) {
      c->peak = sheet;
      c->from_datasheet = 1;
      snprintf(c->why, sizeof c->why, "of the datasheet's %s peak, %s", ct,
               rg_fmt_quantity(sheet, RG_UNIT_FLOPS, b, sizeof b));
    } else {
      // The backend's own peak, or the sweep's best where it is higher (or
      // the backend has none), so no fraction exceeds 1.
      int path = mm->peak >= best;
      c->peak = path ? mm->peak : best;
      rg_fmt_quantity(c->peak, RG_UNIT_FLOPS, b, sizeof b);
      if (sheet > 0)
        snprintf(c->why, sizeof c->why,
                 "of the measured peak, %s (%s): the device beats the datasheet's %s, which is "
                 "not this device's",
                 b, path ? mm->peak_path : "the sweep's best",
                 rg_fmt_quantity(sheet, RG_UNIT_FLOPS, b2, sizeof b2));
      else
        snprintf(c->why, sizeof c->why,
                 "of the measured peak, %s (%s): the class publishes no %s peak", b,
                 path ? mm->peak_path : "the sweep's best", ct);
    }
    c->n = mm->n;
    for (int j = 0; j < mm->n; j++) {
      c->m[j] = mm->m[j];
      c->eff[j] = clamp_eff(mm->flops[j] / c->peak);
    }
    // The stream by M where decode batches live: a CPU's batch-1 GEMV and
    // its batch kernels read the weights at different rates, which one
    // eff_memory cannot say (it priced batch 8 at batch 1's rate).
    if (d->eff_memory > 0 && mm->m[0] == 1)
      for (int j = 0; j < mm->n && mm->m[j] <= RG_PROFILE_MEM_MAX_M; j++)
        c->mem[c->n_mem++] = clamp_eff(mm->stream[j] / d->bandwidth);
  }
  // A prompt's attention over the peak the bf16 curve is a fraction of,
  // the one the planner divides its multiplies by.
  for (int i = 0; i < RG_PROFILE_DTYPES && r->attn_prefill_rate > 0; i++) {
    const rg_profile_curve_t *c = &d->curve[i];
    if (c->compute != RG_BF16 || c->n == 0 || !(c->peak > 0)) continue;
    const double e = r->attn_prefill_rate / c->peak;
    d->eff_attention_compute = clamp_eff(e);
    snprintf(d->eff_attention_compute_why, sizeof d->eff_attention_compute_why,
             "a %lld-token prompt's attention (QK^T and PV, causal) at %s over the bf16 peak, %s",
             (long long)r->attn_prefill_tokens,
             rg_fmt_quantity(r->attn_prefill_rate, RG_UNIT_FLOPS, b, sizeof b),
             rg_fmt_quantity(c->peak, RG_UNIT_FLOPS, b2, sizeof b2));
    break;
  }
}

// ----- Running a profile -------------------------------------------------------------

// ----- Stages ---------------------------------------------------------------------------
//
// The runtime's own stage instances on the device: what each stage kind
// costs beyond its kernels' roofline (thread-pool fork and join on the CPU,
// kernel enqueue and wait on OpenCL, the small ops around the matmuls) is
// only seen by running them.

static const struct {
  int seqs, tokens, context;
} stage_shapes[RG_PROFILE_STAGE_SHAPES] = {{1, 1, 64}, {4, 1, 64}, {8, 1, 64},
                                           {1, 16, 0}, {1, 64, 0}, {1, 256, 0}};

// The mean of all but the slowest tenth of v (sorted in place): what a
// run averages over its steps, without the few that a page fault or a
// preemption made ten times longer.
static double trimmed_mean(double *v, int n) {
  if (n < 1) return 0;
  qsort(v, (size_t)n, sizeof v[0], cmp_double);
  int keep = n - n / 10;
  double sum = 0;
  for (int q = 0; q < keep; q++) sum += v[q];
  return sum / keep;
}

// The host's cores streaming a buffer past their caches until `until`, as
// a worker on the same host computes while this one waits for it.
typedef struct {
  const unsigned char *buf;
  size_t bytes;
  int parts;
  double until;
  volatile unsigned sink;
} churn_t;

static void churn_part(void *ctx, size_t b, size_t e, int slot) {
  churn_t *c = ctx;
  (void)e, (void)slot;
  size_t lo = c->bytes * b / (size_t)c->parts, hi = c->bytes * (b + 1) / (size_t)c->parts;
  unsigned s = 0;
  for (size_t i = lo; rg_clock_now() < c->until;) {
    for (int k = 0; k < 4096; k++, i += 64) {  // a line each
      if (i >= hi) i = lo;
      s += c->buf[i];
    }
  }
  c->sink += s;
}

// One forward step of e, each stage kind's seconds added to out[slot];
// *outside (when not NULL) what the engine's forward took beyond its
// stages (the step's own work: uploads, copying the logits out, checking
// them).
static rg_status_t timed_step_ex(rg_engine_t *e, const rg_engine_entry_t *en, size_t n,
                                 float *logits, double out[RG_STAGE_SLOTS], double *outside) {
  for (size_t i = 0; i < rg_engine_stage_count(e); i++)
    rg_stage_counters_reset((rg_stage_t *)rg_engine_stage_at(e, i));
  rg_engine_counters_t c0, c1;
  rg_engine_counters(e, &c0);
  RG_RETURN_IF_ERROR(rg_engine_forward(e, en, n, logits));
  rg_engine_counters(e, &c1);
  double staged = 0;
  for (size_t i = 0; i < rg_engine_stage_count(e); i++) {
    const rg_stage_t *sg = rg_engine_stage_at(e, i);
    int slot = rg_slot_of_stage(rg_stage_spec(sg)->kind);
    rg_stage_counters_t c;
    rg_stage_counters(sg, &c);
    if (slot >= 0 && slot < RG_STAGE_SLOTS) out[slot] += c.seconds;
    staged += c.seconds;
  }
  if (outside) *outside = fmax(0, c1.seconds - c0.seconds - staged);
  return NULL;
}

static rg_status_t timed_step(rg_engine_t *e, const rg_engine_entry_t *en, size_t n, float *logits,
                              double out[RG_STAGE_SLOTS]) {
  return timed_step_ex(e, en, n, logits, out, NULL);
}

// An engine's first step (timed_step) with its ops timed by kind:
// ops[kind] in seconds, -1 for kinds the step did not run.
static rg_status_t first_step(rg_engine_t *e, const rg_engine_entry_t *en, float *logits,
                              double *slots, double ops[RG_OP_COUNT]) {
  rg_op_profile_t p;
  rg_engine_set_op_profiling(e, 1);
  rg_status_t st = timed_step(e, en, 1, logits, slots);
  rg_engine_op_profile(e, &p);
  rg_engine_set_op_profiling(e, 0);
  for (int k = 0; k < RG_OP_COUNT; k++) ops[k] = p.calls[k] ? p.seconds[k] : -1;
  return st;
}

// What a serving iteration costs beyond its stages: the runtime's own loop
// (runtime/serve.h: scheduling, sampling, the engine's uploads and logits)
// around the same engine, on a few short requests; the median over runs of
// (wall - the stages' time) / iterations. The timed shapes' steps run back
// to back, and what the engine did beyond their stages there (`outside`)
// read 5-6 us where a serving run's read 11-16 us and its loop 4 more.
static void serving_step(rg_engine_t *e, const int32_t *toks, int n_toks, rg_profile_stages_t *S) {
  enum { REQS = 8, PROMPT = 24, OUT = 24, RUNS = 3 };
  rg_serve_request_t rq[REQS];
  for (int i = 0; i < REQS; i++)
    rq[i] = (rg_serve_request_t){
        (uint64_t)i, toks + (i * 131) % (n_toks - PROMPT), PROMPT, OUT, {0, 0, 1, 0}, 0};
  rg_serve_options_t so = {.max_batch_tokens = 256, .max_seqs = REQS};
  double per[RUNS];
  int n = 0;
  for (int r = 0; r < RUNS; r++) {
    rg_serve_result_t res[REQS];
    rg_serve_stats_t ss;
    const double st0 = rg_engine_stages_seconds(e);
    rg_status_t st = rg_serve(e, rq, REQS, &so, res, &ss);
    rg_serve_results_free(res, REQS);
    if (st || ss.failed || ss.iterations < 1) {
      rg_status_free(st);
      continue;
    }
    // The loop's time (its start to the last token), not the run's setup.
    const double staged = rg_engine_stages_seconds(e) - st0;
    per[n++] = fmax(0, ss.wall_s - staged) / (double)ss.iterations;
    S->serve_iterations = ss.iterations;
  }
  if (n == 0) return;
  qsort(per, (size_t)n, sizeof per[0], cmp_double);
  S->serve_step = per[n / 2];
}

// Times each shape on a fresh engine over opts.stage_model on the device;
// leaves the engine in *out for the fit (its arch), or a skip reason.
static void time_stages(prof_t *P, rg_engine_t **out) {
  rg_profile_stages_t *S = &P->r->stages;
  *out = NULL;
  progress(P, "stages of %s (%d step shapes)", P->o->stage_model, RG_PROFILE_STAGE_SHAPES);
  rg_engine_options_t eo = {.device = P->r->device,
                            .threads = P->o->threads,
                            .max_seqs = 8,
                            .max_context = 1024,
                            .kv_tokens = 8 * 256};
  rg_engine_t *e = NULL;
  float *logits = NULL;
  enum { MAX_REPS = 256 };
  double(*t)[RG_STAGE_SLOTS][MAX_REPS] = NULL;  // per shape, slot and repetition
  double(*outside)[MAX_REPS] = NULL;            // per shape and repetition
  rg_status_t st = rg_engine_create(P->o->stage_model, &eo, &e);
  if (st) goto fail;
  const rg_arch_t *a = rg_engine_arch(e);
  snprintf(S->model, sizeof S->model, "%s", a->name);
  one_line(S->model);
  S->layers = a->n_layers;
  // Token ids spread over the vocabulary, each sequence and each step
  // taking its own stretch of them, as a run's do: the same few ids every
  // step keep their embedding rows in L1, where a run's come from further
  // out (the tiny model's embed of 8 decodes read 0.14 us here against
  // 0.5 us in a serving run).
  enum { N_TOKS = 1024 };
  static int32_t toks[N_TOKS], tables[8][16];
  const int64_t vocab = rg_engine_vocab(e);
  for (int i = 0; i < N_TOKS; i++) toks[i] = (int32_t)(((int64_t)i * 7919 + 1) % vocab);
  for (int q = 0; q < 8; q++)
    for (int b = 0; b < 16; b++) tables[q][b] = q * 16 + b;
  if (!(logits = malloc(8 * (size_t)vocab * sizeof(float)))) {
    st = rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
    goto fail;
  }
  // The first step of a fresh engine pays what a worker's first step pays
  // once (kernel builds at first enqueue, first touches of its buffers),
  // the same step again does not. It is one prompt of 16 tokens, the size
  // of the runs that see these costs at all (a short prompt's few dozen
  // steps): first touches grow with the step, and a fill of 8 x 64 had
  // priced the CPU's at 3-7 ms against 0.2-0.3 ms in a worker's first
  // 13-token step.
  rg_engine_entry_t first = {0, 16, toks, tables[0], 4, 1};
  if ((st = first_step(e, &first, logits, S->first_step, S->first_ops))) goto fail;
  if ((st = timed_step(e, &first, 1, logits, S->second_step))) goto fail;
  // Then the same first step on a second engine over the same device: it
  // pays its own stage instances' first touches again but not what the
  // process paid once (kernels are built per device context, which the
  // process keeps), so the two first steps tell the stages' first calls
  // from the process's. Without room for a second engine, all of it is the
  // stages' as before.
  {
    rg_engine_t *e2 = NULL;
    rg_status_t s2 = rg_engine_create(P->o->stage_model, &eo, &e2);
    if (!s2) s2 = first_step(e2, &first, logits, S->fresh_step, S->fresh_ops);
    rg_engine_destroy(e2);
    S->have_fresh = s2 == NULL;
    rg_status_free(s2);
  }
  // Every sequence's first 64 positions written once, so that decodes read
  // a KV cache of real values.
  rg_engine_entry_t fill[8];
  for (int q = 0; q < 8; q++) fill[q] = (rg_engine_entry_t){0, 64, toks, tables[q], 4, 1};
  if ((st = rg_engine_forward(e, fill, 8, logits))) goto fail;
  // Round robin over the shapes, one step of each per repetition, so that
  // a burst of another process's work lands on every shape alike rather
  // than on one (which the fit would read as a cost per token).
  rg_engine_entry_t en[RG_PROFILE_STAGE_SHAPES][8];
  t = calloc(RG_PROFILE_STAGE_SHAPES, sizeof *t);
  outside = calloc(RG_PROFILE_STAGE_SHAPES, sizeof *outside);
  if (!t || !outside) {
    st = rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
    goto fail;
  }
  for (int k = 0; k < RG_PROFILE_STAGE_SHAPES; k++) {
    rg_profile_stage_shape_t *sh = &S->shape[k];
    sh->seqs = stage_shapes[k].seqs, sh->tokens = stage_shapes[k].tokens;
    sh->context = stage_shapes[k].context;
    int32_t nb = (int32_t)((sh->context + sh->tokens + 15) / 16);
    for (int q = 0; q < sh->seqs; q++)
      en[k][q] = (rg_engine_entry_t){sh->context, sh->tokens, toks, tables[q], nb, 1};
    // One untimed step first: buffers, caches and (OpenCL) kernels warm.
    if ((st = rg_engine_forward(e, en[k], (size_t)sh->seqs, logits))) goto fail;
  }
  // Rounds until the budget is spent: a run's stages are timed over its
  // whole length, under whatever else the machine runs then, so the
  // profile samples a stretch of time too rather than its quietest moment.
  double t0 = rg_clock_now(), budget = P->o->quick ? 0.25 : 1.0;
  int rep = 0;
  // At least 3 rounds (a large model's steps outlast the budget), 9 where
  // they fit in twice the budget, more while the budget lasts.
  for (; rep < MAX_REPS;) {
    double el = rg_clock_now() - t0;
    if (rep >= 3 && el >= budget && (rep >= 9 || el * 9 / rep > 2 * budget)) break;
    for (int k = 0; k < RG_PROFILE_STAGE_SHAPES; k++) {
      double s[RG_STAGE_SLOTS] = {0};
      for (int q = 0; q < S->shape[k].seqs; q++)
        en[k][q].tokens =
            toks + ((rep * RG_PROFILE_STAGE_SHAPES + k) * 8 + q) * 97 % (N_TOKS - 256);
      if ((st = timed_step_ex(e, en[k], (size_t)S->shape[k].seqs, logits, s, &outside[k][rep])))
        goto fail;
      for (int j = 0; j < RG_STAGE_SLOTS; j++) t[k][j][rep] = s[j];
    }
    rep++;
  }
  S->reps = rep;
  for (int k = 0; k < RG_PROFILE_STAGE_SHAPES; k++) {
    for (int j = 0; j < RG_STAGE_SLOTS; j++) S->shape[k].seconds[j] = trimmed_mean(t[k][j], rep);
    S->shape[k].outside = trimmed_mean(outside[k], rep);
    S->n = k + 1;
  }
  free(outside);
  outside = NULL;
  // The first shape again, each step after an idle gap, as a worker's calls
  // start after it waited for another worker's data: against the same step
  // back to back, what its calls pay cold. On a device in the host's memory
  // the gap is the host's cores streaming 64 MiB, as a worker beside it on
  // the same host computes meanwhile and takes the caches (a quiet gap read
  // 0.3 us more for the tiny model's lm_head on the CPU, against 10 us in
  // a worker across from PoCL); elsewhere it is a sleep.
  S->gap = RG_STAGE_COLD_GAP_S;
  S->gapped_reps = rep < MAX_REPS ? rep : MAX_REPS;
  churn_t churn = {.bytes = (size_t)64 << 20};
  rg_pool_t *churn_pool = NULL;
  unsigned char *churn_buf = NULL;
  if (P->host_memory && !rg_pool_create(0, &churn_pool) &&
      (churn_buf = malloc(churn.bytes)) != NULL) {
    memset(churn_buf, 1, churn.bytes);
    churn.buf = churn_buf;
    churn.parts = rg_pool_threads(churn_pool);
    S->gap_busy = 1;
  }
  for (int q = 0; q < S->gapped_reps && !st; q++) {
    if (S->gap_busy) {
      churn.until = rg_clock_now() + S->gap;
      rg_pool_parallel_for(churn_pool, (size_t)churn.parts, 1, churn_part, &churn);
    } else {
      rg_clock_sleep(S->gap);
    }
    double s[RG_STAGE_SLOTS] = {0};
    st = timed_step(e, en[0], (size_t)S->shape[0].seqs, logits, s);
    for (int j = 0; j < RG_STAGE_SLOTS; j++) t[0][j][q] = s[j];
  }
  rg_pool_destroy(churn_pool);
  free(churn_buf);
  if (st) goto fail;
  for (int j = 0; j < RG_STAGE_SLOTS; j++) S->gapped[j] = trimmed_mean(t[0][j], S->gapped_reps);
  serving_step(e, toks, N_TOKS, S);
  free(t);
  free(logits);
  *out = e;
  return;
fail:
  free(t);
  free(outside);
  S->n = 0;
  skip(S->reason, sizeof S->reason, st);
  free(logits);
  rg_engine_destroy(e);
}

// Weighted least squares of y on the columns `use` of x (at most 3), by
// normal equations; 0 when singular.
static int lsq(int n, const double y[], const double x[][3], const double w[], int use,
               double coef[3]) {
  int idx[3], m = 0;
  for (int j = 0; j < 3; j++)
    if (use >> j & 1) idx[m++] = j;
  double A[3][4] = {{0}};
  for (int i = 0; i < n; i++)
    for (int r = 0; r < m; r++) {
      for (int c = 0; c < m; c++) A[r][c] += w[i] * w[i] * x[i][idx[r]] * x[i][idx[c]];
      A[r][3] += w[i] * w[i] * x[i][idx[r]] * y[i];
    }
  for (int c = 0; c < m; c++) {  // Gauss-Jordan with partial pivoting
    int piv = c;
    for (int r = c + 1; r < m; r++)
      if (fabs(A[r][c]) > fabs(A[piv][c])) piv = r;
    if (!(fabs(A[piv][c]) > 1e-300)) return 0;
    for (int k = 0; k < 4; k++) {
      double tmp = A[c][k];
      A[c][k] = A[piv][k], A[piv][k] = tmp;
    }
    for (int r = 0; r < m; r++) {
      if (r == c) continue;
      double f = A[r][c] / A[c][c];
      for (int k = 0; k < 4; k++) A[r][k] -= f * A[c][k];
    }
  }
  coef[0] = coef[1] = coef[2] = 0;
  for (int r = 0; r < m; r++) coef[idx[r]] = A[r][3] / A[r][r];
  return 1;
}

// A stand-in of the class the profile derives, enough for the cost model:
// the datasheet's peaks and first tier, then the derived figures.
static void derived_class(const rg_profile_result_t *r, rg_device_class_t *c) {
  memset(c, 0, sizeof(*c));
  const rg_profile_class_t *sh = &r->cls.sheet;
  snprintf(c->name, sizeof c->name, "%s", r->cls.have_class ? sh->name : "measured");
  c->kind = RG_KIND_ACCELERATOR;
  c->n_mem = 1;
  snprintf(c->mem[0].name, sizeof c->mem[0].name, "%s", sh->tier[0] ? sh->tier : "memory");
  c->mem[0].bandwidth = sh->bandwidth;
  c->mem[0].capacity = 1e12;
  for (int t = 0; t < RG_DTYPE_COMPUTE_COUNT; t++) c->peak[t] = sh->peak[t];
  c->eff_compute_all.n = 1;
  c->eff_compute_all.pt[0].m = 1;
  c->eff_compute_all.pt[0].eff = 0.70;  // the loader's defaults
  c->eff_memory = 0.85;
  rg_profile_apply(r, c);
}

// Each shape's time beyond its roofline per call, at its tokens per call
// (x[k][1] / x[k][0]), shapes with equal tokens averaged, none below zero.
static void by_tokens(int n, const double y[], const double x[][3], rg_stage_figures_t *f) {
  rg_stage_point_t pt[RG_PROFILE_STAGE_SHAPES];
  int cnt[RG_PROFILE_STAGE_SHAPES], m = 0;
  for (int k = 0; k < n; k++) {
    if (!(x[k][0] > 0)) continue;
    double tok = x[k][1] / x[k][0], sec = y[k] / x[k][0];
    int i = 0;
    while (i < m && pt[i].tokens < tok) i++;
    if (i < m && pt[i].tokens == tok) {
      pt[i].seconds += sec, cnt[i]++;
      continue;
    }
    for (int r = m; r > i; r--) pt[r] = pt[r - 1], cnt[r] = cnt[r - 1];
    pt[i] = (rg_stage_point_t){tok, sec}, cnt[i] = 1, m++;
  }
  _Static_assert(RG_PROFILE_STAGE_SHAPES <= RG_STAGE_TOKEN_POINTS, "a point per shape");
  for (int i = 0; i < m; i++) {
    double s = pt[i].seconds / cnt[i];
    f->by_tokens[i] = (rg_stage_point_t){pt[i].tokens, s > 0 ? s : 0};
  }
  f->n_points = m;
}

// Fits each stage kind's figures to the shapes timed (profile.h).
static rg_status_t fit_stages(rg_profile_result_t *r, const rg_arch_t *a) {
  rg_profile_stages_t *S = &r->stages;
  rg_profile_derived_t *d = &r->cls;
  if (S->n < RG_PROFILE_STAGE_SHAPES) return NULL;
  rg_device_class_t *c = calloc(1, sizeof *c);
  rg_fleet_t *f = calloc(1, sizeof *f);
  rg_status_t st = NULL;
  if (!c || !f) {
    st = rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
    goto done;
  }
  derived_class(r, c);
  for (int t = 0; t < RG_DTYPE_COMPUTE_COUNT; t++)
    if (!(c->peak[t] > 0)) {
      // No datasheet peak for a type: the measured one the curve divides by.
      for (int i = 0; i < RG_PROFILE_DTYPES; i++)
        if (d->curve[i].n > 0 && d->curve[i].compute == (rg_dtype_t)t)
          c->peak[t] = d->curve[i].peak;
    }
  if (!(c->mem[0].bandwidth > 0)) goto done;  // no roofline to subtract
  memset(c->stage, 0, sizeof c->stage);
  f->n_nodes = 1;
  f->nodes[0].count = 1;
  f->nodes[0].n_devs = 1;
  f->nodes[0].devs[0].cls = c;
  f->nodes[0].devs[0].count = 1;
  rg_plan_request_t req = {
      .model = a, .fleet = f, .weight_dtype = a->weight_dtype, .kv_dtype = RG_BF16};
  rg_group_t g = {"stage", c, 1, 1, 1, 1};
  for (int k = 0; k < S->n; k++) {
    rg_profile_stage_shape_t *sh = &S->shape[k];
    rg_phase_t ph = sh->tokens > 1 ? RG_PHASE_PREFILL : RG_PHASE_DECODE;
    for (int j = 0; j < RG_STAGE_SLOTS; j++)
      if ((st = rg_slot_step_time(&req, &g, (rg_slot_t)j, ph, sh->seqs, sh->tokens, sh->context, 0,
                                  &sh->roof[j])))
        goto done;
  }
  for (int j = 0; j < RG_STAGE_SLOTS; j++) {
    double y[RG_PROFILE_STAGE_SHAPES], x[RG_PROFILE_STAGE_SHAPES][3], w[RG_PROFILE_STAGE_SHAPES];
    double share = 0;
    int layered = j == RG_SLOT_ATTENTION || j == RG_SLOT_FFN;
    for (int k = 0; k < S->n; k++) {
      const rg_profile_stage_shape_t *sh = &S->shape[k];
      double calls = layered ? (double)S->layers : 1;
      double tokens = j == RG_SLOT_LM_HEAD && sh->tokens > 1 ? sh->seqs : sh->seqs * sh->tokens;
      y[k] = sh->seconds[j] - sh->roof[j];
      x[k][0] = calls, x[k][1] = calls * tokens, x[k][2] = sh->roof[j];
      w[k] = sh->seconds[j] > 0 ? 1 / sh->seconds[j] : 0;
      if (sh->seconds[j] > 0) share = fmax(share, sh->roof[j] / sh->seconds[j]);
    }
    // Every subset of the terms; the feasible one that fits best.
    double best = INFINITY, bc[3] = {0, 0, 0};
    for (int use = 0; use < 8; use++) {
      // The efficiency factor is left out: beside the small model's small,
      // nearly constant roofline it only trades against the call cost (the
      // columns are all but collinear), and fitted where its roofline is
      // most of the time (lm_head, embed) it did not carry over to a larger
      // model's shapes (the 1b's lm_head read 1.3x slow with it).
      if (use & 4) continue;
      double cf[3];
      if (use && !lsq(S->n, y, x, w, use, cf)) continue;
      if (!use) cf[0] = cf[1] = cf[2] = 0;
      if (cf[0] < 0 || cf[1] < 0 || cf[2] <= -0.75 || cf[2] > 1e3) continue;
      double res = 0;
      for (int k = 0; k < S->n; k++) {
        double e = (y[k] - cf[0] * x[k][0] - cf[1] * x[k][1] - cf[2] * x[k][2]) * w[k];
        res += e * e;
      }
      if (res < best * (1 - 1e-9)) best = res, bc[0] = cf[0], bc[1] = cf[1], bc[2] = cf[2];
    }
    d->stage[j].call = bc[0];
    d->stage[j].token = bc[1];
    d->stage[j].eff = bc[2] != 0 ? 1 / (1 + bc[2]) : 0;
    by_tokens(S->n, y, x, &d->stage[j]);
    d->stage[j].first =
        fmax(0, (S->have_fresh ? S->fresh_step[j] : S->first_step[j]) - S->second_step[j]);
    // Spread over the step's calls of the kind: the first call after the
    // gap pays most of it, but every layer's call pays some (caches the
    // idle time let go), and in a worker of its own each call comes after
    // a wait.
    if (S->gapped_reps > 0)
      d->stage[j].cold =
          fmax(0, S->gapped[j] - S->shape[0].seconds[j]) / (layered ? (double)S->layers : 1);
  }
  if (S->have_fresh) {
    double once = 0;
    for (int j = 0; j < RG_STAGE_SLOTS; j++) once += S->first_step[j] - S->fresh_step[j];
    d->process_first = fmax(0, once);
    // By op kind: the first op of each kind in the process paid its kernel
    // builds (a program several kinds share lands on the first of them).
    for (int k = 0; k < RG_OP_COUNT; k++)
      d->first_op[k] =
          S->first_ops[k] >= 0 ? fmax(0, S->first_ops[k] - fmax(0, S->fresh_ops[k])) : -1;
    d->have_first_op = 1;
  }
  d->have_stages = 1;
  // The ops a layer floor stood for run inside the stages now, and the
  // step's own cost is a serving iteration's beyond its stages (17-20 us
  // on the tiny model, where three ops' launch cost had priced it at
  // 0.1-0.2 us and the simulated decode step read 10-15 % fast); where the
  // serving run failed, the mean over the shapes of the engine's forward
  // beyond its stages.
  if (d->layer > 0) d->layer = 0;
  double out_sum = 0;
  for (int k = 0; k < S->n; k++) out_sum += S->shape[k].outside;
  if (S->serve_step > 0)
    d->step = S->serve_step, d->step_measured = 2;
  else if (S->n > 0 && out_sum > 0)
    d->step = out_sum / S->n, d->step_measured = 1;
  memcpy(c->stage, d->stage, sizeof c->stage);
  for (int k = 0; k < S->n; k++) {
    rg_profile_stage_shape_t *sh = &S->shape[k];
    rg_phase_t ph = sh->tokens > 1 ? RG_PHASE_PREFILL : RG_PHASE_DECODE;
    for (int j = 0; j < RG_STAGE_SLOTS; j++)
      if ((st = rg_slot_step_time(&req, &g, (rg_slot_t)j, ph, sh->seqs, sh->tokens, sh->context, 0,
                                  &sh->fitted[j])))
        goto done;
  }
done:
  free(f);
  free(c);
  return st;
}

void rg_profile_apply(const rg_profile_result_t *r, rg_device_class_t *c) {
  const rg_profile_derived_t *d = &r->cls;
  for (int i = 0; i < RG_PROFILE_DTYPES; i++) {
    const rg_profile_curve_t *cv = &d->curve[i];
    if (cv->n == 0) continue;
    if (!cv->from_datasheet) c->peak[cv->compute] = cv->peak;
    rg_eff_curve_t *e = &c->eff_compute[cv->compute];
    e->n = cv->n;
    for (int j = 0; j < cv->n; j++) e->pt[j].m = (double)cv->m[j], e->pt[j].eff = cv->eff[j];
    rg_eff_curve_t *em = &c->eff_memory_m[cv->compute];
    em->n = cv->n_mem;
    for (int j = 0; j < cv->n_mem; j++) em->pt[j].m = (double)cv->m[j], em->pt[j].eff = cv->mem[j];
  }
  if (d->bandwidth > 0 && c->n_mem > 0) c->mem[0].bandwidth = d->bandwidth;
  if (d->eff_memory > 0) c->eff_memory = d->eff_memory;
  if (d->eff_attention > 0) c->eff_attention = d->eff_attention;
  if (d->eff_attention_compute > 0) c->eff_attention_compute = d->eff_attention_compute;
  c->eff_attention_ctx.n = d->n_attn;
  for (int i = 0; i < d->n_attn; i++)
    c->eff_attention_ctx.pt[i].m = (double)d->attn_ctx[i],
    c->eff_attention_ctx.pt[i].eff = d->attn_eff[i];
  if (d->layer >= 0) c->step_cost = d->step, c->layer_floor = d->layer;
  if (d->have_stages) memcpy(c->stage, d->stage, sizeof c->stage);
  if (d->process_first >= 0) c->process_first = d->process_first;
  c->n_first_by_op = 0;
  for (int k = 0; d->have_first_op && k < RG_OP_COUNT && c->n_first_by_op < RG_CLASS_FIRST_OPS; k++)
    if (d->first_op[k] >= 0) {
      snprintf(c->first_by_op[c->n_first_by_op].op, sizeof c->first_by_op[0].op, "%s",
               rg_op_name((rg_op_kind_t)k));
      c->first_by_op[c->n_first_by_op++].seconds = d->first_op[k];
    }
}

// Whether a device's memory is the host's, so the host's caches hold what
// it streams: the CPU, and OpenCL's CPU devices (PoCL).
static int host_memory_device(const rg_device_info_t *info) {
  if (!strcmp(info->driver, "cpu")) return 1;
  char words[sizeof info->features + 2];
  snprintf(words, sizeof words, " %s ", info->features);
  return !strcmp(info->driver, "opencl") && strstr(words, " cpu ") != NULL;
}

// Bytes of weights to cycle through: `base`, or (with past_cache) twice
// the host's largest cache where the device streams from host memory and
// that is more, within an eighth of the device's memory.
static size_t weights_span(const rg_device_info_t *info, size_t base, int past_cache) {
  size_t span = base;
  if (past_cache && host_memory_device(info) && 2 * rg_limits_host_cache_bytes() > span)
    span = 2 * rg_limits_host_cache_bytes();
  if (info->memory && span > info->memory / 8) span = (size_t)(info->memory / 8);
  return span;
}

rg_status_t rg_profile_run(rg_device_t *dev, const rg_profile_options_t *opts,
                           rg_profile_result_t *out) {
  if (!dev || !out) return rg_status_make(RG_INVALID_ARGUMENT, "rg_profile_run: no device given");
  static const rg_profile_options_t defaults = {0};
  if (!opts) opts = &defaults;
  memset(out, 0, sizeof(*out));
  rg_profile_result_t *r = out;
  const rg_device_info_t *info = rg_device_info(dev);
  snprintf(r->device, sizeof r->device, "%s:%d", info->driver, info->index);
  snprintf(r->device_name, sizeof r->device_name, "%s", info->name);
  one_line(r->device_name);
  time_t now = time(NULL);
  struct tm tm;
  gmtime_r(&now, &tm);
  strftime(r->date, sizeof r->date, "%Y-%m-%d", &tm);

  rg_arch_t tm1b;
  const rg_arch_t *a = opts->model;
  if (!a) {
    rg_testmodel_opts_t to = {
        .arch = RG_TESTMODEL_LLAMA, .size = RG_TESTMODEL_1B, .dtype = RG_BF16};
    rg_testmodel_arch(&to, &tm1b);
    a = &tm1b;
  }
  snprintf(r->model, sizeof r->model, "%s", a->name);
  one_line(r->model);
  r->d_model = a->d_model;
  r->n_heads = a->n_heads;
  r->n_kv_heads = a->n_kv_heads > 0 ? a->n_kv_heads : a->n_heads;
  r->head_dim = a->head_dim > 0 ? a->head_dim : (a->n_heads > 0 ? a->d_model / a->n_heads : 0);
  r->d_ff = a->d_ff > 0 ? a->d_ff : a->d_ff_expert;
  if (r->d_model < 1 || r->n_heads < 1 || r->head_dim < 1 || r->d_ff < 1 ||
      r->n_heads % r->n_kv_heads)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "model '%s' has no layer shape to profile (d_model %lld, %lld/%lld "
                          "heads x %lld, FFN %lld)",
                          a->name, (long long)r->d_model, (long long)r->n_heads,
                          (long long)r->n_kv_heads, (long long)r->head_dim, (long long)r->d_ff);

  prof_t P = {.dev = dev, .o = opts, .p = opts->quick ? &quick_plan : &full_plan, .r = r};
  r->quick = opts->quick != 0;
  P.drv = !strcmp(info->driver, "cpu")      ? DRV_CPU
          : !strcmp(info->driver, "opencl") ? DRV_OPENCL
          : !strcmp(info->driver, "cuda")   ? DRV_CUDA
                                            : DRV_OTHER;
  if (P.drv == DRV_CPU) r->threads = rg_pool_threads(rg_device_cpu_pool(dev));
  P.host_memory = host_memory_device(info);
  // A quick profile sweeps the whole layer on the CPU, whose matmuls are
  // fast enough (the attention four alone, with the narrow k and v, read a
  // third of the FFN's rate at M = 256 there); elsewhere uploading and
  // sweeping the FFN's matrices in every type took PoCL 12 s more, so the
  // attention four stand for the layer.
  plan_t quick_here;
  if (opts->quick && P.drv != DRV_CPU) {
    quick_here = quick_plan;
    quick_here.n_shapes = 4;
    P.p = &quick_here;
  }
  // The full profile cycles the weights through twice the host's largest
  // cache where that holds them (some virtual machines report hundreds of
  // MiB of L3, and decode read 2x the read bandwidth with the weights in
  // it), within an eighth of the memory. Quick keeps to its 64 MiB, for
  // time, and says so in the file.
  P.footprint = weights_span(info, P.p->footprint, !opts->quick);
  r->footprint = P.footprint;
  // The decode points go past the cache in a quick profile too: with one
  // layer of the 1b model's weights (121 MiB bf16) in this VM's cache, its
  // AMX tiles read 0.95 of bandwidth at M = 8, against 0.6-0.8 from memory
  // in a real run (memory_by_m).
  P.mem_footprint = weights_span(info, P.footprint, 1);
  if (P.mem_footprint < P.footprint) P.mem_footprint = P.footprint;
  r->mem_footprint = P.mem_footprint;
  // A device of its own memory streams past its caches from the plan's
  // footprint on (a GPU's L2 is tens of MiB); one in the host's, from twice
  // the host's largest cache.
  r->decode_past_cache = !P.host_memory || P.mem_footprint >= 2 * rg_limits_host_cache_bytes();
  P.total = 1 + 1 + 3 + 1 + 1 + P.p->n_ctx + 1 + RG_PROFILE_DTYPES * (1 + P.p->n_m) +
            (opts->stage_model != NULL);
  for (int i = 0; i < RG_PROFILE_DTYPES; i++) {
    r->matmul[i].dtype = profile_dtypes[i];
    r->matmul[i].compute = profile_compute[i];
    snprintf(r->matmul[i].peak_path, sizeof r->matmul[i].peak_path, "none");
  }
  double t0 = rg_clock_now();
  rg_status_t s = NULL;

  // The stages first: their engine's first step must be the first work
  // this process gives the device, as a worker's is, or the kernel builds
  // the measurements below would have done (every OpenCL program but one)
  // are missing from the process's once-only cost (PoCL: 50 ms measured
  // after them, against a worker's first FFN call of 92 ms).
  rg_engine_t *se = NULL;
  if (opts->stage_model)
    time_stages(&P, &se);
  else
    snprintf(r->stages.reason, sizeof r->stages.reason, "no stage model given");
  progress(&P, "read bandwidth and matrix peaks");
  s = limits(&P, 0);
  if (s) goto fail_limits;
  progress(&P, "write bandwidth");
  measure_write(&P);
  measure_copies(&P);
  measure_launch(&P);
  measure_attention(&P);
  for (int i = 0; i < RG_PROFILE_DTYPES && !s; i++) s = sweep_dtype(&P, &r->matmul[i]);
  if (s) goto fail;
  // Quick too: on a busy machine one reading can be half the next.
  progress(&P, "read bandwidth again (a busy machine reads low)");
  s = limits(&P, 1);
  if (s) goto fail_limits;
  r->seconds = rg_clock_now() - t0;
  derive(r, opts->cls);
  if (se) s = fit_stages(r, rg_engine_arch(se));
  rg_engine_destroy(se);
  return s;
fail_limits:
  s = rg_status_wrap(s, "profiling %s", r->device);
fail:
  rg_engine_destroy(se);
  return s;
}

// ----- The calibrated class file ------------------------------------------------------

// A YAML double-quoted scalar: backslashes and quotes escaped, control
// characters dropped, at most `max` characters of s.
static void yaml_quoted(FILE *f, const char *s, size_t max) {
  fputc('"', f);
  for (size_t i = 0; s[i] && i < max; i++) {
    unsigned char ch = (unsigned char)s[i];
    if (ch < 0x20) continue;
    if (ch == '"' || ch == '\\') fputc('\\', f);
    fputc(ch, f);
  }
  fputc('"', f);
}

static void comment_bw(FILE *f, const char *what, const rg_profile_bw_t *b) {
  char q[32];
  if (b->rate > 0)
    fprintf(f, "#   %-16s %-12s %s\n", what,
            rg_fmt_quantity(b->rate, RG_UNIT_BANDWIDTH, q, sizeof q), b->how);
  else
    fprintf(f, "#   %-16s not measured: %s\n", what, b->reason);
}

static int has_memory_curves(const rg_profile_derived_t *d) {
  for (int i = 0; i < RG_PROFILE_DTYPES; i++)
    if (d->curve[i].n_mem > 0) return 1;
  return 0;
}

// One curve of the class file, "    bf16: { 1: 0.9, 8: 0.45 }": the first
// n points of c's M with their values v; nothing when n is 0.
static void write_curve(FILE *f, const rg_profile_curve_t *c, int n, const double *v) {
  if (n == 0) return;
  fprintf(f, "    %s: {", rg_dtype_name(c->compute));
  for (int j = 0; j < n; j++) fprintf(f, "%s %lld: %.3g", j ? "," : "", (long long)c->m[j], v[j]);
  fprintf(f, " }\n");
}

rg_status_t rg_profile_write_class(const rg_profile_result_t *r, FILE *f) {
  if (!r || !f) return rg_status_make(RG_INVALID_ARGUMENT, "rg_profile_write_class: NULL");
  const rg_profile_derived_t *d = &r->cls;
  if (!d->have_class)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "the profile of %s names no device class; a calibrated file overlays "
                          "a class of configs/devices (give one)",
                          r->device);
  char q[32], q2[32];
  fprintf(f, "# %s, calibrated by `ridge profile` on %s (%s), %s.\n", d->sheet.name, r->device,
          r->device_name, r->date);
  fprintf(f,
          "# %s profile, %.1f s, at the shapes of one layer of %s (d_model %lld, %lld/%lld "
          "heads x %lld, FFN %lld).\n",
          r->quick ? "Quick" : "Full", r->seconds, r->model, (long long)r->d_model,
          (long long)r->n_heads, (long long)r->n_kv_heads, (long long)r->head_dim,
          (long long)r->d_ff);
  char fp[32], fp2[32];
  if (r->mem_footprint > r->footprint)
    fprintf(f, "# Weights cycled through %s at M <= %d, %s past it%s.\n",
            rg_fmt_bytes_iec((double)r->mem_footprint, fp, sizeof fp), RG_PROFILE_MEM_MAX_M,
            rg_fmt_bytes_iec((double)r->footprint, fp2, sizeof fp2),
            r->quick ? " (quick: the larger M reuse their weights)" : "");
  else
    fprintf(f, "# Weights cycled through %s%s.\n",
            rg_fmt_bytes_iec((double)r->footprint, fp, sizeof fp),
            r->quick ? " (quick: a large cache may hold them, so m = 1 may read high; the full "
                       "profile cycles them through more than the host's cache)"
                     : "");
  fprintf(f,
          "# The figures below replace the datasheet's (%s); the rest of the class stays as it "
          "gives them.\n#\n# Measured:\n",
          d->sheet.path[0] ? d->sheet.path : d->sheet.name);
  comment_bw(f, "read", &r->read);
  if (d->bandwidth > 0 && d->bandwidth != r->read.rate)
    fprintf(f, "#   memory.bandwidth is %s\n", d->bandwidth_why);
  comment_bw(f, "write", &r->write);
  comment_bw(f, "copy on device", &r->copy);
  comment_bw(f, "host -> device", &r->to_device);
  comment_bw(f, "device -> host", &r->to_host);
  if (r->launch > 0)
    fprintf(f, "#   %-16s %-12s tiny ops submitted back to back\n", "per-op cost",
            rg_fmt_quantity(r->launch, RG_UNIT_TIME, q, sizeof q));
  else
    fprintf(f, "#   %-16s not measured: %s\n", "per-op cost", r->launch_reason);
  for (int i = 0; i < RG_PROFILE_DTYPES; i++) {
    const rg_profile_matmul_t *mm = &r->matmul[i];
    if (mm->n == 0) {
      fprintf(f, "#   matmul %-9s not measured: %s\n", rg_dtype_name(mm->dtype), mm->reason);
      continue;
    }
    fprintf(f, "#   matmul %-9s", rg_dtype_name(mm->dtype));
    for (int j = 0; j < mm->n; j++)
      fprintf(f, "%s M %lld: %s", j ? "," : "", (long long)mm->m[j],
              rg_fmt_quantity(mm->flops[j], RG_UNIT_FLOPS, q, sizeof q));
    fprintf(f, "\n");
    if (mm->peak > 0)
      fprintf(f, "#   %-16s %s (%s)\n", "", rg_fmt_quantity(mm->peak, RG_UNIT_FLOPS, q, sizeof q),
              mm->peak_path);
  }
  if (r->n_ctx > 0) {
    fprintf(f, "#   attention        %s KV, %d sequences:", rg_dtype_name(r->kv), r->attn_seqs);
    for (int j = 0; j < r->n_ctx; j++)
      fprintf(f, "%s %lld positions %s", j ? "," : "", (long long)r->ctx[j],
              rg_fmt_quantity(r->attn_rate[j], RG_UNIT_BANDWIDTH, q, sizeof q));
    fprintf(f, "\n");
  } else {
    fprintf(f, "#   attention        not measured: %s\n", r->attn_reason);
  }
  int n_curves = 0;
  for (int i = 0; i < RG_PROFILE_DTYPES; i++) n_curves += d->curve[i].n > 0;
  fprintf(f, "#\n");
  if (n_curves)
    fprintf(f, "# efficiency.compute: FLOP/s at each GEMM M as a fraction of a peak:\n");
  for (int i = 0; i < RG_PROFILE_DTYPES; i++) {
    const rg_profile_curve_t *c = &d->curve[i];
    if (c->n == 0) continue;
    fprintf(f, "#   %-5s %s%s%s\n", rg_dtype_name(c->compute), c->why,
            c->weights != c->compute ? "; measured on " : "",
            c->weights != c->compute ? rg_dtype_name(c->weights) : "");
    if (c->weights != c->compute)
      fprintf(f, "#         weights, which the planner prices at their compute type, %s\n",
              rg_dtype_name(c->compute));
  }
  if (d->eff_memory_why[0]) fprintf(f, "# efficiency.memory: %s.\n", d->eff_memory_why);
  if (has_memory_curves(d))
    fprintf(f,
            "# efficiency.memory_by_m: each type's weight stream at GEMM M up to %d over the "
            "read bandwidth (a decode batch's kernel need not stream as batch 1's does).\n",
            RG_PROFILE_MEM_MAX_M);
  if (d->eff_attention > 0) fprintf(f, "# efficiency.attention: %s.\n", d->eff_attention_why);
  if (d->eff_attention_compute > 0)
    fprintf(f, "# efficiency.attention_compute: %s.\n", d->eff_attention_compute_why);
  if (d->n_attn)
    fprintf(f,
            "# efficiency.attention_by_context: the same at each context measured, which the\n"
            "#   cost model interpolates by a step's context.\n");
  if (d->layer >= 0 && !d->have_stages)
    fprintf(f,
            "# overhead: the per-op cost times the ops the cost model prices by no roofline "
            "term,\n#   8 a layer (norms, rope, KV write, residual adds, swiglu) and 3 a step "
            "(embed, final norm, sample).\n");
  static const char *const kinds[RG_STAGE_SLOTS] = {"embed", "attention", "ffn", "lm_head"};
  const rg_profile_stages_t *S = &r->stages;
  if (d->have_stages) {
    if (d->step_measured == 2)
      fprintf(f,
              "# overhead: step is what an iteration of the runtime's serving loop took beyond\n"
              "#   its stages (scheduling, sampling, the engine's uploads and logits), %lld\n"
              "#   iterations of 8 short requests, the median of 3 runs; layer is 0, since the\n"
              "#   ops it stood for run inside the stages, priced by stages: below.\n",
              (long long)S->serve_iterations);
    else if (d->step_measured)
      fprintf(
          f,
          "# overhead: step is what the engine's forward took beyond its stages (uploads,\n"
          "#   the logits copied out and checked), the mean over the shapes below; layer is\n"
          "#   0, since the ops it stood for run inside the stages, priced by stages: below.\n");
    else
      fprintf(
          f,
          "# overhead: step is the per-op cost times 3 (embed, final norm, sample); layer is "
          "0,\n#   since the ops it stood for run inside the stages, priced by stages: below.\n");
    fprintf(f,
            "# stages: %s's stage instances on %s, %d steps of each shape in turn (the slowest\n"
            "#   tenth dropped, the rest averaged); each kind's time\n"
            "#   less the cost model's roofline on the figures above, fitted as calls x (call +\n"
            "#   token x tokens) (calls: %lld layers for attention and ffn, 1 for embed and "
            "lm_head)\n"
            "#   (the efficiency factor is not fitted: see runtime/profile.h); by_tokens: the\n"
            "#   same per call at each shape's tokens per call, which the cost model uses in\n"
            "#   place of call and token (linear between the points);\n"
            "%s"
            "#   cold: the decode of 1 again, %d steps each after %.3g ms %s, less the same\n"
            "#   step back to back, per call of the kind (a call a worker makes after waiting\n"
            "#   for another's data pays it);\n"
            "#   measured / priced:\n",
            S->model, r->device, S->reps, (long long)S->layers,
            S->have_fresh
                ? "#   first: a second engine's first step (a prompt of 16) less the first "
                  "engine's\n#   second; overhead.first: the first engine's first step less the "
                  "second's (what\n#   the process paid once: kernel builds).\n"
                : "#   first: the fresh engine's first step (a prompt of 16) less the same step "
                  "again\n#   (no room for a second engine to tell the process's part).\n",
            S->gapped_reps, S->gap * 1e3,
            S->gap_busy ? "of the host's cores streaming 64 MiB" : "idle");
    for (int k = 0; k < S->n; k++) {
      const rg_profile_stage_shape_t *sh = &S->shape[k];
      char what[48];
      if (sh->tokens > 1)
        snprintf(what, sizeof what, "prefill of %d", sh->tokens);
      else
        snprintf(what, sizeof what, "decode x %d at %lld", sh->seqs, (long long)sh->context);
      fprintf(f, "#   %-18s", what);
      for (int j = 0; j < RG_STAGE_SLOTS; j++)
        fprintf(f, "%s %s %s / %s", j ? "," : "", kinds[j],
                rg_fmt_quantity(sh->seconds[j], RG_UNIT_TIME, q, sizeof q),
                rg_fmt_quantity(sh->fitted[j], RG_UNIT_TIME, q2, sizeof q2));
      fprintf(f, "\n");
    }
  } else if (S->reason[0]) {
    fprintf(f, "# stages: not measured: %s\n", S->reason);
  }

  fprintf(f, "name: %s\n", d->sheet.name);
  fprintf(f, "measured: { by: ridge profile, date: %s, device: ", r->date);
  char dev[160];
  snprintf(dev, sizeof dev, "%s %s", r->device, r->device_name);
  yaml_quoted(f, dev, 95);  // the loader keeps at most 95 characters
  fprintf(f, " }\n");
  int n_peak = 0;
  for (int i = 0; i < RG_PROFILE_DTYPES; i++) {
    const rg_profile_curve_t *c = &d->curve[i];
    if (c->n == 0 || c->from_datasheet) continue;
    fprintf(f, "%s%s: %s", n_peak++ ? ", " : "peak: { ", rg_dtype_name(c->compute),
            rg_fmt_quantity(c->peak, RG_UNIT_FLOPS, q, sizeof q));
  }
  if (n_peak) fprintf(f, " }\n");
  if (d->bandwidth > 0 && d->sheet.tier[0])
    fprintf(f, "memory:\n  - { name: %s, bandwidth: %s }   # datasheet %s\n", d->sheet.tier,
            rg_fmt_quantity(d->bandwidth, RG_UNIT_BANDWIDTH, q, sizeof q),
            rg_fmt_quantity(d->sheet.bandwidth, RG_UNIT_BANDWIDTH, q2, sizeof q2));
  if (d->eff_memory > 0 || d->eff_attention > 0 || d->eff_attention_compute > 0 || n_curves) {
    fprintf(f, "efficiency:\n");
    if (d->eff_memory > 0) fprintf(f, "  memory: %.3g\n", d->eff_memory);
    if (d->eff_attention > 0) fprintf(f, "  attention: %.3g\n", d->eff_attention);
    if (d->eff_attention_compute > 0)
      fprintf(f, "  attention_compute: %.3g\n", d->eff_attention_compute);
    for (int i = 0; i < d->n_attn; i++)
      fprintf(f, "%s%lld: %.3g", i ? ", " : "  attention_by_context: { ", (long long)d->attn_ctx[i],
              d->attn_eff[i]);
    if (d->n_attn) fprintf(f, " }\n");
    if (has_memory_curves(d)) {
      fprintf(f, "  memory_by_m:\n");
      for (int i = 0; i < RG_PROFILE_DTYPES; i++)
        write_curve(f, &d->curve[i], d->curve[i].n_mem, d->curve[i].mem);
    }
    if (n_curves) {
      fprintf(f, "  compute:\n");
      for (int i = 0; i < RG_PROFILE_DTYPES; i++)
        write_curve(f, &d->curve[i], d->curve[i].n, d->curve[i].eff);
    }
  }
  if (d->layer >= 0) {
    fprintf(f, "overhead: { step: %s, layer: %s",
            rg_fmt_quantity(d->step, RG_UNIT_TIME, q, sizeof q),
            rg_fmt_quantity(d->layer, RG_UNIT_TIME, q2, sizeof q2));
    if (d->process_first >= 0)
      fprintf(f, ", first: %s", rg_fmt_quantity(d->process_first, RG_UNIT_TIME, q, sizeof q));
    int n_ops = 0;
    for (int k = 0; d->have_first_op && k < RG_OP_COUNT; k++)
      if (d->first_op[k] >= 0)
        fprintf(f, "%s%s: %s", n_ops++ ? ", " : ",\n    first_by_op: { ",
                rg_op_name((rg_op_kind_t)k),
                rg_fmt_quantity(d->first_op[k], RG_UNIT_TIME, q, sizeof q));
    if (n_ops) fprintf(f, " }");
    fprintf(f, " }\n");
  }
  if (d->have_stages) {
    fprintf(f, "stages:\n");
    for (int j = 0; j < RG_STAGE_SLOTS; j++) {
      fprintf(f, "  %s: { call: %s, token: %s", kinds[j],
              rg_fmt_quantity(d->stage[j].call, RG_UNIT_TIME, q, sizeof q),
              rg_fmt_quantity(d->stage[j].token, RG_UNIT_TIME, q2, sizeof q2));
      if (d->stage[j].eff > 0) fprintf(f, ", efficiency: %.3g", d->stage[j].eff);
      fprintf(f, ", first: %s", rg_fmt_quantity(d->stage[j].first, RG_UNIT_TIME, q, sizeof q));
      fprintf(f, ", cold: %s", rg_fmt_quantity(d->stage[j].cold, RG_UNIT_TIME, q, sizeof q));
      for (int i = 0; i < d->stage[j].n_points; i++)
        fprintf(f, "%s%g: %s", i ? ", " : ",\n      by_tokens: { ", d->stage[j].by_tokens[i].tokens,
                rg_fmt_quantity(d->stage[j].by_tokens[i].seconds, RG_UNIT_TIME, q, sizeof q));
      fprintf(f, "%s }\n", d->stage[j].n_points ? " }" : "");
    }
  }
  if (fflush(f) || ferror(f))
    return rg_status_make(RG_IO, "writing the calibrated class: %s", strerror(errno ? errno : EIO));
  return NULL;
}
