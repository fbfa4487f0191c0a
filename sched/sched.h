// sched/sched.h — ridge's scheduling policy: which requests run in each
// iteration, which KV blocks hold what, who is preempted, what is shared
// through the prefix cache.
//
// The single-process engine, the multi-process runtime and the
// discrete-event simulator all drive this same code, so it is pure: no I/O,
// no threads, no clock and no randomness. Time is an argument (a double in
// seconds on the caller's clock, never decreasing from call to call), and
// the same calls in the same order always give the same decisions.
//
// The caller owns the KV memory; sched owns which block holds what. Block
// ids (0 .. n_blocks-1 on the device, 0 .. n_swap_blocks-1 in the swap tier,
// 0 .. n_tier_blocks-1 in the capacity tier) are the only thing that
// crosses: a runtime whose workers each keep the KV of their own layers
// indexes every pool by the same ids.
//
// One iteration, as the caller runs it:
//
//   rg_sched_schedule(s, now, &batch)
//     1. the copies that read device blocks: every batch.swap_out (device ->
//        swap tier) and every batch.offloads (device -> capacity tier);
//     2. then the copies that write device blocks: every batch.swap_in (swap
//        tier -> device), batch.reloads (capacity tier -> device) and
//        batch.imports (KV computed elsewhere, e.g. written by RMA from the
//        prefill worker). 1 before 2, since a device block emptied in 1 may
//        be refilled in 2 and a capacity-tier block filled in 1 may be
//        reloaded in 2. Within a group every copy has its own destination,
//        so they may run concurrently;
//     3. once every copy is complete, run one forward step over
//        batch.entries: entry e writes the KV of positions [e.pos, e.pos +
//        e.n) into its blocks (block b of the table holds positions
//        [b*block_size, (b+1)*block_size)), attends over [0, e.pos + e.n),
//        and yields logits when e.want_logits;
//     4. sample a token for each entry with want_logits;
//   rg_sched_commit(s, now, results, n)
//
// Entries come in this order: running decodes (1 token each; swapped-in and
// newly admitted imported decodes among them), then the next chunks of
// prefills already started, then new prefills from the waiting queue (first
// come, first served), within max_batch_tokens tokens and max_seqs
// sequences. A block table always covers pos + n, which is also the
// entry's context length (what a simulator needs to cost it). Blocks shared
// through the prefix cache lie wholly below pos, so no entry ever writes a
// block another request reads.
//
// Request lifecycle (the call that makes each move):
//
//   rg_sched_add, rg_sched_add_imported
//        |
//        v
//    WAITING <----------------------------------------------------+
//        |  rg_sched_schedule: admitted (arrived, at the head of    |
//        |  the queue, the blocks for its first chunk free)         |
//        +------------------------------------+                    |
//        v                                    | imported, with     |
//    PREFILLING --rg_sched_commit: the chunk  | only its last      |
//        |        that reaches the end of its | known token left   |
//        |        tokens yields a token --+   |                    |
//        |                                v   v                    |
//        |                               DECODING                  |
//        |                                   |                     |
//        +------------------+----------------+                     |
//                           | rg_sched_schedule: preempted when a  |
//                           | running request needs a block and    |
//                           | none is free: the newest running one |
//                           | goes (vLLM's policy), maybe itself   |
//           recompute: its  |                                      |
//           blocks dropped, its generated tokens kept, to the -----+
//           front of the queue (re-prefilled after the prompt, also
//           the prompt of an imported request)
//                           |
//           swap (policy swap, room in the swap tier): its blocks
//           copied down     v
//                        SWAPPED --rg_sched_schedule: swapped in when its
//                                  blocks fit--> PREFILLING or DECODING,
//                                  whichever it left
//
//   DECODING, or PREFILLING on its first token --rg_sched_commit: the
//       caller's stop, or max_tokens generated--> FINISHED
//   WAITING, PREFILLING, DECODING, SWAPPED --rg_sched_abort--> ABORTED
//                                          --rg_sched_fail---> FAILED (reason kept)
//   any state --rg_sched_release--> gone; the handle may be reused
//
// "Running" means PREFILLING or DECODING: those hold device blocks. WAITING
// requests hold none, SWAPPED ones hold only swap-tier blocks, and finished,
// aborted and failed ones hold nothing but their record.
//
// KV blocks: each device block is exactly one of
//   free    on the free list;
//   used    refcount = the number of block tables holding it (>= 1);
//   cached  refcount 0, full, in the prefix index, on the LRU list; its
//           content is kept for a later request with the same prefix, and it
//           is evicted (oldest first) when the free list is empty.
// A full block is keyed by XXH3_64bits_withSeed(its block_size tokens as
// int32, block_size*4 bytes, the parent block's key), the first block with
// seed 0; its tokens and the identity of its parent's content are stored,
// and a hit must match both, so a hash collision can never hand a request
// someone else's KV.
//
// The capacity tier (n_tier_blocks > 0): a larger, slower pool the runtime
// holds (host DRAM, SSD) for cached blocks only, numbered 0 ..
// n_tier_blocks-1 apart from the device and swap pools. Each tier block is
// free or holds exactly one cached block (its KV, key, tokens and history).
// A cached device block idle (unreferenced and unhit) for longer than
// retention_s moves down at a schedule (batch.offloads), oldest first, and
// an eviction moves the block down instead of dropping it; a full tier
// drops its own least recently used block to make room. A prefix lookup
// that continues into the tier brings those blocks back into fresh device
// blocks (batch.reloads) and counts them as hits. Every key in the prefix
// index names exactly one place, a device block or a tier block.
// rg_sched_check() verifies all of this.
//
// Ownership: rg_sched_create returns a scheduler the caller destroys.
// rg_sched_add copies the prompt, rg_sched_add_imported the prompt and the
// generated tokens. Everything a batch, an info or a stats call hands out
// is borrowed: a batch's arrays and the pointers in its entries and imports
// until the next rg_sched_schedule (or the release of that request, if
// sooner); an info's pointers until that request is released. Status
// messages belong to the caller. Not thread-safe: one caller drives a
// scheduler.
#ifndef RG_SCHED_SCHED_H
#define RG_SCHED_SCHED_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

typedef struct rg_sched_s rg_sched_t;

// What a preempted request loses: its KV (recomputed later) or only its
// place on the device (KV copied to the swap tier and back).
#define RG_SCHED_PREEMPT_MAP(X)              \
  X(RG_SCHED_PREEMPT_RECOMPUTE, "recompute") \
  X(RG_SCHED_PREEMPT_SWAP, "swap")

typedef enum {
#define RG_X_(e, n) e,
  RG_SCHED_PREEMPT_MAP(RG_X_)
#undef RG_X_
      RG_SCHED_PREEMPT_COUNT
} rg_sched_preempt_t;

#define RG_SCHED_STATE_MAP(X)          \
  X(RG_SCHED_WAITING, "waiting")       \
  X(RG_SCHED_PREFILLING, "prefilling") \
  X(RG_SCHED_DECODING, "decoding")     \
  X(RG_SCHED_SWAPPED, "swapped")       \
  X(RG_SCHED_FINISHED, "finished")     \
  X(RG_SCHED_ABORTED, "aborted")       \
  X(RG_SCHED_FAILED, "failed")

typedef enum {
#define RG_X_(e, n) e,
  RG_SCHED_STATE_MAP(RG_X_)
#undef RG_X_
      RG_SCHED_STATE_COUNT
} rg_sched_state_t;

#define RG_SCHED_BLOCK_MAP(X)    \
  X(RG_SCHED_BLOCK_FREE, "free") \
  X(RG_SCHED_BLOCK_USED, "used") \
  X(RG_SCHED_BLOCK_CACHED, "cached")

typedef enum {
#define RG_X_(e, n) e,
  RG_SCHED_BLOCK_MAP(RG_X_)
#undef RG_X_
      RG_SCHED_BLOCK_COUNT
} rg_sched_block_state_t;

const char *rg_sched_preempt_name(rg_sched_preempt_t p);  // "?" when out of range
const char *rg_sched_state_name(rg_sched_state_t st);
const char *rg_sched_block_state_name(rg_sched_block_state_t b);
// Parses "recompute" or "swap"; the error names the word and the choices.
RG_MUST_USE rg_status_t rg_sched_preempt_parse(const char *word, rg_sched_preempt_t *out);

// Zero fields take the default named beside them.
typedef struct {
  int32_t block_size;          // tokens per KV block (16)
  int64_t n_blocks;            // blocks in the device KV pool (> 0, required)
  int64_t n_swap_blocks;       // blocks in the lower tier; 0 = none
  int32_t max_seqs;            // running sequences, so entries per batch (16)
  int64_t max_batch_tokens;    // tokens per iteration, decode + prefill (512); >= max_seqs
  int64_t max_context;         // per request, prompt + output (> 0, required)
  rg_sched_preempt_t preempt;  // RECOMPUTE (the zero value) or SWAP (needs n_swap_blocks)
  int prefix_cache;            // 0 off, 1 on
  // The capacity tier for idle cached blocks, in blocks; 0 = none (an
  // evicted block's KV is lost). Needs prefix_cache on: only cached blocks
  // go there.
  int64_t n_tier_blocks;
  // Seconds a cached device block may stay idle (unreferenced and unhit)
  // before it moves to the tier: the "golden time" within which a returning
  // session finds its prefix on the device. 0 = move a block only when the
  // device pool needs its room. Needs n_tier_blocks.
  double retention_s;
  // Blocks a new admission or a swap-in must leave free, so the running
  // decodes do not need a preemption as soon as they cross a block
  // boundary: 0 = n_blocks / 100 (vLLM's 1%), -1 = none. Ignored while
  // nothing runs, so a request that fits the pool always gets in.
  int64_t watermark_blocks;
  // Test hook: keep only the low hash_bits bits of every block key (1..63),
  // so that tests can force collisions; 0 = all 64.
  int hash_bits;
} rg_sched_config_t;

// Validates the config; every error names the field and its value.
RG_MUST_USE rg_status_t rg_sched_create(const rg_sched_config_t *c, rg_sched_t **out);
void rg_sched_destroy(rg_sched_t *s);
// The config with its defaults filled in.
void rg_sched_get_config(const rg_sched_t *s, rg_sched_config_t *out);

typedef struct {
  uint64_t id;            // the caller's tag, echoed in entries and errors
  const int32_t *prompt;  // n_prompt token ids >= 0; copied
  size_t n_prompt;        // >= 1
  int64_t max_tokens;     // >= 1, tokens to generate at most
  // Seconds on the caller's clock. A request is not scheduled before its
  // arrival, and the waiting queue is served in the order of rg_sched_add,
  // so a simulator adds requests in arrival order (possibly ahead of time).
  double arrival;
} rg_sched_request_t;

// Queues a request (WAITING) and returns its handle. Refused, naming the
// numbers, when it can never run: prompt + max_tokens beyond max_context,
// or more KV blocks than the whole pool holds.
RG_MUST_USE rg_status_t rg_sched_add(rg_sched_t *s, const rg_sched_request_t *r,
                                     int32_t *out_handle);

// Queues a request whose first n_computed positions already have KV
// somewhere else (prefill-decode disaggregation: a prefill worker ran the
// prompt and sampled the first token), with the tokens generated so far
// (>= 1, fewer than max_tokens; copied, and counted in max_tokens). Its
// known tokens are prompt + generated; 1 <= n_computed <= n_prompt +
// n_generated - 1, since the last known token's KV is never computed before
// it is decoded. The usual case: n_computed == n_prompt, n_generated == 1.
//
// It waits in arrival order with everyone else and is admitted within the
// same caps and watermark. At admission it takes prefix-cache hits like any
// request (a prefix already cached here is not sent again), fresh blocks
// for the rest of its computed positions, listed in batch.imports for the
// caller to fill before the step, and continues from position n_computed
// (or past a longer hit): as a decode (DECODING) when only the last known
// token is left, else as a prefill chunk of the known tokens in between.
// After that it is an ordinary request: imported full blocks join the
// prefix index at commit, and a preemption by recompute recomputes its
// prompt here.
RG_MUST_USE rg_status_t rg_sched_add_imported(rg_sched_t *s, const rg_sched_request_t *r,
                                              size_t n_computed, const int32_t *generated,
                                              size_t n_generated, int32_t *out_handle);

typedef struct {
  int32_t req;            // handle
  uint64_t id;            // the request's tag
  int64_t pos;            // first position computed by this entry
  int32_t n;              // tokens in this entry (decode: 1)
  const int32_t *tokens;  // the n token ids at positions [pos, pos + n)
  int want_logits;        // 1 when pos + n reaches the end of the known tokens
  int is_prefill;         // 0 for a decode
  const int32_t *blocks;  // device block table covering positions [0, pos + n)
  int32_t n_blocks;       // = ceil((pos + n) / block_size)
} rg_sched_entry_t;

typedef struct {
  // Block ids; swap_out: device -> swap tier, swap_in: the reverse;
  // offloads: device -> capacity tier, reloads: the reverse.
  int32_t src, dst;
} rg_sched_copy_t;

// KV an admitted imported request needs written before the step: positions
// [pos_begin, pos_end) into the device blocks that hold them (blocks[0]
// holds positions from pos_begin, a multiple of block_size). Positions
// below pos_begin were prefix-cache hits and are not sent.
typedef struct {
  int32_t req;  // handle
  uint64_t id;  // the request's tag
  int64_t pos_begin, pos_end;
  const int32_t *blocks;  // in position order
  int32_t n_blocks;       // = ceil(pos_end / block_size) - pos_begin / block_size
} rg_sched_import_t;

typedef struct {
  const rg_sched_entry_t *entries;  // decodes, then started prefills, then new
  size_t n_entries;
  // The copies, in the order the top of this header gives: swap_out and
  // offloads read device blocks; then swap_in, reloads and imports write
  // them; all complete before the step. The copies of a request ended since
  // the schedule must still run, except its imports, which may be skipped.
  const rg_sched_copy_t *swap_out;
  size_t n_swap_out;
  const rg_sched_copy_t *offloads;
  size_t n_offloads;
  const rg_sched_copy_t *swap_in;
  size_t n_swap_in;
  const rg_sched_copy_t *reloads;
  size_t n_reloads;
  const rg_sched_import_t *imports;  // one per admitted imported request
  size_t n_imports;
  const int32_t *preempted;  // handles preempted while building this batch
  size_t n_preempted;
  int64_t n_decode_tokens, n_prefill_tokens;
  int64_t iteration;  // 1 for the first batch
} rg_sched_batch_t;

// Builds the next iteration's batch; it may be empty (nothing has arrived,
// or only a preemption happened), and its copies must run even then. Every
// batch is closed by rg_sched_commit before the next schedule; an empty one
// may simply be followed by another schedule.
RG_MUST_USE rg_status_t rg_sched_schedule(rg_sched_t *s, double now, rg_sched_batch_t *out);

// After the step: one result per entry with want_logits (the sampled
// token; stop = 1 when the caller ends the request there, e.g. an
// end-of-generation token). Every entry of the batch advances. Results for
// requests aborted, failed or released since the schedule are accepted and
// ignored. A bad result (not in the batch, twice, a token < 0, one missing)
// is an error naming it, and then nothing is committed.
typedef struct {
  int32_t req;
  int32_t token;
  int stop;
} rg_sched_result_t;
RG_MUST_USE rg_status_t rg_sched_commit(rg_sched_t *s, double now, const rg_sched_result_t *r,
                                        size_t n);

// End a request that is not yet finished (the caller cancelled it, or a
// worker holding its KV died); its blocks return at once. A request in the
// outstanding batch may be ended too: its entry is then skipped at commit,
// and its blocks are handed out again only by a later schedule. fail keeps
// a copy of the reason.
RG_MUST_USE rg_status_t rg_sched_abort(rg_sched_t *s, int32_t req, double now);
RG_MUST_USE rg_status_t rg_sched_fail(rg_sched_t *s, int32_t req, double now, const char *reason);

// The device's KV is gone (the worker process holding the pool was lost and
// comes back empty): every request holding device blocks fails with reason,
// and every device block leaves the prefix index, so no later request is
// handed KV that is no longer there. Waiting and swapped requests, and the
// capacity tier's blocks, are kept. Not while a batch is outstanding;
// *n_failed (optional) counts the requests it failed.
RG_MUST_USE rg_status_t rg_sched_device_kv_lost(rg_sched_t *s, double now, const char *reason,
                                                size_t *n_failed);

// Drops a request's record (ending it first, as aborted, if it is still
// active) and frees its handle for reuse. Unknown handles are ignored.
void rg_sched_release(rg_sched_t *s, int32_t req);

typedef struct {
  rg_sched_state_t state;
  uint64_t id;
  int64_t n_prompt, max_tokens;
  int64_t n_computed;       // positions whose KV is computed (prefix hits included)
  int64_t n_output;         // tokens generated so far
  const int32_t *output;    // those tokens
  int64_t n_cached_tokens;  // prefix-cache hit at its latest admission
  int64_t n_tier_tokens;    // of those, reloaded from the capacity tier
  int64_t n_import_tokens;  // positions imported at its admission (0 if not imported)
  int32_t n_preemptions;
  int32_t n_blocks, n_swap_blocks;  // blocks held on the device and in the swap tier
  // Seconds on the caller's clock; NAN until it happens.
  double arrival, first_scheduled, first_token, last_token, finished;
  // NULL while active; "stop" or "length" when finished (the caller's stop,
  // or max_tokens reached), "aborted", or the reason given to rg_sched_fail.
  const char *reason;
} rg_sched_request_info_t;
RG_MUST_USE rg_status_t rg_sched_request_info(const rg_sched_t *s, int32_t req,
                                              rg_sched_request_info_t *out);

typedef struct {
  int64_t iterations;
  // Requests now in each state, and how many have ever ended each way.
  int64_t n_state[RG_SCHED_STATE_COUNT];
  int64_t total_finished, total_aborted, total_failed;
  // Device blocks now; n_blocks = used + cached + free.
  int64_t blocks_used, blocks_cached, blocks_free;
  int64_t swap_used, swap_free;
  int64_t preempt_recompute, preempt_swap;
  int64_t blocks_swapped_out, blocks_swapped_in;
  int64_t blocks_evicted;  // cached device blocks reclaimed for new content
  // Prefix cache, counted at each admission while it is on: tokens and
  // full blocks looked up, and those found. Hit rate = hit / lookup tokens.
  int64_t prefix_lookup_tokens, prefix_hit_tokens;
  int64_t prefix_lookup_blocks, prefix_hit_blocks;
  int64_t decode_tokens, prefill_tokens;  // scheduled, summed over batches
  // Imported requests admitted, and the positions and blocks their imports
  // wrote (prefix hits are not imported, so these shrink as hits grow).
  int64_t imports, import_tokens, import_blocks;
  // The capacity tier: blocks now holding a cached block and free; blocks
  // moved down (idle past retention_s, or evicted), brought back by a hit,
  // and dropped from a full tier; of prefix_hit_tokens, those reloaded.
  int64_t tier_used, tier_free;
  int64_t blocks_offloaded, blocks_reloaded, blocks_dropped;
  int64_t tier_hit_tokens;
} rg_sched_stats_t;
void rg_sched_stats(const rg_sched_t *s, rg_sched_stats_t *out);

typedef struct {
  rg_sched_block_state_t state;
  int32_t refcount;
  int cached_key;  // 1 when the block is in the prefix index (key below)
  uint64_t key;
} rg_sched_block_info_t;
RG_MUST_USE rg_status_t rg_sched_block_info(const rg_sched_t *s, int32_t block,
                                            rg_sched_block_info_t *out);
// The same for a capacity-tier block: free, or cached with its key.
RG_MUST_USE rg_status_t rg_sched_tier_block_info(const rg_sched_t *s, int32_t tier_block,
                                                 rg_sched_block_info_t *out);

// Verifies every invariant of the block pool, the swap tier, the capacity
// tier, the prefix index and the request queues (see the top of this header); returns
// RG_INTERNAL describing the first violation. O(blocks + requests): for
// tests and debug builds, not for every iteration of a production run.
RG_MUST_USE rg_status_t rg_sched_check(const rg_sched_t *s);

#endif  // RG_SCHED_SCHED_H
