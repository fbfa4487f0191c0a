// libFuzzer target for the GGUF reader: arbitrary bytes as a .gguf file,
// then the architecture, hyperparameters and tokenizer arrays read from it.
// Every input must end in OK or a status, never a crash, an over-read, a leak
// or a hang. The file is read into an exact-size heap block
// (rg__weights_use_read) so AddressSanitizer sees a read past its end.
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "graphs/weights.h"
#include "tests/fuzz/fuzz_memfd.h"

extern int rg__weights_use_read;

static unsigned fuzz_gguf_walk(const rg_weights_t *w) {
  unsigned sum = 0;
  for (size_t i = 0; i < rg_weights_count(w); i++) {
    const rg_tensor_t *t = rg_weights_at(w, i);
    const uint8_t *p = t->data;
    for (uint64_t k = 0; k < t->nbytes; k++) sum += p[k];
    float row[64];
    int64_t n = rg_tensor_elems(t);
    rg_status_free(rg_tensor_read_f32(t, 0, n < 64 ? n / 32 * 32 : 64, row));
  }
  rg_arch_t *a = NULL;
  rg_status_t s = rg_weights_arch(w, &a);
  if (!s) rg_status_free(rg_weights_check(w, a));
  rg_status_free(s);
  rg_arch_destroy(a);
  rg_weights_hparams_t hp;
  s = rg_weights_hparams(w, &hp);
  if (!s && hp.rope_scaling != RG_ROPE_SCALING_YARN && hp.rope_scaling != RG_ROPE_SCALING_DYNAMIC) {
    double f[32];
    rg_status_free(rg_rope_inv_freq(&hp, 64, f));
  }
  rg_status_free(s);
  const char *const *tokens, *const *merges;
  const int32_t *types;
  const char *pre;
  size_t nt = 0, nm = 0;
  int32_t bos, eos;
  s = rg_weights_gguf_vocab(w, &tokens, &types, &nt, &merges, &nm, &pre, &bos, &eos);
  if (!s) {
    for (size_t i = 0; i < nt; i++)
      sum += (unsigned)strlen(tokens[i]) + (types ? (unsigned)types[i] : 0);
    for (size_t i = 0; i < nm; i++) sum += (unsigned)strlen(merges[i]);
    if (bos >= (int32_t)nt || eos >= (int32_t)nt) __builtin_trap();
  }
  rg_status_free(s);
  return sum;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char path[64];
  int fd = rg_fuzz_memfd("fuzz.gguf", data, size, path, sizeof path);
  if (fd < 0) return 0;
  rg__weights_use_read = 1;
  rg_weights_t *w = NULL;
  rg_status_t s = rg_weights_open(path, &w);
  if (!s) {
    volatile unsigned sink = fuzz_gguf_walk(w);
    (void)sink;
  } else if (!strstr(rg_status_message(s), path)) {
    __builtin_trap();
  }
  rg_status_free(s);
  rg_weights_close(w);
  close(fd);
  return 0;
}
