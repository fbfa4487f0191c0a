// runtime/cluster/cluster_impl.h — what the coordinator and the workers share
// on the data plane: tags, the STEP and DONE messages, and the options
// carried in Assign. Private to runtime/cluster/.
#ifndef RG_RUNTIME_CLUSTER_IMPL_H
#define RG_RUNTIME_CLUSTER_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "runtime/cluster.h"
#include "runtime/transport.h"

// A tag: kind in the top byte, then the step (32 bits), the micro-batch (4
// bits) and the hop (20 bits). Every message of a step is told apart by it.
enum {
  RG__K_STEP = 1,
  RG__K_ACT = 2,
  RG__K_HID = 3,
  RG__K_LOGITS = 4,
  RG__K_DONE = 5,
  RG__K_XFER =
      6,  // coordinator -> a worker holding KV to send: one XFER (the "step" is its sequence)
  RG__K_KVN = 7  // the notice of an RMA write of KV pages (the "step" is the transfer's id)
};

static inline uint64_t rg__tag(int kind, uint64_t step, int mb, int hop) {
  return ((uint64_t)kind << 56) | ((step & 0xffffffffu) << 24) | ((uint64_t)(mb & 0xf) << 20) |
         (uint64_t)(hop & 0xfffff);
}

// STEP: "RGSP", u64 step, u32 flags, u32 n_micro_batches, u32 the PeerTable
// epoch its sends need, f64 the step's deadline in seconds and f64 its
// predicted time (0: none; rg_cluster_step_deadline), then each micro-batch's step in
// rg_step_encode's form, then the KV moves around it (rg__kvplan_t): u32 n_stash + n_stash x {i32
// device block, i32 outbox block}; u32 n_expect + n_expect x {u32 receiving
// worker, u32 sending worker, u64 transfer id, u64 request key}; u32 n_push +
// n_push x {u32 worker, u32 slot, i32 device block, u64 offset, u64 transfer
// id}, then (when n_push > 0) the tier region's descriptor.
#define RG__STEP_HEAD 40

// Prefill-decode: after its forward, a prefill worker copies the blocks of
// the prompts it finished into its outbox ("stash"), so the scheduler may
// hand those blocks out again; before its forward, a decode worker waits for
// the RMA writes of imported prompts into its KV pool ("expect"), each
// checked against its checksum.
typedef struct {
  int32_t dev, outbox;
} rg__stash_t;
typedef struct {
  uint32_t to, from;
  uint64_t xfer, key;
} rg__expect_t;
// A capacity-tier offload: `worker` writes device block dev of its attention
// instance `slot` (its slot-th attention stage) to the tier region at
// dst_offset, notice tagged (KVN, xfer); done before its forward.
typedef struct {
  uint32_t worker, slot;
  int32_t dev;
  uint64_t dst_offset, xfer;
} rg__push_t;
#define RG__KVPLAN_MAX 65536
typedef struct {
  rg__stash_t *stash;
  uint32_t n_stash, cap_stash;
  rg__expect_t *expect;
  uint32_t n_expect, cap_expect;
  rg__push_t *push;
  uint32_t n_push, cap_push;
  uint8_t tier_desc[RG_TRANSPORT_DESC_BYTES];  // where pushes go (sent when n_push > 0)
} rg__kvplan_t;
RG_MUST_USE rg_status_t rg__kvplan_encode(const rg__kvplan_t *p, uint8_t **buf, size_t *cap,
                                          size_t *len);
// Reads the plan at buf (grows p's arrays); *used gets its length.
RG_MUST_USE rg_status_t rg__kvplan_decode(const uint8_t *buf, size_t len, rg__kvplan_t *p,
                                          size_t *used);
void rg__kvplan_free(rg__kvplan_t *p);

// XFER: "RGXF", then the fields below, then u32 n_src + n_src x i32 outbox
// blocks, u32 n_dst + n_dst x i32 destination blocks. The sender writes
// positions [pos_begin, pos_end) of layers [layer_begin, layer_end) from its
// outbox (its own blocks of src_block_size; src[i] holds positions from i *
// src_block_size) into the receiving worker's KV pool (dst[j] holds positions
// from (pos_begin / dst_block_size + j) * dst_block_size), splitting or merging
// pages where the block sizes differ, then sends the notice tagged (KVN, xfer).
// src_kind 0: the source is the sender's outbox (the attention instance
// holding layer_begin); 1: its capacity-tier region, blocks of src_per bytes
// from src_base, each (layers from src_layer_begin, K|V, src_block_bytes).
typedef struct {
  uint64_t xfer, key;
  uint32_t src_kind;
  uint64_t src_base, src_per, src_block_bytes;
  int64_t src_layer_begin;
  uint32_t to;  // layout index of the receiving worker
  uint8_t desc[RG_TRANSPORT_DESC_BYTES];
  // The receiving instance's pool: its first layer, blocks and block size.
  int64_t dst_layer_begin, dst_n_blocks, dst_block_size;
  int64_t layer_begin, layer_end, pos_begin, pos_end, src_block_size;
  int32_t *src, *dst;  // owned by whoever filled it
  uint32_t n_src, n_dst;
} rg__xfer_t;
#define RG__XFER_MAX_BLOCKS (1u << 20)

// The source side of an XFER (runtime/cluster/kvmove.c): blocks of
// src_block positions, src_per bytes apart from `src`, each holding (layers
// from src_layer_begin) x K|V of src_kv_bytes, as (heads, src_block, head)
// with `head` bytes a head's row.
typedef struct {
  const uint8_t *src;
  size_t src_per, src_kv_bytes, head;
  int64_t src_block, src_layer_begin, heads;
} rg__kv_geom_t;
// The bytes x moves: positions x layers x K|V x the heads' rows.
size_t rg__kv_bytes(const rg__kv_geom_t *g, const rg__xfer_t *x);
// x's segments (*out, malloc'd), each head's run of a (source block,
// destination block) pair read where it lies: without `gather`, one strided
// segment per (run of positions, layer, K|V) over the heads; with it, one
// segment per head's run, in the destination's order (per destination
// block, layer and K|V, head by head), for rg_transport_write_gather, which
// lays them end to end in a staging region and writes each whole
// destination block as one piece.
RG_MUST_USE rg_status_t rg__kv_segments(const rg__kv_geom_t *g, const rg__xfer_t *x, bool gather,
                                        rg_transport_segment_t **out, size_t *n);
RG_MUST_USE rg_status_t rg__xfer_encode(const rg__xfer_t *x, uint8_t **buf, size_t *cap,
                                        size_t *len);
// EXPECT (to a capacity tier): "RGXE", u32 n, n x {u32 sending worker, u64
// transfer id, u64 offset, u64 bytes}: notices of offloads to wait for
// before the next order, and where each lands.
#define RG__EXPECT_MAX 4096
typedef struct {
  uint32_t from[RG__EXPECT_MAX];
  uint64_t xfer[RG__EXPECT_MAX], offset[RG__EXPECT_MAX], bytes[RG__EXPECT_MAX];
  uint32_t n;
} rg__expect_order_t;
// The key of a reload's expected notice: not a request's (reloads fill
// cached blocks), so a reload that fails its checksum fails the step.
#define RG__KEY_RELOAD RG_CLUSTER_KEY_RELOAD
RG_MUST_USE rg_status_t rg__expect_encode(const rg__expect_order_t *e, uint8_t **buf, size_t *cap,
                                          size_t *len);
RG_MUST_USE rg_status_t rg__expect_decode(const uint8_t *buf, size_t len, rg__expect_order_t *e);
RG_MUST_USE rg_status_t rg__xfer_decode(const uint8_t *buf, size_t len, rg__xfer_t *x);
void rg__xfer_free(rg__xfer_t *x);
#define RG__STEP_CHECK 1u  // after each stage, check the hidden states are finite
#define RG__STEP_TRACE 2u  // record trace events and send them in DONE

// DONE: "RGDN", u64 step, i32 status (0 ok, else an rg_code_t), u32 text
// length + text (the error), u32 first non-finite hop (-1: none; with
// RG__STEP_CHECK), u32 n_stages + per stage {5 f64: flops, weight, kv, act
// bytes, seconds; 3 i64: steps, tokens, cold calls}, u32 n_links + per link {u32 peer
// worker id, f64 bytes, f64 seconds, i64 messages}, u32 n_events + per event
// {f64 t0, f64 t1, u8 kind, u8 mb, u16 hop, i32 layer, f64 bytes}.
typedef struct {
  double t0, t1;
  uint8_t kind;  // 0 stage, 1 send, 2 receive wait
  uint8_t mb;
  uint16_t hop;
  int32_t layer;
  double bytes;
} rg__event_t;
#define RG__EVENT_WIRE_BYTES 32  // 8 + 8 + 1 + 1 + 2 + 4 + 8

// A link's counters as a worker reports them: what it sent to `peer` (0 the
// coordinator, i + 1 worker i), or with RG__LINK_INBOUND what it received
// from it (KV pages, whose whole transfer only the receiver sees end to end).
typedef struct {
  uint32_t peer;
  double bytes, seconds;
  int64_t messages;
} rg__link_t;
#define RG__LINK_INBOUND 0x80000000u

typedef struct {
  uint64_t step;
  int32_t status;
  char text[512];
  int32_t bad_hop;
  rg_stage_counters_t stages[RG_CLUSTER_MAX_STAGES];
  uint32_t n_stages;
  rg__link_t links[2 * RG_CLUSTER_MAX_WORKERS + 1];
  uint32_t n_links;
  rg__event_t *events;  // owned by whoever filled it
  uint32_t n_events;
  // Imports whose pages failed their checksum: their requests' outputs this
  // step must not be used.
  uint64_t bad_keys[64];
  uint32_t n_bad_keys;
} rg__done_t;

// The control plane's TransferFault (runtime/control/control.proto).
typedef Ridge__Control__TransferFault rg__transfer_fault_t;

RG_MUST_USE rg_status_t rg__done_encode(const rg__done_t *d, uint8_t **buf, size_t *cap,
                                        size_t *len);
// Checks counts against the bytes; events are malloc'd into d->events.
RG_MUST_USE rg_status_t rg__done_decode(const uint8_t *buf, size_t len, rg__done_t *d);

// Bounds the coordinator gives workers in Assign, so they size receive
// buffers: the most tokens, sequences and blocks a step holds.
typedef struct {
  int64_t max_tokens, max_seqs, max_table;
} rg__step_bounds_t;

// Bytes the largest STEP message of n_mb micro-batches can take.
size_t rg__step_message_cap(const rg__step_bounds_t *b, int n_mb);

#endif  // RG_RUNTIME_CLUSTER_IMPL_H
