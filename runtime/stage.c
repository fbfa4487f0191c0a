// Stage instances (see runtime/stage.h).
#include "runtime/stage.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/hugemem.h"
#include "ops/matmul.h"

// ----- The weight cache --------------------------------------------------------

typedef struct {
  rg_device_t *dev;
  char name[RG_TENSOR_NAME_MAX];
  int f32;  // the form held: 0 as stored, 1 widened to f32 (vectors), 2 packed (pack_mat)
  rg_buffer_t *buf;
} cache_entry_t;

struct rg_weight_cache_s {
  cache_entry_t *e;
  size_t n, cap;
};

rg_status_t rg_weight_cache_create(rg_weight_cache_t **out) {
  *out = calloc(1, sizeof(**out));
  return *out ? NULL : rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
}

void rg_weight_cache_destroy(rg_weight_cache_t *c) {
  if (!c) return;
  for (size_t i = 0; i < c->n; i++) rg_buffer_release(c->e[i].buf);
  free(c->e);
  free(c);
}

static rg_buffer_t *cache_get(rg_weight_cache_t *c, rg_device_t *dev, const char *name, int f32) {
  for (size_t i = 0; c && i < c->n; i++)
    if (c->e[i].dev == dev && c->e[i].f32 == f32 && !strcmp(c->e[i].name, name)) {
      rg_buffer_retain(c->e[i].buf);
      return c->e[i].buf;
    }
  return NULL;
}

static void cache_put(rg_weight_cache_t *c, rg_device_t *dev, const char *name, int f32,
                      rg_buffer_t *buf) {
  if (!c) return;
  if (c->n == c->cap) {
    size_t cap = c->cap ? c->cap * 2 : 64;
    cache_entry_t *n = realloc(c->e, cap * sizeof(*n));
    if (!n) return;  // not cached: only sharing is lost
    c->e = n;
    c->cap = cap;
  }
  cache_entry_t *e = &c->e[c->n++];
  e->dev = dev;
  snprintf(e->name, sizeof e->name, "%s", name);
  e->f32 = f32;
  e->buf = buf;
  rg_buffer_retain(buf);
}

// ----- The instance ------------------------------------------------------------

typedef struct {
  rg_buffer_t *buf;
  rg_dtype_t type;
  int64_t rows, cols;
  int layout;  // rg_wlayout_t: what the device asked for (rg_device_weight_layout)
} mat_t;

typedef struct {
  rg_buffer_t *attn_norm, *ffn_norm;  // (d) f32
  mat_t wq, wk, wv, wo;
  rg_buffer_t *bq, *bk, *bv;      // Qwen2 biases, or NULL
  rg_buffer_t *q_norm, *k_norm;   // Qwen3 QK-norm (head_dim), or NULL
  mat_t w_gate, w_up, w_down;     // ffn
  mat_t router;                   // moe: (E, d)
  mat_t *e_gate, *e_up, *e_down;  // moe: indexed by expert id; only owned ones loaded
  size_t kv_offset;               // attention: this layer's K in the pool buffer (V follows)
} layer_t;

// A device buffer that grows to the largest step seen.
typedef struct {
  rg_buffer_t *buf;
  size_t bytes;
} scratch_t;

struct rg_stage_s {
  rg_stage_spec_t spec;
  int32_t *experts;  // owned copy of spec.experts
  char name[96];
  const rg_model_t *m;
  const rg_arch_t *a;
  rg_device_t *dev;
  rg_queue_t *q;
  rg_stage_options_t o;
  double weight_bytes;
  rg_dtype_t wtype;
  layer_t *layers;  // (layer_end - layer_begin)
  mat_t embed, lm_head;
  rg_buffer_t *final_norm, *inv_freq;
  // attention: the KV pool of its layers, one buffer: per layer K then V.
  rg_buffer_t *kv;
  size_t kv_layer_bytes;  // one of K or V, one layer
  rg_stage_ctx_t *own;    // the context calls without one use
  rg_stage_counters_t c;
};

// One step in flight on an instance: its scratch and metadata on the
// device. Two contexts let one instance hold two micro-batches at once.
struct rg_stage_ctx_s {
  rg_stage_t *s;
  scratch_t h, qb, kb, vb, ob, t, g, u, rl, idx, wts, off, rows, xe, ge, ue, ye, last;
  scratch_t m_tokens, m_seq, m_pos, m_toff, m_table, m_lrows;
  const rg_step_t *step;
  int32_t *host_off;  // moe: expert offsets read back, (E + 1)
  double step_seconds;
};

static rg_ref_t R(rg_buffer_t *b) {
  return (rg_ref_t){b, 0};
}

// Matrices copied into memory the kernel may back with 2 MiB pages
// (base/hugemem.h): decode streams every weight once per token, and
// file-backed 4 KiB pages cost a third of the bandwidth in TLB misses
// (measured: 0.59 of read bandwidth from the mapping, ~0.9 from huge pages).
typedef struct {
  void *p;
  size_t mapped;
} anon_t;

static void anon_release(void *ctx) {
  anon_t *a = ctx;
  rg_hugemem_free(a->p, a->mapped);
  free(a);
}

// `bytes` of such memory, with what anon_release needs; NULL when refused.
static anon_t *anon_new(size_t bytes) {
  anon_t *a = malloc(sizeof *a);
  if (a && !(a->p = rg_hugemem_alloc(bytes, &a->mapped))) {
    free(a);
    return NULL;
  }
  return a;
}

static void free_release(void *ctx) {
  free(ctx);
}

// A buffer on the instance's device holding `bytes` at src: in place on
// host-memory devices (copied to huge pages when asked), uploaded elsewhere.
// owned: src is a malloc'd copy the buffer may take over.
static rg_status_t place(rg_stage_t *s, const void *src, size_t bytes, int owned, int copy,
                         rg_buffer_t **out) {
  rg_status_t st = NULL;
  if (copy && !owned) {
    anon_t *a = anon_new(bytes);
    if (!a)
      return rg_status_make(RG_OUT_OF_MEMORY, "%s: out of memory copying %zu bytes of weights",
                            s->name, bytes);
    memcpy(a->p, src, bytes);
    st = rg_buffer_wrap(s->dev, a->p, bytes, anon_release, a, out);
    if (!st) return NULL;
    anon_release(a);
    if (rg_status_code(st) != RG_UNIMPLEMENTED) return st;
    rg_status_free(st);  // not a host-memory device: upload below
  }
  if (!copy || owned) {
    st = rg_buffer_wrap(s->dev, (void *)src, bytes, owned ? free_release : NULL, (void *)src, out);
    if (!st) return NULL;
    if (rg_status_code(st) != RG_UNIMPLEMENTED) {
      if (owned) free((void *)src);
      return st;
    }
    rg_status_free(st);
  }
  st = rg_buffer_alloc(s->dev, bytes, out);
  if (!st) st = rg_buffer_write(*out, 0, src, bytes);
  if (st) {
    rg_buffer_release(*out);
    *out = NULL;
  }
  if (owned) free((void *)src);
  return st;
}

// A matrix packed once into the layout its device's matmul runs fastest
// from (bf16 panels on the CPU at avx512-bf16: a prefill GEMM spent a
// quarter of its time packing them call by call), in memory it may back
// with huge pages as a copy would be.
static rg_status_t pack_mat(rg_stage_t *s, const rg_tensor_t *t, int64_t rows, int64_t cols,
                            int layout, rg_buffer_t **out) {
  size_t bytes = rg_matmul_layout_bytes((rg_wlayout_t)layout, t->type, rows, cols);
  anon_t *a = bytes ? anon_new(bytes) : NULL;
  if (!a)
    return rg_status_make(RG_OUT_OF_MEMORY, "%s: out of memory packing %zu bytes of %s", s->name,
                          bytes, t->name);
  // On the loading thread: the device's pool is its queues' to use.
  rg_wmat_t w = {t->data, t->type, rows, cols, RG_WLAYOUT_ROWS};
  rg_status_t st = rg_matmul_relayout(NULL, &w, (rg_wlayout_t)layout, a->p);
  if (!st) st = rg_buffer_wrap(s->dev, a->p, bytes, anon_release, a, out);
  if (!st) return NULL;
  anon_release(a);
  return rg_status_wrap(st, "%s: packing %s", s->name, t->name);
}

// A weight matrix for the instance's matmuls; `packable`: only matmuls
// read it, so it may take the device's own layout (embed's table, which a
// tied lm_head shares, stays in rows).
static rg_status_t load_mat_ex(rg_stage_t *s, const char *name, int64_t rows, int64_t cols,
                               int packable, mat_t *out) {
  const rg_weights_t *w = rg_model_weights(s->m);
  const rg_tensor_t *t;
  int64_t shape[2] = {rows, cols};
  RG_RETURN_IF_ERROR(rg_weights_expect(w, name, 2, shape, &t));
  if (!rg_dtype_has_codec(t->type))
    return rg_status_make(RG_UNIMPLEMENTED,
                          "%s: tensor '%s' is %s, which ridge does not run (f32, bf16, f16, q8_0)",
                          t->file, t->name, rg_dtype_name(t->type));
  // Packed only where the weights are copied anyway (a mapped file stays
  // the only copy); cached apart from the rows (form 2).
  int layout = packable && s->o.copy_weights ? rg_device_weight_layout(s->dev, t->type) : 0;
  int form = layout ? 2 : 0;
  *out = (mat_t){cache_get(s->o.cache, s->dev, name, form), t->type, rows, cols, layout};
  s->weight_bytes += (double)t->nbytes;
  if (out->buf) return NULL;
  if (layout)
    RG_RETURN_IF_ERROR(pack_mat(s, t, rows, cols, layout, &out->buf));
  else
    RG_RETURN_IF_ERROR(place(s, t->data, (size_t)t->nbytes, 0, s->o.copy_weights, &out->buf));
  cache_put(s->o.cache, s->dev, name, form, out->buf);
  return NULL;
}

static rg_status_t load_mat(rg_stage_t *s, const char *name, int64_t rows, int64_t cols,
                            mat_t *out) {
  return load_mat_ex(s, name, rows, cols, 1, out);
}

// A vector (norm weight, bias) widened to f32; optional ones may be absent.
static rg_status_t load_vec(rg_stage_t *s, const char *name, int64_t n, int optional,
                            rg_buffer_t **out) {
  *out = NULL;
  const rg_weights_t *w = rg_model_weights(s->m);
  if (optional && !rg_weights_find(w, name)) return NULL;
  const rg_tensor_t *t;
  int64_t shape[1] = {n};
  RG_RETURN_IF_ERROR(rg_weights_expect(w, name, 1, shape, &t));
  s->weight_bytes += (double)t->nbytes;
  if ((*out = cache_get(s->o.cache, s->dev, name, 1))) return NULL;
  float *v = malloc((size_t)n * sizeof(float));
  if (!v) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory loading '%s'", name);
  rg_status_t st = rg_tensor_read_f32(t, 0, n, v);
  if (st) {
    free(v);
    return st;
  }
  RG_RETURN_IF_ERROR(place(s, v, (size_t)n * sizeof(float), 1, 0, out));
  cache_put(s->o.cache, s->dev, name, 1, *out);
  return NULL;
}

static int owns_expert(const rg_stage_t *s, int64_t e) {
  if (!s->experts) return 1;
  for (size_t i = 0; i < s->spec.n_experts; i++)
    if (s->experts[i] == e) return 1;
  return 0;
}

#define NAME(fmt, ...) \
  (snprintf(n, sizeof n, "model.layers.%lld." fmt, (long long)l, ##__VA_ARGS__), n)

static rg_status_t load_attention(rg_stage_t *s, int64_t l, layer_t *L) {
  const rg_arch_t *a = s->a;
  int64_t d = a->d_model, hd = a->head_dim, nh = a->n_heads, nkv = a->n_kv_heads;
  char n[256];
  RG_RETURN_IF_ERROR(load_vec(s, NAME("input_layernorm.weight"), d, 0, &L->attn_norm));
  RG_RETURN_IF_ERROR(load_mat(s, NAME("self_attn.q_proj.weight"), nh * hd, d, &L->wq));
  RG_RETURN_IF_ERROR(load_mat(s, NAME("self_attn.k_proj.weight"), nkv * hd, d, &L->wk));
  RG_RETURN_IF_ERROR(load_mat(s, NAME("self_attn.v_proj.weight"), nkv * hd, d, &L->wv));
  RG_RETURN_IF_ERROR(load_mat(s, NAME("self_attn.o_proj.weight"), d, nh * hd, &L->wo));
  RG_RETURN_IF_ERROR(load_vec(s, NAME("self_attn.q_proj.bias"), nh * hd, !a->qkv_bias, &L->bq));
  RG_RETURN_IF_ERROR(load_vec(s, NAME("self_attn.k_proj.bias"), nkv * hd, !a->qkv_bias, &L->bk));
  RG_RETURN_IF_ERROR(load_vec(s, NAME("self_attn.v_proj.bias"), nkv * hd, !a->qkv_bias, &L->bv));
  RG_RETURN_IF_ERROR(load_vec(s, NAME("self_attn.q_norm.weight"), hd, !a->qk_norm, &L->q_norm));
  RG_RETURN_IF_ERROR(load_vec(s, NAME("self_attn.k_norm.weight"), hd, !a->qk_norm, &L->k_norm));
  s->wtype = L->wq.type;
  return NULL;
}

static rg_status_t load_ffn(rg_stage_t *s, int64_t l, layer_t *L) {
  const rg_arch_t *a = s->a;
  int64_t d = a->d_model;
  char n[256];
  RG_RETURN_IF_ERROR(load_vec(s, NAME("post_attention_layernorm.weight"), d, 0, &L->ffn_norm));
  if (s->spec.kind == RG_STAGE_FFN) {
    RG_RETURN_IF_ERROR(load_mat(s, NAME("mlp.gate_proj.weight"), a->d_ff, d, &L->w_gate));
    RG_RETURN_IF_ERROR(load_mat(s, NAME("mlp.up_proj.weight"), a->d_ff, d, &L->w_up));
    RG_RETURN_IF_ERROR(load_mat(s, NAME("mlp.down_proj.weight"), d, a->d_ff, &L->w_down));
    s->wtype = L->w_gate.type;
    return NULL;
  }
  int mixtral = rg_family_has(a->family, RG_FAM_MIXTRAL_MOE);
  int64_t E = a->n_experts, ff = a->d_ff_expert;
  L->e_gate = calloc((size_t)E, sizeof(mat_t));
  L->e_up = calloc((size_t)E, sizeof(mat_t));
  L->e_down = calloc((size_t)E, sizeof(mat_t));
  if (!L->e_gate || !L->e_up || !L->e_down)
    return rg_status_make(RG_OUT_OF_MEMORY, "out of memory loading experts");
  RG_RETURN_IF_ERROR(
      load_mat(s, mixtral ? NAME("block_sparse_moe.gate.weight") : NAME("mlp.gate.weight"), E, d,
               &L->router));
  for (int64_t x = 0; x < E; x++) {
    if (!owns_expert(s, x)) continue;
    if (mixtral) {
      RG_RETURN_IF_ERROR(load_mat(s, NAME("block_sparse_moe.experts.%lld.w1.weight", (long long)x),
                                  ff, d, &L->e_gate[x]));
      RG_RETURN_IF_ERROR(load_mat(s, NAME("block_sparse_moe.experts.%lld.w3.weight", (long long)x),
                                  ff, d, &L->e_up[x]));
      RG_RETURN_IF_ERROR(load_mat(s, NAME("block_sparse_moe.experts.%lld.w2.weight", (long long)x),
                                  d, ff, &L->e_down[x]));
    } else {
      RG_RETURN_IF_ERROR(load_mat(s, NAME("mlp.experts.%lld.gate_proj.weight", (long long)x), ff, d,
                                  &L->e_gate[x]));
      RG_RETURN_IF_ERROR(
          load_mat(s, NAME("mlp.experts.%lld.up_proj.weight", (long long)x), ff, d, &L->e_up[x]));
      RG_RETURN_IF_ERROR(load_mat(s, NAME("mlp.experts.%lld.down_proj.weight", (long long)x), d, ff,
                                  &L->e_down[x]));
    }
    s->wtype = L->e_gate[x].type;
  }
  return NULL;
}
#undef NAME

size_t rg_stage_kind_ops(rg_stage_kind_t kind, const rg_op_kind_t **ops) {
  static const rg_op_kind_t attn[] = {RG_OP_RMSNORM,  RG_OP_MATMUL,    RG_OP_ROPE,
                                      RG_OP_KV_WRITE, RG_OP_ATTENTION, RG_OP_ADD};
  static const rg_op_kind_t ffn[] = {RG_OP_RMSNORM, RG_OP_MATMUL, RG_OP_SWIGLU, RG_OP_ADD};
  static const rg_op_kind_t moe[] = {RG_OP_RMSNORM,        RG_OP_MATMUL,     RG_OP_MOE_ROUTE,
                                     RG_OP_MOE_GROUP,      RG_OP_MOE_GATHER, RG_OP_SWIGLU,
                                     RG_OP_MOE_SCATTER_ADD};
  static const rg_op_kind_t embed[] = {RG_OP_EMBED};
  static const rg_op_kind_t head[] = {RG_OP_MOE_GATHER, RG_OP_RMSNORM, RG_OP_MATMUL};
  const rg_op_kind_t *need = NULL;
  size_t n = 0;
  switch (kind) {
    case RG_STAGE_ATTENTION:
      need = attn, n = sizeof attn / sizeof *attn;
      break;
    case RG_STAGE_FFN:
      need = ffn, n = sizeof ffn / sizeof *ffn;
      break;
    case RG_STAGE_MOE:
      need = moe, n = sizeof moe / sizeof *moe;
      break;
    case RG_STAGE_EMBED:
      need = embed, n = 1;
      break;
    case RG_STAGE_LM_HEAD:
      need = head, n = sizeof head / sizeof *head;
      break;
    default:
      break;
  }
  *ops = need;
  return n;
}

// The ops a kind runs, to refuse a device that lacks one before loading.
static rg_status_t check_device(rg_stage_t *s) {
  const rg_op_kind_t *need;
  size_t n = rg_stage_kind_ops(s->spec.kind, &need);
  for (size_t i = 0; i < n; i++)
    if (!rg_device_supports_op(s->dev, need[i]))
      return rg_status_make(RG_UNIMPLEMENTED, "%s: %s has no %s kernel, which a %s stage needs",
                            s->name, rg_device_info(s->dev)->driver, rg_op_name(need[i]),
                            rg_stage_kind_name(s->spec.kind));
  return NULL;
}

static rg_status_t check_spec(const rg_model_t *m, const rg_stage_spec_t *sp) {
  const rg_arch_t *a = rg_model_arch(m);
  switch (sp->kind) {
    case RG_STAGE_EMBED:
    case RG_STAGE_LM_HEAD:
      return NULL;
    case RG_STAGE_ATTENTION:
    case RG_STAGE_FFN:
    case RG_STAGE_MOE:
      break;
    default:
      return rg_status_make(RG_INVALID_ARGUMENT,
                            "a %s stage does not run on a device (it moves data)",
                            rg_stage_kind_name(sp->kind));
  }
  if (sp->layer_begin < 0 || sp->layer_end > a->n_layers || sp->layer_begin >= sp->layer_end)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "%s stage: layers [%lld, %lld) are not a range of the model's %lld",
                          rg_stage_kind_name(sp->kind), (long long)sp->layer_begin,
                          (long long)sp->layer_end, (long long)a->n_layers);
  for (int64_t l = sp->layer_begin; l < sp->layer_end && sp->kind != RG_STAGE_ATTENTION; l++) {
    int moe = a->n_experts > 0 && rg_arch_layer_is_moe(a, l);
    if (moe != (sp->kind == RG_STAGE_MOE))
      return rg_status_make(
          RG_INVALID_ARGUMENT, "%s stage over layers [%lld, %lld): layer %lld is %s",
          rg_stage_kind_name(sp->kind), (long long)sp->layer_begin, (long long)sp->layer_end,
          (long long)l, moe ? "an MoE layer" : "a dense layer");
  }
  if (sp->kind == RG_STAGE_MOE && sp->experts) {
    if (!sp->n_experts)
      return rg_status_make(RG_INVALID_ARGUMENT, "moe stage: an empty expert subset");
    for (size_t i = 0; i < sp->n_experts; i++)
      if (sp->experts[i] < 0 || sp->experts[i] >= a->n_experts ||
          (i && sp->experts[i] <= sp->experts[i - 1]))
        return rg_status_make(RG_INVALID_ARGUMENT,
                              "moe stage: expert %d (entry %zu) is not in 0..%lld or not ascending",
                              sp->experts[i], i, (long long)a->n_experts - 1);
  }
  return NULL;
}

static rg_status_t create(rg_stage_t *s) {
  const rg_arch_t *a = s->a;
  RG_RETURN_IF_ERROR(check_device(s));
  RG_RETURN_IF_ERROR(rg_queue_create(s->dev, &s->q));
  int64_t n_layers = s->spec.layer_end - s->spec.layer_begin;
  switch (s->spec.kind) {
    case RG_STAGE_EMBED:
      RG_RETURN_IF_ERROR(
          load_mat_ex(s, "model.embed_tokens.weight", a->vocab, a->d_model, 0, &s->embed));
      s->wtype = s->embed.type;
      return NULL;
    case RG_STAGE_LM_HEAD: {
      // Its own matrix takes the device's layout; embed's table, when tied,
      // stays in rows for embed's gather.
      const int tied = a->tie_embeddings || rg_model_hparams(s->m)->tie_embeddings;
      const char *name = tied ? "model.embed_tokens.weight" : "lm_head.weight";
      RG_RETURN_IF_ERROR(load_mat_ex(s, name, a->vocab, a->d_model, !tied, &s->lm_head));
      s->wtype = s->lm_head.type;
      return load_vec(s, "model.norm.weight", a->d_model, 0, &s->final_norm);
    }
    default:
      break;
  }
  if (!(s->layers = calloc((size_t)n_layers, sizeof(layer_t))))
    return rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
  for (int64_t i = 0; i < n_layers; i++) {
    int64_t l = s->spec.layer_begin + i;
    if (s->spec.kind == RG_STAGE_ATTENTION)
      RG_RETURN_IF_ERROR(load_attention(s, l, &s->layers[i]));
    else
      RG_RETURN_IF_ERROR(load_ffn(s, l, &s->layers[i]));
  }
  if (s->spec.kind != RG_STAGE_ATTENTION) return NULL;
  // The rotary table, and the KV pool of these layers.
  RG_RETURN_IF_ERROR(place(s, rg_model_rope_inv_freq(s->m),
                           (size_t)(a->head_dim / 2) * sizeof(float), 0, 0, &s->inv_freq));
  rg_dtype_t kt = s->o.kv_dtype;
  if (kt != RG_F32 && kt != RG_BF16 && kt != RG_F16)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "%s: KV dtype %s is not supported; use f32, bf16 or f16", s->name,
                          rg_dtype_name(kt));
  if (s->o.kv_blocks < 1 || s->o.block_size < 1)
    return rg_status_make(RG_INVALID_ARGUMENT, "%s: a KV pool of %lld blocks of %lld tokens",
                          s->name, (long long)s->o.kv_blocks, (long long)s->o.block_size);
  double layer = (double)s->o.kv_blocks * (double)s->o.block_size *
                 (double)(a->n_kv_heads * a->head_dim) * rg_dtype_bytes(kt);
  if (layer * 2.0 * (double)n_layers > (double)SIZE_MAX / 2)
    return rg_status_make(RG_OUT_OF_MEMORY, "%s: a KV pool of %.3g bytes cannot be addressed",
                          s->name, layer * 2.0 * (double)n_layers);
  s->kv_layer_bytes = (size_t)layer;
  for (int64_t i = 0; i < n_layers; i++) s->layers[i].kv_offset = (size_t)i * 2 * s->kv_layer_bytes;
  return rg_buffer_alloc(s->dev, (size_t)n_layers * 2 * s->kv_layer_bytes, &s->kv);
}

rg_status_t rg_stage_create(const rg_model_t *m, const rg_stage_spec_t *spec, rg_device_t *dev,
                            const rg_stage_options_t *opts, rg_stage_t **out) {
  *out = NULL;
  if (!m || !spec || !dev)
    return rg_status_make(RG_INVALID_ARGUMENT, "rg_stage_create: NULL argument");
  RG_RETURN_IF_ERROR(check_spec(m, spec));
  rg_stage_t *s = calloc(1, sizeof(*s));
  if (!s) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
  s->spec = *spec;
  if (spec->kind == RG_STAGE_EMBED || spec->kind == RG_STAGE_LM_HEAD)
    s->spec.layer_begin = s->spec.layer_end = 0;
  s->m = m;
  s->a = rg_model_arch(m);
  s->dev = dev;
  s->o = opts ? *opts : (rg_stage_options_t){0};
  s->wtype = RG_F32;
  rg_device_retain(dev);
  const rg_device_info_t *di = rg_device_info(dev);
  if (s->spec.kind == RG_STAGE_EMBED || s->spec.kind == RG_STAGE_LM_HEAD)
    snprintf(s->name, sizeof s->name, "%s on %s:%d", rg_stage_kind_name(spec->kind), di->driver,
             di->index);
  else
    snprintf(s->name, sizeof s->name, "%s[%lld,%lld)%s on %s:%d", rg_stage_kind_name(spec->kind),
             (long long)spec->layer_begin, (long long)spec->layer_end,
             spec->experts ? " (expert subset)" : "", di->driver, di->index);
  rg_status_t st = NULL;
  if (spec->experts) {
    s->experts = malloc(spec->n_experts * sizeof(int32_t));
    if (!s->experts)
      st = rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
    else
      memcpy(s->experts, spec->experts, spec->n_experts * sizeof(int32_t));
    s->spec.experts = s->experts;
  }
  if (!st) st = rg_stage_ctx_create(s, &s->own);
  if (!st) st = create(s);
  if (st) {
    char name[sizeof s->name];
    snprintf(name, sizeof name, "%s", s->name);
    rg_stage_destroy(s);
    return rg_status_wrap(st, "%s", name);
  }
  *out = s;
  return NULL;
}

// Every weight matrix of layer L, in turn: its projections, router and
// experts (those loaded).
static void each_layer_mat(const rg_stage_t *s, layer_t *L, void (*fn)(mat_t *, void *),
                           void *ctx) {
  mat_t *mats[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down, &L->router};
  for (size_t k = 0; k < sizeof mats / sizeof mats[0]; k++) fn(mats[k], ctx);
  for (int64_t x = 0; L->e_gate && x < s->a->n_experts; x++) {
    fn(&L->e_gate[x], ctx);
    fn(&L->e_up[x], ctx);
    fn(&L->e_down[x], ctx);
  }
}

typedef struct {
  rg_limits_span_t *out;
  size_t max, n;
} spans_t;

static void add_span(mat_t *m, void *ctx) {
  spans_t *sp = ctx;
  void *p = m->buf ? rg_buffer_host_ptr(m->buf) : NULL;
  if (!p) return;
  if (sp->n < sp->max) sp->out[sp->n] = (rg_limits_span_t){p, rg_buffer_size(m->buf)};
  sp->n++;
}

size_t rg_stage_weight_spans(rg_stage_t *s, rg_limits_span_t *out, size_t max) {
  spans_t sp = {out, max, 0};
  if (!rg_device_cpu_pool(s->dev)) return 0;
  int64_t n_layers = s->spec.layer_end - s->spec.layer_begin;
  for (int64_t i = 0; s->layers && i < n_layers; i++)
    each_layer_mat(s, &s->layers[i], add_span, &sp);
  add_span(&s->lm_head, &sp);
  return sp.n;
}

static void release_mat(mat_t *m, void *unused) {
  (void)unused;
  rg_buffer_release(m->buf);
  m->buf = NULL;
}

void rg_stage_destroy(rg_stage_t *s) {
  if (!s) return;
  int64_t n_layers = s->spec.layer_end - s->spec.layer_begin;
  for (int64_t i = 0; s->layers && i < n_layers; i++) {
    layer_t *L = &s->layers[i];
    rg_buffer_t *v[] = {L->attn_norm, L->ffn_norm, L->bq, L->bk, L->bv, L->q_norm, L->k_norm};
    for (size_t k = 0; k < sizeof v / sizeof v[0]; k++) rg_buffer_release(v[k]);
    each_layer_mat(s, L, release_mat, NULL);
    free(L->e_gate), free(L->e_up), free(L->e_down);
  }
  free(s->layers);
  release_mat(&s->embed, NULL);
  release_mat(&s->lm_head, NULL);
  rg_buffer_release(s->final_norm);
  rg_buffer_release(s->inv_freq);
  rg_buffer_release(s->kv);
  rg_stage_ctx_destroy(s->own);
  free(s->experts);
  rg_queue_destroy(s->q);
  rg_device_close(s->dev);
  free(s);
}

const rg_stage_spec_t *rg_stage_spec(const rg_stage_t *s) {
  return &s->spec;
}
const char *rg_stage_name(const rg_stage_t *s) {
  return s->name;
}
rg_device_t *rg_stage_device(const rg_stage_t *s) {
  return s->dev;
}
rg_queue_t *rg_stage_queue(const rg_stage_t *s) {
  return s->q;
}
double rg_stage_weight_bytes(const rg_stage_t *s) {
  return s->weight_bytes;
}
double rg_stage_kv_bytes(const rg_stage_t *s) {
  return s->kv ? (double)rg_buffer_size(s->kv) : 0.0;
}
int rg_stage_has_layer(const rg_stage_t *s, int64_t l) {
  return l >= s->spec.layer_begin && l < s->spec.layer_end;
}
void rg_stage_counters(const rg_stage_t *s, rg_stage_counters_t *out) {
  *out = s->c;
}
void rg_stage_counters_reset(rg_stage_t *s) {
  memset(&s->c, 0, sizeof s->c);
  rg_queue_op_profile_reset(s->q);  // op times stay a breakdown of the counted seconds
}

// ----- A step --------------------------------------------------------------------

static rg_status_t ensure(rg_stage_t *s, scratch_t *sc, size_t bytes) {
  if (bytes <= sc->bytes && sc->buf) return NULL;
  size_t want = bytes > sc->bytes * 2 ? bytes : sc->bytes * 2;
  if (!want) want = 64;
  rg_buffer_release(sc->buf);
  sc->buf = NULL;
  sc->bytes = 0;
  RG_RETURN_IF_ERROR(rg_buffer_alloc(s->dev, want, &sc->buf));
  sc->bytes = want;
  return NULL;
}

static rg_status_t upload(rg_stage_t *s, scratch_t *sc, const void *src, size_t bytes) {
  RG_RETURN_IF_ERROR(ensure(s, sc, bytes));
  return bytes ? rg_queue_write(s->q, sc->buf, 0, src, bytes) : NULL;
}

rg_status_t rg_stage_begin(rg_stage_t *s, rg_stage_ctx_t *c, const rg_step_t *st) {
  if (!c) c = s->own;
  if (c->s != s)
    return rg_status_make(RG_INVALID_ARGUMENT, "%s: a context of another stage", s->name);
  const rg_arch_t *a = s->a;
  size_t T = (size_t)st->n_tokens, d = (size_t)a->d_model;
  c->step = st;
  c->step_seconds = 0;
  switch (s->spec.kind) {
    case RG_STAGE_EMBED:
      return upload(s, &c->m_tokens, st->tokens, T * 4);
    case RG_STAGE_LM_HEAD:
      RG_RETURN_IF_ERROR(ensure(s, &c->last, (size_t)st->n_logits * d * 4));
      return upload(s, &c->m_lrows, st->logit_rows, (size_t)st->n_logits * 4);
    case RG_STAGE_ATTENTION: {
      size_t qd = (size_t)(a->n_heads * a->head_dim), kvd = (size_t)(a->n_kv_heads * a->head_dim);
      RG_RETURN_IF_ERROR(ensure(s, &c->h, T * d * 4));
      RG_RETURN_IF_ERROR(ensure(s, &c->qb, T * qd * 4));
      RG_RETURN_IF_ERROR(ensure(s, &c->kb, T * kvd * 4));
      RG_RETURN_IF_ERROR(ensure(s, &c->vb, T * kvd * 4));
      RG_RETURN_IF_ERROR(ensure(s, &c->ob, T * qd * 4));
      RG_RETURN_IF_ERROR(ensure(s, &c->t, T * d * 4));
      RG_RETURN_IF_ERROR(upload(s, &c->m_seq, st->seq, T * 4));
      RG_RETURN_IF_ERROR(upload(s, &c->m_pos, st->pos, T * 4));
      RG_RETURN_IF_ERROR(upload(s, &c->m_toff, st->table_off, (size_t)(st->n_seqs + 1) * 4));
      return upload(s, &c->m_table, st->table, (size_t)st->n_table * 4);
    }
    case RG_STAGE_FFN: {
      size_t ff = (size_t)a->d_ff;
      RG_RETURN_IF_ERROR(ensure(s, &c->h, T * d * 4));
      RG_RETURN_IF_ERROR(ensure(s, &c->g, T * ff * 4));
      RG_RETURN_IF_ERROR(ensure(s, &c->u, T * ff * 4));
      return ensure(s, &c->t, T * d * 4);
    }
    case RG_STAGE_MOE: {
      size_t E = (size_t)a->n_experts, k = (size_t)a->n_experts_per_tok,
             ff = (size_t)a->d_ff_expert;
      RG_RETURN_IF_ERROR(ensure(s, &c->h, T * d * 4));
      RG_RETURN_IF_ERROR(ensure(s, &c->rl, T * E * 4));
      RG_RETURN_IF_ERROR(ensure(s, &c->idx, T * k * 4));
      RG_RETURN_IF_ERROR(ensure(s, &c->wts, T * k * 4));
      RG_RETURN_IF_ERROR(ensure(s, &c->off, (E + 1) * 4));
      RG_RETURN_IF_ERROR(ensure(s, &c->rows, T * k * 4));
      // An expert sees each token at most once.
      RG_RETURN_IF_ERROR(ensure(s, &c->xe, T * d * 4));
      RG_RETURN_IF_ERROR(ensure(s, &c->ge, T * ff * 4));
      RG_RETURN_IF_ERROR(ensure(s, &c->ue, T * ff * 4));
      RG_RETURN_IF_ERROR(ensure(s, &c->ye, T * d * 4));
      if (!c->host_off && !(c->host_off = malloc((E + 1) * sizeof(int32_t))))
        return rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
      return NULL;
    }
    default:
      return NULL;
  }
}

static rg_status_t submit(rg_stage_t *s, rg_op_t *op, const char *what) {
  op->label = what;
  return rg_queue_submit(s->q, op);
}

static rg_op_t mm(const mat_t *w, rg_buffer_t *x, int64_t m, rg_buffer_t *bias, rg_buffer_t *y) {
  rg_op_t op = {.kind = RG_OP_MATMUL};
  op.matmul =
      (rg_op_matmul_t){R(x), R(w->buf), R(bias), R(y), w->type, m, w->rows, w->cols, w->layout};
  return op;
}

static rg_op_t norm(rg_buffer_t *x, rg_buffer_t *w, rg_buffer_t *y, int64_t rows, int64_t dim,
                    float eps) {
  rg_op_t op = {.kind = RG_OP_RMSNORM};
  op.rmsnorm = (rg_op_rmsnorm_t){R(x), R(w), R(y), rows, dim, eps};
  return op;
}

static rg_op_t add(rg_buffer_t *x, rg_buffer_t *t, int64_t n) {
  rg_op_t op = {.kind = RG_OP_ADD};
  op.add = (rg_op_add_t){R(x), R(t), R(x), n};
  return op;
}

static rg_status_t attention_layer(rg_stage_t *s, rg_stage_ctx_t *c, const layer_t *L,
                                   rg_buffer_t *x) {
  const rg_arch_t *a = s->a;
  const rg_step_t *st = c->step;
  int64_t T = st->n_tokens, d = a->d_model, hd = a->head_dim, nh = a->n_heads, nkv = a->n_kv_heads;
  float eps = (float)rg_model_hparams(s->m)->rms_norm_eps;
  rg_op_t op = norm(x, L->attn_norm, c->h.buf, T, d, eps);
  RG_RETURN_IF_ERROR(submit(s, &op, "attention.norm"));
  op = mm(&L->wq, c->h.buf, T, L->bq, c->qb.buf);
  RG_RETURN_IF_ERROR(submit(s, &op, "attention.q_proj"));
  op = mm(&L->wk, c->h.buf, T, L->bk, c->kb.buf);
  RG_RETURN_IF_ERROR(submit(s, &op, "attention.k_proj"));
  op = mm(&L->wv, c->h.buf, T, L->bv, c->vb.buf);
  RG_RETURN_IF_ERROR(submit(s, &op, "attention.v_proj"));
  if (L->q_norm) {
    op = norm(c->qb.buf, L->q_norm, c->qb.buf, T * nh, hd, eps);
    RG_RETURN_IF_ERROR(submit(s, &op, "attention.q_norm"));
    op = norm(c->kb.buf, L->k_norm, c->kb.buf, T * nkv, hd, eps);
    RG_RETURN_IF_ERROR(submit(s, &op, "attention.k_norm"));
  }
  op = (rg_op_t){.kind = RG_OP_ROPE};
  op.rope = (rg_op_rope_t){R(c->qb.buf), R(c->m_pos.buf), R(s->inv_freq), T, nh, hd};
  RG_RETURN_IF_ERROR(submit(s, &op, "attention.rope_q"));
  op.rope = (rg_op_rope_t){R(c->kb.buf), R(c->m_pos.buf), R(s->inv_freq), T, nkv, hd};
  RG_RETURN_IF_ERROR(submit(s, &op, "attention.rope_k"));
  rg_kv_ref_t kv = {{s->kv, L->kv_offset},
                    {s->kv, L->kv_offset + s->kv_layer_bytes},
                    s->o.kv_dtype,
                    s->o.kv_blocks,
                    s->o.block_size,
                    nkv,
                    hd};
  rg_attn_meta_t meta = {T,
                         st->n_seqs,
                         st->n_table,
                         R(c->m_seq.buf),
                         R(c->m_pos.buf),
                         R(c->m_toff.buf),
                         R(c->m_table.buf)};
  op = (rg_op_t){.kind = RG_OP_KV_WRITE};
  op.kv_write = (rg_op_kv_write_t){kv, meta, R(c->kb.buf), R(c->vb.buf)};
  RG_RETURN_IF_ERROR(submit(s, &op, "attention.kv_write"));
  op = (rg_op_t){.kind = RG_OP_ATTENTION};
  op.attention = (rg_op_attention_t){kv, meta, R(c->qb.buf), R(c->ob.buf), R(NULL), nh, 0.0f, 0};
  RG_RETURN_IF_ERROR(submit(s, &op, "attention.core"));
  op = mm(&L->wo, c->ob.buf, T, NULL, c->t.buf);
  RG_RETURN_IF_ERROR(submit(s, &op, "attention.o_proj"));
  op = add(x, c->t.buf, T * d);
  return submit(s, &op, "attention.residual");
}

static rg_status_t ffn_layer(rg_stage_t *s, rg_stage_ctx_t *c, const layer_t *L, rg_buffer_t *x) {
  const rg_arch_t *a = s->a;
  int64_t T = c->step->n_tokens, d = a->d_model, ff = a->d_ff;
  float eps = (float)rg_model_hparams(s->m)->rms_norm_eps;
  rg_op_t op = norm(x, L->ffn_norm, c->h.buf, T, d, eps);
  RG_RETURN_IF_ERROR(submit(s, &op, "ffn.norm"));
  op = mm(&L->w_gate, c->h.buf, T, NULL, c->g.buf);
  RG_RETURN_IF_ERROR(submit(s, &op, "ffn.gate_proj"));
  op = mm(&L->w_up, c->h.buf, T, NULL, c->u.buf);
  RG_RETURN_IF_ERROR(submit(s, &op, "ffn.up_proj"));
  op = (rg_op_t){.kind = RG_OP_SWIGLU};
  op.swiglu = (rg_op_swiglu_t){R(c->g.buf), R(c->u.buf), R(c->g.buf), T * ff};
  RG_RETURN_IF_ERROR(submit(s, &op, "ffn.swiglu"));
  op = mm(&L->w_down, c->g.buf, T, NULL, c->t.buf);
  RG_RETURN_IF_ERROR(submit(s, &op, "ffn.down_proj"));
  op = add(x, c->t.buf, T * d);
  return submit(s, &op, "ffn.residual");
}

static rg_status_t moe_layer(rg_stage_t *s, rg_stage_ctx_t *c, const layer_t *L, rg_buffer_t *x,
                             unsigned flags) {
  const rg_arch_t *a = s->a;
  int64_t T = c->step->n_tokens, d = a->d_model, E = a->n_experts, k = a->n_experts_per_tok,
          ff = a->d_ff_expert;
  float eps = (float)rg_model_hparams(s->m)->rms_norm_eps;
  rg_op_t op;
  if (!(flags & RG_STAGE_NORM_GIVEN)) {
    op = norm(x, L->ffn_norm, c->h.buf, T, d, eps);
    RG_RETURN_IF_ERROR(submit(s, &op, "moe.norm"));
  }
  op = mm(&L->router, c->h.buf, T, NULL, c->rl.buf);
  RG_RETURN_IF_ERROR(submit(s, &op, "moe.router"));
  op = (rg_op_t){.kind = RG_OP_MOE_ROUTE};
  op.moe_route = (rg_op_moe_route_t){R(c->rl.buf),           R(c->idx.buf), R(c->wts.buf), T, E, k,
                                     rg_model_moe_mode(s->m)};
  RG_RETURN_IF_ERROR(submit(s, &op, "moe.route"));
  op = (rg_op_t){.kind = RG_OP_MOE_GROUP};
  op.moe_group = (rg_op_moe_group_t){R(c->idx.buf), R(c->off.buf), R(c->rows.buf), T, k, E};
  RG_RETURN_IF_ERROR(submit(s, &op, "moe.group"));
  // How many rows each expert gets decides its matmuls' m: read the offsets.
  RG_RETURN_IF_ERROR(rg_queue_read(s->q, c->off.buf, 0, c->host_off, (size_t)(E + 1) * 4));
  RG_RETURN_IF_ERROR(rg_queue_wait(s->q));
  for (int64_t e = 0; e < E; e++) {
    int64_t b = c->host_off[e], n = c->host_off[e + 1] - b;
    if (!n || !owns_expert(s, e)) continue;
    if (b < 0 || n < 0 || b + n > T * k)
      return rg_status_make(RG_INTERNAL, "%s: expert %lld's rows [%lld, +%lld) are outside %lld",
                            s->name, (long long)e, (long long)b, (long long)n, (long long)(T * k));
    op = (rg_op_t){.kind = RG_OP_MOE_GATHER};
    op.moe_gather =
        (rg_op_moe_gather_t){R(c->h.buf), {c->rows.buf, (size_t)b * 4}, R(c->xe.buf), T, n, k, d};
    RG_RETURN_IF_ERROR(submit(s, &op, "moe.dispatch"));
    op = mm(&L->e_gate[e], c->xe.buf, n, NULL, c->ge.buf);
    RG_RETURN_IF_ERROR(submit(s, &op, "moe.expert.gate_proj"));
    op = mm(&L->e_up[e], c->xe.buf, n, NULL, c->ue.buf);
    RG_RETURN_IF_ERROR(submit(s, &op, "moe.expert.up_proj"));
    op = (rg_op_t){.kind = RG_OP_SWIGLU};
    op.swiglu = (rg_op_swiglu_t){R(c->ge.buf), R(c->ue.buf), R(c->ge.buf), n * ff};
    RG_RETURN_IF_ERROR(submit(s, &op, "moe.expert.swiglu"));
    op = mm(&L->e_down[e], c->ge.buf, n, NULL, c->ye.buf);
    RG_RETURN_IF_ERROR(submit(s, &op, "moe.expert.down_proj"));
    op = (rg_op_t){.kind = RG_OP_MOE_SCATTER_ADD};
    op.moe_scatter_add = (rg_op_moe_scatter_add_t){
        R(c->ye.buf), {c->rows.buf, (size_t)b * 4}, R(c->wts.buf), R(x), T, n, k, d};
    RG_RETURN_IF_ERROR(submit(s, &op, "moe.combine"));
  }
  return NULL;
}

static rg_status_t run(rg_stage_t *s, rg_stage_ctx_t *c, int64_t layer, rg_buffer_t *x,
                       rg_buffer_t *logits, unsigned flags) {
  const rg_arch_t *a = s->a;
  const rg_step_t *st = c->step;
  if (!st) return rg_status_make(RG_INVALID_ARGUMENT, "%s: run before begin", s->name);
  switch (s->spec.kind) {
    case RG_STAGE_EMBED: {
      rg_op_t op = {.kind = RG_OP_EMBED};
      op.embed = (rg_op_embed_t){R(s->embed.buf), R(c->m_tokens.buf), R(x),      s->embed.type,
                                 a->vocab,        st->n_tokens,       a->d_model};
      return submit(s, &op, "embed");
    }
    case RG_STAGE_LM_HEAD: {
      if (!st->n_logits) return NULL;
      rg_op_t op = {.kind = RG_OP_MOE_GATHER};  // the gather of rows, k = 1
      op.moe_gather = (rg_op_moe_gather_t){
          R(x), R(c->m_lrows.buf), R(c->last.buf), st->n_tokens, st->n_logits, 1, a->d_model};
      RG_RETURN_IF_ERROR(submit(s, &op, "lm_head.rows"));
      op = norm(c->last.buf, s->final_norm, c->last.buf, st->n_logits, a->d_model,
                (float)rg_model_hparams(s->m)->rms_norm_eps);
      RG_RETURN_IF_ERROR(submit(s, &op, "lm_head.norm"));
      op = mm(&s->lm_head, c->last.buf, st->n_logits, NULL, logits);
      return submit(s, &op, "lm_head");
    }
    default:
      break;
  }
  if (!rg_stage_has_layer(s, layer))
    return rg_status_make(RG_INVALID_ARGUMENT, "%s: layer %lld is not in its range", s->name,
                          (long long)layer);
  const layer_t *L = &s->layers[layer - s->spec.layer_begin];
  switch (s->spec.kind) {
    case RG_STAGE_ATTENTION:
      return attention_layer(s, c, L, x);
    case RG_STAGE_FFN:
      return ffn_layer(s, c, L, x);
    default:
      return moe_layer(s, c, L, x, flags);
  }
}

rg_status_t rg_stage_run_ex(rg_stage_t *s, rg_stage_ctx_t *c, int64_t layer, rg_buffer_t *x,
                            rg_buffer_t *logits, unsigned flags) {
  if (!c) c = s->own;
  if (c->s != s)
    return rg_status_make(RG_INVALID_ARGUMENT, "%s: a context of another stage", s->name);
  if ((flags & RG_STAGE_NORM_GIVEN) && s->spec.kind != RG_STAGE_MOE)
    return rg_status_make(RG_INVALID_ARGUMENT, "%s: only an moe stage takes its normed input",
                          s->name);
  double t0 = rg_clock_now();
  rg_status_t st = run(s, c, layer, x, logits, flags);
  if (!st) st = rg_queue_wait(s->q);  // time the work, not its submission
  c->step_seconds += rg_clock_now() - t0;
  if (st && s->spec.kind != RG_STAGE_EMBED && s->spec.kind != RG_STAGE_LM_HEAD)
    return rg_status_wrap(st, "%s, layer %lld", s->name, (long long)layer);
  return st ? rg_status_wrap(st, "%s", s->name) : NULL;
}

rg_status_t rg_stage_run(rg_stage_t *s, rg_stage_ctx_t *c, int64_t layer, rg_buffer_t *x,
                         rg_buffer_t *logits) {
  return rg_stage_run_ex(s, c, layer, x, logits, 0);
}

void rg_stage_end(rg_stage_t *s, rg_stage_ctx_t *c) {
  if (!c) c = s->own;
  const rg_step_t *st = c->step;
  if (!st) return;
  s->c.seconds += c->step_seconds;
  s->c.steps++;
  s->c.tokens += st->n_tokens;
  rg_batch_shape_t b = {st->shape, (size_t)st->n_seqs, st->n_logits,  0,     0,
                        0,         s->wtype,           s->o.kv_dtype, RG_F32};
  if (s->spec.layer_end > s->spec.layer_begin)
    b.layer_begin = s->spec.layer_begin, b.layer_end = s->spec.layer_end;
  if (s->experts) b.expert_fraction = (double)s->spec.n_experts / (double)s->a->n_experts;
  if ((unsigned)b.kv_dtype >= RG_DTYPE_COUNT || s->spec.kind != RG_STAGE_ATTENTION)
    b.kv_dtype = RG_F32;
  rg_stage_cost_t cost[RG_MAX_STAGE_COSTS];
  size_t n = 0;
  rg_status_t e = rg_stage_costs_batch(s->a, &b, cost, RG_MAX_STAGE_COSTS, &n);
  const rg_stage_cost_t *mine = e ? NULL : rg_stage_find(cost, n, rg_stage_kind_name(s->spec.kind));
  rg_status_free(e);
  if (mine) {
    s->c.flops += mine->flops;
    s->c.weight_bytes += mine->weight_bytes;
    s->c.kv_bytes += mine->kv_read_bytes + mine->kv_write_bytes;
    s->c.act_bytes += mine->act_bytes;
  }
  c->step = NULL;
}

void rg_stage_cancel(rg_stage_t *s, rg_stage_ctx_t *c) {
  if (!c) c = s->own;
  c->step = NULL;
}

// ----- Contexts ------------------------------------------------------------------

rg_status_t rg_stage_ctx_create(rg_stage_t *s, rg_stage_ctx_t **out) {
  *out = calloc(1, sizeof(**out));
  if (!*out) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
  (*out)->s = s;
  return NULL;
}

void rg_stage_ctx_destroy(rg_stage_ctx_t *c) {
  if (!c) return;
  scratch_t *sc[] = {&c->h,        &c->qb,    &c->kb,    &c->vb,     &c->ob,      &c->t,
                     &c->g,        &c->u,     &c->rl,    &c->idx,    &c->wts,     &c->off,
                     &c->rows,     &c->xe,    &c->ge,    &c->ue,     &c->ye,      &c->last,
                     &c->m_tokens, &c->m_seq, &c->m_pos, &c->m_toff, &c->m_table, &c->m_lrows};
  for (size_t k = 0; k < sizeof sc / sizeof sc[0]; k++) rg_buffer_release(sc[k]->buf);
  free(c->host_off);
  free(c);
}

rg_buffer_t *rg_stage_ctx_hidden(rg_stage_ctx_t *c) {
  return c->h.buf;
}

// ----- Swap-tier copies -----------------------------------------------------------

size_t rg_stage_kv_block_bytes(const rg_stage_t *s) {
  if (!s->kv) return 0;
  return (size_t)(s->spec.layer_end - s->spec.layer_begin) * 2 *
         (s->kv_layer_bytes / (size_t)s->o.kv_blocks);
}

rg_buffer_t *rg_stage_kv_buffer(const rg_stage_t *s) {
  return s->kv;
}

void rg_stage_kv_layout(const rg_stage_t *s, rg_stage_kv_layout_t *out) {
  memset(out, 0, sizeof *out);
  if (!s->kv) return;
  out->layer_bytes = s->kv_layer_bytes;
  out->block_bytes = s->kv_layer_bytes / (size_t)s->o.kv_blocks;
  out->row_bytes = out->block_bytes / (size_t)s->o.block_size;
  out->n_blocks = s->o.kv_blocks;
  out->block_size = s->o.block_size;
}

rg_status_t rg_stage_kv_copy(rg_stage_t *s, rg_buffer_t *tier, const int32_t *src,
                             const int32_t *dst, size_t n, int to_tier) {
  if (!s->kv) return rg_status_make(RG_INVALID_ARGUMENT, "%s holds no KV", s->name);
  size_t blk = s->kv_layer_bytes / (size_t)s->o.kv_blocks, per = rg_stage_kv_block_bytes(s);
  int64_t n_layers = s->spec.layer_end - s->spec.layer_begin;
  for (size_t i = 0; i < n; i++) {
    int32_t dev_block = to_tier ? src[i] : dst[i], tier_block = to_tier ? dst[i] : src[i];
    if (dev_block < 0 || dev_block >= s->o.kv_blocks || tier_block < 0 ||
        (size_t)(tier_block + 1) * per > rg_buffer_size(tier))
      return rg_status_make(RG_INVALID_ARGUMENT,
                            "%s: swap of device block %d and tier block %d is out of range",
                            s->name, dev_block, tier_block);
    for (int64_t l = 0; l < n_layers; l++)
      for (int kv = 0; kv < 2; kv++) {
        size_t doff =
            s->layers[l].kv_offset + (size_t)kv * s->kv_layer_bytes + (size_t)dev_block * blk;
        size_t toff = (size_t)tier_block * per + ((size_t)l * 2 + (size_t)kv) * blk;
        rg_status_t st = to_tier ? rg_queue_copy(s->q, tier, toff, s->kv, doff, blk)
                                 : rg_queue_copy(s->q, s->kv, doff, tier, toff, blk);
        RG_RETURN_IF_ERROR(st);
      }
  }
  return rg_queue_wait(s->q);
}
