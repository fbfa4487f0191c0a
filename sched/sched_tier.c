// The capacity tier: a second, larger and slower pool (host DRAM or SSD,
// held by the runtime) for cached blocks only, so that a session's prefix
// outlives its place on the device ("golden-time" retention).
//
// Content moves down when a cached device block has been idle longer than
// retention_s, or when the device pool needs its room; it moves back up when
// a prefix lookup continues into it. Either way it keeps its key, tokens and
// serial, and its index entry is repointed rather than removed, so a chain
// stays matchable wherever its blocks lie. Nothing here allocates.
//
// Two rules make one batch's copies order-free within their group (see the
// top of sched.h): a tier block filled by an offload is never dropped again
// in the same batch, and a tier block emptied by a reload is held back
// (pending) until the next schedule. So each tier block is the destination
// of at most one offload and the source of at most one reload per batch,
// and an offload never overwrites a block a reload of the same batch reads.
#include "sched/sched_impl.h"

// A tier block to offload into: a free one, else the least recently used
// cached one, dropped (its content is lost, its index entry removed); -1
// when every tier block holds something offloaded or held in this batch.
static int32_t tier_take(rg_sched_t *s) {
  if (s->n_tier_free > 0) return s->tier_free[--s->n_tier_free];
  int32_t t = s->tier_lru.head;
  if (t < 0 || s->blocks[t].filled_iter == s->iter) return -1;
  rg__lru_remove(s, &s->tier_lru, t);
  rg__index_remove(s, t);
  s->blocks[t].state = RG_SCHED_BLOCK_FREE;
  s->n_tier_cached--;
  s->st.blocks_dropped++;
  return t;
}

int rg__tier_offload(rg_sched_t *s, int32_t b) {
  int32_t t = tier_take(s);
  if (t < 0) return 0;
  rg__block_move(s, b, t);
  rg__block_t *k = &s->blocks[t];
  k->state = RG_SCHED_BLOCK_CACHED;
  k->idle_since = s->blocks[b].idle_since;
  k->filled_iter = s->iter;
  rg__lru_append(s, &s->tier_lru, t);
  s->n_tier_cached++;
  s->offloads[s->n_offloads++] = (rg_sched_copy_t){b, t - s->n_blocks};
  s->st.blocks_offloaded++;
  return 1;
}

void rg__tier_offload_idle(rg_sched_t *s, double now) {
  double keep = s->cfg.retention_s;
  // The device LRU list is ordered by idle_since (see rg__block_unref), so
  // the sweep costs one comparison when nothing is due.
  for (int32_t b = s->lru.head; b >= 0 && now - s->blocks[b].idle_since > keep; b = s->lru.head) {
    if (!rg__tier_offload(s, b)) return;
    rg__lru_remove(s, &s->lru, b);
    s->blocks[b].state = RG_SCHED_BLOCK_FREE;
    s->n_cached--;
    s->free_list[s->n_free++] = b;
  }
}

void rg__tier_hold(rg_sched_t *s, int32_t t) {
  rg__lru_remove(s, &s->tier_lru, t);
}

int32_t rg__tier_reload(rg_sched_t *s, int32_t t) {
  int32_t d = rg__block_alloc(s);
  rg__block_move(s, t, d);
  s->blocks[t].state = RG_SCHED_BLOCK_FREE;
  s->n_tier_cached--;
  s->tier_pending[s->n_tier_pending++] = t;
  s->reloads[s->n_reloads++] = (rg_sched_copy_t){t - s->n_blocks, d};
  s->st.blocks_reloaded++;
  return d;
}

void rg__tier_settle(rg_sched_t *s) {
  while (s->n_tier_pending > 0)
    s->tier_free[s->n_tier_free++] = s->tier_pending[--s->n_tier_pending];
}
