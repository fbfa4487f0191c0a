// sched/: every transition, the batch's order and budget, admission,
// preemption by recompute and by swap, the prefix cache and its collision
// safety, LRU eviction, misuse; then random request streams checked against
// a fake model whose KV pages record what was computed where.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "sched/sched.h"
#include "sched/sched_impl.h"  // the checker test corrupts state on purpose
#include "tests/test.h"

// --- helpers ----------------------------------------------------------------

static rg_sched_config_t base_config(void) {
  return (rg_sched_config_t){.block_size = 4,
                             .n_blocks = 64,
                             .max_seqs = 4,
                             .max_batch_tokens = 64,
                             .max_context = 256,
                             .watermark_blocks = -1};
}

static void fill(int32_t *p, size_t n, int32_t base) {
  for (size_t i = 0; i < n; i++) p[i] = base + (int32_t)i;
}

static rg_status_t add(rg_sched_t *s, uint64_t id, const int32_t *p, size_t n, int64_t max_tokens,
                       double arrival, int32_t *h) {
  rg_sched_request_t q = {
      .id = id, .prompt = p, .n_prompt = n, .max_tokens = max_tokens, .arrival = arrival};
  return rg_sched_add(s, &q, h);
}

// The token this file's tests sample for an entry: a function of where the
// entry ends, so outputs can be predicted and compared after preemptions.
static int32_t token_for(uint64_t id, int64_t end) {
  return (int32_t)((id * 131 + end) % 1000);
}

// Commits a result for every entry with want_logits; stop_id names a
// request whose result says stop (0 = none).
static rg_status_t commit_all(rg_sched_t *s, const rg_sched_batch_t *b, double now,
                              uint64_t stop_id) {
  rg_sched_result_t r[64];
  size_t n = 0;
  for (size_t i = 0; i < b->n_entries; i++) {
    const rg_sched_entry_t *e = &b->entries[i];
    if (!e->want_logits) continue;
    r[n++] = (rg_sched_result_t){e->req, token_for(e->id, e->pos + e->n), e->id == stop_id};
  }
  return rg_sched_commit(s, now, r, n);
}

static rg_sched_state_t state_of(rg_sched_t *s, int32_t h) {
  rg_sched_request_info_t info;
  rg_status_t st = rg_sched_request_info(s, h, &info);
  if (st) {
    rg_status_free(st);
    return RG_SCHED_STATE_COUNT;
  }
  return info.state;
}

static const rg_sched_entry_t *entry_of(const rg_sched_batch_t *b, int32_t h) {
  for (size_t i = 0; i < b->n_entries; i++)
    if (b->entries[i].req == h) return &b->entries[i];
  return NULL;
}

static int32_t refcount(rg_sched_t *s, int32_t block) {
  rg_sched_block_info_t bi;
  rg_status_t st = rg_sched_block_info(s, block, &bi);
  if (st) {
    rg_status_free(st);
    return -1;
  }
  return bi.refcount;
}

static rg_sched_block_state_t block_state(rg_sched_t *s, int32_t block) {
  rg_sched_block_info_t bi;
  rg_status_t st = rg_sched_block_info(s, block, &bi);
  if (st) {
    rg_status_free(st);
    return RG_SCHED_BLOCK_COUNT;
  }
  return bi.state;
}

// --- config and add ----------------------------------------------------------

RG_TEST(sched_config_errors_name_the_field) {
  rg_sched_t *s = NULL;
  RG_CHECK_ERR(rg_sched_create(NULL, &s), "none given");
  rg_sched_config_t c = base_config();
  c.n_blocks = 0;
  RG_CHECK_ERR(rg_sched_create(&c, &s), "n_blocks 0 is out of range");
  c = base_config();
  c.block_size = -1;
  RG_CHECK_ERR(rg_sched_create(&c, &s), "block_size -1 is out of range");
  c = base_config();
  c.max_seqs = -2;
  RG_CHECK_ERR(rg_sched_create(&c, &s), "max_seqs -2 is out of range");
  c = base_config();
  c.max_seqs = 16;
  c.max_batch_tokens = 8;
  RG_CHECK_ERR(rg_sched_create(&c, &s), "max_batch_tokens 8 is below max_seqs 16");
  c = base_config();
  c.max_batch_tokens = -5;
  RG_CHECK_ERR(rg_sched_create(&c, &s), "max_batch_tokens -5 is negative");
  c.max_batch_tokens = (int64_t)INT32_MAX + 1;
  RG_CHECK_ERR(rg_sched_create(&c, &s), "max_batch_tokens 2147483648 is above 2147483647");
  c = base_config();
  c.n_blocks = INT32_MAX;
  RG_CHECK_ERR(rg_sched_create(&c, &s),
               "n_blocks 2147483647 is out of range; the KV pool needs 1 to 2147483646 blocks");
  c = base_config();
  c.max_context = 0;
  RG_CHECK_ERR(rg_sched_create(&c, &s), "max_context 0 must be positive");
  c = base_config();
  c.preempt = (rg_sched_preempt_t)7;
  RG_CHECK_ERR(rg_sched_create(&c, &s), "preempt 7 is not a policy");
  c = base_config();
  c.preempt = RG_SCHED_PREEMPT_SWAP;
  RG_CHECK_ERR(rg_sched_create(&c, &s), "preempt is swap but n_swap_blocks is 0");
  c = base_config();
  c.n_swap_blocks = -1;
  RG_CHECK_ERR(rg_sched_create(&c, &s), "n_swap_blocks -1 is out of range");
  c = base_config();
  c.prefix_cache = 2;
  RG_CHECK_ERR(rg_sched_create(&c, &s), "prefix_cache 2 must be 0 (off) or 1 (on)");
  c = base_config();
  c.watermark_blocks = 64;
  RG_CHECK_ERR(rg_sched_create(&c, &s), "watermark_blocks 64 must be -1 (none)");
  c = base_config();
  c.hash_bits = 65;
  RG_CHECK_ERR(rg_sched_create(&c, &s), "hash_bits 65 is out of range");
  RG_CHECK(s == NULL);

  // Zeros take the documented defaults.
  rg_sched_config_t z = {.n_blocks = 1000, .max_context = 4096};
  RG_REQUIRE_OK(rg_sched_create(&z, &s));
  rg_sched_config_t got;
  rg_sched_get_config(s, &got);
  RG_CHECK(got.block_size == 16 && got.max_seqs == 16 && got.max_batch_tokens == 512);
  RG_CHECK(got.preempt == RG_SCHED_PREEMPT_RECOMPUTE && got.prefix_cache == 0);
  rg_sched_destroy(s);

  rg_sched_preempt_t p;
  RG_CHECK_ERR(rg_sched_preempt_parse("lru", &p),
               "unknown preemption policy 'lru'; choose recompute or swap");
  RG_CHECK_OK(rg_sched_preempt_parse("swap", &p));
  RG_CHECK(p == RG_SCHED_PREEMPT_SWAP);
  RG_CHECK(strcmp(rg_sched_preempt_name(RG_SCHED_PREEMPT_RECOMPUTE), "recompute") == 0);
  RG_CHECK(strcmp(rg_sched_state_name(RG_SCHED_SWAPPED), "swapped") == 0);
  RG_CHECK(strcmp(rg_sched_state_name(RG_SCHED_STATE_COUNT), "?") == 0);
  RG_CHECK(strcmp(rg_sched_block_state_name(RG_SCHED_BLOCK_CACHED), "cached") == 0);
}

RG_TEST(sched_add_refuses_what_can_never_run) {
  rg_sched_config_t c = base_config();
  c.n_blocks = 4;  // 16 tokens of KV
  c.max_context = 100;
  rg_sched_t *s;
  RG_REQUIRE_OK(rg_sched_create(&c, &s));
  int32_t p[100], h;
  fill(p, 100, 0);
  RG_CHECK_ERR(add(s, 7, p, 90, 20, 0, &h),
               "request 7: prompt of 90 tokens plus 20 to generate exceeds max_context 100");
  RG_CHECK(h == -1);
  RG_CHECK_ERR(add(s, 8, p, 12, 6, 0, &h),
               "request 8: prompt of 12 tokens plus 6 to generate needs 5 KV blocks of 4 tokens, "
               "but the pool holds only 4 blocks (16 tokens)");
  // The last generated token is never fed back: 12 + 5 needs 16 positions.
  RG_CHECK_OK(add(s, 9, p, 12, 5, 0, &h));
  RG_CHECK_ERR(add(s, 10, p, 0, 5, 0, &h), "request 10: the prompt is empty");
  RG_CHECK_ERR(add(s, 11, NULL, 3, 5, 0, &h), "n_prompt is 3 but no prompt tokens were given");
  RG_CHECK_ERR(add(s, 12, p, 3, 0, 0, &h), "request 12: max_tokens is 0; at least 1 token");
  RG_CHECK_ERR(add(s, 13, p, 3, 2, NAN, &h), "request 13: arrival nan is not a finite number");
  p[2] = -3;
  RG_CHECK_ERR(add(s, 14, p, 3, 2, 0, &h),
               "request 14: prompt token 2 is -3; token ids must be >= 0");
  RG_CHECK_ERR(rg_sched_add(s, NULL, &h), "no request given");
  rg_sched_stats_t st;
  rg_sched_stats(s, &st);
  RG_CHECK(st.n_state[RG_SCHED_WAITING] == 1);
  RG_CHECK_OK(rg_sched_check(s));
  rg_sched_destroy(s);
}

// --- transitions -------------------------------------------------------------

RG_TEST(sched_lifecycle_waiting_prefill_decode_finish) {
  rg_sched_config_t c = base_config();
  rg_sched_t *s;
  RG_REQUIRE_OK(rg_sched_create(&c, &s));
  int32_t p[6], h, h2;
  fill(p, 6, 50);
  RG_REQUIRE_OK(add(s, 3, p, 6, 3, 1.0, &h));
  RG_CHECK(state_of(s, h) == RG_SCHED_WAITING);
  rg_sched_batch_t b;
  // Not before its arrival.
  RG_REQUIRE_OK(rg_sched_schedule(s, 0.5, &b));
  RG_CHECK(b.n_entries == 0 && b.iteration == 1);
  RG_REQUIRE_OK(rg_sched_schedule(s, 1.0, &b));
  RG_REQUIRE(b.n_entries == 1);
  const rg_sched_entry_t *e = &b.entries[0];
  RG_CHECK(e->req == h && e->id == 3 && e->pos == 0 && e->n == 6 && e->want_logits &&
           e->is_prefill);
  RG_CHECK(e->n_blocks == 2 && memcmp(e->tokens, p, sizeof p) == 0);
  RG_CHECK(b.n_prefill_tokens == 6 && b.n_decode_tokens == 0);
  RG_CHECK(state_of(s, h) == RG_SCHED_PREFILLING);
  RG_CHECK_OK(rg_sched_check(s));
  RG_REQUIRE_OK(commit_all(s, &b, 1.1, 0));
  rg_sched_request_info_t info;
  RG_REQUIRE_OK(rg_sched_request_info(s, h, &info));
  RG_CHECK(info.state == RG_SCHED_DECODING && info.n_output == 1 && info.n_computed == 6);
  RG_CHECK(info.first_scheduled == 1.0 && info.first_token == 1.1 && isnan(info.finished));
  RG_CHECK(info.output[0] == token_for(3, 6) && info.reason == NULL);

  for (int k = 0; k < 2; k++) {
    RG_REQUIRE_OK(rg_sched_schedule(s, 1.2 + k, &b));
    RG_REQUIRE(b.n_entries == 1);
    e = &b.entries[0];
    RG_CHECK(e->pos == 6 + k && e->n == 1 && !e->is_prefill && e->want_logits);
    RG_CHECK(e->tokens[0] == token_for(3, 6 + k) && e->n_blocks == 2);
    RG_CHECK(b.n_decode_tokens == 1);
    RG_REQUIRE_OK(commit_all(s, &b, 1.3 + k, 0));
    RG_CHECK_OK(rg_sched_check(s));
  }
  RG_REQUIRE_OK(rg_sched_request_info(s, h, &info));
  RG_CHECK(info.state == RG_SCHED_FINISHED && info.n_output == 3 && info.finished == 2.3);
  RG_CHECK(info.reason && strcmp(info.reason, "length") == 0 && info.n_blocks == 0);
  RG_CHECK(info.output[2] == token_for(3, 8) && info.last_token == 2.3);

  // A stop on the very first token ends it straight from prefilling.
  RG_REQUIRE_OK(add(s, 4, p, 6, 10, 0, &h2));
  RG_REQUIRE_OK(rg_sched_schedule(s, 3, &b));
  RG_REQUIRE(b.n_entries == 1);
  RG_REQUIRE_OK(commit_all(s, &b, 3.5, 4));
  RG_REQUIRE_OK(rg_sched_request_info(s, h2, &info));
  RG_CHECK(info.state == RG_SCHED_FINISHED && strcmp(info.reason, "stop") == 0 &&
           info.n_output == 1);
  rg_sched_stats_t st;
  rg_sched_stats(s, &st);
  RG_CHECK(st.blocks_used == 0 && st.blocks_free == 64 && st.total_finished == 2);
  RG_CHECK(st.n_state[RG_SCHED_FINISHED] == 2);

  rg_sched_release(s, h);
  RG_CHECK_ERR(rg_sched_request_info(s, h, &info), "request handle 0 is not in use");
  rg_sched_stats(s, &st);
  RG_CHECK(st.n_state[RG_SCHED_FINISHED] == 1);
  rg_sched_release(s, 999);  // unknown: ignored
  RG_CHECK_OK(rg_sched_check(s));
  rg_sched_destroy(s);
}

RG_TEST(sched_batch_order_budget_and_seq_cap) {
  rg_sched_config_t c = base_config();
  c.max_batch_tokens = 10;
  rg_sched_t *s;
  RG_REQUIRE_OK(rg_sched_create(&c, &s));
  int32_t p[16], hA, hB, hC, hD, hE;
  fill(p, 16, 1);
  RG_REQUIRE_OK(add(s, 1, p, 2, 10, 0, &hA));
  RG_REQUIRE_OK(add(s, 2, p, 12, 10, 0, &hB));
  RG_REQUIRE_OK(add(s, 3, p, 5, 10, 0, &hC));
  RG_REQUIRE_OK(add(s, 4, p, 3, 10, 0, &hD));
  RG_REQUIRE_OK(add(s, 5, p, 3, 10, 0, &hE));
  rg_sched_batch_t b;
  // A takes 2 tokens, B's first chunk is cut to the 8 left, C waits.
  RG_REQUIRE_OK(rg_sched_schedule(s, 0, &b));
  RG_REQUIRE(b.n_entries == 2);
  RG_CHECK(b.entries[0].req == hA && b.entries[0].n == 2 && b.entries[0].want_logits);
  RG_CHECK(b.entries[1].req == hB && b.entries[1].n == 8 && !b.entries[1].want_logits);
  RG_CHECK(b.n_prefill_tokens == 10 && state_of(s, hC) == RG_SCHED_WAITING);
  RG_REQUIRE_OK(commit_all(s, &b, 0.1, 0));
  // Decode first, then B's next chunk, then the new C, within 10 tokens.
  RG_REQUIRE_OK(rg_sched_schedule(s, 0.2, &b));
  RG_REQUIRE(b.n_entries == 3);
  RG_CHECK(b.entries[0].req == hA && !b.entries[0].is_prefill && b.entries[0].n == 1);
  RG_CHECK(b.entries[1].req == hB && b.entries[1].is_prefill && b.entries[1].pos == 8 &&
           b.entries[1].n == 4 && b.entries[1].want_logits);
  RG_CHECK(b.entries[2].req == hC && b.entries[2].is_prefill && b.entries[2].n == 5);
  RG_CHECK(b.n_decode_tokens == 1 && b.n_prefill_tokens == 9);
  RG_REQUIRE_OK(commit_all(s, &b, 0.3, 0));
  // Three decodes and D; E is held back by max_seqs 4, not by the budget.
  RG_REQUIRE_OK(rg_sched_schedule(s, 0.4, &b));
  RG_REQUIRE(b.n_entries == 4);
  RG_CHECK(b.entries[0].req == hA && b.entries[1].req == hB && b.entries[2].req == hC);
  for (int i = 0; i < 3; i++) RG_CHECK(!b.entries[i].is_prefill);
  RG_CHECK(b.entries[3].req == hD && b.entries[3].is_prefill);
  RG_CHECK(b.n_decode_tokens + b.n_prefill_tokens == 6 && state_of(s, hE) == RG_SCHED_WAITING);
  RG_CHECK_OK(rg_sched_check(s));
  RG_REQUIRE_OK(commit_all(s, &b, 0.5, 0));
  rg_sched_destroy(s);
}

RG_TEST(sched_chunked_prefill_cuts_at_the_budget) {
  rg_sched_config_t c = base_config();
  c.block_size = 16;
  c.max_batch_tokens = 32;
  c.max_seqs = 1;
  rg_sched_t *s;
  RG_REQUIRE_OK(rg_sched_create(&c, &s));
  int32_t p[100], h;
  fill(p, 100, 0);
  RG_REQUIRE_OK(add(s, 1, p, 100, 4, 0, &h));
  const int64_t want_pos[] = {0, 32, 64, 96}, want_n[] = {32, 32, 32, 4},
                want_blocks[] = {2, 4, 6, 7};
  for (int k = 0; k < 4; k++) {
    rg_sched_batch_t b;
    RG_REQUIRE_OK(rg_sched_schedule(s, k, &b));
    RG_REQUIRE(b.n_entries == 1);
    const rg_sched_entry_t *e = &b.entries[0];
    RG_CHECK(e->pos == want_pos[k] && e->n == want_n[k] && e->n_blocks == want_blocks[k]);
    RG_CHECK(e->is_prefill && e->want_logits == (k == 3) && e->tokens[0] == (int32_t)want_pos[k]);
    if (k < 3) {
      rg_sched_result_t r = {h, 5, 0};
      RG_CHECK_ERR(rg_sched_commit(s, k + 0.5, &r, 1),
                   "whose entry yields no logits: its chunk ends at position");
    }
    RG_REQUIRE_OK(commit_all(s, &b, k + 0.5, 0));
    RG_CHECK_OK(rg_sched_check(s));
  }
  RG_CHECK(state_of(s, h) == RG_SCHED_DECODING);
  rg_sched_destroy(s);
}

RG_TEST(sched_admission_keeps_the_watermark) {
  rg_sched_config_t c = base_config();
  c.n_blocks = 10;
  c.watermark_blocks = 2;
  rg_sched_t *s;
  RG_REQUIRE_OK(rg_sched_create(&c, &s));
  int32_t p[40], hA, hB, hC, hX;
  fill(p, 40, 0);
  RG_REQUIRE_OK(add(s, 1, p, 16, 4, 0, &hA));
  RG_REQUIRE_OK(add(s, 2, p, 16, 4, 0, &hB));
  RG_REQUIRE_OK(add(s, 3, p, 4, 4, 0, &hC));
  rg_sched_batch_t b;
  RG_REQUIRE_OK(rg_sched_schedule(s, 0, &b));
  // A: 4 blocks (6 left). B: 4 + watermark 2 <= 6. C: 1 + 2 > 2 left.
  RG_REQUIRE(b.n_entries == 2);
  RG_CHECK(b.entries[0].req == hA && b.entries[1].req == hB && state_of(s, hC) == RG_SCHED_WAITING);
  RG_REQUIRE_OK(commit_all(s, &b, 0.1, 0));
  RG_REQUIRE_OK(rg_sched_abort(s, hA, 0.2));
  RG_REQUIRE_OK(rg_sched_abort(s, hB, 0.2));
  RG_REQUIRE_OK(rg_sched_schedule(s, 0.3, &b));
  RG_REQUIRE(b.n_entries == 1 && b.entries[0].req == hC);
  RG_REQUIRE_OK(commit_all(s, &b, 0.4, 3));
  // A request that needs the whole pool gets in once nothing else runs.
  RG_REQUIRE_OK(add(s, 4, p, 40, 1, 0, &hX));
  RG_REQUIRE_OK(rg_sched_schedule(s, 0.5, &b));
  RG_REQUIRE(b.n_entries == 1 && b.entries[0].req == hX && b.entries[0].n_blocks == 10);
  RG_REQUIRE_OK(commit_all(s, &b, 0.6, 0));
  RG_CHECK(state_of(s, hX) == RG_SCHED_FINISHED);
  RG_CHECK_OK(rg_sched_check(s));
  rg_sched_destroy(s);
}

// Two requests of 4-token prompts in a pool of 4 blocks of 4: both admit,
// and the second is preempted when the first needs its third block.
static void preempt_setup(rg_test_ctx_t *t, rg_sched_t *s, int32_t *hA, int32_t *hB, double *now,
                          rg_sched_batch_t *b) {
  int32_t pa[4] = {1, 2, 3, 4}, pb[4] = {5, 6, 7, 8};
  RG_CHECK_OK(add(s, 1, pa, 4, 8, 0, hA));
  RG_CHECK_OK(add(s, 2, pb, 4, 8, 0, hB));
  for (;;) {
    RG_CHECK_OK(rg_sched_schedule(s, *now, b));
    RG_CHECK_OK(rg_sched_check(s));
    if (b->n_preempted || b->n_entries == 0) return;
    RG_CHECK_OK(commit_all(s, b, *now += 0.01, 0));
    *now += 0.01;
  }
}

RG_TEST(sched_preempt_recompute_keeps_generated_tokens) {
  rg_sched_config_t c = base_config();
  c.n_blocks = 4;
  rg_sched_t *s;
  RG_REQUIRE_OK(rg_sched_create(&c, &s));
  int32_t hA, hB;
  double now = 0;
  rg_sched_batch_t b;
  preempt_setup(t, s, &hA, &hB, &now, &b);
  // A (pos 8) needs block 3; the newest, B, gives its two blocks back.
  RG_REQUIRE(b.n_preempted == 1 && b.preempted[0] == hB);
  RG_REQUIRE(b.n_entries == 1 && b.entries[0].req == hA && b.entries[0].pos == 8);
  RG_CHECK(b.n_swap_out == 0);
  rg_sched_request_info_t ib;
  RG_REQUIRE_OK(rg_sched_request_info(s, hB, &ib));
  RG_CHECK(ib.state == RG_SCHED_WAITING && ib.n_computed == 0 && ib.n_blocks == 0);
  RG_CHECK(ib.n_preemptions == 1 && ib.n_output == 5);
  int32_t kept[5];
  memcpy(kept, ib.output, sizeof kept);
  RG_REQUIRE_OK(commit_all(s, &b, now += 0.01, 0));
  // B re-prefills prompt + its 5 outputs once A has finished.
  int readmitted = 0;
  while (state_of(s, hB) != RG_SCHED_FINISHED) {
    RG_REQUIRE_OK(rg_sched_schedule(s, now += 0.01, &b));
    RG_CHECK_OK(rg_sched_check(s));
    const rg_sched_entry_t *e = entry_of(&b, hB);
    if (e && !readmitted) {
      readmitted = 1;
      RG_CHECK(state_of(s, hA) == RG_SCHED_FINISHED);
      RG_CHECK(e->pos == 0 && e->n == 9 && e->is_prefill && e->want_logits);
      RG_CHECK(e->tokens[0] == 5 && memcmp(e->tokens + 4, kept, sizeof kept) == 0);
    }
    RG_REQUIRE_OK(commit_all(s, &b, now += 0.01, 0));
  }
  RG_CHECK(readmitted);
  RG_REQUIRE_OK(rg_sched_request_info(s, hB, &ib));
  RG_CHECK(ib.n_output == 8 && memcmp(ib.output, kept, sizeof kept) == 0);
  // Outputs end where they would have without the preemption.
  for (int i = 0; i < 8; i++) RG_CHECK(ib.output[i] == token_for(2, 4 + i));
  rg_sched_stats_t st;
  rg_sched_stats(s, &st);
  RG_CHECK(st.preempt_recompute == 1 && st.preempt_swap == 0 && st.blocks_used == 0);
  rg_sched_destroy(s);
}

RG_TEST(sched_preempt_swap_out_and_back_in) {
  rg_sched_config_t c = base_config();
  c.n_blocks = 4;
  c.n_swap_blocks = 8;
  c.preempt = RG_SCHED_PREEMPT_SWAP;
  rg_sched_t *s;
  RG_REQUIRE_OK(rg_sched_create(&c, &s));
  int32_t hA, hB;
  double now = 0;
  rg_sched_batch_t b;
  preempt_setup(t, s, &hA, &hB, &now, &b);
  RG_REQUIRE(b.n_preempted == 1 && b.preempted[0] == hB);
  rg_sched_request_info_t ib;
  RG_REQUIRE_OK(rg_sched_request_info(s, hB, &ib));
  RG_CHECK(ib.state == RG_SCHED_SWAPPED && ib.n_computed == 8 && ib.n_swap_blocks == 2);
  RG_REQUIRE(b.n_swap_out == 2 && b.n_swap_in == 0);
  rg_sched_copy_t out[2] = {b.swap_out[0], b.swap_out[1]};
  // B's device blocks went to A's new block and the free list; A's entry
  // writes one of them in this very step, after the copies.
  RG_CHECK(b.entries[0].blocks[2] == out[0].src || b.entries[0].blocks[2] == out[1].src);
  rg_sched_stats_t st;
  rg_sched_stats(s, &st);
  RG_CHECK(st.swap_used == 2 && st.preempt_swap == 1 && st.blocks_swapped_out == 2);
  RG_REQUIRE_OK(commit_all(s, &b, now += 0.01, 0));
  // C would fit the one free block, but a swapped request goes first.
  int32_t pc[2] = {9, 9}, hC;
  RG_REQUIRE_OK(add(s, 3, pc, 2, 1, now, &hC));
  int back = 0;
  while (state_of(s, hB) != RG_SCHED_FINISHED) {
    RG_REQUIRE_OK(rg_sched_schedule(s, now += 0.01, &b));
    RG_CHECK_OK(rg_sched_check(s));
    if (entry_of(&b, hC)) RG_CHECK(back || b.n_swap_in);
    if (b.n_swap_in) {
      back = 1;
      RG_CHECK(state_of(s, hA) == RG_SCHED_FINISHED);
      RG_REQUIRE(b.n_swap_in == 2);
      const rg_sched_entry_t *e = entry_of(&b, hB);
      RG_REQUIRE(e);
      // Back as a decode, where it left off, its blocks copied up.
      RG_CHECK(!e->is_prefill && e->pos == 8 && e->n == 1 && e->n_blocks == 3);
      for (int i = 0; i < 2; i++)
        RG_CHECK(b.swap_in[i].src == out[i].dst && b.swap_in[i].dst == e->blocks[i]);
    }
    RG_REQUIRE_OK(commit_all(s, &b, now += 0.01, 0));
  }
  RG_CHECK(back);
  RG_REQUIRE_OK(rg_sched_request_info(s, hB, &ib));
  for (int i = 0; i < 8; i++) RG_CHECK(ib.output[i] == token_for(2, 4 + i));
  rg_sched_stats(s, &st);
  RG_CHECK(st.swap_used == 0 && st.blocks_swapped_in == 2 && st.blocks_used == 0);
  rg_sched_destroy(s);

  // A swap tier too small for the victim falls back to recompute.
  c.n_swap_blocks = 1;
  RG_REQUIRE_OK(rg_sched_create(&c, &s));
  now = 0;
  preempt_setup(t, s, &hA, &hB, &now, &b);
  RG_CHECK(b.n_preempted == 1 && b.n_swap_out == 0 && state_of(s, hB) == RG_SCHED_WAITING);
  rg_sched_stats(s, &st);
  RG_CHECK(st.preempt_recompute == 1 && st.preempt_swap == 0);
  RG_CHECK_OK(commit_all(s, &b, now + 0.01, 0));
  rg_sched_destroy(s);
}

// --- prefix cache ------------------------------------------------------------

static rg_sched_t *cached_sched(rg_test_ctx_t *t, int64_t n_blocks, int hash_bits) {
  rg_sched_config_t c = base_config();
  c.n_blocks = n_blocks;
  c.prefix_cache = 1;
  c.hash_bits = hash_bits;
  rg_sched_t *s = NULL;
  RG_CHECK_OK(rg_sched_create(&c, &s));
  return s;
}

// Runs one request alone to completion (max_tokens 1) so its full blocks
// end up cached; returns its handle.
static int32_t run_alone(rg_test_ctx_t *t, rg_sched_t *s, uint64_t id, const int32_t *p, size_t n,
                         double *now) {
  int32_t h = -1;
  RG_CHECK_OK(add(s, id, p, n, 1, *now, &h));
  rg_sched_batch_t b;
  while (state_of(s, h) != RG_SCHED_FINISHED) {
    rg_status_t st = rg_sched_schedule(s, *now += 0.01, &b);
    if (st) {
      RG_CHECK_OK(st);
      break;
    }
    RG_CHECK_OK(commit_all(s, &b, *now += 0.01, 0));
  }
  RG_CHECK_OK(rg_sched_check(s));
  return h;
}

RG_TEST(sched_prefix_hits_share_blocks) {
  rg_sched_t *s = cached_sched(t, 32, 0);
  RG_REQUIRE(s);
  int32_t pa[13], pb[13], hA, hB;
  fill(pa, 13, 100);
  memcpy(pb, pa, sizeof pa);
  pb[12] = 999;
  RG_REQUIRE_OK(add(s, 1, pa, 13, 4, 0, &hA));
  rg_sched_batch_t b;
  RG_REQUIRE_OK(rg_sched_schedule(s, 0, &b));
  RG_REQUIRE(b.n_entries == 1);
  int32_t a_blocks[4];
  memcpy(a_blocks, b.entries[0].blocks, sizeof a_blocks);
  RG_REQUIRE_OK(commit_all(s, &b, 0.1, 0));
  // A's three full blocks are keyed once committed.
  for (int i = 0; i < 3; i++) {
    rg_sched_block_info_t bi;
    RG_REQUIRE_OK(rg_sched_block_info(s, a_blocks[i], &bi));
    RG_CHECK(bi.cached_key && bi.state == RG_SCHED_BLOCK_USED && bi.refcount == 1);
  }
  RG_REQUIRE_OK(add(s, 2, pb, 13, 4, 0.15, &hB));
  RG_REQUIRE_OK(rg_sched_schedule(s, 0.2, &b));
  const rg_sched_entry_t *e = entry_of(&b, hB);
  RG_REQUIRE(e && b.n_entries == 2);
  RG_CHECK(e->pos == 12 && e->n == 1 && e->want_logits && e->is_prefill && e->n_blocks == 4);
  for (int i = 0; i < 3; i++) {
    RG_CHECK(e->blocks[i] == a_blocks[i]);
    RG_CHECK(refcount(s, a_blocks[i]) == 2);
  }
  RG_CHECK(e->blocks[3] != a_blocks[3] && refcount(s, e->blocks[3]) == 1);
  rg_sched_request_info_t info;
  RG_REQUIRE_OK(rg_sched_request_info(s, hB, &info));
  RG_CHECK(info.n_cached_tokens == 12 && info.n_computed == 12);
  rg_sched_stats_t st;
  rg_sched_stats(s, &st);
  RG_CHECK(st.prefix_lookup_tokens == 26 && st.prefix_hit_tokens == 12);
  RG_CHECK(st.prefix_lookup_blocks == 6 && st.prefix_hit_blocks == 3);
  RG_CHECK_OK(rg_sched_check(s));
  RG_REQUIRE_OK(rg_sched_abort(s, hA, 0.3));
  RG_REQUIRE_OK(rg_sched_abort(s, hB, 0.3));
  // Unreferenced, the shared blocks stay cached; A's partial block is free.
  for (int i = 0; i < 3; i++) RG_CHECK(block_state(s, a_blocks[i]) == RG_SCHED_BLOCK_CACHED);
  RG_CHECK(block_state(s, a_blocks[3]) == RG_SCHED_BLOCK_FREE);
  rg_sched_stats(s, &st);
  RG_CHECK(st.blocks_used == 0 && st.blocks_cached == 3 && st.blocks_free == 29);
  RG_CHECK_OK(rg_sched_check(s));
  rg_sched_destroy(s);
}

// A worker holding the device pool dies and comes back empty: the requests
// holding blocks fail, waiting ones stay, and nothing the pool held is hit
// again.
RG_TEST(sched_device_kv_lost_fails_holders_and_forgets_the_cache) {
  rg_sched_t *s = cached_sched(t, 32, 0);
  RG_REQUIRE(s);
  int32_t pa[13], hA, hB, hC, hW;
  fill(pa, 13, 100);
  RG_REQUIRE_OK(add(s, 1, pa, 13, 4, 0, &hA));
  rg_sched_batch_t b;
  RG_REQUIRE_OK(rg_sched_schedule(s, 0, &b));
  RG_REQUIRE(b.n_entries == 1);
  // While the batch is outstanding it refuses.
  RG_CHECK_ERR(rg_sched_device_kv_lost(s, 0.05, "worker w0 lost", NULL), "outstanding");
  RG_REQUIRE_OK(commit_all(s, &b, 0.1, 0));
  // B finishes and leaves its blocks cached; W waits behind the seq cap.
  int32_t pb[9];
  fill(pb, 9, 500);
  RG_REQUIRE_OK(add(s, 2, pb, 9, 1, 0.1, &hB));
  RG_REQUIRE_OK(rg_sched_schedule(s, 0.2, &b));
  RG_REQUIRE_OK(commit_all(s, &b, 0.3, 0));
  RG_CHECK(state_of(s, hB) == RG_SCHED_FINISHED);
  RG_REQUIRE_OK(add(s, 3, pb, 9, 4, 1.0, &hW));
  rg_sched_stats_t st;
  rg_sched_stats(s, &st);
  RG_REQUIRE(st.blocks_cached >= 2 && st.blocks_used >= 4);
  RG_CHECK_ERR(rg_sched_device_kv_lost(s, 0.4, "", NULL), "reason");
  size_t failed = 0;
  RG_REQUIRE_OK(rg_sched_device_kv_lost(s, 0.4, "worker w0 lost", &failed));
  RG_CHECK(failed == 1);
  rg_sched_request_info_t info;
  RG_REQUIRE_OK(rg_sched_request_info(s, hA, &info));
  RG_CHECK(info.state == RG_SCHED_FAILED && info.reason && !strcmp(info.reason, "worker w0 lost"));
  RG_CHECK(state_of(s, hW) == RG_SCHED_WAITING);
  rg_sched_stats(s, &st);
  RG_CHECK(st.blocks_used == 0 && st.blocks_cached == 0 && st.blocks_free == 32);
  RG_CHECK_OK(rg_sched_check(s));
  // The same prompt again computes everything: no hit on what is gone.
  RG_REQUIRE_OK(add(s, 4, pa, 13, 4, 0.5, &hC));
  RG_REQUIRE_OK(rg_sched_schedule(s, 1.0, &b));
  const rg_sched_entry_t *e = entry_of(&b, hC);
  RG_REQUIRE(e);
  RG_CHECK(e->pos == 0 && e->n == 13);
  RG_REQUIRE_OK(rg_sched_request_info(s, hC, &info));
  RG_CHECK(info.n_cached_tokens == 0);
  RG_REQUIRE_OK(commit_all(s, &b, 1.1, 0));
  RG_CHECK_OK(rg_sched_check(s));
  rg_sched_destroy(s);
}

RG_TEST(sched_prefix_never_reuses_the_last_prompt_token) {
  rg_sched_t *s = cached_sched(t, 32, 0);
  RG_REQUIRE(s);
  int32_t p[8];
  fill(p, 8, 7);
  double now = 0;
  run_alone(t, s, 1, p, 8, &now);
  rg_sched_stats_t st;
  rg_sched_stats(s, &st);
  RG_CHECK(st.blocks_cached == 2);
  // Both blocks are cached, but the hit stops at floor(7 / 4) = 1 block so
  // position 7 is computed and yields logits.
  int32_t h;
  RG_REQUIRE_OK(add(s, 2, p, 8, 1, now, &h));
  rg_sched_batch_t b;
  RG_REQUIRE_OK(rg_sched_schedule(s, now += 0.01, &b));
  RG_REQUIRE(b.n_entries == 1);
  RG_CHECK(b.entries[0].pos == 4 && b.entries[0].n == 4 && b.entries[0].want_logits);
  // The recomputed twin of a cached block stays private: the index keeps
  // the first, and the twin is freed, not cached, at the end.
  int32_t twin = b.entries[0].blocks[1];
  rg_sched_block_info_t bi;
  RG_REQUIRE_OK(rg_sched_block_info(s, twin, &bi));
  RG_CHECK(!bi.cached_key);
  RG_REQUIRE_OK(commit_all(s, &b, now += 0.01, 0));
  RG_CHECK(block_state(s, twin) == RG_SCHED_BLOCK_FREE);
  rg_sched_stats(s, &st);
  RG_CHECK(st.prefix_hit_tokens == 4 && st.prefix_lookup_tokens == 16 && st.blocks_cached == 2);
  RG_CHECK_OK(rg_sched_check(s));
  rg_sched_destroy(s);
}

// The key the header documents: XXH3 of the block's int32 tokens, seeded
// with the parent's key (0 for the first block).
static uint64_t key_of(const int32_t *tokens, int bs, uint64_t parent, uint64_t mask) {
  return XXH3_64bits_withSeed(tokens, (size_t)bs * sizeof(int32_t), parent) & mask;
}

RG_TEST(sched_prefix_key_is_the_documented_hash_chain) {
  rg_sched_t *s = cached_sched(t, 16, 0);
  RG_REQUIRE(s);
  int32_t p[9];
  fill(p, 9, 40);
  int32_t h;
  RG_REQUIRE_OK(add(s, 1, p, 9, 1, 0, &h));
  rg_sched_batch_t b;
  RG_REQUIRE_OK(rg_sched_schedule(s, 0, &b));
  int32_t blk[2] = {b.entries[0].blocks[0], b.entries[0].blocks[1]};
  RG_REQUIRE_OK(commit_all(s, &b, 0.1, 0));
  rg_sched_block_info_t b0, b1;
  RG_REQUIRE_OK(rg_sched_block_info(s, blk[0], &b0));
  RG_REQUIRE_OK(rg_sched_block_info(s, blk[1], &b1));
  uint64_t k0 = key_of(p, 4, 0, UINT64_MAX);
  RG_CHECK(b0.cached_key && b0.key == k0);
  RG_CHECK(b1.cached_key && b1.key == key_of(p + 4, 4, k0, UINT64_MAX));
  RG_CHECK_ERR(rg_sched_block_info(s, 16, &b0), "block 16 is not in the pool of 16 blocks");
  rg_sched_destroy(s);
}

RG_TEST(sched_prefix_collision_never_shares_wrong_kv) {
  // One key bit: two different blocks with equal keys are easy to make.
  rg_sched_t *s = cached_sched(t, 32, 1);
  RG_REQUIRE(s);
  int32_t x[5] = {10, 11, 12, 13, 99}, y[5] = {10, 11, 12, 0, 99};
  while (key_of(y, 4, 0, 1) != key_of(x, 4, 0, 1) || y[3] == x[3]) y[3]++;
  double now = 0;
  int32_t hx = run_alone(t, s, 1, x, 5, &now);
  rg_sched_request_info_t info;
  RG_REQUIRE_OK(rg_sched_request_info(s, hx, &info));
  RG_CHECK(info.n_cached_tokens == 0);
  // y's first block has x's key but other tokens: no hit, computed afresh.
  int32_t hy = run_alone(t, s, 2, y, 5, &now);
  RG_REQUIRE_OK(rg_sched_request_info(s, hy, &info));
  RG_CHECK(info.n_cached_tokens == 0);
  // x's own tokens still hit x's block.
  int32_t x2[5] = {10, 11, 12, 13, 42};
  int32_t hx2 = run_alone(t, s, 3, x2, 5, &now);
  RG_REQUIRE_OK(rg_sched_request_info(s, hx2, &info));
  RG_CHECK(info.n_cached_tokens == 4);
  // A second block after y's (uncached) first one is not entered either:
  // nothing could chain to it.
  int32_t y9[9] = {10, 11, 12, y[3], 1, 2, 3, 4, 5};
  run_alone(t, s, 4, y9, 9, &now);
  int32_t h;
  RG_REQUIRE_OK(add(s, 5, y9, 9, 1, now, &h));
  rg_sched_batch_t b;
  RG_REQUIRE_OK(rg_sched_schedule(s, now += 0.01, &b));
  RG_REQUIRE(b.n_entries == 1);
  RG_CHECK(b.entries[0].pos == 0);
  RG_REQUIRE_OK(commit_all(s, &b, now += 0.01, 0));
  rg_sched_stats_t st;
  rg_sched_stats(s, &st);
  RG_CHECK(st.blocks_cached == 1);  // x's block alone
  RG_CHECK_OK(rg_sched_check(s));
  rg_sched_destroy(s);
}

// A block's KV depends on every token before it, not only on its own: a
// child entered under a parent block that has since been evicted and
// refilled with other tokens (with a colliding key) must not match.
RG_TEST(sched_prefix_child_of_a_reused_parent_never_matches) {
  rg_sched_config_t c = base_config();
  c.block_size = 2;
  c.n_blocks = 12;
  c.prefix_cache = 1;
  c.hash_bits = 1;
  rg_sched_t *s;
  RG_REQUIRE_OK(rg_sched_create(&c, &s));
  // x and z: different first blocks with one key; cd: a second block whose
  // key differs from it, so both can be indexed at once.
  int32_t x[2] = {1, 2}, z[2] = {3, 4}, cd[2] = {5, 6};
  uint64_t k0 = key_of(x, 2, 0, 1);
  while (key_of(z, 2, 0, 1) != k0) z[1]++;
  while (key_of(cd, 2, k0, 1) == k0) cd[1]++;
  int32_t y[4] = {x[0], x[1], cd[0], cd[1]}, w[15], q[5] = {z[0], z[1], cd[0], cd[1], 8};
  fill(w, 15, 500);
  int32_t hx, hy, hw, hz, hq;
  RG_REQUIRE_OK(add(s, 1, x, 2, 1, 0, &hx));
  RG_REQUIRE_OK(add(s, 2, y, 4, 8, 0, &hy));
  RG_REQUIRE_OK(add(s, 3, w, 15, 8, 0, &hw));
  rg_sched_batch_t b;
  // x computes block x; y computes its own twin of it (both missed) and
  // enters its block cd as the child of x's block. w fills the pool.
  RG_REQUIRE_OK(rg_sched_schedule(s, 0, &b));
  RG_REQUIRE(b.n_entries == 3);
  int32_t xblock = b.entries[0].blocks[0];
  RG_REQUIRE_OK(commit_all(s, &b, 0.1, 0));
  RG_CHECK(state_of(s, hx) == RG_SCHED_FINISHED && block_state(s, xblock) == RG_SCHED_BLOCK_CACHED);
  rg_sched_stats_t st;
  rg_sched_stats(s, &st);
  RG_REQUIRE(st.blocks_free == 1 && st.blocks_cached == 1);
  // y's next decode takes the free block; z reclaims x's cached one, and
  // enters it under the same key with its own tokens.
  RG_REQUIRE_OK(add(s, 4, z, 2, 1, 0.15, &hz));
  RG_REQUIRE_OK(rg_sched_schedule(s, 0.2, &b));
  const rg_sched_entry_t *e = entry_of(&b, hz);
  RG_REQUIRE(e && e->blocks[0] == xblock);
  RG_REQUIRE_OK(commit_all(s, &b, 0.3, 0));
  RG_REQUIRE_OK(rg_sched_abort(s, hw, 0.3));
  // q = z + cd: z's block matches, but y's cd was computed after x.
  RG_REQUIRE_OK(add(s, 5, q, 5, 1, 0.3, &hq));
  RG_REQUIRE_OK(rg_sched_schedule(s, 0.4, &b));
  e = entry_of(&b, hq);
  RG_REQUIRE(e);
  RG_CHECK(e->pos == 2 && e->blocks[0] == xblock);
  RG_REQUIRE_OK(commit_all(s, &b, 0.5, 0));
  // y still runs on its own blocks, cd among them.
  RG_CHECK(state_of(s, hy) == RG_SCHED_DECODING);
  RG_CHECK_OK(rg_sched_check(s));
  rg_sched_destroy(s);
}

RG_TEST(sched_lru_evicts_oldest_and_chain_tails_first) {
  rg_sched_t *s = cached_sched(t, 6, 0);
  RG_REQUIRE(s);
  int32_t pa[8], pb[8], pc[12];
  fill(pa, 8, 100);
  fill(pb, 8, 200);
  fill(pc, 12, 300);
  double now = 0;
  rg_sched_batch_t b;
  int32_t h;
  // Record A's and B's block ids from their batches.
  RG_REQUIRE_OK(add(s, 1, pa, 8, 1, 0, &h));
  RG_REQUIRE_OK(rg_sched_schedule(s, now += 0.01, &b));
  int32_t a0 = b.entries[0].blocks[0], a1 = b.entries[0].blocks[1];
  RG_REQUIRE_OK(commit_all(s, &b, now += 0.01, 0));
  RG_REQUIRE_OK(add(s, 2, pb, 8, 1, 0, &h));
  RG_REQUIRE_OK(rg_sched_schedule(s, now += 0.01, &b));
  int32_t b0 = b.entries[0].blocks[0], b1 = b.entries[0].blocks[1];
  RG_REQUIRE_OK(commit_all(s, &b, now += 0.01, 0));
  rg_sched_stats_t st;
  rg_sched_stats(s, &st);
  RG_CHECK(st.blocks_cached == 4 && st.blocks_free == 2);
  // C needs 3 blocks: the 2 free ones, then the least recently used
  // cached block. A was released first, its tail block before its head.
  run_alone(t, s, 3, pc, 12, &now);
  uint64_t ka0 = key_of(pa, 4, 0, UINT64_MAX), kb0 = key_of(pb, 4, 0, UINT64_MAX);
  rg_sched_block_info_t bi;
  RG_REQUIRE_OK(rg_sched_block_info(s, a1, &bi));
  RG_CHECK(bi.key != key_of(pa + 4, 4, ka0, UINT64_MAX));  // now holds C's third block
  RG_REQUIRE_OK(rg_sched_block_info(s, a0, &bi));
  RG_CHECK(bi.state == RG_SCHED_BLOCK_CACHED && bi.key == ka0);
  RG_REQUIRE_OK(rg_sched_block_info(s, b0, &bi));
  RG_CHECK(bi.state == RG_SCHED_BLOCK_CACHED && bi.key == kb0);
  RG_REQUIRE_OK(rg_sched_block_info(s, b1, &bi));
  RG_CHECK(bi.state == RG_SCHED_BLOCK_CACHED && bi.key == key_of(pb + 4, 4, kb0, UINT64_MAX));
  rg_sched_stats(s, &st);
  RG_CHECK(st.blocks_evicted == 1);
  // A's head block outlived its tail: A again hits one block.
  int32_t ha2 = run_alone(t, s, 5, pa, 8, &now);
  rg_sched_request_info_t info;
  RG_REQUIRE_OK(rg_sched_request_info(s, ha2, &info));
  RG_CHECK(info.n_cached_tokens == 4);
  RG_CHECK_OK(rg_sched_check(s));
  rg_sched_destroy(s);
}

// --- abort, fail, misuse -------------------------------------------------------

RG_TEST(sched_abort_and_fail_in_every_state_return_blocks) {
  rg_sched_config_t c = base_config();
  c.n_blocks = 8;
  c.n_swap_blocks = 8;
  c.preempt = RG_SCHED_PREEMPT_SWAP;
  c.max_batch_tokens = 8;
  rg_sched_t *s;
  RG_REQUIRE_OK(rg_sched_create(&c, &s));
  int32_t p[20], hW, hP, hD;
  fill(p, 20, 1);
  RG_REQUIRE_OK(add(s, 1, p, 4, 20, 0, &hD));
  RG_REQUIRE_OK(add(s, 2, p, 20, 4, 0, &hP));
  rg_sched_batch_t b;
  RG_REQUIRE_OK(rg_sched_schedule(s, 0, &b));
  RG_REQUIRE_OK(commit_all(s, &b, 0.1, 0));
  RG_REQUIRE_OK(add(s, 3, p, 4, 4, 5.0, &hW));  // arrives later: stays waiting
  RG_CHECK(state_of(s, hD) == RG_SCHED_DECODING && state_of(s, hP) == RG_SCHED_PREFILLING);
  RG_REQUIRE_OK(rg_sched_fail(s, hP, 0.2, "worker 3 (cuda:1) stopped answering"));
  RG_REQUIRE_OK(rg_sched_abort(s, hW, 0.2));
  rg_sched_request_info_t info;
  RG_REQUIRE_OK(rg_sched_request_info(s, hP, &info));
  RG_CHECK(info.state == RG_SCHED_FAILED && info.finished == 0.2 && info.n_blocks == 0);
  RG_CHECK(strcmp(info.reason, "worker 3 (cuda:1) stopped answering") == 0);
  RG_REQUIRE_OK(rg_sched_request_info(s, hW, &info));
  RG_CHECK(info.state == RG_SCHED_ABORTED && strcmp(info.reason, "aborted") == 0);
  RG_CHECK_ERR(rg_sched_abort(s, hW, 0.3), "request 3 (handle 2) has already been aborted");
  RG_CHECK_ERR(rg_sched_fail(s, hP, 0.3, "x"), "request 2 (handle 1) has already failed");
  RG_CHECK_ERR(rg_sched_fail(s, hD, 0.3, ""), "a reason is required");
  RG_CHECK_ERR(rg_sched_abort(s, 77, 0.3), "rg_sched_abort: request handle 77 is not in use");

  // In the outstanding batch: ended at once, skipped at commit; a result
  // for it is accepted and ignored.
  RG_REQUIRE_OK(rg_sched_schedule(s, 0.4, &b));
  RG_REQUIRE(entry_of(&b, hD));
  rg_sched_result_t r = {hD, 5, 0};
  RG_REQUIRE_OK(rg_sched_abort(s, hD, 0.45));
  rg_sched_stats_t st;
  rg_sched_stats(s, &st);
  RG_CHECK(st.blocks_used == 0);
  RG_CHECK_OK(rg_sched_check(s));
  RG_REQUIRE_OK(rg_sched_commit(s, 0.5, &r, 1));
  RG_REQUIRE_OK(rg_sched_request_info(s, hD, &info));
  RG_CHECK(info.state == RG_SCHED_ABORTED && info.n_output == 1);

  // Swapped: its swap blocks return. Fill the pool with two decoders until
  // one is swapped out.
  int32_t h1, h2;
  RG_REQUIRE_OK(add(s, 4, p, 12, 12, 0, &h1));
  RG_REQUIRE_OK(add(s, 5, p, 12, 12, 0, &h2));
  double now = 0.6;
  for (int k = 0; k < 40 && state_of(s, h2) != RG_SCHED_SWAPPED; k++) {
    RG_REQUIRE_OK(rg_sched_schedule(s, now += 0.01, &b));
    RG_REQUIRE_OK(commit_all(s, &b, now += 0.01, 0));
  }
  RG_REQUIRE(state_of(s, h2) == RG_SCHED_SWAPPED);
  rg_sched_stats(s, &st);
  RG_CHECK(st.swap_used > 0);
  RG_REQUIRE_OK(rg_sched_fail(s, h2, now, "swap tier device lost"));
  RG_REQUIRE_OK(rg_sched_abort(s, h1, now));
  rg_sched_stats(s, &st);
  RG_CHECK(st.swap_used == 0 && st.blocks_used == 0 && st.total_failed == 2 &&
           st.total_aborted == 3);
  RG_CHECK(st.n_state[RG_SCHED_SWAPPED] == 0 && st.n_state[RG_SCHED_FAILED] == 2);
  RG_CHECK_OK(rg_sched_check(s));
  // Releasing an active request aborts it first.
  int32_t h3;
  RG_REQUIRE_OK(add(s, 6, p, 4, 4, 0, &h3));
  RG_REQUIRE_OK(rg_sched_schedule(s, now += 0.01, &b));
  RG_REQUIRE(entry_of(&b, h3));
  rg_sched_release(s, h3);
  RG_CHECK_OK(rg_sched_check(s));
  r = (rg_sched_result_t){h3, 1, 0};
  RG_CHECK_OK(rg_sched_commit(s, now += 0.01, &r, 1));
  rg_sched_stats(s, &st);
  RG_CHECK(st.blocks_used == 0 && st.total_aborted == 4);
  rg_sched_destroy(s);
}

RG_TEST(sched_misuse_is_an_error_not_a_crash) {
  rg_sched_config_t c = base_config();
  rg_sched_t *s;
  RG_REQUIRE_OK(rg_sched_create(&c, &s));
  RG_CHECK_ERR(rg_sched_commit(s, 0, NULL, 0),
               "no batch is outstanding; call rg_sched_schedule first");
  int32_t p[6], hA, hB, hC;
  fill(p, 6, 1);
  RG_REQUIRE_OK(add(s, 10, p, 6, 5, 0, &hA));
  RG_REQUIRE_OK(add(s, 11, p, 6, 5, 0, &hB));
  RG_REQUIRE_OK(add(s, 12, p, 6, 5, 9, &hC));
  rg_sched_batch_t b;
  RG_REQUIRE_OK(rg_sched_schedule(s, 1, &b));
  RG_REQUIRE(b.n_entries == 2);
  RG_CHECK_ERR(rg_sched_schedule(s, 1, &b),
               "the batch of iteration 1 (2 entries) has not been committed");
  rg_sched_result_t r[3] = {{hA, 1, 0}, {hB, 2, 0}, {hC, 3, 0}};
  RG_CHECK_ERR(rg_sched_commit(s, 2, r, 3),
               "result 2 names request handle 2, which has no entry in the batch of iteration 1");
  r[2] = (rg_sched_result_t){hA, 3, 0};
  RG_CHECK_ERR(rg_sched_commit(s, 2, r, 3),
               "result 2 is a second result for request 10 (handle 0)");
  r[1].token = -4;
  RG_CHECK_ERR(rg_sched_commit(s, 2, r, 2),
               "result 1 for request 11 (handle 1) has token -4; token ids must be >= 0");
  RG_CHECK_ERR(rg_sched_commit(s, 2, r, 1),
               "request 11 (handle 1) has an entry that yields logits in this batch but no result");
  RG_CHECK_ERR(rg_sched_commit(s, 2, NULL, 2), "2 results announced but none given");
  r[1].token = 2;
  RG_CHECK_ERR(rg_sched_commit(s, 0.5, r, 2),
               "rg_sched_commit: time went backwards: 0.5 s is before 1 s");
  RG_CHECK_ERR(rg_sched_commit(s, NAN, r, 2), "time nan is not a finite number of seconds");
  // Nothing was committed by the failed calls: a correct one still works.
  RG_CHECK_OK(rg_sched_check(s));
  RG_REQUIRE_OK(rg_sched_commit(s, 2, r, 2));
  rg_sched_request_info_t info;
  RG_REQUIRE_OK(rg_sched_request_info(s, hA, &info));
  RG_CHECK(info.n_output == 1 && info.output[0] == 1);
  RG_CHECK_ERR(rg_sched_commit(s, 2, r, 2), "no batch is outstanding");
  RG_CHECK_ERR(rg_sched_schedule(s, 1.5, &b), "rg_sched_schedule: time went backwards");
  RG_CHECK_ERR(rg_sched_abort(s, hA, 1.5), "rg_sched_abort: time went backwards");
  RG_CHECK_ERR(rg_sched_request_info(s, -1, &info), "request handle -1 is not in use");
  // An empty batch needs no commit.
  RG_REQUIRE_OK(rg_sched_abort(s, hA, 3));
  RG_REQUIRE_OK(rg_sched_abort(s, hB, 3));
  RG_REQUIRE_OK(rg_sched_schedule(s, 3, &b));
  RG_CHECK(b.n_entries == 0);
  RG_REQUIRE_OK(rg_sched_schedule(s, 9, &b));
  RG_CHECK(b.n_entries == 1 && b.entries[0].req == hC);
  RG_CHECK_OK(commit_all(s, &b, 9.5, 0));
  rg_sched_destroy(s);
}

RG_TEST(sched_check_finds_corruption) {
  rg_sched_config_t c = base_config();
  c.prefix_cache = 1;
  rg_sched_t *s;
  RG_REQUIRE_OK(rg_sched_create(&c, &s));
  int32_t p[9], h;
  fill(p, 9, 1);
  RG_REQUIRE_OK(add(s, 1, p, 9, 4, 0, &h));
  rg_sched_batch_t b;
  RG_REQUIRE_OK(rg_sched_schedule(s, 0, &b));
  RG_REQUIRE_OK(commit_all(s, &b, 0.1, 0));
  RG_REQUIRE_OK(rg_sched_check(s));
  int32_t used = b.entries[0].blocks[0];
  s->blocks[used].ref++;
  RG_CHECK_ERR(rg_sched_check(s), "has refcount 2 but 1 block tables hold it");
  s->blocks[used].ref--;
  int32_t top = s->free_list[s->n_free - 1];
  s->free_list[s->n_free - 2] = top;
  RG_CHECK_ERR(rg_sched_check(s), "is on the free list twice");
  s->free_list[s->n_free - 2] = top + 1;  // the stack's ids fall toward its top
  RG_CHECK_OK(rg_sched_check(s));
  s->reqs[h].n_table--;
  RG_CHECK_ERR(rg_sched_check(s), "holds 2 device and 0 swap blocks; expected 3");
  s->reqs[h].n_table++;
  s->st.n_state[RG_SCHED_WAITING]++;
  RG_CHECK_ERR(rg_sched_check(s), "0 requests are waiting but the count says 1");
  s->st.n_state[RG_SCHED_WAITING]--;
  RG_CHECK_OK(rg_sched_check(s));
  rg_sched_destroy(s);
}

// --- imports (prefill-decode disaggregation) -----------------------------------

static rg_status_t add_imported(rg_sched_t *s, uint64_t id, const int32_t *p, size_t n,
                                int64_t max_tokens, double arrival, size_t n_computed,
                                const int32_t *gen, size_t n_gen, int32_t *h) {
  rg_sched_request_t q = {
      .id = id, .prompt = p, .n_prompt = n, .max_tokens = max_tokens, .arrival = arrival};
  return rg_sched_add_imported(s, &q, n_computed, gen, n_gen, h);
}

static const rg_sched_import_t *import_of(const rg_sched_batch_t *b, int32_t h) {
  for (size_t i = 0; i < b->n_imports; i++)
    if (b->imports[i].req == h) return &b->imports[i];
  return NULL;
}

RG_TEST(sched_import_and_tier_refuse_bad_input) {
  rg_sched_t *s = NULL;
  rg_sched_config_t c = base_config();
  c.n_tier_blocks = 8;
  RG_CHECK_ERR(rg_sched_create(&c, &s),
               "n_tier_blocks 8 needs prefix_cache on: the capacity tier holds only cached blocks");
  c.prefix_cache = 1;
  c.n_tier_blocks = -1;
  RG_CHECK_ERR(rg_sched_create(&c, &s),
               "n_tier_blocks -1 is out of range; use 0 (no capacity tier) to 2147483582");
  c.n_tier_blocks = 0;
  c.retention_s = 5;
  RG_CHECK_ERR(rg_sched_create(&c, &s), "retention_s 5 s is set but n_tier_blocks is 0");
  c.n_tier_blocks = 8;
  c.retention_s = -1;
  RG_CHECK_ERR(rg_sched_create(&c, &s),
               "retention_s -1 must be a finite number of seconds >= 0 (0 = move idle blocks");
  c.retention_s = INFINITY;
  RG_CHECK_ERR(rg_sched_create(&c, &s), "retention_s inf must be a finite number");
  RG_CHECK(s == NULL);
  c.retention_s = 2;
  RG_REQUIRE_OK(rg_sched_create(&c, &s));
  rg_sched_config_t got;
  rg_sched_get_config(s, &got);
  RG_CHECK(got.n_tier_blocks == 8 && got.retention_s == 2);

  int32_t p[8], g[4] = {5, 6, 7, 8}, neg[2] = {5, -2}, h = 0;
  fill(p, 8, 1);
  RG_CHECK_ERR(rg_sched_add_imported(s, NULL, 8, g, 1, &h),
               "rg_sched_add_imported: no request given");
  RG_CHECK_ERR(add_imported(s, 21, p, 8, 4, 0, 8, g, 0, &h),
               "request 21: an imported request needs the tokens generated so far");
  RG_CHECK_ERR(add_imported(s, 21, p, 8, 4, 0, 8, NULL, 1, &h),
               "request 21: n_generated is 1 but no generated tokens were given");
  RG_CHECK_ERR(
      add_imported(s, 21, p, 8, 4, 0, 8, g, 4, &h),
      "request 21: 4 tokens generated already leave none of max_tokens 4 to generate here");
  RG_CHECK_ERR(add_imported(s, 21, p, 8, 4, 0, 8, neg, 2, &h),
               "request 21: generated token 1 is -2; token ids must be >= 0");
  RG_CHECK_ERR(add_imported(s, 21, p, 8, 4, 0, 0, g, 1, &h),
               "request 21: n_computed 0 is out of range; of its 9 known tokens (prompt 8 + "
               "generated 1), positions 1 to 8 can have KV computed elsewhere");
  RG_CHECK_ERR(add_imported(s, 21, p, 8, 4, 0, 9, g, 1, &h), "n_computed 9 is out of range");
  // The checks every request gets apply too.
  RG_CHECK_ERR(add_imported(s, 22, p, 8, 250, 0, 8, g, 1, &h),
               "request 22: prompt of 8 tokens plus 250 to generate exceeds max_context 256");
  RG_CHECK_ERR(add_imported(s, 23, p, 0, 4, 0, 1, g, 1, &h), "request 23: the prompt is empty");
  RG_CHECK(h == -1);
  rg_sched_stats_t st;
  rg_sched_stats(s, &st);
  RG_CHECK(st.n_state[RG_SCHED_WAITING] == 0 && st.tier_free == 8 && st.tier_used == 0);
  rg_sched_block_info_t bi;
  RG_CHECK_ERR(rg_sched_tier_block_info(s, 8, &bi),
               "rg_sched_tier_block_info: block 8 is not in the capacity tier of 8 blocks");
  RG_REQUIRE_OK(rg_sched_tier_block_info(s, 0, &bi));
  RG_CHECK(bi.state == RG_SCHED_BLOCK_FREE && !bi.cached_key);
  RG_CHECK_OK(rg_sched_check(s));
  rg_sched_destroy(s);
}

RG_TEST(sched_import_is_admitted_as_a_decode_with_its_import) {
  rg_sched_config_t c = base_config();
  c.prefix_cache = 1;
  rg_sched_t *s;
  RG_REQUIRE_OK(rg_sched_create(&c, &s));
  int32_t pa[80], p[10], g = 77, hA, hB, hC;
  fill(pa, 80, 500);
  fill(p, 10, 100);
  // A long prefill already started, so the batch holds both kinds.
  RG_REQUIRE_OK(add(s, 1, pa, 80, 4, 0, &hA));
  rg_sched_batch_t b;
  RG_REQUIRE_OK(rg_sched_schedule(s, 0, &b));
  RG_REQUIRE_OK(commit_all(s, &b, 0.05, 0));
  RG_REQUIRE_OK(add_imported(s, 2, p, 10, 5, 0.05, 10, &g, 1, &hB));
  rg_sched_request_info_t info;
  RG_REQUIRE_OK(rg_sched_request_info(s, hB, &info));
  RG_CHECK(info.state == RG_SCHED_WAITING && info.n_output == 1 && info.output[0] == 77);
  RG_CHECK(info.n_computed == 0 && info.n_blocks == 0);

  RG_REQUIRE_OK(rg_sched_schedule(s, 0.1, &b));
  RG_REQUIRE(b.n_entries == 2);
  // Admitted straight into the decodes, ahead of the started prefill.
  const rg_sched_entry_t *e = &b.entries[0];
  RG_CHECK(e->req == hB && e->id == 2 && e->pos == 10 && e->n == 1 && !e->is_prefill);
  RG_CHECK(e->want_logits && e->tokens[0] == 77 && e->n_blocks == 3);
  RG_CHECK(b.entries[1].req == hA && b.entries[1].pos == 64 && b.entries[1].is_prefill);
  RG_CHECK(b.n_decode_tokens == 1 && b.n_prefill_tokens == 16);
  RG_CHECK(state_of(s, hB) == RG_SCHED_DECODING);
  // Its whole prompt is imported into its own blocks, before the step.
  RG_REQUIRE(b.n_imports == 1);
  const rg_sched_import_t *im = &b.imports[0];
  RG_CHECK(im->req == hB && im->id == 2 && im->pos_begin == 0 && im->pos_end == 10);
  RG_REQUIRE(im->n_blocks == 3);
  for (int i = 0; i < 3; i++) {
    RG_CHECK(im->blocks[i] == e->blocks[i]);
    RG_CHECK(refcount(s, im->blocks[i]) == 1);
  }
  int32_t blk[3] = {e->blocks[0], e->blocks[1], e->blocks[2]};
  RG_CHECK_OK(rg_sched_check(s));
  RG_REQUIRE_OK(commit_all(s, &b, 0.2, 0));
  RG_REQUIRE_OK(rg_sched_request_info(s, hB, &info));
  RG_CHECK(info.n_output == 2 && info.output[1] == token_for(2, 11) && info.n_computed == 11);
  RG_CHECK(info.n_import_tokens == 10 && info.n_cached_tokens == 0 && info.first_token == 0.2);
  // Once imported its blocks are ordinary: the full ones joined the index.
  rg_sched_block_info_t bi;
  uint64_t k0 = key_of(p, 4, 0, UINT64_MAX);
  RG_REQUIRE_OK(rg_sched_block_info(s, blk[0], &bi));
  RG_CHECK(bi.cached_key && bi.key == k0);
  RG_REQUIRE_OK(rg_sched_block_info(s, blk[1], &bi));
  RG_CHECK(bi.cached_key && bi.key == key_of(p + 4, 4, k0, UINT64_MAX));
  RG_REQUIRE_OK(rg_sched_block_info(s, blk[2], &bi));
  RG_CHECK(!bi.cached_key);
  rg_sched_stats_t st;
  rg_sched_stats(s, &st);
  RG_CHECK(st.imports == 1 && st.import_tokens == 10 && st.import_blocks == 3);
  RG_REQUIRE_OK(rg_sched_schedule(s, 0.3, &b));
  e = entry_of(&b, hB);
  RG_REQUIRE(e);
  RG_CHECK(e->pos == 11 && !e->is_prefill && b.n_imports == 0);
  RG_REQUIRE_OK(commit_all(s, &b, 0.4, 0));

  // Imported short of its last known token, it prefills the known tokens
  // in between: the rest of the prompt and the tokens generated elsewhere.
  int32_t pc[10], gc[3] = {7, 8, 9};
  fill(pc, 10, 300);
  RG_REQUIRE_OK(add_imported(s, 3, pc, 10, 6, 0.4, 6, gc, 3, &hC));
  RG_REQUIRE_OK(rg_sched_schedule(s, 0.5, &b));
  e = entry_of(&b, hC);
  RG_REQUIRE(e && e == &b.entries[b.n_entries - 1]);
  RG_CHECK(e->pos == 6 && e->n == 7 && e->is_prefill && e->want_logits && e->n_blocks == 4);
  RG_CHECK(e->tokens[3] == 309 && e->tokens[4] == 7 && e->tokens[6] == 9);
  RG_CHECK(state_of(s, hC) == RG_SCHED_PREFILLING);
  im = import_of(&b, hC);
  RG_REQUIRE(im && b.n_imports == 1);
  RG_CHECK(im->pos_begin == 0 && im->pos_end == 6 && im->n_blocks == 2);
  RG_CHECK(im->blocks[0] == e->blocks[0] && im->blocks[1] == e->blocks[1]);
  RG_REQUIRE_OK(commit_all(s, &b, 0.6, 0));
  RG_REQUIRE_OK(rg_sched_request_info(s, hC, &info));
  RG_CHECK(info.state == RG_SCHED_DECODING && info.n_output == 4 &&
           info.output[3] == token_for(3, 13));
  RG_CHECK_OK(rg_sched_check(s));
  rg_sched_destroy(s);
}

RG_TEST(sched_import_prefix_hit_shrinks_the_import) {
  rg_sched_t *s = cached_sched(t, 32, 0);
  RG_REQUIRE(s);
  int32_t x[12], y[12], g = 55, hy, hz;
  fill(x, 12, 100);
  memcpy(y, x, 8 * sizeof(int32_t));
  fill(y + 8, 4, 900);
  double now = 0;
  run_alone(t, s, 1, x, 12, &now);
  uint64_t k0 = key_of(x, 4, 0, UINT64_MAX), k1 = key_of(x + 4, 4, k0, UINT64_MAX);
  // y's first 8 positions are cached here: only the rest is sent.
  RG_REQUIRE_OK(add_imported(s, 2, y, 12, 3, now, 12, &g, 1, &hy));
  rg_sched_batch_t b;
  RG_REQUIRE_OK(rg_sched_schedule(s, now += 0.01, &b));
  RG_REQUIRE(b.n_entries == 1 && b.n_imports == 1);
  const rg_sched_entry_t *e = &b.entries[0];
  RG_CHECK(e->pos == 12 && !e->is_prefill && e->n_blocks == 4 && e->tokens[0] == 55);
  const rg_sched_import_t *im = &b.imports[0];
  RG_CHECK(im->pos_begin == 8 && im->pos_end == 12 && im->n_blocks == 1);
  RG_CHECK(im->blocks[0] == e->blocks[2]);
  rg_sched_block_info_t bi;
  RG_REQUIRE_OK(rg_sched_block_info(s, e->blocks[0], &bi));
  RG_CHECK(bi.key == k0 && bi.state == RG_SCHED_BLOCK_USED);
  RG_REQUIRE_OK(rg_sched_block_info(s, e->blocks[1], &bi));
  RG_CHECK(bi.key == k1);
  int32_t x0 = e->blocks[0];
  rg_sched_request_info_t info;
  RG_REQUIRE_OK(rg_sched_request_info(s, hy, &info));
  RG_CHECK(info.n_cached_tokens == 8 && info.n_import_tokens == 4 && info.n_computed == 12);
  rg_sched_stats_t st;
  rg_sched_stats(s, &st);
  RG_CHECK(st.import_tokens == 4 && st.import_blocks == 1 && st.prefix_hit_tokens == 8);
  RG_REQUIRE_OK(commit_all(s, &b, now += 0.01, 0));
  // A prompt whose every full block is cached here imports nothing.
  RG_REQUIRE_OK(add_imported(s, 3, x, 12, 3, now, 12, &g, 1, &hz));
  RG_REQUIRE_OK(rg_sched_schedule(s, now += 0.01, &b));
  e = entry_of(&b, hz);
  RG_REQUIRE(e);
  RG_CHECK(b.n_imports == 0 && e->pos == 12 && !e->is_prefill && e->blocks[0] == x0);
  RG_CHECK(refcount(s, x0) == 2);
  RG_REQUIRE_OK(rg_sched_request_info(s, hz, &info));
  RG_CHECK(info.n_cached_tokens == 12 && info.n_import_tokens == 0);
  rg_sched_stats(s, &st);
  RG_CHECK(st.imports == 2 && st.import_tokens == 4);
  RG_CHECK_OK(rg_sched_check(s));
  RG_REQUIRE_OK(commit_all(s, &b, now += 0.01, 0));
  rg_sched_destroy(s);
}

RG_TEST(sched_import_waits_its_turn_within_caps_and_watermark) {
  rg_sched_config_t c = base_config();
  c.n_blocks = 10;
  c.watermark_blocks = 2;
  c.max_seqs = 2;
  rg_sched_t *s;
  RG_REQUIRE_OK(rg_sched_create(&c, &s));
  int32_t p[16], g = 3, hA, hI, hC, hJ;
  fill(p, 16, 0);
  RG_REQUIRE_OK(add(s, 1, p, 16, 8, 0, &hA));
  // I needs 5 blocks; 4 of the 10 go to A, and 5 + the watermark's 2 > 6.
  RG_REQUIRE_OK(add_imported(s, 2, p, 16, 8, 0, 16, &g, 1, &hI));
  // C would fit, but waits behind I: first come, first served.
  RG_REQUIRE_OK(add(s, 3, p, 2, 2, 0, &hC));
  rg_sched_batch_t b;
  RG_REQUIRE_OK(rg_sched_schedule(s, 0, &b));
  RG_CHECK(b.n_entries == 1 && b.entries[0].req == hA && b.n_imports == 0);
  RG_CHECK(state_of(s, hI) == RG_SCHED_WAITING && state_of(s, hC) == RG_SCHED_WAITING);
  RG_REQUIRE_OK(commit_all(s, &b, 0.1, 0));
  RG_REQUIRE_OK(rg_sched_abort(s, hA, 0.1));
  // Not before its arrival either.
  RG_REQUIRE_OK(add_imported(s, 4, p, 4, 4, 5.0, 4, &g, 1, &hJ));
  RG_REQUIRE_OK(rg_sched_schedule(s, 0.2, &b));
  RG_REQUIRE(b.n_entries == 2 && b.n_imports == 1);
  RG_CHECK(b.entries[0].req == hI && !b.entries[0].is_prefill && b.entries[0].pos == 16);
  RG_CHECK(b.entries[1].req == hC && b.entries[1].is_prefill);
  RG_REQUIRE_OK(commit_all(s, &b, 0.3, 0));
  // max_seqs 2: J, arrived now, waits for a sequence slot.
  RG_REQUIRE_OK(rg_sched_schedule(s, 5.0, &b));
  RG_CHECK(b.n_entries == 2 && !entry_of(&b, hJ) && state_of(s, hJ) == RG_SCHED_WAITING);
  RG_REQUIRE_OK(commit_all(s, &b, 5.1, 0));  // C finishes (max_tokens 2)
  RG_CHECK(state_of(s, hC) == RG_SCHED_FINISHED);
  RG_REQUIRE_OK(rg_sched_schedule(s, 5.2, &b));
  const rg_sched_entry_t *e = entry_of(&b, hJ);
  RG_REQUIRE(e);
  RG_CHECK(e->pos == 4 && !e->is_prefill && b.n_imports == 1 && b.imports[0].req == hJ);
  RG_CHECK_OK(rg_sched_check(s));
  RG_REQUIRE_OK(commit_all(s, &b, 5.3, 0));
  rg_sched_destroy(s);
}

// A (normal, 4-token prompt) and B (3-token prompt imported with its first
// token) decode in step in a pool of 4 blocks of 4, until A's third block
// preempts B, the newer.
static void import_preempt_setup(rg_test_ctx_t *t, rg_sched_t *s, int32_t *hA, int32_t *hB,
                                 double *now, rg_sched_batch_t *b) {
  int32_t pa[4] = {1, 2, 3, 4}, pb[3] = {5, 6, 7}, g = 8;
  RG_CHECK_OK(add(s, 1, pa, 4, 8, 0, hA));
  RG_CHECK_OK(add_imported(s, 2, pb, 3, 8, 0, 3, &g, 1, hB));
  for (;;) {
    RG_CHECK_OK(rg_sched_schedule(s, *now, b));
    RG_CHECK_OK(rg_sched_check(s));
    if (b->n_preempted || b->n_entries == 0) return;
    RG_CHECK_OK(commit_all(s, b, *now += 0.01, 0));
    *now += 0.01;
  }
}

RG_TEST(sched_import_preempted_by_recompute_recomputes_its_prompt) {
  rg_sched_config_t c = base_config();
  c.n_blocks = 4;
  rg_sched_t *s;
  RG_REQUIRE_OK(rg_sched_create(&c, &s));
  int32_t hA, hB;
  double now = 0;
  rg_sched_batch_t b;
  import_preempt_setup(t, s, &hA, &hB, &now, &b);
  RG_REQUIRE(b.n_preempted == 1 && b.preempted[0] == hB);
  rg_sched_request_info_t ib;
  RG_REQUIRE_OK(rg_sched_request_info(s, hB, &ib));
  RG_CHECK(ib.state == RG_SCHED_WAITING && ib.n_computed == 0 && ib.n_output == 6);
  RG_REQUIRE_OK(commit_all(s, &b, now += 0.01, 0));
  int readmitted = 0;
  while (state_of(s, hB) != RG_SCHED_FINISHED) {
    RG_REQUIRE_OK(rg_sched_schedule(s, now += 0.01, &b));
    RG_CHECK_OK(rg_sched_check(s));
    const rg_sched_entry_t *e = entry_of(&b, hB);
    if (e && !readmitted) {
      // Its prompt's KV is gone from here and elsewhere: it prefills the
      // prompt and every token generated, its own first one included.
      readmitted = 1;
      RG_CHECK(b.n_imports == 0);
      RG_CHECK(e->pos == 0 && e->n == 9 && e->is_prefill && e->want_logits);
      RG_CHECK(e->tokens[0] == 5 && e->tokens[2] == 7 && e->tokens[3] == 8);
    }
    RG_REQUIRE_OK(commit_all(s, &b, now += 0.01, 0));
  }
  RG_CHECK(readmitted);
  RG_REQUIRE_OK(rg_sched_request_info(s, hB, &ib));
  RG_CHECK(ib.n_output == 8 && ib.output[0] == 8 && ib.n_preemptions == 1);
  for (int i = 1; i < 8; i++) RG_CHECK(ib.output[i] == token_for(2, 3 + i));
  RG_CHECK_OK(rg_sched_check(s));
  rg_sched_destroy(s);
}

RG_TEST(sched_import_swapped_aborted_and_failed) {
  rg_sched_config_t c = base_config();
  c.n_blocks = 4;
  c.n_swap_blocks = 8;
  c.preempt = RG_SCHED_PREEMPT_SWAP;
  rg_sched_t *s;
  RG_REQUIRE_OK(rg_sched_create(&c, &s));
  int32_t hA, hB;
  double now = 0;
  rg_sched_batch_t b;
  import_preempt_setup(t, s, &hA, &hB, &now, &b);
  RG_REQUIRE(b.n_preempted == 1 && state_of(s, hB) == RG_SCHED_SWAPPED && b.n_swap_out == 2);
  RG_REQUIRE_OK(commit_all(s, &b, now += 0.01, 0));
  int back = 0;
  while (state_of(s, hB) != RG_SCHED_FINISHED) {
    RG_REQUIRE_OK(rg_sched_schedule(s, now += 0.01, &b));
    const rg_sched_entry_t *e = entry_of(&b, hB);
    if (b.n_swap_in) {
      back = 1;
      RG_REQUIRE(e);
      RG_CHECK(!e->is_prefill && e->pos == 8 && b.n_swap_in == 2 && b.n_imports == 0);
    }
    RG_REQUIRE_OK(commit_all(s, &b, now += 0.01, 0));
  }
  RG_CHECK(back);
  rg_sched_request_info_t ib;
  RG_REQUIRE_OK(rg_sched_request_info(s, hB, &ib));
  for (int i = 1; i < 8; i++) RG_CHECK(ib.output[i] == token_for(2, 3 + i));

  // Aborted while waiting, and in the very batch that lists its import:
  // its blocks return at once and its entry is skipped at commit.
  int32_t p[6], g = 9, hW, hI, hD;
  fill(p, 6, 60);
  RG_REQUIRE_OK(add_imported(s, 3, p, 6, 4, now + 100, 6, &g, 1, &hW));
  RG_REQUIRE_OK(rg_sched_abort(s, hW, now));
  RG_CHECK(state_of(s, hW) == RG_SCHED_ABORTED);
  RG_REQUIRE_OK(add_imported(s, 4, p, 6, 4, now, 6, &g, 1, &hI));
  RG_REQUIRE_OK(rg_sched_schedule(s, now += 0.01, &b));
  RG_REQUIRE(b.n_imports == 1 && b.imports[0].req == hI && entry_of(&b, hI));
  RG_REQUIRE_OK(rg_sched_abort(s, hI, now));
  rg_sched_stats_t st;
  rg_sched_stats(s, &st);
  RG_CHECK(st.blocks_used == 0);
  RG_CHECK_OK(rg_sched_check(s));
  rg_sched_result_t r = {hI, 1, 0};
  RG_REQUIRE_OK(rg_sched_commit(s, now += 0.01, &r, 1));
  RG_CHECK(state_of(s, hI) == RG_SCHED_ABORTED);
  // Failed once decoding, e.g. when the KV it imported turned out bad.
  RG_REQUIRE_OK(add_imported(s, 5, p, 6, 4, now, 6, &g, 1, &hD));
  RG_REQUIRE_OK(rg_sched_schedule(s, now += 0.01, &b));
  RG_REQUIRE_OK(commit_all(s, &b, now += 0.01, 0));
  RG_REQUIRE(state_of(s, hD) == RG_SCHED_DECODING);
  RG_REQUIRE_OK(rg_sched_fail(s, hD, now, "KV page from prefill worker 1 failed its checksum"));
  RG_REQUIRE_OK(rg_sched_request_info(s, hD, &ib));
  RG_CHECK(ib.state == RG_SCHED_FAILED && ib.n_blocks == 0 &&
           strcmp(ib.reason, "KV page from prefill worker 1 failed its checksum") == 0);
  rg_sched_stats(s, &st);
  RG_CHECK(st.blocks_used == 0 && st.swap_used == 0 && st.imports == 3);
  RG_CHECK_OK(rg_sched_check(s));
  rg_sched_destroy(s);
}

// --- the capacity tier (golden-time retention) -------------------------------------

static rg_sched_t *tier_sched(rg_test_ctx_t *t, int64_t n_blocks, int64_t n_tier, double keep) {
  rg_sched_config_t c = base_config();
  c.n_blocks = n_blocks;
  c.prefix_cache = 1;
  c.n_tier_blocks = n_tier;
  c.retention_s = keep;
  rg_sched_t *s = NULL;
  RG_CHECK_OK(rg_sched_create(&c, &s));
  return s;
}

// Schedules one batch, commits it, and returns it (its arrays stay valid
// until the next schedule).
static rg_status_t step(rg_sched_t *s, double at, double done, rg_sched_batch_t *b) {
  RG_RETURN_IF_ERROR(rg_sched_schedule(s, at, b));
  return commit_all(s, b, done, 0);
}

RG_TEST(sched_tier_offloads_idle_blocks_after_the_retention_window) {
  rg_sched_t *s = tier_sched(t, 16, 8, 1.0);
  RG_REQUIRE(s);
  int32_t p[9], h;
  fill(p, 9, 10);
  RG_REQUIRE_OK(add(s, 1, p, 9, 1, 0, &h));
  rg_sched_batch_t b;
  RG_REQUIRE_OK(step(s, 0, 0.25, &b));  // its two full blocks idle from 0.25 on
  int32_t b0 = b.entries[0].blocks[0], b1 = b.entries[0].blocks[1];
  RG_REQUIRE_OK(rg_sched_schedule(s, 1.0, &b));
  RG_CHECK(b.n_offloads == 0);
  // Exactly the window: not yet, only longer than it.
  RG_REQUIRE_OK(rg_sched_schedule(s, 1.25, &b));
  RG_CHECK(b.n_offloads == 0 && block_state(s, b0) == RG_SCHED_BLOCK_CACHED);
  // A hit inside the window restarts the clock.
  RG_REQUIRE_OK(add(s, 2, p, 9, 1, 1.25, &h));
  RG_REQUIRE_OK(rg_sched_schedule(s, 1.25, &b));
  RG_REQUIRE(b.n_entries == 1 && b.entries[0].pos == 8 && b.entries[0].blocks[0] == b0);
  RG_CHECK(b.n_offloads == 0 && b.n_reloads == 0);
  RG_REQUIRE_OK(commit_all(s, &b, 1.5, 0));
  RG_REQUIRE_OK(rg_sched_schedule(s, 2.25, &b));
  RG_CHECK(b.n_offloads == 0);
  RG_REQUIRE_OK(rg_sched_schedule(s, 2.75, &b));
  // Oldest first: the tail block was released before the head.
  RG_REQUIRE(b.n_offloads == 2 && b.n_entries == 0);
  RG_CHECK(b.offloads[0].src == b1 && b.offloads[0].dst == 0);
  RG_CHECK(b.offloads[1].src == b0 && b.offloads[1].dst == 1);
  RG_CHECK(block_state(s, b0) == RG_SCHED_BLOCK_FREE && block_state(s, b1) == RG_SCHED_BLOCK_FREE);
  rg_sched_block_info_t bi;
  uint64_t k0 = key_of(p, 4, 0, UINT64_MAX);
  RG_REQUIRE_OK(rg_sched_tier_block_info(s, 1, &bi));
  RG_CHECK(bi.state == RG_SCHED_BLOCK_CACHED && bi.cached_key && bi.key == k0);
  RG_REQUIRE_OK(rg_sched_tier_block_info(s, 0, &bi));
  RG_CHECK(bi.state == RG_SCHED_BLOCK_CACHED && bi.key == key_of(p + 4, 4, k0, UINT64_MAX));
  rg_sched_stats_t st;
  rg_sched_stats(s, &st);
  RG_CHECK(st.blocks_offloaded == 2 && st.tier_used == 2 && st.tier_free == 6);
  RG_CHECK(st.blocks_cached == 0 && st.blocks_free == 16 && st.blocks_evicted == 0);
  RG_CHECK_OK(rg_sched_check(s));
  RG_REQUIRE_OK(rg_sched_schedule(s, 10, &b));
  RG_CHECK(b.n_offloads == 0);
  rg_sched_destroy(s);
}

RG_TEST(sched_tier_session_reloads_its_prefix_and_computes_the_rest) {
  rg_sched_t *s = tier_sched(t, 16, 8, 1.0);
  RG_REQUIRE(s);
  int32_t p1[10], p2[18], h1, h2;
  fill(p1, 10, 40);
  RG_REQUIRE_OK(add(s, 1, p1, 10, 3, 0, &h1));
  rg_sched_batch_t b;
  double now = 0;
  int32_t dev1[3];
  for (int k = 0; state_of(s, h1) != RG_SCHED_FINISHED; k++) {
    RG_REQUIRE_OK(step(s, now, now + 0.125, &b));
    if (k == 0) memcpy(dev1, b.entries[0].blocks, sizeof dev1);
    now += 0.25;
  }
  // The person thinks past the golden time: all 12 computed positions go.
  RG_REQUIRE_OK(rg_sched_schedule(s, 5.0, &b));
  RG_REQUIRE(b.n_offloads == 3);
  int32_t tier_of[3] = {-1, -1, -1};
  for (size_t j = 0; j < 3; j++)
    for (int i = 0; i < 3; i++)
      if (b.offloads[j].src == dev1[i]) tier_of[i] = b.offloads[j].dst;
  // The next turn re-reads everything so far and adds a question.
  rg_sched_request_info_t info;
  RG_REQUIRE_OK(rg_sched_request_info(s, h1, &info));
  memcpy(p2, p1, sizeof p1);
  memcpy(p2 + 10, info.output, 3 * sizeof(int32_t));
  fill(p2 + 13, 5, 900);
  RG_REQUIRE_OK(add(s, 2, p2, 18, 2, 5.0, &h2));
  RG_REQUIRE_OK(rg_sched_schedule(s, 5.0, &b));
  RG_REQUIRE(b.n_entries == 1 && b.n_reloads == 3 && b.n_offloads == 0);
  const rg_sched_entry_t *e = &b.entries[0];
  RG_CHECK(e->pos == 12 && e->n == 6 && e->is_prefill && e->want_logits && e->n_blocks == 5);
  uint64_t key = 0;
  for (int i = 0; i < 3; i++) {
    RG_CHECK(b.reloads[i].src == tier_of[i] && b.reloads[i].dst == e->blocks[i]);
    rg_sched_block_info_t bi;
    RG_REQUIRE_OK(rg_sched_block_info(s, e->blocks[i], &bi));
    key = key_of(p2 + 4 * i, 4, key, UINT64_MAX);
    RG_CHECK(bi.state == RG_SCHED_BLOCK_USED && bi.cached_key && bi.key == key);
    RG_REQUIRE_OK(rg_sched_tier_block_info(s, tier_of[i], &bi));
    RG_CHECK(bi.state == RG_SCHED_BLOCK_FREE && !bi.cached_key);
  }
  RG_REQUIRE_OK(rg_sched_request_info(s, h2, &info));
  RG_CHECK(info.n_cached_tokens == 12 && info.n_tier_tokens == 12 && info.n_computed == 12);
  rg_sched_stats_t st;
  rg_sched_stats(s, &st);
  RG_CHECK(st.blocks_reloaded == 3 && st.tier_hit_tokens == 12 && st.tier_used == 0);
  RG_CHECK(st.prefix_hit_tokens == 12 && st.tier_free == 8);
  // The tier blocks it came from are free, but only for later batches: an
  // offload in this one could overwrite them before the reload runs.
  RG_CHECK(s->n_tier_free == 5 && s->n_tier_pending == 3);
  RG_CHECK_OK(rg_sched_check(s));
  RG_REQUIRE_OK(commit_all(s, &b, 5.1, 0));
  RG_REQUIRE_OK(rg_sched_schedule(s, 5.2, &b));
  RG_CHECK(s->n_tier_free == 8 && s->n_tier_pending == 0);
  RG_REQUIRE_OK(commit_all(s, &b, 5.3, 0));
  RG_CHECK(state_of(s, h2) == RG_SCHED_FINISHED);
  rg_sched_stats(s, &st);
  RG_CHECK(st.blocks_cached == 4 && st.blocks_used == 0);
  RG_CHECK_OK(rg_sched_check(s));
  rg_sched_destroy(s);
}

RG_TEST(sched_tier_full_drops_the_least_recently_used) {
  rg_sched_t *s = tier_sched(t, 16, 2, 1.0);
  RG_REQUIRE(s);
  int32_t pa[9], pb[9], h, hA, hB;
  fill(pa, 9, 100);
  fill(pb, 9, 200);
  rg_sched_batch_t b;
  RG_REQUIRE_OK(add(s, 1, pa, 9, 1, 0, &h));
  RG_REQUIRE_OK(step(s, 0, 0.25, &b));
  RG_REQUIRE_OK(add(s, 2, pb, 9, 1, 0.5, &h));
  RG_REQUIRE_OK(step(s, 0.5, 0.75, &b));
  RG_REQUIRE_OK(rg_sched_schedule(s, 1.5, &b));  // A's two blocks fill the tier
  RG_CHECK(b.n_offloads == 2);
  RG_REQUIRE_OK(rg_sched_schedule(s, 2.0, &b));  // B's push them out
  RG_REQUIRE(b.n_offloads == 2);
  rg_sched_stats_t st;
  rg_sched_stats(s, &st);
  RG_CHECK(st.blocks_dropped == 2 && st.tier_used == 2 && st.blocks_cached == 0);
  uint64_t kb0 = key_of(pb, 4, 0, UINT64_MAX);
  rg_sched_block_info_t bi;
  int found = 0;
  for (int32_t i = 0; i < 2; i++) {
    RG_REQUIRE_OK(rg_sched_tier_block_info(s, i, &bi));
    found += bi.key == kb0;
  }
  RG_CHECK(found == 1);
  RG_CHECK(rg__index_find(s, key_of(pa, 4, 0, UINT64_MAX)) < 0);
  // Both sessions return: A's prefix is gone and recomputed, B's reloaded.
  RG_REQUIRE_OK(add(s, 3, pa, 9, 1, 2.0, &hA));
  RG_REQUIRE_OK(add(s, 4, pb, 9, 1, 2.0, &hB));
  RG_REQUIRE_OK(rg_sched_schedule(s, 2.0, &b));
  const rg_sched_entry_t *ea = entry_of(&b, hA), *eb = entry_of(&b, hB);
  RG_REQUIRE(ea && eb);
  RG_CHECK(ea->pos == 0 && ea->n == 9 && eb->pos == 8 && eb->n == 1 && b.n_reloads == 2);
  rg_sched_request_info_t info;
  RG_REQUIRE_OK(rg_sched_request_info(s, hA, &info));
  RG_CHECK(info.n_cached_tokens == 0);
  RG_REQUIRE_OK(rg_sched_request_info(s, hB, &info));
  RG_CHECK(info.n_cached_tokens == 8 && info.n_tier_tokens == 8);
  RG_CHECK_OK(rg_sched_check(s));
  RG_REQUIRE_OK(commit_all(s, &b, 2.1, 0));
  rg_sched_stats(s, &st);
  RG_CHECK(st.blocks_reloaded == 2 && st.tier_hit_tokens == 8 && st.tier_used == 0);
  rg_sched_destroy(s);
}

RG_TEST(sched_tier_retention_zero_moves_blocks_only_under_pressure) {
  rg_sched_t *s = tier_sched(t, 6, 8, 0);
  RG_REQUIRE(s);
  int32_t pa[9], px[21], h, hA;
  fill(pa, 9, 100);
  fill(px, 21, 700);
  rg_sched_batch_t b;
  RG_REQUIRE_OK(add(s, 1, pa, 9, 1, 0, &h));
  RG_REQUIRE_OK(step(s, 0, 0.25, &b));  // A: blocks 0 and 1 cached, 2 free
  RG_REQUIRE_OK(rg_sched_schedule(s, 1000, &b));
  RG_CHECK(b.n_offloads == 0);
  // X needs the whole pool: the 4 free blocks, then A's two, moved down
  // (tail first) rather than lost.
  RG_REQUIRE_OK(add(s, 2, px, 21, 1, 1000, &h));
  RG_REQUIRE_OK(rg_sched_schedule(s, 1000, &b));
  RG_REQUIRE(b.n_entries == 1 && b.n_offloads == 2 && b.entries[0].n_blocks == 6);
  const rg_sched_entry_t *e = &b.entries[0];
  RG_CHECK(b.offloads[0].src == 1 && b.offloads[0].dst == 0);
  RG_CHECK(b.offloads[1].src == 0 && b.offloads[1].dst == 1);
  // The emptied blocks are written by this very step, after the copies.
  RG_CHECK(e->blocks[4] == 1 && e->blocks[5] == 0);
  RG_REQUIRE_OK(commit_all(s, &b, 1000.25, 0));
  rg_sched_stats_t st;
  rg_sched_stats(s, &st);
  RG_CHECK(st.blocks_offloaded == 2 && st.blocks_evicted == 2 && st.tier_used == 2);
  RG_CHECK(st.blocks_cached == 5 && st.blocks_free == 1);
  // A returns: its prefix comes back up while X's oldest blocks go down,
  // in one batch; block 1 is emptied by an offload and refilled by a
  // reload, which is why offloads run first.
  RG_REQUIRE_OK(add(s, 3, pa, 9, 1, 1000.25, &hA));
  RG_REQUIRE_OK(rg_sched_schedule(s, 1000.5, &b));
  RG_REQUIRE(b.n_entries == 1 && b.n_reloads == 2 && b.n_offloads == 2);
  e = &b.entries[0];
  RG_CHECK(e->pos == 8 && e->blocks[0] == 0 && e->blocks[1] == 1 && e->blocks[2] == 5);
  RG_CHECK(b.reloads[0].src == 1 && b.reloads[0].dst == 0);
  RG_CHECK(b.reloads[1].src == 0 && b.reloads[1].dst == 1);
  RG_CHECK(b.offloads[0].src == 1 && b.offloads[1].src == 5);
  RG_CHECK(b.offloads[0].dst == 2 && b.offloads[1].dst == 3);  // not the tier blocks being read
  RG_CHECK_OK(rg_sched_check(s));
  RG_REQUIRE_OK(commit_all(s, &b, 1000.75, 0));
  rg_sched_stats(s, &st);
  RG_CHECK(st.blocks_offloaded == 4 && st.blocks_reloaded == 2 && st.blocks_evicted == 4);
  RG_CHECK(st.tier_hit_tokens == 8 && st.tier_used == 2 && st.blocks_dropped == 0);
  RG_CHECK_OK(rg_sched_check(s));
  rg_sched_destroy(s);
}

RG_TEST(sched_check_finds_tier_corruption) {
  rg_sched_t *s = tier_sched(t, 16, 4, 1.0);
  RG_REQUIRE(s);
  int32_t p[9], h;
  fill(p, 9, 3);
  RG_REQUIRE_OK(add(s, 1, p, 9, 1, 0, &h));
  rg_sched_batch_t b;
  RG_REQUIRE_OK(step(s, 0, 0.25, &b));
  RG_REQUIRE_OK(rg_sched_schedule(s, 2, &b));
  RG_REQUIRE(b.n_offloads == 2);
  RG_REQUIRE_OK(rg_sched_check(s));
  int32_t t0 = s->n_blocks + b.offloads[0].dst;
  s->blocks[t0].indexed = 0;
  RG_CHECK_ERR(rg_sched_check(s), "is on the tier's LRU list but holds no cached block");
  s->blocks[t0].indexed = 1;
  s->tier_free[s->n_tier_free++] = t0;
  RG_CHECK_ERR(rg_sched_check(s), "is on a free list but holds a cached block");
  s->n_tier_free--;
  s->tier_pending[s->n_tier_pending++] = s->tier_free[0];
  RG_CHECK_ERR(rg_sched_check(s), "is free twice");
  s->n_tier_pending--;
  s->n_tier_cached++;
  RG_CHECK_ERR(rg_sched_check(s), "2 tier blocks hold cached blocks but the count says 3");
  s->n_tier_cached--;
  // One key in two places: the device block it left still indexed.
  int32_t d = b.offloads[0].src;
  s->blocks[d].indexed = 1;
  RG_CHECK_ERR(rg_sched_check(s), "is referenced, indexed or off the free list");
  s->blocks[d].indexed = 0;
  RG_CHECK_OK(rg_sched_check(s));
  rg_sched_destroy(s);
}

// --- random request streams ----------------------------------------------------
//
// A fake model stands in for the engine: the "KV" it writes at a position is
// a rolling hash of every token up to it, computed from the KV it reads at
// the previous position, exactly as attention depends on earlier KV. Each
// step first checks that every position an entry reads holds the hash of
// that request's own tokens, so a block shared wrongly, freed too early,
// swapped back wrong or overwritten is caught where it happens, and tokens
// are sampled from that hash, so outputs can be predicted from the prompt.

typedef struct {
  uint64_t s;
} rng_t;

static uint64_t rng_next(rng_t *r) {  // splitmix64
  uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static int64_t rng_range(rng_t *r, int64_t lo, int64_t hi) {  // inclusive
  return lo + (int64_t)(rng_next(r) % (uint64_t)(hi - lo + 1));
}
static double rng_unit(rng_t *r) {
  return (double)(rng_next(r) >> 11) / 9007199254740992.0;
}

enum { FAKE_VOCAB = 1000 };
static const uint64_t fake_root = 0x5eed5eed5eedull;
static uint64_t fake_mix(uint64_t prev, int32_t tok) {
  uint64_t h = (prev ^ (uint64_t)(uint32_t)tok) * 0x9E3779B97F4A7C15ull;
  return h ^ (h >> 29);
}
static int32_t fake_sample(uint64_t h) {
  return (int32_t)((h >> 21) % FAKE_VOCAB);
}
static int fake_stop(int32_t tok) {
  return tok % 89 == 0;
}

typedef struct {
  const char *name;
  int32_t bs;
  int64_t n_blocks, n_swap;
  int32_t max_seqs;
  int64_t max_batch_tokens, max_context;
  rg_sched_preempt_t preempt;
  int prefix, hash_bits;
  int64_t watermark;
  int n_requests;
  int prefix_max, suffix_max, out_max;  // lengths drawn up to these
  int vocab;  // prompt tokens drawn below this (0 = the fake model's 1000)
  // The capacity tier (blocks, retention window), the percentage of
  // requests imported from a fake remote prefill, and the percentage of
  // finished requests whose session comes back for another turn after a
  // think time drawn around the window; 0 = off.
  int64_t n_tier;
  double retention;
  int import_pct, session_pct;
} stream_cfg_t;

typedef struct {
  int64_t requests, refused, iterations, finished, aborted, failed;
  int64_t preempt_recompute, preempt_swap, hit_tokens, lookup_tokens, evicted;
  int64_t imported, sessions, imports, import_tokens;
  int64_t offloaded, reloaded, dropped, tier_hit_tokens;
  uint64_t digest;
} stream_out_t;

typedef struct {
  int live, started, decoding;
  uint64_t id;
  int64_t n_prompt, max_tokens, n_known, computed;
  int64_t n_remote;  // positions imported at its admission, until the test has seen it
  double arrival;
  int32_t *tokens;
} track_t;

// A session's next turn: everything so far plus a new question, due at `at`.
typedef struct {
  double at;
  int32_t *tokens;
  int64_t n, max_tokens;
} followup_t;

// Rolling hash after positions [0, upto) of tokens.
static uint64_t rolling(const int32_t *tokens, int64_t upto) {
  uint64_t h = fake_root;
  for (int64_t i = 0; i < upto; i++) h = fake_mix(h, tokens[i]);
  return h;
}

// The outputs the fake model must produce for a prompt.
static int64_t reference_output(const track_t *k, int32_t *out) {
  uint64_t h = rolling(k->tokens, k->n_prompt);
  int64_t n = 0;
  for (;;) {
    int32_t tok = fake_sample(h);
    out[n++] = tok;
    if (fake_stop(tok) || n == k->max_tokens) return n;
    h = fake_mix(h, tok);
  }
}

static uint64_t *kv_slot(uint64_t *kv, int32_t bs, const int32_t *blocks, int64_t p) {
  return &kv[(int64_t)blocks[p / bs] * bs + p % bs];
}

static void end_track(track_t *k) {
  k->live = 0;
}

// Aborts or fails a random live request, if one is found quickly.
static void random_end(rg_test_ctx_t *t, rg_sched_t *s, rng_t *rng, track_t *tr, int32_t n_handles,
                       double now, stream_out_t *o) {
  if (n_handles == 0) return;
  for (int tries = 0; tries < 8; tries++) {
    int32_t h = (int32_t)rng_range(rng, 0, n_handles - 1);
    if (!tr[h].live) continue;
    if (rng_next(rng) & 1) {
      RG_CHECK_OK(rg_sched_abort(s, h, now));
      o->aborted++;
    } else {
      RG_CHECK_OK(rg_sched_fail(s, h, now, "worker lost (random stream)"));
      rg_sched_request_info_t info;
      RG_CHECK_OK(rg_sched_request_info(s, h, &info));
      RG_CHECK(info.state == RG_SCHED_FAILED && info.reason &&
               strcmp(info.reason, "worker lost (random stream)") == 0);
      o->failed++;
    }
    end_track(&tr[h]);
    return;
  }
}

static void hash_batch(XXH3_state_t *x, const rg_sched_batch_t *b) {
  XXH3_64bits_update(x, &b->iteration, sizeof b->iteration);
  for (size_t i = 0; i < b->n_entries; i++) {
    const rg_sched_entry_t *e = &b->entries[i];
    int64_t f[5] = {e->req, e->pos, e->n, e->want_logits, e->is_prefill};
    XXH3_64bits_update(x, f, sizeof f);
    XXH3_64bits_update(x, e->blocks, (size_t)e->n_blocks * sizeof(int32_t));
  }
  XXH3_64bits_update(x, b->swap_out, b->n_swap_out * sizeof(rg_sched_copy_t));
  XXH3_64bits_update(x, b->swap_in, b->n_swap_in * sizeof(rg_sched_copy_t));
  XXH3_64bits_update(x, b->offloads, b->n_offloads * sizeof(rg_sched_copy_t));
  XXH3_64bits_update(x, b->reloads, b->n_reloads * sizeof(rg_sched_copy_t));
  for (size_t i = 0; i < b->n_imports; i++) {
    const rg_sched_import_t *m = &b->imports[i];
    int64_t f[3] = {m->req, m->pos_begin, m->pos_end};
    XXH3_64bits_update(x, f, sizeof f);
    XXH3_64bits_update(x, m->blocks, (size_t)m->n_blocks * sizeof(int32_t));
  }
  XXH3_64bits_update(x, b->preempted, b->n_preempted * sizeof(int32_t));
}

// The fake KV memories and the marks that catch two writers of one place.
typedef struct {
  uint64_t *dev, *swp, *tier;  // (blocks, bs) each
  uint64_t stamp;
  uint64_t *write_mark;  // (n_blocks) batch stamp of the entry that wrote it
  uint64_t *copy_mark;   // (n_blocks) batch stamp of the copy or import that wrote it
  // (n_blocks) the request whose import wrote it; -1 for a reload (a hit:
  // never written by an entry), -2 for a swap-in (its own request's block).
  int32_t *copy_req;
  uint64_t *tier_mark;    // (n_tier) batch stamp of the offload that wrote it
  uint64_t *reload_mark;  // (n_tier) batch stamp of the reload that read it
} fake_mem_t;

static void copy_block(uint64_t *dst_pool, int32_t dst, const uint64_t *src_pool, int32_t src,
                       int32_t bs) {
  memcpy(dst_pool + (int64_t)dst * bs, src_pool + (int64_t)src * bs, (size_t)bs * sizeof(uint64_t));
}

// Runs a batch's copies in the order sched.h gives, after checking that the
// copies of each group have distinct destinations (so they could run at
// once) and land where they may: imports only into their own blocks.
static void run_copies(rg_test_ctx_t *t, rg_sched_t *s, const stream_cfg_t *c,
                       const rg_sched_batch_t *b, track_t *tr, fake_mem_t *m) {
  int32_t bs = c->bs;
  uint64_t st = m->stamp;
  for (size_t i = 0; i < b->n_offloads; i++) {
    const rg_sched_copy_t *q = &b->offloads[i];
    RG_CHECK(q->src >= 0 && q->src < c->n_blocks && q->dst >= 0 && q->dst < c->n_tier);
    RG_CHECK(m->tier_mark[q->dst] != st);
    m->tier_mark[q->dst] = st;
  }
  for (size_t i = 0; i < b->n_swap_out; i++)
    copy_block(m->swp, b->swap_out[i].dst, m->dev, b->swap_out[i].src, bs);
  for (size_t i = 0; i < b->n_offloads; i++)
    copy_block(m->tier, b->offloads[i].dst, m->dev, b->offloads[i].src, bs);
  // Group 2 writes device blocks: each once.
  for (size_t i = 0; i < b->n_swap_in; i++) {
    int32_t d = b->swap_in[i].dst;
    RG_CHECK(m->copy_mark[d] != st);
    m->copy_mark[d] = st;
    m->copy_req[d] = -2;
    copy_block(m->dev, d, m->swp, b->swap_in[i].src, bs);
  }
  for (size_t i = 0; i < b->n_reloads; i++) {
    const rg_sched_copy_t *q = &b->reloads[i];
    RG_CHECK(q->src >= 0 && q->src < c->n_tier && q->dst >= 0 && q->dst < c->n_blocks);
    RG_CHECK(m->copy_mark[q->dst] != st && m->reload_mark[q->src] != st);
    m->copy_mark[q->dst] = st;
    m->copy_req[q->dst] = -1;
    m->reload_mark[q->src] = st;
    copy_block(m->dev, q->dst, m->tier, q->src, bs);
  }
  // The fake remote prefill: it writes the KV the request's own tokens give.
  for (size_t i = 0; i < b->n_imports; i++) {
    const rg_sched_import_t *im = &b->imports[i];
    track_t *k = &tr[im->req];
    RG_CHECK(k->live && im->id == k->id && k->n_remote > 0);
    RG_CHECK(im->pos_begin % bs == 0 && im->pos_begin < im->pos_end && im->pos_end == k->n_remote);
    RG_CHECK(im->n_blocks == (im->pos_end + bs - 1) / bs - im->pos_begin / bs);
    for (int32_t j = 0; j < im->n_blocks; j++) {
      int32_t d = im->blocks[j];
      RG_CHECK(d >= 0 && d < c->n_blocks && refcount(s, d) == 1 && m->copy_mark[d] != st);
      m->copy_mark[d] = st;
      m->copy_req[d] = im->req;
    }
    uint64_t h = rolling(k->tokens, im->pos_begin);
    for (int64_t p = im->pos_begin; p < im->pos_end; p++) {
      h = fake_mix(h, k->tokens[p]);
      m->dev[(int64_t)im->blocks[(p - im->pos_begin) / bs] * bs + p % bs] = h;
    }
  }
}

// Checks a batch against what the test knows of every request, then runs
// the fake model over it and fills one result per entry with want_logits.
static size_t check_and_step(rg_test_ctx_t *t, rg_sched_t *s, const stream_cfg_t *c,
                             const rg_sched_batch_t *b, track_t *tr, fake_mem_t *m,
                             rg_sched_result_t *res) {
  int32_t bs = c->bs;
  int64_t tokens = 0;
  int last_class = 0;
  uint64_t *dev = m->dev;
  uint64_t stamp = ++m->stamp;
  RG_CHECK(b->n_entries <= (size_t)c->max_seqs);
  for (size_t i = 0; i < b->n_entries; i++) {
    const rg_sched_entry_t *e = &b->entries[i];
    track_t *k = &tr[e->req];
    RG_CHECK(k->live && e->id == k->id && e->n >= 1);
    int cls = !e->is_prefill ? 0 : k->started ? 1 : 2;
    RG_CHECK(cls >= last_class);  // decodes, started prefills, new prefills
    last_class = cls;
    const rg_sched_import_t *im = import_of(b, e->req);
    if (k->n_remote) {
      // Admitted from afar: it continues after its imported positions (or
      // past a longer hit), as a decode when only its last token is left.
      RG_CHECK(!k->started);
      k->decoding = e->pos == k->n_known - 1;
      if (im)
        RG_CHECK(e->pos == k->n_remote && im->pos_end == e->pos);
      else
        RG_CHECK(e->pos >= k->n_remote && e->pos % bs == 0);
      RG_CHECK(e->pos <= k->n_known - 1);
    } else {
      RG_CHECK(!im);
    }
    RG_CHECK(e->is_prefill == !k->decoding);
    if (k->n_remote)
      ;
    else if (cls < 2)
      RG_CHECK(e->pos == k->computed);
    else
      RG_CHECK(e->pos % bs == 0 && e->pos <= (k->n_known - 1) / bs * bs);
    RG_CHECK(e->pos + e->n <= k->n_known);
    RG_CHECK(e->want_logits == (e->pos + e->n == k->n_known));
    RG_CHECK(e->n_blocks == (e->pos + e->n + bs - 1) / bs);
    RG_CHECK(memcmp(e->tokens, k->tokens + e->pos, (size_t)e->n * sizeof(int32_t)) == 0);
    tokens += e->n;
    // The blocks it writes are its own and no other entry's, and no copy
    // of this batch lands in them but its own import.
    for (int64_t q = e->pos / bs; q <= (e->pos + e->n - 1) / bs; q++) {
      int32_t blk = e->blocks[q];
      RG_CHECK(blk >= 0 && blk < c->n_blocks);
      RG_CHECK(refcount(s, blk) == 1);
      RG_CHECK(m->write_mark[blk] != stamp);
      m->write_mark[blk] = stamp;
    }
  }
  RG_CHECK(tokens == b->n_decode_tokens + b->n_prefill_tokens && tokens <= c->max_batch_tokens);
  for (size_t i = 0; i < b->n_preempted; i++) {
    track_t *k = &tr[b->preempted[i]];
    rg_sched_state_t st = state_of(s, b->preempted[i]);
    RG_CHECK(st == RG_SCHED_WAITING || st == RG_SCHED_SWAPPED);
    if (st == RG_SCHED_WAITING) k->started = k->decoding = 0, k->computed = 0;
  }
  // The step: the copies first, then every entry.
  run_copies(t, s, c, b, tr, m);
  for (size_t i = 0; i < b->n_entries; i++) {
    const rg_sched_entry_t *e = &b->entries[i];
    for (int64_t q = e->pos / bs; q <= (e->pos + e->n - 1) / bs; q++) {
      int32_t blk = e->blocks[q];
      RG_CHECK(m->copy_mark[blk] != stamp || m->copy_req[blk] == e->req || m->copy_req[blk] == -2);
    }
    tr[e->req].n_remote = 0;
  }
  size_t n_res = 0;
  for (size_t i = 0; i < b->n_entries; i++) {
    const rg_sched_entry_t *e = &b->entries[i];
    track_t *k = &tr[e->req];
    uint64_t h = fake_root;
    int bad = 0;
    for (int64_t p = 0; p < e->pos; p++) {
      h = fake_mix(h, k->tokens[p]);
      bad |= *kv_slot(dev, bs, e->blocks, p) != h;
    }
    if (bad)
      rg_test_fail(t, __FILE__, __LINE__,
                   "%s: request %llu reads KV that is not its own before %lld", c->name,
                   (unsigned long long)k->id, (long long)e->pos);
    for (int64_t p = e->pos; p < e->pos + e->n; p++) {
      uint64_t prev = p == 0 ? fake_root : *kv_slot(dev, bs, e->blocks, p - 1);
      h = fake_mix(prev, e->tokens[p - e->pos]);
      *kv_slot(dev, bs, e->blocks, p) = h;
    }
    k->started = 1;
    if (e->want_logits) {
      int32_t tok = fake_sample(h);
      res[n_res++] = (rg_sched_result_t){e->req, tok, fake_stop(tok)};
    }
  }
  return n_res;
}

// Adds one request and starts tracking it. With the config's odds it is
// imported: the fake prefill side has run its prompt and sampled its first
// tokens (the fake model's own, so the outputs stay predictable), and it
// hands over 1 to all but the last of the known positions.
static void add_tracked(rg_test_ctx_t *t, rg_sched_t *s, const stream_cfg_t *c, rng_t *rng,
                        track_t *tr, int32_t cap_tr, const int32_t *prompt, int64_t n,
                        int64_t max_tokens, double arrival, uint64_t id, stream_out_t *o,
                        int32_t *n_handles, int *live) {
  int32_t gen[3];
  int64_t n_gen = 0, n_remote = 0;
  if (c->import_pct && rng_range(rng, 0, 99) < c->import_pct) {
    uint64_t hh = rolling(prompt, n);
    // The prefill side would have ended the request at a stop token or at
    // max_tokens: it hands over only a request with tokens left to make.
    while (n_gen < 3 && n_gen < max_tokens - 1) {
      int32_t tok = fake_sample(hh);
      if (fake_stop(tok)) break;
      gen[n_gen++] = tok;
      hh = fake_mix(hh, tok);
    }
    if (n_gen > 0) {
      n_gen = rng_range(rng, 1, n_gen);
      int64_t known = n + n_gen;
      n_remote = rng_range(rng, 0, 3) ? known - 1 : rng_range(rng, 1, known - 1);
    }
  }
  int32_t h;
  rg_status_t st;
  if (n_gen) {
    rg_sched_request_t q = {.id = id,
                            .prompt = prompt,
                            .n_prompt = (size_t)n,
                            .max_tokens = max_tokens,
                            .arrival = arrival};
    st = rg_sched_add_imported(s, &q, (size_t)n_remote, gen, (size_t)n_gen, &h);
  } else {
    st = add(s, id, prompt, (size_t)n, max_tokens, arrival, &h);
  }
  if (st) {
    const char *msg = rg_status_message(st);
    RG_CHECK(n + max_tokens > c->max_context || n + max_tokens - 1 > c->n_blocks * c->bs);
    RG_CHECK(strstr(msg, "exceeds max_context") || strstr(msg, "KV blocks of"));
    rg_status_free(st);
    o->refused++;
    return;
  }
  RG_CHECK(h >= 0 && h < cap_tr);
  if (h < 0 || h >= cap_tr) return;
  if (h >= *n_handles) *n_handles = h + 1;
  track_t *k = &tr[h];
  free(k->tokens);
  *k = (track_t){.live = 1,
                 .id = id,
                 .n_prompt = n,
                 .max_tokens = max_tokens,
                 .n_known = n + n_gen,
                 .n_remote = n_remote,
                 .arrival = arrival};
  k->tokens = malloc((size_t)(n + max_tokens) * sizeof(int32_t));
  if (!k->tokens) {
    RG_CHECK(!"out of memory");
    return;
  }
  memcpy(k->tokens, prompt, (size_t)n * sizeof(int32_t));
  memcpy(k->tokens + n, gen, (size_t)n_gen * sizeof(int32_t));
  o->requests++;
  o->imported += n_gen > 0;
  (*live)++;
}

static void run_stream(rg_test_ctx_t *t, const stream_cfg_t *c, uint64_t seed, stream_out_t *o) {
  memset(o, 0, sizeof(*o));
  rg_sched_config_t sc = {.block_size = c->bs,
                          .n_blocks = c->n_blocks,
                          .n_swap_blocks = c->n_swap,
                          .max_seqs = c->max_seqs,
                          .max_batch_tokens = c->max_batch_tokens,
                          .max_context = c->max_context,
                          .preempt = c->preempt,
                          .prefix_cache = c->prefix,
                          .n_tier_blocks = c->n_tier,
                          .retention_s = c->retention,
                          .watermark_blocks = c->watermark,
                          .hash_bits = c->hash_bits};
  rg_sched_t *s = NULL;
  RG_CHECK_OK(rg_sched_create(&sc, &s));
  // Sessions add up to as many follow-ups as fresh requests, each a handle.
  int32_t cap_tr = c->session_pct ? 2 * c->n_requests : c->n_requests;
  size_t nb = (size_t)c->n_blocks, nt = (size_t)c->n_tier;
  fake_mem_t m = {
      .dev = calloc(nb * (size_t)c->bs, sizeof(uint64_t)),
      .swp = calloc((size_t)(c->n_swap + 1) * (size_t)c->bs, sizeof(uint64_t)),
      .tier = calloc((nt + 1) * (size_t)c->bs, sizeof(uint64_t)),
      .write_mark = calloc(nb, sizeof(uint64_t)),
      .copy_mark = calloc(nb, sizeof(uint64_t)),
      .copy_req = calloc(nb, sizeof(int32_t)),
      .tier_mark = calloc(nt + 1, sizeof(uint64_t)),
      .reload_mark = calloc(nt + 1, sizeof(uint64_t)),
  };
  track_t *tr = calloc((size_t)cap_tr, sizeof(track_t));
  followup_t *fu = calloc((size_t)c->n_requests, sizeof(followup_t));
  int n_fu = 0, fu_total = 0;
  int32_t *ref = malloc((size_t)(c->max_context + 1) * sizeof(int32_t));
  rg_sched_result_t *res = malloc((size_t)c->max_seqs * sizeof(*res));
  int32_t *prompt =
      malloc((size_t)(c->prefix_max + c->suffix_max + c->max_context + 1) * sizeof(int32_t));
  XXH3_state_t *x = XXH3_createState();
  if (!s || !m.dev || !m.swp || !m.tier || !m.write_mark || !m.copy_mark || !m.copy_req ||
      !m.tier_mark || !m.reload_mark || !tr || !fu || !ref || !res || !prompt || !x) {
    RG_CHECK(!"out of memory");
    goto done;
  }
  XXH3_64bits_reset(x);
  rng_t rng = {seed};
  int vocab = c->vocab ? c->vocab : FAKE_VOCAB;
  // A few shared prefixes, so prefix hits (and their collisions) happen.
  int32_t family[4][64];
  int family_len[4];
  for (int f = 0; f < 4; f++) {
    family_len[f] = (int)rng_range(&rng, 0, c->prefix_max);
    for (int i = 0; i < family_len[f]; i++) family[f][i] = (int32_t)rng_range(&rng, 0, vocab - 1);
  }
  double now = 0, next_arrival = 0, last_arrival = 0;
  int32_t n_handles = 0;
  int added = 0, live = 0;
  while (added < c->n_requests || live > 0 || n_fu > 0) {
    // Arrivals up to a little ahead of now: some are added before they
    // arrive, as a simulator does. Fresh requests and sessions' next turns
    // are added in the order they arrive.
    for (;;) {
      int fi = -1;
      for (int i = 0; i < n_fu; i++)
        if (fi < 0 || fu[i].at < fu[fi].at) fi = i;
      double t_fresh = added < c->n_requests ? next_arrival : INFINITY;
      double t_fu = fi >= 0 ? fu[fi].at : INFINITY;
      if ((t_fu < t_fresh ? t_fu : t_fresh) > now + 0.002) break;
      if (t_fu < t_fresh) {
        double at = t_fu > last_arrival ? t_fu : last_arrival;
        add_tracked(t, s, c, &rng, tr, cap_tr, fu[fi].tokens, fu[fi].n, fu[fi].max_tokens, at,
                    1000000 + (uint64_t)o->sessions, o, &n_handles, &live);
        last_arrival = at;
        o->sessions++;
        free(fu[fi].tokens);
        fu[fi] = fu[--n_fu];
        continue;
      }
      int f = (int)rng_range(&rng, 0, 3);
      int64_t n = family_len[f];
      memcpy(prompt, family[f], (size_t)n * sizeof(int32_t));
      int64_t suffix = rng_range(&rng, 0, 9) == 0 ? 0 : rng_range(&rng, 1, c->suffix_max);
      if (n + suffix == 0) suffix = 1;
      int64_t max_tokens = rng_range(&rng, 1, c->out_max);
      if (rng_range(&rng, 0, 39) == 0) suffix += c->max_context;  // can never run
      for (int64_t i = 0; i < suffix; i++) prompt[n + i] = (int32_t)rng_range(&rng, 0, vocab - 1);
      n += suffix;
      add_tracked(t, s, c, &rng, tr, cap_tr, prompt, n, max_tokens, next_arrival,
                  (uint64_t)added + 1, o, &n_handles, &live);
      last_arrival = next_arrival;
      added++;
      // Bursts: now and then several requests arrive at once.
      if (rng_range(&rng, 0, 29) != 0) next_arrival += -0.0015 * log(1 - rng_unit(&rng));
    }
    if (rng_range(&rng, 0, 33) == 0) random_end(t, s, &rng, tr, n_handles, now, o);

    rg_sched_batch_t b;
    rg_status_t st = rg_sched_schedule(s, now, &b);
    if (st) {
      RG_CHECK_OK(st);
      goto done;
    }
    o->iterations++;
    hash_batch(x, &b);
    if ((st = rg_sched_check(s))) {
      rg_test_fail(t, __FILE__, __LINE__, "%s, iteration %lld, after schedule: %s", c->name,
                   (long long)o->iterations, rg_status_message(st));
      rg_status_free(st);
      goto done;
    }
    // The retention sweep left no cached device block idle past the window
    // unless the tier had no room for it in this batch.
    if (c->n_tier && c->retention > 0 && s->lru.head >= 0 &&
        now - s->blocks[s->lru.head].idle_since > c->retention) {
      int32_t th = s->tier_lru.head;
      RG_CHECK(s->n_tier_free == 0 && (th < 0 || s->blocks[th].filled_iter == s->iter));
    }
    size_t n_res = check_and_step(t, s, c, &b, tr, &m, res);
    if (b.n_entries == 0 && b.n_preempted == 0) {
      // Nothing ran: only allowed when nothing that has arrived is left.
      for (int32_t h = 0; h < n_handles; h++)
        if (tr[h].live && tr[h].arrival <= now) {
          rg_test_fail(t, __FILE__, __LINE__, "%s: iteration %lld stalled with request %llu ready",
                       c->name, (long long)o->iterations, (unsigned long long)tr[h].id);
          goto done;
        }
    }
    // Sometimes a request ends while its step runs; its result may or may
    // not be handed in.
    if (b.n_entries && rng_range(&rng, 0, 39) == 0) {
      size_t i = (size_t)rng_range(&rng, 0, (int64_t)b.n_entries - 1);
      int32_t h = b.entries[i].req;
      RG_CHECK_OK(rg_sched_abort(s, h, now));
      end_track(&tr[h]);
      o->aborted++;
      if (rng_next(&rng) & 1)
        for (size_t j = 0; j < n_res; j++)
          if (res[j].req == h) res[j] = res[--n_res];
    }
    double step = 0.001 + 1e-5 * (double)(b.n_decode_tokens + b.n_prefill_tokens);
    if ((st = rg_sched_commit(s, now + step, res, n_res))) {
      RG_CHECK_OK(st);
      goto done;
    }
    now += step;
    if ((st = rg_sched_check(s))) {
      rg_test_fail(t, __FILE__, __LINE__, "%s, iteration %lld, after commit: %s", c->name,
                   (long long)o->iterations, rg_status_message(st));
      rg_status_free(st);
      goto done;
    }
    // What the test knows advances as the scheduler's does.
    for (size_t i = 0; i < b.n_entries; i++) {
      const rg_sched_entry_t *e = &b.entries[i];
      track_t *k = &tr[e->req];
      if (!k->live) continue;
      k->computed = e->pos + e->n;
      if (!e->want_logits) continue;
      rg_sched_request_info_t info;
      RG_CHECK_OK(rg_sched_request_info(s, e->req, &info));
      k->tokens[k->n_known++] = info.output[info.n_output - 1];
      k->decoding = 1;
      RG_CHECK(info.n_output == k->n_known - k->n_prompt);
      if (info.state != RG_SCHED_FINISHED) continue;
      int64_t n_ref = reference_output(k, ref);
      RG_CHECK(info.n_output == n_ref &&
               memcmp(info.output, ref, (size_t)n_ref * sizeof(int32_t)) == 0);
      RG_CHECK(strcmp(info.reason, fake_stop(ref[n_ref - 1]) ? "stop" : "length") == 0);
      RG_CHECK(info.n_blocks == 0 && info.first_token <= info.last_token);
      end_track(k);
      o->finished++;
      if (rng_next(&rng) & 1) rg_sched_release(s, e->req);
      // The session comes back after a think time around the retention
      // window, re-reading everything so far and asking something new.
      if (c->session_pct && fu_total < c->n_requests && rng_range(&rng, 0, 99) < c->session_pct) {
        int64_t more = rng_range(&rng, 1, c->suffix_max),
                max_tokens = rng_range(&rng, 1, c->out_max);
        int64_t n = k->n_known + more;
        double think =
            c->retention > 0 ? c->retention * (0.25 + 1.5 * rng_unit(&rng)) : 0.05 * rng_unit(&rng);
        if (n + max_tokens > c->max_context) continue;
        int32_t *toks = malloc((size_t)n * sizeof(int32_t));
        if (!toks) {
          RG_CHECK(!"out of memory");
          goto done;
        }
        memcpy(toks, k->tokens, (size_t)k->n_known * sizeof(int32_t));
        for (int64_t j = k->n_known; j < n; j++) toks[j] = (int32_t)rng_range(&rng, 0, vocab - 1);
        fu[n_fu++] =
            (followup_t){.at = now + think, .tokens = toks, .n = n, .max_tokens = max_tokens};
        fu_total++;
      }
    }
    live = 0;
    for (int32_t h = 0; h < n_handles; h++) live += tr[h].live;
    if (b.n_entries == 0 && b.n_preempted == 0) {
      // Idle: on to the next arrival, a fresh request's or a session's.
      double next = added < c->n_requests || n_fu == 0 ? next_arrival : INFINITY;
      for (int i = 0; i < n_fu; i++)
        if (fu[i].at < next) next = fu[i].at;
      if (next > now) now = next;
    }
    if (o->iterations > 200000) {
      RG_CHECK(!"the stream did not drain in 200000 iterations");
      goto done;
    }
  }
  rg_sched_stats_t st;
  rg_sched_stats(s, &st);
  // Nothing leaked: every block free or cached, the swap tier empty, no
  // request left in a live state.
  RG_CHECK(st.blocks_used == 0 && st.blocks_free + st.blocks_cached == c->n_blocks);
  RG_CHECK(st.swap_used == 0 && st.tier_used + st.tier_free == c->n_tier);
  RG_CHECK(st.n_state[RG_SCHED_WAITING] + st.n_state[RG_SCHED_PREFILLING] +
               st.n_state[RG_SCHED_DECODING] + st.n_state[RG_SCHED_SWAPPED] ==
           0);
  RG_CHECK(st.total_finished == o->finished &&
           st.total_aborted + st.total_failed == o->aborted + o->failed);
  RG_CHECK(o->finished + o->aborted + o->failed == o->requests);
  if (!c->prefix) RG_CHECK(st.blocks_cached == 0 && st.prefix_lookup_tokens == 0);
  if (!c->n_tier)
    RG_CHECK(st.blocks_offloaded == 0 && st.blocks_reloaded == 0 && st.tier_used == 0);
  RG_CHECK(st.imports <= o->imported && st.tier_hit_tokens <= st.prefix_hit_tokens);
  o->preempt_recompute = st.preempt_recompute;
  o->preempt_swap = st.preempt_swap;
  o->hit_tokens = st.prefix_hit_tokens;
  o->lookup_tokens = st.prefix_lookup_tokens;
  o->evicted = st.blocks_evicted;
  o->imports = st.imports;
  o->import_tokens = st.import_tokens;
  o->offloaded = st.blocks_offloaded;
  o->reloaded = st.blocks_reloaded;
  o->dropped = st.blocks_dropped;
  o->tier_hit_tokens = st.tier_hit_tokens;
  o->digest = XXH3_64bits_digest(x);
  RG_CHECK_OK(rg_sched_check(s));
done:
  if (tr)
    for (int i = 0; i < cap_tr; i++) free(tr[i].tokens);
  if (fu)
    for (int i = 0; i < n_fu; i++) free(fu[i].tokens);
  XXH3_freeState(x);
  free(prompt);
  free(res);
  free(ref);
  free(fu);
  free(tr);
  free(m.reload_mark);
  free(m.tier_mark);
  free(m.copy_req);
  free(m.copy_mark);
  free(m.write_mark);
  free(m.tier);
  free(m.swp);
  free(m.dev);
  rg_sched_destroy(s);
}

RG_TEST(sched_random_streams_keep_every_invariant) {
  // Small pools, so preemption is frequent; both policies; cache on and
  // off; a 2-bit key so collisions are everywhere; block sizes 1 to 16.
  static const stream_cfg_t cfgs[] = {
      {"recompute", 4,  24, 0, 6, 24, 96, RG_SCHED_PREEMPT_RECOMPUTE, 0, 0, -1, 500, 14,
       12,          24, 0,  0, 0, 0,  0},
      {"recompute+cache",
       4,
       24,
       0,
       6,
       24,
       96,
       RG_SCHED_PREEMPT_RECOMPUTE,
       1,
       0,
       -1,
       500,
       14,
       12,
       24,
       0,
       0,
       0,
       0,
       0},
      {"swap", 4,  24, 16, 6, 24, 96, RG_SCHED_PREEMPT_SWAP, 0, 0, -1, 500, 14,
       12,     24, 0,  0,  0, 0,  0},
      {"swap+cache+watermark",
       4,
       28,
       12,
       6,
       32,
       96,
       RG_SCHED_PREEMPT_SWAP,
       1,
       0,
       2,
       500,
       14,
       12,
       24,
       0,
       0,
       0,
       0,
       0},
      {"cache, 2-bit keys",
       4,
       24,
       0,
       6,
       24,
       96,
       RG_SCHED_PREEMPT_RECOMPUTE,
       1,
       2,
       -1,
       500,
       14,
       12,
       24,
       0,
       0,
       0,
       0,
       0},
      // Two token ids and 2-token blocks: equal blocks after different
      // prefixes everywhere, so only the parent check tells them apart.
      {"2-bit keys, 2 tokens",
       2,
       24,
       0,
       6,
       24,
       48,
       RG_SCHED_PREEMPT_RECOMPUTE,
       1,
       2,
       -1,
       500,
       8,
       6,
       12,
       2,
       0,
       0,
       0,
       0},
      {"4-bit keys, 3 tokens",
       2,
       30,
       8,
       6,
       24,
       48,
       RG_SCHED_PREEMPT_SWAP,
       1,
       4,
       -1,
       500,
       8,
       6,
       12,
       3,
       0,
       0,
       0,
       0},
      {"swap, tier too small",
       4,
       20,
       4,
       5,
       20,
       80,
       RG_SCHED_PREEMPT_SWAP,
       1,
       0,
       -1,
       400,
       10,
       10,
       20,
       0,
       0,
       0,
       0,
       0},
      {"block size 1",
       1,
       20,
       10,
       5,
       12,
       20,
       RG_SCHED_PREEMPT_SWAP,
       1,
       0,
       -1,
       400,
       6,
       4,
       8,
       0,
       0,
       0,
       0,
       0},
      {"block size 16",
       16,
       10,
       6,
       4,
       32,
       160,
       RG_SCHED_PREEMPT_RECOMPUTE,
       1,
       0,
       -1,
       300,
       40,
       40,
       40,
       0,
       0,
       0,
       0,
       0},
      // Imported requests (a fake remote prefill writes their KV), alone and
      // among cached prefixes, swaps and a watermark.
      {.name = "imports",
       .bs = 4,
       .n_blocks = 24,
       .max_seqs = 6,
       .max_batch_tokens = 24,
       .max_context = 96,
       .watermark = -1,
       .n_requests = 300,
       .prefix_max = 14,
       .suffix_max = 12,
       .out_max = 24,
       .import_pct = 40},
      {.name = "imports+cache+swap",
       .bs = 4,
       .n_blocks = 28,
       .n_swap = 12,
       .max_seqs = 6,
       .max_batch_tokens = 32,
       .max_context = 96,
       .preempt = RG_SCHED_PREEMPT_SWAP,
       .prefix = 1,
       .watermark = 2,
       .n_requests = 300,
       .prefix_max = 14,
       .suffix_max = 12,
       .out_max = 24,
       .import_pct = 40},
      // Sessions coming back after think times around the retention window,
      // with a tier that holds their prefixes; then evict-to-tier only; then
      // a tier too small (drops), 4-bit keys and imports all at once.
      {.name = "sessions+tier",
       .bs = 4,
       .n_blocks = 32,
       .max_seqs = 6,
       .max_batch_tokens = 32,
       .max_context = 96,
       .prefix = 1,
       .watermark = -1,
       .n_requests = 250,
       .prefix_max = 14,
       .suffix_max = 12,
       .out_max = 16,
       .n_tier = 48,
       .retention = 0.02,
       .session_pct = 60},
      {.name = "sessions, pressure",
       .bs = 4,
       .n_blocks = 24,
       .n_swap = 8,
       .max_seqs = 6,
       .max_batch_tokens = 32,
       .max_context = 96,
       .preempt = RG_SCHED_PREEMPT_SWAP,
       .prefix = 1,
       .watermark = -1,
       .n_requests = 250,
       .prefix_max = 14,
       .suffix_max = 12,
       .out_max = 16,
       .n_tier = 48,
       .session_pct = 60},
      {.name = "sessions, small tier",
       .bs = 2,
       .n_blocks = 30,
       .max_seqs = 6,
       .max_batch_tokens = 24,
       .max_context = 64,
       .prefix = 1,
       .hash_bits = 4,
       .watermark = -1,
       .n_requests = 250,
       .prefix_max = 8,
       .suffix_max = 6,
       .out_max = 12,
       .vocab = 3,
       .n_tier = 4,
       .retention = 0.01,
       .import_pct = 30,
       .session_pct = 60},
  };
  stream_out_t sum = {0};
  for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) {
    stream_out_t a, b, other;
    run_stream(t, &cfgs[i], 1000 + i, &a);
    run_stream(t, &cfgs[i], 1000 + i, &b);
    // The same seed gives the same decisions, batch for batch.
    RG_CHECK(a.digest == b.digest && a.iterations == b.iterations && a.finished == b.finished);
    if (i == 0) {
      run_stream(t, &cfgs[i], 77, &other);
      RG_CHECK(other.digest != a.digest);  // the digest does see the decisions
    }
    printf(
        "    %-22s %4lld requests (%lld refused), %6lld iterations, %4lld finished, %3lld aborted, "
        "%3lld failed, preempted %lld by recompute %lld by swap, prefix hits %lld of %lld tokens, "
        "%lld evictions\n",
        cfgs[i].name, (long long)a.requests, (long long)a.refused, (long long)a.iterations,
        (long long)a.finished, (long long)a.aborted, (long long)a.failed,
        (long long)a.preempt_recompute, (long long)a.preempt_swap, (long long)a.hit_tokens,
        (long long)a.lookup_tokens, (long long)a.evicted);
    sum.requests += a.requests;
    sum.iterations += a.iterations;
    sum.preempt_recompute += a.preempt_recompute;
    sum.preempt_swap += a.preempt_swap;
    sum.hit_tokens += a.hit_tokens;
    if (cfgs[i].import_pct || cfgs[i].n_tier)
      printf(
          "    %-22s %4lld imported (%lld admitted, %lld positions sent), %lld session turns, "
          "tier: %lld offloaded, %lld reloaded, %lld dropped, %lld hit tokens\n",
          "", (long long)a.imported, (long long)a.imports, (long long)a.import_tokens,
          (long long)a.sessions, (long long)a.offloaded, (long long)a.reloaded,
          (long long)a.dropped, (long long)a.tier_hit_tokens);
    if (cfgs[i].preempt == RG_SCHED_PREEMPT_SWAP && cfgs[i].n_swap >= 10)
      RG_CHECK(a.preempt_swap > 0);
    if (cfgs[i].prefix) RG_CHECK(a.hit_tokens > 0);
    if (cfgs[i].import_pct) RG_CHECK(a.imports > 0 && a.import_tokens > 0);
    if (cfgs[i].n_tier) RG_CHECK(a.offloaded > 0 && a.reloaded > 0 && a.tier_hit_tokens > 0);
    if (cfgs[i].n_tier && cfgs[i].n_tier < 8) RG_CHECK(a.dropped > 0);
  }
  printf(
      "    total: %lld requests, %lld iterations, %lld preemptions (%lld recompute, %lld swap), "
      "%lld prefix-hit tokens\n",
      (long long)sum.requests, (long long)sum.iterations,
      (long long)(sum.preempt_recompute + sum.preempt_swap), (long long)sum.preempt_recompute,
      (long long)sum.preempt_swap, (long long)sum.hit_tokens);
  RG_CHECK(sum.preempt_recompute > 0 && sum.preempt_swap > 0);
}
