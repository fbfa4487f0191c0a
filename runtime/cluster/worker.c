// A worker process: joins the coordinator, loads its stage instances, and
// runs its hops of every step (see runtime/cluster.h).
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/hugemem.h"
#include "runtime/cluster/cluster_impl.h"
#include "runtime/step.h"

#define MAX_MB 2

// A buffer on the worker's device, with a host staging copy when the device
// memory is not host visible.
typedef struct {
  rg_buffer_t *buf;
  size_t bytes;
  void *stage;  // host copy (non-host devices), or NULL
} dbuf_t;

// A KV write in flight from a transfer order: what it moves and since when.
typedef struct {
  uint64_t xfer, key, bytes;
  uint32_t to;
  int64_t layer_begin, layer_end, pos_begin, pos_end;
  double t0;
  int staging;  // the staging buffer it writes from (-1: none)
} write_info_t;

// A registered buffer a transfer between different block sizes gathers its
// positions into (see kvmove.c), kept for the next one once its write is done.
enum { MAX_STAGING = 8 };
typedef struct {
  uint8_t *buf;
  size_t bytes, mapped;
  rg_transport_region_t *region;
  int busy;
} staging_t;

typedef struct {
  rg_worker_options_t o;
  rg_device_t *dev;
  rg_transport_t *tp;
  rg_control_client_t *ctl;
  rg_model_t *model;
  const rg_arch_t *a;
  rg_cluster_layout_t layout;
  int me;
  char names[RG_CLUSTER_MAX_WORKERS][48];
  rg_stage_t *stages[RG_CLUSTER_MAX_STAGES];
  rg_stage_ctx_t *ctx[RG_CLUSTER_MAX_STAGES][MAX_MB];
  int n_stages;
  rg_cluster_hop_t hops[RG_CLUSTER_MAX_HOPS];
  size_t n_hops;
  rg_transport_peer_t peer[RG_CLUSTER_MAX_WORKERS], coord;
  int have_peers;
  uint64_t epoch;  // of the PeerTable applied
  rg_weight_cache_t *cache;
  rg_step_limits_t lim;
  rg__step_bounds_t bounds;
  int n_mb;
  // The step in progress's deadline (the coordinator's, from its STEP) and
  // where it came from; step_floor is the configured one, the deadline of
  // transfers and control waits outside steps.
  double step_timeout, step_floor;
  rg_cluster_deadline_t deadline;
  char deadline_why[256];
  // Per micro-batch.
  rg_step_buf_t sb[MAX_MB];
  rg_step_t st[MAX_MB];
  dbuf_t x[MAX_MB], logits[MAX_MB];
  // Statistics.
  rg__link_t links[RG_CLUSTER_MAX_WORKERS + 1];
  rg__link_t kv_in[RG_CLUSTER_MAX_WORKERS];  // KV pages received from each worker
  rg__event_t *events;
  size_t n_events, cap_events;
  int trace, check;
  int32_t bad_hop;
  uint64_t step;
  // When this worker began waiting with nothing to run (for a peer's data
  // or the next step; 0: it has run since), and per stage the calls that
  // came after such a wait of at least RG_STAGE_COLD_IDLE_S (its counters'
  // cold_calls).
  double idle_since;
  int64_t cold_calls[RG_CLUSTER_MAX_STAGES];
  // Prefill-decode. A prefill worker stashes each finished prompt's blocks
  // into its outbox (per attention instance, host memory registered as an RMA
  // source) and serves XFER orders from it; a decode worker's KV pools are
  // registered as RMA targets and it waits for the notices its STEP expects.
  rg_cluster_role_t role;
  rg_buffer_t *outbox[RG_CLUSTER_MAX_STAGES];
  rg_transport_region_t *outbox_region[RG_CLUSTER_MAX_STAGES];
  int64_t outbox_blocks;
  rg_transport_region_t *kv_region[RG_CLUSTER_MAX_STAGES];
  rg__kvplan_t plan;
  uint64_t xfer_seq;
  rg_transport_req_t *xfer_recv;
  uint8_t *xfer_buf;
  rg_transport_req_t *writes[256];
  size_t n_writes;
  write_info_t write_info[256];  // what each write in flight moves, to report its failure
  staging_t staging[MAX_STAGING];
  // A prefill worker's transfer thread: it takes the XFER orders and pushes
  // the pages while the main thread computes, so a decode step never waits
  // for the prefill's next hop. It owns everything above from xfer_seq on;
  // the two threads share the endpoint (its calls are serialised by the
  // transport) and the peer table, which xfer_mu guards: the thread holds it
  // while it serves orders, and the main thread while it changes peers.
  // xfer_err is the thread's last word (the coordinator gone), under xfer_mu.
  pthread_t xfer_thread;
  int xfer_on;
  atomic_int xfer_stop;
  pthread_mutex_t xfer_mu;
  rg_status_t xfer_err;
  uint64_t bad_keys[64];
  uint32_t n_bad_keys;
  // Test hooks, counting the KV transfers this worker sends:
  // RIDGE_TEST_CORRUPT_KV_WRITE=k flips a bit of the k-th (its receiver
  // must catch it), RIDGE_TEST_DROP_KV_WRITE=k never writes it (its
  // receiver's wait runs out), RIDGE_TEST_FAIL_KV_ORDER=k aims its write
  // past the end of the receiver's region, so the transport refuses it here
  // (the coordinator must learn why).
  uint64_t corrupt_at, drop_at, fail_at, n_xfers_done;
  // Capacity tier: the tier worker's memory (host, registered both ways);
  // attention workers of a layout with a tier register their pools both
  // ways too (offloads read them, reloads write them).
  int has_tier;
  rg_buffer_t *tier;
  rg_transport_region_t *tier_region;
  size_t tier_bytes;
  // Tier ranges whose offload failed its checksum: a reload that reads one
  // is sent so that its receiver sees the checksum fail too.
  uint64_t bad_lo[256], bad_hi[256];
  size_t n_bad_ranges;
} worker_t;

static void say(const worker_t *w, const char *fmt, const char *a) {
  if (!w->o.quiet) {
    fprintf(stderr, "ridge worker %s: ", w->o.name ? w->o.name : "");
    fprintf(stderr, fmt, a);
    fputc('\n', stderr);
  }
}

// ----- Joining and loading ----------------------------------------------------------

static const char *opt_get(const rg_control_assign_t *a, const char *key) {
  for (size_t i = 0; i < a->n_options; i++)
    if (a->options[i]->key && !strcmp(a->options[i]->key, key)) return a->options[i]->value;
  return NULL;
}

static int64_t opt_int(const rg_control_assign_t *a, const char *key, int64_t dflt) {
  const char *v = opt_get(a, key);
  return v && *v ? strtoll(v, NULL, 10) : dflt;
}

static rg_status_t stage_from_wire(const rg_control_stage_instance_t *si, rg_stage_spec_t *out,
                                   int32_t *experts, size_t cap) {
  rg_stage_kind_t k;
  RG_RETURN_IF_ERROR(rg_control_stage_kind_from_wire(si->kind, &k));
  if (si->n_experts > cap)
    return rg_status_make(RG_INVALID_ARGUMENT, "Assign: %zu experts, at most %zu", si->n_experts,
                          cap);
  for (size_t i = 0; i < si->n_experts; i++) experts[i] = (int32_t)si->experts[i];
  *out = (rg_stage_spec_t){k, si->layer_begin, si->layer_end, si->n_experts ? experts : NULL,
                           si->n_experts};
  return NULL;
}

// What the worker's role needs for moving KV between workers: outboxes on a
// prefill worker, RMA-target pools on a decode worker. Both need host memory
// (no FI_HMEM here): a device whose memory is not host-visible is refused.
static rg_status_t setup_kv_moves(worker_t *w) {
  const char *dev = w->o.device ? w->o.device : "cpu:0";
  if (w->role == RG_CLUSTER_ROLE_TIER) {
    if (!w->tier_bytes)
      return rg_status_make(RG_INVALID_ARGUMENT, "Assign: a capacity tier of 0 bytes");
    RG_RETURN_IF_ERROR(rg_buffer_alloc(w->dev, w->tier_bytes, &w->tier));
    void *host = rg_buffer_host_ptr(w->tier);
    if (!host)
      return rg_status_make(RG_UNIMPLEMENTED,
                            "a capacity tier on %s: its memory must be host memory (no FI_HMEM)",
                            dev);
    memset(host, 0, w->tier_bytes);
    return rg_transport_region_register(w->tp, host, w->tier_bytes,
                                        RG_TRANSPORT_WRITE_SOURCE | RG_TRANSPORT_WRITE_TARGET,
                                        &w->tier_region);
  }
  for (int i = 0; i < w->n_stages; i++) {
    rg_buffer_t *kv = rg_stage_kv_buffer(w->stages[i]);
    if (!kv) continue;
    if (w->role == RG_CLUSTER_ROLE_PREFILL) {
      if (w->outbox_blocks < 1)
        return rg_status_make(RG_INVALID_ARGUMENT, "Assign: a prefill worker needs outbox_blocks");
      size_t bytes = (size_t)w->outbox_blocks * rg_stage_kv_block_bytes(w->stages[i]);
      RG_RETURN_IF_ERROR(rg_buffer_alloc(w->dev, bytes, &w->outbox[i]));
      void *host = rg_buffer_host_ptr(w->outbox[i]);
      if (!host)
        return rg_status_make(RG_UNIMPLEMENTED,
                              "prefill on %s: its KV outbox must be host memory to send by RMA, "
                              "and %s's is not (no FI_HMEM); prefill on cpu:0",
                              dev, dev);
      RG_RETURN_IF_ERROR(rg_transport_region_register(w->tp, host, bytes, RG_TRANSPORT_WRITE_SOURCE,
                                                      &w->outbox_region[i]));
    } else if (w->role == RG_CLUSTER_ROLE_DECODE || w->has_tier) {
      void *host = rg_buffer_host_ptr(kv);
      if (!host)
        return rg_status_make(RG_UNIMPLEMENTED,
                              "decode on %s: prefilled KV pages are written by RMA into the KV "
                              "pool, which must be host memory, and %s's is not (no FI_HMEM); "
                              "decode on cpu:0",
                              dev, dev);
      unsigned access = RG_TRANSPORT_WRITE_TARGET | (w->has_tier ? RG_TRANSPORT_WRITE_SOURCE : 0);
      RG_RETURN_IF_ERROR(
          rg_transport_region_register(w->tp, host, rg_buffer_size(kv), access, &w->kv_region[i]));
    }
  }
  return NULL;
}

static rg_status_t load(worker_t *w, const rg_control_assign_t *as) {
  if (!as->model_path || !*as->model_path)
    return rg_status_make(RG_INVALID_ARGUMENT, "Assign names no model");
  if (as->n_worker_names < 1 || as->n_worker_names > RG_CLUSTER_MAX_WORKERS ||
      as->my_index >= as->n_worker_names)
    return rg_status_make(RG_INVALID_ARGUMENT, "Assign: %zu workers, this one index %u",
                          as->n_worker_names, as->my_index);
  RG_RETURN_IF_ERROR(rg_model_open(as->model_path, &w->model));
  w->a = rg_model_arch(w->model);
  // The layout, rebuilt from the pipeline every worker gets.
  memset(&w->layout, 0, sizeof w->layout);
  w->layout.n_workers = (int)as->n_worker_names;
  for (size_t i = 0; i < as->n_worker_names; i++) {
    snprintf(w->names[i], sizeof w->names[i], "%s", as->worker_names[i]);
    snprintf(w->layout.workers[i].name, sizeof w->layout.workers[i].name, "%s",
             as->worker_names[i]);
  }
  for (size_t i = 0; i < as->n_pipeline; i++) {
    const rg_control_stage_instance_t *si = as->pipeline[i];
    if (si->worker >= as->n_worker_names)
      return rg_status_make(RG_INVALID_ARGUMENT, "Assign: a stage of worker %u", si->worker);
    int32_t ex[RG_CLUSTER_MAX_EXPERTS];
    rg_stage_spec_t sp;
    RG_RETURN_IF_ERROR(stage_from_wire(si, &sp, ex, RG_CLUSTER_MAX_EXPERTS));
    RG_RETURN_IF_ERROR(rg_cluster_worker_add(&w->layout.workers[si->worker], &sp));
  }
  w->me = (int)as->my_index;
  // Roles, in layout order ("prefill,decode,tier"); absent: every worker runs all.
  const char *roles = opt_get(as, "roles");
  for (int i = 0; roles && *roles && i < w->layout.n_workers; i++) {
    size_t n = strcspn(roles, ",");
    rg_cluster_role_t r = RG_CLUSTER_ROLE_ALL;
    int found = 0;
    for (int k = 0; k <= RG_CLUSTER_ROLE_TIER; k++)
      if (strlen(rg_cluster_role_name((rg_cluster_role_t)k)) == n &&
          !strncmp(roles, rg_cluster_role_name((rg_cluster_role_t)k), n))
        r = (rg_cluster_role_t)k, found = 1;
    if (!found) return rg_status_make(RG_INVALID_ARGUMENT, "Assign: roles '%s'", roles);
    w->layout.workers[i].role = r;
    roles += n + (roles[n] == ',');
  }
  w->role = w->layout.workers[w->me].role;
  w->outbox_blocks = opt_int(as, "outbox_blocks", 0);
  w->has_tier = (int)opt_int(as, "has_tier", 0);
  w->tier_bytes = (size_t)opt_int(as, "tier_bytes", 0);
  const char *corrupt = getenv("RIDGE_TEST_CORRUPT_KV_WRITE");
  w->corrupt_at = corrupt ? strtoull(corrupt, NULL, 10) : 0;
  // Test hook: the Nth transfer is never written (its receiver's wait runs out).
  const char *drop = getenv("RIDGE_TEST_DROP_KV_WRITE");
  w->drop_at = drop ? strtoull(drop, NULL, 10) : 0;
  const char *fail = getenv("RIDGE_TEST_FAIL_KV_ORDER");
  w->fail_at = fail ? strtoull(fail, NULL, 10) : 0;
  w->n_mb = (int)opt_int(as, "micro_batches", 1);
  if (w->n_mb < 1 || w->n_mb > MAX_MB)
    return rg_status_make(RG_INVALID_ARGUMENT, "Assign: %d micro-batches", w->n_mb);
  w->layout.micro_batches = w->n_mb;
  if (w->role != RG_CLUSTER_ROLE_TIER)
    RG_RETURN_IF_ERROR(rg_cluster_layout_hops(w->a, &w->layout, w->role, w->hops,
                                              RG_CLUSTER_MAX_HOPS, &w->n_hops));
  rg_dtype_t kv = RG_BF16;
  const char *kvs = opt_get(as, "kv_dtype");
  if (kvs && rg_dtype_parse(kvs, &kv))
    return rg_status_make(RG_INVALID_ARGUMENT, "Assign: kv_dtype '%s'", kvs);
  w->lim = (rg_step_limits_t){w->a->vocab, opt_int(as, "max_context", 4096), as->kv_block_size,
                              (int64_t)as->kv_block_count};
  w->bounds = (rg__step_bounds_t){opt_int(as, "max_tokens", 4096), opt_int(as, "max_seqs", 256),
                                  opt_int(as, "max_table", 65536)};
  w->step_floor = (double)opt_int(as, "step_timeout_ms", 10000) / 1e3;
  if (!(w->step_floor > 0)) w->step_floor = 10;
  w->step_timeout = w->step_floor;
  w->deadline = rg_cluster_step_deadline(w->step_floor, 0);
  rg_cluster_deadline_describe(&w->deadline, w->deadline_why, sizeof w->deadline_why);
  w->step = (uint64_t)opt_int(as, "next_step", 1);
  if (w->lim.block_size < 1 || w->lim.n_blocks < 1 || w->lim.max_context < 1)
    return rg_status_make(RG_INVALID_ARGUMENT, "Assign: KV pool of %lld blocks of %lld",
                          (long long)w->lim.n_blocks, (long long)w->lim.block_size);
  RG_RETURN_IF_ERROR(rg_weight_cache_create(&w->cache));
  // Copied into huge pages as the single-process engine does (AUTO: when
  // the model fits in a quarter of this host's memory): from the file's
  // 4 KiB pages a worker's FFN streamed 35 GB/s where the engine's reads 56.
  const int64_t load = opt_int(as, "copy_weights", -1);
  rg_stage_options_t so = {kv, w->lim.n_blocks, w->lim.block_size,
                           rg_engine_copies_weights(load < 0 ? RG_LOAD_AUTO
                                                    : load   ? RG_LOAD_COPY
                                                             : RG_LOAD_MMAP,
                                                    w->model),
                           w->cache};
  const rg_cluster_worker_t *mine = &w->layout.workers[w->me];
  for (int i = 0; i < mine->n_stages; i++) {
    RG_RETURN_IF_ERROR(rg_stage_create(w->model, &mine->stages[i], w->dev, &so, &w->stages[i]));
    w->n_stages = i + 1;
    for (int m = 0; m < w->n_mb; m++)
      RG_RETURN_IF_ERROR(rg_stage_ctx_create(w->stages[i], &w->ctx[i][m]));
  }
  // Its weights are copied out now (see rg_weights_release_pages).
  if (so.copy_weights) rg_weights_release_pages(rg_model_weights(w->model));
  return setup_kv_moves(w);
}

static rg_status_t take_peers_locked(worker_t *w, const rg_control_peer_table_t *pt) {
  for (int i = 0; i < w->layout.n_workers; i++) w->peer[i] = -1;
  w->coord = -1;
  for (size_t k = 0; k < pt->n_peers; k++) {
    const rg_control_peer_t *p = pt->peers[k];
    rg_transport_peer_t id;
    char label[96];
    snprintf(label, sizeof label, "%s", p->worker_id == 0 ? "the coordinator" : p->worker_name);
    int idx = -2;
    if (p->worker_id == 0) idx = -1;
    for (int i = 0; i < w->layout.n_workers && idx == -2; i++)
      if (!strcmp(w->names[i], p->worker_name)) idx = i;
    if (idx == -2 || idx == w->me) continue;
    RG_RETURN_IF_ERROR(
        rg_transport_peer_add(w->tp, p->fabric_address.data, p->fabric_address.len, label, &id));
    if (idx == -1)
      w->coord = id;
    else
      w->peer[idx] = id;
  }
  if (w->coord < 0) return rg_status_make(RG_INVALID_ARGUMENT, "the PeerTable has no coordinator");
  w->epoch = pt->epoch;
  for (int i = 0; i < w->layout.n_workers; i++)
    if (i != w->me && w->peer[i] < 0)
      return rg_status_make(RG_INVALID_ARGUMENT, "the PeerTable lacks worker %s", w->names[i]);
  w->have_peers = 1;
  return NULL;
}

static rg_status_t take_peers(worker_t *w, const rg_control_peer_table_t *pt) {
  if (w->xfer_on) pthread_mutex_lock(&w->xfer_mu);
  rg_status_t s = take_peers_locked(w, pt);
  if (w->xfer_on) pthread_mutex_unlock(&w->xfer_mu);
  return s;
}

// A STEP that needs a newer PeerTable than this worker has (a peer rejoined
// at a new address): the table is on its way over the control plane.
static rg_status_t wait_peers(worker_t *w, uint32_t epoch) {
  double deadline = rg_clock_now() + w->step_timeout;
  while ((uint32_t)w->epoch < epoch) {
    double left = deadline - rg_clock_now();
    if (left <= 0)
      return rg_status_make(
          RG_DEADLINE_EXCEEDED,
          "no PeerTable %u from the coordinator within %.1f s (the step needs it; %s)", epoch,
          w->step_timeout, w->deadline_why);
    rg_control_event_t ev;
    RG_RETURN_IF_ERROR(rg_control_client_recv(w->ctl, left, &ev));
    rg_status_t st = NULL;
    if (ev.kind == RG_CONTROL_EVENT_MESSAGE && ev.type == RG_CONTROL_MSG_PEER_TABLE)
      st = take_peers(w, RG_CONTROL_MSG_AS(ev.msg, peer_table));
    else if (ev.kind == RG_CONTROL_EVENT_MESSAGE && ev.type == RG_CONTROL_MSG_SHUTDOWN)
      st = rg_status_make(RG_CANCELLED, "the coordinator shut down");
    rg_control_event_deinit(&ev);
    RG_RETURN_IF_ERROR(st);
  }
  return NULL;
}

// ----- One step ----------------------------------------------------------------------

static rg_status_t ensure(worker_t *w, dbuf_t *d, size_t bytes) {
  if (d->buf && d->bytes >= bytes) return NULL;
  rg_buffer_release(d->buf);
  free(d->stage);
  d->buf = NULL, d->stage = NULL, d->bytes = 0;
  size_t want = bytes ? bytes : 4;
  RG_RETURN_IF_ERROR(rg_buffer_alloc(w->dev, want, &d->buf));
  d->bytes = want;
  if (!rg_buffer_host_ptr(d->buf) && !(d->stage = malloc(want)))
    return rg_status_make(RG_OUT_OF_MEMORY, "out of memory for %zu bytes of staging", want);
  return NULL;
}

// Host memory to send from / receive into, for a device buffer.
static void *host_of(dbuf_t *d) {
  void *p = rg_buffer_host_ptr(d->buf);
  return p ? p : d->stage;
}
static void *host_of_buf(rg_buffer_t *b) {
  return rg_buffer_host_ptr(b);
}

static void record(worker_t *w, double t0, double t1, int kind, int mb, int hop, int64_t layer,
                   double bytes) {
  if (!w->trace) return;
  if (w->n_events == w->cap_events) {
    size_t cap = w->cap_events ? w->cap_events * 2 : 256;
    rg__event_t *n = realloc(w->events, cap * sizeof *n);
    if (!n) return;
    w->events = n;
    w->cap_events = cap;
  }
  w->events[w->n_events++] =
      (rg__event_t){t0, t1, (uint8_t)kind, (uint8_t)mb, (uint16_t)hop, (int32_t)layer, bytes};
}

// What this worker does for one micro-batch, in order.
typedef enum { A_RECV_X, A_RECV_H, A_COPY_H, A_RUN, A_SEND_X, A_SEND_H, A_SEND_LOGITS } act_kind_t;
typedef struct {
  act_kind_t kind;
  int hop;   // the hop the data is for (sends: the next hop; receives and runs: this one)
  int peer;  // layout index of the other worker (-1: the coordinator)
} act_t;

typedef struct {
  act_t acts[RG_CLUSTER_MAX_HOPS * 3];
  size_t n, pc;
  rg_transport_req_t *recv;  // the receive the current action waits on
  double recv_since;
  rg_transport_req_t *sends[8];  // sends in flight
  double send_t0[8];
  int send_peer[8], send_hop[8];
  size_t n_sends;
} prog_t;

static void build_prog(const worker_t *w, prog_t *p) {
  p->n = p->pc = 0;
  for (size_t i = 0; i < w->n_hops; i++) {
    const rg_cluster_hop_t *h = &w->hops[i];
    if (h->worker != w->me) continue;
    if (i > 0 && w->hops[i - 1].worker != w->me) {
      p->acts[p->n++] = (act_t){A_RECV_X, (int)i, w->hops[i - 1].worker};
      if (h->continues) p->acts[p->n++] = (act_t){A_RECV_H, (int)i, w->hops[i - 1].worker};
    } else if (h->continues) {
      p->acts[p->n++] = (act_t){A_COPY_H, (int)i, w->me};
    }
    p->acts[p->n++] = (act_t){A_RUN, (int)i, w->me};
    if (i + 1 < w->n_hops && w->hops[i + 1].worker != w->me) {
      p->acts[p->n++] = (act_t){A_SEND_X, (int)i + 1, w->hops[i + 1].worker};
      if (w->hops[i + 1].continues)
        p->acts[p->n++] = (act_t){A_SEND_H, (int)i + 1, w->hops[i + 1].worker};
    }
    if (h->kind == RG_STAGE_LM_HEAD) p->acts[p->n++] = (act_t){A_SEND_LOGITS, (int)i, -1};
  }
}

static const char *hop_name(const worker_t *w, int hop, char *buf, size_t len) {
  const rg_cluster_hop_t *h = &w->hops[hop];
  if (h->layer >= 0)
    snprintf(buf, len, "%s layer %lld on %s", rg_stage_kind_name(h->kind), (long long)h->layer,
             w->names[h->worker]);
  else
    snprintf(buf, len, "%s on %s", rg_stage_kind_name(h->kind), w->names[h->worker]);
  return buf;
}

static rg_transport_peer_t peer_of(const worker_t *w, int idx) {
  return idx < 0 ? w->coord : w->peer[idx];
}

// Link statistics: slot i for worker i, the last slot for the coordinator.
// On the wire a link's peer is 0 for the coordinator, i + 1 for worker i.
static rg__link_t *link_of(worker_t *w, int idx) {
  rg__link_t *l = &w->links[idx < 0 ? RG_CLUSTER_MAX_WORKERS : idx];
  l->peer = idx < 0 ? 0 : (uint32_t)idx + 1;
  return l;
}

// Finishes the sends of p that are done; *all is set when none is left.
static rg_status_t reap_sends(worker_t *w, prog_t *p, int mb, int *all) {
  for (size_t i = 0; i < p->n_sends;) {
    bool done = false;
    rg_status_t s = rg_transport_test(p->sends[i], &done);
    double t1 = rg_clock_now();
    if (!done && !s && t1 - p->send_t0[i] > w->step_timeout) {
      // shm completes a large send only as the receiver takes it: one that
      // never does (a peer gone) must not hold the step forever.
      char who[64];
      if (p->send_peer[i] < 0)
        snprintf(who, sizeof who, "the coordinator");
      else
        snprintf(who, sizeof who, "%s", w->names[p->send_peer[i]]);
      s = rg_status_make(RG_DEADLINE_EXCEEDED,
                         "%s: %zu bytes of micro-batch %d to %s not taken within %.1f s (%s)",
                         w->names[w->me], rg_transport_req_bytes(p->sends[i]), mb, who,
                         t1 - p->send_t0[i], w->deadline_why);
    } else if (!done && !s) {
      i++;
      continue;
    }
    if (!s) {
      rg__link_t *lk = link_of(w, p->send_peer[i]);
      double b = (double)rg_transport_req_bytes(p->sends[i]);
      lk->bytes += b, lk->seconds += t1 - p->send_t0[i], lk->messages++;
      record(w, p->send_t0[i], t1, 1, mb, p->send_hop[i],
             w->hops[p->send_hop[i] < (int)w->n_hops ? p->send_hop[i] : 0].layer, b);
    }
    rg_transport_req_free(p->sends[i]);
    p->sends[i] = p->sends[--p->n_sends];
    p->send_t0[i] = p->send_t0[p->n_sends], p->send_peer[i] = p->send_peer[p->n_sends],
    p->send_hop[i] = p->send_hop[p->n_sends];
    if (s) return s;
  }
  *all = p->n_sends == 0;
  return NULL;
}

static rg_status_t post_send(worker_t *w, prog_t *p, int peer, uint64_t tag, const void *buf,
                             size_t len, int hop, const char *what) {
  if (p->n_sends == 8) return rg_status_make(RG_INTERNAL, "too many sends in flight");
  char stage[160], hn[96];
  snprintf(stage, sizeof stage, "%s for %s", what,
           hop < (int)w->n_hops ? hop_name(w, hop, hn, sizeof hn) : "the coordinator");
  rg_transport_req_t *r;
  RG_RETURN_IF_ERROR(rg_transport_send(w->tp, peer_of(w, peer), tag, buf, len, stage, &r));
  p->sends[p->n_sends] = r;
  p->send_t0[p->n_sends] = rg_clock_now();
  p->send_peer[p->n_sends] = peer;
  p->send_hop[p->n_sends++] = hop;
  return NULL;
}

static int stage_index(const worker_t *w, int hop) {
  return w->hops[hop].stage;
}

// The worker starts to wait (for a peer's data, or the next step): the CPU
// pool's threads sleep now instead of spinning 0.4 ms into every wait (the
// 1B model's attention worker waits 16 times a token for the FFN's, which
// was ~6 ms of a core spun per 75 ms token). Throughput was the same either
// way in alternated runs (12.7-13.5 tokens/s): the next call's first chunks
// run on the caller while a worker wakes.
static void waiting(worker_t *w) {
  w->idle_since = rg_clock_now();
  rg_pool_park(rg_device_cpu_pool(w->dev));
}

static rg_status_t run_hop(worker_t *w, int mb, int hop) {
  const rg_cluster_hop_t *h = &w->hops[hop];
  int si = stage_index(w, hop);
  unsigned flags = h->continues ? RG_STAGE_NORM_GIVEN : 0;
  dbuf_t *x = &w->x[mb];
  double t0 = rg_clock_now();
  if (w->idle_since > 0 && t0 - w->idle_since >= RG_STAGE_COLD_IDLE_S) w->cold_calls[si]++;
  w->idle_since = 0;
  rg_status_t s =
      rg_stage_run_ex(w->stages[si], w->ctx[si][mb], h->layer < 0 ? 0 : h->layer, x->buf,
                      h->kind == RG_STAGE_LM_HEAD ? w->logits[mb].buf : NULL, flags);
  record(w, t0, rg_clock_now(), 0, mb, hop, h->layer, 0);
  if (s || !w->check || h->kind == RG_STAGE_LM_HEAD || w->bad_hop >= 0) return s;
  // Diagnosing non-finite logits: is this hop's output finite?
  size_t n = (size_t)w->st[mb].n_tokens * (size_t)w->a->d_model;
  float *tmp = malloc(n * sizeof(float) + 1);
  if (!tmp) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory checking hidden states");
  s = rg_buffer_read(x->buf, 0, tmp, n * sizeof(float));
  for (size_t i = 0; !s && i < n; i++)
    if (!isfinite(tmp[i])) {
      w->bad_hop = hop;
      break;
    }
  free(tmp);
  return s;
}

static rg_status_t service_xfers(worker_t *w);

// Advances micro-batch mb's program as far as it can without waiting.
// *blocked is set when it waits on a receive or a send.
static rg_status_t advance(worker_t *w, prog_t *p, int mb, int *blocked) {
  *blocked = 0;
  size_t xb = (size_t)w->st[mb].n_tokens * (size_t)w->a->d_model * sizeof(float);
  while (p->pc < p->n) {
    const act_t *a = &p->acts[p->pc];
    int all;
    RG_RETURN_IF_ERROR(reap_sends(w, p, mb, &all));
    if (a->kind != A_SEND_X && a->kind != A_SEND_H && a->kind != A_SEND_LOGITS && !all) {
      *blocked = 1;  // the buffers an action touches may still be on their way out
      return NULL;
    }
    char hn[96], what[160];
    switch (a->kind) {
      case A_RECV_X:
      case A_RECV_H: {
        int h = a->kind == A_RECV_H;
        void *dst = h ? host_of_buf(rg_stage_ctx_hidden(w->ctx[stage_index(w, a->hop)][mb]))
                      : host_of(&w->x[mb]);
        if (!p->recv) {
          snprintf(what, sizeof what, "%s of micro-batch %d for %s",
                   h ? "normed hidden states" : "hidden states", mb,
                   hop_name(w, a->hop, hn, sizeof hn));
          if (h && !dst)
            return rg_status_make(RG_UNIMPLEMENTED,
                                  "%s: an expert split needs host-visible memory on %s", what,
                                  w->o.device ? w->o.device : "cpu:0");
          RG_RETURN_IF_ERROR(rg_transport_recv(
              w->tp, peer_of(w, a->peer), rg__tag(h ? RG__K_HID : RG__K_ACT, w->step, mb, a->hop),
              dst, xb, what, &p->recv));
          p->recv_since = rg_clock_now();
        }
        bool done = false;
        rg_status_t s = rg_transport_test(p->recv, &done);
        if (!done && !s) {
          if (rg_clock_now() - p->recv_since > w->step_timeout) {
            s = rg_status_make(
                RG_DEADLINE_EXCEEDED,
                "%s: waited %.1f s for %zu bytes of micro-batch %d from %s for %s (%s)",
                w->names[w->me], rg_clock_now() - p->recv_since, xb, mb,
                a->peer < 0 ? "the coordinator" : w->names[a->peer],
                hop_name(w, a->hop, hn, sizeof hn), w->deadline_why);
          } else {
            *blocked = 1;
            return NULL;
          }
        }
        record(w, p->recv_since, rg_clock_now(), 2, mb, a->hop, w->hops[a->hop].layer, (double)xb);
        rg_transport_req_free(p->recv);
        p->recv = NULL;
        RG_RETURN_IF_ERROR(s);
        if (!h && w->x[mb].stage)
          RG_RETURN_IF_ERROR(rg_buffer_write(w->x[mb].buf, 0, w->x[mb].stage, xb));
        break;
      }
      case A_COPY_H: {
        rg_queue_t *q = rg_stage_queue(w->stages[stage_index(w, a->hop)]);
        RG_RETURN_IF_ERROR(
            rg_queue_copy(q, rg_stage_ctx_hidden(w->ctx[stage_index(w, a->hop)][mb]), 0,
                          rg_stage_ctx_hidden(w->ctx[stage_index(w, a->hop - 1)][mb]), 0, xb));
        break;
      }
      case A_RUN:
        RG_RETURN_IF_ERROR(run_hop(w, mb, a->hop));
        // Without a transfer thread, orders are answered between hops, so a
        // receiver waiting for pages waits one layer, not a whole step.
        RG_RETURN_IF_ERROR(service_xfers(w));
        break;
      case A_SEND_X:
        if (w->x[mb].stage) RG_RETURN_IF_ERROR(rg_buffer_read(w->x[mb].buf, 0, w->x[mb].stage, xb));
        RG_RETURN_IF_ERROR(post_send(w, p, a->peer, rg__tag(RG__K_ACT, w->step, mb, a->hop),
                                     host_of(&w->x[mb]), xb, a->hop, "hidden states"));
        break;
      case A_SEND_H: {
        void *src = host_of_buf(rg_stage_ctx_hidden(w->ctx[stage_index(w, a->hop - 1)][mb]));
        if (!src)
          return rg_status_make(RG_UNIMPLEMENTED, "an expert split needs host-visible memory on %s",
                                w->o.device ? w->o.device : "cpu:0");
        RG_RETURN_IF_ERROR(post_send(w, p, a->peer, rg__tag(RG__K_HID, w->step, mb, a->hop), src,
                                     xb, a->hop, "normed hidden states"));
        break;
      }
      case A_SEND_LOGITS: {
        size_t lb = (size_t)w->st[mb].n_logits * (size_t)w->a->vocab * sizeof(float);
        if (w->logits[mb].stage && lb)
          RG_RETURN_IF_ERROR(rg_buffer_read(w->logits[mb].buf, 0, w->logits[mb].stage, lb));
        RG_RETURN_IF_ERROR(post_send(w, p, -1, rg__tag(RG__K_LOGITS, w->step, mb, 0),
                                     host_of(&w->logits[mb]), lb, (int)w->n_hops, "logits"));
        break;
      }
    }
    p->pc++;
  }
  int all;
  RG_RETURN_IF_ERROR(reap_sends(w, p, mb, &all));
  *blocked = !all;
  return NULL;
}

static void cancel_prog(prog_t *p) {
  rg_transport_req_free(p->recv);
  p->recv = NULL;
  for (size_t i = 0; i < p->n_sends; i++) rg_transport_req_free(p->sends[i]);
  p->n_sends = 0;
}

// ----- Moving KV between workers ------------------------------------------------------

static int attention_stage(const worker_t *w, int64_t l0, int64_t l1) {
  for (int i = 0; i < w->n_stages; i++) {
    const rg_stage_spec_t *sp = rg_stage_spec(w->stages[i]);
    if (sp->kind == RG_STAGE_ATTENTION && sp->layer_begin <= l0 && l1 <= sp->layer_end) return i;
  }
  return -1;
}

// A transfer order that failed here: the coordinator, which owns the
// request, is told over the control plane (its receiver only sees the pages
// not come), naming the transfer, the stage and the bytes; and stderr
// unless quiet. x may be partly read (an order that failed to decode); to
// is the receiver's index, or -1 when unknown.
static void report_order_fault(worker_t *w, uint64_t xfer, uint64_t key, int64_t to,
                               int64_t layer_begin, int64_t layer_end, int64_t pos_begin,
                               int64_t pos_end, uint64_t bytes, rg_status_t err) {
  const char *to_name = to >= 0 && to < w->layout.n_workers ? w->names[to] : "";
  char stage[160];
  if (!xfer)
    snprintf(stage, sizeof stage, "a transfer order that could not be read");
  else if (key == RG__KEY_RELOAD)
    snprintf(stage, sizeof stage, "a reload of layers [%lld, %lld) from the capacity tier",
             (long long)layer_begin, (long long)layer_end);
  else
    snprintf(stage, sizeof stage,
             "KV pages of request %llu, layers [%lld, %lld), positions [%lld, %lld)",
             (unsigned long long)key, (long long)layer_begin, (long long)layer_end,
             (long long)pos_begin, (long long)pos_end);
  if (!w->o.quiet)
    fprintf(stderr, "ridge worker %s: transfer %llu (%s, %llu bytes%s%s) failed: %s\n",
            w->names[w->me], (unsigned long long)xfer, stage, (unsigned long long)bytes,
            *to_name ? " for " : "", to_name, rg_status_message(err));
  rg__transfer_fault_t tf = RIDGE__CONTROL__TRANSFER_FAULT__INIT;
  tf.transfer_id = xfer;
  tf.request_key = key;
  tf.to_worker = (char *)to_name;
  tf.stage = stage;
  tf.bytes = bytes;
  tf.code = (uint32_t)rg_status_code(err);
  rg_control_error_t er = RIDGE__CONTROL__ERROR__INIT;
  er.text = (char *)rg_status_message(err);
  er.transfer = &tf;
  // A coordinator gone cannot be told; the loop finds that out on its own.
  rg_status_free(rg_control_client_send(w->ctl, &er.base));
}

// Reaps finished RMA writes; a failed one, or one still in flight past the
// transfer deadline (the configured step timeout), is reported to the
// coordinator (its receiver then fails its wait for the notice and
// recomputes).
static void reap_writes(worker_t *w) {
  double now = rg_clock_now();
  for (size_t i = 0; i < w->n_writes;) {
    bool done = false;
    rg_status_t s = rg_transport_test(w->writes[i], &done);
    if (!done && !s && now - w->write_info[i].t0 > w->step_floor)
      s = rg_status_make(RG_DEADLINE_EXCEEDED,
                         "%s: the write to %s was not complete within %.1f s (the transfer "
                         "deadline: the configured %.3g s, --step-timeout)",
                         w->names[w->me], w->names[w->write_info[i].to], now - w->write_info[i].t0,
                         w->step_floor);
    else if (!done && !s) {
      i++;
      continue;
    }
    if (s) {
      const write_info_t *in = &w->write_info[i];
      report_order_fault(w, in->xfer, in->key, in->to, in->layer_begin, in->layer_end,
                         in->pos_begin, in->pos_end, in->bytes, s);
    }
    rg_status_free(s);
    rg_transport_req_free(w->writes[i]);
    if (w->write_info[i].staging >= 0) w->staging[w->write_info[i].staging].busy = 0;
    w->writes[i] = w->writes[--w->n_writes];
    w->write_info[i] = w->write_info[w->n_writes];
  }
}

// A free staging buffer of at least `bytes`, registered as a write source:
// its index, or -1 where none can be had (all busy, or the memory or the
// registration refused), and the transfer then writes from its blocks.
static int staging_take(worker_t *w, size_t bytes) {
  int spare = -1;
  for (int i = 0; i < MAX_STAGING; i++) {
    staging_t *b = &w->staging[i];
    if (b->busy) continue;
    if (b->buf && b->bytes >= bytes) {
      b->busy = 1;
      return i;
    }
    if (spare < 0 || !b->buf) spare = i;
  }
  if (spare < 0) return -1;
  staging_t *b = &w->staging[spare];
  if (b->buf) {  // too small: replaced by a larger one
    rg_transport_region_deregister(b->region);
    rg_hugemem_free(b->buf, b->mapped);
    *b = (staging_t){0};
  }
  size_t want = (bytes + ((size_t)2 << 20) - 1) / ((size_t)2 << 20) * ((size_t)2 << 20);
  b->buf = rg_hugemem_alloc(want, &b->mapped);
  if (!b->buf) return -1;
  rg_status_t s =
      rg_transport_region_register(w->tp, b->buf, want, RG_TRANSPORT_WRITE_SOURCE, &b->region);
  if (s) {
    rg_status_free(s);
    rg_hugemem_free(b->buf, b->mapped);
    *b = (staging_t){0};
    return -1;
  }
  b->bytes = want;
  b->busy = 1;
  return spare;
}

// One XFER order: positions [pos_begin, pos_end) of layers [layer_begin,
// layer_end) from the outbox (or a tier's region) into the receiver's pool,
// in the pieces kvmove.c plans: where the block sizes differ, gathered into
// a staging buffer first, so that each destination block's (layer, K|V)
// goes as one piece rather than one per head and source block.
static rg_status_t do_xfer(worker_t *w, const rg__xfer_t *x, uint64_t *out_bytes) {
  *out_bytes = 0;
  if (x->to >= (uint32_t)w->layout.n_workers || (int)x->to == w->me)
    return rg_status_make(RG_INVALID_ARGUMENT, "transfer %llu: to worker %u",
                          (unsigned long long)x->xfer, x->to);
  // The source: a prefill worker's outbox (its own pool's layout), or a
  // capacity tier's region (the layout the order gives).
  const uint8_t *ob;
  const rg_transport_region_t *region;
  size_t per, block_bytes;
  int64_t bp, src_layer_begin;
  if (x->src_kind == 1) {
    if (!w->tier_region)
      return rg_status_make(RG_INVALID_ARGUMENT, "transfer %llu: this worker holds no tier",
                            (unsigned long long)x->xfer);
    ob = (const uint8_t *)rg_buffer_host_ptr(w->tier) + x->src_base;
    region = w->tier_region;
    per = x->src_per, block_bytes = x->src_block_bytes;
    bp = x->src_block_size, src_layer_begin = x->src_layer_begin;
    uint64_t layers = (uint64_t)(x->layer_end - src_layer_begin);
    for (uint32_t i = 0; i < x->n_src; i++) {
      if (x->src[i] < 0 || x->src_base + ((uint64_t)x->src[i] + 1) * per > w->tier_bytes ||
          layers * 2 * block_bytes > per)
        return rg_status_make(RG_INVALID_ARGUMENT,
                              "transfer %llu: tier block %d lies outside the tier's %zu bytes",
                              (unsigned long long)x->xfer, (int)x->src[i], w->tier_bytes);
      uint64_t lo = x->src_base + (uint64_t)x->src[i] * per, hi = lo + per;
      for (size_t k = 0; k < w->n_bad_ranges; k++)
        if (lo < w->bad_hi[k] && w->bad_lo[k] < hi) rg_transport_corrupt_next_write(w->tp);
    }
  } else {
    int si = attention_stage(w, x->layer_begin, x->layer_end);
    if (si < 0 || !w->outbox_region[si])
      return rg_status_make(
          RG_INVALID_ARGUMENT, "transfer %llu: this worker holds no outbox for layers [%lld, %lld)",
          (unsigned long long)x->xfer, (long long)x->layer_begin, (long long)x->layer_end);
    rg_stage_kv_layout_t L;
    rg_stage_kv_layout(w->stages[si], &L);
    if (x->src_block_size != L.block_size)
      return rg_status_make(
          RG_INVALID_ARGUMENT, "transfer %llu: source blocks of %lld tokens; this pool's are %lld",
          (unsigned long long)x->xfer, (long long)x->src_block_size, (long long)L.block_size);
    for (uint32_t i = 0; i < x->n_src; i++)
      if (x->src[i] < 0 || x->src[i] >= w->outbox_blocks)
        return rg_status_make(
            RG_INVALID_ARGUMENT, "transfer %llu: outbox block %d outside its %lld",
            (unsigned long long)x->xfer, (int)x->src[i], (long long)w->outbox_blocks);
    ob = rg_buffer_host_ptr(w->outbox[si]);
    region = w->outbox_region[si];
    per = rg_stage_kv_block_bytes(w->stages[si]), block_bytes = L.block_bytes;
    bp = L.block_size, src_layer_begin = rg_stage_spec(w->stages[si])->layer_begin;
  }
  rg_transport_region_desc_t desc;
  RG_RETURN_IF_ERROR(rg_transport_desc_decode(x->desc, sizeof x->desc, &desc));
  const rg__kv_geom_t g = {.src = ob,
                           .src_per = per,
                           .src_kv_bytes = block_bytes,
                           .head = block_bytes / (size_t)bp / (size_t)w->a->n_kv_heads,
                           .src_block = bp,
                           .src_layer_begin = src_layer_begin,
                           .heads = w->a->n_kv_heads};
  *out_bytes = rg__kv_bytes(&g, x);
  // Staged only up to what its source holds: an order naming the same
  // blocks again and again must not make this worker map more memory.
  const size_t src_cap = x->src_kind == 1 ? w->tier_bytes : (size_t)w->outbox_blocks * per;
  int stg =
      x->dst_block_size != bp && *out_bytes <= src_cap ? staging_take(w, (size_t)*out_bytes) : -1;
  if (stg >= 0) region = w->staging[stg].region;
  rg_transport_segment_t *seg;
  size_t n;
  rg_status_t gs = rg__kv_segments(&g, x, stg >= 0, &seg, &n);
  if (gs) {
    if (stg >= 0) w->staging[stg].busy = 0;
    return gs;
  }
  reap_writes(w);
  rg_status_t st = NULL;
  if (w->n_writes == sizeof w->writes / sizeof w->writes[0])
    st = rg_status_make(RG_UNAVAILABLE, "transfer %llu: %zu KV transfers already in flight",
                        (unsigned long long)x->xfer, w->n_writes);
  char what[96];
  snprintf(what, sizeof what, "KV pages of request %llu to %s", (unsigned long long)x->key,
           w->names[x->to]);
  // The notice carries the request and the bytes, which the receiver counts
  // on its inbound link (it sees the whole transfer: post to checked notice).
  uint64_t payload[2] = {x->key, *out_bytes};
  const uint64_t nth = st ? 0 : ++w->n_xfers_done;
  if (!st && w->corrupt_at && nth == w->corrupt_at) rg_transport_corrupt_next_write(w->tp);
  if (!st && w->fail_at && nth == w->fail_at) desc.len = 0;
  if (!st && w->drop_at && nth == w->drop_at) {
    free(seg);
    if (stg >= 0) w->staging[stg].busy = 0;
    return NULL;
  }
  if (!st && stg >= 0)
    st = rg_transport_write_gather(w->tp, w->peer[x->to], region, &desc, seg, n,
                                   rg__tag(RG__K_KVN, x->xfer, 0, 0), payload, sizeof payload, what,
                                   &w->writes[w->n_writes]);
  else if (!st)
    st = rg_transport_write(w->tp, w->peer[x->to], region, &desc, seg, n,
                            rg__tag(RG__K_KVN, x->xfer, 0, 0), payload, sizeof payload, what,
                            &w->writes[w->n_writes]);
  // The transfer thread keeps the write in flight and takes the next order
  // (several prompts' pages then move at once) while it polls them to the
  // end. Without one, finish it now: the receiver is waiting for these pages,
  // and shm's writes complete only as both sides make progress, which a
  // step busy computing would give only between its hops.
  if (!st && w->xfer_on) {
    w->write_info[w->n_writes].xfer = x->xfer;
    w->write_info[w->n_writes].key = x->key;
    w->write_info[w->n_writes].bytes = *out_bytes;
    w->write_info[w->n_writes].to = x->to;
    w->write_info[w->n_writes].layer_begin = x->layer_begin;
    w->write_info[w->n_writes].layer_end = x->layer_end;
    w->write_info[w->n_writes].pos_begin = x->pos_begin;
    w->write_info[w->n_writes].pos_end = x->pos_end;
    w->write_info[w->n_writes].t0 = rg_clock_now();
    w->write_info[w->n_writes].staging = stg;
    w->n_writes++;
  } else {
    if (!st) {
      st = rg_transport_wait(w->writes[w->n_writes], w->step_floor);
      rg_transport_req_free(w->writes[w->n_writes]);
      w->writes[w->n_writes] = NULL;
    }
    if (stg >= 0) w->staging[stg].busy = 0;
  }
  free(seg);
  return st;
}

// A capacity tier, before its next order: the notices of the offloads
// written into it, each checked against its checksum. A range that fails is
// remembered: a later reload of it fails its receiver's checksum as well, so
// bad KV is never used.
static rg_status_t take_offloads(worker_t *w, size_t len) {
  static rg__expect_order_t e;  // one order at a time; large
  RG_RETURN_IF_ERROR(rg__expect_decode(w->xfer_buf, len, &e));
  rg_transport_req_t *reqs[RG__EXPECT_MAX];
  uint64_t got[RG__EXPECT_MAX][2];
  size_t n = 0;
  rg_status_t st = NULL;
  for (uint32_t i = 0; i < e.n && !st; i++) {
    if (e.from[i] >= (uint32_t)w->layout.n_workers || (int)e.from[i] == w->me) {
      st = rg_status_make(RG_INVALID_ARGUMENT, "an expect order names worker %u", e.from[i]);
      break;
    }
    st = rg_transport_recv_notice(w->tp, w->peer[e.from[i]], rg__tag(RG__K_KVN, e.xfer[i], 0, 0),
                                  got[n], sizeof got[n], "an offload into the capacity tier",
                                  &reqs[n]);
    if (!st) n++;
  }
  if (!st && n) rg_status_free(rg_transport_wait_all(reqs, n, w->step_floor));
  for (size_t k = 0; k < n; k++) {
    bool done = false;
    rg_status_t s = rg_transport_test(reqs[k], &done);
    if (!done && !s)
      s = rg_status_make(RG_DEADLINE_EXCEEDED,
                         "an offload did not come within %.3g s (the transfer deadline: the "
                         "configured --step-timeout)",
                         w->step_floor);
    if (s) {
      if (!w->o.quiet)
        fprintf(stderr, "ridge worker %s: an offload into the tier: %s\n", w->names[w->me],
                rg_status_message(s));
      rg_status_free(s);
      if (w->n_bad_ranges < 256) {
        w->bad_lo[w->n_bad_ranges] = e.offset[k];
        w->bad_hi[w->n_bad_ranges++] = e.offset[k] + e.bytes[k];
      } else {
        w->bad_lo[0] = 0, w->bad_hi[0] = UINT64_MAX;  // too many to track: none is trusted
      }
    } else {
      rg__link_t *lk = &w->kv_in[e.from[k]];
      lk->peer = (e.from[k] + 1) | RG__LINK_INBOUND;
      lk->bytes += (double)got[k][1];
      lk->messages++;
    }
    rg_transport_req_free(reqs[k]);
  }
  return st;
}

// Before the forward: this worker's offloads to the capacity tier, written
// from its KV pool (each block of each layer, K and V) and complete before
// the step may overwrite those blocks.
static rg_status_t push_offloads(worker_t *w) {
  rg_status_t st = NULL;
  rg_transport_region_desc_t desc;
  int tier = -1;
  for (uint32_t i = 0; i < w->plan.n_push && !st; i++) {
    const rg__push_t *pu = &w->plan.push[i];
    if ((int)pu->worker != w->me) continue;
    if (tier < 0) {  // the first push: where they all go
      RG_RETURN_IF_ERROR(
          rg_transport_desc_decode(w->plan.tier_desc, sizeof w->plan.tier_desc, &desc));
      for (int k = 0; k < w->layout.n_workers; k++)
        if (w->layout.workers[k].role == RG_CLUSTER_ROLE_TIER) tier = k;
      if (tier < 0)
        return rg_status_make(RG_INVALID_ARGUMENT, "an offload in a layout without a tier");
    }
    int si = -1;
    for (int k = 0, slot = 0; k < w->n_stages && si < 0; k++)
      if (rg_stage_kv_buffer(w->stages[k]) && slot++ == (int)pu->slot) si = k;
    if (si < 0 || !w->kv_region[si])
      return rg_status_make(RG_INVALID_ARGUMENT, "an offload names attention instance %u",
                            pu->slot);
    rg_stage_kv_layout_t L;
    rg_stage_kv_layout(w->stages[si], &L);
    if (pu->dev < 0 || pu->dev >= L.n_blocks)
      return rg_status_make(RG_INVALID_ARGUMENT, "an offload of device block %d of %lld", pu->dev,
                            (long long)L.n_blocks);
    const rg_stage_spec_t *sp = rg_stage_spec(w->stages[si]);
    uint32_t layers = (uint32_t)(sp->layer_end - sp->layer_begin);
    const uint8_t *pool = rg_buffer_host_ptr(rg_stage_kv_buffer(w->stages[si]));
    rg_transport_segment_t seg[2];
    for (int kv = 0; kv < 2; kv++)
      seg[kv] = (rg_transport_segment_t){
          .src = pool + (size_t)kv * L.layer_bytes + (size_t)pu->dev * L.block_bytes,
          .dst_offset = pu->dst_offset + (uint64_t)kv * L.block_bytes,
          .len = L.block_bytes,
          .count = layers,
          .src_stride = (int64_t)(2 * L.layer_bytes),
          .dst_stride = 2 * L.block_bytes};
    uint64_t payload[2] = {pu->xfer, 2 * (uint64_t)layers * L.block_bytes};
    rg_transport_req_t *r = NULL;
    st = rg_transport_write(w->tp, w->peer[tier], w->kv_region[si], &desc, seg, 2,
                            rg__tag(RG__K_KVN, pu->xfer, 0, 0), payload, sizeof payload,
                            "an offload to the capacity tier", &r);
    if (!st) st = rg_transport_wait(r, w->step_timeout);
    rg_transport_req_free(r);
  }
  return st;
}

// Takes the XFER orders that have come (never waits for one). An order that
// cannot be carried out is reported; its receiver then names this worker.
// *served counts the orders taken.
static rg_status_t serve_orders(worker_t *w, int *served) {
  *served = 0;
  size_t cap = 256 + 8 * (size_t)(w->lim.max_context + 1);
  if (!w->xfer_buf && !(w->xfer_buf = malloc(cap)))
    return rg_status_make(RG_OUT_OF_MEMORY, "out of memory for transfer orders");
  for (;;) {
    if (!w->xfer_recv)
      RG_RETURN_IF_ERROR(rg_transport_recv(w->tp, w->coord, rg__tag(RG__K_XFER, w->xfer_seq, 0, 0),
                                           w->xfer_buf, cap, "a transfer order", &w->xfer_recv));
    bool done = false;
    rg_status_t s = rg_transport_test(w->xfer_recv, &done);
    if (!done && !s) break;
    size_t len = rg_transport_req_bytes(w->xfer_recv);
    rg_transport_req_free(w->xfer_recv);
    w->xfer_recv = NULL;
    if (s) return s;  // the coordinator is gone, or the endpoint
    w->xfer_seq++;
    ++*served;
    if (len >= 4 && !memcmp(w->xfer_buf, "RGXE", 4)) {
      s = take_offloads(w, len);
      if (s && !w->o.quiet)
        fprintf(stderr, "ridge worker %s: %s\n", w->names[w->me], rg_status_message(s));
    } else {
      rg__xfer_t x;
      uint64_t bytes = 0;
      s = rg__xfer_decode(w->xfer_buf, len, &x);
      if (!s) s = do_xfer(w, &x, &bytes);
      // What the decoder read of a bad order is kept in x's fields.
      if (s)
        report_order_fault(w, x.xfer, x.key, x.xfer ? (int64_t)x.to : -1, x.layer_begin,
                           x.layer_end, x.pos_begin, x.pos_end, bytes, s);
      rg__xfer_free(&x);
    }
    rg_status_free(s);
  }
  reap_writes(w);
  return NULL;
}

// The transfer thread: takes orders as they come and polls its writes to
// the end (which also progresses the main thread's transfers while it
// computes). It yields between polls while a write is in flight, and backs
// off to 1 ms between polls while nothing is (an order then waits at most
// 1 ms, against the tens of ms a prompt's pages take). Writes still in flight when
// it stops are left to the endpoint's teardown.
static void *xfer_main(void *arg) {
  worker_t *w = arg;
  double idle = 0;
  while (!atomic_load_explicit(&w->xfer_stop, memory_order_acquire)) {
    int served = 0;
    pthread_mutex_lock(&w->xfer_mu);
    rg_status_t s = serve_orders(w, &served);
    if (s) w->xfer_err = s;
    pthread_mutex_unlock(&w->xfer_mu);
    if (s) break;
    if (w->n_writes) {
      idle = 0;
      sched_yield();
      continue;
    }
    idle = served ? 0 : idle < 1e-3 ? idle + 2e-5 : idle;
    if (idle > 0) rg_clock_sleep(idle);
  }
  return NULL;
}

// A prefill worker starts its transfer thread before its first step; other
// roles take orders on the main thread (a tier computes nothing).
static rg_status_t xfer_start(worker_t *w) {
  if (w->role != RG_CLUSTER_ROLE_PREFILL || w->xfer_on) return NULL;
  if (pthread_mutex_init(&w->xfer_mu, NULL))
    return rg_status_make(RG_INTERNAL, "cannot create the transfer thread's lock");
  atomic_store(&w->xfer_stop, 0);
  if (pthread_create(&w->xfer_thread, NULL, xfer_main, w)) {
    pthread_mutex_destroy(&w->xfer_mu);
    return rg_status_make(RG_INTERNAL, "%s: cannot start the KV transfer thread", w->names[w->me]);
  }
  w->xfer_on = 1;
  return NULL;
}

// Stops the thread after the order it is serving, if any.
static void xfer_stop(worker_t *w) {
  if (!w->xfer_on) return;
  atomic_store_explicit(&w->xfer_stop, 1, memory_order_release);
  pthread_join(w->xfer_thread, NULL);
  pthread_mutex_destroy(&w->xfer_mu);
  w->xfer_on = 0;
  rg_status_free(w->xfer_err);
  w->xfer_err = NULL;
}

// What the main thread calls between its hops and steps: with a transfer
// thread, only whether it failed (the coordinator or the endpoint gone);
// else the orders themselves.
static rg_status_t service_xfers(worker_t *w) {
  if (w->xfer_on) {
    // The thread has stopped for good once it failed: every later call says so.
    pthread_mutex_lock(&w->xfer_mu);
    rg_status_t s = w->xfer_err ? rg_status_make(rg_status_code(w->xfer_err), "%s",
                                                 rg_status_message(w->xfer_err))
                                : NULL;
    pthread_mutex_unlock(&w->xfer_mu);
    return s;
  }
  if (w->role != RG_CLUSTER_ROLE_PREFILL && w->role != RG_CLUSTER_ROLE_TIER) return NULL;
  int served;
  return serve_orders(w, &served);
}

// Before the forward: the KV of the prompts this step imports, written here
// by RMA, each checked against its checksum. A page that fails it is not
// used: its request is named in the report, and the coordinator discards
// what this step computed for it.
static rg_status_t take_imports(worker_t *w) {
  w->n_bad_keys = 0;
  rg_transport_req_t *reqs[256];
  uint64_t keys[256], got[256][2];
  uint32_t from[256];
  double posted[256];
  size_t n = 0;
  rg_status_t st = NULL;
  for (uint32_t i = 0; i < w->plan.n_expect && !st; i++) {
    const rg__expect_t *e = &w->plan.expect[i];
    if ((int)e->to != w->me) continue;
    if (e->from >= (uint32_t)w->layout.n_workers || (int)e->from == w->me || n == 256) {
      st = rg_status_make(RG_INVALID_ARGUMENT, "a STEP expects KV from worker %u", e->from);
      break;
    }
    char what[96];
    snprintf(what, sizeof what, "KV pages of request %llu from %s", (unsigned long long)e->key,
             w->names[e->from]);
    keys[n] = e->key;
    from[n] = e->from;
    posted[n] = rg_clock_now();
    st = rg_transport_recv_notice(w->tp, w->peer[e->from], rg__tag(RG__K_KVN, e->xfer, 0, 0),
                                  got[n], sizeof got[n], what, &reqs[n]);
    if (!st) n++;
  }
  // The transport's own wait keeps this side's progress going (shm has the
  // receiver copy the pages in), backing off only as it stays idle.
  double t0 = rg_clock_now();
  // Each one's own result is read below.
  if (!st && n) rg_status_free(rg_transport_wait_all(reqs, n, w->step_timeout));
  for (size_t k = 0; k < n && !st; k++) {
    bool done = false;
    rg_status_t s = rg_transport_test(reqs[k], &done);
    if (!done && !s)
      s = rg_status_make(RG_DEADLINE_EXCEEDED,
                         "%s: the KV pages of request %llu from %s did not come within %.1f s (%s)",
                         w->names[w->me], (unsigned long long)keys[k], w->names[from[k]],
                         rg_clock_now() - t0, w->deadline_why);
    // Pages that came corrupted, or not at all, are not used: the request
    // is recomputed here (as the coordinator does for every bad key), and
    // the other requests of the step go on.
    int bad =
        s && (rg_status_code(s) == RG_DATA_CORRUPT || rg_status_code(s) == RG_DEADLINE_EXCEEDED);
    if (bad && w->n_bad_keys < 64) {
      if (!w->o.quiet)
        fprintf(stderr, "ridge worker %s: %s\n", w->names[w->me], rg_status_message(s));
      int seen = 0;
      for (size_t b = 0; b < w->n_bad_keys; b++) seen |= w->bad_keys[b] == keys[k];
      if (!seen) w->bad_keys[w->n_bad_keys++] = keys[k];
      rg_status_free(s);
    } else if (s) {
      st = s;
    } else if (got[k][0] != keys[k]) {
      st = rg_status_make(RG_PROTOCOL, "%s sent the KV of request %llu for request %llu",
                          w->names[from[k]], (unsigned long long)got[k][0],
                          (unsigned long long)keys[k]);
    } else {
      rg__link_t *lk = &w->kv_in[from[k]];
      lk->peer = (from[k] + 1) | RG__LINK_INBOUND;
      lk->bytes += (double)got[k][1];
      lk->seconds += rg_clock_now() - posted[k];
      lk->messages++;
    }
  }
  record(w, t0, rg_clock_now(), 2, 0, 0, -1, 0);
  for (size_t k = 0; k < n; k++) rg_transport_req_free(reqs[k]);
  return st;
}

// After the forward: the blocks of the prompts this step finished, into the
// outbox, before the scheduler can hand them out again.
static rg_status_t stash(worker_t *w) {
  if (!w->plan.n_stash) return NULL;
  size_t n = w->plan.n_stash;
  int32_t *src = malloc(n * sizeof *src), *dst = malloc(n * sizeof *dst);
  rg_status_t st = src && dst ? NULL : rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
  for (size_t i = 0; !st && i < n; i++) {
    src[i] = w->plan.stash[i].dev;
    dst[i] = w->plan.stash[i].outbox;
    if (dst[i] < 0 || dst[i] >= w->outbox_blocks)
      st = rg_status_make(RG_INVALID_ARGUMENT, "a STEP stashes into outbox block %d of %lld",
                          (int)dst[i], (long long)w->outbox_blocks);
  }
  for (int i = 0; !st && i < w->n_stages; i++)
    if (w->outbox[i]) st = rg_stage_kv_copy(w->stages[i], w->outbox[i], src, dst, n, 1);
  free(src);
  free(dst);
  return st;
}

static rg_status_t run_step(worker_t *w, const uint8_t *msg, size_t len, uint32_t *flags) {
  if (len < RG__STEP_HEAD || memcmp(msg, "RGSP", 4))
    return rg_status_make(RG_INVALID_ARGUMENT, "a STEP message without its header");
  uint64_t step;
  uint32_t n_mb;
  memcpy(&step, msg + 4, 8);
  memcpy(flags, msg + 12, 4);
  memcpy(&n_mb, msg + 16, 4);
  uint32_t epoch;
  memcpy(&epoch, msg + 20, 4);
  double deadline, predicted;
  memcpy(&deadline, msg + 24, 8);
  memcpy(&predicted, msg + 32, 8);
  if (!(deadline >= w->step_floor) || !(deadline < 1e6) || !(predicted >= 0))
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "a STEP with a deadline of %g s (predicted %g s); the floor is %g s",
                          deadline, predicted, w->step_floor);
  w->deadline = rg_cluster_step_deadline(w->step_floor, predicted);
  w->deadline.seconds = deadline;
  w->step_timeout = deadline;
  rg_cluster_deadline_describe(&w->deadline, w->deadline_why, sizeof w->deadline_why);
  if (epoch > (uint32_t)w->epoch) RG_RETURN_IF_ERROR(wait_peers(w, epoch));
  if (step != w->step)
    return rg_status_make(RG_INVALID_ARGUMENT, "STEP %llu where %llu was due",
                          (unsigned long long)step, (unsigned long long)w->step);
  if (n_mb < 1 || (int)n_mb > w->n_mb)
    return rg_status_make(RG_INVALID_ARGUMENT, "STEP with %u micro-batches", n_mb);
  w->trace = (*flags & RG__STEP_TRACE) != 0;
  w->check = (*flags & RG__STEP_CHECK) != 0;
  w->bad_hop = -1;
  size_t off = RG__STEP_HEAD;
  for (uint32_t m = 0; m < n_mb; m++) {
    size_t used;
    RG_RETURN_IF_ERROR(rg_step_decode(msg + off, len - off, &w->lim, &w->sb[m], &w->st[m], &used));
    off += used;
  }
  size_t used;
  RG_RETURN_IF_ERROR(rg__kvplan_decode(msg + off, len - off, &w->plan, &used));
  if (off + used != len)
    return rg_status_make(RG_INVALID_ARGUMENT, "a STEP message with %zu bytes past its end",
                          len - off - used);
  if (w->plan.n_stash && w->role != RG_CLUSTER_ROLE_PREFILL)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "a STEP stashes KV on a worker that does not prefill");
  RG_RETURN_IF_ERROR(push_offloads(w));
  RG_RETURN_IF_ERROR(take_imports(w));
  const rg_arch_t *a = w->a;
  rg_status_t s = NULL;
  int begun = 0;
  for (uint32_t m = 0; m < n_mb && !s; m++) {
    s = ensure(w, &w->x[m], (size_t)w->st[m].n_tokens * (size_t)a->d_model * sizeof(float));
    if (!s)
      s = ensure(w, &w->logits[m], (size_t)w->st[m].n_logits * (size_t)a->vocab * sizeof(float));
  }
  for (int i = 0; i < w->n_stages && !s; i++)
    for (uint32_t m = 0; m < n_mb && !s; m++)
      s = rg_stage_begin(w->stages[i], w->ctx[i][m], &w->st[m]);
  begun = !s;
  prog_t *p = calloc(n_mb, sizeof *p);
  if (!p && !s) s = rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
  for (uint32_t m = 0; m < n_mb && !s; m++) build_prog(w, &p[m]);
  double idle = 0;
  while (!s) {
    int all_done = 1, progress = 0;
    for (uint32_t m = 0; m < n_mb && !s; m++) {
      size_t pc0 = p[m].pc;
      int blocked = 0;
      if (p[m].pc < p[m].n || p[m].n_sends) s = advance(w, &p[m], (int)m, &blocked);
      progress |= p[m].pc != pc0;
      if (p[m].pc < p[m].n || p[m].n_sends) all_done = 0;
    }
    if (s || all_done) break;
    if (!s) s = service_xfers(w);
    // A coordinator gone, or a signal, ends the step at once rather than
    // after the peers' deadlines (control messages wait for the step's end).
    if (!s) s = rg_control_client_lost(w->ctl);
    if (!s && w->o.stop && *w->o.stop) s = rg_status_make(RG_CANCELLED, "stopped by a signal");
    if (!progress) {
      if (w->idle_since == 0) waiting(w);
      // Waiting on peers: spin briefly, then back off (a decode step waits
      // microseconds on shm; an idle wait should cost no CPU).
      idle = idle < 1e-3 ? idle + 5e-6 : idle;
      if (idle > 2e-5) rg_clock_sleep(idle);
    } else {
      idle = 0;
    }
  }
  for (uint32_t m = 0; p && m < n_mb; m++) cancel_prog(&p[m]);
  free(p);
  if (!s) s = stash(w);
  for (int i = 0; begun && i < w->n_stages; i++)
    for (uint32_t m = 0; m < n_mb; m++) {
      if (s || w->check)
        rg_stage_cancel(w->stages[i], w->ctx[i][m]);
      else
        rg_stage_end(w->stages[i], w->ctx[i][m]);
    }
  return s;
}

static rg_status_t send_done(worker_t *w, rg_status_t err) {
  rg__done_t d = {0};
  d.step = w->step;
  d.status = err ? (int32_t)rg_status_code(err) : 0;
  if (err) snprintf(d.text, sizeof d.text, "%s", rg_status_message(err));
  d.bad_hop = w->bad_hop;
  d.n_stages = (uint32_t)w->n_stages;
  for (int i = 0; i < w->n_stages; i++) {
    rg_stage_counters(w->stages[i], &d.stages[i]);
    d.stages[i].cold_calls = w->cold_calls[i];
  }
  for (size_t i = 0; i < RG_CLUSTER_MAX_WORKERS + 1; i++)
    if (w->links[i].messages) d.links[d.n_links++] = w->links[i];
  for (size_t i = 0; i < RG_CLUSTER_MAX_WORKERS; i++)
    if (w->kv_in[i].messages) d.links[d.n_links++] = w->kv_in[i];
  d.events = w->events;
  d.n_events = (uint32_t)w->n_events;
  d.n_bad_keys = w->n_bad_keys;
  memcpy(d.bad_keys, w->bad_keys, sizeof d.bad_keys);
  w->n_bad_keys = 0;
  uint8_t *buf = NULL;
  size_t cap = 0, len = 0;
  rg_status_t s = rg__done_encode(&d, &buf, &cap, &len);
  w->n_events = 0;
  rg_transport_req_t *r = NULL;
  if (!s)
    s = rg_transport_send(w->tp, w->coord, rg__tag(RG__K_DONE, w->step, 0, 0), buf, len,
                          "step report", &r);
  if (!s) s = rg_transport_wait(r, w->step_timeout);
  rg_transport_req_free(r);
  free(buf);
  return s;
}

// ----- The loop ------------------------------------------------------------------------

static rg_status_t serve_steps(worker_t *w) {
  size_t cap = rg__step_message_cap(&w->bounds, w->n_mb);
  uint8_t *msg = malloc(cap);
  if (!msg)
    return rg_status_make(RG_OUT_OF_MEMORY, "out of memory for a %zu-byte step buffer", cap);
  rg_status_t st = xfer_start(w);
  rg_transport_req_t *r = NULL;
  double idle = 0;
  while (!st) {
    if (!r && (st = rg_transport_recv(w->tp, w->coord, rg__tag(RG__K_STEP, w->step, 0, 0), msg, cap,
                                      "a step", &r)))
      break;
    bool done = false;
    rg_status_t rs = rg_transport_test(r, &done);
    if (done) {
      size_t len = rg_transport_req_bytes(r);
      rg_transport_req_free(r);
      r = NULL;
      uint32_t flags = 0;
      rg_status_t e = rs ? rs : run_step(w, msg, len, &flags);
      st = send_done(w, e);
      rg_status_free(e);
      w->step++;
      idle = 0;
      continue;
    }
    rg_status_free(rs);
    if (w->idle_since == 0) waiting(w);  // for the next step
    if (w->o.stop && *w->o.stop) {
      st = rg_status_make(RG_CANCELLED, "stopped by a signal");
      break;
    }
    if ((st = service_xfers(w))) break;
    // Between steps: the control plane (shutdown, a coordinator gone).
    rg_control_event_t ev;
    rg_status_t cs = rg_control_client_recv(w->ctl, 0.0, &ev);
    if (cs) {
      st = cs;
      break;
    }
    if (ev.kind == RG_CONTROL_EVENT_MESSAGE) {
      if (ev.type == RG_CONTROL_MSG_SHUTDOWN) {
        rg_control_event_deinit(&ev);
        break;
      }
      if (ev.type == RG_CONTROL_MSG_PEER_TABLE)
        st = take_peers(w, RG_CONTROL_MSG_AS(ev.msg, peer_table));
    }
    rg_control_event_deinit(&ev);
    // Transfers in flight need this side's progress to complete (shm's
    // writes and the notice that follows them): stay awake while they last.
    // Yield rather than spin: on a machine with fewer cores than processes
    // the receiver needs this core to copy the pages.
    idle = !w->xfer_on && w->n_writes ? 0 : idle < 2e-3 ? idle + 2e-5 : idle;
    if (idle > 0)
      rg_clock_sleep(idle);
    else
      sched_yield();
  }
  xfer_stop(w);
  rg_transport_req_free(r);
  free(msg);
  return st;
}

static rg_status_t wait_message(worker_t *w, rg_control_msg_type_t want, double timeout,
                                rg_control_event_t *ev) {
  double t0 = rg_clock_now();
  for (;;) {
    double left = timeout - (rg_clock_now() - t0);
    if (left <= 0)
      return rg_status_make(RG_DEADLINE_EXCEEDED, "no %s from the coordinator within %.0f s",
                            rg_control_msg_name(want), timeout);
    RG_RETURN_IF_ERROR(rg_control_client_recv(w->ctl, left, ev));
    if (ev->kind == RG_CONTROL_EVENT_MESSAGE && ev->type == want) return NULL;
    if (ev->kind == RG_CONTROL_EVENT_MESSAGE && ev->type == RG_CONTROL_MSG_SHUTDOWN) {
      rg_control_event_deinit(ev);
      return rg_status_make(RG_UNAVAILABLE, "the coordinator shut down before sending %s",
                            rg_control_msg_name(want));
    }
    rg_control_event_deinit(ev);
  }
}

rg_status_t rg_worker_run(const rg_worker_options_t *opt) {
  worker_t *w = calloc(1, sizeof *w);
  if (!w) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
  w->o = *opt;
  rg_status_t st = NULL;
  char host[256];
  int port;
  const char *dev = opt->device ? opt->device : "cpu:0";
  char driver[32];
  int index = 0;
  rg_device_options_t dopt = {
      .threads = opt->threads, .isa = opt->isa, .batch_invariant = opt->batch_invariant};
  uint8_t addr[RG_TRANSPORT_ADDR_MAX];
  size_t alen = 0;
  rg_control_event_t ev = {0};
  if ((st = rg_control_parse_endpoint(opt->coordinator ? opt->coordinator : "", host, sizeof host,
                                      &port)))
    goto done;
  if ((st = rg_device_parse_name(dev, driver, sizeof driver, &index))) goto done;
  rg_register_available_devices();
  if ((st = rg_device_open(driver, index, &dopt, &w->dev))) goto done;
  char tname[96];
  snprintf(tname, sizeof tname, "%s (%s)", opt->name ? opt->name : "worker", dev);
  rg_transport_options_t to = {
      .kind = RG_TRANSPORT_FABRIC, .name = tname, .provider = opt->provider};
  if ((st = rg_transport_create(&to, &w->tp))) goto done;
  if ((st = rg_transport_address(w->tp, addr, sizeof addr, &alen))) goto done;
  rg_control_client_options_t co = {.host = host,
                                    .port = port,
                                    .secret = opt->secret,
                                    .connect_timeout_s = opt->connect_timeout_s,
                                    .name = opt->name,
                                    .device = dev,
                                    .device_name = rg_device_info(w->dev)->name,
                                    .class_hint = rg_device_info(w->dev)->class_hint,
                                    .fabric_provider = rg_transport_provider(w->tp),
                                    .fabric_address = addr,
                                    .fabric_address_len = alen};
  if ((st = rg_control_client_create(&co, &w->ctl))) goto done;
  say(w, "joined %s", rg_control_client_peer(w->ctl));
  if ((st = wait_message(w, RG_CONTROL_MSG_ASSIGN, 120, &ev))) goto done;
  st = load(w, RG_CONTROL_MSG_AS(ev.msg, assign));
  rg_control_event_deinit(&ev);
  if (st) {
    rg_control_error_t er = RIDGE__CONTROL__ERROR__INIT;
    er.text = (char *)rg_status_message(st);
    rg_status_free(rg_control_client_send(w->ctl, &er.base));
    goto done;
  }
  rg_control_ready_t rd = RIDGE__CONTROL__READY__INIT;
  rd.stages_loaded = (uint32_t)w->n_stages;
  uint8_t descs[RG_CLUSTER_MAX_STAGES][RG_TRANSPORT_DESC_BYTES];
  ProtobufCBinaryData regions[RG_CLUSTER_MAX_STAGES];
  for (int i = 0; i < w->n_stages; i++) {
    rd.weight_bytes += (uint64_t)rg_stage_weight_bytes(w->stages[i]);
    rd.kv_bytes += (uint64_t)rg_stage_kv_bytes(w->stages[i]);
    if (!rg_stage_kv_buffer(w->stages[i])) continue;
    regions[rd.n_kv_regions] = (ProtobufCBinaryData){0, NULL};
    if (w->kv_region[i]) {
      rg_transport_region_desc_t d;
      rg_transport_region_desc(w->kv_region[i], &d);
      rg_transport_desc_encode(&d, descs[i]);
      regions[rd.n_kv_regions] = (ProtobufCBinaryData){RG_TRANSPORT_DESC_BYTES, descs[i]};
    }
    rd.n_kv_regions++;
  }
  if (w->tier_region) {
    rg_transport_region_desc_t d;
    rg_transport_region_desc(w->tier_region, &d);
    rg_transport_desc_encode(&d, descs[0]);
    regions[0] = (ProtobufCBinaryData){RG_TRANSPORT_DESC_BYTES, descs[0]};
    rd.n_kv_regions = 1;
  }
  rd.kv_regions = regions;
  if ((st = rg_control_client_send(w->ctl, &rd.base))) goto done;
  if ((st = wait_message(w, RG_CONTROL_MSG_PEER_TABLE, 120, &ev))) goto done;
  st = take_peers(w, RG_CONTROL_MSG_AS(ev.msg, peer_table));
  rg_control_event_deinit(&ev);
  if (!st) st = serve_steps(w);
done:
  for (int m = 0; m < MAX_MB; m++) {
    rg_buffer_release(w->x[m].buf), free(w->x[m].stage);
    rg_buffer_release(w->logits[m].buf), free(w->logits[m].stage);
    rg_step_buf_free(&w->sb[m]);
  }
  rg_transport_req_free(w->xfer_recv);
  for (size_t i = 0; i < w->n_writes; i++) rg_transport_req_free(w->writes[i]);
  for (int i = 0; i < MAX_STAGING; i++) rg_transport_region_deregister(w->staging[i].region);
  rg_transport_region_deregister(w->tier_region);
  rg_buffer_release(w->tier);
  for (int i = 0; i < RG_CLUSTER_MAX_STAGES; i++) {
    rg_transport_region_deregister(w->outbox_region[i]);
    rg_transport_region_deregister(w->kv_region[i]);
    rg_buffer_release(w->outbox[i]);
  }
  for (int i = 0; i < w->n_stages; i++) {
    for (int m = 0; m < MAX_MB; m++) rg_stage_ctx_destroy(w->ctx[i][m]);
    rg_stage_destroy(w->stages[i]);
  }
  free(w->xfer_buf);
  rg__kvplan_free(&w->plan);
  rg_weight_cache_destroy(w->cache);
  rg_model_close(w->model);
  rg_control_client_destroy(w->ctl);
  rg_transport_destroy(w->tp);
  // After the endpoint: a write still in flight at the stop read from them.
  for (int i = 0; i < MAX_STAGING; i++) rg_hugemem_free(w->staging[i].buf, w->staging[i].mapped);
  rg_device_close(w->dev);
  free(w->events);
  free(w);
  return st;
}
