// runtime/step.h — one forward step's tokens, laid out for stage instances,
// checked, and carried between processes.
//
// A step is a list of entries, one per sequence (its tokens, first position,
// block table, whether it wants logits: the fields of sched's
// rg_sched_entry_t). rg_step_build checks every entry against the model and
// the KV pool (ids in the vocabulary, blocks in the pool, positions within the
// table and the context limit) before anything runs, and lays the step out as
// the rg_step_t stage instances take (runtime/stage.h). The coordinator of a
// multi-process run encodes the same rg_step_t into a message for every
// worker; rg_step_decode checks a received one just as strictly, since a peer
// is not trusted.
//
// Ownership: a step buffer owns the arrays an rg_step_t built or decoded into
// it points at; they stay valid until the next build or decode into the same
// buffer, or rg_step_buf_free.
#ifndef RG_RUNTIME_STEP_H
#define RG_RUNTIME_STEP_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "runtime/stage.h"

// One sequence of a step: n tokens at positions [pos, pos + n), its KV in
// `blocks` (block b holds positions [b*block_size, (b+1)*block_size)).
typedef struct {
  int64_t pos;
  int32_t n;
  const int32_t *tokens;
  const int32_t *blocks;
  int32_t n_blocks;
  int want_logits;
} rg_step_entry_t;

typedef struct {
  int64_t vocab, max_context, block_size, n_blocks;
} rg_step_limits_t;

typedef struct {
  int32_t *tokens, *seq, *pos, *table_off, *table, *lrows;
  rg_seq_step_t *shape;
  size_t cap_tokens, cap_seqs, cap_table;
} rg_step_buf_t;

void rg_step_buf_free(rg_step_buf_t *b);

// Checks entries[0..n) and lays them out in b; errors name the entry and
// what was wrong ("entry 1: block 9 (table slot 1) is outside the pool of 4").
RG_MUST_USE rg_status_t rg_step_build(rg_step_buf_t *b, const rg_step_limits_t *lim,
                                      const rg_step_entry_t *entries, size_t n, rg_step_t *out);

// Appends st's wire form to *buf (grown with realloc; *len bytes used).
// Little-endian, length-prefixed arrays.
RG_MUST_USE rg_status_t rg_step_encode(const rg_step_t *st, uint8_t **buf, size_t *cap,
                                       size_t *len);
// Reads one step from buf[0..len), checking every count and every value
// against lim (the same checks as rg_step_build, plus the layout's own:
// sequence indices, table offsets, logit rows); *used is the bytes it took.
RG_MUST_USE rg_status_t rg_step_decode(const uint8_t *buf, size_t len, const rg_step_limits_t *lim,
                                       rg_step_buf_t *b, rg_step_t *out, size_t *used);

#endif  // RG_RUNTIME_STEP_H
