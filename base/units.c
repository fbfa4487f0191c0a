#include "base/units.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const kind_names[] = {
#define RG_X_(k, n, e) n,
    RG_UNIT_KIND_MAP(RG_X_)
#undef RG_X_
};
static const char *const kind_examples[] = {
#define RG_X_(k, n, e) e,
    RG_UNIT_KIND_MAP(RG_X_)
#undef RG_X_
};
_Static_assert(sizeof(kind_names) / sizeof(kind_names[0]) == RG_UNIT_KIND_COUNT,
               "unit kind table out of step");

const char *rg_unit_kind_name(rg_unit_kind_t k) { return kind_names[k]; }
const char *rg_unit_kind_example(rg_unit_kind_t k) { return kind_examples[k]; }

// Prefix at the start of s: returns its multiplier and advances *s, or 1.
static double take_prefix(const char **s, int allow_binary) {
  static const struct {
    const char *p;
    double m;
  } bin[] = {{"Ki", 1024.0}, {"Mi", 1048576.0}, {"Gi", 1073741824.0},
             {"Ti", 1099511627776.0}, {"Pi", 1125899906842624.0}},
    dec[] = {{"k", 1e3}, {"K", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}, {"P", 1e15}, {"E", 1e18}};
  if (allow_binary)
    for (size_t i = 0; i < sizeof(bin) / sizeof(bin[0]); i++)
      if (!strncmp(*s, bin[i].p, 2)) {
        *s += 2;
        return bin[i].m;
      }
  for (size_t i = 0; i < sizeof(dec) / sizeof(dec[0]); i++)
    if (**s == dec[i].p[0]) {
      ++*s;
      return dec[i].m;
    }
  return 1.0;
}

// Matches the unit text u (after the prefix) against the kind's units.
static int base_unit(const char *u, rg_unit_kind_t kind, double *mult) {
  switch (kind) {
    case RG_UNIT_BYTES:
      if (!strcmp(u, "B")) { *mult = 1; return 1; }
      return 0;
    case RG_UNIT_BANDWIDTH:
      if (!strcmp(u, "B/s") || !strcmp(u, "Bps")) { *mult = 1; return 1; }
      if (!strcmp(u, "b/s") || !strcmp(u, "bit/s") || !strcmp(u, "bps")) { *mult = 0.125; return 1; }
      return 0;
    case RG_UNIT_FLOPS:
      if (!strcmp(u, "FLOPS") || !strcmp(u, "FLOP/s") || !strcmp(u, "OPS") || !strcmp(u, "OP/s")) {
        *mult = 1;
        return 1;
      }
      return 0;
    case RG_UNIT_POWER:
      if (!strcmp(u, "W")) { *mult = 1; return 1; }
      return 0;
    default:
      return 0;
  }
}

static int parse_time_unit(const char *u, double *mult) {
  static const struct {
    const char *u;
    double m;
  } t[] = {{"ns", 1e-9}, {"us", 1e-6}, {"\xc2\xb5s", 1e-6}, {"ms", 1e-3}, {"s", 1},
           {"sec", 1}, {"min", 60}, {"h", 3600}, {"hr", 3600}, {"d", 86400}, {"day", 86400}};
  for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
    if (!strcmp(u, t[i].u)) {
      *mult = t[i].m;
      return 1;
    }
  return 0;
}

int rg_unit_parse(const char *text, rg_unit_kind_t kind, double *out, const char **why) {
  const char *s = text;
  while (isspace((unsigned char)*s)) s++;
  int dollars = 0;
  if (*s == '$') {
    dollars = 1;
    s++;
  }
  if (dollars != (kind == RG_UNIT_PRICE)) {
    *why = dollars ? "a '$' only belongs in a price" : "a price starts with '$'";
    return 1;
  }
  // Digits may be grouped with commas ("1,979"): drop them before strtod.
  char num[64];
  size_t k = 0;
  while (*s && (isdigit((unsigned char)*s) || *s == '.' || *s == ',' || *s == 'e' || *s == 'E' ||
                ((*s == '-' || *s == '+') && (k == 0 || num[k - 1] == 'e' || num[k - 1] == 'E')))) {
    if ((*s == 'e' || *s == 'E') && !(isdigit((unsigned char)s[1]) || s[1] == '-' || s[1] == '+'))
      break;  // "E" here starts a unit prefix, not an exponent
    if (*s != ',') {
      if (k + 1 >= sizeof(num)) {
        *why = "the number is too long";
        return 1;
      }
      num[k++] = *s;
    }
    s++;
  }
  num[k] = 0;
  char *end;
  errno = 0;
  double v = strtod(num, &end);
  if (!k || *end || errno == ERANGE || !isfinite(v)) {
    *why = "it does not start with a number";
    return 1;
  }
  if (v < 0) {
    *why = "it is negative";
    return 1;
  }
  while (isspace((unsigned char)*s)) s++;
  char unit[32];
  size_t ul = strlen(s);
  while (ul && isspace((unsigned char)s[ul - 1])) ul--;
  if (ul >= sizeof(unit)) {
    *why = "unknown unit";
    return 1;
  }
  memcpy(unit, s, ul);
  unit[ul] = 0;
  double mult = 1;
  switch (kind) {
    case RG_UNIT_PRICE:
      if (!strcmp(unit, "/h") || !strcmp(unit, "/hr") || !strcmp(unit, "/hour")) mult = 1.0 / 3600;
      else if (!strcmp(unit, "/s")) mult = 1;
      else {
        *why = ul ? "unknown unit (expected '/h')" : "missing unit (expected '/h')";
        return 1;
      }
      break;
    case RG_UNIT_TIME:
      if (!parse_time_unit(unit, &mult)) {
        *why = ul ? "unknown unit (expected ns, us, ms, s, min, h)" : "missing unit (expected ns, us, ms, s, min, h)";
        return 1;
      }
      break;
    case RG_UNIT_RATE:
      if (!strcmp(unit, "req/s") || !strcmp(unit, "/s")) mult = 1;
      else if (!strcmp(unit, "req/min") || !strcmp(unit, "/min")) mult = 1.0 / 60;
      else if (!strcmp(unit, "req/h") || !strcmp(unit, "/h")) mult = 1.0 / 3600;
      else {
        *why = ul ? "unknown unit (expected req/s, req/min or req/h)" : "missing unit (expected req/s)";
        return 1;
      }
      break;
    default: {
      if (!ul) {
        *why = "missing unit";
        return 1;
      }
      const char *u = unit;
      double m = take_prefix(&u, kind == RG_UNIT_BYTES || kind == RG_UNIT_BANDWIDTH);
      double bm;
      if (!base_unit(u, kind, &bm)) {
        // "PFLOPS" must not be read as P + FLOPS only to fail on "B": retry unprefixed.
        if (!base_unit(unit, kind, &bm)) {
          *why = "unknown unit";
          return 1;
        }
        m = 1;
      }
      mult = m * bm;
    }
  }
  *out = v * mult;
  return 0;
}

rg_status_t rg_node_quantity(const rg_node_t *n, const char *what, rg_unit_kind_t kind,
                             int allow_zero, double *out) {
  if (n->kind != RG_NODE_SCALAR) return rg_node_expect(n, RG_NODE_SCALAR, what);
  const char *why;
  double v;
  if (rg_unit_parse(n->scalar, kind, &v, &why))
    return rg_status_at(RG_INVALID_ARGUMENT, &n->pos, "%s: '%s' is not a %s: %s; write it like '%s'",
                        what, n->scalar, kind_names[kind], why, kind_examples[kind]);
  if (v == 0 && !allow_zero)
    return rg_status_at(RG_INVALID_ARGUMENT, &n->pos, "%s: must be more than zero, got '%s'", what,
                        n->scalar);
  *out = v;
  return NULL;
}

rg_status_t rg_cfg_quantity(const rg_node_t *map, const char *key, rg_unit_kind_t kind,
                            int required, int allow_zero, double *out) {
  RG_RETURN_IF_ERROR(rg_node_expect(map, RG_NODE_MAP, key));
  const rg_node_t *n = rg_node_get(map, key);
  if (!n || rg_node_is_null(n)) {
    if (required)
      return rg_status_at(RG_INVALID_ARGUMENT, &map->pos, "missing required key '%s' (a %s like '%s')",
                          key, kind_names[kind], kind_examples[kind]);
    return NULL;
  }
  return rg_node_quantity(n, key, kind, allow_zero, out);
}

static char *fmt_si(double v, const char *unit, char *buf, size_t len) {
  static const char *const pre[] = {"", "k", "M", "G", "T", "P", "E"};
  size_t i = 0;
  double a = fabs(v);
  while (a >= 999.5 && i + 1 < sizeof(pre) / sizeof(pre[0])) {
    a /= 1000;
    v /= 1000;
    i++;
  }
  int prec = a >= 99.95 ? 0 : a >= 9.995 ? 1 : 2;
  if (v == 0) prec = 0;
  snprintf(buf, len, "%.*f %s%s", prec, v, pre[i], unit);
  return buf;
}

char *rg_fmt_quantity(double v, rg_unit_kind_t kind, char *buf, size_t len) {
  switch (kind) {
    case RG_UNIT_BYTES: return fmt_si(v, "B", buf, len);
    case RG_UNIT_BANDWIDTH: return fmt_si(v, "B/s", buf, len);
    case RG_UNIT_FLOPS: return fmt_si(v, "FLOPS", buf, len);
    case RG_UNIT_POWER: return fmt_si(v, "W", buf, len);
    case RG_UNIT_PRICE: snprintf(buf, len, "$%.2f/h", v * 3600); return buf;
    case RG_UNIT_RATE: snprintf(buf, len, "%.3g req/s", v); return buf;
    case RG_UNIT_TIME:
      if (v < 1e-6) snprintf(buf, len, "%.3g ns", v * 1e9);
      else if (v < 1e-3) snprintf(buf, len, "%.3g us", v * 1e6);
      else if (v < 1) snprintf(buf, len, "%.3g ms", v * 1e3);
      else if (v < 120) snprintf(buf, len, "%.3g s", v);
      else if (v < 7200) snprintf(buf, len, "%.3g min", v / 60);
      else snprintf(buf, len, "%.3g h", v / 3600);
      return buf;
    default: snprintf(buf, len, "%g", v); return buf;
  }
}

char *rg_fmt_bytes_iec(double v, char *buf, size_t len) {
  static const char *const pre[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  size_t i = 0;
  while (v >= 1023.5 && i + 1 < 6) {
    v /= 1024;
    i++;
  }
  snprintf(buf, len, v >= 99.95 || i == 0 ? "%.0f %s" : v >= 9.995 ? "%.1f %s" : "%.2f %s", v, pre[i]);
  return buf;
}

char *rg_fmt_count(double v, char *buf, size_t len) {
  static const char *const pre[] = {"", " k", " M", " B", " T"};
  size_t i = 0;
  double a = fabs(v);
  while (a >= 999.5 && i + 1 < 5) {
    a /= 1000;
    v /= 1000;
    i++;
  }
  snprintf(buf, len, i == 0 ? "%.0f%s" : a >= 99.95 ? "%.0f%s" : a >= 9.995 ? "%.1f%s" : "%.2f%s", v, pre[i]);
  return buf;
}
