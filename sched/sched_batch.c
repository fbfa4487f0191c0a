// Building one iteration's batch (continuous batching with chunked prefill,
// admission, preemption, swap-in) and committing its results.
//
// The phases run in priority order: running decodes, running prefills,
// swapped requests coming back, new requests. Each phase appends to its
// own segment (swapped-in decodes join the decodes, swapped-in prefills
// the started prefills), and the segments are joined at the end so the
// batch keeps the order the header promises. An iteration that preempted
// anyone admits no one: the blocks just won back are for the requests that
// were running, and admitting would only preempt again. Cached blocks idle
// past the retention window move to the capacity tier last, so that a
// request admitted in this very batch still finds its prefix on the device.
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "sched/sched_impl.h"

enum { SEG_DECODE, SEG_STARTED, SEG_NEW };

static int in_batch(const rg_sched_t *s, const rg__req_t *r) {
  return r->batch_iter == s->iter;
}

static void emit(rg_sched_t *s, int seg, int32_t h, rg__req_t *r, int64_t n, double now) {
  int64_t pos = r->n_computed;
  s->seg[seg][s->n_seg[seg]++] = (rg_sched_entry_t){
      .req = h,
      .id = r->id,
      .pos = pos,
      .n = (int32_t)n,
      .tokens = r->tokens + pos,
      .want_logits = pos + n == r->n_known,
      .is_prefill = !r->decoding,
      .blocks = r->table,
      .n_blocks = r->n_table,
  };
  r->batch_iter = s->iter;
  s->budget -= n;
  if (r->decoding)
    s->n_decode_tokens += n;
  else
    s->n_prefill_tokens += n;
  if (isnan(r->first_scheduled)) r->first_scheduled = now;
}

// vLLM's victim: the most recently admitted running request, here one that
// has no entry in this batch yet (entries already made are kept) and was
// admitted after `self`. The cursor only moves toward the head within a
// phase, so finding victims costs O(running) per phase however many there
// are. -1 when there is none.
static int32_t pick_victim(rg_sched_t *s, int32_t self) {
  int32_t c = s->victim_cursor;
  while (c >= 0 && c != self && in_batch(s, &s->reqs[c])) c = s->reqs[c].prev;
  s->victim_cursor = c;
  return c == self ? -1 : c;
}

static void preempt(rg_sched_t *s, int32_t h) {
  rg__req_t *r = &s->reqs[h];
  if (s->victim_cursor == h) s->victim_cursor = r->prev;
  rg__list_remove(s, &s->running, h);
  // A block taken in this schedule holds nothing yet; only computed ones
  // are worth a copy.
  int32_t keep = (int32_t)rg__sched_blocks_for(s, r->n_computed);
  while (r->n_table > keep) rg__block_unref(s, r->table[--r->n_table]);
  if (s->cfg.preempt == RG_SCHED_PREEMPT_SWAP && s->n_swap_free >= keep) {
    for (int32_t i = 0; i < keep; i++) {
      int32_t sb = s->swap_free[--s->n_swap_free];
      s->swap_out[s->n_swap_out++] = (rg_sched_copy_t){r->table[i], sb};
      r->swap[i] = sb;
    }
    r->n_swap = keep;
    rg__release_table(s, r);
    rg__set_state(s, r, RG_SCHED_SWAPPED);
    rg__list_push_front(s, &s->swapped, h);
    s->st.preempt_swap++;
    s->st.blocks_swapped_out += keep;
  } else {
    // Recompute, also the fallback when the swap tier is full. The tokens
    // generated so far stay: they are prefilled again after the prompt.
    rg__release_table(s, r);
    r->n_computed = 0;
    r->n_canon = 0;
    r->decoding = 0;
    rg__set_state(s, r, RG_SCHED_WAITING);
    rg__list_push_front(s, &s->waiting, h);
    s->st.preempt_recompute++;
  }
  r->n_preemptions++;
  s->preempted[s->n_preempted++] = h;
}

// Grows r's table to `need` blocks, preempting later requests while none
// is free. Returns 0 when it stops short (no victim is left).
static int take_blocks(rg_sched_t *s, int32_t h, rg__req_t *r, int64_t need) {
  while (r->n_table < need) {
    int32_t b = rg__block_alloc(s);
    if (b >= 0) {
      r->table[r->n_table++] = b;
      continue;
    }
    int32_t v = pick_victim(s, h);
    if (v < 0) return 0;
    preempt(s, v);
  }
  return 1;
}

// Running decodes: one token each. Running requests never outnumber
// max_seqs, and max_batch_tokens >= max_seqs, so every decode fits the
// budget; a decode that cannot get its next block when nothing later is
// left to preempt preempts itself.
static void schedule_decodes(rg_sched_t *s, double now) {
  s->victim_cursor = s->running.tail;
  for (int32_t h = s->running.head; h >= 0;) {
    rg__req_t *r = &s->reqs[h];
    if (!r->decoding) {
      h = r->next;
      continue;
    }
    int ok = take_blocks(s, h, r, r->n_computed / s->bs + 1);
    int32_t next = r->next;
    if (ok)
      emit(s, SEG_DECODE, h, r, 1, now);
    else
      preempt(s, h);
    h = next;
  }
}

// Running prefills, oldest first: the next chunk, cut to the budget left
// and to the blocks it can get. One that gets no room at all waits a turn
// holding what it has; it does not preempt itself, since the decodes that
// hold the pool are either finishing or will preempt the newest.
static void schedule_started(rg_sched_t *s, double now) {
  s->victim_cursor = s->running.tail;
  for (int32_t h = s->running.head; h >= 0 && s->budget > 0;) {
    rg__req_t *r = &s->reqs[h];
    if (r->decoding || in_batch(s, r)) {
      h = r->next;
      continue;
    }
    int64_t chunk = r->n_known - r->n_computed;
    if (chunk > s->budget) chunk = s->budget;
    take_blocks(s, h, r, rg__sched_blocks_for(s, r->n_computed + chunk));
    int64_t room = (int64_t)r->n_table * s->bs - r->n_computed;
    if (chunk > room) chunk = room;
    int32_t next = r->next;
    if (chunk > 0) emit(s, SEG_STARTED, h, r, chunk, now);
    h = next;
  }
}

// Blocks an admission or swap-in must leave free. While nothing runs there
// is no decode to protect, and any request that fits the pool must get in.
static int64_t watermark(const rg_sched_t *s) {
  return s->running.n > 0 ? s->watermark : 0;
}

// Swapped requests come back, first in the queue first, when all their
// blocks and their next chunk fit; the queue is served in order.
static void schedule_swap_ins(rg_sched_t *s, double now) {
  while (s->swapped.head >= 0 && s->running.n < s->cfg.max_seqs && s->budget > 0) {
    int32_t h = s->swapped.head;
    rg__req_t *r = &s->reqs[h];
    int64_t chunk = r->decoding ? 1 : r->n_known - r->n_computed;
    if (chunk > s->budget) chunk = s->budget;
    int64_t total = rg__sched_blocks_for(s, r->n_computed + chunk);
    if (total + watermark(s) > (int64_t)s->n_free + s->n_cached) break;
    rg__list_remove(s, &s->swapped, h);
    for (int32_t i = 0; i < total; i++) {
      int32_t b = rg__block_alloc(s);  // cannot fail: counted above
      r->table[i] = b;
      if (i < r->n_swap) s->swap_in[s->n_swap_in++] = (rg_sched_copy_t){r->swap[i], b};
    }
    r->n_table = (int32_t)total;
    for (int32_t i = r->n_swap; i > 0; i--) s->swap_free[s->n_swap_free++] = r->swap[i - 1];
    s->st.blocks_swapped_in += r->n_swap;
    r->n_swap = 0;
    rg__set_state(s, r, r->decoding ? RG_SCHED_DECODING : RG_SCHED_PREFILLING);
    rg__list_push_back(s, &s->running, h);
    emit(s, r->decoding ? SEG_DECODE : SEG_STARTED, h, r, chunk, now);
  }
}

// New prefills, first come first served: the head of the waiting queue is
// admitted when it has arrived and the blocks for its first chunk (past any
// prefix-cache hit) are free beyond the watermark; the queue stops at the
// first one that is not. Hits in the capacity tier come back into device
// blocks of their own, so they count against the room like fresh ones. An
// imported request is admitted the same way, its imported positions taking
// fresh blocks where the cache has none; with only its last known token
// left it joins the decodes.
static void schedule_new(rg_sched_t *s, double now) {
  while (s->waiting.head >= 0 && s->running.n < s->cfg.max_seqs && s->budget > 0) {
    int32_t h = s->waiting.head;
    rg__req_t *r = &s->reqs[h];
    if (r->arrival > now) break;
    // Never the whole prompt: its last token must be computed for logits.
    int32_t cap = (int32_t)((r->n_known - 1) / s->bs);
    int32_t hits = s->cfg.prefix_cache ? rg__prefix_lookup(s, r, cap) : 0;
    int64_t hit_tokens = (int64_t)hits * s->bs;
    int64_t start = hit_tokens > r->n_remote ? hit_tokens : r->n_remote;
    int64_t chunk = r->n_known - start;
    if (chunk > s->budget) chunk = s->budget;
    int64_t fresh = rg__sched_blocks_for(s, start + chunk) - hits;
    // Cached hit blocks stop being evictable once shared.
    int64_t reclaimable = 0, from_tier = 0;
    for (int32_t i = 0; i < hits; i++) {
      int32_t b = r->table[i];
      if (b >= s->n_blocks)
        from_tier++;
      else
        reclaimable += s->blocks[b].state == RG_SCHED_BLOCK_CACHED;
    }
    int64_t avail = (int64_t)s->n_free + s->n_cached - reclaimable;
    if (fresh + from_tier + watermark(s) > avail) break;
    for (int32_t i = 0; i < hits; i++) {
      if (r->table[i] < s->n_blocks)
        rg__block_ref(s, r->table[i]);
      else
        rg__tier_hold(s, r->table[i]);
    }
    // Only now, with every hit held, may allocations evict or drop.
    if (from_tier)
      for (int32_t i = 0; i < hits; i++)
        if (r->table[i] >= s->n_blocks) r->table[i] = rg__tier_reload(s, r->table[i]);
    for (int32_t i = 0; i < hits; i++) r->canon[i] = s->blocks[r->table[i]].serial;
    r->n_table = r->n_canon = hits;
    for (int64_t i = 0; i < fresh; i++) r->table[r->n_table++] = rg__block_alloc(s);
    rg__list_remove(s, &s->waiting, h);
    rg__list_push_back(s, &s->running, h);
    r->n_computed = start;
    r->n_cached_tokens = hit_tokens;
    r->n_tier_tokens = from_tier * s->bs;
    r->n_import_tokens = start - hit_tokens;
    if (r->n_import_tokens > 0) {
      int32_t n_imp = (int32_t)(rg__sched_blocks_for(s, start) - hits);
      s->imports[s->n_imports++] = (rg_sched_import_t){.req = h,
                                                       .id = r->id,
                                                       .pos_begin = hit_tokens,
                                                       .pos_end = start,
                                                       .blocks = r->table + hits,
                                                       .n_blocks = n_imp};
      s->st.import_tokens += r->n_import_tokens;
      s->st.import_blocks += n_imp;
    }
    if (s->cfg.prefix_cache) {
      s->st.prefix_lookup_tokens += r->n_known;
      s->st.prefix_hit_tokens += hit_tokens;
      s->st.prefix_lookup_blocks += cap;
      s->st.prefix_hit_blocks += hits;
      s->st.tier_hit_tokens += r->n_tier_tokens;
    }
    // An imported request's KV up to its last known token exists (here or
    // elsewhere): that token is its next decode, as if it had never moved.
    int imported = r->n_remote > 0;
    if (imported) s->st.imports++;
    r->n_remote = 0;
    if (imported && start == r->n_known - 1) {
      r->decoding = 1;
      rg__set_state(s, r, RG_SCHED_DECODING);
      emit(s, SEG_DECODE, h, r, 1, now);
    } else {
      rg__set_state(s, r, RG_SCHED_PREFILLING);
      emit(s, SEG_NEW, h, r, chunk, now);
    }
  }
}

rg_status_t rg_sched_schedule(rg_sched_t *s, double now, rg_sched_batch_t *out) {
  memset(out, 0, sizeof(*out));
  if (s->outstanding && s->n_entries > 0)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "rg_sched_schedule: the batch of iteration %" PRId64
                          " (%zu entries) has not been committed; call rg_sched_commit first",
                          s->iter, s->n_entries);
  RG_RETURN_IF_ERROR(rg__sched_check_time(s, "rg_sched_schedule", now));
  s->iter++;
  s->outstanding = 1;
  s->n_seg[0] = s->n_seg[1] = s->n_seg[2] = 0;
  s->n_swap_out = s->n_swap_in = s->n_preempted = 0;
  s->n_offloads = s->n_reloads = s->n_imports = 0;
  // The previous batch's copies have all run by now.
  if (s->n_tier_pending) rg__tier_settle(s);
  s->n_decode_tokens = s->n_prefill_tokens = 0;
  s->budget = s->cfg.max_batch_tokens;

  schedule_decodes(s, now);
  schedule_started(s, now);
  if (s->n_preempted == 0) {
    schedule_swap_ins(s, now);
    // Swapped requests were running before any waiting one was admitted
    // (or re-admitted): none is admitted ahead of them.
    if (s->swapped.n == 0) schedule_new(s, now);
  }
  if (s->n_tier && s->cfg.retention_s > 0) rg__tier_offload_idle(s, now);

  size_t n = 0;
  for (int g = 0; g < 3; g++) {
    memcpy(s->entries + n, s->seg[g], s->n_seg[g] * sizeof(*s->entries));
    n += s->n_seg[g];
  }
  s->n_entries = n;
  for (size_t k = 0; k < n; k++) {
    s->reqs[s->entries[k].req].batch_slot = (int32_t)k;
    s->slot_gone[k] = 0;
  }
  s->st.decode_tokens += s->n_decode_tokens;
  s->st.prefill_tokens += s->n_prefill_tokens;

  out->entries = s->entries;
  out->n_entries = n;
  out->swap_out = s->swap_out;
  out->n_swap_out = s->n_swap_out;
  out->swap_in = s->swap_in;
  out->n_swap_in = s->n_swap_in;
  out->offloads = s->offloads;
  out->n_offloads = s->n_offloads;
  out->reloads = s->reloads;
  out->n_reloads = s->n_reloads;
  out->imports = s->imports;
  out->n_imports = s->n_imports;
  out->preempted = s->preempted;
  out->n_preempted = s->n_preempted;
  out->n_decode_tokens = s->n_decode_tokens;
  out->n_prefill_tokens = s->n_prefill_tokens;
  out->iteration = s->iter;
  return NULL;
}

// The entry of the outstanding batch that handle h had, or -1. A handle
// released since (and perhaps reused) is found among the ended entries.
static int64_t find_slot(const rg_sched_t *s, int32_t h) {
  const rg__req_t *r = rg__sched_req(s, h);
  if (r && r->batch_iter == s->iter) return r->batch_slot;
  for (size_t k = 0; k < s->n_entries; k++)
    if (s->slot_gone[k] && s->entries[k].req == h) return (int64_t)k;
  return -1;
}

rg_status_t rg_sched_commit(rg_sched_t *s, double now, const rg_sched_result_t *res, size_t n) {
  if (!s->outstanding)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "rg_sched_commit: no batch is outstanding; call rg_sched_schedule first");
  if (n > 0 && !res)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "rg_sched_commit: %zu results announced but none given", n);
  // Check everything before changing anything, so a bad call can be fixed
  // and repeated. Stamps from an earlier failed attempt are stale.
  uint64_t stamp = ++s->commit_stamp;
  for (size_t i = 0; i < n; i++) {
    int32_t h = res[i].req;
    int64_t k = find_slot(s, h);
    if (k < 0)
      return rg_status_make(RG_INVALID_ARGUMENT,
                            "rg_sched_commit: result %zu names request handle %" PRId32
                            ", which has no entry in the batch of iteration %" PRId64,
                            i, h, s->iter);
    const rg_sched_entry_t *e = &s->entries[k];
    if (!e->want_logits)
      return rg_status_make(RG_INVALID_ARGUMENT,
                            "rg_sched_commit: result %zu is for request %" PRIu64
                            " (handle %" PRId32
                            "), whose entry yields no logits: its chunk "
                            "ends at position %" PRId64 ", before the end of its tokens",
                            i, e->id, h, e->pos + e->n);
    if (s->slot_stamp[k] == stamp)
      return rg_status_make(RG_INVALID_ARGUMENT,
                            "rg_sched_commit: result %zu is a second result for request %" PRIu64
                            " (handle %" PRId32 ")",
                            i, e->id, h);
    if (res[i].token < 0)
      return rg_status_make(RG_INVALID_ARGUMENT,
                            "rg_sched_commit: result %zu for request %" PRIu64 " (handle %" PRId32
                            ") has token %" PRId32 "; token ids must be >= 0",
                            i, e->id, h, res[i].token);
    s->slot_stamp[k] = stamp;
    s->slot_result[k] = i;
  }
  for (size_t k = 0; k < s->n_entries; k++) {
    const rg_sched_entry_t *e = &s->entries[k];
    if (!s->slot_gone[k] && e->want_logits && s->slot_stamp[k] != stamp)
      return rg_status_make(RG_INVALID_ARGUMENT,
                            "rg_sched_commit: request %" PRIu64 " (handle %" PRId32
                            ") has an entry that yields logits in this batch but no result",
                            e->id, e->req);
  }
  RG_RETURN_IF_ERROR(rg__sched_check_time(s, "rg_sched_commit", now));

  for (size_t k = 0; k < s->n_entries; k++) {
    if (s->slot_gone[k]) continue;
    const rg_sched_entry_t *e = &s->entries[k];
    rg__req_t *r = &s->reqs[e->req];
    r->n_computed += e->n;
    if (s->cfg.prefix_cache) rg__prefix_commit(s, r);
    if (!e->want_logits) continue;
    const rg_sched_result_t *q = &res[s->slot_result[k]];
    r->tokens[r->n_known++] = q->token;
    if (isnan(r->first_token)) r->first_token = now;
    r->last_token = now;
    if (!r->decoding) {
      r->decoding = 1;
      rg__set_state(s, r, RG_SCHED_DECODING);
    }
    if (q->stop || r->n_known - r->n_prompt >= r->max_tokens)
      rg__sched_end(s, e->req, RG_SCHED_FINISHED, q->stop ? "stop" : "length", now);
  }
  s->outstanding = 0;
  return NULL;
}
