// Request traces for the simulator (see planner/simulate.h): the Azure LLM
// inference trace (CSV), Mooncake's trace (JSONL), and requests drawn from
// a workload.
//
// Both readers go line by line over the whole file in memory, so every
// error can name the line, and a last line without its newline that does
// not parse is reported as a truncated file rather than as bad data.
#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/fileio.h"
#include "planner/simulate.h"

static const char *const format_names[] = {
#define RG_X_(e, n) n,
    RG_SIM_TRACE_MAP(RG_X_)
#undef RG_X_
};
_Static_assert(sizeof(format_names) / sizeof(format_names[0]) == RG_SIM_TRACE_COUNT,
               "trace format names out of step");

const char *rg_sim_trace_format_name(rg_sim_trace_format_t f) {
  return (unsigned)f < RG_SIM_TRACE_COUNT ? format_names[f] : "?";
}

rg_status_t rg_sim_trace_format_parse(const char *word, rg_sim_trace_format_t *out) {
  for (int i = 0; i < RG_SIM_TRACE_COUNT; i++)
    if (!strcmp(word, format_names[i])) {
      *out = (rg_sim_trace_format_t)i;
      return NULL;
    }
  return rg_status_make(RG_INVALID_ARGUMENT,
                        "unknown trace format '%s'; expected azure (CSV: TIMESTAMP,ContextTokens,"
                        "GeneratedTokens) or mooncake (JSONL with hash_ids)",
                        word);
}

void rg_sim_trace_free(rg_sim_trace_t *t) {
  if (!t) return;
  free(t->reqs);
  free(t->hashes);
  memset(t, 0, sizeof *t);
}

// A request is refused past this many tokens: no model has such a context,
// and the bound keeps sums of tokens far from overflow.
#define MAX_TOKENS (1ll << 30)

// ----- Growing arrays ---------------------------------------------------------------

static rg_status_t push_req(rg_sim_trace_t *t, size_t *cap, const rg_sim_request_t *r) {
  if (t->n == *cap) {
    size_t c = *cap ? *cap * 2 : 1024;
    rg_sim_request_t *nr = realloc(t->reqs, c * sizeof *nr);
    if (!nr) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory reading %zu requests", t->n);
    t->reqs = nr;
    *cap = c;
  }
  t->reqs[t->n++] = *r;
  return NULL;
}

static rg_status_t push_hash(rg_sim_trace_t *t, size_t *cap, uint64_t h) {
  if (t->n_hashes == *cap) {
    size_t c = *cap ? *cap * 2 : 4096;
    uint64_t *nh = realloc(t->hashes, c * sizeof *nh);
    if (!nh) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory reading hash ids");
    t->hashes = nh;
    *cap = c;
  }
  t->hashes[t->n_hashes++] = h;
  return NULL;
}

// ----- Fields -------------------------------------------------------------------------

// A field of a CSV line as a NUL-terminated copy (quotes and blanks around
// it removed), for parsing and for quoting in messages.
static void field_copy(const char *s, size_t len, char *out, size_t cap) {
  while (len && isspace((unsigned char)*s)) s++, len--;
  while (len && isspace((unsigned char)s[len - 1])) len--;
  if (len >= 2 && s[0] == '"' && s[len - 1] == '"') s++, len -= 2;
  if (len >= cap) len = cap - 1;
  memcpy(out, s, len);
  out[len] = 0;
}

// Token count in text: digits only. 0 ok, negative / not a number /
// absurd: errors naming the field.
static rg_status_t parse_count(const char *where, const char *field, const char *text,
                               int64_t *out) {
  const char *p = text;
  if (*p == '-' && isdigit((unsigned char)p[1]))
    return rg_status_make(RG_PARSE, "%s: %s: '%s' is negative; token counts are 0 or more", where,
                          field, text);
  if (!*p) return rg_status_make(RG_PARSE, "%s: %s: empty; expected a token count", where, field);
  for (; *p; p++)
    if (!isdigit((unsigned char)*p))
      return rg_status_make(RG_PARSE, "%s: %s: '%s' is not a whole number of tokens", where, field,
                            text);
  errno = 0;
  long long v = strtoll(text, NULL, 10);
  if (errno || v > MAX_TOKENS)
    return rg_status_make(RG_PARSE, "%s: %s: '%s' is more than %lld tokens", where, field, text,
                          MAX_TOKENS);
  *out = v;
  return NULL;
}

// Days since 1970-01-01 of a civil date (Howard Hinnant's algorithm).
static int64_t days_from_civil(int64_t y, int64_t m, int64_t d) {
  y -= m <= 2;
  int64_t era = (y >= 0 ? y : y - 399) / 400;
  int64_t yoe = y - era * 400;
  int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

static int digits(const char *s, int n, int *out) {
  int v = 0;
  for (int i = 0; i < n; i++) {
    if (!isdigit((unsigned char)s[i])) return 0;
    v = v * 10 + (s[i] - '0');
  }
  *out = v;
  return 1;
}

// "2023-11-16 18:15:46.6805900" (the Azure traces; 'T' also accepted, and
// an optional trailing 'Z'), or plain seconds: whole seconds since 1970 and
// the fraction apart, since a double holding both (1.7e9 s) keeps only
// about 0.2 us of the fraction and differences would lose the rest.
static int parse_time(const char *s, int64_t *whole, double *out) {
  int y, mo, d, h, mi, se;
  size_t len = strlen(s);
  if (len >= 19 && digits(s, 4, &y) && s[4] == '-' && digits(s + 5, 2, &mo) && s[7] == '-' &&
      digits(s + 8, 2, &d) && (s[10] == ' ' || s[10] == 'T') && digits(s + 11, 2, &h) &&
      s[13] == ':' && digits(s + 14, 2, &mi) && s[16] == ':' && digits(s + 17, 2, &se)) {
    if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || se > 60) return 0;
    double frac = 0;
    const char *p = s + 19;
    if (*p == '.') {
      double scale = 0.1;
      p++;
      if (!isdigit((unsigned char)*p)) return 0;
      for (; isdigit((unsigned char)*p); p++, scale /= 10) frac += (*p - '0') * scale;
    }
    if (*p == 'Z') p++;
    if (*p) return 0;
    *whole = days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + se;
    *out = frac;
    return 1;
  }
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (end == s || *end || errno || !isfinite(v) || v < 0) return 0;
  *whole = 0;
  *out = v;
  return 1;
}

// ----- Lines ----------------------------------------------------------------------------

typedef struct {
  const char *p, *end;
  int64_t no;  // 1-based number of the line returned last
} lines_t;

// The next line (without its '\n' and any '\r'); *last is 1 when it had no
// newline after it (the end of a file that may have been cut).
static int next_line(lines_t *L, const char **s, size_t *len, int *last) {
  if (L->p >= L->end) return 0;
  const char *nl = memchr(L->p, '\n', (size_t)(L->end - L->p));
  const char *e = nl ? nl : L->end;
  *s = L->p;
  *len = (size_t)(e - L->p);
  if (*len && (*s)[*len - 1] == '\r') (*len)--;
  *last = !nl;
  L->p = nl ? nl + 1 : L->end;
  L->no++;
  return 1;
}

static int blank(const char *s, size_t len) {
  for (size_t i = 0; i < len; i++)
    if (!isspace((unsigned char)s[i])) return 0;
  return 1;
}

// ----- Azure CSV -------------------------------------------------------------------------

#define AZ_MAX_FIELDS 32

static size_t split_csv(const char *s, size_t len, const char *f[AZ_MAX_FIELDS],
                        size_t flen[AZ_MAX_FIELDS]) {
  size_t n = 0, start = 0;
  for (size_t i = 0; i <= len && n < AZ_MAX_FIELDS; i++)
    if (i == len || s[i] == ',') {
      f[n] = s + start;
      flen[n++] = i - start;
      start = i + 1;
    }
  return n;
}

static rg_status_t parse_azure(const char *name, const char *data, size_t len, rg_sim_trace_t *t) {
  lines_t L = {data, data + len, 0};
  const char *s;
  size_t n, cap = 0;
  int last;
  // The header: the first non-blank line, past a UTF-8 byte-order mark.
  int col_t = -1, col_c = -1, col_g = -1;
  size_t n_cols = 0;
  int64_t base = 0;  // the first row's whole seconds
  while (next_line(&L, &s, &n, &last)) {
    if (blank(s, n)) continue;
    if (L.no == 1 && n >= 3 && !memcmp(s, "\xEF\xBB\xBF", 3)) s += 3, n -= 3;
    const char *f[AZ_MAX_FIELDS];
    size_t fl[AZ_MAX_FIELDS];
    n_cols = split_csv(s, n, f, fl);
    for (size_t i = 0; i < n_cols; i++) {
      char c[64];
      field_copy(f[i], fl[i], c, sizeof c);
      if (!strcmp(c, "TIMESTAMP")) col_t = (int)i;
      if (!strcmp(c, "ContextTokens")) col_c = (int)i;
      if (!strcmp(c, "GeneratedTokens")) col_g = (int)i;
    }
    const char *missing = col_t < 0   ? "TIMESTAMP"
                          : col_c < 0 ? "ContextTokens"
                          : col_g < 0 ? "GeneratedTokens"
                                      : NULL;
    if (missing) {
      char head[96];
      field_copy(s, n, head, sizeof head);
      return rg_status_make(RG_PARSE,
                            "%s:%lld: the header '%s' lacks the column %s; an Azure LLM inference "
                            "trace starts with TIMESTAMP,ContextTokens,GeneratedTokens",
                            name, (long long)L.no, head, missing);
    }
    break;
  }
  if (col_t < 0)
    return rg_status_make(RG_PARSE,
                          "%s: empty; an Azure LLM inference trace starts with the header "
                          "TIMESTAMP,ContextTokens,GeneratedTokens",
                          name);
  while (next_line(&L, &s, &n, &last)) {
    if (blank(s, n)) continue;
    char where[600];
    snprintf(where, sizeof where, "%s:%lld", name, (long long)L.no);
    const char *f[AZ_MAX_FIELDS];
    size_t fl[AZ_MAX_FIELDS];
    size_t k = split_csv(s, n, f, fl);
    if (k != n_cols)
      return rg_status_make(RG_PARSE, "%s: %zu field%s, expected %zu (as the header)%s", where, k,
                            k == 1 ? "" : "s", n_cols,
                            last && k < n_cols ? "; the file may be truncated" : "");
    char ts[64], ctx[64], gen[64];
    field_copy(f[col_t], fl[col_t], ts, sizeof ts);
    field_copy(f[col_c], fl[col_c], ctx, sizeof ctx);
    field_copy(f[col_g], fl[col_g], gen, sizeof gen);
    rg_sim_request_t r = {0};
    int64_t whole;
    if (!parse_time(ts, &whole, &r.arrival))
      return rg_status_make(RG_PARSE,
                            "%s: TIMESTAMP: '%s' is not a time (expected YYYY-MM-DD "
                            "HH:MM:SS[.fraction] or seconds)%s",
                            where, ts, last ? "; the file may be truncated" : "");
    rg_status_t st = parse_count(where, "ContextTokens", ctx, &r.prompt);
    if (!st) st = parse_count(where, "GeneratedTokens", gen, &r.output);
    if (st && last) {
      rg_status_t cut = rg_status_make(rg_status_code(st), "%s; the file may be truncated",
                                       rg_status_message(st));
      rg_status_free(st);
      st = cut;
    }
    RG_RETURN_IF_ERROR(st);
    if (r.prompt < 1)
      return rg_status_make(RG_PARSE, "%s: ContextTokens: 0; a request needs at least one token",
                            where);
    if (r.output < 1) {
      r.output = 1;
      t->n_zero_output++;
    }
    if (!t->n) base = whole;
    r.arrival += (double)(whole - base);
    RG_RETURN_IF_ERROR(push_req(t, &cap, &r));
  }
  return NULL;
}

// ----- Mooncake JSONL ----------------------------------------------------------------------

static const char *json_type(const cJSON *j) {
  if (cJSON_IsString(j)) return "a string";
  if (cJSON_IsBool(j)) return "a boolean";
  if (cJSON_IsNull(j)) return "null";
  if (cJSON_IsArray(j)) return "an array";
  if (cJSON_IsObject(j)) return "an object";
  return "a number";
}

// A whole, non-negative JSON number below limit.
static int json_whole(const cJSON *j, double limit, double *out) {
  if (!cJSON_IsNumber(j)) return 0;
  double v = j->valuedouble;
  if (!isfinite(v) || v < 0 || v != floor(v) || v > limit) return 0;
  *out = v;
  return 1;
}

static rg_status_t mooncake_count(const char *where, const cJSON *o, const char *key, int64_t min,
                                  int64_t *out) {
  const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);
  if (!j)
    return rg_status_make(RG_PARSE,
                          "%s: %s: missing (each line needs timestamp, input_length, "
                          "output_length and hash_ids)",
                          where, key);
  double v;
  if (!json_whole(j, (double)MAX_TOKENS, &v)) {
    if (cJSON_IsNumber(j))
      return rg_status_make(RG_PARSE,
                            "%s: %s: %g is not a whole number of tokens from %lld to %lld", where,
                            key, j->valuedouble, (long long)min, MAX_TOKENS);
    return rg_status_make(RG_PARSE, "%s: %s: expected a number of tokens, got %s", where, key,
                          json_type(j));
  }
  if (v < (double)min)
    return rg_status_make(RG_PARSE, "%s: %s: %.0f; a request needs at least %lld", where, key, v,
                          (long long)min);
  *out = (int64_t)v;
  return NULL;
}

static rg_status_t mooncake_line(const char *where, const char *s, size_t n, int last,
                                 rg_sim_trace_t *t, size_t *cap, size_t *hcap) {
  const char *end = NULL;
  cJSON *o = cJSON_ParseWithLengthOpts(s, n, &end, 0);
  rg_status_t st = NULL;
  if (!o) {
    const char *at = cJSON_GetErrorPtr();
    long col = at && at >= s && at <= s + n ? (long)(at - s) + 1 : 1;
    return rg_status_make(RG_PARSE, "%s: not a JSON object (bad JSON near column %ld)%s", where,
                          col, last ? "; the file may be truncated" : "");
  }
  for (const char *p = end; p && p < s + n; p++)
    if (!isspace((unsigned char)*p)) {
      st = rg_status_make(RG_PARSE, "%s: unexpected text after the object at column %ld", where,
                          (long)(p - s) + 1);
      goto done;
    }
  if (!cJSON_IsObject(o)) {
    st = rg_status_make(RG_PARSE,
                        "%s: expected a JSON object {\"timestamp\", \"input_length\", "
                        "\"output_length\", \"hash_ids\"}, got %s",
                        where, json_type(o));
    goto done;
  }
  rg_sim_request_t r = {0};
  const cJSON *ts = cJSON_GetObjectItemCaseSensitive(o, "timestamp");
  if (!ts) {
    st = rg_status_make(RG_PARSE,
                        "%s: timestamp: missing (each line needs timestamp, input_length, "
                        "output_length and hash_ids)",
                        where);
    goto done;
  }
  if (!cJSON_IsNumber(ts) || !isfinite(ts->valuedouble) || ts->valuedouble < 0) {
    st = cJSON_IsNumber(ts)
             ? rg_status_make(RG_PARSE, "%s: timestamp: %g is not a time in milliseconds >= 0",
                              where, ts->valuedouble)
             : rg_status_make(RG_PARSE, "%s: timestamp: expected milliseconds, got %s", where,
                              json_type(ts));
    goto done;
  }
  r.arrival = ts->valuedouble / 1000.0;
  if ((st = mooncake_count(where, o, "input_length", 1, &r.prompt))) goto done;
  if ((st = mooncake_count(where, o, "output_length", 0, &r.output))) goto done;
  if (r.output < 1) {
    r.output = 1;
    t->n_zero_output++;
  }
  const cJSON *h = cJSON_GetObjectItemCaseSensitive(o, "hash_ids");
  if (!h) {
    st = rg_status_make(RG_PARSE,
                        "%s: hash_ids: missing (each line needs timestamp, input_length, "
                        "output_length and hash_ids)",
                        where);
    goto done;
  }
  if (!cJSON_IsArray(h)) {
    st = rg_status_make(RG_PARSE, "%s: hash_ids: expected an array of block ids, got %s", where,
                        json_type(h));
    goto done;
  }
  r.hash_at = t->n_hashes;
  // Ids past the prompt's last block name nothing the request reads.
  int64_t blocks = (r.prompt + t->hash_block - 1) / t->hash_block;
  int k = 0;
  for (const cJSON *e = h->child; e; e = e->next, k++) {
    double v;
    if (!json_whole(e, 9007199254740992.0, &v)) {
      st = rg_status_make(
          RG_PARSE, "%s: hash_ids: element %d is %s, not a block id (a whole number >= 0)", where,
          k, cJSON_IsNumber(e) ? "a negative or fractional number" : json_type(e));
      goto done;
    }
    if (k < blocks && (st = push_hash(t, hcap, (uint64_t)v))) goto done;
  }
  r.n_hash = (uint32_t)(k < blocks ? k : blocks);
  st = push_req(t, cap, &r);
done:
  cJSON_Delete(o);
  return st;
}

static rg_status_t parse_mooncake(const char *name, const char *data, size_t len,
                                  rg_sim_trace_t *t) {
  lines_t L = {data, data + len, 0};
  const char *s;
  size_t n, cap = 0, hcap = 0;
  int last;
  t->hash_block = RG_SIM_MOONCAKE_BLOCK;
  while (next_line(&L, &s, &n, &last)) {
    if (blank(s, n)) continue;
    char where[600];
    snprintf(where, sizeof where, "%s:%lld", name, (long long)L.no);
    RG_RETURN_IF_ERROR(mooncake_line(where, s, n, last, t, &cap, &hcap));
  }
  return NULL;
}

// ----- Entry points -------------------------------------------------------------------------

typedef struct {
  double t;
  size_t i;
} order_t;

static int cmp_order(const void *a, const void *b) {
  const order_t *x = a, *y = b;
  if (x->t != y->t) return x->t < y->t ? -1 : 1;
  return x->i < y->i ? -1 : x->i > y->i;
}

// Arrival order (stable), the first arrival at 0.
static rg_status_t normalize(rg_sim_trace_t *t) {
  int sorted = 1;
  for (size_t i = 1; i < t->n && sorted; i++) sorted = t->reqs[i].arrival >= t->reqs[i - 1].arrival;
  if (!sorted) {
    order_t *o = malloc(t->n * sizeof *o);
    rg_sim_request_t *r = malloc(t->n * sizeof *r);
    if (!o || !r) {
      free(o), free(r);
      return rg_status_make(RG_OUT_OF_MEMORY, "out of memory sorting %zu requests", t->n);
    }
    for (size_t i = 0; i < t->n; i++) o[i] = (order_t){t->reqs[i].arrival, i};
    qsort(o, t->n, sizeof *o, cmp_order);
    for (size_t i = 0; i < t->n; i++) r[i] = t->reqs[o[i].i];
    free(t->reqs);
    free(o);
    t->reqs = r;
  }
  double t0 = t->reqs[0].arrival;
  for (size_t i = 0; i < t->n; i++) t->reqs[i].arrival -= t0;
  return NULL;
}

rg_status_t rg_sim_trace_parse(const char *name, const char *data, size_t len,
                               rg_sim_trace_format_t fmt, rg_sim_trace_t *out) {
  memset(out, 0, sizeof *out);
  snprintf(out->name, sizeof out->name, "%s", name);
  out->hash_block = RG_SIM_MOONCAKE_BLOCK;
  rg_status_t st = fmt == RG_SIM_TRACE_AZURE ? parse_azure(name, data, len, out)
                   : fmt == RG_SIM_TRACE_MOONCAKE
                       ? parse_mooncake(name, data, len, out)
                       : rg_status_make(RG_INVALID_ARGUMENT, "trace format %d unknown", (int)fmt);
  if (!st && !out->n)
    st = rg_status_make(RG_PARSE, "%s: no requests in the %s trace", name,
                        rg_sim_trace_format_name(fmt));
  if (!st) st = normalize(out);
  if (st) rg_sim_trace_free(out);
  return st;
}

rg_status_t rg_sim_trace_read(const char *path, rg_sim_trace_format_t fmt, rg_sim_trace_t *out) {
  memset(out, 0, sizeof *out);
  char *data;
  size_t len;
  RG_RETURN_IF_ERROR(rg_file_read_all(path, "trace", (size_t)1 << 32, &data, &len));
  rg_status_t st = rg_sim_trace_parse(path, data, len, fmt, out);
  free(data);
  return st;
}

rg_status_t rg_sim_trace_generate(const rg_workload_t *w, size_t n, uint64_t seed,
                                  const rg_arrival_t *arrival, int64_t max_context,
                                  rg_sim_trace_t *out) {
  memset(out, 0, sizeof *out);
  if (!n) return rg_status_make(RG_INVALID_ARGUMENT, "workload %s: 0 requests to draw", w->name);
  rg_gen_request_t *g = malloc(n * sizeof *g);
  out->reqs = calloc(n, sizeof *out->reqs);
  if (!g || !out->reqs) {
    free(g);
    rg_sim_trace_free(out);
    return rg_status_make(RG_OUT_OF_MEMORY, "out of memory for %zu requests", n);
  }
  rg_status_t st = rg_workload_sample_arrivals(w, n, seed, max_context, arrival, g);
  if (st) {
    free(g);
    rg_sim_trace_free(out);
    return st;
  }
  snprintf(out->name, sizeof out->name, "workload %s (%s arrivals)", w->name,
           rg_arrival_name(arrival->process));
  out->hash_block = RG_SIM_MOONCAKE_BLOCK;
  out->n = n;
  for (size_t i = 0; i < n; i++) {
    rg_sim_request_t *r = &out->reqs[i];
    r->arrival = g[i].arrival;
    r->prompt = g[i].prompt_tokens;
    r->output = g[i].output_tokens;
    // A shared prefix (held once, found by every request) or a hit rate
    // (that share of each prompt is a prefix some earlier request had).
    double sh = w->shared_prefix > 0 ? w->shared_prefix : w->prefix_hit_rate * (double)r->prompt;
    r->shared = (int64_t)sh < r->prompt ? (int64_t)sh : r->prompt - 1;
  }
  free(g);
  return NULL;
}
