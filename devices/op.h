// devices/op.h — the HAL's op list, and the descriptor of one op on buffers.
//
// Everything a transformer stage runs is one of these ops, submitted to a
// queue (rg_queue_submit in devices/devices.h) with its operands as ranges
// of device buffers. A backend implements the ops it can (its kernels live
// in ops/<backend>/), says which with rg_device_supports_op(), and refuses
// the rest with RG_UNIMPLEMENTED naming the op and the type; the
// conformance suite (tests/conformance/) runs every op on every device
// present against the plain-loop references in ops/ref/.
//
// Operands. Activations are f32, row-major, contiguous. Weights, embedding
// tables and KV pools are in their stored rg_dtype_t. Token ids, positions,
// sequence indices, block tables and routing indices are int32. Shapes are
// given in the op's fields, outermost first; rg_op_operands() derives each
// operand's byte size from them, so the queue checks every range against its
// buffer before a backend sees it (an operand past its buffer's end is
// RG_INVALID_ARGUMENT naming the op, the operand and both sizes).
//
// Bad metadata. Ids, positions, block tables and routing indices can come
// from untrusted input. Backends whose memory the host sees (the CPU) check
// them and fail before writing any output, as ops/ does; backends whose
// memory the host does not see never read or write outside an operand
// whatever the metadata holds (their kernels clamp), and the runtime checks
// metadata on the host before uploading it.
//
// Ownership: an op descriptor borrows its buffers for the duration of the
// submit (asynchronous backends retain what they need until the work ends);
// host pointers in it (sampler configs, uniforms) are read during the call.
#ifndef RG_DEVICES_OP_H
#define RG_DEVICES_OP_H

#include <stddef.h>
#include <stdint.h>

#include "base/dtype.h"
#include "base/status.h"
#include "ops/ops.h"

typedef struct rg_buffer_s rg_buffer_t;

// X-macro list: enum, name, what it computes.
#define RG_OP_MAP(X)                                                                    \
  X(RG_OP_MATMUL, "matmul", "y = x W^T (+ bias), W stored as f32, bf16, f16 or q8_0")   \
  X(RG_OP_RMSNORM, "rmsnorm", "y = x / rms(x) * weight per row")                        \
  X(RG_OP_ROPE, "rope", "rotary embedding in place, rotate-half layout")                \
  X(RG_OP_SOFTMAX, "softmax", "softmax of each row in place")                           \
  X(RG_OP_KV_WRITE, "kv_write", "write K and V rows into their paged slots")            \
  X(RG_OP_ATTENTION, "attention", "causal paged attention (GQA/MQA, window, sinks)")    \
  X(RG_OP_SWIGLU, "swiglu", "out = silu(gate) * up")                                    \
  X(RG_OP_MOE_ROUTE, "moe_route", "top-k experts and weights per token")                \
  X(RG_OP_MOE_GROUP, "moe_group", "group (token, slot) pairs by expert")                \
  X(RG_OP_MOE_GATHER, "moe_gather", "dispatch: gather an expert's rows")                \
  X(RG_OP_MOE_SCATTER_ADD, "moe_scatter_add", "combine: add weighted expert rows back") \
  X(RG_OP_EMBED, "embed", "embedding rows for token ids")                               \
  X(RG_OP_ADD, "add", "out = a + b elementwise")                                        \
  X(RG_OP_CONVERT, "convert", "convert between element types")                          \
  X(RG_OP_SAMPLE, "sample", "one token per row of logits: greedy or temperature/top-k/top-p")

// clang-format off
typedef enum {
#define RG_X_(e, n, d) e,
  RG_OP_MAP(RG_X_)
#undef RG_X_
  RG_OP_COUNT
} rg_op_kind_t;
// clang-format on

const char *rg_op_name(rg_op_kind_t k);         // "matmul"; "?" outside the enum
const char *rg_op_description(rg_op_kind_t k);  // one line
// 0 and *out set when s names an op.
int rg_op_from_name(const char *s, rg_op_kind_t *out);

// A range of a buffer: the operand starts `offset` bytes in. An optional
// operand has buf == NULL.
typedef struct {
  rg_buffer_t *buf;
  size_t offset;
} rg_ref_t;

// ----- The ops ---------------------------------------------------------------

// y (m, n) = x (m, k) W^T + bias; W (n, k) in wtype, a row starting every
// rg_dtype_row_bytes(wtype, k) bytes; bias (n) optional. wlayout other
// than 0 (rows) is a layout the device asked for (rg_device_weight_layout;
// the values are ops/matmul.h's rg_wlayout_t), and W then takes
// rg_matmul_layout_bytes.
typedef struct {
  rg_ref_t x, w, bias, y;
  rg_dtype_t wtype;
  int64_t m, n, k;
  int wlayout;
} rg_op_matmul_t;

// y (rows, dim) = x / sqrt(mean(x^2) + eps) * weight (dim); y may be x.
typedef struct {
  rg_ref_t x, weight, y;
  int64_t rows, dim;
  float eps;
} rg_op_rmsnorm_t;

// x (n_tokens, n_heads, head_dim) rotated in place; token t sits at pos[t];
// inv_freq (head_dim / 2) f32 is the rotary table (rg_rope_init's).
typedef struct {
  rg_ref_t x, pos, inv_freq;
  int64_t n_tokens, n_heads, head_dim;
} rg_op_rope_t;

// x (rows, n) replaced by its row softmax.
typedef struct {
  rg_ref_t x;
  int64_t rows, n;
} rg_op_softmax_t;

// One layer's paged KV pool: K and V each (n_blocks, n_kv_heads,
// block_size, head_dim) of dtype (f32, bf16, f16), as ops/ops.h lays it out.
typedef struct {
  rg_ref_t k, v;
  rg_dtype_t dtype;
  int64_t n_blocks, block_size, n_kv_heads, head_dim;
} rg_kv_ref_t;

// The tokens of one step on the paged cache: token t belongs to sequence
// seq[t] at position pos[t]; sequence s's block table is
// table[table_off[s] .. table_off[s+1]) (its capacity, in blocks).
typedef struct {
  int64_t n_tokens, n_seqs, n_table;
  rg_ref_t seq, pos;   // int32 (n_tokens)
  rg_ref_t table_off;  // int32 (n_seqs + 1), table_off[0] = 0, non-decreasing
  rg_ref_t table;      // int32 (n_table) block ids of the pool
} rg_attn_meta_t;

// k, v (n_tokens, n_kv_heads, head_dim) f32 into their slots.
typedef struct {
  rg_kv_ref_t kv;
  rg_attn_meta_t meta;
  rg_ref_t k, v;
} rg_op_kv_write_t;

// o (n_tokens, n_heads, head_dim) = attention of q (same shape) over each
// token's causal context (rg_op_attention in ops/ops.h); sinks (n_heads)
// optional.
typedef struct {
  rg_kv_ref_t kv;
  rg_attn_meta_t meta;
  rg_ref_t q, o, sinks;
  int64_t n_heads;
  float scale;     // 0: 1/sqrt(head_dim)
  int64_t window;  // 0: full causal
} rg_op_attention_t;

// out (n) = silu(gate) * up; out may be gate or up.
typedef struct {
  rg_ref_t gate, up, out;
  int64_t n;
} rg_op_swiglu_t;

// logits (T, E) -> idx (T, k) int32, w (T, k) f32.
typedef struct {
  rg_ref_t logits, idx, w;
  int64_t T, E, k;
  rg_moe_mode_t mode;
} rg_op_moe_route_t;

// idx (T, k) -> offsets (E + 1), rows (T * k) int32 (rg_op_moe_group).
typedef struct {
  rg_ref_t idx, offsets, rows;
  int64_t T, k, E;
} rg_op_moe_group_t;

// out (n, dim)[i] = x (T, dim)[rows[i] / k]; rows (n) int32.
typedef struct {
  rg_ref_t x, rows, out;
  int64_t T, n, k, dim;
} rg_op_moe_gather_t;

// out (T, dim)[rows[i] / k] += w (T * k)[rows[i]] * y (n, dim)[i], in order.
typedef struct {
  rg_ref_t y, rows, w, out;
  int64_t T, n, k, dim;
} rg_op_moe_scatter_add_t;

// out (n, dim) f32 = table (vocab, dim) of type, rows ids (n).
typedef struct {
  rg_ref_t table, ids, out;
  rg_dtype_t type;
  int64_t vocab, n, dim;
} rg_op_embed_t;

// out (n) = a + b, f32; out may be a or b.
typedef struct {
  rg_ref_t a, b, out;
  int64_t n;
} rg_op_add_t;

// dst (n) of `to` = src (n) of `from`; n whole blocks of both.
typedef struct {
  rg_ref_t src, dst;
  rg_dtype_t from, to;
  int64_t n;
} rg_op_convert_t;

// out (rows) int32: a token for each row of logits (rows, vocab), drawn with
// cfg[r] and the uniform u[r] in [0, 1) (host arrays of `rows` entries);
// greedy rows (temperature 0) take the argmax and ignore u. The same u on
// every device draws the same token, so a seed reproduces anywhere.
typedef struct {
  rg_ref_t logits, out;
  int64_t rows, vocab;
  const rg_sampler_config_t *cfg;
  const double *u;
} rg_op_sample_t;

typedef struct {
  rg_op_kind_t kind;
  const char *label;  // optional: "layer 3 attention.q" in messages
  union {
    rg_op_matmul_t matmul;
    rg_op_rmsnorm_t rmsnorm;
    rg_op_rope_t rope;
    rg_op_softmax_t softmax;
    rg_op_kv_write_t kv_write;
    rg_op_attention_t attention;
    rg_op_swiglu_t swiglu;
    rg_op_moe_route_t moe_route;
    rg_op_moe_group_t moe_group;
    rg_op_moe_gather_t moe_gather;
    rg_op_moe_scatter_add_t moe_scatter_add;
    rg_op_embed_t embed;
    rg_op_add_t add;
    rg_op_convert_t convert;
    rg_op_sample_t sample;
  };
} rg_op_t;

// One operand of an op, as the queue checks it.
typedef struct {
  const char *name;  // "x", "w", "kv.k", "meta.table"
  const rg_ref_t *ref;
  uint64_t bytes;  // the range the op reads or writes
  int optional;    // may have buf == NULL
  int written;     // the op writes it
} rg_op_operand_t;

#define RG_OP_MAX_OPERANDS 12

// The operands of op with their sizes from its shape, into out (room for
// RG_OP_MAX_OPERANDS); fails, naming the op and the field, on a shape the op
// cannot have (negative or zero sizes, q8_0 rows not whole blocks, k above
// E, n_heads not a multiple of n_kv_heads, a KV dtype other than f32, bf16
// or f16, sizes that overflow).
RG_MUST_USE rg_status_t rg_op_operands(const rg_op_t *op, rg_op_operand_t *out, size_t *out_n);

// The element type that decides whether a backend has a kernel for op (the
// weight type of a matmul, the table's of embed, the KV pool's, the target
// of convert); RG_F32 for the others.
rg_dtype_t rg_op_key_type(const rg_op_t *op);

#endif  // RG_DEVICES_OP_H
