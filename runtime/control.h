// runtime/control.h — the runtime's control plane: how a coordinator and its
// workers find each other, prove they share a secret, watch each other with
// heartbeats, and exchange control messages (assignments, peer tables,
// errors, shutdown) over TCP.
//
// The data plane (activations, KV pages) goes over libfabric and is not here;
// this layer carries the few small messages that set it up and tear it down.
//
// Wire format. Every message is one frame:
//
//   offset 0   4 bytes  magic "RGCP"
//          4   2 bytes  protocol version (big-endian), RG_CONTROL_PROTOCOL_VERSION
//          6   2 bytes  message type (big-endian), a number from RG_CONTROL_MSG_MAP
//          8   4 bytes  payload length (big-endian), at most max_message_bytes
//         12   payload  the message packed by protobuf-c (runtime/control/control.proto)
//
// The header is checked before anything is allocated for the payload. A
// frame with a wrong magic, an unknown type, a length over the limit, a
// payload that does not unpack, or a type out of place in the handshake is
// refused: the receiver closes the connection and reports an event naming
// the peer's address. A frame of another protocol version is answered with a
// Reject that names both versions. Until a peer has authenticated, frames
// are limited to 64 KiB, so a stranger cannot make the coordinator allocate
// much.
//
// Handshake (W = worker, C = coordinator; MAC = HMAC-SHA-512/256 keyed by the
// shared secret, compared in constant time; the secret never travels):
//
//   W ── Hello{name, host, device, fabric address, nonce_w} ──────────> C
//   W <────────── Challenge{nonce_c, MAC("coordinator", nonce_w, nonce_c)} C
//   W ── Auth{MAC("worker", nonce_c, nonce_w)} ───────────────────────> C
//   W <──────────────────────── Welcome{worker id, heartbeat settings} ─ C
//
// Each side checks the other's MAC, so a worker also refuses a coordinator
// that does not know the secret. A wrong secret fails on both sides with a
// message; the coordinator keeps serving everyone else. The control plane
// is authenticated when a worker joins, not encrypted: run it on a private
// network (it listens on 127.0.0.1 unless told otherwise).
//
// Lifecycles:
//
//   coordinator                                 worker
//   rg_control_server_create ── listening       rg_control_client_create ── connects, retrying
//     │ recv → JOINED / MESSAGE /                 │ until connect_timeout_s, then the
//     │        REFUSED / LOST events              │ handshake; returns once joined
//     │ send(worker id or RG_CONTROL_ALL)         │ send / recv
//     │ interrupt (signal-safe) ── stopped        │ coordinator lost ── recv/send fail
//   rg_control_server_destroy                   rg_control_client_destroy
//
// Heartbeats: both sides send one every heartbeat_interval_s (default 0.5 s;
// the worker adopts the coordinator's settings from Welcome). A worker heard
// from for no longer than heartbeat_timeout_s (default 3 s) is declared lost
// with an event naming it, its device and how long it was silent; a worker
// whose coordinator goes silent or closes gets an error from recv and send
// within the same bound. Any frame counts as a sign of life.
//
// Threads: each endpoint runs its libuv loop on a thread of its own, so the
// caller's thread can compute for seconds while heartbeats keep flowing.
// send, recv and interrupt may be called from any thread; send packs the
// message on the caller's thread and queues it; recv waits for the next
// event up to a deadline. interrupt is async-signal-safe (it only wakes the
// loop), so a SIGINT handler may call it; restore the handler before the
// endpoint is destroyed. destroy stops the loop, closes every connection and
// joins the thread; it must not race with other calls on the same endpoint.
//
// Ownership: what _create returns belongs to the caller. Options and the
// messages given to send are copied or packed before the call returns. An
// event's message belongs to the event: rg_control_event_deinit frees it.
#ifndef RG_RUNTIME_CONTROL_H
#define RG_RUNTIME_CONTROL_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "graphs/graphs.h"
#include "runtime/control/control.pb-c.h"

// Bump when a change would make an older peer misread a frame (the header,
// the handshake, a renumbered field) or a data-plane message the peers
// exchange once joined (runtime/cluster: STEP, DONE, ...); new fields and new
// message types do not need it. 2: DONE carries each stage's cold calls.
#define RG_CONTROL_PROTOCOL_VERSION 2
#define RG_CONTROL_DEFAULT_MAX_MESSAGE_BYTES (64u << 20)

// The messages, one line each: type number on the wire, NAME, protobuf
// message name, its lower-case name, and who sends it: USER messages go
// through rg_control_*_send and come out of recv; INTERNAL ones belong to
// the handshake and heartbeats and never reach the caller. Adding a message:
// add it to control.proto and one line here.
#define RG_CONTROL_MSG_MAP(X)                     \
  X(1, HELLO, Hello, hello, INTERNAL)             \
  X(2, CHALLENGE, Challenge, challenge, INTERNAL) \
  X(3, AUTH, Auth, auth, INTERNAL)                \
  X(4, WELCOME, Welcome, welcome, INTERNAL)       \
  X(5, REJECT, Reject, reject, INTERNAL)          \
  X(6, HEARTBEAT, Heartbeat, heartbeat, INTERNAL) \
  X(7, ASSIGN, Assign, assign, USER)              \
  X(8, READY, Ready, ready, USER)                 \
  X(9, PEER_TABLE, PeerTable, peer_table, USER)   \
  X(10, ERROR, Error, error, USER)                \
  X(11, SHUTDOWN, Shutdown, shutdown, USER)

typedef enum {
  RG_CONTROL_MSG_NONE = 0,
#define RG_X_(num, NAME, Camel, lower, who) RG_CONTROL_MSG_##NAME = num,
  RG_CONTROL_MSG_MAP(RG_X_)
#undef RG_X_
} rg_control_msg_type_t;

// Short names for the generated message structs: rg_control_assign_t is
// Ridge__Control__Assign. Build one with its generated initialiser, e.g.
// rg_control_assign_t a = RIDGE__CONTROL__ASSIGN__INIT, and pass &a.base.
#define RG_X_(num, NAME, Camel, lower, who) typedef Ridge__Control__##Camel rg_control_##lower##_t;
RG_CONTROL_MSG_MAP(RG_X_)
#undef RG_X_
typedef Ridge__Control__StageInstance rg_control_stage_instance_t;
typedef Ridge__Control__Option rg_control_option_t;
typedef Ridge__Control__Peer rg_control_peer_t;

// "Assign", or "type 99" for a number that names no message.
const char *rg_control_msg_name(int type);
// The type of a control message, or RG_CONTROL_MSG_NONE for any other
// protobuf message.
rg_control_msg_type_t rg_control_msg_type(const ProtobufCMessage *m);
// m as the given message, or NULL when m is NULL or another message:
//   const rg_control_assign_t *a = RG_CONTROL_MSG_AS(ev.msg, assign);
#define RG_CONTROL_MSG_AS(m, lower)                                 \
  ((m) && (m)->descriptor == &ridge__control__##lower##__descriptor \
       ? (rg_control_##lower##_t *)(m)                              \
       : NULL)

// The stage kinds of graphs/graphs.h on the wire. Only the kinds a worker
// hosts travel (embed, attention, ffn, moe, lm_head); the moves do not.
RG_MUST_USE rg_status_t rg_control_stage_kind_to_wire(rg_stage_kind_t kind,
                                                      Ridge__Control__StageKind *out);
RG_MUST_USE rg_status_t rg_control_stage_kind_from_wire(int wire, rg_stage_kind_t *out);

// ---- The shared secret ----------------------------------------------------

// A 32-byte key derived (BLAKE2b) from the secret text, so any length of
// secret works and the text itself is not kept.
typedef struct {
  uint8_t key[32];
} rg_control_secret_t;

// From a file when path is non-NULL, else from the RIDGE_SECRET environment
// variable. The file must be a regular file that only its owner can read or
// write (like ssh's private keys: a mode of 0600 or 0400). Trailing
// whitespace (the newline an editor adds) is not part of the secret; an
// empty secret is refused.
RG_MUST_USE rg_status_t rg_control_secret_load(const char *path, rg_control_secret_t *out);
RG_MUST_USE rg_status_t rg_control_secret_from_text(const char *text, size_t len,
                                                    rg_control_secret_t *out);
// A fresh random secret for workers this process starts itself: text gets
// 64 hex digits (pass it as RIDGE_SECRET), out the key derived from them.
RG_MUST_USE rg_status_t rg_control_secret_generate(char text[65], rg_control_secret_t *out);

// Splits "HOST:PORT" or "[IPv6]:PORT" (what --coordinator takes).
RG_MUST_USE rg_status_t rg_control_parse_endpoint(const char *text, char *host, size_t host_len,
                                                  int *out_port);

// ---- Events ---------------------------------------------------------------

// What recv hands back. text is a full sentence for the user, naming the
// worker (id, name, device, host) and the peer's address where they apply.
#define RG_CONTROL_EVENT_MAP(X)                                                            \
  X(RG_CONTROL_EVENT_NONE, "none")       /* recv's deadline passed with nothing new */     \
  X(RG_CONTROL_EVENT_JOINED, "joined")   /* a worker authenticated; msg is its Hello */    \
  X(RG_CONTROL_EVENT_MESSAGE, "message") /* msg arrived from worker_id (0: coordinator) */ \
  X(RG_CONTROL_EVENT_REFUSED, "refused") /* a peer that never joined was turned away */    \
  X(RG_CONTROL_EVENT_LOST, "lost")       /* a joined worker is gone: silent, closed, dropped */

typedef enum {
#define RG_X_(k, n) k,
  RG_CONTROL_EVENT_MAP(RG_X_)
#undef RG_X_
      RG_CONTROL_EVENT_COUNT
} rg_control_event_kind_t;

const char *rg_control_event_kind_name(rg_control_event_kind_t k);

typedef struct {
  rg_control_event_kind_t kind;
  uint32_t worker_id;          // 0 when no worker is concerned (or from the coordinator)
  rg_control_msg_type_t type;  // MESSAGE and JOINED: the type of msg
  ProtobufCMessage *msg;       // owned by the event; NULL for NONE, REFUSED, LOST
  char peer[64];               // the peer's address, "127.0.0.1:40312"
  char text[512];
} rg_control_event_t;

void rg_control_event_deinit(rg_control_event_t *ev);

// ---- Settings both sides share ---------------------------------------------

typedef struct {
  double heartbeat_interval_s;  // 0 = 0.5
  double heartbeat_timeout_s;   // 0 = 3.0; a peer silent this long is lost
  double handshake_timeout_s;   // 0 = 3.0; a new peer has this long to join
  size_t max_message_bytes;     // 0 = RG_CONTROL_DEFAULT_MAX_MESSAGE_BYTES; payload limit
} rg_control_limits_t;

// Addressee of rg_control_server_send meaning every joined worker.
#define RG_CONTROL_ALL 0u

// ---- Coordinator ------------------------------------------------------------

typedef struct rg_control_server_s rg_control_server_t;

typedef struct {
  const char *bind_host;              // NULL = "127.0.0.1"; "0.0.0.0" or an address for multi-host
  int port;                           // 0 = an ephemeral port (rg_control_server_port tells it)
  const rg_control_secret_t *secret;  // required; copied
  rg_control_limits_t limits;         // the coordinator's are the ones in force
} rg_control_server_options_t;

// Binds and listens before returning, so a bind error comes back here.
RG_MUST_USE rg_status_t rg_control_server_create(const rg_control_server_options_t *opt,
                                                 rg_control_server_t **out);
int rg_control_server_port(const rg_control_server_t *s);
// Sends to one joined worker, or to all with RG_CONTROL_ALL. Fails at once
// for a worker that is not joined (now), a message over the size limit, or
// an INTERNAL type.
RG_MUST_USE rg_status_t rg_control_server_send(rg_control_server_t *s, uint32_t worker_id,
                                               const ProtobufCMessage *msg);
// Waits up to timeout_s for the next event; kind NONE when none came. Fails
// only once the server has stopped (interrupted).
RG_MUST_USE rg_status_t rg_control_server_recv(rg_control_server_t *s, double timeout_s,
                                               rg_control_event_t *out);
// Stops the loop and closes every connection; recv then fails with
// "interrupted". Async-signal-safe.
void rg_control_server_interrupt(rg_control_server_t *s);
void rg_control_server_destroy(rg_control_server_t *s);

// ---- Worker -------------------------------------------------------------------

typedef struct rg_control_client_s rg_control_client_t;

typedef struct {
  const char *host;                   // the coordinator; required
  int port;                           // required
  const rg_control_secret_t *secret;  // required; copied
  double connect_timeout_s;           // 0 = 30; connection attempts repeat until then
  // What the worker tells the coordinator about itself (copied). NULL
  // strings are sent empty, except: name defaults to "HOST-PID", host to
  // this machine's host name.
  const char *name, *hostname, *device, *device_name, *class_hint, *fabric_provider;
  const void *fabric_address;
  size_t fabric_address_len;
  // Only handshake_timeout_s and max_message_bytes are used here; the
  // heartbeat settings come from the coordinator's Welcome.
  rg_control_limits_t limits;
} rg_control_client_options_t;

// Connects (retrying while the coordinator is not listening yet), then
// authenticates; returns once the worker has joined, or fails saying why
// (unreachable, wrong secret, refused, protocol version, no answer).
RG_MUST_USE rg_status_t rg_control_client_create(const rg_control_client_options_t *opt,
                                                 rg_control_client_t **out);
uint32_t rg_control_client_worker_id(const rg_control_client_t *c);
// The coordinator's address, "127.0.0.1:4000".
const char *rg_control_client_peer(const rg_control_client_t *c);
RG_MUST_USE rg_status_t rg_control_client_send(rg_control_client_t *c, const ProtobufCMessage *msg);
// Waits up to timeout_s for the next message; kind NONE when none came.
// Fails, with a message naming the coordinator, once it is lost (silent past
// the timeout, or closed) and every message that came before is delivered.
RG_MUST_USE rg_status_t rg_control_client_recv(rg_control_client_t *c, double timeout_s,
                                               rg_control_event_t *out);
// The failure once the coordinator is lost (as recv would report it after the
// messages before it), else NULL; takes no message. For waits that must not
// consume control messages, such as a worker's in the middle of a step.
RG_MUST_USE rg_status_t rg_control_client_lost(rg_control_client_t *c);
void rg_control_client_interrupt(rg_control_client_t *c);  // async-signal-safe
void rg_control_client_destroy(rg_control_client_t *c);

#endif  // RG_RUNTIME_CONTROL_H
