// Tests of `ridge testmodel` and the model it writes: the files and their
// flags, determinism, the tokenizer in both forms, and a plain-loops forward
// pass through the tiny models that shows activations stay in range and that
// the safetensors and GGUF copies compute the same logits.
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "graphs/tokenizer.h"
#include "graphs/weights.h"
#include "tests/test.h"

static char *join(const char *dir, const char *name) {
  size_t len = strlen(dir) + strlen(name) + 2;
  char *p = malloc(len);
  if (!p) abort();
  snprintf(p, len, "%s/%s", dir, name);
  return p;
}

static int exists(const char *dir, const char *name) {
  char *p = join(dir, name);
  struct stat st;
  int ok = stat(p, &st) == 0 && st.st_size > 0;
  free(p);
  return ok;
}

// No file in dir still carries a temporary name.
static int no_partials(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  struct dirent *e;
  int clean = 1;
  while ((e = readdir(d))) clean &= strstr(e->d_name, ".partial") == NULL;
  closedir(d);
  return clean;
}

static int same_file(const char *a, const char *b) {
  FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
  int same = fa && fb;
  while (same) {
    int ca = fgetc(fa), cb = fgetc(fb);
    if (ca != cb) same = 0;
    if (ca == EOF || cb == EOF) break;
  }
  if (fa) fclose(fa);
  if (fb) fclose(fb);
  return same;
}

RG_TEST(testmodel_cli_writes_all_files_and_refuses_to_overwrite) {
  char *out = NULL;
  RG_CHECK(rg_test_run_ridge(t, "testmodel --out m1 --seed 5", &out) == 0);
  RG_CHECK_CONTAINS(out, "wrote m1: llama tiny");
  RG_CHECK_CONTAINS(out, "vocab 576");
  RG_CHECK_CONTAINS(out, "model.gguf");
  free(out);
  char *dir = join(rg_test_tmpdir(t), "m1");
  static const char *const files[] = {"config.json", "tokenizer.json", "model.safetensors",
                                      "model.gguf"};
  for (int i = 0; i < 4; i++) RG_CHECK(exists(dir, files[i]));
  RG_CHECK(no_partials(dir));
  rg_arch_t *a = NULL;
  RG_CHECK_OK(rg_model_load(dir, NULL, &a));
  if (a) {
    RG_CHECK(a->family == RG_FAMILY_LLAMA && a->d_model == 64 && a->n_layers == 2);
    RG_CHECK(a->n_heads == 4 && a->n_kv_heads == 2 && a->head_dim == 16 && a->d_ff == 128);
    RG_CHECK(a->vocab == 576 && a->weight_dtype == RG_BF16);
  }
  rg_arch_destroy(a);

  RG_CHECK(rg_test_run_ridge(t, "testmodel --out m1", &out) == 2);
  RG_CHECK_CONTAINS(out, "ridge testmodel: m1 is not empty");
  RG_CHECK_CONTAINS(out, "without --force");
  free(out);
  // --force rewrites in place; the same seed gives the same bytes.
  char *st = join(dir, "model.safetensors");
  char *copy = join(rg_test_tmpdir(t), "first.safetensors");
  RG_CHECK(rename(st, copy) == 0);
  RG_CHECK(rg_test_run_ridge(t, "testmodel --out m1 --seed 5 --force", &out) == 0);
  free(out);
  RG_CHECK(same_file(st, copy));
  RG_CHECK(rg_test_run_ridge(t, "testmodel --out m1 --seed 6 --force --json", &out) == 0);
  RG_CHECK_CONTAINS(out, "\"seed\":\t6");
  RG_CHECK_CONTAINS(out, "\"gguf_type\":\t\"bf16\"");
  free(out);
  RG_CHECK(!same_file(st, copy));
  free(copy);
  free(st);
  free(dir);
}

RG_TEST(testmodel_cli_rejects_bad_flags_with_exit_2) {
  static const struct {
    const char *args, *want;
  } cases[] = {
      {"testmodel", "give --out DIR"},
      {"testmodel --out x --arch lama", "--arch: unknown value 'lama'; did you mean llama?"},
      {"testmodel --out x --size 7b", "--size: unknown value '7b'"},
      {"testmodel --out x --gguf-type q4_0", "--gguf-type: unknown value 'q4_0'"},
      {"testmodel --out x --seed -3", "--seed: '-3' is not a non-negative integer"},
      {"testmodel --out x --seeds 1", "unknown option '--seeds'; did you mean --seed?"},
      {"testmodel --out x extra", "unexpected argument 'extra'"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    char *out = NULL;
    int rc = rg_test_run_ridge(t, cases[i].args, &out);
    if (rc != 2) rg_test_fail(t, __FILE__, __LINE__, "%s: exit %d", cases[i].args, rc);
    RG_CHECK_CONTAINS(out, cases[i].want);
    free(out);
  }
  char *out = NULL;
  RG_CHECK(rg_test_run_ridge(t, "testmodel --help", &out) == 0);
  RG_CHECK_CONTAINS(out, "usage: ridge testmodel --out DIR");
  free(out);
  RG_CHECK(rg_test_run_ridge(t, "--help", &out) == 0);
  RG_CHECK_CONTAINS(out, "  testmodel  write a random-weight model");
  free(out);
  rg_test_write(t, "afile", "x");
  RG_CHECK(rg_test_run_ridge(t, "testmodel --out afile", &out) == 2);
  RG_CHECK_CONTAINS(out, "afile exists and is not a directory");
  free(out);
}

// ----- the tokenizer in both forms ------------------------------------------------------

RG_TEST(testmodel_tokenizer_json_and_gguf_vocab_encode_alike) {
  const char *dir = rg_test_tmpdir(t);
  rg_testmodel_opts_t o = {.arch = RG_TESTMODEL_MOE,
                           .seed = 1,
                           .dtype = RG_F16,
                           .gguf_type = RG_DTYPE_COUNT,
                           .force = 1};
  rg_testmodel_info_t info;
  RG_REQUIRE_OK(rg_testmodel_write(dir, &o, &info));
  RG_CHECK(info.vocab == 576 && info.n_tokens == 517);
  RG_CHECK(info.params > 150e3 && info.params < 300e3);
  char *tj = join(dir, "tokenizer.json"), *gg = join(dir, "model.gguf");
  rg_tokenizer_t *a = NULL, *b = NULL;
  RG_CHECK_OK(rg_tokenizer_load_hf(tj, &a));
  rg_weights_t *w = NULL;
  RG_CHECK_OK(rg_weights_open(gg, &w));
  if (w) {
    const char *const *tokens, *const *merges;
    const int32_t *types;
    const char *pre;
    size_t nt, nm;
    int32_t bos, eos;
    RG_CHECK_OK(rg_weights_gguf_vocab(w, &tokens, &types, &nt, &merges, &nm, &pre, &bos, &eos));
    RG_CHECK(nt == 576 && nm == 256 && types[575] == RG_TOKEN_UNUSED);
    RG_CHECK(!strcmp(tokens[575], "[PAD575]"));
    RG_CHECK_OK(rg_tokenizer_from_vocab(tokens, types, nt, merges, nm, pre, bos, eos, &b));
    const rg_tensor_t *x =
        rg_weights_find(w, "model.layers.1.block_sparse_moe.experts.3.w2.weight");
    RG_CHECK(x && x->type == RG_F16 && x->shape[0] == 64 && x->shape[1] == 64);
  }
  if (a && b) {
    RG_CHECK(rg_tokenizer_bos(a) == rg_tokenizer_bos(b));
    RG_CHECK(rg_tokenizer_eos(a) == rg_tokenizer_eos(b));
    const char *text = "<|begin_of_text|>The quick brown fox jumps over 1234 lazy dogs.\n";
    int32_t *ia = NULL, *ib = NULL;
    size_t na = 0, nb = 0;
    RG_CHECK_OK(rg_tokenizer_encode(a, text, strlen(text), 0, 1, &ia, &na));
    RG_CHECK_OK(rg_tokenizer_encode(b, text, strlen(text), 0, 1, &ib, &nb));
    RG_CHECK(na == nb && na > 5 && !memcmp(ia, ib, na * sizeof(int32_t)));
    free(ia);
    free(ib);
  }
  rg_tokenizer_destroy(a);
  rg_tokenizer_destroy(b);
  rg_weights_close(w);
  free(tj);
  free(gg);
}

// ----- a forward pass in plain loops -----------------------------------------------------

typedef struct {
  const rg_weights_t *w;
  rg_arch_t *a;
  rg_weights_hparams_t hp;
  double inv_freq[64];
} fwd_t;

static float *weights_f32(rg_test_ctx_t *t, const fwd_t *m, const char *name, int64_t *n_out) {
  const rg_tensor_t *x = rg_weights_find(m->w, name);
  if (!x) {
    rg_test_fail(t, __FILE__, __LINE__, "missing %s", name);
    return NULL;
  }
  int64_t n = rg_tensor_elems(x);
  float *f = malloc((size_t)n * sizeof(float));
  if (!f) abort();
  rg_status_t s = rg_tensor_read_f32(x, 0, n, f);
  if (s) {
    rg_test_fail(t, __FILE__, __LINE__, "%s", rg_status_message(s));
    rg_status_free(s);
  }
  if (n_out) *n_out = n;
  return f;
}

static void matvec(float *y, const float *W, const float *x, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; r++) {
    double s = 0;
    for (int64_t c = 0; c < cols; c++) s += (double)W[r * cols + c] * x[c];
    y[r] = (float)s;
  }
}

static void rmsnorm(float *y, const float *x, const float *g, int64_t d, double eps) {
  double ss = 0;
  for (int64_t i = 0; i < d; i++) ss += (double)x[i] * x[i];
  float k = (float)(1.0 / sqrt(ss / (double)d + eps));
  for (int64_t i = 0; i < d; i++) y[i] = x[i] * k * g[i];
}

static double rms(const float *x, int64_t d) {
  double ss = 0;
  for (int64_t i = 0; i < d; i++) ss += (double)x[i] * x[i];
  return sqrt(ss / (double)d);
}

static float silu(float x) {
  return x / (1.0f + expf(-x));
}

// Rotate-half RoPE over each head of v (n_heads x hd) at position pos.
static void rope(const fwd_t *m, float *v, int64_t n_heads, int64_t hd, int64_t pos) {
  for (int64_t h = 0; h < n_heads; h++) {
    float *x = v + h * hd;
    for (int64_t i = 0; i < hd / 2; i++) {
      double a = (double)pos * m->inv_freq[i], c = cos(a), s = sin(a);
      float x1 = x[i], x2 = x[i + hd / 2];
      x[i] = (float)(x1 * c - x2 * s);
      x[i + hd / 2] = (float)(x2 * c + x1 * s);
    }
  }
}

// Runs tokens through the model; logits of the last token into `logits`
// (vocab floats); the residual stream's RMS after each layer into layer_rms.
static void forward(rg_test_ctx_t *t, fwd_t *m, const int32_t *tokens, int64_t T, float *logits,
                    double *layer_rms) {
  const rg_arch_t *a = m->a;
  const int64_t d = a->d_model, hd = a->head_dim, nh = a->n_heads, nkv = a->n_kv_heads;
  const int64_t q_dim = nh * hd, kv_dim = nkv * hd;
  const double eps = m->hp.rms_norm_eps;
  float *x = calloc((size_t)(T * d), sizeof(float)), *h = malloc((size_t)d * sizeof(float));
  float *kc = malloc((size_t)(T * kv_dim) * sizeof(float));
  float *vc = malloc((size_t)(T * kv_dim) * sizeof(float));
  float *q = malloc((size_t)q_dim * sizeof(float)), *att = malloc((size_t)q_dim * sizeof(float));
  float *o = malloc((size_t)d * sizeof(float)), *sc = malloc((size_t)T * sizeof(float));
  int64_t ff = a->n_experts ? a->d_ff_expert : a->d_ff;
  float *g = malloc((size_t)ff * sizeof(float)), *u = malloc((size_t)ff * sizeof(float));
  float *acc = malloc((size_t)d * sizeof(float));
  float *emb = weights_f32(t, m, "model.embed_tokens.weight", NULL);
  if (!emb) return;
  for (int64_t p = 0; p < T; p++) memcpy(x + p * d, emb + (int64_t)tokens[p] * d, (size_t)d * 4);
  char n[160];
#define W(...) (snprintf(n, sizeof(n), __VA_ARGS__), weights_f32(t, m, n, NULL))
  for (int64_t l = 0; l < a->n_layers; l++) {
    long long L = (long long)l;
    float *ln1 = W("model.layers.%lld.input_layernorm.weight", L);
    float *wq = W("model.layers.%lld.self_attn.q_proj.weight", L);
    float *wk = W("model.layers.%lld.self_attn.k_proj.weight", L);
    float *wv = W("model.layers.%lld.self_attn.v_proj.weight", L);
    float *wo = W("model.layers.%lld.self_attn.o_proj.weight", L);
    float *ln2 = W("model.layers.%lld.post_attention_layernorm.weight", L);
    for (int64_t p = 0; p < T; p++) {
      float *xp = x + p * d;
      rmsnorm(h, xp, ln1, d, eps);
      matvec(q, wq, h, q_dim, d);
      matvec(kc + p * kv_dim, wk, h, kv_dim, d);
      matvec(vc + p * kv_dim, wv, h, kv_dim, d);
      rope(m, q, nh, hd, p);
      rope(m, kc + p * kv_dim, nkv, hd, p);
      for (int64_t hh = 0; hh < nh; hh++) {
        int64_t kvh = hh / (nh / nkv);
        double mx = -1e30, sum = 0;
        for (int64_t s = 0; s <= p; s++) {
          double dot = 0;
          for (int64_t i = 0; i < hd; i++)
            dot += (double)q[hh * hd + i] * kc[s * kv_dim + kvh * hd + i];
          sc[s] = (float)(dot / sqrt((double)hd));
          if (sc[s] > mx) mx = sc[s];
        }
        for (int64_t s = 0; s <= p; s++) sum += (sc[s] = (float)exp(sc[s] - mx));
        for (int64_t i = 0; i < hd; i++) {
          double v = 0;
          for (int64_t s = 0; s <= p; s++) v += sc[s] / sum * vc[s * kv_dim + kvh * hd + i];
          att[hh * hd + i] = (float)v;
        }
      }
      matvec(o, wo, att, d, q_dim);
      for (int64_t i = 0; i < d; i++) xp[i] += o[i];
      rmsnorm(h, xp, ln2, d, eps);
      memset(acc, 0, (size_t)d * sizeof(float));
      if (a->n_experts) {
        float *router = W("model.layers.%lld.block_sparse_moe.gate.weight", L);
        float logit[16];
        matvec(logit, router, h, a->n_experts, d);
        free(router);
        // Top-2 with the weights renormalised (Mixtral).
        int64_t e1 = 0, e2 = -1;
        for (int64_t e = 1; e < a->n_experts; e++)
          if (logit[e] > logit[e1]) e1 = e;
        for (int64_t e = 0; e < a->n_experts; e++)
          if (e != e1 && (e2 < 0 || logit[e] > logit[e2])) e2 = e;
        double w2 = exp(logit[e2] - logit[e1]), w1 = 1.0 / (1.0 + w2);
        w2 *= w1;
        int64_t picks[2] = {e1, e2};
        double wts[2] = {w1, w2};
        for (int k = 0; k < 2; k++) {
          long long E = (long long)picks[k];
          float *w1m = W("model.layers.%lld.block_sparse_moe.experts.%lld.w1.weight", L, E);
          float *w3m = W("model.layers.%lld.block_sparse_moe.experts.%lld.w3.weight", L, E);
          float *w2m = W("model.layers.%lld.block_sparse_moe.experts.%lld.w2.weight", L, E);
          matvec(g, w1m, h, ff, d);
          matvec(u, w3m, h, ff, d);
          for (int64_t i = 0; i < ff; i++) g[i] = silu(g[i]) * u[i];
          matvec(o, w2m, g, d, ff);
          for (int64_t i = 0; i < d; i++) acc[i] += (float)wts[k] * o[i];
          free(w1m);
          free(w3m);
          free(w2m);
        }
      } else {
        float *wg = W("model.layers.%lld.mlp.gate_proj.weight", L);
        float *wu = W("model.layers.%lld.mlp.up_proj.weight", L);
        float *wd = W("model.layers.%lld.mlp.down_proj.weight", L);
        matvec(g, wg, h, ff, d);
        matvec(u, wu, h, ff, d);
        for (int64_t i = 0; i < ff; i++) g[i] = silu(g[i]) * u[i];
        matvec(acc, wd, g, d, ff);
        free(wg);
        free(wu);
        free(wd);
      }
      for (int64_t i = 0; i < d; i++) xp[i] += acc[i];
    }
    layer_rms[l] = rms(x + (T - 1) * d, d);
    free(ln1);
    free(wq);
    free(wk);
    free(wv);
    free(wo);
    free(ln2);
  }
  float *norm = W("model.norm.weight");
  float *head = W("lm_head.weight");
#undef W
  rmsnorm(h, x + (T - 1) * d, norm, d, eps);
  matvec(logits, head, h, a->vocab, d);
  free(norm);
  free(head);
  free(emb);
  free(x);
  free(h);
  free(kc);
  free(vc);
  free(q);
  free(att);
  free(o);
  free(sc);
  free(g);
  free(u);
  free(acc);
}

static int load_fwd(rg_test_ctx_t *t, const char *path, fwd_t *m) {
  memset(m, 0, sizeof(*m));
  rg_weights_t *w = NULL;
  rg_status_t s = rg_weights_open(path, &w);
  if (!s) s = rg_weights_arch(w, &m->a);
  if (!s) s = rg_weights_hparams(w, &m->hp);
  if (!s) s = rg_rope_inv_freq(&m->hp, m->a->head_dim, m->inv_freq);
  m->w = w;
  if (s) {
    rg_test_fail(t, __FILE__, __LINE__, "%s: %s", path, rg_status_message(s));
    rg_status_free(s);
    return 0;
  }
  return 1;
}

static void free_fwd(fwd_t *m) {
  rg_weights_close((rg_weights_t *)m->w);
  rg_arch_destroy(m->a);
}

static void check_forward(rg_test_ctx_t *t, rg_testmodel_arch_t arch) {
  const char *tmp = rg_test_tmpdir(t);
  char *same = join(tmp, "same"), *q8 = join(tmp, "q8");
  rg_testmodel_opts_t o = {.arch = arch, .seed = 11, .dtype = RG_BF16, .gguf_type = RG_DTYPE_COUNT};
  RG_REQUIRE_OK(rg_testmodel_write(same, &o, NULL));
  o.gguf_type = RG_Q8_0;
  RG_REQUIRE_OK(rg_testmodel_write(q8, &o, NULL));
  char *gg = join(same, "model.gguf"), *gq = join(q8, "model.gguf");
  fwd_t ms, mg, mq;
  int ok = load_fwd(t, same, &ms) & load_fwd(t, gg, &mg) & load_fwd(t, gq, &mq);
  if (ok) {
    const int32_t tokens[6] = {512, 72, 101, 300, 108, 111};  // bos, then a few
    const int64_t V = ms.a->vocab;
    float *l1 = malloc((size_t)V * 4), *l2 = malloc((size_t)V * 4), *l3 = malloc((size_t)V * 4);
    double r1[4], r2[4], r3[4];
    forward(t, &ms, tokens, 6, l1, r1);
    forward(t, &mg, tokens, 6, l2, r2);
    forward(t, &mq, tokens, 6, l3, r3);
    // The same weights give the same logits, bit for bit: the GGUF copy's
    // Q/K rows were put back in Hugging Face order.
    RG_CHECK(!memcmp(l1, l2, (size_t)V * 4));
    // Activations neither vanish nor explode.
    for (int l = 0; l < ms.a->n_layers; l++)
      if (!(r1[l] > 0.3 && r1[l] < 10))
        rg_test_fail(t, __FILE__, __LINE__, "layer %d residual RMS %g", l, r1[l]);
    double lr = rms(l1, V), err = 0;
    RG_CHECK(lr > 0.1 && lr < 10);
    for (int64_t i = 0; i < V; i++) err += (double)(l1[i] - l3[i]) * (l1[i] - l3[i]);
    // Q8_0 keeps the logits within about a percent.
    double rel = sqrt(err / (double)V) / lr;
    if (!(rel < 0.03)) rg_test_fail(t, __FILE__, __LINE__, "Q8_0 logits off by %.3g", rel);
    free(l1);
    free(l2);
    free(l3);
  }
  free_fwd(&ms);
  free_fwd(&mg);
  free_fwd(&mq);
  free(gg);
  free(gq);
  free(same);
  free(q8);
}

RG_TEST(testmodel_llama_forward_pass_agrees_across_formats) {
  check_forward(t, RG_TESTMODEL_LLAMA);
}

RG_TEST(testmodel_moe_forward_pass_agrees_across_formats) {
  check_forward(t, RG_TESTMODEL_MOE);
}

RG_TEST(testmodel_weights_have_the_documented_scale) {
  const char *dir = rg_test_tmpdir(t);
  rg_testmodel_opts_t o = {.seed = 3, .dtype = RG_F32, .gguf_type = RG_DTYPE_COUNT};
  RG_REQUIRE_OK(rg_testmodel_write(dir, &o, NULL));
  rg_weights_t *w = NULL;
  RG_REQUIRE_OK(rg_weights_open(dir, &w));
  static const struct {
    const char *name;
    double mean, std;
  } cases[] = {
      {"model.embed_tokens.weight", 0, 1},
      {"model.layers.0.self_attn.q_proj.weight", 0, 0.125},  // 1/sqrt(64)
      {"model.layers.1.mlp.down_proj.weight", 0, 0.0884},    // 1/sqrt(128)
      {"model.layers.0.input_layernorm.weight", 1, 0.05},
  };
  for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
    const rg_tensor_t *x = rg_weights_find(w, cases[c].name);
    RG_REQUIRE(x && x->type == RG_F32);
    const float *v = x->data;
    int64_t n = rg_tensor_elems(x);
    double s = 0, ss = 0, mx = 0;
    for (int64_t i = 0; i < n; i++) {
      s += v[i];
      ss += (double)v[i] * v[i];
    }
    double mean = s / (double)n, sd = sqrt(ss / (double)n - mean * mean);
    for (int64_t i = 0; i < n; i++) mx = fmax(mx, fabs(v[i] - cases[c].mean));
    RG_CHECK(fabs(mean - cases[c].mean) < 0.2 * cases[c].std);
    RG_CHECK_NEAR(sd, cases[c].std, 0.1);
    RG_CHECK(mx <= 2 * sqrt(3.0) * cases[c].std * 1.0001);
  }
  rg_weights_close(w);
}

// The user-cache copy of a test model names its weights' type when it is not
// the default (bf16, the GGUF the same): an f16 or q8_0 request never gets
// the bf16 model cached before it (the cache had named arch and size only).
RG_TEST(testmodel_cache_names_the_weight_type) {
  const char *x = getenv("XDG_CACHE_HOME");
  char saved[1024];
  snprintf(saved, sizeof saved, "%s", x ? x : "");
  const int had = x != NULL;
  setenv("XDG_CACHE_HOME", rg_test_tmpdir(t), 1);
  rg_testmodel_opts_t o = {.arch = RG_TESTMODEL_LLAMA,
                           .size = RG_TESTMODEL_TINY,
                           .dtype = RG_BF16,
                           .gguf_type = RG_DTYPE_COUNT};
  char dirs[3][4096];
  int written[3] = {0, 0, 0};
  rg_status_t s = rg_testmodel_cached(&o, dirs[0], sizeof dirs[0], &written[0]);
  o.dtype = RG_F16;
  if (!s) s = rg_testmodel_cached(&o, dirs[1], sizeof dirs[1], &written[1]);
  o.dtype = RG_BF16;
  o.gguf_type = RG_Q8_0;
  if (!s) s = rg_testmodel_cached(&o, dirs[2], sizeof dirs[2], &written[2]);
  if (had)
    setenv("XDG_CACHE_HOME", saved, 1);
  else
    unsetenv("XDG_CACHE_HOME");
  RG_REQUIRE_OK(s);
  RG_CHECK(written[0] && written[1] && written[2]);
  RG_CHECK_CONTAINS(dirs[0], "/ridge/testmodel-llama-tiny-" RIDGE_VERSION);
  RG_CHECK_CONTAINS(dirs[1], "/ridge/testmodel-llama-tiny-f16-" RIDGE_VERSION);
  RG_CHECK_CONTAINS(dirs[2], "/ridge/testmodel-llama-tiny-bf16-gguf-q8_0-" RIDGE_VERSION);
  // What each directory holds is the type its name says.
  static const rg_dtype_t want[3] = {RG_BF16, RG_F16, RG_Q8_0};
  static const char *const file[3] = {"model.safetensors", "model.safetensors", "model.gguf"};
  for (int i = 0; i < 3; i++) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dirs[i], file[i]);
    rg_weights_t *w = NULL;
    RG_CHECK_OK(rg_weights_open(path, &w));
    if (!w) continue;
    const rg_tensor_t *q = rg_weights_find(w, "model.layers.0.self_attn.q_proj.weight");
    RG_CHECK(q && q->type == want[i]);
    rg_weights_close(w);
  }
}
