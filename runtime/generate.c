#include "runtime/generate.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/fileio.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

static void counters_diff(const rg_engine_counters_t *a, const rg_engine_counters_t *b, rg_engine_counters_t *out) {
  out->weight_bytes = b->weight_bytes - a->weight_bytes;
  out->kv_bytes = b->kv_bytes - a->kv_bytes;
  out->flops = b->flops - a->flops;
  out->seconds = b->seconds - a->seconds;
  out->tokens = b->tokens - a->tokens;
  out->steps = b->steps - a->steps;
}

typedef struct {
  int seq;
  int active;
  rg_sampler_t *sampler;
  int32_t last;
  int64_t made;
} gen_seq_t;

rg_status_t rg_generate(rg_engine_t *e, const int32_t *const *prompts, const size_t *lens, int n_seqs,
                        const rg_gen_params_t *p, int32_t **out_tokens, rg_gen_stats_t *stats) {
  memset(stats, 0, sizeof(*stats));
  if (n_seqs <= 0) return rg_status_make(RG_INVALID_ARGUMENT, "no prompts to generate from");
  for (int i = 0; i < n_seqs; i++)
    if (lens[i] == 0) return rg_status_make(RG_INVALID_ARGUMENT, "prompt %d is empty; give at least one token", i);
  int64_t vocab = rg_engine_vocab(e);
  const rg_tokenizer_t *tok = rg_engine_tokenizer(e);
  gen_seq_t *g = calloc((size_t)n_seqs, sizeof(*g));
  float *logits = malloc((size_t)n_seqs * (size_t)vocab * sizeof(float));
  rg_batch_entry_t *b = calloc((size_t)n_seqs, sizeof(*b));
  int *rows = calloc((size_t)n_seqs, sizeof(int));  // which sequence each logits row belongs to
  rg_status_t st = NULL;
  if (!g || !logits || !b || !rows) {
    st = rg_status_make(RG_OUT_OF_MEMORY, "out of memory for %d sequences", n_seqs);
    goto done;
  }
  for (int i = 0; i < n_seqs; i++) g[i].seq = -1;
  for (int i = 0; i < n_seqs && !st; i++) {
    st = rg_engine_seq_new(e, &g[i].seq);
    if (!st) {
      rg_sampler_config_t c = p->sampler;
      c.seed += (uint64_t)i;
      st = rg_sampler_create(&c, (size_t)vocab, &g[i].sampler);
    }
    stats->prompt_tokens += (int64_t)lens[i];
    if (out_tokens) out_tokens[i] = NULL;
  }
  if (st) goto done;
  if (out_tokens)
    for (int i = 0; i < n_seqs; i++)
      if (!(out_tokens[i] = calloc((size_t)(p->n_new > 0 ? p->n_new : 1), sizeof(int32_t)))) {
        st = rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
        goto done;
      }

  rg_engine_counters_t c0, c1, c2;
  rg_engine_counters(e, &c0);
  double t0 = now();
  // Prefill in chunks: each step takes up to `chunk` prompt tokens across
  // the sequences; the last chunk of a prompt asks for its logits.
  int64_t chunk = p->prefill_chunk > 0 ? p->prefill_chunk : 512;
  size_t *done_len = calloc((size_t)n_seqs, sizeof(size_t));
  if (!done_len) {
    st = rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
    goto done;
  }
  int remaining = n_seqs;
  while (remaining > 0 && !st) {
    size_t nb = 0;
    int64_t budget = chunk;
    int n_rows = 0;
    for (int i = 0; i < n_seqs && budget > 0; i++) {
      if (done_len[i] == lens[i]) continue;
      int64_t take = (int64_t)(lens[i] - done_len[i]);
      if (take > budget) take = budget;
      b[nb] = (rg_batch_entry_t){g[i].seq, prompts[i] + done_len[i], take, done_len[i] + (size_t)take == lens[i]};
      if (b[nb].want_logits) rows[n_rows++] = i;
      done_len[i] += (size_t)take;
      budget -= take;
      nb++;
    }
    st = rg_engine_forward(e, b, nb, logits);
    for (int r = 0; r < n_rows && !st; r++) {
      int i = rows[r];
      float *lr = logits + (size_t)r * (size_t)vocab;
      if (i == 0 && p->dump_logits && p->n_new > 0) memcpy(p->dump_logits, lr, (size_t)vocab * sizeof(float));
      g[i].last = rg_sampler_sample(g[i].sampler, lr);
      g[i].made = 1;
      g[i].active = p->n_new > 1 && !(p->stop_at_eog && tok && rg_tokenizer_is_eog(tok, g[i].last));
      if (out_tokens) out_tokens[i][0] = g[i].last;
      if (p->on_token) st = p->on_token(p->ctx, i, g[i].last);
      remaining--;
    }
  }
  free(done_len);
  if (st) goto done;
  stats->ttft = now() - t0;
  rg_engine_counters(e, &c1);
  counters_diff(&c0, &c1, &stats->prefill);
  stats->prefill_seconds = stats->prefill.seconds;
  stats->new_tokens = n_seqs;

  // Decode: every active sequence adds its last token and samples the next.
  double t1 = now();
  for (;;) {
    size_t nb = 0;
    for (int i = 0; i < n_seqs; i++)
      if (g[i].active) {
        b[nb] = (rg_batch_entry_t){g[i].seq, &g[i].last, 1, 1};
        rows[nb++] = i;
      }
    if (!nb) break;
    st = rg_engine_forward(e, b, nb, logits);
    if (st) break;
    stats->decode_steps++;
    for (size_t r = 0; r < nb && !st; r++) {
      int i = rows[r];
      float *lr = logits + r * (size_t)vocab;
      if (i == 0 && p->dump_logits) memcpy(p->dump_logits + (size_t)g[i].made * (size_t)vocab, lr, (size_t)vocab * sizeof(float));
      g[i].last = rg_sampler_sample(g[i].sampler, lr);
      if (out_tokens) out_tokens[i][g[i].made] = g[i].last;
      g[i].made++;
      stats->new_tokens++;
      if (g[i].made >= p->n_new || (p->stop_at_eog && tok && rg_tokenizer_is_eog(tok, g[i].last))) g[i].active = 0;
      if (p->on_token) st = p->on_token(p->ctx, i, g[i].last);
    }
    if (st) break;
  }
  stats->decode_seconds = now() - t1;
  rg_engine_counters(e, &c2);
  counters_diff(&c1, &c2, &stats->decode);

done:
  if (g)
    for (int i = 0; i < n_seqs; i++) {
      rg_sampler_destroy(g[i].sampler);
      if (g[i].seq >= 0) rg_engine_seq_free(e, g[i].seq);
    }
  if (st && out_tokens)
    for (int i = 0; i < n_seqs; i++) {
      free(out_tokens[i]);
      out_tokens[i] = NULL;
    }
  free(g);
  free(logits);
  free(b);
  free(rows);
  return st;
}

rg_status_t rg_npy_write_f32(const char *path, const float *data, int64_t rows, int64_t cols) {
  // NumPy format 1.0: magic, version, header length (u16 LE), a Python dict
  // literal padded with spaces so the data starts on a 64-byte boundary.
  char dict[128];
  int dl = snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, 'shape': (%lld, %lld), }",
                    (long long)rows, (long long)cols);
  size_t total = 10 + (size_t)dl + 1;
  size_t pad = (64 - total % 64) % 64;
  size_t hlen = (size_t)dl + pad + 1;
  // Atomic for a file, written through for /dev/stdout or a FIFO; errors name
  // the path (base/fileio.h).
  rg_file_writer_t *w;
  RG_RETURN_IF_ERROR(rg_file_writer_open(path, "logits", &w));
  FILE *f = rg_file_writer_stream(w);
  unsigned char head[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(hlen & 0xff), (unsigned char)(hlen >> 8)};
  int ok = fwrite(head, 1, 10, f) == 10 && fwrite(dict, 1, (size_t)dl, f) == (size_t)dl;
  for (size_t i = 0; ok && i < pad; i++) ok = fputc(' ', f) != EOF;
  ok = ok && fputc('\n', f) != EOF;
  ok = ok && fwrite(data, sizeof(float), (size_t)(rows * cols), f) == (size_t)(rows * cols);
  return rg_file_writer_finish(w,
                               ok ? NULL : rg_status_make(RG_IO, "cannot write logits '%s'", path));
}
