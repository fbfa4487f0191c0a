// graphs/testmodel.c — a random-weight model in Hugging Face and GGUF form,
// with its tokenizer, so every loader and engine path can run without a
// download.
//
// Shapes (d_model, layers, heads / KV heads x head_dim, FFN, vocab):
//   llama tiny   64, 2, 4/2 x 16, 128, 576 (517 tokens padded to 64s)
//   llama 1b     2048, 16, 32/8 x 64, 8192, 32768 (Llama-3.2-1B-like,
//                untied: 1.1 B parameters)
//   moe tiny     as llama tiny, 4 experts top-2 of FFN 64 (Mixtral)
//   moe 1b       2048, 6 layers, 32/8 x 64, 8 experts top-2 of FFN 2816,
//                32768 (1.03 B parameters)
// Values come from a per-tensor PRNG (see weights.h), so the safetensors and
// GGUF copies, written in separate passes, hold the same numbers.
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "graphs/tokenizer.h"
#include "graphs/weights.h"

// Defined in weights.c.

// ----- the PRNG ------------------------------------------------------------------------

static uint64_t splitmix64(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

typedef struct {
  uint64_t s[4];
} xoshiro_t;

static uint64_t rotl(uint64_t x, int k) {
  return (x << k) | (x >> (64 - k));
}

static uint64_t xoshiro_next(xoshiro_t *r) {
  uint64_t *s = r->s;
  uint64_t out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return out;
}

static void xoshiro_seed(xoshiro_t *r, uint64_t seed, const char *name) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a 64
  for (const char *p = name; *p; p++) h = (h ^ (uint8_t)*p) * 1099511628211ull;
  uint64_t sm = seed ^ h;
  for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&sm);
}

// Irwin-Hall(4): four 16-bit uniforms summed, centred, scaled to unit
// variance. Bounded (|z| <= 2*sqrt(3)) and close enough to normal for
// weights, at one PRNG call per value.
static float normalish(xoshiro_t *r) {
  uint64_t x = xoshiro_next(r);
  double sum = 0;
  for (int i = 0; i < 4; i++) sum += ((double)((x >> (16 * i)) & 0xffff) + 0.5) / 65536.0;
  return (float)((sum - 2.0) * 1.7320508075688772);
}

typedef struct {
  uint64_t seed;
} fill_ctx_t;

static int is_norm(const char *name) {
  return strstr(name, "norm.weight") != NULL;
}

static rg_status_t fill(void *ctx, const rg_tensor_t *t, void *dst) {
  const fill_ctx_t *c = ctx;
  xoshiro_t r;
  xoshiro_seed(&r, c->seed, t->name);
  int64_t n = rg_tensor_elems(t);
  int norm = is_norm(t->name), embed = !strcmp(t->name, "model.embed_tokens.weight");
  float scale = norm || embed || t->n_dims < 2 ? 1.0f : 1.0f / sqrtf((float)t->shape[1]);
  for (int64_t i = 0; i < n; i++) {
    float z = normalish(&r);
    float v = norm ? 1.0f + 0.05f * z : z * scale;
    switch (t->type) {
      case RG_F32:
        ((float *)dst)[i] = v;
        break;
      case RG_F16:
        ((uint16_t *)dst)[i] = rg_f32_to_f16(v);
        break;
      case RG_BF16:
        ((uint16_t *)dst)[i] = rg_f32_to_bf16(v);
        break;
      default:
        return rg_status_make(RG_INTERNAL, "testmodel: cannot fill %s", rg_dtype_name(t->type));
    }
  }
  return NULL;
}

// ----- the model's description -------------------------------------------------------------

typedef struct {
  const char *family, *class_name;
  int64_t d, layers, heads, kv_heads, head_dim, ff, experts, top_k, max_pos, vocab_min;
  double theta;
  int llama3;
  size_t n_merges;
} spec_t;

static void model_spec(const rg_testmodel_opts_t *o, spec_t *s) {
  int moe = o->arch == RG_TESTMODEL_MOE, big = o->size == RG_TESTMODEL_1B;
  *s = (spec_t){
      .family = moe ? "mixtral" : "llama",
      .class_name = moe ? "MixtralForCausalLM" : "LlamaForCausalLM",
      .d = big ? 2048 : 64,
      .layers = big ? (moe ? 6 : 16) : 2,
      .heads = big ? 32 : 4,
      .kv_heads = big ? 8 : 2,
      .head_dim = big ? 64 : 16,
      .ff = moe ? (big ? 2816 : 64) : (big ? 8192 : 128),
      .experts = moe ? (big ? 8 : 4) : 0,
      .top_k = moe ? 2 : 0,
      .max_pos = moe ? 32768 : 131072,
      .vocab_min = big ? 32768 : 0,
      .theta = moe ? 1e6 : 500000.0,
      .llama3 = !moe,
      // The tiny vocabulary: 256 bytes + 256 merges + 5 specials, padded to
      // 576; the 1b: 32 k merges filling a 32768 vocabulary.
      .n_merges = big ? 32768 - 256 - 5 : 256,
  };
}

void rg_testmodel_arch(const rg_testmodel_opts_t *o, rg_arch_t *out) {
  spec_t s;
  model_spec(o, &s);
  memset(out, 0, sizeof(*out));
  snprintf(out->name, sizeof(out->name), "ridge-testmodel-%s-%s",
           o->arch == RG_TESTMODEL_MOE ? "moe" : "llama",
           o->size == RG_TESTMODEL_1B ? "1b" : "tiny");
  (void)rg_family_from_model_type(s.family, &out->family);
  out->vocab = s.vocab_min;
  out->d_model = s.d;
  out->n_layers = s.layers;
  out->n_heads = s.heads;
  out->n_kv_heads = s.kv_heads;
  out->head_dim = s.head_dim;
  // As the config.json loader reads it: Mixtral sizes its experts with
  // intermediate_size.
  out->d_ff = s.ff;
  out->n_experts = s.experts;
  out->n_experts_per_tok = s.top_k;
  out->d_ff_expert = s.experts ? s.ff : 0;
  out->max_context = s.max_pos;
  out->rope_theta = s.theta;
  out->weight_dtype = o->dtype;
}

static const char *dtype_hf(rg_dtype_t t) {
  return t == RG_F32 ? "float32" : t == RG_F16 ? "float16" : "bfloat16";
}

static rg_status_t write_config(const char *path, const spec_t *s, const rg_testmodel_opts_t *o,
                                int64_t vocab, const rg_weights_hparams_t *hp) {
  cJSON *c = cJSON_CreateObject();
  cJSON *archs = cJSON_AddArrayToObject(c, "architectures");
  cJSON_AddItemToArray(archs, cJSON_CreateString(s->class_name));
  cJSON_AddStringToObject(c, "model_type", s->family);
  cJSON_AddNumberToObject(c, "hidden_size", (double)s->d);
  cJSON_AddNumberToObject(c, "intermediate_size", (double)s->ff);
  cJSON_AddNumberToObject(c, "num_hidden_layers", (double)s->layers);
  cJSON_AddNumberToObject(c, "num_attention_heads", (double)s->heads);
  cJSON_AddNumberToObject(c, "num_key_value_heads", (double)s->kv_heads);
  cJSON_AddNumberToObject(c, "head_dim", (double)s->head_dim);
  cJSON_AddNumberToObject(c, "vocab_size", (double)vocab);
  cJSON_AddNumberToObject(c, "max_position_embeddings", (double)s->max_pos);
  cJSON_AddNumberToObject(c, "rms_norm_eps", hp->rms_norm_eps);
  cJSON_AddNumberToObject(c, "rope_theta", hp->rope_theta);
  if (s->llama3) {
    cJSON *rs = cJSON_AddObjectToObject(c, "rope_scaling");
    cJSON_AddStringToObject(rs, "rope_type", "llama3");
    cJSON_AddNumberToObject(rs, "factor", hp->rope_factor);
    cJSON_AddNumberToObject(rs, "low_freq_factor", hp->rope_low_freq_factor);
    cJSON_AddNumberToObject(rs, "high_freq_factor", hp->rope_high_freq_factor);
    cJSON_AddNumberToObject(rs, "original_max_position_embeddings", (double)hp->rope_original_max);
  }
  if (s->experts) {
    cJSON_AddNumberToObject(c, "num_local_experts", (double)s->experts);
    cJSON_AddNumberToObject(c, "num_experts_per_tok", (double)s->top_k);
    cJSON_AddNullToObject(c, "sliding_window");
  }
  cJSON_AddBoolToObject(c, "tie_word_embeddings", 0);
  cJSON_AddBoolToObject(c, "attention_bias", 0);
  cJSON_AddStringToObject(c, "hidden_act", "silu");
  if (hp->bos >= 0) cJSON_AddNumberToObject(c, "bos_token_id", hp->bos);
  if (hp->eos >= 0) cJSON_AddNumberToObject(c, "eos_token_id", hp->eos);
  cJSON_AddStringToObject(c, "torch_dtype", dtype_hf(o->dtype));
  char *text = cJSON_Print(c);
  cJSON_Delete(c);
  if (!text) return rg_status_make(RG_OUT_OF_MEMORY, "%s: out of memory", path);
  size_t len = strlen(path) + 16;
  char *tmp = malloc(len);
  rg_status_t st = NULL;
  FILE *f = NULL;
  if (!tmp) {
    st = rg_status_make(RG_OUT_OF_MEMORY, "%s: out of memory", path);
  } else {
    snprintf(tmp, len, "%s.partial", path);
    f = fopen(tmp, "w");
    if (!f) st = rg_status_make(RG_IO, "%s: cannot create: %s", tmp, strerror(errno));
  }
  if (f) {
    int bad = fputs(text, f) < 0 || fputc('\n', f) < 0;
    bad |= fclose(f) != 0;
    if (bad) st = rg_status_make(RG_IO, "%s: write failed", tmp);
    if (!st && rename(tmp, path) != 0)
      st = rg_status_make(RG_IO, "%s: cannot rename to %s: %s", tmp, path, strerror(errno));
    if (st) unlink(tmp);
  }
  free(tmp);
  free(text);
  return st;
}

// The Hugging Face tensors of the arch, in the order transformers lists them.
static rg_status_t list_tensors(const rg_arch_t *a, rg_dtype_t dt, rg_tensor_t **out,
                                size_t *n_out) {
  size_t per_layer = 6 + (a->n_experts ? 1 + 3 * (size_t)a->n_experts : 3);
  size_t cap = 3 + (size_t)a->n_layers * per_layer, n = 0;
  rg_tensor_t *t = calloc(cap, sizeof(*t));
  if (!t) return rg_status_make(RG_OUT_OF_MEMORY, "testmodel: out of memory");
  const int64_t d = a->d_model, q = a->n_heads * a->head_dim, kv = a->n_kv_heads * a->head_dim;
#define ADD(d0, d1, ...)                             \
  do {                                               \
    rg_tensor_t *x = &t[n++];                        \
    snprintf(x->name, sizeof(x->name), __VA_ARGS__); \
    x->type = dt;                                    \
    x->n_dims = (d1) ? 2 : 1;                        \
    x->shape[0] = (d0);                              \
    x->shape[1] = (d1);                              \
  } while (0)
  ADD(a->vocab, d, "model.embed_tokens.weight");
  for (int64_t l = 0; l < a->n_layers; l++) {
    long long L = (long long)l;
    ADD(d, 0, "model.layers.%lld.input_layernorm.weight", L);
    ADD(q, d, "model.layers.%lld.self_attn.q_proj.weight", L);
    ADD(kv, d, "model.layers.%lld.self_attn.k_proj.weight", L);
    ADD(kv, d, "model.layers.%lld.self_attn.v_proj.weight", L);
    ADD(d, q, "model.layers.%lld.self_attn.o_proj.weight", L);
    ADD(d, 0, "model.layers.%lld.post_attention_layernorm.weight", L);
    if (a->n_experts) {
      ADD(a->n_experts, d, "model.layers.%lld.block_sparse_moe.gate.weight", L);
      for (int64_t e = 0; e < a->n_experts; e++) {
        ADD(a->d_ff_expert, d, "model.layers.%lld.block_sparse_moe.experts.%lld.w1.weight", L,
            (long long)e);
        ADD(d, a->d_ff_expert, "model.layers.%lld.block_sparse_moe.experts.%lld.w2.weight", L,
            (long long)e);
        ADD(a->d_ff_expert, d, "model.layers.%lld.block_sparse_moe.experts.%lld.w3.weight", L,
            (long long)e);
      }
    } else {
      ADD(a->d_ff, d, "model.layers.%lld.mlp.gate_proj.weight", L);
      ADD(a->d_ff, d, "model.layers.%lld.mlp.up_proj.weight", L);
      ADD(d, a->d_ff, "model.layers.%lld.mlp.down_proj.weight", L);
    }
  }
  ADD(d, 0, "model.norm.weight");
  ADD(a->vocab, d, "lm_head.weight");
#undef ADD
  for (size_t i = 0; i < n; i++) {
    int ok = 0;
    t[i].nbytes = rg_dtype_nbytes(dt, rg_tensor_elems(&t[i]), &ok);
  }
  *out = t;
  *n_out = n;
  return NULL;
}

// Creates dir (and missing parents), or checks an existing one is empty.
static rg_status_t prepare_dir(const char *dir, int force) {
  struct stat st;
  if (stat(dir, &st) == 0) {
    if (!S_ISDIR(st.st_mode))
      return rg_status_make(RG_INVALID_ARGUMENT, "%s exists and is not a directory", dir);
    if (force) return NULL;
    DIR *d = opendir(dir);
    if (!d) return rg_status_make(RG_IO, "%s: cannot list: %s", dir, strerror(errno));
    struct dirent *e;
    char first[256] = "";
    while ((e = readdir(d))) {
      if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
        snprintf(first, sizeof(first), "%s", e->d_name);
        break;
      }
    }
    closedir(d);
    if (first[0])
      return rg_status_make(RG_INVALID_ARGUMENT,
                            "%s is not empty (it holds '%s'); refusing to overwrite it without "
                            "--force",
                            dir, first);
    return NULL;
  }
  char *p = strdup(dir);
  if (!p) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
  for (char *s = p + 1; *s; s++) {
    if (*s != '/') continue;
    *s = 0;
    if (mkdir(p, 0777) != 0 && errno != EEXIST) {
      rg_status_t e = rg_status_make(RG_IO, "cannot create %s: %s", p, strerror(errno));
      free(p);
      return e;
    }
    *s = '/';
  }
  free(p);
  if (mkdir(dir, 0777) != 0 && errno != EEXIST)
    return rg_status_make(RG_IO, "cannot create %s: %s", dir, strerror(errno));
  return NULL;
}

static uint64_t file_size(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
}

rg_status_t rg_testmodel_write(const char *dir, const rg_testmodel_opts_t *o,
                               rg_testmodel_info_t *info) {
  if (!dir || !*dir || !o)
    return rg_status_make(RG_INVALID_ARGUMENT, "testmodel: no output directory given");
  if (o->dtype != RG_F32 && o->dtype != RG_F16 && o->dtype != RG_BF16)
    return rg_status_make(RG_INVALID_ARGUMENT, "testmodel: dtype %s; expected f32, f16 or bf16",
                          rg_dtype_name(o->dtype));
  if (o->gguf_type != RG_DTYPE_COUNT && o->gguf_type != RG_Q8_0)
    return rg_status_make(RG_INVALID_ARGUMENT, "testmodel: GGUF type %s; expected same or q8_0",
                          rg_dtype_name(o->gguf_type));
  spec_t s;
  model_spec(o, &s);
  RG_RETURN_IF_ERROR(prepare_dir(dir, o->force));

  size_t plen = strlen(dir) + 64;
  char *path = malloc(plen);
  if (!path) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
  rg_tokenizer_t *tok = NULL;
  rg_arch_t *a = NULL;
  rg_tensor_t *tensors = NULL;
  size_t n = 0;
  rg_status_t st = rg_tokenizer_build_test(s.n_merges, &tok);
  if (st) goto done;
  const char *const *tokens = NULL, *const *merges = NULL;
  const int32_t *types = NULL;
  size_t n_tokens = 0, n_merges = 0;
  const char *pre = NULL;
  rg_tokenizer_vocab(tok, &tokens, &types, &n_tokens, &merges, &n_merges, &pre);
  int64_t vocab = ((int64_t)n_tokens + 63) / 64 * 64;
  if (vocab < s.vocab_min) vocab = s.vocab_min;

  rg_weights_hparams_t hp;
  memset(&hp, 0, sizeof(hp));
  hp.rms_norm_eps = 1e-5;
  hp.rope_theta = s.theta;
  hp.rope_scaling = s.llama3 ? RG_ROPE_SCALING_LLAMA3 : RG_ROPE_SCALING_NONE;
  hp.rope_factor = s.llama3 ? 32.0 : 1.0;
  hp.rope_low_freq_factor = s.llama3 ? 1.0 : 0.0;
  hp.rope_high_freq_factor = s.llama3 ? 4.0 : 0.0;
  hp.rope_original_max = s.llama3 ? 8192 : 0;
  hp.norm_topk_prob = s.experts > 0;
  hp.bos = rg_tokenizer_bos(tok);
  hp.eos = rg_tokenizer_eos(tok);

  // tokenizer.json under a temporary name, then into place.
  snprintf(path, plen, "%s/tokenizer.json", dir);
  {
    char *tmp = malloc(plen + 16);
    if (!tmp) {
      st = rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
      goto done;
    }
    snprintf(tmp, plen + 16, "%s.partial", path);
    st = rg_tokenizer_write_hf(tok, tmp);
    if (!st && rename(tmp, path) != 0)
      st = rg_status_make(RG_IO, "%s: cannot rename to %s: %s", tmp, path, strerror(errno));
    if (st) unlink(tmp);
    free(tmp);
    if (st) goto done;
  }

  snprintf(path, plen, "%s/config.json", dir);
  if ((st = write_config(path, &s, o, vocab, &hp))) goto done;
  // Read the config back: the tensors follow what a loader will see.
  if ((st = rg_model_load(path, NULL, &a))) goto done;
  if ((st = list_tensors(a, o->dtype, &tensors, &n))) goto done;

  fill_ctx_t fc = {o->seed};
  rg_write_source_t src = {fill, &fc, o->progress, o->progress_ctx};
  static const char *const meta[] = {"format", "pt", "generator", "ridge testmodel"};
  snprintf(path, plen, "%s/model.safetensors", dir);
  if ((st = rg_safetensors_write(path, tensors, n, meta, 2, &src))) goto done;
  if (info) info->safetensors_bytes = file_size(path);

  char name[96];
  snprintf(name, sizeof(name), "ridge-testmodel-%s-%s",
           o->arch == RG_TESTMODEL_MOE ? "moe" : "llama",
           o->size == RG_TESTMODEL_1B ? "1b" : "tiny");
  rg_gguf_info_t gi = {
      .arch = a,
      .hp = &hp,
      .name = name,
      .tokens = tokens,
      .token_types = types,
      .n_tokens = n_tokens,
      .merges = merges,
      .n_merges = n_merges,
      .pre = pre,
      .matrix_type = o->gguf_type,
  };
  snprintf(path, plen, "%s/model.gguf", dir);
  if ((st = rg_gguf_write(path, &gi, tensors, n, &src))) goto done;
  if (info) {
    info->gguf_bytes = file_size(path);
    info->params = rg_arch_params(a);
    info->vocab = vocab;
    info->n_tokens = (int64_t)n_tokens;
  }
done:
  free(tensors);
  rg_arch_destroy(a);
  rg_tokenizer_destroy(tok);
  free(path);
  return st;
}

rg_status_t rg_testmodel_cached(const rg_testmodel_opts_t *o, char *out_dir, size_t len,
                                int *out_written) {
  const char *cache = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  char base[2048];
  if (cache && *cache)
    snprintf(base, sizeof base, "%s/ridge", cache);
  else if (home && *home)
    snprintf(base, sizeof base, "%s/.cache/ridge", home);
  else
    snprintf(base, sizeof base, "/tmp/ridge-cache");
  // The default weights (bf16, the GGUF the same) keep the plain name;
  // others name their types, so that two kinds never share a directory.
  char kind[64] = "";
  if (o->dtype != RG_BF16 || o->gguf_type != RG_DTYPE_COUNT)
    snprintf(kind, sizeof kind, "-%s%s%s", rg_dtype_name(o->dtype),
             o->gguf_type != RG_DTYPE_COUNT ? "-gguf-" : "",
             o->gguf_type != RG_DTYPE_COUNT ? rg_dtype_name(o->gguf_type) : "");
  snprintf(out_dir, len, "%s/testmodel-%s-%s%s-%s", base,
           o->arch == RG_TESTMODEL_MOE ? "moe" : "llama",
           o->size == RG_TESTMODEL_1B ? "1b" : "tiny", kind, RIDGE_VERSION);
  if (out_written) *out_written = 0;
  char probe[4200];
  snprintf(probe, sizeof probe, "%s/model.gguf", out_dir);  // written last
  struct stat st;
  if (stat(probe, &st) == 0) return NULL;
  // Create the parents; rg_testmodel_write creates the leaf.
  for (char *q = base + 1; *q; q++)
    if (*q == '/') {
      *q = 0;
      mkdir(base, 0755);
      *q = '/';
    }
  mkdir(base, 0755);
  rg_testmodel_opts_t w = *o;
  w.force = 1;  // a directory left by an interrupted write is replaced
  RG_RETURN_IF_ERROR(rg_testmodel_write(out_dir, &w, NULL));
  if (out_written) *out_written = 1;
  return NULL;
}
