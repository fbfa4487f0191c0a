// runtime/transport.h — the runtime's data plane: moves bytes between the
// endpoints of worker processes (activations as tagged messages, KV pages by
// RMA write), in one process or across processes through libfabric.
//
// One interface, two implementations with the same semantics and messages:
//   inproc  endpoints in one process, possibly driven from different threads;
//           data moves by memcpy. For tests and the single-process pipeline.
//   fabric  libfabric RDM endpoints: `shm` and `tcp;ofi_rxm` here, any
//           provider with tagged messages and RMA elsewhere (verbs, efa, cxi).
//
// Every operation is non-blocking: it posts work and returns a request, which
// the caller completes with rg_transport_test() or rg_transport_wait*(). One
// thread can so keep several transfers in flight (two micro-batches in
// ping-pong). Every wait has a deadline (default 10 s, per endpoint and per
// call); an expired deadline fails the transfer with RG_DEADLINE_EXCEEDED and
// a message naming the peer, the caller's stage label and the bytes. No call
// blocks without one.
//
// A request's life:
//
//   rg_transport_send / recv / write / recv_notice
//        │ (posted)
//        v
//   [pending] ──test / wait: completed, failed, deadline, peer_fail──> [done]
//        │                                                            │
//        │ rg_transport_destroy: done, RG_CANCELLED                   │
//        └──────────────> [done, detached from the endpoint] ─────────┤
//                                                                     v
//                                                   rg_transport_req_free
//
// Freeing a pending request cancels it. Buffers: a send's or write's source
// and a receive's destination belong to the transport until the request is
// done. One exception, since libfabric cannot recall a posted send or write:
// when a send or write fails by deadline, cancellation or peer_fail, the
// provider may still read its source until the endpoint is destroyed. (A
// timed-out receive is cancelled with fi_cancel before the wait returns.)
//
// KV pages: the receiver registers its cache as a region and hands the
// region's descriptor to the writer (through the control plane). The writer
// calls rg_transport_write with a list of segments. The transport cuts them
// into chunks (chunk_bytes, 512 KiB by default) and pipelines them: while
// chunk i is on the wire it hashes chunk i+1, and once chunk i's writes have
// completed it sends chunk i's completion notice, a tagged message carrying
// that chunk's destination segments and an XXH3-64 checksum of its source
// bytes (the last also carries the caller's payload). The receiver's
// rg_transport_recv_notice gathers every chunk's notice, checking each against
// its regions and its checksum against the destination bytes as it comes
// (while chunk i+1 arrives), and reports success only once all are in and
// intact, so a page corrupted in transit is never reported usable. A notice
// cannot overtake its data: it is posted only after its chunk's writes have
// completed with FI_DELIVERY_COMPLETE (the data is visible in the target
// memory). No provider message ordering (FI_ORDER_*) is relied upon, since
// ofi_rxm does not order RMA against later sends: chunks may come in any
// order. A notice tag names one write: writes in flight to one peer use
// distinct tags.
//
// Threads: an endpoint may be shared by threads. Every call that touches it
// holds the endpoint's lock (waits let go of it while they block), so the
// provider sees one caller at a time, which is what the FI_THREAD_DOMAIN
// threading this asks for requires. A request may be completed by another
// thread's progress; it is still read and freed by whoever holds it. (A
// worker lets a transfer thread push KV pages while its main thread
// computes.) Inproc endpoints driven from different threads may talk to
// each other.
//
// Ownership: rg_transport_create returns an endpoint the caller destroys;
// rg_transport_region_register returns a region the caller deregisters
// (rg_transport_destroy deregisters any still registered, which makes those
// pointers invalid); every request returned belongs to the caller, who frees
// it, also after the endpoint is gone. Strings passed in are copied.
#ifndef RG_RUNTIME_TRANSPORT_H
#define RG_RUNTIME_TRANSPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

#define RG_TRANSPORT_KIND_MAP(X)   \
  X(RG_TRANSPORT_INPROC, "inproc") \
  X(RG_TRANSPORT_FABRIC, "fabric")

typedef enum {
#define RG_X_(c, n) c,
  RG_TRANSPORT_KIND_MAP(RG_X_)
#undef RG_X_
      RG_TRANSPORT_KIND_COUNT
} rg_transport_kind_t;

const char *rg_transport_kind_name(rg_transport_kind_t kind);

// The providers tried, in order, when neither the options nor FI_PROVIDER name
// one. `sockets` is left out: it hangs on this project's machines.
#define RG_TRANSPORT_DEFAULT_PROVIDERS "shm,tcp;ofi_rxm"
// Default deadline of every wait, in seconds.
#define RG_TRANSPORT_DEFAULT_TIMEOUT_S 10.0
// Pass as timeout_s to use the endpoint's default.
#define RG_TRANSPORT_TIMEOUT_DEFAULT (-1.0)

// Bytes an endpoint address may take (libfabric addresses are at most a few
// dozen bytes; an IPv6 tcp address with the provider name fits easily).
#define RG_TRANSPORT_ADDR_MAX 256
// Bytes of an encoded region descriptor.
#define RG_TRANSPORT_DESC_BYTES 40
// Most segments one write (and its notice) may carry, and the largest notice
// payload. Longer transfers are split into several writes by the caller (e.g.
// one per layer), which also lets the receiver start on early layers.
#define RG_TRANSPORT_MAX_SEGMENTS 8192
#define RG_TRANSPORT_MAX_PAYLOAD 65536

typedef struct rg_transport_s rg_transport_t;
typedef struct rg_transport_req_s rg_transport_req_t;
typedef struct rg_transport_region_s rg_transport_region_t;
// A peer of one endpoint, as rg_transport_peer_add numbered it (0, 1, ...).
typedef int32_t rg_transport_peer_t;

typedef struct {
  rg_transport_kind_t kind;
  // This endpoint's name in messages, e.g. "worker 1 (cpu:0)". NULL: "endpoint".
  const char *name;
  // fabric: comma-separated provider names in order of preference, e.g. the
  // fleet's `provider:`. NULL: $FI_PROVIDER, else RG_TRANSPORT_DEFAULT_PROVIDERS.
  const char *provider;
  // fabric: the local address to bind (fi_getinfo's node with FI_SOURCE), e.g.
  // "127.0.0.1" to keep tcp on loopback. NULL: the provider's first interface.
  const char *node;
  // Default deadline of waits, seconds; 0 = RG_TRANSPORT_DEFAULT_TIMEOUT_S.
  double timeout_s;
  // Writes are pipelined in chunks of about this many bytes, each with its
  // own notice and checksum (see "KV pages" above); 0 = 512 KiB. Only the
  // writer's setting matters.
  uint64_t chunk_bytes;
  // fabric: register every message buffer with the domain, as providers that
  // report FI_MR_LOCAL require, even where this one does not. Runs that code
  // path on providers here; costs a registration per message.
  bool register_local;
} rg_transport_options_t;

RG_MUST_USE rg_status_t rg_transport_create(const rg_transport_options_t *opt,
                                            rg_transport_t **out);
// Cancels every operation in flight (their requests become done with
// RG_CANCELLED), deregisters remaining regions and closes the endpoint.
void rg_transport_destroy(rg_transport_t *t);

rg_transport_kind_t rg_transport_kind(const rg_transport_t *t);
const char *rg_transport_name(const rg_transport_t *t);
// One line: implementation, provider, memory-registration mode, iov limits,
// how the endpoint waits. Borrowed; valid until destroy.
const char *rg_transport_describe(const rg_transport_t *t);
// The provider in use ("shm", "tcp;ofi_rxm"), or "inproc".
const char *rg_transport_provider(const rg_transport_t *t);

// Lists the libfabric providers here that offer what the transport needs
// (reliable datagram endpoints, tagged messages, RMA) as "a, b, c".
RG_MUST_USE rg_status_t rg_transport_providers(char *buf, size_t cap);

// Removes what libfabric's shm provider leaves in /dev/shm for a local
// process that died without closing its endpoint (each endpoint keeps a
// 16 MiB region there, named after its process). The launcher calls it
// after reaping a killed worker. Does nothing while that process lives.
// Returns how many files were removed.
int rg_transport_forget_process(int pid);

// ---------------------------------------------------------------------------
// Addresses and peers.

// The endpoint's opaque address (at most RG_TRANSPORT_ADDR_MAX bytes) for
// peers to pass to rg_transport_peer_add; plain bytes, safe to send anywhere.
RG_MUST_USE rg_status_t rg_transport_address(const rg_transport_t *t, uint8_t *buf, size_t cap,
                                             size_t *out_len);
// Adds the peer at `addr`; `name` ("worker 2 (opencl:0)") is used in every
// message about it. Refuses an address of another kind or provider.
RG_MUST_USE rg_status_t rg_transport_peer_add(rg_transport_t *t, const uint8_t *addr, size_t len,
                                              const char *name, rg_transport_peer_t *out);
const char *rg_transport_peer_name(const rg_transport_t *t, rg_transport_peer_t peer);
// Tells the endpoint that `peer` is gone (the control plane missed its
// heartbeats): its pending requests fail now with RG_PEER_LOST and `why`, and
// later operations with it fail at once.
void rg_transport_peer_fail(rg_transport_t *t, rg_transport_peer_t peer, const char *why);

// ---------------------------------------------------------------------------
// Tagged messages. The 64-bit tag is the caller's (the runtime packs step,
// micro-batch, layer and kind into it); a receive matches the first message
// from that peer with that exact tag, in the order they were sent. `stage`
// labels the transfer in messages ("attention layer 3 → ffn"); NULL: "transfer".

RG_MUST_USE rg_status_t rg_transport_send(rg_transport_t *t, rg_transport_peer_t peer, uint64_t tag,
                                          const void *buf, size_t len, const char *stage,
                                          rg_transport_req_t **out);
// A message longer than `cap` fails the receive with RG_TRUNCATED naming both
// sizes; the buffer's contents are then undefined, and nothing past cap is written.
RG_MUST_USE rg_status_t rg_transport_recv(rg_transport_t *t, rg_transport_peer_t peer, uint64_t tag,
                                          void *buf, size_t cap, const char *stage,
                                          rg_transport_req_t **out);

// ---------------------------------------------------------------------------
// Registered memory and RMA writes. Host memory only for now; a region keeps
// its base and length so that device memory (FI_HMEM) can join later.

enum {
  RG_TRANSPORT_WRITE_SOURCE = 1,  // local source of rg_transport_write
  RG_TRANSPORT_WRITE_TARGET = 2,  // peers may write into it
};

RG_MUST_USE rg_status_t rg_transport_region_register(rg_transport_t *t, void *base, size_t len,
                                                     unsigned access, rg_transport_region_t **out);
void rg_transport_region_deregister(rg_transport_region_t *r);

// What a writer needs to know about a peer's region.
typedef struct {
  uint64_t region_id;  // names the region in notices
  uint64_t addr;       // the base offsets are added to (VA under FI_MR_VIRT_ADDR, else 0)
  uint64_t key;        // remote access key
  uint64_t len;        // bytes
  uint32_t kind;       // rg_transport_kind_t of the endpoint that registered it
} rg_transport_region_desc_t;

void rg_transport_region_desc(const rg_transport_region_t *r, rg_transport_region_desc_t *out);
// Fixed little-endian encoding, RG_TRANSPORT_DESC_BYTES bytes.
void rg_transport_desc_encode(const rg_transport_region_desc_t *d,
                              uint8_t out[RG_TRANSPORT_DESC_BYTES]);
RG_MUST_USE rg_status_t rg_transport_desc_decode(const uint8_t *buf, size_t len,
                                                 rg_transport_region_desc_t *out);

// `count` runs of `len` bytes: run i reads src + i*src_stride and lands at
// dst_offset + i*dst_stride in the target region. One KV block of one layer is
// one run in K and one in V; blocks of 16 tokens moving into blocks of 64 are
// per-head runs, one strided segment per (layer, K|V, source block).
typedef struct {
  const void *src;      // first run; inside the source region
  uint64_t dst_offset;  // first run; bytes from the start of the target region
  uint64_t len;         // bytes per run, > 0
  uint32_t count;       // runs; 0 counts as 1
  int64_t src_stride;   // bytes between runs in the source
  uint64_t dst_stride;  // bytes between runs in the target
} rg_transport_segment_t;

// Writes the segments from `src` (registered with WRITE_SOURCE) into the
// peer's region `dst`, then sends the completion notice tagged `notice_tag`
// carrying `payload` (copied; at most RG_TRANSPORT_MAX_PAYLOAD bytes). Runs
// that are adjacent on both sides are merged; the rest go several per
// fi_writemsg, up to the provider's iov limits. Done when the notice is sent.
RG_MUST_USE rg_status_t rg_transport_write(rg_transport_t *t, rg_transport_peer_t peer,
                                           const rg_transport_region_t *src,
                                           const rg_transport_region_desc_t *dst,
                                           const rg_transport_segment_t *segs, size_t n_segs,
                                           uint64_t notice_tag, const void *payload,
                                           size_t payload_len, const char *stage,
                                           rg_transport_req_t **out);
// As rg_transport_write, but the segments' sources are anywhere in this
// process's memory (registered or not): the transport copies their runs, in
// order and end to end, into `staging` (registered WRITE_SOURCE, at least
// as long as the write) and writes from there. Each chunk is copied just
// before it is hashed and sent, so the gather overlaps the transfer instead
// of preceding it, and runs that land next to each other in the target go
// as one piece however scattered their sources (KV pages between block
// sizes: per-head runs of 16 positions into 64-token blocks). Its runs
// number at most 4 Mi, the places they land in (runs adjacent in the target
// merged) at most RG_TRANSPORT_MAX_SEGMENTS. `staging` and the sources
// belong to the transport until the write is done.
RG_MUST_USE rg_status_t rg_transport_write_gather(rg_transport_t *t, rg_transport_peer_t peer,
                                                  const rg_transport_region_t *staging,
                                                  const rg_transport_region_desc_t *dst,
                                                  const rg_transport_segment_t *segs, size_t n_segs,
                                                  uint64_t notice_tag, const void *payload,
                                                  size_t payload_len, const char *stage,
                                                  rg_transport_req_t **out);
// Receives the notice tagged `tag` from `peer` and, before reporting success,
// checks it names a region of this endpoint registered WRITE_TARGET, that
// every segment lies inside it, and that the destination bytes hash to the
// sender's checksum (RG_DATA_CORRUPT otherwise: the pages must not be used).
// The payload goes to `payload` (RG_TRUNCATED past `cap`).
RG_MUST_USE rg_status_t rg_transport_recv_notice(rg_transport_t *t, rg_transport_peer_t peer,
                                                 uint64_t tag, void *payload, size_t cap,
                                                 const char *stage, rg_transport_req_t **out);

// Test hook: flips one bit of the next rg_transport_write's data on its way
// (the checksum stays that of the true source), so a receiver can be shown to
// catch it.
void rg_transport_corrupt_next_write(rg_transport_t *t);

// ---------------------------------------------------------------------------
// Completing requests.

// Makes progress once without sleeping; *out_done tells whether r is done.
// Returns r's failure once done, OK otherwise.
RG_MUST_USE rg_status_t rg_transport_test(rg_transport_req_t *r, bool *out_done);
// Waits until r is done or timeout_s passes (RG_TRANSPORT_TIMEOUT_DEFAULT:
// the endpoint's); returns r's result. On expiry r is cancelled and done with
// RG_DEADLINE_EXCEEDED. Waiting again on a done request returns its result.
RG_MUST_USE rg_status_t rg_transport_wait(rg_transport_req_t *r, double timeout_s);
// Waits until every request is done; returns the first failure.
RG_MUST_USE rg_status_t rg_transport_wait_all(rg_transport_req_t *const *reqs, size_t n,
                                              double timeout_s);
// Waits until one of the requests (all of one endpoint) is done and returns
// its result with its index; done ones are reported in index order, so the
// caller frees or replaces the one returned. On expiry every pending one
// fails and the first is reported.
RG_MUST_USE rg_status_t rg_transport_wait_any(rg_transport_req_t *const *reqs, size_t n,
                                              double timeout_s, size_t *out_index);
bool rg_transport_req_done(const rg_transport_req_t *r);
// Bytes received (recv: the message; recv_notice: the payload); bytes sent for
// a send; bytes written for a write. Meaningful once done.
size_t rg_transport_req_bytes(const rg_transport_req_t *r);
// Cancels r if pending, then frees it. NULL is fine.
void rg_transport_req_free(rg_transport_req_t *r);

// ---------------------------------------------------------------------------
// Event-loop integration. A libuv loop polls rg_transport_wait_fd() (uv_poll)
// and calls rg_transport_progress() when it is readable; before the loop
// sleeps it calls rg_transport_trywait(), and if that returns false it calls
// progress again instead. Endpoints without a wait fd (`shm` accepts only
// FI_WAIT_NONE) return RG_UNIMPLEMENTED: poll them from a timer, backing off.

RG_MUST_USE rg_status_t rg_transport_progress(rg_transport_t *t);
RG_MUST_USE rg_status_t rg_transport_wait_fd(rg_transport_t *t, int *out_fd);
bool rg_transport_trywait(rg_transport_t *t);

#endif  // RG_RUNTIME_TRANSPORT_H
