// The libfabric transport: one reliable-datagram (FI_EP_RDM) endpoint with
// tagged messages and RMA, its own fabric, domain, address vector and one
// completion queue for sends and receives.
//
// What it relies on, and why:
// - Capabilities, not provider names. fi_getinfo is told every memory-
//   registration mode bit this code handles (FI_MR_LOCAL: message buffers get
//   a registration; FI_MR_VIRT_ADDR: remote addresses are virtual addresses,
//   else offsets; FI_MR_PROV_KEY: the key comes from fi_mr_key, else we pick
//   one; FI_MR_ALLOCATED: callers register allocated memory, which they do;
//   FI_MR_ENDPOINT: registrations are bound to the endpoint and enabled).
//   FI_MR_RAW is also offered so that a provider needing it is found and
//   refused with a clear message instead of silently skipped.
// - The write notice cannot overtake the data: every fi_writemsg carries
//   FI_DELIVERY_COMPLETE, whose completion means the data is visible in the
//   target's memory, and a chunk's notice is posted only after all of that
//   chunk's writes have completed. FI_ORDER_* is not relied on (shm reports only send-after-send;
//   ofi_rxm does not order RMA against later sends), nor is remote CQ data
//   (tcp;ofi_rxm offers no FI_RMA_EVENT, and CQ data names one write, not a
//   list of them).
// - Manual progress: completions, and for tcp the bytes themselves, move only
//   when the owner calls fi_cq_read. The CQ asks for a wait fd (FI_WAIT_FD);
//   a provider that refuses (shm takes FI_WAIT_NONE only) is polled with
//   adaptive back-off: spin briefly after activity, then yield, then sleep
//   an eighth of the time idle so far, up to 1 ms. An idle endpoint so wakes
//   a thousand times a second (well under 5% of a core), a busy one answers
//   within microseconds, and no completion is seen more than ~12% late
//   (doubling intervals were tried first: they left a 1.3 ms wait 1.5 ms late).
//   Activity is a completion, a post, or a poll that itself took real
//   time: under FI_DELIVERY_COMPLETE shm has the *target* copy incoming
//   writes (CMA) inside its fi_cq_read, and incoming RMA raises no completion
//   there, so without that rule a receiver mid-transfer backed off to 1 ms
//   polls and a 16 MiB KV transfer ran at a tenth of shm's bandwidth. (A
//   tighter cap while a notice was pending did as well for transfers but
//   cost 6-13% of a core while waiting for one.) A side with a write of its
//   own in flight never sleeps: it yields between polls until the write is
//   done, since its pieces complete (and, on tcp, its bytes leave) only as it
//   polls; nor does a receiver holding some chunks of a write.
// - Writes are pipelined in chunks (see transport_impl.h): pieces of at most
//   WRITE_WINDOW_CHUNKS chunks in flight, HASH_SLICE_BYTES hashed per call
//   between polls, and each chunk's notice sent as soon as that chunk is complete.
// - Receives never ask the provider to truncate. shm 1.17 spins forever in
//   fi_cq_read when a message over its CMA path is longer than the posted
//   buffer (smr_cma_loop has no end for it), so every receive is posted as
//   two iovs: the caller's buffer, then a "sink" of reserved address space
//   (16 GiB, MAP_NORESERVE: pages exist only where an oversized message
//   lands, and are dropped again at once). A longer message fills the sink,
//   the completion says its true length, and the transport reports the
//   truncation itself; the caller's buffer is never written past its end.
//   Under FI_MR_LOCAL the sink would need a registration (pinning it), so
//   there the provider's own truncation handling is used instead.
// - A post that meets a full queue (-FI_EAGAIN) is kept on a backlog and
//   retried on progress. Sends and receives have one FIFO backlog each, and
//   while one is not empty new posts of its kind queue behind it: a retried
//   send overtaking a later one would swap two messages with the same tag; writes are split into
//   pieces posted a few dozen at a time, each fi_writemsg carrying up to the provider's iov limits.
#include <errno.h>
#include <glob.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "runtime/transport/transport_impl.h"

// Converts a libfabric return code into a status, once, at the edge.
static rg_status_t fi_status(int rc, const char *what) {
  return rg_status_make(RG_UNAVAILABLE, "%s: %s (%d)", what, fi_strerror(-rc), rc);
}
#define RG_FI_CHECK(expr, label) \
  do {                           \
    int rc_ = (int)(expr);       \
    if (rc_ < 0) {               \
      s = fi_status(rc_, #expr); \
      goto label;                \
    }                            \
  } while (0)

#define MAX_IOV 16
#define WRITE_SLOTS 256
// Chunks of a write whose pieces may be in flight ahead of the oldest chunk
// whose notice is not yet sent (4 MiB at the default chunk size). A window
// makes each chunk's notice come soon after its data instead of behind the
// whole write, so the receiver checks chunk i while the writer still pushes
// chunk i+1 (tcp: the sender's socket copy and the receiver's hash overlap).
// It must not be so small that the receiver runs dry whenever the writer
// waits for a core: on shm the receiver does the copying, and with two
// chunks it stalled under load.
#define WRITE_WINDOW_CHUNKS 8
// How much of a write's source the writer hashes between two polls. A whole
// 512 KiB chunk at a time kept the writer away from its CQ for ~60 us, in
// which its finished pieces waited to be seen and the next ones to be
// posted; over shm (the target copies each piece in, then answers) a 16 MiB
// KV request took 3.65-3.69 ms that way and 2.13-2.37 ms in 128 KiB slices
// (32 and 64 KiB: 2.35-2.65 ms). tcp;ofi_rxm did not move (Zen 4 VM, huge-
// page regions, alternated runs).
#define HASH_SLICE_BYTES ((uint64_t)128 << 10)
// Bytes of the first run that the corruption hook sends from a bounce buffer.
#define BOUNCE_BYTES 4096
// How long a cancelled receive may take to report its cancellation.
#define CANCEL_WAIT_S 0.05

typedef struct ctx_s {
  struct fi_context2 fctx;  // first: the provider's op_context points here
  rg_transport_req_t *r;
  int slot;        // index in a write's pool; CTX_MAIN or CTX_NOTICE
  uint32_t chunk;  // a write's piece or notice: its chunk
} ctx_t;

enum { CTX_MAIN = -1, CTX_NOTICE = -2 };

enum { Q_TX, Q_RX, Q_WRITE };

typedef struct op_s {
  ctx_t main;             // the send, the receive, or a write's notice
  struct fid_mr *buf_mr;  // registration of the message buffer (FI_MR_LOCAL)
  void *buf_desc;
  bool main_posted;
  bool cancelling;
  struct op_s *bprev, *bnext;  // backlog
  bool in_backlog;
  int q;  // which backlog: Q_TX, Q_RX or Q_WRITE
  // Writes.
  rg__runs_t runs;
  bool runs_done;
  ctx_t *pool;
  int *free_slots;
  int n_free, n_slots;
  unsigned outstanding;  // pieces and notices posted, not yet complete
  ctx_t *nctx;           // per chunk: its notice's context
  uint32_t *chunk_out;   // per chunk: its pieces in flight
  size_t next_notice;    // the next chunk whose notice is to be sent
  size_t notices_done;
  rg_code_t fail_code;
  char fail_msg[256];
  uint8_t *bounce;
  uint64_t bounce_len;
  struct fid_mr *bounce_mr;
  bool bounce_sent;
  bool eagain;  // the provider's queue was full: retry on progress
  bool active;  // a write counted in fab_t.writes_active
} op_t;

typedef struct {
  rg_transport_t *t;
  struct fi_info *info;
  struct fid_fabric *fabric;
  struct fid_domain *domain;
  struct fid_av *av;
  struct fid_cq *cq;
  struct fid_ep *ep;
  int wait_fd;  // -1: no wait object, poll with back-off
  uint64_t mr_mode;
  bool mr_local;
  bool delivery_complete;
  size_t iov_limit, inject_size;
  uint64_t next_key;
  op_t *head[3], *tail[3];  // backlogs, indexed by Q_*
  double last_activity;
  // Writes posted and not yet finished: while there are any, the sender
  // polls without sleeping (see fabric_sleep).
  unsigned writes_active;
  uint8_t name[RG_TRANSPORT_ADDR_MAX];
  size_t name_len;
  void *sink;  // see "Receives never ask the provider to truncate"
  size_t sink_len;
} fab_t;

static op_t *op_of(rg_transport_req_t *r) {
  return (op_t *)rg__op_impl(r);
}

// ---------------------------------------------------------------------------
// Opening.

static struct fi_info *make_hints(const char *prov, bool delivery_complete) {
  struct fi_info *h = fi_allocinfo();
  if (!h) return NULL;
  h->caps = FI_TAGGED | FI_RMA | FI_DIRECTED_RECV;
  h->mode = FI_CONTEXT | FI_CONTEXT2;
  h->ep_attr->type = FI_EP_RDM;
  h->domain_attr->mr_mode =
      FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT | FI_MR_RAW;
  // One thread drives an endpoint (see transport.h), which lets providers
  // skip their own locks.
  h->domain_attr->threading = FI_THREAD_DOMAIN;
  if (delivery_complete) h->tx_attr->op_flags = FI_DELIVERY_COMPLETE;
  if (prov) h->fabric_attr->prov_name = strdup(prov);
  return h;
}

#define FI_API_VERSION FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION)

static struct fi_info *get_info(const char *prov, const char *node, bool dc) {
  struct fi_info *h = make_hints(prov, dc), *info = NULL;
  if (!h) return NULL;
  int rc = fi_getinfo(FI_API_VERSION, node, NULL, node ? FI_SOURCE : 0, h, &info);
  fi_freeinfo(h);
  return rc == 0 ? info : NULL;
}

rg_status_t rg__fabric_providers(char *buf, size_t cap) {
  if (cap) buf[0] = 0;
  struct fi_info *h = make_hints(NULL, false), *info = NULL;
  if (!h) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
  int rc = fi_getinfo(FI_API_VERSION, NULL, NULL, 0, h, &info);
  fi_freeinfo(h);
  if (rc == -FI_ENODATA) return NULL;
  if (rc) return fi_status(rc, "fi_getinfo");
  size_t used = 0;
  for (struct fi_info *i = info; i; i = i->next) {
    const char *n = i->fabric_attr->prov_name;
    bool seen = false;
    for (struct fi_info *j = info; j != i; j = j->next)
      seen |= strcmp(j->fabric_attr->prov_name, n) == 0;
    if (seen) continue;
    int w = snprintf(buf + used, cap > used ? cap - used : 0, "%s%s", used ? ", " : "", n);
    if (w > 0) used += (size_t)w;
  }
  fi_freeinfo(info);
  return NULL;
}

// shm names an endpoint's region "<pid>:<uid>:<index>" (smr_ep_name in
// libfabric 1.17, from the "fi_shm://<pid>" source address). Unlinks
// pid's regions; returns how many.
static int unlink_regions(int pid) {
  char pat[64];
  snprintf(pat, sizeof(pat), "/dev/shm/%d:%u:*", pid, (unsigned)getuid());
  glob_t g;
  int n = 0;
  if (glob(pat, 0, NULL, &g) == 0) {
    for (size_t i = 0; i < g.gl_pathc; i++) n += unlink(g.gl_pathv[i]) == 0;
    globfree(&g);
  }
  return n;
}

int rg_transport_forget_process(int pid) {
  if (pid <= 0 || kill(pid, 0) == 0 || errno != ESRCH) return 0;
  return unlink_regions(pid);
}

// Before this process's first shm endpoint, any region named for its pid
// was left by a dead process that had the pid (killed before it closed its
// endpoint): shm would find the name taken and fail fi_enable with EBUSY,
// as a test run did once 36 such regions had piled up. Unlinked once per
// pid (a forked child clears its own).
static void clear_stale_own_regions(void) {
  static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  static pid_t cleared_for;
  pthread_mutex_lock(&mu);
  const pid_t me = getpid();
  if (cleared_for != me) {
    cleared_for = me;
    unlink_regions((int)me);
  }
  pthread_mutex_unlock(&mu);
}

static void describe_mr(uint64_t mode, char *buf, size_t cap) {
  static const struct {
    uint64_t bit;
    const char *name;
  } bits[] = {{FI_MR_LOCAL, "local"},
              {FI_MR_VIRT_ADDR, "virt_addr"},
              {FI_MR_ALLOCATED, "allocated"},
              {FI_MR_PROV_KEY, "prov_key"},
              {FI_MR_ENDPOINT, "endpoint"}};
  size_t used = 0;
  buf[0] = 0;
  for (size_t i = 0; i < sizeof(bits) / sizeof(bits[0]); i++)
    if (mode & bits[i].bit) {
      int w = snprintf(buf + used, cap - used, "%s%s", used ? "|" : "", bits[i].name);
      if (w > 0 && (size_t)w < cap - used) used += (size_t)w;
    }
  if (!used) snprintf(buf, cap, "none");
}

// Picks the first provider of the list (comma-separated) that fi_getinfo
// offers, asking for delivery-complete writes first.
static rg_status_t choose(const char *list, const char *node, struct fi_info **out, bool *dc) {
  *out = NULL;
  char *copy = strdup(list), *save = NULL;
  if (!copy) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
  for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    while (*tok == ' ') tok++;
    size_t n = strlen(tok);
    while (n && tok[n - 1] == ' ') tok[--n] = 0;
    if (!n) continue;
    struct fi_info *info = get_info(tok, node, true);
    *dc = info != NULL;
    if (!info) info = get_info(tok, node, false);
    if (info) {
      *out = info;
      free(copy);
      return NULL;
    }
  }
  free(copy);
  char avail[1024];
  rg_status_t s = rg__fabric_providers(avail, sizeof(avail));
  if (s) return s;
  const char *env = getenv("FI_PROVIDER");
  return rg_status_make(RG_UNAVAILABLE,
                        "libfabric provider '%s' is not available here%s%s%s; available with "
                        "tagged messages and RMA: %s",
                        list, node ? " on " : "", node ? node : "",
                        env ? " (FI_PROVIDER is set and also filters providers)" : "",
                        avail[0] ? avail : "none");
}

rg_status_t rg__fabric_open(rg_transport_t *t, const rg_transport_options_t *opt) {
  rg_status_t s = NULL;
  fab_t *f = calloc(1, sizeof(*f));
  if (!f) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
  f->t = t;
  f->wait_fd = -1;
  f->next_key = 1;
  const char *list = opt->provider && opt->provider[0] ? opt->provider : getenv("FI_PROVIDER");
  if (!list || !list[0]) list = RG_TRANSPORT_DEFAULT_PROVIDERS;
  bool dc = false;
  s = choose(list, opt->node, &f->info, &dc);
  if (s) goto fail_info;
  struct fi_info *info = f->info;
  const char *prov = info->fabric_attr->prov_name;
  f->mr_mode = info->domain_attr->mr_mode;
  if (f->mr_mode & FI_MR_RAW) {
    s = rg_status_make(RG_UNIMPLEMENTED,
                       "libfabric provider '%s' needs raw memory keys (FI_MR_RAW), which ridge "
                       "does not support; choose another provider",
                       prov);
    goto fail_fabric;
  }
  f->delivery_complete = dc;
  f->mr_local = (f->mr_mode & FI_MR_LOCAL) || opt->register_local;
  f->iov_limit = info->tx_attr->iov_limit;
  if (info->tx_attr->rma_iov_limit < f->iov_limit) f->iov_limit = info->tx_attr->rma_iov_limit;
  if (f->iov_limit > MAX_IOV) f->iov_limit = MAX_IOV;
  if (f->iov_limit < 1) f->iov_limit = 1;
  f->inject_size = info->tx_attr->inject_size;
  // Delivery-complete was a requirement of the query; writes ask for it per
  // operation, and every other operation keeps the provider's default.
  info->tx_attr->op_flags = 0;
  snprintf(t->provider, sizeof(t->provider), "%s", prov);

  RG_FI_CHECK(fi_fabric(info->fabric_attr, &f->fabric, NULL), fail_fabric);
  RG_FI_CHECK(fi_domain(f->fabric, info, &f->domain, NULL), fail_domain);
  struct fi_av_attr av_attr = {.type = FI_AV_TABLE};
  RG_FI_CHECK(fi_av_open(f->domain, &av_attr, &f->av, NULL), fail_av);
  struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_TAGGED, .wait_obj = FI_WAIT_FD};
  if (fi_cq_open(f->domain, &cq_attr, &f->cq, NULL) == 0) {
    if (fi_control(&f->cq->fid, FI_GETWAIT, &f->wait_fd) != 0) f->wait_fd = -1;
  } else {
    cq_attr.wait_obj = FI_WAIT_NONE;
    RG_FI_CHECK(fi_cq_open(f->domain, &cq_attr, &f->cq, NULL), fail_cq);
  }
  if (!strcmp(prov, "shm")) clear_stale_own_regions();
  RG_FI_CHECK(fi_endpoint(f->domain, info, &f->ep, NULL), fail_ep);
  RG_FI_CHECK(fi_ep_bind(f->ep, &f->av->fid, 0), fail_enable);
  RG_FI_CHECK(fi_ep_bind(f->ep, &f->cq->fid, FI_TRANSMIT | FI_RECV), fail_enable);
  RG_FI_CHECK(fi_enable(f->ep), fail_enable);
  f->name_len = sizeof(f->name);
  RG_FI_CHECK(fi_getname(&f->ep->fid, f->name, &f->name_len), fail_enable);
  if (!f->mr_local && info->rx_attr->iov_limit >= 2) {
    for (size_t len = (size_t)16 << 30; len >= ((size_t)1 << 20) && !f->sink; len >>= 2) {
      void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                     -1, 0);
      if (p != MAP_FAILED) {
        f->sink = p;
        f->sink_len = len;
      }
    }
  }
  f->last_activity = rg_clock_now();
  t->impl = f;
  char mr[128];
  describe_mr(f->mr_mode, mr, sizeof(mr));
  // libfabric's own switch for shm's copy path: docs/transport.md has what
  // each path measured here.
  const char *cma = getenv("FI_SHM_DISABLE_CMA");
  bool no_cma = strcmp(prov, "shm") == 0 && cma &&
                (!strcmp(cma, "1") || !strcasecmp(cma, "yes") || !strcasecmp(cma, "true") ||
                 !strcasecmp(cma, "on") || !strcasecmp(cma, "y"));
  snprintf(t->describe, sizeof(t->describe),
           "fabric %s (fabric %s, domain %s); mr mode %s%s; %zu iovs per write; inject %zu "
           "bytes; %s writes in %" PRIu64 " KiB chunks; %s%s",
           prov, info->fabric_attr->name, info->domain_attr->name, mr,
           opt->register_local && !(f->mr_mode & FI_MR_LOCAL) ? " (+local, asked)" : "",
           f->iov_limit, f->inject_size,
           f->delivery_complete ? "delivery-complete" : "no delivery-complete",
           (t->chunk_bytes + 1023) / 1024,
           f->wait_fd >= 0 ? "waits on the CQ's fd" : "polls the CQ with back-off",
           no_cma ? "; copies through shared buffers (FI_SHM_DISABLE_CMA)" : "");
  return NULL;

fail_enable:
  fi_close(&f->ep->fid);
fail_ep:
  fi_close(&f->cq->fid);
fail_cq:
  fi_close(&f->av->fid);
fail_av:
  fi_close(&f->domain->fid);
fail_domain:
  fi_close(&f->fabric->fid);
fail_fabric:
  fi_freeinfo(f->info);
fail_info:
  free(f);
  return s;
}

// ---------------------------------------------------------------------------
// Registrations.

static rg_status_t reg(fab_t *f, void *base, size_t len, uint64_t access, struct fid_mr **out) {
  rg_status_t s = NULL;
  *out = NULL;
  uint64_t requested = (f->mr_mode & FI_MR_PROV_KEY) ? 0 : f->next_key++;
  struct fid_mr *mr = NULL;
  RG_FI_CHECK(fi_mr_reg(f->domain, base, len, access, 0, requested, 0, &mr, NULL), fail);
  if (f->mr_mode & FI_MR_ENDPOINT) {
    RG_FI_CHECK(fi_mr_bind(mr, &f->ep->fid, 0), fail_mr);
    RG_FI_CHECK(fi_mr_enable(mr), fail_mr);
  }
  *out = mr;
  return NULL;
fail_mr:
  fi_close(&mr->fid);
fail:
  return s;
}

static rg_status_t fabric_region_register(rg_transport_region_t *g) {
  fab_t *f = g->t->impl;
  uint64_t access = 0;
  if (g->access & RG_TRANSPORT_WRITE_SOURCE) access |= FI_WRITE | FI_SEND | FI_RECV;
  if (g->access & RG_TRANSPORT_WRITE_TARGET) access |= FI_REMOTE_WRITE;
  struct fid_mr *mr;
  RG_RETURN_IF_ERROR(reg(f, g->base, g->len, access, &mr));
  uint64_t key = fi_mr_key(mr);
  if (key == FI_KEY_NOTAVAIL) {
    fi_close(&mr->fid);
    return rg_status_make(RG_UNIMPLEMENTED,
                          "the provider gives no 64-bit key for the registration (raw keys are "
                          "not supported)");
  }
  g->impl = mr;
  g->key = key;
  g->remote_base = (f->mr_mode & FI_MR_VIRT_ADDR) ? (uint64_t)(uintptr_t)g->base : 0;
  return NULL;
}

static void fabric_region_deregister(rg_transport_region_t *g) {
  if (g->impl) fi_close(&((struct fid_mr *)g->impl)->fid);
  g->impl = NULL;
}

// The descriptor for a local buffer under FI_MR_LOCAL: a registered region
// that covers it, else a registration for this operation only.
static rg_status_t local_desc(fab_t *f, void *buf, size_t len, uint64_t access, struct fid_mr **tmp,
                              void **desc) {
  *tmp = NULL;
  *desc = NULL;
  if (!f->mr_local || !len) return NULL;
  for (rg_transport_region_t *g = f->t->regions; g; g = g->next) {
    const uint8_t *b = g->base;
    if ((g->access & RG_TRANSPORT_WRITE_SOURCE) && (const uint8_t *)buf >= b &&
        (const uint8_t *)buf + len <= b + g->len) {
      *desc = fi_mr_desc(g->impl);
      return NULL;
    }
  }
  RG_RETURN_IF_ERROR(reg(f, buf, len, access, tmp));
  *desc = fi_mr_desc(*tmp);
  return NULL;
}

// Frees what the backend allocated for r; after this only a result remains.
static void op_cleanup(op_t *o) {
  if (o->buf_mr) fi_close(&o->buf_mr->fid);
  if (o->bounce_mr) fi_close(&o->bounce_mr->fid);
  free(o->bounce);
  free(o->pool);
  free(o->free_slots);
  free(o->nctx);
  free(o->chunk_out);
  o->buf_mr = o->bounce_mr = NULL;
  o->bounce = NULL;
  o->pool = NULL;
  o->free_slots = NULL;
  o->nctx = NULL;
  o->chunk_out = NULL;
}

// ---------------------------------------------------------------------------
// Posting.

static int queue_of(const rg_transport_req_t *r) {
  return r->kind == RG__OP_SEND ? Q_TX : r->kind == RG__OP_WRITE ? Q_WRITE : Q_RX;
}

static bool backlog_empty(const fab_t *f) {
  return !f->head[Q_TX] && !f->head[Q_RX] && !f->head[Q_WRITE];
}

// Appends o to its backlog (or, with front, puts it back at the head).
static void backlog_put(fab_t *f, op_t *o, bool front) {
  if (o->in_backlog) return;
  int q = queue_of(o->main.r);
  o->q = q;
  if (front) {
    o->bprev = NULL;
    o->bnext = f->head[q];
    if (f->head[q])
      f->head[q]->bprev = o;
    else
      f->tail[q] = o;
    f->head[q] = o;
  } else {
    o->bnext = NULL;
    o->bprev = f->tail[q];
    if (f->tail[q])
      f->tail[q]->bnext = o;
    else
      f->head[q] = o;
    f->tail[q] = o;
  }
  o->in_backlog = true;
}

static void backlog_add(fab_t *f, op_t *o) {
  backlog_put(f, o, false);
}

static void backlog_remove(fab_t *f, op_t *o) {
  if (!o->in_backlog) return;
  int q = o->q;
  if (o->bprev)
    o->bprev->bnext = o->bnext;
  else
    f->head[q] = o->bnext;
  if (o->bnext)
    o->bnext->bprev = o->bprev;
  else
    f->tail[q] = o->bprev;
  o->bprev = o->bnext = NULL;
  o->in_backlog = false;
}

static bool is_peer_error(int err) {
  switch (err) {
    case FI_ECONNREFUSED:
    case FI_ECONNRESET:
    case FI_ECONNABORTED:
    case FI_ENOTCONN:
    case FI_EHOSTUNREACH:
    case FI_ENETUNREACH:
    case FI_ETIMEDOUT:
    case FI_ESHUTDOWN:
    case EPIPE:
    case FI_EIO:
      return true;
    default:
      return false;
  }
}

static void write_inactive(fab_t *f, op_t *o) {
  if (!o->active) return;
  o->active = false;
  f->writes_active--;
}

static void finish(fab_t *f, rg_transport_req_t *r, rg_code_t code, size_t got, const char *why) {
  op_t *o = op_of(r);
  backlog_remove(f, o);
  write_inactive(f, o);
  op_cleanup(o);
  if (why)
    rg__op_finish(r, code, got, "%s", why);
  else
    rg__op_finish(r, code, got, NULL);
}

static void release(fab_t *f, rg_transport_req_t *r) {
  op_t *o = op_of(r);
  backlog_remove(f, o);
  write_inactive(f, o);
  op_cleanup(o);
  rg__op_release(r);
}

// Posts the main operation. Returns 0, -FI_EAGAIN (try again on progress) or
// another negative libfabric code.
static int post_main(fab_t *f, rg_transport_req_t *r) {
  op_t *o = op_of(r);
  fi_addr_t peer = (fi_addr_t)r->peer_handle;
  int rc;
  switch (r->kind) {
    case RG__OP_SEND:
      if (r->len <= f->inject_size) {
        rc = (int)fi_tinject(f->ep, r->buf, r->len, peer, r->tag);
        if (rc == 0) {
          // Injected data has left the buffer; no completion will follow.
          o->main_posted = true;
          finish(f, r, RG_OK, r->len, NULL);
        }
        return rc;
      }
      rc = (int)fi_tsend(f->ep, r->buf, r->len, o->buf_desc, peer, r->tag, &o->main.fctx);
      break;
    default:
      if (f->sink) {
        struct iovec iov[2];
        void *desc[2] = {NULL, NULL};
        size_t n = 0;
        if (r->len) iov[n++] = (struct iovec){r->buf, r->len};
        iov[n++] = (struct iovec){f->sink, f->sink_len};
        rc = (int)fi_trecvv(f->ep, iov, desc, n, peer, r->tag, 0, &o->main.fctx);
      } else {
        rc = (int)fi_trecv(f->ep, r->buf, r->len, o->buf_desc, peer, r->tag, 0, &o->main.fctx);
      }
  }
  if (rc == 0) o->main_posted = true;
  return rc;
}

static void write_fail(op_t *o, rg_code_t code, const char *fmt, int err) {
  if (o->fail_code != RG_OK) return;
  o->fail_code = code;
  snprintf(o->fail_msg, sizeof(o->fail_msg), fmt, fi_strerror(err));
}

// Whether the cursor stands at the first byte of the chunk the corruption
// hook sends from its bounce copy.
static bool at_bounce(const op_t *o, const rg__write_t *w) {
  return o->bounce && !o->bounce_sent && o->runs.ent == w->chunks[w->corrupt_chunk].first &&
         o->runs.run == 0 && o->runs.done_in_run == 0;
}

// Posts as many of a write's pieces as free slots, the chunk window and the
// provider take. One fi_writemsg never spans two chunks, so each chunk's
// completion is known.
static void post_pieces(fab_t *f, rg_transport_req_t *r) {
  op_t *o = op_of(r);
  rg__write_t *w = r->w;
  void *src_desc = fi_mr_desc(r->src_region->impl);
  while (!o->runs_done && o->n_free > 0 && o->fail_code == RG_OK && !o->cancelling) {
    size_t chunk = rg__runs_chunk(&o->runs);
    if (chunk < w->n_chunks && chunk >= o->next_notice + WRITE_WINDOW_CHUNKS) break;
    // A gathering write's chunk is in its staging region once hashed (past
    // the last chunk the cursor is done, which the loop below finds).
    if (w->gruns && chunk < w->n_chunks && chunk >= w->n_hashed) break;
    struct iovec iov[MAX_IOV];
    void *desc[MAX_IOV];
    struct fi_rma_iov rma[MAX_IOV];
    size_t k = 0;
    rg__runs_t start = o->runs;
    bool bounce_in = false;
    for (;;) {
      if (k > 0 && rg__runs_chunk(&o->runs) != chunk) break;
      rg__runs_t before = o->runs;
      const uint8_t *src;
      uint64_t dst, len;
      bool bounce = !bounce_in && at_bounce(o, w);
      if (!rg__runs_next(&o->runs, bounce ? o->bounce_len : 0, &src, &dst, &len)) {
        o->runs_done = true;
        break;
      }
      uint64_t raddr = w->dst_addr + dst;
      if (bounce) {
        if (k == f->iov_limit) {
          o->runs = before;
          break;
        }
        bounce_in = true;
        iov[k] = (struct iovec){o->bounce, len};
        desc[k] = o->bounce_mr ? fi_mr_desc(o->bounce_mr) : NULL;
        rma[k] = (struct fi_rma_iov){raddr, len, w->dst_key};
        k++;
        continue;
      }
      // A run adjacent on both sides to the previous piece joins it.
      if (k > 0 && iov[k - 1].iov_base != o->bounce &&
          (const uint8_t *)iov[k - 1].iov_base + iov[k - 1].iov_len == src &&
          rma[k - 1].addr + rma[k - 1].len == raddr) {
        iov[k - 1].iov_len += len;
        rma[k - 1].len += len;
        continue;
      }
      if (k == f->iov_limit) {
        o->runs = before;
        break;
      }
      iov[k] = (struct iovec){(void *)src, len};
      desc[k] = src_desc;
      rma[k] = (struct fi_rma_iov){raddr, len, w->dst_key};
      k++;
    }
    if (k == 0) break;
    int slot = o->free_slots[o->n_free - 1];
    ctx_t *c = &o->pool[slot];
    c->chunk = (uint32_t)chunk;
    struct fi_msg_rma msg = {
        .msg_iov = iov,
        .desc = desc,
        .iov_count = k,
        .addr = (fi_addr_t)r->peer_handle,
        .rma_iov = rma,
        .rma_iov_count = k,
        .context = &c->fctx,
        .data = 0,
    };
    int rc = (int)fi_writemsg(f->ep, &msg, FI_DELIVERY_COMPLETE | FI_COMPLETION);
    if (rc == -FI_EAGAIN) {
      o->runs = start;
      o->runs_done = false;
      o->eagain = true;
      return;
    }
    if (rc) {
      write_fail(o, is_peer_error(-rc) ? RG_PEER_LOST : RG_IO,
                 is_peer_error(-rc) ? "peer lost: fi_writemsg: %s" : "fi_writemsg: %s", -rc);
      o->runs = start;
      o->runs_done = false;
      return;
    }
    if (bounce_in) o->bounce_sent = true;
    o->n_free--;
    o->outstanding++;
    o->chunk_out[chunk]++;
  }
}

// Whether chunk c's notice may go: it is hashed, and its pieces are all
// posted and complete (delivery-complete: the data is in the target).
static bool notice_ready(const op_t *o, const rg__write_t *w, size_t c) {
  return c < w->n_hashed && o->chunk_out[c] == 0 && (o->runs_done || rg__runs_chunk(&o->runs) > c);
}

// Sends chunk c's notice. Returns 0, -FI_EAGAIN or another libfabric code.
static int post_notice(fab_t *f, rg_transport_req_t *r, size_t c) {
  op_t *o = op_of(r);
  const rg__chunk_t *ch = &r->w->chunks[c];
  fi_addr_t peer = (fi_addr_t)r->peer_handle;
  int rc;
  if (ch->notice_len <= f->inject_size) {
    // Injected data has left the buffer; no completion will follow.
    rc = (int)fi_tinject(f->ep, ch->notice, ch->notice_len, peer, r->tag);
    if (rc == 0) o->notices_done++;
    return rc;
  }
  ctx_t *x = &o->nctx[c];
  rc = (int)fi_tsend(f->ep, ch->notice, ch->notice_len, o->buf_desc, peer, r->tag, &x->fctx);
  if (rc == 0) o->outstanding++;
  return rc;
}

// Moves a write along: hashing a chunk per call between polls, each
// chunk's notice as soon as that chunk is complete, and pieces within the
// chunk window. It stays on the backlog only while it has something to do
// other than wait for completions (which put it back), so a sender waiting
// on a long write can sleep.
//
// Notices go before new pieces, and while the provider refuses a notice no
// new piece is posted. shm without CMA moves RMA writes one at a time per
// peer and refuses every send to that peer (-FI_EAGAIN) while one is in
// flight, so a window of pieces posted back to back kept every notice out
// until the window was full (8 chunks, 3.6 MiB); the receiver, which learns
// of a write from its first notice, slept through them although shm moves
// their data only as the receiver polls. A 16 MiB KV write in 4 KiB
// per-head runs took 45-240 ms in most runs that way, against 6.5-9.5 ms.
static void advance_write(fab_t *f, rg_transport_req_t *r) {
  op_t *o = op_of(r);
  rg__write_t *w = r->w;
  backlog_remove(f, o);
  o->eagain = false;
  // A slice of hashing per call keeps the CQ read every ~10 microseconds.
  if (o->fail_code == RG_OK && !o->cancelling) rg__write_hash_step(w, HASH_SLICE_BYTES);
  bool notice_eagain = false;
  for (;;) {
    while (o->fail_code == RG_OK && !o->cancelling && !notice_eagain &&
           o->next_notice < w->n_chunks && notice_ready(o, w, o->next_notice)) {
      int rc = post_notice(f, r, o->next_notice);
      if (rc == -FI_EAGAIN) {
        notice_eagain = true;
      } else if (rc) {
        write_fail(o, is_peer_error(-rc) ? RG_PEER_LOST : RG_IO,
                   is_peer_error(-rc) ? "peer lost: could not send a chunk's notice: %s"
                                      : "could not send a chunk's notice: %s",
                   -rc);
      } else {
        o->next_notice++;
      }
    }
    if (notice_eagain || o->fail_code != RG_OK || o->cancelling) break;
    post_pieces(f, r);  // the window may have moved on
    // Posting moves the cursor past a chunk whose pieces may all be done.
    if (o->next_notice >= w->n_chunks || !notice_ready(o, w, o->next_notice)) break;
  }
  if (notice_eagain) o->eagain = true;
  if (o->fail_code != RG_OK || o->cancelling) {
    if (o->outstanding == 0) {
      if (o->cancelling)
        release(f, r);
      else
        finish(f, r, o->fail_code, 0, o->fail_msg);
    }
    return;
  }
  if (o->notices_done == w->n_chunks) {
    finish(f, r, RG_OK, (size_t)w->total, NULL);  // may free r: nothing of it is used after
    return;
  }
  bool window_open = !o->runs_done && o->n_free > 0 &&
                     rg__runs_chunk(&o->runs) < o->next_notice + WRITE_WINDOW_CHUNKS;
  if (o->eagain || w->n_hashed < w->n_chunks || window_open) backlog_add(f, o);
}

static rg_status_t post_write(fab_t *f, rg_transport_req_t *r) {
  op_t *o = op_of(r);
  if (!f->delivery_complete)
    return rg_status_make(RG_UNIMPLEMENTED,
                          "provider '%s' cannot complete RMA writes on delivery "
                          "(FI_DELIVERY_COMPLETE), which the write notice relies on",
                          f->t->provider);
  rg__write_t *w = r->w;
  o->n_slots = (int)(f->info->tx_attr->size / 2 < WRITE_SLOTS && f->info->tx_attr->size >= 2
                         ? f->info->tx_attr->size / 2
                         : WRITE_SLOTS);
  o->pool = calloc((size_t)o->n_slots, sizeof(*o->pool));
  o->free_slots = malloc((size_t)o->n_slots * sizeof(int));
  o->nctx = calloc(w->n_chunks, sizeof(*o->nctx));
  o->chunk_out = calloc(w->n_chunks, sizeof(*o->chunk_out));
  if (!o->pool || !o->free_slots || !o->nctx || !o->chunk_out)
    return rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
  for (int i = 0; i < o->n_slots; i++) {
    o->pool[i].r = r;
    o->pool[i].slot = i;
    o->free_slots[i] = o->n_slots - 1 - i;
  }
  for (size_t c = 0; c < w->n_chunks; c++)
    o->nctx[c] = (ctx_t){.r = r, .slot = CTX_NOTICE, .chunk = (uint32_t)c};
  o->n_free = o->n_slots;
  rg__runs_init(&o->runs, w);
  const rg__chunk_t *last = &w->chunks[w->n_chunks - 1];
  size_t notices_len = (size_t)(last->notice + last->notice_len - w->chunks[0].notice);
  RG_RETURN_IF_ERROR(
      local_desc(f, w->chunks[0].notice, notices_len, FI_SEND, &o->buf_mr, &o->buf_desc));
  if (w->corrupt) {
    // The hook: the first bytes of the corrupted chunk travel from a copy
    // with one bit flipped; the checksum in its notice is still that of the
    // true source.
    const rg_transport_segment_t *e0 = &w->ents[w->chunks[w->corrupt_chunk].first];
    o->bounce_len = e0->len < BOUNCE_BYTES ? e0->len : BOUNCE_BYTES;
    o->bounce = malloc(o->bounce_len);
    if (!o->bounce) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
    memcpy(o->bounce, e0->src, o->bounce_len);
    o->bounce[0] ^= 0x10;
    if (f->mr_local) RG_RETURN_IF_ERROR(reg(f, o->bounce, o->bounce_len, FI_WRITE, &o->bounce_mr));
  }
  post_pieces(f, r);
  if (o->fail_code != RG_OK && o->outstanding == 0)
    return rg_status_make(o->fail_code, "%s", o->fail_msg);
  o->active = true;
  f->writes_active++;
  backlog_add(f, o);  // hashing, at least, is left
  return NULL;
}

static rg_status_t fabric_post(rg_transport_req_t *r) {
  fab_t *f = r->t->impl;
  op_t *o = op_of(r);
  o->main = (ctx_t){.r = r, .slot = CTX_MAIN};
  f->last_activity = rg_clock_now();
  rg_status_t s = NULL;
  if (r->kind == RG__OP_WRITE) {
    s = post_write(f, r);
  } else {
    s = local_desc(f, r->buf, r->len, r->kind == RG__OP_SEND ? FI_SEND : FI_RECV, &o->buf_mr,
                   &o->buf_desc);
    if (!s && f->head[queue_of(r)]) {
      backlog_add(f, o);  // behind earlier posts of its kind, to keep their order
    } else if (!s) {
      int rc = post_main(f, r);  // an inject finishes r here; it is not freed (the caller owns it)
      if (rc == -FI_EAGAIN)
        backlog_add(f, o);
      else if (rc)
        s = fi_status(rc, r->kind == RG__OP_SEND ? "fi_tsend" : "fi_trecv");
    }
  }
  if (s) op_cleanup(o);
  return s;
}

// ---------------------------------------------------------------------------
// Completions.

// A write's piece or notice completed (err: failed).
static void on_write_part(fab_t *f, rg_transport_req_t *r, ctx_t *c, int err) {
  op_t *o = op_of(r);
  o->outstanding--;
  if (c->slot >= 0) {
    o->free_slots[o->n_free++] = c->slot;
    o->chunk_out[c->chunk]--;
  } else if (!err) {
    o->notices_done++;
  }
  if (err)
    write_fail(o, is_peer_error(err) ? RG_PEER_LOST : RG_IO,
               is_peer_error(err) ? "peer lost: a write failed: %s" : "a write failed: %s", err);
  advance_write(f, r);
}

static void on_error(fab_t *f, struct fi_cq_err_entry *e) {
  ctx_t *c = e->op_context;
  if (!c) return;
  rg_transport_req_t *r = c->r;
  op_t *o = op_of(r);
  char prov[256] = "";
  if (e->prov_errno) {
    const char *p = fi_cq_strerror(f->cq, e->prov_errno, e->err_data, NULL, 0);
    if (p) snprintf(prov, sizeof(prov), " (%s)", p);
  }
  if (c->slot != CTX_MAIN) {
    on_write_part(f, r, c, e->err);
    return;
  }
  o->main_posted = false;
  if (e->err == FI_ECANCELED && o->cancelling) {
    release(f, r);
    return;
  }
  if (e->err == FI_ETRUNC) {
    backlog_remove(f, o);
    op_cleanup(o);
    // libfabric reports the bytes placed (len) and those that did not fit (olen).
    rg__op_truncated(r, (uint64_t)e->len + e->olen);
    return;
  }
  char why[512];
  rg_code_t code = is_peer_error(e->err)    ? RG_PEER_LOST
                   : e->err == FI_ECANCELED ? RG_CANCELLED
                                            : RG_IO;
  snprintf(why, sizeof(why), "%s%s%s", code == RG_PEER_LOST ? "peer lost: " : "",
           fi_strerror(e->err), prov);
  finish(f, r, code, 0, why);
}

static void on_done(fab_t *f, const struct fi_cq_tagged_entry *e) {
  ctx_t *c = e->op_context;
  if (!c) return;
  rg_transport_req_t *r = c->r;
  op_t *o = op_of(r);
  if (c->slot != CTX_MAIN) {
    on_write_part(f, r, c, 0);
    return;
  }
  o->main_posted = false;
  if (r->kind == RG__OP_WRITE && o->cancelling) {
    release(f, r);
    return;
  }
  bool is_recv = r->kind == RG__OP_RECV || r->kind == RG__OP_NOTICE;
  if (is_recv && e->len > r->len) {
    // The message ran into the sink: drop the pages it touched.
    uint64_t over = e->len - r->len;
    size_t page = 4096, n = (size_t)(over < f->sink_len ? over : f->sink_len);
    madvise(f->sink, (n + page - 1) / page * page, MADV_DONTNEED);
    backlog_remove(f, o);
    op_cleanup(o);
    rg__op_truncated(r, e->len);
    return;
  }
  finish(f, r, RG_OK, is_recv ? e->len : r->len, NULL);
}

// Time above which a poll counts as the provider having done work (an idle
// fi_cq_read takes about a microsecond; shm copying one 16 KiB piece of a
// write in, a few). 20 us missed the small pieces of per-head runs. Wall
// time, not the thread's CPU time: CLOCK_THREAD_CPUTIME_ID is a system call
// on every poll, the monotonic clock is not, and a poll that was only
// preempted merely keeps the endpoint spinning a little longer.
#define BUSY_POLL_S 5e-6

static rg_status_t fabric_progress(rg_transport_t *t) {
  fab_t *f = t->impl;
  struct fi_cq_tagged_entry ents[16];
  for (int round = 0; round < 64; round++) {
    double c0 = round == 0 ? rg_clock_now() : 0;
    ssize_t n = fi_cq_read(f->cq, ents, 16);
    if (round == 0 && rg_clock_now() - c0 > BUSY_POLL_S) f->last_activity = rg_clock_now();
    if (n > 0) {
      f->last_activity = rg_clock_now();
      for (ssize_t i = 0; i < n; i++) on_done(f, &ents[i]);
      continue;
    }
    if (n == -FI_EAGAIN) break;
    if (n == -FI_EAVAIL) {
      struct fi_cq_err_entry err;
      memset(&err, 0, sizeof(err));
      if (fi_cq_readerr(f->cq, &err, 0) > 0) {
        f->last_activity = rg_clock_now();
        on_error(f, &err);
      }
      continue;
    }
    return fi_status((int)n, "fi_cq_read");
  }
  // Sends and receives in order, stopping at the first the provider still
  // refuses; writes each on their own.
  for (int q = Q_TX; q <= Q_RX; q++) {
    while (f->head[q]) {
      op_t *o = f->head[q];
      rg_transport_req_t *r = o->main.r;
      backlog_remove(f, o);
      int rc = post_main(f, r);  // may finish (and free) r
      if (rc == -FI_EAGAIN) {
        backlog_put(f, o, true);
        break;
      }
      if (rc) finish(f, r, is_peer_error(-rc) ? RG_PEER_LOST : RG_IO, 0, fi_strerror(-rc));
    }
  }
  // Each write once: advance_write takes it off the head and may put it back
  // at the tail, behind the ones not yet visited.
  size_t n_writes = 0;
  for (op_t *o = f->head[Q_WRITE]; o; o = o->bnext) n_writes++;
  for (size_t i = 0; i < n_writes && f->head[Q_WRITE]; i++)
    advance_write(f, f->head[Q_WRITE]->main.r);
  return NULL;
}

static void fabric_sleep(rg_transport_t *t, double until) {
  fab_t *f = t->impl;
  double now = rg_clock_now(), left = until - now;
  if (left <= 0 || !backlog_empty(f)) return;
  // Right after activity an answer is likely within microseconds: spin
  // rather than pay a scheduler wake-up (tens of microseconds, far more on
  // a loaded machine) for it.
  double idle = now - f->last_activity;
  if (idle < 50e-6) return;
  // A write in flight moves only as this side polls (tcp sends its bytes
  // from inside fi_cq_read; every provider here reports the pieces' delivery
  // there), so the sender never sleeps while it has one; nor does a
  // receiver that holds some chunks of a write and waits for the rest (shm
  // copies them in, and tcp reads them, only as it polls); it yields, which
  // costs nothing when no other thread wants this core and hands the core
  // to the receiver when both share one.
  if (f->writes_active || t->gathering) {
    rg__ep_unlock(t);
    sched_yield();
    rg__ep_relock(t);
    return;
  }
  if (f->wait_fd >= 0) {
    struct fid *fids[1] = {&f->cq->fid};
    if (fi_trywait(f->fabric, fids, 1) != FI_SUCCESS) return;
    // Capped, so that events the fd might not cover (connection set-up in
    // some providers) are still progressed within 100 ms.
    // A shared endpoint (see transport_impl.h) caps it at 1 ms: another
    // thread may read the completion this one waits for.
    double cap = t->shared ? 1e-3 : 0.1;
    int ms = left > cap ? (int)(cap * 1e3) : (int)(left * 1e3) + 1;
    struct pollfd p = {.fd = f->wait_fd, .events = POLLIN};
    rg__ep_unlock(t);
    poll(&p, 1, ms);
    rg__ep_relock(t);
    return;
  }
  if (idle < 200e-6) {
    rg__ep_unlock(t);
    sched_yield();
    rg__ep_relock(t);
    return;
  }
  // Sleep an eighth of the time already idle: a completion is seen at most
  // ~12% later than it came, and a long-idle endpoint wakes once a cap.
  double d = idle / 8;
  if (d > 1e-3) d = 1e-3;
  if (d > left) d = left;
  struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)(d * 1e9)};
  rg__ep_unlock(t);
  nanosleep(&ts, NULL);
  rg__ep_relock(t);
}

static bool fabric_cancel(rg_transport_req_t *r) {
  fab_t *f = r->t->impl;
  op_t *o = op_of(r);
  if (o->in_backlog && !o->main_posted && (r->kind != RG__OP_WRITE || o->outstanding == 0)) {
    release(f, r);
    return true;
  }
  o->cancelling = true;
  if (r->kind == RG__OP_SEND || r->kind == RG__OP_WRITE) {
    // Posted sends and writes cannot be recalled; the backend lets go of
    // them when their completions arrive (or the endpoint closes).
    return !r->held;
  }
  fi_cancel(&f->ep->fid, &o->main.fctx);
  double until = rg_clock_now() + CANCEL_WAIT_S;
  while (r->held && rg_clock_now() < until) {
    rg_status_t s = fabric_progress(r->t);
    rg_status_free(s);
  }
  return !r->held;
}

static rg_status_t fabric_wait_fd(rg_transport_t *t, int *out_fd) {
  fab_t *f = t->impl;
  if (f->wait_fd < 0)
    return rg_status_make(RG_UNIMPLEMENTED,
                          "the %s completion queue has no wait fd (it takes FI_WAIT_NONE only); "
                          "poll rg_transport_progress from a timer, backing off when idle",
                          t->provider);
  *out_fd = f->wait_fd;
  return NULL;
}

static bool fabric_trywait(rg_transport_t *t) {
  fab_t *f = t->impl;
  if (!backlog_empty(f)) return false;
  if (f->wait_fd < 0) return true;
  struct fid *fids[1] = {&f->cq->fid};
  return fi_trywait(f->fabric, fids, 1) == FI_SUCCESS;
}

// ---------------------------------------------------------------------------
// Addresses.

static rg_status_t fabric_address(const rg_transport_t *t, uint8_t *buf, size_t cap,
                                  size_t *out_len) {
  const fab_t *f = t->impl;
  size_t pl = strlen(t->provider);
  if (cap < 1 + pl + f->name_len)
    return rg_status_make(RG_INVALID_ARGUMENT, "address buffer of %zu bytes is too small (%zu)",
                          cap, 1 + pl + f->name_len);
  buf[0] = (uint8_t)pl;
  memcpy(buf + 1, t->provider, pl);
  memcpy(buf + 1 + pl, f->name, f->name_len);
  *out_len = 1 + pl + f->name_len;
  return NULL;
}

static rg_status_t fabric_peer_add(rg_transport_t *t, const uint8_t *addr, size_t len,
                                   uint64_t *out) {
  fab_t *f = t->impl;
  if (len < 2 || (size_t)addr[0] + 1 >= len)
    return rg_status_make(RG_INVALID_ARGUMENT, "the fabric address (%zu bytes) is malformed", len);
  size_t pl = addr[0];
  if (pl != strlen(t->provider) || memcmp(addr + 1, t->provider, pl) != 0)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "the address is for libfabric provider '%.*s', but this endpoint uses "
                          "'%s'",
                          (int)pl, (const char *)addr + 1, t->provider);
  fi_addr_t fa = FI_ADDR_NOTAVAIL;
  int rc = fi_av_insert(f->av, addr + 1 + pl, 1, &fa, 0, NULL);
  if (rc != 1) return fi_status(rc < 0 ? rc : -FI_EINVAL, "fi_av_insert");
  *out = (uint64_t)fa;
  return NULL;
}

static void fabric_destroy(rg_transport_t *t) {
  fab_t *f = t->impl;
  // Closing the endpoint first stops every operation; nothing reports on
  // them afterwards, so their state goes with it.
  fi_close(&f->ep->fid);
  for (rg_transport_req_t *r = t->live; r; r = r->next)
    if (r->held) op_cleanup(op_of(r));
  for (rg_transport_region_t *g = t->regions; g; g = g->next) fabric_region_deregister(g);
  fi_close(&f->cq->fid);
  fi_close(&f->av->fid);
  fi_close(&f->domain->fid);
  fi_close(&f->fabric->fid);
  fi_freeinfo(f->info);
  if (f->sink) munmap(f->sink, f->sink_len);
  free(f);
  t->impl = NULL;
}

const rg__vtable_t rg__fabric_vtable = {
    .op_size = sizeof(op_t),
    .destroy = fabric_destroy,
    .address = fabric_address,
    .peer_add = fabric_peer_add,
    .region_register = fabric_region_register,
    .region_deregister = fabric_region_deregister,
    .post = fabric_post,
    .progress = fabric_progress,
    .sleep = fabric_sleep,
    .cancel = fabric_cancel,
    .wait_fd = fabric_wait_fd,
    .trywait = fabric_trywait,
};
