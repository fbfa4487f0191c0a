// graphs/tokenizer_hf.c — reading and writing Hugging Face tokenizer.json.
//
// Only the byte-level BPE subset is read: model.type "BPE", a pre_tokenizer
// made of Split regexes (behavior "Isolated") followed by ByteLevel, a
// ByteLevel decoder, and the normalizers tokenizer.c applies. Anything outside it is refused with
// the field that made it so, rather than tokenized differently from the model's own tokenizer.
#define RG_TOKENIZER_INTERNAL
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fileio.h"
#include "graphs/tokenizer.h"

#define MAX_SPLITS 8
#define MAX_NESTING 4

// End-of-sequence names tried, in order, when nothing says which token ends
// a sequence (tokenizer.json has no field for it).
static const char *const eos_names[] = {"<|end_of_text|>", "<|endoftext|>", "<|im_end|>", "</s>"};

static rg_status_t bad(const char *src, const char *field, const char *fmt, ...) RG_PRINTF(3, 4);
static rg_status_t bad(const char *src, const char *field, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return rg_status_make(RG_PARSE, "%s: %s: %s", src, field, msg);
}

static rg_status_t nomem(const char *src) {
  return rg_status_make(RG_OUT_OF_MEMORY, "%s: out of memory reading the tokenizer", src);
}

// A quoted, shortened copy of s for messages.
static const char *q(const char *s, char buf[80]) {
  snprintf(buf, 80, "\"%.60s%s\"", s, strlen(s) > 60 ? "..." : "");
  return buf;
}

// Reads a whole file; with `missing` non-NULL, a file that does not exist is
// not an error but *missing = 1.
static rg_status_t read_file(const char *path, const char *what, char **out, size_t *out_len,
                             int *missing) {
  if (missing) *missing = 0;
  rg_status_t st = rg_file_read_all(path, what, RG_TOKENIZER_MAX_FILE_BYTES, out, out_len);
  if (st && missing && rg_status_code(st) == RG_NOT_FOUND) {
    rg_status_free(st);
    *missing = 1;
    return NULL;
  }
  return st;
}

static rg_status_t parse_json(const char *src, const char *text, size_t len, cJSON **out) {
  const char *end = NULL;
  *out = cJSON_ParseWithLengthOpts(text, len, &end, 0);
  if (*out) return NULL;
  size_t off = end && end >= text ? (size_t)(end - text) : 0;
  if (off > len) off = len;
  // cJSON points at the value it gave up on; a file cut short is clearer
  // reported as such, so look for brackets or a string still open at the end.
  int depth = 0, in_str = 0;
  for (size_t i = 0; i < len; i++) {
    char c = text[i];
    if (in_str) {
      if (c == '\\')
        i++;
      else if (c == '"')
        in_str = 0;
    } else if (c == '"') {
      in_str = 1;
    } else if (c == '{' || c == '[') {
      depth++;
    } else if (c == '}' || c == ']') {
      depth--;
    }
  }
  if (depth > 0 || in_str) off = len;
  int line = 1, col = 1;
  for (size_t i = 0; i < off; i++) {
    if (text[i] == '\n') {
      line++;
      col = 1;
    } else {
      col++;
    }
  }
  if (off >= len)
    return rg_status_make(RG_PARSE, "%s:%d:%d: not valid JSON: the text ends early (truncated?)",
                          src, line, col);
  int take = 0;
  while (take < 20 && off + take < len && text[off + take] != '\n' && text[off + take] != '\0')
    take++;
  return rg_status_make(RG_PARSE, "%s:%d:%d: not valid JSON near '%.*s'", src, line, col, take,
                        text + off);
}

typedef struct {
  const char *src;
  size_t n;            // vocabulary size (highest id + 1)
  const char **names;  // (n) token strings, borrowed from the JSON or pads
  int32_t *types;      // (n)
  char *pads;          // "[PAD<id>]" strings for ids the file leaves out
  const char **merges;
  size_t n_merges;
  char *merge_text;  // "a b" strings made from ["a", "b"] pairs
  const char *regexes[MAX_SPLITS];
  char *owned[MAX_SPLITS];
  char *fields[MAX_SPLITS];  // where each regex was given
  size_t n_re;
  rg__norm_t norm[RG__MAX_NORM];
  size_t n_norm;
  int saw_byte_level;
  int32_t bos, eos;
} hf_t;

static void hf_free(hf_t *h) {
  free(h->names);
  free(h->types);
  free(h->pads);
  free(h->merges);
  free(h->merge_text);
  for (size_t i = 0; i < MAX_SPLITS; i++) {
    free(h->owned[i]);
    free(h->fields[i]);
  }
}

static int32_t find_name(const hf_t *h, const char *s) {
  for (size_t i = 0; i < h->n; i++)
    if (h->types[i] != RG_TOKEN_UNUSED && strcmp(h->names[i], s) == 0) return (int32_t)i;
  return -1;
}

static int is_literal(int32_t type) {
  return type == RG_TOKEN_CONTROL || type == RG_TOKEN_USER_DEFINED;
}

static int32_t well_known_eos(const char *const *names, const int32_t *types, size_t n) {
  for (size_t k = 0; k < sizeof(eos_names) / sizeof(eos_names[0]); k++)
    for (size_t i = 0; i < n; i++)
      if (is_literal(types[i]) && strcmp(names[i], eos_names[k]) == 0) return (int32_t)i;
  return -1;
}

static int id_ok(const cJSON *v, int32_t *out) {
  if (!cJSON_IsNumber(v)) return 0;
  double d = v->valuedouble;
  if (!(d >= 0 && d < RG_TOKENIZER_MAX_VOCAB) || d != floor(d)) return 0;
  *out = (int32_t)d;
  return 1;
}

// An id: an integer number in [0, RG_TOKENIZER_MAX_VOCAB).
static rg_status_t get_id(const char *src, const char *field, const cJSON *v, int32_t *out) {
  if (!cJSON_IsNumber(v)) return bad(src, field, "the id is not a number");
  double d = v->valuedouble;
  if (!(d >= 0 && d < RG_TOKENIZER_MAX_VOCAB) || d != floor(d))
    return bad(src, field, "id %g is out of range (an integer from 0 to %d)", d,
               RG_TOKENIZER_MAX_VOCAB - 1);
  *out = (int32_t)d;
  return NULL;
}

static const cJSON *get(const cJSON *o, const char *key) {
  return cJSON_GetObjectItemCaseSensitive(o, key);
}

static int is_null(const cJSON *v) {
  return !v || cJSON_IsNull(v);
}

static rg_status_t read_vocab(hf_t *h, const cJSON *model, const cJSON *added) {
  const char *src = h->src;
  const cJSON *vocab = get(model, "vocab");
  if (!vocab) return bad(src, "model.vocab", "missing (the token -> id map)");
  if (!cJSON_IsObject(vocab)) return bad(src, "model.vocab", "not an object of token -> id");
  if (added && !cJSON_IsArray(added)) return bad(src, "added_tokens", "not an array");
  char field[160], b1[80], b2[80];
  // First pass: ids are checked and counted before anything is sized by them.
  size_t count = 0;
  int64_t max_id = -1;
  for (const cJSON *c = vocab->child; c; c = c->next) {
    int32_t id = 0;
    if (!id_ok(c, &id)) {  // the field's name is made only for the message
      snprintf(field, sizeof field, "model.vocab[%s]", q(c->string ? c->string : "", b1));
      return get_id(src, field, c, &id);
    }
    if (id > max_id) max_id = id;
    count++;
  }
  int i = 0;
  for (const cJSON *a = added ? added->child : NULL; a; a = a->next, i++) {
    snprintf(field, sizeof field, "added_tokens[%d]", i);
    if (!cJSON_IsObject(a)) return bad(src, field, "not an object");
    const cJSON *id_v = get(a, "id"), *content = get(a, "content"), *special = get(a, "special");
    snprintf(field, sizeof field, "added_tokens[%d].id", i);
    if (!id_v) return bad(src, field, "missing");
    int32_t id = 0;
    RG_RETURN_IF_ERROR(get_id(src, field, id_v, &id));
    snprintf(field, sizeof field, "added_tokens[%d].content", i);
    if (!content) return bad(src, field, "missing");
    if (!cJSON_IsString(content)) return bad(src, field, "not a string");
    if (!content->valuestring[0]) return bad(src, field, "empty");
    snprintf(field, sizeof field, "added_tokens[%d].special", i);
    if (special && !cJSON_IsBool(special)) return bad(src, field, "not true or false");
    if (id > max_id) max_id = id;
    count++;
  }
  if (max_id < 0) return bad(src, "model.vocab", "empty");
  h->n = (size_t)max_id + 1;
  // Holes are filled, but a few ids scattered up to 16M would allocate for
  // all of them: ids this sparse mean a broken file.
  if (h->n > 2 * count + 1024)
    return bad(src, "model.vocab",
               "ids reach %zu but only %zu tokens are defined; ids must be (nearly) dense",
               h->n - 1, count);
  h->names = calloc(h->n, sizeof(*h->names));
  h->types = calloc(h->n, sizeof(*h->types));
  if (!h->names || !h->types) return nomem(src);
  for (const cJSON *c = vocab->child; c; c = c->next) {
    int32_t id = (int32_t)c->valuedouble;
    if (h->names[id])
      return bad(src, "model.vocab", "id %d is given to both %s and %s", (int)id,
                 q(h->names[id], b1), q(c->string ? c->string : "", b2));
    h->names[id] = c->string ? c->string : "";
    h->types[id] = RG_TOKEN_NORMAL;
  }
  i = 0;
  for (const cJSON *a = added ? added->child : NULL; a; a = a->next, i++) {
    int32_t id = (int32_t)get(a, "id")->valuedouble;
    const char *content = get(a, "content")->valuestring;
    int special = cJSON_IsTrue(get(a, "special"));
    snprintf(field, sizeof field, "added_tokens[%d]", i);
    if (h->names[id] && strcmp(h->names[id], content) != 0)
      return bad(src, field, "id %d is %s elsewhere in the file but %s here", (int)id,
                 q(h->names[id], b1), q(content, b2));
    h->names[id] = content;
    h->types[id] = special ? RG_TOKEN_CONTROL : RG_TOKEN_USER_DEFINED;
  }
  size_t holes = 0;
  for (size_t k = 0; k < h->n; k++) holes += !h->names[k];
  if (holes) {
    h->pads = malloc(holes * 32);
    if (!h->pads) return nomem(src);
    char *p = h->pads;
    for (size_t k = 0; k < h->n; k++) {
      if (h->names[k]) continue;
      snprintf(p, 32, "[PAD%zu]", k);
      h->names[k] = p;
      h->types[k] = RG_TOKEN_UNUSED;
      p += 32;
    }
  }
  const cJSON *unk = get(model, "unk_token");
  if (!is_null(unk)) {
    if (!cJSON_IsString(unk)) return bad(src, "model.unk_token", "not a string or null");
    int32_t id = find_name(h, unk->valuestring);
    if (id < 0)
      return bad(src, "model.unk_token", "%s is not in model.vocab", q(unk->valuestring, b1));
    if (!is_literal(h->types[id])) h->types[id] = RG_TOKEN_UNKNOWN;
  }
  return NULL;
}

static rg_status_t read_merges(hf_t *h, const cJSON *model) {
  const char *src = h->src;
  const cJSON *merges = get(model, "merges");
  char field[64], b1[80];
  if (!merges) return bad(src, "model.merges", "missing (the merge list, lowest rank first)");
  if (!cJSON_IsArray(merges)) return bad(src, "model.merges", "not an array");
  size_t n = 0, text = 0;
  for (const cJSON *m = merges->child; m; m = m->next, n++) {
    snprintf(field, sizeof field, "model.merges[%zu]", n);
    if (cJSON_IsString(m)) {
      const char *s = m->valuestring, *sp = strchr(s, ' ');
      if (!sp || sp == s || !sp[1] || strchr(sp + 1, ' '))
        return bad(src, field, "%s is not two tokens \"a b\"", q(s, b1));
    } else if (cJSON_IsArray(m)) {
      const cJSON *a = m->child, *b = a ? a->next : NULL;
      if (!a || !b || b->next || !cJSON_IsString(a) || !cJSON_IsString(b))
        return bad(src, field, "not a pair of token strings");
      if (!a->valuestring[0] || !b->valuestring[0]) return bad(src, field, "holds an empty token");
      if (strchr(a->valuestring, ' ') || strchr(b->valuestring, ' '))
        return bad(src, field, "holds a token with a space, which GGUF's \"a b\" form cannot");
      text += strlen(a->valuestring) + strlen(b->valuestring) + 2;
    } else {
      return bad(src, field, "not a string \"a b\" nor a pair [\"a\", \"b\"]");
    }
  }
  h->n_merges = n;
  h->merges = malloc((n ? n : 1) * sizeof(*h->merges));
  h->merge_text = malloc(text ? text : 1);
  if (!h->merges || !h->merge_text) return nomem(src);
  char *p = h->merge_text;
  n = 0;
  for (const cJSON *m = merges->child; m; m = m->next, n++) {
    if (cJSON_IsString(m)) {
      h->merges[n] = m->valuestring;
      continue;
    }
    int l = sprintf(p, "%s %s", m->child->valuestring, m->child->next->valuestring);
    h->merges[n] = p;
    p += l + 1;
  }
  return NULL;
}

static rg_status_t add_regex(hf_t *h, const char *field, const char *re, char *owned) {
  if (h->n_re == MAX_SPLITS) {
    free(owned);
    return bad(h->src, field, "more than %d Split regexes", MAX_SPLITS);
  }
  h->owned[h->n_re] = owned;
  if (!(h->fields[h->n_re] = strdup(field))) return nomem(h->src);
  h->regexes[h->n_re++] = re;
  return NULL;
}

static rg_status_t read_pre(hf_t *h, const cJSON *p, const char *field, int depth) {
  const char *src = h->src;
  char sub[192], b1[80];
  if (depth > MAX_NESTING) return bad(src, field, "nested more than %d deep", MAX_NESTING);
  if (!cJSON_IsObject(p)) return bad(src, field, "not an object");
  const cJSON *type = get(p, "type");
  snprintf(sub, sizeof sub, "%s.type", field);
  if (!type) return bad(src, sub, "missing");
  if (!cJSON_IsString(type)) return bad(src, sub, "not a string");
  const char *ty = type->valuestring;
  if (h->saw_byte_level)
    return bad(src, field, "%s comes after ByteLevel; ridge needs ByteLevel last", q(ty, b1));
  if (strcmp(ty, "Sequence") == 0) {
    const cJSON *list = get(p, "pretokenizers");
    snprintf(sub, sizeof sub, "%s.pretokenizers", field);
    if (!cJSON_IsArray(list)) return bad(src, sub, list ? "not an array" : "missing");
    int i = 0;
    for (const cJSON *c = list->child; c; c = c->next, i++) {
      snprintf(sub, sizeof sub, "%s.pretokenizers[%d]", field, i);
      RG_RETURN_IF_ERROR(read_pre(h, c, sub, depth + 1));
    }
    return NULL;
  }
  if (strcmp(ty, "Split") == 0) {
    const cJSON *pat = get(p, "pattern"), *beh = get(p, "behavior"), *inv = get(p, "invert");
    snprintf(sub, sizeof sub, "%s.pattern", field);
    if (!cJSON_IsObject(pat)) return bad(src, sub, pat ? "not an object" : "missing");
    const cJSON *re = get(pat, "Regex"), *str = get(pat, "String");
    snprintf(sub, sizeof sub, "%s.behavior", field);
    if (!cJSON_IsString(beh)) return bad(src, sub, beh ? "not a string" : "missing");
    if (strcmp(beh->valuestring, "Isolated") != 0)
      return bad(src, sub, "%s is not supported; ridge splits \"Isolated\"",
                 q(beh->valuestring, b1));
    snprintf(sub, sizeof sub, "%s.invert", field);
    if (inv && !cJSON_IsFalse(inv)) return bad(src, sub, "only false is supported");
    snprintf(sub, sizeof sub, "%s.pattern", field);
    if (cJSON_IsString(re)) {
      if (!re->valuestring[0]) return bad(src, sub, "the regex is empty");
      return add_regex(h, sub, re->valuestring, NULL);
    }
    if (cJSON_IsString(str)) {
      // A literal string: escape every character a regex gives meaning.
      const char *s = str->valuestring;
      if (!s[0]) return bad(src, sub, "the string is empty");
      char *esc = malloc(2 * strlen(s) + 1), *o = esc;
      if (!esc) return nomem(src);
      for (; *s; s++) {
        if (strchr("\\^$.|?*+()[]{}#-", *s)) *o++ = '\\';
        *o++ = *s;
      }
      *o = 0;
      return add_regex(h, sub, esc, esc);
    }
    return bad(src, sub, "needs a \"Regex\" or \"String\"");
  }
  if (strcmp(ty, "ByteLevel") == 0) {
    const cJSON *aps = get(p, "add_prefix_space"), *use = get(p, "use_regex");
    snprintf(sub, sizeof sub, "%s.add_prefix_space", field);
    if (aps && !cJSON_IsFalse(aps)) return bad(src, sub, "only false is supported");
    snprintf(sub, sizeof sub, "%s.use_regex", field);
    if (use && !cJSON_IsBool(use)) return bad(src, sub, "not true or false");
    h->saw_byte_level = 1;
    // ByteLevel splits with GPT-2's regex unless told not to.
    snprintf(sub, sizeof sub, "%s (ByteLevel's GPT-2 regex)", field);
    if (!use || cJSON_IsTrue(use)) return add_regex(h, sub, rg__pre_regex("gpt-2"), NULL);
    return NULL;
  }
  return bad(src, sub, "%s is not supported (ridge reads Sequence, Split and ByteLevel)",
             q(ty, b1));
}

// The BOS a TemplateProcessing post-processor puts first, if any.
static rg_status_t read_post(hf_t *h, const cJSON *p, const char *field, int depth) {
  const char *src = h->src;
  char sub[192], b1[80];
  if (is_null(p)) return NULL;
  if (depth > MAX_NESTING) return bad(src, field, "nested more than %d deep", MAX_NESTING);
  if (!cJSON_IsObject(p)) return bad(src, field, "not an object");
  const cJSON *type = get(p, "type");
  if (!cJSON_IsString(type)) return NULL;  // a processor ridge has no use for
  if (strcmp(type->valuestring, "Sequence") == 0) {
    const cJSON *list = get(p, "processors");
    snprintf(sub, sizeof sub, "%s.processors", field);
    if (!cJSON_IsArray(list)) return bad(src, sub, list ? "not an array" : "missing");
    int i = 0;
    for (const cJSON *c = list->child; c; c = c->next, i++) {
      snprintf(sub, sizeof sub, "%s.processors[%d]", field, i);
      RG_RETURN_IF_ERROR(read_post(h, c, sub, depth + 1));
    }
    return NULL;
  }
  if (strcmp(type->valuestring, "TemplateProcessing") != 0) return NULL;
  const cJSON *single = get(p, "single");
  snprintf(sub, sizeof sub, "%s.single", field);
  if (!cJSON_IsArray(single)) return bad(src, sub, single ? "not an array" : "missing");
  const cJSON *first = single->child;
  const cJSON *st = first ? get(first, "SpecialToken") : NULL;
  if (!st) return NULL;  // the text comes first: no BOS
  snprintf(sub, sizeof sub, "%s.single[0].SpecialToken.id", field);
  const cJSON *name = get(st, "id");
  if (!cJSON_IsString(name)) return bad(src, sub, name ? "not a string" : "missing");
  // special_tokens maps the name to its ids; fall back on the name itself.
  const cJSON *specials = get(p, "special_tokens");
  const cJSON *entry = cJSON_IsObject(specials) ? get(specials, name->valuestring) : NULL;
  const cJSON *ids = entry ? get(entry, "ids") : NULL;
  if (cJSON_IsArray(ids) && ids->child) {
    snprintf(sub, sizeof sub, "%s.special_tokens[%s].ids[0]", field, q(name->valuestring, b1));
    int32_t id = 0;
    RG_RETURN_IF_ERROR(get_id(src, sub, ids->child, &id));
    if ((size_t)id >= h->n)
      return bad(src, sub, "id %d is not in the vocabulary (%zu tokens)", (int)id, h->n);
    h->bos = id;
    return NULL;
  }
  int32_t id = find_name(h, name->valuestring);
  if (id < 0) return bad(src, sub, "%s is not a token", q(name->valuestring, b1));
  h->bos = id;
  return NULL;
}

static rg_status_t read_config_token(hf_t *h, const char *cfg, const cJSON *root, const char *key,
                                     int32_t *out) {
  const cJSON *v = get(root, key);
  char b1[80];
  if (!v) return NULL;
  if (cJSON_IsNull(v)) {
    *out = -1;
    return NULL;
  }
  if (cJSON_IsObject(v)) v = get(v, "content");
  if (!cJSON_IsString(v)) return bad(cfg, key, "not a string, {\"content\": ...} or null");
  int32_t id = find_name(h, v->valuestring);
  if (id < 0)
    return bad(cfg, key, "%s is not in the vocabulary of %s", q(v->valuestring, b1), h->src);
  *out = id;
  return NULL;
}

static rg_status_t read_config(hf_t *h, const char *cfg) {
  char *text;
  size_t len;
  int missing;
  RG_RETURN_IF_ERROR(read_file(cfg, "tokenizer config", &text, &len, &missing));
  if (missing) return NULL;
  cJSON *root;
  rg_status_t st = parse_json(cfg, text, len, &root);
  free(text);
  if (st) return st;
  if (!cJSON_IsObject(root))
    st = rg_status_make(RG_PARSE, "%s: the top level is not an object", cfg);
  if (!st) st = read_config_token(h, cfg, root, "bos_token", &h->bos);
  if (!st) st = read_config_token(h, cfg, root, "eos_token", &h->eos);
  cJSON_Delete(root);
  return st;
}

static rg_status_t check_model(const char *src, const cJSON *model) {
  char b1[80];
  if (!cJSON_IsObject(model)) return bad(src, "model", "not an object");
  const cJSON *type = get(model, "type");
  if (!type) return bad(src, "model.type", "missing (ridge reads \"BPE\")");
  if (!cJSON_IsString(type)) return bad(src, "model.type", "not a string");
  if (strcmp(type->valuestring, "BPE") != 0)
    return bad(src, "model.type", "%s is not supported; ridge reads byte-level \"BPE\"",
               q(type->valuestring, b1));
  const cJSON *v = get(model, "byte_fallback");
  if (v && !cJSON_IsFalse(v))
    return bad(src, "model.byte_fallback", "true is SentencePiece-style BPE, not byte-level");
  const char *affix[] = {"continuing_subword_prefix", "end_of_word_suffix"};
  for (int i = 0; i < 2; i++) {
    v = get(model, affix[i]);
    char f[64];
    snprintf(f, sizeof f, "model.%s", affix[i]);
    if (!is_null(v) && !(cJSON_IsString(v) && !v->valuestring[0]))
      return bad(src, f, "must be null for byte-level BPE");
  }
  v = get(model, "dropout");
  if (!is_null(v) && !(cJSON_IsNumber(v) && v->valuedouble == 0))
    return bad(src, "model.dropout", "must be null (BPE dropout is for training)");
  v = get(model, "ignore_merges");
  if (v && !cJSON_IsBool(v)) return bad(src, "model.ignore_merges", "not true or false");
  return NULL;
}

// The normalizer, flattened into steps: one of tokenizer.c's kinds, or a
// Sequence of them (nested Sequences too).
static rg_status_t read_normalizer(hf_t *h, const cJSON *n, const char *field, int depth) {
  const char *src = h->src;
  char sub[192], b1[80];
  if (is_null(n)) return NULL;
  if (depth > MAX_NESTING) return bad(src, field, "nested more than %d deep", MAX_NESTING);
  if (!cJSON_IsObject(n)) return bad(src, field, "not an object or null");
  const cJSON *type = get(n, "type");
  snprintf(sub, sizeof sub, "%s.type", field);
  if (!cJSON_IsString(type)) return bad(src, sub, type ? "not a string" : "missing");
  const char *ty = type->valuestring;
  if (strcmp(ty, "Sequence") == 0) {
    const cJSON *list = get(n, "normalizers");
    snprintf(sub, sizeof sub, "%s.normalizers", field);
    if (!cJSON_IsArray(list)) return bad(src, sub, list ? "not an array" : "missing");
    int i = 0;
    for (const cJSON *c = list->child; c; c = c->next, i++) {
      snprintf(sub, sizeof sub, "%s.normalizers[%d]", field, i);
      RG_RETURN_IF_ERROR(read_normalizer(h, c, sub, depth + 1));
    }
    return NULL;
  }
  rg__norm_t step = {RG__NORM_COUNT, 0, 0};
  for (int k = 0; k < RG__NORM_COUNT; k++)
    if (strcmp(ty, rg__norm_name((rg__norm_kind_t)k)) == 0) step.kind = (rg__norm_kind_t)k;
  if (step.kind == RG__NORM_COUNT)
    return bad(src, field,
               "%s is not supported; ridge applies NFC, NFD, NFKC, NFKD, Lowercase, Strip, "
               "StripAccents and Sequences of them",
               q(ty, b1));
  if (step.kind == RG__NORM_STRIP) {
    static const char *const sides[] = {"strip_left", "strip_right"};
    int *flags[] = {&step.strip_left, &step.strip_right};
    for (int i = 0; i < 2; i++) {
      const cJSON *v = get(n, sides[i]);
      snprintf(sub, sizeof sub, "%s.%s", field, sides[i]);
      if (v && !cJSON_IsBool(v)) return bad(src, sub, "not true or false");
      *flags[i] = !v || cJSON_IsTrue(v);
    }
  }
  if (h->n_norm == RG__MAX_NORM)
    return bad(src, field, "more than %d normalizer steps", RG__MAX_NORM);
  h->norm[h->n_norm++] = step;
  return NULL;
}

static rg_status_t load(const char *src, const char *text, size_t len, const char *config,
                        rg_tokenizer_t **out) {
  *out = NULL;
  if (len > RG_TOKENIZER_MAX_FILE_BYTES)
    return rg_status_make(RG_PARSE, "%s: %zu bytes, more than a tokenizer.json may have (%zu)", src,
                          len, RG_TOKENIZER_MAX_FILE_BYTES);
  cJSON *root;
  RG_RETURN_IF_ERROR(parse_json(src, text, len, &root));
  hf_t h;
  memset(&h, 0, sizeof h);
  h.src = src;
  h.bos = h.eos = -1;
  rg_status_t st = NULL;
  char b1[80];
  const cJSON *model = get(root, "model"), *v;
  if (!cJSON_IsObject(root)) {
    st = rg_status_make(RG_PARSE, "%s: the top level is not a JSON object", src);
    goto done;
  }
  if (!model) {
    st = bad(src, "model", "missing (a tokenizer.json has a \"model\" object)");
    goto done;
  }
  if ((st = check_model(src, model))) goto done;
  if ((st = read_normalizer(&h, get(root, "normalizer"), "normalizer", 0))) goto done;
  v = get(root, "pre_tokenizer");
  if (is_null(v)) {
    st = bad(src, "pre_tokenizer", "missing; a byte-level BPE needs ByteLevel");
    goto done;
  }
  if ((st = read_pre(&h, v, "pre_tokenizer", 0))) goto done;
  if (!h.saw_byte_level) {
    st = bad(src, "pre_tokenizer", "has no ByteLevel step, so this is not a byte-level BPE");
    goto done;
  }
  v = get(root, "decoder");
  if (is_null(v)) {
    st = bad(src, "decoder", "missing; a byte-level BPE decodes with ByteLevel");
    goto done;
  }
  if (!cJSON_IsObject(v) || !cJSON_IsString(get(v, "type"))) {
    st = bad(src, "decoder.type", "missing");
    goto done;
  }
  if (strcmp(get(v, "type")->valuestring, "ByteLevel") != 0) {
    st = bad(src, "decoder.type", "%s is not supported; ridge decodes \"ByteLevel\"",
             q(get(v, "type")->valuestring, b1));
    goto done;
  }
  if ((st = read_vocab(&h, model, get(root, "added_tokens")))) goto done;
  if ((st = read_merges(&h, model))) goto done;
  if ((st = read_post(&h, get(root, "post_processor"), "post_processor", 0))) goto done;
  h.eos = well_known_eos(h.names, h.types, h.n);
  if (config && (st = read_config(&h, config))) goto done;
  rg__tok_spec_t sp = {
      .src = src,
      .tokens_field = "model.vocab",
      .merges_field = "model.merges",
      .tokens = h.names,
      .types = h.types,
      .n_tokens = h.n,
      .merges = h.merges,
      .n_merges = h.n_merges,
      .pre = rg__pre_name(h.regexes, h.n_re),
      .regexes = h.regexes,
      .regex_fields = (const char *const *)h.fields,
      .n_regexes = h.n_re,
      .norm = h.norm,
      .n_norm = h.n_norm,
      .ignore_merges = cJSON_IsTrue(get(model, "ignore_merges")),
      .bos = h.bos,
      .eos = h.eos,
      .unique_tokens = 1,
  };
  st = rg__tokenizer_build(&sp, out);
done:
  hf_free(&h);
  cJSON_Delete(root);
  return st;
}

rg_status_t rg_tokenizer_load_hf_string(const char *name, const char *json, size_t len,
                                        rg_tokenizer_t **out) {
  *out = NULL;
  if (!json && len) return rg_status_make(RG_INVALID_ARGUMENT, "%s: text is NULL", name);
  return load(name, json ? json : "", len, NULL, out);
}

// dir/tokenizer_config.json for dir/anything.json; malloc'd.
static char *config_path(const char *path) {
  const char *slash = strrchr(path, '/');
  size_t dl = slash ? (size_t)(slash - path) + 1 : 0;
  char *p = malloc(dl + sizeof("tokenizer_config.json"));
  if (!p) return NULL;
  memcpy(p, path, dl);
  strcpy(p + dl, "tokenizer_config.json");
  return p;
}

rg_status_t rg_tokenizer_load_hf(const char *path, rg_tokenizer_t **out) {
  *out = NULL;
  char *text;
  size_t len;
  RG_RETURN_IF_ERROR(read_file(path, "tokenizer", &text, &len, NULL));
  char *cfg = config_path(path);
  rg_status_t st = cfg ? load(path, text, len, cfg, out) : nomem(path);
  free(cfg);
  free(text);
  return st;
}

// ----- writing -------------------------------------------------------------------------

static cJSON *split_step(const char *re) {
  cJSON *s = cJSON_CreateObject(), *pat = cJSON_CreateObject();
  cJSON_AddStringToObject(s, "type", "Split");
  cJSON_AddStringToObject(pat, "Regex", re);
  cJSON_AddItemToObject(s, "pattern", pat);
  cJSON_AddStringToObject(s, "behavior", "Isolated");
  cJSON_AddBoolToObject(s, "invert", 0);
  return s;
}

static cJSON *byte_level(int use_regex) {
  cJSON *b = cJSON_CreateObject();
  cJSON_AddStringToObject(b, "type", "ByteLevel");
  cJSON_AddBoolToObject(b, "add_prefix_space", 0);
  cJSON_AddBoolToObject(b, "trim_offsets", 1);
  cJSON_AddBoolToObject(b, "use_regex", use_regex);
  return b;
}

static cJSON *special_ref(const char *name, int type_id) {
  cJSON *o = cJSON_CreateObject(), *in = cJSON_CreateObject();
  cJSON_AddStringToObject(in, "id", name);
  cJSON_AddNumberToObject(in, "type_id", type_id);
  cJSON_AddItemToObject(o, "SpecialToken", in);
  return o;
}

static cJSON *sequence_ref(const char *name, int type_id) {
  cJSON *o = cJSON_CreateObject(), *in = cJSON_CreateObject();
  cJSON_AddStringToObject(in, "id", name);
  cJSON_AddNumberToObject(in, "type_id", type_id);
  cJSON_AddItemToObject(o, "Sequence", in);
  return o;
}

// Llama 3's post-processor: BOS, then the text (and for pairs, BOS again).
static cJSON *bos_template(const char *bos, int32_t id) {
  cJSON *p = cJSON_CreateObject(), *single = cJSON_CreateArray(), *pair = cJSON_CreateArray();
  cJSON_AddStringToObject(p, "type", "TemplateProcessing");
  cJSON_AddItemToArray(single, special_ref(bos, 0));
  cJSON_AddItemToArray(single, sequence_ref("A", 0));
  cJSON_AddItemToArray(pair, special_ref(bos, 0));
  cJSON_AddItemToArray(pair, sequence_ref("A", 0));
  cJSON_AddItemToArray(pair, special_ref(bos, 1));
  cJSON_AddItemToArray(pair, sequence_ref("B", 1));
  cJSON_AddItemToObject(p, "single", single);
  cJSON_AddItemToObject(p, "pair", pair);
  cJSON *specials = cJSON_CreateObject(), *entry = cJSON_CreateObject();
  cJSON_AddStringToObject(entry, "id", bos);
  cJSON *ids = cJSON_CreateArray(), *toks = cJSON_CreateArray();
  cJSON_AddItemToArray(ids, cJSON_CreateNumber(id));
  cJSON_AddItemToArray(toks, cJSON_CreateString(bos));
  cJSON_AddItemToObject(entry, "ids", ids);
  cJSON_AddItemToObject(entry, "tokens", toks);
  cJSON_AddItemToObject(specials, bos, entry);
  cJSON_AddItemToObject(p, "special_tokens", specials);
  return p;
}

static cJSON *norm_step_json(const rg__norm_t *n) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "type", rg__norm_name(n->kind));
  if (n->kind == RG__NORM_STRIP) {
    cJSON_AddBoolToObject(o, "strip_left", n->strip_left);
    cJSON_AddBoolToObject(o, "strip_right", n->strip_right);
  }
  return o;
}

// The normalizer as tokenizer.json spells it: null, one step, or a Sequence.
static cJSON *normalizer_json(const rg_tokenizer_t *t) {
  const rg__norm_t *norm;
  size_t n = rg__tokenizer_normalizers(t, &norm);
  if (n == 0) return cJSON_CreateNull();
  if (n == 1) return norm_step_json(&norm[0]);
  cJSON *seq = cJSON_CreateObject(), *list = cJSON_CreateArray();
  cJSON_AddStringToObject(seq, "type", "Sequence");
  for (size_t i = 0; i < n; i++) cJSON_AddItemToArray(list, norm_step_json(&norm[i]));
  cJSON_AddItemToObject(seq, "normalizers", list);
  return seq;
}

static int is_pad(const char *s, size_t id) {
  char pad[32];
  snprintf(pad, sizeof pad, "[PAD%zu]", id);
  return strcmp(s, pad) == 0;
}

// Atomic for a regular file, so a failed write never leaves half a
// tokenizer.json where a good one was; a symlink's target is written.
static rg_status_t write_text(const char *path, const char *text) {
  rg_file_writer_t *w;
  RG_RETURN_IF_ERROR(rg_file_writer_open(path, "tokenizer", &w));
  FILE *f = rg_file_writer_stream(w);
  fputs(text, f);
  fputc('\n', f);
  return rg_file_writer_finish(w, NULL);
}

rg_status_t rg_tokenizer_write_hf(const rg_tokenizer_t *t, const char *path) {
  const char *const *tok, *const *merges, *pre;
  const int32_t *types;
  size_t n, n_merges;
  rg_tokenizer_vocab(t, &tok, &types, &n, &merges, &n_merges, &pre);
  const char *const *res;
  size_t n_re = rg__tokenizer_regexes(t, &res);
  int32_t bos = rg_tokenizer_bos(t), eos = rg_tokenizer_eos(t);

  cJSON *root = cJSON_CreateObject();
  cJSON_AddStringToObject(root, "version", "1.0");
  cJSON_AddNullToObject(root, "truncation");
  cJSON_AddNullToObject(root, "padding");
  cJSON *added = cJSON_AddArrayToObject(root, "added_tokens");
  for (size_t i = 0; i < n; i++) {
    if (!is_literal(types[i])) continue;
    cJSON *a = cJSON_CreateObject();
    cJSON_AddNumberToObject(a, "id", (double)i);
    cJSON_AddStringToObject(a, "content", tok[i]);
    cJSON_AddBoolToObject(a, "single_word", 0);
    cJSON_AddBoolToObject(a, "lstrip", 0);
    cJSON_AddBoolToObject(a, "rstrip", 0);
    cJSON_AddBoolToObject(a, "normalized", 0);
    cJSON_AddBoolToObject(a, "special", types[i] == RG_TOKEN_CONTROL);
    cJSON_AddItemToArray(added, a);
  }
  cJSON_AddItemToObject(root, "normalizer", normalizer_json(t));
  // GPT-2's own form is ByteLevel with its built-in regex; every other list
  // of regexes is written as Split steps before a regex-less ByteLevel.
  if (n_re == 1 && strcmp(res[0], rg__pre_regex("gpt-2")) == 0) {
    cJSON_AddItemToObject(root, "pre_tokenizer", byte_level(1));
  } else {
    cJSON *seq = cJSON_CreateObject(), *list = cJSON_CreateArray();
    cJSON_AddStringToObject(seq, "type", "Sequence");
    for (size_t i = 0; i < n_re; i++) cJSON_AddItemToArray(list, split_step(res[i]));
    cJSON_AddItemToArray(list, byte_level(0));
    cJSON_AddItemToObject(seq, "pretokenizers", list);
    cJSON_AddItemToObject(root, "pre_tokenizer", seq);
  }
  if (bos >= 0)
    cJSON_AddItemToObject(root, "post_processor", bos_template(tok[bos], bos));
  else
    cJSON_AddNullToObject(root, "post_processor");
  cJSON *dec = byte_level(1);
  cJSON_ReplaceItemInObject(dec, "add_prefix_space", cJSON_CreateTrue());
  cJSON_AddItemToObject(root, "decoder", dec);
  cJSON *model = cJSON_AddObjectToObject(root, "model");
  cJSON_AddStringToObject(model, "type", "BPE");
  cJSON_AddNullToObject(model, "dropout");
  const char *unk = NULL;
  for (size_t i = 0; i < n && !unk; i++)
    if (types[i] == RG_TOKEN_UNKNOWN) unk = tok[i];
  if (unk)
    cJSON_AddStringToObject(model, "unk_token", unk);
  else
    cJSON_AddNullToObject(model, "unk_token");
  cJSON_AddNullToObject(model, "continuing_subword_prefix");
  cJSON_AddNullToObject(model, "end_of_word_suffix");
  cJSON_AddBoolToObject(model, "fuse_unk", 0);
  cJSON_AddBoolToObject(model, "byte_fallback", 0);
  cJSON_AddBoolToObject(model, "ignore_merges", rg__tokenizer_ignore_merges(t));
  cJSON *vocab = cJSON_AddObjectToObject(model, "vocab");
  for (size_t i = 0; i < n; i++) {
    if (is_literal(types[i])) continue;
    // Holes a loaded file left come back as holes.
    if (types[i] == RG_TOKEN_UNUSED && is_pad(tok[i], i)) continue;
    cJSON_AddItemToObject(vocab, tok[i], cJSON_CreateNumber((double)i));
  }
  cJSON *ml = cJSON_AddArrayToObject(model, "merges");
  for (size_t i = 0; i < n_merges; i++) cJSON_AddItemToArray(ml, cJSON_CreateString(merges[i]));

  char *text = cJSON_Print(root);
  cJSON_Delete(root);
  if (!text)
    return rg_status_make(RG_OUT_OF_MEMORY, "%s: out of memory writing the tokenizer", path);
  rg_status_t st = write_text(path, text);
  free(text);
  if (st) return st;

  // The file alone says bos (post_processor) and eos (by name); when the
  // name rule would find another eos, a tokenizer_config.json says it.
  if (well_known_eos(tok, types, n) == eos) return NULL;
  cJSON *cfg = cJSON_CreateObject();
  if (bos >= 0)
    cJSON_AddStringToObject(cfg, "bos_token", tok[bos]);
  else
    cJSON_AddNullToObject(cfg, "bos_token");
  if (eos >= 0)
    cJSON_AddStringToObject(cfg, "eos_token", tok[eos]);
  else
    cJSON_AddNullToObject(cfg, "eos_token");
  text = cJSON_Print(cfg);
  cJSON_Delete(cfg);
  char *cpath = config_path(path);
  if (!text || !cpath) {
    free(text);
    free(cpath);
    return rg_status_make(RG_OUT_OF_MEMORY, "%s: out of memory writing the tokenizer", path);
  }
  st = write_text(cpath, text);
  free(text);
  free(cpath);
  return st;
}
