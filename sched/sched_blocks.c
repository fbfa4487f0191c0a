// The device block pool: free list, reference counts, the LRU list of cached
// blocks and the prefix index (open addressing by block key).
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "sched/sched_impl.h"

rg_status_t rg__blocks_init(rg_sched_t *s) {
  s->blocks = calloc((size_t)s->n_blocks, sizeof(*s->blocks));
  s->free_list = malloc((size_t)s->n_blocks * sizeof(*s->free_list));
  if (!s->blocks || !s->free_list)
    return rg_status_make(RG_OUT_OF_MEMORY, "out of memory for a pool of %d KV blocks",
                          s->n_blocks);
  // The stack hands out the lowest ids first, which keeps traces readable.
  for (int32_t i = 0; i < s->n_blocks; i++) {
    s->free_list[i] = s->n_blocks - 1 - i;
    s->blocks[i] =
        (rg__block_t){.state = RG_SCHED_BLOCK_FREE, .lru_prev = -1, .lru_next = -1, .parent = -1};
  }
  s->n_free = s->n_blocks;
  s->lru_head = s->lru_tail = -1;
  if (s->cfg.prefix_cache) {
    // At most one index entry per block; a load of at most 1/2 keeps linear
    // probing short.
    uint64_t cap = 2;
    while (cap < 2 * (uint64_t)s->n_blocks) cap <<= 1;
    s->index_mask = cap - 1;
    s->index = malloc(cap * sizeof(*s->index));
    s->block_tokens = malloc((size_t)s->n_blocks * (size_t)s->bs * sizeof(*s->block_tokens));
    if (!s->index || !s->block_tokens)
      return rg_status_make(RG_OUT_OF_MEMORY,
                            "out of memory for the prefix index of %d blocks of %d tokens",
                            s->n_blocks, s->bs);
    memset(s->index, 0xff, cap * sizeof(*s->index));
  }
  return NULL;
}

void rg__blocks_deinit(rg_sched_t *s) {
  free(s->block_tokens);
  free(s->index);
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
static void index_remove(rg_sched_t *s, int32_t b) {
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

static void lru_remove(rg_sched_t *s, int32_t b) {
  rg__block_t *k = &s->blocks[b];
  if (k->lru_prev >= 0)
    s->blocks[k->lru_prev].lru_next = k->lru_next;
  else
    s->lru_head = k->lru_next;
  if (k->lru_next >= 0)
    s->blocks[k->lru_next].lru_prev = k->lru_prev;
  else
    s->lru_tail = k->lru_prev;
  k->lru_prev = k->lru_next = -1;
}

static void lru_append(rg_sched_t *s, int32_t b) {
  rg__block_t *k = &s->blocks[b];
  k->lru_prev = s->lru_tail;
  k->lru_next = -1;
  if (s->lru_tail >= 0)
    s->blocks[s->lru_tail].lru_next = b;
  else
    s->lru_head = b;
  s->lru_tail = b;
}

int32_t rg__block_alloc(rg_sched_t *s) {
  int32_t b;
  if (s->n_free > 0) {
    b = s->free_list[--s->n_free];
  } else if (s->lru_head >= 0) {
    b = s->lru_head;
    lru_remove(s, b);
    index_remove(s, b);
    s->n_cached--;
    s->st.blocks_evicted++;
  } else {
    return -1;
  }
  rg__block_t *k = &s->blocks[b];
  k->state = RG_SCHED_BLOCK_USED;
  k->ref = 1;
  k->gen++;
  k->parent = -1;
  s->n_used++;
  return b;
}

void rg__block_ref(rg_sched_t *s, int32_t b) {
  rg__block_t *k = &s->blocks[b];
  if (k->state == RG_SCHED_BLOCK_CACHED) {
    lru_remove(s, b);
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
    k->state = RG_SCHED_BLOCK_CACHED;
    lru_append(s, b);
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
// indexed block `parent` (generation parent_gen); -1 for the first block.
static int block_matches(const rg_sched_t *s, int32_t b, int32_t parent, uint64_t parent_gen,
                         const int32_t *tokens) {
  const rg__block_t *k = &s->blocks[b];
  if (k->parent != parent || (parent >= 0 && k->parent_gen != parent_gen)) return 0;
  return memcmp(s->block_tokens + (int64_t)b * s->bs, tokens, (size_t)s->bs * sizeof(int32_t)) == 0;
}

int32_t rg__prefix_lookup(rg_sched_t *s, rg__req_t *r, int32_t max_blocks) {
  int32_t parent = -1;
  uint64_t parent_gen = 0;
  int32_t n = 0;
  while (n < max_blocks) {
    ensure_keys(s, r, n + 1);
    int32_t b = rg__index_find(s, r->keys[n]);
    if (b < 0 || !block_matches(s, b, parent, parent_gen, r->tokens + (int64_t)n * s->bs)) break;
    r->table[n++] = b;
    parent = b;
    parent_gen = s->blocks[b].gen;
  }
  return n;
}

void rg__prefix_commit(rg_sched_t *s, rg__req_t *r) {
  int32_t full = (int32_t)(r->n_computed / s->bs);
  if (full <= r->n_canon) return;
  ensure_keys(s, r, full);
  for (int32_t i = r->n_canon; i < full; i++) {
    int32_t parent = -1;
    uint64_t parent_gen = 0;
    r->canon[i] = -1;
    if (i > 0) {
      parent = r->canon[i - 1];
      parent_gen = r->canon_gen[i - 1];
      // A parent evicted since leaves nothing to chain to: a block entered
      // under it could never be reached by a lookup.
      if (parent < 0 || !s->blocks[parent].indexed || s->blocks[parent].gen != parent_gen) continue;
    }
    const int32_t *tokens = r->tokens + (int64_t)i * s->bs;
    int32_t q = rg__index_find(s, r->keys[i]);
    if (q >= 0) {
      // Someone computed the same block first (keep theirs, ours stays
      // private), or the key collides with different content (keep theirs,
      // and this chain stops being cached here).
      if (block_matches(s, q, parent, parent_gen, tokens)) {
        r->canon[i] = q;
        r->canon_gen[i] = s->blocks[q].gen;
      }
      continue;
    }
    int32_t b = r->table[i];
    rg__block_t *k = &s->blocks[b];
    k->key = r->keys[i];
    k->parent = parent;
    k->parent_gen = parent_gen;
    memcpy(s->block_tokens + (int64_t)b * s->bs, tokens, (size_t)s->bs * sizeof(int32_t));
    index_insert(s, b);
    r->canon[i] = b;
    r->canon_gen[i] = k->gen;
  }
  r->n_canon = full;
}
