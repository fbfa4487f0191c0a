// The device block pool: free list, reference counts, the LRU lists of
// cached blocks and the prefix index (open addressing by block key), which
// also covers the capacity tier's blocks.
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "sched/sched_impl.h"

rg_status_t rg__blocks_init(rg_sched_t *s) {
  size_t total = (size_t)s->n_blocks + (size_t)s->n_tier;
  s->blocks = calloc(total, sizeof(*s->blocks));
  s->free_list = malloc((size_t)s->n_blocks * sizeof(*s->free_list));
  // The tier's lists are never empty arrays, so a failed malloc(0) cannot
  // be mistaken for a missing tier.
  size_t nt = s->n_tier ? (size_t)s->n_tier : 1;
  s->tier_free = malloc(nt * sizeof(*s->tier_free));
  s->tier_pending = malloc(nt * sizeof(*s->tier_pending));
  if (!s->blocks || !s->free_list || !s->tier_free || !s->tier_pending)
    return rg_status_make(RG_OUT_OF_MEMORY,
                          "out of memory for a pool of %d KV blocks and a tier of %d", s->n_blocks,
                          s->n_tier);
  for (size_t i = 0; i < total; i++)
    s->blocks[i] = (rg__block_t){.state = RG_SCHED_BLOCK_FREE, .lru_prev = -1, .lru_next = -1};
  // The stacks hand out the lowest ids first, which keeps traces readable.
  for (int32_t i = 0; i < s->n_blocks; i++) s->free_list[i] = s->n_blocks - 1 - i;
  s->n_free = s->n_blocks;
  for (int32_t i = 0; i < s->n_tier; i++) s->tier_free[i] = s->n_blocks + s->n_tier - 1 - i;
  s->n_tier_free = s->n_tier;
  s->lru = s->tier_lru = (rg__lru_t){-1, -1};
  s->next_serial = 1;
  if (s->cfg.prefix_cache) {
    // At most one index entry per block of either pool; a load of at most
    // 1/2 keeps linear probing short.
    uint64_t cap = 2;
    while (cap < 2 * (uint64_t)total) cap <<= 1;
    s->index_mask = cap - 1;
    s->index = malloc(cap * sizeof(*s->index));
    s->block_tokens = malloc(total * (size_t)s->bs * sizeof(*s->block_tokens));
    if (!s->index || !s->block_tokens)
      return rg_status_make(RG_OUT_OF_MEMORY,
                            "out of memory for the prefix index of %zu blocks of %d tokens", total,
                            s->bs);
    memset(s->index, 0xff, cap * sizeof(*s->index));
  }
  return NULL;
}

void rg__blocks_deinit(rg_sched_t *s) {
  free(s->block_tokens);
  free(s->index);
  free(s->tier_pending);
  free(s->tier_free);
  free(s->free_list);
  free(s->blocks);
}

static uint64_t slot_of(const rg_sched_t *s, uint64_t key) {
  // Keys are XXH3 output, already uniform; the multiply spreads the few
  // distinct keys the hash_bits test hook leaves.
  return (key * 0x9E3779B97F4A7C15ull) >> 17 & s->index_mask;
}

int32_t rg__index_find(const rg_sched_t *s, uint64_t key) {
  for (uint64_t i = slot_of(s, key);; i = (i + 1) & s->index_mask) {
    int32_t b = s->index[i];
    if (b < 0) return -1;
    if (s->blocks[b].key == key) return b;
  }
}

static void index_insert(rg_sched_t *s, int32_t b) {
  uint64_t i = slot_of(s, s->blocks[b].key);
  while (s->index[i] >= 0) i = (i + 1) & s->index_mask;
  s->index[i] = b;
  s->blocks[b].indexed = 1;
  s->n_indexed++;
}

// Backward-shift deletion: no tombstones, so probes stay as short as the
// live entries make them however long the cache churns.
void rg__index_remove(rg_sched_t *s, int32_t b) {
  uint64_t m = s->index_mask, i = slot_of(s, s->blocks[b].key);
  while (s->index[i] != b) i = (i + 1) & m;
  for (uint64_t j = (i + 1) & m; s->index[j] >= 0; j = (j + 1) & m) {
    uint64_t home = slot_of(s, s->blocks[s->index[j]].key);
    // Entry j may move to the hole at i unless its home lies in (i, j].
    int stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
    if (!stays) {
      s->index[i] = s->index[j];
      i = j;
    }
  }
  s->index[i] = -1;
  s->blocks[b].indexed = 0;
  s->n_indexed--;
}

void rg__block_move(rg_sched_t *s, int32_t from, int32_t to) {
  rg__block_t *f = &s->blocks[from], *t = &s->blocks[to];
  t->key = f->key;
  t->serial = f->serial;
  t->parent_serial = f->parent_serial;
  memcpy(s->block_tokens + (int64_t)to * s->bs, s->block_tokens + (int64_t)from * s->bs,
         (size_t)s->bs * sizeof(int32_t));
  // The key stays, so its slot does: only the block it names changes.
  uint64_t i = slot_of(s, f->key);
  while (s->index[i] != from) i = (i + 1) & s->index_mask;
  s->index[i] = to;
  f->indexed = 0;
  t->indexed = 1;
}

void rg__lru_remove(rg_sched_t *s, rg__lru_t *l, int32_t b) {
  rg__block_t *k = &s->blocks[b];
  if (k->lru_prev >= 0)
    s->blocks[k->lru_prev].lru_next = k->lru_next;
  else
    l->head = k->lru_next;
  if (k->lru_next >= 0)
    s->blocks[k->lru_next].lru_prev = k->lru_prev;
  else
    l->tail = k->lru_prev;
  k->lru_prev = k->lru_next = -1;
}

void rg__lru_append(rg_sched_t *s, rg__lru_t *l, int32_t b) {
  rg__block_t *k = &s->blocks[b];
  k->lru_prev = l->tail;
  k->lru_next = -1;
  if (l->tail >= 0)
    s->blocks[l->tail].lru_next = b;
  else
    l->head = b;
  l->tail = b;
}

int32_t rg__block_alloc(rg_sched_t *s) {
  int32_t b;
  if (s->n_free > 0) {
    b = s->free_list[--s->n_free];
  } else if (s->lru.head >= 0) {
    b = s->lru.head;
    rg__lru_remove(s, &s->lru, b);
    // With a capacity tier the content moves down instead of being lost.
    if (!s->n_tier || !rg__tier_offload(s, b)) rg__index_remove(s, b);
    s->n_cached--;
    s->st.blocks_evicted++;
  } else {
    return -1;
  }
  rg__block_t *k = &s->blocks[b];
  k->state = RG_SCHED_BLOCK_USED;
  k->ref = 1;
  k->serial = s->next_serial++;
  k->parent_serial = 0;
  s->n_used++;
  return b;
}

void rg__block_ref(rg_sched_t *s, int32_t b) {
  rg__block_t *k = &s->blocks[b];
  if (k->state == RG_SCHED_BLOCK_CACHED) {
    rg__lru_remove(s, &s->lru, b);
    k->state = RG_SCHED_BLOCK_USED;
    s->n_cached--;
    s->n_used++;
  }
  k->ref++;
}

void rg__block_unref(rg_sched_t *s, int32_t b) {
  rg__block_t *k = &s->blocks[b];
  if (--k->ref > 0) return;
  s->n_used--;
  if (k->indexed) {
    // Every unref happens at the latest time the caller gave, which never
    // decreases, so the LRU list is also ordered by idle_since: the
    // retention sweep stops at the first block not yet due.
    k->state = RG_SCHED_BLOCK_CACHED;
    k->idle_since = s->last_now;
    rg__lru_append(s, &s->lru, b);
    s->n_cached++;
  } else {
    k->state = RG_SCHED_BLOCK_FREE;
    s->free_list[s->n_free++] = b;
  }
}

void rg__release_table(rg_sched_t *s, rg__req_t *r) {
  for (int32_t i = r->n_table; i > 0; i--) rg__block_unref(s, r->table[i - 1]);
  r->n_table = 0;
}

// Keys of r's first n full blocks, computed once: the tokens of a request
// never change, only grow.
static void ensure_keys(rg_sched_t *s, rg__req_t *r, int32_t n) {
  size_t bytes = (size_t)s->bs * sizeof(int32_t);
  for (int32_t i = r->n_keyed; i < n; i++) {
    uint64_t seed = i == 0 ? RG__SCHED_ROOT_SEED : r->keys[i - 1];
    r->keys[i] = XXH3_64bits_withSeed(r->tokens + (int64_t)i * s->bs, bytes, seed) & s->key_mask;
  }
  if (n > r->n_keyed) r->n_keyed = n;
}

// Whether indexed block b holds the KV of `tokens` computed right after the
// content with serial parent (0 for the first block).
static int block_matches(const rg_sched_t *s, int32_t b, uint64_t parent, const int32_t *tokens) {
  if (s->blocks[b].parent_serial != parent) return 0;
  return memcmp(s->block_tokens + (int64_t)b * s->bs, tokens, (size_t)s->bs * sizeof(int32_t)) == 0;
}

int32_t rg__prefix_lookup(rg_sched_t *s, rg__req_t *r, int32_t max_blocks) {
  uint64_t parent = 0;
  int32_t n = 0;
  while (n < max_blocks) {
    ensure_keys(s, r, n + 1);
    int32_t b = rg__index_find(s, r->keys[n]);
    if (b < 0 || !block_matches(s, b, parent, r->tokens + (int64_t)n * s->bs)) break;
    r->table[n++] = b;
    parent = s->blocks[b].serial;
  }
  return n;
}

void rg__prefix_commit(rg_sched_t *s, rg__req_t *r) {
  int32_t full = (int32_t)(r->n_computed / s->bs);
  if (full <= r->n_canon) return;
  ensure_keys(s, r, full);
  for (int32_t i = r->n_canon; i < full; i++) {
    uint64_t parent = 0;
    r->canon[i] = 0;
    if (i > 0) {
      parent = r->canon[i - 1];
      // A parent dropped since leaves nothing to chain to: a block entered
      // under it could never be reached by a lookup. The parent's content
      // may have moved between the device and the tier, so it is found by
      // its key, not by where it was.
      int32_t p = parent ? rg__index_find(s, r->keys[i - 1]) : -1;
      if (p < 0 || s->blocks[p].serial != parent) continue;
    }
    const int32_t *tokens = r->tokens + (int64_t)i * s->bs;
    int32_t q = rg__index_find(s, r->keys[i]);
    if (q >= 0) {
      // Someone computed the same block first (keep theirs, ours stays
      // private), or the key collides with different content (keep theirs,
      // and this chain stops being cached here).
      if (block_matches(s, q, parent, tokens)) r->canon[i] = s->blocks[q].serial;
      continue;
    }
    int32_t b = r->table[i];
    rg__block_t *k = &s->blocks[b];
    k->key = r->keys[i];
    k->parent_serial = parent;
    memcpy(s->block_tokens + (int64_t)b * s->bs, tokens, (size_t)s->bs * sizeof(int32_t));
    index_insert(s, b);
    r->canon[i] = k->serial;
  }
  r->n_canon = full;
}
