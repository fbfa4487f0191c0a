// The coordinator's side of the control plane: a TCP listener on the loop
// thread, one connection per worker moving through
//
//   HELLO ──Hello──> AUTH ──Auth (MAC ok)──> JOINED ──silent / closed / bad frame──> closed
//     │                │ MAC wrong: Reject ──> CLOSING (lingers until the peer closes)
//     └── bad frame, wrong version (Reject), no Hello in time ──> closed
//
// and events for the caller at each step that concerns it.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/control/control_impl.h"

// How long a refused peer gets to read its Reject and close, before the
// coordinator closes on it.
#define LINGER_MS 1000

typedef enum { CONN_HELLO, CONN_AUTH, CONN_JOINED, CONN_CLOSING } conn_state_t;

typedef struct conn_s {
  uv_tcp_t tcp;
  rg_control_server_t *srv;
  struct conn_s *prev, *next;
  conn_state_t state;
  bool closed;   // uv_close called; freed in its callback
  bool in_live;  // its id is in the server's live set
  uint32_t worker_id;
  char peer[64];
  char name[64], host[64], device[64];  // from its Hello, sanitized
  uint64_t opened_ms, last_heard_ms, last_sent_ms, linger_until_ms;
  uint64_t heartbeat_seq;
  rg__control_reader_t reader;
  rg_control_hello_t *hello;  // until it goes out with the JOINED event
  uint8_t nonce_w[RG__CONTROL_NONCE_BYTES], nonce_c[RG__CONTROL_NONCE_BYTES];
} conn_t;

struct rg_control_server_s {
  rg__control_core_t core;
  uv_tcp_t listener;
  bool listener_init;
  int port;
  rg_control_secret_t secret;
  conn_t *conns;
  uint32_t next_id;
  // Guarded by core.mu: the ids of joined workers, so send can refuse an
  // unknown addressee on the caller's thread.
  uint32_t *live;
  size_t n_live, cap_live;
  // One read buffer serves every connection: libuv hands it to read_cb
  // before it allocates again, all on the loop thread.
  char readbuf[64 << 10];
};

static uint64_t now_ms(const conn_t *c) {
  return uv_now(&c->srv->core.loop);
}

static void live_remove(conn_t *c) {
  if (!c->in_live) return;
  rg_control_server_t *s = c->srv;
  pthread_mutex_lock(&s->core.mu);
  for (size_t i = 0; i < s->n_live; i++)
    if (s->live[i] == c->worker_id) {
      s->live[i] = s->live[--s->n_live];
      break;
    }
  pthread_mutex_unlock(&s->core.mu);
  c->in_live = false;
}

static bool live_add(conn_t *c) {
  rg_control_server_t *s = c->srv;
  bool ok = true;
  pthread_mutex_lock(&s->core.mu);
  if (s->n_live == s->cap_live) {
    size_t cap = s->cap_live ? s->cap_live * 2 : 16;
    uint32_t *l = realloc(s->live, cap * sizeof *l);
    if (l) {
      s->live = l;
      s->cap_live = cap;
    } else {
      ok = false;
    }
  }
  if (ok) s->live[s->n_live++] = c->worker_id;
  pthread_mutex_unlock(&s->core.mu);
  c->in_live = ok;
  return ok;
}

static void on_conn_closed(uv_handle_t *h) {
  conn_t *c = h->data;
  rg_control_server_t *s = c->srv;
  if (c->prev)
    c->prev->next = c->next;
  else
    s->conns = c->next;
  if (c->next) c->next->prev = c->prev;
  rg__control_reader_deinit(&c->reader);
  if (c->hello) protobuf_c_message_free_unpacked(&c->hello->base, NULL);
  free(c);
}

static void conn_close(conn_t *c) {
  if (c->closed) return;
  c->closed = true;
  live_remove(c);
  uv_read_stop((uv_stream_t *)&c->tcp);
  uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
}

// "worker 2 'node3-gpu1' (device cuda:1, host node3, 10.0.0.7:40312)"
static void describe_worker(const conn_t *c, char *out, size_t cap) {
  snprintf(out, cap, "worker %u '%s' (device %s, host %s, %s)", c->worker_id, c->name,
           c->device[0] ? c->device : "unnamed", c->host[0] ? c->host : "unknown", c->peer);
}

// A sentence about c for an event: a joined worker is named in full; a peer
// that never joined by its address and what its Hello claimed, if any.
static void emit(conn_t *c, rg_control_event_kind_t kind, const char *fmt, ...) RG_PRINTF(3, 4);
static void emit(conn_t *c, rg_control_event_kind_t kind, const char *fmt, ...) {
  // Out of the live set before the caller can see the event, so a send
  // that follows a LOST fails.
  if (kind == RG_CONTROL_EVENT_LOST) live_remove(c);
  rg_control_event_t ev = {.kind = kind};
  char who[256], what[384];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  if (c->state == CONN_JOINED || c->worker_id) {
    ev.worker_id = c->worker_id;
    describe_worker(c, who, sizeof who);
    snprintf(ev.text, sizeof ev.text, "%s %s", who, what);
  } else if (c->name[0] || c->host[0]) {
    snprintf(ev.text, sizeof ev.text, "refused %s (worker '%s' from host %s, device %s): %s",
             c->peer, c->name, c->host, c->device[0] ? c->device : "unnamed", what);
  } else {
    snprintf(ev.text, sizeof ev.text, "refused %s: %s", c->peer, what);
  }
  snprintf(ev.peer, sizeof ev.peer, "%s", c->peer);
  rg__control_core_push_event(&c->srv->core, &ev);
}

static void send_internal(conn_t *c, const ProtobufCMessage *m) {
  if (rg__control_write_msg((uv_stream_t *)&c->tcp, m, RG_CONTROL_PROTOCOL_VERSION) == 0)
    c->last_sent_ms = now_ms(c);
}

static void on_shutdown(uv_shutdown_t *req, int status) {
  free(req);
}

// Answers with a Reject, then waits (briefly) for the peer to hang up, so
// the Reject is read rather than lost to a reset.
static void reject_and_linger(conn_t *c, const char *reason) {
  rg_control_reject_t r = RIDGE__CONTROL__REJECT__INIT;
  r.reason = (char *)reason;
  r.protocol_version = RG_CONTROL_PROTOCOL_VERSION;
  send_internal(c, &r.base);
  live_remove(c);
  c->state = CONN_CLOSING;
  c->linger_until_ms = now_ms(c) + LINGER_MS;
  uv_shutdown_t *req = malloc(sizeof *req);
  if (!req || uv_shutdown(req, (uv_stream_t *)&c->tcp, on_shutdown) != 0) {
    free(req);
    conn_close(c);
  }
}

// A frame the reader or a state refused: report it, answer a wrong version
// with a Reject naming both, close.
static void refuse_frame(conn_t *c, rg_status_t s) {
  const char *why = rg_status_message(s);
  emit(c, c->state == CONN_JOINED ? RG_CONTROL_EVENT_LOST : RG_CONTROL_EVENT_REFUSED, "%s%s",
       c->state == CONN_JOINED ? "dropped: " : "", why);
  if (c->reader.peer_version) {
    char reason[320];
    snprintf(reason, sizeof reason,
             "protocol version mismatch: the worker speaks control protocol version %d, this "
             "coordinator speaks %d",
             c->reader.peer_version, RG_CONTROL_PROTOCOL_VERSION);
    reject_and_linger(c, reason);
  } else {
    conn_close(c);
  }
  rg_status_free(s);
}

static void handle_hello(conn_t *c, rg_control_hello_t *h) {
  rg__control_sanitize(c->name, sizeof c->name, h->worker_name);
  rg__control_sanitize(c->host, sizeof c->host, h->host);
  rg__control_sanitize(c->device, sizeof c->device, h->device);
  memcpy(c->nonce_w, h->nonce.data, RG__CONTROL_NONCE_BYTES);
  c->hello = h;
  uint8_t proof[RG__CONTROL_NONCE_BYTES];
  rg__control_random(c->nonce_c, sizeof c->nonce_c);
  rg__control_mac(&c->srv->secret, "coordinator", c->nonce_w, c->nonce_c, proof);
  rg_control_challenge_t ch = RIDGE__CONTROL__CHALLENGE__INIT;
  ch.nonce = (ProtobufCBinaryData){sizeof c->nonce_c, c->nonce_c};
  ch.proof = (ProtobufCBinaryData){sizeof proof, proof};
  send_internal(c, &ch.base);
  c->state = CONN_AUTH;
}

static void handle_auth(conn_t *c, rg_control_auth_t *a) {
  rg_control_server_t *s = c->srv;
  bool ok = rg__control_mac_ok(&s->secret, "worker", c->nonce_c, c->nonce_w, a->proof.data);
  protobuf_c_message_free_unpacked(&a->base, NULL);
  if (!ok) {
    emit(c, RG_CONTROL_EVENT_REFUSED,
         "authentication failed: its proof does not match this coordinator's shared secret "
         "(wrong secret?)");
    reject_and_linger(c,
                      "authentication failed: the worker's shared secret does not match the "
                      "coordinator's");
    return;
  }
  c->worker_id = ++s->next_id;
  if (!live_add(c)) {
    emit(c, RG_CONTROL_EVENT_LOST, "dropped: out of memory admitting it");
    conn_close(c);
    return;
  }
  rg_control_welcome_t w = RIDGE__CONTROL__WELCOME__INIT;
  w.worker_id = c->worker_id;
  w.heartbeat_interval_ms = (uint32_t)(s->core.limits.heartbeat_interval_s * 1000 + 0.5);
  w.heartbeat_timeout_ms = (uint32_t)(s->core.limits.heartbeat_timeout_s * 1000 + 0.5);
  send_internal(c, &w.base);
  c->state = CONN_JOINED;
  c->reader.max_payload = s->core.limits.max_message_bytes;
  rg_control_event_t ev = {.kind = RG_CONTROL_EVENT_JOINED,
                           .worker_id = c->worker_id,
                           .type = RG_CONTROL_MSG_HELLO,
                           .msg = &c->hello->base};
  char dn[64], cls[64], device[160];
  rg__control_sanitize(dn, sizeof dn, c->hello->device_name);
  rg__control_sanitize(cls, sizeof cls, c->hello->class_hint);
  int n = snprintf(device, sizeof device, "%s", c->device[0] ? c->device : "unnamed");
  if (dn[0] && n < (int)sizeof device) n += snprintf(device + n, sizeof device - n, " '%s'", dn);
  if (cls[0] && n < (int)sizeof device) snprintf(device + n, sizeof device - n, ", class %s", cls);
  snprintf(ev.text, sizeof ev.text, "worker %u '%s' joined from %s (host %s, pid %u, device %s)",
           c->worker_id, c->name, c->peer, c->host, c->hello->pid, device);
  snprintf(ev.peer, sizeof ev.peer, "%s", c->peer);
  c->hello = NULL;
  rg__control_core_push_event(&s->core, &ev);
}

// Takes ownership of m.
static void on_message(conn_t *c, ProtobufCMessage *m) {
  rg_control_msg_type_t type = rg_control_msg_type(m);
  const rg__control_msg_info_t *info = rg__control_msg_info(type);
  switch (c->state) {
    case CONN_HELLO:
      if (type == RG_CONTROL_MSG_HELLO) return handle_hello(c, (rg_control_hello_t *)m);
      protobuf_c_message_free_unpacked(m, NULL);
      return refuse_frame(c, rg_status_make(RG_PARSE, "sent %s before its Hello", info->name));
    case CONN_AUTH:
      if (type == RG_CONTROL_MSG_AUTH) return handle_auth(c, (rg_control_auth_t *)m);
      protobuf_c_message_free_unpacked(m, NULL);
      return refuse_frame(
          c, rg_status_make(RG_PARSE, "sent %s instead of answering the challenge", info->name));
    case CONN_JOINED:
      break;
    case CONN_CLOSING:
      protobuf_c_message_free_unpacked(m, NULL);
      return;
  }
  if (type == RG_CONTROL_MSG_HEARTBEAT) {
    protobuf_c_message_free_unpacked(m, NULL);
    return;
  }
  if (type == RG_CONTROL_MSG_REJECT) {
    char reason[256];
    rg__control_sanitize(reason, sizeof reason, ((rg_control_reject_t *)m)->reason);
    protobuf_c_message_free_unpacked(m, NULL);
    emit(c, RG_CONTROL_EVENT_LOST, "left: it says \"%s\"", reason);
    conn_close(c);
    return;
  }
  if (info->origin == RG__CONTROL_INTERNAL) {
    protobuf_c_message_free_unpacked(m, NULL);
    return refuse_frame(c, rg_status_make(RG_PARSE, "sent %s after joining", info->name));
  }
  rg_control_event_t ev = {
      .kind = RG_CONTROL_EVENT_MESSAGE, .worker_id = c->worker_id, .type = type, .msg = m};
  snprintf(ev.peer, sizeof ev.peer, "%s", c->peer);
  snprintf(ev.text, sizeof ev.text, "%s from worker %u '%s'", info->name, c->worker_id, c->name);
  rg__control_core_push_event(&c->srv->core, &ev);
}

static void on_peer_closed(conn_t *c, ssize_t err) {
  if (c->state == CONN_CLOSING) return conn_close(c);
  rg_status_t cut = rg__control_reader_eof(&c->reader);
  char why[320];
  if (cut)
    snprintf(why, sizeof why, "%s", rg_status_message(cut));
  else if (err == UV_EOF)
    snprintf(why, sizeof why, "closed the connection");
  else if (err == UV_ECONNRESET)  // a killed process with bytes still unread
    snprintf(why, sizeof why, "closed the connection abruptly (connection reset)");
  else
    snprintf(why, sizeof why, "connection failed: %s", uv_strerror((int)err));
  rg_status_free(cut);
  if (c->state == CONN_JOINED)
    emit(c, RG_CONTROL_EVENT_LOST, "lost: %s; last heard from %.2f s before", why,
         (double)(now_ms(c) - c->last_heard_ms) / 1000);
  else
    emit(c, RG_CONTROL_EVENT_REFUSED, "%s during the handshake", why);
  conn_close(c);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  conn_t *c = h->data;
  buf->base = c->srv->readbuf;
  buf->len = sizeof c->srv->readbuf;
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf) {
  conn_t *c = stream->data;
  if (c->closed || nread == 0) return;
  if (nread < 0) return on_peer_closed(c, nread);
  if (c->state == CONN_CLOSING) return;  // a refused peer's last words
  c->last_heard_ms = now_ms(c);
  const uint8_t *p = (const uint8_t *)buf->base;
  size_t off = 0, n = (size_t)nread;
  while (off < n && !c->closed && c->state != CONN_CLOSING) {
    size_t used = 0;
    bool done = false;
    rg_status_t s = rg__control_reader_feed(&c->reader, p + off, n - off, &used, &done);
    off += used;
    if (s) return refuse_frame(c, s);
    if (!done) continue;
    uint16_t version = c->reader.h.version;
    ProtobufCMessage *m = NULL;
    s = rg__control_reader_take(&c->reader, &m);
    if (s) return refuse_frame(c, s);
    if (version != RG_CONTROL_PROTOCOL_VERSION) {
      // Only a Reject gets through with another version: the peer is
      // leaving and says why.
      char reason[256];
      rg__control_sanitize(reason, sizeof reason, ((rg_control_reject_t *)m)->reason);
      protobuf_c_message_free_unpacked(m, NULL);
      emit(c, c->state == CONN_JOINED ? RG_CONTROL_EVENT_LOST : RG_CONTROL_EVENT_REFUSED,
           "speaks control protocol version %u and left: \"%s\"", version, reason);
      return conn_close(c);
    }
    on_message(c, m);
  }
}

static void on_connection(uv_stream_t *listener, int status) {
  rg_control_server_t *s = listener->data;
  if (status < 0) return;  // a connection that died in the accept queue
  conn_t *c = calloc(1, sizeof *c);
  if (!c) return;
  c->srv = s;
  uv_tcp_init(&s->core.loop, &c->tcp);
  c->tcp.data = c;
  c->next = s->conns;
  if (s->conns) s->conns->prev = c;
  s->conns = c;
  rg__control_reader_init(&c->reader,
                          s->core.limits.max_message_bytes < RG__CONTROL_PREAUTH_MAX_BYTES
                              ? s->core.limits.max_message_bytes
                              : RG__CONTROL_PREAUTH_MAX_BYTES);
  if (uv_accept(listener, (uv_stream_t *)&c->tcp) != 0) return conn_close(c);
  struct sockaddr_storage ss;
  int len = sizeof ss;
  if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &len) == 0)
    rg__control_format_addr((struct sockaddr *)&ss, c->peer, sizeof c->peer);
  else
    snprintf(c->peer, sizeof c->peer, "(unknown peer)");
  uv_tcp_nodelay(&c->tcp, 1);
  c->opened_ms = c->last_heard_ms = c->last_sent_ms = now_ms(c);
  if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) != 0) conn_close(c);
}

static void server_tick(rg__control_core_t *core) {
  rg_control_server_t *s = core->owner;
  const rg_control_limits_t *l = &core->limits;
  uint64_t now = uv_now(&core->loop);
  uint64_t handshake_ms = (uint64_t)(l->handshake_timeout_s * 1000);
  uint64_t timeout_ms = (uint64_t)(l->heartbeat_timeout_s * 1000);
  uint64_t interval_ms = (uint64_t)(l->heartbeat_interval_s * 1000);
  // conn_close only marks a connection; it is unlinked in a later loop
  // iteration, so walking the list while closing is safe.
  for (conn_t *c = s->conns; c; c = c->next) {
    if (c->closed) continue;
    switch (c->state) {
      case CONN_HELLO:
      case CONN_AUTH:
        if (now - c->opened_ms > handshake_ms) {
          emit(c, RG_CONTROL_EVENT_REFUSED, "%s within the %.1f s handshake timeout",
               c->state == CONN_HELLO ? "sent no Hello" : "did not answer the challenge",
               l->handshake_timeout_s);
          conn_close(c);
        }
        break;
      case CONN_JOINED:
        if (now - c->last_heard_ms > timeout_ms) {
          emit(c, RG_CONTROL_EVENT_LOST, "lost: silent for %.2f s (heartbeat timeout %.2f s)",
               (double)(now - c->last_heard_ms) / 1000, l->heartbeat_timeout_s);
          conn_close(c);
        } else if (now - c->last_sent_ms >= interval_ms) {
          rg_control_heartbeat_t hb = RIDGE__CONTROL__HEARTBEAT__INIT;
          hb.sequence = ++c->heartbeat_seq;
          hb.sender_time_ns = rg__control_now_ns();
          send_internal(c, &hb.base);
        }
        break;
      case CONN_CLOSING:
        if (now >= c->linger_until_ms) conn_close(c);
        break;
    }
  }
}

static conn_t *find_worker(rg_control_server_t *s, uint32_t id) {
  for (conn_t *c = s->conns; c; c = c->next)
    if (!c->closed && c->state == CONN_JOINED && c->worker_id == id) return c;
  return NULL;
}

static void write_frame(conn_t *c, rg__control_frame_t *f) {
  atomic_fetch_add(&f->refs, 1);
  if (rg__control_write((uv_stream_t *)&c->tcp, f) == 0) c->last_sent_ms = now_ms(c);
}

static void server_wake(rg__control_core_t *core) {
  rg_control_server_t *s = core->owner;
  for (rg__control_out_t *o = rg__control_core_take_outbox(core), *next; o; o = next) {
    next = o->next;
    if (o->worker_id == RG_CONTROL_ALL) {
      for (conn_t *c = s->conns; c; c = c->next)
        if (!c->closed && c->state == CONN_JOINED) write_frame(c, o->frame);
    } else {
      // A worker lost since send queued this gets nothing; its LOST event
      // tells the caller.
      conn_t *c = find_worker(s, o->worker_id);
      if (c) write_frame(c, o->frame);
    }
    rg__control_frame_release(o->frame);
    free(o);
  }
}

static void server_stop(rg__control_core_t *core) {
  rg_control_server_t *s = core->owner;
  if (s->listener_init) uv_close((uv_handle_t *)&s->listener, NULL);
  for (conn_t *c = s->conns; c; c = c->next) conn_close(c);
}

rg_status_t rg_control_server_create(const rg_control_server_options_t *opt,
                                     rg_control_server_t **out) {
  *out = NULL;
  if (!opt || !opt->secret)
    return rg_status_make(
        RG_INVALID_ARGUMENT,
        "coordinator: a shared secret is required (--secret-file or RIDGE_SECRET)");
  if (opt->port < 0 || opt->port > 65535)
    return rg_status_make(RG_INVALID_ARGUMENT, "coordinator: port %d is not between 0 and 65535",
                          opt->port);
  rg_control_limits_t limits;
  RG_RETURN_IF_ERROR(rg__control_limits_resolve(&opt->limits, "coordinator", &limits));
  RG_RETURN_IF_ERROR(rg__control_crypto_init());
  const char *host = opt->bind_host ? opt->bind_host : "127.0.0.1";
  struct sockaddr_storage addr;
  if (uv_ip4_addr(host, opt->port, (struct sockaddr_in *)&addr) != 0 &&
      uv_ip6_addr(host, opt->port, (struct sockaddr_in6 *)&addr) != 0)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "coordinator: bind address '%s' is not an IPv4 or IPv6 address", host);

  rg_control_server_t *s = calloc(1, sizeof *s);
  if (!s) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory creating the coordinator");
  s->secret = *opt->secret;
  rg_status_t st = rg__control_core_init(&s->core, "coordinator", &limits);
  if (st) {
    free(s);
    return st;
  }
  s->core.owner = s;
  s->core.on_wake = server_wake;
  s->core.on_tick = server_tick;
  s->core.on_stop = server_stop;
  uv_tcp_init(&s->core.loop, &s->listener);
  s->listener.data = s;
  s->listener_init = true;
  int rc = uv_tcp_bind(&s->listener, (const struct sockaddr *)&addr, 0);
  if (rc == 0) rc = uv_listen((uv_stream_t *)&s->listener, 128, on_connection);
  if (rc) {
    st = rg_status_make(RG_UNAVAILABLE, "coordinator: cannot listen on %s:%d: %s (%s)", host,
                        opt->port, uv_strerror(rc), uv_err_name(rc));
    goto fail;
  }
  struct sockaddr_storage bound;
  int len = sizeof bound;
  uv_tcp_getsockname(&s->listener, (struct sockaddr *)&bound, &len);
  s->port = ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
                                              : ((struct sockaddr_in *)&bound)->sin_port);
  st = rg__control_core_start(&s->core);
  if (st) goto fail;
  *out = s;
  return NULL;
fail:
  rg_control_server_destroy(s);
  return st;
}

int rg_control_server_port(const rg_control_server_t *s) {
  return s->port;
}

rg_status_t rg_control_server_send(rg_control_server_t *s, uint32_t worker_id,
                                   const ProtobufCMessage *msg) {
  RG_RETURN_IF_ERROR(rg__control_check_user_msg("coordinator", msg));
  if (worker_id != RG_CONTROL_ALL) {
    pthread_mutex_lock(&s->core.mu);
    bool known = false;
    for (size_t i = 0; i < s->n_live && !known; i++) known = s->live[i] == worker_id;
    pthread_mutex_unlock(&s->core.mu);
    if (!known)
      return rg_status_make(RG_NOT_FOUND,
                            "coordinator: cannot send %s to worker %u: no such worker has joined, "
                            "or it was lost",
                            rg_control_msg_name(rg_control_msg_type(msg)), worker_id);
  }
  rg__control_frame_t *f = NULL;
  rg_status_t st = rg__control_frame_pack(msg, RG_CONTROL_PROTOCOL_VERSION,
                                          s->core.limits.max_message_bytes, &f);
  if (st && worker_id == RG_CONTROL_ALL)
    return rg_status_wrap(st, "coordinator: cannot send to the workers");
  if (st) return rg_status_wrap(st, "coordinator: cannot send to worker %u", worker_id);
  return rg__control_core_post(&s->core, worker_id, f);
}

rg_status_t rg_control_server_recv(rg_control_server_t *s, double timeout_s,
                                   rg_control_event_t *out) {
  return rg__control_core_recv(&s->core, timeout_s, out);
}

void rg_control_server_interrupt(rg_control_server_t *s) {
  rg__control_core_interrupt(&s->core);
}

void rg_control_server_destroy(rg_control_server_t *s) {
  if (!s) return;
  rg__control_core_deinit(&s->core);
  free(s->live);
  free(s);
}
