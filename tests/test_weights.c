// Tests of graphs/weights.h: the safetensors and GGUF copies of the test
// model expose the same tensors; the Q/K permutation; sharded checkpoints;
// and every kind of malformed or hostile file, each with the message a user
// sees. Hostile files are opened with rg__weights_use_read set, so they sit
// in exact-size heap blocks where AddressSanitizer catches any over-read.
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/clock.h"
#include "graphs/weights.h"
#include "tests/test.h"

extern int rg__weights_use_read;

// The fuzz targets, replayed over their seed corpora below.
#define LLVMFuzzerTestOneInput rg_fuzz_safetensors_one
#include "tests/fuzz/fuzz_safetensors.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput rg_fuzz_gguf_one
#include "tests/fuzz/fuzz_gguf.c"
#undef LLVMFuzzerTestOneInput

// ----- fixtures ---------------------------------------------------------------------------

// Test models are written once per run into one directory removed at exit.
static char fixture_root[64];

static void remove_fixtures(void) {
  if (!fixture_root[0]) return;
  char cmd[128];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", fixture_root);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", fixture_root);
}

// kind: "llama", "moe", "llama-q8", "moe-q8".
static const char *fixture(rg_test_ctx_t *t, const char *kind) {
  static char dirs[4][128];
  static const char *const kinds[4] = {"llama", "moe", "llama-q8", "moe-q8"};
  int k = 0;
  while (k < 4 && strcmp(kinds[k], kind)) k++;
  if (k == 4) return NULL;
  if (dirs[k][0]) return dirs[k];
  if (!fixture_root[0]) {
    snprintf(fixture_root, sizeof(fixture_root), "/tmp/ridge-weights-XXXXXX");
    if (!mkdtemp(fixture_root)) abort();
    atexit(remove_fixtures);
  }
  snprintf(dirs[k], sizeof(dirs[k]), "%s/%s", fixture_root, kind);
  rg_testmodel_opts_t o = {
      .arch = strncmp(kind, "moe", 3) ? RG_TESTMODEL_LLAMA : RG_TESTMODEL_MOE,
      .size = RG_TESTMODEL_TINY,
      .seed = 7,
      .dtype = RG_BF16,
      .gguf_type = strstr(kind, "q8") ? RG_Q8_0 : RG_DTYPE_COUNT,
  };
  rg_status_t s = rg_testmodel_write(dirs[k], &o, NULL);
  if (s) {
    rg_test_fail(t, __FILE__, __LINE__, "testmodel %s: %s", kind, rg_status_message(s));
    rg_status_free(s);
    dirs[k][0] = 0;
    return NULL;
  }
  return dirs[k];
}

static char *path_in(const char *dir, const char *name) {
  size_t len = strlen(dir) + strlen(name) + 2;
  char *p = malloc(len);
  if (!p) abort();
  snprintf(p, len, "%s/%s", dir, name);
  return p;
}

static rg_weights_t *open_ok(rg_test_ctx_t *t, const char *path) {
  rg_weights_t *w = NULL;
  rg_status_t s = rg_weights_open(path, &w);
  if (s) {
    rg_test_fail(t, __FILE__, __LINE__, "open %s: %s", path, rg_status_message(s));
    rg_status_free(s);
  }
  return w;
}

static rg_status_t try_open(const char *path) {
  rg_weights_t *w = NULL;
  rg_status_t s = rg_weights_open(path, &w);
  rg_weights_close(w);
  return s;
}

// Opening path must fail with a message naming the file and holding needle.
#define CHECK_OPEN_ERR(path, needle)                                                            \
  do {                                                                                          \
    const char *p_ = (path);                                                                    \
    rg__weights_use_read = 1;                                                                   \
    rg_status_t s2_ = try_open(p_);                                                             \
    rg__weights_use_read = 0;                                                                   \
    if (!s2_) {                                                                                 \
      rg_test_fail(t, __FILE__, __LINE__, "opening %s succeeded, expected '%s'", p_, needle);   \
    } else {                                                                                    \
      const char *m_ = rg_status_message(s2_);                                                  \
      if (!strstr(m_, needle) || !strstr(m_, p_))                                               \
        rg_test_fail(t, __FILE__, __LINE__, "message '%s' lacks '%s' or the file", m_, needle); \
      rg_status_free(s2_);                                                                      \
    }                                                                                           \
  } while (0)

// Every tensor of a must be in b with the same shape, type and bytes.
static void check_same_tensors(rg_test_ctx_t *t, const rg_weights_t *a, const rg_weights_t *b) {
  RG_CHECK(rg_weights_count(a) == rg_weights_count(b));
  for (size_t i = 0; i < rg_weights_count(a); i++) {
    const rg_tensor_t *x = rg_weights_at(a, i), *y = rg_weights_find(b, x->name);
    if (!y) {
      rg_test_fail(t, __FILE__, __LINE__, "tensor %s missing", x->name);
      continue;
    }
    int same = x->type == y->type && x->n_dims == y->n_dims && x->nbytes == y->nbytes;
    for (int d = 0; same && d < x->n_dims; d++) same = x->shape[d] == y->shape[d];
    if (!same || memcmp(x->data, y->data, x->nbytes))
      rg_test_fail(t, __FILE__, __LINE__, "tensor %s differs", x->name);
  }
}

// ----- the test model in both formats -----------------------------------------------------

static void check_formats_agree(rg_test_ctx_t *t, const char *kind, int n_expected) {
  const char *dir = fixture(t, kind);
  RG_REQUIRE(dir);
  char *gguf = path_in(dir, "model.gguf");
  rg_weights_t *st = open_ok(t, dir), *gg = open_ok(t, gguf);
  free(gguf);
  if (st && gg) {
    RG_CHECK(rg_weights_format(st) == RG_WEIGHTS_SAFETENSORS);
    RG_CHECK(rg_weights_format(gg) == RG_WEIGHTS_GGUF);
    RG_CHECK((int)rg_weights_count(st) == n_expected);
    check_same_tensors(t, st, gg);
    RG_CHECK(!strcmp(rg_weights_meta_str(st, "format"), "pt"));
    RG_CHECK(!strcmp(rg_weights_meta_str(gg, "general.architecture"), "llama"));

    rg_arch_t *a1 = NULL, *a2 = NULL;
    RG_CHECK_OK(rg_weights_arch(st, &a1));
    RG_CHECK_OK(rg_weights_arch(gg, &a2));
    if (a1 && a2) {
      RG_CHECK(!strcmp(a2->name, !strcmp(kind, "moe") ? "ridge-testmodel-moe-tiny"
                                                      : "ridge-testmodel-llama-tiny"));
      memcpy(a2->name, a1->name, sizeof(a1->name));  // named differently by design
      RG_CHECK(memcmp(a1, a2, sizeof(*a1)) == 0);
      RG_CHECK_OK(rg_weights_check(st, a1));
      RG_CHECK_OK(rg_weights_check(gg, a2));
    }
    rg_arch_destroy(a1);
    rg_arch_destroy(a2);

    rg_weights_hparams_t h1, h2;
    RG_CHECK_OK(rg_weights_hparams(st, &h1));
    RG_CHECK_OK(rg_weights_hparams(gg, &h2));
    RG_CHECK_NEAR(h2.rms_norm_eps, h1.rms_norm_eps, 1e-6);
    RG_CHECK(h1.rope_theta == h2.rope_theta);
    RG_CHECK(h1.rope_scaling == h2.rope_scaling);
    RG_CHECK(h1.rope_factor == h2.rope_factor);
    RG_CHECK(h1.rope_original_max == h2.rope_original_max);
    RG_CHECK(h1.bos == h2.bos && h1.eos == h2.eos && h1.bos >= 0);
    RG_CHECK(h1.norm_topk_prob == h2.norm_topk_prob);
    RG_CHECK(h1.tie_embeddings == 0 && h2.tie_embeddings == 0);
    double f1[8], f2[8], f3[8];
    RG_CHECK_OK(rg_rope_inv_freq(&h1, 16, f1));
    RG_CHECK_OK(rg_rope_inv_freq(&h2, 16, f2));
    for (int i = 0; i < 8; i++) RG_CHECK_NEAR(f2[i], f1[i], 1e-12);
    // llama.cpp's own form of the same scaling: the rope_freqs tensor.
    if (h2.rope_scaling == RG_ROPE_SCALING_LLAMA3) {
      RG_REQUIRE(h2.rope_freq_factors && h2.n_rope_freq_factors == 8);
      rg_weights_hparams_t h3 = h2;
      h3.rope_scaling = RG_ROPE_SCALING_FREQS;
      RG_CHECK_OK(rg_rope_inv_freq(&h3, 16, f3));
      for (int i = 0; i < 8; i++) RG_CHECK_NEAR(f3[i], f1[i], 1e-6);
    }
  }
  rg_weights_close(st);
  rg_weights_close(gg);
}

// Once its tensors are copied out, an engine drops the file's pages from its
// resident set; the tensors stay readable, faulted back in.
RG_TEST(weights_release_pages_leaves_tensors_readable) {
  const char *dir = fixture(t, "llama");
  RG_REQUIRE(dir);
  char *path = path_in(dir, "model.safetensors");
  rg_weights_t *w = NULL;
  RG_REQUIRE_OK(rg_weights_open(path, &w));
  const rg_tensor_t *e = rg_weights_find(w, "model.embed_tokens.weight");
  RG_REQUIRE(e && e->nbytes >= 4096);
  unsigned char *copy = malloc(e->nbytes);
  RG_REQUIRE(copy);
  memcpy(copy, e->data, e->nbytes);  // resident now
  long before = rg_test_smaps_field(e->data, "Rss:");
  rg_weights_release_pages(w);
  long after = rg_test_smaps_field(e->data, "Rss:");
  if (before >= 0 && after >= 0) {
    RG_CHECK(before >= (long)(e->nbytes >> 10));
    RG_CHECK(after == 0);
  }
  RG_CHECK(memcmp(copy, e->data, e->nbytes) == 0);
  free(copy);
  rg_weights_close(w);
  free(path);
}

RG_TEST(weights_testmodel_llama_safetensors_and_gguf_agree) {
  // embed, 2 x (2 norms + 4 attention + 3 FFN), final norm, lm_head.
  check_formats_agree(t, "llama", 1 + 2 * 9 + 2);
}

RG_TEST(weights_testmodel_moe_safetensors_and_gguf_agree) {
  // embed, 2 x (2 norms + 4 attention + router + 4 experts x 3), norm, lm_head.
  check_formats_agree(t, "moe", 1 + 2 * (2 + 4 + 1 + 12) + 2);
}

static void check_q8_0(rg_test_ctx_t *t, const char *kind) {
  const char *dir = fixture(t, kind);
  RG_REQUIRE(dir);
  char *gguf = path_in(dir, "model.gguf");
  rg_weights_t *st = open_ok(t, dir), *gg = open_ok(t, gguf);
  free(gguf);
  int n_q8 = 0;
  for (size_t i = 0; st && gg && i < rg_weights_count(st); i++) {
    const rg_tensor_t *x = rg_weights_at(st, i), *y = rg_weights_find(gg, x->name);
    RG_REQUIRE(y);
    RG_CHECK(x->n_dims == y->n_dims && x->shape[0] == y->shape[0] && x->shape[1] == y->shape[1]);
    if (y->type != RG_Q8_0) {
      // Norms and routers keep their type and bytes.
      RG_CHECK(x->n_dims == 1 || strstr(x->name, ".gate.weight"));
      RG_CHECK(y->type == x->type && !memcmp(x->data, y->data, x->nbytes));
      continue;
    }
    n_q8++;
    int64_t n = rg_tensor_elems(x);
    float *a = malloc((size_t)n * sizeof(float)), *b = malloc((size_t)n * sizeof(float));
    RG_REQUIRE(a && b);
    RG_CHECK_OK(rg_tensor_read_f32(x, 0, n, a));
    RG_CHECK_OK(rg_tensor_read_f32(y, 0, n, b));
    // Each value is within half a step (amax/127) of its block, plus the
    // f16 rounding of the scale.
    for (int64_t blk = 0; blk < n / 32; blk++) {
      float amax = 0, err = 0;
      for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(a[blk * 32 + j]));
      for (int j = 0; j < 32; j++) err = fmaxf(err, fabsf(a[blk * 32 + j] - b[blk * 32 + j]));
      if (err > amax / 127.0f * 0.5f + amax * 1e-3f) {
        rg_test_fail(t, __FILE__, __LINE__, "%s block %lld: error %g for amax %g", x->name,
                     (long long)blk, err, amax);
        break;
      }
    }
    free(a);
    free(b);
  }
  RG_CHECK(n_q8 > 10);
  rg_arch_t *a2 = NULL;
  if (gg) RG_CHECK_OK(rg_weights_arch(gg, &a2));
  if (a2) RG_CHECK(a2->weight_dtype == RG_INT8);
  rg_arch_destroy(a2);
  rg_weights_close(st);
  rg_weights_close(gg);
}

RG_TEST(weights_testmodel_q8_0_gguf_within_quantization_error) {
  check_q8_0(t, "llama-q8");
  check_q8_0(t, "moe-q8");
}

// ----- the Q/K permutation --------------------------------------------------------------

RG_TEST(weights_qk_permutation_is_llama_cpp_s_and_round_trips) {
  // Two heads of head_dim 4, one byte per row: HF rows (0 1 | 2 3) of a head
  // are stored as pairs (0 2) (1 3).
  const uint8_t hf[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  uint8_t g[8], back[8];
  RG_CHECK_OK(rg_weights_qk_permute(g, hf, 8, 1, 2, 0));
  const uint8_t want[8] = {0, 2, 1, 3, 4, 6, 5, 7};
  RG_CHECK(!memcmp(g, want, 8));
  RG_CHECK_OK(rg_weights_qk_permute(back, g, 8, 1, 2, 1));
  RG_CHECK(!memcmp(back, hf, 8));
  // head_dim 8: (0 1 2 3 | 4 5 6 7) -> 0 4 1 5 2 6 3 7.
  uint8_t g8[8];
  RG_CHECK_OK(rg_weights_qk_permute(g8, hf, 8, 1, 1, 0));
  const uint8_t want8[8] = {0, 4, 1, 5, 2, 6, 3, 7};
  RG_CHECK(!memcmp(g8, want8, 8));
  // Multi-byte rows move whole.
  uint16_t rows[12], prow[12], rback[12];
  for (int i = 0; i < 12; i++) rows[i] = (uint16_t)(i * 257);
  RG_CHECK_OK(rg_weights_qk_permute(prow, rows, 6, 4, 3, 0));
  RG_CHECK_OK(rg_weights_qk_permute(rback, prow, 6, 4, 3, 1));
  RG_CHECK(!memcmp(rback, rows, sizeof(rows)));
  RG_CHECK(prow[2] == rows[2] && prow[3] == rows[3]);  // head 0: rows 0 1 -> 0 1
  RG_CHECK_ERR(rg_weights_qk_permute(g, hf, 6, 1, 2, 0), "6 rows do not split into 2 heads");
  RG_CHECK_ERR(rg_weights_qk_permute(g, hf, 8, 1, 3, 0), "8 rows do not split into 3 heads");
  // Rows of no bytes (a hostile GGUF's q tensor with a zero dimension and
  // 2^40 rows, which the fuzzer found walked one by one): nothing to move,
  // at once.
  double t0 = rg_clock_now();
  RG_CHECK_OK(rg_weights_qk_permute(g, hf, (int64_t)1 << 40, 0, 32, 1));
  RG_CHECK(rg_clock_now() - t0 < 0.1);
}

// Reads a whole file; *len gets its size.
static uint8_t *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *p = malloc(n > 0 ? (size_t)n : 1);
  if (p && fread(p, 1, (size_t)n, f) != (size_t)n) {
    free(p);
    p = NULL;
  }
  fclose(f);
  *len = (size_t)n;
  return p;
}

static int spill(const char *path, const void *p, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f) return 0;
  int ok = fwrite(p, 1, n, f) == n;
  return fclose(f) == 0 && ok;
}

RG_TEST(weights_gguf_stores_llama_q_and_k_permuted) {
  const char *dir = fixture(t, "llama");
  RG_REQUIRE(dir);
  char *gguf = path_in(dir, "model.gguf");
  size_t len = 0;
  uint8_t *bytes = slurp(gguf, &len);
  free(gguf);
  RG_REQUIRE(bytes);
  // Relabel the file as qwen2 (same length as "llama", and stored unpermuted)
  // in the metadata only: the reader then hands back the rows as stored.
  size_t header = 20000;  // the metadata and tensor infos of the tiny model
  RG_REQUIRE(len > header);
  for (size_t i = 0; i + 5 <= header; i++)
    if (!memcmp(bytes + i, "llama", 5)) memcpy(bytes + i, "qwen2", 5);
  const char *path = rg_test_write(t, "relabelled.gguf", "");
  RG_REQUIRE(spill(path, bytes, len));
  free(bytes);
  rg_weights_t *st = open_ok(t, dir), *raw = open_ok(t, path);
  if (st && raw) {
    static const char *const names[2] = {"model.layers.1.self_attn.q_proj.weight",
                                         "model.layers.1.self_attn.k_proj.weight"};
    for (int k = 0; k < 2; k++) {
      const rg_tensor_t *x = rg_weights_find(st, names[k]), *y = rg_weights_find(raw, names[k]);
      RG_REQUIRE(x && y && x->nbytes == y->nbytes);
      uint8_t *want = malloc(x->nbytes);
      RG_REQUIRE(want);
      int64_t groups = k == 0 ? 4 : 2;
      RG_CHECK_OK(rg_weights_qk_permute(want, x->data, x->shape[0],
                                        x->nbytes / (uint64_t)x->shape[0], groups, 0));
      RG_CHECK(!memcmp(want, y->data, x->nbytes));
      RG_CHECK(memcmp(x->data, y->data, x->nbytes) != 0);
      free(want);
    }
    // v_proj is stored as it is.
    const rg_tensor_t *v1 = rg_weights_find(st, "model.layers.0.self_attn.v_proj.weight");
    const rg_tensor_t *v2 = rg_weights_find(raw, "model.layers.0.self_attn.v_proj.weight");
    RG_CHECK(v1 && v2 && !memcmp(v1->data, v2->data, v1->nbytes));
  }
  rg_weights_close(st);
  rg_weights_close(raw);
}

// ----- sharded checkpoints -----------------------------------------------------------------

static void copy_file(rg_test_ctx_t *t, const char *from, const char *to) {
  size_t len = 0;
  uint8_t *p = slurp(from, &len);
  if (!p || !spill(to, p, len)) rg_test_fail(t, __FILE__, __LINE__, "copying %s", from);
  free(p);
}

RG_TEST(weights_sharded_index_opens_and_checks_its_map) {
  const char *dir = fixture(t, "llama");
  RG_REQUIRE(dir);
  rg_weights_t *whole = open_ok(t, dir);
  RG_REQUIRE(whole);
  const char *tmp = rg_test_tmpdir(t);
  size_t n = rg_weights_count(whole), half = n / 2;
  rg_tensor_t *ts = calloc(n, sizeof(*ts));
  RG_REQUIRE(ts);
  for (size_t i = 0; i < n; i++) ts[i] = *rg_weights_at(whole, i);
  char *s1 = path_in(tmp, "model-00001-of-00002.safetensors");
  char *s2 = path_in(tmp, "model-00002-of-00002.safetensors");
  RG_CHECK_OK(rg_safetensors_write(s1, ts, half, NULL, 0, NULL));
  RG_CHECK_OK(rg_safetensors_write(s2, ts + half, n - half, NULL, 0, NULL));
  char *cfg_from = path_in(dir, "config.json"), *cfg_to = path_in(tmp, "config.json");
  copy_file(t, cfg_from, cfg_to);
  // The index, by hand.
  size_t cap = 64 + n * 128, u = 0;
  char *idx = malloc(cap);
  RG_REQUIRE(idx);
  u += (size_t)snprintf(idx + u, cap - u, "{\"metadata\": {}, \"weight_map\": {");
  for (size_t i = 0; i < n; i++)
    u += (size_t)snprintf(idx + u, cap - u, "%s\"%s\": \"model-0000%d-of-00002.safetensors\"",
                          i ? ", " : "", ts[i].name, i < half ? 1 : 2);
  snprintf(idx + u, cap - u, "}}");
  rg_test_write(t, "model.safetensors.index.json", idx);
  rg_weights_t *sh = open_ok(t, tmp);
  if (sh) {
    check_same_tensors(t, whole, sh);
    RG_CHECK(strstr(rg_weights_find(sh, ts[n - 1].name)->file, "00002-of-00002"));
    rg_arch_t *a = NULL;
    RG_CHECK_OK(rg_weights_arch(sh, &a));
    if (a) RG_CHECK_OK(rg_weights_check(sh, a));
    rg_arch_destroy(a);
  }
  rg_weights_close(sh);

  char *index = path_in(tmp, "model.safetensors.index.json");
  // A tensor mapped to the wrong shard.
  char *wrong = strdup(idx);
  RG_REQUIRE(wrong);
  char *at = strstr(wrong, "00001-of");
  RG_REQUIRE(at);
  at[4] = '2';
  rg_test_write(t, "model.safetensors.index.json", wrong);
  RG_CHECK_ERR(try_open(tmp), "but the index maps it to model-00002-of-00002.safetensors");
  // A mapped tensor no shard holds.
  char *extra = malloc(strlen(idx) + 128);
  RG_REQUIRE(extra);
  snprintf(extra, strlen(idx) + 128,
           "{\"weight_map\": {\"ghost.weight\": "
           "\"model-00001-of-00002.safetensors\", %s",
           strstr(idx, "\"weight_map\": {") + 15);
  rg_test_write(t, "model.safetensors.index.json", extra);
  RG_CHECK_ERR(try_open(tmp),
               "tensor 'ghost.weight' is mapped to model-00001-of-00002.safetensors, "
               "which does not hold it");
  // Shards are plain names beside the index.
  rg_test_write(t, "model.safetensors.index.json",
                "{\"weight_map\": {\"a.weight\": \"../model-00001-of-00002.safetensors\"}}");
  RG_CHECK_ERR(try_open(tmp), "is not a plain file name in the checkpoint's directory");
  rg_test_write(t, "model.safetensors.index.json", "{\"weight_map\": [1, 2]}");
  RG_CHECK_ERR(try_open(tmp), "weight_map is missing or not an object");
  // The same tensor in two shards (where the index does not map it).
  rg_tensor_t two[2] = {ts[0], ts[2]};
  RG_CHECK_OK(rg_safetensors_write(s1, ts, 2, NULL, 0, NULL));
  RG_CHECK_OK(rg_safetensors_write(s2, two, 2, NULL, 0, NULL));
  char dup[512];
  snprintf(dup, sizeof(dup),
           "{\"weight_map\": {\"%s\": \"model-00001-of-00002.safetensors\", \"%s\": "
           "\"model-00002-of-00002.safetensors\"}}",
           ts[1].name, ts[2].name);
  rg_test_write(t, "model.safetensors.index.json", dup);
  RG_CHECK_ERR(try_open(tmp), "tensor 'model.embed_tokens.weight' appears twice: in ");
  (void)index;
  free(index);
  free(extra);
  free(wrong);
  free(idx);
  free(cfg_from);
  free(cfg_to);
  free(s1);
  free(s2);
  free(ts);
  rg_weights_close(whole);
}

// ----- what the config implies ------------------------------------------------------------

RG_TEST(weights_expect_and_check_name_file_and_tensor) {
  const char *dir = fixture(t, "llama");
  RG_REQUIRE(dir);
  rg_weights_t *w = open_ok(t, dir);
  RG_REQUIRE(w);
  char *st = path_in(dir, "model.safetensors");
  int64_t s2[2] = {1024, 64};
  char want[512];
  snprintf(want, sizeof(want),
           "%s: tensor 'model.layers.1.mlp.up_proj.weight': shape [128, 64] but the config implies "
           "[1024, 64]",
           st);
  rg_status_t s = rg_weights_expect(w, "model.layers.1.mlp.up_proj.weight", 2, s2, NULL);
  RG_CHECK(s && !strcmp(rg_status_message(s), want));
  rg_status_free(s);
  RG_CHECK_ERR(rg_weights_expect(w, "model.layers.9.mlp.up_proj.weight", 2, s2, NULL),
               "missing tensor 'model.layers.9.mlp.up_proj.weight'");
  const rg_tensor_t *out = NULL;
  int64_t ok[2] = {128, 64};
  RG_CHECK_OK(rg_weights_expect(w, "model.layers.1.mlp.up_proj.weight", 2, ok, &out));
  RG_CHECK(out && out->type == RG_BF16 && out->nbytes == 128 * 64 * 2);
  rg_weights_close(w);

  // A config that disagrees with the weights.
  const char *tmp = rg_test_tmpdir(t);
  char *to = path_in(tmp, "model.safetensors");
  copy_file(t, st, to);
  char *cfg = path_in(dir, "config.json");
  size_t len = 0;
  char *text = (char *)slurp(cfg, &len);
  RG_REQUIRE(text);
  text = realloc(text, len + 1);
  text[len] = 0;
  char *ff = strstr(text, "\"intermediate_size\":\t128");
  RG_REQUIRE(ff);
  memcpy(ff + strlen("\"intermediate_size\":\t"), "256", 3);
  rg_test_write(t, "config.json", text);
  w = open_ok(t, tmp);
  rg_arch_t *a = NULL;
  if (w) RG_CHECK_OK(rg_weights_arch(w, &a));
  if (a) {
    snprintf(want, sizeof(want),
             "%s: tensor 'model.layers.0.mlp.gate_proj.weight': shape [128, 64] but the config "
             "implies [256, 64]",
             to);
    s = rg_weights_check(w, a);
    RG_CHECK(s && !strcmp(rg_status_message(s), want));
    rg_status_free(s);
    a->tie_embeddings = 1;
    a->d_ff = 128;
    RG_CHECK_OK(rg_weights_check(w, a));
    a->qk_norm = 1;
    RG_CHECK_ERR(rg_weights_check(w, a), "missing tensor 'model.layers.0.self_attn.q_norm.weight'");
    a->family = RG_FAMILY_GPT_OSS;
    RG_CHECK_ERR(rg_weights_check(w, a), "checking tensors of family 'gpt_oss' is not supported");
  }
  rg_arch_destroy(a);
  rg_weights_close(w);
  free(text);
  free(cfg);
  free(to);
  free(st);
}

// ----- config.json fields ridge would otherwise run wrong ------------------------------------

// The llama fixture's weights (linked) with its config.json changed: key set
// to the JSON value `value`, in tmpdir/sub. Returns the directory.
static const char *with_config(rg_test_ctx_t *t, const char *sub, const char *key,
                               const char *value) {
  static char dir[1024];
  const char *src = fixture(t, "llama");
  if (!src) return NULL;
  snprintf(dir, sizeof dir, "%s/%s", rg_test_tmpdir(t), sub);
  char *st = path_in(src, "model.safetensors"), *to = path_in(dir, "model.safetensors");
  char *cfg = path_in(src, "config.json");
  size_t len = 0;
  char *text = (char *)slurp(cfg, &len);
  cJSON *root = text ? cJSON_ParseWithLength(text, len) : NULL;
  cJSON *v = cJSON_Parse(value);
  int ok = root && v && mkdir(dir, 0700) == 0 && symlink(st, to) == 0;
  if (ok) {
    cJSON_ReplaceItemInObject(root, key, v);
    v = NULL;
    char *out = cJSON_Print(root), name[64];
    snprintf(name, sizeof name, "%s/config.json", sub);
    rg_test_write(t, name, out);
    free(out);
  } else {
    rg_test_fail(t, __FILE__, __LINE__, "cannot make %s", dir);
  }
  cJSON_Delete(v);
  cJSON_Delete(root);
  free(text);
  free(cfg);
  free(to);
  free(st);
  return ok ? dir : NULL;
}

// Opens dir and reads its arch; the status of whichever step failed.
static rg_status_t arch_of(const char *dir, rg_weights_t **w, rg_arch_t **a) {
  *w = NULL;
  *a = NULL;
  RG_RETURN_IF_ERROR(rg_weights_open(dir, w));
  return rg_weights_arch(*w, a);
}

RG_TEST(weights_config_json_refuses_what_ridge_would_run_wrong) {
  static const struct {
    const char *sub, *key, *value, *want;
  } cases[] = {
      {"gelu", "hidden_act", "\"gelu\"",
       "hidden_act: 'gelu' is not supported; ridge runs SwiGLU feed-forward layers: silu (or its "
       "other name, swish)"},
      {"frob", "hidden_act", "\"frobnicate\"", "hidden_act: 'frobnicate' is not supported"},
      {"theta0", "rope_theta", "0",
       "rope_theta: 0 is not a rotary base; expected a number greater than 1"},
      {"theta1", "rope_theta", "1", "rope_theta: 1 is not a rotary base"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const char *dir = with_config(t, cases[i].sub, cases[i].key, cases[i].value);
    if (!dir) continue;
    char want[1400];
    // The message starts with the file and the key's position in it.
    snprintf(want, sizeof want, "%s/config.json:", dir);
    rg_weights_t *w;
    rg_arch_t *a;
    rg_status_t s = arch_of(dir, &w, &a);
    if (!s)
      rg_test_fail(t, __FILE__, __LINE__, "%s = %s was accepted", cases[i].key, cases[i].value);
    else if (strncmp(rg_status_message(s), want, strlen(want)) != 0 ||
             !strstr(rg_status_message(s), cases[i].want))
      rg_test_fail(t, __FILE__, __LINE__, "message '%s' lacks '%s' or '%s'", rg_status_message(s),
                   want, cases[i].want);
    rg_status_free(s);
    rg_arch_destroy(a);
    rg_weights_close(w);
  }
  // silu's other name and a null (the family's default) are fine.
  const char *ok[][2] = {{"swish", "\"swish\""}, {"null", "null"}};
  for (size_t i = 0; i < 2; i++) {
    const char *dir = with_config(t, ok[i][0], "hidden_act", ok[i][1]);
    rg_weights_t *w;
    rg_arch_t *a;
    if (dir) RG_CHECK_OK(arch_of(dir, &w, &a));
    if (dir) rg_arch_destroy(a), rg_weights_close(w);
  }

  // A config declaring fewer layers than the weights hold: the weights'
  // last layer would be silently dropped.
  rg_weights_t *w;
  rg_arch_t *a;
  const char *full = fixture(t, "llama");
  RG_REQUIRE(full);
  RG_REQUIRE_OK(arch_of(full, &w, &a));
  int64_t layers = a->n_layers;
  RG_CHECK_OK(rg_weights_check(w, a));
  rg_arch_destroy(a);
  rg_weights_close(w);
  RG_REQUIRE(layers >= 2);
  char value[32], want[1400];
  snprintf(value, sizeof value, "%lld", (long long)layers - 1);
  const char *dir = with_config(t, "fewer", "num_hidden_layers", value);
  RG_REQUIRE(dir);
  RG_REQUIRE_OK(arch_of(dir, &w, &a));
  snprintf(want, sizeof want, "%s/model.safetensors: tensor 'model.layers.%lld.", dir,
           (long long)layers - 1);
  rg_status_t s = rg_weights_check(w, a);
  RG_CHECK(s && strncmp(rg_status_message(s), want, strlen(want)) == 0);
  snprintf(want, sizeof want,
           "is for layer %lld, but %s/config.json declares num_hidden_layers = %lld (layers 0 to "
           "%lld)",
           (long long)layers - 1, dir, (long long)layers - 1, (long long)layers - 2);
  RG_CHECK(s && strstr(rg_status_message(s), want));
  if (s && !strstr(rg_status_message(s), want)) printf("    got: %s\n", rg_status_message(s));
  rg_status_free(s);
  rg_arch_destroy(a);
  rg_weights_close(w);
}

// ----- hostile safetensors --------------------------------------------------------------

// A safetensors file: header length, JSON, then data_len zero bytes (or the
// bytes given).
static const char *st_file(rg_test_ctx_t *t, const char *name, const char *json, const void *data,
                           size_t data_len) {
  static char paths[8][512];
  static int next;
  char *path = paths[next++ % 8];
  snprintf(path, 512, "%s/%s", rg_test_tmpdir(t), name);
  size_t jl = strlen(json);
  uint8_t *p = calloc(8 + jl + data_len + 1, 1);
  if (!p) abort();
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)((uint64_t)jl >> (8 * i));
  memcpy(p + 8, json, jl);
  if (data) memcpy(p + 8 + jl, data, data_len);
  if (!spill(path, p, 8 + jl + data_len)) abort();
  free(p);
  return path;
}

RG_TEST(weights_safetensors_hostile_headers_get_clear_errors) {
  const char *p;
  p = rg_test_write(t, "short.safetensors", "abc");
  CHECK_OPEN_ERR(p, "3 bytes is too short for a safetensors file");
  // Header length past the end, and absurdly large.
  uint8_t h[16] = {200, 0, 0, 0, 0, 0, 0, 0, '{', '}'};
  p = rg_test_write(t, "past.safetensors", "");
  spill(p, h, 10);
  CHECK_OPEN_ERR(p, "header length 200 runs past the end of the file (10 bytes)");
  uint8_t huge[10] = {0, 0, 0, 0, 0, 0, 0, 0x40, '{', '}'};
  p = rg_test_write(t, "huge.safetensors", "");
  spill(p, huge, 10);
  CHECK_OPEN_ERR(p, "header length 4611686018427387904 exceeds the 100 MB limit");
  p = st_file(t, "notjson.safetensors", "{\"a\": ", NULL, 0);
  CHECK_OPEN_ERR(p, "the header is not valid JSON");
  p = st_file(t, "array.safetensors", "[1, 2]", NULL, 0);
  CHECK_OPEN_ERR(p, "the header is not a JSON object");
  p = st_file(t, "trailing.safetensors", "{} x", NULL, 0);
  CHECK_OPEN_ERR(p, "unexpected bytes after the header's JSON");
  p = st_file(t, "dtype.safetensors",
              "{\"w\": {\"dtype\": \"Q4\", \"shape\": [2], \"data_offsets\": [0, 2]}}", NULL, 2);
  CHECK_OPEN_ERR(p, "tensor 'w': unknown dtype 'Q4'");
  p = st_file(t, "nodtype.safetensors", "{\"w\": {\"shape\": [2], \"data_offsets\": [0, 2]}}", NULL,
              2);
  CHECK_OPEN_ERR(p, "tensor 'w': dtype is missing or not a string");
  p = st_file(t, "notobj.safetensors", "{\"w\": 3}", NULL, 0);
  CHECK_OPEN_ERR(p, "tensor 'w': expected an object with dtype, shape and data_offsets");
  p = st_file(t, "neg.safetensors",
              "{\"w\": {\"dtype\": \"F32\", \"shape\": [2, -3], \"data_offsets\": [0, 0]}}", NULL,
              0);
  CHECK_OPEN_ERR(p, "tensor 'w': shape[1] is not a whole number from 0 to 2^53");
  p = st_file(t, "frac.safetensors",
              "{\"w\": {\"dtype\": \"F32\", \"shape\": [2.5], \"data_offsets\": [0, 10]}}", NULL,
              10);
  CHECK_OPEN_ERR(p, "tensor 'w': shape[0] is not a whole number from 0 to 2^53");
  p = st_file(t, "dims.safetensors",
              "{\"w\": {\"dtype\": \"F32\", \"shape\": [1,1,1,1,1], \"data_offsets\": [0, 4]}}",
              NULL, 4);
  CHECK_OPEN_ERR(p, "tensor 'w': 5 dims; ridge reads at most 4");
  p = st_file(t, "overflow.safetensors",
              "{\"w\": {\"dtype\": \"F32\", \"shape\": [4294967296, 4294967296, 4], "
              "\"data_offsets\": [0, 4]}}",
              NULL, 4);
  CHECK_OPEN_ERR(p, "tensor 'w': the shape holds more bytes than fit in 64 bits");
  p = st_file(t, "overflow2.safetensors",
              "{\"w\": {\"dtype\": \"F32\", \"shape\": [4611686018427387904], "
              "\"data_offsets\": [0, 4]}}",
              NULL, 4);
  CHECK_OPEN_ERR(p, "tensor 'w': shape[0] is not a whole number from 0 to 2^53");
  p = st_file(t, "size.safetensors",
              "{\"w\": {\"dtype\": \"F32\", \"shape\": [4, 8], \"data_offsets\": [0, 100]}}", NULL,
              100);
  CHECK_OPEN_ERR(p,
                 "tensor 'w': data_offsets [0, 100] hold 100 bytes but 32 elements of f32 "
                 "take 128");
  p = st_file(t, "past2.safetensors",
              "{\"w\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [8, 24]}}", NULL, 16);
  CHECK_OPEN_ERR(p, "tensor 'w': data_offsets [8, 24] run past the end of the data (16 bytes)");
  p = st_file(t, "back.safetensors",
              "{\"w\": {\"dtype\": \"F32\", \"shape\": [0], \"data_offsets\": [8, 4]}}", NULL, 16);
  CHECK_OPEN_ERR(p, "tensor 'w': data_offsets [8, 4] end before they begin");
  p = st_file(t, "offs.safetensors",
              "{\"w\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0]}}", NULL, 16);
  CHECK_OPEN_ERR(p, "tensor 'w': data_offsets must be a list of two whole numbers");
  p = st_file(t, "overlap.safetensors",
              "{\"a\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]}, "
              "\"b\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [8, 24]}}",
              NULL, 24);
  CHECK_OPEN_ERR(p, "tensor 'b': data_offsets [8, 24] overlap tensor 'a' at [0, 16]");
  p = st_file(t, "overlap2.safetensors",
              "{\"a\": {\"dtype\": \"U8\", \"shape\": [24], \"data_offsets\": [0, 24]}, "
              "\"e\": {\"dtype\": \"U8\", \"shape\": [0], \"data_offsets\": [4, 4]}, "
              "\"b\": {\"dtype\": \"U8\", \"shape\": [2], \"data_offsets\": [20, 22]}}",
              NULL, 24);
  CHECK_OPEN_ERR(p, "tensor 'b': data_offsets [20, 22] overlap tensor 'a' at [0, 24]");
  p = st_file(t, "dup.safetensors",
              "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}, "
              "\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}",
              NULL, 8);
  CHECK_OPEN_ERR(p, "tensor 'a' appears twice");
  char longname[400];
  memset(longname, 'n', 200);
  snprintf(longname + 200, 200,
           "\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}");
  char json[512];
  snprintf(json, sizeof(json), "{\"%s", longname);
  p = st_file(t, "long.safetensors", json, NULL, 4);
  CHECK_OPEN_ERR(p, "the name is longer than 159 bytes");
  p = st_file(t, "meta.safetensors", "{\"__metadata__\": {\"format\": 3}}", NULL, 0);
  CHECK_OPEN_ERR(p, "__metadata__ 'format' is not a string");
  p = rg_test_write(t, "empty.safetensors", "");
  CHECK_OPEN_ERR(p, "the file is empty");
  CHECK_OPEN_ERR("/nonexistent/ridge/x.safetensors", "cannot open");
}

RG_TEST(weights_safetensors_odd_but_valid_files_load) {
  // A misaligned F32 tensor is copied to aligned memory; empty tensors,
  // integer tensors and metadata are fine.
  uint8_t data[21] = {0};
  float v[4] = {1.5f, -2.0f, 3.25f, 0.0f};
  memcpy(data + 1, v, 16);
  memcpy(data + 17, "\x07\x00\x00\x00", 4);
  const char *p =
      st_file(t, "odd.safetensors",
              "{\"__metadata__\": {\"k\": \"v\"}, "
              "\"b\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0, 1]}, "
              "\"f\": {\"dtype\": \"F32\", \"shape\": [2, 2], \"data_offsets\": [1, 17]}, "
              "\"i\": {\"dtype\": \"I32\", \"shape\": [1], \"data_offsets\": [17, 21]}, "
              "\"e\": {\"dtype\": \"BF16\", \"shape\": [0, 3], \"data_offsets\": [21, 21]}}",
              data, sizeof(data));
  rg__weights_use_read = 1;
  rg_weights_t *w = open_ok(t, p);
  rg__weights_use_read = 0;
  RG_REQUIRE(w);
  RG_CHECK(rg_weights_count(w) == 4);
  RG_CHECK(!strcmp(rg_weights_meta_str(w, "k"), "v"));
  const rg_tensor_t *f = rg_weights_find(w, "f");
  RG_REQUIRE(f);
  RG_CHECK((uintptr_t)f->data % 4 == 0);
  float got[4];
  RG_CHECK_OK(rg_tensor_read_f32(f, 0, 4, got));
  RG_CHECK(!memcmp(got, v, 16));
  RG_CHECK_ERR(rg_tensor_read_f32(f, 2, 3, got), "elements [2, +3) are outside its 4");
  int64_t sh[1] = {1};
  RG_CHECK_ERR(rg_weights_expect(w, "i", 1, sh, NULL),
               "tensor 'i': dtype i32 where a float or Q8_0 weight is expected");
  const rg_tensor_t *e = rg_weights_find(w, "e");
  RG_CHECK(e && e->nbytes == 0 && e->shape[0] == 0 && e->shape[1] == 3);
  rg_arch_t *a = NULL;
  RG_CHECK_ERR(rg_weights_arch(w, &a), "no config.json beside the weights");
  const char *const *tok;
  const int32_t *types;
  const char *const *merges;
  const char *pre;
  size_t nt, nm;
  int32_t bos, eos;
  RG_CHECK_ERR(rg_weights_gguf_vocab(w, &tok, &types, &nt, &merges, &nm, &pre, &bos, &eos),
               "not a GGUF file");
  rg_weights_close(w);
}

// Every prefix of a valid file fails cleanly. The prefixes live in a memfd
// (no disk traffic), opened through /proc/self/fd.
static void check_truncations(rg_test_ctx_t *t, const char *src, size_t stride) {
  size_t len = 0;
  uint8_t *bytes = slurp(src, &len);
  RG_REQUIRE(bytes);
  int fd = memfd_create("cut", 0);
  RG_REQUIRE(fd >= 0);
  char path[64];
  snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
  int failures = 0, tries = 0;
  rg__weights_use_read = 1;
  for (size_t n = 0; n < len; n += n < 4096 ? 1 + n / 64 : stride, tries++) {
    if (ftruncate(fd, 0) != 0 || pwrite(fd, bytes, n, 0) != (ssize_t)n) break;
    rg_status_t s = try_open(path);
    if (!s)
      failures++;
    else if (!strstr(rg_status_message(s), path))
      failures += 1000;
    rg_status_free(s);
  }
  rg__weights_use_read = 0;
  close(fd);
  RG_CHECK(tries > 300);
  RG_CHECK(failures == 0);
  free(bytes);
}

RG_TEST(weights_truncated_files_never_open) {
  const char *dir = fixture(t, "moe");
  RG_REQUIRE(dir);
  char *st = path_in(dir, "model.safetensors"), *gg = path_in(dir, "model.gguf");
  check_truncations(t, st, 9973);
  check_truncations(t, gg, 9973);
  free(st);
  free(gg);
}

// ----- hostile GGUF --------------------------------------------------------------------

typedef struct {
  uint8_t *p;
  size_t n, cap;
} gb_t;

static void gb_put(gb_t *b, const void *s, size_t n) {
  if (b->n + n > b->cap) {
    b->cap = (b->n + n) * 2 + 64;
    b->p = realloc(b->p, b->cap);
    if (!b->p) abort();
  }
  memcpy(b->p + b->n, s, n);
  b->n += n;
}
static void gb_u32(gb_t *b, uint32_t v) {
  gb_put(b, &v, 4);
}
static void gb_u64(gb_t *b, uint64_t v) {
  gb_put(b, &v, 8);
}
static void gb_str(gb_t *b, const char *s) {
  gb_u64(b, strlen(s));
  gb_put(b, s, strlen(s));
}
static void gb_head(gb_t *b, uint64_t n_t, uint64_t n_kv) {
  gb_put(b, "GGUF", 4);
  gb_u32(b, 3);
  gb_u64(b, n_t);
  gb_u64(b, n_kv);
}
static void gb_kv_str(gb_t *b, const char *k, const char *v) {
  gb_str(b, k);
  gb_u32(b, 8);
  gb_str(b, v);
}
static void gb_kv_u32(gb_t *b, const char *k, uint32_t v) {
  gb_str(b, k);
  gb_u32(b, 4);
  gb_u32(b, v);
}
static void gb_info(gb_t *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type,
                    uint64_t off) {
  gb_str(b, name);
  gb_u32(b, n_dims);
  for (uint32_t i = 0; i < n_dims; i++) gb_u64(b, ne[i]);
  gb_u32(b, type);
  gb_u64(b, off);
}
static void gb_pad(gb_t *b) {
  static const uint8_t z[32] = {0};
  gb_put(b, z, (32 - b->n % 32) % 32);
}
static const char *gb_save(rg_test_ctx_t *t, gb_t *b, const char *name) {
  static char paths[4][512];
  static int next;
  char *path = paths[next++ % 4];
  snprintf(path, 512, "%s/%s", rg_test_tmpdir(t), name);
  if (!spill(path, b->p, b->n)) abort();
  free(b->p);
  memset(b, 0, sizeof(*b));
  return path;
}

// A file with one F32 tensor "w" of ne (4, 2) at offset off, and extra data.
static const char *gguf_one(rg_test_ctx_t *t, const char *name, const char *arch, uint32_t n_dims,
                            const uint64_t *ne, uint32_t type, uint64_t off, size_t data) {
  gb_t b = {0};
  gb_head(&b, 1, 1);
  gb_kv_str(&b, "general.architecture", arch);
  gb_info(&b, "w", n_dims, ne, type, off);
  gb_pad(&b);
  uint8_t z[256] = {0};
  gb_put(&b, z, data);
  return gb_save(t, &b, name);
}

RG_TEST(weights_gguf_hostile_headers_get_clear_errors) {
  gb_t b = {0};
  const char *p;
  gb_put(&b, "GGUX", 4);
  gb_u32(&b, 3);
  p = gb_save(t, &b, "magic.gguf");
  CHECK_OPEN_ERR(p, "not a GGUF file (bad magic");
  gb_put(&b, "GGUF", 4);
  gb_u32(&b, 1);
  gb_u64(&b, 0);
  gb_u64(&b, 0);
  p = gb_save(t, &b, "v1.gguf");
  CHECK_OPEN_ERR(p, "GGUF version 1; ridge reads versions 2 and 3");
  gb_put(&b, "GGUF", 4);
  gb_u32(&b, 3);
  gb_u32(&b, 0);
  p = gb_save(t, &b, "cut.gguf");
  CHECK_OPEN_ERR(p, "the header runs past the end of the file");
  gb_head(&b, 0, 1ull << 60);
  p = gb_save(t, &b, "kvcount.gguf");
  CHECK_OPEN_ERR(p, "kv_count 1152921504606846976 is more than the file can hold");
  gb_head(&b, 1ull << 62, 1);
  gb_kv_str(&b, "general.architecture", "qwen2");
  p = gb_save(t, &b, "tcount.gguf");
  CHECK_OPEN_ERR(p, "tensor_count 4611686018427387904 is more than the file can hold");
  gb_head(&b, 0, 1);
  gb_u64(&b, 1ull << 40);
  gb_put(&b, "general", 7);
  p = gb_save(t, &b, "keylen.gguf");
  CHECK_OPEN_ERR(p, "metadata key #0: string length 1099511627776 runs past the end of the file");
  gb_head(&b, 0, 1);
  gb_str(&b, "general.name");
  gb_u32(&b, 8);
  gb_u64(&b, 1000);
  gb_put(&b, "abc", 3);
  p = gb_save(t, &b, "strlen.gguf");
  CHECK_OPEN_ERR(p, "metadata key 'general.name': string length 1000 runs past the end");
  gb_head(&b, 0, 1);
  gb_str(&b, "tokenizer.ggml.tokens");
  gb_u32(&b, 9);
  gb_u32(&b, 8);
  gb_u64(&b, 1ull << 61);
  p = gb_save(t, &b, "arr.gguf");
  CHECK_OPEN_ERR(p,
                 "metadata key 'tokenizer.ggml.tokens': an array of 2305843009213693952 string "
                 "elements runs past the end of the file");
  gb_head(&b, 0, 1);
  gb_str(&b, "x");
  gb_u32(&b, 9);
  gb_u32(&b, 4);
  gb_u64(&b, 3);
  gb_u32(&b, 1);
  p = gb_save(t, &b, "arr2.gguf");
  CHECK_OPEN_ERR(p, "metadata key 'x': an array of 3 u32 elements runs past the end");
  gb_head(&b, 0, 1);
  gb_str(&b, "x");
  gb_u32(&b, 77);
  gb_u64(&b, 0);
  p = gb_save(t, &b, "type.gguf");
  CHECK_OPEN_ERR(p, "metadata key 'x' has unknown value type 77");
  gb_head(&b, 0, 2);
  gb_kv_str(&b, "general.architecture", "qwen2");
  gb_kv_str(&b, "general.architecture", "llama");
  p = gb_save(t, &b, "dupkey.gguf");
  CHECK_OPEN_ERR(p, "metadata key 'general.architecture' appears twice");
  gb_head(&b, 0, 1);
  gb_kv_u32(&b, "general.alignment", 32);
  p = gb_save(t, &b, "noarch.gguf");
  CHECK_OPEN_ERR(p, "metadata key 'general.architecture' is missing");
  gb_head(&b, 0, 2);
  gb_kv_str(&b, "general.architecture", "qwen2");
  gb_kv_u32(&b, "general.alignment", 24);
  p = gb_save(t, &b, "align.gguf");
  CHECK_OPEN_ERR(p, "general.alignment = 24 is not a power of two");
  gb_head(&b, 0, 1);
  gb_kv_u32(&b, "general.architecture", 3);
  p = gb_save(t, &b, "archtype.gguf");
  CHECK_OPEN_ERR(p, "metadata key 'general.architecture' is a u32; expected a string");

  const uint64_t ne[5] = {4, 2, 1, 1, 1};
  p = gguf_one(t, "dims.gguf", "qwen2", 5, ne, 0, 0, 32);
  CHECK_OPEN_ERR(p, "tensor 'w': 5 dims; ridge reads at most 4");
  p = gguf_one(t, "q5k.gguf", "qwen2", 2, ne, 13, 0, 32);
  CHECK_OPEN_ERR(p, "tensor 'w': ggml type 13 (Q5_K) is not supported");
  p = gguf_one(t, "q4k.gguf", "qwen2", 2, ne, 12, 0, 32);
  CHECK_OPEN_ERR(p, "tensor 'w': Q4_K rows of 4 elements are not whole blocks of 256");
  p = gguf_one(t, "offset.gguf", "qwen2", 2, ne, 0, 8, 64);
  CHECK_OPEN_ERR(p, "tensor 'w': offset 8 is not a multiple of general.alignment = 32");
  p = gguf_one(t, "pastend.gguf", "qwen2", 2, ne, 0, 32, 40);
  CHECK_OPEN_ERR(p,
                 "tensor 'w': 32 bytes at offset 32 run past the end of the file (the data "
                 "section holds 40)");
  p = gguf_one(t, "nodata.gguf", "qwen2", 2, ne, 0, 0, 0);
  CHECK_OPEN_ERR(p, "tensor 'w': 32 bytes at offset 0 run past the end of the file");
  const uint64_t big[3] = {1ull << 32, 1ull << 32, 1ull << 32};
  p = gguf_one(t, "big.gguf", "qwen2", 3, big, 0, 0, 32);
  CHECK_OPEN_ERR(p, "tensor 'w': the dims hold more elements than fit in 64 bits");
  const uint64_t neg[2] = {UINT64_MAX, 1};
  p = gguf_one(t, "neg.gguf", "qwen2", 2, neg, 0, 0, 32);
  CHECK_OPEN_ERR(p, "tensor 'w': the dims hold more elements than fit in 64 bits");
  const uint64_t q8[2] = {33, 1};
  p = gguf_one(t, "q8.gguf", "qwen2", 2, q8, 8, 0, 64);
  CHECK_OPEN_ERR(p, "tensor 'w': Q8_0 rows of 33 elements are not whole blocks of 32");
  const uint64_t huge[1] = {1ull << 62};
  p = gguf_one(t, "hugebytes.gguf", "qwen2", 1, huge, 0, 0, 32);
  CHECK_OPEN_ERR(p, "tensor 'w': the dims hold more bytes than fit in 64 bits");

  // Two tensors: overlapping, and the same name twice.
  gb_head(&b, 2, 1);
  gb_kv_str(&b, "general.architecture", "qwen2");
  gb_info(&b, "a", 2, ne, 0, 0);
  gb_info(&b, "b", 2, ne, 0, 0);
  gb_pad(&b);
  uint8_t z[128] = {0};
  gb_put(&b, z, 64);
  p = gb_save(t, &b, "overlap.gguf");
  CHECK_OPEN_ERR(p, "its data overlaps tensor");
  gb_head(&b, 2, 1);
  gb_kv_str(&b, "general.architecture", "qwen2");
  gb_info(&b, "a", 2, ne, 0, 0);
  gb_info(&b, "a", 2, ne, 0, 32);
  gb_pad(&b);
  gb_put(&b, z, 64);
  p = gb_save(t, &b, "dupname.gguf");
  CHECK_OPEN_ERR(p, "tensor 'a' appears twice");
  // Mapped names collide too: token_embd.weight is model.embed_tokens.weight.
  gb_head(&b, 2, 1);
  gb_kv_str(&b, "general.architecture", "qwen2");
  gb_info(&b, "token_embd.weight", 2, ne, 0, 0);
  gb_info(&b, "model.embed_tokens.weight", 2, ne, 0, 32);
  gb_pad(&b);
  gb_put(&b, z, 64);
  p = gb_save(t, &b, "dupmapped.gguf");
  CHECK_OPEN_ERR(p, "tensor 'model.embed_tokens.weight' appears twice");

  // Experts must be 3-D; llama's Q rows must split into its heads.
  gb_head(&b, 1, 1);
  gb_kv_str(&b, "general.architecture", "qwen3moe");
  gb_info(&b, "blk.0.ffn_up_exps.weight", 2, ne, 0, 0);
  gb_pad(&b);
  gb_put(&b, z, 32);
  p = gb_save(t, &b, "exps.gguf");
  CHECK_OPEN_ERR(p,
                 "tensor 'blk.0.ffn_up_exps.weight': expected 3 dims (experts, rows, cols), got 2");
  const uint64_t many[3] = {0, 0, 1ull << 40};
  gb_head(&b, 1, 1);
  gb_kv_str(&b, "general.architecture", "qwen3moe");
  gb_info(&b, "blk.0.ffn_up_exps.weight", 3, many, 0, 0);
  gb_pad(&b);
  p = gb_save(t, &b, "experts.gguf");
  CHECK_OPEN_ERR(p,
                 "tensor 'blk.0.ffn_up_exps.weight': 1099511627776 experts; ridge reads at "
                 "most 65536");
  const uint64_t qne[2] = {4, 6};
  gb_head(&b, 1, 2);
  gb_kv_str(&b, "general.architecture", "llama");
  gb_kv_u32(&b, "llama.attention.head_count", 4);
  gb_info(&b, "blk.0.attn_q.weight", 2, qne, 0, 0);
  gb_pad(&b);
  gb_put(&b, z, 96);
  p = gb_save(t, &b, "heads.gguf");
  CHECK_OPEN_ERR(p,
                 "tensor 'model.layers.0.self_attn.q_proj.weight': 6 rows do not split into 4 "
                 "heads of an even size");
  gb_head(&b, 1, 1);
  gb_kv_str(&b, "general.architecture", "llama");
  gb_info(&b, "blk.0.attn_k.weight", 2, qne, 0, 0);
  gb_pad(&b);
  gb_put(&b, z, 96);
  p = gb_save(t, &b, "noheads.gguf");
  CHECK_OPEN_ERR(p,
                 "tensor 'blk.0.attn_k.weight': metadata key 'llama.attention.head_count' is "
                 "missing");

  // Tokenizer arrays that disagree.
  gb_head(&b, 0, 4);
  gb_kv_str(&b, "general.architecture", "qwen2");
  gb_str(&b, "tokenizer.ggml.tokens");
  gb_u32(&b, 9);
  gb_u32(&b, 8);
  gb_u64(&b, 2);
  gb_str(&b, "a");
  gb_str(&b, "b");
  gb_str(&b, "tokenizer.ggml.token_type");
  gb_u32(&b, 9);
  gb_u32(&b, 5);
  gb_u64(&b, 1);
  gb_u32(&b, 1);
  gb_kv_u32(&b, "tokenizer.ggml.bos_token_id", 1);
  p = gb_save(t, &b, "types.gguf");
  CHECK_OPEN_ERR(p, "tokenizer.ggml.token_type has 1 entries for 2 tokens");
  gb_head(&b, 0, 3);
  gb_kv_str(&b, "general.architecture", "qwen2");
  gb_str(&b, "tokenizer.ggml.tokens");
  gb_u32(&b, 9);
  gb_u32(&b, 8);
  gb_u64(&b, 2);
  gb_str(&b, "a");
  gb_str(&b, "b");
  gb_kv_u32(&b, "tokenizer.ggml.eos_token_id", 2);
  p = gb_save(t, &b, "eos.gguf");
  CHECK_OPEN_ERR(p, "tokenizer.ggml.eos_token_id = 2 is not a token (the list holds 2)");
}

RG_TEST(weights_gguf_metadata_problems_surface_in_arch) {
  // Opens fine (the tensors are sound) but the architecture is incomplete.
  const uint64_t ne[2] = {4, 2};
  const char *p = gguf_one(t, "phi.gguf", "phi3", 2, ne, 0, 0, 32);
  rg__weights_use_read = 1;
  rg_weights_t *w = open_ok(t, p);
  rg__weights_use_read = 0;
  rg_arch_t *a = NULL;
  if (w) {
    RG_CHECK(rg_weights_find(w, "w") != NULL);
    RG_CHECK_ERR(rg_weights_arch(w, &a), "general.architecture 'phi3' is not supported");
    const char *const *tok;
    const int32_t *types;
    const char *const *merges;
    const char *pre;
    size_t nt, nm;
    int32_t bos, eos;
    RG_CHECK_ERR(rg_weights_gguf_vocab(w, &tok, &types, &nt, &merges, &nm, &pre, &bos, &eos),
                 "no tokenizer.ggml.tokens in the file");
  }
  rg_weights_close(w);
  p = gguf_one(t, "qw.gguf", "qwen2", 2, ne, 0, 0, 32);
  w = open_ok(t, p);
  if (w) {
    RG_CHECK_ERR(rg_weights_arch(w, &a), "metadata key 'qwen2.embedding_length' is missing");
    rg_weights_hparams_t hp;
    RG_CHECK_ERR(rg_weights_hparams(w, &hp), "qwen2.embedding_length");
  }
  rg_weights_close(w);
  // Values that fail validation name the file.
  gb_t b = {0};
  gb_head(&b, 0, 7);
  gb_kv_str(&b, "general.architecture", "qwen2");
  gb_kv_u32(&b, "qwen2.embedding_length", 64);
  gb_kv_u32(&b, "qwen2.block_count", 2);
  gb_kv_u32(&b, "qwen2.attention.head_count", 4);
  gb_kv_u32(&b, "qwen2.attention.head_count_kv", 3);
  gb_kv_u32(&b, "qwen2.feed_forward_length", 128);
  gb_kv_u32(&b, "qwen2.vocab_size", 100);
  p = gb_save(t, &b, "kv3.gguf");
  w = open_ok(t, p);
  if (w) RG_CHECK_ERR(rg_weights_arch(w, &a), "num_key_value_heads = 3 does not divide");
  rg_weights_close(w);
  // llama3 rope scaling without its parameters.
  gb_head(&b, 0, 8);
  gb_kv_str(&b, "general.architecture", "llama");
  gb_kv_u32(&b, "llama.embedding_length", 64);
  gb_kv_u32(&b, "llama.block_count", 2);
  gb_kv_u32(&b, "llama.attention.head_count", 4);
  gb_kv_u32(&b, "llama.feed_forward_length", 128);
  gb_kv_u32(&b, "llama.vocab_size", 100);
  gb_kv_str(&b, "ridge.rope_scaling.type", "llama3");
  gb_kv_u32(&b, "ridge.rope_scaling.factor", 8);
  p = gb_save(t, &b, "rope.gguf");
  w = open_ok(t, p);
  rg_weights_hparams_t hp;
  if (w) RG_CHECK_ERR(rg_weights_hparams(w, &hp), "llama3 rope scaling needs 0 < low_freq_factor");
  rg_weights_close(w);
  rg_arch_destroy(a);
}

// ----- writers refuse what they cannot write ------------------------------------------

RG_TEST(weights_writers_check_their_input) {
  const char *tmp = rg_test_tmpdir(t);
  char *p = path_in(tmp, "x.safetensors");
  float data[4] = {0};
  rg_tensor_t q = {.name = "q", .type = RG_Q8_0, .n_dims = 1, .shape = {32}, .data = data};
  RG_CHECK_ERR(rg_safetensors_write(p, &q, 1, NULL, 0, NULL), "safetensors has no dtype q8_0");
  rg_tensor_t bad = {.name = "b", .type = RG_F32, .n_dims = 1, .shape = {-1}, .data = data};
  RG_CHECK_ERR(rg_safetensors_write(p, &bad, 1, NULL, 0, NULL), "negative dim -1");
  rg_tensor_t nodata = {.name = "n", .type = RG_F32, .n_dims = 1, .shape = {4}};
  RG_CHECK_ERR(rg_safetensors_write(p, &nodata, 1, NULL, 0, NULL), "has no data and no fill");
  struct stat st;
  RG_CHECK(stat(p, &st) != 0);  // nothing left behind
  char *partial = path_in(tmp, "x.safetensors.partial");
  RG_CHECK(stat(partial, &st) != 0);
  rg_tensor_t ok = {.name = "w\"\\", .type = RG_F32, .n_dims = 1, .shape = {4}, .data = data};
  const char *meta[2] = {"note", "quote \" and\nnewline"};
  RG_CHECK_OK(rg_safetensors_write(p, &ok, 1, meta, 1, NULL));
  rg_weights_t *w = open_ok(t, p);
  if (w) {
    RG_CHECK(rg_weights_find(w, "w\"\\") != NULL);
    RG_CHECK(!strcmp(rg_weights_meta_str(w, "note"), "quote \" and\nnewline"));
  }
  rg_weights_close(w);

  rg_tensor_t twice[2] = {ok, ok};
  RG_CHECK_ERR(rg_safetensors_write(p, twice, 2, NULL, 0, NULL), "tensor 'w\"\\' is given twice");
  rg_arch_t a = {.family = RG_FAMILY_GPT_OSS};
  rg_weights_hparams_t hp = {.rope_theta = 10000};
  rg_gguf_info_t gi = {.arch = &a, .hp = &hp, .matrix_type = RG_DTYPE_COUNT};
  char *g = path_in(tmp, "x.gguf");
  RG_CHECK_ERR(rg_gguf_write(g, &gi, &ok, 1, NULL), "family 'gpt_oss' has no GGUF writer");
  a.family = RG_FAMILY_QWEN2;
  RG_CHECK_ERR(rg_gguf_write(g, &gi, &ok, 1, NULL), "tensor 'w\"\\' has no GGUF name");
  rg_tensor_t emb[2] = {{.name = "model.embed_tokens.weight",
                         .type = RG_F32,
                         .n_dims = 1,
                         .shape = {4},
                         .data = data}};
  emb[1] = emb[0];
  RG_CHECK_ERR(rg_gguf_write(g, &gi, emb, 2, NULL), "tensor 'token_embd.weight' is given twice");
  gi.matrix_type = RG_BF16;
  RG_CHECK_ERR(rg_gguf_write(g, &gi, &ok, 1, NULL), "quantizes only to Q8_0");
  free(g);
  free(partial);
  free(p);
}

// ----- conversions --------------------------------------------------------------------

RG_TEST(weights_half_conversions_round_to_nearest_even) {
  RG_CHECK(rg_f32_to_f16(1.0f) == 0x3c00);
  RG_CHECK(rg_f32_to_f16(-2.0f) == 0xc000);
  RG_CHECK(rg_f32_to_f16(65504.0f) == 0x7bff);
  RG_CHECK(rg_f32_to_f16(70000.0f) == 0x7c00);
  RG_CHECK(rg_f32_to_f16(0x1p-24f) == 0x0001);
  RG_CHECK(rg_f32_to_f16(1.0f + 0x1p-11f) == 0x3c00);  // tie to even
  RG_CHECK(rg_f32_to_f16(1.0f + 3 * 0x1p-11f) == 0x3c02);
  // Every half converts to float and back to itself.
  int bad = 0;
  for (uint32_t h = 0; h < 0x10000; h++) {
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue;  // NaN payloads
    bad += rg_f32_to_f16(rg_f16_to_f32((uint16_t)h)) != h;
    bad +=
        rg_f32_to_bf16(rg_bf16_to_f32((uint16_t)h)) != h && !((h & 0x7f80) == 0x7f80 && (h & 0x7f));
  }
  RG_CHECK(bad == 0);
  RG_CHECK(rg_f32_to_bf16(1.0f + 0x1p-8f) == 0x3f80);  // tie to even
  RG_CHECK(rg_f32_to_bf16(1.0f + 3 * 0x1p-8f) == 0x3f82);
}

// ----- fuzz corpora -----------------------------------------------------------------------

static int replay(rg_test_ctx_t *t, const char *dir, int (*fn)(const uint8_t *, size_t)) {
  char cmd[600];
  snprintf(cmd, sizeof(cmd), "ls '%s'", dir);
  FILE *ls = popen(cmd, "r");
  if (!ls) return 0;
  char name[256];
  int n = 0;
  while (fgets(name, sizeof(name), ls)) {
    name[strcspn(name, "\n")] = 0;
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    size_t len = 0;
    uint8_t *p = slurp(path, &len);
    if (!p) continue;
    fn(p, len);
    free(p);
    n++;
  }
  pclose(ls);
  return n;
}

RG_TEST(weights_fuzz_corpora_replay_cleanly) {
  RG_CHECK(replay(t, RIDGE_SOURCE_DIR "/tests/fuzz/corpus/safetensors", rg_fuzz_safetensors_one) >=
           2);
  RG_CHECK(replay(t, RIDGE_SOURCE_DIR "/tests/fuzz/corpus/gguf", rg_fuzz_gguf_one) >= 3);
  replay(t, RIDGE_SOURCE_DIR "/tests/fuzz/regressions", rg_fuzz_safetensors_one);
  replay(t, RIDGE_SOURCE_DIR "/tests/fuzz/regressions", rg_fuzz_gguf_one);
  rg__weights_use_read = 0;
}
