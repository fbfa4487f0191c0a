// devices/cuda/gpu_ops.c — each HAL op as launches of ridge's GPU kernels
// (see gpu_ops.h): the checks the kernels need, the choice of kernel and
// grid, and the argument struct of ops/cuda/kernels.h.
#include "devices/cuda/gpu_ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"

_Static_assert(RG_CUK_F32 == (int)RG_F32 && RG_CUK_BF16 == (int)RG_BF16 &&
                   RG_CUK_F16 == (int)RG_F16 && RG_CUK_Q8_0 == (int)RG_Q8_0,
               "ops/cuda/kernels.h numbers types as base/dtype.h");
_Static_assert(RG_CUK_GEMV_Q8_0_8 - RG_CUK_GEMV_F32_1 == 31, "GEMV kernels: 4 types x 8 m");
_Static_assert(RG_CUK_ATTN_F16_8 - RG_CUK_ATTN_F32_1 == 11, "attention kernels: 3 types x 4");
_Static_assert(RG_MOE_SOFTMAX_TOPK_RENORM == 0 && RG_MOE_SOFTMAX_TOPK == 1 &&
                   RG_MOE_TOPK_SOFTMAX == 2,
               "ops/cuda/moe.cu numbers the routing modes as ops/ops.h");

#define GRID_MAX_X 2147483647LL
#define GRID_MAX_YZ 65535LL
#define ELEMWISE_THREADS 256
#define ELEMWISE_BLOCKS 4096  // grid-stride kernels: enough blocks to fill any GPU

static const char *op_label(const rg_op_t *op) {
  return op->label ? op->label : "";
}

static int weight_type_ok(rg_dtype_t t) {
  return t == RG_F32 || t == RG_BF16 || t == RG_F16 || t == RG_Q8_0;
}

// The alignment (bytes) an operand's offset needs: GPUs fault on a load of
// an element that straddles its size. q8_0 rows are read bytewise where
// they are not 2-byte aligned.
static size_t operand_align(const rg_op_t *op, const char *name) {
  rg_dtype_t t = RG_F32;
  if (op->kind == RG_OP_MATMUL && !strcmp(name, "w")) t = op->matmul.wtype;
  if (op->kind == RG_OP_EMBED && !strcmp(name, "table")) t = op->embed.type;
  if ((op->kind == RG_OP_KV_WRITE || op->kind == RG_OP_ATTENTION) && !strncmp(name, "kv.", 3))
    t = op->kind == RG_OP_KV_WRITE ? op->kv_write.kv.dtype : op->attention.kv.dtype;
  if (op->kind == RG_OP_CONVERT && !strcmp(name, "src")) t = op->convert.from;
  if (op->kind == RG_OP_CONVERT && !strcmp(name, "dst")) t = op->convert.to;
  return t == RG_Q8_0 ? 1 : t == RG_BF16 || t == RG_F16 ? 2 : 4;
}

static rg_status_t refuse(const char *label, const rg_op_t *op, const char *fmt, long long a,
                          long long b) {
  char why[200];
  snprintf(why, sizeof why, fmt, a, b);
  return rg_status_make(RG_UNIMPLEMENTED, "%s: the GPU kernels for %s%s%s %s", label,
                        rg_op_name(op->kind), op->label ? " " : "", op_label(op), why);
}

rg_status_t rg__gpu_check_op(const char *label, const rg_op_t *op) {
  rg_op_operand_t ops[RG_OP_MAX_OPERANDS];
  size_t n;
  RG_RETURN_IF_ERROR(rg_op_operands(op, ops, &n));
  for (size_t i = 0; i < n; i++) {
    if (!ops[i].ref->buf) continue;
    size_t al = operand_align(op, ops[i].name);
    if (ops[i].ref->offset % al) {
      char why[120];
      snprintf(why, sizeof why, "need operand %s at a multiple of %%lld bytes, not offset %%lld",
               ops[i].name);
      return refuse(label, op, why, (long long)al, (long long)ops[i].ref->offset);
    }
  }
  switch (op->kind) {
    case RG_OP_MATMUL: {
      const rg_op_matmul_t *o = &op->matmul;
      if (!weight_type_ok(o->wtype))
        return rg_status_make(RG_UNIMPLEMENTED,
                              "%s has no matmul kernel for %s weights (it runs f32, bf16, f16 "
                              "and q8_0)",
                              label, rg_dtype_name(o->wtype));
      if (o->n > GRID_MAX_X || (o->m + RG_CUK_TILE_M - 1) / RG_CUK_TILE_M > GRID_MAX_YZ)
        return refuse(label, op, "take at most %lld rows of x and %lld of W", GRID_MAX_YZ * 64,
                      GRID_MAX_X);
      return NULL;
    }
    case RG_OP_EMBED:
      if (!weight_type_ok(op->embed.type))
        return rg_status_make(RG_UNIMPLEMENTED,
                              "%s has no embed kernel for %s tables (it reads f32, bf16, f16 and "
                              "q8_0)",
                              label, rg_dtype_name(op->embed.type));
      if (op->embed.n > GRID_MAX_X)
        return refuse(label, op, "take at most %lld ids%.0lld", GRID_MAX_X, 0);
      return NULL;
    case RG_OP_CONVERT:
      if (!weight_type_ok(op->convert.from) || !weight_type_ok(op->convert.to))
        return rg_status_make(RG_UNIMPLEMENTED,
                              "%s has no convert kernel from %s to %s (it converts between f32, "
                              "bf16, f16 and q8_0)",
                              label, rg_dtype_name(op->convert.from),
                              rg_dtype_name(op->convert.to));
      if (op->convert.n / 256 > GRID_MAX_X)
        return refuse(label, op, "take at most %lld elements%.0lld", GRID_MAX_X * 256, 0);
      return NULL;
    case RG_OP_ATTENTION: {
      const rg_op_attention_t *o = &op->attention;
      int64_t group = o->n_heads / o->kv.n_kv_heads;
      if (o->kv.head_dim > 256)
        return refuse(label, op, "take head_dim up to 256, not %lld%.0lld", o->kv.head_dim, 0);
      if (group > RG_CUK_ATTN_MAX_GROUP)
        return refuse(label, op, "take at most %lld query heads per KV head, not %lld",
                      RG_CUK_ATTN_MAX_GROUP, group);
      if (o->kv.n_kv_heads > GRID_MAX_YZ || o->meta.n_tokens > GRID_MAX_X)
        return refuse(label, op, "take at most %lld KV heads and %lld tokens", GRID_MAX_YZ,
                      GRID_MAX_X);
      return NULL;
    }
    case RG_OP_KV_WRITE:
      if (op->kv_write.kv.n_kv_heads > GRID_MAX_YZ || op->kv_write.meta.n_tokens > GRID_MAX_X)
        return refuse(label, op, "take at most %lld KV heads and %lld tokens", GRID_MAX_YZ,
                      GRID_MAX_X);
      return NULL;
    case RG_OP_ROPE:
      if (op->rope.n_heads > GRID_MAX_YZ || op->rope.n_tokens > GRID_MAX_X)
        return refuse(label, op, "take at most %lld heads and %lld tokens", GRID_MAX_YZ,
                      GRID_MAX_X);
      return NULL;
    case RG_OP_MOE_ROUTE:
      // The taken flags live in 48 KiB of shared memory, one byte an expert.
      if (op->moe_route.E > 49152)
        return refuse(label, op, "take at most %lld experts, not %lld", 49152, op->moe_route.E);
      return NULL;
    case RG_OP_MOE_GROUP:
      if (op->moe_group.T * op->moe_group.k > 2147483647LL)
        return refuse(label, op, "take at most %lld (token, slot) pairs, not %lld", 2147483647LL,
                      op->moe_group.T * op->moe_group.k);
      return NULL;
    case RG_OP_MOE_SCATTER_ADD:
    case RG_OP_MOE_GATHER:
      if (op->moe_gather.n > GRID_MAX_X)
        return refuse(label, op, "take at most %lld rows%.0lld", GRID_MAX_X, 0);
      return NULL;
    case RG_OP_RMSNORM:
    case RG_OP_SOFTMAX:
    case RG_OP_SAMPLE: {
      int64_t rows = op->kind == RG_OP_RMSNORM   ? op->rmsnorm.rows
                     : op->kind == RG_OP_SOFTMAX ? op->softmax.rows
                                                 : op->sample.rows;
      if (rows > GRID_MAX_X)
        return refuse(label, op, "take at most %lld rows%.0lld", GRID_MAX_X, 0);
      return NULL;
    }
    default:
      return NULL;
  }
}

// ----- Launch helpers ------------------------------------------------------------

static unsigned blocks_for(int64_t n, int64_t per_block) {
  int64_t b = (n + per_block - 1) / per_block;
  return (unsigned)(b < 1 ? 1 : b > ELEMWISE_BLOCKS ? ELEMWISE_BLOCKS : b);
}

// Threads for a row kernel over `len` elements: a multiple of 32, at most 256.
static unsigned row_threads(int64_t len) {
  int64_t t = (len + 31) / 32 * 32;
  return (unsigned)(t < 32 ? 32 : t > 256 ? 256 : t);
}

// Each kernel's argument struct, from the one table: a launch with the
// wrong struct is a bug caught here rather than a kernel reading garbage.
static const size_t arg_size[] = {
#define RG_X_(e, s, a) sizeof(a),
    RG_CUDA_KERNELS(RG_X_)
#undef RG_X_
};

static rg_status_t launch(const rg__gpu_queue_t *q, rg_cuk_t k, unsigned gx, unsigned gy,
                          unsigned gz, unsigned threads, unsigned smem, const void *args,
                          size_t size) {
  if (size != arg_size[k])
    return rg_status_make(RG_INTERNAL, "%s: kernel %d launched with a %zu-byte struct, not %zu",
                          q->label, (int)k, size, arg_size[k]);
  return q->launch(q->ctx, k, gx, gy, gz, threads, smem, args, size);
}

#define LAUNCH(q, k, gx, gy, gz, threads, smem, args) \
  launch((q), (k), (gx), (gy), (gz), (threads), (smem), &(args), sizeof(args))

const char *rg__gpu_matmul_path(int64_t m, rg_dtype_t wtype, int have_blas) {
  if (m <= RG_CUK_GEMV_MAX_M) return "gemv";
  if (have_blas && m >= RG_GPU_BLAS_MIN_M && wtype != RG_Q8_0) return "blas";
  return "tiled";
}

void rg__gpu_gemv_split(int64_t n, int64_t k, rg_dtype_t wtype, int aligned, int multiprocessors,
                        int32_t *out_ksplit) {
  // The smallest split that gives two blocks per SM, and never more slices
  // than k has whole steps.
  const int64_t unit = !aligned ? 32 : wtype == RG_Q8_0 ? 1024 : 256;
  const int64_t want = 2 * (int64_t)(multiprocessors > 0 ? multiprocessors : 1);
  int32_t w = 1;
  while (w < 8 && (n + (RG_CUK_GEMV_THREADS / 32 / w) * RG_CUK_GEMV_ROWS - 1) /
                          ((RG_CUK_GEMV_THREADS / 32 / w) * RG_CUK_GEMV_ROWS) <
                      want)
    w *= 2;
  while (w > 1 && (k + unit - 1) / unit < w) w /= 2;
  *out_ksplit = w;
}

static int type_index(rg_dtype_t t) {
  return t == RG_F32 ? 0 : t == RG_BF16 ? 1 : t == RG_F16 ? 2 : 3;
}

static rg_status_t matmul(const rg__gpu_queue_t *q, const rg_op_matmul_t *o) {
  if (o->m == 0) return NULL;
  size_t row_bytes;
  RG_RETURN_IF_ERROR(rg_dtype_row_bytes(o->wtype, o->k, &row_bytes));
  rg_cuk_matmul_t a = {.x = q->addr(&o->x),
                       .w = q->addr(&o->w),
                       .bias = q->addr(&o->bias),
                       .y = q->addr(&o->y),
                       .m = o->m,
                       .n = o->n,
                       .k = o->k,
                       .w_row_bytes = (int64_t)row_bytes,
                       .wtype = (int32_t)o->wtype,
                       .ksplit = 1};
  int blas = o->m >= RG_GPU_BLAS_MIN_M && q->have_gemm && q->gemm && q->have_gemm(q->ctx);
  const char *path = rg__gpu_matmul_path(o->m, o->wtype, blas);
  if (!strcmp(path, "gemv")) {
    // 16-byte loads need x and every W row at 16-byte boundaries, and rows
    // that are whole 8-element steps; q8_0 reads its blocks 2 bytes at a
    // time.
    int x_ok = a.x % 16 == 0 && o->k % 8 == 0;
    a.aligned =
        o->wtype == RG_Q8_0 ? x_ok && a.w % 2 == 0 : x_ok && a.w % 16 == 0 && row_bytes % 16 == 0;
    rg__gpu_gemv_split(o->n, o->k, o->wtype, a.aligned, q->multiprocessors, &a.ksplit);
    int64_t per_block = (int64_t)(RG_CUK_GEMV_THREADS / 32 / a.ksplit) * RG_CUK_GEMV_ROWS;
    rg_cuk_t k = (rg_cuk_t)(RG_CUK_GEMV_F32_1 + type_index(o->wtype) * 8 + (o->m - 1));
    return LAUNCH(q, k, (unsigned)((o->n + per_block - 1) / per_block), 1, 1, RG_CUK_GEMV_THREADS,
                  0, a);
  }
  if (!strcmp(path, "blas")) {
    uint64_t x = a.x;
    if (o->wtype != RG_F32) {
      // Narrow x to the weight's type for the tensor cores.
      RG_RETURN_IF_ERROR(q->scratch(q->ctx, (size_t)(o->m * o->k) * 2, &x));
      rg_cuk_rows16_t c = {a.x, x, o->m * o->k, o->wtype == RG_BF16 ? 1 : 2, 0};
      RG_RETURN_IF_ERROR(LAUNCH(q, RG_CUK_ROWS_TO_16, blocks_for(c.n, ELEMWISE_THREADS), 1, 1,
                                ELEMWISE_THREADS, 0, c));
    }
    RG_RETURN_IF_ERROR(q->gemm(q->ctx, o->wtype, x, a.w, a.y, o->m, o->n, o->k));
    if (!a.bias) return NULL;
    rg_cuk_bias_t b = {a.y, a.bias, o->m, o->n};
    return LAUNCH(q, RG_CUK_BIAS_ADD, blocks_for(o->m * o->n, ELEMWISE_THREADS), 1, 1,
                  ELEMWISE_THREADS, 0, b);
  }
  return LAUNCH(q, RG_CUK_GEMM_TILED, (unsigned)((o->n + RG_CUK_TILE_N - 1) / RG_CUK_TILE_N),
                (unsigned)((o->m + RG_CUK_TILE_M - 1) / RG_CUK_TILE_M), 1, RG_CUK_TILE_THREADS, 0,
                a);
}

static rg_cuk_kv_t kv_args(const rg__gpu_queue_t *q, const rg_kv_ref_t *kv,
                           const rg_attn_meta_t *m) {
  return (rg_cuk_kv_t){q->addr(&kv->k),
                       q->addr(&kv->v),
                       q->addr(&m->seq),
                       q->addr(&m->pos),
                       q->addr(&m->table_off),
                       q->addr(&m->table),
                       kv->n_blocks,
                       kv->block_size,
                       kv->n_kv_heads,
                       kv->head_dim,
                       m->n_tokens,
                       m->n_seqs,
                       m->n_table,
                       (int32_t)kv->dtype,
                       0};
}

void rg__gpu_attention_split(int64_t n_tokens, int64_t n_kv_heads, int64_t max_ctx,
                             int multiprocessors, int64_t *out_splits, int64_t *out_len) {
  int64_t chunks = (max_ctx + RG_CUK_ATTN_SPLIT - 1) / RG_CUK_ATTN_SPLIT;
  int64_t pairs = n_tokens * n_kv_heads,
          want = 2 * (int64_t)(multiprocessors > 0 ? multiprocessors : 1);
  // Split only what leaves the GPU idle: enough blocks for two per SM.
  int64_t splits = pairs >= want ? 1 : (want + pairs - 1) / pairs;
  if (splits > chunks) splits = chunks;
  if (splits > GRID_MAX_YZ) splits = GRID_MAX_YZ;
  if (splits < 1) splits = 1;
  int64_t len = (max_ctx + splits - 1) / splits;
  len = (len + 31) / 32 * 32;
  if (len < 32) len = 32;
  *out_splits = splits;
  *out_len = splits == 1 ? ((max_ctx + 31) / 32 * 32 > 32 ? (max_ctx + 31) / 32 * 32 : 32) : len;
}

static rg_status_t attention(const rg__gpu_queue_t *q, const rg_op_attention_t *o) {
  if (o->meta.n_tokens == 0) return NULL;
  const int64_t hd = o->kv.head_dim, group = o->n_heads / o->kv.n_kv_heads;
  // No sequence has more positions than the whole table holds.
  int64_t max_ctx = o->meta.n_table * o->kv.block_size, splits, len;
  if (max_ctx < 1) max_ctx = 1;
  rg__gpu_attention_split(o->meta.n_tokens, o->kv.n_kv_heads, max_ctx, q->multiprocessors, &splits,
                          &len);
  rg_cuk_attention_t a = {kv_args(q, &o->kv, &o->meta),
                          q->addr(&o->q),
                          q->addr(&o->o),
                          q->addr(&o->sinks),
                          0,
                          o->n_heads,
                          o->window,
                          splits,
                          len,
                          o->scale != 0 ? o->scale : (float)(1.0 / sqrt((double)hd)),
                          0};  // k_vec below
  a.k_vec = hd % 8 == 0 && a.kv.k % 16 == 0;
  if (splits > 1)
    RG_RETURN_IF_ERROR(q->scratch(
        q->ctx, (size_t)(o->meta.n_tokens * o->n_heads * splits * (hd + 2)) * sizeof(float),
        &a.part));
  int epl = hd <= 32 ? 1 : hd <= 64 ? 2 : hd <= 128 ? 4 : 8;
  int e = epl == 1 ? 0 : epl == 2 ? 1 : epl == 4 ? 2 : 3;
  rg_cuk_t k = (rg_cuk_t)(RG_CUK_ATTN_F32_1 + type_index(o->kv.dtype) * 4 + e);
  RG_RETURN_IF_ERROR(LAUNCH(q, k, (unsigned)o->meta.n_tokens, (unsigned)o->kv.n_kv_heads,
                            (unsigned)splits, (unsigned)(group * 32),
                            (unsigned)(group * hd * sizeof(float)), a));
  if (splits == 1) return NULL;
  return LAUNCH(q, RG_CUK_ATTN_MERGE, (unsigned)o->meta.n_tokens, (unsigned)o->n_heads, 1,
                row_threads(hd), 0, a);
}

// Greedy rows on the device; the others read back and drawn on the host
// with ops/'s sampler, so that a seed draws the same token as on the CPU.
static rg_status_t sample(const rg__gpu_queue_t *q, const rg_op_sample_t *o) {
  int64_t host_rows = 0;
  for (int64_t r = 0; r < o->rows; r++) {
    const rg_sampler_config_t *c = &o->cfg[r];
    if (!(c->temperature >= 0) || c->top_k < 0 || !(c->top_p > 0 && c->top_p <= 1))
      return rg_status_make(RG_INVALID_ARGUMENT,
                            "row %lld: sampler temperature %g, top-k %d, top-p %g", (long long)r,
                            (double)c->temperature, (int)c->top_k, (double)c->top_p);
    host_rows += c->temperature != 0;
  }
  if (o->rows == 0) return NULL;
  rg_cuk_argmax_t a = {q->addr(&o->logits), q->addr(&o->out), o->rows, o->vocab};
  RG_RETURN_IF_ERROR(LAUNCH(q, RG_CUK_ARGMAX, (unsigned)o->rows, 1, 1, 256, 0, a));
  if (!host_rows) return NULL;
  size_t v = (size_t)o->vocab;
  float *logits = malloc(v * sizeof(float)), *prob = malloc(v * sizeof(float));
  int32_t *idx = malloc(v * sizeof(int32_t));
  rg_status_t s = NULL;
  if (!logits || !prob || !idx)
    s = rg_status_make(RG_OUT_OF_MEMORY, "sample on %s: no host memory for a row of %zu logits",
                       q->label, v);
  for (int64_t r = 0; !s && r < o->rows; r++) {
    if (o->cfg[r].temperature == 0) continue;
    s = q->read(q->ctx, logits, a.logits + (uint64_t)r * v * sizeof(float), v * sizeof(float));
    if (s) break;
    int32_t tok = rg_sample_draw(&o->cfg[r], logits, v, o->u[r], idx, prob);
    s = q->write(q->ctx, a.out + (uint64_t)r * sizeof(int32_t), &tok, sizeof tok);
  }
  free(logits), free(prob), free(idx);
  return s;
}

rg_status_t rg__gpu_submit(const rg__gpu_queue_t *q, const rg_op_t *op) {
  switch (op->kind) {
    case RG_OP_MATMUL:
      return matmul(q, &op->matmul);
    case RG_OP_RMSNORM: {
      const rg_op_rmsnorm_t *o = &op->rmsnorm;
      if (!o->rows) return NULL;
      rg_cuk_rmsnorm_t a = {
          q->addr(&o->x), q->addr(&o->weight), q->addr(&o->y), o->rows, o->dim, o->eps, 0};
      return LAUNCH(q, RG_CUK_RMSNORM, (unsigned)o->rows, 1, 1, row_threads(o->dim), 0, a);
    }
    case RG_OP_ROPE: {
      const rg_op_rope_t *o = &op->rope;
      if (!o->n_tokens) return NULL;
      rg_cuk_rope_t a = {q->addr(&o->x), q->addr(&o->pos), q->addr(&o->inv_freq),
                         o->n_tokens,    o->n_heads,       o->head_dim};
      return LAUNCH(q, RG_CUK_ROPE, (unsigned)o->n_tokens, (unsigned)o->n_heads, 1,
                    row_threads(o->head_dim / 2), 0, a);
    }
    case RG_OP_SOFTMAX: {
      const rg_op_softmax_t *o = &op->softmax;
      if (!o->rows) return NULL;
      rg_cuk_softmax_t a = {q->addr(&o->x), o->rows, o->n};
      return LAUNCH(q, RG_CUK_SOFTMAX, (unsigned)o->rows, 1, 1, row_threads(o->n), 0, a);
    }
    case RG_OP_KV_WRITE: {
      const rg_op_kv_write_t *o = &op->kv_write;
      if (!o->meta.n_tokens) return NULL;
      rg_cuk_kv_write_t a = {kv_args(q, &o->kv, &o->meta), q->addr(&o->k), q->addr(&o->v)};
      return LAUNCH(q, RG_CUK_KV_WRITE, (unsigned)o->meta.n_tokens, (unsigned)o->kv.n_kv_heads, 1,
                    row_threads(o->kv.head_dim), 0, a);
    }
    case RG_OP_ATTENTION:
      return attention(q, &op->attention);
    case RG_OP_SWIGLU:
    case RG_OP_ADD: {
      int sw = op->kind == RG_OP_SWIGLU;
      rg_cuk_binary_t a = sw ? (rg_cuk_binary_t){q->addr(&op->swiglu.gate), q->addr(&op->swiglu.up),
                                                 q->addr(&op->swiglu.out), op->swiglu.n}
                             : (rg_cuk_binary_t){q->addr(&op->add.a), q->addr(&op->add.b),
                                                 q->addr(&op->add.out), op->add.n};
      if (!a.n) return NULL;
      return LAUNCH(q, sw ? RG_CUK_SWIGLU : RG_CUK_ADD, blocks_for(a.n, ELEMWISE_THREADS), 1, 1,
                    ELEMWISE_THREADS, 0, a);
    }
    case RG_OP_MOE_ROUTE: {
      const rg_op_moe_route_t *o = &op->moe_route;
      if (!o->T) return NULL;
      rg_cuk_moe_route_t a = {q->addr(&o->logits),
                              q->addr(&o->idx),
                              q->addr(&o->w),
                              o->T,
                              o->E,
                              o->k,
                              (int32_t)o->mode,
                              0};
      return LAUNCH(q, RG_CUK_MOE_ROUTE, (unsigned)o->T, 1, 1, 32, (unsigned)o->E, a);
    }
    case RG_OP_MOE_GROUP: {
      const rg_op_moe_group_t *o = &op->moe_group;
      rg_cuk_moe_group_t a = {
          q->addr(&o->idx), q->addr(&o->offsets), q->addr(&o->rows), o->T, o->k, o->E};
      return LAUNCH(q, RG_CUK_MOE_GROUP, 1, 1, 1, o->E >= 1024 ? 1024 : row_threads(o->E), 0, a);
    }
    case RG_OP_MOE_GATHER: {
      const rg_op_moe_gather_t *o = &op->moe_gather;
      if (!o->n) return NULL;
      rg_cuk_moe_rows_t a = {
          q->addr(&o->x), q->addr(&o->rows), 0, q->addr(&o->out), o->T, o->n, o->k, o->dim};
      return LAUNCH(q, RG_CUK_MOE_GATHER, (unsigned)o->n, 1, 1, row_threads(o->dim), 0, a);
    }
    case RG_OP_MOE_SCATTER_ADD: {
      const rg_op_moe_scatter_add_t *o = &op->moe_scatter_add;
      if (!o->n) return NULL;
      rg_cuk_moe_rows_t a = {
          q->addr(&o->y), q->addr(&o->rows), q->addr(&o->w), q->addr(&o->out), o->T, o->n, o->k,
          o->dim};
      return LAUNCH(q, RG_CUK_MOE_SCATTER_ADD, (unsigned)((o->dim + 255) / 256), 1, 1, 256, 0, a);
    }
    case RG_OP_EMBED: {
      const rg_op_embed_t *o = &op->embed;
      if (!o->n) return NULL;
      size_t rb;
      RG_RETURN_IF_ERROR(rg_dtype_row_bytes(o->type, o->dim, &rb));
      rg_cuk_embed_t a = {q->addr(&o->table),
                          q->addr(&o->ids),
                          q->addr(&o->out),
                          o->vocab,
                          o->n,
                          o->dim,
                          (int64_t)rb,
                          (int32_t)o->type,
                          0};
      return LAUNCH(q, RG_CUK_EMBED, (unsigned)o->n, 1, 1, row_threads(o->dim), 0, a);
    }
    case RG_OP_CONVERT: {
      const rg_op_convert_t *o = &op->convert;
      if (!o->n) return NULL;
      rg_cuk_convert_t a = {q->addr(&o->src), q->addr(&o->dst), o->n, (int32_t)o->from,
                            (int32_t)o->to};
      // One warp per 32 elements, 8 warps a block.
      return LAUNCH(q, RG_CUK_CONVERT, (unsigned)((o->n + 255) / 256), 1, 1, 256, 0, a);
    }
    case RG_OP_SAMPLE:
      return sample(q, &op->sample);
    default:
      return rg_status_make(RG_INVALID_ARGUMENT, "unknown op %d", (int)op->kind);
  }
}
