// sched/sched_impl.h — the scheduler's private state, shared by the files of
// sched/ (and read by its white-box tests). Not part of the public API.
//
// Everything is sized once: the block pool and the prefix index at create,
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

typedef struct {
  int32_t ref;       // block tables holding it
  uint8_t state;     // an rg_sched_block_state_t
  uint8_t indexed;   // in the prefix index: key, parent and tokens are valid
  uint64_t gen;      // bumped each time the block is handed out: never wraps
  int32_t lru_prev;  // links on the LRU list while cached
  int32_t lru_next;
  // The prefix this block's KV was computed after: the indexed block (and
  // its gen at the time) holding the previous block_size tokens, -1 for the
  // first block. A hit must find the very block it just matched here, so
  // equal keys with different histories never match.
  int32_t parent;
  uint64_t parent_gen;
  uint64_t key;
} rg__block_t;

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
  int32_t cap_blocks;  // capacity of every per-block array below
  int32_t *tokens;     // (n_prompt + max_tokens) token ids
  int32_t *table;      // (cap_blocks) device block ids, n_table in use
  int32_t n_table;
  int32_t *swap;  // (cap_blocks) swap-tier block ids, n_swap in use
  int32_t n_swap;
  uint64_t *keys;  // (cap_blocks) prefix keys of its full blocks, n_keyed computed
  int32_t n_keyed;
  // canon[i]: the indexed block (with its gen) that holds this request's
  // prefix through block i, or -1; valid for i < n_canon. New blocks name
  // canon[i-1] as their parent, so duplicates computed by two requests at
  // once still chain to the one the index kept.
  int32_t *canon;
  uint64_t *canon_gen;
  int32_t n_canon;
  int64_t batch_iter;  // iteration of the batch it last had an entry in
  int32_t batch_slot;  // that entry's index
  int64_t n_cached_tokens;
  int32_t n_preemptions;
  double arrival, first_scheduled, first_token, last_token, finished;
  const char *reason;
  char *reason_owned;  // rg_sched_fail's copy
} rg__req_t;

struct rg_sched_s {
  rg_sched_config_t cfg;  // defaults filled in
  int32_t bs;
  int32_t n_blocks, n_swap;
  int64_t watermark;
  uint64_t key_mask;

  rg__block_t *blocks;  // (n_blocks)
  int32_t *free_list;   // (n_blocks) a stack, n_free in use
  int32_t n_free;
  int32_t n_used, n_cached;
  int32_t lru_head, lru_tail;  // oldest first
  int32_t *block_tokens;       // (n_blocks, bs) tokens of indexed blocks; prefix cache only
  int32_t *index;              // (index_mask + 1) open addressing by key; -1 = empty
  uint64_t index_mask;
  int32_t n_indexed;

  int32_t *swap_free;  // (n_swap) a stack
  int32_t n_swap_free;

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
// Takes a free block, else evicts the least recently used cached one;
// -1 when every block is in use.
int32_t rg__block_alloc(rg_sched_t *s);
void rg__block_ref(rg_sched_t *s, int32_t b);
void rg__block_unref(rg_sched_t *s, int32_t b);
// Drops the request's hold on its device blocks, last block first, so a
// chain's tail is evicted before its head.
void rg__release_table(rg_sched_t *s, rg__req_t *r);
// Longest chain of indexed blocks matching r's tokens, at most max_blocks;
// writes their ids to r->table (not yet referenced) and returns the count.
int32_t rg__prefix_lookup(rg_sched_t *s, rg__req_t *r, int32_t max_blocks);
// Enters r's newly full computed blocks into the prefix index.
void rg__prefix_commit(rg_sched_t *s, rg__req_t *r);
int32_t rg__index_find(const rg_sched_t *s, uint64_t key);

// Lifecycle helpers (sched.c). Every change of a request's state goes
// through rg__set_state, so the per-state counts stay exact.
void rg__set_state(rg_sched_t *s, rg__req_t *r, rg_sched_state_t to);
rg_status_t rg__sched_check_time(rg_sched_t *s, const char *fn, double now);
// Moves an active request to a terminal state and returns its blocks.
void rg__sched_end(rg_sched_t *s, int32_t h, rg_sched_state_t to, const char *reason, double now);

#endif  // RG_SCHED_SCHED_IMPL_H
