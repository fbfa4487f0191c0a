// The coordinator of a multi-process run (see runtime/cluster.h).
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/fileio.h"
#include "ops/convert.h"
#include "runtime/cluster/cluster_impl.h"
#include "runtime/step.h"

extern char **environ;

#define MAX_MB 2
#define DONE_CAP (4u << 20)

typedef struct {
  uint32_t id;  // control-plane worker id; 0 until joined
  int joined, ready, lost;
  char lost_why[512];
  pid_t pid;  // when this coordinator started it
  uint8_t addr[RG_TRANSPORT_ADDR_MAX];
  size_t alen;
  char device_name[128];
  rg_transport_peer_t peer;
  rg_stage_counters_t stages[RG_CLUSTER_MAX_STAGES];
  rg__link_t links[2 * RG_CLUSTER_MAX_WORKERS + 1];
  uint32_t n_links;
  uint8_t *done_buf;
  int pipe;  // index into pipes; -1 for a capacity tier
  // Per attention instance (in stage order): its KV pool as an RMA target.
  uint8_t kv_desc[RG_CLUSTER_MAX_STAGES][RG_TRANSPORT_DESC_BYTES];
  int has_desc[RG_CLUSTER_MAX_STAGES];
  uint64_t xfer_seq;  // next transfer order's sequence
} cworker_t;

// A pipeline: the workers of one role whose stages cover the model once
// (the whole layout, or the prefill or the decode side), with its own KV
// pool geometry, step numbers and step in flight.
typedef struct {
  rg_cluster_role_t role;
  rg_cluster_hop_t hops[RG_CLUSTER_MAX_HOPS];
  size_t n_hops;
  int lm_worker;
  rg_step_limits_t lim;
  rg__step_bounds_t bounds;
  int n_mb;
  rg_step_buf_t sb[MAX_MB];
  rg_step_t st[MAX_MB];
  uint8_t *msg;
  size_t msg_cap, msg_len;
  uint64_t step;
  rg__kvplan_t plan;  // of the next step
  // The step in flight.
  int busy, n_mb_now;
  uint32_t flags;
  double t0, t_begin;
  float *logits;
  int64_t tokens_now;
  rg_transport_req_t *reqs[RG_CLUSTER_MAX_WORKERS + MAX_MB + 1];
  int owner[RG_CLUSTER_MAX_WORKERS + MAX_MB + 1];
  int taken[RG_CLUSTER_MAX_WORKERS + MAX_MB + 1];
  size_t nr, first_done;
  rg_transport_req_t *sends[RG_CLUSTER_MAX_WORKERS];
  int bad_hop;
  uint64_t bad_keys[64];
  uint32_t n_bad_keys;
  uint64_t *keys_now;  // prefill: the prompts stashed; decode: the imports
  size_t n_keys_now, cap_keys_now;
  rg_engine_counters_t c;
  // Step deadlines (rg_cluster_step_deadline): the pace of this pipeline's
  // finished steps, and the step in flight's cost and deadline.
  rg_cluster_pace_t pace;
  double flops_now, bytes_now;
  rg_cluster_deadline_t deadline;
} pipe_t;

// One attention instance's share of the capacity tier's memory.
typedef struct {
  int worker, slot;
  int64_t layer_begin, layer_end;
  uint64_t base, per, block_bytes;
} tier_slice_t;

// A prompt's KV in the prefill workers' outboxes, until the decode side has it.
typedef struct {
  uint64_t key;
  int32_t *blocks;  // outbox blocks, in position order
  int32_t n;
  int64_t n_pos;
} stash_rec_t;

typedef struct {
  int worker;
  rg__event_t e;
} trace_ev_t;

struct rg_cluster_s {
  rg_cluster_options_t o;
  char model_path[PATH_MAX];
  char trace_path[PATH_MAX];
  rg_model_t *model;
  const rg_arch_t *a;
  rg_control_secret_t secret;
  char secret_text[65];
  rg_control_server_t *srv;
  rg_transport_t *tp;
  cworker_t w[RG_CLUSTER_MAX_WORKERS];
  pipe_t pipes[2];  // one, or prefill then decode
  int n_pipes;
  int max_seqs;
  rg_dtype_t kv_dtype;
  uint64_t epoch;  // of the last PeerTable sent
  // Per pipeline: how many times a worker holding its KV (one with
  // attention stages) was lost, and the latest why (rg_executor_t.kv_losses).
  uint64_t kv_losses[2];
  char kv_lost_why[2][640];
  // Prefill-decode: the outbox blocks free on every prefill worker, the
  // prompts stashed there, and transfer orders in flight.
  int64_t outbox_blocks;
  int32_t *outbox_free;
  int64_t n_outbox_free;
  stash_rec_t *stash;
  size_t n_stash, cap_stash;
  uint64_t xfer_id;
  uint8_t *xfer_buf;
  size_t xfer_cap;
  rg_transport_req_t *orders[64];
  uint8_t *order_bufs[64];
  size_t n_orders;
  // The capacity tier: its worker, its blocks (of the pipeline it serves,
  // the last), and per attention instance of that pipeline its slice of the
  // tier's memory: tier_blocks blocks of slice_per bytes from slice_base.
  int tier_worker;
  int64_t tier_blocks;
  size_t tier_bytes;
  tier_slice_t slices[RG_CLUSTER_MAX_WORKERS * RG_CLUSTER_MAX_STAGES];
  int n_slices;
  rg__expect_order_t *expect_order;
  rg_engine_counters_t c;
  // KV transfers that failed on their senders, as they reported them.
  rg_cluster_kv_fault_t *faults;
  size_t n_faults, cap_faults;
  trace_ev_t *trace;
  size_t n_trace, cap_trace;
  double t0;
};

static void say(const rg_cluster_t *c, const char *fmt, ...) RG_PRINTF(2, 3);
static void say(const rg_cluster_t *c, const char *fmt, ...) {
  if (c->o.quiet) return;
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "ridge run: ");
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

const rg_arch_t *rg_cluster_arch(const rg_cluster_t *c) {
  return c->a;
}
const rg_tokenizer_t *rg_cluster_tokenizer(const rg_cluster_t *c) {
  return rg_model_tokenizer(c->model);
}
int rg_cluster_port(const rg_cluster_t *c) {
  return rg_control_server_port(c->srv);
}

static const char *wname(const rg_cluster_t *c, int i) {
  return c->o.layout.workers[i].name;
}

// "w1-ffn (cpu:0, standing in for bertha-500)"
static const char *wlabel(const rg_cluster_t *c, int i, char *buf, size_t len) {
  const rg_cluster_worker_t *w = &c->o.layout.workers[i];
  if (w->plays[0])
    snprintf(buf, len, "%s (%s, standing in for %s)", w->name, w->device, w->plays);
  else
    snprintf(buf, len, "%s (%s)", w->name, w->device);
  return buf;
}

// ----- Starting workers ----------------------------------------------------------------

static rg_status_t spawn(rg_cluster_t *c, int i) {
  const rg_cluster_worker_t *w = &c->o.layout.workers[i];
  char coord[64], threads[16];
  snprintf(coord, sizeof coord, "127.0.0.1:%d", rg_control_server_port(c->srv));
  snprintf(threads, sizeof threads, "%d", c->o.engine.threads);
  const char *bin = c->o.ridge_binary ? c->o.ridge_binary : "/proc/self/exe";
  const char *argv[20];
  int k = 0;
  argv[k++] = "ridge";
  argv[k++] = "--quiet";
  argv[k++] = "worker";
  argv[k++] = "--coordinator";
  argv[k++] = coord;
  argv[k++] = "--device";
  argv[k++] = w->device;
  argv[k++] = "--name";
  argv[k++] = w->name;
  if (c->o.engine.threads > 0) argv[k++] = "--threads", argv[k++] = threads;
  if (c->o.engine.isa > 0)
    argv[k++] = "--isa", argv[k++] = rg_cpu_isa_name((rg_cpu_isa_t)c->o.engine.isa);
  if (c->o.engine.batch_invariant) argv[k++] = "--batch-invariant";
  if (c->o.provider) argv[k++] = "--provider", argv[k++] = c->o.provider;
  argv[k] = NULL;
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0)
    return rg_status_make(RG_UNAVAILABLE, "cannot start worker %s: %s", w->name, strerror(errno));
  if (pid == 0) {
    // Ctrl-C reaches the whole process group: the coordinator stops the run
    // and shuts its workers down, so they do not act on it themselves.
    signal(SIGINT, SIG_IGN);
    setenv("RIDGE_SECRET", c->secret_text, 1);
    execv(bin, (char *const *)argv);
    fprintf(stderr, "ridge worker %s: cannot run %s: %s\n", w->name, bin, strerror(errno));
    _exit(127);
  }
  c->w[i].pid = pid;
  return NULL;
}

// A started worker that has exited: its status, as a sentence.
static int exited(cworker_t *w, char *buf, size_t len) {
  int status;
  if (w->pid <= 0 || waitpid(w->pid, &status, WNOHANG) != w->pid) return 0;
  if (WIFSIGNALED(status)) rg_transport_forget_process(w->pid);  // its shm region
  w->pid = -1;
  if (WIFSIGNALED(status))
    snprintf(buf, len, "it was killed by signal %d", WTERMSIG(status));
  else
    snprintf(buf, len, "it exited with status %d", WEXITSTATUS(status));
  return 1;
}

// ----- The control plane ---------------------------------------------------------------

static int find_by_id(const rg_cluster_t *c, uint32_t id) {
  for (int i = 0; i < c->o.layout.n_workers; i++)
    if (c->w[i].joined && c->w[i].id == id) return i;
  return -1;
}

// A worker joined: which layout worker is it? By name, else the first free
// one on the same device.
static int match(rg_cluster_t *c, const rg_control_hello_t *h) {
  for (int i = 0; i < c->o.layout.n_workers; i++)
    if ((!c->w[i].joined || c->w[i].lost) && h->worker_name && !strcmp(h->worker_name, wname(c, i)))
      return i;
  for (int i = 0; i < c->o.layout.n_workers; i++)
    if (!c->w[i].joined && h->device && !strcmp(h->device, c->o.layout.workers[i].device)) return i;
  return -1;
}

static void on_joined(rg_cluster_t *c, const rg_control_event_t *ev) {
  const rg_control_hello_t *h = RG_CONTROL_MSG_AS(ev->msg, hello);
  int i = h ? match(c, h) : -1;
  if (i < 0) {
    say(c, "a worker joined that the layout has no place for: %s", ev->text);
    return;
  }
  cworker_t *w = &c->w[i];
  w->id = ev->worker_id;
  w->joined = 1;
  w->lost = 0;
  w->ready = 0;
  w->alen = h->fabric_address.len < sizeof w->addr ? h->fabric_address.len : 0;
  memcpy(w->addr, h->fabric_address.data, w->alen);
  snprintf(w->device_name, sizeof w->device_name, "%s", h->device_name ? h->device_name : "");
}

static int holds_kv(const rg_cluster_worker_t *w) {
  for (int k = 0; k < w->n_stages; k++)
    if (w->stages[k].kind == RG_STAGE_ATTENTION) return 1;
  return 0;
}

static void on_lost(rg_cluster_t *c, const rg_control_event_t *ev) {
  int i = find_by_id(c, ev->worker_id);
  if (i < 0) return;
  int p = c->w[i].pipe;
  if (!c->w[i].lost && p >= 0 && p < 2 && holds_kv(&c->o.layout.workers[i])) {
    char lb[160];
    c->kv_losses[p]++;
    snprintf(c->kv_lost_why[p], sizeof c->kv_lost_why[p],
             "its KV was on worker %s, which was lost (%s)", wlabel(c, i, lb, sizeof lb), ev->text);
  }
  c->w[i].lost = 1;
  snprintf(c->w[i].lost_why, sizeof c->w[i].lost_why, "%s", ev->text);
  if (c->tp && c->w[i].ready) rg_transport_peer_fail(c->tp, c->w[i].peer, ev->text);
}

// A worker's report that a transfer order failed there (an Error with its
// TransferFault): kept with the request it concerns, and said.
static void on_transfer_fault(rg_cluster_t *c, const rg_control_event_t *ev,
                              const rg_control_error_t *er) {
  const rg__transfer_fault_t *tf = er->transfer;
  int i = find_by_id(c, ev->worker_id);
  if (c->n_faults == c->cap_faults) {
    size_t cap = c->cap_faults ? 2 * c->cap_faults : 8;
    if (cap > 4096) return;  // a worker failing every order: the first 4096 say it
    rg_cluster_kv_fault_t *nf = realloc(c->faults, cap * sizeof *nf);
    if (!nf) return;
    c->faults = nf, c->cap_faults = cap;
  }
  rg_cluster_kv_fault_t *f = &c->faults[c->n_faults++];
  memset(f, 0, sizeof *f);
  char lb[160];
  f->request = tf->request_key;
  f->transfer = tf->transfer_id;
  snprintf(f->worker, sizeof f->worker, "%s", i >= 0 ? wname(c, i) : "?");
  snprintf(f->to, sizeof f->to, "%s", tf->to_worker ? tf->to_worker : "");
  snprintf(f->stage, sizeof f->stage, "%s", tf->stage ? tf->stage : "");
  f->bytes = tf->bytes;
  f->code = tf->code && tf->code < RG_STATUS_CODE_COUNT ? (rg_code_t)tf->code : RG_INTERNAL;
  snprintf(f->error, sizeof f->error, "%s", er->text ? er->text : "");
  char who[80] = "";
  if (tf->request_key == RG_CLUSTER_KEY_RELOAD)
    snprintf(who, sizeof who, "a reload from the capacity tier: ");
  else if (tf->transfer_id)
    snprintf(who, sizeof who, "request %llu: ", (unsigned long long)tf->request_key);
  snprintf(f->message, sizeof f->message,
           "%sKV transfer %llu from worker %s%s%s failed: %s (%llu bytes): %s; %s", who,
           (unsigned long long)tf->transfer_id, i >= 0 ? wlabel(c, i, lb, sizeof lb) : "?",
           f->to[0] ? " to " : "", f->to, f->stage, (unsigned long long)f->bytes, f->error,
           tf->request_key == RG_CLUSTER_KEY_RELOAD
               ? "the step's requests fail rather than use what did not come"
               : "its pages do not come, and the receiving side recomputes the request");
  say(c, "%s", f->message);
}

size_t rg_cluster_kv_fault_count(const rg_cluster_t *c) {
  return c->n_faults;
}

const rg_cluster_kv_fault_t *rg_cluster_kv_fault(const rg_cluster_t *c, size_t i) {
  return i < c->n_faults ? &c->faults[i] : NULL;
}

// Handles control events for up to `timeout` seconds (0: only what is queued).
// Transfer faults are taken here whoever waits, so none is lost to a wait
// for another message.
static rg_status_t pump(rg_cluster_t *c, double timeout, rg_control_event_t *keep) {
  rg_control_event_t ev;
  RG_RETURN_IF_ERROR(rg_control_server_recv(c->srv, timeout, &ev));
  const rg_control_error_t *er =
      ev.kind == RG_CONTROL_EVENT_MESSAGE ? RG_CONTROL_MSG_AS(ev.msg, error) : NULL;
  if (er && er->transfer) {
    on_transfer_fault(c, &ev, er);
    ev.kind = RG_CONTROL_EVENT_NONE;
  }
  switch (ev.kind) {
    case RG_CONTROL_EVENT_JOINED:
      on_joined(c, &ev);
      break;
    case RG_CONTROL_EVENT_LOST:
      on_lost(c, &ev);
      break;
    case RG_CONTROL_EVENT_REFUSED:
      say(c, "%s", ev.text);
      break;
    case RG_CONTROL_EVENT_MESSAGE:
      if (keep) {
        *keep = ev;
        return NULL;
      }
      break;
    default:
      break;
  }
  if (keep) keep->kind = RG_CONTROL_EVENT_NONE;
  rg_control_event_deinit(&ev);
  return NULL;
}

static rg_status_t send_assign(rg_cluster_t *c, int i) {
  const rg_cluster_layout_t *L = &c->o.layout;
  const pipe_t *pp = &c->pipes[c->w[i].pipe >= 0 ? c->w[i].pipe : c->n_pipes - 1];
  char roles[RG_CLUSTER_MAX_WORKERS * 10] = "";
  for (int k = 0, u = 0; k < L->n_workers; k++)
    u += snprintf(roles + u, sizeof roles - (size_t)u, "%s%s", k ? "," : "",
                  rg_cluster_role_name(L->workers[k].role));
  char opts[20][2][64];
  int no = 0;
#define OPT(k, ...) \
  (snprintf(opts[no][0], 64, "%s", k), snprintf(opts[no][1], 64, __VA_ARGS__), no++)
  OPT("kv_dtype", "%s", rg_dtype_name(c->kv_dtype));
  OPT("max_context", "%lld", (long long)pp->lim.max_context);
  OPT("micro_batches", "%d", pp->n_mb);
  OPT("max_tokens", "%lld", (long long)pp->bounds.max_tokens);
  OPT("max_seqs", "%lld", (long long)pp->bounds.max_seqs);
  OPT("max_table", "%lld", (long long)pp->bounds.max_table);
  OPT("outbox_blocks", "%lld", (long long)c->outbox_blocks);
  OPT("has_tier", "%d", c->tier_worker >= 0);
  OPT("tier_bytes", "%zu", i == c->tier_worker ? c->tier_bytes : (size_t)0);
  OPT("step_timeout_ms", "%lld", (long long)(c->o.step_timeout_s * 1e3));
  // The load policy, decided by each worker on its own host (AUTO: -1).
  OPT("copy_weights", "%d",
      c->o.engine.load == RG_LOAD_COPY   ? 1
      : c->o.engine.load == RG_LOAD_MMAP ? 0
                                         : -1);
  OPT("next_step", "%llu", (unsigned long long)pp->step + 1);
#undef OPT
  // Longer than an option's 64 bytes with many workers: its own buffer.
  rg_control_option_t o[20], *op[20];
  for (int k = 0; k < no; k++) {
    rg_control_option_t init = RIDGE__CONTROL__OPTION__INIT;
    o[k] = init;
    o[k].key = opts[k][0];
    o[k].value = opts[k][1];
    op[k] = &o[k];
  }
  rg_control_option_t ro = RIDGE__CONTROL__OPTION__INIT;
  ro.key = "roles";
  ro.value = roles;
  op[no] = &ro;
  o[no] = ro;
  no++;
  // The whole layout, each instance with its worker's index.
  rg_control_stage_instance_t si[RG_CLUSTER_MAX_WORKERS * RG_CLUSTER_MAX_STAGES],
      *pipe[RG_CLUSTER_MAX_WORKERS * RG_CLUSTER_MAX_STAGES], *mine[RG_CLUSTER_MAX_STAGES];
  uint32_t ex[RG_CLUSTER_MAX_WORKERS * RG_CLUSTER_MAX_STAGES][64];
  uint32_t *exbig[RG_CLUSTER_MAX_WORKERS * RG_CLUSTER_MAX_STAGES] = {0};
  size_t n_si = 0, n_mine = 0;
  rg_status_t st = NULL;
  for (int w = 0; w < L->n_workers && !st; w++)
    for (int s = 0; s < L->workers[w].n_stages && !st; s++) {
      const rg_stage_spec_t *sp = &L->workers[w].stages[s];
      rg_control_stage_instance_t init = RIDGE__CONTROL__STAGE_INSTANCE__INIT;
      rg_control_stage_instance_t *x = &si[n_si];
      *x = init;
      Ridge__Control__StageKind k;
      st = rg_control_stage_kind_to_wire(sp->kind, &k);
      x->kind = k;
      x->layer_begin = (uint32_t)sp->layer_begin;
      x->layer_end = (uint32_t)sp->layer_end;
      x->worker = (uint32_t)w;
      x->role = RIDGE__CONTROL__ROLE__ROLE_BOTH;
      if (sp->experts) {
        uint32_t *dst = sp->n_experts <= 64
                            ? ex[n_si]
                            : (exbig[n_si] = malloc(sp->n_experts * sizeof(uint32_t)));
        if (!dst) st = rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
        for (size_t e = 0; dst && e < sp->n_experts; e++) dst[e] = (uint32_t)sp->experts[e];
        x->experts = dst;
        x->n_experts = sp->n_experts;
      }
      pipe[n_si] = x;
      if (w == i) mine[n_mine++] = x;
      n_si++;
    }
  char *names[RG_CLUSTER_MAX_WORKERS];
  for (int w = 0; w < L->n_workers; w++) names[w] = (char *)wname(c, w);
  rg_control_assign_t as = RIDGE__CONTROL__ASSIGN__INIT;
  as.model_path = c->model_path;
  as.options = op;
  as.n_options = (size_t)no;
  as.stages = mine;
  as.n_stages = n_mine;
  as.kv_block_size = (uint32_t)pp->lim.block_size;
  as.kv_block_count = (uint64_t)pp->lim.n_blocks;
  as.pipeline = pipe;
  as.n_pipeline = n_si;
  as.worker_names = names;
  as.n_worker_names = (size_t)L->n_workers;
  as.my_index = (uint32_t)i;
  if (!st) st = rg_control_server_send(c->srv, c->w[i].id, &as.base);
  for (size_t k = 0; k < n_si; k++) free(exbig[k]);
  return st;
}

static rg_status_t send_peers(rg_cluster_t *c) {
  int n = c->o.layout.n_workers;
  rg_control_peer_t p[RG_CLUSTER_MAX_WORKERS + 1], *pp[RG_CLUSTER_MAX_WORKERS + 1];
  uint8_t caddr[RG_TRANSPORT_ADDR_MAX];
  size_t clen;
  RG_RETURN_IF_ERROR(rg_transport_address(c->tp, caddr, sizeof caddr, &clen));
  rg_control_peer_t init = RIDGE__CONTROL__PEER__INIT;
  p[0] = init;
  p[0].worker_id = 0;
  p[0].worker_name = "coordinator";
  p[0].fabric_address.data = caddr;
  p[0].fabric_address.len = clen;
  pp[0] = &p[0];
  for (int i = 0; i < n; i++) {
    p[i + 1] = init;
    p[i + 1].worker_id = c->w[i].id;
    p[i + 1].worker_name = (char *)wname(c, i);
    p[i + 1].fabric_address.data = c->w[i].addr;
    p[i + 1].fabric_address.len = c->w[i].alen;
    pp[i + 1] = &p[i + 1];
  }
  rg_control_peer_table_t pt = RIDGE__CONTROL__PEER_TABLE__INIT;
  pt.epoch = ++c->epoch;
  pt.fabric_provider = (char *)rg_transport_provider(c->tp);
  pt.peers = pp;
  pt.n_peers = (size_t)n + 1;
  return rg_control_server_send(c->srv, RG_CONTROL_ALL, &pt.base);
}

// Waits for every layout worker to join, then assigns and waits for Ready.
static rg_status_t gather(rg_cluster_t *c, int only) {
  int n = c->o.layout.n_workers;
  double deadline = rg_clock_now() + (c->o.join_timeout_s > 0 ? c->o.join_timeout_s : 30);
  char lb[160], why[128];
  for (;;) {
    int missing = -1;
    for (int i = 0; i < n && missing < 0; i++)
      if ((only < 0 || i == only) && (!c->w[i].joined || c->w[i].lost)) missing = i;
    if (missing < 0) break;
    for (int i = 0; i < n; i++)
      if (exited(&c->w[i], why, sizeof why))
        return rg_status_make(RG_UNAVAILABLE, "worker %s stopped before it joined: %s",
                              wlabel(c, i, lb, sizeof lb), why);
    if (rg_clock_now() > deadline)
      return rg_status_make(
          RG_DEADLINE_EXCEEDED,
          "worker %s did not join within %.0f s (start it with `ridge worker "
          "--coordinator HOST:%d --device %s --name %s`)",
          wlabel(c, missing, lb, sizeof lb), c->o.join_timeout_s > 0 ? c->o.join_timeout_s : 30,
          rg_control_server_port(c->srv), c->o.layout.workers[missing].device, wname(c, missing));
    RG_RETURN_IF_ERROR(pump(c, 0.1, NULL));
  }
  for (int i = 0; i < n; i++)
    if ((only < 0 || i == only)) RG_RETURN_IF_ERROR(send_assign(c, i));
  for (;;) {
    int missing = -1;
    for (int i = 0; i < n && missing < 0; i++)
      if ((only < 0 || i == only) && !c->w[i].ready) missing = i;
    if (missing < 0) break;
    if (c->w[missing].lost)
      return rg_status_make(RG_UNAVAILABLE, "worker %s was lost while loading: %s",
                            wlabel(c, missing, lb, sizeof lb), c->w[missing].lost_why);
    if (rg_clock_now() > deadline)
      return rg_status_make(RG_DEADLINE_EXCEEDED,
                            "worker %s did not load its stages within the join timeout",
                            wlabel(c, missing, lb, sizeof lb));
    rg_control_event_t ev;
    RG_RETURN_IF_ERROR(pump(c, 0.1, &ev));
    if (ev.kind != RG_CONTROL_EVENT_MESSAGE) continue;
    int i = find_by_id(c, ev.worker_id);
    rg_status_t st = NULL;
    if (i >= 0 && ev.type == RG_CONTROL_MSG_READY) {
      c->w[i].ready = 1;
      const rg_control_ready_t *r = RG_CONTROL_MSG_AS(ev.msg, ready);
      memset(c->w[i].has_desc, 0, sizeof c->w[i].has_desc);
      for (size_t k = 0; k < r->n_kv_regions && k < RG_CLUSTER_MAX_STAGES; k++)
        if (r->kv_regions[k].len == RG_TRANSPORT_DESC_BYTES) {
          memcpy(c->w[i].kv_desc[k], r->kv_regions[k].data, RG_TRANSPORT_DESC_BYTES);
          c->w[i].has_desc[k] = 1;
        }
      say(c, "worker %s ready: %u stages, %.3g GB of weights, %.3g GB of KV",
          wlabel(c, i, lb, sizeof lb), r->stages_loaded, (double)r->weight_bytes / 1e9,
          (double)r->kv_bytes / 1e9);
    } else if (i >= 0 && ev.type == RG_CONTROL_MSG_ERROR) {
      const rg_control_error_t *er = RG_CONTROL_MSG_AS(ev.msg, error);
      st = rg_status_make(RG_UNAVAILABLE, "worker %s could not load its stages: %s",
                          wlabel(c, i, lb, sizeof lb), er->text ? er->text : "");
    }
    rg_control_event_deinit(&ev);
    RG_RETURN_IF_ERROR(st);
  }
  // Fabric peers, then everyone learns everyone's address.
  for (int i = 0; i < n; i++)
    if (only < 0 || i == only) {
      RG_RETURN_IF_ERROR(rg_transport_peer_add(c->tp, c->w[i].addr, c->w[i].alen,
                                               wlabel(c, i, lb, sizeof lb), &c->w[i].peer));
    }
  return send_peers(c);
}

// ----- Creation ------------------------------------------------------------------------

static rg_status_t create(rg_cluster_t *c) {
  const rg_cluster_options_t *o = &c->o;
  if (!o->model_path) return rg_status_make(RG_INVALID_ARGUMENT, "no model given");
  if (!realpath(o->model_path, c->model_path))
    return rg_status_make(RG_NOT_FOUND, "%s: %s", o->model_path, strerror(errno));
  RG_RETURN_IF_ERROR(rg_model_open(c->model_path, &c->model));
  c->a = rg_model_arch(c->model);
  const rg_engine_options_t *eo = &o->engine;
  c->max_seqs = eo->max_seqs > 0 ? eo->max_seqs : 16;
  int64_t max_ctx = eo->max_context > 0 ? eo->max_context : 4096;
  if (c->a->max_context > 0 && max_ctx > c->a->max_context) max_ctx = c->a->max_context;
  int64_t kv_tokens = eo->kv_tokens > 0 ? eo->kv_tokens : max_ctx * c->max_seqs;
  c->kv_dtype = eo->kv_dtype_set ? eo->kv_dtype : RG_BF16;
  int pd = rg_cluster_layout_is_pd(&o->layout);
  c->n_pipes = pd ? 2 : 1;
  for (int k = 0; k < c->n_pipes; k++) {
    pipe_t *p = &c->pipes[k];
    p->role = pd ? (k ? RG_CLUSTER_ROLE_DECODE : RG_CLUSTER_ROLE_PREFILL) : RG_CLUSTER_ROLE_ALL;
    RG_RETURN_IF_ERROR(rg_cluster_layout_hops(c->a, &o->layout, p->role, p->hops,
                                              RG_CLUSTER_MAX_HOPS, &p->n_hops));
    p->lm_worker = p->hops[p->n_hops - 1].worker;
    p->n_mb = !pd && o->layout.micro_batches > 1 ? 2 : 1;
    // The pipeline's block size: its workers' (they must agree), else the run's.
    int64_t bs = 0;
    for (int i = 0; i < o->layout.n_workers; i++) {
      const rg_cluster_worker_t *lw = &o->layout.workers[i];
      if (lw->role != p->role || !lw->block_size) continue;
      if (bs && bs != lw->block_size)
        return rg_status_make(RG_INVALID_ARGUMENT,
                              "workers of the %s pipeline ask for KV blocks of %lld and %lld "
                              "tokens; one pipeline has one block size",
                              rg_cluster_role_name(p->role), (long long)bs,
                              (long long)lw->block_size);
      bs = lw->block_size;
    }
    if (!bs) bs = eo->block_size > 0 ? eo->block_size : 16;
    p->lim = (rg_step_limits_t){c->a->vocab, max_ctx, bs, (kv_tokens + bs - 1) / bs};
    p->bounds = (rg__step_bounds_t){8192, c->max_seqs, p->lim.n_blocks};
  }
  for (int i = 0; i < o->layout.n_workers; i++) {
    rg_cluster_role_t r = o->layout.workers[i].role;
    c->w[i].pipe = r == RG_CLUSTER_ROLE_TIER ? -1 : r == RG_CLUSTER_ROLE_DECODE ? 1 : 0;
  }
  if (pd) {
    // The outbox holds prompts prefilled but not yet on the decode side: as
    // many tokens as the decode pool, so the prefill side never waits on it
    // while decode has room.
    c->outbox_blocks = c->pipes[0].lim.n_blocks;
    c->outbox_free = malloc((size_t)c->outbox_blocks * sizeof(int32_t));
    if (!c->outbox_free) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
    for (int64_t k = 0; k < c->outbox_blocks; k++)
      c->outbox_free[k] = (int32_t)(c->outbox_blocks - 1 - k);
    c->n_outbox_free = c->outbox_blocks;
  }
  c->tier_worker = -1;
  for (int i = 0; i < o->layout.n_workers; i++)
    if (o->layout.workers[i].role == RG_CLUSTER_ROLE_TIER) c->tier_worker = i;
  if (c->tier_worker >= 0) {
    const pipe_t *tp = &c->pipes[c->n_pipes - 1];
    const rg_cluster_worker_t *tw = &o->layout.workers[c->tier_worker];
    c->tier_blocks = (tw->tier_tokens + tp->lim.block_size - 1) / tp->lim.block_size;
    uint64_t row = (uint64_t)(c->a->n_kv_heads * c->a->head_dim) * rg_dtype_bytes(c->kv_dtype);
    uint64_t base = 0;
    for (int i = 0; i < o->layout.n_workers; i++) {
      if (c->w[i].pipe != c->n_pipes - 1) continue;
      for (int s = 0, slot = 0; s < o->layout.workers[i].n_stages; s++) {
        const rg_stage_spec_t *sp = &o->layout.workers[i].stages[s];
        if (sp->kind != RG_STAGE_ATTENTION) continue;
        uint64_t blk = (uint64_t)tp->lim.block_size * row;
        uint64_t per = (uint64_t)(sp->layer_end - sp->layer_begin) * 2 * blk;
        c->slices[c->n_slices++] =
            (tier_slice_t){i, slot++, sp->layer_begin, sp->layer_end, base, per, blk};
        base += per * (uint64_t)c->tier_blocks;
      }
    }
    c->tier_bytes = (size_t)base;
    if (!(c->expect_order = calloc(1, sizeof *c->expect_order)))
      return rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
  }
  if (c->o.step_timeout_s <= 0) c->o.step_timeout_s = 10;
  if (o->secret) {
    c->secret = *o->secret;
  } else if (o->launch) {
    RG_RETURN_IF_ERROR(rg_control_secret_generate(c->secret_text, &c->secret));
  } else {
    return rg_status_make(
        RG_INVALID_ARGUMENT,
        "workers joining from elsewhere need a shared secret (--secret-file or RIDGE_SECRET)");
  }
  if (o->launch && o->secret)
    return rg_status_make(RG_INVALID_ARGUMENT, "give a secret or launch the workers, not both");
  rg_control_server_options_t so = {
      .bind_host = o->bind_host, .port = o->port, .secret = &c->secret};
  RG_RETURN_IF_ERROR(rg_control_server_create(&so, &c->srv));
  rg_transport_options_t to = {.kind = RG_TRANSPORT_FABRIC,
                               .name = "coordinator",
                               .provider = o->provider,
                               .timeout_s = c->o.step_timeout_s};
  RG_RETURN_IF_ERROR(rg_transport_create(&to, &c->tp));
  say(c, "coordinator listening on %s:%d; data plane %s", o->bind_host ? o->bind_host : "127.0.0.1",
      rg_control_server_port(c->srv), rg_transport_describe(c->tp));
  if (o->launch)
    for (int i = 0; i < o->layout.n_workers; i++) RG_RETURN_IF_ERROR(spawn(c, i));
  else
    for (int i = 0; i < o->layout.n_workers; i++)
      say(c,
          "waiting for worker %s: ridge worker --coordinator HOST:%d --name %s --device %s "
          "--secret-file F",
          wname(c, i), rg_control_server_port(c->srv), wname(c, i), o->layout.workers[i].device);
  return gather(c, -1);
}

rg_status_t rg_cluster_create(const rg_cluster_options_t *o, rg_cluster_t **out) {
  *out = NULL;
  rg_cluster_t *c = calloc(1, sizeof *c);
  if (!c) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
  c->o = *o;
  c->t0 = rg_clock_now();
  if (o->trace_path) snprintf(c->trace_path, sizeof c->trace_path, "%s", o->trace_path);
  c->o.trace_path = o->trace_path ? c->trace_path : NULL;
  rg_status_t st = create(c);
  if (st) {
    rg_cluster_destroy(c);
    return st;
  }
  *out = c;
  return NULL;
}

// ----- The trace -----------------------------------------------------------------------

static void write_trace(rg_cluster_t *c) {
  if (!c->o.trace_path) return;
  rg_file_writer_t *fw;
  rg_status_t st = rg_file_writer_open(c->o.trace_path, "trace", &fw);
  if (st) {
    fprintf(stderr, "ridge run: %s\n", rg_status_message(st));
    rg_status_free(st);
    return;
  }
  FILE *f = rg_file_writer_stream(fw);
  fprintf(f, "{\"traceEvents\":[\n");
  // Process 0: the coordinator's scheduler, one thread per pipeline, one
  // event per step with what sched put in it.
  fprintf(f,
          "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":0,\"args\":{\"name\":"
          "\"coordinator (sched)\"}}");
  for (int k = 0; k < c->n_pipes; k++)
    fprintf(f,
            ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":%d,\"args\":{\"name\":"
            "\"%s steps\"}}",
            k, rg_cluster_role_name(c->pipes[k].role));
  int first = 0;
  for (int i = 0; i < c->o.layout.n_workers; i++) {
    char lb[160];
    fprintf(f, "%s{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":\"%s\"}}",
            first ? "" : ",\n", i + 1, wlabel(c, i, lb, sizeof lb));
    first = 0;
    for (int m = 0; m < MAX_MB; m++)
      fprintf(f,
              ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":"
              "\"micro-batch %d\"}}",
              i + 1, m, m);
  }
  static const char *const kinds[] = {"stage", "send", "wait"};
  for (size_t k = 0; k < c->n_trace; k++) {
    const trace_ev_t *t = &c->trace[k];
    const rg__event_t *e = &t->e;
    if (t->worker < 0) {
      // A step as the scheduler built it: hop = pipeline, layer = tokens,
      // bytes = sequences, mb = micro-batches.
      fprintf(f,
              ",\n{\"name\":\"step: %d tokens, %.0f sequences\",\"cat\":\"sched\",\"ph\":\"X\","
              "\"pid\":0,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"micro_batches\":%d}}",
              (int)e->layer, e->bytes, (int)e->hop, (e->t0 - c->t0) * 1e6, (e->t1 - e->t0) * 1e6,
              (int)e->mb);
      continue;
    }
    const pipe_t *pp = c->w[t->worker].pipe >= 0 ? &c->pipes[c->w[t->worker].pipe] : NULL;
    const rg_cluster_hop_t *h = pp && e->hop < pp->n_hops ? &pp->hops[e->hop] : NULL;
    char name[96];
    if (e->kind == 0 && h)
      snprintf(name, sizeof name, "%s%s%.0lld", rg_stage_kind_name(h->kind),
               h->layer >= 0 ? " layer " : "", h->layer >= 0 ? (long long)h->layer : 0LL);
    else
      snprintf(name, sizeof name, "%s %.0f KB", kinds[e->kind < 3 ? e->kind : 0], e->bytes / 1e3);
    fprintf(f,
            ",\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,"
            "\"dur\":%.3f}",
            name, kinds[e->kind < 3 ? e->kind : 0], t->worker + 1, e->mb, (e->t0 - c->t0) * 1e6,
            (e->t1 - e->t0) * 1e6);
  }
  fprintf(f, "\n]}\n");
  st = rg_file_writer_finish(fw, NULL);
  if (st) fprintf(stderr, "ridge run: %s\n", rg_status_message(st));
  rg_status_free(st);
}

// ----- A step --------------------------------------------------------------------------

static rg_status_t add_trace(rg_cluster_t *c, int worker, const rg__done_t *d) {
  for (uint32_t i = 0; i < d->n_events; i++) {
    if (c->n_trace == c->cap_trace) {
      size_t cap = c->cap_trace ? c->cap_trace * 2 : 1024;
      trace_ev_t *n = realloc(c->trace, cap * sizeof *n);
      if (!n) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory for the trace");
      c->trace = n;
      c->cap_trace = cap;
    }
    c->trace[c->n_trace++] = (trace_ev_t){worker, d->events[i]};
  }
  return NULL;
}

// A worker's report of a step: its counters, links and trace events, the
// imports whose pages failed their checksum, and its error if the step
// failed there.
static rg_status_t take_done(rg_cluster_t *c, pipe_t *p, int i, rg_transport_req_t *req) {
  char lb[160];
  rg__done_t d;
  rg_status_t st = rg__done_decode(c->w[i].done_buf, rg_transport_req_bytes(req), &d);
  if (st) return rg_status_wrap(st, "worker %s", wlabel(c, i, lb, sizeof lb));
  if (d.step != p->step)
    st = rg_status_make(RG_INTERNAL, "worker %s reported step %llu for step %llu",
                        wlabel(c, i, lb, sizeof lb), (unsigned long long)d.step,
                        (unsigned long long)p->step);
  else if (d.status)
    st = rg_status_make((rg_code_t)d.status, "worker %s: %s", wlabel(c, i, lb, sizeof lb), d.text);
  for (uint32_t s = 0; s < d.n_stages && s < RG_CLUSTER_MAX_STAGES; s++)
    c->w[i].stages[s] = d.stages[s];
  memcpy(c->w[i].links, d.links, d.n_links * sizeof d.links[0]);
  c->w[i].n_links = d.n_links;
  if (d.bad_hop >= 0 && (p->bad_hop < 0 || d.bad_hop < p->bad_hop)) p->bad_hop = d.bad_hop;
  for (uint32_t k = 0; k < d.n_bad_keys && p->n_bad_keys < 64; k++)
    p->bad_keys[p->n_bad_keys++] = d.bad_keys[k];
  if (!st) st = add_trace(c, i, &d);
  free(d.events);
  return st;
}

// ----- Pipelines and their steps -----------------------------------------------------

static void pipe_abandon(rg_cluster_t *c, pipe_t *p);

static int in_pipe(const rg_cluster_t *c, const pipe_t *p, int i) {
  return c->w[i].pipe == (int)(p - c->pipes);
}

static const char *stage_list(const rg_cluster_t *c, int i, char *buf, size_t len) {
  const rg_cluster_worker_t *lw = &c->o.layout.workers[i];
  size_t u = 0;
  buf[0] = 0;
  for (int s = 0; s < lw->n_stages && u + 40 < len; s++)
    u += (size_t)snprintf(buf + u, len - u, "%s%s[%lld,%lld)", s ? ", " : "",
                          rg_stage_kind_name(lw->stages[s].kind),
                          (long long)lw->stages[s].layer_begin, (long long)lw->stages[s].layer_end);
  return buf;
}

// The FLOPs and bytes of the pipeline's step of n_mb micro-batches, by the
// formulas the planner predicts with (over every layer: the pipeline covers
// the model once). Only their ratio to earlier steps' counts, so the dtypes
// need only be the same from step to step.
static void step_cost(const rg_cluster_t *c, const pipe_t *p, int n_mb, double *flops,
                      double *bytes) {
  *flops = *bytes = 0;
  for (int m = 0; m < n_mb; m++) {
    if (!p->st[m].n_seqs) continue;
    rg_batch_shape_t b = {.seqs = p->st[m].shape,
                          .n_seqs = (size_t)p->st[m].n_seqs,
                          .n_logits = p->st[m].n_logits,
                          .weight_dtype = c->a->weight_dtype,
                          .kv_dtype = c->kv_dtype,
                          .act_dtype = RG_F32};
    rg_stage_cost_t cost[32];
    size_t n = 0;
    rg_status_t st = rg_stage_costs_batch(c->a, &b, cost, 32, &n);
    if (st) {  // no prediction for this step: the floor holds
      rg_status_free(st);
      *flops = *bytes = 0;
      return;
    }
    for (size_t k = 0; k < n; k++)
      if (!cost[k].is_part) *flops += cost[k].flops, *bytes += cost[k].bytes;
  }
}

// Sends the pipeline's next step: STEP (its micro-batches and KV plan) to
// each of its workers, with the receives of the logits and of every
// worker's report posted first. The step is then in flight until
// pipe_poll says it is done.
static rg_status_t pipe_begin(rg_cluster_t *c, pipe_t *p, int n_mb, uint32_t flags, float *logits) {
  int n = c->o.layout.n_workers;
  char lb[160];
  for (int i = 0; i < n; i++)
    if (in_pipe(c, p, i) && (c->w[i].lost || !c->w[i].ready))
      return rg_status_make(
          RG_UNAVAILABLE, "worker %s is lost (%s); its stages cannot run until it rejoins",
          wlabel(c, i, lb, sizeof lb), c->w[i].lost_why[0] ? c->w[i].lost_why : "not joined");
  p->step++;
  p->flags = flags;
  p->n_mb_now = n_mb;
  p->bad_hop = -1;
  p->n_bad_keys = 0;
  uint8_t head[RG__STEP_HEAD];
  memcpy(head, "RGSP", 4);
  memcpy(head + 4, &p->step, 8);
  memcpy(head + 12, &flags, 4);
  uint32_t nm = (uint32_t)n_mb, epoch = (uint32_t)c->epoch;
  memcpy(head + 16, &nm, 4);
  memcpy(head + 20, &epoch, 4);
  // The step's deadline, from its cost at this run's pace.
  step_cost(c, p, n_mb, &p->flops_now, &p->bytes_now);
  p->deadline = rg_cluster_step_deadline(
      c->o.step_timeout_s, rg_cluster_pace_predict(&p->pace, p->flops_now, p->bytes_now));
  memcpy(head + 24, &p->deadline.seconds, 8);
  memcpy(head + 32, &p->deadline.predicted_s, 8);
  p->msg_len = 0;
  if (p->msg_cap < RG__STEP_HEAD) {
    uint8_t *nb = realloc(p->msg, 4096);
    if (!nb) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
    p->msg = nb;
    p->msg_cap = 4096;
  }
  memcpy(p->msg, head, RG__STEP_HEAD);
  p->msg_len = RG__STEP_HEAD;
  for (int m = 0; m < n_mb; m++)
    RG_RETURN_IF_ERROR(rg_step_encode(&p->st[m], &p->msg, &p->msg_cap, &p->msg_len));
  RG_RETURN_IF_ERROR(rg__kvplan_encode(&p->plan, &p->msg, &p->msg_cap, &p->msg_len));
  // The plan's moves go with this step only.
  p->plan.n_stash = p->plan.n_expect = p->plan.n_push = 0;
  p->nr = 0;
  size_t row = 0;
  rg_status_t st = NULL;
  for (int m = 0; m < n_mb && !st; m++) {
    size_t lbytes = (size_t)p->st[m].n_logits * (size_t)c->a->vocab * sizeof(float);
    if (lbytes) {
      p->owner[p->nr] = p->lm_worker;
      p->taken[p->nr] = 0;
      st = rg_transport_recv(c->tp, c->w[p->lm_worker].peer, rg__tag(RG__K_LOGITS, p->step, m, 0),
                             logits + row * (size_t)c->a->vocab, lbytes, "logits",
                             &p->reqs[p->nr++]);
    }
    row += (size_t)p->st[m].n_logits;
  }
  p->first_done = p->nr;
  for (int i = 0; i < n && !st; i++) {
    if (!in_pipe(c, p, i)) continue;
    if (!c->w[i].done_buf && !(c->w[i].done_buf = malloc(DONE_CAP)))
      st = rg_status_make(RG_OUT_OF_MEMORY, "oom");
    p->owner[p->nr] = i;
    p->taken[p->nr] = 0;
    if (!st)
      st = rg_transport_recv(c->tp, c->w[i].peer, rg__tag(RG__K_DONE, p->step, 0, 0),
                             c->w[i].done_buf, DONE_CAP, "step report", &p->reqs[p->nr++]);
  }
  for (int i = 0; i < n && !st; i++)
    if (in_pipe(c, p, i))
      st = rg_transport_send(c->tp, c->w[i].peer, rg__tag(RG__K_STEP, p->step, 0, 0), p->msg,
                             p->msg_len, "a step", &p->sends[i]);
  p->t0 = rg_clock_now();
  p->busy = 1;
  if (st) pipe_abandon(c, p);
  return st;
}

// Drops what a failed step left in flight.
static void pipe_abandon(rg_cluster_t *c, pipe_t *p) {
  for (size_t k = 0; k < p->nr; k++) rg_transport_req_free(p->reqs[k]);
  p->nr = 0;
  for (int i = 0; i < RG_CLUSTER_MAX_WORKERS; i++) {
    rg_transport_req_free(p->sends[i]);
    p->sends[i] = NULL;
  }
  p->busy = 0;
  (void)c;
}

// Makes progress on the pipeline's step without waiting; *done once every
// report is in (or the step failed: the error names the worker it waited
// for). A report is read as it comes, so one carrying an error fails the
// step at once.
static rg_status_t pipe_poll(rg_cluster_t *c, pipe_t *p, int *done) {
  *done = 0;
  if (!p->busy) return *done = 1, NULL;
  int n = c->o.layout.n_workers;
  char lb[160];
  rg_status_t st = NULL;
  size_t pending = 0;
  for (size_t k = 0; k < p->nr && !st; k++) {
    bool d = false;
    rg_status_t s = rg_transport_test(p->reqs[k], &d);
    if (s) st = rg_status_wrap(s, "worker %s", wlabel(c, p->owner[k], lb, sizeof lb));
    if (!st && d && k >= p->first_done && !p->taken[k]) {
      p->taken[k] = 1;
      st = take_done(c, p, p->owner[k], p->reqs[k]);
    }
    pending += !d;
  }
  if (!st) st = pump(c, 0.0, NULL);
  for (int i = 0; i < n && !st; i++) {
    if (!in_pipe(c, p, i)) continue;
    char why[128] = "";
    if (exited(&c->w[i], why, sizeof why)) {
      rg_control_event_t ev = {.kind = RG_CONTROL_EVENT_LOST, .worker_id = c->w[i].id};
      snprintf(ev.text, sizeof ev.text, "%s", why);
      on_lost(c, &ev);
    }
    if (c->w[i].lost)
      st = rg_status_make(RG_UNAVAILABLE, "worker %s was lost during step %llu: %s",
                          wlabel(c, i, lb, sizeof lb), (unsigned long long)p->step,
                          c->w[i].lost_why[0] ? c->w[i].lost_why : why);
  }
  // The workers give up on a silent peer at the step's deadline and report
  // whom they waited for; the coordinator waits a little longer, so that
  // report, not a guess, names the culprit.
  double limit = p->deadline.seconds * 1.25 + 0.25;
  if (!st && pending && rg_clock_now() - p->t0 > limit) {
    for (size_t k = 0; k < p->nr && !st; k++)
      if (!rg_transport_req_done(p->reqs[k])) {
        char stages[256], why[256];
        st = rg_status_make(RG_DEADLINE_EXCEEDED,
                            "worker %s did not finish step %llu within %.1f s (it runs %s; %s, "
                            "and a quarter more for its report); the step's requests fail",
                            wlabel(c, p->owner[k], lb, sizeof lb), (unsigned long long)p->step,
                            limit, stage_list(c, p->owner[k], stages, sizeof stages),
                            rg_cluster_deadline_describe(&p->deadline, why, sizeof why));
      }
  }
  if (!st && pending) return NULL;
  for (int i = 0; i < n && !st; i++)
    if (p->sends[i]) st = rg_transport_wait(p->sends[i], c->o.step_timeout_s);
  // A step that went through sets the pace later deadlines are predicted at
  // (a diagnostic rerun does more work per step than it counts).
  if (!st && !(p->flags & RG__STEP_CHECK))
    rg_cluster_pace_add(&p->pace, p->flops_now, p->bytes_now, rg_clock_now() - p->t0);
  if (!st && (p->flags & RG__STEP_TRACE)) {
    int64_t tokens = 0, seqs = 0;
    for (int m = 0; m < p->n_mb_now; m++) tokens += p->st[m].n_tokens, seqs += p->st[m].n_seqs;
    rg__done_t one = {0};
    rg__event_t ev = {
        p->t0,           rg_clock_now(), 3, (uint8_t)p->n_mb_now, (uint16_t)(p - c->pipes),
        (int32_t)tokens, (double)seqs};
    one.events = &ev;
    one.n_events = 1;
    st = add_trace(c, -1, &one);
  }
  pipe_abandon(c, p);
  *done = 1;
  return st;
}

// Polls until the step is done.
static rg_status_t pipe_wait(rg_cluster_t *c, pipe_t *p) {
  double idle = 0;
  for (;;) {
    int done;
    RG_RETURN_IF_ERROR(pipe_poll(c, p, &done));
    if (done) return NULL;
    idle = idle < 1e-3 ? idle + 5e-6 : idle;
    if (idle > 2e-5) rg_clock_sleep(idle);
  }
}

// Builds the pipeline's micro-batches from the entries (two when the layout
// ping-pongs and there are two sequences to split).
static rg_status_t pipe_build(rg_cluster_t *c, pipe_t *p, const rg_step_entry_t *entries, size_t n,
                              int *n_mb, int64_t *tokens) {
  int mb = p->n_mb > 1 && n >= 2 ? 2 : 1;
  size_t split = mb == 2 ? (n + 1) / 2 : n;
  size_t parts[MAX_MB][2] = {{0, split}, {split, n}};
  *tokens = 0;
  for (int m = 0; m < mb; m++) {
    RG_RETURN_IF_ERROR(rg_step_build(&p->sb[m], &p->lim, entries + parts[m][0],
                                     parts[m][1] - parts[m][0], &p->st[m]));
    *tokens += p->st[m].n_tokens;
  }
  if (*tokens > p->bounds.max_tokens)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "a step of %lld tokens; the workers take at most %lld",
                          (long long)*tokens, (long long)p->bounds.max_tokens);
  *n_mb = mb;
  return NULL;
}

static int finite_all(const float *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!isfinite(p[i])) return 0;
  return 1;
}

// Rejoined workers get their stages again before a step.
static rg_status_t take_back(rg_cluster_t *c) {
  RG_RETURN_IF_ERROR(pump(c, 0.0, NULL));
  for (int i = 0; i < c->o.layout.n_workers; i++)
    if (c->w[i].joined && !c->w[i].lost && !c->w[i].ready) {
      say(c, "worker %s rejoined; assigning its stages again", wname(c, i));
      RG_RETURN_IF_ERROR(gather(c, i));
    }
  return NULL;
}

// After a step's logits: non-finite values are diagnosed by running the step
// again with a check after every stage (the same KV writes), naming the
// first hop whose output was not finite.
static rg_status_t check_logits(rg_cluster_t *c, pipe_t *p, float *logits) {
  size_t nl = 0;
  for (int m = 0; m < p->n_mb_now; m++) nl += (size_t)p->st[m].n_logits;
  if (finite_all(logits, nl * (size_t)c->a->vocab)) return NULL;
  RG_RETURN_IF_ERROR(pipe_begin(c, p, p->n_mb_now, p->flags | RG__STEP_CHECK, logits));
  RG_RETURN_IF_ERROR(pipe_wait(c, p));
  char lb[160];
  if (p->bad_hop < 0)
    return rg_status_make(RG_INTERNAL,
                          "the logits are not finite, but every hidden state was: lm_head on %s "
                          "(its final norm or weights) is where they appear",
                          wlabel(c, p->lm_worker, lb, sizeof lb));
  const rg_cluster_hop_t *h = &p->hops[p->bad_hop];
  return rg_status_make(RG_INTERNAL,
                        "non-finite values first appear after %s%s%.0lld on worker %s (check that "
                        "layer's weights)",
                        rg_stage_kind_name(h->kind), h->layer >= 0 ? " at layer " : "",
                        h->layer >= 0 ? (long long)h->layer : 0LL,
                        wlabel(c, h->worker, lb, sizeof lb));
}

rg_status_t rg_cluster_forward(rg_cluster_t *c, const rg_step_entry_t *entries, size_t n,
                               float *logits) {
  if (!n) return NULL;
  if (c->n_pipes != 1)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "a prefill-decode layout runs its two sides through the executor's "
                          "begin and poll, not one forward");
  double t0 = rg_clock_now();
  pipe_t *p = &c->pipes[0];
  RG_RETURN_IF_ERROR(take_back(c));
  int n_mb;
  int64_t tokens;
  RG_RETURN_IF_ERROR(pipe_build(c, p, entries, n, &n_mb, &tokens));
  uint32_t flags = c->o.trace_path ? RG__STEP_TRACE : 0;
  RG_RETURN_IF_ERROR(pipe_begin(c, p, n_mb, flags, logits));
  RG_RETURN_IF_ERROR(pipe_wait(c, p));
  if (p->n_bad_keys)
    return rg_status_make(RG_DATA_CORRUPT,
                          "KV pages reloaded from the capacity tier failed their checksum; the "
                          "step's requests fail rather than use them");
  RG_RETURN_IF_ERROR(check_logits(c, p, logits));
  c->c.tokens += tokens;
  c->c.steps++;
  c->c.seconds += rg_clock_now() - t0;
  return NULL;
}

// ----- Prefill-decode: outbox accounting and transfer orders ---------------------------

static stash_rec_t *find_stash(rg_cluster_t *c, uint64_t key) {
  for (size_t i = 0; i < c->n_stash; i++)
    if (c->stash[i].key == key) return &c->stash[i];
  return NULL;
}

static void free_stash(rg_cluster_t *c, uint64_t key) {
  stash_rec_t *r = find_stash(c, key);
  if (!r) return;
  for (int32_t k = 0; k < r->n; k++) c->outbox_free[c->n_outbox_free++] = r->blocks[k];
  free(r->blocks);
  *r = c->stash[--c->n_stash];
}

static rg_status_t add_stash(rg_cluster_t *c, pipe_t *p, uint64_t key, const rg_step_entry_t *e) {
  if (find_stash(c, key))
    return rg_status_make(RG_INVALID_ARGUMENT, "request %llu is prefilled twice",
                          (unsigned long long)key);
  if (e->n_blocks > c->n_outbox_free)
    return rg_status_make(RG_UNAVAILABLE,
                          "the prefill outbox has %lld free blocks; request %llu needs %d (wait "
                          "for transfers to finish before prefilling more)",
                          (long long)c->n_outbox_free, (unsigned long long)key, (int)e->n_blocks);
  if (c->n_stash == c->cap_stash) {
    size_t cap = c->cap_stash ? c->cap_stash * 2 : 64;
    stash_rec_t *ns = realloc(c->stash, cap * sizeof *ns);
    if (!ns) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
    c->stash = ns, c->cap_stash = cap;
  }
  uint32_t need = p->plan.n_stash + (uint32_t)e->n_blocks;
  if (need > p->plan.cap_stash) {
    uint32_t cap = p->plan.cap_stash ? p->plan.cap_stash : 64;
    while (cap < need) cap *= 2;
    rg__stash_t *ns = realloc(p->plan.stash, cap * sizeof *ns);
    if (!ns) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
    p->plan.stash = ns, p->plan.cap_stash = cap;
  }
  stash_rec_t r = {key, malloc((size_t)e->n_blocks * sizeof(int32_t) + 1), e->n_blocks,
                   e->pos + e->n};
  if (!r.blocks) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
  for (int32_t k = 0; k < e->n_blocks; k++) {
    r.blocks[k] = c->outbox_free[--c->n_outbox_free];
    p->plan.stash[p->plan.n_stash++] = (rg__stash_t){e->blocks[k], r.blocks[k]};
  }
  c->stash[c->n_stash++] = r;
  return NULL;
}

static rg_status_t grow_expect(rg__kvplan_t *pl) {
  if (pl->n_expect < pl->cap_expect) return NULL;
  uint32_t cap = pl->cap_expect ? pl->cap_expect * 2 : 64;
  rg__expect_t *ne = realloc(pl->expect, cap * sizeof *ne);
  if (!ne) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
  pl->expect = ne, pl->cap_expect = cap;
  return NULL;
}

// Sends the order in c->xfer_buf to worker i on its own sequence; the send
// completes in the background (reap_orders).
static rg_status_t send_order(rg_cluster_t *c, int i, size_t len) {
  if (c->n_orders == sizeof c->orders / sizeof c->orders[0]) {
    RG_RETURN_IF_ERROR(rg_transport_wait(c->orders[0], c->o.step_timeout_s));
    rg_transport_req_free(c->orders[0]);
    free(c->order_bufs[0]);
    memmove(c->orders, c->orders + 1, (--c->n_orders) * sizeof c->orders[0]);
    memmove(c->order_bufs, c->order_bufs + 1, c->n_orders * sizeof c->order_bufs[0]);
  }
  uint8_t *copy = malloc(len);
  if (!copy) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
  memcpy(copy, c->xfer_buf, len);
  rg_status_t st =
      rg_transport_send(c->tp, c->w[i].peer, rg__tag(RG__K_XFER, c->w[i].xfer_seq, 0, 0), copy, len,
                        "a transfer order", &c->orders[c->n_orders]);
  if (st) {
    free(copy);
    return st;
  }
  c->order_bufs[c->n_orders++] = copy;
  c->w[i].xfer_seq++;
  return NULL;
}

// Layers [l0, l1) of an imported prompt from prefill worker src into decode
// worker dst, as transfers of at most xfer_max_segments segments each. The
// worker makes one segment per (layer, K|V, run), a run being positions
// inside one source and one destination block (do_xfer in worker.c); the
// positions are walked the same way here and cut where the next run would
// not fit, then layers are split as well if even one run of all of them
// does not. Each piece is its own transfer and its own notice to wait for:
// an 8K-token prompt on 16 layers in 16-token blocks is 16384 segments,
// twice what one notice may carry.
static rg_status_t order_pieces(rg_cluster_t *c, pipe_t *dp, const rg_pd_import_t *im,
                                const stash_rec_t *r, int src, int dst, int slot,
                                int64_t dst_layer_begin, int64_t l0, int64_t l1) {
  const pipe_t *pp = &c->pipes[0];
  const int64_t bp = pp->lim.block_size, bd = dp->lim.block_size;
  int64_t maxs = c->o.xfer_max_segments > 0 ? c->o.xfer_max_segments : RG_TRANSPORT_MAX_SEGMENTS;
  if (maxs > RG_TRANSPORT_MAX_SEGMENTS) maxs = RG_TRANSPORT_MAX_SEGMENTS;
  int64_t lc = l1 - l0;
  if (2 * lc > maxs) lc = maxs / 2 > 0 ? maxs / 2 : 1;
  for (int64_t la = l0; la < l1; la += lc) {
    const int64_t lb = la + lc < l1 ? la + lc : l1, per_run = 2 * (lb - la);
    for (int64_t p0 = im->pos_begin, p1; p0 < im->pos_end; p0 = p1) {
      int64_t segs = 0;
      for (p1 = p0; p1 < im->pos_end && (segs + per_run <= maxs || p1 == p0);) {
        int64_t run = bp - p1 % bp;
        if (bd - p1 % bd < run) run = bd - p1 % bd;
        if (im->pos_end - p1 < run) run = im->pos_end - p1;
        p1 += run, segs += per_run;
      }
      const int64_t d0 = p0 / bd - im->pos_begin / bd;
      rg__xfer_t x = {.xfer = ++c->xfer_id,
                      .key = im->key,
                      .to = (uint32_t)dst,
                      .dst_layer_begin = dst_layer_begin,
                      .dst_n_blocks = dp->lim.n_blocks,
                      .dst_block_size = bd,
                      .layer_begin = la,
                      .layer_end = lb,
                      .pos_begin = p0,
                      .pos_end = p1,
                      .src_block_size = bp,
                      .src = r->blocks,
                      .dst = (int32_t *)im->blocks + d0,
                      .n_src = (uint32_t)r->n,
                      .n_dst = (uint32_t)((p1 - 1) / bd - p0 / bd + 1)};
      memcpy(x.desc, c->w[dst].kv_desc[slot], sizeof x.desc);
      size_t len = 0;
      RG_RETURN_IF_ERROR(rg__xfer_encode(&x, &c->xfer_buf, &c->xfer_cap, &len));
      RG_RETURN_IF_ERROR(send_order(c, src, len));
      RG_RETURN_IF_ERROR(grow_expect(&dp->plan));
      dp->plan.expect[dp->plan.n_expect++] =
          (rg__expect_t){(uint32_t)dst, (uint32_t)src, x.xfer, im->key};
    }
  }
  return NULL;
}

// Orders the prefill workers to write an imported prompt's KV into the
// decode workers that hold the same layers, and adds what each decode worker
// must wait for to the decode step's plan.
static rg_status_t order_import(rg_cluster_t *c, pipe_t *dp, const rg_pd_import_t *im) {
  stash_rec_t *r = find_stash(c, im->key);
  if (!r)
    return rg_status_make(RG_INVALID_ARGUMENT, "request %llu is imported but was never prefilled",
                          (unsigned long long)im->key);
  if (im->pos_end > r->n_pos)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "request %llu imports positions up to %lld; its prefill computed %lld",
                          (unsigned long long)im->key, (long long)im->pos_end, (long long)r->n_pos);
  const rg_cluster_layout_t *L = &c->o.layout;
  for (int src = 0; src < L->n_workers; src++) {
    if (c->w[src].pipe != 0) continue;
    for (int ss = 0; ss < L->workers[src].n_stages; ss++) {
      const rg_stage_spec_t *a = &L->workers[src].stages[ss];
      if (a->kind != RG_STAGE_ATTENTION) continue;
      for (int dst = 0; dst < L->n_workers; dst++) {
        if (c->w[dst].pipe != (int)(dp - c->pipes)) continue;
        for (int ds = 0, ai = 0; ds < L->workers[dst].n_stages; ds++) {
          const rg_stage_spec_t *b = &L->workers[dst].stages[ds];
          if (b->kind != RG_STAGE_ATTENTION) continue;
          int slot = ai++;
          int64_t l0 = a->layer_begin > b->layer_begin ? a->layer_begin : b->layer_begin;
          int64_t l1 = a->layer_end < b->layer_end ? a->layer_end : b->layer_end;
          if (l0 >= l1) continue;
          if (!c->w[dst].has_desc[slot])
            return rg_status_make(RG_INTERNAL,
                                  "worker %s sent no KV region for its layers "
                                  "[%lld, %lld)",
                                  wname(c, dst), (long long)b->layer_begin,
                                  (long long)b->layer_end);
          RG_RETURN_IF_ERROR(order_pieces(c, dp, im, r, src, dst, slot, b->layer_begin, l0, l1));
        }
      }
    }
  }
  return NULL;
}

// The capacity tier's copies, run with the next step of the pipeline it
// serves: each offload is a push in that step's plan (every attention worker
// writes its layers of the block into its slice of the tier's memory, before
// its forward), and the tier worker is told which notices to check; each
// reload is an order to the tier worker to write the block back, which the
// attention workers wait for before their forward. The tier handles its
// orders in sequence, so a block offloaded and reloaded in one step comes
// back only after it has arrived.
static rg_status_t x_tier(void *impl, const rg_engine_copy_t *off, size_t n_off,
                          const rg_engine_copy_t *rel, size_t n_rel) {
  rg_cluster_t *c = impl;
  if (!n_off && !n_rel) return NULL;
  int t = c->tier_worker;
  char lb[160];
  if (t < 0) return rg_status_make(RG_INVALID_ARGUMENT, "this layout has no capacity tier");
  if (c->w[t].lost || !c->w[t].ready || !c->w[t].has_desc[0])
    return rg_status_make(RG_UNAVAILABLE, "the capacity tier %s is not there (%s)",
                          wlabel(c, t, lb, sizeof lb),
                          c->w[t].lost_why[0] ? c->w[t].lost_why : "not ready");
  pipe_t *p = &c->pipes[c->n_pipes - 1];
  rg__expect_order_t *e = c->expect_order;
  e->n = 0;
  for (size_t k = 0; k < n_off; k++) {
    if (off[k].dst < 0 || off[k].dst >= c->tier_blocks || off[k].src < 0 ||
        off[k].src >= p->lim.n_blocks)
      return rg_status_make(RG_INVALID_ARGUMENT, "an offload of block %d to tier block %d",
                            (int)off[k].src, (int)off[k].dst);
    for (int sl = 0; sl < c->n_slices; sl++) {
      const tier_slice_t *ts = &c->slices[sl];
      if (p->plan.n_push == p->plan.cap_push) {
        uint32_t cap = p->plan.cap_push ? p->plan.cap_push * 2 : 64;
        rg__push_t *np = realloc(p->plan.push, cap * sizeof *np);
        if (!np) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
        p->plan.push = np, p->plan.cap_push = cap;
      }
      uint64_t off_bytes = ts->base + (uint64_t)off[k].dst * ts->per;
      uint64_t id = ++c->xfer_id;
      p->plan.push[p->plan.n_push++] =
          (rg__push_t){(uint32_t)ts->worker, (uint32_t)ts->slot, off[k].src, off_bytes, id};
      if (e->n == RG__EXPECT_MAX) {
        size_t len = 0;
        RG_RETURN_IF_ERROR(rg__expect_encode(e, &c->xfer_buf, &c->xfer_cap, &len));
        RG_RETURN_IF_ERROR(send_order(c, t, len));
        e->n = 0;
      }
      e->from[e->n] = (uint32_t)ts->worker;
      e->xfer[e->n] = id;
      e->offset[e->n] = off_bytes;
      e->bytes[e->n++] = ts->per;
    }
  }
  if (n_off) {
    memcpy(p->plan.tier_desc, c->w[t].kv_desc[0], sizeof p->plan.tier_desc);
    size_t len = 0;
    RG_RETURN_IF_ERROR(rg__expect_encode(e, &c->xfer_buf, &c->xfer_cap, &len));
    RG_RETURN_IF_ERROR(send_order(c, t, len));
  }
  for (size_t k = 0; k < n_rel; k++) {
    if (rel[k].src < 0 || rel[k].src >= c->tier_blocks || rel[k].dst < 0 ||
        rel[k].dst >= p->lim.n_blocks)
      return rg_status_make(RG_INVALID_ARGUMENT, "a reload of tier block %d to block %d",
                            (int)rel[k].src, (int)rel[k].dst);
    for (int sl = 0; sl < c->n_slices; sl++) {
      const tier_slice_t *ts = &c->slices[sl];
      if (!c->w[ts->worker].has_desc[ts->slot])
        return rg_status_make(RG_INTERNAL, "worker %s sent no KV region", wname(c, ts->worker));
      int32_t src = rel[k].src, dst = rel[k].dst;
      rg__xfer_t x = {.xfer = ++c->xfer_id,
                      .key = RG__KEY_RELOAD,
                      .src_kind = 1,
                      .src_base = ts->base,
                      .src_per = ts->per,
                      .src_block_bytes = ts->block_bytes,
                      .src_layer_begin = ts->layer_begin,
                      .to = (uint32_t)ts->worker,
                      .dst_layer_begin = ts->layer_begin,
                      .dst_n_blocks = p->lim.n_blocks,
                      .dst_block_size = p->lim.block_size,
                      .layer_begin = ts->layer_begin,
                      .layer_end = ts->layer_end,
                      .pos_begin = 0,
                      .pos_end = p->lim.block_size,
                      .src_block_size = p->lim.block_size,
                      .src = &src,
                      .dst = &dst,
                      .n_src = 1,
                      .n_dst = 1};
      memcpy(x.desc, c->w[ts->worker].kv_desc[ts->slot], sizeof x.desc);
      size_t len = 0;
      RG_RETURN_IF_ERROR(rg__xfer_encode(&x, &c->xfer_buf, &c->xfer_cap, &len));
      RG_RETURN_IF_ERROR(send_order(c, t, len));
      RG_RETURN_IF_ERROR(grow_expect(&p->plan));
      p->plan.expect[p->plan.n_expect++] =
          (rg__expect_t){(uint32_t)ts->worker, (uint32_t)t, x.xfer, RG__KEY_RELOAD};
    }
  }
  return NULL;
}

// Frees the transfer orders whose sends have completed.
static void reap_orders(rg_cluster_t *c) {
  size_t k = 0;
  for (size_t i = 0; i < c->n_orders; i++) {
    bool done = false;
    rg_status_t s = rg_transport_test(c->orders[i], &done);
    if (done || s) {
      rg_status_free(s);
      rg_transport_req_free(c->orders[i]);
      free(c->order_bufs[i]);
    } else {
      c->orders[k] = c->orders[i];
      c->order_bufs[k++] = c->order_bufs[i];
    }
  }
  c->n_orders = k;
}

// ----- The executor and reports --------------------------------------------------------

static rg_status_t x_forward(void *impl, const rg_step_entry_t *e, size_t n, float *logits) {
  return rg_cluster_forward(impl, e, n, logits);
}
static rg_status_t x_swap(void *impl, const rg_engine_copy_t *out, size_t n_out,
                          const rg_engine_copy_t *in, size_t n_in) {
  return n_out || n_in ? rg_status_make(RG_UNIMPLEMENTED,
                                        "preemption by swap is not run across workers yet; use "
                                        "--preempt recompute")
                       : NULL;
}
static void x_counters(void *impl, rg_engine_counters_t *out) {
  rg_cluster_t *c = impl;
  *out = c->c;
  for (int k = 0; c->n_pipes == 2 && k < 2; k++) {
    out->tokens += c->pipes[k].c.tokens;
    out->steps += c->pipes[k].c.steps;
    out->seconds += c->pipes[k].c.seconds;
  }
  out->weight_bytes = out->kv_bytes = out->flops = 0;
  for (int i = 0; i < c->o.layout.n_workers; i++)
    for (int s = 0; s < c->o.layout.workers[i].n_stages; s++) {
      out->weight_bytes += c->w[i].stages[s].weight_bytes;
      out->kv_bytes += c->w[i].stages[s].kv_bytes;
      out->flops += c->w[i].stages[s].flops;
    }
}

// Prefill-decode: begin a step on one side.
static rg_status_t x_begin(void *impl, int side, const rg_step_entry_t *e, const uint64_t *keys,
                           size_t n, const rg_pd_import_t *im, size_t n_im, float *logits) {
  rg_cluster_t *c = impl;
  if (c->n_pipes != 2 || side < 0 || side > 1)
    return rg_status_make(RG_INVALID_ARGUMENT, "side %d of a layout with %d pipelines", side,
                          c->n_pipes);
  pipe_t *p = &c->pipes[side];
  if (p->busy)
    return rg_status_make(RG_INVALID_ARGUMENT, "the %s side has a step in flight",
                          rg_cluster_role_name(p->role));
  RG_RETURN_IF_ERROR(take_back(c));
  reap_orders(c);
  p->n_keys_now = 0;
  size_t want = side ? n_im : n;
  if (want > p->cap_keys_now) {
    uint64_t *nk = realloc(p->keys_now, (want + 1) * sizeof *nk);
    if (!nk) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
    p->keys_now = nk, p->cap_keys_now = want + 1;
  }
  int n_mb = 1;
  int64_t tokens = 0;
  if (n) RG_RETURN_IF_ERROR(pipe_build(c, p, e, n, &n_mb, &tokens));
  rg_status_t st = NULL;
  if (side == 0) {
    for (size_t k = 0; k < n && !st; k++)
      if (e[k].want_logits) {
        st = add_stash(c, p, keys[k], &e[k]);
        if (!st) p->keys_now[p->n_keys_now++] = keys[k];
      }
  } else {
    for (size_t k = 0; k < n_im && !st; k++) {
      st = order_import(c, p, &im[k]);
      if (!st) p->keys_now[p->n_keys_now++] = im[k].key;
    }
  }
  if (!st && !n) {
    // Imports only (nothing to compute yet): a step of no entries still
    // carries the plan, so build an empty micro-batch.
    st = rg_step_build(&p->sb[0], &p->lim, NULL, 0, &p->st[0]);
  }
  p->tokens_now = tokens;
  p->t_begin = rg_clock_now();
  p->logits = logits;
  if (!st) st = pipe_begin(c, p, n_mb, c->o.trace_path ? RG__STEP_TRACE : 0, logits);
  if (st && side == 0)
    for (size_t k = 0; k < p->n_keys_now; k++) free_stash(c, p->keys_now[k]);
  return st;
}

static rg_status_t x_poll(void *impl, int side, int *done, uint64_t *bad, size_t cap,
                          size_t *n_bad) {
  rg_cluster_t *c = impl;
  *n_bad = 0;
  *done = 1;
  if (c->n_pipes != 2 || side < 0 || side > 1)
    return rg_status_make(RG_INVALID_ARGUMENT, "side %d of a layout with %d pipelines", side,
                          c->n_pipes);
  pipe_t *p = &c->pipes[side];
  if (!p->busy) return NULL;
  rg_status_t st = pipe_poll(c, p, done);
  if (!*done) return st;
  if (!st && p->st[0].n_logits) st = check_logits(c, p, p->logits);
  if (side == 1 || st)  // imported (or failed): the outbox copies are no longer needed
    for (size_t k = 0; k < p->n_keys_now; k++)
      if (side == 1 || st) free_stash(c, p->keys_now[k]);
  for (uint32_t k = 0; k < p->n_bad_keys && *n_bad < cap; k++) {
    if (p->bad_keys[k] == RG__KEY_RELOAD && !st)
      st = rg_status_make(RG_DATA_CORRUPT,
                          "KV pages reloaded from the capacity tier failed their checksum; the "
                          "step's requests fail rather than use them");
    bad[(*n_bad)++] = p->bad_keys[k];
  }
  if (!st) {
    p->c.tokens += p->tokens_now;
    p->c.steps++;
    p->c.seconds += rg_clock_now() - p->t_begin;
  }
  return st;
}

static void x_forget(void *impl, uint64_t key) {
  free_stash(impl, key);
}

static void x_side_counters(void *impl, int side, rg_engine_counters_t *out) {
  rg_cluster_t *c = impl;
  memset(out, 0, sizeof *out);
  if (side < 0 || side >= c->n_pipes) return;
  *out = c->pipes[side].c;
  for (int i = 0; i < c->o.layout.n_workers; i++)
    if (c->w[i].pipe == side)
      for (int s = 0; s < c->o.layout.workers[i].n_stages; s++) {
        out->weight_bytes += c->w[i].stages[s].weight_bytes;
        out->kv_bytes += c->w[i].stages[s].kv_bytes;
        out->flops += c->w[i].stages[s].flops;
      }
}

static uint64_t x_kv_losses(void *impl, int side, char *why, size_t cap) {
  rg_cluster_t *c = impl;
  if (side < 0 || side >= c->n_pipes) return 0;
  if (why && cap) snprintf(why, cap, "%s", c->kv_lost_why[side]);
  return c->kv_losses[side];
}

rg_executor_t rg_cluster_executor(rg_cluster_t *c) {
  const pipe_t *d = &c->pipes[c->n_pipes - 1];
  rg_executor_t x = {.impl = c,
                     .forward = x_forward,
                     .swap = x_swap,
                     .counters = x_counters,
                     .tokenizer = rg_model_tokenizer(c->model),
                     .vocab = c->a->vocab,
                     .kv_blocks = d->lim.n_blocks,
                     .max_context = d->lim.max_context,
                     .block_size = (int)d->lim.block_size,
                     .max_seqs = c->max_seqs,
                     .kv_losses = x_kv_losses};
  if (c->tier_worker >= 0) {
    x.tier = x_tier;
    x.tier_blocks = c->tier_blocks;
  }
  if (c->n_pipes == 2) {
    x.begin = x_begin;
    x.poll = x_poll;
    x.forget = x_forget;
    x.side_counters = x_side_counters;
    x.prefill_kv_blocks = c->pipes[0].lim.n_blocks;
    x.prefill_block_size = (int)c->pipes[0].lim.block_size;
    x.outbox_blocks = c->outbox_blocks;
  }
  return x;
}

size_t rg_cluster_stage_count(const rg_cluster_t *c) {
  size_t n = 0;
  for (int i = 0; i < c->o.layout.n_workers; i++) n += (size_t)c->o.layout.workers[i].n_stages;
  return n;
}

void rg_cluster_stage_info(const rg_cluster_t *c, size_t k, rg_cluster_stage_info_t *out) {
  memset(out, 0, sizeof *out);
  for (int i = 0; i < c->o.layout.n_workers; i++) {
    const rg_cluster_worker_t *w = &c->o.layout.workers[i];
    if (k >= (size_t)w->n_stages) {
      k -= (size_t)w->n_stages;
      continue;
    }
    const rg_stage_spec_t *sp = &w->stages[k];
    if (sp->kind == RG_STAGE_EMBED || sp->kind == RG_STAGE_LM_HEAD)
      snprintf(out->stage, sizeof out->stage, "%s on %s", rg_stage_kind_name(sp->kind), w->device);
    else
      snprintf(out->stage, sizeof out->stage, "%s[%lld,%lld)%s on %s", rg_stage_kind_name(sp->kind),
               (long long)sp->layer_begin, (long long)sp->layer_end,
               sp->experts ? " (expert subset)" : "", w->device);
    snprintf(out->worker, sizeof out->worker, "%s", w->name);
    snprintf(out->plays, sizeof out->plays, "%s", w->plays);
    out->kind = sp->kind;
    out->c = c->w[i].stages[k];
    return;
  }
}

size_t rg_cluster_link_count(const rg_cluster_t *c) {
  size_t n = 0;
  for (int i = 0; i < c->o.layout.n_workers; i++) n += c->w[i].n_links;
  return n;
}

void rg_cluster_link_info(const rg_cluster_t *c, size_t k, rg_cluster_link_info_t *out) {
  memset(out, 0, sizeof *out);
  for (int i = 0; i < c->o.layout.n_workers; i++) {
    if (k >= c->w[i].n_links) {
      k -= c->w[i].n_links;
      continue;
    }
    const rg__link_t *l = &c->w[i].links[k];
    uint32_t peer = l->peer & ~RG__LINK_INBOUND;
    const char *other = peer == 0                                 ? "coordinator"
                        : peer <= (uint32_t)c->o.layout.n_workers ? wname(c, (int)peer - 1)
                                                                  : "?";
    int in = (l->peer & RG__LINK_INBOUND) != 0;
    snprintf(out->from, sizeof out->from, "%s", in ? other : wname(c, i));
    snprintf(out->to, sizeof out->to, "%s", in ? wname(c, i) : other);
    out->kv = in;
    out->bytes = l->bytes;
    out->seconds = l->seconds;
    out->messages = l->messages;
    return;
  }
}

// ----- Shutting down -----------------------------------------------------------------

void rg_cluster_destroy(rg_cluster_t *c) {
  if (!c) return;
  if (c->srv) {
    rg_control_shutdown_t sd = RIDGE__CONTROL__SHUTDOWN__INIT;
    sd.reason = "the run is over";
    rg_status_free(rg_control_server_send(c->srv, RG_CONTROL_ALL, &sd.base));
    // The Shutdown goes out on the control loop's thread: wait (3 s at most)
    // for each worker to read it and close, so none sees its coordinator
    // vanish first and exits with an error.
    double until = rg_clock_now() + 3;
    for (;;) {
      int open = 0;
      for (int i = 0; i < c->o.layout.n_workers; i++) open += c->w[i].joined && !c->w[i].lost;
      if (!open || rg_clock_now() > until) break;
      rg_status_t st = pump(c, 0.05, NULL);
      if (st) {
        rg_status_free(st);
        break;
      }
    }
  }
  // Workers this coordinator started get 5 s to leave, then SIGTERM, then SIGKILL.
  double deadline = rg_clock_now() + 5;
  for (int i = 0; i < c->o.layout.n_workers; i++) {
    if (c->w[i].pid <= 0) continue;
    int status;
    while (waitpid(c->w[i].pid, &status, WNOHANG) == 0) {
      if (rg_clock_now() > deadline) {
        kill(c->w[i].pid, SIGTERM);
        rg_clock_sleep(0.2);
        if (waitpid(c->w[i].pid, &status, WNOHANG) == 0) {
          kill(c->w[i].pid, SIGKILL);
          waitpid(c->w[i].pid, &status, 0);
        }
        break;
      }
      rg_clock_sleep(0.01);
    }
    rg_transport_forget_process(c->w[i].pid);  // what a killed worker left in /dev/shm
    c->w[i].pid = -1;
  }
  write_trace(c);
  free(c->trace);
  free(c->faults);
  for (int i = 0; i < RG_CLUSTER_MAX_WORKERS; i++) free(c->w[i].done_buf);
  for (int k = 0; k < 2; k++) {
    pipe_t *p = &c->pipes[k];
    pipe_abandon(c, p);
    for (int m = 0; m < MAX_MB; m++) rg_step_buf_free(&p->sb[m]);
    free(p->msg);
    free(p->keys_now);
    rg__kvplan_free(&p->plan);
  }
  for (size_t i = 0; i < c->n_orders; i++) {
    rg_transport_req_free(c->orders[i]);
    free(c->order_bufs[i]);
  }
  while (c->n_stash) free_stash(c, c->stash[0].key);
  free(c->stash);
  free(c->outbox_free);
  free(c->xfer_buf);
  free(c->expect_order);
  rg_transport_destroy(c->tp);
  rg_control_server_destroy(c->srv);
  rg_model_close(c->model);
  free(c);
}
