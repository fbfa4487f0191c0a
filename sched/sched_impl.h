// sched/sched_impl.h — the scheduler's private state, shared by the files of
// sched/ (and read by its white-box tests). Not part of the public API.
//
// Everything is sized once: the block pools and the prefix index at create,
// a request's token, block-table and hash arrays at add (its prompt plus
// max_tokens bound them), the batch buffers at create (a batch holds at
// most max_seqs entries). Scheduling and committing never allocate.
#ifndef RG_SCHED_SCHED_IMPL_H
#define RG_SCHED_SCHED_IMPL_H

#include <stdint.h>

#include "sched/sched.h"

// First block's seed: the header promises 0, and the key must not depend on
// anything but the tokens so that caches compare across runs.
#define RG__SCHED_ROOT_SEED 0u

// One block of KV: a device block (ids 0 .. n_blocks-1) or a capacity-tier
// block (internal ids n_blocks .. n_blocks+n_tier-1; the public API and the
// batch number them from 0). One array for both lets the prefix index, the
// LRU lists and the match rule treat a block the same wherever it lies.
typedef struct {
  int32_t ref;       // block tables holding it; tier blocks are never held
  uint8_t state;     // an rg_sched_block_state_t; a tier block is free or cached
  uint8_t indexed;   // in the prefix index: key, serials and tokens are valid
  int32_t lru_prev;  // links on its pool's LRU list while cached
  int32_t lru_next;
  // The identity of the content: drawn from one counter each time a device
  // block is handed out, never reused (64 bits never wrap), and carried
  // along when the content moves between the device and the tier.
  // parent_serial is the identity of the content that held the previous
  // block_size tokens when this block's KV was computed, 0 for the first
  // block. A hit must find the very content it just matched there, so equal
  // keys with different histories never match.
  uint64_t serial;
  uint64_t parent_serial;
  uint64_t key;
  double idle_since;    // when its refcount last fell to 0 (the LRU order)
  int64_t filled_iter;  // tier blocks: the iteration whose offload filled it
} rg__block_t;

// An intrusive doubly linked list of blocks, oldest first; the links live
// in the blocks.
typedef struct {
  int32_t head, tail;
} rg__lru_t;

// An intrusive doubly linked list of request handles (running, waiting,
// swapped); the links live in the requests.
typedef struct {
  int32_t head, tail;
  int64_t n;
} rg__list_t;

typedef struct {
  uint8_t in_use;
  uint8_t decoding;  // has yielded a token since its latest admission
  rg_sched_state_t state;
  uint64_t id;
  int32_t prev, next;  // links in the list its state puts it on
  int64_t n_prompt, max_tokens;
  int64_t n_known;     // prompt + generated tokens
  int64_t n_computed;  // positions whose KV is computed; an entry advances it at commit
  // rg_sched_add_imported: positions whose KV lies elsewhere, until its
  // admission imports them (then 0 for good: a later preemption by
  // recompute recomputes them here).
  int64_t n_remote;
  int32_t cap_blocks;  // capacity of every per-block array below
  int32_t *tokens;     // (n_prompt + max_tokens) token ids
  int32_t *table;      // (cap_blocks) device block ids, n_table in use
  int32_t n_table;
  int32_t *swap;  // (cap_blocks) swap-tier block ids, n_swap in use
  int32_t n_swap;
  uint64_t *keys;  // (cap_blocks) prefix keys of its full blocks, n_keyed computed
  int32_t n_keyed;
  // canon[i]: the serial of the indexed content that holds this request's
  // prefix through block i, or 0; valid for i < n_canon. New blocks name
  // canon[i-1] as their parent, so duplicates computed by two requests at
  // once still chain to the one the index kept.
  uint64_t *canon;
  int32_t n_canon;
  int64_t batch_iter;  // iteration of the batch it last had an entry in
  int32_t batch_slot;  // that entry's index
  int64_t n_cached_tokens, n_tier_tokens, n_import_tokens;
  int32_t n_preemptions;
  double arrival, first_scheduled, first_token, last_token, finished;
  const char *reason;
  char *reason_owned;  // rg_sched_fail's copy
} rg__req_t;

struct rg_sched_s {
  rg_sched_config_t cfg;  // defaults filled in
  int32_t bs;
  int32_t n_blocks, n_swap, n_tier;
  int64_t watermark;
  uint64_t key_mask;

  rg__block_t *blocks;  // (n_blocks + n_tier) the device pool, then the tier
  int32_t *free_list;   // (n_blocks) a stack, n_free in use
  int32_t n_free;
  int32_t n_used, n_cached;
  rg__lru_t lru;          // cached device blocks, oldest idle first
  uint64_t next_serial;   // the next content identity handed out (from 1)
  int32_t *block_tokens;  // (n_blocks + n_tier, bs) tokens of indexed blocks; prefix cache only
  int32_t *index;         // (index_mask + 1) open addressing by key; -1 = empty
  uint64_t index_mask;
  int32_t n_indexed;

  int32_t *swap_free;  // (n_swap) a stack
  int32_t n_swap_free;

  // The capacity tier (sched_tier.c), by internal id. A tier block reloaded
  // in a batch is held back (pending) until the next schedule, so that no
  // offload of the same batch can overwrite it before its reload has run.
  int32_t *tier_free;  // (n_tier) a stack
  int32_t n_tier_free;
  int32_t *tier_pending;  // (n_tier)
  int32_t n_tier_pending;
  int32_t n_tier_cached;
  rg__lru_t tier_lru;  // oldest first

  rg__req_t *reqs;  // (cap_reqs) by handle
  int32_t n_reqs, cap_reqs;
  int32_t *free_handles;  // (cap_reqs) released handles, reused first
  int32_t n_free_handles;
  rg__list_t running, waiting, swapped;

  // The batch being built or outstanding. seg[0..2] hold decodes, started
  // prefills and new prefills while building; they are joined into entries.
  rg_sched_entry_t *entries;  // (max_seqs)
  rg_sched_entry_t *seg[3];   // (max_seqs) each
  size_t n_seg[3];
  size_t n_entries;
  uint8_t *slot_gone;    // (max_seqs) the entry's request ended after schedule
  uint64_t *slot_stamp;  // (max_seqs) commit attempt that saw its result
  size_t *slot_result;   // (max_seqs) that result's index
  uint64_t commit_stamp;
  rg_sched_copy_t *swap_out;  // (n_swap)
  rg_sched_copy_t *swap_in;   // (n_swap)
  size_t n_swap_out, n_swap_in;
  // Each tier block is filled by at most one offload and emptied by at
  // most one reload per batch, so n_tier bounds both lists.
  rg_sched_copy_t *offloads;  // (n_tier)
  rg_sched_copy_t *reloads;   // (n_tier)
  size_t n_offloads, n_reloads;
  rg_sched_import_t *imports;  // (max_seqs)
  size_t n_imports;
  int32_t *preempted;  // (max_seqs)
  size_t n_preempted;
  int64_t budget;  // tokens left while building
  int64_t n_decode_tokens, n_prefill_tokens;
  int32_t victim_cursor;
  int64_t iter;
  int outstanding;
  double last_now;

  rg_sched_stats_t st;  // the counters, n_state kept current by rg__set_state
};

// The request behind a handle, or NULL when the handle is not in use.
rg__req_t *rg__sched_req(const rg_sched_t *s, int32_t h);
int64_t rg__sched_blocks_for(const rg_sched_t *s, int64_t tokens);

void rg__list_push_back(rg_sched_t *s, rg__list_t *l, int32_t h);
void rg__list_push_front(rg_sched_t *s, rg__list_t *l, int32_t h);
void rg__list_remove(rg_sched_t *s, rg__list_t *l, int32_t h);

// Block pool (sched_blocks.c).
rg_status_t rg__blocks_init(rg_sched_t *s);
void rg__blocks_deinit(rg_sched_t *s);
// Takes a free block, else evicts the least recently used cached one (to
// the capacity tier when there is room); -1 when every block is in use.
int32_t rg__block_alloc(rg_sched_t *s);
void rg__block_ref(rg_sched_t *s, int32_t b);
void rg__block_unref(rg_sched_t *s, int32_t b);
// Drops the request's hold on its device blocks, last block first, so a
// chain's tail is evicted before its head.
void rg__release_table(rg_sched_t *s, rg__req_t *r);
// Longest chain of indexed blocks matching r's tokens, at most max_blocks;
// writes their internal ids to r->table (device or tier, not yet taken)
// and returns the count.
int32_t rg__prefix_lookup(rg_sched_t *s, rg__req_t *r, int32_t max_blocks);
// Enters r's newly full computed blocks into the prefix index.
void rg__prefix_commit(rg_sched_t *s, rg__req_t *r);
int32_t rg__index_find(const rg_sched_t *s, uint64_t key);
void rg__index_remove(rg_sched_t *s, int32_t b);
// Moves indexed content (key, serials, tokens, its index entry) from block
// `from` to block `to`, across pools; `from` is left unindexed.
void rg__block_move(rg_sched_t *s, int32_t from, int32_t to);
void rg__lru_append(rg_sched_t *s, rg__lru_t *l, int32_t b);
void rg__lru_remove(rg_sched_t *s, rg__lru_t *l, int32_t b);

// The capacity tier (sched_tier.c).
// Moves cached device block b's content to a tier block, dropping the
// tier's least recently used one when it is full; b's own state and lists
// are the caller's. 0 when the tier has no room in this batch.
int rg__tier_offload(rg_sched_t *s, int32_t b);
// Moves every cached device block idle for longer than retention_s down.
void rg__tier_offload_idle(rg_sched_t *s, double now);
// Takes tier block t (a prefix hit) off the tier's LRU list, so that the
// allocations of the same admission cannot drop it.
void rg__tier_hold(rg_sched_t *s, int32_t t);
// Brings held tier block t back into a newly allocated device block (a
// device block must be available) and returns that block, used once.
int32_t rg__tier_reload(rg_sched_t *s, int32_t t);
// Frees the tier blocks reloaded by the previous batch.
void rg__tier_settle(rg_sched_t *s);

// Lifecycle helpers (sched.c). Every change of a request's state goes
// through rg__set_state, so the per-state counts stay exact.
void rg__set_state(rg_sched_t *s, rg__req_t *r, rg_sched_state_t to);
rg_status_t rg__sched_check_time(rg_sched_t *s, const char *fn, double now);
// Moves an active request to a terminal state and returns its blocks.
void rg__sched_end(rg_sched_t *s, int32_t h, rg_sched_state_t to, const char *reason, double now);

#endif  // RG_SCHED_SCHED_IMPL_H
