#include "runtime/engine.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "devices/devices.h"
#include "graphs/weights.h"
#include "ops/matmul.h"
#include "ops/ops.h"

// One transformer layer's weights. Matrices point into the mapped files;
// vectors (norms, biases) are converted to f32 copies the engine owns.
typedef struct {
  float *attn_norm;          // (d_model)
  float *ffn_norm;           // (d_model)
  rg_wmat_t wq, wk, wv, wo;  // (n_heads*hd, d) (n_kv*hd, d) (n_kv*hd, d) (d, n_heads*hd)
  float *bq, *bk, *bv;       // Qwen2 biases, or NULL
  float *q_norm, *k_norm;    // Qwen3 QK-norm (head_dim), or NULL
  int moe;
  rg_wmat_t w_gate, w_up, w_down;  // dense: (ff, d) (ff, d) (d, ff)
  rg_wmat_t router;                // moe: (n_experts, d)
  rg_wmat_t *e_gate, *e_up, *e_down;  // moe: n_experts each, (ff_e, d) (ff_e, d) (d, ff_e)
} layer_t;

typedef struct {
  int used;
  int64_t len;
  int32_t *blocks;
  size_t n_blocks, cap_blocks;
} seq_t;

// Scratch for one forward step, grown to the largest step seen.
typedef struct {
  size_t tokens;  // capacity in tokens
  float *x, *h, *q, *k, *v, *o, *t, *g, *u;
  float *router;                 // (T, E)
  int32_t *idx, *rows, *offsets; // MoE routing
  float *wts;
  float *xe, *ge, *ue, *ye;      // (T*k, ...) per-expert gathers
  int32_t *ids, *pos, *seq_of;
  rg_block_table_t *tables;
  size_t n_tables;
  float *last;                   // (n_logits, d)
} scratch_t;

struct rg_engine_s {
  rg_weights_t *w;
  rg_arch_t *arch;
  rg_weights_hparams_t hp;
  rg_tokenizer_t *tok;
  rg_device_t *dev;
  rg_pool_t *pool;
  rg_rope_t rope;
  int rope_ready;
  layer_t *layers;
  rg_wmat_t embed;  // (vocab, d)
  rg_wmat_t lm_head;
  float *final_norm;
  rg_moe_mode_t moe_mode;
  rg_matmul_opts_t mm_opts;
  // KV
  rg_kv_cache_t *kv;
  rg_dtype_t kv_type;
  size_t block_size, n_blocks;
  int32_t *free_blocks;
  size_t n_free;
  int64_t max_context;
  seq_t *seqs;
  int max_seqs;
  scratch_t s;
  rg_engine_counters_t c;
  char describe[256];
  double weight_bytes;
  // Matrices copied into anonymous huge-page memory (see copy_weights).
  int copy;
  void **copies;
  size_t *copy_bytes;
  size_t n_copies, cap_copies;
};

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

// ----- Loading -------------------------------------------------------------------

static rg_status_t wtype_of(const rg_tensor_t *t, rg_dtype_t *out) {
  if (!rg_dtype_has_codec(t->type))
    return rg_status_make(RG_UNIMPLEMENTED,
                          "%s: tensor '%s' is %s, which the CPU engine does not run (f32, bf16, f16, q8_0)", t->file,
                          t->name, rg_dtype_name(t->type));
  *out = t->type;
  return NULL;
}

// Decode streams every weight once per token, and file-backed mappings use
// 4 KiB pages: the TLB misses cost a third of the bandwidth here (measured:
// 0.59 of read bandwidth from the mapping, ~0.9 from huge pages). So, when
// asked, each matrix is copied into anonymous memory the kernel may back with
// 2 MiB pages. The mapping stays the source; the copy costs load time and
// resident memory, so it is off for models that would not fit twice.
static rg_status_t copy_weights(rg_engine_t *e, const void *src, size_t bytes, const void **out) {
  size_t len = (bytes + (2u << 20) - 1) & ~(size_t)((2u << 20) - 1);
  void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory copying %zu bytes of weights", bytes);
  madvise(p, len, MADV_HUGEPAGE);
  memcpy(p, src, bytes);
  if (e->n_copies == e->cap_copies) {
    size_t cap = e->cap_copies ? e->cap_copies * 2 : 64;
    void **nc = realloc(e->copies, cap * sizeof(void *));
    size_t *nb = nc ? realloc(e->copy_bytes, cap * sizeof(size_t)) : NULL;
    if (nc) e->copies = nc;
    if (!nc || !nb) {
      munmap(p, len);
      return rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
    }
    e->copy_bytes = nb;
    e->cap_copies = cap;
  }
  e->copies[e->n_copies] = p;
  e->copy_bytes[e->n_copies++] = len;
  *out = p;
  return NULL;
}

static rg_status_t get_mat(rg_engine_t *e, const char *name, int64_t rows, int64_t cols, rg_wmat_t *out) {
  const rg_tensor_t *t;
  int64_t shape[2] = {rows, cols};
  RG_RETURN_IF_ERROR(rg_weights_expect(e->w, name, 2, shape, &t));
  RG_RETURN_IF_ERROR(wtype_of(t, &out->type));
  out->data = t->data;
  if (e->copy) RG_RETURN_IF_ERROR(copy_weights(e, t->data, (size_t)t->nbytes, &out->data));
  out->rows = rows;
  out->cols = cols;
  e->weight_bytes += (double)t->nbytes;
  return NULL;
}

static rg_status_t get_vec(rg_engine_t *e, const char *name, int64_t n, int optional, float **out) {
  *out = NULL;
  if (optional && !rg_weights_find(e->w, name)) return NULL;
  const rg_tensor_t *t;
  int64_t shape[1] = {n};
  RG_RETURN_IF_ERROR(rg_weights_expect(e->w, name, 1, shape, &t));
  float *v = malloc((size_t)n * sizeof(float));
  if (!v) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory loading '%s'", name);
  rg_status_t st = rg_tensor_read_f32(t, 0, n, v);
  if (st) {
    free(v);
    return st;
  }
  e->weight_bytes += (double)t->nbytes;
  *out = v;
  return NULL;
}

static rg_status_t load_layer(rg_engine_t *e, int64_t l, layer_t *L) {
  const rg_arch_t *a = e->arch;
  int64_t d = a->d_model, hd = a->head_dim, nh = a->n_heads, nkv = a->n_kv_heads;
  char n[256];
#define NAME(fmt, ...) (snprintf(n, sizeof n, "model.layers.%lld." fmt, (long long)l, ##__VA_ARGS__), n)
  RG_RETURN_IF_ERROR(get_vec(e, NAME("input_layernorm.weight"), d, 0, &L->attn_norm));
  RG_RETURN_IF_ERROR(get_vec(e, NAME("post_attention_layernorm.weight"), d, 0, &L->ffn_norm));
  RG_RETURN_IF_ERROR(get_mat(e, NAME("self_attn.q_proj.weight"), nh * hd, d, &L->wq));
  RG_RETURN_IF_ERROR(get_mat(e, NAME("self_attn.k_proj.weight"), nkv * hd, d, &L->wk));
  RG_RETURN_IF_ERROR(get_mat(e, NAME("self_attn.v_proj.weight"), nkv * hd, d, &L->wv));
  RG_RETURN_IF_ERROR(get_mat(e, NAME("self_attn.o_proj.weight"), d, nh * hd, &L->wo));
  RG_RETURN_IF_ERROR(get_vec(e, NAME("self_attn.q_proj.bias"), nh * hd, !a->qkv_bias, &L->bq));
  RG_RETURN_IF_ERROR(get_vec(e, NAME("self_attn.k_proj.bias"), nkv * hd, !a->qkv_bias, &L->bk));
  RG_RETURN_IF_ERROR(get_vec(e, NAME("self_attn.v_proj.bias"), nkv * hd, !a->qkv_bias, &L->bv));
  RG_RETURN_IF_ERROR(get_vec(e, NAME("self_attn.q_norm.weight"), hd, !a->qk_norm, &L->q_norm));
  RG_RETURN_IF_ERROR(get_vec(e, NAME("self_attn.k_norm.weight"), hd, !a->qk_norm, &L->k_norm));
  L->moe = a->n_experts > 0 && rg_arch_layer_is_moe(a, l);
  if (!L->moe) {
    RG_RETURN_IF_ERROR(get_mat(e, NAME("mlp.gate_proj.weight"), a->d_ff, d, &L->w_gate));
    RG_RETURN_IF_ERROR(get_mat(e, NAME("mlp.up_proj.weight"), a->d_ff, d, &L->w_up));
    RG_RETURN_IF_ERROR(get_mat(e, NAME("mlp.down_proj.weight"), d, a->d_ff, &L->w_down));
    return NULL;
  }
  int mixtral = rg_family_has(a->family, RG_FAM_MIXTRAL_MOE);
  int64_t E = a->n_experts, ff = a->d_ff_expert;
  L->e_gate = calloc((size_t)E, sizeof(rg_wmat_t));
  L->e_up = calloc((size_t)E, sizeof(rg_wmat_t));
  L->e_down = calloc((size_t)E, sizeof(rg_wmat_t));
  if (!L->e_gate || !L->e_up || !L->e_down) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory loading experts");
  RG_RETURN_IF_ERROR(get_mat(e, mixtral ? NAME("block_sparse_moe.gate.weight") : NAME("mlp.gate.weight"), E, d, &L->router));
  for (int64_t x = 0; x < E; x++) {
    if (mixtral) {
      RG_RETURN_IF_ERROR(get_mat(e, NAME("block_sparse_moe.experts.%lld.w1.weight", (long long)x), ff, d, &L->e_gate[x]));
      RG_RETURN_IF_ERROR(get_mat(e, NAME("block_sparse_moe.experts.%lld.w3.weight", (long long)x), ff, d, &L->e_up[x]));
      RG_RETURN_IF_ERROR(get_mat(e, NAME("block_sparse_moe.experts.%lld.w2.weight", (long long)x), d, ff, &L->e_down[x]));
    } else {
      RG_RETURN_IF_ERROR(get_mat(e, NAME("mlp.experts.%lld.gate_proj.weight", (long long)x), ff, d, &L->e_gate[x]));
      RG_RETURN_IF_ERROR(get_mat(e, NAME("mlp.experts.%lld.up_proj.weight", (long long)x), ff, d, &L->e_up[x]));
      RG_RETURN_IF_ERROR(get_mat(e, NAME("mlp.experts.%lld.down_proj.weight", (long long)x), d, ff, &L->e_down[x]));
    }
  }
#undef NAME
  return NULL;
}

static rg_status_t check_family(const rg_arch_t *a) {
  if (rg_family_has(a->family, RG_FAM_RUNS) && !a->mla && a->sliding_window <= 0 && !a->attn_sinks &&
      a->n_shared_experts <= 0)
    return NULL;
  char list[256];
  return rg_status_make(RG_UNIMPLEMENTED, "model family '%s'%s is not run by this engine yet; it runs %s",
                        rg_family_name(a->family),
                        a->mla                     ? " with MLA"
                        : a->sliding_window > 0    ? " with sliding-window attention"
                        : a->attn_sinks            ? " with attention sinks"
                        : a->n_shared_experts > 0  ? " with shared experts"
                                                   : "",
                        rg_family_list(RG_FAM_RUNS, list, sizeof list));
}

static int file_exists(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static rg_status_t load_tokenizer(rg_engine_t *e, const char *path) {
  struct stat st;
  if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
    char p[4096];
    snprintf(p, sizeof p, "%s/tokenizer.json", path);
    if (file_exists(p)) return rg_tokenizer_load_hf(p, &e->tok);
    return NULL;  // a model without a tokenizer still runs on token ids
  }
  if (rg_weights_format(e->w) == RG_WEIGHTS_GGUF) {
    const char *const *tokens, *const *merges;
    const int32_t *types;
    size_t nt, nm;
    const char *pre;
    int32_t bos, eos;
    rg_status_t st2 = rg_weights_gguf_vocab(e->w, &tokens, &types, &nt, &merges, &nm, &pre, &bos, &eos);
    if (st2 && rg_status_code(st2) == RG_NOT_FOUND) {
      rg_status_free(st2);
      return NULL;
    }
    RG_RETURN_IF_ERROR(st2);
    return rg_tokenizer_from_vocab(tokens, types, nt, merges, nm, pre, bos, eos, &e->tok);
  }
  return NULL;
}

static rg_status_t create(rg_engine_t *e, const char *path, const rg_engine_options_t *opt) {
  RG_RETURN_IF_ERROR(rg_weights_open(path, &e->w));
  if (opt && opt->load == RG_LOAD_COPY) {
    e->copy = 1;
  } else if (!opt || opt->load == RG_LOAD_AUTO) {
    // Copy when the weights fit in a quarter of physical memory.
    uint64_t total = 0;
    for (size_t i = 0; i < rg_weights_count(e->w); i++) total += rg_weights_at(e->w, i)->nbytes;
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    e->copy = pages > 0 && page > 0 && (double)total < 0.25 * (double)pages * (double)page;
  }
  RG_RETURN_IF_ERROR(rg_weights_arch(e->w, &e->arch));
  const rg_arch_t *a = e->arch;
  RG_RETURN_IF_ERROR(check_family(a));
  RG_RETURN_IF_ERROR(rg_weights_hparams(e->w, &e->hp));
  RG_RETURN_IF_ERROR(rg_weights_check(e->w, a));
  RG_RETURN_IF_ERROR(load_tokenizer(e, path));

  if (opt && opt->isa != RG_CPU_ISA_AUTO) {
    rg_cpu_isa_t isa;
    RG_RETURN_IF_ERROR(rg_cpu_isa_resolve((rg_cpu_isa_t)opt->isa, &isa));
    RG_RETURN_IF_ERROR(rg_ops_set_isa(isa));
    e->mm_opts.isa = isa;
  }
  rg_register_available_devices();
  rg_device_options_t dopt = {0};
  dopt.threads = opt ? opt->threads : 0;
  RG_RETURN_IF_ERROR(rg_device_open("cpu", 0, &dopt, &e->dev));
  e->pool = rg_device_cpu_pool(e->dev);

  // RoPE frequencies as the weights' hyperparameters define them (llama3
  // scaling included), handed to the kernel as a table.
  int64_t half = a->head_dim / 2;
  double *inv = malloc((size_t)half * sizeof(double));
  if (!inv) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
  rg_status_t st = rg_rope_inv_freq(&e->hp, a->head_dim, inv);
  if (!st) st = rg_rope_init(&e->rope, (size_t)a->head_dim, e->hp.rope_theta, NULL);
  if (!st) {
    e->rope_ready = 1;
    for (int64_t i = 0; i < half; i++) e->rope.inv_freq[i] = (float)inv[i];
  }
  free(inv);
  RG_RETURN_IF_ERROR(st);

  RG_RETURN_IF_ERROR(get_mat(e, "model.embed_tokens.weight", a->vocab, a->d_model, &e->embed));
  if (e->embed.type == RG_Q8_0)
    return rg_status_make(RG_UNIMPLEMENTED, "%s: a q8_0 token embedding table is not supported yet", path);
  if (a->tie_embeddings || e->hp.tie_embeddings) {
    e->lm_head = e->embed;
  } else {
    RG_RETURN_IF_ERROR(get_mat(e, "lm_head.weight", a->vocab, a->d_model, &e->lm_head));
  }
  RG_RETURN_IF_ERROR(get_vec(e, "model.norm.weight", a->d_model, 0, &e->final_norm));
  e->layers = calloc((size_t)a->n_layers, sizeof(layer_t));
  if (!e->layers) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
  for (int64_t l = 0; l < a->n_layers; l++) RG_RETURN_IF_ERROR(load_layer(e, l, &e->layers[l]));
  e->moe_mode = (a->family == RG_FAMILY_QWEN3_MOE && !e->hp.norm_topk_prob) ? RG_MOE_SOFTMAX_TOPK
                                                                             : RG_MOE_SOFTMAX_TOPK_RENORM;

  // The KV pool.
  e->max_seqs = opt && opt->max_seqs > 0 ? opt->max_seqs : 16;
  e->max_context = opt && opt->max_context > 0 ? opt->max_context : 4096;
  if (a->max_context > 0 && e->max_context > a->max_context) e->max_context = a->max_context;
  e->block_size = opt && opt->block_size > 0 ? (size_t)opt->block_size : 16;
  int64_t kv_tokens = opt && opt->kv_tokens > 0 ? opt->kv_tokens : e->max_context * e->max_seqs;
  e->n_blocks = (size_t)((kv_tokens + (int64_t)e->block_size - 1) / (int64_t)e->block_size);
  rg_dtype_t kd = opt && opt->kv_dtype_set ? opt->kv_dtype : RG_BF16;
  if (kd != RG_F32 && kd != RG_BF16 && kd != RG_F16)
    return rg_status_make(RG_INVALID_ARGUMENT, "KV dtype %s is not supported; use f32, bf16 or f16", rg_dtype_name(kd));
  e->kv_type = kd;
  RG_RETURN_IF_ERROR(rg_kv_cache_create(e->kv_type, (size_t)a->n_layers, e->n_blocks, e->block_size,
                                        (size_t)a->n_kv_heads, (size_t)a->head_dim, &e->kv));
  e->free_blocks = malloc(e->n_blocks * sizeof(int32_t));
  e->seqs = calloc((size_t)e->max_seqs, sizeof(seq_t));
  if (!e->free_blocks || !e->seqs) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
  // Lowest block ids are handed out first.
  for (size_t i = 0; i < e->n_blocks; i++) e->free_blocks[i] = (int32_t)(e->n_blocks - 1 - i);
  e->n_free = e->n_blocks;
  snprintf(e->describe, sizeof e->describe, "%s, %lld layers, d_model %lld, %lld/%lld heads%s, %s weights, %s KV",
           rg_family_name(a->family), (long long)a->n_layers, (long long)a->d_model, (long long)a->n_heads, (long long)a->n_kv_heads,
           a->n_experts ? ", MoE" : "", rg_dtype_name(e->layers[0].wq.type), rg_dtype_name(e->kv_type));
  return NULL;
}

rg_status_t rg_engine_create(const char *model_path, const rg_engine_options_t *opt, rg_engine_t **out) {
  *out = NULL;
  rg_engine_t *e = calloc(1, sizeof(*e));
  if (!e) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory creating the engine");
  rg_status_t st = create(e, model_path, opt);
  if (st) {
    rg_engine_destroy(e);
    return st;
  }
  *out = e;
  return NULL;
}

static void scratch_free(scratch_t *s) {
  float *fs[] = {s->x, s->h, s->q, s->k, s->v, s->o, s->t, s->g, s->u, s->router, s->wts,
                 s->xe, s->ge, s->ue, s->ye, s->last};
  for (size_t i = 0; i < sizeof fs / sizeof fs[0]; i++) free(fs[i]);
  free(s->idx), free(s->rows), free(s->offsets), free(s->ids), free(s->pos), free(s->seq_of), free(s->tables);
  memset(s, 0, sizeof(*s));
}

void rg_engine_destroy(rg_engine_t *e) {
  if (!e) return;
  if (e->layers)
    for (int64_t l = 0; l < e->arch->n_layers; l++) {
      layer_t *L = &e->layers[l];
      free(L->attn_norm), free(L->ffn_norm), free(L->bq), free(L->bk), free(L->bv), free(L->q_norm), free(L->k_norm);
      free(L->e_gate), free(L->e_up), free(L->e_down);
    }
  free(e->layers);
  free(e->final_norm);
  if (e->seqs)
    for (int i = 0; i < e->max_seqs; i++) free(e->seqs[i].blocks);
  free(e->seqs);
  free(e->free_blocks);
  rg_kv_cache_destroy(e->kv);
  scratch_free(&e->s);
  if (e->rope_ready) rg_rope_deinit(&e->rope);
  for (size_t i = 0; i < e->n_copies; i++) munmap(e->copies[i], e->copy_bytes[i]);
  free(e->copies);
  free(e->copy_bytes);
  rg_device_close(e->dev);
  rg_tokenizer_destroy(e->tok);
  rg_arch_destroy(e->arch);
  rg_weights_close(e->w);
  free(e);
}

const rg_arch_t *rg_engine_arch(const rg_engine_t *e) { return e->arch; }
const rg_tokenizer_t *rg_engine_tokenizer(const rg_engine_t *e) { return e->tok; }
int64_t rg_engine_vocab(const rg_engine_t *e) { return e->arch->vocab; }
const char *rg_engine_describe(const rg_engine_t *e) { return e->describe; }
double rg_engine_weight_bytes(const rg_engine_t *e) { return e->weight_bytes; }
int rg_engine_threads(const rg_engine_t *e) { return rg_pool_threads(e->pool); }
const char *rg_engine_device_name(const rg_engine_t *e) { return rg_device_info(e->dev)->name; }
struct rg_pool_s *rg_engine_pool(const rg_engine_t *e) { return e->pool; }

// ----- Sequences --------------------------------------------------------------------

rg_status_t rg_engine_seq_new(rg_engine_t *e, int *out) {
  for (int i = 0; i < e->max_seqs; i++)
    if (!e->seqs[i].used) {
      e->seqs[i].used = 1;
      e->seqs[i].len = 0;
      e->seqs[i].n_blocks = 0;
      *out = i;
      return NULL;
    }
  return rg_status_make(RG_OUT_OF_MEMORY, "all %d sequence slots are in use; free one or raise the limit", e->max_seqs);
}

void rg_engine_seq_free(rg_engine_t *e, int seq) {
  if (seq < 0 || seq >= e->max_seqs || !e->seqs[seq].used) return;
  seq_t *s = &e->seqs[seq];
  for (size_t i = s->n_blocks; i > 0; i--) e->free_blocks[e->n_free++] = s->blocks[i - 1];
  s->n_blocks = 0;
  s->len = 0;
  s->used = 0;
}

int64_t rg_engine_seq_len(const rg_engine_t *e, int seq) {
  return seq >= 0 && seq < e->max_seqs && e->seqs[seq].used ? e->seqs[seq].len : -1;
}

int64_t rg_engine_free_tokens(const rg_engine_t *e) { return (int64_t)(e->n_free * e->block_size); }

void rg_engine_counters(const rg_engine_t *e, rg_engine_counters_t *out) { *out = e->c; }
void rg_engine_counters_reset(rg_engine_t *e) { memset(&e->c, 0, sizeof e->c); }

// ----- Forward -------------------------------------------------------------------

static rg_status_t grow(void **p, size_t bytes) {
  void *n = realloc(*p, bytes ? bytes : 1);
  if (!n) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory for %zu bytes of activations", bytes);
  *p = n;
  return NULL;
}

static rg_status_t scratch_reserve(rg_engine_t *e, size_t T, size_t n_entries) {
  scratch_t *s = &e->s;
  const rg_arch_t *a = e->arch;
  if (T > s->tokens) {
    size_t d = (size_t)a->d_model, qd = (size_t)(a->n_heads * a->head_dim), kvd = (size_t)(a->n_kv_heads * a->head_dim);
    size_t ff = (size_t)(a->d_ff > a->d_ff_expert ? a->d_ff : a->d_ff_expert);
    size_t E = (size_t)(a->n_experts > 0 ? a->n_experts : 1), k = (size_t)(a->n_experts_per_tok > 0 ? a->n_experts_per_tok : 1);
    struct {
      void **p;
      size_t bytes;
    } bufs[] = {
        {(void **)&s->x, T * d * 4},       {(void **)&s->h, T * d * 4},       {(void **)&s->q, T * qd * 4},
        {(void **)&s->k, T * kvd * 4},     {(void **)&s->v, T * kvd * 4},     {(void **)&s->o, T * qd * 4},
        {(void **)&s->t, T * d * 4},       {(void **)&s->g, T * ff * 4},      {(void **)&s->u, T * ff * 4},
        {(void **)&s->router, T * E * 4},  {(void **)&s->idx, T * k * 4},     {(void **)&s->rows, T * k * 4},
        {(void **)&s->wts, T * k * 4},     {(void **)&s->offsets, (E + 1) * 4}, {(void **)&s->xe, T * k * d * 4},
        {(void **)&s->ge, T * k * ff * 4}, {(void **)&s->ue, T * k * ff * 4}, {(void **)&s->ye, T * k * d * 4},
        {(void **)&s->ids, T * 4},         {(void **)&s->pos, T * 4},         {(void **)&s->seq_of, T * 4},
    };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) RG_RETURN_IF_ERROR(grow(bufs[i].p, bufs[i].bytes));
    s->tokens = T;
  }
  if (n_entries > s->n_tables) {
    RG_RETURN_IF_ERROR(grow((void **)&s->tables, n_entries * sizeof(rg_block_table_t)));
    RG_RETURN_IF_ERROR(grow((void **)&s->last, n_entries * (size_t)a->d_model * 4));
    s->n_tables = n_entries;
  }
  return NULL;
}

static rg_status_t mm(rg_engine_t *e, const float *x, int64_t m, const rg_wmat_t *w, const float *bias, float *y) {
  size_t row_bytes = 0;
  RG_RETURN_IF_ERROR(rg_dtype_row_bytes(w->type, w->cols, &row_bytes));
  e->c.weight_bytes += (double)row_bytes * (double)w->rows;
  e->c.flops += 2.0 * (double)m * (double)w->rows * (double)w->cols;
  return rg_matmul_ex(e->pool, x, m, w, bias, y, &e->mm_opts);
}

// Takes the blocks every entry needs before touching anything, so a step
// that cannot fit fails without side effects.
static rg_status_t reserve_blocks(rg_engine_t *e, const rg_batch_entry_t *b, size_t n) {
  size_t need = 0;
  for (size_t i = 0; i < n; i++) {
    if (b[i].seq < 0 || b[i].seq >= e->max_seqs || !e->seqs[b[i].seq].used)
      return rg_status_make(RG_INVALID_ARGUMENT, "sequence %d does not exist", b[i].seq);
    for (size_t j = 0; j < i; j++)
      if (b[j].seq == b[i].seq)
        return rg_status_make(RG_INVALID_ARGUMENT, "sequence %d appears twice in one step", b[i].seq);
    if (b[i].n <= 0) return rg_status_make(RG_INVALID_ARGUMENT, "entry %zu has no tokens", i);
    seq_t *s = &e->seqs[b[i].seq];
    int64_t len = s->len + b[i].n;
    if (len > e->max_context)
      return rg_status_make(RG_INVALID_ARGUMENT, "sequence %d would reach %lld tokens, past the context limit of %lld",
                            b[i].seq, (long long)len, (long long)e->max_context);
    size_t blocks = (size_t)((len + (int64_t)e->block_size - 1) / (int64_t)e->block_size);
    if (blocks > s->n_blocks) need += blocks - s->n_blocks;
  }
  if (need > e->n_free)
    return rg_status_make(RG_OUT_OF_MEMORY,
                          "KV cache full: this step needs %zu more blocks of %zu tokens but %zu are free (capacity "
                          "%zu tokens); finish or free sequences, or give the engine more KV memory",
                          need, e->block_size, e->n_free, e->n_blocks * e->block_size);
  for (size_t i = 0; i < n; i++) {
    seq_t *s = &e->seqs[b[i].seq];
    size_t blocks = (size_t)((s->len + b[i].n + (int64_t)e->block_size - 1) / (int64_t)e->block_size);
    if (blocks > s->cap_blocks) {
      size_t cap = blocks * 2;
      int32_t *nb = realloc(s->blocks, cap * sizeof(int32_t));
      if (!nb) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory growing a block table");
      s->blocks = nb;
      s->cap_blocks = cap;
    }
    while (s->n_blocks < blocks) s->blocks[s->n_blocks++] = e->free_blocks[--e->n_free];
  }
  return NULL;
}

static rg_status_t moe_ffn(rg_engine_t *e, const layer_t *L, size_t T) {
  scratch_t *s = &e->s;
  const rg_arch_t *a = e->arch;
  size_t E = (size_t)a->n_experts, k = (size_t)a->n_experts_per_tok, d = (size_t)a->d_model;
  size_t ff = (size_t)a->d_ff_expert;
  RG_RETURN_IF_ERROR(mm(e, s->h, (int64_t)T, &L->router, NULL, s->router));
  RG_RETURN_IF_ERROR(rg_op_moe_route(e->pool, s->router, T, E, k, e->moe_mode, s->idx, s->wts));
  RG_RETURN_IF_ERROR(rg_op_moe_group(s->idx, T, k, E, s->offsets, s->rows));
  for (size_t x = 0; x < E; x++) {
    size_t b = (size_t)s->offsets[x], n = (size_t)s->offsets[x + 1] - b;
    if (!n) continue;
    rg_op_moe_gather(e->pool, s->h, s->rows + b, n, k, d, s->xe);
    RG_RETURN_IF_ERROR(mm(e, s->xe, (int64_t)n, &L->e_gate[x], NULL, s->ge));
    RG_RETURN_IF_ERROR(mm(e, s->xe, (int64_t)n, &L->e_up[x], NULL, s->ue));
    rg_op_swiglu(e->pool, s->ge, s->ue, s->ge, n * ff);
    RG_RETURN_IF_ERROR(mm(e, s->ge, (int64_t)n, &L->e_down[x], NULL, s->ye));
    rg_op_moe_scatter_add(e->pool, s->ye, s->rows + b, n, k, s->wts, d, s->x);
  }
  return NULL;
}

static void add_rows(float *x, const float *t, size_t n) {
  for (size_t i = 0; i < n; i++) x[i] += t[i];
}

static rg_status_t forward(rg_engine_t *e, const rg_batch_entry_t *b, size_t n, float *logits) {
  const rg_arch_t *a = e->arch;
  scratch_t *s = &e->s;
  size_t T = 0, n_logits = 0;
  for (size_t i = 0; i < n; i++) {
    T += (size_t)b[i].n;
    n_logits += b[i].want_logits != 0;
  }
  RG_RETURN_IF_ERROR(scratch_reserve(e, T, n));
  RG_RETURN_IF_ERROR(reserve_blocks(e, b, n));
  size_t t = 0;
  for (size_t i = 0; i < n; i++) {
    seq_t *sq = &e->seqs[b[i].seq];
    s->tables[i].blocks = sq->blocks;
    s->tables[i].n_blocks = sq->n_blocks;
    for (int64_t j = 0; j < b[i].n; j++, t++) {
      s->ids[t] = b[i].tokens[j];
      s->pos[t] = (int32_t)(sq->len + j);
      s->seq_of[t] = (int32_t)i;
      if (b[i].tokens[j] < 0 || b[i].tokens[j] >= a->vocab)
        return rg_status_make(RG_INVALID_ARGUMENT, "token id %d is outside the vocabulary (0..%lld)", b[i].tokens[j],
                              (long long)a->vocab - 1);
    }
  }
  rg_attn_batch_t ab = {T, s->seq_of, s->pos, s->tables, n};
  size_t d = (size_t)a->d_model, hd = (size_t)a->head_dim, nh = (size_t)a->n_heads, nkv = (size_t)a->n_kv_heads;
  float eps = (float)e->hp.rms_norm_eps;
  RG_RETURN_IF_ERROR(rg_op_embed(e->pool, e->embed.data, e->embed.type, (size_t)a->vocab, s->ids, T, d, s->x));
  rg_attn_params_t ap = {.n_heads = nh};
  double kv_elem = e->kv_type == RG_F32 ? 4 : 2;
  for (int64_t l = 0; l < a->n_layers; l++) {
    const layer_t *L = &e->layers[l];
    rg_kv_layer_t kv = rg_kv_cache_layer(e->kv, (size_t)l);
    rg_op_rmsnorm(e->pool, s->x, L->attn_norm, s->h, T, d, eps);
    RG_RETURN_IF_ERROR(mm(e, s->h, (int64_t)T, &L->wq, L->bq, s->q));
    RG_RETURN_IF_ERROR(mm(e, s->h, (int64_t)T, &L->wk, L->bk, s->k));
    RG_RETURN_IF_ERROR(mm(e, s->h, (int64_t)T, &L->wv, L->bv, s->v));
    if (L->q_norm) {
      rg_op_rmsnorm(e->pool, s->q, L->q_norm, s->q, T * nh, hd, eps);
      rg_op_rmsnorm(e->pool, s->k, L->k_norm, s->k, T * nkv, hd, eps);
    }
    rg_op_rope(e->pool, &e->rope, s->q, T, nh, s->pos);
    rg_op_rope(e->pool, &e->rope, s->k, T, nkv, s->pos);
    RG_RETURN_IF_ERROR(rg_op_kv_write(e->pool, &kv, &ab, s->k, s->v));
    RG_RETURN_IF_ERROR(rg_op_attention(e->pool, &kv, &ab, &ap, s->q, s->o));
    for (size_t i = 0; i < T; i++) {
      double ctx = (double)s->pos[i] + 1;
      e->c.kv_bytes += ctx * 2.0 * (double)(nkv * hd) * kv_elem;
      e->c.flops += ctx * 4.0 * (double)(nh * hd);
    }
    RG_RETURN_IF_ERROR(mm(e, s->o, (int64_t)T, &L->wo, NULL, s->t));
    add_rows(s->x, s->t, T * d);
    rg_op_rmsnorm(e->pool, s->x, L->ffn_norm, s->h, T, d, eps);
    if (L->moe) {
      RG_RETURN_IF_ERROR(moe_ffn(e, L, T));
    } else {
      size_t ff = (size_t)a->d_ff;
      RG_RETURN_IF_ERROR(mm(e, s->h, (int64_t)T, &L->w_gate, NULL, s->g));
      RG_RETURN_IF_ERROR(mm(e, s->h, (int64_t)T, &L->w_up, NULL, s->u));
      rg_op_swiglu(e->pool, s->g, s->u, s->g, T * ff);
      RG_RETURN_IF_ERROR(mm(e, s->g, (int64_t)T, &L->w_down, NULL, s->t));
      add_rows(s->x, s->t, T * d);
    }
  }
  // Logits only for the last token of the entries that want them.
  size_t r = 0;
  t = 0;
  for (size_t i = 0; i < n; i++) {
    t += (size_t)b[i].n;
    if (b[i].want_logits) memcpy(s->last + r++ * d, s->x + (t - 1) * d, d * sizeof(float));
  }
  if (n_logits) {
    rg_op_rmsnorm(e->pool, s->last, e->final_norm, s->last, n_logits, d, eps);
    RG_RETURN_IF_ERROR(mm(e, s->last, (int64_t)n_logits, &e->lm_head, NULL, logits));
  }
  for (size_t i = 0; i < n; i++) e->seqs[b[i].seq].len += b[i].n;
  e->c.tokens += (int64_t)T;
  e->c.steps++;
  return NULL;
}

rg_status_t rg_engine_forward(rg_engine_t *e, const rg_batch_entry_t *entries, size_t n, float *logits) {
  if (!n) return NULL;
  double t0 = now();
  rg_status_t st = forward(e, entries, n, logits);
  e->c.seconds += now() - t0;
  return st;
}
