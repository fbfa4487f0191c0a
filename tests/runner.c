// The test runner: runs every RG_TEST (or those whose name contains one of the
// arguments) and ends with "N passed, N failed, N skipped".
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "graphs/weights.h"
#include "tests/test.h"

typedef struct {
  const char *name, *file;
  rg_test_fn_t fn;
  void *arg;
} entry_t;

struct rg_test_ctx_s {
  const char *name;
  void *arg;
  int failures;
  int skipped;
  char skip_reason[256];
  char tmpdir[256];
  char path[512];
};

static entry_t *tests;
static size_t n_tests, cap_tests;

void rg_test_register_arg(const char *name, const char *file, rg_test_fn_t fn, void *arg) {
  if (n_tests == cap_tests) {
    cap_tests = cap_tests ? cap_tests * 2 : 64;
    entry_t *nt = realloc(tests, cap_tests * sizeof(*tests));
    if (!nt) abort();
    tests = nt;
  }
  tests[n_tests++] = (entry_t){name, file, fn, arg};
}

void rg_test_register(const char *name, const char *file, rg_test_fn_t fn) {
  rg_test_register_arg(name, file, fn, NULL);
}

void *rg_test_arg(rg_test_ctx_t *t) {
  return t->arg;
}

void rg_test_fail(rg_test_ctx_t *t, const char *file, int line, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stdout, "    %s:%d: ", file, line);
  vfprintf(stdout, fmt, ap);
  fputc('\n', stdout);
  va_end(ap);
  t->failures++;
}

void rg_test_skip(rg_test_ctx_t *t, const char *reason) {
  t->skipped = 1;
  snprintf(t->skip_reason, sizeof(t->skip_reason), "%s", reason);
}

const char *rg_test_config_dir(void) {
  const char *e = getenv("RIDGE_CONFIG_DIR");
  return e ? e : RIDGE_SOURCE_DIR "/configs";
}

const char *rg_test_ridge_bin(void) {
  const char *e = getenv("RIDGE_BIN");
  return e ? e : RIDGE_BIN;
}

const char *rg_test_tiny_model(rg_test_ctx_t *t, int arch, const char *sub, uint64_t seed) {
  static char dirs[4][1024];
  static int next;
  char *dir = dirs[next++ % 4];
  snprintf(dir, sizeof dirs[0], "%s/%s", rg_test_tmpdir(t), sub);
  rg_testmodel_opts_t o = {0};
  o.arch = (rg_testmodel_arch_t)arch;
  o.size = RG_TESTMODEL_TINY;
  o.dtype = RG_BF16;
  o.gguf_type = RG_DTYPE_COUNT;
  o.seed = seed;
  rg_status_t st = rg_testmodel_write(dir, &o, NULL);
  if (st) {
    rg_test_fail(t, __FILE__, __LINE__, "testmodel: %s", rg_status_message(st));
    rg_status_free(st);
    return NULL;
  }
  return dir;
}

const char *rg_test_tmpdir(rg_test_ctx_t *t) {
  if (!t->tmpdir[0]) {
    snprintf(t->tmpdir, sizeof(t->tmpdir), "/tmp/ridge-test-XXXXXX");
    if (!mkdtemp(t->tmpdir)) abort();
  }
  return t->tmpdir;
}

const char *rg_test_write(rg_test_ctx_t *t, const char *name, const char *text) {
  snprintf(t->path, sizeof(t->path), "%s/%s", rg_test_tmpdir(t), name);
  FILE *f = fopen(t->path, "wb");
  if (!f) abort();
  fputs(text, f);
  fclose(f);
  return t->path;
}

int rg_test_run_ridge(rg_test_ctx_t *t, const char *args, char **out) {
  size_t cmdlen = strlen(args) + 1024;
  char *cmd = malloc(cmdlen);
  if (!cmd) abort();
  snprintf(cmd, cmdlen, "cd '%s' && '%s' --config-dir '%s' %s 2>&1", rg_test_tmpdir(t),
           rg_test_ridge_bin(), rg_test_config_dir(), args);
  FILE *p = popen(cmd, "r");
  free(cmd);
  if (!p) abort();
  size_t len = 0, cap = 4096;
  char *buf = malloc(cap);
  if (!buf) abort();
  size_t got;
  while ((got = fread(buf + len, 1, cap - len - 1, p)) > 0) {
    len += got;
    if (cap - len < 1024) {
      cap *= 2;
      char *nb = realloc(buf, cap);
      if (!nb) abort();
      buf = nb;
    }
  }
  buf[len] = 0;
  int st = pclose(p);
  *out = buf;
  if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int cmp_entry(const void *a, const void *b) {
  const entry_t *x = a, *y = b;
  int c = strcmp(x->file, y->file);
  return c ? c : strcmp(x->name, y->name);
}

int main(int argc, char **argv) {
  qsort(tests, n_tests, sizeof(*tests), cmp_entry);
  int passed = 0, failed = 0, skipped = 0;
  for (size_t i = 0; i < n_tests; i++) {
    if (argc > 1) {
      int want = 0;
      for (int a = 1; a < argc; a++) want |= strstr(tests[i].name, argv[a]) != NULL;
      if (!want) continue;
    }
    rg_test_ctx_t ctx = {.name = tests[i].name, .arg = tests[i].arg};
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    fflush(stdout);
    tests[i].fn(&ctx);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
    if (ctx.tmpdir[0]) {
      char cmd[320];
      snprintf(cmd, sizeof(cmd), "rm -rf '%s'", ctx.tmpdir);
      if (system(cmd) != 0) fprintf(stdout, "    (could not remove %s)\n", ctx.tmpdir);
    }
    if (ctx.failures) {
      failed++;
      printf("FAIL %s (%.0f ms)\n", tests[i].name, ms);
    } else if (ctx.skipped) {
      skipped++;
      printf("skip %s: %s\n", tests[i].name, ctx.skip_reason);
    } else {
      passed++;
      printf("ok   %s (%.0f ms)\n", tests[i].name, ms);
    }
  }
  free(tests);
  printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
  return failed ? 1 : 0;
}

long rg_test_smaps_field(const void *p, const char *field) {
  FILE *f = fopen("/proc/self/smaps", "r");
  if (!f) return -1;
  char line[256];
  int in = 0;
  long got = -1;
  size_t fl = strlen(field);
  while (fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
      in = (uintptr_t)p >= lo && (uintptr_t)p < hi;
      continue;
    }
    if (in && !strncmp(line, field, fl) && sscanf(line + fl, "%ld", &got) == 1) break;
  }
  fclose(f);
  return got;
}
