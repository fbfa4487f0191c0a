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
enum { RG__K_STEP = 1, RG__K_ACT = 2, RG__K_HID = 3, RG__K_LOGITS = 4, RG__K_DONE = 5 };

static inline uint64_t rg__tag(int kind, uint64_t step, int mb, int hop) {
  return ((uint64_t)kind << 56) | ((step & 0xffffffffu) << 24) | ((uint64_t)(mb & 0xf) << 20) |
         (uint64_t)(hop & 0xfffff);
}

// STEP: "RGSP", u64 step, u32 flags, u32 n_micro_batches, u32 the PeerTable
// epoch its sends need, then each micro-batch's step in rg_step_encode's form.
#define RG__STEP_HEAD 24
#define RG__STEP_CHECK 1u  // after each stage, check the hidden states are finite
#define RG__STEP_TRACE 2u  // record trace events and send them in DONE

// DONE: "RGDN", u64 step, i32 status (0 ok, else an rg_code_t), u32 text
// length + text (the error), u32 first non-finite hop (-1: none; with
// RG__STEP_CHECK), u32 n_stages + per stage {5 f64: flops, weight, kv, act
// bytes, seconds; 2 i64: steps, tokens}, u32 n_links + per link {u32 peer
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

typedef struct {
  uint32_t peer;
  double bytes, seconds;
  int64_t messages;
} rg__link_t;

typedef struct {
  uint64_t step;
  int32_t status;
  char text[512];
  int32_t bad_hop;
  rg_stage_counters_t stages[RG_CLUSTER_MAX_STAGES];
  uint32_t n_stages;
  rg__link_t links[RG_CLUSTER_MAX_WORKERS + 1];
  uint32_t n_links;
  rg__event_t *events;  // owned by whoever filled it
  uint32_t n_events;
} rg__done_t;

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
