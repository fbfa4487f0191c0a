// tests/test.h — ridge's small test harness.
//
// RG_TEST(name) { ... } registers a test at load time. Inside, RG_CHECK*
// record failures and carry on; RG_REQUIRE* stop the test. RG_SKIP(reason)
// marks it skipped. The runner prints one line per test and ends with
// "N passed, N failed, N skipped".
#ifndef RG_TESTS_TEST_H
#define RG_TESTS_TEST_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "base/status.h"

typedef struct rg_test_ctx_s rg_test_ctx_t;
typedef void (*rg_test_fn_t)(rg_test_ctx_t *t);

void rg_test_register(const char *name, const char *file, rg_test_fn_t fn);
// Registers a test that runs fn with arg (rg_test_arg); name and arg must
// live for the whole run. For tests made in a loop (one per device and op).
void rg_test_register_arg(const char *name, const char *file, rg_test_fn_t fn, void *arg);
void *rg_test_arg(rg_test_ctx_t *t);
void rg_test_fail(rg_test_ctx_t *t, const char *file, int line, const char *fmt, ...)
    RG_PRINTF(4, 5);
void rg_test_skip(rg_test_ctx_t *t, const char *reason);
// Directory holding configs/ (the source tree), and the built ridge binary.
const char *rg_test_config_dir(void);
const char *rg_test_ridge_bin(void);
// A fresh temporary directory for this test (removed by the runner).
const char *rg_test_tmpdir(rg_test_ctx_t *t);
// Writes text to tmpdir/name and returns the path (static per test).
const char *rg_test_write(rg_test_ctx_t *t, const char *name, const char *text);
// Writes the tiny random-weight test model (arch: rg_testmodel_arch_t, bf16,
// the given seed) into tmpdir/sub and returns the path (one static buffer per
// test file's call site: copy it to keep two); NULL, with the failure
// recorded, when it cannot.
const char *rg_test_tiny_model(rg_test_ctx_t *t, int arch, const char *sub, uint64_t seed);
// Runs the ridge binary with args (a shell-quoted string) and captures
// stdout+stderr into a malloc'd string the test owns; returns exit status.
int rg_test_run_ridge(rg_test_ctx_t *t, const char *args, char **out_output);
// A field of this process's mapping that holds p, as /proc/self/smaps gives
// it (e.g. "Rss:" in kB, "THPeligible:" 1 or 0), or -1 when it cannot tell.
long rg_test_smaps_field(const void *p, const char *field);

#define RG_TEST(name)                                                 \
  static void rg_test_##name(rg_test_ctx_t *t);                       \
  __attribute__((constructor)) static void rg_test_reg_##name(void) { \
    rg_test_register(#name, __FILE__, rg_test_##name);                \
  }                                                                   \
  static void rg_test_##name(rg_test_ctx_t *t)

#define RG_CHECK(c)                                                        \
  do {                                                                     \
    if (!(c)) rg_test_fail(t, __FILE__, __LINE__, "check failed: %s", #c); \
  } while (0)
#define RG_REQUIRE(c)                                          \
  do {                                                         \
    if (!(c)) {                                                \
      rg_test_fail(t, __FILE__, __LINE__, "required: %s", #c); \
      return;                                                  \
    }                                                          \
  } while (0)
#define RG_CHECK_NEAR(a, b, rel)                                                              \
  do {                                                                                        \
    double a_ = (a), b_ = (b);                                                                \
    if (!(fabs(a_ - b_) <= (rel)*fabs(b_)))                                                   \
      rg_test_fail(t, __FILE__, __LINE__, "%s = %.6g, expected %.6g within %g%%", #a, a_, b_, \
                   (rel)*100.0);                                                              \
  } while (0)
// Checks a status is OK; frees it and fails with its message otherwise.
#define RG_CHECK_OK(expr)                                                          \
  do {                                                                             \
    rg_status_t s_ = (expr);                                                       \
    if (s_) {                                                                      \
      rg_test_fail(t, __FILE__, __LINE__, "%s: %s", #expr, rg_status_message(s_)); \
      rg_status_free(s_);                                                          \
    }                                                                              \
  } while (0)
#define RG_REQUIRE_OK(expr)                                                        \
  do {                                                                             \
    rg_status_t s_ = (expr);                                                       \
    if (s_) {                                                                      \
      rg_test_fail(t, __FILE__, __LINE__, "%s: %s", #expr, rg_status_message(s_)); \
      rg_status_free(s_);                                                          \
      return;                                                                      \
    }                                                                              \
  } while (0)
// Checks expr fails and its message contains `needle`; frees the status.
#define RG_CHECK_ERR(expr, needle)                                                             \
  do {                                                                                         \
    rg_status_t s_ = (expr);                                                                   \
    if (!s_)                                                                                   \
      rg_test_fail(t, __FILE__, __LINE__, "%s succeeded, expected error '%s'", #expr, needle); \
    else if (!strstr(rg_status_message(s_), needle))                                           \
      rg_test_fail(t, __FILE__, __LINE__, "%s: message '%s' lacks '%s'", #expr,                \
                   rg_status_message(s_), needle);                                             \
    rg_status_free(s_);                                                                        \
  } while (0)
#define RG_CHECK_CONTAINS(hay, needle)                                                           \
  do {                                                                                           \
    const char *h_ = (hay);                                                                      \
    if (!h_ || !strstr(h_, needle))                                                              \
      rg_test_fail(t, __FILE__, __LINE__, "output lacks '%s':\n%s", needle, h_ ? h_ : "(null)"); \
  } while (0)
#define RG_SKIP(reason)      \
  do {                       \
    rg_test_skip(t, reason); \
    return;                  \
  } while (0)

#endif  // RG_TESTS_TEST_H
