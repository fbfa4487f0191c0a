// The op list's names and the operand table every queue checks against (see
// devices/op.h).
#include "devices/op.h"

#include <stdio.h>
#include <string.h>

static const struct {
  const char *name, *description;
} op_info[] = {
#define RG_X_(e, n, d) {n, d},
    RG_OP_MAP(RG_X_)
#undef RG_X_
};
_Static_assert(sizeof op_info / sizeof op_info[0] == RG_OP_COUNT,
               "op table out of step with RG_OP_MAP");

const char *rg_op_name(rg_op_kind_t k) {
  return (unsigned)k < RG_OP_COUNT ? op_info[k].name : "?";
}
const char *rg_op_description(rg_op_kind_t k) {
  return (unsigned)k < RG_OP_COUNT ? op_info[k].description : "?";
}
int rg_op_from_name(const char *s, rg_op_kind_t *out) {
  for (int i = 0; s && i < RG_OP_COUNT; i++)
    if (!strcmp(s, op_info[i].name)) return *out = (rg_op_kind_t)i, 0;
  return -1;
}

rg_dtype_t rg_op_key_type(const rg_op_t *op) {
  switch (op->kind) {
    case RG_OP_MATMUL:
      return op->matmul.wtype;
    case RG_OP_EMBED:
      return op->embed.type;
    case RG_OP_KV_WRITE:
      return op->kv_write.kv.dtype;
    case RG_OP_ATTENTION:
      return op->attention.kv.dtype;
    case RG_OP_CONVERT:
      return op->convert.from != RG_F32 ? op->convert.from : op->convert.to;
    default:
      return RG_F32;
  }
}

// ----- Operand sizes -----------------------------------------------------------

typedef struct {
  const rg_op_t *op;
  rg_op_operand_t *out;
  size_t n;
  rg_status_t err;
} builder_t;

static const char *label(const rg_op_t *op) {
  return op->label ? op->label : "";
}

static void fail(builder_t *b, const char *fmt, const char *field, long long v) {
  if (b->err) return;
  char msg[160];
  snprintf(msg, sizeof msg, fmt, field, v);
  b->err = rg_status_make(RG_INVALID_ARGUMENT, "%s%s%s: %s", rg_op_name(b->op->kind),
                          b->op->label ? " " : "", label(b->op), msg);
}

// A size that must be >= lo.
static int64_t dim(builder_t *b, const char *field, int64_t v, int64_t lo) {
  if (v < lo)
    fail(b, lo ? "%s must be at least 1, not %lld" : "%s must not be negative, not %lld", field, v);
  return v < 0 ? 0 : v;
}

// a * b * c with overflow checks (bytes stay below 2^62).
static uint64_t mul(builder_t *b, uint64_t x, uint64_t y) {
  uint64_t r;
  if (__builtin_mul_overflow(x, y, &r) || r > ((uint64_t)1 << 62)) {
    fail(b, "%s is too large (%lld)", "the operand size", (long long)x);
    return 0;
  }
  return r;
}

static void add(builder_t *b, const char *name, const rg_ref_t *ref, uint64_t bytes, int optional,
                int written) {
  if (b->n >= RG_OP_MAX_OPERANDS) return;
  b->out[b->n++] = (rg_op_operand_t){name, ref, bytes, optional, written};
}

// Bytes of n elements of type t (whole blocks).
static uint64_t typed(builder_t *b, const char *field, rg_dtype_t t, uint64_t n) {
  int ok;
  if ((unsigned)t >= RG_DTYPE_COUNT) {
    fail(b, "%s: unknown element type %lld", field, (long long)t);
    return 0;
  }
  uint64_t r = rg_dtype_nbytes(t, (int64_t)n, &ok);
  if (!ok) {
    if (!b->err) {
      b->err = rg_status_make(
          RG_INVALID_ARGUMENT, "%s%s%s: %s: %llu %s elements are not whole blocks of %lld",
          rg_op_name(b->op->kind), b->op->label ? " " : "", label(b->op), field,
          (unsigned long long)n, rg_dtype_name(t), (long long)rg_dtype_block_elems(t));
    }
    return 0;
  }
  return r;
}

static void kv_operands(builder_t *b, const rg_kv_ref_t *kv, const rg_attn_meta_t *m,
                        int writes_kv) {
  if (kv->dtype != RG_F32 && kv->dtype != RG_BF16 && kv->dtype != RG_F16)
    fail(b, "%s: the KV pool holds f32, bf16 or f16, not type %lld", "kv.dtype",
         (long long)kv->dtype);
  uint64_t elems = mul(b,
                       mul(b, (uint64_t)dim(b, "kv.n_blocks", kv->n_blocks, 1),
                           (uint64_t)dim(b, "kv.n_kv_heads", kv->n_kv_heads, 1)),
                       mul(b, (uint64_t)dim(b, "kv.block_size", kv->block_size, 1),
                           (uint64_t)dim(b, "kv.head_dim", kv->head_dim, 1)));
  uint64_t bytes = b->err ? 0 : typed(b, "kv", kv->dtype, elems);
  add(b, "kv.k", &kv->k, bytes, 0, writes_kv);
  add(b, "kv.v", &kv->v, bytes, 0, writes_kv);
  uint64_t T = (uint64_t)dim(b, "meta.n_tokens", m->n_tokens, 0),
           S = (uint64_t)dim(b, "meta.n_seqs", m->n_seqs, 0);
  uint64_t NT = (uint64_t)dim(b, "meta.n_table", m->n_table, 0);
  add(b, "meta.seq", &m->seq, 4 * T, 0, 0);
  add(b, "meta.pos", &m->pos, 4 * T, 0, 0);
  add(b, "meta.table_off", &m->table_off, 4 * (S + 1), 0, 0);
  add(b, "meta.table", &m->table, 4 * NT, NT == 0, 0);
}

rg_status_t rg_op_operands(const rg_op_t *op, rg_op_operand_t *out, size_t *out_n) {
  *out_n = 0;
  if (!op) return rg_status_make(RG_INVALID_ARGUMENT, "op is NULL");
  builder_t b = {op, out, 0, NULL};
  switch (op->kind) {
    case RG_OP_MATMUL: {
      const rg_op_matmul_t *o = &op->matmul;
      uint64_t m = (uint64_t)dim(&b, "m", o->m, 0), n = (uint64_t)dim(&b, "n", o->n, 1),
               k = (uint64_t)dim(&b, "k", o->k, 1);
      add(&b, "x", &o->x, mul(&b, m, k) * 4, 0, 0);
      if (o->wlayout == 0)
        add(&b, "w", &o->w, typed(&b, "w", o->wtype, mul(&b, n, k)), 0, 0);
      else if ((o->wlayout == 1 && o->wtype == RG_BF16) ||
               (o->wlayout == 2 && o->wtype == RG_F16))  // 32-row panels of k rounded to 32
        add(&b, "w", &o->w, mul(&b, (n + 31) / 32 * 32, (k + 31) / 32 * 32) * 2, 0, 0);
      else
        fail(&b, "w: %s weights have no layout %d", rg_dtype_name(o->wtype), o->wlayout);
      if (!b.err && k % (uint64_t)rg_dtype_block_elems(o->wtype))
        fail(&b, "%s: rows of k = %lld columns are not whole blocks of the weight type", "w",
             (long long)k);
      add(&b, "bias", &o->bias, n * 4, 1, 0);
      add(&b, "y", &o->y, mul(&b, m, n) * 4, 0, 1);
      break;
    }
    case RG_OP_RMSNORM: {
      const rg_op_rmsnorm_t *o = &op->rmsnorm;
      uint64_t r = (uint64_t)dim(&b, "rows", o->rows, 0), d = (uint64_t)dim(&b, "dim", o->dim, 1);
      add(&b, "x", &o->x, mul(&b, r, d) * 4, 0, 0);
      add(&b, "weight", &o->weight, d * 4, 0, 0);
      add(&b, "y", &o->y, mul(&b, r, d) * 4, 0, 1);
      break;
    }
    case RG_OP_ROPE: {
      const rg_op_rope_t *o = &op->rope;
      uint64_t t = (uint64_t)dim(&b, "n_tokens", o->n_tokens, 0),
               h = (uint64_t)dim(&b, "n_heads", o->n_heads, 1),
               hd = (uint64_t)dim(&b, "head_dim", o->head_dim, 2);
      if (hd % 2) fail(&b, "%s must be even, not %lld", "head_dim", (long long)hd);
      add(&b, "x", &o->x, mul(&b, mul(&b, t, h), hd) * 4, 0, 1);
      add(&b, "pos", &o->pos, t * 4, 0, 0);
      add(&b, "inv_freq", &o->inv_freq, hd / 2 * 4, 0, 0);
      break;
    }
    case RG_OP_SOFTMAX: {
      const rg_op_softmax_t *o = &op->softmax;
      add(&b, "x", &o->x,
          mul(&b, (uint64_t)dim(&b, "rows", o->rows, 0), (uint64_t)dim(&b, "n", o->n, 1)) * 4, 0,
          1);
      break;
    }
    case RG_OP_KV_WRITE: {
      const rg_op_kv_write_t *o = &op->kv_write;
      kv_operands(&b, &o->kv, &o->meta, 1);
      uint64_t row = mul(&b, (uint64_t)o->meta.n_tokens,
                         mul(&b, (uint64_t)o->kv.n_kv_heads, (uint64_t)o->kv.head_dim));
      add(&b, "k", &o->k, row * 4, 0, 0);
      add(&b, "v", &o->v, row * 4, 0, 0);
      break;
    }
    case RG_OP_ATTENTION: {
      const rg_op_attention_t *o = &op->attention;
      kv_operands(&b, &o->kv, &o->meta, 0);
      uint64_t h = (uint64_t)dim(&b, "n_heads", o->n_heads, 1);
      if (!b.err && (int64_t)h % o->kv.n_kv_heads)
        fail(&b, "%s must be a multiple of kv.n_kv_heads, not %lld", "n_heads", (long long)h);
      if (o->window < 0)
        fail(&b, "%s must not be negative, not %lld", "window", (long long)o->window);
      uint64_t q = mul(&b, mul(&b, (uint64_t)o->meta.n_tokens, h), (uint64_t)o->kv.head_dim);
      add(&b, "q", &o->q, q * 4, 0, 0);
      add(&b, "o", &o->o, q * 4, 0, 1);
      add(&b, "sinks", &o->sinks, h * 4, 1, 0);
      break;
    }
    case RG_OP_SWIGLU: {
      const rg_op_swiglu_t *o = &op->swiglu;
      uint64_t n = (uint64_t)dim(&b, "n", o->n, 0) * 4;
      add(&b, "gate", &o->gate, n, 0, 0);
      add(&b, "up", &o->up, n, 0, 0);
      add(&b, "out", &o->out, n, 0, 1);
      break;
    }
    case RG_OP_MOE_ROUTE: {
      const rg_op_moe_route_t *o = &op->moe_route;
      uint64_t T = (uint64_t)dim(&b, "T", o->T, 0), E = (uint64_t)dim(&b, "E", o->E, 1),
               k = (uint64_t)dim(&b, "k", o->k, 1);
      if (k > E) fail(&b, "%s must be at most E, not %lld", "k", (long long)k);
      if ((unsigned)o->mode >= RG_MOE_MODE_COUNT)
        fail(&b, "%s: unknown routing mode %lld", "mode", (long long)o->mode);
      add(&b, "logits", &o->logits, mul(&b, T, E) * 4, 0, 0);
      add(&b, "idx", &o->idx, mul(&b, T, k) * 4, 0, 1);
      add(&b, "w", &o->w, mul(&b, T, k) * 4, 0, 1);
      break;
    }
    case RG_OP_MOE_GROUP: {
      const rg_op_moe_group_t *o = &op->moe_group;
      uint64_t T = (uint64_t)dim(&b, "T", o->T, 0), E = (uint64_t)dim(&b, "E", o->E, 1),
               k = (uint64_t)dim(&b, "k", o->k, 1);
      add(&b, "idx", &o->idx, mul(&b, T, k) * 4, 0, 0);
      add(&b, "offsets", &o->offsets, (E + 1) * 4, 0, 1);
      add(&b, "rows", &o->rows, mul(&b, T, k) * 4, 0, 1);
      break;
    }
    case RG_OP_MOE_GATHER: {
      const rg_op_moe_gather_t *o = &op->moe_gather;
      uint64_t T = (uint64_t)dim(&b, "T", o->T, 0), n = (uint64_t)dim(&b, "n", o->n, 0),
               d = (uint64_t)dim(&b, "dim", o->dim, 1);
      dim(&b, "k", o->k, 1);
      add(&b, "x", &o->x, mul(&b, T, d) * 4, 0, 0);
      add(&b, "rows", &o->rows, n * 4, 0, 0);
      add(&b, "out", &o->out, mul(&b, n, d) * 4, 0, 1);
      break;
    }
    case RG_OP_MOE_SCATTER_ADD: {
      const rg_op_moe_scatter_add_t *o = &op->moe_scatter_add;
      uint64_t T = (uint64_t)dim(&b, "T", o->T, 0), n = (uint64_t)dim(&b, "n", o->n, 0),
               d = (uint64_t)dim(&b, "dim", o->dim, 1), k = (uint64_t)dim(&b, "k", o->k, 1);
      add(&b, "y", &o->y, mul(&b, n, d) * 4, 0, 0);
      add(&b, "rows", &o->rows, n * 4, 0, 0);
      add(&b, "w", &o->w, mul(&b, T, k) * 4, 0, 0);
      add(&b, "out", &o->out, mul(&b, T, d) * 4, 0, 1);
      break;
    }
    case RG_OP_EMBED: {
      const rg_op_embed_t *o = &op->embed;
      uint64_t v = (uint64_t)dim(&b, "vocab", o->vocab, 1), n = (uint64_t)dim(&b, "n", o->n, 0),
               d = (uint64_t)dim(&b, "dim", o->dim, 1);
      add(&b, "table", &o->table, typed(&b, "table", o->type, mul(&b, v, d)), 0, 0);
      if (!b.err && d % (uint64_t)rg_dtype_block_elems(o->type))
        fail(&b, "%s: rows of dim = %lld are not whole blocks of the table's type", "table",
             (long long)d);
      add(&b, "ids", &o->ids, n * 4, 0, 0);
      add(&b, "out", &o->out, mul(&b, n, d) * 4, 0, 1);
      break;
    }
    case RG_OP_ADD: {
      const rg_op_add_t *o = &op->add;
      uint64_t n = (uint64_t)dim(&b, "n", o->n, 0) * 4;
      add(&b, "a", &o->a, n, 0, 0);
      add(&b, "b", &o->b, n, 0, 0);
      add(&b, "out", &o->out, n, 0, 1);
      break;
    }
    case RG_OP_CONVERT: {
      const rg_op_convert_t *o = &op->convert;
      uint64_t n = (uint64_t)dim(&b, "n", o->n, 0);
      add(&b, "src", &o->src, typed(&b, "src", o->from, n), 0, 0);
      add(&b, "dst", &o->dst, typed(&b, "dst", o->to, n), 0, 1);
      break;
    }
    case RG_OP_SAMPLE: {
      const rg_op_sample_t *o = &op->sample;
      uint64_t r = (uint64_t)dim(&b, "rows", o->rows, 0),
               v = (uint64_t)dim(&b, "vocab", o->vocab, 1);
      if (r && (!o->cfg || !o->u))
        fail(&b, "%s: sampler configs and uniforms are required (%lld rows)", "cfg", (long long)r);
      add(&b, "logits", &o->logits, mul(&b, r, v) * 4, 0, 0);
      add(&b, "out", &o->out, r * 4, 0, 1);
      break;
    }
    default:
      return rg_status_make(RG_INVALID_ARGUMENT, "unknown op %d", (int)op->kind);
  }
  if (b.err) return b.err;
  *out_n = b.n;
  return NULL;
}
