// The control plane's frames: the message table, the 12-byte header, packing,
// and a reader that reassembles frames from a stream and refuses bad ones
// before allocating for them. Nothing here does I/O.
#include <arpa/inet.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/units.h"
#include "runtime/control/control_impl.h"

static const rg__control_msg_info_t msg_table[] = {
#define RG_X_(num, NAME, Camel, lower, who) \
  {num, #Camel, &ridge__control__##lower##__descriptor, RG__CONTROL_##who},
    RG_CONTROL_MSG_MAP(RG_X_)
#undef RG_X_
};

// The type numbers are dense from 1, so a number indexes the table; this
// keeps that true as lines are added.
#define RG_X_(num, NAME, Camel, lower, who)                                   \
  _Static_assert(num >= 1 && num <= sizeof(msg_table) / sizeof(msg_table[0]), \
                 #NAME " out of range");
RG_CONTROL_MSG_MAP(RG_X_)
#undef RG_X_

const rg__control_msg_info_t *rg__control_msg_info(int type) {
  size_t n = sizeof(msg_table) / sizeof(msg_table[0]);
  if (type < 1 || (size_t)type > n) return NULL;
  const rg__control_msg_info_t *m = &msg_table[type - 1];
  return m->type == type ? m : NULL;
}

const char *rg_control_msg_name(int type) {
  const rg__control_msg_info_t *m = rg__control_msg_info(type);
  if (m) return m->name;
  static _Thread_local char buf[24];
  snprintf(buf, sizeof buf, "type %d", type);
  return buf;
}

rg_control_msg_type_t rg_control_msg_type(const ProtobufCMessage *m) {
  if (!m) return RG_CONTROL_MSG_NONE;
  for (size_t i = 0; i < sizeof(msg_table) / sizeof(msg_table[0]); i++)
    if (msg_table[i].descriptor == m->descriptor) return (rg_control_msg_type_t)msg_table[i].type;
  return RG_CONTROL_MSG_NONE;
}

rg_status_t rg__control_check_user_msg(const char *who, const ProtobufCMessage *msg) {
  rg_control_msg_type_t type = rg_control_msg_type(msg);
  if (type == RG_CONTROL_MSG_NONE)
    return rg_status_make(RG_INVALID_ARGUMENT, "%s: '%s' is not a control message", who,
                          msg && msg->descriptor ? msg->descriptor->name : "(null)");
  if (rg__control_msg_info(type)->origin != RG__CONTROL_USER)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "%s: %s belongs to the handshake and heartbeats; the control plane sends "
                          "it itself",
                          who, rg_control_msg_name(type));
  return NULL;
}

static const char *const event_names[] = {
#define RG_X_(k, n) n,
    RG_CONTROL_EVENT_MAP(RG_X_)
#undef RG_X_
};
_Static_assert(sizeof(event_names) / sizeof(event_names[0]) == RG_CONTROL_EVENT_COUNT,
               "event name table out of step with RG_CONTROL_EVENT_MAP");

const char *rg_control_event_kind_name(rg_control_event_kind_t k) {
  return (unsigned)k < RG_CONTROL_EVENT_COUNT ? event_names[k] : "unknown";
}

void rg_control_event_deinit(rg_control_event_t *ev) {
  if (!ev) return;
  if (ev->msg) protobuf_c_message_free_unpacked(ev->msg, NULL);
  memset(ev, 0, sizeof *ev);
}

// The wire numbers of StageKind, beside the graph's kinds they stand for.
#define RG__WIRE_STAGE_MAP(X)                                             \
  X(RG_STAGE_EMBED, RIDGE__CONTROL__STAGE_KIND__STAGE_KIND_EMBED)         \
  X(RG_STAGE_ATTENTION, RIDGE__CONTROL__STAGE_KIND__STAGE_KIND_ATTENTION) \
  X(RG_STAGE_FFN, RIDGE__CONTROL__STAGE_KIND__STAGE_KIND_FFN)             \
  X(RG_STAGE_MOE, RIDGE__CONTROL__STAGE_KIND__STAGE_KIND_MOE)             \
  X(RG_STAGE_LM_HEAD, RIDGE__CONTROL__STAGE_KIND__STAGE_KIND_LM_HEAD)

rg_status_t rg_control_stage_kind_to_wire(rg_stage_kind_t kind, Ridge__Control__StageKind *out) {
  switch (kind) {
#define RG_X_(g, w) \
  case g:           \
    *out = w;       \
    return NULL;
    RG__WIRE_STAGE_MAP(RG_X_)
#undef RG_X_
    default:
      return rg_status_make(RG_INVALID_ARGUMENT,
                            "stage kind '%s' is a move, not a stage a worker hosts",
                            rg_stage_kind_name(kind));
  }
}

rg_status_t rg_control_stage_kind_from_wire(int wire, rg_stage_kind_t *out) {
  switch (wire) {
#define RG_X_(g, w) \
  case w:           \
    *out = g;       \
    return NULL;
    RG__WIRE_STAGE_MAP(RG_X_)
#undef RG_X_
    default:
      return rg_status_make(RG_INVALID_ARGUMENT,
                            "stage kind %d on the wire is not one of embed (%d), attention, ffn, "
                            "moe, lm_head (%d)",
                            wire, RIDGE__CONTROL__STAGE_KIND__STAGE_KIND_EMBED,
                            RIDGE__CONTROL__STAGE_KIND__STAGE_KIND_LM_HEAD);
  }
}

void rg__control_header_put(uint8_t out[RG__CONTROL_HEADER_BYTES], uint16_t version, uint16_t type,
                            uint32_t length) {
  uint32_t m = htonl(RG__CONTROL_MAGIC), l = htonl(length);
  uint16_t v = htons(version), t = htons(type);
  memcpy(out, &m, 4);
  memcpy(out + 4, &v, 2);
  memcpy(out + 6, &t, 2);
  memcpy(out + 8, &l, 4);
}

void rg__control_header_get(const uint8_t in[RG__CONTROL_HEADER_BYTES], rg__control_header_t *h) {
  uint32_t m, l;
  uint16_t v, t;
  memcpy(&m, in, 4);
  memcpy(&v, in + 4, 2);
  memcpy(&t, in + 6, 2);
  memcpy(&l, in + 8, 4);
  h->magic = ntohl(m);
  h->version = ntohs(v);
  h->type = ntohs(t);
  h->length = ntohl(l);
}

static const char *fmt_size(double bytes, char *buf, size_t len) {
  return rg_fmt_bytes_iec(bytes, buf, len);
}

rg_status_t rg__control_frame_pack(const ProtobufCMessage *msg, uint16_t version,
                                   size_t max_payload, rg__control_frame_t **out) {
  *out = NULL;
  rg_control_msg_type_t type = rg_control_msg_type(msg);
  if (type == RG_CONTROL_MSG_NONE)
    return rg_status_make(RG_INVALID_ARGUMENT, "'%s' is not a control message",
                          msg && msg->descriptor ? msg->descriptor->name : "(null)");
  size_t n = protobuf_c_message_get_packed_size(msg);
  if (n > max_payload || n > UINT32_MAX) {
    char a[32], b[32];
    return rg_status_make(RG_INVALID_ARGUMENT, "%s of %s (%zu bytes) exceeds the %s message limit",
                          rg_control_msg_name(type), fmt_size((double)n, a, sizeof a), n,
                          fmt_size((double)max_payload, b, sizeof b));
  }
  rg__control_frame_t *f = malloc(sizeof *f + RG__CONTROL_HEADER_BYTES + n);
  if (!f)
    return rg_status_make(RG_OUT_OF_MEMORY, "out of memory framing a %zu-byte %s", n,
                          rg_control_msg_name(type));
  atomic_init(&f->refs, 1);
  f->len = RG__CONTROL_HEADER_BYTES + n;
  rg__control_header_put(f->data, version, (uint16_t)type, (uint32_t)n);
  protobuf_c_message_pack(msg, f->data + RG__CONTROL_HEADER_BYTES);
  *out = f;
  return NULL;
}

void rg__control_frame_release(rg__control_frame_t *f) {
  if (f && atomic_fetch_sub(&f->refs, 1) == 1) free(f);
}

void rg__control_reader_init(rg__control_reader_t *r, size_t max_payload) {
  memset(r, 0, sizeof *r);
  r->max_payload = max_payload;
}

void rg__control_reader_deinit(rg__control_reader_t *r) {
  free(r->payload);
  r->payload = NULL;
}

// The first bytes of a stream that is not ours, as hex and as text, so the
// message hints at what spoke (an HTTP client, a TLS hello, ...).
static void describe_magic(const uint8_t *b, char *out, size_t cap) {
  char txt[5];
  for (int i = 0; i < 4; i++) txt[i] = isprint(b[i]) ? (char)b[i] : '.';
  txt[4] = 0;
  snprintf(out, cap, "%02x %02x %02x %02x (\"%s\")", b[0], b[1], b[2], b[3], txt);
}

// Checks a complete header; allocates the payload only when it passes.
static rg_status_t check_header(rg__control_reader_t *r) {
  rg__control_header_get(r->hdr, &r->h);
  const rg__control_header_t *h = &r->h;
  if (h->magic != RG__CONTROL_MAGIC) {
    char m[48];
    describe_magic(r->hdr, m, sizeof m);
    return rg_status_make(RG_PARSE, "not a ridge control frame: it starts with %s, not \"RGCP\"",
                          m);
  }
  const rg__control_msg_info_t *info = rg__control_msg_info(h->type);
  if (h->version != RG_CONTROL_PROTOCOL_VERSION && h->type != RG_CONTROL_MSG_REJECT) {
    r->peer_version = h->version;
    return rg_status_make(RG_PARSE,
                          "protocol version mismatch: the peer speaks control protocol version %u, "
                          "this side speaks %d",
                          h->version, RG_CONTROL_PROTOCOL_VERSION);
  }
  if (!info) return rg_status_make(RG_PARSE, "unknown message type %u", h->type);
  if (h->length > r->max_payload) {
    char a[32], b[32];
    return rg_status_make(RG_PARSE, "%s frame of %s (%u bytes) exceeds the %s limit", info->name,
                          fmt_size(h->length, a, sizeof a), h->length,
                          fmt_size((double)r->max_payload, b, sizeof b));
  }
  if (h->length) {
    r->payload = malloc(h->length);
    if (!r->payload)
      return rg_status_make(RG_OUT_OF_MEMORY, "out of memory for a %u-byte %s", h->length,
                            info->name);
  }
  r->payload_have = 0;
  return NULL;
}

rg_status_t rg__control_reader_feed(rg__control_reader_t *r, const uint8_t *data, size_t len,
                                    size_t *consumed, bool *out_done) {
  size_t used = 0;
  *out_done = false;
  if (r->hdr_have < RG__CONTROL_HEADER_BYTES) {
    size_t want = RG__CONTROL_HEADER_BYTES - r->hdr_have;
    size_t n = len < want ? len : want;
    memcpy(r->hdr + r->hdr_have, data, n);
    r->hdr_have += n;
    used += n;
    if (r->hdr_have < RG__CONTROL_HEADER_BYTES) {
      *consumed = used;
      return NULL;
    }
    rg_status_t s = check_header(r);
    if (s) {
      *consumed = used;
      return s;
    }
  }
  size_t want = r->h.length - r->payload_have;
  size_t n = len - used < want ? len - used : want;
  if (n) memcpy(r->payload + r->payload_have, data + used, n);
  r->payload_have += n;
  used += n;
  *consumed = used;
  *out_done = r->payload_have == r->h.length;
  return NULL;
}

rg_status_t rg__control_reader_take(rg__control_reader_t *r, ProtobufCMessage **out) {
  *out = NULL;
  const rg__control_msg_info_t *info = rg__control_msg_info(r->h.type);
  size_t len = r->h.length;
  ProtobufCMessage *m =
      info ? protobuf_c_message_unpack(info->descriptor, NULL, len, r->payload) : NULL;
  free(r->payload);
  r->payload = NULL;
  r->hdr_have = 0;
  r->payload_have = 0;
  if (!info) return rg_status_make(RG_INTERNAL, "no complete frame to take");
  if (!m)
    return rg_status_make(RG_PARSE, "the %zu-byte payload of a %s frame does not unpack as a %s",
                          len, info->name, info->name);
  rg_status_t s = rg__control_validate(m);
  if (s) {
    protobuf_c_message_free_unpacked(m, NULL);
    return s;
  }
  *out = m;
  return NULL;
}

rg_status_t rg__control_reader_eof(const rg__control_reader_t *r) {
  if (r->hdr_have == 0) return NULL;
  if (r->hdr_have < RG__CONTROL_HEADER_BYTES)
    return rg_status_make(RG_PARSE,
                          "closed the connection mid-frame, after %zu of the %d header bytes",
                          r->hdr_have, RG__CONTROL_HEADER_BYTES);
  return rg_status_make(
      RG_PARSE, "closed the connection mid-frame, after %zu of the %u payload bytes of a %s",
      r->payload_have, r->h.length, rg_control_msg_name(r->h.type));
}

static rg_status_t check_bytes(const char *msg, const char *field, const ProtobufCBinaryData *b,
                               size_t want) {
  if (b->len != want)
    return rg_status_make(RG_PARSE, "%s.%s is %zu bytes, expected %zu", msg, field, b->len, want);
  return NULL;
}

static rg_status_t check_string(const char *msg, const char *field, const char *s) {
  size_t n = s ? strlen(s) : 0;
  if (n > RG__CONTROL_NAME_MAX)
    return rg_status_make(RG_PARSE, "%s.%s is %zu bytes long, more than the %d allowed", msg, field,
                          n, RG__CONTROL_NAME_MAX);
  return NULL;
}

// protobuf-c keeps a field numbered 0 as an unknown field, though no
// protobuf encoder may write one, and then cannot read its own packing of
// it back; such a payload is malformed, so it is refused like any other.
static rg_status_t check_field_numbers(const ProtobufCMessage *m) {
  for (unsigned i = 0; i < m->n_unknown_fields; i++)
    if (m->unknown_fields[i].tag == 0)
      return rg_status_make(RG_PARSE, "%s carries a field numbered 0, which protobuf forbids",
                            m->descriptor->short_name);
  const ProtobufCMessageDescriptor *d = m->descriptor;
  const char *base = (const char *)m;
  for (unsigned f = 0; f < d->n_fields; f++) {
    const ProtobufCFieldDescriptor *fd = &d->fields[f];
    if (fd->type != PROTOBUF_C_TYPE_MESSAGE) continue;
    if (fd->label == PROTOBUF_C_LABEL_REPEATED) {
      size_t n;
      ProtobufCMessage **items;
      memcpy(&n, base + fd->quantifier_offset, sizeof n);
      memcpy(&items, base + fd->offset, sizeof items);
      for (size_t k = 0; k < n; k++)
        if (items[k]) RG_RETURN_IF_ERROR(check_field_numbers(items[k]));
    } else {
      ProtobufCMessage *sub;
      memcpy(&sub, base + fd->offset, sizeof sub);
      if (sub) RG_RETURN_IF_ERROR(check_field_numbers(sub));
    }
  }
  return NULL;
}

rg_status_t rg__control_validate(const ProtobufCMessage *m) {
  const size_t nb = RG__CONTROL_NONCE_BYTES;
  RG_RETURN_IF_ERROR(check_field_numbers(m));
  const rg_control_hello_t *hello = RG_CONTROL_MSG_AS(m, hello);
  if (hello) {
    RG_RETURN_IF_ERROR(check_bytes("Hello", "nonce", &hello->nonce, nb));
    RG_RETURN_IF_ERROR(check_string("Hello", "worker_name", hello->worker_name));
    RG_RETURN_IF_ERROR(check_string("Hello", "host", hello->host));
    RG_RETURN_IF_ERROR(check_string("Hello", "device", hello->device));
    RG_RETURN_IF_ERROR(check_string("Hello", "device_name", hello->device_name));
    RG_RETURN_IF_ERROR(check_string("Hello", "class_hint", hello->class_hint));
    RG_RETURN_IF_ERROR(check_string("Hello", "fabric_provider", hello->fabric_provider));
    return NULL;
  }
  const rg_control_challenge_t *ch = RG_CONTROL_MSG_AS(m, challenge);
  if (ch) {
    RG_RETURN_IF_ERROR(check_bytes("Challenge", "nonce", &ch->nonce, nb));
    return check_bytes("Challenge", "proof", &ch->proof, nb);
  }
  const rg_control_auth_t *au = RG_CONTROL_MSG_AS(m, auth);
  if (au) return check_bytes("Auth", "proof", &au->proof, nb);
  const rg_control_welcome_t *w = RG_CONTROL_MSG_AS(m, welcome);
  if (w) {
    if (w->worker_id == 0) return rg_status_make(RG_PARSE, "Welcome carries worker id 0");
    if (w->heartbeat_interval_ms == 0 || w->heartbeat_timeout_ms <= w->heartbeat_interval_ms)
      return rg_status_make(
          RG_PARSE, "Welcome's heartbeat timeout (%u ms) does not exceed its interval (%u ms)",
          w->heartbeat_timeout_ms, w->heartbeat_interval_ms);
  }
  return NULL;
}

void rg__control_sanitize(char *dst, size_t cap, const char *src) {
  size_t i = 0;
  for (; src && src[i] && i + 1 < cap; i++)
    dst[i] = (src[i] >= 0x20 && src[i] < 0x7f) ? src[i] : '?';
  if (cap) dst[i] = 0;
}

rg_status_t rg__control_limits_resolve(const rg_control_limits_t *in, const char *who,
                                       rg_control_limits_t *out) {
  rg_control_limits_t l = in ? *in : (rg_control_limits_t){0};
  if (l.heartbeat_interval_s == 0) l.heartbeat_interval_s = 0.5;
  if (l.heartbeat_timeout_s == 0) l.heartbeat_timeout_s = 3.0;
  if (l.handshake_timeout_s == 0) l.handshake_timeout_s = 3.0;
  if (l.max_message_bytes == 0) l.max_message_bytes = RG_CONTROL_DEFAULT_MAX_MESSAGE_BYTES;
  // Positive and below a day, so every figure fits the millisecond fields.
  if (!(l.heartbeat_interval_s >= 0.001 && l.heartbeat_interval_s < 86400))
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "%s: heartbeat interval %g s must be between 1 ms and a day", who,
                          l.heartbeat_interval_s);
  if (!(l.heartbeat_timeout_s > l.heartbeat_interval_s && l.heartbeat_timeout_s < 86400))
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "%s: heartbeat timeout %g s must exceed the heartbeat interval %g s", who,
                          l.heartbeat_timeout_s, l.heartbeat_interval_s);
  if (!(l.handshake_timeout_s >= 0.001 && l.handshake_timeout_s < 86400))
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "%s: handshake timeout %g s must be between 1 ms and a day", who,
                          l.handshake_timeout_s);
  if (l.max_message_bytes < 1024 || l.max_message_bytes > UINT32_MAX)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "%s: maximum message size %zu bytes must be between 1 KiB and 4 GiB", who,
                          l.max_message_bytes);
  *out = l;
  return NULL;
}

rg_status_t rg_control_parse_endpoint(const char *text, char *host, size_t host_len,
                                      int *out_port) {
  const char *colon = NULL, *h = text, *hend = NULL;
  if (!text || !*text)
    return rg_status_make(RG_INVALID_ARGUMENT, "coordinator address is empty: expected HOST:PORT");
  if (text[0] == '[') {
    const char *close = strchr(text, ']');
    if (close && close[1] == ':') {
      h = text + 1;
      hend = close;
      colon = close + 1;
    }
  } else {
    colon = strrchr(text, ':');
    // A bare IPv6 address has several colons and no brackets: ambiguous.
    if (colon && memchr(text, ':', (size_t)(colon - text))) colon = NULL;
    hend = colon;
  }
  if (!colon || hend == h)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "coordinator address '%s' is not HOST:PORT (or [IPv6]:PORT)", text);
  char *end = NULL;
  long port = strtol(colon + 1, &end, 10);
  if (!colon[1] || *end || port < 1 || port > 65535)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "coordinator address '%s': port '%s' is not a number from 1 to 65535",
                          text, colon + 1);
  size_t n = (size_t)(hend - h);
  if (n + 1 > host_len)
    return rg_status_make(RG_INVALID_ARGUMENT, "coordinator address '%s': host name too long",
                          text);
  memcpy(host, h, n);
  host[n] = 0;
  *out_port = (int)port;
  return NULL;
}
