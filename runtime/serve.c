// Continuous batching over the scheduler (see runtime/serve.h).
#include "runtime/serve.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double at(const double *v, size_t n, double q) {
  double pos = q * (double)(n - 1);
  size_t i = (size_t)pos;
  if (i + 1 >= n) return v[n - 1];
  return v[i] + (pos - (double)i) * (v[i + 1] - v[i]);
}

rg_percentiles_t rg_percentiles(double *v, size_t n) {
  rg_percentiles_t p = {0, 0, 0, (int64_t)n};
  if (!n) return p;
  qsort(v, n, sizeof *v, cmp_d);
  p.p50 = at(v, n, 0.50), p.p90 = at(v, n, 0.90), p.p99 = at(v, n, 0.99);
  return p;
}

typedef struct {
  int32_t handle;  // sched's (the decode side's), or -1 when not (or no longer) in sched
  rg_sampler_t *sampler;
  size_t cap;  // of tokens / times
  int done;
  // Prefill-decode: the handle in the prefill side's scheduler, and the
  // outbox blocks its prompt holds until the decode side imports it.
  int32_t phandle;
  int64_t outbox_need;
} live_t;

static rg_status_t push_token(rg_serve_result_t *r, live_t *l, int32_t tok, double t) {
  if ((size_t)r->n_tokens == l->cap) {
    size_t cap = l->cap ? l->cap * 2 : 16;
    int32_t *nt = realloc(r->tokens, cap * sizeof(int32_t));
    if (nt) r->tokens = nt;
    double *tt = nt ? realloc(r->times, cap * sizeof(double)) : NULL;
    if (!nt || !tt) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory recording tokens");
    r->times = tt;
    l->cap = cap;
  }
  r->tokens[r->n_tokens] = tok;
  r->times[r->n_tokens++] = t;
  return NULL;
}

static void fail_result(rg_serve_result_t *r, const char *msg) {
  r->finish = "error";
  snprintf(r->error, sizeof r->error, "%s", msg);
}

// Checks what the scheduler cannot: token ids against the vocabulary.
static rg_status_t check_request(const rg_serve_request_t *q, int64_t vocab) {
  if (!q->n_prompt || !q->prompt) return rg_status_make(RG_INVALID_ARGUMENT, "the prompt is empty");
  for (size_t i = 0; i < q->n_prompt; i++)
    if (q->prompt[i] < 0 || q->prompt[i] >= vocab)
      return rg_status_make(RG_INVALID_ARGUMENT,
                            "prompt token %zu is id %d, outside the vocabulary (0..%lld)", i,
                            (int)q->prompt[i], (long long)vocab - 1);
  if (q->max_tokens < 1)
    return rg_status_make(RG_INVALID_ARGUMENT, "max_tokens is %lld; at least 1",
                          (long long)q->max_tokens);
  return NULL;
}

static void add_counters(rg_engine_counters_t *acc, const rg_engine_counters_t *a,
                         const rg_engine_counters_t *b) {
  acc->weight_bytes += b->weight_bytes - a->weight_bytes;
  acc->kv_bytes += b->kv_bytes - a->kv_bytes;
  acc->flops += b->flops - a->flops;
  acc->seconds += b->seconds - a->seconds;
  acc->tokens += b->tokens - a->tokens;
  acc->steps += b->steps - a->steps;
}

// One side's step buffers: the engine entries (and each one's request, the
// key a prefill-decode executor stashes its KV by), the imports, the logits
// and the sampled results of the batch sched built.
typedef struct {
  rg_engine_entry_t *entries;
  uint64_t *keys;
  rg_sched_result_t *results;
  float *logits;
  rg_pd_import_t *imports;
  size_t cap, cap_imports;
  rg_sched_batch_t b;
  int busy;
  rg_engine_counters_t c0;
} side_t;

typedef struct {
  const rg_executor_t *x;
  rg_sched_t *sched;
  const rg_serve_request_t *reqs;
  size_t n;
  const rg_serve_options_t *o;
  rg_serve_result_t *res;
  live_t *live;
  size_t *of_handle;  // request index by sched handle
  side_t one;         // the step buffers of the single pipeline
  double kv_sum;
  int64_t kv_samples;
  rg_sched_t *psched;  // prefill-decode: the prefill side's
  size_t *p_of_handle;
  int64_t outbox_used;  // blocks of finished prompts' KV waiting for import
  uint64_t kv_seen[2];  // the executor's kv_losses per side, as last handled
  int idle_spins;
} run_t;

static rg_status_t side_grow(side_t *s, size_t n, size_t n_imports, int64_t vocab) {
  if (n > s->cap) {
    size_t cap = n * 2;
    rg_engine_entry_t *en = realloc(s->entries, cap * sizeof *en);
    if (en) s->entries = en;
    uint64_t *k = en ? realloc(s->keys, cap * sizeof *k) : NULL;
    if (k) s->keys = k;
    rg_sched_result_t *rs = k ? realloc(s->results, cap * sizeof *rs) : NULL;
    if (rs) s->results = rs;
    float *lg = rs ? realloc(s->logits, cap * (size_t)vocab * sizeof(float)) : NULL;
    if (!lg) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory for a batch of %zu", n);
    s->logits = lg;
    s->cap = cap;
  }
  if (n_imports > s->cap_imports) {
    rg_pd_import_t *im = realloc(s->imports, n_imports * 2 * sizeof *im);
    if (!im) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
    s->imports = im;
    s->cap_imports = n_imports * 2;
  }
  return NULL;
}

static void side_free(side_t *s) {
  free(s->entries), free(s->keys), free(s->results), free(s->logits);
  free(s->imports);
}

// Lays out the batch sched built (s->b) as the executor's entries and
// imports, keyed by request index.
static rg_status_t side_fill(side_t *s, const size_t *of_handle, int64_t vocab) {
  RG_RETURN_IF_ERROR(side_grow(s, s->b.n_entries, s->b.n_imports, vocab));
  for (size_t k = 0; k < s->b.n_entries; k++) {
    const rg_sched_entry_t *se = &s->b.entries[k];
    s->entries[k] =
        (rg_engine_entry_t){se->pos, se->n, se->tokens, se->blocks, se->n_blocks, se->want_logits};
    s->keys[k] = of_handle[se->req];
  }
  for (size_t k = 0; k < s->b.n_imports; k++) {
    const rg_sched_import_t *im = &s->b.imports[k];
    s->imports[k] =
        (rg_pd_import_t){of_handle[im->req], im->pos_begin, im->pos_end, im->blocks, im->n_blocks};
  }
  return NULL;
}

// The batch's copies in sched's order: what reads device blocks (swap out,
// offloads), then what writes them (swap in, reloads).
static rg_status_t run_copies(run_t *r, const rg_sched_batch_t *b, rg_serve_stats_t *stats) {
  const rg_executor_t *x = r->x;
  if (b->n_swap_out)
    RG_RETURN_IF_ERROR(
        x->swap(x->impl, (const rg_engine_copy_t *)b->swap_out, b->n_swap_out, NULL, 0));
  double tt = rg_clock_now();
  if (b->n_offloads)
    RG_RETURN_IF_ERROR(
        x->tier(x->impl, (const rg_engine_copy_t *)b->offloads, b->n_offloads, NULL, 0));
  if (b->n_swap_in)
    RG_RETURN_IF_ERROR(
        x->swap(x->impl, NULL, 0, (const rg_engine_copy_t *)b->swap_in, b->n_swap_in));
  if (b->n_reloads)
    RG_RETURN_IF_ERROR(
        x->tier(x->impl, NULL, 0, (const rg_engine_copy_t *)b->reloads, b->n_reloads));
  if (b->n_offloads || b->n_reloads) stats->tier_seconds += rg_clock_now() - tt;
  return NULL;
}

// A step that failed: its requests fail with its error; the others go on.
static rg_status_t fail_step(run_t *r, rg_sched_t *sched, const side_t *s, const size_t *of_handle,
                             double t, rg_status_t err, int forget) {
  for (size_t k = 0; k < s->b.n_entries; k++) {
    size_t i = of_handle[s->b.entries[k].req];
    rg_status_free(rg_sched_fail(sched, s->b.entries[k].req, t, rg_status_message(err)));
    fail_result(&r->res[i], rg_status_message(err));
    if (forget) r->x->forget(r->x->impl, (uint64_t)i);
  }
  rg_status_free(err);
  return rg_sched_commit(sched, t, NULL, 0);
}

// Samples the step's logits rows into s->results; the requests named in bad
// (their imported KV was corrupted) are left out.
static rg_status_t take_tokens(run_t *r, side_t *s, const size_t *of_handle, double t,
                               const uint64_t *bad, size_t n_bad, size_t *nres) {
  const rg_serve_options_t *o = r->o;
  const rg_tokenizer_t *tok = r->x->tokenizer;
  *nres = 0;
  for (size_t k = 0, row = 0; k < s->b.n_entries; k++) {
    const rg_sched_entry_t *se = &s->b.entries[k];
    if (!se->want_logits) continue;
    size_t i = of_handle[se->req];
    const float *lr = s->logits + row * (size_t)r->x->vocab;
    row++;
    int skip = 0;
    for (size_t q = 0; q < n_bad; q++) skip |= bad[q] == (uint64_t)i;
    if (skip) continue;
    if (i == 0 && o->dump_logits && r->res[0].n_tokens < o->dump_rows)
      memcpy(o->dump_logits + (size_t)r->res[0].n_tokens * (size_t)r->x->vocab, lr,
             (size_t)r->x->vocab * sizeof(float));
    int32_t id = rg_sampler_sample(r->live[i].sampler, lr);
    RG_RETURN_IF_ERROR(push_token(&r->res[i], &r->live[i], id, t));
    int stop = o->stop_at_eog && tok && rg_tokenizer_is_eog(tok, id);
    if (stop) r->res[i].finish = "stop";
    s->results[(*nres)++] = (rg_sched_result_t){se->req, id, stop};
    if (o->on_token) RG_RETURN_IF_ERROR(o->on_token(o->ctx, i, id));
  }
  return NULL;
}

// Ends request i in sched and records why.
static void finish_req(run_t *r, size_t i, double t) {
  live_t *l = &r->live[i];
  rg_serve_result_t *res = &r->res[i];
  if (l->handle >= 0) {
    rg_sched_request_info_t info;
    rg_status_t s = rg_sched_request_info(r->sched, l->handle, &info);
    if (!s) {
      if (!res->finish)
        res->finish = info.reason && !strcmp(info.reason, "stop") ? "stop" : "length";
      if (info.state == RG_SCHED_FAILED && info.reason) fail_result(res, info.reason);
      if (!res->cached_tokens) res->cached_tokens = info.n_cached_tokens;
      res->preemptions = info.n_preemptions;
    }
    rg_status_free(s);
    rg_sched_release(r->sched, l->handle);
    l->handle = -1;
  }
  res->finished = t;
  l->done = 1;
}

// The requests of the (decode) scheduler r->sched that ended, finished.
static rg_status_t end_ended(run_t *r, double t, size_t *active) {
  for (size_t i = 0; i < r->n; i++) {
    live_t *l = &r->live[i];
    if (l->done || l->handle < 0) continue;
    rg_sched_request_info_t info;
    RG_RETURN_IF_ERROR(rg_sched_request_info(r->sched, l->handle, &info));
    if (info.state == RG_SCHED_FINISHED || info.state == RG_SCHED_FAILED ||
        info.state == RG_SCHED_ABORTED) {
      finish_req(r, i, t);
      (*active)--;
    }
  }
  return NULL;
}

// After a step of the (decode) scheduler r->sched: the KV pool's occupancy
// sampled, and the requests that ended finished.
static rg_status_t after_step(run_t *r, double t, rg_serve_stats_t *stats, size_t *active) {
  rg_sched_stats_t ss;
  rg_sched_stats(r->sched, &ss);
  double used = (double)ss.blocks_used / (double)r->x->kv_blocks;
  r->kv_sum += used;
  r->kv_samples++;
  if (used > stats->kv_used_max) stats->kv_used_max = used;
  return end_ended(r, t, active);
}

// Prompts that failed on the prefill side (their step failed, or went on
// without them) end, and give their outbox room back.
static rg_status_t end_failed_prompts(run_t *r, double t, size_t *active) {
  for (size_t i = 0; i < r->n; i++) {
    live_t *l = &r->live[i];
    if (l->done || l->phandle < 0) continue;
    rg_sched_request_info_t info;
    RG_RETURN_IF_ERROR(rg_sched_request_info(r->psched, l->phandle, &info));
    if (info.state != RG_SCHED_FAILED && info.state != RG_SCHED_ABORTED) continue;
    if (info.reason) fail_result(&r->res[i], info.reason);
    r->x->forget(r->x->impl, (uint64_t)i);
    r->outbox_used -= l->outbox_need;
    l->outbox_need = 0;
    rg_sched_release(r->psched, l->phandle);
    l->phandle = -1;
    finish_req(r, i, t);
    (*active)--;
  }
  return NULL;
}

// A worker holding side's KV pool was lost since the last look: the
// requests holding blocks there fail, naming it, and its prefix cache is
// forgotten. On the prefill side of prefill-decode, the prompts whose KV
// waits there for the decode side's import fail too (those not yet
// imported). Call only while side has no step in flight.
static rg_status_t take_kv_losses(run_t *r, int side, double t, size_t *active) {
  const rg_executor_t *x = r->x;
  if (!x->kv_losses) return NULL;
  char why[640] = "";
  uint64_t n = x->kv_losses(x->impl, side, why, sizeof why);
  if (n == r->kv_seen[side]) return NULL;
  r->kv_seen[side] = n;
  if (!why[0]) snprintf(why, sizeof why, "a worker holding its KV was lost");
  int pd = x->begin != NULL;
  rg_sched_t *sc = pd && !side ? r->psched : r->sched;
  RG_RETURN_IF_ERROR(rg_sched_device_kv_lost(sc, t, why, NULL));
  if (pd && !side)
    for (size_t i = 0; i < r->n; i++) {
      live_t *l = &r->live[i];
      if (l->done || l->handle < 0 || l->outbox_need <= 0) continue;
      rg_sched_request_info_t info;
      RG_RETURN_IF_ERROR(rg_sched_request_info(r->sched, l->handle, &info));
      if (info.state != RG_SCHED_WAITING) continue;
      RG_RETURN_IF_ERROR(rg_sched_fail(r->sched, l->handle, t, why));
      x->forget(x->impl, (uint64_t)i);
      r->outbox_used -= l->outbox_need;
      l->outbox_need = 0;
    }
  if (pd && !side) RG_RETURN_IF_ERROR(end_failed_prompts(r, t, active));
  return end_ended(r, t, active);
}

static rg_status_t serve_loop(run_t *r, double t0, rg_serve_stats_t *stats) {
  const rg_serve_options_t *o = r->o;
  side_t *s = &r->one;
  size_t active = 0;
  for (size_t i = 0; i < r->n; i++) active += !r->live[i].done;
  int idle_spins = 0;
  while (active) {
    if (o->stop && *o->stop) return rg_status_make(RG_CANCELLED, "interrupted");
    double now = rg_clock_now() - t0;
    RG_RETURN_IF_ERROR(rg_sched_schedule(r->sched, now, &s->b));
    RG_RETURN_IF_ERROR(run_copies(r, &s->b, stats));
    if (!s->b.n_entries) {
      // Nothing runnable: wait for the next arrival, or give up when none is due.
      double next = INFINITY;
      for (size_t i = 0; i < r->n; i++)
        if (!r->live[i].done && r->res[i].n_tokens == 0 && r->reqs[i].arrival > now &&
            r->reqs[i].arrival < next)
          next = r->reqs[i].arrival;
      RG_RETURN_IF_ERROR(rg_sched_commit(r->sched, now, NULL, 0));
      if (isfinite(next)) {
        rg_clock_sleep(fmin(next - now, 0.1));  // short naps: a stop request is seen soon
        continue;
      }
      if (++idle_spins > 3)
        return rg_status_make(
            RG_INTERNAL, "the scheduler holds %zu requests but schedules none of them", active);
      continue;
    }
    idle_spins = 0;
    RG_RETURN_IF_ERROR(side_fill(s, r->of_handle, r->x->vocab));
    rg_engine_counters_t c0, c1;
    r->x->counters(r->x->impl, &c0);
    rg_status_t st = r->x->forward(r->x->impl, s->entries, s->b.n_entries, s->logits);
    r->x->counters(r->x->impl, &c1);
    add_counters(s->b.n_prefill_tokens ? &stats->prefill : &stats->decode, &c0, &c1);
    double t = rg_clock_now() - t0;
    if (st) {
      RG_RETURN_IF_ERROR(fail_step(r, r->sched, s, r->of_handle, t, st, 0));
    } else {
      stats->iterations++;
      size_t nres = 0;
      RG_RETURN_IF_ERROR(take_tokens(r, s, r->of_handle, t, NULL, 0, &nres));
      RG_RETURN_IF_ERROR(rg_sched_commit(r->sched, t, s->results, nres));
    }
    RG_RETURN_IF_ERROR(after_step(r, t, stats, &active));
    RG_RETURN_IF_ERROR(take_kv_losses(r, 0, t, &active));
  }
  return NULL;
}

// Queues request i again on the decode side as a plain request of its
// prompt and the tokens it has, to be computed there from scratch.
static rg_status_t readd_recompute(run_t *r, size_t i) {
  const rg_serve_request_t *q = &r->reqs[i];
  rg_serve_result_t *res = &r->res[i];
  size_t n = q->n_prompt + (size_t)res->n_tokens;
  int32_t *ids = malloc(n * sizeof *ids);
  if (!ids) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
  memcpy(ids, q->prompt, q->n_prompt * sizeof *ids);
  memcpy(ids + q->n_prompt, res->tokens, (size_t)res->n_tokens * sizeof *ids);
  rg_sched_request_t sr = {q->id, ids, n, q->max_tokens - res->n_tokens, q->arrival};
  rg_status_t st = rg_sched_add(r->sched, &sr, &r->live[i].handle);
  free(ids);
  if (!st && (size_t)r->live[i].handle >= r->n)
    st = rg_status_make(RG_INTERNAL, "scheduler handle %d past %zu requests", r->live[i].handle,
                        r->n);
  if (st) {
    fail_result(res, rg_status_message(st));
    rg_status_free(st);
    r->live[i].handle = -1;
    return NULL;
  }
  r->of_handle[r->live[i].handle] = i;
  return NULL;
}

// ----- Prefill-decode --------------------------------------------------------------
//
// Two schedulers: one over the prefill side's KV pool, where each request
// computes its prompt and its first token (max_tokens 1), and one over the
// decode side's, where it is imported (rg_sched_add_imported) and decodes the
// rest. Both sides run steps at the same time: a long prompt being prefilled
// does not hold up the decodes, which is the point of the split. A request
// waits to enter prefill until the executor's outbox, where a finished
// prompt's KV waits for its import, has room for it.

static rg_status_t serve_loop_pd(run_t *r, const size_t *order, double t0,
                                 rg_serve_stats_t *stats) {
  const rg_executor_t *x = r->x;
  size_t n = r->n;
  rg_sched_t *ps = r->psched, *ds = r->sched;
  size_t *p_of = r->p_of_handle, *d_of = r->of_handle;
  side_t sides[2] = {{0}};
  int64_t bp = x->prefill_block_size;
  int64_t *outbox = &r->outbox_used;
  size_t next = 0, active = 0;
  rg_status_t st = NULL;
  for (size_t i = 0; i < n; i++) active += !r->live[i].done;
  double idle = 0;
  while (active && !st) {
    if (r->o->stop && *r->o->stop) {
      st = rg_status_make(RG_CANCELLED, "interrupted");
      break;
    }
    double now = rg_clock_now() - t0;
    int progress = 0;
    // Requests that have arrived enter prefill in arrival order while the
    // outbox has room for their prompts.
    while (next < n) {
      size_t i = order[next];
      live_t *l = &r->live[i];
      if (l->done) {
        next++;
        continue;
      }
      const rg_serve_request_t *q = &r->reqs[i];
      if (q->arrival > now) break;
      int64_t need = ((int64_t)q->n_prompt + bp - 1) / bp;
      if (*outbox + need > x->outbox_blocks && *outbox > 0) break;
      rg_sched_request_t sr = {q->id, q->prompt, q->n_prompt, 1, q->arrival};
      rg_status_t bad = rg_sched_add(ps, &sr, &l->phandle);
      if (!bad && (size_t)l->phandle >= n)
        bad = rg_status_make(RG_INTERNAL, "scheduler handle %d past %zu requests", l->phandle, n);
      if (bad) {
        fail_result(&r->res[i], rg_status_message(bad));
        rg_status_free(bad);
        l->phandle = -1;
        finish_req(r, i, now);
        active--;
      } else {
        p_of[l->phandle] = i;
        l->outbox_need = need;
        *outbox += need;
      }
      next++;
      progress = 1;
    }
    // Begin a step on each idle side (first ending the requests whose KV
    // was on a worker lost since).
    for (int side = 0; side < 2 && !st; side++) {
      side_t *s = &sides[side];
      if (s->busy) continue;
      if ((st = take_kv_losses(r, side, now, &active))) break;
      rg_sched_t *sc = side ? ds : ps;
      const size_t *of = side ? d_of : p_of;
      if ((st = rg_sched_schedule(sc, now, &s->b))) break;
      // The prefill side has no swap or capacity tier: its batches hold no copies.
      if ((st = run_copies(r, &s->b, stats))) break;
      if (!s->b.n_entries && !s->b.n_imports) {
        st = rg_sched_commit(sc, now, NULL, 0);
        continue;
      }
      if ((st = side_fill(s, of, x->vocab))) break;
      x->side_counters(x->impl, side, &s->c0);
      rg_status_t bs = x->begin(x->impl, side, s->entries, s->keys, s->b.n_entries, s->imports,
                                s->b.n_imports, s->logits);
      if (bs) {
        // Its requests fail (a worker of that side is gone, say); the other
        // side's go on.
        st = fail_step(r, sc, s, of, now, bs, 0);
        if (!st)
          st = side ? after_step(r, now, stats, &active) : end_failed_prompts(r, now, &active);
        progress = 1;
        continue;
      }
      s->busy = 1;
      progress = 1;
    }
    // Poll both.
    for (int side = 0; side < 2 && !st; side++) {
      side_t *s = &sides[side];
      if (!s->busy) continue;
      rg_sched_t *sc = side ? ds : ps;
      const size_t *of = side ? d_of : p_of;
      int done = 0;
      uint64_t bad[64];
      size_t n_bad = 0;
      rg_status_t ps_st = x->poll(x->impl, side, &done, bad, 64, &n_bad);
      if (!done) {
        if (ps_st) st = ps_st;
        continue;
      }
      s->busy = 0;
      progress = 1;
      double t = rg_clock_now() - t0;
      rg_engine_counters_t c1;
      x->side_counters(x->impl, side, &c1);
      add_counters(side ? &stats->decode : &stats->prefill, &s->c0, &c1);
      // Imports of this step no longer wait in the outbox.
      if (side)
        for (size_t k = 0; k < s->b.n_imports; k++) {
          live_t *l = &r->live[of[s->b.imports[k].req]];
          *outbox -= l->outbox_need;
          l->outbox_need = 0;
        }
      if (ps_st) {
        st = fail_step(r, sc, s, of, t, ps_st, !side);
      } else {
        stats->iterations++;
        // Corrupted imports: the request's KV here is dropped and it is
        // recomputed on the decode side from its prompt and its tokens.
        for (size_t q = 0; q < n_bad && !st; q++) {
          size_t i = (size_t)bad[q];
          if (i >= n || r->live[i].handle < 0) continue;
          rg_status_free(rg_sched_fail(sc, r->live[i].handle, t, "its KV pages arrived corrupted"));
          rg_sched_release(sc, r->live[i].handle);
          r->live[i].handle = -1;
          st = readd_recompute(r, i);
          stats->kv_recomputed++;
        }
        size_t nres = 0;
        if (!st) st = take_tokens(r, s, of, t, bad, n_bad, &nres);
        if (!st) st = rg_sched_commit(sc, t, s->results, nres);
        // Prompts done on the prefill side go to the decode side, or end.
        for (size_t k = 0; !st && !side && k < s->b.n_entries; k++) {
          const rg_sched_entry_t *se = &s->b.entries[k];
          if (!se->want_logits) continue;
          size_t i = of[se->req];
          live_t *l = &r->live[i];
          rg_sched_request_info_t info;
          if ((st = rg_sched_request_info(ps, l->phandle, &info))) break;
          r->res[i].cached_tokens = info.n_cached_tokens;
          rg_sched_release(ps, l->phandle);
          l->phandle = -1;
          const rg_serve_request_t *q = &r->reqs[i];
          if (r->res[i].n_tokens >= q->max_tokens ||
              (r->res[i].finish && !strcmp(r->res[i].finish, "stop"))) {
            x->forget(x->impl, (uint64_t)i);
            *outbox -= l->outbox_need;
            l->outbox_need = 0;
            if (!r->res[i].finish) r->res[i].finish = "length";
            finish_req(r, i, t);
            active--;
            continue;
          }
          rg_sched_request_t sr = {q->id, q->prompt, q->n_prompt, q->max_tokens, q->arrival};
          rg_status_t bad_add =
              rg_sched_add_imported(ds, &sr, q->n_prompt, r->res[i].tokens, 1, &l->handle);
          if (!bad_add && (size_t)l->handle >= n)
            bad_add =
                rg_status_make(RG_INTERNAL, "scheduler handle %d past %zu requests", l->handle, n);
          if (bad_add) {
            fail_result(&r->res[i], rg_status_message(bad_add));
            rg_status_free(bad_add);
            x->forget(x->impl, (uint64_t)i);
            *outbox -= l->outbox_need;
            l->outbox_need = 0;
            l->handle = -1;
            finish_req(r, i, t);
            active--;
            continue;
          }
          d_of[l->handle] = i;
        }
      }
      if (!st) st = side ? after_step(r, t, stats, &active) : end_failed_prompts(r, t, &active);
    }
    if (st) break;
    if (progress) {
      idle = 0;
      continue;
    }
    // Nothing moved: wait for a side, or for the next arrival.
    if (!sides[0].busy && !sides[1].busy) {
      double wake = INFINITY;
      if (next < n) wake = r->reqs[order[next]].arrival;
      if (isfinite(wake) && wake > now) {
        rg_clock_sleep(fmin(wake - now, 0.1));
        continue;
      }
      if (++r->idle_spins > 1000)
        st = rg_status_make(RG_INTERNAL,
                            "prefill-decode holds %zu requests but schedules none of them", active);
    } else {
      r->idle_spins = 0;
    }
    idle = idle < 1e-3 ? idle + 5e-6 : idle;
    if (idle > 2e-5) rg_clock_sleep(idle);
  }
  // A step still in flight when the run stops: let it finish so nothing
  // writes into freed memory.
  for (int side = 0; side < 2; side++)
    while (sides[side].busy) {
      int done = 0;
      uint64_t bad[64];
      size_t n_bad;
      rg_status_free(x->poll(x->impl, side, &done, bad, 64, &n_bad));
      if (done) sides[side].busy = 0;
    }
  side_free(&sides[0]);
  side_free(&sides[1]);
  return st;
}

static rg_status_t engine_forward(void *impl, const rg_step_entry_t *entries, size_t n,
                                  float *logits) {
  return rg_engine_forward(impl, entries, n, logits);
}
static rg_status_t engine_swap(void *impl, const rg_engine_copy_t *out, size_t n_out,
                               const rg_engine_copy_t *in, size_t n_in) {
  return rg_engine_swap(impl, out, n_out, in, n_in);
}
static rg_status_t engine_tier(void *impl, const rg_engine_copy_t *out, size_t n_out,
                               const rg_engine_copy_t *in, size_t n_in) {
  return rg_engine_tier(impl, out, n_out, in, n_in);
}
static void engine_counters(void *impl, rg_engine_counters_t *out) {
  rg_engine_counters(impl, out);
}

rg_executor_t rg_engine_executor(rg_engine_t *e) {
  return (rg_executor_t){.impl = e,
                         .forward = engine_forward,
                         .swap = engine_swap,
                         .counters = engine_counters,
                         .tokenizer = rg_engine_tokenizer(e),
                         .vocab = rg_engine_vocab(e),
                         .kv_blocks = rg_engine_kv_blocks(e),
                         .max_context = rg_engine_max_context(e),
                         .swap_blocks = rg_engine_swap_blocks(e),
                         .tier = engine_tier,
                         .tier_blocks = rg_engine_tier_blocks(e),
                         .block_size = rg_engine_block_size(e),
                         .max_seqs = rg_engine_max_seqs(e)};
}

rg_status_t rg_serve(rg_engine_t *e, const rg_serve_request_t *reqs, size_t n,
                     const rg_serve_options_t *opt, rg_serve_result_t *res,
                     rg_serve_stats_t *stats) {
  rg_executor_t x = rg_engine_executor(e);
  return rg_serve_on(&x, reqs, n, opt, res, stats);
}

rg_status_t rg_serve_on(const rg_executor_t *e, const rg_serve_request_t *reqs, size_t n,
                        const rg_serve_options_t *opt, rg_serve_result_t *res,
                        rg_serve_stats_t *stats) {
  memset(stats, 0, sizeof *stats);
  memset(res, 0, n * sizeof *res);
  rg_serve_options_t o = opt ? *opt : (rg_serve_options_t){0};
  if (!n) return NULL;
  run_t r = {.x = e, .reqs = reqs, .n = n, .o = &o, .res = res};
  // Losses before this run left nothing in its (new) schedulers.
  for (int side = 0; side < 2 && e->kv_losses; side++)
    r.kv_seen[side] = e->kv_losses(e->impl, side, NULL, 0);
  rg_status_t st = NULL;
  size_t *order = NULL;
  rg_sched_config_t sc = {
      .block_size = e->block_size,
      .n_blocks = e->kv_blocks,
      .n_swap_blocks = e->swap_blocks,
      .max_seqs = o.max_seqs > 0 ? o.max_seqs : e->max_seqs,
      .max_batch_tokens = o.max_batch_tokens > 0 ? o.max_batch_tokens : 512,
      .max_context = e->max_context,
      .preempt = o.preempt,
      .prefix_cache = o.prefix_cache,
      .n_tier_blocks = e->tier ? e->tier_blocks : 0,
      .retention_s = e->tier && e->tier_blocks ? o.retention_s : 0,
  };
  if (sc.n_tier_blocks && !sc.prefix_cache) {
    st = rg_status_make(RG_INVALID_ARGUMENT,
                        "the capacity tier holds cached prefixes; it needs the prefix cache on");
    goto done;
  }
  if (sc.max_batch_tokens < sc.max_seqs) sc.max_batch_tokens = sc.max_seqs;
  if (sc.preempt == RG_SCHED_PREEMPT_SWAP && !sc.n_swap_blocks) {
    st = rg_status_make(RG_INVALID_ARGUMENT,
                        "preemption by swap needs a swap tier; give the engine swap tokens");
    goto done;
  }
  if ((st = rg_sched_create(&sc, &r.sched))) goto done;
  int pd = e->begin != NULL;
  if (pd) {
    if (sc.preempt == RG_SCHED_PREEMPT_SWAP) {
      st = rg_status_make(RG_INVALID_ARGUMENT,
                          "preemption by swap is not run with prefill-decode; use recompute");
      goto done;
    }
    rg_sched_config_t pc = sc;
    pc.block_size = e->prefill_block_size;
    pc.n_blocks = e->prefill_kv_blocks;
    pc.n_swap_blocks = 0;
    pc.n_tier_blocks = 0;  // idle sessions' KV waits on the decode side
    pc.retention_s = 0;
    if ((st = rg_sched_create(&pc, &r.psched))) goto done;
    if (!(r.p_of_handle = calloc(n, sizeof *r.p_of_handle))) {
      st = rg_status_make(RG_OUT_OF_MEMORY, "out of memory for %zu requests", n);
      goto done;
    }
  }
  r.live = calloc(n, sizeof *r.live);
  r.of_handle = calloc(n, sizeof *r.of_handle);
  if (!r.live || !r.of_handle) {
    st = rg_status_make(RG_OUT_OF_MEMORY, "out of memory for %zu requests", n);
    goto done;
  }
  // Add in arrival order: sched serves its waiting queue in order of add.
  order = malloc(n * sizeof *order);
  if (!order) {
    st = rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
    goto done;
  }
  for (size_t i = 0; i < n; i++) order[i] = i;
  for (size_t i = 1; i < n; i++)  // stable insertion sort by arrival
    for (size_t j = i; j > 0 && reqs[order[j]].arrival < reqs[order[j - 1]].arrival; j--) {
      size_t tmp = order[j];
      order[j] = order[j - 1];
      order[j - 1] = tmp;
    }
  int64_t vocab = e->vocab;
  for (size_t k = 0; k < n && !st; k++) {
    size_t i = order[k];
    const rg_serve_request_t *q = &reqs[i];
    live_t *l = &r.live[i];
    l->handle = l->phandle = -1;
    res[i].arrival = q->arrival;
    stats->requests++;
    stats->prompt_tokens += (int64_t)q->n_prompt;
    rg_status_t bad = check_request(q, vocab);
    rg_sched_request_t sr = {q->id, q->prompt, q->n_prompt, q->max_tokens, q->arrival};
    if (!bad && !pd) bad = rg_sched_add(r.sched, &sr, &l->handle);
    if (!bad) bad = rg_sampler_create(&q->sampler, (size_t)vocab, &l->sampler);
    if (bad) {
      fail_result(&res[i], rg_status_message(bad));
      rg_status_free(bad);
      if (l->handle >= 0) rg_sched_release(r.sched, l->handle);
      l->handle = -1;
      l->done = 1;
      continue;
    }
    if (pd) continue;  // enters the prefill side when it arrives
    if ((size_t)l->handle >= n) {
      st = rg_status_make(RG_INTERNAL, "scheduler handle %d past %zu requests", (int)l->handle, n);
      break;
    }
    r.of_handle[l->handle] = i;
  }
  double t0 = rg_clock_now();
  if (!st) st = pd ? serve_loop_pd(&r, order, t0, stats) : serve_loop(&r, t0, stats);
  free(order);
  order = NULL;
  // Whatever is left when the run stops early ends as failed.
  for (size_t i = 0; i < n; i++)
    if (!r.live[i].done) {
      if (!res[i].finish) fail_result(&res[i], st ? rg_status_message(st) : "the run stopped");
      finish_req(&r, i, rg_clock_now() - t0);
    }
  // Statistics.
  double *v = malloc((n + 1) * sizeof(double) * 3);
  size_t n_tbt_cap = 1;
  for (size_t i = 0; i < n; i++)
    n_tbt_cap += (size_t)(res[i].n_tokens > 1 ? res[i].n_tokens - 1 : 0);
  double *tbt = malloc(n_tbt_cap * sizeof(double));
  if (v && tbt) {
    double *ttft = v, *e2e = v + n + 1;
    size_t a = 0, b = 0, c = 0;
    double first = INFINITY, last = 0;
    for (size_t i = 0; i < n; i++) {
      const rg_serve_result_t *q = &res[i];
      if (q->finish && !strcmp(q->finish, "error")) stats->failed++;
      stats->new_tokens += q->n_tokens;
      if (q->arrival < first) first = q->arrival;
      if (!q->n_tokens) continue;
      if (q->times[q->n_tokens - 1] > last) last = q->times[q->n_tokens - 1];
      ttft[a++] = q->times[0] - q->arrival;
      e2e[c++] = q->finished - q->arrival;
      for (int64_t k = 1; k < q->n_tokens; k++) tbt[b++] = q->times[k] - q->times[k - 1];
    }
    stats->ttft = rg_percentiles(ttft, a);
    stats->e2e = rg_percentiles(e2e, c);
    stats->tbt = rg_percentiles(tbt, b);
    stats->wall_s = last > first ? last - (first > 0 ? first : 0) : 0;
    stats->tokens_per_s = stats->wall_s > 0 ? (double)stats->new_tokens / stats->wall_s : 0;
  }
  free(v);
  free(tbt);
  if (r.sched) {
    rg_sched_stats_t ss;
    rg_sched_stats(r.sched, &ss);
    stats->preempt_recompute = ss.preempt_recompute;
    stats->preempt_swap = ss.preempt_swap;
    stats->prefix_lookup_tokens = ss.prefix_lookup_tokens;
    stats->prefix_hit_tokens = ss.prefix_hit_tokens;
    stats->tier_offloaded = ss.blocks_offloaded;
    stats->tier_reloaded = ss.blocks_reloaded;
    stats->tier_hit_tokens = ss.tier_hit_tokens;
    if (r.psched) {
      // Prefix hits are the prefill side's: that is where prompts are computed.
      rg_sched_stats_t ps;
      rg_sched_stats(r.psched, &ps);
      stats->preempt_recompute += ps.preempt_recompute;
      stats->prefix_lookup_tokens = ps.prefix_lookup_tokens;
      stats->prefix_hit_tokens = ps.prefix_hit_tokens;
    }
    stats->prefix_hit_rate = ss.prefix_lookup_tokens
                                 ? (double)ss.prefix_hit_tokens / (double)ss.prefix_lookup_tokens
                                 : 0;
  }
  stats->kv_used_mean = r.kv_samples ? r.kv_sum / (double)r.kv_samples : 0;
done:
  if (r.live)
    for (size_t i = 0; i < n; i++) rg_sampler_destroy(r.live[i].sampler);
  free(order);
  free(r.live);
  free(r.of_handle);
  free(r.p_of_handle);
  rg_sched_destroy(r.psched);
  side_free(&r.one);
  rg_sched_destroy(r.sched);
  return st;
}

void rg_serve_results_free(rg_serve_result_t *res, size_t n) {
  for (size_t i = 0; res && i < n; i++) {
    free(res[i].tokens);
    free(res[i].times);
    res[i].tokens = NULL;
    res[i].times = NULL;
  }
}
