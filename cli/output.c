#include "cli/output.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "base/yaml.h"

// ----- Tables ----------------------------------------------------------------

void rg_table_init(rg_table_t *t, int n_cols, const char *const *heads, const char *align) {
  memset(t, 0, sizeof(*t));
  if (n_cols > RG_TABLE_MAX_COLS) n_cols = RG_TABLE_MAX_COLS;
  t->n_cols = n_cols;
  for (int i = 0; i < n_cols; i++) {
    t->head[i] = heads[i];
    t->align[i] = align && align[i] == 'r' ? 'r' : 'l';
  }
}

void rg_table_deinit(rg_table_t *t) {
  for (size_t i = 0; i < t->n_cells; i++) free(t->cells[i]);
  free(t->cells);
  memset(t, 0, sizeof(*t));
}

void rg_table_cell(rg_table_t *t, const char *fmt, ...) {
  if (t->oom) return;
  if (t->n_cells == t->cap_cells) {
    size_t cap = t->cap_cells ? t->cap_cells * 2 : 64;
    char **nc = realloc(t->cells, cap * sizeof(*nc));
    if (!nc) {
      t->oom = 1;
      return;
    }
    t->cells = nc;
    t->cap_cells = cap;
  }
  va_list ap;
  va_start(ap, fmt);
  char *s = NULL;
  int n = vasprintf(&s, fmt, ap);
  va_end(ap);
  if (n < 0) {
    t->oom = 1;
    return;
  }
  t->cells[t->n_cells++] = s;
}

// Display width of UTF-8 text: counts code points, not bytes, so "×" and
// "—" line up.
static size_t text_width(const char *s) {
  size_t w = 0;
  for (; *s; s++)
    if (((unsigned char)*s & 0xC0) != 0x80) w++;
  return w;
}

static void pad(FILE *f, size_t n) {
  while (n--) fputc(' ', f);
}

rg_status_t rg_table_print(const rg_table_t *t, FILE *f, int indent) {
  if (t->oom) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory building a table");
  size_t w[RG_TABLE_MAX_COLS] = {0};
  for (int c = 0; c < t->n_cols; c++) w[c] = text_width(t->head[c]);
  for (size_t i = 0; i < t->n_cells; i++) {
    size_t c = i % (size_t)t->n_cols, cw = text_width(t->cells[i]);
    if (cw > w[c]) w[c] = cw;
  }
  size_t total = 0;
  for (int c = 0; c < t->n_cols; c++) total += w[c] + (c ? 2 : 0);
  size_t n_rows = (t->n_cells + (size_t)t->n_cols - 1) / (size_t)t->n_cols;
  // Row -1 is the heads; a rule follows them. Spaces are written only before
  // text, so no line ends in blanks.
  for (long row = -1; row < (long)n_rows; row++) {
    pad(f, (size_t)indent);
    size_t pending = 0;
    for (int c = 0; c < t->n_cols; c++) {
      size_t i = (size_t)row * (size_t)t->n_cols + (size_t)c;
      const char *s = row < 0 ? t->head[c] : i < t->n_cells ? t->cells[i] : "";
      size_t gap = w[c] - text_width(s);
      if (c) pending += 2;
      if (t->align[c] == 'r') pending += gap;
      if (*s) {
        pad(f, pending);
        fputs(s, f);
        pending = 0;
      }
      if (t->align[c] != 'r') pending += gap;
    }
    fputc('\n', f);
    if (row < 0) {
      pad(f, (size_t)indent);
      for (size_t k = 0; k < total; k++) fputc('-', f);
      fputc('\n', f);
    }
  }
  return NULL;
}

// ----- Number formats --------------------------------------------------------

char *rg_fmt_grouped(double v, char *buf, size_t len) {
  if (!isfinite(v) || fabs(v) >= 9.2e18) {
    snprintf(buf, len, "%g", v);
    return buf;
  }
  long long n = llround(v);
  char digits[32];
  snprintf(digits, sizeof(digits), "%lld", n < 0 ? -n : n);
  size_t nd = strlen(digits), o = 0;
  char tmp[48];
  if (n < 0) tmp[o++] = '-';
  for (size_t i = 0; i < nd; i++) {
    if (i && (nd - i) % 3 == 0) tmp[o++] = ',';
    tmp[o++] = digits[i];
  }
  tmp[o] = 0;
  snprintf(buf, len, "%s", tmp);
  return buf;
}

char *rg_fmt_gb(double bytes, char *buf, size_t len) {
  double g = bytes / 1e9;
  if (g >= 999.5) {
    char n[48];
    snprintf(buf, len, "%s GB", rg_fmt_grouped(g, n, sizeof(n)));
  } else {
    int prec = g >= 99.95 ? 0 : g >= 9.995 ? 1 : 2;
    snprintf(buf, len, "%.*f GB", prec, g);
  }
  return buf;
}

char *rg_fmt_ratio(double v, char *buf, size_t len) {
  if (v >= 9.995)
    snprintf(buf, len, "%.1f", v);
  else if (v >= 0.9995)
    snprintf(buf, len, "%.2f", v);
  else
    snprintf(buf, len, "%.3g", v);
  return buf;
}

char *rg_fmt_tokens(long long v, char *buf, size_t len) {
  if (v >= 1048576 && v % 1048576 == 0)
    snprintf(buf, len, "%lldM", v / 1048576);
  else if (v >= 1024 && v % 1024 == 0)
    snprintf(buf, len, "%lldK", v / 1024);
  else
    snprintf(buf, len, "%lld", v);
  return buf;
}

rg_status_t rg_parse_dtype(const char *flag, const char *text, rg_dtype_t *out) {
  if (!rg_dtype_parse(text, out)) return NULL;
  const char *names[RG_DTYPE_COMPUTE_COUNT];
  char list[128] = "";
  for (int d = 0; d < RG_DTYPE_COMPUTE_COUNT; d++) {
    names[d] = rg_dtype_name((rg_dtype_t)d);
    strcat(list, d ? ", " : "");
    strcat(list, names[d]);
  }
  const char *near = rg_nearest(text, names, RG_DTYPE_COMPUTE_COUNT);
  if (near)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "%s: unknown dtype '%s'; did you mean %s? (one of %s)", flag, text, near,
                          list);
  return rg_status_make(RG_INVALID_ARGUMENT, "%s: unknown dtype '%s'; use one of %s", flag, text,
                        list);
}

rg_status_t rg_parse_count(const char *flag, const char *text, long long min, long long *out) {
  const char *s = text;
  while (isspace((unsigned char)*s)) s++;
  if (*s == '-')
    return rg_status_make(RG_INVALID_ARGUMENT, "%s must be %s, got '%s'", flag,
                          min > 0 ? "a positive whole number" : "a whole number, zero or more",
                          text);
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  long long mult = 1;
  if (end != s && (*end == 'K' || *end == 'k'))
    mult = 1024, end++;
  else if (end != s && (*end == 'M' || *end == 'm'))
    mult = 1048576, end++;
  if (end == s || *end || errno == ERANGE)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "%s takes a whole number (a K or M suffix multiplies by 1024 or 1024^2, "
                          "e.g. 32K), got '%s'",
                          flag, text);
  if (v > LLONG_MAX / mult || v * mult > (1LL << 40))
    return rg_status_make(RG_INVALID_ARGUMENT, "%s is too large: '%s'", flag, text);
  v *= mult;
  if (v < min)
    return rg_status_make(RG_INVALID_ARGUMENT, "%s must be at least %lld, got '%s'", flag, min,
                          text);
  *out = v;
  return NULL;
}

// ----- JSON ------------------------------------------------------------------

static cJSON *attach(cJSON *obj, const char *key, cJSON *item, int *bad) {
  if (!obj || !item) {
    cJSON_Delete(item);
    *bad = 1;
    return NULL;
  }
  int ok = key ? cJSON_AddItemToObject(obj, key, item) : cJSON_AddItemToArray(obj, item);
  if (!ok) {
    cJSON_Delete(item);
    *bad = 1;
    return NULL;
  }
  return item;
}

cJSON *rg_json_num(cJSON *obj, const char *key, double v, int *bad) {
  return attach(obj, key, isfinite(v) ? cJSON_CreateNumber(v) : cJSON_CreateNull(), bad);
}
cJSON *rg_json_str(cJSON *obj, const char *key, const char *v, int *bad) {
  return attach(obj, key, cJSON_CreateString(v ? v : ""), bad);
}
cJSON *rg_json_bool(cJSON *obj, const char *key, int v, int *bad) {
  return attach(obj, key, cJSON_CreateBool(v), bad);
}
cJSON *rg_json_null(cJSON *obj, const char *key, int *bad) {
  return attach(obj, key, cJSON_CreateNull(), bad);
}
cJSON *rg_json_obj(cJSON *obj, const char *key, int *bad) {
  return attach(obj, key, cJSON_CreateObject(), bad);
}
cJSON *rg_json_arr(cJSON *obj, const char *key, int *bad) {
  return attach(obj, key, cJSON_CreateArray(), bad);
}
cJSON *rg_json_push_obj(cJSON *arr, int *bad) {
  return attach(arr, NULL, cJSON_CreateObject(), bad);
}

rg_status_t rg_json_emit(cJSON *root, int bad, FILE *f) {
  char *text = !bad && root ? cJSON_Print(root) : NULL;
  cJSON_Delete(root);
  if (!text) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory building JSON output");
  fputs(text, f);
  fputc('\n', f);
  cJSON_free(text);
  return NULL;
}

// ----- Options ---------------------------------------------------------------

void rg_cli_getopt_reset(void) {
  // glibc re-initialises getopt completely when optind is 0, which also
  // forgets a half-parsed cluster of short options from an earlier parse.
  optind = 0;
  opterr = 0;
}

rg_status_t rg_cli_getopt_error(int c, char **argv, const struct option *longs) {
  const char *arg = optind > 0 ? argv[optind - 1] : "?";
  if (c == ':') {
    for (const struct option *o = longs; o->name; o++)
      if (o->val == optopt)
        return rg_status_make(RG_INVALID_ARGUMENT, "option --%s needs a value", o->name);
    return rg_status_make(RG_INVALID_ARGUMENT, "option '%s' needs a value", arg);
  }
  if (optopt && !(arg[0] == '-' && arg[1] == '-'))
    return rg_status_make(RG_INVALID_ARGUMENT, "unknown option '-%c' (try --help)", optopt);
  // An unknown long option: suggest the nearest real one.
  const char *names[64];
  size_t n = 0;
  for (const struct option *o = longs; o->name && n < 64; o++) names[n++] = o->name;
  char word[64];
  const char *w = arg;
  while (*w == '-') w++;
  size_t wl = strcspn(w, "=");
  if (wl >= sizeof(word)) wl = sizeof(word) - 1;
  memcpy(word, w, wl);
  word[wl] = 0;
  const char *near = rg_nearest(word, names, n);
  if (near)
    return rg_status_make(RG_INVALID_ARGUMENT, "unknown option '%s'; did you mean --%s?", arg,
                          near);
  return rg_status_make(RG_INVALID_ARGUMENT, "unknown option '%s' (try --help)", arg);
}
