// graphs/weights.c — the weights container shared by the safetensors and GGUF
// readers: mapped files, the tensor table and its name index, private copies;
// element types and conversions; lookups with shape checks; hyperparameters
// read from config.json.
//
// The format readers (safetensors.c, gguf.c) fill a container through the
// rg__weights_* functions below. graphs/ has no private header (weights.h is
// the public contract), so each user repeats the prototypes it needs; keep
// them in step.
#include "graphs/weights.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fileio.h"
#include "base/yaml.h"

// Shared with safetensors.c, gguf.c and testmodel.c.
int rg__weights_use_read;
rg_status_t rg__weights_map(rg_weights_t *w, const char *path, const uint8_t **base, uint64_t *size,
                            const char **stored_path);
rg_status_t rg__weights_add(rg_weights_t *w, const rg_tensor_t *t);
void *rg__weights_alloc(rg_weights_t *w, uint64_t size);
rg_status_t rg__weights_set_meta(rg_weights_t *w, const char *key, const char *value);
void rg__weights_set_gguf(rg_weights_t *w, void *g, void (*destroy)(void *));
void *rg__weights_gguf(const rg_weights_t *w);
rg_status_t rg__safetensors_open(rg_weights_t *w, const char *path);
rg_status_t rg__safetensors_open_index(rg_weights_t *w, const char *dir, const char *index);
rg_status_t rg__gguf_open(rg_weights_t *w, const char *path);
rg_status_t rg__gguf_arch(const rg_weights_t *w, rg_arch_t **out);
rg_status_t rg__gguf_hparams(const rg_weights_t *w, rg_weights_hparams_t *out);
rg_status_t rg__gguf_vocab(const rg_weights_t *w, const char *const **tokens,
                           const int32_t **token_types, size_t *n_tokens,
                           const char *const **merges, size_t *n_merges, const char **pre,
                           int32_t *bos, int32_t *eos);

int64_t rg_tensor_elems(const rg_tensor_t *t) {
  int64_t n = 1;
  for (int i = 0; i < t->n_dims; i++) n *= t->shape[i];
  return n;
}

const char *rg_rope_scaling_name(rg_rope_scaling_kind_t s) {
  static const char *const names[] = {
#define RG_X_(e, n) n,
      RG_ROPE_SCALING_MAP(RG_X_)
#undef RG_X_
  };
  _Static_assert(sizeof(names) / sizeof(names[0]) == RG_ROPE_SCALING_COUNT,
                 "rope scaling names out of step with RG_ROPE_SCALING_MAP");
  return (unsigned)s < RG_ROPE_SCALING_COUNT ? names[s] : "?";
}

rg_status_t rg_tensor_read_f32(const rg_tensor_t *t, int64_t first, int64_t count, float *out) {
  int64_t n = rg_tensor_elems(t);
  if (first < 0 || count < 0 || first > n || count > n - first)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "%s: tensor '%s': elements [%lld, +%lld) are outside its %lld", t->file,
                          t->name, (long long)first, (long long)count, (long long)n);
  int64_t be = rg_dtype_block_elems(t->type);
  if (!rg_dtype_has_codec(t->type))
    return rg_status_make(RG_UNIMPLEMENTED, "%s: tensor '%s': cannot convert %s to f32", t->file,
                          t->name, rg_dtype_name(t->type));
  if (first % be || count % be)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "%s: tensor '%s': %s is read in whole blocks of %lld elements", t->file,
                          t->name, rg_dtype_name(t->type), (long long)be);
  const uint8_t *p = (const uint8_t *)t->data + first / be * rg_dtype_block_bytes(t->type);
  return rg_dtype_to_f32(t->type, p, out, count);
}

// ----- the container -------------------------------------------------------------------

typedef struct {
  char *path;
  void *base;
  uint64_t size;
  int mapped;  // munmap (else free)
} mapping_t;

struct rg_weights_s {
  char *path;
  char *config_dir;  // where config.json is looked for; NULL for GGUF
  rg_weights_format_t format;
  rg_tensor_t *tensors;
  size_t n, cap;
  uint32_t *index;  // open addressing over tensors: i + 1, 0 = empty
  size_t index_cap;
  mapping_t *maps;
  size_t n_maps;
  void **owned;
  size_t n_owned;
  char **meta;  // key, value, key, value, ...
  size_t n_meta;
  void *gguf;
  void (*gguf_destroy)(void *);
};

static rg_status_t oom(const char *what) {
  return rg_status_make(RG_OUT_OF_MEMORY, "out of memory %s", what);
}

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return 1;
  size_t nc = *cap ? *cap * 2 : 16;
  while (nc < need) nc *= 2;
  void *np = realloc(*p, nc * elem);
  if (!np) return 0;
  *p = np;
  *cap = nc;
  return 1;
}

rg_status_t rg__weights_map(rg_weights_t *w, const char *path, const uint8_t **base, uint64_t *size,
                            const char **stored_path) {
  size_t cap = w->n_maps;
  if (!grow((void **)&w->maps, &cap, w->n_maps + 1, sizeof(*w->maps))) return oom("mapping files");
  // grow() sized the array to a power of two; n_maps is the count.
  char *copy = strdup(path);
  if (!copy) return oom("mapping files");
  int fd = -1;
  rg_status_t os = rg_file_open_regular(path, "weights file", &fd);
  if (os) {
    free(copy);
    return os;
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    close(fd);
    free(copy);
    return rg_status_make(RG_IO, "%s: cannot stat: %s", path, strerror(e));
  }
  if (st.st_size == 0) {
    close(fd);
    free(copy);
    return rg_status_make(RG_PARSE, "%s: the file is empty", path);
  }
  uint64_t sz = (uint64_t)st.st_size;
  void *p = NULL;
  int mapped = !rg__weights_use_read;
  if (mapped) {
    p = mmap(NULL, (size_t)sz, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      close(fd);
      free(copy);
      return rg_status_make(RG_IO, "%s: cannot map %llu bytes: %s", path, (unsigned long long)sz,
                            strerror(e));
    }
  } else {
    // Tests and fuzzers read into an exact-size heap block, so AddressSanitizer
    // sees any read past the end (a mapping rounds up to a whole page).
    p = malloc((size_t)sz);
    size_t got = 0;
    while (p && got < sz) {
      ssize_t r = read(fd, (char *)p + got, (size_t)(sz - got));
      if (r <= 0) break;
      got += (size_t)r;
    }
    if (!p || got != sz) {
      free(p);
      close(fd);
      free(copy);
      return rg_status_make(RG_IO, "%s: cannot read %llu bytes", path, (unsigned long long)sz);
    }
  }
  close(fd);
  w->maps[w->n_maps++] = (mapping_t){copy, p, sz, mapped};
  *base = p;
  *size = sz;
  *stored_path = copy;
  return NULL;
}

rg_status_t rg__weights_add(rg_weights_t *w, const rg_tensor_t *t) {
  // Far beyond any checkpoint (Kimi K2: ~70k expert matrices), and a bound
  // on what a hostile file of empty tensors can make ridge allocate.
  if (w->n >= RG_WEIGHTS_MAX_TENSORS)
    return rg_status_make(RG_PARSE, "%s: more than %d tensors", t->file, RG_WEIGHTS_MAX_TENSORS);
  if (!grow((void **)&w->tensors, &w->cap, w->n + 1, sizeof(*w->tensors)))
    return oom("listing tensors");
  w->tensors[w->n++] = *t;
  return NULL;
}

void *rg__weights_alloc(rg_weights_t *w, uint64_t size) {
  size_t cap = w->n_owned;
  if (size > SIZE_MAX - 64) return NULL;
  if (!grow((void **)&w->owned, &cap, w->n_owned + 1, sizeof(*w->owned))) return NULL;
  // 64-byte alignment suits every element type and vector loads.
  void *p = aligned_alloc(64, ((size_t)size + 63) & ~(size_t)63);
  if (!p) return NULL;
  w->owned[w->n_owned++] = p;
  return p;
}

rg_status_t rg__weights_set_meta(rg_weights_t *w, const char *key, const char *value) {
  size_t cap = w->n_meta * 2;
  if (!grow((void **)&w->meta, &cap, w->n_meta * 2 + 2, sizeof(*w->meta)))
    return oom("reading metadata");
  char *k = strdup(key), *v = strdup(value);
  if (!k || !v) {
    free(k);
    free(v);
    return oom("reading metadata");
  }
  w->meta[w->n_meta * 2] = k;
  w->meta[w->n_meta * 2 + 1] = v;
  w->n_meta++;
  return NULL;
}

void rg__weights_set_gguf(rg_weights_t *w, void *g, void (*destroy)(void *)) {
  w->gguf = g;
  w->gguf_destroy = destroy;
}

void *rg__weights_gguf(const rg_weights_t *w) {
  return w->gguf;
}

void rg_weights_release_pages(const rg_weights_t *w) {
  if (!w) return;
  for (size_t i = 0; i < w->n_maps; i++)
    if (w->maps[i].mapped) madvise(w->maps[i].base, (size_t)w->maps[i].size, MADV_DONTNEED);
}

void rg_weights_close(rg_weights_t *w) {
  if (!w) return;
  if (w->gguf_destroy) w->gguf_destroy(w->gguf);
  for (size_t i = 0; i < w->n_maps; i++) {
    if (w->maps[i].mapped)
      munmap(w->maps[i].base, (size_t)w->maps[i].size);
    else
      free(w->maps[i].base);
    free(w->maps[i].path);
  }
  for (size_t i = 0; i < w->n_owned; i++) free(w->owned[i]);
  for (size_t i = 0; i < w->n_meta * 2; i++) free(w->meta[i]);
  free(w->meta);
  free(w->owned);
  free(w->maps);
  free(w->tensors);
  free(w->index);
  free(w->path);
  free(w->config_dir);
  free(w);
}

static uint64_t hash_name(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
  return h;
}

// Builds the name index, rejecting a name that appears twice.
static rg_status_t build_index(rg_weights_t *w) {
  size_t cap = 16;
  while (cap < w->n * 2) cap *= 2;
  w->index = calloc(cap, sizeof(*w->index));
  if (!w->index) return oom("indexing tensors");
  w->index_cap = cap;
  for (size_t i = 0; i < w->n; i++) {
    const rg_tensor_t *t = &w->tensors[i];
    size_t h = (size_t)hash_name(t->name) & (cap - 1);
    while (w->index[h]) {
      const rg_tensor_t *o = &w->tensors[w->index[h] - 1];
      if (!strcmp(o->name, t->name)) {
        if (o->file == t->file || !strcmp(o->file, t->file))
          return rg_status_make(RG_PARSE, "%s: tensor '%s' appears twice", t->file, t->name);
        return rg_status_make(RG_PARSE, "tensor '%s' appears twice: in %s and in %s", t->name,
                              o->file, t->file);
      }
      h = (h + 1) & (cap - 1);
    }
    w->index[h] = (uint32_t)(i + 1);
  }
  return NULL;
}

static int ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && !strcmp(s + n - m, suffix);
}

// Whether anything is at path: a FIFO or a directory where a file belongs is
// then opened, and refused with a message that says what it is.
static int exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

// The directory part of path ("." when it has none).
static char *dir_of(const char *path) {
  const char *slash = strrchr(path, '/');
  if (!slash) return strdup(".");
  if (slash == path) return strdup("/");
  return strndup(path, (size_t)(slash - path));
}

rg_status_t rg_weights_open(const char *path, rg_weights_t **out) {
  if (!out) return rg_status_make(RG_INVALID_ARGUMENT, "rg_weights_open: no output given");
  *out = NULL;
  if (!path || !*path)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "no weights given: expected a model directory, a .safetensors file or "
                          "a .gguf file");
  rg_weights_t *w = calloc(1, sizeof(*w));
  if (!w || !(w->path = strdup(path))) {
    free(w);
    return oom("opening weights");
  }
  struct stat st;
  rg_status_t s = NULL;
  if (stat(path, &st) != 0) {
    s = rg_status_make(errno == ENOENT ? RG_NOT_FOUND : RG_IO, "%s: cannot open: %s", path,
                       strerror(errno));
  } else if (S_ISDIR(st.st_mode)) {
    w->format = RG_WEIGHTS_SAFETENSORS;
    w->config_dir = strdup(path);
    size_t len = strlen(path) + 64;
    char *index = malloc(len), *single = malloc(len);
    if (!w->config_dir || !index || !single) {
      s = oom("opening weights");
    } else {
      snprintf(index, len, "%s/model.safetensors.index.json", path);
      snprintf(single, len, "%s/model.safetensors", path);
      if (exists(index))
        s = rg__safetensors_open_index(w, path, index);
      else if (exists(single))
        s = rg__safetensors_open(w, single);
      else
        s = rg_status_make(RG_NOT_FOUND,
                           "%s: the directory holds neither model.safetensors nor "
                           "model.safetensors.index.json",
                           path);
    }
    free(index);
    free(single);
  } else if (ends_with(path, ".gguf")) {
    w->format = RG_WEIGHTS_GGUF;
    s = rg__gguf_open(w, path);
  } else {
    // A .safetensors file, or anything else that is not a directory or .gguf
    // (such as /proc/self/fd/N): sniff GGUF's magic, else read safetensors.
    // What is not a regular file is refused when it is mapped below.
    char magic[4] = {0};
    FILE *f = NULL;
    rg_status_free(rg_file_fopen_regular(path, "weights file", &f));
    if (f) {
      if (fread(magic, 1, 4, f) != 4) magic[0] = 0;
      fclose(f);
    }
    if (!memcmp(magic, "GGUF", 4)) {
      w->format = RG_WEIGHTS_GGUF;
      s = rg__gguf_open(w, path);
    } else {
      w->format = RG_WEIGHTS_SAFETENSORS;
      w->config_dir = dir_of(path);
      s = w->config_dir ? rg__safetensors_open(w, path) : oom("opening weights");
    }
  }
  if (!s) s = build_index(w);
  if (s) {
    rg_weights_close(w);
    return s;
  }
  *out = w;
  return NULL;
}

rg_weights_format_t rg_weights_format(const rg_weights_t *w) {
  return w->format;
}

const char *rg_weights_path(const rg_weights_t *w) {
  return w->path;
}

size_t rg_weights_count(const rg_weights_t *w) {
  return w ? w->n : 0;
}

const rg_tensor_t *rg_weights_at(const rg_weights_t *w, size_t i) {
  return w && i < w->n ? &w->tensors[i] : NULL;
}

const rg_tensor_t *rg_weights_find(const rg_weights_t *w, const char *name) {
  if (!w || !name || !w->index_cap) return NULL;
  size_t h = (size_t)hash_name(name) & (w->index_cap - 1);
  while (w->index[h]) {
    const rg_tensor_t *t = &w->tensors[w->index[h] - 1];
    if (!strcmp(t->name, name)) return t;
    h = (h + 1) & (w->index_cap - 1);
  }
  return NULL;
}

const char *rg_weights_meta_str(const rg_weights_t *w, const char *key) {
  for (size_t i = 0; w && i < w->n_meta; i++)
    if (!strcmp(w->meta[2 * i], key)) return w->meta[2 * i + 1];
  return NULL;
}

// ----- expectations ------------------------------------------------------------------

static void fmt_shape(char *buf, size_t len, int n_dims, const int64_t *shape) {
  size_t u = 0;
  u += (size_t)snprintf(buf + u, len - u, "[");
  for (int i = 0; i < n_dims && u < len; i++)
    u += (size_t)snprintf(buf + u, len - u, "%s%lld", i ? ", " : "", (long long)shape[i]);
  if (u < len) snprintf(buf + u, len - u, "]");
}

rg_status_t rg_weights_expect(const rg_weights_t *w, const char *name, int n_dims,
                              const int64_t *shape, const rg_tensor_t **out) {
  if (out) *out = NULL;
  const rg_tensor_t *t = rg_weights_find(w, name);
  if (!t) return rg_status_make(RG_NOT_FOUND, "%s: missing tensor '%s'", w->path, name);
  int same = t->n_dims == n_dims;
  for (int i = 0; same && i < n_dims; i++) same = t->shape[i] == shape[i];
  if (!same) {
    char have[128], want[128];
    fmt_shape(have, sizeof(have), t->n_dims, t->shape);
    fmt_shape(want, sizeof(want), n_dims, shape);
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "%s: tensor '%s': shape %s but the config implies %s", t->file, name,
                          have, want);
  }
  if (!rg_dtype_is_weight(t->type))
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "%s: tensor '%s': dtype %s where a float or Q8_0 weight is expected",
                          t->file, name, rg_dtype_name(t->type));
  if (out) *out = t;
  return NULL;
}

static rg_status_t expect1(const rg_weights_t *w, const char *name, int64_t d0) {
  int64_t s[1] = {d0};
  return rg_weights_expect(w, name, 1, s, NULL);
}

static rg_status_t expect2(const rg_weights_t *w, const char *name, int64_t d0, int64_t d1) {
  int64_t s[2] = {d0, d1};
  return rg_weights_expect(w, name, 2, s, NULL);
}

// A tensor of a layer past the ones the config declares: the engine loads
// layers 0 .. n_layers-1 only, so a config that undercounts would silently
// run a truncated model. (DeepSeek's multi-token-prediction layers sit past
// num_hidden_layers on purpose; rg_weights_check does not take that family.)
static rg_status_t check_no_extra_layers(const rg_weights_t *w, const rg_arch_t *a) {
  static const char prefix[] = "model.layers.";
  for (size_t i = 0; i < w->n; i++) {
    const rg_tensor_t *t = &w->tensors[i];
    if (strncmp(t->name, prefix, sizeof prefix - 1) != 0) continue;
    const char *p = t->name + sizeof prefix - 1;
    char *end;
    long long l = strtoll(p, &end, 10);
    if (end == p || *end != '.' || l < a->n_layers) continue;
    if (w->format == RG_WEIGHTS_GGUF)
      return rg_status_make(RG_INVALID_ARGUMENT,
                            "%s: tensor '%s' is for layer %lld, but the GGUF metadata declares "
                            "%lld layers (block_count); ridge runs exactly the declared layers",
                            t->file, t->name, l, (long long)a->n_layers);
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "%s: tensor '%s' is for layer %lld, but %s/config.json declares "
                          "num_hidden_layers = %lld (layers 0 to %lld); ridge runs exactly the "
                          "declared layers, so fix num_hidden_layers or the weights",
                          t->file, t->name, l, w->config_dir, (long long)a->n_layers,
                          (long long)a->n_layers - 1);
  }
  return NULL;
}

rg_status_t rg_weights_check(const rg_weights_t *w, const rg_arch_t *a) {
  if (!rg_family_has(a->family, RG_FAM_RUNS) || a->mla) {
    char list[256];
    return rg_status_make(
        RG_UNIMPLEMENTED, "%s: checking tensors of family '%s' is not supported; ridge checks %s",
        w->path, rg_family_name(a->family), rg_family_list(RG_FAM_RUNS, list, sizeof list));
  }
  int mixtral = rg_family_has(a->family, RG_FAM_MIXTRAL_MOE);
  const int64_t d = a->d_model, hd = a->head_dim, q = a->n_heads * hd, kv = a->n_kv_heads * hd;
  char n[RG_TENSOR_NAME_MAX];
  RG_RETURN_IF_ERROR(check_no_extra_layers(w, a));
  RG_RETURN_IF_ERROR(expect2(w, "model.embed_tokens.weight", a->vocab, d));
  for (int64_t l = 0; l < a->n_layers; l++) {
#define NM(...) (snprintf(n, sizeof(n), __VA_ARGS__), n)
    RG_RETURN_IF_ERROR(expect1(w, NM("model.layers.%lld.input_layernorm.weight", (long long)l), d));
    RG_RETURN_IF_ERROR(
        expect2(w, NM("model.layers.%lld.self_attn.q_proj.weight", (long long)l), q, d));
    RG_RETURN_IF_ERROR(
        expect2(w, NM("model.layers.%lld.self_attn.k_proj.weight", (long long)l), kv, d));
    RG_RETURN_IF_ERROR(
        expect2(w, NM("model.layers.%lld.self_attn.v_proj.weight", (long long)l), kv, d));
    RG_RETURN_IF_ERROR(
        expect2(w, NM("model.layers.%lld.self_attn.o_proj.weight", (long long)l), d, q));
    if (a->qkv_bias) {
      RG_RETURN_IF_ERROR(
          expect1(w, NM("model.layers.%lld.self_attn.q_proj.bias", (long long)l), q));
      RG_RETURN_IF_ERROR(
          expect1(w, NM("model.layers.%lld.self_attn.k_proj.bias", (long long)l), kv));
      RG_RETURN_IF_ERROR(
          expect1(w, NM("model.layers.%lld.self_attn.v_proj.bias", (long long)l), kv));
    }
    if (a->o_bias)
      RG_RETURN_IF_ERROR(
          expect1(w, NM("model.layers.%lld.self_attn.o_proj.bias", (long long)l), d));
    if (a->qk_norm) {
      RG_RETURN_IF_ERROR(
          expect1(w, NM("model.layers.%lld.self_attn.q_norm.weight", (long long)l), hd));
      RG_RETURN_IF_ERROR(
          expect1(w, NM("model.layers.%lld.self_attn.k_norm.weight", (long long)l), hd));
    }
    RG_RETURN_IF_ERROR(
        expect1(w, NM("model.layers.%lld.post_attention_layernorm.weight", (long long)l), d));
    if (rg_arch_layer_is_moe(a, l)) {
      const char *moe = mixtral ? "block_sparse_moe" : "mlp";
      const int64_t f = a->d_ff_expert;
      RG_RETURN_IF_ERROR(
          expect2(w, NM("model.layers.%lld.%s.gate.weight", (long long)l, moe), a->n_experts, d));
      static const char *const mix[3] = {"w1", "w3", "w2"};
      static const char *const qw[3] = {"gate_proj", "up_proj", "down_proj"};
      for (int64_t e = 0; e < a->n_experts; e++) {
        for (int k = 0; k < 3; k++) {
          NM("model.layers.%lld.%s.experts.%lld.%s.weight", (long long)l, moe, (long long)e,
             mixtral ? mix[k] : qw[k]);
          RG_RETURN_IF_ERROR(k < 2 ? expect2(w, n, f, d) : expect2(w, n, d, f));
        }
      }
    } else {
      const int64_t f = a->d_ff;
      RG_RETURN_IF_ERROR(
          expect2(w, NM("model.layers.%lld.mlp.gate_proj.weight", (long long)l), f, d));
      RG_RETURN_IF_ERROR(
          expect2(w, NM("model.layers.%lld.mlp.up_proj.weight", (long long)l), f, d));
      RG_RETURN_IF_ERROR(
          expect2(w, NM("model.layers.%lld.mlp.down_proj.weight", (long long)l), d, f));
    }
#undef NM
  }
  RG_RETURN_IF_ERROR(expect1(w, "model.norm.weight", d));
  if (!a->tie_embeddings) RG_RETURN_IF_ERROR(expect2(w, "lm_head.weight", a->vocab, d));
  return NULL;
}

// ----- architecture and hyperparameters ---------------------------------------------------

static char *config_path(const rg_weights_t *w) {
  size_t len = strlen(w->config_dir) + 16;
  char *p = malloc(len);
  if (p) snprintf(p, len, "%s/config.json", w->config_dir);
  return p;
}

rg_status_t rg_weights_arch(const rg_weights_t *w, rg_arch_t **out) {
  if (!out) return rg_status_make(RG_INVALID_ARGUMENT, "rg_weights_arch: no output given");
  *out = NULL;
  if (w->format == RG_WEIGHTS_GGUF) return rg__gguf_arch(w, out);
  char *cfg = config_path(w);
  if (!cfg) return oom("reading config.json");
  rg_status_t s = NULL;
  if (!exists(cfg))
    s = rg_status_make(RG_NOT_FOUND, "%s: no config.json beside the weights (looked for %s)",
                       w->path, cfg);
  else
    s = rg_model_load(cfg, NULL, out);
  free(cfg);
  return s;
}

static rg_status_t cfg_token_id(const rg_node_t *root, const char *key, int32_t *out) {
  const rg_node_t *n = rg_node_get(root, key);
  if (!n || rg_node_is_null(n)) return NULL;
  // eos_token_id may be a list (Llama 3 Instruct): the first one ends a turn
  // as well as any.
  if (n->kind == RG_NODE_SEQ) {
    if (n->n == 0) return NULL;
    n = n->items[0];
  }
  long long v = -1;
  RG_RETURN_IF_ERROR(rg_node_int(n, key, 0, INT32_MAX, &v));
  *out = (int32_t)v;
  return NULL;
}

static rg_status_t read_rope_scaling(const rg_node_t *root, rg_weights_hparams_t *hp) {
  const rg_node_t *rs = rg_node_get(root, "rope_scaling");
  if (!rs || rg_node_is_null(rs)) return NULL;
  RG_RETURN_IF_ERROR(rg_node_expect(rs, RG_NODE_MAP, "rope_scaling"));
  const char *key = rg_node_get(rs, "rope_type") ? "rope_type" : "type";
  const char *type = NULL;
  RG_RETURN_IF_ERROR(rg_cfg_str(rs, key, 0, &type));
  if (!type) return rg_node_missing(rs, "rope_type", "rope_scaling");
  if (!strcmp(type, "default")) return NULL;
  if (!strcmp(type, "linear")) {
    hp->rope_scaling = RG_ROPE_SCALING_LINEAR;
  } else if (!strcmp(type, "llama3")) {
    hp->rope_scaling = RG_ROPE_SCALING_LLAMA3;
  } else if (!strcmp(type, "yarn")) {
    hp->rope_scaling = RG_ROPE_SCALING_YARN;
  } else if (!strcmp(type, "dynamic")) {
    hp->rope_scaling = RG_ROPE_SCALING_DYNAMIC;
  } else {
    return rg_status_at(RG_UNIMPLEMENTED, &rg_node_get(rs, key)->pos,
                        "rope_scaling: %s '%s' is not supported; ridge reads default, linear, "
                        "llama3, yarn and dynamic",
                        key, type);
  }
  RG_RETURN_IF_ERROR(rg_cfg_num(rs, "factor", 1, 1e-6, 1e6, &hp->rope_factor));
  long long orig = 0;
  int llama3 = hp->rope_scaling == RG_ROPE_SCALING_LLAMA3;
  RG_RETURN_IF_ERROR(
      rg_cfg_int(rs, "original_max_position_embeddings", llama3, 1, 1LL << 32, &orig));
  hp->rope_original_max = orig;
  if (llama3) {
    RG_RETURN_IF_ERROR(rg_cfg_num(rs, "low_freq_factor", 1, 1e-6, 1e6, &hp->rope_low_freq_factor));
    RG_RETURN_IF_ERROR(
        rg_cfg_num(rs, "high_freq_factor", 1, 1e-6, 1e6, &hp->rope_high_freq_factor));
    if (!(hp->rope_high_freq_factor > hp->rope_low_freq_factor))
      return rg_status_at(RG_INVALID_ARGUMENT, &rg_node_get(rs, "high_freq_factor")->pos,
                          "rope_scaling: high_freq_factor = %g must exceed low_freq_factor = %g",
                          hp->rope_high_freq_factor, hp->rope_low_freq_factor);
  }
  return NULL;
}

// Checks the rope scaling parameters an engine will divide by.
rg_status_t rg__check_rope_scaling(const char *file, const rg_weights_hparams_t *hp);
rg_status_t rg__check_rope_scaling(const char *file, const rg_weights_hparams_t *hp) {
  if (hp->rope_scaling == RG_ROPE_SCALING_NONE || hp->rope_scaling == RG_ROPE_SCALING_FREQS)
    return NULL;
  if (!(hp->rope_factor > 0) || !isfinite(hp->rope_factor))
    return rg_status_make(RG_INVALID_ARGUMENT, "%s: rope scaling factor %g must be positive", file,
                          hp->rope_factor);
  if (hp->rope_scaling == RG_ROPE_SCALING_LLAMA3 &&
      !(hp->rope_low_freq_factor > 0 && hp->rope_high_freq_factor > hp->rope_low_freq_factor &&
        isfinite(hp->rope_high_freq_factor) && hp->rope_original_max > 0))
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "%s: llama3 rope scaling needs 0 < low_freq_factor (%g) < "
                          "high_freq_factor (%g) and original_max_position_embeddings (%lld) > 0",
                          file, hp->rope_low_freq_factor, hp->rope_high_freq_factor,
                          (long long)hp->rope_original_max);
  return NULL;
}

// Defaults as the transformers config classes set them.
static void default_hparams(const rg_arch_t *a, rg_weights_hparams_t *hp) {
  memset(hp, 0, sizeof(*hp));
  int mixtral = a->family == RG_FAMILY_MIXTRAL;  // transformers' MixtralConfig defaults
  hp->rms_norm_eps = mixtral ? 1e-5 : 1e-6;
  hp->rope_theta = a->rope_theta > 0 ? a->rope_theta : mixtral ? 1e6 : 10000.0;
  hp->rope_scaling = RG_ROPE_SCALING_NONE;
  hp->rope_factor = 1.0;
  hp->tie_embeddings = a->tie_embeddings;
  hp->norm_topk_prob = mixtral;
  hp->bos = hp->eos = -1;
}

void rg__weights_default_hparams(const rg_arch_t *a, rg_weights_hparams_t *hp);
void rg__weights_default_hparams(const rg_arch_t *a, rg_weights_hparams_t *hp) {
  default_hparams(a, hp);
}

rg_status_t rg_weights_hparams(const rg_weights_t *w, rg_weights_hparams_t *out) {
  if (w->format == RG_WEIGHTS_GGUF) return rg__gguf_hparams(w, out);
  rg_arch_t *a = NULL;
  RG_RETURN_IF_ERROR(rg_weights_arch(w, &a));
  default_hparams(a, out);
  rg_arch_destroy(a);
  char *cfg = config_path(w);
  if (!cfg) return oom("reading config.json");
  rg_doc_t *doc = NULL;
  rg_status_t s = rg_doc_load_file(cfg, &doc);
  free(cfg);
  if (s) return s;
  const rg_node_t *root = rg_doc_root(doc);
  s = rg_cfg_num(root, "rms_norm_eps", 0, 1e-12, 1.0, &out->rms_norm_eps);
  if (!s) s = read_rope_scaling(root, out);
  if (!s) s = rg_cfg_bool(root, "norm_topk_prob", 0, &out->norm_topk_prob);
  if (!s) s = cfg_token_id(root, "bos_token_id", &out->bos);
  if (!s) s = cfg_token_id(root, "eos_token_id", &out->eos);
  rg_doc_destroy(doc);
  return s;
}

rg_status_t rg_rope_inv_freq(const rg_weights_hparams_t *hp, int64_t rot_dim, double *out) {
  if (rot_dim < 2 || rot_dim % 2)
    return rg_status_make(RG_INVALID_ARGUMENT, "rotary dims must be even and >= 2, got %lld",
                          (long long)rot_dim);
  if (!(hp->rope_theta > 1.0))
    return rg_status_make(RG_INVALID_ARGUMENT, "rope_theta = %g must exceed 1", hp->rope_theta);
  int64_t half = rot_dim / 2;
  if (hp->rope_scaling == RG_ROPE_SCALING_FREQS && hp->n_rope_freq_factors < half)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "rope_freqs holds %lld factors; %lld rotary dims need %lld",
                          (long long)hp->n_rope_freq_factors, (long long)rot_dim, (long long)half);
  for (int64_t i = 0; i < half; i++) {
    double f = pow(hp->rope_theta, -2.0 * (double)i / (double)rot_dim);
    switch (hp->rope_scaling) {
      case RG_ROPE_SCALING_NONE:
        break;
      case RG_ROPE_SCALING_LINEAR:
        f /= hp->rope_factor;
        break;
      case RG_ROPE_SCALING_LLAMA3: {
        // Meta's rule (transformers _compute_llama3_parameters): wavelengths
        // shorter than original/high_freq_factor keep their frequency, longer
        // than original/low_freq_factor are divided by factor, and the band
        // between blends the two.
        double orig = (double)hp->rope_original_max;
        double wavelen = 2.0 * M_PI / f;
        double low_wl = orig / hp->rope_low_freq_factor, high_wl = orig / hp->rope_high_freq_factor;
        if (wavelen > low_wl) {
          f /= hp->rope_factor;
        } else if (wavelen >= high_wl) {
          double smooth = (orig / wavelen - hp->rope_low_freq_factor) /
                          (hp->rope_high_freq_factor - hp->rope_low_freq_factor);
          f = (1.0 - smooth) * f / hp->rope_factor + smooth * f;
        }
        break;
      }
      case RG_ROPE_SCALING_FREQS:
        if (!(hp->rope_freq_factors[i] > 0))
          return rg_status_make(RG_INVALID_ARGUMENT, "rope_freqs[%lld] = %g must be positive",
                                (long long)i, (double)hp->rope_freq_factors[i]);
        f /= (double)hp->rope_freq_factors[i];
        break;
      default:
        return rg_status_make(RG_UNIMPLEMENTED, "rope scaling '%s' is not implemented",
                              rg_rope_scaling_name(hp->rope_scaling));
    }
    out[i] = f;
  }
  return NULL;
}

rg_status_t rg_weights_gguf_vocab(const rg_weights_t *w, const char *const **tokens,
                                  const int32_t **token_types, size_t *n_tokens,
                                  const char *const **merges, size_t *n_merges, const char **pre,
                                  int32_t *bos, int32_t *eos) {
  if (w->format != RG_WEIGHTS_GGUF)
    return rg_status_make(RG_NOT_FOUND, "%s: not a GGUF file, so it holds no tokenizer.ggml.*",
                          w->path);
  return rg__gguf_vocab(w, tokens, token_types, n_tokens, merges, n_merges, pre, bos, eos);
}

// ----- llama.cpp's Q/K permutation --------------------------------------------------------

rg_status_t rg_weights_qk_permute(void *dst, const void *src, int64_t rows, uint64_t row_bytes,
                                  int64_t n_groups, int inverse) {
  if (n_groups < 1 || rows < 0 || rows % n_groups || (rows / n_groups) % 2)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "%lld rows do not split into %lld heads of an even size", (long long)rows,
                          (long long)n_groups);
  // Rows of no bytes (a tensor with a zero dimension) have nothing to move;
  // a hostile file's 2^40 of them must not be walked one by one.
  if (row_bytes == 0) return NULL;
  const int64_t hd = rows / n_groups, half = hd / 2;
  uint8_t *d = dst;
  const uint8_t *s = src;
  for (int64_t h = 0; h < n_groups; h++) {
    for (int64_t j = 0; j < half; j++) {
      for (int64_t k = 0; k < 2; k++) {
        int64_t g = h * hd + 2 * j + k, f = h * hd + k * half + j;  // gguf row, hf row
        int64_t to = inverse ? f : g, from = inverse ? g : f;
        memcpy(d + (uint64_t)to * row_bytes, s + (uint64_t)from * row_bytes, row_bytes);
      }
    }
  }
  return NULL;
}
