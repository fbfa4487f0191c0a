// Replays the fuzz seed corpus and every input the fuzzer once crashed on
// through the fuzz target, in the ordinary (sanitized) test build, so a fixed
// crash stays fixed even where libFuzzer is not available.
#include <dirent.h>
#include <stdlib.h>

#include "tests/fuzz/fuzz_config.c"
#include "tests/test.h"

static int replay_dir(rg_test_ctx_t *t, const char *dir) {
  DIR *d = opendir(dir);
  if (!d) {
    rg_test_fail(t, __FILE__, __LINE__, "cannot open %s", dir);
    return 0;
  }
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    FILE *f = fopen(path, "rb");
    if (!f) continue;
    static uint8_t buf[1 << 20];
    size_t len = fread(buf, 1, sizeof buf, f);
    fclose(f);
    // Copy into an exact-size heap block so ASan sees reads past the end.
    uint8_t *exact = malloc(len ? len : 1);
    if (!exact) abort();
    memcpy(exact, buf, len);
    LLVMFuzzerTestOneInput(exact, len);
    free(exact);
    n++;
  }
  closedir(d);
  return n;
}

RG_TEST(fuzz_corpus_and_regressions_replay_cleanly) {
  RG_CHECK(replay_dir(t, RIDGE_SOURCE_DIR "/tests/fuzz/corpus/config") >= 5);
  RG_CHECK(replay_dir(t, RIDGE_SOURCE_DIR "/tests/fuzz/regressions") >= 1);
  rg_catalog_destroy(cat);
  cat = NULL;
}
