// base/units.h — human units in configs and output: "3.35 TB/s", "80 GiB",
// "989.5 TFLOPS", "700 W", "$2.10/h", "50 ms", "20 req/s".
//
// Every quantity is held in SI base units as a double: bytes, bytes/s,
// FLOP/s, watts, dollars per second, seconds, requests per second. Decimal
// prefixes (k M G T P) are powers of 1000; binary ones (Ki Mi Gi Ti Pi) of
// 1024. In bandwidths a lowercase b means bits ("400 Gb/s" = 50 GB/s).
#ifndef RG_BASE_UNITS_H
#define RG_BASE_UNITS_H

#include <stddef.h>

#include "base/status.h"
#include "base/yaml.h"

#define RG_UNIT_KIND_MAP(X)                                  \
  X(RG_UNIT_BYTES, "size", "80 GB, 50 MiB")                  \
  X(RG_UNIT_BANDWIDTH, "bandwidth", "3.35 TB/s, 400 Gb/s")   \
  X(RG_UNIT_FLOPS, "compute rate", "989.5 TFLOPS, 750 TOPS") \
  X(RG_UNIT_POWER, "power", "700 W, 23 kW")                  \
  X(RG_UNIT_PRICE, "price", "$2.10/h")                       \
  X(RG_UNIT_TIME, "duration", "50 ms, 2 s, 7.5 min")         \
  X(RG_UNIT_RATE, "rate", "20 req/s, 1200 req/min")

typedef enum {
#define RG_X_(k, n, e) k,
  RG_UNIT_KIND_MAP(RG_X_)
#undef RG_X_
  RG_UNIT_KIND_COUNT
} rg_unit_kind_t;

const char *rg_unit_kind_name(rg_unit_kind_t kind);
const char *rg_unit_kind_example(rg_unit_kind_t kind);

// Parses text as a quantity of the given kind. On failure *out_why names
// what was wrong (static string) and the function returns non-zero.
int rg_unit_parse(const char *text, rg_unit_kind_t kind, double *out,
                  const char **out_why);

// Reads map[key] as a quantity; value must be > 0 unless allow_zero.
RG_MUST_USE rg_status_t rg_cfg_quantity(const rg_node_t *map, const char *key,
                                        rg_unit_kind_t kind, int required,
                                        int allow_zero, double *out);
RG_MUST_USE rg_status_t rg_node_quantity(const rg_node_t *n, const char *what,
                                         rg_unit_kind_t kind, int allow_zero,
                                         double *out);

// Formats with three significant digits and a fitting decimal prefix into
// buf and returns buf: "141 GB", "3.35 TB/s", "989 TFLOPS", "$2.10/h".
char *rg_fmt_quantity(double v, rg_unit_kind_t kind, char *buf, size_t len);
// Binary-prefix size: "320 KiB".
char *rg_fmt_bytes_iec(double v, char *buf, size_t len);
// Plain number with a k/M/B suffix for counts: "70.6 B", "431 k".
char *rg_fmt_count(double v, char *buf, size_t len);

#endif  // RG_BASE_UNITS_H
