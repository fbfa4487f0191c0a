// rg_sched_check: every invariant of the pool, the swap tier, the capacity
// tier, the prefix index and the queues, recounted from scratch rather than trusted from the
// counters it checks.
#include <inttypes.h>
#include <stdlib.h>

#include "sched/sched_impl.h"

#define FAIL(...)                                                  \
  do {                                                             \
    st = rg_status_make(RG_INTERNAL, "sched check: " __VA_ARGS__); \
    goto done;                                                     \
  } while (0)

static int is_running(rg_sched_state_t st) {
  return st == RG_SCHED_PREFILLING || st == RG_SCHED_DECODING;
}

// Walks one queue: members in the state(s) it holds, links consistent, no
// cycle, the count right. `mark` records which list each handle is on.
static rg_status_t check_list(const rg_sched_t *s, const rg__list_t *l, const char *name,
                              uint8_t list_id, uint8_t *mark) {
  int64_t n = 0;
  int32_t prev = -1;
  for (int32_t h = l->head; h >= 0; h = s->reqs[h].next) {
    if (h >= s->n_reqs || !s->reqs[h].in_use)
      return rg_status_make(
          RG_INTERNAL, "sched check: the %s queue holds handle %" PRId32 ", which is not in use",
          name, h);
    if (mark[h])
      return rg_status_make(RG_INTERNAL,
                            "sched check: handle %" PRId32 " is twice on the queues (again on %s)",
                            h, name);
    mark[h] = list_id;
    const rg__req_t *r = &s->reqs[h];
    if (r->prev != prev)
      return rg_status_make(
          RG_INTERNAL, "sched check: the %s queue's links are broken at handle %" PRId32, name, h);
    int fits = list_id == 1   ? is_running(r->state)
               : list_id == 2 ? r->state == RG_SCHED_WAITING
                              : r->state == RG_SCHED_SWAPPED;
    if (!fits)
      return rg_status_make(RG_INTERNAL,
                            "sched check: handle %" PRId32 " is %s but on the %s queue", h,
                            rg_sched_state_name(r->state), name);
    prev = h;
    if (++n > s->n_reqs) break;
  }
  if (prev != l->tail || n != l->n)
    return rg_status_make(RG_INTERNAL,
                          "sched check: the %s queue counts %" PRId64 " but %" PRId64 " are linked",
                          name, l->n, n);
  return NULL;
}

rg_status_t rg_sched_check(const rg_sched_t *s) {
  rg_status_t st = NULL;
  int32_t nb = s->n_blocks, nt = s->n_tier;
  int32_t *refs = calloc((size_t)nb, sizeof(*refs));
  uint8_t *seen = calloc((size_t)nb + (size_t)s->n_swap + 1, 1);
  uint8_t *tseen = calloc((size_t)nt + 1, 1);  // by tier block: on a list already
  uint8_t *mark = calloc((size_t)s->n_reqs + 1, 1);
  if (!refs || !seen || !tseen || !mark) {
    st = rg_status_make(RG_OUT_OF_MEMORY, "sched check: out of memory");
    goto done;
  }

  // Requests: the blocks each one holds, against its state and progress.
  int64_t n_state[RG_SCHED_STATE_COUNT] = {0};
  for (int32_t h = 0; h < s->n_reqs; h++) {
    const rg__req_t *r = &s->reqs[h];
    if (!r->in_use) continue;
    n_state[r->state]++;
    if (r->n_computed < 0 || r->n_computed > r->n_known || r->n_known < r->n_prompt ||
        r->n_known > r->n_prompt + r->max_tokens)
      FAIL("request %" PRIu64 " (handle %" PRId32 ") has %" PRId64 " positions computed of %" PRId64
           " known (prompt %" PRId64 ", max_tokens %" PRId64 ")",
           r->id, h, r->n_computed, r->n_known, r->n_prompt, r->max_tokens);
    // KV held elsewhere is imported at admission, so only a waiting request
    // has any, and never its last known token's.
    if (r->n_remote < 0 || r->n_remote > r->n_known - 1 ||
        (r->n_remote && r->state != RG_SCHED_WAITING))
      FAIL("request %" PRIu64 " (handle %" PRId32 ", %s) has %" PRId64
           " positions to import of %" PRId64 " known",
           r->id, h, rg_sched_state_name(r->state), r->n_remote, r->n_known);
    int64_t want = 0, want_swap = 0;
    if (is_running(r->state)) {
      want = rg__sched_blocks_for(s, r->n_computed);
      // An entry of the outstanding batch already holds blocks through
      // pos + n.
      if (s->outstanding && r->batch_iter == s->iter) {
        const rg_sched_entry_t *e = &s->entries[r->batch_slot];
        if (e->req != h || e->pos != r->n_computed)
          FAIL("request %" PRIu64 " (handle %" PRId32 ") does not match its batch entry", r->id, h);
        want = rg__sched_blocks_for(s, e->pos + e->n);
      }
      // n_computed advances at commit, so these hold inside a batch too.
      if ((r->state == RG_SCHED_DECODING) != (r->decoding != 0) ||
          (r->decoding ? r->n_computed != r->n_known - 1 : r->n_computed >= r->n_known))
        FAIL("request %" PRIu64 " (handle %" PRId32 ") is %s with %" PRId64 " of %" PRId64
             " positions computed",
             r->id, h, rg_sched_state_name(r->state), r->n_computed, r->n_known);
    } else if (r->state == RG_SCHED_SWAPPED) {
      want_swap = rg__sched_blocks_for(s, r->n_computed);
    } else if (r->state == RG_SCHED_WAITING && r->n_computed != 0) {
      FAIL("waiting request %" PRIu64 " (handle %" PRId32 ") has %" PRId64 " positions computed",
           r->id, h, r->n_computed);
    }
    if (r->n_table != want || r->n_swap != want_swap)
      FAIL("request %" PRIu64 " (handle %" PRId32 ", %s, %" PRId64
           " positions computed) holds %" PRId32 " device and %" PRId32
           " swap blocks; expected %" PRId64 " and %" PRId64,
           r->id, h, rg_sched_state_name(r->state), r->n_computed, r->n_table, r->n_swap, want,
           want_swap);
    for (int32_t i = 0; i < r->n_table; i++) {
      int32_t b = r->table[i];
      if (b < 0 || b >= nb)
        FAIL("request %" PRIu64 " holds block id %" PRId32 ", outside the pool", r->id, b);
      refs[b]++;
    }
    for (int32_t i = 0; i < r->n_swap; i++) {
      int32_t b = r->swap[i];
      if (b < 0 || b >= s->n_swap)
        FAIL("request %" PRIu64 " holds swap block id %" PRId32 ", outside the tier", r->id, b);
      if (seen[nb + b]++)
        FAIL("swap block %" PRId32 " is held twice (again by request %" PRIu64 ")", b, r->id);
    }
  }
  for (int i = 0; i < RG_SCHED_STATE_COUNT; i++)
    if (n_state[i] != s->st.n_state[i])
      FAIL("%" PRId64 " requests are %s but the count says %" PRId64, n_state[i],
           rg_sched_state_name((rg_sched_state_t)i), s->st.n_state[i]);

  if ((st = check_list(s, &s->running, "running", 1, mark))) goto done;
  if ((st = check_list(s, &s->waiting, "waiting", 2, mark))) goto done;
  if ((st = check_list(s, &s->swapped, "swapped", 3, mark))) goto done;
  if (s->running.n != n_state[RG_SCHED_PREFILLING] + n_state[RG_SCHED_DECODING] ||
      s->waiting.n != n_state[RG_SCHED_WAITING] || s->swapped.n != n_state[RG_SCHED_SWAPPED])
    FAIL("the queues hold %" PRId64 " running, %" PRId64 " waiting and %" PRId64
         " swapped, not every request in those states",
         s->running.n, s->waiting.n, s->swapped.n);
  if (s->running.n > s->cfg.max_seqs)
    FAIL("%" PRId64 " requests run, above max_seqs %" PRId32, s->running.n, s->cfg.max_seqs);

  // The free list: distinct free blocks.
  if (s->n_free < 0 || s->n_free > nb) FAIL("the free list counts %" PRId32 " blocks", s->n_free);
  for (int32_t i = 0; i < s->n_free; i++) {
    int32_t b = s->free_list[i];
    if (b < 0 || b >= nb) FAIL("the free list holds block id %" PRId32 ", outside the pool", b);
    if (seen[b]++) FAIL("block %" PRId32 " is on the free list twice", b);
    if (s->blocks[b].state != RG_SCHED_BLOCK_FREE)
      FAIL("block %" PRId32 " is on the free list but %s", b,
           rg_sched_block_state_name((rg_sched_block_state_t)s->blocks[b].state));
  }
  // The LRU list: distinct cached blocks, oldest first.
  int32_t n_lru = 0, prev = -1;
  for (int32_t b = s->lru.head; b >= 0; b = s->blocks[b].lru_next) {
    if (b >= nb) FAIL("the LRU list holds block id %" PRId32 ", outside the pool", b);
    if (seen[b]++) FAIL("block %" PRId32 " is on the LRU list twice, or also on the free list", b);
    if (s->blocks[b].state != RG_SCHED_BLOCK_CACHED)
      FAIL("block %" PRId32 " is on the LRU list but %s", b,
           rg_sched_block_state_name((rg_sched_block_state_t)s->blocks[b].state));
    if (s->blocks[b].lru_prev != prev) FAIL("the LRU list's links are broken at block %" PRId32, b);
    // The retention sweep stops at the first block not yet due.
    if (prev >= 0 && s->blocks[b].idle_since < s->blocks[prev].idle_since)
      FAIL("the LRU list is out of idle order at block %" PRId32, b);
    prev = b;
    if (++n_lru > nb) break;
  }
  if (prev != s->lru.tail)
    FAIL("the LRU list's tail is %" PRId32 ", not %" PRId32, s->lru.tail, prev);

  // Each block in exactly one place, its refcount the tables holding it.
  int32_t n_used = 0, n_cached = 0, n_free = 0, n_indexed = 0;
  for (int32_t b = 0; b < nb; b++) {
    const rg__block_t *k = &s->blocks[b];
    const char *name = rg_sched_block_state_name((rg_sched_block_state_t)k->state);
    if (k->ref != refs[b])
      FAIL("block %" PRId32 " (%s) has refcount %" PRId32 " but %" PRId32 " block tables hold it",
           b, name, k->ref, refs[b]);
    switch (k->state) {
      case RG_SCHED_BLOCK_FREE:
        n_free++;
        if (k->ref != 0 || k->indexed || !seen[b])
          FAIL("free block %" PRId32 " is referenced, indexed or off the free list", b);
        break;
      case RG_SCHED_BLOCK_USED:
        n_used++;
        if (k->ref < 1 || seen[b])
          FAIL("used block %" PRId32 " has refcount %" PRId32 " or is on a free or LRU list", b,
               k->ref);
        break;
      case RG_SCHED_BLOCK_CACHED:
        n_cached++;
        if (k->ref != 0 || !k->indexed || !seen[b])
          FAIL("cached block %" PRId32 " is referenced, not indexed or off the LRU list", b);
        break;
      default:
        FAIL("block %" PRId32 " has no valid state (%d)", b, k->state);
    }
  }
  if (n_used != s->n_used || n_cached != s->n_cached || n_free != s->n_free || n_lru != n_cached ||
      n_used + n_cached + n_free != nb)
    FAIL("%" PRId32 " used + %" PRId32 " cached + %" PRId32 " free blocks (counted %" PRId32
         " + %" PRId32 " + %" PRId32 ", %" PRId32
         " on the LRU list) do not make the pool's %" PRId32,
         n_used, n_cached, n_free, s->n_used, s->n_cached, s->n_free, n_lru, nb);

  // The capacity tier: every block free (on the free stack, or held back
  // after a reload) or cached (indexed, on the tier's LRU list), once.
  int32_t n_tier_cached = 0;
  if (s->n_tier_free < 0 || s->n_tier_pending < 0 || s->n_tier_free + s->n_tier_pending > nt)
    FAIL("the tier's free lists count %" PRId32 " + %" PRId32 " of %" PRId32 " blocks",
         s->n_tier_free, s->n_tier_pending, nt);
  for (int32_t i = 0; i < s->n_tier_free + s->n_tier_pending; i++) {
    int32_t b = i < s->n_tier_free ? s->tier_free[i] : s->tier_pending[i - s->n_tier_free];
    if (b < nb || b >= nb + nt) FAIL("the tier's free lists hold internal id %" PRId32, b);
    if (tseen[b - nb]++) FAIL("tier block %" PRId32 " is free twice", b - nb);
    if (s->blocks[b].state != RG_SCHED_BLOCK_FREE || s->blocks[b].indexed)
      FAIL("tier block %" PRId32 " is on a free list but holds a cached block", b - nb);
  }
  prev = -1;
  for (int32_t b = s->tier_lru.head; b >= 0; b = s->blocks[b].lru_next) {
    if (b < nb || b >= nb + nt) FAIL("the tier's LRU list holds internal id %" PRId32, b);
    if (tseen[b - nb]++)
      FAIL("tier block %" PRId32 " is on the tier's LRU list twice, or also free", b - nb);
    if (s->blocks[b].state != RG_SCHED_BLOCK_CACHED || !s->blocks[b].indexed)
      FAIL("tier block %" PRId32 " is on the tier's LRU list but holds no cached block", b - nb);
    if (s->blocks[b].lru_prev != prev)
      FAIL("the tier's LRU list's links are broken at tier block %" PRId32, b - nb);
    prev = b;
    if (++n_tier_cached > nt) break;
  }
  if (prev != s->tier_lru.tail) FAIL("the tier's LRU list's tail is wrong");
  for (int32_t t = 0; t < nt; t++) {
    const rg__block_t *k = &s->blocks[nb + t];
    if (!tseen[t]) FAIL("tier block %" PRId32 " is neither free nor on the tier's LRU list", t);
    if (k->ref != 0) FAIL("tier block %" PRId32 " has refcount %" PRId32, t, k->ref);
  }
  if (n_tier_cached != s->n_tier_cached)
    FAIL("%" PRId32 " tier blocks hold cached blocks but the count says %" PRId32, n_tier_cached,
         s->n_tier_cached);

  // The prefix index: every indexed block of either pool once, reachable
  // by its key, and keys unique, so each cached key names one place.
  for (int32_t b = 0; b < nb + nt; b++) n_indexed += s->blocks[b].indexed;
  if (s->index) {
    int32_t slots = 0;
    for (uint64_t i = 0; i <= s->index_mask; i++) {
      int32_t b = s->index[i];
      if (b < 0) continue;
      slots++;
      if (b >= nb + nt || !s->blocks[b].indexed)
        FAIL("prefix index slot %" PRIu64 " names block %" PRId32 ", which is not indexed", i, b);
      if (rg__index_find(s, s->blocks[b].key) != b)
        FAIL("block %" PRId32 " is in the prefix index but its key 0x%016" PRIx64
             " finds another block or none",
             b, s->blocks[b].key);
    }
    if (slots != n_indexed || slots != s->n_indexed)
      FAIL("the prefix index has %" PRId32 " entries for %" PRId32 " indexed blocks (count %" PRId32
           ")",
           slots, n_indexed, s->n_indexed);
  } else if (n_indexed) {
    FAIL("%" PRId32 " blocks are indexed with the prefix cache off", n_indexed);
  }

  // The swap tier: held blocks (marked above) and free ones partition it.
  if (s->n_swap_free < 0 || s->n_swap_free > s->n_swap)
    FAIL("the swap free list counts %" PRId32 " of %" PRId32 " blocks", s->n_swap_free, s->n_swap);
  for (int32_t i = 0; i < s->n_swap_free; i++) {
    int32_t b = s->swap_free[i];
    if (b < 0 || b >= s->n_swap) FAIL("the swap free list holds id %" PRId32, b);
    if (seen[nb + b]++) FAIL("swap block %" PRId32 " is free twice, or free and held", b);
  }
  for (int32_t b = 0; b < s->n_swap; b++)
    if (!seen[nb + b]) FAIL("swap block %" PRId32 " is neither free nor held", b);

done:
  free(mark);
  free(tseen);
  free(seen);
  free(refs);
  return st;
}
