// runtime/serve.h — continuous batching: many requests through the engine,
// every iteration's batch decided by the scheduler (sched/), on the real
// clock.
//
// Requests arrive at their arrival times (seconds after the start); each
// iteration rg_sched_schedule picks the running decodes, then prefill chunks,
// within the token budget and the sequence cap; the engine runs them as one
// forward step; each request's own sampler draws its next token; the
// scheduler commits. KV blocks, preemption (recompute, or swap to the
// engine's host tier) and the prefix cache are sched's. Every token is
// timestamped, so TTFT, TBT and end-to-end latency come out per request and
// as percentiles.
//
// A request that can never run (empty, a token id outside the vocabulary,
// longer than the context) fails alone with its reason; the others run. A
// failed step fails the requests in it with the step's error and the rest
// go on.
//
// Ownership: results hold malloc'd arrays the caller frees with
// rg_serve_results_free; everything else is borrowed for the call.
#ifndef RG_RUNTIME_SERVE_H
#define RG_RUNTIME_SERVE_H

#include <stddef.h>
#include <stdint.h>

#include "ops/ops.h"
#include "runtime/engine.h"
#include "sched/sched.h"

typedef struct {
  uint64_t id;  // the caller's, echoed
  const int32_t *prompt;
  size_t n_prompt;
  int64_t max_tokens;
  rg_sampler_config_t sampler;
  double arrival;  // seconds after the start (0: at once)
} rg_serve_request_t;

typedef struct {
  int64_t max_batch_tokens;    // tokens per iteration; 0 = 512
  int max_seqs;                // running sequences; 0 = the engine's
  int prefix_cache;            // 1: share full KV blocks of identical prefixes
  rg_sched_preempt_t preempt;  // RECOMPUTE, or SWAP (needs the engine's swap tier)
  int stop_at_eog;             // end a request at its end-of-generation token
  // Called with every sampled token (request index, token); a non-OK status
  // stops the run.
  rg_status_t (*on_token)(void *ctx, size_t req, int32_t token);
  void *ctx;
  // Optional: the logits behind each of request 0's first dump_rows tokens,
  // (dump_rows, vocab); rows it did not reach stay as they were.
  float *dump_logits;
  int64_t dump_rows;
  // Optional: set (from a signal handler) to stop. The steps in flight
  // finish, every unfinished request ends with "interrupted", and serve
  // returns RG_CANCELLED.
  volatile int *stop;
  // With a capacity tier (the executor's tier_blocks): seconds a cached
  // prefix stays on the device unused before it moves to the tier (the
  // "golden time"); 0 = only when the device needs the room.
  double retention_s;
} rg_serve_options_t;

typedef struct {
  int32_t *tokens;  // (n_tokens) generated
  double *times;    // (n_tokens) seconds after the start, when each was sampled
  int64_t n_tokens;
  double arrival, finished;  // seconds after the start
  const char *finish;        // "stop", "length" or "error"
  char error[320];           // when finish is "error"
  int64_t cached_tokens;     // prompt tokens found in the prefix cache
  int32_t preemptions;
} rg_serve_result_t;

// p50, p90, p99 of a set of values (0 when empty).
typedef struct {
  double p50, p90, p99;
  int64_t n;
} rg_percentiles_t;

typedef struct {
  int64_t requests, failed, prompt_tokens, new_tokens, iterations;
  int64_t preempt_recompute, preempt_swap;
  // Prefill-decode: requests recomputed on the decode side because their
  // imported KV pages failed the checksum.
  int64_t kv_recomputed;
  // The capacity tier: blocks moved down and back, prompt tokens found there,
  // and the time the executor spent on those copies.
  int64_t tier_offloaded, tier_reloaded, tier_hit_tokens;
  double tier_seconds;
  double wall_s;                     // first arrival to the last token
  double tokens_per_s;               // new tokens / wall
  rg_percentiles_t ttft, tbt, e2e;   // seconds
  double kv_used_mean, kv_used_max;  // fraction of the KV pool in use, sampled per iteration
  int64_t prefix_lookup_tokens, prefix_hit_tokens;
  double prefix_hit_rate;
  // Engine counters of the steps that held prefill tokens, and of the
  // decode-only ones.
  rg_engine_counters_t prefill, decode;
} rg_serve_stats_t;

// A prompt's KV that the decode side of a prefill-decode run needs before
// its step (sched's rg_sched_import_t): positions [pos_begin, pos_end) into
// the decode pool's blocks, for the request serve knows by `key`.
typedef struct {
  uint64_t key;
  int64_t pos_begin, pos_end;
  const int32_t *blocks;
  int32_t n_blocks;
} rg_pd_import_t;

// What serving runs on: the single-process engine, or a coordinator of
// worker processes (runtime/cluster.h). Both run a forward step over
// sched's entries to logits and copy KV blocks for the swap tier.
//
// A prefill-decode executor (begin != NULL) has two sides, 0 prefill and 1
// decode, each with its own KV pool, that run steps at the same time: serve
// begins a step on a side (keys[k] names entry k's request), polls both, and
// on the decode side lists the imports its step needs. Each prefill entry
// with logits finishes its prompt: the executor keeps that prompt's KV until
// the decode side imports it, or serve forgets the key. A decode step whose
// import arrived corrupted names the key in bad_keys: that request's output
// from the step must not be used.
typedef struct {
  void *impl;
  rg_status_t (*forward)(void *impl, const rg_step_entry_t *entries, size_t n, float *logits);
  rg_status_t (*swap)(void *impl, const rg_engine_copy_t *out, size_t n_out,
                      const rg_engine_copy_t *in, size_t n_in);
  // The capacity tier's copies (sched's offloads, then its reloads); NULL
  // when tier_blocks is 0. A cluster runs them with the next step.
  rg_status_t (*tier)(void *impl, const rg_engine_copy_t *offloads, size_t n_offloads,
                      const rg_engine_copy_t *reloads, size_t n_reloads);
  int64_t tier_blocks;
  void (*counters)(void *impl, rg_engine_counters_t *out);
  const rg_tokenizer_t *tokenizer;
  int64_t vocab, kv_blocks, max_context, swap_blocks;
  int block_size, max_seqs;
  // Prefill-decode (all NULL / 0 otherwise); kv_blocks and block_size above
  // are the decode side's.
  rg_status_t (*begin)(void *impl, int side, const rg_step_entry_t *entries, const uint64_t *keys,
                       size_t n, const rg_pd_import_t *imports, size_t n_imports, float *logits);
  rg_status_t (*poll)(void *impl, int side, int *done, uint64_t *bad_keys, size_t cap,
                      size_t *n_bad);
  void (*forget)(void *impl, uint64_t key);
  void (*side_counters)(void *impl, int side, rg_engine_counters_t *out);
  int64_t prefill_kv_blocks, outbox_blocks;
  int prefill_block_size;
  // Optional: how many times a worker holding side's KV pool (side 0, or in
  // prefill-decode 0 prefill and 1 decode) has been lost, with why the
  // latest time in why. A worker that rejoins comes back with an empty
  // pool: when the count moves, serve fails the requests whose KV was there
  // and forgets that side's prefix cache, so no request is handed KV that is
  // no longer there.
  uint64_t (*kv_losses)(void *impl, int side, char *why, size_t cap);
} rg_executor_t;

rg_executor_t rg_engine_executor(rg_engine_t *e);

RG_MUST_USE rg_status_t rg_serve_on(const rg_executor_t *x, const rg_serve_request_t *reqs,
                                    size_t n, const rg_serve_options_t *o,
                                    rg_serve_result_t *results, rg_serve_stats_t *stats);
// rg_serve_on(rg_engine_executor(e), ...).
RG_MUST_USE rg_status_t rg_serve(rg_engine_t *e, const rg_serve_request_t *reqs, size_t n,
                                 const rg_serve_options_t *o, rg_serve_result_t *results,
                                 rg_serve_stats_t *stats);
void rg_serve_results_free(rg_serve_result_t *results, size_t n);

// The percentiles of v[0..n) (sorted in place), by linear interpolation.
rg_percentiles_t rg_percentiles(double *v, size_t n);

#endif  // RG_RUNTIME_SERVE_H
