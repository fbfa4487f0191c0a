#include "base/yaml.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "base/fileio.h"

// Nodes and strings of one document come from one arena of big chunks so the
// whole tree is freed at once.
typedef struct chunk_s {
  struct chunk_s *next;
  size_t used, cap;
  max_align_t data[];
} chunk_t;

struct rg_doc_s {
  chunk_t *chunks;
  char *path;
  rg_node_t *root;
  size_t n_nodes;
};

static void *arena_alloc(rg_doc_t *d, size_t size) {
  size = (size + sizeof(max_align_t) - 1) & ~(sizeof(max_align_t) - 1);
  chunk_t *c = d->chunks;
  if (!c || c->cap - c->used < size) {
    size_t cap = size > 65536 ? size : 65536;
    c = malloc(sizeof(chunk_t) + cap);
    if (!c) return NULL;
    c->next = d->chunks;
    c->used = 0;
    c->cap = cap;
    d->chunks = c;
  }
  void *p = (char *)c->data + c->used;
  c->used += size;
  return p;
}

const char *rg_doc_strdup(rg_doc_t *d, const char *s) {
  size_t n = strlen(s) + 1;
  char *p = arena_alloc(d, n);
  if (p) memcpy(p, s, n);
  return p;
}

void rg_doc_destroy(rg_doc_t *d) {
  if (!d) return;
  for (chunk_t *c = d->chunks, *next; c; c = next) {
    next = c->next;
    free(c);
  }
  free(d->path);
  free(d);
}

const rg_node_t *rg_doc_root(const rg_doc_t *d) {
  return d->root;
}
const char *rg_doc_path(const rg_doc_t *d) {
  return d->path;
}

static rg_pos_t mark_pos(const rg_doc_t *d, yaml_mark_t m) {
  rg_pos_t p = {d->path, (int)m.line + 1, (int)m.column + 1};
  return p;
}

// Copies libyaml's node graph into our tree. Aliases point at shared nodes in
// libyaml's document; we copy them so every node has its own position, and
// cap the total so alias bombs fail cleanly.
static rg_status_t convert(rg_doc_t *d, yaml_document_t *yd, yaml_node_t *yn, int depth,
                           rg_node_t **out) {
  if (depth > RG_DOC_MAX_DEPTH) {
    rg_pos_t p = mark_pos(d, yn->start_mark);
    return rg_status_at(RG_PARSE, &p, "nesting deeper than %d levels", RG_DOC_MAX_DEPTH);
  }
  if (++d->n_nodes > RG_DOC_MAX_NODES) {
    rg_pos_t p = mark_pos(d, yn->start_mark);
    return rg_status_at(RG_PARSE, &p,
                        "document expands to more than %u nodes (aliases repeated too often?)",
                        RG_DOC_MAX_NODES);
  }
  rg_node_t *n = arena_alloc(d, sizeof(*n));
  if (!n) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory reading %s", d->path);
  memset(n, 0, sizeof(*n));
  n->pos = mark_pos(d, yn->start_mark);
  switch (yn->type) {
    case YAML_SCALAR_NODE: {
      n->kind = RG_NODE_SCALAR;
      size_t len = yn->data.scalar.length;
      char *s = arena_alloc(d, len + 1);
      if (!s) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory reading %s", d->path);
      memcpy(s, yn->data.scalar.value, len);
      s[len] = 0;
      if (strlen(s) != len)
        return rg_status_at(RG_PARSE, &n->pos, "a value contains a NUL character");
      n->scalar = s;
      n->quoted = yn->data.scalar.style == YAML_SINGLE_QUOTED_SCALAR_STYLE ||
                  yn->data.scalar.style == YAML_DOUBLE_QUOTED_SCALAR_STYLE;
      break;
    }
    case YAML_SEQUENCE_NODE: {
      n->kind = RG_NODE_SEQ;
      yaml_node_item_t *b = yn->data.sequence.items.start, *e = yn->data.sequence.items.top;
      n->n = (size_t)(e - b);
      n->items = arena_alloc(d, (n->n ? n->n : 1) * sizeof(rg_node_t *));
      if (!n->items) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory reading %s", d->path);
      for (size_t i = 0; i < n->n; i++)
        RG_RETURN_IF_ERROR(
            convert(d, yd, yaml_document_get_node(yd, b[i]), depth + 1, &n->items[i]));
      break;
    }
    case YAML_MAPPING_NODE: {
      n->kind = RG_NODE_MAP;
      yaml_node_pair_t *b = yn->data.mapping.pairs.start, *e = yn->data.mapping.pairs.top;
      n->n = (size_t)(e - b);
      n->keys = arena_alloc(d, (n->n ? n->n : 1) * sizeof(rg_node_t *));
      n->items = arena_alloc(d, (n->n ? n->n : 1) * sizeof(rg_node_t *));
      if (!n->keys || !n->items)
        return rg_status_make(RG_OUT_OF_MEMORY, "out of memory reading %s", d->path);
      for (size_t i = 0; i < n->n; i++) {
        RG_RETURN_IF_ERROR(
            convert(d, yd, yaml_document_get_node(yd, b[i].key), depth + 1, &n->keys[i]));
        if (n->keys[i]->kind != RG_NODE_SCALAR)
          return rg_status_at(RG_PARSE, &n->keys[i]->pos, "mapping keys must be plain text");
        RG_RETURN_IF_ERROR(
            convert(d, yd, yaml_document_get_node(yd, b[i].value), depth + 1, &n->items[i]));
      }
      break;
    }
    default:
      return rg_status_at(RG_PARSE, &n->pos, "empty node");
  }
  *out = n;
  return NULL;
}

// Converts a byte offset into 1-based line and column.
static void offset_pos(const char *text, size_t off, int *line, int *col) {
  *line = 1;
  *col = 1;
  for (size_t i = 0; i < off && text[i]; i++) {
    if (text[i] == '\n') {
      ++*line;
      *col = 1;
    } else {
      ++*col;
    }
  }
}

static rg_status_t check_json(const char *name, const char *text, size_t len) {
  const char *end = NULL;
  cJSON *j = cJSON_ParseWithLengthOpts(text, len, &end, 0);
  if (j) {
    cJSON_Delete(j);
    return NULL;
  }
  size_t off = end ? (size_t)(end - text) : 0;
  if (off > len) off = len;
  // cJSON points at the value it gave up on; a file cut short is clearer
  // reported as such, so look for brackets still open at the end.
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
  int line, col;
  offset_pos(text, off, &line, &col);
  rg_pos_t p = {name, line, col};
  if (off >= len)
    return rg_status_at(RG_PARSE, &p, "invalid JSON: the file ends early (truncated?)");
  // The text need not end in a NUL (it may be a slice of a buffer), so the
  // excerpt is bounded by the length, and cut at the line's end.
  int take = 0;
  while (take < 20 && off + take < len && text[off + take] != '\n' && text[off + take] != '\0')
    take++;
  return rg_status_at(RG_PARSE, &p, "invalid JSON near '%.*s'", take, text + off);
}

static int looks_like_json(const char *name) {
  size_t n = strlen(name);
  return n >= 5 && strcmp(name + n - 5, ".json") == 0;
}

rg_status_t rg_doc_load_string(const char *name, const char *text, size_t len, int json,
                               rg_doc_t **out_doc) {
  *out_doc = NULL;
  if (len > RG_DOC_MAX_BYTES)
    return rg_status_make(RG_PARSE, "%s: file is %zu bytes, more than the %u allowed for a config",
                          name, len, RG_DOC_MAX_BYTES);
  if (json) RG_RETURN_IF_ERROR(check_json(name, text, len));
  rg_doc_t *d = calloc(1, sizeof(*d));
  if (!d || !(d->path = strdup(name))) {
    free(d);
    return rg_status_make(RG_OUT_OF_MEMORY, "out of memory reading %s", name);
  }
  yaml_parser_t parser;
  yaml_document_t yd;
  rg_status_t st = NULL;
  if (!yaml_parser_initialize(&parser)) {
    st = rg_status_make(RG_OUT_OF_MEMORY, "out of memory reading %s", name);
    goto fail_doc;
  }
  yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
  if (!yaml_parser_load(&parser, &yd)) {
    rg_pos_t p = mark_pos(d, parser.problem_mark);
    const char *what = parser.problem ? parser.problem : "malformed YAML";
    if (parser.context) {
      rg_pos_t cp = mark_pos(d, parser.context_mark);
      st = rg_status_at(RG_PARSE, &p, "%s %s (started at line %d, column %d)", what, parser.context,
                        cp.line, cp.col);
    } else {
      st = rg_status_at(RG_PARSE, &p, "%s", what);
    }
    goto fail_parser;
  }
  yaml_node_t *root = yaml_document_get_root_node(&yd);
  if (!root) {
    rg_pos_t p = {d->path, 1, 1};
    st = rg_status_at(RG_PARSE, &p, "the file is empty; expected a mapping of settings");
    goto fail_yd;
  }
  st = convert(d, &yd, root, 0, &d->root);
  if (st) goto fail_yd;
  // A second document in one file is almost always a mistake ("---" pasted).
  yaml_document_t extra;
  if (yaml_parser_load(&parser, &extra)) {
    yaml_node_t *r2 = yaml_document_get_root_node(&extra);
    if (r2) {
      rg_pos_t p = mark_pos(d, r2->start_mark);
      st = rg_status_at(RG_PARSE, &p, "a second YAML document starts here; one file holds one");
    }
    yaml_document_delete(&extra);
  } else {
    rg_pos_t p = mark_pos(d, parser.problem_mark);
    st = rg_status_at(RG_PARSE, &p, "%s", parser.problem ? parser.problem : "malformed YAML");
  }
  if (st) goto fail_yd;
  yaml_document_delete(&yd);
  yaml_parser_delete(&parser);
  *out_doc = d;
  return NULL;

fail_yd:
  yaml_document_delete(&yd);
fail_parser:
  yaml_parser_delete(&parser);
fail_doc:
  rg_doc_destroy(d);
  return st;
}

rg_status_t rg_doc_load_file(const char *path, rg_doc_t **out_doc) {
  *out_doc = NULL;
  char *buf = NULL;
  size_t len = 0;
  RG_RETURN_IF_ERROR(rg_file_read_all(path, "config", RG_DOC_MAX_BYTES, &buf, &len));
  rg_status_t st = rg_doc_load_string(path, buf, len, looks_like_json(path), out_doc);
  free(buf);
  return st;
}

// ----- Reading ---------------------------------------------------------------

const char *rg_node_kind_name(rg_node_kind_t kind) {
  switch (kind) {
    case RG_NODE_SCALAR:
      return "a single value";
    case RG_NODE_MAP:
      return "a mapping (key: value lines)";
    case RG_NODE_SEQ:
      return "a list";
  }
  return "?";
}

const rg_node_t *rg_node_get(const rg_node_t *map, const char *key) {
  if (!map || map->kind != RG_NODE_MAP) return NULL;
  for (size_t i = 0; i < map->n; i++)
    if (strcmp(map->keys[i]->scalar, key) == 0) return map->items[i];
  return NULL;
}

const rg_pos_t *rg_node_key_pos(const rg_node_t *map, const char *key) {
  if (map && map->kind == RG_NODE_MAP)
    for (size_t i = 0; i < map->n; i++)
      if (strcmp(map->keys[i]->scalar, key) == 0) return &map->keys[i]->pos;
  return map ? &map->pos : NULL;
}

rg_status_t rg_node_expect(const rg_node_t *n, rg_node_kind_t kind, const char *what) {
  if (n->kind == kind) return NULL;
  if (n->kind == RG_NODE_SCALAR)
    return rg_status_at(RG_INVALID_ARGUMENT, &n->pos, "%s: expected %s, got '%s'", what,
                        rg_node_kind_name(kind), n->scalar);
  return rg_status_at(RG_INVALID_ARGUMENT, &n->pos, "%s: expected %s, got %s", what,
                      rg_node_kind_name(kind), rg_node_kind_name(n->kind));
}

int rg_edit_distance(const char *a, const char *b, int cap) {
  size_t la = strlen(a), lb = strlen(b);
  if (la > 64 || lb > 64) return strcmp(a, b) ? cap + 1 : 0;
  int row[65];
  for (size_t j = 0; j <= lb; j++) row[j] = (int)j;
  for (size_t i = 1; i <= la; i++) {
    int diag = row[0], best = row[0] = (int)i;
    for (size_t j = 1; j <= lb; j++) {
      int up = row[j];
      int v = diag + (a[i - 1] != b[j - 1]);
      if (up + 1 < v) v = up + 1;
      if (row[j - 1] + 1 < v) v = row[j - 1] + 1;
      row[j] = v;
      diag = up;
      if (v < best) best = v;
    }
    if (best > cap) return cap + 1;
  }
  return row[lb] > cap ? cap + 1 : row[lb];
}

const char *rg_nearest(const char *word, const char *const *options, size_t n) {
  const char *best = NULL;
  int bestd = INT_MAX;
  size_t wl = strlen(word);
  // A name the user shortened ("h100" for "h100-sxm") is a better guess than
  // a sibling one edit away ("h200"), so whole-prefix matches come first.
  if (wl >= 3)
    for (size_t i = 0; i < n; i++)
      if (!strncmp(options[i], word, wl) && (!best || strlen(options[i]) < strlen(best)))
        best = options[i];
  if (best) return best;
  int cap = wl < 4 ? 1 : wl < 8 ? 2 : 3;
  for (size_t i = 0; i < n; i++) {
    int d = rg_edit_distance(word, options[i], cap);
    if (d <= cap && d < bestd) {
      bestd = d;
      best = options[i];
    }
  }
  if (best || wl < 3) return best;
  // Last, a name that contains the word ("context" for "long-context").
  for (size_t i = 0; i < n; i++)
    if (strstr(options[i], word) && (!best || strlen(options[i]) < strlen(best))) best = options[i];
  return best;
}

static size_t list_len(const char *const *l) {
  size_t n = 0;
  while (l[n]) n++;
  return n;
}

static rg_status_t check_dups(const rg_node_t *map, const char *what) {
  for (size_t i = 0; i < map->n; i++)
    for (size_t j = 0; j < i; j++)
      if (strcmp(map->keys[i]->scalar, map->keys[j]->scalar) == 0)
        return rg_status_at(RG_INVALID_ARGUMENT, &map->keys[i]->pos,
                            "%s: key '%s' appears twice (first at line %d)", what,
                            map->keys[i]->scalar, map->keys[j]->pos.line);
  return NULL;
}

static void join_list(const char *const *l, char *buf, size_t len) {
  buf[0] = 0;
  for (size_t i = 0; l[i]; i++) {
    size_t u = strlen(buf);
    snprintf(buf + u, len - u, "%s%s", i ? ", " : "", l[i]);
  }
}

rg_status_t rg_node_check_keys(const rg_node_t *map, const char *const *allowed, const char *what) {
  RG_RETURN_IF_ERROR(rg_node_expect(map, RG_NODE_MAP, what));
  RG_RETURN_IF_ERROR(check_dups(map, what));
  size_t na = list_len(allowed);
  for (size_t i = 0; i < map->n; i++) {
    const char *k = map->keys[i]->scalar;
    size_t j = 0;
    while (j < na && strcmp(k, allowed[j])) j++;
    if (j < na) continue;
    const char *near = rg_nearest(k, allowed, na);
    if (near)
      return rg_status_at(RG_INVALID_ARGUMENT, &map->keys[i]->pos,
                          "%s: unknown key '%s'; did you mean '%s'?", what, k, near);
    char list[1024];
    join_list(allowed, list, sizeof(list));
    return rg_status_at(RG_INVALID_ARGUMENT, &map->keys[i]->pos,
                        "%s: unknown key '%s'; expected one of: %s", what, k, list);
  }
  return NULL;
}

rg_status_t rg_node_check_typos(const rg_node_t *map, const char *const *known, const char *what) {
  RG_RETURN_IF_ERROR(rg_node_expect(map, RG_NODE_MAP, what));
  RG_RETURN_IF_ERROR(check_dups(map, what));
  size_t nk = list_len(known);
  for (size_t i = 0; i < map->n; i++) {
    const char *k = map->keys[i]->scalar;
    size_t j = 0;
    while (j < nk && strcmp(k, known[j])) j++;
    if (j < nk) continue;
    // Foreign formats carry many keys we do not read; only a near miss of a
    // key we do read is reported, since it would silently fall to a default.
    for (j = 0; j < nk; j++) {
      size_t kl = strlen(known[j]);
      int cap = kl < 8 ? 1 : 2;
      if (rg_edit_distance(k, known[j], cap) <= cap)
        return rg_status_at(RG_INVALID_ARGUMENT, &map->keys[i]->pos,
                            "%s: unknown key '%s'; did you mean '%s'?", what, k, known[j]);
    }
  }
  return NULL;
}

rg_status_t rg_node_missing(const rg_node_t *map, const char *key, const char *what) {
  return rg_status_at(RG_INVALID_ARGUMENT, &map->pos, "%s: missing required key '%s'", what, key);
}

int rg_node_is_null(const rg_node_t *n) {
  if (!n || n->kind != RG_NODE_SCALAR || n->quoted) return 0;
  const char *s = n->scalar;
  return !*s || !strcmp(s, "~") || !strcmp(s, "null") || !strcmp(s, "Null") || !strcmp(s, "NULL");
}

static rg_status_t lookup(const rg_node_t *map, const char *key, int required,
                          const rg_node_t **out) {
  *out = NULL;
  if (map->kind != RG_NODE_MAP) return rg_node_expect(map, RG_NODE_MAP, key);
  const rg_node_t *n = rg_node_get(map, key);
  if (!n || rg_node_is_null(n)) {
    if (required)
      return rg_status_at(RG_INVALID_ARGUMENT, &map->pos, "missing required key '%s'", key);
    return NULL;
  }
  *out = n;
  return NULL;
}

rg_status_t rg_node_str(const rg_node_t *n, const char *what, const char **out) {
  if (n->kind != RG_NODE_SCALAR) return rg_node_expect(n, RG_NODE_SCALAR, what);
  if (!n->scalar[0])
    return rg_status_at(RG_INVALID_ARGUMENT, &n->pos, "%s: expected text, got nothing", what);
  *out = n->scalar;
  return NULL;
}

rg_status_t rg_node_num(const rg_node_t *n, const char *what, double min, double max, double *out) {
  if (n->kind != RG_NODE_SCALAR) return rg_node_expect(n, RG_NODE_SCALAR, what);
  const char *s = n->scalar;
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (end == s || *end || !isfinite(v) || errno == ERANGE || n->quoted)
    return rg_status_at(RG_INVALID_ARGUMENT, &n->pos, "%s: expected a number, got '%s'", what, s);
  if (v < min || v > max)
    return rg_status_at(RG_INVALID_ARGUMENT, &n->pos, "%s: %s is out of range; expected %g to %g",
                        what, s, min, max);
  *out = v;
  return NULL;
}

rg_status_t rg_node_int(const rg_node_t *n, const char *what, long long min, long long max,
                        long long *out) {
  if (n->kind != RG_NODE_SCALAR) return rg_node_expect(n, RG_NODE_SCALAR, what);
  const char *s = n->scalar;
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (end != s && (*end == '.' || *end == 'e' || *end == 'E') && !n->quoted) {
    // Allow 1e6 or 7.0 when the value is a whole number.
    double d = strtod(s, &end);
    if (!*end && isfinite(d) && d == floor(d) && fabs(d) < 9e18) {
      v = (long long)d;
    } else {
      return rg_status_at(RG_INVALID_ARGUMENT, &n->pos, "%s: expected a whole number, got '%s'",
                          what, s);
    }
  } else if (end == s || *end || errno == ERANGE || n->quoted) {
    return rg_status_at(RG_INVALID_ARGUMENT, &n->pos, "%s: expected a whole number, got '%s'", what,
                        s);
  }
  if (v < min || v > max)
    return rg_status_at(RG_INVALID_ARGUMENT, &n->pos,
                        "%s: %lld is out of range; expected %lld to %lld", what, v, min, max);
  *out = v;
  return NULL;
}

rg_status_t rg_cfg_str(const rg_node_t *map, const char *key, int required, const char **out) {
  const rg_node_t *n;
  RG_RETURN_IF_ERROR(lookup(map, key, required, &n));
  return n ? rg_node_str(n, key, out) : NULL;
}

rg_status_t rg_cfg_int(const rg_node_t *map, const char *key, int required, long long min,
                       long long max, long long *out) {
  const rg_node_t *n;
  RG_RETURN_IF_ERROR(lookup(map, key, required, &n));
  return n ? rg_node_int(n, key, min, max, out) : NULL;
}

rg_status_t rg_cfg_num(const rg_node_t *map, const char *key, int required, double min, double max,
                       double *out) {
  const rg_node_t *n;
  RG_RETURN_IF_ERROR(lookup(map, key, required, &n));
  return n ? rg_node_num(n, key, min, max, out) : NULL;
}

rg_status_t rg_cfg_bool(const rg_node_t *map, const char *key, int required, int *out) {
  const rg_node_t *n;
  RG_RETURN_IF_ERROR(lookup(map, key, required, &n));
  if (!n) return NULL;
  if (n->kind == RG_NODE_SCALAR && !n->quoted) {
    static const char *const yes[] = {"true", "True", "TRUE", "yes", "on"};
    static const char *const no[] = {"false", "False", "FALSE", "no", "off"};
    for (size_t i = 0; i < 5; i++) {
      if (!strcmp(n->scalar, yes[i])) {
        *out = 1;
        return NULL;
      }
      if (!strcmp(n->scalar, no[i])) {
        *out = 0;
        return NULL;
      }
    }
  }
  if (n->kind != RG_NODE_SCALAR) return rg_node_expect(n, RG_NODE_SCALAR, key);
  return rg_status_at(RG_INVALID_ARGUMENT, &n->pos, "%s: expected true or false, got '%s'", key,
                      n->scalar);
}
