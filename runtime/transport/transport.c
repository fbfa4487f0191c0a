// The transport's front end: argument checks, requests and their results, the
// wait loop with its deadline, peers, regions, the write notice (building it,
// and checking it on arrival) and every message a user sees. The backends
// only move bytes.
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>
// The library also exports XXH3 entry points that pick the widest vector
// unit at run time (AVX2, AVX-512); the plain ones are built for SSE2 only.
#include <xxh_x86dispatch.h>

#include "runtime/transport/transport_impl.h"

static const char *const kind_names[] = {
#define RG_X_(c, n) n,
    RG_TRANSPORT_KIND_MAP(RG_X_)
#undef RG_X_
};
_Static_assert(sizeof(kind_names) / sizeof(kind_names[0]) == RG_TRANSPORT_KIND_COUNT,
               "kind name table out of step with RG_TRANSPORT_KIND_MAP");

static const char *const op_names[] = {
#define RG_X_(c, n) n,
    RG__OP_KIND_MAP(RG_X_)
#undef RG_X_
};
_Static_assert(sizeof(op_names) / sizeof(op_names[0]) == RG__OP_KIND_COUNT,
               "op name table out of step with RG__OP_KIND_MAP");

const char *rg_transport_kind_name(rg_transport_kind_t kind) {
  return (unsigned)kind < RG_TRANSPORT_KIND_COUNT ? kind_names[kind] : "unknown";
}

// The endpoint lock (see transport_impl.h). Locking also notes whether a
// second thread has used the endpoint.
static void ep_lock(rg_transport_t *t) {
  pthread_mutex_lock(&t->mu);
  pthread_t self = pthread_self();
  if (!t->has_owner) {
    t->owner = self;
    t->has_owner = true;
  } else if (!t->shared && !pthread_equal(t->owner, self)) {
    t->shared = true;
  }
}

static void ep_unlock(rg_transport_t *t) {
  pthread_mutex_unlock(&t->mu);
}

void rg__ep_unlock(rg_transport_t *t) {
  pthread_mutex_unlock(&t->mu);
}

void rg__ep_relock(rg_transport_t *t) {
  pthread_mutex_lock(&t->mu);
}

static void copy_str(char *dst, size_t cap, const char *src) {
  snprintf(dst, cap, "%s", src);
}
static void settle(rg_transport_req_t *r);

// ---------------------------------------------------------------------------
// Endpoints.

rg_status_t rg_transport_create(const rg_transport_options_t *opt, rg_transport_t **out) {
  *out = NULL;
  if (!opt) return rg_status_make(RG_INVALID_ARGUMENT, "transport: no options given");
  if ((unsigned)opt->kind >= RG_TRANSPORT_KIND_COUNT)
    return rg_status_make(RG_INVALID_ARGUMENT, "transport: unknown kind %d (known: inproc, fabric)",
                          (int)opt->kind);
  if (opt->timeout_s < 0)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "transport: timeout_s is %g; it must be positive (0 = %g s)",
                          opt->timeout_s, RG_TRANSPORT_DEFAULT_TIMEOUT_S);
  rg_transport_t *t = calloc(1, sizeof(*t));
  if (!t) return rg_status_make(RG_OUT_OF_MEMORY, "transport: out of memory");
  t->kind = opt->kind;
  copy_str(t->name, sizeof(t->name), opt->name && opt->name[0] ? opt->name : "endpoint");
  t->timeout_s = opt->timeout_s > 0 ? opt->timeout_s : RG_TRANSPORT_DEFAULT_TIMEOUT_S;
  t->register_local = opt->register_local;
  t->chunk_bytes = opt->chunk_bytes ? opt->chunk_bytes : RG__DEFAULT_CHUNK_BYTES;
  // Write ids tell one write's chunks from another's; they need only differ
  // between the writes a receiver might confuse, so a per-endpoint counter
  // from a time-based start will do.
  t->next_write_id = (uint64_t)(rg_clock_now() * 1e9) << 8;
  t->next_region_id = 1;
  pthread_mutex_init(&t->mu, NULL);
  rg_status_t s;
  if (opt->kind == RG_TRANSPORT_INPROC) {
    t->vt = &rg__inproc_vtable;
    s = rg__inproc_open(t, opt);
  } else {
    t->vt = &rg__fabric_vtable;
    s = rg__fabric_open(t, opt);
  }
  if (s) {
    pthread_mutex_destroy(&t->mu);
    free(t);
    return rg_status_wrap(s, "transport '%s'", opt->name && opt->name[0] ? opt->name : "endpoint");
  }
  *out = t;
  return NULL;
}

static void free_write(rg__write_t *w) {
  if (!w) return;
  free(w->ents);
  free(w->ent_chunk);
  free(w->chunks);
  free(w->notices);
  if (w->hash_state) XXH3_freeState(w->hash_state);
  free(w->gruns);
  free(w);
}

// r stops counting as a transfer in flight (see rg_transport_t.gathering).
static void ungather(rg_transport_req_t *r) {
  if (!r->g || !r->g->counted) return;
  r->g->counted = false;
  if (r->t) r->t->gathering--;
}

// Frees r and unlinks it from its endpoint's live list.
static void free_req(rg_transport_req_t *r) {
  rg_transport_t *t = r->t;
  ungather(r);
  if (t) {
    if (r->prev)
      r->prev->next = r->next;
    else
      t->live = r->next;
    if (r->next) r->next->prev = r->prev;
  }
  if (r->kind == RG__OP_NOTICE) free(r->buf);
  free_write(r->w);
  if (r->g) {
    free(r->g->seen);
    free(r->g->bad_msg);
    if (r->g->hash) XXH3_freeState(r->g->hash);
    free(r->g);
  }
  free(r->msg);
  free(r);
}

static bool has_arrived(const rg_transport_req_t *r) {
  return atomic_load_explicit(&r->arrived, memory_order_acquire) != 0;
}

static void vset_result(rg_transport_req_t *r, rg_code_t code, const char *fmt, va_list ap) {
  char reason[1024], what[512];
  vsnprintf(reason, sizeof(reason), fmt, ap);
  rg__op_describe(r, what, sizeof(what));
  size_t n = strlen(what) + strlen(reason) + 3;
  free(r->msg);
  r->msg = malloc(n);
  if (r->msg) snprintf(r->msg, n, "%s: %s", what, reason);
  r->code = code;
}

// The front end's own result (deadline, peer_fail, destroy, a failed check),
// given only when the backend does not hold r or after vt->cancel.
static void set_result(rg_transport_req_t *r, rg_code_t code, const char *fmt, ...) RG_PRINTF(3, 4);
static void set_result(rg_transport_req_t *r, rg_code_t code, const char *fmt, ...) {
  if (has_arrived(r)) return;
  va_list ap;
  va_start(ap, fmt);
  vset_result(r, code, fmt, ap);
  va_end(ap);
  atomic_store_explicit(&r->arrived, 1, memory_order_release);
}

// A failure found by the owner after arrival (notice checks): replaces OK.
static void fail_settled(rg_transport_req_t *r, rg_code_t code, const char *fmt, ...)
    RG_PRINTF(3, 4);
static void fail_settled(rg_transport_req_t *r, rg_code_t code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vset_result(r, code, fmt, ap);
  va_end(ap);
}

void rg__op_finish(rg_transport_req_t *r, rg_code_t code, size_t got, const char *fmt, ...) {
  if (!has_arrived(r)) {
    r->got = got;
    if (code != RG_OK) {
      va_list ap;
      va_start(ap, fmt);
      vset_result(r, code, fmt ? fmt : "failed", ap);
      va_end(ap);
    }
  }
  r->held = false;
  bool orphan = !r->user_owned;
  // After this store the owner may free r, so nothing of r is read below.
  atomic_store_explicit(&r->arrived, 1, memory_order_release);
  if (orphan) free_req(r);
}

void rg__op_release(rg_transport_req_t *r) {
  r->held = false;
  if (!r->user_owned) free_req(r);
}

void rg__op_truncated(rg_transport_req_t *r, uint64_t message_bytes) {
  if (r->kind == RG__OP_NOTICE) {
    rg__op_finish(r, RG_TRUNCATED, 0,
                  "the notice is %" PRIu64
                  " bytes, more than a notice of at most %d segments "
                  "and %zu payload bytes can be; truncated, not used",
                  message_bytes, RG_TRANSPORT_MAX_SEGMENTS, r->user_cap);
    return;
  }
  rg__op_finish(r, RG_TRUNCATED, 0,
                "the message is %" PRIu64
                " bytes, longer than the %zu-byte buffer posted; "
                "truncated, not used",
                message_bytes, r->len);
}

static const char *peer_name_of(const rg_transport_t *t, rg_transport_peer_t p) {
  return p >= 0 && (size_t)p < t->n_peers ? t->peers[p].name : "an unknown peer";
}

void rg__op_describe(const rg_transport_req_t *r, char *buf, size_t cap) {
  const rg_transport_t *t = r->t;
  const char *peer = t ? peer_name_of(t, r->peer) : "a peer";
  const char *self = t ? t->name : "a destroyed endpoint";
  const char *stage = r->stage[0] ? r->stage : "transfer";
  const char *kind = op_names[r->kind];
  switch (r->kind) {
    case RG__OP_SEND:
      snprintf(buf, cap, "%s: %s of %zu bytes (tag 0x%" PRIx64 ") from %s to %s", stage, kind,
               r->len, r->tag, self, peer);
      break;
    case RG__OP_RECV:
      snprintf(buf, cap, "%s: %s of up to %zu bytes (tag 0x%" PRIx64 ") from %s at %s", stage, kind,
               r->len, r->tag, peer, self);
      break;
    case RG__OP_WRITE:
      snprintf(buf, cap,
               "%s: %s of %" PRIu64 " bytes in %zu segments (notice tag 0x%" PRIx64
               ") from %s to %s",
               stage, kind, r->w->total, r->w->n_segs, r->tag, self, peer);
      break;
    case RG__OP_NOTICE:
      snprintf(buf, cap, "%s: %s with up to %zu payload bytes (tag 0x%" PRIx64 ") from %s at %s",
               stage, kind, r->user_cap, r->tag, peer, self);
      break;
    default:
      snprintf(buf, cap, "%s: operation", stage);
  }
}

void rg_transport_destroy(rg_transport_t *t) {
  if (!t) return;
  // The backend stops first, so no thread or completion touches a request
  // below; then what arrived is checked, and the rest is cancelled.
  t->closing = true;
  t->vt->destroy(t);
  for (rg_transport_req_t *r = t->live, *next; r; r = next) {
    next = r->next;
    if (!has_arrived(r))
      set_result(r, RG_CANCELLED, "cancelled: %s was destroyed with the operation in flight",
                 t->name);
    r->held = false;
  }
  for (rg_transport_req_t *r = t->live; r; r = r->next) settle(r);
  for (rg_transport_region_t *g = t->regions, *next; g; g = next) {
    next = g->next;
    free(g);
  }
  for (rg_transport_req_t *r = t->live, *next; r; r = next) {
    next = r->next;
    if (!r->user_owned) {
      free_req(r);
    } else {
      r->t = NULL;
      r->prev = r->next = NULL;
    }
  }
  for (size_t i = 0; i < t->n_peers; i++) free(t->peers[i].failed);
  free(t->peers);
  pthread_mutex_destroy(&t->mu);
  free(t);
}

rg_transport_kind_t rg_transport_kind(const rg_transport_t *t) {
  return t->kind;
}
const char *rg_transport_name(const rg_transport_t *t) {
  return t->name;
}
const char *rg_transport_describe(const rg_transport_t *t) {
  return t->describe;
}
const char *rg_transport_provider(const rg_transport_t *t) {
  return t->provider;
}

rg_status_t rg_transport_providers(char *buf, size_t cap) {
  return rg__fabric_providers(buf, cap);
}

// ---------------------------------------------------------------------------
// Addresses and peers.

rg_status_t rg_transport_address(const rg_transport_t *t, uint8_t *buf, size_t cap,
                                 size_t *out_len) {
  *out_len = 0;
  if (cap < RG__ADDR_HEADER)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "transport '%s': address buffer of %zu bytes is too small", t->name, cap);
  memcpy(buf, RG__ADDR_MAGIC, 4);
  buf[4] = (uint8_t)t->kind;
  size_t n = 0;
  RG_RETURN_IF_ERROR(t->vt->address(t, buf + RG__ADDR_HEADER, cap - RG__ADDR_HEADER, &n));
  *out_len = RG__ADDR_HEADER + n;
  return NULL;
}

static rg_status_t peer_add_locked(rg_transport_t *t, const uint8_t *addr, size_t len,
                                   const char *name, rg_transport_peer_t *out) {
  *out = -1;
  const char *who = name && name[0] ? name : "peer";
  if (!addr || len < RG__ADDR_HEADER || memcmp(addr, RG__ADDR_MAGIC, 4) != 0)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "transport '%s': the address given for %s (%zu bytes) is not a ridge "
                          "transport address",
                          t->name, who, addr ? len : 0);
  if (addr[4] != (uint8_t)t->kind)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "transport '%s': %s has a %s address, but this endpoint is %s", t->name,
                          who, rg_transport_kind_name((rg_transport_kind_t)addr[4]),
                          rg_transport_kind_name(t->kind));
  if (t->n_peers == t->cap_peers) {
    size_t cap = t->cap_peers ? 2 * t->cap_peers : 8;
    rg__peer_t *np = realloc(t->peers, cap * sizeof(*np));
    if (!np) return rg_status_make(RG_OUT_OF_MEMORY, "transport '%s': out of memory", t->name);
    t->peers = np;
    t->cap_peers = cap;
  }
  uint64_t handle = 0;
  rg_status_t s = t->vt->peer_add(t, addr + RG__ADDR_HEADER, len - RG__ADDR_HEADER, &handle);
  if (s) return rg_status_wrap(s, "transport '%s': adding %s", t->name, who);
  rg__peer_t *p = &t->peers[t->n_peers];
  memset(p, 0, sizeof(*p));
  copy_str(p->name, sizeof(p->name), who);
  p->handle = handle;
  *out = (rg_transport_peer_t)t->n_peers++;
  return NULL;
}

const char *rg_transport_peer_name(const rg_transport_t *t, rg_transport_peer_t peer) {
  return peer_name_of(t, peer);
}

static void peer_fail_locked(rg_transport_t *t, rg_transport_peer_t peer, const char *why) {
  if (peer < 0 || (size_t)peer >= t->n_peers) return;
  rg__peer_t *p = &t->peers[peer];
  if (!p->failed) p->failed = strdup(why && why[0] ? why : "reported lost");
  for (rg_transport_req_t *r = t->live; r; r = r->next) {
    if (r->peer != peer || has_arrived(r)) continue;
    if (r->held) t->vt->cancel(r);
    set_result(r, RG_PEER_LOST, "peer lost: %s", p->failed ? p->failed : "reported lost");
  }
}

// ---------------------------------------------------------------------------
// Posting.

static rg_status_t check_peer(rg_transport_t *t, rg_transport_peer_t peer, const char *what) {
  if (peer < 0 || (size_t)peer >= t->n_peers)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "transport '%s': %s names peer %d, but the endpoint has %zu peer%s",
                          t->name, what, (int)peer, t->n_peers, t->n_peers == 1 ? "" : "s");
  return NULL;
}

static rg_transport_req_t *new_req(rg_transport_t *t, rg__op_kind_t kind, rg_transport_peer_t peer,
                                   uint64_t tag, const char *stage) {
  rg_transport_req_t *r = calloc(1, sizeof(*r) + t->vt->op_size);
  if (!r) return NULL;
  r->t = t;
  r->kind = kind;
  r->peer = peer;
  r->peer_handle = t->peers[peer].handle;
  r->tag = tag;
  copy_str(r->stage, sizeof(r->stage), stage && stage[0] ? stage : "transfer");
  r->user_owned = true;
  atomic_init(&r->arrived, 0);
  return r;
}

// Links r into the endpoint and hands it to the backend; frees it on failure.
static rg_status_t post_req(rg_transport_t *t, rg_transport_req_t *r, rg_transport_req_t **out) {
  rg__peer_t *p = &t->peers[r->peer];
  if (p->failed) {
    char what[512];
    rg__op_describe(r, what, sizeof(what));
    rg_status_t s = rg_status_make(RG_PEER_LOST, "%s: peer lost: %s", what, p->failed);
    free_req(r);
    return s;
  }
  r->next = t->live;
  if (t->live) t->live->prev = r;
  t->live = r;
  r->held = true;
  rg_status_t s = t->vt->post(r);
  if (s) {
    char what[512];
    rg__op_describe(r, what, sizeof(what));
    r->held = false;
    free_req(r);
    return rg_status_wrap(s, "%s", what);
  }
  *out = r;
  return NULL;
}

static rg_status_t send_locked(rg_transport_t *t, rg_transport_peer_t peer, uint64_t tag,
                               const void *buf, size_t len, const char *stage,
                               rg_transport_req_t **out) {
  *out = NULL;
  RG_RETURN_IF_ERROR(check_peer(t, peer, "a send"));
  if (!buf && len)
    return rg_status_make(RG_INVALID_ARGUMENT, "transport '%s': send of %zu bytes from NULL",
                          t->name, len);
  rg_transport_req_t *r = new_req(t, RG__OP_SEND, peer, tag, stage);
  if (!r) return rg_status_make(RG_OUT_OF_MEMORY, "transport '%s': out of memory", t->name);
  r->buf = (void *)buf;
  r->len = len;
  return post_req(t, r, out);
}

static rg_status_t recv_locked(rg_transport_t *t, rg_transport_peer_t peer, uint64_t tag, void *buf,
                               size_t cap, const char *stage, rg_transport_req_t **out) {
  *out = NULL;
  RG_RETURN_IF_ERROR(check_peer(t, peer, "a receive"));
  if (!buf && cap)
    return rg_status_make(RG_INVALID_ARGUMENT, "transport '%s': receive of %zu bytes into NULL",
                          t->name, cap);
  rg_transport_req_t *r = new_req(t, RG__OP_RECV, peer, tag, stage);
  if (!r) return rg_status_make(RG_OUT_OF_MEMORY, "transport '%s': out of memory", t->name);
  r->buf = buf;
  r->len = cap;
  return post_req(t, r, out);
}

// ---------------------------------------------------------------------------
// Regions.

static rg_status_t region_register_locked(rg_transport_t *t, void *base, size_t len,
                                          unsigned access, rg_transport_region_t **out) {
  *out = NULL;
  if (!base || !len)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "transport '%s': cannot register an empty region (%zu bytes at %p)",
                          t->name, len, base);
  if (!access || (access & ~(unsigned)(RG_TRANSPORT_WRITE_SOURCE | RG_TRANSPORT_WRITE_TARGET)))
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "transport '%s': region access 0x%x is not a mix of WRITE_SOURCE and "
                          "WRITE_TARGET",
                          t->name, access);
  rg_transport_region_t *g = calloc(1, sizeof(*g));
  if (!g) return rg_status_make(RG_OUT_OF_MEMORY, "transport '%s': out of memory", t->name);
  g->t = t;
  g->base = base;
  g->len = len;
  g->access = access;
  g->id = t->next_region_id++;
  rg_status_t s = t->vt->region_register(g);
  if (s) {
    free(g);
    return rg_status_wrap(s, "transport '%s': registering %zu bytes", t->name, len);
  }
  g->next = t->regions;
  if (t->regions) t->regions->prev = g;
  t->regions = g;
  *out = g;
  return NULL;
}

static void region_deregister_locked(rg_transport_region_t *g) {
  rg_transport_t *t = g->t;
  t->vt->region_deregister(g);
  if (g->prev)
    g->prev->next = g->next;
  else
    t->regions = g->next;
  if (g->next) g->next->prev = g->prev;
  free(g);
}

void rg_transport_region_desc(const rg_transport_region_t *g, rg_transport_region_desc_t *out) {
  out->region_id = g->id;
  out->addr = g->remote_base;
  out->key = g->key;
  out->len = g->len;
  out->kind = (uint32_t)g->t->kind;
}

#define DESC_MAGIC 0x31444752u  // "RGD1"

void rg_transport_desc_encode(const rg_transport_region_desc_t *d,
                              uint8_t out[RG_TRANSPORT_DESC_BYTES]) {
  rg__put32(out, DESC_MAGIC);
  rg__put32(out + 4, d->kind);
  rg__put64(out + 8, d->region_id);
  rg__put64(out + 16, d->addr);
  rg__put64(out + 24, d->key);
  rg__put64(out + 32, d->len);
}

rg_status_t rg_transport_desc_decode(const uint8_t *buf, size_t len,
                                     rg_transport_region_desc_t *out) {
  memset(out, 0, sizeof(*out));
  if (!buf || len != RG_TRANSPORT_DESC_BYTES)
    return rg_status_make(RG_PROTOCOL, "region descriptor is %zu bytes, expected %d", buf ? len : 0,
                          RG_TRANSPORT_DESC_BYTES);
  if (rg__get32(buf) != DESC_MAGIC)
    return rg_status_make(RG_PROTOCOL, "not a region descriptor (magic 0x%08x)", rg__get32(buf));
  out->kind = rg__get32(buf + 4);
  if (out->kind >= RG_TRANSPORT_KIND_COUNT)
    return rg_status_make(RG_PROTOCOL, "region descriptor of unknown kind %u", out->kind);
  out->region_id = rg__get64(buf + 8);
  out->addr = rg__get64(buf + 16);
  out->key = rg__get64(buf + 24);
  out->len = rg__get64(buf + 32);
  return NULL;
}

// ---------------------------------------------------------------------------
// Writes.

typedef unsigned __int128 u128;

// Byte offsets of a segment's first and last run relative to the source
// region's base; false when they leave it.
static bool src_in_region(const rg_transport_segment_t *s, const rg_transport_region_t *g) {
  __int128 rel0 = (__int128)((intptr_t)s->src - (intptr_t)g->base);
  __int128 rel1 = rel0 + (__int128)(s->count - 1) * s->src_stride;
  __int128 lo = rel0 < rel1 ? rel0 : rel1, hi = rel0 < rel1 ? rel1 : rel0;
  return lo >= 0 && hi + (__int128)s->len <= (__int128)g->len;
}

// The end (exclusive) of a segment's last destination run.
static u128 dst_end(uint64_t off, uint64_t len, uint32_t count, uint64_t stride) {
  return (u128)off + (u128)(count - 1) * stride + len;
}

void rg__runs_init(rg__runs_t *c, const rg__write_t *w) {
  memset(c, 0, sizeof(*c));
  c->w = w;
}

bool rg__runs_next(rg__runs_t *c, uint64_t max, const uint8_t **src, uint64_t *dst, uint64_t *len) {
  const rg__write_t *w = c->w;
  if (c->ent >= w->n_ents) return false;
  const rg_transport_segment_t *s = &w->ents[c->ent];
  uint64_t left = s->len - c->done_in_run;
  uint64_t n = max && max < left ? max : left;
  *src = (const uint8_t *)s->src + (int64_t)c->run * s->src_stride + c->done_in_run;
  *dst = s->dst_offset + c->run * s->dst_stride + c->done_in_run;
  *len = n;
  c->done_in_run += n;
  if (c->done_in_run == s->len) {
    c->done_in_run = 0;
    if (++c->run == s->count) {
      c->run = 0;
      c->ent++;
    }
  }
  return true;
}

void rg__write_gather(rg__write_t *w, const uint8_t *at, uint64_t len) {
  uint8_t *to = (uint8_t *)at;  // inside the caller's staging region
  while (len && w->gather_i < w->n_gruns) {
    const rg__gather_run_t *g = &w->gruns[w->gather_i];
    uint64_t n = g->len - w->gather_off < len ? g->len - w->gather_off : len;
    memcpy(to, g->src + w->gather_off, n);
    to += n, len -= n;
    if ((w->gather_off += n) == g->len) w->gather_i++, w->gather_off = 0;
  }
}

void rg__write_hash_bytes(rg__write_t *w, const void *p, size_t n) {
  XXH3_64bits_update(w->hash_state, p, n);
}

void rg__write_seal_chunk(rg__write_t *w) {
  rg__put64(w->chunks[w->n_hashed].notice + 40, XXH3_64bits_digest(w->hash_state));
  XXH3_64bits_reset(w->hash_state);
  w->n_hashed++;
}

bool rg__write_hash_step(rg__write_t *w, uint64_t budget) {
  if (w->n_hashed >= w->n_chunks) return false;
  uint64_t done = 0;
  for (;;) {
    // Every chunk the cursor has left is whole: seal it, its notice can go.
    while (w->n_hashed < w->n_chunks && rg__runs_chunk(&w->hash_cur) > w->n_hashed)
      rg__write_seal_chunk(w);
    const uint8_t *src;
    uint64_t dst, len;
    if (w->n_hashed >= w->n_chunks || done >= budget ||
        !rg__runs_next(&w->hash_cur, budget - done, &src, &dst, &len))
      break;
    if (w->gruns) rg__write_gather(w, src, len);
    XXH3_64bits_update(w->hash_state, src, len);
    done += len;
  }
  return true;
}

// Cuts the segments into entries and chunks of about `chunk_bytes` bytes
// (the first at most RG__FIRST_CHUNK_BYTES): whole runs while they fit, a
// run longer than a chunk in pieces, and a chunk closed early rather than
// split a run that fits a chunk of its own. A chunk also closes at
// RG_TRANSPORT_MAX_SEGMENTS entries, so each notice fits what a receiver
// posts for one. Entries go to ents (NULL: only counted).
void rg__cut_chunks(const rg_transport_segment_t *segs, size_t n_segs, uint64_t chunk_bytes,
                    rg_transport_segment_t *ents, uint32_t *ent_chunk, rg__chunk_t *chunks,
                    size_t *out_ents, size_t *out_chunks) {
  size_t ne = 0, nc = 0, in_chunk = 0;
  uint64_t cur = 0;
  const uint64_t first = chunk_bytes < RG__FIRST_CHUNK_BYTES ? chunk_bytes : RG__FIRST_CHUNK_BYTES;
  uint64_t chunk = first;  // the size of chunk nc
#define CLOSE_CHUNK()                                      \
  do {                                                     \
    if (chunks) chunks[nc].bytes = cur;                    \
    if (chunks) chunks[nc].n = in_chunk;                   \
    nc++;                                                  \
    chunk = chunk_bytes;                                   \
    cur = 0;                                               \
    in_chunk = 0;                                          \
    if (chunks) chunks[nc < SIZE_MAX ? nc : 0].first = ne; \
  } while (0)
  if (chunks) chunks[0].first = 0;
  for (size_t i = 0; i < n_segs; i++) {
    rg_transport_segment_t s = segs[i];
    uint32_t count = s.count ? s.count : 1;
    uint32_t run = 0;
    uint64_t off = 0;  // bytes of run `run` already in entries
    while (run < count) {
      uint64_t room = chunk - cur;
      rg_transport_segment_t e = s;
      if (off == 0 && s.len <= room) {
        uint64_t k = room / s.len;
        if (k > count - run) k = count - run;
        e.src = (const uint8_t *)s.src + (int64_t)run * s.src_stride;
        e.dst_offset = s.dst_offset + (uint64_t)run * s.dst_stride;
        e.count = (uint32_t)k;
        run += (uint32_t)k;
        cur += k * s.len;
      } else if (off == 0 && s.len <= chunk) {
        CLOSE_CHUNK();
        continue;
      } else {
        uint64_t piece = s.len - off < room ? s.len - off : room;
        e.src = (const uint8_t *)s.src + (int64_t)run * s.src_stride + (int64_t)off;
        e.dst_offset = s.dst_offset + (uint64_t)run * s.dst_stride + off;
        e.len = piece;
        e.count = 1;
        e.src_stride = 0;
        e.dst_stride = 0;
        off += piece;
        cur += piece;
        if (off == s.len) {
          off = 0;
          run++;
        }
      }
      if (ents) {
        ents[ne] = e;
        ent_chunk[ne] = (uint32_t)nc;
      }
      ne++;
      in_chunk++;
      if (cur == chunk || in_chunk == RG_TRANSPORT_MAX_SEGMENTS) CLOSE_CHUNK();
    }
  }
  if (cur) CLOSE_CHUNK();
#undef CLOSE_CHUNK
  *out_ents = ne;
  *out_chunks = nc;
}

// A gathering write's segments as the plain write's machinery takes them:
// every run of the caller's segments laid end to end in `stage` (from its
// start, in order), runs adjacent in the target merged into one segment, and
// the runs themselves kept for rg__write_gather. The caller's sources are
// its own memory (no region); only their lengths and sizes are checked here.
#define RG__MAX_GATHER_RUNS ((size_t)1 << 22)
static rg_status_t stage_segments(const rg_transport_t *t, const char *who,
                                  const rg_transport_region_t *stage,
                                  const rg_transport_segment_t *segs, size_t n_segs,
                                  rg_transport_segment_t **out, size_t *n_out,
                                  rg__gather_run_t **runs, size_t *n_runs) {
  *out = NULL, *runs = NULL, *n_out = *n_runs = 0;
  size_t total_runs = 0;
  u128 total = 0;
  for (size_t i = 0; i < n_segs; i++) {
    uint32_t count = segs[i].count ? segs[i].count : 1;
    if (segs[i].len == 0 || !segs[i].src)
      return rg_status_make(RG_INVALID_ARGUMENT, "transport '%s': write segment %zu to %s is empty",
                            t->name, i, who);
    total_runs += count;
    total += (u128)segs[i].len * count;
  }
  if (total_runs > RG__MAX_GATHER_RUNS)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "transport '%s': a gathering write to %s of %zu runs; at most %zu "
                          "(split it)",
                          t->name, who, total_runs, RG__MAX_GATHER_RUNS);
  if (total > stage->len)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "transport '%s': a gathering write to %s of %" PRIu64
                          " bytes does not fit its %zu-byte staging region %" PRIu64,
                          t->name, who, (uint64_t)total, stage->len, stage->id);
  rg_transport_segment_t *m = malloc(total_runs * sizeof *m);
  rg__gather_run_t *g = malloc(total_runs * sizeof *g);
  if (!m || !g) {
    free(m), free(g);
    return rg_status_make(RG_OUT_OF_MEMORY, "transport '%s': out of memory", t->name);
  }
  size_t nm = 0, ng = 0;
  uint8_t *at = stage->base;
  for (size_t i = 0; i < n_segs; i++) {
    const rg_transport_segment_t *sg = &segs[i];
    for (uint32_t k = 0; k < (sg->count ? sg->count : 1); k++) {
      const uint64_t dst = sg->dst_offset + (uint64_t)k * sg->dst_stride;
      g[ng++] = (rg__gather_run_t){(const uint8_t *)sg->src + (int64_t)k * sg->src_stride, sg->len};
      if (nm && m[nm - 1].dst_offset + m[nm - 1].len == dst) {
        m[nm - 1].len += sg->len;
      } else {
        m[nm++] =
            (rg_transport_segment_t){.src = at, .dst_offset = dst, .len = sg->len, .count = 1};
      }
      at += sg->len;
    }
  }
  *out = m, *n_out = nm, *runs = g, *n_runs = ng;
  return NULL;
}

static rg_status_t write_locked(rg_transport_t *t, rg_transport_peer_t peer,
                                const rg_transport_region_t *src,
                                const rg_transport_region_desc_t *dst,
                                const rg_transport_segment_t *segs, size_t n_segs,
                                uint64_t notice_tag, const void *payload, size_t payload_len,
                                const char *stage, rg__gather_run_t **gruns, size_t n_gruns,
                                rg_transport_req_t **out) {
  *out = NULL;
  RG_RETURN_IF_ERROR(check_peer(t, peer, "a write"));
  const char *who = t->peers[peer].name;
  if (!src || src->t != t)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "transport '%s': a write to %s needs a source region registered with "
                          "this endpoint",
                          t->name, who);
  if (!(src->access & RG_TRANSPORT_WRITE_SOURCE))
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "transport '%s': region %" PRIu64
                          " was not registered as a write source (RG_TRANSPORT_WRITE_SOURCE)",
                          t->name, src->id);
  if (!dst)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "transport '%s': a write to %s needs %s's region "
                          "descriptor",
                          t->name, who, who);
  if (dst->kind != (uint32_t)t->kind)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "transport '%s': the region descriptor for %s comes from a %s endpoint, "
                          "but this one is %s",
                          t->name, who, rg_transport_kind_name((rg_transport_kind_t)dst->kind),
                          rg_transport_kind_name(t->kind));
  if (!segs || n_segs == 0 || n_segs > RG_TRANSPORT_MAX_SEGMENTS)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "transport '%s': a write to %s has %zu segments; it needs 1 to %d "
                          "(split longer transfers into several writes)",
                          t->name, who, segs ? n_segs : 0, RG_TRANSPORT_MAX_SEGMENTS);
  if (payload_len > RG_TRANSPORT_MAX_PAYLOAD || (payload_len && !payload))
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "transport '%s': a notice payload of %zu bytes (at most %d, non-NULL)",
                          t->name, payload_len, RG_TRANSPORT_MAX_PAYLOAD);
  rg_status_t s = NULL;
  u128 total = 0;
  for (size_t i = 0; i < n_segs; i++) {
    rg_transport_segment_t g = segs[i];
    if (g.count == 0) g.count = 1;
    if (g.len == 0 || !g.src)
      return rg_status_make(RG_INVALID_ARGUMENT, "transport '%s': write segment %zu to %s is empty",
                            t->name, i, who);
    if (!src_in_region(&g, src))
      return rg_status_make(RG_INVALID_ARGUMENT,
                            "transport '%s': write segment %zu to %s (%u runs of %" PRIu64
                            " bytes, stride %" PRId64 ") reads outside source region %" PRIu64
                            " (%zu bytes)",
                            t->name, i, who, g.count, g.len, g.src_stride, src->id, src->len);
    u128 end = dst_end(g.dst_offset, g.len, g.count, g.dst_stride);
    if (end > dst->len)
      return rg_status_make(RG_INVALID_ARGUMENT,
                            "transport '%s': write segment %zu to %s (%u runs of %" PRIu64
                            " bytes from offset %" PRIu64 ", stride %" PRIu64
                            ") reaches past the end of its %" PRIu64 "-byte region %" PRIu64,
                            t->name, i, who, g.count, g.len, g.dst_offset, g.dst_stride, dst->len,
                            dst->region_id);
    total += (u128)g.len * g.count;
  }
  size_t n_ents = 0, n_chunks = 0;
  rg__cut_chunks(segs, n_segs, t->chunk_bytes, NULL, NULL, NULL, &n_ents, &n_chunks);
  if (n_chunks > RG__MAX_CHUNKS)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "transport '%s': a write to %s of %" PRIu64
                          " bytes would take %zu chunks of %" PRIu64
                          " bytes; at most %u (split it, or raise chunk_bytes)",
                          t->name, who, (uint64_t)total, n_chunks, t->chunk_bytes, RG__MAX_CHUNKS);
  rg__write_t *w = calloc(1, sizeof(*w));
  if (!w) return rg_status_make(RG_OUT_OF_MEMORY, "transport '%s': out of memory", t->name);
  if (gruns) {  // the write owns them from here
    w->gruns = *gruns, w->n_gruns = n_gruns;
    *gruns = NULL;
  }
  w->ents = malloc(n_ents * sizeof(*w->ents));
  w->ent_chunk = malloc(n_ents * sizeof(*w->ent_chunk));
  w->chunks = calloc(n_chunks + 1, sizeof(*w->chunks));
  size_t notices_len = RG__NOTICE_HEADER * n_chunks + RG__NOTICE_SEGMENT * n_ents + payload_len;
  w->notices = malloc(notices_len);
  w->hash_state = XXH3_createState();
  if (!w->ents || !w->ent_chunk || !w->chunks || !w->notices || !w->hash_state) {
    s = rg_status_make(RG_OUT_OF_MEMORY, "transport '%s': out of memory", t->name);
    goto fail;
  }
  XXH3_64bits_reset(w->hash_state);
  rg__cut_chunks(segs, n_segs, t->chunk_bytes, w->ents, w->ent_chunk, w->chunks, &w->n_ents,
                 &w->n_chunks);
  rg__runs_init(&w->hash_cur, w);
  w->n_segs = n_segs;
  w->total = (uint64_t)total;
  w->dst_addr = dst->addr;
  w->dst_key = dst->key;
  w->dst_region = dst->region_id;
  uint64_t write_id = t->next_write_id++;
  uint8_t *m = w->notices;
  for (size_t c = 0; c < w->n_chunks; c++) {
    rg__chunk_t *ch = &w->chunks[c];
    size_t pay = c + 1 == w->n_chunks ? payload_len : 0;
    ch->notice = m;
    ch->notice_len = RG__NOTICE_HEADER + RG__NOTICE_SEGMENT * ch->n + pay;
    rg__put32(m, RG__NOTICE_MAGIC);
    rg__put16(m + 4, RG__NOTICE_VERSION);
    rg__put16(m + 6, 0);
    rg__put64(m + 8, dst->region_id);
    rg__put64(m + 16, dst->key);
    rg__put32(m + 24, (uint32_t)ch->n);
    rg__put32(m + 28, (uint32_t)pay);
    rg__put64(m + 32, w->total);
    rg__put64(m + 40, 0);
    rg__put64(m + 48, write_id);
    rg__put32(m + 56, (uint32_t)c);
    rg__put32(m + 60, (uint32_t)w->n_chunks);
    rg__put64(m + 64, ch->bytes);
    for (size_t i = 0; i < ch->n; i++) {
      const rg_transport_segment_t *g = &w->ents[ch->first + i];
      uint8_t *e = m + RG__NOTICE_HEADER + RG__NOTICE_SEGMENT * i;
      rg__put64(e, g->dst_offset);
      rg__put64(e + 8, g->len);
      rg__put32(e + 16, g->count);
      rg__put32(e + 20, 0);
      rg__put64(e + 24, g->dst_stride);
    }
    if (pay) memcpy(m + RG__NOTICE_HEADER + RG__NOTICE_SEGMENT * ch->n, payload, pay);
    m += ch->notice_len;
  }
  w->corrupt = t->corrupt_next;
  // The hook corrupts the middle chunk, so a receiver is seen to check every
  // chunk, not only the first or the last.
  w->corrupt_chunk = w->n_chunks / 2;
  rg_transport_req_t *r = new_req(t, RG__OP_WRITE, peer, notice_tag, stage);
  if (!r) {
    s = rg_status_make(RG_OUT_OF_MEMORY, "transport '%s': out of memory", t->name);
    goto fail;
  }
  t->corrupt_next = false;
  r->w = w;
  r->src_region = src;
  r->buf = w->chunks[0].notice;
  r->len = w->chunks[0].notice_len;
  return post_req(t, r, out);
fail:
  free_write(w);
  return s;
}

void rg_transport_corrupt_next_write(rg_transport_t *t) {
  ep_lock(t);
  t->corrupt_next = true;
  ep_unlock(t);
}

static rg_status_t recv_notice_locked(rg_transport_t *t, rg_transport_peer_t peer, uint64_t tag,
                                      void *payload, size_t cap, const char *stage,
                                      rg_transport_req_t **out) {
  *out = NULL;
  RG_RETURN_IF_ERROR(check_peer(t, peer, "a notice receive"));
  if (!payload && cap)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "transport '%s': notice payload buffer of %zu bytes is NULL", t->name,
                          cap);
  rg_transport_req_t *r = new_req(t, RG__OP_NOTICE, peer, tag, stage);
  if (!r) return rg_status_make(RG_OUT_OF_MEMORY, "transport '%s': out of memory", t->name);
  // Room for the largest notice whose payload fits the caller's buffer.
  size_t pay = cap < RG_TRANSPORT_MAX_PAYLOAD ? cap : RG_TRANSPORT_MAX_PAYLOAD;
  r->len = RG__NOTICE_HEADER + RG__NOTICE_SEGMENT * (size_t)RG_TRANSPORT_MAX_SEGMENTS + pay;
  r->buf = malloc(r->len);
  if (!r->buf) {
    free(r);
    return rg_status_make(RG_OUT_OF_MEMORY, "transport '%s': out of memory", t->name);
  }
  r->user_buf = payload;
  r->user_cap = cap;
  return post_req(t, r, out);
}

static const rg_transport_region_t *find_region(const rg_transport_t *t, uint64_t id) {
  for (const rg_transport_region_t *g = t->regions; g; g = g->next)
    if (g->id == id) return g;
  return NULL;
}

// Checks one arrived chunk notice against this endpoint's regions, against
// the chunks gathered before it, and its checksum against the destination
// bytes. Every field comes from the peer, so each is checked before it is
// used. Returns false on a protocol failure (r has its result); a checksum
// mismatch is only recorded (g->bad), so that the write's remaining notices
// are still taken in and none is left to match a later receive.
// One message may carry several chunk notices back to back (inproc hands
// over as many as fit, so a single thread driving both ends never waits on
// itself): *used is this notice's length.
static bool check_chunk(rg_transport_req_t *r, const uint8_t *m, size_t n, size_t *used) {
  rg_transport_t *t = r->t;
  *used = n;
  if (n < RG__NOTICE_HEADER || rg__get32(m) != RG__NOTICE_MAGIC) {
    fail_settled(r, RG_PROTOCOL, "the %zu-byte message is not a write notice", n);
    return false;
  }
  if (rg__get16(m + 4) != RG__NOTICE_VERSION) {
    fail_settled(r, RG_PROTOCOL, "notice version %u; this build reads version %d", rg__get16(m + 4),
                 RG__NOTICE_VERSION);
    return false;
  }
  uint64_t region = rg__get64(m + 8), key = rg__get64(m + 16), total = rg__get64(m + 32);
  uint32_t n_segs = rg__get32(m + 24), pay = rg__get32(m + 28);
  uint64_t sum = rg__get64(m + 40), write_id = rg__get64(m + 48), bytes = rg__get64(m + 64);
  uint32_t index = rg__get32(m + 56), count = rg__get32(m + 60);
  if (n_segs == 0 || n_segs > RG_TRANSPORT_MAX_SEGMENTS ||
      n < RG__NOTICE_HEADER + (size_t)RG__NOTICE_SEGMENT * n_segs + pay) {
    fail_settled(r, RG_PROTOCOL,
                 "the notice claims %u segments and %u payload bytes but is %zu bytes", n_segs, pay,
                 n);
    return false;
  }
  *used = RG__NOTICE_HEADER + (size_t)RG__NOTICE_SEGMENT * n_segs + pay;
  if (count == 0 || count > RG__MAX_CHUNKS || index >= count) {
    fail_settled(r, RG_PROTOCOL, "the notice claims to be chunk %u of %u (at most %u chunks)",
                 index, count, RG__MAX_CHUNKS);
    return false;
  }
  const rg_transport_region_t *g = t ? find_region(t, region) : NULL;
  if (!g) {
    fail_settled(r, RG_PROTOCOL,
                 "the notice names region %" PRIu64 ", which this endpoint has not registered",
                 region);
    return false;
  }
  if (!(g->access & RG_TRANSPORT_WRITE_TARGET) || g->key != key) {
    fail_settled(r, RG_PROTOCOL,
                 "the notice names region %" PRIu64 " with a key it was not given for writes",
                 region);
    return false;
  }
  rg__gather_t *ga = r->g;
  if (!ga) {
    ga = r->g = calloc(1, sizeof(*ga));
    if (ga) ga->seen = calloc((count + 63) / 64, sizeof(uint64_t));
    if (!ga || !ga->seen) {
      fail_settled(r, RG_OUT_OF_MEMORY, "out of memory gathering a %u-chunk notice", count);
      return false;
    }
    ga->write_id = write_id;
    ga->region = region;
    ga->key = key;
    ga->total = total;
    ga->n_chunks = count;
  } else if (write_id != ga->write_id || region != ga->region || key != ga->key ||
             total != ga->total || count != ga->n_chunks) {
    fail_settled(r, RG_PROTOCOL,
                 "chunk %u of %u of write %016" PRIx64 " (%" PRIu64 " bytes into region %" PRIu64
                 ") came among the chunks of write %016" PRIx64 " (%u chunks, %" PRIu64
                 " bytes into region %" PRIu64 "); two writes to this endpoint used one tag",
                 index, count, write_id, total, region, ga->write_id, ga->n_chunks, ga->total,
                 ga->region);
    return false;
  }
  if (ga->seen[index / 64] >> (index % 64) & 1) {
    fail_settled(r, RG_PROTOCOL, "chunk %u of %u came twice", index, count);
    return false;
  }
  const uint8_t *segs = m + RG__NOTICE_HEADER;
  u128 covered = 0;
  for (uint32_t i = 0; i < n_segs; i++) {
    const uint8_t *e = segs + (size_t)RG__NOTICE_SEGMENT * i;
    uint64_t off = rg__get64(e), len = rg__get64(e + 8), stride = rg__get64(e + 24);
    uint32_t runs = rg__get32(e + 16);
    if (len == 0 || runs == 0 || dst_end(off, len, runs, stride) > g->len) {
      fail_settled(r, RG_PROTOCOL,
                   "notice segment %u (%u runs of %" PRIu64 " bytes from offset %" PRIu64
                   ", stride %" PRIu64 ") lies outside the %zu-byte region %" PRIu64,
                   i, runs, len, off, stride, g->len, region);
      return false;
    }
    covered += (u128)len * runs;
  }
  if (covered != bytes || (u128)ga->bytes + covered > total) {
    fail_settled(r, RG_PROTOCOL,
                 "chunk %u's segments cover %" PRIu64 " bytes; it claims %" PRIu64
                 ", and with the %" PRIu64 " seen before the write's %" PRIu64,
                 index, (uint64_t)covered, bytes, ga->bytes, total);
    return false;
  }
  if (pay > r->user_cap) {
    fail_settled(r, RG_TRUNCATED,
                 "the notice's payload is %u bytes, longer than the %zu-byte buffer posted; "
                 "truncated, not used",
                 pay, r->user_cap);
    return false;
  }
  ga->seen[index / 64] |= (uint64_t)1 << (index % 64);
  ga->n_seen++;
  ga->bytes += (uint64_t)covered;
  // Hashed now, right after the chunk landed (still in this core's cache,
  // on shm where this side copies it in), while later chunks are on the way.
  if (!ga->hash && !(ga->hash = XXH3_createState())) {
    fail_settled(r, RG_OUT_OF_MEMORY, "out of memory checking the notice");
    return false;
  }
  XXH3_64bits_reset(ga->hash);
  const uint8_t *base = g->base;
  for (uint32_t i = 0; i < n_segs; i++) {
    const uint8_t *e = segs + (size_t)RG__NOTICE_SEGMENT * i;
    uint64_t off = rg__get64(e), len = rg__get64(e + 8), stride = rg__get64(e + 24);
    uint32_t runs = rg__get32(e + 16);
    for (uint32_t k = 0; k < runs; k++) XXH3_64bits_update(ga->hash, base + off + k * stride, len);
  }
  uint64_t got_sum = XXH3_64bits_digest(ga->hash);
  if (got_sum != sum && ga->bad == RG_OK) {
    char why[512];
    snprintf(why, sizeof(why),
             "checksum mismatch over %" PRIu64 " bytes in %u segments of region %" PRIu64
             " (chunk %u of %u; sent %016" PRIx64 ", found %016" PRIx64
             "): the data was corrupted in transit and must not be used",
             bytes, n_segs, region, index, count, sum, got_sum);
    ga->bad = RG_DATA_CORRUPT;
    ga->bad_msg = strdup(why);
  }
  if (pay) {
    memcpy(r->user_buf, segs + (size_t)RG__NOTICE_SEGMENT * n_segs, pay);
    ga->pay = pay;
  }
  return true;
}

// Re-posts r's receive for the write's next chunk notice. False when it
// cannot (r then has its result).
static bool repost_notice(rg_transport_req_t *r) {
  rg_transport_t *t = r->t;
  if (t->closing) {
    fail_settled(r, RG_CANCELLED, "cancelled: %s was destroyed with the operation in flight",
                 t->name);
    return false;
  }
  rg__peer_t *p = &t->peers[r->peer];
  if (p->failed) {
    fail_settled(r, RG_PEER_LOST, "peer lost: %s", p->failed);
    return false;
  }
  r->got = 0;
  r->held = true;
  atomic_store_explicit(&r->arrived, 0, memory_order_relaxed);
  rg_status_t s = t->vt->post(r);
  if (s) {
    r->held = false;
    atomic_store_explicit(&r->arrived, 1, memory_order_relaxed);
    fail_settled(r, RG_IO, "could not post the receive for the next chunk's notice: %s",
                 rg_status_message(s));
    rg_status_free(s);
    return false;
  }
  return true;
}

// Called by the owner once r has arrived: the front end's last word on it.
// A notice receive takes in its write's chunk notices one by one, re-posting
// itself until every chunk is in; only then is it done.
static void settle(rg_transport_req_t *r) {
  while (!r->settled && has_arrived(r)) {
    bool ok = r->kind == RG__OP_NOTICE && r->code == RG_OK;
    if (ok) {
      const uint8_t *m = r->buf;
      size_t n = r->got, off = 0;
      r->got = 0;
      do {
        size_t used = 0;
        ok = check_chunk(r, m + off, n - off, &used);
        off += used;
      } while (ok && off < n);
    }
    if (ok) {
      rg__gather_t *ga = r->g;
      if (ga->n_seen < ga->n_chunks) {
        if (!ga->counted) {
          ga->counted = true;
          r->t->gathering++;
        }
        if (repost_notice(r)) continue;  // it may have arrived at once (inproc)
      } else if (ga->bad != RG_OK) {
        fail_settled(r, ga->bad, "%s", ga->bad_msg ? ga->bad_msg : "checksum mismatch");
      } else if (ga->bytes != ga->total) {
        fail_settled(r, RG_PROTOCOL,
                     "the write's %u chunks cover %" PRIu64 " bytes but it claims %" PRIu64,
                     ga->n_chunks, ga->bytes, ga->total);
      } else {
        r->got = ga->pay;
      }
    }
    r->settled = true;
    ungather(r);
  }
}

// ---------------------------------------------------------------------------
// Completing.

static rg_status_t result_of(const rg_transport_req_t *r) {
  if (r->code == RG_OK) return NULL;
  return rg_status_make(r->code, "%s", r->msg ? r->msg : "failed");
}

bool rg_transport_req_done(const rg_transport_req_t *r) {
  rg_transport_t *t = r->t;
  if (!t) return r->settled;
  ep_lock(t);
  bool done = r->settled;
  ep_unlock(t);
  return done;
}

static size_t req_bytes_locked(const rg_transport_req_t *r) {
  switch (r->kind) {
    case RG__OP_SEND:
      return r->len;
    case RG__OP_WRITE:
      return (size_t)r->w->total;
    default:
      return r->got;
  }
}

// Fails r by deadline: the backend lets go (or is told to) first.
static void expire(rg_transport_req_t *r, double timeout_s) {
  if (r->held) r->t->vt->cancel(r);
  set_result(r, RG_DEADLINE_EXCEEDED, "no completion within %.2f s (deadline exceeded)", timeout_s);
  settle(r);
}

enum { WAIT_ALL, WAIT_ANY };

static rg_status_t wait_locked(rg_transport_t *t, rg_transport_req_t *const *reqs, size_t n,
                               double timeout_s, int mode, size_t *out_index);

static rg_status_t wait_reqs(rg_transport_req_t *const *reqs, size_t n, double timeout_s, int mode,
                             size_t *out_index) {
  if (out_index) *out_index = 0;
  if (n == 0) return rg_status_make(RG_INVALID_ARGUMENT, "transport: wait on no requests");
  rg_transport_t *t = NULL;
  for (size_t i = 0; i < n; i++) {
    if (!reqs[i]) return rg_status_make(RG_INVALID_ARGUMENT, "transport: wait on a NULL request");
    if (!reqs[i]->t) continue;
    if (t && reqs[i]->t != t)
      return rg_status_make(RG_INVALID_ARGUMENT,
                            "transport: one wait covers requests of '%s' and '%s'; wait on each "
                            "endpoint separately",
                            t->name, reqs[i]->t->name);
    t = reqs[i]->t;
  }
  if (!t) return wait_locked(NULL, reqs, n, timeout_s, mode, out_index);
  ep_lock(t);
  rg_status_t s = wait_locked(t, reqs, n, timeout_s, mode, out_index);
  ep_unlock(t);
  return s;
}

static rg_status_t wait_locked(rg_transport_t *t, rg_transport_req_t *const *reqs, size_t n,
                               double timeout_s, int mode, size_t *out_index) {
  double timeout = t ? (timeout_s < 0 ? t->timeout_s : timeout_s) : 0;
  double deadline = rg_clock_now() + timeout;
  for (;;) {
    if (t) {
      rg_status_t s = t->vt->progress(t);
      if (s) return rg_status_wrap(s, "transport '%s'", t->name);
    }
    size_t n_done = 0, first_done = n, first_failed = n;
    for (size_t i = 0; i < n; i++) {
      settle(reqs[i]);
      if (!reqs[i]->settled) continue;
      n_done++;
      if (first_done == n) first_done = i;
      if (first_failed == n && reqs[i]->code != RG_OK) first_failed = i;
    }
    if (mode == WAIT_ANY && first_done < n) {
      if (out_index) *out_index = first_done;
      return result_of(reqs[first_done]);
    }
    if (n_done == n) return first_failed < n ? result_of(reqs[first_failed]) : NULL;
    if (rg_clock_now() >= deadline) {
      size_t first_expired = n;
      for (size_t i = 0; i < n; i++) {
        if (reqs[i]->settled) continue;
        expire(reqs[i], timeout);
        if (first_expired == n) first_expired = i;
      }
      if (mode == WAIT_ANY && out_index) *out_index = first_expired;
      return result_of(reqs[mode == WAIT_ANY || first_failed == n ? first_expired : first_failed]);
    }
    t->vt->sleep(t, deadline);
  }
}

rg_status_t rg_transport_test(rg_transport_req_t *r, bool *out_done) {
  *out_done = false;
  rg_transport_t *t = r->t;
  if (!t) {
    *out_done = r->settled;
    return r->settled ? result_of(r) : NULL;
  }
  ep_lock(t);
  rg_status_t s = NULL;
  if (!r->settled) {
    s = t->vt->progress(t);
    if (s) s = rg_status_wrap(s, "transport '%s'", t->name);
    settle(r);
  }
  if (!s) {
    *out_done = r->settled;
    s = r->settled ? result_of(r) : NULL;
  }
  ep_unlock(t);
  return s;
}

rg_status_t rg_transport_wait(rg_transport_req_t *r, double timeout_s) {
  return wait_reqs(&r, 1, timeout_s, WAIT_ALL, NULL);
}

rg_status_t rg_transport_wait_all(rg_transport_req_t *const *reqs, size_t n, double timeout_s) {
  return wait_reqs(reqs, n, timeout_s, WAIT_ALL, NULL);
}

rg_status_t rg_transport_wait_any(rg_transport_req_t *const *reqs, size_t n, double timeout_s,
                                  size_t *out_index) {
  return wait_reqs(reqs, n, timeout_s, WAIT_ANY, out_index);
}

static void req_free_locked(rg_transport_req_t *r) {
  rg_transport_t *t = r->t;
  if (t && r->held && !has_arrived(r)) {
    if (!t->vt->cancel(r)) {
      // The provider still holds it; the backend frees it when it lets go.
      r->user_owned = false;
      return;
    }
  }
  if (t && r->held) {
    r->user_owned = false;
    return;
  }
  free_req(r);
}

// ---------------------------------------------------------------------------
// The public calls that touch an endpoint's state, each under its lock (see
// "Threads" in transport.h).

rg_status_t rg_transport_peer_add(rg_transport_t *t, const uint8_t *addr, size_t len,
                                  const char *name, rg_transport_peer_t *out) {
  ep_lock(t);
  rg_status_t s = peer_add_locked(t, addr, len, name, out);
  ep_unlock(t);
  return s;
}

void rg_transport_peer_fail(rg_transport_t *t, rg_transport_peer_t peer, const char *why) {
  ep_lock(t);
  peer_fail_locked(t, peer, why);
  ep_unlock(t);
}

rg_status_t rg_transport_send(rg_transport_t *t, rg_transport_peer_t peer, uint64_t tag,
                              const void *buf, size_t len, const char *stage,
                              rg_transport_req_t **out) {
  ep_lock(t);
  rg_status_t s = send_locked(t, peer, tag, buf, len, stage, out);
  ep_unlock(t);
  return s;
}

rg_status_t rg_transport_recv(rg_transport_t *t, rg_transport_peer_t peer, uint64_t tag, void *buf,
                              size_t cap, const char *stage, rg_transport_req_t **out) {
  ep_lock(t);
  rg_status_t s = recv_locked(t, peer, tag, buf, cap, stage, out);
  ep_unlock(t);
  return s;
}

rg_status_t rg_transport_region_register(rg_transport_t *t, void *base, size_t len, unsigned access,
                                         rg_transport_region_t **out) {
  ep_lock(t);
  rg_status_t s = region_register_locked(t, base, len, access, out);
  ep_unlock(t);
  return s;
}

void rg_transport_region_deregister(rg_transport_region_t *g) {
  if (!g) return;
  rg_transport_t *t = g->t;
  ep_lock(t);
  region_deregister_locked(g);
  ep_unlock(t);
}

rg_status_t rg_transport_write(rg_transport_t *t, rg_transport_peer_t peer,
                               const rg_transport_region_t *src,
                               const rg_transport_region_desc_t *dst,
                               const rg_transport_segment_t *segs, size_t n_segs,
                               uint64_t notice_tag, const void *payload, size_t payload_len,
                               const char *stage, rg_transport_req_t **out) {
  ep_lock(t);
  rg_status_t s = write_locked(t, peer, src, dst, segs, n_segs, notice_tag, payload, payload_len,
                               stage, NULL, 0, out);
  ep_unlock(t);
  return s;
}

rg_status_t rg_transport_write_gather(rg_transport_t *t, rg_transport_peer_t peer,
                                      const rg_transport_region_t *staging,
                                      const rg_transport_region_desc_t *dst,
                                      const rg_transport_segment_t *segs, size_t n_segs,
                                      uint64_t notice_tag, const void *payload, size_t payload_len,
                                      const char *stage, rg_transport_req_t **out) {
  *out = NULL;
  ep_lock(t);
  rg_status_t s = check_peer(t, peer, "a write");
  const char *who = s ? "" : t->peers[peer].name;
  if (!s && (!staging || staging->t != t || !(staging->access & RG_TRANSPORT_WRITE_SOURCE)))
    s = rg_status_make(RG_INVALID_ARGUMENT,
                       "transport '%s': a gathering write to %s needs a staging region "
                       "registered with this endpoint as a write source",
                       t->name, who);
  // Its runs are bounded by RG__MAX_GATHER_RUNS (stage_segments), and the
  // places they land in, merged, by RG_TRANSPORT_MAX_SEGMENTS (below): a
  // transfer's per-head runs number many times its places.
  if (!s && (!segs || n_segs == 0))
    s = rg_status_make(RG_INVALID_ARGUMENT,
                       "transport '%s': a gathering write to %s has no segments", t->name, who);
  rg_transport_segment_t *staged = NULL;
  rg__gather_run_t *gruns = NULL;
  size_t n_staged = 0, n_gruns = 0;
  if (!s) s = stage_segments(t, who, staging, segs, n_segs, &staged, &n_staged, &gruns, &n_gruns);
  if (!s && n_staged > RG_TRANSPORT_MAX_SEGMENTS)
    s = rg_status_make(RG_INVALID_ARGUMENT,
                       "transport '%s': a gathering write to %s lands in %zu separate places; at "
                       "most %d (split it)",
                       t->name, who, n_staged, RG_TRANSPORT_MAX_SEGMENTS);
  if (!s)
    s = write_locked(t, peer, staging, dst, staged, n_staged, notice_tag, payload, payload_len,
                     stage, &gruns, n_gruns, out);
  free(staged);
  free(gruns);  // NULL once a write took them
  ep_unlock(t);
  return s;
}

rg_status_t rg_transport_recv_notice(rg_transport_t *t, rg_transport_peer_t peer, uint64_t tag,
                                     void *payload, size_t cap, const char *stage,
                                     rg_transport_req_t **out) {
  ep_lock(t);
  rg_status_t s = recv_notice_locked(t, peer, tag, payload, cap, stage, out);
  ep_unlock(t);
  return s;
}

size_t rg_transport_req_bytes(const rg_transport_req_t *r) {
  rg_transport_t *t = r->t;
  if (!t) return req_bytes_locked(r);
  ep_lock(t);
  size_t n = req_bytes_locked(r);
  ep_unlock(t);
  return n;
}

void rg_transport_req_free(rg_transport_req_t *r) {
  if (!r) return;
  rg_transport_t *t = r->t;
  if (!t) {
    req_free_locked(r);
    return;
  }
  ep_lock(t);
  req_free_locked(r);
  ep_unlock(t);
}

// ---------------------------------------------------------------------------
// Event loops.

rg_status_t rg_transport_progress(rg_transport_t *t) {
  ep_lock(t);
  rg_status_t s = t->vt->progress(t);
  if (s)
    s = rg_status_wrap(s, "transport '%s'", t->name);
  else
    for (rg_transport_req_t *r = t->live; r; r = r->next) settle(r);
  ep_unlock(t);
  return s;
}

rg_status_t rg_transport_wait_fd(rg_transport_t *t, int *out_fd) {
  *out_fd = -1;
  return t->vt->wait_fd(t, out_fd);
}

bool rg_transport_trywait(rg_transport_t *t) {
  ep_lock(t);
  bool ok = t->vt->trywait(t);
  ep_unlock(t);
  return ok;
}
