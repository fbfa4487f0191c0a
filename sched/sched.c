// The scheduler object, its config, and the parts of a request's life that
// are not a batch: add, abort, fail, release, and what the caller may read.
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sched/sched_impl.h"

static const char *const preempt_names[] = {
#define RG_X_(e, n) n,
    RG_SCHED_PREEMPT_MAP(RG_X_)
#undef RG_X_
};
static const char *const state_names[] = {
#define RG_X_(e, n) n,
    RG_SCHED_STATE_MAP(RG_X_)
#undef RG_X_
};
static const char *const block_state_names[] = {
#define RG_X_(e, n) n,
    RG_SCHED_BLOCK_MAP(RG_X_)
#undef RG_X_
};
_Static_assert(sizeof(preempt_names) / sizeof(preempt_names[0]) == RG_SCHED_PREEMPT_COUNT,
               "preempt names out of step with RG_SCHED_PREEMPT_MAP");
_Static_assert(sizeof(state_names) / sizeof(state_names[0]) == RG_SCHED_STATE_COUNT,
               "state names out of step with RG_SCHED_STATE_MAP");
_Static_assert(sizeof(block_state_names) / sizeof(block_state_names[0]) == RG_SCHED_BLOCK_COUNT,
               "block state names out of step with RG_SCHED_BLOCK_MAP");

const char *rg_sched_preempt_name(rg_sched_preempt_t p) {
  return (unsigned)p < RG_SCHED_PREEMPT_COUNT ? preempt_names[p] : "?";
}
const char *rg_sched_state_name(rg_sched_state_t st) {
  return (unsigned)st < RG_SCHED_STATE_COUNT ? state_names[st] : "?";
}
const char *rg_sched_block_state_name(rg_sched_block_state_t b) {
  return (unsigned)b < RG_SCHED_BLOCK_COUNT ? block_state_names[b] : "?";
}

rg_status_t rg_sched_preempt_parse(const char *word, rg_sched_preempt_t *out) {
  for (int i = 0; i < RG_SCHED_PREEMPT_COUNT; i++)
    if (word && strcmp(word, preempt_names[i]) == 0) {
      *out = (rg_sched_preempt_t)i;
      return NULL;
    }
  return rg_status_make(RG_INVALID_ARGUMENT,
                        "unknown preemption policy '%s'; choose recompute or swap",
                        word ? word : "(null)");
}

static int is_running(rg_sched_state_t st) {
  return st == RG_SCHED_PREFILLING || st == RG_SCHED_DECODING;
}
static int is_terminal(rg_sched_state_t st) {
  return st == RG_SCHED_FINISHED || st == RG_SCHED_ABORTED || st == RG_SCHED_FAILED;
}

rg__req_t *rg__sched_req(const rg_sched_t *s, int32_t h) {
  if (h < 0 || h >= s->n_reqs || !s->reqs[h].in_use) return NULL;
  return &s->reqs[h];
}

int64_t rg__sched_blocks_for(const rg_sched_t *s, int64_t tokens) {
  return (tokens + s->bs - 1) / s->bs;
}

void rg__list_push_back(rg_sched_t *s, rg__list_t *l, int32_t h) {
  rg__req_t *r = &s->reqs[h];
  r->prev = l->tail;
  r->next = -1;
  if (l->tail >= 0)
    s->reqs[l->tail].next = h;
  else
    l->head = h;
  l->tail = h;
  l->n++;
}

void rg__list_push_front(rg_sched_t *s, rg__list_t *l, int32_t h) {
  rg__req_t *r = &s->reqs[h];
  r->prev = -1;
  r->next = l->head;
  if (l->head >= 0)
    s->reqs[l->head].prev = h;
  else
    l->tail = h;
  l->head = h;
  l->n++;
}

void rg__list_remove(rg_sched_t *s, rg__list_t *l, int32_t h) {
  rg__req_t *r = &s->reqs[h];
  if (r->prev >= 0)
    s->reqs[r->prev].next = r->next;
  else
    l->head = r->next;
  if (r->next >= 0)
    s->reqs[r->next].prev = r->prev;
  else
    l->tail = r->prev;
  r->prev = r->next = -1;
  l->n--;
}

static rg_status_t resolve_config(const rg_sched_config_t *in, rg_sched_config_t *c) {
  if (!in) return rg_status_make(RG_INVALID_ARGUMENT, "scheduler config: none given");
  *c = *in;
  if (c->block_size < 0 || c->block_size > 65536)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "scheduler config: block_size %" PRId32
                          " is out of range; use 1 to 65536 tokens (0 = 16)",
                          c->block_size);
  if (c->block_size == 0) c->block_size = 16;
  if (c->n_blocks <= 0 || c->n_blocks >= INT32_MAX)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "scheduler config: n_blocks %" PRId64
                          " is out of range; the KV pool needs 1 to %d blocks",
                          c->n_blocks, INT32_MAX - 1);
  if (c->n_swap_blocks < 0 || c->n_swap_blocks >= INT32_MAX)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "scheduler config: n_swap_blocks %" PRId64
                          " is out of range; use 0 (no swap tier) to %d",
                          c->n_swap_blocks, INT32_MAX - 1);
  if (c->max_seqs < 0 || c->max_seqs > (1 << 20))
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "scheduler config: max_seqs %" PRId32
                          " is out of range; use 1 to 1048576 (0 = 16)",
                          c->max_seqs);
  if (c->max_seqs == 0) c->max_seqs = 16;
  if (c->max_batch_tokens < 0)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "scheduler config: max_batch_tokens %" PRId64
                          " is negative; use a token count (0 = 512)",
                          c->max_batch_tokens);
  if (c->max_batch_tokens == 0) c->max_batch_tokens = 512;
  if (c->max_batch_tokens > INT32_MAX)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "scheduler config: max_batch_tokens %" PRId64 " is above %d",
                          c->max_batch_tokens, INT32_MAX);
  if (c->max_batch_tokens < c->max_seqs)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "scheduler config: max_batch_tokens %" PRId64
                          " is below max_seqs %" PRId32
                          ": every running sequence needs a token of each iteration",
                          c->max_batch_tokens, c->max_seqs);
  if (c->max_context <= 0)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "scheduler config: max_context %" PRId64
                          " must be positive (tokens of prompt plus output per request)",
                          c->max_context);
  if ((unsigned)c->preempt >= RG_SCHED_PREEMPT_COUNT)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "scheduler config: preempt %d is not a policy; use "
                          "RG_SCHED_PREEMPT_RECOMPUTE or RG_SCHED_PREEMPT_SWAP",
                          (int)c->preempt);
  if (c->preempt == RG_SCHED_PREEMPT_SWAP && c->n_swap_blocks == 0)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "scheduler config: preempt is swap but n_swap_blocks is 0; give the "
                          "swap tier's size in blocks, or preempt by recompute");
  if (c->prefix_cache != 0 && c->prefix_cache != 1)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "scheduler config: prefix_cache %d must be 0 (off) or 1 (on)",
                          c->prefix_cache);
  if (c->watermark_blocks < -1 || c->watermark_blocks >= c->n_blocks)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "scheduler config: watermark_blocks %" PRId64
                          " must be -1 (none), 0 (1%% of the pool) or fewer than n_blocks %" PRId64,
                          c->watermark_blocks, c->n_blocks);
  if (c->n_tier_blocks < 0 || c->n_tier_blocks >= INT32_MAX - c->n_blocks)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "scheduler config: n_tier_blocks %" PRId64
                          " is out of range; use 0 (no capacity tier) to %" PRId64,
                          c->n_tier_blocks, (int64_t)INT32_MAX - 1 - c->n_blocks);
  if (c->n_tier_blocks > 0 && !c->prefix_cache)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "scheduler config: n_tier_blocks %" PRId64
                          " needs prefix_cache on: the capacity tier holds only cached blocks",
                          c->n_tier_blocks);
  if (!isfinite(c->retention_s) || c->retention_s < 0)
    return rg_status_make(
        RG_INVALID_ARGUMENT,
        "scheduler config: retention_s %g must be a finite number of seconds >= 0 "
        "(0 = move idle blocks to the tier only when the device needs the room)",
        c->retention_s);
  if (c->retention_s > 0 && c->n_tier_blocks == 0)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "scheduler config: retention_s %g s is set but n_tier_blocks is 0; give "
                          "the capacity tier's size in blocks, or leave retention_s at 0",
                          c->retention_s);
  if (c->hash_bits < 0 || c->hash_bits > 64)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "scheduler config: hash_bits %d is out of range; use 1 to 64 (0 = 64)",
                          c->hash_bits);
  if (c->hash_bits == 0) c->hash_bits = 64;
  return NULL;
}

rg_status_t rg_sched_create(const rg_sched_config_t *config, rg_sched_t **out) {
  *out = NULL;
  rg_sched_config_t c;
  RG_RETURN_IF_ERROR(resolve_config(config, &c));
  rg_sched_t *s = calloc(1, sizeof(*s));
  if (!s) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory for a scheduler");
  s->cfg = c;
  s->bs = c.block_size;
  s->n_blocks = (int32_t)c.n_blocks;
  s->n_swap = (int32_t)c.n_swap_blocks;
  s->n_tier = (int32_t)c.n_tier_blocks;
  s->watermark = c.watermark_blocks < 0 ? 0
                 : c.watermark_blocks   ? c.watermark_blocks
                                        : c.n_blocks / 100;
  s->key_mask = c.hash_bits == 64 ? UINT64_MAX : (UINT64_C(1) << c.hash_bits) - 1;
  s->running = s->waiting = s->swapped = (rg__list_t){-1, -1, 0};
  s->last_now = -INFINITY;
  rg_status_t st = rg__blocks_init(s);
  if (st) goto fail_blocks;
  size_t m = (size_t)c.max_seqs;
  s->entries = malloc(m * sizeof(*s->entries));
  for (int i = 0; i < 3; i++) s->seg[i] = malloc(m * sizeof(*s->seg[i]));
  s->slot_gone = calloc(m, 1);
  s->slot_stamp = calloc(m, sizeof(*s->slot_stamp));
  s->slot_result = calloc(m, sizeof(*s->slot_result));
  s->preempted = malloc(m * sizeof(*s->preempted));
  s->imports = malloc(m * sizeof(*s->imports));
  // A swap-out or swap-in moves each swap block at most once per batch.
  size_t ns = s->n_swap ? (size_t)s->n_swap : 1;
  s->swap_free = malloc(ns * sizeof(*s->swap_free));
  s->swap_out = malloc(ns * sizeof(*s->swap_out));
  s->swap_in = malloc(ns * sizeof(*s->swap_in));
  size_t nt = s->n_tier ? (size_t)s->n_tier : 1;
  s->offloads = malloc(nt * sizeof(*s->offloads));
  s->reloads = malloc(nt * sizeof(*s->reloads));
  if (!s->entries || !s->seg[0] || !s->seg[1] || !s->seg[2] || !s->slot_gone || !s->slot_stamp ||
      !s->slot_result || !s->preempted || !s->imports || !s->swap_free || !s->swap_out ||
      !s->swap_in || !s->offloads || !s->reloads) {
    st = rg_status_make(RG_OUT_OF_MEMORY, "out of memory for batches of %d sequences", c.max_seqs);
    goto fail_buffers;
  }
  for (int32_t i = 0; i < s->n_swap; i++) s->swap_free[i] = s->n_swap - 1 - i;
  s->n_swap_free = s->n_swap;
  *out = s;
  return NULL;

fail_buffers:
  free(s->reloads);
  free(s->offloads);
  free(s->swap_in);
  free(s->swap_out);
  free(s->swap_free);
  free(s->imports);
  free(s->preempted);
  free(s->slot_result);
  free(s->slot_stamp);
  free(s->slot_gone);
  for (int i = 0; i < 3; i++) free(s->seg[i]);
  free(s->entries);
fail_blocks:
  rg__blocks_deinit(s);
  free(s);
  return st;
}

static void free_req(rg__req_t *r) {
  free(r->keys);  // one allocation holds every per-request array
  free(r->reason_owned);
  memset(r, 0, sizeof(*r));
}

void rg_sched_destroy(rg_sched_t *s) {
  if (!s) return;
  for (int32_t h = 0; h < s->n_reqs; h++)
    if (s->reqs[h].in_use) free_req(&s->reqs[h]);
  free(s->free_handles);
  free(s->reqs);
  free(s->reloads);
  free(s->offloads);
  free(s->swap_in);
  free(s->swap_out);
  free(s->swap_free);
  free(s->imports);
  free(s->preempted);
  free(s->slot_result);
  free(s->slot_stamp);
  free(s->slot_gone);
  for (int i = 0; i < 3; i++) free(s->seg[i]);
  free(s->entries);
  rg__blocks_deinit(s);
  free(s);
}

void rg_sched_get_config(const rg_sched_t *s, rg_sched_config_t *out) {
  *out = s->cfg;
}

rg_status_t rg__sched_check_time(rg_sched_t *s, const char *fn, double now) {
  if (!isfinite(now))
    return rg_status_make(RG_INVALID_ARGUMENT, "%s: time %g is not a finite number of seconds", fn,
                          now);
  if (now < s->last_now)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "%s: time went backwards: %.9g s is before %.9g s given to an "
                          "earlier call",
                          fn, now, s->last_now);
  s->last_now = now;
  return NULL;
}

static rg_status_t grow_handles(rg_sched_t *s) {
  if (s->n_reqs < s->cap_reqs) return NULL;
  if (s->cap_reqs >= INT32_MAX / 2)
    return rg_status_make(RG_OUT_OF_MEMORY, "too many requests held (%d); release finished ones",
                          s->n_reqs);
  int32_t cap = s->cap_reqs ? s->cap_reqs * 2 : 64;
  rg__req_t *reqs = realloc(s->reqs, (size_t)cap * sizeof(*reqs));
  if (!reqs) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory for %d requests", cap);
  s->reqs = reqs;
  int32_t *fh = realloc(s->free_handles, (size_t)cap * sizeof(*fh));
  if (!fh) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory for %d requests", cap);
  s->free_handles = fh;
  s->cap_reqs = cap;
  return NULL;
}

// The checks rg_sched_add and rg_sched_add_imported share: a request that
// could never run is refused here, naming the numbers.
static rg_status_t check_request(const rg_sched_t *s, const rg_sched_request_t *q) {
  uint64_t id = q->id;
  if (q->n_prompt == 0)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "request %" PRIu64 ": the prompt is empty; at least 1 token is needed",
                          id);
  if (!q->prompt)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "request %" PRIu64 ": n_prompt is %zu but no prompt tokens were given",
                          id, q->n_prompt);
  if (q->max_tokens < 1)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "request %" PRIu64 ": max_tokens is %" PRId64
                          "; at least 1 token must be generated",
                          id, q->max_tokens);
  int64_t ctx = s->cfg.max_context;
  if (q->n_prompt > (uint64_t)ctx || q->max_tokens > ctx - (int64_t)q->n_prompt)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "request %" PRIu64 ": prompt of %zu tokens plus %" PRId64
                          " to generate exceeds max_context %" PRId64,
                          id, q->n_prompt, q->max_tokens, ctx);
  int64_t n_total = (int64_t)q->n_prompt + q->max_tokens;
  // The last generated token is never fed back, so its KV is never needed.
  int64_t need = rg__sched_blocks_for(s, n_total - 1);
  if (need > s->n_blocks)
    return rg_status_make(
        RG_INVALID_ARGUMENT,
        "request %" PRIu64 ": prompt of %zu tokens plus %" PRId64 " to generate needs %" PRId64
        " KV blocks of %d tokens, but the pool "
        "holds only %d blocks (%" PRId64 " tokens)",
        id, q->n_prompt, q->max_tokens, need, s->bs, s->n_blocks, (int64_t)s->n_blocks * s->bs);
  if (!isfinite(q->arrival))
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "request %" PRIu64 ": arrival %g is not a finite number of seconds", id,
                          q->arrival);
  for (size_t i = 0; i < q->n_prompt; i++)
    if (q->prompt[i] < 0)
      return rg_status_make(RG_INVALID_ARGUMENT,
                            "request %" PRIu64 ": prompt token %zu is %" PRId32
                            "; token ids must be >= 0",
                            id, i, q->prompt[i]);
  return NULL;
}

// Records a checked request: the prompt, then `generated` (n_generated
// tokens) as its output so far; n_remote positions have KV elsewhere.
static rg_status_t insert_request(rg_sched_t *s, const rg_sched_request_t *q,
                                  const int32_t *generated, size_t n_generated, int64_t n_remote,
                                  int32_t *out_handle) {
  uint64_t id = q->id;
  int64_t n_total = (int64_t)q->n_prompt + q->max_tokens;
  int32_t cap = (int32_t)rg__sched_blocks_for(s, n_total);
  // One allocation for every per-request array, 8-byte members first.
  size_t bytes = (size_t)cap * (2 * sizeof(uint64_t) + 2 * sizeof(int32_t)) +
                 (size_t)n_total * sizeof(int32_t);
  uint64_t *mem = malloc(bytes);
  if (!mem)
    return rg_status_make(RG_OUT_OF_MEMORY,
                          "request %" PRIu64 ": out of memory for %" PRId64 " tokens", id, n_total);
  int32_t h;
  if (s->n_free_handles > 0) {
    h = s->free_handles[--s->n_free_handles];
  } else {
    rg_status_t st = grow_handles(s);
    if (st) {
      free(mem);
      return st;
    }
    h = s->n_reqs++;
  }
  rg__req_t *r = &s->reqs[h];
  memset(r, 0, sizeof(*r));
  r->in_use = 1;
  r->state = RG_SCHED_WAITING;
  r->id = id;
  r->n_prompt = (int64_t)q->n_prompt;
  r->max_tokens = q->max_tokens;
  r->n_known = r->n_prompt + (int64_t)n_generated;
  r->n_remote = n_remote;
  r->cap_blocks = cap;
  r->keys = mem;
  r->canon = r->keys + cap;
  r->table = (int32_t *)(r->canon + cap);
  r->swap = r->table + cap;
  r->tokens = r->swap + cap;
  memcpy(r->tokens, q->prompt, q->n_prompt * sizeof(int32_t));
  if (n_generated) memcpy(r->tokens + r->n_prompt, generated, n_generated * sizeof(int32_t));
  r->batch_iter = -1;
  r->arrival = q->arrival;
  r->first_scheduled = r->first_token = r->last_token = r->finished = NAN;
  s->st.n_state[RG_SCHED_WAITING]++;
  rg__list_push_back(s, &s->waiting, h);
  *out_handle = h;
  return NULL;
}

rg_status_t rg_sched_add(rg_sched_t *s, const rg_sched_request_t *q, int32_t *out_handle) {
  *out_handle = -1;
  if (!q) return rg_status_make(RG_INVALID_ARGUMENT, "rg_sched_add: no request given");
  RG_RETURN_IF_ERROR(check_request(s, q));
  return insert_request(s, q, NULL, 0, 0, out_handle);
}

rg_status_t rg_sched_add_imported(rg_sched_t *s, const rg_sched_request_t *q, size_t n_computed,
                                  const int32_t *generated, size_t n_generated,
                                  int32_t *out_handle) {
  *out_handle = -1;
  if (!q) return rg_status_make(RG_INVALID_ARGUMENT, "rg_sched_add_imported: no request given");
  RG_RETURN_IF_ERROR(check_request(s, q));
  uint64_t id = q->id;
  if (n_generated == 0)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "request %" PRIu64
                          ": an imported request needs the tokens generated so "
                          "far (at least the first, sampled where its prompt ran); none were given",
                          id);
  if (!generated)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "request %" PRIu64
                          ": n_generated is %zu but no generated tokens were given",
                          id, n_generated);
  if (n_generated >= (uint64_t)q->max_tokens)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "request %" PRIu64
                          ": %zu tokens generated already leave none of "
                          "max_tokens %" PRId64 " to generate here",
                          id, n_generated, q->max_tokens);
  for (size_t i = 0; i < n_generated; i++)
    if (generated[i] < 0)
      return rg_status_make(RG_INVALID_ARGUMENT,
                            "request %" PRIu64 ": generated token %zu is %" PRId32
                            "; token ids must be >= 0",
                            id, i, generated[i]);
  // No overflow: check_request bounds n_prompt + max_tokens by max_context.
  size_t n_known = q->n_prompt + n_generated;
  if (n_computed == 0 || n_computed > n_known - 1)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "request %" PRIu64
                          ": n_computed %zu is out of range; of its %zu known "
                          "tokens (prompt %zu + generated %zu), positions 1 to %zu can have KV "
                          "computed elsewhere (the last known token's is computed here)",
                          id, n_computed, n_known, q->n_prompt, n_generated, n_known - 1);
  return insert_request(s, q, generated, n_generated, (int64_t)n_computed, out_handle);
}

void rg__set_state(rg_sched_t *s, rg__req_t *r, rg_sched_state_t to) {
  s->st.n_state[r->state]--;
  s->st.n_state[to]++;
  r->state = to;
}

void rg__sched_end(rg_sched_t *s, int32_t h, rg_sched_state_t to, const char *reason, double now) {
  rg__req_t *r = &s->reqs[h];
  if (is_running(r->state)) {
    rg__release_table(s, r);
    rg__list_remove(s, &s->running, h);
  } else if (r->state == RG_SCHED_WAITING) {
    rg__list_remove(s, &s->waiting, h);
  } else if (r->state == RG_SCHED_SWAPPED) {
    for (int32_t i = r->n_swap; i > 0; i--) s->swap_free[s->n_swap_free++] = r->swap[i - 1];
    r->n_swap = 0;
    rg__list_remove(s, &s->swapped, h);
  }
  // Its entry in the outstanding batch, if any, is skipped at commit.
  if (s->outstanding && r->batch_iter == s->iter) s->slot_gone[r->batch_slot] = 1;
  r->n_remote = 0;  // an ended request imports nothing
  rg__set_state(s, r, to);
  r->reason = reason;
  r->finished = now;
  if (to == RG_SCHED_FINISHED)
    s->st.total_finished++;
  else if (to == RG_SCHED_ABORTED)
    s->st.total_aborted++;
  else
    s->st.total_failed++;
}

static rg_status_t endable(rg_sched_t *s, const char *fn, int32_t h, rg__req_t **out) {
  rg__req_t *r = rg__sched_req(s, h);
  if (!r)
    return rg_status_make(RG_INVALID_ARGUMENT, "%s: request handle %" PRId32 " is not in use", fn,
                          h);
  if (is_terminal(r->state))
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "%s: request %" PRIu64 " (handle %" PRId32 ") has already %s", fn, r->id,
                          h,
                          r->state == RG_SCHED_FINISHED  ? "finished"
                          : r->state == RG_SCHED_ABORTED ? "been aborted"
                                                         : "failed");
  *out = r;
  return NULL;
}

rg_status_t rg_sched_abort(rg_sched_t *s, int32_t h, double now) {
  rg__req_t *r = NULL;
  RG_RETURN_IF_ERROR(endable(s, "rg_sched_abort", h, &r));
  RG_RETURN_IF_ERROR(rg__sched_check_time(s, "rg_sched_abort", now));
  rg__sched_end(s, h, RG_SCHED_ABORTED, "aborted", now);
  return NULL;
}

rg_status_t rg_sched_fail(rg_sched_t *s, int32_t h, double now, const char *reason) {
  rg__req_t *r = NULL;
  RG_RETURN_IF_ERROR(endable(s, "rg_sched_fail", h, &r));
  if (!reason || !*reason)
    return rg_status_make(
        RG_INVALID_ARGUMENT,
        "rg_sched_fail: request %" PRIu64 " (handle %" PRId32 "): a reason is required", r->id, h);
  RG_RETURN_IF_ERROR(rg__sched_check_time(s, "rg_sched_fail", now));
  char *copy = strdup(reason);
  if (!copy)
    return rg_status_make(RG_OUT_OF_MEMORY, "rg_sched_fail: out of memory copying the reason");
  r->reason_owned = copy;
  rg__sched_end(s, h, RG_SCHED_FAILED, copy, now);
  return NULL;
}

rg_status_t rg_sched_device_kv_lost(rg_sched_t *s, double now, const char *reason,
                                    size_t *n_failed) {
  if (n_failed) *n_failed = 0;
  if (s->outstanding)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "rg_sched_device_kv_lost: a batch is outstanding; commit it first");
  if (!reason || !*reason)
    return rg_status_make(RG_INVALID_ARGUMENT, "rg_sched_device_kv_lost: a reason is required");
  RG_RETURN_IF_ERROR(rg__sched_check_time(s, "rg_sched_device_kv_lost", now));
  while (s->running.head >= 0) {
    RG_RETURN_IF_ERROR(rg_sched_fail(s, s->running.head, now, reason));
    if (n_failed) (*n_failed)++;
  }
  // Nothing holds a device block now: the cached ones go back to the free
  // list, and no key names a device block any more.
  for (int32_t b = 0; b < s->n_blocks; b++) {
    rg__block_t *k = &s->blocks[b];
    if (k->indexed) rg__index_remove(s, b);
    if (k->state == RG_SCHED_BLOCK_CACHED) {
      rg__lru_remove(s, &s->lru, b);
      k->state = RG_SCHED_BLOCK_FREE;
      s->free_list[s->n_free++] = b;
      s->n_cached--;
    }
  }
  return NULL;
}

void rg_sched_release(rg_sched_t *s, int32_t h) {
  rg__req_t *r = rg__sched_req(s, h);
  if (!r) return;
  if (!is_terminal(r->state)) rg__sched_end(s, h, RG_SCHED_ABORTED, "aborted", s->last_now);
  if (s->outstanding && r->batch_iter == s->iter) s->slot_gone[r->batch_slot] = 1;
  s->st.n_state[r->state]--;
  free_req(r);
  s->free_handles[s->n_free_handles++] = h;
}

rg_status_t rg_sched_request_info(const rg_sched_t *s, int32_t h, rg_sched_request_info_t *out) {
  const rg__req_t *r = rg__sched_req(s, h);
  if (!r)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "rg_sched_request_info: request handle %" PRId32 " is not in use", h);
  *out = (rg_sched_request_info_t){
      .state = r->state,
      .id = r->id,
      .n_prompt = r->n_prompt,
      .max_tokens = r->max_tokens,
      .n_computed = r->n_computed,
      .n_output = r->n_known - r->n_prompt,
      .output = r->tokens + r->n_prompt,
      .n_cached_tokens = r->n_cached_tokens,
      .n_tier_tokens = r->n_tier_tokens,
      .n_import_tokens = r->n_import_tokens,
      .n_preemptions = r->n_preemptions,
      .n_blocks = r->n_table,
      .n_swap_blocks = r->n_swap,
      .arrival = r->arrival,
      .first_scheduled = r->first_scheduled,
      .first_token = r->first_token,
      .last_token = r->last_token,
      .finished = r->finished,
      .reason = r->reason,
  };
  return NULL;
}

void rg_sched_stats(const rg_sched_t *s, rg_sched_stats_t *out) {
  *out = s->st;
  out->iterations = s->iter;
  out->blocks_used = s->n_used;
  out->blocks_cached = s->n_cached;
  out->blocks_free = s->n_free;
  out->swap_free = s->n_swap_free;
  out->swap_used = s->n_swap - s->n_swap_free;
  out->tier_used = s->n_tier_cached;
  out->tier_free = s->n_tier - s->n_tier_cached;
}

rg_status_t rg_sched_block_info(const rg_sched_t *s, int32_t b, rg_sched_block_info_t *out) {
  if (b < 0 || b >= s->n_blocks)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "rg_sched_block_info: block %" PRId32 " is not in the pool of %" PRId32
                          " blocks",
                          b, s->n_blocks);
  const rg__block_t *k = &s->blocks[b];
  *out = (rg_sched_block_info_t){.state = (rg_sched_block_state_t)k->state,
                                 .refcount = k->ref,
                                 .cached_key = k->indexed,
                                 .key = k->key};
  return NULL;
}

rg_status_t rg_sched_tier_block_info(const rg_sched_t *s, int32_t t, rg_sched_block_info_t *out) {
  if (t < 0 || t >= s->n_tier)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "rg_sched_tier_block_info: block %" PRId32
                          " is not in the capacity tier of %" PRId32 " blocks",
                          t, s->n_tier);
  const rg__block_t *k = &s->blocks[s->n_blocks + t];
  *out = (rg_sched_block_info_t){.state = (rg_sched_block_state_t)k->state,
                                 .refcount = k->ref,
                                 .cached_key = k->indexed,
                                 .key = k->key};
  return NULL;
}
