// base/yaml.h — YAML (and JSON) documents as a tree that remembers where every
// value came from, so any later check can say "file:line:col: ...".
//
// Documents are parsed with libyaml. JSON files (a Hugging Face config.json)
// are first checked for strict JSON syntax with cJSON, then read through the
// same libyaml path, since JSON is YAML flow syntax and libyaml keeps marks.
//
// Ownership: rg_doc_load_* returns a document the caller destroys; every node
// and string reached from it is borrowed and lives until rg_doc_destroy().
// Aliases are expanded into copies, with a cap on the total node count so a
// "billion laughs" file fails with a clear error instead of exhausting memory.
#ifndef RG_BASE_YAML_H
#define RG_BASE_YAML_H

#include <stddef.h>

#include "base/status.h"

typedef enum { RG_NODE_SCALAR, RG_NODE_MAP, RG_NODE_SEQ } rg_node_kind_t;

typedef struct rg_node_s rg_node_t;
struct rg_node_s {
  rg_node_kind_t kind;
  rg_pos_t pos;
  const char *scalar;  // SCALAR: the text; NULL otherwise
  int quoted;          // SCALAR: written in quotes (so never null/bool/number)
  size_t n;            // MAP: pairs; SEQ: items
  rg_node_t **keys;    // MAP: n scalar keys
  rg_node_t **items;   // MAP: n values; SEQ: n items
};

typedef struct rg_doc_s rg_doc_t;

// Limits that keep hostile input bounded.
#define RG_DOC_MAX_BYTES (64u << 20)
#define RG_DOC_MAX_NODES 1000000u
#define RG_DOC_MAX_DEPTH 64

RG_MUST_USE rg_status_t rg_doc_load_file(const char *path, rg_doc_t **out_doc);
// name is used in messages and copied. JSON syntax is checked strictly when
// json is non-zero.
RG_MUST_USE rg_status_t rg_doc_load_string(const char *name, const char *text,
                                           size_t len, int json,
                                           rg_doc_t **out_doc);
const rg_node_t *rg_doc_root(const rg_doc_t *doc);
const char *rg_doc_path(const rg_doc_t *doc);
void rg_doc_destroy(rg_doc_t *doc);

// Copies a string into the document's arena (lives as long as the doc).
const char *rg_doc_strdup(rg_doc_t *doc, const char *s);

// ----- Reading configs with precise errors --------------------------------
// All messages name the position of the offending node and what was
// expected. `what` names the thing being read ("device class", "fleet").

const char *rg_node_kind_name(rg_node_kind_t kind);
// Value for key in a mapping, or NULL. Borrowed.
const rg_node_t *rg_node_get(const rg_node_t *map, const char *key);
// Position of a key (not its value) in a mapping, or the map's own position.
const rg_pos_t *rg_node_key_pos(const rg_node_t *map, const char *key);

RG_MUST_USE rg_status_t rg_node_expect(const rg_node_t *node,
                                       rg_node_kind_t kind, const char *what);
// Rejects keys not in the NULL-terminated `allowed` list, suggesting the
// nearest valid key; also rejects duplicate keys.
RG_MUST_USE rg_status_t rg_node_check_keys(const rg_node_t *map,
                                           const char *const *allowed,
                                           const char *what);
// Lenient variant for foreign formats (config.json): unknown keys are
// accepted unless they are within a small edit distance of a known key,
// which is almost surely a typo.
RG_MUST_USE rg_status_t rg_node_check_typos(const rg_node_t *map,
                                            const char *const *known,
                                            const char *what);
RG_MUST_USE rg_status_t rg_node_missing(const rg_node_t *map, const char *key,
                                        const char *what);

// Typed getters. `required` non-zero: a missing key is an error; else the
// out value is left untouched (so set defaults first) and OK is returned.
RG_MUST_USE rg_status_t rg_cfg_str(const rg_node_t *map, const char *key,
                                   int required, const char **out);
RG_MUST_USE rg_status_t rg_cfg_int(const rg_node_t *map, const char *key,
                                   int required, long long min, long long max,
                                   long long *out);
RG_MUST_USE rg_status_t rg_cfg_num(const rg_node_t *map, const char *key,
                                   int required, double min, double max,
                                   double *out);
RG_MUST_USE rg_status_t rg_cfg_bool(const rg_node_t *map, const char *key,
                                    int required, int *out);
// Node-level scalar readers (for sequence items and the like).
RG_MUST_USE rg_status_t rg_node_int(const rg_node_t *n, const char *what,
                                    long long min, long long max,
                                    long long *out);
RG_MUST_USE rg_status_t rg_node_num(const rg_node_t *n, const char *what,
                                    double min, double max, double *out);
RG_MUST_USE rg_status_t rg_node_str(const rg_node_t *n, const char *what,
                                    const char **out);
// Is this scalar YAML null ("~", "null", empty, unquoted)?
int rg_node_is_null(const rg_node_t *n);

// Levenshtein distance, capped at `cap` (returns cap+1 past it).
int rg_edit_distance(const char *a, const char *b, int cap);
// The entry of `options` nearest to `word`, or NULL when none is close.
const char *rg_nearest(const char *word, const char *const *options, size_t n);

#endif  // RG_BASE_YAML_H
