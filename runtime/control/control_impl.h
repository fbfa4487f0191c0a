// runtime/control/control_impl.h — what the control plane's files share:
// the frame codec and reader (no I/O, so the fuzz target drives them
// directly), the handshake MACs, and the loop core both endpoints run on.
#ifndef RG_RUNTIME_CONTROL_IMPL_H
#define RG_RUNTIME_CONTROL_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <uv.h>

#include "runtime/control.h"

#define RG__CONTROL_MAGIC 0x52474350u  // "RGCP"
#define RG__CONTROL_HEADER_BYTES 12
// Frames from a peer that has not authenticated yet: a Hello or an Auth is a
// few hundred bytes, so 64 KiB is generous and keeps strangers cheap.
#define RG__CONTROL_PREAUTH_MAX_BYTES (64u << 10)
#define RG__CONTROL_NONCE_BYTES 32
#define RG__CONTROL_NAME_MAX 256  // longest string field a Hello may carry

typedef enum { RG__CONTROL_INTERNAL, RG__CONTROL_USER } rg__control_origin_t;

typedef struct {
  int type;
  const char *name;
  const ProtobufCMessageDescriptor *descriptor;
  rg__control_origin_t origin;
} rg__control_msg_info_t;

// NULL for a number that names no message.
const rg__control_msg_info_t *rg__control_msg_info(int type);
// What send accepts: a control message of USER origin.
RG_MUST_USE rg_status_t rg__control_check_user_msg(const char *who, const ProtobufCMessage *msg);

typedef struct {
  uint32_t magic;
  uint16_t version;
  uint16_t type;
  uint32_t length;
} rg__control_header_t;

void rg__control_header_put(uint8_t out[RG__CONTROL_HEADER_BYTES], uint16_t version, uint16_t type,
                            uint32_t length);
void rg__control_header_get(const uint8_t in[RG__CONTROL_HEADER_BYTES], rg__control_header_t *h);

// A packed frame, shared by the writes that send it (one per addressee).
typedef struct {
  atomic_int refs;
  size_t len;
  uint8_t data[];
} rg__control_frame_t;

// Packs msg (any control message, INTERNAL ones included) into a frame of
// the given protocol version with one reference; fails when the payload is
// over max_payload.
RG_MUST_USE rg_status_t rg__control_frame_pack(const ProtobufCMessage *msg, uint16_t version,
                                               size_t max_payload, rg__control_frame_t **out);
void rg__control_frame_release(rg__control_frame_t *f);

// Reassembles frames from a byte stream cut anywhere. It reads the header,
// checks it (magic, version, type, length against max_payload) and only then
// allocates the payload.
typedef struct {
  size_t max_payload;
  uint8_t hdr[RG__CONTROL_HEADER_BYTES];
  size_t hdr_have;
  rg__control_header_t h;  // valid once hdr_have is full
  uint8_t *payload;
  size_t payload_have;
  // Set when the frame was refused for its version: the peer's version, so
  // the caller can answer with a Reject naming it.
  int peer_version;
} rg__control_reader_t;

void rg__control_reader_init(rg__control_reader_t *r, size_t max_payload);
void rg__control_reader_deinit(rg__control_reader_t *r);
// Consumes bytes from data until a frame is complete (*out_done) or the
// bytes run out; *consumed says how many it took. A status means the stream
// is refused; its message says why, without naming the peer.
RG_MUST_USE rg_status_t rg__control_reader_feed(rg__control_reader_t *r, const uint8_t *data,
                                                size_t len, size_t *consumed, bool *out_done);
// Unpacks the complete frame and checks its fields, then readies the reader
// for the next frame. A Reject of another protocol version is unpacked too
// (its layout is frozen), so a peer learns why it was turned away.
RG_MUST_USE rg_status_t rg__control_reader_take(rg__control_reader_t *r, ProtobufCMessage **out);
// When the peer has closed: NULL between frames, else what was cut short.
RG_MUST_USE rg_status_t rg__control_reader_eof(const rg__control_reader_t *r);

// Field checks protobuf cannot make: nonce and proof sizes, string lengths.
RG_MUST_USE rg_status_t rg__control_validate(const ProtobufCMessage *m);

// MAC(label, a, b) with the shared key, and its constant-time check.
void rg__control_mac(const rg_control_secret_t *s, const char *label, const uint8_t *a,
                     const uint8_t *b, uint8_t out[RG__CONTROL_NONCE_BYTES]);
bool rg__control_mac_ok(const rg_control_secret_t *s, const char *label, const uint8_t *a,
                        const uint8_t *b, const uint8_t *proof);
void rg__control_random(void *buf, size_t len);
RG_MUST_USE rg_status_t rg__control_crypto_init(void);

// Copies a string from the wire for use in a message: at most cap-1 bytes,
// anything not printable ASCII replaced by '?'. "" for NULL.
void rg__control_sanitize(char *dst, size_t cap, const char *src);
// "127.0.0.1:40312" or "[::1]:40312".
void rg__control_format_addr(const struct sockaddr *sa, char *out, size_t cap);

// Fills limits' zero fields with the defaults and checks them; `who` names
// the side in messages ("coordinator", "worker").
RG_MUST_USE rg_status_t rg__control_limits_resolve(const rg_control_limits_t *in, const char *who,
                                                   rg_control_limits_t *out);

// ---- The loop core both endpoints run on ------------------------------------

typedef struct rg__control_event_node_s {
  rg_control_event_t ev;
  struct rg__control_event_node_s *next;
} rg__control_event_node_t;

typedef struct rg__control_out_s {
  uint32_t worker_id;  // the server's addressee; unused by the client
  rg__control_frame_t *frame;
  struct rg__control_out_s *next;
} rg__control_out_t;

typedef struct rg__control_core_s rg__control_core_t;

struct rg__control_core_s {
  uv_loop_t loop;
  uv_async_t wake;  // caller threads (and signal handlers) wake the loop through it
  uv_timer_t tick;  // heartbeats, silence and handshake deadlines
  pthread_t thread;
  bool thread_started;
  bool initialized;
  const char *who;  // "coordinator" or "worker", for messages
  rg_control_limits_t limits;
  uint64_t tick_ms;

  // The owner's hooks, run on the loop thread.
  void *owner;
  void (*on_wake)(rg__control_core_t *core);  // drain the outbox
  void (*on_tick)(rg__control_core_t *core);
  void (*on_stop)(rg__control_core_t *core);  // close the owner's handles

  // 1 when destroy asked the loop to stop, 2 when interrupt did.
  atomic_int stop_requested;
  // Loop-thread only: the stop has begun.
  bool stopping;
  // Cleared just before `wake` closes. interrupt reads it because a signal
  // handler cannot take the lock; the window it leaves is the one any
  // signal-driven stop has, hence "restore the handler before destroy".
  atomic_bool signal_ok;

  // Everything below is guarded by mu.
  pthread_mutex_t mu;
  pthread_cond_t cv;  // signalled when an event arrives or the endpoint fails
  rg__control_event_node_t *in_head, *in_tail;
  rg__control_out_t *out_head, *out_tail;
  // Once set, the endpoint is finished: recv fails with `failure` after the
  // events queued before it, and send fails at once.
  bool failed;
  char failure[512];
  // Set (with failed) just before the loop closes `wake`; from then on no
  // caller may touch it.
  bool wake_closed;
};

// Sets up the loop, the wake and tick handles and the lock. The owner sets
// its hooks and anything else, then calls start.
RG_MUST_USE rg_status_t rg__control_core_init(rg__control_core_t *core, const char *who,
                                              const rg_control_limits_t *limits);
RG_MUST_USE rg_status_t rg__control_core_start(rg__control_core_t *core);
// The tick period for limits: a quarter of the shortest deadline, or the
// heartbeat interval when that is shorter.
uint64_t rg__control_tick_ms(const rg_control_limits_t *l);
// Loop thread: restarts the tick after core->limits changed.
void rg__control_core_retick(rg__control_core_t *core);
// Asks the loop to stop, joins its thread, frees what is queued and closes
// the loop. Safe on a core whose thread never started.
void rg__control_core_deinit(rg__control_core_t *core);
// Async-signal-safe: marks the stop and wakes the loop.
void rg__control_core_interrupt(rg__control_core_t *core);

// Loop thread: queues an event for recv (takes ownership of ev->msg).
void rg__control_core_push_event(rg__control_core_t *core, const rg_control_event_t *ev);
// Loop thread: marks the endpoint failed with text (the first failure wins).
void rg__control_core_fail(rg__control_core_t *core, const char *text);
// Caller threads: queue a frame for the loop and wake it; takes the frame's
// reference. Fails (releasing it) once the endpoint has failed.
RG_MUST_USE rg_status_t rg__control_core_post(rg__control_core_t *core, uint32_t worker_id,
                                              rg__control_frame_t *frame);
// Loop thread: takes the whole outbox (the caller frees the nodes).
rg__control_out_t *rg__control_core_take_outbox(rg__control_core_t *core);
// Caller threads: the next event, NONE after timeout_s, or the failure.
// The loop's failure, if it has failed (a copy), else NULL; takes no event.
RG_MUST_USE rg_status_t rg__control_core_failure(rg__control_core_t *core);
RG_MUST_USE rg_status_t rg__control_core_recv(rg__control_core_t *core, double timeout_s,
                                              rg_control_event_t *out);

// A write of a frame on a stream; the frame's reference is dropped when the
// write completes or is cancelled. Returns the libuv error, if any.
int rg__control_write(uv_stream_t *stream, rg__control_frame_t *frame);
// Packs an INTERNAL message and writes it (for the handshake and heartbeats).
int rg__control_write_msg(uv_stream_t *stream, const ProtobufCMessage *msg, uint16_t version);

uint64_t rg__control_now_ns(void);

#endif  // RG_RUNTIME_CONTROL_IMPL_H
