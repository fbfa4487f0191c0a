// The worker's side of the control plane: one connection to the coordinator,
// on the loop thread,
//
//   CONNECTING ──connected──> HELLO_SENT ──Challenge──> AUTH_SENT ──Welcome──> JOINED
//     │  refused: retry until connect_timeout_s          │ Reject, wrong proof, no answer
//     └──────────────────────────────────────────────────┴──> DEAD (recv/send fail with why)
//
// Connection attempts repeat with a growing pause (20 ms up to 250 ms), so a
// worker launched before its coordinator joins as soon as it listens.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runtime/control/control_impl.h"

typedef enum { K_CONNECTING, K_HELLO_SENT, K_AUTH_SENT, K_JOINED, K_DEAD } client_state_t;
typedef enum { LINK_NONE, LINK_OPEN, LINK_CLOSING } link_state_t;

#define RETRY_FIRST_MS 20
#define RETRY_MAX_MS 250

struct rg_control_client_s {
  rg__control_core_t core;
  char host[256], port_str[8];
  int port;
  rg_control_secret_t secret;
  double connect_timeout_s;
  // What the Hello says, copied from the options.
  char name[RG__CONTROL_NAME_MAX + 1], hostname[RG__CONTROL_NAME_MAX + 1];
  char device[RG__CONTROL_NAME_MAX + 1], device_name[RG__CONTROL_NAME_MAX + 1];
  char class_hint[RG__CONTROL_NAME_MAX + 1], provider[RG__CONTROL_NAME_MAX + 1];
  uint8_t *fabric_address;
  size_t fabric_address_len;

  // Loop thread only.
  client_state_t state;
  uv_getaddrinfo_t gai;
  bool gai_pending;
  uv_tcp_t tcp;
  link_state_t tcp_state;
  uv_connect_t creq;
  uv_timer_t retry;
  uint64_t connect_deadline_ms, handshake_deadline_ms, retry_ms;
  int attempts;
  char last_error[160];
  rg__control_reader_t reader;
  uint8_t nonce_w[RG__CONTROL_NONCE_BYTES], nonce_c[RG__CONTROL_NONCE_BYTES];
  uint64_t last_heard_ms, last_sent_ms, heartbeat_seq;
  char peer[64];  // the coordinator, "127.0.0.1:4000"; read by callers once joined
  char readbuf[64 << 10];

  // Guarded by core.mu.
  bool joined;
  uint32_t worker_id;
};

static void start_connect(rg_control_client_t *c);

static uint64_t now_ms(rg_control_client_t *c) {
  return uv_now(&c->core.loop);
}

static void on_tcp_closed(uv_handle_t *h) {
  rg_control_client_t *c = h->data;
  c->tcp_state = LINK_NONE;
}

static void close_tcp(rg_control_client_t *c) {
  if (c->tcp_state != LINK_OPEN) return;
  c->tcp_state = LINK_CLOSING;
  uv_read_stop((uv_stream_t *)&c->tcp);
  uv_close((uv_handle_t *)&c->tcp, on_tcp_closed);
}

static void on_fail_shutdown(uv_shutdown_t *req, int status) {
  rg_control_client_t *c = req->data;
  free(req);
  close_tcp(c);
}

// The endpoint is finished: record why, and close the connection once what
// was written (an Auth, a Reject) has gone out.
static void fail(rg_control_client_t *c, const char *fmt, ...) RG_PRINTF(2, 3);
static void fail(rg_control_client_t *c, const char *fmt, ...) {
  if (c->state == K_DEAD) return;
  bool connected = c->state != K_CONNECTING;
  c->state = K_DEAD;
  char text[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  rg__control_core_fail(&c->core, text);
  uv_timer_stop(&c->retry);
  if (c->tcp_state != LINK_OPEN) return;
  uv_read_stop((uv_stream_t *)&c->tcp);
  uv_shutdown_t *req = connected ? malloc(sizeof *req) : NULL;
  if (req) req->data = c;
  if (!req || uv_shutdown(req, (uv_stream_t *)&c->tcp, on_fail_shutdown) != 0) {
    free(req);
    close_tcp(c);
  }
}

static void send_internal(rg_control_client_t *c, const ProtobufCMessage *m) {
  if (rg__control_write_msg((uv_stream_t *)&c->tcp, m, RG_CONTROL_PROTOCOL_VERSION) == 0)
    c->last_sent_ms = now_ms(c);
}

static void on_retry(uv_timer_t *t) {
  rg_control_client_t *c = t->data;
  if (!c->core.stopping && c->state == K_CONNECTING) start_connect(c);
}

static void fail_connect(rg_control_client_t *c) {
  fail(c, "could not connect to the coordinator at %s:%d within %.1f s (%d attempt%s): %s", c->host,
       c->port, c->connect_timeout_s, c->attempts, c->attempts == 1 ? "" : "s", c->last_error);
}

// One attempt failed: try again after a pause, unless the deadline passed.
static void retry_later(rg_control_client_t *c) {
  uint64_t now = now_ms(c);
  if (now >= c->connect_deadline_ms) return fail_connect(c);
  uint64_t wait = c->retry_ms;
  if (wait > c->connect_deadline_ms - now) wait = c->connect_deadline_ms - now;
  c->retry_ms = c->retry_ms * 2 > RETRY_MAX_MS ? RETRY_MAX_MS : c->retry_ms * 2;
  uv_timer_start(&c->retry, on_retry, wait, 0);
}

static void on_attempt_closed(uv_handle_t *h) {
  rg_control_client_t *c = h->data;
  c->tcp_state = LINK_NONE;
  if (!c->core.stopping && c->state == K_CONNECTING) retry_later(c);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  rg_control_client_t *c = h->data;
  buf->base = c->readbuf;
  buf->len = sizeof c->readbuf;
}

static void handle_challenge(rg_control_client_t *c, rg_control_challenge_t *ch) {
  memcpy(c->nonce_c, ch->nonce.data, RG__CONTROL_NONCE_BYTES);
  bool coordinator_ok =
      rg__control_mac_ok(&c->secret, "coordinator", c->nonce_w, c->nonce_c, ch->proof.data);
  protobuf_c_message_free_unpacked(&ch->base, NULL);
  // The Auth goes out even when the coordinator's proof is wrong, so that
  // the coordinator can report the mismatch too. It proves nothing to a
  // peer without the secret: the MAC covers this worker's fresh nonce.
  uint8_t proof[RG__CONTROL_NONCE_BYTES];
  rg__control_mac(&c->secret, "worker", c->nonce_c, c->nonce_w, proof);
  rg_control_auth_t a = RIDGE__CONTROL__AUTH__INIT;
  a.proof = (ProtobufCBinaryData){sizeof proof, proof};
  send_internal(c, &a.base);
  if (!coordinator_ok)
    return fail(c,
                "authentication with the coordinator at %s failed: its proof does not match this "
                "worker's shared secret (wrong secret on one side?)",
                c->peer);
  c->state = K_AUTH_SENT;
}

static void handle_welcome(rg_control_client_t *c, rg_control_welcome_t *w) {
  // The coordinator's heartbeat settings are the ones in force, so both
  // ends agree on what "silent" means.
  c->core.limits.heartbeat_interval_s = w->heartbeat_interval_ms / 1000.0;
  c->core.limits.heartbeat_timeout_s = w->heartbeat_timeout_ms / 1000.0;
  c->reader.max_payload = c->core.limits.max_message_bytes;
  uint32_t id = w->worker_id;
  protobuf_c_message_free_unpacked(&w->base, NULL);
  c->state = K_JOINED;
  c->last_heard_ms = now_ms(c);
  rg__control_core_retick(&c->core);
  pthread_mutex_lock(&c->core.mu);
  c->joined = true;
  c->worker_id = id;
  pthread_cond_broadcast(&c->core.cv);
  pthread_mutex_unlock(&c->core.mu);
}

// Takes ownership of m.
static void on_message(rg_control_client_t *c, ProtobufCMessage *m) {
  rg_control_msg_type_t type = rg_control_msg_type(m);
  const rg__control_msg_info_t *info = rg__control_msg_info(type);
  if (type == RG_CONTROL_MSG_REJECT) {
    char reason[256];
    rg__control_sanitize(reason, sizeof reason, ((rg_control_reject_t *)m)->reason);
    protobuf_c_message_free_unpacked(m, NULL);
    return fail(c, "the coordinator at %s %s this worker: %s", c->peer,
                c->state == K_JOINED ? "dropped" : "refused", reason);
  }
  if (c->state == K_HELLO_SENT && type == RG_CONTROL_MSG_CHALLENGE)
    return handle_challenge(c, (rg_control_challenge_t *)m);
  if (c->state == K_AUTH_SENT && type == RG_CONTROL_MSG_WELCOME)
    return handle_welcome(c, (rg_control_welcome_t *)m);
  if (c->state == K_JOINED && type == RG_CONTROL_MSG_HEARTBEAT) {
    protobuf_c_message_free_unpacked(m, NULL);
    return;
  }
  if (c->state == K_JOINED && info->origin == RG__CONTROL_USER) {
    rg_control_event_t ev = {.kind = RG_CONTROL_EVENT_MESSAGE, .type = type, .msg = m};
    snprintf(ev.peer, sizeof ev.peer, "%s", c->peer);
    snprintf(ev.text, sizeof ev.text, "%s from the coordinator", info->name);
    rg__control_core_push_event(&c->core, &ev);
    return;
  }
  protobuf_c_message_free_unpacked(m, NULL);
  fail(c, "the coordinator at %s sent a %s %s; closing", c->peer, info->name,
       c->state == K_JOINED ? "after the handshake" : "out of turn in the handshake");
}

static void refuse_frame(rg_control_client_t *c, rg_status_t s) {
  if (c->reader.peer_version) {
    char reason[320];
    snprintf(reason, sizeof reason,
             "protocol version mismatch: the coordinator speaks control protocol version %d, "
             "this worker speaks %d",
             c->reader.peer_version, RG_CONTROL_PROTOCOL_VERSION);
    rg_control_reject_t r = RIDGE__CONTROL__REJECT__INIT;
    r.reason = reason;
    r.protocol_version = RG_CONTROL_PROTOCOL_VERSION;
    send_internal(c, &r.base);
  }
  fail(c, "the coordinator at %s: %s", c->peer, rg_status_message(s));
  rg_status_free(s);
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf) {
  rg_control_client_t *c = stream->data;
  if (c->state == K_DEAD || nread == 0) return;
  if (nread < 0) {
    rg_status_t cut = rg__control_reader_eof(&c->reader);
    char why[320];
    if (cut)
      snprintf(why, sizeof why, "%s", rg_status_message(cut));
    else
      snprintf(why, sizeof why, "%s",
               nread == UV_EOF          ? "closed the connection"
               : nread == UV_ECONNRESET ? "closed the connection abruptly (connection reset)"
                                        : uv_strerror((int)nread));
    rg_status_free(cut);
    if (c->state == K_JOINED)
      fail(c, "the coordinator at %s is lost: %s; last heard from %.2f s before", c->peer, why,
           (double)(now_ms(c) - c->last_heard_ms) / 1000);
    else
      fail(c, "the coordinator at %s %s during the handshake", c->peer, why);
    return;
  }
  c->last_heard_ms = now_ms(c);
  const uint8_t *p = (const uint8_t *)buf->base;
  size_t off = 0, n = (size_t)nread;
  while (off < n && c->state != K_DEAD) {
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
      char reason[256];
      rg__control_sanitize(reason, sizeof reason, ((rg_control_reject_t *)m)->reason);
      protobuf_c_message_free_unpacked(m, NULL);
      return fail(c,
                  "the coordinator at %s speaks control protocol version %u (this worker speaks "
                  "%d) and refused this worker: %s",
                  c->peer, version, RG_CONTROL_PROTOCOL_VERSION, reason);
    }
    on_message(c, m);
  }
}

static void send_hello(rg_control_client_t *c) {
  rg_control_hello_t h = RIDGE__CONTROL__HELLO__INIT;
  h.protocol_version = RG_CONTROL_PROTOCOL_VERSION;
  h.worker_name = c->name;
  h.host = c->hostname;
  h.pid = (uint32_t)getpid();
  h.device_name = c->device_name;
  h.device = c->device;
  h.class_hint = c->class_hint;
  h.fabric_address = (ProtobufCBinaryData){c->fabric_address_len, c->fabric_address};
  h.fabric_provider = c->provider;
  h.nonce = (ProtobufCBinaryData){sizeof c->nonce_w, c->nonce_w};
  send_internal(c, &h.base);
}

static void on_connect(uv_connect_t *req, int status) {
  rg_control_client_t *c = req->data;
  if (status == UV_ECANCELED || c->core.stopping || c->state != K_CONNECTING) return;
  if (status < 0) {
    snprintf(c->last_error, sizeof c->last_error, "%s (%s)", uv_strerror(status),
             uv_err_name(status));
    c->tcp_state = LINK_CLOSING;
    uv_close((uv_handle_t *)&c->tcp, on_attempt_closed);
    return;
  }
  uv_tcp_nodelay(&c->tcp, 1);
  c->last_heard_ms = c->last_sent_ms = now_ms(c);
  c->handshake_deadline_ms = now_ms(c) + (uint64_t)(c->core.limits.handshake_timeout_s * 1000);
  c->state = K_HELLO_SENT;
  int rc = uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
  if (rc) return fail(c, "cannot read from the coordinator at %s: %s", c->peer, uv_strerror(rc));
  send_hello(c);
}

static void on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *ai) {
  rg_control_client_t *c = req->data;
  c->gai_pending = false;
  if (c->core.stopping || c->state != K_CONNECTING) {
    uv_freeaddrinfo(ai);
    return;
  }
  if (status < 0) {
    snprintf(c->last_error, sizeof c->last_error, "cannot resolve '%s': %s", c->host,
             uv_strerror(status));
    uv_freeaddrinfo(ai);
    return retry_later(c);
  }
  rg__control_format_addr(ai->ai_addr, c->peer, sizeof c->peer);
  uv_tcp_init(&c->core.loop, &c->tcp);
  c->tcp.data = c;
  c->tcp_state = LINK_OPEN;
  c->creq.data = c;
  int rc = uv_tcp_connect(&c->creq, &c->tcp, ai->ai_addr, on_connect);
  uv_freeaddrinfo(ai);
  if (rc) {
    snprintf(c->last_error, sizeof c->last_error, "%s (%s)", uv_strerror(rc), uv_err_name(rc));
    c->tcp_state = LINK_CLOSING;
    uv_close((uv_handle_t *)&c->tcp, on_attempt_closed);
  }
}

// Resolves the host anew on every attempt: under a launcher the name may
// appear in DNS only after the worker starts.
static void start_connect(rg_control_client_t *c) {
  c->attempts++;
  struct addrinfo hints;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  c->gai.data = c;
  int rc = uv_getaddrinfo(&c->core.loop, &c->gai, on_resolved, c->host, c->port_str, &hints);
  if (rc) {
    snprintf(c->last_error, sizeof c->last_error, "cannot resolve '%s': %s", c->host,
             uv_strerror(rc));
    return retry_later(c);
  }
  c->gai_pending = true;
}

static void client_tick(rg__control_core_t *core) {
  rg_control_client_t *c = core->owner;
  const rg_control_limits_t *l = &core->limits;
  uint64_t now = uv_now(&core->loop);
  if (c->state == K_CONNECTING && now >= c->connect_deadline_ms + RETRY_MAX_MS) {
    // An attempt still in flight past the deadline (a host that drops SYNs
    // leaves the kernel retrying for minutes) is abandoned here. The grace
    // lets an attempt begun just before the deadline end on its own, with
    // its own error.
    if (c->tcp_state == LINK_OPEN) {
      snprintf(c->last_error, sizeof c->last_error, "the last attempt got no answer");
      c->tcp_state = LINK_CLOSING;
      uv_close((uv_handle_t *)&c->tcp, on_attempt_closed);
    } else if (c->gai_pending) {
      snprintf(c->last_error, sizeof c->last_error, "resolving '%s' got no answer", c->host);
      uv_cancel((uv_req_t *)&c->gai);
      fail_connect(c);
    }
  } else if (c->state == K_HELLO_SENT || c->state == K_AUTH_SENT) {
    if (now > c->handshake_deadline_ms)
      fail(c, "the coordinator at %s did not complete the handshake within %.1f s", c->peer,
           l->handshake_timeout_s);
  } else if (c->state == K_JOINED) {
    if (now - c->last_heard_ms > (uint64_t)(l->heartbeat_timeout_s * 1000)) {
      fail(c, "the coordinator at %s is lost: silent for %.2f s (heartbeat timeout %.2f s)",
           c->peer, (double)(now - c->last_heard_ms) / 1000, l->heartbeat_timeout_s);
    } else if (now - c->last_sent_ms >= (uint64_t)(l->heartbeat_interval_s * 1000)) {
      rg_control_heartbeat_t hb = RIDGE__CONTROL__HEARTBEAT__INIT;
      hb.sequence = ++c->heartbeat_seq;
      hb.sender_time_ns = rg__control_now_ns();
      send_internal(c, &hb.base);
    }
  }
}

static void client_wake(rg__control_core_t *core) {
  rg_control_client_t *c = core->owner;
  for (rg__control_out_t *o = rg__control_core_take_outbox(core), *next; o; o = next) {
    next = o->next;
    if (c->state == K_JOINED && c->tcp_state == LINK_OPEN) {
      if (rg__control_write((uv_stream_t *)&c->tcp, o->frame) == 0) c->last_sent_ms = now_ms(c);
    } else {
      rg__control_frame_release(o->frame);
    }
    free(o);
  }
}

static void client_stop(rg__control_core_t *core) {
  rg_control_client_t *c = core->owner;
  uv_timer_stop(&c->retry);
  uv_close((uv_handle_t *)&c->retry, NULL);
  if (c->gai_pending) uv_cancel((uv_req_t *)&c->gai);
  close_tcp(c);
}

static rg_status_t copy_field(const char *what, const char *src, char *dst, size_t cap) {
  if (!src) src = "";
  size_t n = strlen(src);
  if (n >= cap)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "worker: %s is %zu bytes long, more than the %zu allowed", what, n,
                          cap - 1);
  memcpy(dst, src, n + 1);
  return NULL;
}

static rg_status_t copy_options(rg_control_client_t *c, const rg_control_client_options_t *opt) {
  RG_RETURN_IF_ERROR(copy_field("coordinator host", opt->host, c->host, sizeof c->host));
  snprintf(c->port_str, sizeof c->port_str, "%d", opt->port);
  c->port = opt->port;
  c->secret = *opt->secret;
  c->connect_timeout_s = opt->connect_timeout_s > 0 ? opt->connect_timeout_s : 30.0;
  char hostname[RG__CONTROL_NAME_MAX + 1] = "";
  if (!opt->hostname && gethostname(hostname, sizeof hostname - 1) != 0)
    snprintf(hostname, sizeof hostname, "unknown");
  RG_RETURN_IF_ERROR(copy_field("host name", opt->hostname ? opt->hostname : hostname, c->hostname,
                                sizeof c->hostname));
  char name[RG__CONTROL_NAME_MAX + 1];
  if (!opt->name || !opt->name[0]) {
    snprintf(name, sizeof name, "%.200s-%d", c->hostname, (int)getpid());
  } else {
    RG_RETURN_IF_ERROR(copy_field("worker name", opt->name, name, sizeof name));
  }
  RG_RETURN_IF_ERROR(copy_field("worker name", name, c->name, sizeof c->name));
  RG_RETURN_IF_ERROR(copy_field("device", opt->device, c->device, sizeof c->device));
  RG_RETURN_IF_ERROR(
      copy_field("device name", opt->device_name, c->device_name, sizeof c->device_name));
  RG_RETURN_IF_ERROR(
      copy_field("class hint", opt->class_hint, c->class_hint, sizeof c->class_hint));
  RG_RETURN_IF_ERROR(
      copy_field("fabric provider", opt->fabric_provider, c->provider, sizeof c->provider));
  if (opt->fabric_address_len) {
    if (!opt->fabric_address)
      return rg_status_make(RG_INVALID_ARGUMENT,
                            "worker: fabric_address is NULL but its length is %zu",
                            opt->fabric_address_len);
    c->fabric_address = malloc(opt->fabric_address_len);
    if (!c->fabric_address) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
    memcpy(c->fabric_address, opt->fabric_address, opt->fabric_address_len);
    c->fabric_address_len = opt->fabric_address_len;
  }
  return NULL;
}

rg_status_t rg_control_client_create(const rg_control_client_options_t *opt,
                                     rg_control_client_t **out) {
  *out = NULL;
  if (!opt || !opt->host || !opt->host[0])
    return rg_status_make(RG_INVALID_ARGUMENT, "worker: the coordinator's host is required");
  if (opt->port < 1 || opt->port > 65535)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "worker: coordinator port %d is not between 1 and 65535", opt->port);
  if (!opt->secret)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "worker: a shared secret is required (--secret-file or RIDGE_SECRET)");
  rg_control_limits_t limits;
  RG_RETURN_IF_ERROR(rg__control_limits_resolve(&opt->limits, "worker", &limits));
  RG_RETURN_IF_ERROR(rg__control_crypto_init());
  rg_control_client_t *c = calloc(1, sizeof *c);
  if (!c) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory creating a worker");
  rg_status_t s = copy_options(c, opt);
  if (s) {
    free(c->fabric_address);
    free(c);
    return s;
  }
  s = rg__control_core_init(&c->core, "worker", &limits);
  if (s) {
    free(c->fabric_address);
    free(c);
    return s;
  }
  c->core.owner = c;
  c->core.on_wake = client_wake;
  c->core.on_tick = client_tick;
  c->core.on_stop = client_stop;
  uv_timer_init(&c->core.loop, &c->retry);
  c->retry.data = c;
  rg__control_reader_init(&c->reader, limits.max_message_bytes < RG__CONTROL_PREAUTH_MAX_BYTES
                                          ? limits.max_message_bytes
                                          : RG__CONTROL_PREAUTH_MAX_BYTES);
  rg__control_random(c->nonce_w, sizeof c->nonce_w);
  snprintf(c->peer, sizeof c->peer, "%s:%d", c->host, c->port);
  snprintf(c->last_error, sizeof c->last_error, "no attempt finished");
  c->retry_ms = RETRY_FIRST_MS;
  uv_update_time(&c->core.loop);
  c->connect_deadline_ms = now_ms(c) + (uint64_t)(c->connect_timeout_s * 1000);
  // Queued before the thread starts; the loop runs it once it spins.
  start_connect(c);
  s = rg__control_core_start(&c->core);
  if (s) goto fail;

  // The loop enforces the connect and handshake deadlines itself; this
  // wait has its own bound only so that a bug there cannot hang the caller.
  double bound = c->connect_timeout_s + limits.handshake_timeout_s + 5;
  struct timespec deadline;
  clock_gettime(CLOCK_MONOTONIC, &deadline);
  deadline.tv_sec += (time_t)bound + 1;
  pthread_mutex_lock(&c->core.mu);
  while (!c->joined && !c->core.failed)
    if (pthread_cond_timedwait(&c->core.cv, &c->core.mu, &deadline) != 0) break;
  if (c->joined) {
    pthread_mutex_unlock(&c->core.mu);
    *out = c;
    return NULL;
  }
  s = c->core.failed
          ? rg_status_make(RG_UNAVAILABLE, "%s", c->core.failure)
          : rg_status_make(RG_INTERNAL, "worker: no outcome from joining %s:%d in %.0f s", c->host,
                           c->port, bound);
  pthread_mutex_unlock(&c->core.mu);
fail:
  rg_control_client_destroy(c);
  return s;
}

uint32_t rg_control_client_worker_id(const rg_control_client_t *c) {
  return c->worker_id;
}

const char *rg_control_client_peer(const rg_control_client_t *c) {
  return c->peer;
}

rg_status_t rg_control_client_send(rg_control_client_t *c, const ProtobufCMessage *msg) {
  RG_RETURN_IF_ERROR(rg__control_check_user_msg("worker", msg));
  rg__control_frame_t *f = NULL;
  rg_status_t s = rg__control_frame_pack(msg, RG_CONTROL_PROTOCOL_VERSION,
                                         c->core.limits.max_message_bytes, &f);
  if (s) return rg_status_wrap(s, "worker: cannot send to the coordinator");
  return rg__control_core_post(&c->core, 0, f);
}

rg_status_t rg_control_client_recv(rg_control_client_t *c, double timeout_s,
                                   rg_control_event_t *out) {
  return rg__control_core_recv(&c->core, timeout_s, out);
}

rg_status_t rg_control_client_lost(rg_control_client_t *c) {
  return rg__control_core_failure(&c->core);
}

void rg_control_client_interrupt(rg_control_client_t *c) {
  rg__control_core_interrupt(&c->core);
}

void rg_control_client_destroy(rg_control_client_t *c) {
  if (!c) return;
  rg__control_core_deinit(&c->core);
  rg__control_reader_deinit(&c->reader);
  free(c->fabric_address);
  free(c);
}
