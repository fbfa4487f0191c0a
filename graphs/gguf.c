// graphs/gguf.c — reading and writing GGUF (v2 and v3) files.
//
//   magic "GGUF" | version u32 | tensor_count u64 | kv_count u64
//   kv_count x (key: string, value type u32, value)
//   tensor_count x (name: string, n_dims u32, ne[n_dims] u64 innermost first,
//                   ggml type u32, offset u64 from the data section)
//   padding to general.alignment (default 32) | data section
//
// A string is a u64 length and that many bytes (no NUL); an array is its
// element type u32, a count u64 and the elements. Every length and count is
// checked against the bytes left in the file before anything is allocated,
// so a hostile count costs nothing.
//
// On open, tensors are presented the Hugging Face way (see weights.h): names
// mapped, dims reversed, 3-D expert tensors split into per-expert views, and
// for general.architecture "llama" the attn_q/attn_k rows un-permuted into a
// private copy (rg_weights_qk_permute). rope_freqs.weight, llama.cpp's form of
// llama3 rope scaling, is not listed as a tensor; it reaches the engine
// through rg_weights_hparams().
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graphs/weights.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "ridge reads and writes GGUF's little-endian layout by copying host integers"
#endif

// Defined in weights.c and safetensors.c.
rg_status_t rg__weights_map(rg_weights_t *w, const char *path, const uint8_t **base, uint64_t *size,
                            const char **stored_path);
rg_status_t rg__weights_add(rg_weights_t *w, const rg_tensor_t *t);
void *rg__weights_alloc(rg_weights_t *w, uint64_t size);
rg_status_t rg__weights_set_meta(rg_weights_t *w, const char *key, const char *value);
void rg__weights_set_gguf(rg_weights_t *w, void *g, void (*destroy)(void *));
void *rg__weights_gguf(const rg_weights_t *w);
void rg__weights_default_hparams(const rg_arch_t *a, rg_weights_hparams_t *hp);
rg_status_t rg__check_rope_scaling(const char *file, const rg_weights_hparams_t *hp);
rg_status_t rg__gguf_open(rg_weights_t *w, const char *path);
rg_status_t rg__gguf_arch(const rg_weights_t *w, rg_arch_t **out);
rg_status_t rg__gguf_hparams(const rg_weights_t *w, rg_weights_hparams_t *out);
rg_status_t rg__gguf_vocab(const rg_weights_t *w, const char *const **tokens,
                           const int32_t **token_types, size_t *n_tokens,
                           const char *const **merges, size_t *n_merges, const char **pre,
                           int32_t *bos, int32_t *eos);
rg_status_t rg__check_write_tensor(const char *path, const rg_tensor_t *t, uint64_t *nbytes);
rg_status_t rg__open_partial(const char *path, FILE **out, char **tmp_path);
rg_status_t rg__commit_file(rg_status_t s, FILE *f, char *tmp, const char *path);
rg_status_t rg__write_bytes(FILE *f, const char *path, const void *p, uint64_t n);
rg_status_t rg__check_unique(const char *path, const char **names, size_t n);

// ----- value types ---------------------------------------------------------------------

enum {
  GT_U8,
  GT_I8,
  GT_U16,
  GT_I16,
  GT_U32,
  GT_I32,
  GT_F32,
  GT_BOOL,
  GT_STR,
  GT_ARR,
  GT_U64,
  GT_I64,
  GT_F64,
  GT_COUNT
};
static const int gt_size[GT_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
static const char *const gt_name[GT_COUNT] = {"u8",   "i8",     "u16",   "i16", "u32", "i32", "f32",
                                              "bool", "string", "array", "u64", "i64", "f64"};

// ggml type ids, for messages about types ridge does not read.
static const char *ggml_type_name(uint32_t t) {
  static const char *const names[] = {
      "F32",     "F16",    "Q4_0",    "Q4_1",  "Q4_2",   "Q4_3",  "Q5_0",  "Q5_1",
      "Q8_0",    "Q8_1",   "Q2_K",    "Q3_K",  "Q4_K",   "Q5_K",  "Q6_K",  "Q8_K",
      "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS",
      "I8",      "I16",    "I32",     "I64",   "F64",    "IQ1_M", "BF16"};
  return t < sizeof(names) / sizeof(names[0]) ? names[t] : "unknown";
}

static int from_ggml(uint32_t id, rg_dtype_t *out) {
  return rg_dtype_from_ggml(id, out) == 0;
}

static int to_ggml(rg_dtype_t t) {
  return (int)rg_dtype_ggml_id(t);
}

// ----- the parsed file ------------------------------------------------------------------

typedef struct {
  char *key;
  uint32_t type, arr_type;
  uint64_t n;        // array: element count
  const uint8_t *p;  // scalar: its bytes; array: the first element
  char *str;         // string scalar, copied with a NUL
} gkv_t;

typedef struct {
  const char *file;
  gkv_t *kv;
  size_t n_kv;
  char arch[64];
  char **tokens, **merges;
  char *token_arena, *merge_arena;
  size_t n_tokens, n_merges;
  int32_t *token_types;
  const float *rope_freqs;
  int64_t n_rope_freqs;
} gguf_t;

static void gguf_destroy(void *p) {
  gguf_t *g = p;
  if (!g) return;
  for (size_t i = 0; i < g->n_kv; i++) {
    free(g->kv[i].key);
    free(g->kv[i].str);
  }
  free(g->kv);
  free(g->tokens);
  free(g->merges);
  free(g->token_arena);
  free(g->merge_arena);
  free(g->token_types);
  free(g);
}

typedef struct {
  const uint8_t *p, *end;
  const char *file;
} cur_t;

static uint64_t left(const cur_t *c) {
  return (uint64_t)(c->end - c->p);
}

static rg_status_t past_end(const cur_t *c, const char *what) {
  return rg_status_make(RG_PARSE, "%s: %s runs past the end of the file", c->file, what);
}

static rg_status_t rd_u32(cur_t *c, const char *what, uint32_t *v) {
  if (left(c) < 4) return past_end(c, what);
  memcpy(v, c->p, 4);
  c->p += 4;
  return NULL;
}

static rg_status_t rd_u64(cur_t *c, const char *what, uint64_t *v) {
  if (left(c) < 8) return past_end(c, what);
  memcpy(v, c->p, 8);
  c->p += 8;
  return NULL;
}

static rg_status_t rd_str(cur_t *c, const char *what, const uint8_t **s, uint64_t *len) {
  RG_RETURN_IF_ERROR(rd_u64(c, what, len));
  if (*len > left(c))
    return rg_status_make(RG_PARSE, "%s: %s: string length %llu runs past the end of the file",
                          c->file, what, (unsigned long long)*len);
  *s = c->p;
  c->p += *len;
  return NULL;
}

// Skips one value of type t, checking every length first.
static rg_status_t skip_value(cur_t *c, uint32_t t, int depth, const char *what) {
  if (t >= GT_COUNT)
    return rg_status_make(RG_PARSE, "%s: %s has unknown value type %u", c->file, what, t);
  if (gt_size[t]) {
    if (left(c) < (uint64_t)gt_size[t]) return past_end(c, what);
    c->p += gt_size[t];
    return NULL;
  }
  if (t == GT_STR) {
    const uint8_t *s = NULL;
    uint64_t len = 0;
    return rd_str(c, what, &s, &len);
  }
  uint32_t et = 0;
  uint64_t n = 0;
  RG_RETURN_IF_ERROR(rd_u32(c, what, &et));
  RG_RETURN_IF_ERROR(rd_u64(c, what, &n));
  if (et >= GT_COUNT)
    return rg_status_make(RG_PARSE, "%s: %s is an array of unknown type %u", c->file, what, et);
  if (et == GT_ARR && depth >= 2)
    return rg_status_make(RG_PARSE, "%s: %s nests arrays more than 3 deep", c->file, what);
  uint64_t min = gt_size[et] ? (uint64_t)gt_size[et] : et == GT_STR ? 8 : 12;
  if (n > left(c) / min)
    return rg_status_make(RG_PARSE,
                          "%s: %s: an array of %llu %s elements runs past the end of the file",
                          c->file, what, (unsigned long long)n, gt_name[et]);
  if (gt_size[et]) {
    c->p += n * (uint64_t)gt_size[et];
    return NULL;
  }
  for (uint64_t i = 0; i < n; i++) RG_RETURN_IF_ERROR(skip_value(c, et, depth + 1, what));
  return NULL;
}

static const gkv_t *kv_find(const gguf_t *g, const char *key) {
  for (size_t i = 0; i < g->n_kv; i++)
    if (!strcmp(g->kv[i].key, key)) return &g->kv[i];
  return NULL;
}

// An integer KV of any integer type. *found = 0 leaves *v untouched.
static rg_status_t kv_uint(const gguf_t *g, const char *key, uint64_t *v, int *found) {
  const gkv_t *kv = kv_find(g, key);
  if (found) *found = kv != NULL;
  if (!kv) return NULL;
  uint8_t b[8] = {0};
  switch (kv->type) {
    case GT_U8:
    case GT_U16:
    case GT_U32:
    case GT_U64:
    case GT_BOOL:
      memcpy(b, kv->p, (size_t)gt_size[kv->type]);
      memcpy(v, b, 8);
      return NULL;
    case GT_I8:
    case GT_I16:
    case GT_I32:
    case GT_I64: {
      int64_t s = 0;
      if (kv->type == GT_I8) s = (int8_t)kv->p[0];
      if (kv->type == GT_I16) {
        int16_t x;
        memcpy(&x, kv->p, 2);
        s = x;
      }
      if (kv->type == GT_I32) {
        int32_t x;
        memcpy(&x, kv->p, 4);
        s = x;
      }
      if (kv->type == GT_I64) memcpy(&s, kv->p, 8);
      if (s < 0)
        return rg_status_make(RG_PARSE, "%s: metadata key '%s' = %lld must not be negative",
                              g->file, key, (long long)s);
      *v = (uint64_t)s;
      return NULL;
    }
    default:
      return rg_status_make(RG_PARSE, "%s: metadata key '%s' is a%s %s; expected an integer",
                            g->file, key, kv->type == GT_ARR || kv->type == GT_I8 ? "n" : "",
                            gt_name[kv->type]);
  }
}

static rg_status_t kv_float(const gguf_t *g, const char *key, double *v, int *found) {
  const gkv_t *kv = kv_find(g, key);
  if (found) *found = kv != NULL;
  if (!kv) return NULL;
  if (kv->type == GT_F32) {
    float f;
    memcpy(&f, kv->p, 4);
    *v = f;
  } else if (kv->type == GT_F64) {
    memcpy(v, kv->p, 8);
  } else {
    uint64_t u = 0;
    RG_RETURN_IF_ERROR(kv_uint(g, key, &u, NULL));
    *v = (double)u;
  }
  if (!isfinite(*v))
    return rg_status_make(RG_PARSE, "%s: metadata key '%s' is not a finite number", g->file, key);
  return NULL;
}

static rg_status_t kv_string(const gguf_t *g, const char *key, const char **v) {
  const gkv_t *kv = kv_find(g, key);
  if (!kv) return NULL;
  if (kv->type != GT_STR)
    return rg_status_make(RG_PARSE, "%s: metadata key '%s' is a%s %s; expected a string", g->file,
                          key, kv->type == GT_ARR || kv->type == GT_I8 ? "n" : "",
                          gt_name[kv->type]);
  *v = kv->str;
  return NULL;
}

// "<arch>.<suffix>"
static const char *akey(const gguf_t *g, const char *suffix, char *buf, size_t len) {
  snprintf(buf, len, "%s.%s", g->arch, suffix);
  return buf;
}

static rg_status_t arch_uint(const gguf_t *g, const char *suffix, int required, uint64_t *v) {
  char key[128];
  int found = 0;
  RG_RETURN_IF_ERROR(kv_uint(g, akey(g, suffix, key, sizeof(key)), v, &found));
  if (!found && required)
    return rg_status_make(RG_PARSE, "%s: metadata key '%s' is missing", g->file, key);
  return NULL;
}

static int cmp_key(const void *x, const void *y) {
  return strcmp((*(const gkv_t *const *)x)->key, (*(const gkv_t *const *)y)->key);
}

// Copies a string array into NUL-terminated strings in one arena.
static rg_status_t string_array(const gguf_t *g, const gkv_t *kv, char ***out, char **arena,
                                size_t *n_out) {
  if (kv->type != GT_ARR || kv->arr_type != GT_STR)
    return rg_status_make(RG_PARSE, "%s: metadata key '%s' is not an array of strings", g->file,
                          kv->key);
  // The array was walked once when the header was read, so every length is
  // known to lie inside the file.
  uint64_t total = 0;
  const uint8_t *p = kv->p;
  for (uint64_t i = 0; i < kv->n; i++) {
    uint64_t len;
    memcpy(&len, p, 8);
    total += len + 1;
    p += 8 + len;
  }
  char **v = malloc((size_t)(kv->n ? kv->n : 1) * sizeof(*v));
  char *a = malloc((size_t)(total ? total : 1));
  if (!v || !a) {
    free(v);
    free(a);
    return rg_status_make(RG_OUT_OF_MEMORY, "%s: out of memory reading '%s'", g->file, kv->key);
  }
  p = kv->p;
  char *q = a;
  for (uint64_t i = 0; i < kv->n; i++) {
    uint64_t len;
    memcpy(&len, p, 8);
    memcpy(q, p + 8, (size_t)len);
    q[len] = 0;
    v[i] = q;
    q += len + 1;
    p += 8 + len;
  }
  *out = v;
  *arena = a;
  *n_out = (size_t)kv->n;
  return NULL;
}

static rg_status_t read_vocab(gguf_t *g) {
  const gkv_t *tok = kv_find(g, "tokenizer.ggml.tokens");
  if (!tok) return NULL;
  RG_RETURN_IF_ERROR(string_array(g, tok, &g->tokens, &g->token_arena, &g->n_tokens));
  const gkv_t *tt = kv_find(g, "tokenizer.ggml.token_type");
  if (tt) {
    if (tt->type != GT_ARR || (tt->arr_type != GT_I32 && tt->arr_type != GT_U32))
      return rg_status_make(RG_PARSE, "%s: metadata key '%s' is not an array of 32-bit integers",
                            g->file, tt->key);
    if (tt->n != g->n_tokens)
      return rg_status_make(RG_PARSE,
                            "%s: tokenizer.ggml.token_type has %llu entries for %zu tokens",
                            g->file, (unsigned long long)tt->n, g->n_tokens);
    g->token_types = malloc((g->n_tokens ? g->n_tokens : 1) * sizeof(int32_t));
    if (!g->token_types)
      return rg_status_make(RG_OUT_OF_MEMORY, "%s: out of memory reading token types", g->file);
    memcpy(g->token_types, tt->p, g->n_tokens * sizeof(int32_t));
  }
  const gkv_t *mg = kv_find(g, "tokenizer.ggml.merges");
  if (mg) RG_RETURN_IF_ERROR(string_array(g, mg, &g->merges, &g->merge_arena, &g->n_merges));
  const char *pre = NULL;
  RG_RETURN_IF_ERROR(kv_string(g, "tokenizer.ggml.pre", &pre));
  static const char *const ids[] = {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"};
  for (int i = 0; i < 2; i++) {
    uint64_t id = 0;
    int found = 0;
    RG_RETURN_IF_ERROR(kv_uint(g, ids[i], &id, &found));
    if (found && id >= g->n_tokens)
      return rg_status_make(RG_PARSE, "%s: %s = %llu is not a token (the list holds %zu)", g->file,
                            ids[i], (unsigned long long)id, g->n_tokens);
  }
  return NULL;
}

// ----- tensor names ------------------------------------------------------------------------

typedef struct {
  const char *gguf, *hf;
} name_pair_t;

static const name_pair_t global_names[] = {
    {"token_embd", "model.embed_tokens"},
    {"output_norm", "model.norm"},
    {"output", "lm_head"},
};

static const name_pair_t layer_names[] = {
    {"attn_norm", "input_layernorm"},    {"attn_q", "self_attn.q_proj"},
    {"attn_k", "self_attn.k_proj"},      {"attn_v", "self_attn.v_proj"},
    {"attn_output", "self_attn.o_proj"}, {"attn_q_norm", "self_attn.q_norm"},
    {"attn_k_norm", "self_attn.k_norm"}, {"ffn_norm", "post_attention_layernorm"},
    {"ffn_gate", "mlp.gate_proj"},       {"ffn_up", "mlp.up_proj"},
    {"ffn_down", "mlp.down_proj"},
};
#define N_LAYER_NAMES (sizeof(layer_names) / sizeof(layer_names[0]))

// Experts: gate, up, down.
static const char *const exps_gguf[3] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
static const char *const expert_gguf[3] = {"ffn_gate", "ffn_up", "ffn_down"};
static const char *const mixtral_expert[3] = {"w1", "w3", "w2"};
static const char *const qwen_expert[3] = {"gate_proj", "up_proj", "down_proj"};

// What a GGUF general.architecture implies, through the family table: the
// family the name maps to (llama for "llama", which llama, mistral and
// mixtral share) and its traits.
static int gguf_arch_has(const char *arch, unsigned trait) {
  rg_family_t f;
  return !rg_family_from_gguf(arch, &f) && rg_family_has(f, trait);
}

// Mixtral (GGUF arch "llama" with experts) names its MoE block
// block_sparse_moe with w1/w3/w2; Qwen3-MoE names it mlp with *_proj. The
// llama row's rg_family_has(.., RG_FAM_GGUF_QK_PERM) marks the "llama" writers.
static int mixtral_style(const char *arch) {
  return gguf_arch_has(arch, RG_FAM_GGUF_QK_PERM);
}

static void expert_hf_name(char *buf, size_t len, const char *arch, long layer, long e, int which,
                           const char *suffix) {
  if (mixtral_style(arch))
    snprintf(buf, len, "model.layers.%ld.block_sparse_moe.experts.%ld.%s.%s", layer, e,
             mixtral_expert[which], suffix);
  else
    snprintf(buf, len, "model.layers.%ld.mlp.experts.%ld.%s.%s", layer, e, qwen_expert[which],
             suffix);
}

// Reads a decimal number of at most 6 digits at *s, advancing past it.
static int rd_index(const char **s, long *out) {
  const char *p = *s;
  long v = 0;
  int n = 0;
  while (*p >= '0' && *p <= '9' && n < 7) v = v * 10 + (*p++ - '0'), n++;
  if (n == 0 || n > 6) return 0;
  *s = p;
  *out = v;
  return 1;
}

typedef struct {
  char hf[RG_TENSOR_NAME_MAX];  // for exps: unused
  int exps;                     // 3-D expert tensor: which (0 gate, 1 up, 2 down) + 1
  long layer;
  int qk;  // attn_q: 1, attn_k: 2 (rows permuted for "llama")
} gname_t;

// Maps a GGUF name to its Hugging Face name; names ridge does not know are
// kept as they are.
static void map_name(const char *arch, const char *name, gname_t *m) {
  memset(m, 0, sizeof(*m));
  snprintf(m->hf, sizeof(m->hf), "%s", name);
  const char *dot = strrchr(name, '.');
  if (!dot || (strcmp(dot, ".weight") && strcmp(dot, ".bias"))) return;
  const char *suffix = dot + 1;
  size_t base_len = (size_t)(dot - name);
  for (size_t i = 0; i < sizeof(global_names) / sizeof(global_names[0]); i++) {
    if (strlen(global_names[i].gguf) == base_len &&
        !strncmp(name, global_names[i].gguf, base_len)) {
      snprintf(m->hf, sizeof(m->hf), "%s.%s", global_names[i].hf, suffix);
      return;
    }
  }
  if (strncmp(name, "blk.", 4)) return;
  const char *p = name + 4;
  long layer;
  if (!rd_index(&p, &layer) || *p != '.') return;
  p++;
  size_t len = (size_t)(dot - p);
  char part[64];
  if (len >= sizeof(part)) return;
  memcpy(part, p, len);
  part[len] = 0;
  for (size_t i = 0; i < N_LAYER_NAMES; i++) {
    if (!strcmp(part, layer_names[i].gguf)) {
      snprintf(m->hf, sizeof(m->hf), "model.layers.%ld.%s.%s", layer, layer_names[i].hf, suffix);
      if (!strcmp(part, "attn_q")) m->qk = 1;
      if (!strcmp(part, "attn_k")) m->qk = 2;
      return;
    }
  }
  if (!strcmp(part, "ffn_gate_inp")) {
    snprintf(m->hf, sizeof(m->hf), "model.layers.%ld.%s.gate.%s", layer,
             mixtral_style(arch) ? "block_sparse_moe" : "mlp", suffix);
    return;
  }
  for (int k = 0; k < 3; k++) {
    if (!strcmp(part, exps_gguf[k])) {
      m->exps = k + 1;
      m->layer = layer;
      return;
    }
    // Older Mixtral files keep one tensor per expert: blk.N.ffn_gate.E.
    size_t el = strlen(expert_gguf[k]);
    if (!strncmp(part, expert_gguf[k], el) && part[el] == '.') {
      const char *q = part + el + 1;
      long e;
      if (rd_index(&q, &e) && !*q) {
        expert_hf_name(m->hf, sizeof(m->hf), arch, layer, e, k, suffix);
        return;
      }
    }
  }
}

// ----- opening ---------------------------------------------------------------------------

typedef struct {
  char name[RG_TENSOR_NAME_MAX];
  rg_dtype_t type;
  int n_dims;
  uint64_t ne[RG_TENSOR_MAX_DIMS];
  uint64_t offset, nbytes;
} ginfo_t;

typedef struct {
  uint64_t begin, end;
  size_t i;
} gspan_t;

static int cmp_gspan(const void *x, const void *y) {
  const gspan_t *a = x, *b = y;
  if (a->begin != b->begin) return a->begin < b->begin ? -1 : 1;
  return a->end < b->end ? -1 : a->end > b->end;
}

static rg_status_t read_kvs(gguf_t *g, cur_t *c, uint64_t n_kv) {
  // A KV takes at least 13 bytes (empty key, type, a one-byte value).
  if (n_kv > left(c) / 13)
    return rg_status_make(RG_PARSE, "%s: kv_count %llu is more than the file can hold", g->file,
                          (unsigned long long)n_kv);
  g->kv = calloc(n_kv ? (size_t)n_kv : 1, sizeof(*g->kv));
  if (!g->kv) return rg_status_make(RG_OUT_OF_MEMORY, "%s: out of memory", g->file);
  for (uint64_t i = 0; i < n_kv; i++) {
    char what[128];
    snprintf(what, sizeof(what), "metadata key #%llu", (unsigned long long)i);
    const uint8_t *ks = NULL;
    uint64_t klen = 0;
    RG_RETURN_IF_ERROR(rd_str(c, what, &ks, &klen));
    if (klen == 0 || klen > 65535 || memchr(ks, 0, (size_t)klen))
      return rg_status_make(RG_PARSE, "%s: %s is empty, longer than 65535 bytes or holds a NUL",
                            g->file, what);
    gkv_t *kv = &g->kv[g->n_kv++];
    if (!(kv->key = strndup((const char *)ks, (size_t)klen)))
      return rg_status_make(RG_OUT_OF_MEMORY, "%s: out of memory", g->file);
    snprintf(what, sizeof(what), "metadata key '%.80s'", kv->key);
    RG_RETURN_IF_ERROR(rd_u32(c, what, &kv->type));
    const uint8_t *start = c->p;
    if (kv->type == GT_ARR) {
      // Peek the element type and count; skip_value() checks the rest.
      cur_t peek = *c;
      RG_RETURN_IF_ERROR(rd_u32(&peek, what, &kv->arr_type));
      RG_RETURN_IF_ERROR(rd_u64(&peek, what, &kv->n));
      kv->p = peek.p;
    } else {
      kv->p = start;
    }
    RG_RETURN_IF_ERROR(skip_value(c, kv->type, 0, what));
    if (kv->type == GT_STR) {
      uint64_t len;
      memcpy(&len, start, 8);
      if (!(kv->str = strndup((const char *)start + 8, (size_t)len)))
        return rg_status_make(RG_OUT_OF_MEMORY, "%s: out of memory", g->file);
    }
  }
  // Keys must be unique.
  const gkv_t **sorted = malloc((g->n_kv ? g->n_kv : 1) * sizeof(*sorted));
  if (!sorted) return rg_status_make(RG_OUT_OF_MEMORY, "%s: out of memory", g->file);
  for (size_t i = 0; i < g->n_kv; i++) sorted[i] = &g->kv[i];
  qsort(sorted, g->n_kv, sizeof(*sorted), cmp_key);
  rg_status_t s = NULL;
  for (size_t i = 1; i < g->n_kv && !s; i++)
    if (!strcmp(sorted[i]->key, sorted[i - 1]->key))
      s = rg_status_make(RG_PARSE, "%s: metadata key '%.80s' appears twice", g->file,
                         sorted[i]->key);
  free(sorted);
  return s;
}

static rg_status_t read_infos(gguf_t *g, cur_t *c, uint64_t n_t, ginfo_t *infos) {
  for (uint64_t i = 0; i < n_t; i++) {
    char what[200];
    snprintf(what, sizeof(what), "tensor info #%llu", (unsigned long long)i);
    ginfo_t *t = &infos[i];
    const uint8_t *ns = NULL;
    uint64_t nlen = 0;
    RG_RETURN_IF_ERROR(rd_str(c, what, &ns, &nlen));
    if (nlen == 0 || nlen >= RG_TENSOR_NAME_MAX || memchr(ns, 0, (size_t)nlen))
      return rg_status_make(RG_PARSE,
                            "%s: %s: the name is empty, holds a NUL or is longer than %d bytes",
                            g->file, what, RG_TENSOR_NAME_MAX - 1);
    memcpy(t->name, ns, (size_t)nlen);
    t->name[nlen] = 0;
    snprintf(what, sizeof(what), "tensor '%s'", t->name);
    uint32_t n_dims = 0, type = 0;
    RG_RETURN_IF_ERROR(rd_u32(c, what, &n_dims));
    if (n_dims > RG_TENSOR_MAX_DIMS)
      return rg_status_make(RG_PARSE, "%s: tensor '%s': %u dims; ridge reads at most %d", g->file,
                            t->name, n_dims, RG_TENSOR_MAX_DIMS);
    t->n_dims = (int)n_dims;
    int64_t elems = 1;
    int overflow = 0;
    for (uint32_t d = 0; d < n_dims; d++) {
      RG_RETURN_IF_ERROR(rd_u64(c, what, &t->ne[d]));
      if (t->ne[d] > (uint64_t)INT64_MAX) overflow = 1;
      overflow |= __builtin_mul_overflow(elems, (int64_t)t->ne[d], &elems);
    }
    RG_RETURN_IF_ERROR(rd_u32(c, what, &type));
    RG_RETURN_IF_ERROR(rd_u64(c, what, &t->offset));
    if (!from_ggml(type, &t->type))
      return rg_status_make(RG_UNIMPLEMENTED,
                            "%s: tensor '%s': ggml type %u (%s) is not supported; ridge reads "
                            "F32, F16, BF16, Q8_0, Q4_K, Q6_K, F64, I8, I16, I32 and I64",
                            g->file, t->name, type, ggml_type_name(type));
    if (overflow)
      return rg_status_make(RG_PARSE,
                            "%s: tensor '%s': the dims hold more elements than fit in 64 bits",
                            g->file, t->name);
    // Block types (Q8_0, Q4_K, Q6_K): rows must be whole blocks.
    const uint64_t be = (uint64_t)rg_dtype_block_elems(t->type);
    if (be > 1 && n_dims > 0 && t->ne[0] % be)
      return rg_status_make(
          RG_PARSE, "%s: tensor '%s': %s rows of %llu elements are not whole blocks of %llu",
          g->file, t->name, ggml_type_name(type), (unsigned long long)t->ne[0],
          (unsigned long long)be);
    int ok = 0;
    t->nbytes = rg_dtype_nbytes(t->type, elems, &ok);
    if (!ok && be > 1 && elems % (int64_t)be)
      return rg_status_make(
          RG_PARSE, "%s: tensor '%s': %lld %s elements are not whole blocks of %llu", g->file,
          t->name, (long long)elems, ggml_type_name(type), (unsigned long long)be);
    if (!ok)
      return rg_status_make(RG_PARSE,
                            "%s: tensor '%s': the dims hold more bytes than fit in 64 bits",
                            g->file, t->name);
  }
  return NULL;
}

// Adds one HF view of a GGUF tensor: shape (outermost first), data, size;
// copies data that is not aligned to its element size.
static rg_status_t add_view(rg_weights_t *w, const gguf_t *g, const char *name,
                            rg_dtype_t type, int n_dims, const int64_t *shape,
                            const uint8_t *data, uint64_t nbytes, int qk_groups) {
  rg_tensor_t t;
  memset(&t, 0, sizeof(t));
  if (strlen(name) >= sizeof(t.name))
    return rg_status_make(RG_PARSE, "%s: tensor '%s': the name is too long", g->file, name);
  snprintf(t.name, sizeof(t.name), "%s", name);
  t.type = type;
  t.n_dims = n_dims;
  for (int i = 0; i < n_dims; i++) t.shape[i] = shape[i];
  t.data = data;
  t.nbytes = nbytes;
  t.file = g->file;
  uint64_t align = (uint64_t)rg_dtype_block_bytes(type);
  if (rg_dtype_block_elems(type) > 1) align = 2;  // blocks hold f16 scales, nothing wider
  if (qk_groups > 0 && n_dims >= 1 && shape[0] > 0 && nbytes > 0) {
    if (nbytes % (uint64_t)shape[0])
      return rg_status_make(RG_PARSE,
                            "%s: tensor '%s': %llu bytes do not split into its %lld rows", g->file,
                            name, (unsigned long long)nbytes, (long long)shape[0]);
    void *copy = rg__weights_alloc(w, nbytes);
    if (!copy)
      return rg_status_make(RG_OUT_OF_MEMORY, "%s: tensor '%s': out of memory", g->file, name);
    rg_status_t s =
        rg_weights_qk_permute(copy, data, shape[0], nbytes / (uint64_t)shape[0], qk_groups, 1);
    if (s) return rg_status_wrap(s, "%s: tensor '%s'", g->file, name);
    t.data = copy;
  } else if (nbytes && (uintptr_t)data % align) {
    void *copy = rg__weights_alloc(w, nbytes);
    if (!copy)
      return rg_status_make(RG_OUT_OF_MEMORY, "%s: tensor '%s': out of memory", g->file, name);
    memcpy(copy, data, nbytes);
    t.data = copy;
  }
  return rg__weights_add(w, &t);
}

// Head counts for the Q/K permutation of "llama" files.
static rg_status_t qk_groups(const gguf_t *g, const char *tensor, int qk, int64_t *out) {
  uint64_t heads = 0, kv = 0;
  int found = 0;
  char key[128];
  RG_RETURN_IF_ERROR(kv_uint(g, akey(g, "attention.head_count", key, sizeof(key)), &heads, &found));
  if (!found)
    return rg_status_make(RG_PARSE,
                          "%s: tensor '%s': metadata key '%s' is missing, so its rows cannot be "
                          "un-permuted",
                          g->file, tensor, key);
  kv = heads;
  RG_RETURN_IF_ERROR(arch_uint(g, "attention.head_count_kv", 0, &kv));
  uint64_t n = qk == 1 ? heads : kv;
  if (n == 0 || n > (1u << 16))
    return rg_status_make(RG_PARSE,
                          "%s: tensor '%s': %s.attention.head_count%s = %llu is out of range",
                          g->file, tensor, g->arch, qk == 1 ? "" : "_kv", (unsigned long long)n);
  *out = (int64_t)n;
  return NULL;
}

static rg_status_t add_tensors(rg_weights_t *w, gguf_t *g, const ginfo_t *infos, uint64_t n_t,
                               const uint8_t *data) {
  int permute = gguf_arch_has(g->arch, RG_FAM_GGUF_QK_PERM);
  for (uint64_t i = 0; i < n_t; i++) {
    const ginfo_t *t = &infos[i];
    const uint8_t *p = data + t->offset;
    int64_t shape[RG_TENSOR_MAX_DIMS] = {0};
    for (int d = 0; d < t->n_dims; d++) shape[d] = (int64_t)t->ne[t->n_dims - 1 - d];
    if (!strcmp(t->name, "rope_freqs.weight")) {
      if (g->rope_freqs)
        return rg_status_make(RG_PARSE, "%s: tensor 'rope_freqs.weight' appears twice", g->file);
      if (t->type != RG_F32 || t->n_dims != 1)
        return rg_status_make(RG_PARSE,
                              "%s: tensor 'rope_freqs.weight': expected 1-D F32, got %d-D %s",
                              g->file, t->n_dims, rg_dtype_name(t->type));
      if ((uintptr_t)p % 4) {
        void *copy = rg__weights_alloc(w, t->nbytes);
        if (!copy) return rg_status_make(RG_OUT_OF_MEMORY, "%s: out of memory", g->file);
        memcpy(copy, p, t->nbytes);
        p = copy;
      }
      g->rope_freqs = (const float *)(const void *)p;
      g->n_rope_freqs = shape[0];
      continue;
    }
    gname_t m;
    map_name(g->arch, t->name, &m);
    if (m.exps) {
      if (t->n_dims != 3)
        return rg_status_make(RG_PARSE,
                              "%s: tensor '%s': expected 3 dims (experts, rows, cols), got %d",
                              g->file, t->name, t->n_dims);
      int64_t n_exp = shape[0];
      if (n_exp > (1 << 16))
        return rg_status_make(RG_PARSE, "%s: tensor '%s': %lld experts; ridge reads at most 65536",
                              g->file, t->name, (long long)n_exp);
      uint64_t slice = n_exp ? t->nbytes / (uint64_t)n_exp : 0;
      const char *suffix = strrchr(t->name, '.') + 1;
      for (int64_t e = 0; e < n_exp; e++) {
        char name[RG_TENSOR_NAME_MAX];
        expert_hf_name(name, sizeof(name), g->arch, m.layer, (long)e, m.exps - 1, suffix);
        RG_RETURN_IF_ERROR(
            add_view(w, g, name, t->type, 2, shape + 1, p + (uint64_t)e * slice, slice, 0));
      }
      continue;
    }
    int64_t groups = 0;
    if (permute && m.qk) RG_RETURN_IF_ERROR(qk_groups(g, t->name, m.qk, &groups));
    RG_RETURN_IF_ERROR(add_view(w, g, m.hf, t->type, t->n_dims, shape, p, t->nbytes, (int)groups));
  }
  return NULL;
}

rg_status_t rg__gguf_open(rg_weights_t *w, const char *path) {
  const uint8_t *base = NULL;
  uint64_t size = 0;
  const char *file = NULL;
  RG_RETURN_IF_ERROR(rg__weights_map(w, path, &base, &size, &file));
  gguf_t *g = calloc(1, sizeof(*g));
  if (!g) return rg_status_make(RG_OUT_OF_MEMORY, "%s: out of memory", file);
  g->file = file;
  rg__weights_set_gguf(w, g, gguf_destroy);
  cur_t c = {base, base + size, file};
  if (size < 4 || memcmp(base, "GGUF", 4))
    return rg_status_make(RG_PARSE, "%s: not a GGUF file (bad magic; expected \"GGUF\")", file);
  c.p += 4;
  uint32_t version = 0;
  uint64_t n_t = 0, n_kv = 0;
  RG_RETURN_IF_ERROR(rd_u32(&c, "the header", &version));
  if (version != 2 && version != 3)
    return rg_status_make(RG_UNIMPLEMENTED, "%s: GGUF version %u; ridge reads versions 2 and 3",
                          file, version);
  RG_RETURN_IF_ERROR(rd_u64(&c, "the header", &n_t));
  RG_RETURN_IF_ERROR(rd_u64(&c, "the header", &n_kv));
  RG_RETURN_IF_ERROR(read_kvs(g, &c, n_kv));

  const char *arch = NULL;
  RG_RETURN_IF_ERROR(kv_string(g, "general.architecture", &arch));
  if (!arch)
    return rg_status_make(RG_PARSE, "%s: metadata key 'general.architecture' is missing", file);
  if (strlen(arch) >= sizeof(g->arch) || !*arch)
    return rg_status_make(RG_PARSE, "%s: general.architecture '%.40s' is empty or too long", file,
                          arch);
  snprintf(g->arch, sizeof(g->arch), "%s", arch);
  for (size_t i = 0; i < g->n_kv; i++)
    if (g->kv[i].type == GT_STR)
      RG_RETURN_IF_ERROR(rg__weights_set_meta(w, g->kv[i].key, g->kv[i].str));
  uint64_t alignment = 32;
  RG_RETURN_IF_ERROR(kv_uint(g, "general.alignment", &alignment, NULL));
  if (alignment == 0 || alignment > (1u << 20) || (alignment & (alignment - 1)))
    return rg_status_make(RG_PARSE,
                          "%s: general.alignment = %llu is not a power of two up to 1 MiB", file,
                          (unsigned long long)alignment);
  RG_RETURN_IF_ERROR(read_vocab(g));

  // A tensor info takes at least 24 bytes (empty name, n_dims, type, offset).
  if (n_t > left(&c) / 24)
    return rg_status_make(RG_PARSE, "%s: tensor_count %llu is more than the file can hold", file,
                          (unsigned long long)n_t);
  ginfo_t *infos = calloc(n_t ? (size_t)n_t : 1, sizeof(*infos));
  gspan_t *spans = calloc(n_t ? (size_t)n_t : 1, sizeof(*spans));
  rg_status_t s = NULL;
  if (!infos || !spans) s = rg_status_make(RG_OUT_OF_MEMORY, "%s: out of memory", file);
  if (!s) s = read_infos(g, &c, n_t, infos);
  uint64_t header = (uint64_t)(c.p - base);
  uint64_t data_start = (header + alignment - 1) / alignment * alignment;
  uint64_t data_size = size > data_start ? size - data_start : 0;
  for (uint64_t i = 0; i < n_t && !s; i++) {
    const ginfo_t *t = &infos[i];
    if (t->offset % alignment)
      s = rg_status_make(
          RG_PARSE, "%s: tensor '%s': offset %llu is not a multiple of general.alignment = %llu",
          file, t->name, (unsigned long long)t->offset, (unsigned long long)alignment);
    else if (t->offset > data_size || t->nbytes > data_size - t->offset)
      s = rg_status_make(RG_PARSE,
                         "%s: tensor '%s': %llu bytes at offset %llu run past the end of the file "
                         "(the data section holds %llu)",
                         file, t->name, (unsigned long long)t->nbytes,
                         (unsigned long long)t->offset, (unsigned long long)data_size);
    spans[i] = (gspan_t){t->offset, t->offset + t->nbytes, (size_t)i};
  }
  if (!s) {
    qsort(spans, (size_t)n_t, sizeof(*spans), cmp_gspan);
    const gspan_t *reach = NULL;
    for (uint64_t i = 0; i < n_t && !s; i++) {
      if (spans[i].end == spans[i].begin) continue;
      if (reach && spans[i].begin < reach->end)
        s = rg_status_make(RG_PARSE, "%s: tensor '%s': its data overlaps tensor '%s'", file,
                           infos[spans[i].i].name, infos[reach->i].name);
      if (!reach || spans[i].end > reach->end) reach = &spans[i];
    }
  }
  if (!s) s = add_tensors(w, g, infos, n_t, base + (data_start < size ? data_start : size));
  free(spans);
  free(infos);
  return s;
}

// ----- architecture, hyperparameters, vocab ------------------------------------------------

static const gguf_t *gguf_of(const rg_weights_t *w) {
  return rg__weights_gguf(w);
}

static int64_t clamp_i64(uint64_t v) {
  return v > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)v;
}

rg_status_t rg__gguf_arch(const rg_weights_t *w, rg_arch_t **out) {
  const gguf_t *g = gguf_of(w);
  rg_family_t fam;
  uint64_t experts = 0;
  RG_RETURN_IF_ERROR(arch_uint(g, "expert_count", 0, &experts));
  if (rg_family_from_gguf(g->arch, &fam)) {
    char list[256];
    return rg_status_make(RG_UNIMPLEMENTED,
                          "%s: general.architecture '%s' is not supported; ridge reads the GGUF of %s", g->file,
                          g->arch, rg_family_list(RG_FAM_RUNS, list, sizeof list));
  }
  // llama, mistral and mixtral all write "llama"; experts make it mixtral.
  if (fam == RG_FAMILY_LLAMA && experts) fam = RG_FAMILY_MIXTRAL;
  rg_arch_t *a = calloc(1, sizeof(*a));
  if (!a) return rg_status_make(RG_OUT_OF_MEMORY, "%s: out of memory", g->file);
  a->family = fam;
  const char *name = NULL;
  rg_status_t s = kv_string(g, "general.name", &name);
  if (name && *name) {
    snprintf(a->name, sizeof(a->name), "%s", name);
  } else {
    const char *b = strrchr(g->file, '/');
    snprintf(a->name, sizeof(a->name), "%s", b ? b + 1 : g->file);
    char *dot = strrchr(a->name, '.');
    if (dot && dot != a->name) *dot = 0;
  }
  uint64_t d = 0, layers = 0, heads = 0, kv = 0, ff = 0, ctx = 0, hd = 0, vocab = 0, top = 0,
           ffe = 0, ftype = 0;
  int found_ftype = 0, found = 0;
  if (!s) s = arch_uint(g, "embedding_length", 1, &d);
  if (!s) s = arch_uint(g, "block_count", 1, &layers);
  if (!s) s = arch_uint(g, "attention.head_count", 1, &heads);
  kv = heads;
  if (!s) s = arch_uint(g, "attention.head_count_kv", 0, &kv);
  if (!s) s = arch_uint(g, "feed_forward_length", experts == 0, &ff);
  if (!s) s = arch_uint(g, "context_length", 0, &ctx);
  hd = heads ? d / heads : 0;
  if (!s) s = arch_uint(g, "attention.key_length", 0, &hd);
  if (!s) s = arch_uint(g, "vocab_size", 0, &vocab);
  if (!s && vocab == 0) {
    const rg_tensor_t *emb = rg_weights_find(w, "model.embed_tokens.weight");
    if (g->n_tokens)
      vocab = g->n_tokens;
    else if (emb && emb->n_dims == 2)
      vocab = (uint64_t)emb->shape[0];
    else
      s = rg_status_make(RG_PARSE,
                         "%s: no vocabulary size: neither %s.vocab_size, tokenizer.ggml.tokens nor "
                         "token_embd.weight",
                         g->file, g->arch);
  }
  if (!s && experts) {
    s = arch_uint(g, "expert_used_count", 1, &top);
    ffe = ff;
    if (!s) s = arch_uint(g, "expert_feed_forward_length", ff == 0, &ffe);
  }
  double theta = 10000.0;
  if (!s) {
    char key[128];
    s = kv_float(g, akey(g, "rope.freq_base", key, sizeof(key)), &theta, &found);
  }
  if (!s) s = kv_uint(g, "general.file_type", &ftype, &found_ftype);
  if (s) {
    free(a);
    return s;
  }
  a->d_model = clamp_i64(d);
  a->n_layers = clamp_i64(layers);
  a->n_heads = clamp_i64(heads);
  a->n_kv_heads = clamp_i64(kv);
  a->head_dim = clamp_i64(hd);
  a->d_ff = clamp_i64(ff);
  a->vocab = clamp_i64(vocab);
  a->max_context = clamp_i64(ctx);
  a->n_experts = clamp_i64(experts);
  a->n_experts_per_tok = clamp_i64(top);
  a->d_ff_expert = clamp_i64(ffe);
  a->moe_layer_step = 1;
  a->rope_theta = theta;
  a->tie_embeddings = rg_weights_find(w, "lm_head.weight") == NULL;
  a->qk_norm = rg_family_has(fam, RG_FAM_QK_NORM);
  a->qkv_bias = rg_family_has(fam, RG_FAM_QKV_BIAS) || rg_weights_find(w, "model.layers.0.self_attn.q_proj.bias");
  a->o_bias = rg_weights_find(w, "model.layers.0.self_attn.o_proj.bias") != NULL;
  a->weight_dtype = RG_BF16;
  const rg_tensor_t *emb = rg_weights_find(w, "model.embed_tokens.weight");
  rg_dtype_t main_type = emb ? emb->type : RG_BF16;
  if (found_ftype) {
    // llama_ftype: 0 all F32, 1 mostly F16, 7 mostly Q8_0, 14/15 mostly Q4_K
    // (S/M), 18 mostly Q6_K, 32 mostly BF16.
    main_type = ftype == 0                   ? RG_F32
                : ftype == 1                 ? RG_F16
                : ftype == 7                 ? RG_Q8_0
                : ftype == 14 || ftype == 15 ? RG_Q4_K
                : ftype == 18                ? RG_Q6_K
                : ftype == 32                ? RG_BF16
                                             : main_type;
  }
  a->weight_dtype = main_type == RG_F32                   ? RG_F32
                    : main_type == RG_F16                 ? RG_F16
                    : rg_dtype_block_elems(main_type) > 1 ? rg_dtype_compute(main_type)
                                                          : RG_BF16;
  s = rg_arch_validate(a);
  if (s) {
    free(a);
    return rg_status_wrap(s, "%s", g->file);
  }
  *out = a;
  return NULL;
}

static rg_status_t scaling_type(const gguf_t *g, const char *key, rg_rope_scaling_kind_t *out) {
  const char *t = NULL;
  RG_RETURN_IF_ERROR(kv_string(g, key, &t));
  if (!t) return NULL;
  for (int i = 0; i < RG_ROPE_SCALING_COUNT; i++) {
    if (!strcmp(t, rg_rope_scaling_name((rg_rope_scaling_kind_t)i))) {
      *out = (rg_rope_scaling_kind_t)i;
      return NULL;
    }
  }
  return rg_status_make(RG_UNIMPLEMENTED,
                        "%s: %s = '%s' is not supported; ridge reads none, linear, llama3, yarn "
                        "and dynamic",
                        g->file, key, t);
}

rg_status_t rg__gguf_hparams(const rg_weights_t *w, rg_weights_hparams_t *out) {
  const gguf_t *g = gguf_of(w);
  rg_arch_t *a = NULL;
  RG_RETURN_IF_ERROR(rg__gguf_arch(w, &a));
  rg__weights_default_hparams(a, out);
  int moe = a->n_experts > 0;
  rg_arch_destroy(a);
  char key[128];
  int found = 0;
  uint64_t u = 0;
  RG_RETURN_IF_ERROR(kv_float(g, akey(g, "attention.layer_norm_rms_epsilon", key, sizeof(key)),
                              &out->rms_norm_eps, NULL));
  out->norm_topk_prob = moe;
  RG_RETURN_IF_ERROR(kv_uint(g, akey(g, "expert_weights_norm", key, sizeof(key)), &u, &found));
  if (found) out->norm_topk_prob = u != 0;
  // ridge's own keys hold llama3 scaling exactly; llama.cpp's standard keys
  // hold linear and yarn; a bare rope_freqs tensor is llama.cpp's llama3.
  rg_rope_scaling_kind_t rs = RG_ROPE_SCALING_NONE;
  RG_RETURN_IF_ERROR(scaling_type(g, "ridge.rope_scaling.type", &rs));
  if (rs != RG_ROPE_SCALING_NONE) {
    out->rope_scaling = rs;
    RG_RETURN_IF_ERROR(kv_float(g, "ridge.rope_scaling.factor", &out->rope_factor, NULL));
    RG_RETURN_IF_ERROR(
        kv_float(g, "ridge.rope_scaling.low_freq_factor", &out->rope_low_freq_factor, NULL));
    RG_RETURN_IF_ERROR(
        kv_float(g, "ridge.rope_scaling.high_freq_factor", &out->rope_high_freq_factor, NULL));
    u = 0;
    RG_RETURN_IF_ERROR(kv_uint(g, "ridge.rope_scaling.original_max_position_embeddings", &u, NULL));
    out->rope_original_max = clamp_i64(u);
  } else {
    RG_RETURN_IF_ERROR(scaling_type(g, akey(g, "rope.scaling.type", key, sizeof(key)), &rs));
    if (rs != RG_ROPE_SCALING_NONE) {
      out->rope_scaling = rs;
      RG_RETURN_IF_ERROR(
          kv_float(g, akey(g, "rope.scaling.factor", key, sizeof(key)), &out->rope_factor, NULL));
      u = 0;
      RG_RETURN_IF_ERROR(
          kv_uint(g, akey(g, "rope.scaling.original_context_length", key, sizeof(key)), &u, NULL));
      out->rope_original_max = clamp_i64(u);
    } else if (g->rope_freqs) {
      out->rope_scaling = RG_ROPE_SCALING_FREQS;
    }
  }
  out->rope_freq_factors = g->rope_freqs;
  out->n_rope_freq_factors = g->rope_freqs ? g->n_rope_freqs : 0;
  RG_RETURN_IF_ERROR(rg__check_rope_scaling(g->file, out));
  if (g->n_tokens) {
    u = 0;
    RG_RETURN_IF_ERROR(kv_uint(g, "tokenizer.ggml.bos_token_id", &u, &found));
    if (found) out->bos = (int32_t)u;
    RG_RETURN_IF_ERROR(kv_uint(g, "tokenizer.ggml.eos_token_id", &u, &found));
    if (found) out->eos = (int32_t)u;
  }
  return NULL;
}

rg_status_t rg__gguf_vocab(const rg_weights_t *w, const char *const **tokens,
                           const int32_t **token_types, size_t *n_tokens,
                           const char *const **merges, size_t *n_merges, const char **pre,
                           int32_t *bos, int32_t *eos) {
  const gguf_t *g = gguf_of(w);
  if (!g->n_tokens)
    return rg_status_make(RG_NOT_FOUND, "%s: no tokenizer.ggml.tokens in the file", g->file);
  *tokens = (const char *const *)g->tokens;
  *token_types = g->token_types;
  *n_tokens = g->n_tokens;
  *merges = (const char *const *)g->merges;
  *n_merges = g->n_merges;
  *pre = NULL;
  RG_RETURN_IF_ERROR(kv_string(g, "tokenizer.ggml.pre", pre));
  // read_vocab() checked both ids lie inside the token list.
  uint64_t u = 0;
  int found = 0;
  *bos = *eos = -1;
  RG_RETURN_IF_ERROR(kv_uint(g, "tokenizer.ggml.bos_token_id", &u, &found));
  if (found) *bos = (int32_t)u;
  RG_RETURN_IF_ERROR(kv_uint(g, "tokenizer.ggml.eos_token_id", &u, &found));
  if (found) *eos = (int32_t)u;
  return NULL;
}

// ----- writing ------------------------------------------------------------------------------

typedef struct {
  uint8_t *p;
  size_t n, cap;
  int oom;
} bbuf_t;

static void bb_put(bbuf_t *b, const void *s, size_t n) {
  if (b->oom) return;
  if (b->n + n > b->cap) {
    size_t nc = b->cap ? b->cap * 2 : 65536;
    while (nc < b->n + n) nc *= 2;
    uint8_t *np = realloc(b->p, nc);
    if (!np) {
      b->oom = 1;
      return;
    }
    b->p = np;
    b->cap = nc;
  }
  memcpy(b->p + b->n, s, n);
  b->n += n;
}

static void bb_u32(bbuf_t *b, uint32_t v) {
  bb_put(b, &v, 4);
}

static void bb_u64(bbuf_t *b, uint64_t v) {
  bb_put(b, &v, 8);
}

static void bb_str(bbuf_t *b, const char *s) {
  uint64_t n = strlen(s);
  bb_u64(b, n);
  bb_put(b, s, (size_t)n);
}

typedef struct {
  bbuf_t b;
  uint64_t n;
} kvw_t;

static void kw_key(kvw_t *k, const char *key, uint32_t type) {
  bb_str(&k->b, key);
  bb_u32(&k->b, type);
  k->n++;
}

static void kw_u32(kvw_t *k, const char *key, uint64_t v) {
  kw_key(k, key, GT_U32);
  bb_u32(&k->b, (uint32_t)v);
}

static void kw_f32(kvw_t *k, const char *key, double v) {
  kw_key(k, key, GT_F32);
  float f = (float)v;
  bb_put(&k->b, &f, 4);
}

static void kw_bool(kvw_t *k, const char *key, int v) {
  kw_key(k, key, GT_BOOL);
  uint8_t b = v != 0;
  bb_put(&k->b, &b, 1);
}

static void kw_str(kvw_t *k, const char *key, const char *v) {
  kw_key(k, key, GT_STR);
  bb_str(&k->b, v);
}

static void kw_akey(kvw_t *k, const char *arch, const char *suffix, char *buf, size_t len) {
  snprintf(buf, len, "%s.%s", arch, suffix);
}

// One tensor of the output file.
typedef struct {
  char name[64];
  rg_dtype_t type, src_type;
  int n_dims;
  uint64_t ne[RG_TENSOR_MAX_DIMS];
  uint64_t nbytes, offset;
  size_t *srcs;  // input tensor index per expert (or one)
  int64_t n_srcs;
  int exps;           // experts merged into one 3-D tensor
  int64_t qk_groups;  // permute rows for "llama"
  int layer, which;   // experts: grouping key
  const float *own;   // generated data (rope_freqs)
} wt_t;

// Maps an HF name to its GGUF name. *expert >= 0 for a per-expert tensor
// (merged into blk.N.ffn_*_exps), with *which 0 gate, 1 up, 2 down.
static int hf_to_gguf(const char *hf, char *out, size_t len, long *layer, long *expert, int *which,
                      int *qk) {
  *expert = -1;
  *qk = 0;
  const char *dot = strrchr(hf, '.');
  if (!dot || (strcmp(dot, ".weight") && strcmp(dot, ".bias"))) return 0;
  const char *suffix = dot + 1;
  size_t base_len = (size_t)(dot - hf);
  for (size_t i = 0; i < sizeof(global_names) / sizeof(global_names[0]); i++) {
    if (strlen(global_names[i].hf) == base_len && !strncmp(hf, global_names[i].hf, base_len)) {
      snprintf(out, len, "%s.%s", global_names[i].gguf, suffix);
      return 1;
    }
  }
  if (strncmp(hf, "model.layers.", 13)) return 0;
  const char *p = hf + 13;
  if (!rd_index(&p, layer) || *p != '.') return 0;
  p++;
  char part[128];
  size_t pl = (size_t)(dot - p);
  if (pl >= sizeof(part)) return 0;
  memcpy(part, p, pl);
  part[pl] = 0;
  for (size_t i = 0; i < N_LAYER_NAMES; i++) {
    if (!strcmp(part, layer_names[i].hf)) {
      snprintf(out, len, "blk.%ld.%s.%s", *layer, layer_names[i].gguf, suffix);
      *qk = !strcmp(layer_names[i].gguf, "attn_q")   ? 1
            : !strcmp(layer_names[i].gguf, "attn_k") ? 2
                                                     : 0;
      return 1;
    }
  }
  if (!strcmp(part, "block_sparse_moe.gate") || !strcmp(part, "mlp.gate")) {
    snprintf(out, len, "blk.%ld.ffn_gate_inp.%s", *layer, suffix);
    return 1;
  }
  const char *q = NULL;
  const char *const *names = NULL;
  if (!strncmp(part, "block_sparse_moe.experts.", 25)) {
    q = part + 25;
    names = mixtral_expert;
  } else if (!strncmp(part, "mlp.experts.", 12)) {
    q = part + 12;
    names = qwen_expert;
  }
  if (!q || !rd_index(&q, expert) || *q != '.') return 0;
  q++;
  for (int k = 0; k < 3; k++) {
    if (!strcmp(q, names[k])) {
      *which = k;
      snprintf(out, len, "blk.%ld.%s.%s", *layer, exps_gguf[k], suffix);
      return 1;
    }
  }
  return 0;
}

static int is_float_src(rg_dtype_t t) {
  return t == RG_F32 || t == RG_F16 || t == RG_BF16;
}

// llama.cpp's rope_freqs for llama3 scaling: the factor each base frequency
// is divided by (1 in the high band, factor in the low, blended between).
static float *llama3_freq_factors(const rg_weights_hparams_t *hp, int64_t rot_dim) {
  int64_t half = rot_dim / 2;
  float *f = malloc((size_t)half * sizeof(float));
  double *base = malloc((size_t)half * sizeof(double)),
         *scaled = malloc((size_t)half * sizeof(double));
  rg_weights_hparams_t plain = *hp;
  plain.rope_scaling = RG_ROPE_SCALING_NONE;
  rg_status_t s = (!f || !base || !scaled) ? rg_status_make(RG_OUT_OF_MEMORY, "rope_freqs") : NULL;
  if (!s) s = rg_rope_inv_freq(&plain, rot_dim, base);
  if (!s) s = rg_rope_inv_freq(hp, rot_dim, scaled);
  if (!s)
    for (int64_t i = 0; i < half; i++) f[i] = (float)(base[i] / scaled[i]);
  free(base);
  free(scaled);
  if (s) {
    rg_status_free(s);
    free(f);
    return NULL;
  }
  return f;
}

static rg_status_t build_kvs(kvw_t *k, const rg_gguf_info_t *info, const char *ga,
                             uint32_t file_type) {
  const rg_arch_t *a = info->arch;
  const rg_weights_hparams_t *hp = info->hp;
  char key[128];
#define AK(s) (kw_akey(k, ga, s, key, sizeof(key)), key)
  kw_str(k, "general.architecture", ga);
  kw_str(k, "general.name", info->name ? info->name : a->name);
  kw_u32(k, "general.alignment", 32);
  kw_u32(k, "general.file_type", file_type);
  kw_u32(k, AK("vocab_size"), (uint64_t)a->vocab);
  if (a->max_context) kw_u32(k, AK("context_length"), (uint64_t)a->max_context);
  kw_u32(k, AK("embedding_length"), (uint64_t)a->d_model);
  kw_u32(k, AK("block_count"), (uint64_t)a->n_layers);
  kw_u32(k, AK("feed_forward_length"), (uint64_t)a->d_ff);
  kw_u32(k, AK("attention.head_count"), (uint64_t)a->n_heads);
  kw_u32(k, AK("attention.head_count_kv"), (uint64_t)a->n_kv_heads);
  kw_u32(k, AK("attention.key_length"), (uint64_t)a->head_dim);
  kw_u32(k, AK("attention.value_length"), (uint64_t)a->head_dim);
  kw_u32(k, AK("rope.dimension_count"), (uint64_t)a->head_dim);
  kw_f32(k, AK("rope.freq_base"), hp->rope_theta);
  kw_f32(k, AK("attention.layer_norm_rms_epsilon"), hp->rms_norm_eps);
  if (a->n_experts) {
    kw_u32(k, AK("expert_count"), (uint64_t)a->n_experts);
    kw_u32(k, AK("expert_used_count"), (uint64_t)a->n_experts_per_tok);
    kw_u32(k, AK("expert_feed_forward_length"), (uint64_t)a->d_ff_expert);
    kw_bool(k, AK("expert_weights_norm"), hp->norm_topk_prob);
  }
  switch (hp->rope_scaling) {
    case RG_ROPE_SCALING_NONE:
      break;
    case RG_ROPE_SCALING_LLAMA3:
      // llama.cpp reads llama3 scaling from rope_freqs.weight (written with
      // the tensors); these keys keep the exact parameters for ridge.
      kw_str(k, "ridge.rope_scaling.type", "llama3");
      kw_f32(k, "ridge.rope_scaling.factor", hp->rope_factor);
      kw_f32(k, "ridge.rope_scaling.low_freq_factor", hp->rope_low_freq_factor);
      kw_f32(k, "ridge.rope_scaling.high_freq_factor", hp->rope_high_freq_factor);
      kw_u32(k, "ridge.rope_scaling.original_max_position_embeddings",
             (uint64_t)hp->rope_original_max);
      break;
    case RG_ROPE_SCALING_LINEAR:
    case RG_ROPE_SCALING_YARN:
      kw_str(k, AK("rope.scaling.type"), rg_rope_scaling_name(hp->rope_scaling));
      kw_f32(k, AK("rope.scaling.factor"), hp->rope_factor);
      if (hp->rope_original_max)
        kw_u32(k, AK("rope.scaling.original_context_length"), (uint64_t)hp->rope_original_max);
      break;
    default:
      return rg_status_make(RG_UNIMPLEMENTED, "GGUF writer: rope scaling '%s' is not supported",
                            rg_rope_scaling_name(hp->rope_scaling));
  }
#undef AK
  if (info->tokens) {
    if ((int64_t)info->n_tokens > a->vocab)
      return rg_status_make(RG_INVALID_ARGUMENT,
                            "GGUF writer: %zu tokens but the model's vocab is %lld", info->n_tokens,
                            (long long)a->vocab);
    kw_str(k, "tokenizer.ggml.model", "gpt2");
    kw_str(k, "tokenizer.ggml.pre", info->pre ? info->pre : "default");
    uint64_t nv = (uint64_t)a->vocab;
    kw_key(k, "tokenizer.ggml.tokens", GT_ARR);
    bb_u32(&k->b, GT_STR);
    bb_u64(&k->b, nv);
    for (uint64_t i = 0; i < nv; i++) {
      char pad[32];
      snprintf(pad, sizeof(pad), "[PAD%llu]", (unsigned long long)i);
      bb_str(&k->b, i < info->n_tokens ? info->tokens[i] : pad);
    }
    kw_key(k, "tokenizer.ggml.token_type", GT_ARR);
    bb_u32(&k->b, GT_I32);
    bb_u64(&k->b, nv);
    for (uint64_t i = 0; i < nv; i++) {
      int32_t t = i >= info->n_tokens ? 5 : info->token_types ? info->token_types[i] : 1;
      bb_put(&k->b, &t, 4);
    }
    kw_key(k, "tokenizer.ggml.merges", GT_ARR);
    bb_u32(&k->b, GT_STR);
    bb_u64(&k->b, info->n_merges);
    for (size_t i = 0; i < info->n_merges; i++) bb_str(&k->b, info->merges[i]);
    if (hp->bos >= 0) kw_u32(k, "tokenizer.ggml.bos_token_id", (uint64_t)hp->bos);
    if (hp->eos >= 0) kw_u32(k, "tokenizer.ggml.eos_token_id", (uint64_t)hp->eos);
  }
  return NULL;
}

// Plans the output tensors: names, merged experts, types, offsets.
static rg_status_t plan_tensors(const char *path, const rg_gguf_info_t *info, const char *ga,
                                const rg_tensor_t *tensors, size_t n, wt_t **out, size_t *n_out,
                                uint64_t *data_bytes) {
  const rg_arch_t *a = info->arch;
  int permute = gguf_arch_has(ga, RG_FAM_GGUF_QK_PERM);
  if (info->matrix_type != RG_DTYPE_COUNT && info->matrix_type != RG_Q8_0)
    return rg_status_make(RG_INVALID_ARGUMENT, "%s: the GGUF writer quantizes only to Q8_0", path);
  wt_t *wt = calloc(n + 1, sizeof(*wt));
  if (!wt) return rg_status_make(RG_OUT_OF_MEMORY, "%s: out of memory", path);
  size_t nw = 0;
  rg_status_t s = NULL;
  for (size_t i = 0; i < n && !s; i++) {
    const rg_tensor_t *t = &tensors[i];
    uint64_t nb = 0;
    if ((s = rg__check_write_tensor(path, t, &nb))) break;
    char name[64];
    long layer = -1, expert = -1;
    int which = 0, qk = 0;
    if (!hf_to_gguf(t->name, name, sizeof(name), &layer, &expert, &which, &qk)) {
      s = rg_status_make(RG_INVALID_ARGUMENT, "%s: tensor '%s' has no GGUF name", path, t->name);
      break;
    }
    if (to_ggml(t->type) < 0) {
      s = rg_status_make(RG_INVALID_ARGUMENT, "%s: tensor '%s': GGUF has no type %s", path, t->name,
                         rg_dtype_name(t->type));
      break;
    }
    wt_t *e = NULL;
    if (expert >= 0) {
      if (t->n_dims != 2 || expert >= a->n_experts) {
        s = rg_status_make(RG_INVALID_ARGUMENT,
                           "%s: tensor '%s': expected a 2-D expert below the model's %lld", path,
                           t->name, (long long)a->n_experts);
        break;
      }
      for (size_t k = 0; k < nw && !e; k++)
        if (wt[k].exps && !strcmp(wt[k].name, name)) e = &wt[k];
      if (e) {
        const rg_tensor_t *first = NULL;
        for (int64_t k = 0; k < e->n_srcs && !first; k++)
          if (e->srcs[k] != SIZE_MAX) first = &tensors[e->srcs[k]];
        if (e->srcs[expert] != SIZE_MAX || first->type != t->type ||
            first->shape[0] != t->shape[0] || first->shape[1] != t->shape[1]) {
          s = rg_status_make(RG_INVALID_ARGUMENT,
                             "%s: tensor '%s' repeats an expert or differs from its siblings in "
                             "shape or type",
                             path, t->name);
          break;
        }
        e->srcs[expert] = i;
        continue;
      }
    }
    e = &wt[nw++];
    snprintf(e->name, sizeof(e->name), "%s", name);
    e->src_type = e->type = t->type;
    e->exps = expert >= 0;
    e->n_srcs = expert >= 0 ? a->n_experts : 1;
    e->srcs = malloc((size_t)e->n_srcs * sizeof(size_t));
    if (!e->srcs) {
      s = rg_status_make(RG_OUT_OF_MEMORY, "%s: out of memory", path);
      break;
    }
    for (int64_t k = 0; k < e->n_srcs; k++) e->srcs[k] = SIZE_MAX;
    e->srcs[expert >= 0 ? expert : 0] = i;
    e->n_dims = t->n_dims + (expert >= 0);
    for (int d = 0; d < t->n_dims; d++) e->ne[d] = (uint64_t)t->shape[t->n_dims - 1 - d];
    if (expert >= 0) e->ne[2] = (uint64_t)a->n_experts;
    if (permute && qk) e->qk_groups = qk == 1 ? a->n_heads : a->n_kv_heads;
    int matrix = t->n_dims == 2 && strstr(name, "ffn_gate_inp") == NULL;
    if (info->matrix_type == RG_Q8_0 && matrix && is_float_src(t->type) && e->ne[0] % 32 == 0)
      e->type = RG_Q8_0;
  }
  for (size_t k = 0; k < nw && !s; k++)
    for (int64_t x = 0; x < wt[k].n_srcs && !s; x++)
      if (wt[k].srcs[x] == SIZE_MAX)
        s = rg_status_make(RG_INVALID_ARGUMENT, "%s: %s lacks expert %lld", path, wt[k].name,
                           (long long)x);
  if (!s && info->hp->rope_scaling == RG_ROPE_SCALING_LLAMA3) {
    wt_t *e = &wt[nw++];
    snprintf(e->name, sizeof(e->name), "rope_freqs.weight");
    e->type = e->src_type = RG_F32;
    e->n_dims = 1;
    e->ne[0] = (uint64_t)(a->head_dim / 2);
    e->own = llama3_freq_factors(info->hp, a->head_dim);
    if (!e->own) s = rg_status_make(RG_INVALID_ARGUMENT, "%s: cannot compute rope_freqs", path);
  }
  const char **names = malloc((nw ? nw : 1) * sizeof(*names));
  if (!s && !names) s = rg_status_make(RG_OUT_OF_MEMORY, "%s: out of memory", path);
  for (size_t k = 0; !s && k < nw; k++) names[k] = wt[k].name;
  if (!s) s = rg__check_unique(path, names, nw);
  free(names);
  uint64_t off = 0;
  for (size_t k = 0; k < nw && !s; k++) {
    wt_t *e = &wt[k];
    int64_t elems = 1;
    for (int d = 0; d < e->n_dims; d++) elems *= (int64_t)e->ne[d];
    int ok = 0;
    e->nbytes = rg_dtype_nbytes(e->type, elems, &ok);
    e->offset = off;
    off += (e->nbytes + 31) / 32 * 32;
  }
  *out = wt;
  *n_out = nw;
  *data_bytes = off;
  return s;
}

static void free_plan(wt_t *wt, size_t n) {
  for (size_t k = 0; wt && k < n; k++) {
    free(wt[k].srcs);
    free((void *)wt[k].own);
  }
  free(wt);
}

// Writes one source tensor's rows in the output type, permuting Q/K rows.
static rg_status_t write_rows(FILE *f, const char *tmp, const wt_t *e, const rg_tensor_t *t,
                              const uint8_t *src, float *scratch, uint8_t *qrow) {
  int64_t rows = t->n_dims >= 1 ? t->shape[0] : 1;
  if (rows == 0) return NULL;
  int64_t cols = rows ? rg_tensor_elems(t) / rows : 0;
  uint64_t src_row = t->nbytes / (uint64_t)rows;
  if (e->type == e->src_type && !e->qk_groups) return rg__write_bytes(f, tmp, src, t->nbytes);
  int64_t hd = e->qk_groups ? rows / e->qk_groups : 0;
  if (e->qk_groups && (rows % e->qk_groups || hd % 2))
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "%s: tensor '%s': %lld rows do not split into %lld heads of an even size",
                          tmp, t->name, (long long)rows, (long long)e->qk_groups);
  for (int64_t r = 0; r < rows; r++) {
    int64_t from = r;
    if (e->qk_groups) {
      // GGUF row r = h*hd + 2j + k comes from HF row h*hd + k*hd/2 + j.
      int64_t h = r / hd, within = r % hd, j = within / 2, k = within % 2;
      from = h * hd + k * (hd / 2) + j;
    }
    const uint8_t *row = src + (uint64_t)from * src_row;
    if (e->type == e->src_type) {
      RG_RETURN_IF_ERROR(rg__write_bytes(f, tmp, row, src_row));
    } else {
      RG_RETURN_IF_ERROR(rg_dtype_to_f32(e->src_type, row, scratch, cols));
      RG_RETURN_IF_ERROR(rg_status_wrap(rg_q8_0_quantize_row(scratch, qrow, cols), "%s: tensor '%s'", tmp, t->name));
      RG_RETURN_IF_ERROR(rg__write_bytes(f, tmp, qrow, (uint64_t)cols / 32 * 34));
    }
  }
  return NULL;
}

rg_status_t rg_gguf_write(const char *path, const rg_gguf_info_t *info, const rg_tensor_t *tensors,
                          size_t n, const rg_write_source_t *src) {
  if (!info || !info->arch || !info->hp)
    return rg_status_make(RG_INVALID_ARGUMENT, "%s: the GGUF writer needs an arch and hparams",
                          path);
  const char *ga = rg_family_info(info->arch->family)->gguf_arch;
  if (!ga) {
    char list[256];
    return rg_status_make(RG_UNIMPLEMENTED, "%s: family '%s' has no GGUF writer; ridge writes %s", path,
                          rg_family_name(info->arch->family), rg_family_list(RG_FAM_RUNS, list, sizeof list));
  }
  wt_t *wt = NULL;
  size_t nw = 0;
  uint64_t data_bytes = 0;
  rg_status_t s = plan_tensors(path, info, ga, tensors, n, &wt, &nw, &data_bytes);
  // general.file_type follows the embedding's type.
  rg_dtype_t main_type = RG_BF16;
  for (size_t k = 0; k < nw; k++)
    if (!strcmp(wt[k].name, "token_embd.weight")) main_type = wt[k].type;
  uint32_t ftype = main_type == RG_F32    ? 0
                   : main_type == RG_F16  ? 1
                   : main_type == RG_Q8_0 ? 7
                                            : 32;
  kvw_t kv = {{0}, 0};
  if (!s) s = build_kvs(&kv, info, ga, ftype);
  bbuf_t head = {0};
  if (!s) {
    bb_put(&head, "GGUF", 4);
    bb_u32(&head, 3);
    bb_u64(&head, nw);
    bb_u64(&head, kv.n);
    bb_put(&head, kv.b.p, kv.b.n);
    for (size_t k = 0; k < nw; k++) {
      bb_str(&head, wt[k].name);
      bb_u32(&head, (uint32_t)wt[k].n_dims);
      for (int d = 0; d < wt[k].n_dims; d++) bb_u64(&head, wt[k].ne[d]);
      bb_u32(&head, (uint32_t)to_ggml(wt[k].type));
      bb_u64(&head, wt[k].offset);
    }
    static const uint8_t zeros[32] = {0};
    bb_put(&head, zeros, (32 - head.n % 32) % 32);
    if (head.oom || kv.b.oom) s = rg_status_make(RG_OUT_OF_MEMORY, "%s: out of memory", path);
  }
  // Scratch: the largest source tensor that must be filled, and one row.
  uint64_t biggest = 0, widest = 0;
  for (size_t k = 0; k < nw && !s; k++) {
    for (int64_t x = 0; x < wt[k].n_srcs && !wt[k].own; x++) {
      const rg_tensor_t *t = &tensors[wt[k].srcs[x]];
      uint64_t nb = 0;
      s = rg__check_write_tensor(path, t, &nb);
      if (!t->data && nb > biggest) biggest = nb;
      if (t->n_dims == 2 && (uint64_t)t->shape[1] > widest) widest = (uint64_t)t->shape[1];
    }
  }
  if (!s && biggest && !(src && src->fill))
    s = rg_status_make(RG_INVALID_ARGUMENT, "%s: tensors without data and no fill", path);
  void *buf = NULL;
  float *scratch = NULL;
  uint8_t *qrow = NULL;
  if (!s) {
    buf = malloc(biggest ? (size_t)biggest : 1);
    scratch = malloc((size_t)(widest + 32) * sizeof(float));
    qrow = malloc((size_t)(widest / 32 + 1) * 34);
    if (!buf || !scratch || !qrow) s = rg_status_make(RG_OUT_OF_MEMORY, "%s: out of memory", path);
  }
  FILE *f = NULL;
  char *tmp = NULL;
  if (!s) s = rg__open_partial(path, &f, &tmp);
  if (!s) s = rg__write_bytes(f, tmp, head.p, head.n);
  uint64_t done = 0;
  for (size_t k = 0; k < nw && !s; k++) {
    wt_t *e = &wt[k];
    if (e->own) {
      s = rg__write_bytes(f, tmp, e->own, e->nbytes);
    } else {
      for (int64_t x = 0; x < e->n_srcs && !s; x++) {
        rg_tensor_t tt = tensors[e->srcs[x]];
        s = rg__check_write_tensor(path, &tt, &tt.nbytes);
        const uint8_t *p = tt.data;
        if (!s && !p) {
          s = src->fill(src->fill_ctx, &tt, buf);
          p = buf;
        }
        if (!s) s = write_rows(f, tmp, e, &tt, p, scratch, qrow);
      }
    }
    static const uint8_t zeros[32] = {0};
    if (!s) s = rg__write_bytes(f, tmp, zeros, (32 - e->nbytes % 32) % 32);
    done += (e->nbytes + 31) / 32 * 32;
    if (!s && src && src->progress) src->progress(src->progress_ctx, path, done, data_bytes);
  }
  if (f) s = rg__commit_file(s, f, tmp, path);
  free(buf);
  free(scratch);
  free(qrow);
  free(head.p);
  free(kv.b.p);
  free_plan(wt, nw);
  return s;
}
