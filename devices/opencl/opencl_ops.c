// devices/opencl/opencl_ops.c — the opencl backend's ops: each op of
// devices/op.h becomes one or two launches of its ops/opencl kernel on the
// queue, asynchronous like any OpenCL work (rg_queue_wait, or an event).
//
// The queue has checked every operand's range and its device; check_op
// adds what these kernels need (element types, alignment of each operand
// for its element type, sizes that fit the kernels' 32-bit indices, local
// memory). Metadata (ids, positions, block tables, routing) lives in device
// memory the host does not see: the kernels clamp it, and the first bad
// value they meet comes back from the next rg_queue_wait as an error
// naming it (rg__cl_take_fault).
//
// One op the device does not finish alone: sample. Greedy rows take the
// argmax on the device; rows that draw (temperature > 0, top-k, top-p) are
// read back and drawn by the CPU's sampler (ops/cpu), so a seed gives the
// same token here as there. That makes such a submit wait for the work
// before it.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "devices/opencl/opencl_impl.h"
#include "ops/ops.h"

// Work-items per group of the kernels that take one row per group; must
// match RW, AW and SW in ops/opencl.
#define ROW_WG 128
#define ATTN_WG 64
#define ATTN_MAX_GC 16
#define ATTN_CPU_GC 8  // CG in attention.cl's CPU kernel
#define SAMPLE_WG 128
// Work-items per group of the elementwise kernels, and of the GEMV (whose
// items are output columns).
#define FLAT_WG 64
#define GEMV_WG 16

static size_t round_up(size_t v, size_t m) {
  return (v + m - 1) / m * m;
}

// ----- What the device runs --------------------------------------------------------

int rg__cl_supports_op(rg_device_t *dev, rg_op_kind_t op) {
  return (unsigned)op < RG_OP_COUNT;
}

static int weight_type_ok(rg_dtype_t t) {
  return t == RG_F32 || t == RG_BF16 || t == RG_F16 || t == RG_Q8_0;
}

// The alignment an operand's start needs: its element's (q8_0 blocks start
// with an f16 scale).
static size_t operand_align(const rg_op_t *op, const char *name) {
  rg_dtype_t t = RG_F32;
  if (!strcmp(name, "w") && op->kind == RG_OP_MATMUL)
    t = op->matmul.wtype;
  else if (!strcmp(name, "table"))
    t = op->embed.type;
  else if (!strncmp(name, "kv.", 3))
    t = op->kind == RG_OP_KV_WRITE ? op->kv_write.kv.dtype : op->attention.kv.dtype;
  else if (!strcmp(name, "src"))
    t = op->convert.from;
  else if (!strcmp(name, "dst"))
    t = op->convert.to;
  return t == RG_F32 ? 4 : 2;
}

// The shape fields of op, for the 32-bit check.
static size_t shape_of(const rg_op_t *op, int64_t *v) {
  size_t n = 0;
  switch (op->kind) {
    case RG_OP_MATMUL:
      v[n++] = op->matmul.m, v[n++] = op->matmul.n, v[n++] = op->matmul.k;
      break;
    case RG_OP_RMSNORM:
      v[n++] = op->rmsnorm.rows, v[n++] = op->rmsnorm.dim;
      break;
    case RG_OP_ROPE:
      v[n++] = op->rope.n_tokens * op->rope.n_heads, v[n++] = op->rope.head_dim;
      break;
    case RG_OP_SOFTMAX:
      v[n++] = op->softmax.rows, v[n++] = op->softmax.n;
      break;
    case RG_OP_KV_WRITE:
    case RG_OP_ATTENTION: {
      const rg_kv_ref_t *kv = op->kind == RG_OP_KV_WRITE ? &op->kv_write.kv : &op->attention.kv;
      const rg_attn_meta_t *m =
          op->kind == RG_OP_KV_WRITE ? &op->kv_write.meta : &op->attention.meta;
      v[n++] = kv->n_blocks * kv->n_kv_heads, v[n++] = kv->block_size, v[n++] = kv->head_dim;
      v[n++] = m->n_tokens * kv->n_kv_heads, v[n++] = m->n_seqs + 1, v[n++] = m->n_table;
      if (op->kind == RG_OP_ATTENTION)
        v[n++] = m->n_tokens * op->attention.n_heads, v[n++] = op->attention.window;
      break;
    }
    case RG_OP_SWIGLU:
      v[n++] = op->swiglu.n;
      break;
    case RG_OP_MOE_ROUTE:
      v[n++] = op->moe_route.T * op->moe_route.E, v[n++] = op->moe_route.T * op->moe_route.k;
      break;
    case RG_OP_MOE_GROUP:
      v[n++] = op->moe_group.T * op->moe_group.k, v[n++] = op->moe_group.E + 1;
      break;
    case RG_OP_MOE_GATHER:
      v[n++] = op->moe_gather.T * op->moe_gather.k, v[n++] = op->moe_gather.n;
      v[n++] = op->moe_gather.dim;
      break;
    case RG_OP_MOE_SCATTER_ADD:
      v[n++] = op->moe_scatter_add.T * op->moe_scatter_add.k, v[n++] = op->moe_scatter_add.n;
      v[n++] = op->moe_scatter_add.dim;
      break;
    case RG_OP_EMBED:
      v[n++] = op->embed.vocab, v[n++] = op->embed.n, v[n++] = op->embed.dim;
      break;
    case RG_OP_ADD:
      v[n++] = op->add.n;
      break;
    case RG_OP_CONVERT:
      break;  // the kernel counts elements in 64 bits
    case RG_OP_SAMPLE:
      v[n++] = op->sample.rows, v[n++] = op->sample.vocab;
      break;
    default:
      break;
  }
  return n;
}

// Query heads one attention work-group serves: all of the GQA group when
// its queries, accumulators and scores fit the device's local memory, at
// most ATTN_MAX_GC. 0 when not even one head fits.
static int64_t attention_chunk(const rg__cl_context_t *cx, int64_t group, int64_t head_dim) {
  uint64_t fixed = 3 * ATTN_MAX_GC * 4 + ATTN_WG * 8 + 256;  // the kernel's own arrays, slack
  for (int64_t gc = group < ATTN_MAX_GC ? group : ATTN_MAX_GC; gc > 0; gc--)
    if (fixed + (uint64_t)gc * ((uint64_t)head_dim * 8 + ATTN_WG * 4) <= cx->local_mem) return gc;
  return 0;
}

rg_status_t rg__cl_check_op(rg_device_t *dev, const rg_op_t *op) {
  rg__cl_device_t *d = (rg__cl_device_t *)dev;
  rg_dtype_t t = rg_op_key_type(op);
  if (op->kind == RG_OP_CONVERT) {
    if (!weight_type_ok(op->convert.from) || !weight_type_ok(op->convert.to))
      return rg_status_make(RG_UNIMPLEMENTED,
                            "%s converts between f32, bf16, f16 and q8_0, not %s -> %s", dev->label,
                            rg_dtype_name(op->convert.from), rg_dtype_name(op->convert.to));
  } else if (!weight_type_ok(t)) {
    return rg_status_make(RG_UNIMPLEMENTED,
                          "%s has no %s kernel for %s (it runs f32, bf16, f16 and q8_0)",
                          dev->label, rg_op_name(op->kind), rg_dtype_name(t));
  }
  // The row kernels run groups of 128 items (ROW_WG, SAMPLE_WG).
  if (d->cx->max_wg < ROW_WG)
    return rg_status_make(RG_UNIMPLEMENTED,
                          "%s runs work-groups of at most %zu items; ridge's kernels need %d",
                          dev->label, d->cx->max_wg, ROW_WG);
  int64_t shape[12];
  size_t n = shape_of(op, shape);
  for (size_t i = 0; i < n; i++)
    if (shape[i] > INT32_MAX)
      return rg_status_make(RG_UNIMPLEMENTED,
                            "%s's %s kernel indexes with 32-bit integers; a size of %lld is "
                            "more than it takes (split the op)",
                            dev->label, rg_op_name(op->kind), (long long)shape[i]);
  rg_op_operand_t ops[RG_OP_MAX_OPERANDS];
  size_t n_ops;
  RG_RETURN_IF_ERROR(rg_op_operands(op, ops, &n_ops));
  for (size_t i = 0; i < n_ops; i++) {
    size_t align = operand_align(op, ops[i].name);
    if (ops[i].ref->buf && ops[i].ref->offset % align)
      return rg_status_make(RG_INVALID_ARGUMENT,
                            "%s reads operand %s at offset %zu, which is not a multiple of %zu "
                            "(its element's size)",
                            dev->label, ops[i].name, ops[i].ref->offset, align);
  }
  if (op->kind == RG_OP_ATTENTION &&
      !attention_chunk(d->cx, op->attention.n_heads / op->attention.kv.n_kv_heads,
                       op->attention.kv.head_dim))
    return rg_status_make(RG_UNIMPLEMENTED,
                          "%s's attention kernel keeps a head of %lld dimensions in local memory, "
                          "more than the device's %llu bytes hold",
                          dev->label, (long long)op->attention.kv.head_dim,
                          (unsigned long long)d->cx->local_mem);
  return NULL;
}

// ----- Faults the kernels reported -----------------------------------------------------

static const char *const fault_text[] = {"",
#define RG_X_(e, msg) msg,
                                         RG_CL_FAULT_MAP(RG_X_)
#undef RG_X_
};

rg_status_t rg__cl_take_fault(rg__cl_queue_t *q) {
  rg__cl_device_t *d = (rg__cl_device_t *)q->base.device;
  int32_t w[4] = {0};
  RG_RETURN_IF_ERROR(RG_CL_CALL(d->cl, clEnqueueReadBuffer, q->q, q->err, RG_CL_TRUE, 0, sizeof(w),
                                w, 0, NULL, NULL));
  if (!w[0]) return NULL;
  static const int32_t zero[4] = {0};
  RG_RETURN_IF_ERROR(RG_CL_CALL(d->cl, clEnqueueWriteBuffer, q->q, q->err, RG_CL_TRUE, 0,
                                sizeof(zero), zero, 0, NULL, NULL));
  char what[256];
  if (w[0] > 0 && w[0] < RG__CLE_COUNT)
    snprintf(what, sizeof(what), fault_text[w[0]], w[1], w[2], w[3]);
  else
    snprintf(what, sizeof(what), "fault %d (%d, %d, %d)", w[0], w[1], w[2], w[3]);
  return rg_status_make(RG_INVALID_ARGUMENT,
                        "%s: a kernel was given bad metadata and clamped it (its output is not "
                        "meaningful): %s",
                        d->base.label, what);
}

// ----- The ops -------------------------------------------------------------------------

static rg__cl_queue_t *cl_q(rg_queue_t *q) {
  return (rg__cl_queue_t *)q;
}

// The path for m rows (see ops/opencl/matmul.cl): GEMV with 1, 4 or 8 rows
// per pass up to 8 rows, then the GEMM of the device's kind.
static rg__cl_kernel_id_t matmul_kernel(int ti, int64_t m, int cpu, int *rows_per_pass) {
  static const rg__cl_kernel_id_t gemv[4][3] = {
      {RG__CLK_GEMV1_F32, RG__CLK_GEMV4_F32, RG__CLK_GEMV8_F32},
      {RG__CLK_GEMV1_BF16, RG__CLK_GEMV4_BF16, RG__CLK_GEMV8_BF16},
      {RG__CLK_GEMV1_F16, RG__CLK_GEMV4_F16, RG__CLK_GEMV8_F16},
      {RG__CLK_GEMV1_Q8_0, RG__CLK_GEMV4_Q8_0, RG__CLK_GEMV8_Q8_0}};
  static const rg__cl_kernel_id_t gemm[2][4] = {
      {RG__CLK_GEMM_F32, RG__CLK_GEMM_BF16, RG__CLK_GEMM_F16, RG__CLK_GEMM_Q8_0},
      {RG__CLK_RGEMM_F32, RG__CLK_RGEMM_BF16, RG__CLK_RGEMM_F16, RG__CLK_RGEMM_Q8_0}};
  *rows_per_pass = m == 1 ? 1 : m <= 4 ? 4 : 8;
  if (m > 8) return gemm[cpu][ti];
  return gemv[ti][m == 1 ? 0 : m <= 4 ? 1 : 2];
}

static rg_status_t matmul(rg__cl_queue_t *q, const rg_op_matmul_t *o) {
  if (o->m == 0) return NULL;
  int ti = o->wtype == RG_F32 ? 0 : o->wtype == RG_BF16 ? 1 : o->wtype == RG_F16 ? 2 : 3;
  // The tiled GEMM's groups are 256 items; a device that runs fewer takes
  // the register-blocked one, whose groups are 8.
  const rg__cl_context_t *cx = ((rg__cl_device_t *)q->base.device)->cx;
  int cpu = cx->cpu_shapes || cx->max_wg < 256, mr;
  rg__cl_args_t a;
  RG_RETURN_IF_ERROR(rg__cl_args_begin(q, matmul_kernel(ti, o->m, cpu, &mr), &a));
  rg__cl_arg_ref(&a, &o->x);
  rg__cl_arg_ref(&a, &o->w);
  rg__cl_arg_ref(&a, &o->bias);
  rg__cl_arg_ref(&a, &o->y);
  rg__cl_arg_int(&a, o->m);
  rg__cl_arg_int(&a, o->n);
  rg__cl_arg_int(&a, o->k);
  rg__cl_arg_int(&a, o->bias.buf != NULL);
  if (o->m <= 8) {
    size_t g[2] = {round_up((size_t)o->n, GEMV_WG), (size_t)((o->m + mr - 1) / mr)},
           l[2] = {GEMV_WG, 1};
    return rg__cl_launch(q, &a, 2, g, l);
  }
  if (cpu) {  // 8 x 2 outputs per item
    size_t g[2] = {round_up((size_t)(o->n + 1) / 2, 8), (size_t)(o->m + 7) / 8}, l[2] = {8, 1};
    return rg__cl_launch(q, &a, 2, g, l);
  }
  // 64 x 64 outputs per 16 x 16 group
  size_t g[2] = {(size_t)(o->n + 63) / 64 * 16, (size_t)(o->m + 63) / 64 * 16}, l[2] = {16, 16};
  return rg__cl_launch(q, &a, 2, g, l);
}

static void meta_args(rg__cl_args_t *a, const rg_attn_meta_t *m) {
  rg__cl_arg_ref(a, &m->seq);
  rg__cl_arg_ref(a, &m->pos);
  rg__cl_arg_ref(a, &m->table_off);
  rg__cl_arg_ref(a, &m->table);
}

static rg_status_t kv_write(rg__cl_queue_t *q, const rg_op_kv_write_t *o) {
  if (o->meta.n_tokens == 0) return NULL;
  rg__cl_args_t a;
  RG_RETURN_IF_ERROR(rg__cl_args_begin(q, RG__CLK_KV_WRITE, &a));
  rg__cl_arg_ref(&a, &o->kv.k);
  rg__cl_arg_ref(&a, &o->kv.v);
  rg__cl_arg_int(&a, o->kv.dtype);
  rg__cl_arg_int(&a, o->kv.n_blocks);
  rg__cl_arg_int(&a, o->kv.block_size);
  rg__cl_arg_int(&a, o->kv.n_kv_heads);
  rg__cl_arg_int(&a, o->kv.head_dim);
  meta_args(&a, &o->meta);
  rg__cl_arg_int(&a, o->meta.n_tokens);
  rg__cl_arg_int(&a, o->meta.n_seqs);
  rg__cl_arg_int(&a, o->meta.n_table);
  rg__cl_arg_ref(&a, &o->k);
  rg__cl_arg_ref(&a, &o->v);
  rg__cl_arg_mem(&a, q->err);
  size_t g = round_up((size_t)(o->meta.n_tokens * o->kv.n_kv_heads), FLAT_WG), l = FLAT_WG;
  return rg__cl_launch(q, &a, 1, &g, &l);
}

static rg_status_t attention(rg__cl_queue_t *q, const rg_op_attention_t *o) {
  if (o->meta.n_tokens == 0) return NULL;
  rg__cl_device_t *d = (rg__cl_device_t *)q->base.device;
  int64_t group = o->n_heads / o->kv.n_kv_heads, hd = o->kv.head_dim;
  int64_t gc = attention_chunk(d->cx, group, hd);
  int cpu = d->cx->cpu_shapes;
  if (cpu && gc > ATTN_CPU_GC) gc = ATTN_CPU_GC;
  // On a CPU device one item walks a (token, kv head) alone: split the
  // query heads further while there are fewer items than two per core, at
  // the price of reading that head's keys and values once more each.
  int64_t cores = d->base.info.compute_units > 0 ? d->base.info.compute_units : 1;
  while (cpu && gc > 1 && o->meta.n_tokens * o->kv.n_kv_heads * ((group + gc - 1) / gc) < 2 * cores)
    gc = (gc + 1) / 2;
  int64_t chunks = (group + gc - 1) / gc;
  static const rg__cl_kernel_id_t k[2][3] = {
      {RG__CLK_ATTENTION_F32, RG__CLK_ATTENTION_BF16, RG__CLK_ATTENTION_F16},
      {RG__CLK_ATTENTION_CPU_F32, RG__CLK_ATTENTION_CPU_BF16, RG__CLK_ATTENTION_CPU_F16}};
  rg__cl_args_t a;
  RG_RETURN_IF_ERROR(rg__cl_args_begin(q,
                                       k[cpu][o->kv.dtype == RG_F32    ? 0
                                              : o->kv.dtype == RG_BF16 ? 1
                                                                       : 2],
                                       &a));
  rg__cl_arg_ref(&a, &o->kv.k);
  rg__cl_arg_ref(&a, &o->kv.v);
  rg__cl_arg_int(&a, o->kv.n_blocks);
  rg__cl_arg_int(&a, o->kv.block_size);
  rg__cl_arg_int(&a, o->kv.n_kv_heads);
  rg__cl_arg_int(&a, hd);
  meta_args(&a, &o->meta);
  rg__cl_arg_int(&a, o->meta.n_seqs);
  rg__cl_arg_int(&a, o->meta.n_table);
  rg__cl_arg_ref(&a, &o->q);
  rg__cl_arg_ref(&a, &o->o);
  rg__cl_arg_ref(&a, &o->sinks);
  rg__cl_arg_int(&a, o->sinks.buf != NULL);
  rg__cl_arg_int(&a, o->n_heads);
  rg__cl_arg_float(&a, o->scale != 0 ? o->scale : (float)(1.0 / sqrt((double)hd)));
  rg__cl_arg_int(&a, o->window);
  rg__cl_arg_int(&a, gc);
  rg__cl_arg_mem(&a, q->err);
  rg__cl_arg_local(&a, (size_t)(gc * hd) * sizeof(float));
  if (cpu) {
    rg__cl_arg_local(&a, (size_t)(gc * hd) * sizeof(float));
    size_t g[3] = {(size_t)chunks, (size_t)o->kv.n_kv_heads, (size_t)o->meta.n_tokens},
           l[3] = {1, 1, 1};
    return rg__cl_launch(q, &a, 3, g, l);
  }
  rg__cl_arg_local(&a, (size_t)(gc * ATTN_WG) * sizeof(float));
  rg__cl_arg_local(&a, (size_t)(gc * hd) * sizeof(float));
  rg__cl_arg_local(&a, 3 * ATTN_MAX_GC * sizeof(float));
  rg__cl_arg_local(&a, ATTN_WG * sizeof(uint64_t));
  size_t g[3] = {(size_t)(ATTN_WG * chunks), (size_t)o->kv.n_kv_heads, (size_t)o->meta.n_tokens},
         l[3] = {ATTN_WG, 1, 1};
  return rg__cl_launch(q, &a, 3, g, l);
}

// One launch over n items in groups of FLAT_WG.
static rg_status_t flat(rg__cl_queue_t *q, rg__cl_args_t *a, int64_t n) {
  size_t g = round_up((size_t)n, FLAT_WG), l = FLAT_WG;
  return rg__cl_launch(q, a, 1, &g, &l);
}

// Rows of dim (rows of items, dim items each), in groups of FLAT_WG.
static rg_status_t rows_of(rg__cl_queue_t *q, rg__cl_args_t *a, int64_t dim, int64_t rows) {
  size_t g[2] = {round_up((size_t)dim, FLAT_WG), (size_t)rows}, l[2] = {FLAT_WG, 1};
  return rg__cl_launch(q, a, 2, g, l);
}

static rg_status_t sample(rg__cl_queue_t *q, const rg_op_sample_t *o) {
  if (o->rows == 0) return NULL;
  int drawn = 0;
  for (int64_t r = 0; r < o->rows; r++) {
    const rg_sampler_config_t *c = &o->cfg[r];
    if (!(c->temperature >= 0) || isinf(c->temperature) || c->top_k < 0 ||
        !(c->top_p > 0 && c->top_p <= 1))
      return rg_status_make(RG_INVALID_ARGUMENT,
                            "row %lld: sampler temperature %g, top-k %d, top-p %g", (long long)r,
                            (double)c->temperature, (int)c->top_k, (double)c->top_p);
    drawn += c->temperature != 0;
  }
  rg__cl_args_t a;
  RG_RETURN_IF_ERROR(rg__cl_args_begin(q, RG__CLK_ARGMAX, &a));
  rg__cl_arg_ref(&a, &o->logits);
  rg__cl_arg_ref(&a, &o->out);
  rg__cl_arg_int(&a, o->vocab);
  size_t g = (size_t)o->rows * SAMPLE_WG, l = SAMPLE_WG;
  RG_RETURN_IF_ERROR(rg__cl_launch(q, &a, 1, &g, &l));
  if (!drawn) return NULL;
  // The drawing rows, on the host: read each row in order with the queue's
  // work (blocking), draw, write the token over the argmax.
  rg__cl_device_t *d = (rg__cl_device_t *)q->base.device;
  size_t v = (size_t)o->vocab;
  float *logits = malloc(v * (2 * sizeof(float) + sizeof(int32_t)));
  if (!logits)
    return rg_status_make(RG_OUT_OF_MEMORY, "sampling on %s: no host memory for %zu logits",
                          d->base.label, v);
  float *prob = logits + v;
  int32_t *idx = (int32_t *)(prob + v);
  rg_status_t s = NULL;
  rg_cl_mem lm = ((rg__cl_buffer_t *)o->logits.buf)->mem, om = ((rg__cl_buffer_t *)o->out.buf)->mem;
  for (int64_t r = 0; r < o->rows && !s; r++) {
    if (o->cfg[r].temperature == 0) continue;
    s = RG_CL_CALL(d->cl, clEnqueueReadBuffer, q->q, lm, RG_CL_TRUE,
                   o->logits.offset + (size_t)r * v * sizeof(float), v * sizeof(float), logits, 0,
                   NULL, NULL);
    if (s) break;
    int32_t tok = rg_sample_draw(&o->cfg[r], logits, v, o->u[r], idx, prob);
    s = RG_CL_CALL(d->cl, clEnqueueWriteBuffer, q->q, om, RG_CL_TRUE,
                   o->out.offset + (size_t)r * sizeof(int32_t), sizeof(tok), &tok, 0, NULL, NULL);
  }
  free(logits);
  return s;
}

rg_status_t rg__cl_submit(rg_queue_t *queue, const rg_op_t *op) {
  rg__cl_queue_t *q = cl_q(queue);
  rg__cl_args_t a;
  switch (op->kind) {
    case RG_OP_MATMUL:
      return matmul(q, &op->matmul);
    case RG_OP_RMSNORM: {
      const rg_op_rmsnorm_t *o = &op->rmsnorm;
      if (o->rows == 0) return NULL;
      RG_RETURN_IF_ERROR(rg__cl_args_begin(q, RG__CLK_RMSNORM, &a));
      rg__cl_arg_ref(&a, &o->x);
      rg__cl_arg_ref(&a, &o->weight);
      rg__cl_arg_ref(&a, &o->y);
      rg__cl_arg_int(&a, o->dim);
      rg__cl_arg_float(&a, o->eps);
      size_t g = (size_t)o->rows * ROW_WG, l = ROW_WG;
      return rg__cl_launch(q, &a, 1, &g, &l);
    }
    case RG_OP_ROPE: {
      const rg_op_rope_t *o = &op->rope;
      if (o->n_tokens == 0) return NULL;
      RG_RETURN_IF_ERROR(rg__cl_args_begin(q, RG__CLK_ROPE, &a));
      rg__cl_arg_ref(&a, &o->x);
      rg__cl_arg_ref(&a, &o->pos);
      rg__cl_arg_ref(&a, &o->inv_freq);
      rg__cl_arg_int(&a, o->n_heads);
      rg__cl_arg_int(&a, o->head_dim);
      size_t g[3] = {round_up((size_t)o->head_dim / 2, 16), (size_t)o->n_heads,
                     (size_t)o->n_tokens},
             l[3] = {16, 1, 1};
      return rg__cl_launch(q, &a, 3, g, l);
    }
    case RG_OP_SOFTMAX: {
      const rg_op_softmax_t *o = &op->softmax;
      if (o->rows == 0) return NULL;
      RG_RETURN_IF_ERROR(rg__cl_args_begin(q, RG__CLK_SOFTMAX, &a));
      rg__cl_arg_ref(&a, &o->x);
      rg__cl_arg_int(&a, o->n);
      size_t g = (size_t)o->rows * ROW_WG, l = ROW_WG;
      return rg__cl_launch(q, &a, 1, &g, &l);
    }
    case RG_OP_KV_WRITE:
      return kv_write(q, &op->kv_write);
    case RG_OP_ATTENTION:
      return attention(q, &op->attention);
    case RG_OP_SWIGLU: {
      const rg_op_swiglu_t *o = &op->swiglu;
      if (o->n == 0) return NULL;
      RG_RETURN_IF_ERROR(rg__cl_args_begin(q, RG__CLK_SWIGLU, &a));
      rg__cl_arg_ref(&a, &o->gate);
      rg__cl_arg_ref(&a, &o->up);
      rg__cl_arg_ref(&a, &o->out);
      rg__cl_arg_int(&a, o->n);
      return flat(q, &a, o->n);
    }
    case RG_OP_MOE_ROUTE: {
      const rg_op_moe_route_t *o = &op->moe_route;
      if (o->T == 0) return NULL;
      RG_RETURN_IF_ERROR(rg__cl_args_begin(q, RG__CLK_MOE_ROUTE, &a));
      rg__cl_arg_ref(&a, &o->logits);
      rg__cl_arg_ref(&a, &o->idx);
      rg__cl_arg_ref(&a, &o->w);
      rg__cl_arg_int(&a, o->T);
      rg__cl_arg_int(&a, o->E);
      rg__cl_arg_int(&a, o->k);
      rg__cl_arg_int(&a, o->mode);
      return flat(q, &a, o->T);
    }
    case RG_OP_MOE_GROUP: {
      const rg_op_moe_group_t *o = &op->moe_group;
      RG_RETURN_IF_ERROR(rg__cl_args_begin(q, RG__CLK_MOE_GROUP, &a));
      rg__cl_arg_ref(&a, &o->idx);
      rg__cl_arg_ref(&a, &o->offsets);
      rg__cl_arg_ref(&a, &o->rows);
      rg__cl_arg_int(&a, o->T);
      rg__cl_arg_int(&a, o->k);
      rg__cl_arg_int(&a, o->E);
      rg__cl_arg_mem(&a, q->err);
      return flat(q, &a, o->E + 1);
    }
    case RG_OP_MOE_GATHER: {
      const rg_op_moe_gather_t *o = &op->moe_gather;
      if (o->n == 0) return NULL;
      RG_RETURN_IF_ERROR(rg__cl_args_begin(q, RG__CLK_MOE_GATHER, &a));
      rg__cl_arg_ref(&a, &o->x);
      rg__cl_arg_ref(&a, &o->rows);
      rg__cl_arg_ref(&a, &o->out);
      rg__cl_arg_int(&a, o->T);
      rg__cl_arg_int(&a, o->k);
      rg__cl_arg_int(&a, o->dim);
      rg__cl_arg_mem(&a, q->err);
      return rows_of(q, &a, o->dim, o->n);
    }
    case RG_OP_MOE_SCATTER_ADD: {
      const rg_op_moe_scatter_add_t *o = &op->moe_scatter_add;
      if (o->n == 0) return NULL;
      RG_RETURN_IF_ERROR(rg__cl_args_begin(q, RG__CLK_MOE_SCATTER_ADD, &a));
      rg__cl_arg_ref(&a, &o->y);
      rg__cl_arg_ref(&a, &o->rows);
      rg__cl_arg_ref(&a, &o->w);
      rg__cl_arg_ref(&a, &o->out);
      rg__cl_arg_int(&a, o->T);
      rg__cl_arg_int(&a, o->n);
      rg__cl_arg_int(&a, o->k);
      rg__cl_arg_int(&a, o->dim);
      rg__cl_arg_mem(&a, q->err);
      return flat(q, &a, o->dim);
    }
    case RG_OP_EMBED: {
      const rg_op_embed_t *o = &op->embed;
      if (o->n == 0) return NULL;
      RG_RETURN_IF_ERROR(rg__cl_args_begin(q, RG__CLK_EMBED, &a));
      rg__cl_arg_ref(&a, &o->table);
      rg__cl_arg_int(&a, o->type);
      rg__cl_arg_int(&a, o->vocab);
      rg__cl_arg_ref(&a, &o->ids);
      rg__cl_arg_ref(&a, &o->out);
      rg__cl_arg_int(&a, o->dim);
      rg__cl_arg_mem(&a, q->err);
      return rows_of(q, &a, o->dim, o->n);
    }
    case RG_OP_ADD: {
      const rg_op_add_t *o = &op->add;
      if (o->n == 0) return NULL;
      RG_RETURN_IF_ERROR(rg__cl_args_begin(q, RG__CLK_ADD, &a));
      rg__cl_arg_ref(&a, &o->a);
      rg__cl_arg_ref(&a, &o->b);
      rg__cl_arg_ref(&a, &o->out);
      rg__cl_arg_int(&a, o->n);
      return flat(q, &a, o->n);
    }
    case RG_OP_CONVERT: {
      const rg_op_convert_t *o = &op->convert;
      if (o->n == 0) return NULL;
      RG_RETURN_IF_ERROR(rg__cl_args_begin(q, RG__CLK_CONVERT, &a));
      rg__cl_arg_ref(&a, &o->src);
      rg__cl_arg_int(&a, o->from);
      rg__cl_arg_ref(&a, &o->dst);
      rg__cl_arg_int(&a, o->to);
      rg__cl_arg_long(&a, o->n);
      rg__cl_arg_mem(&a, q->err);
      int64_t per = o->from == RG_Q8_0 || o->to == RG_Q8_0 ? 32 : 1;
      return flat(q, &a, o->n / per);
    }
    case RG_OP_SAMPLE:
      return sample(q, &op->sample);
    default:
      return rg_status_make(RG_INVALID_ARGUMENT, "unknown op %d", (int)op->kind);
  }
}
