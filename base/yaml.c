#include "base/yaml.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
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

// ----- Building the tree from libyaml's events ------------------------------------
//
// The tree is built from the parser's event stream rather than from
// yaml_parser_load()'s document. Composing a whole document first costs time
// quadratic in its nesting depth inside libyaml (100k '[' took 39 s); events
// let the depth limit stop the parse at the first node past it, so a hostile
// file is refused after reading little more than RG_DOC_MAX_DEPTH brackets.
// Aliases are expanded into copies that keep the anchored node's positions,
// with every copy counted against RG_DOC_MAX_NODES so alias bombs fail too.

// A collection whose end event has not come yet.
typedef struct {
  rg_node_t *node;
  rg_node_t **items;  // SEQ: the items; MAP: key, value, key, value, ...
  size_t n, cap;
  const char *anchor;  // in the arena; NULL when the node has none
} frame_t;

typedef struct {
  const char *name;  // NULL: empty slot
  const rg_node_t *node;
  rg_pos_t pos;
} anchor_t;

typedef struct {
  rg_doc_t *d;
  frame_t stack[RG_DOC_MAX_DEPTH + 1];
  int depth;          // frames in use: the depth a new node gets
  anchor_t *anchors;  // open addressing, a power of two in size
  size_t n_anchors, anchor_cap;
} builder_t;

static rg_status_t oom_doc(const rg_doc_t *d) {
  return rg_status_make(RG_OUT_OF_MEMORY, "out of memory reading %s", d->path);
}

static uint64_t hash_name(const char *s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
  return h;
}

static anchor_t *anchor_slot(const builder_t *b, const char *name) {
  size_t mask = b->anchor_cap - 1;
  for (size_t i = hash_name(name) & mask;; i = (i + 1) & mask)
    if (!b->anchors[i].name || strcmp(b->anchors[i].name, name) == 0) return &b->anchors[i];
}

static const anchor_t *anchor_find(const builder_t *b, const char *name) {
  if (!b->anchor_cap) return NULL;
  const anchor_t *a = anchor_slot(b, name);
  return a->name ? a : NULL;
}

static rg_status_t anchor_add(builder_t *b, const char *name, const rg_node_t *n) {
  if (2 * (b->n_anchors + 1) > b->anchor_cap) {
    size_t cap = b->anchor_cap ? 2 * b->anchor_cap : 64;
    anchor_t *old = b->anchors;
    size_t old_cap = b->anchor_cap;
    b->anchors = calloc(cap, sizeof(*b->anchors));
    if (!b->anchors) {
      b->anchors = old;
      return oom_doc(b->d);
    }
    b->anchor_cap = cap;
    for (size_t i = 0; i < old_cap; i++)
      if (old[i].name) *anchor_slot(b, old[i].name) = old[i];
    free(old);
  }
  anchor_t *a = anchor_slot(b, name);
  // libyaml's own loader refuses a repeated anchor; so does ridge, rather
  // than let a later definition silently change what earlier aliases meant.
  if (a->name)
    return rg_status_at(RG_PARSE, &n->pos, "anchor &%s is defined twice (first at line %d)", name,
                        a->pos.line);
  *a = (anchor_t){name, n, n->pos};
  b->n_anchors++;
  return NULL;
}

static rg_status_t too_deep(const rg_pos_t *pos) {
  return rg_status_at(RG_PARSE, pos, "nesting deeper than %d levels (ridge's limit for a config)",
                      RG_DOC_MAX_DEPTH);
}

// A new node at depth `depth`, counted against the document's cap.
static rg_status_t new_node(rg_doc_t *d, rg_node_kind_t kind, const rg_pos_t *pos, int depth,
                            rg_node_t **out) {
  if (depth > RG_DOC_MAX_DEPTH) return too_deep(pos);
  if (++d->n_nodes > RG_DOC_MAX_NODES)
    return rg_status_at(RG_PARSE, pos,
                        "document expands to more than %u nodes (aliases repeated too often?)",
                        RG_DOC_MAX_NODES);
  rg_node_t *n = arena_alloc(d, sizeof(*n));
  if (!n) return oom_doc(d);
  memset(n, 0, sizeof(*n));
  n->kind = kind;
  n->pos = *pos;
  *out = n;
  return NULL;
}

// Copies an anchored node for an alias placed at `depth`. Strings are shared:
// the arena owns them and nothing writes to them.
static rg_status_t copy_node(rg_doc_t *d, const rg_node_t *src, int depth, rg_node_t **out) {
  rg_node_t *n;
  RG_RETURN_IF_ERROR(new_node(d, src->kind, &src->pos, depth, &n));
  n->scalar = src->scalar;
  n->quoted = src->quoted;
  n->n = src->n;
  if (src->kind == RG_NODE_SEQ || src->kind == RG_NODE_MAP) {
    n->items = arena_alloc(d, (n->n ? n->n : 1) * sizeof(rg_node_t *));
    if (!n->items) return oom_doc(d);
    if (src->kind == RG_NODE_MAP) {
      n->keys = arena_alloc(d, (n->n ? n->n : 1) * sizeof(rg_node_t *));
      if (!n->keys) return oom_doc(d);
    }
    for (size_t i = 0; i < n->n; i++) {
      if (src->kind == RG_NODE_MAP)
        RG_RETURN_IF_ERROR(copy_node(d, src->keys[i], depth + 1, &n->keys[i]));
      RG_RETURN_IF_ERROR(copy_node(d, src->items[i], depth + 1, &n->items[i]));
    }
  }
  *out = n;
  return NULL;
}

// Whether the next node of the innermost open mapping is a key.
static int next_is_key(const builder_t *b) {
  const frame_t *f = b->depth ? &b->stack[b->depth - 1] : NULL;
  return f && f->node->kind == RG_NODE_MAP && f->n % 2 == 0;
}

// Adds a finished node to the open collection (or makes it the root).
static rg_status_t attach(builder_t *b, rg_node_t *n) {
  if (b->depth == 0) {
    b->d->root = n;
    return NULL;
  }
  if (next_is_key(b) && n->kind != RG_NODE_SCALAR)
    return rg_status_at(RG_PARSE, &n->pos, "mapping keys must be plain text");
  frame_t *f = &b->stack[b->depth - 1];
  if (f->n == f->cap) {
    size_t cap = f->cap ? 2 * f->cap : 8;
    rg_node_t **items = realloc(f->items, cap * sizeof(*items));
    if (!items) return oom_doc(b->d);
    f->items = items;
    f->cap = cap;
  }
  f->items[f->n++] = n;
  return NULL;
}

static const char *arena_str(rg_doc_t *d, const yaml_char_t *s) {
  return s ? rg_doc_strdup(d, (const char *)s) : NULL;
}

static rg_status_t on_scalar(builder_t *b, const yaml_event_t *ev) {
  rg_doc_t *d = b->d;
  rg_pos_t pos = mark_pos(d, ev->start_mark);
  rg_node_t *n;
  RG_RETURN_IF_ERROR(new_node(d, RG_NODE_SCALAR, &pos, b->depth, &n));
  size_t len = ev->data.scalar.length;
  char *s = arena_alloc(d, len + 1);
  if (!s) return oom_doc(d);
  memcpy(s, ev->data.scalar.value, len);
  s[len] = 0;
  if (strlen(s) != len) return rg_status_at(RG_PARSE, &pos, "a value contains a NUL character");
  n->scalar = s;
  n->quoted = ev->data.scalar.style == YAML_SINGLE_QUOTED_SCALAR_STYLE ||
              ev->data.scalar.style == YAML_DOUBLE_QUOTED_SCALAR_STYLE;
  if (ev->data.scalar.anchor) {
    const char *a = arena_str(d, ev->data.scalar.anchor);
    if (!a) return oom_doc(d);
    RG_RETURN_IF_ERROR(anchor_add(b, a, n));
  }
  return attach(b, n);
}

static rg_status_t on_start(builder_t *b, const yaml_event_t *ev, rg_node_kind_t kind) {
  rg_doc_t *d = b->d;
  rg_pos_t pos = mark_pos(d, ev->start_mark);
  if (next_is_key(b)) return rg_status_at(RG_PARSE, &pos, "mapping keys must be plain text");
  rg_node_t *n;
  RG_RETURN_IF_ERROR(new_node(d, kind, &pos, b->depth, &n));
  const yaml_char_t *anchor =
      kind == RG_NODE_SEQ ? ev->data.sequence_start.anchor : ev->data.mapping_start.anchor;
  frame_t *f = &b->stack[b->depth++];
  *f = (frame_t){n, NULL, 0, 0, NULL};
  if (anchor && !(f->anchor = arena_str(d, anchor))) return oom_doc(d);
  return NULL;
}

static rg_status_t on_end(builder_t *b) {
  rg_doc_t *d = b->d;
  frame_t f = b->stack[--b->depth];
  rg_node_t *n = f.node;
  rg_status_t st = NULL;
  if (n->kind == RG_NODE_SEQ) {
    n->n = f.n;
    n->items = arena_alloc(d, (f.n ? f.n : 1) * sizeof(rg_node_t *));
    if (n->items && f.n) memcpy(n->items, f.items, f.n * sizeof(rg_node_t *));
  } else {
    n->n = f.n / 2;
    n->keys = arena_alloc(d, (n->n ? n->n : 1) * sizeof(rg_node_t *));
    n->items = arena_alloc(d, (n->n ? n->n : 1) * sizeof(rg_node_t *));
    for (size_t i = 0; n->keys && n->items && i < n->n; i++) {
      n->keys[i] = f.items[2 * i];
      n->items[i] = f.items[2 * i + 1];
    }
  }
  free(f.items);
  if (!n->items || (n->kind == RG_NODE_MAP && !n->keys)) return oom_doc(d);
  // An anchor is defined once its node is complete, so an alias inside the
  // node it names (a cycle) finds nothing.
  if (f.anchor) st = anchor_add(b, f.anchor, n);
  return st ? st : attach(b, n);
}

static rg_status_t on_alias(builder_t *b, const yaml_event_t *ev) {
  rg_pos_t pos = mark_pos(b->d, ev->start_mark);
  const char *name = (const char *)ev->data.alias.anchor;
  const anchor_t *a = anchor_find(b, name);
  if (!a)
    return rg_status_at(RG_PARSE, &pos,
                        "alias *%s names no anchor defined before it (or names a node that holds "
                        "it)",
                        name);
  rg_node_t *n;
  RG_RETURN_IF_ERROR(copy_node(b->d, a->node, b->depth, &n));
  return attach(b, n);
}

static rg_status_t parse_error(const rg_doc_t *d, const yaml_parser_t *parser) {
  rg_pos_t p = mark_pos(d, parser->problem_mark);
  const char *what = parser->problem ? parser->problem : "malformed YAML";
  if (parser->context) {
    rg_pos_t cp = mark_pos(d, parser->context_mark);
    return rg_status_at(RG_PARSE, &p, "%s %s (started at line %d, column %d)", what,
                        parser->context, cp.line, cp.col);
  }
  return rg_status_at(RG_PARSE, &p, "%s", what);
}

// Reads every event of the stream into d's tree.
static rg_status_t build(builder_t *b, yaml_parser_t *parser) {
  rg_doc_t *d = b->d;
  int docs = 0;
  for (;;) {
    yaml_event_t ev;
    if (!yaml_parser_parse(parser, &ev)) return parse_error(d, parser);
    rg_status_t st = NULL;
    int end = ev.type == YAML_STREAM_END_EVENT;
    if (ev.type == YAML_DOCUMENT_START_EVENT) {
      docs++;
    } else if (docs > 1 && (ev.type == YAML_SCALAR_EVENT || ev.type == YAML_SEQUENCE_START_EVENT ||
                            ev.type == YAML_MAPPING_START_EVENT || ev.type == YAML_ALIAS_EVENT)) {
      // A second document in one file is almost always a mistake ("---"
      // pasted).
      rg_pos_t p = mark_pos(d, ev.start_mark);
      st = rg_status_at(RG_PARSE, &p, "a second YAML document starts here; one file holds one");
    } else {
      switch (ev.type) {
        case YAML_SCALAR_EVENT:
          st = on_scalar(b, &ev);
          break;
        case YAML_SEQUENCE_START_EVENT:
          st = on_start(b, &ev, RG_NODE_SEQ);
          break;
        case YAML_MAPPING_START_EVENT:
          st = on_start(b, &ev, RG_NODE_MAP);
          break;
        case YAML_SEQUENCE_END_EVENT:
        case YAML_MAPPING_END_EVENT:
          st = on_end(b);
          break;
        case YAML_ALIAS_EVENT:
          st = on_alias(b, &ev);
          break;
        default:
          break;
      }
    }
    yaml_event_delete(&ev);
    if (st) return st;
    if (end) break;
  }
  if (!d->root) {
    rg_pos_t p = {d->path, 1, 1};
    return rg_status_at(RG_PARSE, &p, "the file is empty; expected a mapping of settings");
  }
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

// JSON nesting past the limit, found in one pass before cJSON, whose own cap
// (1000 levels) would otherwise report a deeper file as merely "invalid".
// A bracket at depth k holds nodes at depth k, so k may reach one past the
// node limit.
static rg_status_t check_json_depth(const char *name, const char *text, size_t len) {
  int depth = 0, in_str = 0, line = 1, col = 1;
  for (size_t i = 0; i < len; i++, col++) {
    char c = text[i];
    if (c == '\n') {
      line++;
      col = 0;
    } else if (in_str) {
      if (c == '\\') {
        i++;
        col++;
      } else if (c == '"') {
        in_str = 0;
      }
    } else if (c == '"') {
      in_str = 1;
    } else if (c == '{' || c == '[') {
      if (++depth > RG_DOC_MAX_DEPTH + 1) {
        rg_pos_t p = {name, line, col};
        return too_deep(&p);
      }
    } else if (c == '}' || c == ']') {
      depth--;
    }
  }
  return NULL;
}

static rg_status_t check_json(const char *name, const char *text, size_t len) {
  RG_RETURN_IF_ERROR(check_json_depth(name, text, len));
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
  rg_status_t st = NULL;
  if (!yaml_parser_initialize(&parser)) {
    st = oom_doc(d);
    goto fail_doc;
  }
  yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
  builder_t *b = calloc(1, sizeof(*b));
  if (!b) {
    st = oom_doc(d);
    goto fail_parser;
  }
  b->d = d;
  st = build(b, &parser);
  for (int i = 0; i < b->depth; i++) free(b->stack[i].items);
  free(b->anchors);
  free(b);
  if (st) goto fail_parser;
  yaml_parser_delete(&parser);
  *out_doc = d;
  return NULL;

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
