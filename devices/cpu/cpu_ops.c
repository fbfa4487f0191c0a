// devices/cpu/cpu_ops.c — the CPU backend's ops: each op of devices/op.h
// becomes a call to its ops/cpu kernel on host pointers into the buffers.
// The queue has checked every operand's range; the kernels check the
// metadata (ids, positions, block tables, routing) and fail before writing.
#include <stdlib.h>
#include <string.h>

#include "devices/cpu/cpu_impl.h"
#include "ops/matmul.h"
#include "ops/ops.h"

static void *P(const rg_ref_t *r) {
  return r->buf ? (char *)rg_buffer_host_ptr(r->buf) + r->offset : NULL;
}

static rg_status_t scratch(rg__cpu_device_t *cd, size_t bytes, void **out) {
  if (bytes > cd->scratch_bytes) {
    void *n = realloc(cd->scratch, bytes);
    if (!n)
      return rg_status_make(RG_OUT_OF_MEMORY, "%s: no memory for %zu bytes of scratch",
                            cd->base.label, bytes);
    cd->scratch = n;
    cd->scratch_bytes = bytes;
  }
  *out = cd->scratch;
  return NULL;
}

static rg_kv_layer_t kv_view(const rg_kv_ref_t *kv) {
  return (rg_kv_layer_t){kv->dtype,
                         (size_t)kv->n_blocks,
                         (size_t)kv->block_size,
                         (size_t)kv->n_kv_heads,
                         (size_t)kv->head_dim,
                         P(&kv->k),
                         P(&kv->v)};
}

// The CSR block tables as ops/'s per-sequence tables, checked.
static rg_status_t batch_view(rg__cpu_device_t *cd, const rg_attn_meta_t *m, rg_attn_batch_t *out) {
  const int32_t *off = P(&m->table_off), *table = P(&m->table);
  if (off[0] != 0)
    return rg_status_make(RG_INVALID_ARGUMENT, "block tables: table_off[0] is %d, not 0",
                          (int)off[0]);
  for (int64_t s = 0; s < m->n_seqs; s++)
    if (off[s + 1] < off[s] || off[s + 1] > m->n_table)
      return rg_status_make(RG_INVALID_ARGUMENT,
                            "block tables: sequence %lld's table ends at %d, outside %d .. %lld",
                            (long long)s, (int)off[s + 1], (int)off[s], (long long)m->n_table);
  void *mem = NULL;
  RG_RETURN_IF_ERROR(scratch(cd, (size_t)m->n_seqs * sizeof(rg_block_table_t) + 1, &mem));
  rg_block_table_t *t = mem;
  for (int64_t s = 0; s < m->n_seqs; s++)
    t[s] = (rg_block_table_t){table ? table + off[s] : NULL, (size_t)(off[s + 1] - off[s])};
  *out = (rg_attn_batch_t){(size_t)m->n_tokens, P(&m->seq), P(&m->pos), t, (size_t)m->n_seqs};
  return NULL;
}

static rg_status_t convert(rg__cpu_device_t *cd, const rg_op_convert_t *o) {
  if (o->from == RG_F32) return rg_row_from_f32_isa(cd->isa, o->to, P(&o->src), P(&o->dst), o->n);
  if (o->to == RG_F32) return rg_row_to_f32_isa(cd->isa, o->from, P(&o->src), P(&o->dst), o->n);
  // Through f32, a chunk of whole blocks of both types at a time.
  int64_t be = rg_dtype_block_elems(o->from) > rg_dtype_block_elems(o->to)
                   ? rg_dtype_block_elems(o->from)
                   : rg_dtype_block_elems(o->to);
  int64_t chunk = (65536 / be) * be;
  void *mem = NULL;
  RG_RETURN_IF_ERROR(scratch(cd, (size_t)chunk * sizeof(float), &mem));
  const char *src = P(&o->src);
  char *dst = P(&o->dst);
  for (int64_t i = 0; i < o->n; i += chunk) {
    int64_t n = o->n - i < chunk ? o->n - i : chunk;
    int ok;
    uint64_t sb = rg_dtype_nbytes(o->from, i, &ok), db = rg_dtype_nbytes(o->to, i, &ok);
    RG_RETURN_IF_ERROR(rg_row_to_f32_isa(cd->isa, o->from, src + sb, mem, n));
    RG_RETURN_IF_ERROR(rg_row_from_f32_isa(cd->isa, o->to, mem, dst + db, n));
  }
  return NULL;
}

static rg_status_t sample(rg__cpu_device_t *cd, const rg_op_sample_t *o) {
  void *mem = NULL;
  RG_RETURN_IF_ERROR(scratch(cd, (size_t)o->vocab * (sizeof(int32_t) + sizeof(float)), &mem));
  int32_t *idx = mem;
  float *prob = (float *)(idx + o->vocab);
  const float *logits = P(&o->logits);
  int32_t *out = P(&o->out);
  for (int64_t r = 0; r < o->rows; r++) {
    const rg_sampler_config_t *c = &o->cfg[r];
    if (!(c->temperature >= 0) || c->top_k < 0 || !(c->top_p > 0 && c->top_p <= 1))
      return rg_status_make(RG_INVALID_ARGUMENT,
                            "row %lld: sampler temperature %g, top-k %d, top-p %g", (long long)r,
                            (double)c->temperature, (int)c->top_k, (double)c->top_p);
    out[r] = rg_sample_draw(c, logits + r * o->vocab, (size_t)o->vocab, o->u[r], idx, prob);
  }
  return NULL;
}

rg_status_t rg__cpu_run_op(rg__cpu_device_t *cd, const rg_op_t *op) {
  rg_pool_t *pool = cd->pool;
  switch (op->kind) {
    case RG_OP_MATMUL: {
      const rg_op_matmul_t *o = &op->matmul;
      rg_wmat_t w = {P(&o->w), o->wtype, o->n, o->k, (rg_wlayout_t)o->wlayout};
      rg_matmul_opts_t mo = {.isa = cd->isa, .batch_invariant = cd->batch_invariant};
      return rg_matmul_ex(pool, P(&o->x), o->m, &w, P(&o->bias), P(&o->y), &mo);
    }
    case RG_OP_RMSNORM: {
      const rg_op_rmsnorm_t *o = &op->rmsnorm;
      rg_op_rmsnorm(pool, P(&o->x), P(&o->weight), P(&o->y), (size_t)o->rows, (size_t)o->dim,
                    o->eps);
      return NULL;
    }
    case RG_OP_ROPE: {
      const rg_op_rope_t *o = &op->rope;
      rg_rope_t rope = {(size_t)o->head_dim, P(&o->inv_freq)};
      rg_op_rope(pool, &rope, P(&o->x), (size_t)o->n_tokens, (size_t)o->n_heads, P(&o->pos));
      return NULL;
    }
    case RG_OP_SOFTMAX:
      rg_op_softmax(pool, P(&op->softmax.x), (size_t)op->softmax.rows, (size_t)op->softmax.n);
      return NULL;
    case RG_OP_KV_WRITE: {
      const rg_op_kv_write_t *o = &op->kv_write;
      rg_kv_layer_t kv = kv_view(&o->kv);
      rg_attn_batch_t b;
      RG_RETURN_IF_ERROR(batch_view(cd, &o->meta, &b));
      return rg_op_kv_write(pool, &kv, &b, P(&o->k), P(&o->v));
    }
    case RG_OP_ATTENTION: {
      const rg_op_attention_t *o = &op->attention;
      rg_kv_layer_t kv = kv_view(&o->kv);
      rg_attn_batch_t b;
      RG_RETURN_IF_ERROR(batch_view(cd, &o->meta, &b));
      rg_attn_params_t ap = {(size_t)o->n_heads, o->scale, (size_t)o->window, P(&o->sinks),
                             cd->batch_invariant};
      return rg_op_attention(pool, &kv, &b, &ap, P(&o->q), P(&o->o));
    }
    case RG_OP_SWIGLU:
      rg_op_swiglu(pool, P(&op->swiglu.gate), P(&op->swiglu.up), P(&op->swiglu.out),
                   (size_t)op->swiglu.n);
      return NULL;
    case RG_OP_MOE_ROUTE: {
      const rg_op_moe_route_t *o = &op->moe_route;
      return rg_op_moe_route(pool, P(&o->logits), (size_t)o->T, (size_t)o->E, (size_t)o->k, o->mode,
                             P(&o->idx), P(&o->w));
    }
    case RG_OP_MOE_GROUP: {
      const rg_op_moe_group_t *o = &op->moe_group;
      return rg_op_moe_group(P(&o->idx), (size_t)o->T, (size_t)o->k, (size_t)o->E, P(&o->offsets),
                             P(&o->rows));
    }
    case RG_OP_MOE_GATHER: {
      const rg_op_moe_gather_t *o = &op->moe_gather;
      const int32_t *rows = P(&o->rows);
      for (int64_t i = 0; i < o->n; i++)
        if (rows[i] < 0 || rows[i] / o->k >= o->T)
          return rg_status_make(RG_INVALID_ARGUMENT,
                                "row %lld names pair %d, outside the %lld tokens x %lld slots",
                                (long long)i, (int)rows[i], (long long)o->T, (long long)o->k);
      rg_op_moe_gather(pool, P(&o->x), rows, (size_t)o->n, (size_t)o->k, (size_t)o->dim,
                       P(&o->out));
      return NULL;
    }
    case RG_OP_MOE_SCATTER_ADD: {
      const rg_op_moe_scatter_add_t *o = &op->moe_scatter_add;
      const int32_t *rows = P(&o->rows);
      for (int64_t i = 0; i < o->n; i++)
        if (rows[i] < 0 || rows[i] >= o->T * o->k)
          return rg_status_make(RG_INVALID_ARGUMENT,
                                "row %lld names pair %d, outside the %lld tokens x %lld slots",
                                (long long)i, (int)rows[i], (long long)o->T, (long long)o->k);
      rg_op_moe_scatter_add(pool, P(&o->y), rows, (size_t)o->n, (size_t)o->k, P(&o->w),
                            (size_t)o->dim, P(&o->out));
      return NULL;
    }
    case RG_OP_EMBED: {
      const rg_op_embed_t *o = &op->embed;
      return rg_op_embed(pool, P(&o->table), o->type, (size_t)o->vocab, P(&o->ids), (size_t)o->n,
                         (size_t)o->dim, P(&o->out));
    }
    case RG_OP_ADD:
      rg_op_add(pool, P(&op->add.a), P(&op->add.b), P(&op->add.out), (size_t)op->add.n);
      return NULL;
    case RG_OP_CONVERT:
      return convert(cd, &op->convert);
    case RG_OP_SAMPLE:
      return sample(cd, &op->sample);
    default:
      return rg_status_make(RG_INVALID_ARGUMENT, "unknown op %d", (int)op->kind);
  }
}
