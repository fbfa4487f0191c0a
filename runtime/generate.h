// runtime/generate.h — generation over an engine: prefill a batch of prompts,
// then decode them together, one token per sequence per step, streaming each
// token to a callback as it is sampled, and timing it all.
#ifndef RG_RUNTIME_GENERATE_H
#define RG_RUNTIME_GENERATE_H

#include <stddef.h>
#include <stdint.h>

#include "ops/ops.h"
#include "runtime/engine.h"

typedef struct {
  int64_t n_new;                // tokens to generate per sequence
  rg_sampler_config_t sampler;  // sequence i samples with seed + i
  int stop_at_eog;              // stop a sequence at its end-of-generation token
  int64_t prefill_chunk;        // prompt tokens per forward step; 0 = 512
  // Called for every sampled token; a non-OK status stops generation.
  rg_status_t (*on_token)(void *ctx, int seq_index, int32_t id);
  void *ctx;
  float *dump_logits;  // optional: (n_new, vocab) logits of sequence 0
} rg_gen_params_t;

typedef struct {
  int64_t prompt_tokens;  // over all sequences
  int64_t new_tokens;     // generated, over all sequences
  double ttft;            // seconds from start to every sequence's first token
  double prefill_seconds;
  double decode_seconds;  // after the first token
  int64_t decode_steps;
  rg_engine_counters_t prefill, decode;  // engine counters per phase
} rg_gen_stats_t;

RG_MUST_USE rg_status_t rg_generate(rg_engine_t *e, const int32_t *const *prompts,
                                    const size_t *lens, int n_seqs, const rg_gen_params_t *p,
                                    int32_t **out_tokens, rg_gen_stats_t *stats);

// Writes a float32 array of shape (rows, cols) as a NumPy .npy file.
RG_MUST_USE rg_status_t rg_npy_write_f32(const char *path, const float *data, int64_t rows,
                                         int64_t cols);

#endif  // RG_RUNTIME_GENERATE_H
