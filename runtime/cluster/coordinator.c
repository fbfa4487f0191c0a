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

#include "base/fileio.h"
#include "ops/convert.h"
#include "runtime/cluster/cluster_impl.h"
#include "runtime/step.h"

extern char **environ;

#define MAX_MB 2
#define DONE_CAP (4u << 20)

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void nap(double s) {
  struct timespec t = {0, (long)(s * 1e9)};
  nanosleep(&t, NULL);
}

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
  rg__link_t links[RG_CLUSTER_MAX_WORKERS + 1];
  uint32_t n_links;
  uint8_t *done_buf;
} cworker_t;

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
  rg_cluster_hop_t hops[RG_CLUSTER_MAX_HOPS];
  size_t n_hops;
  int lm_worker;
  rg_step_limits_t lim;
  int max_seqs, n_mb;
  rg_dtype_t kv_dtype;
  rg__step_bounds_t bounds;
  rg_step_buf_t sb[MAX_MB];
  rg_step_t st[MAX_MB];
  uint8_t *msg;
  size_t msg_cap, msg_len;
  uint64_t step;
  uint64_t epoch;  // of the last PeerTable sent
  rg_engine_counters_t c;
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
  if (c->o.provider) argv[k++] = "--provider", argv[k++] = c->o.provider;
  argv[k] = NULL;
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0)
    return rg_status_make(RG_UNAVAILABLE, "cannot start worker %s: %s", w->name, strerror(errno));
  if (pid == 0) {
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

static void on_lost(rg_cluster_t *c, const rg_control_event_t *ev) {
  int i = find_by_id(c, ev->worker_id);
  if (i < 0) return;
  c->w[i].lost = 1;
  snprintf(c->w[i].lost_why, sizeof c->w[i].lost_why, "%s", ev->text);
  if (c->tp && c->w[i].ready) rg_transport_peer_fail(c->tp, c->w[i].peer, ev->text);
}

// Handles control events for up to `timeout` seconds (0: only what is queued).
static rg_status_t pump(rg_cluster_t *c, double timeout, rg_control_event_t *keep) {
  rg_control_event_t ev;
  RG_RETURN_IF_ERROR(rg_control_server_recv(c->srv, timeout, &ev));
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
  char opts[12][2][64];
  int no = 0;
#define OPT(k, ...) \
  (snprintf(opts[no][0], 64, "%s", k), snprintf(opts[no][1], 64, __VA_ARGS__), no++)
  OPT("kv_dtype", "%s", rg_dtype_name(c->kv_dtype));
  OPT("max_context", "%lld", (long long)c->lim.max_context);
  OPT("micro_batches", "%d", c->n_mb);
  OPT("max_tokens", "%lld", (long long)c->bounds.max_tokens);
  OPT("max_seqs", "%lld", (long long)c->bounds.max_seqs);
  OPT("max_table", "%lld", (long long)c->bounds.max_table);
  OPT("step_timeout_ms", "%lld", (long long)(c->o.step_timeout_s * 1e3));
  OPT("copy_weights", "%d", c->o.engine.load == RG_LOAD_COPY);
  OPT("next_step", "%llu", (unsigned long long)c->step + 1);
#undef OPT
  rg_control_option_t o[12], *op[12];
  for (int k = 0; k < no; k++) {
    rg_control_option_t init = RIDGE__CONTROL__OPTION__INIT;
    o[k] = init;
    o[k].key = opts[k][0];
    o[k].value = opts[k][1];
    op[k] = &o[k];
  }
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
  as.kv_block_size = (uint32_t)c->lim.block_size;
  as.kv_block_count = (uint64_t)c->lim.n_blocks;
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
  double deadline = now_s() + (c->o.join_timeout_s > 0 ? c->o.join_timeout_s : 30);
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
    if (now_s() > deadline)
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
    if (now_s() > deadline)
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
  RG_RETURN_IF_ERROR(rg_cluster_layout_hops(c->a, &o->layout, RG_CLUSTER_ROLE_ALL, c->hops,
                                            RG_CLUSTER_MAX_HOPS, &c->n_hops));
  c->lm_worker = c->hops[c->n_hops - 1].worker;
  c->n_mb = o->layout.micro_batches > 1 ? 2 : 1;
  const rg_engine_options_t *eo = &o->engine;
  c->max_seqs = eo->max_seqs > 0 ? eo->max_seqs : 16;
  int64_t max_ctx = eo->max_context > 0 ? eo->max_context : 4096;
  if (c->a->max_context > 0 && max_ctx > c->a->max_context) max_ctx = c->a->max_context;
  int64_t bs = eo->block_size > 0 ? eo->block_size : 16;
  int64_t kv_tokens = eo->kv_tokens > 0 ? eo->kv_tokens : max_ctx * c->max_seqs;
  c->lim = (rg_step_limits_t){c->a->vocab, max_ctx, bs, (kv_tokens + bs - 1) / bs};
  c->kv_dtype = eo->kv_dtype_set ? eo->kv_dtype : RG_BF16;
  c->bounds = (rg__step_bounds_t){8192, c->max_seqs, c->lim.n_blocks};
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
  return gather(c, -1);
}

rg_status_t rg_cluster_create(const rg_cluster_options_t *o, rg_cluster_t **out) {
  *out = NULL;
  rg_cluster_t *c = calloc(1, sizeof *c);
  if (!c) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
  c->o = *o;
  c->t0 = now_s();
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
  int first = 1;
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
    const rg_cluster_hop_t *h = e->hop < c->n_hops ? &c->hops[e->hop] : NULL;
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

// A worker's report of a step: its counters, links and trace events, and
// its error if the step failed there.
static rg_status_t take_done(rg_cluster_t *c, int i, rg_transport_req_t *req, int *bad_hop) {
  char lb[160];
  rg__done_t d;
  rg_status_t st = rg__done_decode(c->w[i].done_buf, rg_transport_req_bytes(req), &d);
  if (st) return rg_status_wrap(st, "worker %s", wlabel(c, i, lb, sizeof lb));
  if (d.step != c->step)
    st = rg_status_make(RG_INTERNAL, "worker %s reported step %llu for step %llu",
                        wlabel(c, i, lb, sizeof lb), (unsigned long long)d.step,
                        (unsigned long long)c->step);
  else if (d.status)
    st = rg_status_make((rg_code_t)d.status, "worker %s: %s", wlabel(c, i, lb, sizeof lb), d.text);
  for (uint32_t s = 0; s < d.n_stages && s < RG_CLUSTER_MAX_STAGES; s++)
    c->w[i].stages[s] = d.stages[s];
  memcpy(c->w[i].links, d.links, d.n_links * sizeof d.links[0]);
  c->w[i].n_links = d.n_links;
  if (bad_hop && d.bad_hop >= 0 && (*bad_hop < 0 || d.bad_hop < *bad_hop)) *bad_hop = d.bad_hop;
  if (!st) st = add_trace(c, i, &d);
  free(d.events);
  return st;
}

// Runs one step on every worker: STEP out, logits and DONE back. *bad_hop
// (with RG__STEP_CHECK) gets the first hop whose output was not finite.
static rg_status_t run_step(rg_cluster_t *c, int n_mb, uint32_t flags, float *logits,
                            int *bad_hop) {
  int n = c->o.layout.n_workers;
  char lb[160];
  for (int i = 0; i < n; i++)
    if (c->w[i].lost || !c->w[i].ready)
      return rg_status_make(
          RG_UNAVAILABLE, "worker %s is lost (%s); its stages cannot run until it rejoins",
          wlabel(c, i, lb, sizeof lb), c->w[i].lost_why[0] ? c->w[i].lost_why : "not joined");
  c->step++;
  // The message: header, then each micro-batch's step.
  c->msg_len = 0;
  uint8_t head[RG__STEP_HEAD];
  memcpy(head, "RGSP", 4);
  memcpy(head + 4, &c->step, 8);
  memcpy(head + 12, &flags, 4);
  uint32_t nm = (uint32_t)n_mb, epoch = (uint32_t)c->epoch;
  memcpy(head + 16, &nm, 4);
  memcpy(head + 20, &epoch, 4);
  if (c->msg_cap < RG__STEP_HEAD) {
    uint8_t *nb = realloc(c->msg, 4096);
    if (!nb) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
    c->msg = nb;
    c->msg_cap = 4096;
  }
  memcpy(c->msg, head, RG__STEP_HEAD);
  c->msg_len = RG__STEP_HEAD;
  for (int m = 0; m < n_mb; m++)
    RG_RETURN_IF_ERROR(rg_step_encode(&c->st[m], &c->msg, &c->msg_cap, &c->msg_len));
  // Receives first, then the sends.
  rg_transport_req_t *reqs[RG_CLUSTER_MAX_WORKERS + MAX_MB * 2 + 1] = {0};
  int owner[RG_CLUSTER_MAX_WORKERS + MAX_MB * 2 + 1];
  size_t nr = 0, row = 0;
  rg_status_t st = NULL;
  for (int m = 0; m < n_mb && !st; m++) {
    size_t lbytes = (size_t)c->st[m].n_logits * (size_t)c->a->vocab * sizeof(float);
    if (lbytes) {
      owner[nr] = c->lm_worker;
      st = rg_transport_recv(c->tp, c->w[c->lm_worker].peer, rg__tag(RG__K_LOGITS, c->step, m, 0),
                             logits + row * (size_t)c->a->vocab, lbytes, "logits", &reqs[nr++]);
    }
    row += (size_t)c->st[m].n_logits;
  }
  size_t first_done = nr;
  int taken[RG_CLUSTER_MAX_WORKERS + MAX_MB * 2 + 1] = {0};
  for (int i = 0; i < n && !st; i++) {
    if (!c->w[i].done_buf && !(c->w[i].done_buf = malloc(DONE_CAP)))
      st = rg_status_make(RG_OUT_OF_MEMORY, "oom");
    owner[nr] = i;
    if (!st)
      st = rg_transport_recv(c->tp, c->w[i].peer, rg__tag(RG__K_DONE, c->step, 0, 0),
                             c->w[i].done_buf, DONE_CAP, "step report", &reqs[nr++]);
  }
  rg_transport_req_t *sends[RG_CLUSTER_MAX_WORKERS] = {0};
  for (int i = 0; i < n && !st; i++)
    st = rg_transport_send(c->tp, c->w[i].peer, rg__tag(RG__K_STEP, c->step, 0, 0), c->msg,
                           c->msg_len, "a step", &sends[i]);
  // Wait for everything, watching the control plane for lost workers.
  double t0 = now_s(), idle = 0;
  while (!st) {
    size_t pending = 0;
    for (size_t k = 0; k < nr && !st; k++) {
      bool done = false;
      rg_status_t s = rg_transport_test(reqs[k], &done);
      if (s) st = rg_status_wrap(s, "worker %s", wlabel(c, owner[k], lb, sizeof lb));
      // A report is read as it comes: one carrying an error (a worker that
      // waited in vain for a peer names it) fails the step at once.
      if (!st && done && k >= first_done && !taken[k]) {
        taken[k] = 1;
        st = take_done(c, owner[k], reqs[k], bad_hop);
      }
      pending += !done;
    }
    if (st || !pending) break;
    RG_RETURN_IF_ERROR(pump(c, 0.0, NULL));
    for (int i = 0; i < n && !st; i++) {
      char why[128];
      if (exited(&c->w[i], why, sizeof why))
        on_lost(c, &(rg_control_event_t){.kind = RG_CONTROL_EVENT_LOST, .worker_id = c->w[i].id});
      if (c->w[i].lost)
        st = rg_status_make(RG_UNAVAILABLE, "worker %s was lost during step %llu: %s",
                            wlabel(c, i, lb, sizeof lb), (unsigned long long)c->step,
                            c->w[i].lost_why[0] ? c->w[i].lost_why : why);
    }
    // The workers give up on a silent peer after step_timeout_s and report
    // whom they waited for; the coordinator waits a little longer, so that
    // report, not a guess, names the culprit.
    if (!st && now_s() - t0 > c->o.step_timeout_s * 1.25 + 0.25) {
      for (size_t k = 0; k < nr && !st; k++)
        if (!rg_transport_req_done(reqs[k])) {
          const cworker_t *w = &c->w[owner[k]];
          const rg_cluster_worker_t *lw = &c->o.layout.workers[owner[k]];
          char stages[256] = "";
          size_t u = 0;
          for (int s = 0; s < lw->n_stages && u < sizeof stages - 40; s++)
            u += (size_t)snprintf(stages + u, sizeof stages - u, "%s%s[%lld,%lld)", s ? ", " : "",
                                  rg_stage_kind_name(lw->stages[s].kind),
                                  (long long)lw->stages[s].layer_begin,
                                  (long long)lw->stages[s].layer_end);
          st = rg_status_make(RG_DEADLINE_EXCEEDED,
                              "worker %s did not finish step %llu within %.1f s (it runs %s); the "
                              "step's requests fail",
                              wlabel(c, owner[k], lb, sizeof lb), (unsigned long long)c->step,
                              c->o.step_timeout_s * 1.25 + 0.25, stages);
          (void)w;
        }
    }
    if (st) break;
    idle = idle < 1e-3 ? idle + 5e-6 : idle;
    if (idle > 2e-5) nap(idle);
  }
  for (size_t k = first_done; k < nr && !st; k++)
    if (!taken[k]) st = take_done(c, owner[k], reqs[k], bad_hop);
  for (size_t k = 0; k < nr; k++) rg_transport_req_free(reqs[k]);
  for (int i = 0; i < n; i++) {
    if (sends[i] && !st) st = rg_transport_wait(sends[i], c->o.step_timeout_s);
    rg_transport_req_free(sends[i]);
  }
  return st;
}

static int finite_all(const float *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!isfinite(p[i])) return 0;
  return 1;
}

rg_status_t rg_cluster_forward(rg_cluster_t *c, const rg_step_entry_t *entries, size_t n,
                               float *logits) {
  if (!n) return NULL;
  double t0 = now_s();
  // Rejoined workers get their stages again first.
  RG_RETURN_IF_ERROR(pump(c, 0.0, NULL));
  for (int i = 0; i < c->o.layout.n_workers; i++)
    if (c->w[i].joined && !c->w[i].lost && !c->w[i].ready) {
      say(c, "worker %s rejoined; assigning its stages again", wname(c, i));
      RG_RETURN_IF_ERROR(gather(c, i));
    }
  int n_mb = c->n_mb > 1 && n >= 2 ? 2 : 1;
  size_t split = n_mb == 2 ? (n + 1) / 2 : n;
  size_t parts[MAX_MB][2] = {{0, split}, {split, n}};
  int64_t tokens = 0;
  for (int m = 0; m < n_mb; m++) {
    RG_RETURN_IF_ERROR(rg_step_build(&c->sb[m], &c->lim, entries + parts[m][0],
                                     parts[m][1] - parts[m][0], &c->st[m]));
    tokens += c->st[m].n_tokens;
  }
  if (tokens > c->bounds.max_tokens)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "a step of %lld tokens; the workers take at most %lld", (long long)tokens,
                          (long long)c->bounds.max_tokens);
  uint32_t flags = c->o.trace_path ? RG__STEP_TRACE : 0;
  RG_RETURN_IF_ERROR(run_step(c, n_mb, flags, logits, NULL));
  size_t nl = 0;
  for (int m = 0; m < n_mb; m++) nl += (size_t)c->st[m].n_logits;
  if (!finite_all(logits, nl * (size_t)c->a->vocab)) {
    // Run the step again with a check after every stage: the same KV
    // writes, the first non-finite output named.
    int bad = -1;
    RG_RETURN_IF_ERROR(run_step(c, n_mb, flags | RG__STEP_CHECK, logits, &bad));
    char lb[160];
    if (bad < 0)
      return rg_status_make(
          RG_INTERNAL,
          "the logits are not finite, but every hidden state was: lm_head on %s (its "
          "final norm or weights) is where they appear",
          wlabel(c, c->lm_worker, lb, sizeof lb));
    const rg_cluster_hop_t *h = &c->hops[bad];
    return rg_status_make(
        RG_INTERNAL,
        "non-finite values first appear after %s%s%.0lld on worker %s (check that "
        "layer's weights)",
        rg_stage_kind_name(h->kind), h->layer >= 0 ? " at layer " : "",
        h->layer >= 0 ? (long long)h->layer : 0LL, wlabel(c, h->worker, lb, sizeof lb));
  }
  c->c.tokens += tokens;
  c->c.steps++;
  c->c.seconds += now_s() - t0;
  return NULL;
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
  out->weight_bytes = out->kv_bytes = out->flops = 0;
  for (int i = 0; i < c->o.layout.n_workers; i++)
    for (int s = 0; s < c->o.layout.workers[i].n_stages; s++) {
      out->weight_bytes += c->w[i].stages[s].weight_bytes;
      out->kv_bytes += c->w[i].stages[s].kv_bytes;
      out->flops += c->w[i].stages[s].flops;
    }
}

rg_executor_t rg_cluster_executor(rg_cluster_t *c) {
  return (rg_executor_t){c,
                         x_forward,
                         x_swap,
                         x_counters,
                         rg_model_tokenizer(c->model),
                         c->a->vocab,
                         c->lim.n_blocks,
                         c->lim.max_context,
                         0,
                         (int)c->lim.block_size,
                         c->max_seqs};
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
    snprintf(out->from, sizeof out->from, "%s", wname(c, i));
    snprintf(out->to, sizeof out->to, "%s",
             l->peer == 0
                 ? "coordinator"
                 : (l->peer <= (uint32_t)c->o.layout.n_workers ? wname(c, (int)l->peer - 1) : "?"));
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
    double until = now_s() + 3;
    for (;;) {
      int open = 0;
      for (int i = 0; i < c->o.layout.n_workers; i++) open += c->w[i].joined && !c->w[i].lost;
      if (!open || now_s() > until) break;
      rg_status_t st = pump(c, 0.05, NULL);
      if (st) {
        rg_status_free(st);
        break;
      }
    }
  }
  // Workers this coordinator started get 5 s to leave, then SIGTERM, then SIGKILL.
  double deadline = now_s() + 5;
  for (int i = 0; i < c->o.layout.n_workers; i++) {
    if (c->w[i].pid <= 0) continue;
    int status;
    while (waitpid(c->w[i].pid, &status, WNOHANG) == 0) {
      if (now_s() > deadline) {
        kill(c->w[i].pid, SIGTERM);
        nap(0.2);
        if (waitpid(c->w[i].pid, &status, WNOHANG) == 0) {
          kill(c->w[i].pid, SIGKILL);
          waitpid(c->w[i].pid, &status, 0);
        }
        break;
      }
      nap(0.01);
    }
    rg_transport_forget_process(c->w[i].pid);  // what a killed worker left in /dev/shm
    c->w[i].pid = -1;
  }
  write_trace(c);
  free(c->trace);
  for (int i = 0; i < RG_CLUSTER_MAX_WORKERS; i++) free(c->w[i].done_buf);
  for (int m = 0; m < MAX_MB; m++) rg_step_buf_free(&c->sb[m]);
  free(c->msg);
  rg_transport_destroy(c->tp);
  rg_control_server_destroy(c->srv);
  rg_model_close(c->model);
  free(c);
}
