// runtime/transport/transport_impl.h — what the front end (transport.c) and
// the backends (inproc.c, fabric.c) share. Not part of the public interface.
//
// The front end owns requests, peers, regions, argument checks, the wait loop,
// the notice format and every user-facing message, so both backends fail the
// same way with the same words. A backend reports on a request it posted
// with one of:
//
//   rg__op_finish   the result is known and the backend lets go of the request
//                   (first result wins: one the front end already gave, e.g. a
//                   deadline, is kept)
//   rg__op_release  the backend lets go without a result (a cancelled request)
//
// A request the caller freed while the backend held it is freed there. The
// front end gives a result of its own (deadline, peer_fail, destroy) only
// after vt->cancel, so it never races a backend finishing the same request.
//
// The inproc backend finishes requests of one endpoint from the thread that
// drives another, under its global lock. `arrived` is the only field the
// owner reads without that lock: finish writes the result, clears `held`, and
// only then stores `arrived` with release order; the owner loads it with
// acquire order before reading anything else.
#ifndef RG_RUNTIME_TRANSPORT_IMPL_H
#define RG_RUNTIME_TRANSPORT_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/clock.h"
#include "runtime/transport.h"

#define RG__OP_KIND_MAP(X)     \
  X(RG__OP_SEND, "send")       \
  X(RG__OP_RECV, "receive")    \
  X(RG__OP_WRITE, "RMA write") \
  X(RG__OP_NOTICE, "notice receive")

typedef enum {
#define RG_X_(c, n) c,
  RG__OP_KIND_MAP(RG_X_)
#undef RG_X_
      RG__OP_KIND_COUNT
} rg__op_kind_t;

// A write: its segments cut into chunks, and one notice per chunk.
//
// A write is pipelined chunk by chunk (about rg_transport_options_t's
// chunk_bytes each): the writer hashes chunk i+1 while chunk i is on the
// wire, sends chunk i's notice as soon as chunk i's writes have completed,
// and the receiver checks chunk i (hashing it while it is still in cache)
// while chunk i+1 arrives. Each chunk is described by its own entries, which
// are the caller's segments cut at chunk boundaries: whole runs of a
// segment, or for a run longer than a chunk, pieces of it (count 1).
//
// Notice wire format, version 3 (little-endian), one per chunk:
//   header  magic "RGN1" u32, version u16, reserved u16, region id u64, key u64,
//           entries u32, payload bytes u32, total bytes of the write u64,
//           XXH3-64 of this chunk u64, write id u64, chunk index u32,
//           chunk count u32, chunk bytes u64
//   n × entry  dst offset u64, run bytes u64, runs u32, reserved u32, dst stride u64
//   payload (in the last chunk only)
// The XXH3-64 covers the chunk's source bytes in entry order. Every chunk
// repeats the write id, region, key, count and total, so the receiver can
// check that the chunks it gathers belong together; they may come in any
// order (no provider message ordering is relied on).
#define RG__NOTICE_MAGIC 0x314e4752u  // "RGN1"
#define RG__NOTICE_VERSION 3          // 3: a notice per chunk (2: one per write; 1: XXH64)
#define RG__NOTICE_HEADER 72
#define RG__NOTICE_SEGMENT 32
#define RG__NOTICE_MAX \
  (RG__NOTICE_HEADER + RG__NOTICE_SEGMENT * RG_TRANSPORT_MAX_SEGMENTS + RG_TRANSPORT_MAX_PAYLOAD)
// Most chunks one write may have (bounds what a receiver allocates for a
// peer's claim): 4 Mi chunks, e.g. 4 TiB at 1 MiB each.
#define RG__MAX_CHUNKS (1u << 22)
// Default chunk size: a notice every 512 KiB keeps the receiver's checks
// close behind the data at ~1 KiB of notice per chunk; 256 KiB and 1 MiB
// measured alike here (docs/transport.md).
#define RG__DEFAULT_CHUNK_BYTES ((uint64_t)512 << 10)
// A write's first chunk is at most this long, so that its notice reaches
// the receiver soon after the write starts. Until then the receiver does not
// know a write is under way and backs off as any idle endpoint does
// (sleeping up to 1 ms between polls), while shm moves the data only inside
// the receiver's own polls (copying each piece out of its shared buffers,
// or in by CMA): each piece of the first chunk can wait for a wake-up.
#define RG__FIRST_CHUNK_BYTES ((uint64_t)64 << 10)

typedef struct {
  size_t first, n;  // entries [first, first + n)
  uint64_t bytes;   // over those entries
  uint8_t *notice;  // into rg__write_t.notices; checksum filled once hashed
  size_t notice_len;
} rg__chunk_t;

// Cursor over a write's entries in order, a run cut into pieces of at most
// what each call asks for (rg__runs_next's `max`).
struct rg__write_s;
typedef struct {
  const struct rg__write_s *w;
  size_t ent, run;
  uint64_t done_in_run;  // bytes of the current run already yielded
} rg__runs_t;

typedef struct rg__write_s {
  size_t n_segs;                 // the caller's segment count, for messages
  rg_transport_segment_t *ents;  // the entries, in order (count >= 1)
  uint32_t *ent_chunk;           // the chunk of each entry
  size_t n_ents;
  rg__chunk_t *chunks;
  size_t n_chunks;
  uint8_t *notices;  // every chunk's notice, back to back
  uint64_t total;    // bytes over all runs
  uint64_t dst_addr, dst_key, dst_region;
  // Hashing runs slice by slice (rg__write_hash_step), so the fabric
  // backend can overlap it with the provider moving earlier chunks.
  void *hash_state;      // XXH3_state_t
  size_t n_hashed;       // chunks [0, n_hashed) are hashed and their notices sealed
  rg__runs_t hash_cur;   // rg__write_hash_step's place (rg__runs_init'd with the write)
  size_t corrupt_chunk;  // with corrupt: the chunk whose first bytes are flipped
  bool corrupt;          // flip one bit of the data in transit
  // A gathering write (rg_transport_write_gather): its entries read the
  // staging region, end to end in entry order, and these runs of the
  // caller's memory fill it, in the same order, as hashing reaches them.
  // NULL otherwise.
  struct rg__gather_run_s *gruns;
  size_t n_gruns, gather_i;  // the next run to copy from
  uint64_t gather_off;       // bytes of it already copied
} rg__write_t;

typedef struct rg__gather_run_s {
  const uint8_t *src;
  uint64_t len;
} rg__gather_run_t;

// What a notice receive has gathered so far (owner thread only).
typedef struct {
  uint64_t write_id, region, key, total;
  uint32_t n_chunks, n_seen;
  uint64_t bytes;  // covered by the chunks seen
  uint64_t *seen;  // bitmap of chunk indices
  uint32_t pay;    // payload bytes, copied to the caller's buffer
  rg_code_t bad;   // the first failed chunk's code, reported once all are in
  char *bad_msg;
  void *hash;    // XXH3_state_t
  bool counted;  // counted in rg_transport_t.gathering
} rg__gather_t;

struct rg_transport_req_s {
  rg_transport_t *t;  // NULL once the endpoint is destroyed
  rg__op_kind_t kind;
  rg_transport_peer_t peer;
  uint64_t peer_handle;  // the backend's address of the peer
  uint64_t tag;
  char stage[128];
  // SEND: the caller's bytes. RECV: the caller's buffer and capacity. WRITE:
  // the first chunk's notice (owned by w). NOTICE: the transport's buffer (owned), whose
  // payload goes to user_buf/user_cap once checked.
  void *buf;
  size_t len;
  void *user_buf;
  size_t user_cap;
  rg__write_t *w;                           // WRITE
  rg__gather_t *g;                          // NOTICE, once its first chunk came
  const rg_transport_region_t *src_region;  // WRITE
  // Result. Written by the backend before `arrived`, or by the front end.
  size_t got;
  rg_code_t code;
  char *msg;                        // owned; NULL when OK
  atomic_int arrived;               // the backend finished it
  bool settled;                     // the front end saw it finished (owner thread only)
  bool held;                        // the backend still references it
  bool user_owned;                  // the caller has not freed it
  rg_transport_req_t *prev, *next;  // the endpoint's live requests
  // The backend's per-request state follows (vtable op_size bytes).
  _Alignas(max_align_t) unsigned char impl[];
};

struct rg_transport_region_s {
  rg_transport_t *t;
  void *base;
  size_t len;
  unsigned access;
  uint64_t id;           // the endpoint's number for it, in notices
  uint64_t key;          // set by the backend
  uint64_t remote_base;  // set by the backend: what writers add offsets to
  void *impl;            // backend state (fid_mr *)
  rg_transport_region_t *prev, *next;
};

typedef struct {
  char name[128];
  uint64_t handle;  // fi_addr_t, or an inproc endpoint id
  char *failed;     // why, once rg_transport_peer_fail said so
} rg__peer_t;

typedef struct rg__vtable_s rg__vtable_t;

struct rg_transport_s {
  // Every public call that touches the endpoint holds mu, so threads may
  // share it: the provider sees one caller at a time, as FI_THREAD_DOMAIN
  // asks. The wait loop lets go of it while it blocks (rg__ep_unlock
  // around the backend's poll or sleep). `shared` is set once a second
  // thread has called in; a backend then blocks in shorter slices, since
  // another thread may take the completion its sleeper waits for.
  pthread_mutex_t mu;
  pthread_t owner;
  bool has_owner, shared;
  const rg__vtable_t *vt;
  rg_transport_kind_t kind;
  char name[128];
  char describe[512];
  char provider[64];
  double timeout_s;
  bool register_local;
  bool corrupt_next;
  bool closing;          // in rg_transport_destroy: notice receives are not re-posted
  uint64_t chunk_bytes;  // writes are pipelined in chunks of this size
  uint64_t next_write_id;
  // Notice receives holding some of their write's chunks and waiting for
  // the rest: a transfer is in flight, so the backend polls without
  // sleeping (yielding only) until they are done.
  unsigned gathering;
  rg__peer_t *peers;
  size_t n_peers, cap_peers;
  rg_transport_req_t *live;  // requests not yet freed
  rg_transport_region_t *regions;
  uint64_t next_region_id;
  void *impl;  // the backend's endpoint
};

struct rg__vtable_s {
  size_t op_size;                      // bytes of backend state after each request
  void (*destroy)(rg_transport_t *t);  // afterwards the backend holds no request
  rg_status_t (*address)(const rg_transport_t *t, uint8_t *buf, size_t cap, size_t *out_len);
  rg_status_t (*peer_add)(rg_transport_t *t, const uint8_t *addr, size_t len, uint64_t *out);
  rg_status_t (*region_register)(rg_transport_region_t *r);
  void (*region_deregister)(rg_transport_region_t *r);
  // Posts r (held is already set). An error return means nothing was posted.
  rg_status_t (*post)(rg_transport_req_t *r);
  rg_status_t (*progress)(rg_transport_t *t);
  // Blocks until something may have completed, or until `until` (CLOCK_MONOTONIC s).
  // Called with the endpoint's lock held; it releases the lock only around
  // the blocking call itself (rg__ep_unlock / rg__ep_relock).
  void (*sleep)(rg_transport_t *t, double until);
  // Stops r. Returns true when the backend has let go of it (held is clear).
  bool (*cancel)(rg_transport_req_t *r);
  rg_status_t (*wait_fd)(rg_transport_t *t, int *out_fd);
  bool (*trywait)(rg_transport_t *t);
};

extern const rg__vtable_t rg__inproc_vtable;
extern const rg__vtable_t rg__fabric_vtable;

// Backend constructors: fill t->impl, t->describe, t->provider.
rg_status_t rg__inproc_open(rg_transport_t *t, const rg_transport_options_t *opt);
rg_status_t rg__fabric_open(rg_transport_t *t, const rg_transport_options_t *opt);

// Completion, from the backend. fmt (NULL when code is RG_OK) is the reason;
// the message becomes "<operation>: <reason>".
void rg__op_finish(rg_transport_req_t *r, rg_code_t code, size_t got, const char *fmt, ...)
    RG_PRINTF(4, 5);
void rg__op_release(rg_transport_req_t *r);
// rg_transport_providers, for the fabric backend to answer.
rg_status_t rg__fabric_providers(char *buf, size_t cap);
// "attention layer 3 → ffn: receive of 4096 bytes (tag 0x7) from worker 2"
void rg__op_describe(const rg_transport_req_t *r, char *buf, size_t cap);
// The truncation failure, in the one wording both backends use.
void rg__op_truncated(rg_transport_req_t *r, uint64_t message_bytes);

// Around a backend's blocking call inside vt->sleep: nothing of the endpoint
// may be touched between the two.
void rg__ep_unlock(rg_transport_t *t);
void rg__ep_relock(rg_transport_t *t);

static inline void *rg__op_impl(rg_transport_req_t *r) {
  return r->impl;
}

// Writes: hash up to `budget` more bytes of the source, in order, sealing
// each chunk's notice as its last byte is hashed; returns false once every
// chunk is hashed (nothing was left to do). The fabric backend hashes a
// slice between polls, so a poll is never more than one slice away.
bool rg__write_hash_step(rg__write_t *w, uint64_t budget);
// Cuts a write's segments into entries and chunks (transport.c): chunks of
// about chunk_bytes, the first at most RG__FIRST_CHUNK_BYTES. ents,
// ent_chunk and chunks (n_chunks + 1 of them) may all be NULL to count
// only.
void rg__cut_chunks(const rg_transport_segment_t *segs, size_t n_segs, uint64_t chunk_bytes,
                    rg_transport_segment_t *ents, uint32_t *ent_chunk, rg__chunk_t *chunks,
                    size_t *out_ents, size_t *out_chunks);
// Or the backend feeds every run of the next chunk itself, in order, then
// seals it (inproc does, while the run is in cache from its copy).
void rg__write_hash_bytes(rg__write_t *w, const void *p, size_t n);
// A gathering write: fills the next `len` bytes of its staging region, at
// `at`, from the caller's runs (in order; hashing and inproc call it as they
// reach each staged run). A plain write: nothing.
void rg__write_gather(rg__write_t *w, const uint8_t *at, uint64_t len);
void rg__write_seal_chunk(rg__write_t *w);
void rg__runs_init(rg__runs_t *c, const rg__write_t *w);
// Next piece, within one entry: src, dst offset, bytes; at most `max` bytes
// (0: the whole rest of the run). Returns false at the end.
bool rg__runs_next(rg__runs_t *c, uint64_t max, const uint8_t **src, uint64_t *dst, uint64_t *len);
// The chunk the cursor's next piece belongs to (n_chunks at the end).
static inline size_t rg__runs_chunk(const rg__runs_t *c) {
  return c->ent < c->w->n_ents ? c->w->ent_chunk[c->ent] : c->w->n_chunks;
}

// Little-endian field access for the wire formats.
static inline void rg__put64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline void rg__put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline void rg__put16(uint8_t *p, uint16_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
}
static inline uint64_t rg__get64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}
static inline uint32_t rg__get32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint16_t rg__get16(const uint8_t *p) {
  return (uint16_t)(p[0] | p[1] << 8);
}

// Front-end address header: "RGA1", kind byte, then the backend's bytes.
#define RG__ADDR_MAGIC "RGA1"
#define RG__ADDR_HEADER 5

#endif  // RG_RUNTIME_TRANSPORT_IMPL_H
