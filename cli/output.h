// cli/output.h — printing helpers shared by the subcommands: aligned text
// tables, number formats the units module does not cover, and a thin layer
// over cJSON that remembers allocation failures so a command checks once.
//
// Only cli/ prints, and only through stdout/stderr handed in as FILE *.
// Ownership: a table owns copies of its cells until rg_table_deinit();
// rg_json_emit() consumes the tree it prints.
#ifndef RG_CLI_OUTPUT_H
#define RG_CLI_OUTPUT_H

#include <cjson/cJSON.h>
#include <getopt.h>
#include <stddef.h>
#include <stdio.h>

#include "base/dtype.h"
#include "base/status.h"

// ----- Tables ----------------------------------------------------------------

#define RG_TABLE_MAX_COLS 12

// Cells are added left to right, row after row; a row ends when it has as
// many cells as there are columns. Column widths fit the widest cell.
typedef struct {
  int n_cols;
  const char *head[RG_TABLE_MAX_COLS];  // borrowed; must outlive the table
  char align[RG_TABLE_MAX_COLS];        // 'l' or 'r'
  char **cells;                         // n_rows * n_cols, owned
  size_t n_cells, cap_cells;
  int oom;  // a cell could not be stored; rg_table_print reports it
} rg_table_t;

// heads: n_cols column titles; align: n_cols characters of 'l'/'r' ("lrrr").
void rg_table_init(rg_table_t *t, int n_cols, const char *const *heads, const char *align);
void rg_table_deinit(rg_table_t *t);
// Appends one cell, printf-style.
void rg_table_cell(rg_table_t *t, const char *fmt, ...) RG_PRINTF(2, 3);
// Prints the heads, a rule, and the rows, each line prefixed by `indent`
// spaces. Returns RG_OUT_OF_MEMORY when a cell was lost.
RG_MUST_USE rg_status_t rg_table_print(const rg_table_t *t, FILE *f, int indent);

// ----- Number formats --------------------------------------------------------

// Integer part grouped by thousands: 327680 -> "327,680". Rounds to nearest.
char *rg_fmt_grouped(double v, char *buf, size_t len);
// Bytes in decimal GB with about three significant digits, grouped above
// 1000: "1.34 GB", "42.9 GB", "21,990 GB".
char *rg_fmt_gb(double bytes, char *buf, size_t len);
// A ratio with three or four significant digits: "155.8", "39.9", "2.75",
// "0.00951".
char *rg_fmt_ratio(double v, char *buf, size_t len);
// A token count written the way context lengths are spoken: 4096 -> "4K",
// 131072 -> "128K", 1000 -> "1000".
char *rg_fmt_tokens(long long v, char *buf, size_t len);

// Parses a non-negative count for option `flag`, accepting a K or M suffix
// (powers of 1024, as context lengths are written: 128K = 131072). min is the
// least value allowed. Error messages name the flag and quote the text.
RG_MUST_USE rg_status_t rg_parse_count(const char *flag, const char *text, long long min,
                                       long long *out);

// Parses a compute dtype (f32, bf16, f16, fp8, int8, fp4) for option `flag`;
// an unknown one is an error naming the flag, the nearest name and the list.
RG_MUST_USE rg_status_t rg_parse_dtype(const char *flag, const char *text, rg_dtype_t *out);

// ----- JSON ------------------------------------------------------------------

// Each adder returns the new item, or NULL and sets *bad when allocation
// failed (or when parent is NULL after an earlier failure). Non-finite
// numbers become null.
cJSON *rg_json_num(cJSON *obj, const char *key, double v, int *bad);
cJSON *rg_json_str(cJSON *obj, const char *key, const char *v, int *bad);
cJSON *rg_json_bool(cJSON *obj, const char *key, int v, int *bad);
cJSON *rg_json_null(cJSON *obj, const char *key, int *bad);
cJSON *rg_json_obj(cJSON *obj, const char *key, int *bad);
cJSON *rg_json_arr(cJSON *obj, const char *key, int *bad);
// Appends a new object to an array.
cJSON *rg_json_push_obj(cJSON *arr, int *bad);
// Prints root (formatted, with a trailing newline) to f and deletes it.
// Returns RG_OUT_OF_MEMORY, printing nothing, when bad is set or printing
// fails.
RG_MUST_USE rg_status_t rg_json_emit(cJSON *root, int bad, FILE *f);

// ----- Options ---------------------------------------------------------------

// Turns getopt_long's error return into a status. Call with opterr = 0 and an
// optstring starting with ':' (so a missing argument returns ':'). c is what
// getopt_long returned ('?' or ':'); longs is the option table. An unknown
// long option gets the nearest valid one suggested.
RG_MUST_USE rg_status_t rg_cli_getopt_error(int c, char **argv, const struct option *longs);
// Resets getopt's state before a subcommand parses its own argv (whose
// argv[0] is the command name) and turns off getopt's own messages.
void rg_cli_getopt_reset(void);

#endif  // RG_CLI_OUTPUT_H
