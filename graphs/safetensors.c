// graphs/safetensors.c — reading and writing safetensors files.
//
// A safetensors file is an 8-byte little-endian header length N, N bytes of
// JSON, then the data section. The JSON maps each tensor name to
// {"dtype", "shape", "data_offsets": [begin, end]} with offsets relative to
// the data section, plus an optional "__metadata__" map of strings. Sharded
// checkpoints add model.safetensors.index.json, {"weight_map": {name: shard}}.
//
// Everything in the header is checked before it is used: the length against
// the file and a cap, every number for integrality and range, every product
// for overflow, every tensor's byte range against the data section and the
// other tensors'. Messages name the file and the tensor.
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/fileio.h"
#include "graphs/weights.h"

// Defined in weights.c.
rg_status_t rg__weights_map(rg_weights_t *w, const char *path, const uint8_t **base, uint64_t *size,
                            const char **stored_path);
rg_status_t rg__weights_add(rg_weights_t *w, const rg_tensor_t *t);
void *rg__weights_alloc(rg_weights_t *w, uint64_t size);
rg_status_t rg__weights_set_meta(rg_weights_t *w, const char *key, const char *value);
rg_status_t rg__safetensors_open(rg_weights_t *w, const char *path);
rg_status_t rg__safetensors_open_index(rg_weights_t *w, const char *dir, const char *index);

// Integers in JSON are doubles to cJSON; beyond 2^53 they are not exact.
#define MAX_JSON_INT 9007199254740992.0

// The safetensors spellings come from base/dtype.h's table.
static int st_dtype(const char *s, rg_dtype_t *out) {
  return rg_dtype_from_safetensors(s, out) == 0;
}

static int st_writable(rg_dtype_t t) {
  return rg_dtype_safetensors_name(t) != NULL;
}

static uint64_t rd_le64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

// A JSON number that must be a whole number in [0, 2^53].
static int json_uint(const cJSON *n, uint64_t *out) {
  if (!cJSON_IsNumber(n)) return 0;
  double v = n->valuedouble;
  if (!isfinite(v) || v < 0 || v > MAX_JSON_INT || floor(v) != v) return 0;
  *out = (uint64_t)v;
  return 1;
}

// What a tensor's name looks like in a message: cut when absurdly long.
static const char *shown(const char *name, char *buf, size_t len) {
  size_t n = strlen(name);
  if (n < 100) return name;
  snprintf(buf, len, "%.80s...", name);
  return buf;
}

typedef struct {
  uint64_t begin, end;
  const char *name;
} span_t;

static int cmp_span(const void *x, const void *y) {
  const span_t *a = x, *b = y;
  if (a->begin != b->begin) return a->begin < b->begin ? -1 : 1;
  return a->end < b->end ? -1 : a->end > b->end;
}

static rg_status_t parse_tensor(rg_weights_t *w, const char *file, const cJSON *item,
                                const uint8_t *data, uint64_t data_size, span_t *span) {
  char nb[128];
  const char *name = shown(item->string, nb, sizeof(nb));
  if (strlen(item->string) >= RG_TENSOR_NAME_MAX)
    return rg_status_make(RG_PARSE, "%s: tensor '%s': the name is longer than %d bytes", file, name,
                          RG_TENSOR_NAME_MAX - 1);
  if (!item->string[0]) return rg_status_make(RG_PARSE, "%s: a tensor has an empty name", file);
  if (!cJSON_IsObject(item))
    return rg_status_make(RG_PARSE,
                          "%s: tensor '%s': expected an object with dtype, shape and "
                          "data_offsets",
                          file, name);
  rg_tensor_t t;
  memset(&t, 0, sizeof(t));
  snprintf(t.name, sizeof(t.name), "%s", item->string);
  t.file = file;

  const cJSON *dt = cJSON_GetObjectItemCaseSensitive(item, "dtype");
  if (!cJSON_IsString(dt))
    return rg_status_make(RG_PARSE, "%s: tensor '%s': dtype is missing or not a string", file,
                          name);
  if (!st_dtype(dt->valuestring, &t.type))
    return rg_status_make(RG_PARSE,
                          "%s: tensor '%s': unknown dtype '%.32s'; ridge reads F64, F32, F16, "
                          "BF16, F8_E4M3, F8_E5M2, I64, I32, I16, I8, U8 and BOOL",
                          file, name, dt->valuestring);

  const cJSON *sh = cJSON_GetObjectItemCaseSensitive(item, "shape");
  if (!cJSON_IsArray(sh))
    return rg_status_make(RG_PARSE, "%s: tensor '%s': shape is missing or not a list", file, name);
  int n_dims = cJSON_GetArraySize(sh);
  if (n_dims > RG_TENSOR_MAX_DIMS)
    return rg_status_make(RG_PARSE, "%s: tensor '%s': %d dims; ridge reads at most %d", file, name,
                          n_dims, RG_TENSOR_MAX_DIMS);
  t.n_dims = n_dims;
  int64_t elems = 1;
  int overflow = 0;
  for (int i = 0; i < n_dims; i++) {
    const cJSON *d = cJSON_GetArrayItem(sh, i);
    uint64_t v = 0;
    if (!json_uint(d, &v))
      return rg_status_make(RG_PARSE,
                            "%s: tensor '%s': shape[%d] is not a whole number from 0 to 2^53", file,
                            name, i);
    t.shape[i] = (int64_t)v;
    overflow |= __builtin_mul_overflow(elems, t.shape[i], &elems);
  }
  int ok = !overflow;
  if (ok) t.nbytes = rg_dtype_nbytes(t.type, elems, &ok);
  if (!ok)
    return rg_status_make(
        RG_PARSE, "%s: tensor '%s': the shape holds more bytes than fit in 64 bits", file, name);

  const cJSON *off = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
  uint64_t begin = 0, end = 0;
  if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2 ||
      !json_uint(cJSON_GetArrayItem(off, 0), &begin) ||
      !json_uint(cJSON_GetArrayItem(off, 1), &end))
    return rg_status_make(RG_PARSE,
                          "%s: tensor '%s': data_offsets must be a list of two whole numbers "
                          "[begin, end] from 0 to 2^53",
                          file, name);
  if (begin > end)
    return rg_status_make(RG_PARSE,
                          "%s: tensor '%s': data_offsets [%llu, %llu] end before they begin", file,
                          name, (unsigned long long)begin, (unsigned long long)end);
  if (end - begin != t.nbytes)
    return rg_status_make(RG_PARSE,
                          "%s: tensor '%s': data_offsets [%llu, %llu] hold %llu bytes but %lld "
                          "elements of %s take %llu",
                          file, name, (unsigned long long)begin, (unsigned long long)end,
                          (unsigned long long)(end - begin), (long long)elems,
                          rg_dtype_name(t.type), (unsigned long long)t.nbytes);
  if (end > data_size)
    return rg_status_make(RG_PARSE,
                          "%s: tensor '%s': data_offsets [%llu, %llu] run past the end of the data "
                          "(%llu bytes)",
                          file, name, (unsigned long long)begin, (unsigned long long)end,
                          (unsigned long long)data_size);
  t.data = data + begin;
  // Keep element access aligned: a file is free to place a tensor at any
  // byte, so copy the rare one that is not on its element size.
  uint64_t align = (uint64_t)rg_dtype_block_bytes(t.type);
  if (t.nbytes && (uintptr_t)t.data % align) {
    void *copy = rg__weights_alloc(w, t.nbytes);
    if (!copy)
      return rg_status_make(RG_OUT_OF_MEMORY, "%s: tensor '%s': out of memory copying %llu bytes",
                            file, name, (unsigned long long)t.nbytes);
    memcpy(copy, t.data, t.nbytes);
    t.data = copy;
  }
  *span = (span_t){begin, end, item->string};
  return rg__weights_add(w, &t);
}

static rg_status_t parse_header(rg_weights_t *w, const char *file, const cJSON *root,
                                const uint8_t *data, uint64_t data_size) {
  if (!cJSON_IsObject(root))
    return rg_status_make(RG_PARSE, "%s: the header is not a JSON object", file);
  size_t n = 0;
  for (const cJSON *c = root->child; c; c = c->next) n++;
  span_t *spans = calloc(n ? n : 1, sizeof(*spans));
  if (!spans) return rg_status_make(RG_OUT_OF_MEMORY, "%s: out of memory reading the header", file);
  size_t ns = 0;
  rg_status_t s = NULL;
  for (const cJSON *c = root->child; c && !s; c = c->next) {
    if (!strcmp(c->string, "__metadata__")) {
      if (!cJSON_IsObject(c)) {
        s = rg_status_make(RG_PARSE, "%s: __metadata__ is not a JSON object", file);
        break;
      }
      for (const cJSON *m = c->child; m && !s; m = m->next) {
        if (!cJSON_IsString(m))
          s = rg_status_make(RG_PARSE, "%s: __metadata__ '%.60s' is not a string", file, m->string);
        else
          s = rg__weights_set_meta(w, m->string, m->valuestring);
      }
      continue;
    }
    s = parse_tensor(w, file, c, data, data_size, &spans[ns]);
    if (!s) ns++;
  }
  if (!s) {
    // Byte ranges may not overlap; empty tensors take no room.
    qsort(spans, ns, sizeof(*spans), cmp_span);
    const span_t *reach = NULL;  // the non-empty span reaching furthest so far
    for (size_t i = 0; i < ns && !s; i++) {
      if (spans[i].end == spans[i].begin) continue;
      if (reach && spans[i].begin < reach->end) {
        char b1[128], b2[128];
        s = rg_status_make(RG_PARSE,
                           "%s: tensor '%s': data_offsets [%llu, %llu] overlap tensor '%s' at "
                           "[%llu, %llu]",
                           file, shown(spans[i].name, b1, sizeof(b1)),
                           (unsigned long long)spans[i].begin, (unsigned long long)spans[i].end,
                           shown(reach->name, b2, sizeof(b2)), (unsigned long long)reach->begin,
                           (unsigned long long)reach->end);
      }
      if (!reach || spans[i].end > reach->end) reach = &spans[i];
    }
  }
  free(spans);
  return s;
}

rg_status_t rg__safetensors_open(rg_weights_t *w, const char *path) {
  const uint8_t *base = NULL;
  uint64_t size = 0;
  const char *file = NULL;
  RG_RETURN_IF_ERROR(rg__weights_map(w, path, &base, &size, &file));
  if (size < 8)
    return rg_status_make(RG_PARSE,
                          "%s: %llu bytes is too short for a safetensors file (an 8-byte header "
                          "length, then JSON)",
                          file, (unsigned long long)size);
  uint64_t n = rd_le64(base);
  if (n > RG_SAFETENSORS_MAX_HEADER)
    return rg_status_make(RG_PARSE,
                          "%s: header length %llu exceeds the %u MB limit (is this a safetensors "
                          "file?)",
                          file, (unsigned long long)n, RG_SAFETENSORS_MAX_HEADER >> 20);
  if (n > size - 8)
    return rg_status_make(RG_PARSE,
                          "%s: header length %llu runs past the end of the file (%llu bytes)", file,
                          (unsigned long long)n, (unsigned long long)size);
  const char *json = (const char *)base + 8;
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(json, (size_t)n, &end, 0);
  if (!root) {
    size_t at = end && end >= json && end <= json + n ? (size_t)(end - json) : 0;
    return rg_status_make(RG_PARSE, "%s: the header is not valid JSON (near byte %zu of %llu)",
                          file, at + 8, (unsigned long long)n);
  }
  // Only spaces may follow the JSON (writers pad the header for alignment).
  for (const char *p = end; p && p < json + n; p++) {
    if (*p != ' ' && *p != '\n' && *p != '\r' && *p != '\t' && *p != 0) {
      cJSON_Delete(root);
      return rg_status_make(RG_PARSE, "%s: unexpected bytes after the header's JSON at byte %zu",
                            file, (size_t)(p - json) + 8);
    }
  }
  rg_status_t s = parse_header(w, file, root, base + 8 + n, size - 8 - n);
  cJSON_Delete(root);
  return s;
}

// ----- sharded checkpoints ---------------------------------------------------------------

static rg_status_t read_small_file(const char *path, char **out, size_t *len) {
  FILE *f = NULL;
  RG_RETURN_IF_ERROR(rg_file_fopen_regular(path, "safetensors index", &f));
  char *buf = NULL;
  size_t n = 0, cap = 0;
  for (;;) {
    if (n == cap) {
      if (cap >= RG_SAFETENSORS_MAX_HEADER) {
        free(buf);
        fclose(f);
        return rg_status_make(RG_PARSE, "%s: larger than the %u MB limit for an index", path,
                              RG_SAFETENSORS_MAX_HEADER >> 20);
      }
      cap = cap ? cap * 2 : 65536;
      char *nb = realloc(buf, cap);
      if (!nb) {
        free(buf);
        fclose(f);
        return rg_status_make(RG_OUT_OF_MEMORY, "%s: out of memory reading it", path);
      }
      buf = nb;
    }
    size_t got = fread(buf + n, 1, cap - n, f);
    n += got;
    if (got == 0) break;
  }
  fclose(f);
  *out = buf;
  *len = n;
  return NULL;
}

typedef struct {
  const char *name, *shard;
} mapped_t;

static int cmp_mapped(const void *x, const void *y) {
  return strcmp(((const mapped_t *)x)->name, ((const mapped_t *)y)->name);
}

rg_status_t rg__safetensors_open_index(rg_weights_t *w, const char *dir, const char *index) {
  char *text = NULL;
  size_t len = 0;
  RG_RETURN_IF_ERROR(read_small_file(index, &text, &len));
  cJSON *root = cJSON_ParseWithLength(text, len);
  free(text);
  if (!root) return rg_status_make(RG_PARSE, "%s: not valid JSON", index);
  rg_status_t s = NULL;
  const cJSON *map = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
  const char **shards = NULL;
  mapped_t *tensors = NULL;
  size_t n_shards = 0, n_map = 0;
  char *path = NULL, *seen = NULL;
  if (!cJSON_IsObject(map)) {
    s = rg_status_make(RG_PARSE, "%s: weight_map is missing or not an object", index);
    goto done;
  }
  for (const cJSON *c = map->child; c; c = c->next) n_map++;
  shards = calloc(n_map ? n_map : 1, sizeof(*shards));
  tensors = calloc(n_map ? n_map : 1, sizeof(*tensors));
  path = malloc(strlen(dir) + 512);
  if (!shards || !tensors || !path) {
    s = rg_status_make(RG_OUT_OF_MEMORY, "%s: out of memory", index);
    goto done;
  }
  size_t i = 0;
  for (const cJSON *c = map->child; c; c = c->next, i++) {
    if (!cJSON_IsString(c)) {
      s = rg_status_make(RG_PARSE, "%s: weight_map['%.80s'] is not a file name", index, c->string);
      goto done;
    }
    const char *f = c->valuestring;
    // Shards are plain names in the index's directory; a path would let an
    // index reach files outside the checkpoint.
    if (!*f || strchr(f, '/') || !strcmp(f, ".") || !strcmp(f, "..") || strlen(f) > 255) {
      s = rg_status_make(RG_PARSE,
                         "%s: weight_map['%.80s'] = '%.80s' is not a plain file name in the "
                         "checkpoint's directory",
                         index, c->string, f);
      goto done;
    }
    tensors[i] = (mapped_t){c->string, f};
    size_t k = 0;
    while (k < n_shards && strcmp(shards[k], f)) k++;
    if (k == n_shards) shards[n_shards++] = f;
  }
  if (n_map == 0) {
    s = rg_status_make(RG_PARSE, "%s: weight_map is empty", index);
    goto done;
  }
  // Each shard's tensors, then a check that every tensor is where the index
  // says and every mapped name was found.
  size_t first = rg_weights_count(w);
  for (size_t k = 0; k < n_shards && !s; k++) {
    snprintf(path, strlen(dir) + 512, "%s/%s", dir, shards[k]);
    s = rg__safetensors_open(w, path);
  }
  if (s) goto done;
  seen = calloc(n_map, 1);
  if (!seen) {
    s = rg_status_make(RG_OUT_OF_MEMORY, "%s: out of memory", index);
    goto done;
  }
  qsort(tensors, n_map, sizeof(*tensors), cmp_mapped);
  size_t n_all = rg_weights_count(w);
  for (size_t t = first; t < n_all && !s; t++) {
    const rg_tensor_t *tt = rg_weights_at(w, t);
    mapped_t key = {tt->name, NULL};
    const mapped_t *m = bsearch(&key, tensors, n_map, sizeof(*tensors), cmp_mapped);
    if (!m) continue;  // in a shard but not in the map: harmless
    seen[m - tensors] = 1;
    if (strcmp(tt->file + strlen(dir) + 1, m->shard))
      s = rg_status_make(RG_PARSE, "%s: tensor '%s' is in %s but the index maps it to %s", index,
                         tt->name, tt->file, m->shard);
  }
  for (size_t k = 0; k < n_map && !s; k++)
    if (!seen[k])
      s = rg_status_make(RG_PARSE, "%s: tensor '%.80s' is mapped to %s, which does not hold it",
                         index, tensors[k].name, tensors[k].shard);
done:
  free(seen);
  free(path);
  free(tensors);
  free(shards);
  cJSON_Delete(root);
  return s;
}

// ----- writing ----------------------------------------------------------------------------

typedef struct {
  char *p;
  size_t n, cap;
  int oom;
} sbuf_t;

static void sb_put(sbuf_t *b, const char *s, size_t n) {
  if (b->oom) return;
  if (b->n + n + 1 > b->cap) {
    size_t nc = b->cap ? b->cap * 2 : 4096;
    while (nc < b->n + n + 1) nc *= 2;
    char *np = realloc(b->p, nc);
    if (!np) {
      b->oom = 1;
      return;
    }
    b->p = np;
    b->cap = nc;
  }
  memcpy(b->p + b->n, s, n);
  b->n += n;
  b->p[b->n] = 0;
}

static void sb_printf(sbuf_t *b, const char *fmt, ...) RG_PRINTF(2, 3);
static void sb_printf(sbuf_t *b, const char *fmt, ...) {
  char tmp[256];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
  va_end(ap);
  if (n > 0) sb_put(b, tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
}

static void sb_json_str(sbuf_t *b, const char *s) {
  sb_put(b, "\"", 1);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') {
      char e[2] = {'\\', (char)c};
      sb_put(b, e, 2);
    } else if (c < 0x20) {
      sb_printf(b, "\\u%04x", c);
    } else {
      sb_put(b, (const char *)&c, 1);
    }
  }
  sb_put(b, "\"", 1);
}

// Checks a tensor a writer is given and returns its byte count.
rg_status_t rg__check_write_tensor(const char *path, const rg_tensor_t *t, uint64_t *nbytes);
rg_status_t rg__check_write_tensor(const char *path, const rg_tensor_t *t, uint64_t *nbytes) {
  if (!t->name[0] || strnlen(t->name, RG_TENSOR_NAME_MAX) >= RG_TENSOR_NAME_MAX)
    return rg_status_make(RG_INVALID_ARGUMENT, "%s: a tensor has an empty or unterminated name",
                          path);
  if (t->n_dims < 0 || t->n_dims > RG_TENSOR_MAX_DIMS)
    return rg_status_make(RG_INVALID_ARGUMENT, "%s: tensor '%s': %d dims", path, t->name,
                          t->n_dims);
  int64_t elems = 1;
  int overflow = 0;
  for (int i = 0; i < t->n_dims; i++) {
    if (t->shape[i] < 0)
      return rg_status_make(RG_INVALID_ARGUMENT, "%s: tensor '%s': negative dim %lld", path,
                            t->name, (long long)t->shape[i]);
    overflow |= __builtin_mul_overflow(elems, t->shape[i], &elems);
  }
  int ok = !overflow;
  uint64_t nb = ok ? rg_dtype_nbytes(t->type, elems, &ok) : 0;
  if (!ok)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "%s: tensor '%s': %lld elements are not a whole number of %s blocks or "
                          "overflow",
                          path, t->name, (long long)elems, rg_dtype_name(t->type));
  if (t->nbytes && t->nbytes != nb)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "%s: tensor '%s': nbytes %llu but the shape needs %llu", path, t->name,
                          (unsigned long long)t->nbytes, (unsigned long long)nb);
  *nbytes = nb;
  return NULL;
}

static int cmp_cstr(const void *x, const void *y) {
  return strcmp(*(const char *const *)x, *(const char *const *)y);
}

// Rejects a name given twice (a reader would refuse the file).
rg_status_t rg__check_unique(const char *path, const char **names, size_t n);
rg_status_t rg__check_unique(const char *path, const char **names, size_t n) {
  qsort(names, n, sizeof(*names), cmp_cstr);
  for (size_t i = 1; i < n; i++)
    if (!strcmp(names[i], names[i - 1]))
      return rg_status_make(RG_INVALID_ARGUMENT, "%s: tensor '%s' is given twice", path, names[i]);
  return NULL;
}

// Opens "<path>.partial" for writing; rg__commit_file() renames it into place.
rg_status_t rg__open_partial(const char *path, FILE **out, char **tmp_path);
rg_status_t rg__open_partial(const char *path, FILE **out, char **tmp_path) {
  size_t len = strlen(path) + 16;
  char *tmp = malloc(len);
  if (!tmp) return rg_status_make(RG_OUT_OF_MEMORY, "%s: out of memory", path);
  snprintf(tmp, len, "%s.partial", path);
  FILE *f = fopen(tmp, "wb");
  if (!f) {
    rg_status_t s = rg_status_make(RG_IO, "%s: cannot create: %s", tmp, strerror(errno));
    free(tmp);
    return s;
  }
  setvbuf(f, NULL, _IOFBF, 1 << 20);
  *out = f;
  *tmp_path = tmp;
  return NULL;
}

// Closes f and renames tmp to path when s is OK; removes tmp otherwise.
// Consumes s and tmp.
rg_status_t rg__commit_file(rg_status_t s, FILE *f, char *tmp, const char *path);
rg_status_t rg__commit_file(rg_status_t s, FILE *f, char *tmp, const char *path) {
  if (f && fclose(f) != 0 && !s)
    s = rg_status_make(RG_IO, "%s: write failed: %s", tmp, strerror(errno));
  if (!s && rename(tmp, path) != 0)
    s = rg_status_make(RG_IO, "%s: cannot rename to %s: %s", tmp, path, strerror(errno));
  if (s) unlink(tmp);
  free(tmp);
  return s;
}

rg_status_t rg__write_bytes(FILE *f, const char *path, const void *p, uint64_t n);
rg_status_t rg__write_bytes(FILE *f, const char *path, const void *p, uint64_t n) {
  if (n && fwrite(p, 1, (size_t)n, f) != (size_t)n)
    return rg_status_make(RG_IO, "%s: write failed: %s", path, strerror(errno));
  return NULL;
}

rg_status_t rg_safetensors_write(const char *path, const rg_tensor_t *tensors, size_t n,
                                 const char *const *meta_kv, size_t n_meta,
                                 const rg_write_source_t *src) {
  uint64_t total = 0, biggest = 0;
  sbuf_t h = {0};
  sb_put(&h, "{", 1);
  if (n_meta) {
    sb_put(&h, "\"__metadata__\":{", 16);
    for (size_t i = 0; i < n_meta; i++) {
      if (i) sb_put(&h, ",", 1);
      sb_json_str(&h, meta_kv[2 * i]);
      sb_put(&h, ":", 1);
      sb_json_str(&h, meta_kv[2 * i + 1]);
    }
    sb_put(&h, "}", 1);
  }
  rg_status_t s = NULL;
  for (size_t i = 0; i < n && !s; i++) {
    const rg_tensor_t *t = &tensors[i];
    uint64_t nb = 0;
    s = rg__check_write_tensor(path, t, &nb);
    if (s) break;
    if (!st_writable(t->type)) {
      s = rg_status_make(RG_INVALID_ARGUMENT, "%s: tensor '%s': safetensors has no dtype %s", path,
                         t->name, rg_dtype_name(t->type));
      break;
    }
    if (!t->data && !(src && src->fill)) {
      s = rg_status_make(RG_INVALID_ARGUMENT, "%s: tensor '%s' has no data and no fill", path,
                         t->name);
      break;
    }
    if (i || n_meta) sb_put(&h, ",", 1);
    sb_json_str(&h, t->name);
    sb_printf(&h, ":{\"dtype\":\"%s\",\"shape\":[", rg_dtype_safetensors_name(t->type));
    for (int d = 0; d < t->n_dims; d++)
      sb_printf(&h, "%s%lld", d ? "," : "", (long long)t->shape[d]);
    sb_printf(&h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)total,
              (unsigned long long)(total + nb));
    total += nb;
    if (!t->data && nb > biggest) biggest = nb;
  }
  sb_put(&h, "}", 1);
  const char **names = malloc((n ? n : 1) * sizeof(*names));
  if (!s && !names) s = rg_status_make(RG_OUT_OF_MEMORY, "%s: out of memory", path);
  for (size_t i = 0; !s && i < n; i++) names[i] = tensors[i].name;
  if (!s) s = rg__check_unique(path, names, n);
  free(names);
  // Pad so the data section starts on an 8-byte boundary.
  while (!s && !h.oom && (8 + h.n) % 8) sb_put(&h, " ", 1);
  if (!s && h.oom)
    s = rg_status_make(RG_OUT_OF_MEMORY, "%s: out of memory building the header", path);
  if (s) {
    free(h.p);
    return s;
  }
  FILE *f = NULL;
  char *tmp = NULL;
  void *buf = NULL;
  s = rg__open_partial(path, &f, &tmp);
  if (s) {
    free(h.p);
    return s;
  }
  uint8_t len8[8];
  for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)h.n >> (8 * i));
  s = rg__write_bytes(f, tmp, len8, 8);
  if (!s) s = rg__write_bytes(f, tmp, h.p, h.n);
  if (!s && biggest && !(buf = malloc((size_t)biggest)))
    s = rg_status_make(RG_OUT_OF_MEMORY, "%s: out of memory for a %llu-byte tensor", path,
                       (unsigned long long)biggest);
  uint64_t done = 0;
  for (size_t i = 0; i < n && !s; i++) {
    const rg_tensor_t *t = &tensors[i];
    uint64_t nb = 0;
    s = rg__check_write_tensor(path, t, &nb);
    const void *p = t->data;
    if (!s && !p) {
      rg_tensor_t tt = *t;
      tt.nbytes = nb;
      s = src->fill(src->fill_ctx, &tt, buf);
      p = buf;
    }
    if (!s) s = rg__write_bytes(f, tmp, p, nb);
    done += nb;
    if (!s && src && src->progress) src->progress(src->progress_ctx, path, done, total);
  }
  free(buf);
  free(h.p);
  return rg__commit_file(s, f, tmp, path);
}
