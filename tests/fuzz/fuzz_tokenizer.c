// libFuzzer target for the tokenizer: arbitrary bytes as a tokenizer.json
// (every input must load or fail with a status, never crash or leak; what
// loads must encode and decode a sample), then the same bytes as text for the
// built-in test tokenizer, where decode(encode(x)) must give x back exactly.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graphs/tokenizer.h"

static rg_tokenizer_t *fz_tok;

static void fz_round_trip(const rg_tokenizer_t *t, const char *text, size_t len, int special) {
  int32_t *ids = NULL;
  size_t n = 0;
  rg_status_t s = rg_tokenizer_encode(t, text, len, 1, special, &ids, &n);
  if (s) {
    // Only a vocabulary without a token for some byte may refuse text.
    rg_status_free(s);
    return;
  }
  char *back = NULL;
  size_t back_len = 0;
  int bos = rg_tokenizer_bos(t) >= 0;
  if (bos && (n == 0 || ids[0] != rg_tokenizer_bos(t))) abort();
  s = rg_tokenizer_decode(t, ids + bos, n - bos, &back, &back_len);
  if (s) abort();
  if (back_len != len || memcmp(back, text, len) != 0) abort();
  for (size_t i = 0; i < n; i++) {
    const char *b;
    size_t bl;
    s = rg_tokenizer_token_bytes(t, ids[i], &b, &bl);
    if (s) abort();
  }
  free(back);
  free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!fz_tok && rg_tokenizer_build_test(64, &fz_tok)) abort();
  const char *text = (const char *)data;

  rg_tokenizer_t *t = NULL;
  rg_status_t s = rg_tokenizer_load_hf_string("fuzz.json", text, size, &t);
  if (s) {
    if (t) abort();  // a failed load hands nothing back
    rg_status_free(s);
  } else {
    static const char sample[] = "Hello, world! 12345 <|begin_of_text|> caf\xc3\xa9 \xff";
    fz_round_trip(t, sample, sizeof sample - 1, 1);
    rg_tokenizer_destroy(t);
  }

  // The round trip sees the first 4 KiB: the seeds include a 42 KB
  // tokenizer.json, and encoding all of it twice per run would slow the
  // fuzzer tenfold for no new paths.
  size_t n = size < 4096 ? size : 4096;
  fz_round_trip(fz_tok, text, n, 0);
  fz_round_trip(fz_tok, text, n, 1);
  return 0;
}
