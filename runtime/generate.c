#include "runtime/generate.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/fileio.h"
#include "runtime/serve.h"

typedef struct {
  const rg_gen_params_t *p;
} relay_t;

static rg_status_t relay(void *ctx, size_t req, int32_t id) {
  const relay_t *r = ctx;
  return r->p->on_token(r->p->ctx, (int)req, id);
}

rg_status_t rg_generate(rg_engine_t *e, const int32_t *const *prompts, const size_t *lens,
                        int n_seqs, const rg_gen_params_t *p, int32_t **out_tokens,
                        rg_gen_stats_t *stats) {
  memset(stats, 0, sizeof(*stats));
  if (n_seqs <= 0) return rg_status_make(RG_INVALID_ARGUMENT, "no prompts to generate from");
  for (int i = 0; i < n_seqs; i++)
    if (lens[i] == 0)
      return rg_status_make(RG_INVALID_ARGUMENT, "prompt %d is empty; give at least one token", i);
  rg_serve_request_t *reqs = calloc((size_t)n_seqs, sizeof(*reqs));
  rg_serve_result_t *res = calloc((size_t)n_seqs, sizeof(*res));
  rg_status_t st = NULL;
  if (!reqs || !res) {
    st = rg_status_make(RG_OUT_OF_MEMORY, "out of memory for %d sequences", n_seqs);
    goto done;
  }
  for (int i = 0; i < n_seqs; i++) {
    reqs[i] = (rg_serve_request_t){(uint64_t)i, prompts[i], lens[i], p->n_new > 0 ? p->n_new : 1,
                                   p->sampler,  0};
    reqs[i].sampler.seed += (uint64_t)i;
  }
  relay_t rl = {p};
  rg_serve_options_t so = {.max_batch_tokens = p->prefill_chunk > 0 ? p->prefill_chunk : 512,
                           .max_seqs = n_seqs,
                           .stop_at_eog = p->stop_at_eog,
                           .on_token = p->on_token ? relay : NULL,
                           .ctx = &rl,
                           .dump_logits = p->dump_logits,
                           .dump_rows = p->n_new};
  rg_serve_stats_t ss;
  st = rg_serve(e, reqs, (size_t)n_seqs, &so, res, &ss);
  for (int i = 0; !st && i < n_seqs; i++)
    if (res[i].finish && !strcmp(res[i].finish, "error"))
      st = rg_status_make(RG_INVALID_ARGUMENT, "sequence %d: %s", i, res[i].error);
  if (st) goto done;
  stats->prompt_tokens = ss.prompt_tokens;
  stats->new_tokens = ss.new_tokens;
  for (int i = 0; i < n_seqs; i++)
    if (res[i].n_tokens && res[i].times[0] > stats->ttft) stats->ttft = res[i].times[0];
  stats->prefill = ss.prefill;
  stats->decode = ss.decode;
  stats->prefill_seconds = ss.prefill.seconds;
  stats->decode_seconds = ss.wall_s > stats->ttft ? ss.wall_s - stats->ttft : 0;
  stats->decode_steps = ss.decode.steps;
  for (int i = 0; out_tokens && i < n_seqs; i++) {
    out_tokens[i] = res[i].tokens;
    res[i].tokens = NULL;
  }
done:
  if (res) rg_serve_results_free(res, (size_t)n_seqs);
  free(res);
  free(reqs);
  return st;
}

rg_status_t rg_npy_write_f32(const char *path, const float *data, int64_t rows, int64_t cols) {
  // NumPy format 1.0: magic, version, header length (u16 LE), a Python dict
  // literal padded with spaces so the data starts on a 64-byte boundary.
  char dict[128];
  int dl = snprintf(dict, sizeof dict,
                    "{'descr': '<f4', 'fortran_order': False, 'shape': (%lld, %lld), }",
                    (long long)rows, (long long)cols);
  size_t total = 10 + (size_t)dl + 1;
  size_t pad = (64 - total % 64) % 64;
  size_t hlen = (size_t)dl + pad + 1;
  // Atomic for a file, written through for /dev/stdout or a FIFO; errors name
  // the path (base/fileio.h).
  rg_file_writer_t *w;
  RG_RETURN_IF_ERROR(rg_file_writer_open(path, "logits", &w));
  FILE *f = rg_file_writer_stream(w);
  unsigned char head[10] = {0x93,
                            'N',
                            'U',
                            'M',
                            'P',
                            'Y',
                            1,
                            0,
                            (unsigned char)(hlen & 0xff),
                            (unsigned char)(hlen >> 8)};
  int ok = fwrite(head, 1, 10, f) == 10 && fwrite(dict, 1, (size_t)dl, f) == (size_t)dl;
  for (size_t i = 0; ok && i < pad; i++) ok = fputc(' ', f) != EOF;
  ok = ok && fputc('\n', f) != EOF;
  ok = ok && fwrite(data, sizeof(float), (size_t)(rows * cols), f) == (size_t)(rows * cols);
  return rg_file_writer_finish(w,
                               ok ? NULL : rg_status_make(RG_IO, "cannot write logits '%s'", path));
}
