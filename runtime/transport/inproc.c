// The in-process transport: endpoints of one process, each driven by its own
// thread or all by one, moving bytes with memcpy.
//
// All state shared between endpoints (the registry of endpoints, their queues
// and regions) sits under one process-wide mutex. That is simple and enough
// for tests and the single-process pipeline; a memcpy of a large write holds
// it, which would matter only with many threads copying at once.
//
// Matching is a rendezvous, as with a large message over libfabric: a send
// waits in the receiver's queue of unexpected messages until a receive
// matches it, and both complete then, so a sender's buffer is read exactly
// once, directly into the receiver's. Each endpoint has an eventfd that is
// written whenever one of its requests completes: that is what its owner
// sleeps on, and its wait fd for event loops.
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "runtime/transport/transport_impl.h"

typedef struct region_s {
  uint64_t id, key;
  uint8_t *base;
  size_t len;
  unsigned access;
  struct region_s *next;
} region_t;

typedef struct ep_s ep_t;

// Per-request state, in the request's impl area.
typedef struct op_s {
  rg_transport_req_t *r;
  struct op_s *qprev, *qnext;
  ep_t *queued_at;    // the endpoint whose queue holds it
  uint64_t from;      // the posting endpoint's id
  size_t next_chunk;  // a write: the chunk whose notice goes to the next match
} op_t;

typedef struct {
  op_t *head, *tail;
} queue_t;

struct ep_s {
  uint64_t id;
  rg_transport_t *t;
  int efd;
  queue_t posted;      // this endpoint's receives and notice receives
  queue_t unexpected;  // peers' sends and write notices no receive has matched yet
  region_t *regions;
  ep_t *next;
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static ep_t *g_eps;
static uint64_t g_next_id = 1;

static op_t *op_of(rg_transport_req_t *r) {
  return (op_t *)rg__op_impl(r);
}

static ep_t *find_ep(uint64_t id) {
  for (ep_t *e = g_eps; e; e = e->next)
    if (e->id == id) return e;
  return NULL;
}

static void enqueue(ep_t *e, queue_t *q, op_t *o) {
  o->qnext = NULL;
  o->qprev = q->tail;
  if (q->tail)
    q->tail->qnext = o;
  else
    q->head = o;
  q->tail = o;
  o->queued_at = e;
}

static void dequeue(queue_t *q, op_t *o) {
  if (o->qprev)
    o->qprev->qnext = o->qnext;
  else
    q->head = o->qnext;
  if (o->qnext)
    o->qnext->qprev = o->qprev;
  else
    q->tail = o->qprev;
  o->qprev = o->qnext = NULL;
  o->queued_at = NULL;
}

static void unqueue(op_t *o) {
  ep_t *e = o->queued_at;
  if (!e) return;
  bool is_posted = o->r->kind == RG__OP_RECV || o->r->kind == RG__OP_NOTICE;
  dequeue(is_posted ? &e->posted : &e->unexpected, o);
}

static void wake(ep_t *e) {
  uint64_t one = 1;
  // A full counter (EAGAIN) already wakes the owner, so the result is moot.
  ssize_t n = write(e->efd, &one, sizeof(one));
  (void)n;
}

// Finishes r (already out of every queue) and wakes its owner. r's endpoint is
// read first: once finished, its owner may free r.
static void done(rg_transport_req_t *r, rg_code_t code, size_t got, const char *why) {
  ep_t *owner = r->t->impl;
  if (why)
    rg__op_finish(r, code, got, "%s", why);
  else
    rg__op_finish(r, code, got, NULL);
  wake(owner);
}

// A send (or a write's next chunk notices, as many as the receive takes)
// meets a receive: copy, finish the receive, and the send once its last
// message is taken. A write stays
// queued (where it was, or at the back of dst's unexpected queue) while it
// has chunk notices left.
static void deliver(ep_t *dst, op_t *snd, op_t *rcv) {
  unqueue(rcv);
  rg_transport_req_t *s = snd->r, *r = rcv->r;
  const void *msg = s->buf;
  size_t len = s->len;
  bool last = true;
  if (s->kind == RG__OP_WRITE) {
    // As many chunk notices as fit (they lie back to back), at least one.
    const rg__write_t *w = s->w;
    const rg__chunk_t *c = &w->chunks[snd->next_chunk++];
    msg = c->notice;
    len = c->notice_len;
    while (snd->next_chunk < w->n_chunks && len + w->chunks[snd->next_chunk].notice_len <= r->len)
      len += w->chunks[snd->next_chunk++].notice_len;
    last = snd->next_chunk == w->n_chunks;
  }
  if (len > r->len) {
    ep_t *owner = r->t->impl;
    rg__op_truncated(r, len);
    wake(owner);
  } else {
    if (len) memcpy(r->buf, msg, len);
    done(r, RG_OK, len, NULL);
  }
  if (!last) {
    if (!snd->queued_at) enqueue(dst, &dst->unexpected, snd);
    return;
  }
  unqueue(snd);
  done(s, RG_OK, s->kind == RG__OP_WRITE ? (size_t)s->w->total : s->len, NULL);
}

static op_t *match(queue_t *q, uint64_t from, uint64_t tag) {
  for (op_t *o = q->head; o; o = o->qnext)
    if (o->from == from && o->r->tag == tag) return o;
  return NULL;
}

static const char *const closed_why = "peer lost: its endpoint was closed";

// Hands a send or write notice to `dst`: to a matching receive, or into its
// unexpected queue.
static void offer(ep_t *self, ep_t *dst, op_t *o) {
  o->from = self->id;
  op_t *rcv = NULL;
  for (op_t *p = dst->posted.head; p; p = p->qnext)
    if (p->r->peer_handle == self->id && p->r->tag == o->r->tag) {
      rcv = p;
      break;
    }
  if (rcv)
    deliver(dst, o, rcv);
  else
    enqueue(dst, &dst->unexpected, o);
}

static rg_status_t copy_write(ep_t *dst, rg_transport_req_t *r) {
  rg__write_t *w = r->w;
  region_t *g = dst->regions;
  while (g && g->id != w->dst_region) g = g->next;
  if (!g)
    return rg_status_make(RG_PROTOCOL, "the peer has no region %" PRIu64 " registered",
                          w->dst_region);
  if (!(g->access & RG_TRANSPORT_WRITE_TARGET) || g->key != w->dst_key)
    return rg_status_make(RG_PROTOCOL,
                          "region %" PRIu64 " of the peer does not accept writes with this key",
                          w->dst_region);
  rg__runs_t c;
  const uint8_t *src;
  uint64_t off, len;
  rg__runs_init(&c, w);
  while (rg__runs_next(&c, 0, &src, &off, &len))
    if (off + len > g->len)
      return rg_status_make(
          RG_PROTOCOL, "the write reaches byte %" PRIu64 " of the peer's %zu-byte region %" PRIu64,
          off + len, g->len, g->id);
  // Chunk by chunk, the checksum of each run is taken right after its copy,
  // while the run is still in cache: one pass over memory rather than two.
  rg__runs_init(&c, w);
  while (rg__runs_next(&c, 0, &src, &off, &len)) {
    if (w->gruns) rg__write_gather(w, src, len);
    memcpy(g->base + off, src, len);
    rg__write_hash_bytes(w, src, len);
    if (rg__runs_chunk(&c) != w->n_hashed) rg__write_seal_chunk(w);
  }
  // The test hook: one bit of the landed data differs from what was hashed.
  if (w->corrupt) g->base[w->ents[w->chunks[w->corrupt_chunk].first].dst_offset] ^= 0x10;
  return NULL;
}

static rg_status_t inproc_post(rg_transport_req_t *r) {
  ep_t *self = r->t->impl;
  op_t *o = op_of(r);
  o->r = r;
  rg_status_t s = NULL;
  pthread_mutex_lock(&g_lock);
  ep_t *peer = find_ep(r->peer_handle);
  switch (r->kind) {
    case RG__OP_SEND:
      if (!peer)
        s = rg_status_make(RG_PEER_LOST, "%s", closed_why);
      else
        offer(self, peer, o);
      break;
    case RG__OP_WRITE:
      if (!peer)
        s = rg_status_make(RG_PEER_LOST, "%s", closed_why);
      else if (!(s = copy_write(peer, r)))
        offer(self, peer, o);
      break;
    case RG__OP_RECV:
    case RG__OP_NOTICE: {
      o->from = self->id;
      op_t *snd = match(&self->unexpected, r->peer_handle, r->tag);
      if (snd)
        deliver(self, snd, o);
      else if (!peer)
        s = rg_status_make(RG_PEER_LOST, "%s", closed_why);
      else
        enqueue(self, &self->posted, o);
      break;
    }
    default:
      s = rg_status_make(RG_INTERNAL, "unknown operation");
  }
  pthread_mutex_unlock(&g_lock);
  return s;
}

static bool inproc_cancel(rg_transport_req_t *r) {
  pthread_mutex_lock(&g_lock);
  op_t *o = op_of(r);
  if (o->queued_at) {
    unqueue(o);
    r->held = false;
  }
  pthread_mutex_unlock(&g_lock);
  return true;
}

static rg_status_t inproc_progress(rg_transport_t *t) {
  ep_t *e = t->impl;
  uint64_t n;
  // Completions were delivered by whoever matched them; only the wake-up
  // count needs clearing, so the next sleep waits for a new one.
  while (read(e->efd, &n, sizeof(n)) == sizeof(n)) {
  }
  return NULL;
}

static void inproc_sleep(rg_transport_t *t, double until) {
  ep_t *e = t->impl;
  double left = until - rg_clock_now();
  if (left <= 0) return;
  // A shared endpoint (see transport_impl.h) caps it at 1 ms: another of its
  // threads may drain the eventfd that would have woken this one.
  double cap = t->shared ? 1e-3 : 1.0;
  int ms = left > cap ? (int)(cap * 1e3) : (int)(left * 1e3) + 1;
  struct pollfd p = {.fd = e->efd, .events = POLLIN};
  rg__ep_unlock(t);
  poll(&p, 1, ms);
  rg__ep_relock(t);
}

static rg_status_t inproc_wait_fd(rg_transport_t *t, int *out_fd) {
  *out_fd = ((ep_t *)t->impl)->efd;
  return NULL;
}

static bool inproc_trywait(rg_transport_t *t) {
  return true;
}

static rg_status_t inproc_address(const rg_transport_t *t, uint8_t *buf, size_t cap,
                                  size_t *out_len) {
  if (cap < 12) return rg_status_make(RG_INVALID_ARGUMENT, "address buffer too small");
  rg__put32(buf, (uint32_t)getpid());
  rg__put64(buf + 4, ((const ep_t *)t->impl)->id);
  *out_len = 12;
  return NULL;
}

static rg_status_t inproc_peer_add(rg_transport_t *t, const uint8_t *addr, size_t len,
                                   uint64_t *out) {
  if (len != 12)
    return rg_status_make(RG_INVALID_ARGUMENT, "an in-process address is 12 bytes, not %zu", len);
  uint32_t pid = rg__get32(addr);
  uint64_t id = rg__get64(addr + 4);
  if (pid != (uint32_t)getpid())
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "the in-process address belongs to process %u, not this one (%u); use "
                          "the fabric transport between processes",
                          pid, (unsigned)getpid());
  pthread_mutex_lock(&g_lock);
  bool found = find_ep(id) != NULL;
  pthread_mutex_unlock(&g_lock);
  if (!found)
    return rg_status_make(RG_NOT_FOUND, "in-process endpoint %" PRIu64 " does not exist (closed?)",
                          id);
  *out = id;
  return NULL;
}

// Keys only need to differ between registrations, so that a stale or forged
// descriptor is refused; splitmix64 of a counter and the time does that.
static uint64_t new_key(uint64_t id) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t z = id * 0x9e3779b97f4a7c15ull + (uint64_t)ts.tv_nsec + ((uint64_t)ts.tv_sec << 30);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static rg_status_t inproc_region_register(rg_transport_region_t *g) {
  ep_t *e = g->t->impl;
  region_t *x = calloc(1, sizeof(*x));
  if (!x) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
  x->id = g->id;
  x->key = new_key(g->id ^ (e->id << 32));
  x->base = g->base;
  x->len = g->len;
  x->access = g->access;
  g->key = x->key;
  g->remote_base = 0;
  g->impl = x;
  pthread_mutex_lock(&g_lock);
  x->next = e->regions;
  e->regions = x;
  pthread_mutex_unlock(&g_lock);
  return NULL;
}

static void inproc_region_deregister(rg_transport_region_t *g) {
  ep_t *e = g->t->impl;
  pthread_mutex_lock(&g_lock);
  for (region_t **p = &e->regions; *p; p = &(*p)->next)
    if (*p == g->impl) {
      *p = (*p)->next;
      break;
    }
  pthread_mutex_unlock(&g_lock);
  free(g->impl);
  g->impl = NULL;
}

static void inproc_destroy(rg_transport_t *t) {
  ep_t *e = t->impl;
  pthread_mutex_lock(&g_lock);
  for (ep_t **p = &g_eps; *p; p = &(*p)->next)
    if (*p == e) {
      *p = e->next;
      break;
    }
  // Peers' sends waiting here, and peers' receives waiting on this endpoint,
  // fail now: nothing will ever match them.
  while (e->unexpected.head) {
    op_t *o = e->unexpected.head;
    unqueue(o);
    done(o->r, RG_PEER_LOST, 0, closed_why);
  }
  for (ep_t *x = g_eps; x; x = x->next) {
    for (op_t *o = x->posted.head, *next; o; o = next) {
      next = o->qnext;
      if (o->r->peer_handle != e->id) continue;
      unqueue(o);
      done(o->r, RG_PEER_LOST, 0, closed_why);
    }
    // This endpoint's own sends waiting at peers are withdrawn; the front end
    // cancels them.
    for (op_t *o = x->unexpected.head, *next; o; o = next) {
      next = o->qnext;
      if (o->from == e->id) unqueue(o);
    }
  }
  while (e->posted.head) unqueue(e->posted.head);
  pthread_mutex_unlock(&g_lock);
  for (rg_transport_region_t *g = t->regions; g; g = g->next) {
    free(g->impl);
    g->impl = NULL;
  }
  close(e->efd);
  free(e);
  t->impl = NULL;
}

rg_status_t rg__inproc_open(rg_transport_t *t, const rg_transport_options_t *opt) {
  ep_t *e = calloc(1, sizeof(*e));
  if (!e) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
  e->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (e->efd < 0) {
    rg_status_t s = rg_status_make(RG_IO, "eventfd: %s", strerror(errno));
    free(e);
    return s;
  }
  e->t = t;
  pthread_mutex_lock(&g_lock);
  e->id = g_next_id++;
  e->next = g_eps;
  g_eps = e;
  pthread_mutex_unlock(&g_lock);
  t->impl = e;
  snprintf(t->provider, sizeof(t->provider), "inproc");
  snprintf(t->describe, sizeof(t->describe),
           "inproc endpoint %" PRIu64 " (memcpy within this process; waits on an eventfd)", e->id);
  return NULL;
}

const rg__vtable_t rg__inproc_vtable = {
    .op_size = sizeof(op_t),
    .destroy = inproc_destroy,
    .address = inproc_address,
    .peer_add = inproc_peer_add,
    .region_register = inproc_region_register,
    .region_deregister = inproc_region_deregister,
    .post = inproc_post,
    .progress = inproc_progress,
    .sleep = inproc_sleep,
    .cancel = inproc_cancel,
    .wait_fd = inproc_wait_fd,
    .trywait = inproc_trywait,
};
