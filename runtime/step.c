// Steps: building, checking, and the wire form (see runtime/step.h).
#include "runtime/step.h"

#include <stdlib.h>
#include <string.h>

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "the step wire form is written in host order, little-endian");

void rg_step_buf_free(rg_step_buf_t *b) {
  free(b->tokens), free(b->seq), free(b->pos), free(b->table_off), free(b->table), free(b->lrows),
      free(b->shape);
  memset(b, 0, sizeof *b);
}

static rg_status_t grow(void **p, size_t *cap, size_t want, size_t elem) {
  if (want <= *cap && *p) return NULL;
  size_t n = want > *cap * 2 ? want : *cap * 2;
  if (!n) n = 1;
  void *q = realloc(*p, n * elem);
  if (!q) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory for a step of %zu", want);
  *p = q;
  *cap = n;
  return NULL;
}

// Room for T tokens, S sequences and NT table entries.
static rg_status_t reserve(rg_step_buf_t *b, size_t T, size_t S, size_t NT) {
  size_t c = b->cap_tokens;
  RG_RETURN_IF_ERROR(grow((void **)&b->tokens, &c, T + 1, sizeof(int32_t)));
  c = b->cap_tokens;
  RG_RETURN_IF_ERROR(grow((void **)&b->seq, &c, T + 1, sizeof(int32_t)));
  c = b->cap_tokens;
  RG_RETURN_IF_ERROR(grow((void **)&b->pos, &c, T + 1, sizeof(int32_t)));
  c = b->cap_tokens;
  RG_RETURN_IF_ERROR(grow((void **)&b->lrows, &c, T + 1, sizeof(int32_t)));
  b->cap_tokens = c;
  c = b->cap_seqs;
  RG_RETURN_IF_ERROR(grow((void **)&b->table_off, &c, S + 1, sizeof(int32_t)));
  c = b->cap_seqs;
  RG_RETURN_IF_ERROR(grow((void **)&b->shape, &c, S + 1, sizeof(rg_seq_step_t)));
  b->cap_seqs = c;
  return grow((void **)&b->table, &b->cap_table, NT + 1, sizeof(int32_t));
}

rg_status_t rg_step_build(rg_step_buf_t *b, const rg_step_limits_t *lim, const rg_step_entry_t *e,
                          size_t n, rg_step_t *st) {
  int64_t T = 0, n_table = 0, n_logits = 0;
  for (size_t i = 0; i < n; i++) {
    const rg_step_entry_t *x = &e[i];
    if (x->n < 1 || !x->tokens)
      return rg_status_make(RG_INVALID_ARGUMENT, "entry %zu has no tokens", i);
    if (x->pos < 0 || x->pos + x->n > lim->max_context)
      return rg_status_make(
          RG_INVALID_ARGUMENT,
          "entry %zu: positions %lld..%lld are past the context limit of %lld tokens", i,
          (long long)x->pos, (long long)(x->pos + x->n - 1), (long long)lim->max_context);
    if (x->n_blocks < 0 || (int64_t)x->n_blocks * lim->block_size < x->pos + x->n ||
        (x->n_blocks && !x->blocks))
      return rg_status_make(
          RG_INVALID_ARGUMENT,
          "entry %zu: a table of %d blocks of %lld tokens cannot hold positions up to %lld", i,
          (int)x->n_blocks, (long long)lim->block_size, (long long)(x->pos + x->n - 1));
    for (int32_t k = 0; k < x->n_blocks; k++)
      if (x->blocks[k] < 0 || x->blocks[k] >= lim->n_blocks)
        return rg_status_make(RG_INVALID_ARGUMENT,
                              "entry %zu: block %d (table slot %d) is outside the pool of %lld", i,
                              (int)x->blocks[k], (int)k, (long long)lim->n_blocks);
    for (int32_t k = 0; k < x->n; k++)
      if (x->tokens[k] < 0 || x->tokens[k] >= lim->vocab)
        return rg_status_make(
            RG_INVALID_ARGUMENT,
            "entry %zu: token id %d (its token %d) is outside the vocabulary (0..%lld)", i,
            (int)x->tokens[k], (int)k, (long long)lim->vocab - 1);
    T += x->n;
    n_table += x->n_blocks;
    n_logits += x->want_logits != 0;
  }
  if (T > INT32_MAX || n_table > INT32_MAX)
    return rg_status_make(RG_INVALID_ARGUMENT, "a step of %lld tokens is too large", (long long)T);
  RG_RETURN_IF_ERROR(reserve(b, (size_t)T, n, (size_t)n_table));
  int64_t t = 0, tb = 0, r = 0;
  b->table_off[0] = 0;
  for (size_t i = 0; i < n; i++) {
    const rg_step_entry_t *x = &e[i];
    for (int32_t k = 0; k < x->n; k++, t++) {
      b->tokens[t] = x->tokens[k];
      b->pos[t] = (int32_t)(x->pos + k);
      b->seq[t] = (int32_t)i;
    }
    if (x->want_logits) b->lrows[r++] = (int32_t)(t - 1);
    if (x->n_blocks) memcpy(b->table + tb, x->blocks, (size_t)x->n_blocks * sizeof(int32_t));
    tb += x->n_blocks;
    b->table_off[i + 1] = (int32_t)tb;
    b->shape[i] = (rg_seq_step_t){x->n, x->pos};
  }
  *st = (rg_step_t){T,      (int64_t)n,   n_table,  n_logits, b->tokens, b->seq,
                    b->pos, b->table_off, b->table, b->lrows, b->shape};
  return NULL;
}

// ----- The wire form ---------------------------------------------------------------
//
//   "RGS1", then i64 n_tokens, n_seqs, n_table, n_logits, then
//   i32 tokens[T], seq[T], pos[T], table_off[S+1], table[NT], lrows[NL],
//   i64 (n_new, context)[S].

static rg_status_t put(uint8_t **buf, size_t *cap, size_t *len, const void *p, size_t n) {
  if (*len + n > *cap) {
    size_t want = *len + n, c = *cap ? *cap : 256;
    while (c < want) c *= 2;
    uint8_t *nb = realloc(*buf, c);
    if (!nb) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory encoding a step");
    *buf = nb;
    *cap = c;
  }
  if (n) memcpy(*buf + *len, p, n);
  *len += n;
  return NULL;
}

rg_status_t rg_step_encode(const rg_step_t *st, uint8_t **buf, size_t *cap, size_t *len) {
  int64_t h[4] = {st->n_tokens, st->n_seqs, st->n_table, st->n_logits};
  size_t T = (size_t)st->n_tokens, S = (size_t)st->n_seqs;
  RG_RETURN_IF_ERROR(put(buf, cap, len, "RGS1", 4));
  RG_RETURN_IF_ERROR(put(buf, cap, len, h, sizeof h));
  RG_RETURN_IF_ERROR(put(buf, cap, len, st->tokens, T * 4));
  RG_RETURN_IF_ERROR(put(buf, cap, len, st->seq, T * 4));
  RG_RETURN_IF_ERROR(put(buf, cap, len, st->pos, T * 4));
  RG_RETURN_IF_ERROR(put(buf, cap, len, st->table_off, (S + 1) * 4));
  RG_RETURN_IF_ERROR(put(buf, cap, len, st->table, (size_t)st->n_table * 4));
  RG_RETURN_IF_ERROR(put(buf, cap, len, st->logit_rows, (size_t)st->n_logits * 4));
  for (size_t i = 0; i < S; i++) {
    int64_t sh[2] = {st->shape[i].n_new, st->shape[i].context};
    RG_RETURN_IF_ERROR(put(buf, cap, len, sh, sizeof sh));
  }
  return NULL;
}

static rg_status_t take(const uint8_t *buf, size_t len, size_t *off, void *dst, size_t n,
                        const char *what) {
  if (n > len - *off)
    return rg_status_make(RG_INVALID_ARGUMENT, "step message: %s needs %zu bytes, %zu are left",
                          what, n, len - *off);
  memcpy(dst, buf + *off, n);
  *off += n;
  return NULL;
}

rg_status_t rg_step_decode(const uint8_t *buf, size_t len, const rg_step_limits_t *lim,
                           rg_step_buf_t *b, rg_step_t *out, size_t *used) {
  size_t off = 0;
  char magic[4] = {0};
  int64_t h[4] = {0};
  RG_RETURN_IF_ERROR(take(buf, len, &off, magic, 4, "the magic"));
  if (memcmp(magic, "RGS1", 4))
    return rg_status_make(RG_INVALID_ARGUMENT, "step message: bad magic");
  RG_RETURN_IF_ERROR(take(buf, len, &off, h, sizeof h, "the header"));
  int64_t T = h[0], S = h[1], NT = h[2], NL = h[3];
  // Counts bounded by the bytes that must follow, before any allocation.
  if (T < 0 || S < 0 || NT < 0 || NL < 0 || NL > T || (uint64_t)T > len || (uint64_t)S > len ||
      (uint64_t)NT > len)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "step message: counts %lld tokens, %lld sequences, %lld blocks, %lld "
                          "logit rows do not fit %zu bytes",
                          (long long)T, (long long)S, (long long)NT, (long long)NL, len);
  RG_RETURN_IF_ERROR(reserve(b, (size_t)T, (size_t)S, (size_t)NT));
  RG_RETURN_IF_ERROR(take(buf, len, &off, b->tokens, (size_t)T * 4, "tokens"));
  RG_RETURN_IF_ERROR(take(buf, len, &off, b->seq, (size_t)T * 4, "sequence indices"));
  RG_RETURN_IF_ERROR(take(buf, len, &off, b->pos, (size_t)T * 4, "positions"));
  RG_RETURN_IF_ERROR(take(buf, len, &off, b->table_off, (size_t)(S + 1) * 4, "table offsets"));
  RG_RETURN_IF_ERROR(take(buf, len, &off, b->table, (size_t)NT * 4, "block tables"));
  RG_RETURN_IF_ERROR(take(buf, len, &off, b->lrows, (size_t)NL * 4, "logit rows"));
  for (int64_t i = 0; i < S; i++) {
    int64_t sh[2];
    RG_RETURN_IF_ERROR(take(buf, len, &off, sh, sizeof sh, "sequence shapes"));
    b->shape[i] = (rg_seq_step_t){sh[0], sh[1]};
  }
  // The same checks a local step gets, on what arrived.
  if (b->table_off[0] != 0 || b->table_off[S] != NT)
    return rg_status_make(RG_INVALID_ARGUMENT, "step message: the block tables do not span 0..%lld",
                          (long long)NT);
  for (int64_t s = 0; s < S; s++) {
    int32_t a = b->table_off[s], z = b->table_off[s + 1];
    // Shapes bounded by the context first, so the sum below cannot overflow.
    if (z < a || b->shape[s].n_new < 1 || b->shape[s].context < 0 ||
        b->shape[s].n_new > lim->max_context || b->shape[s].context > lim->max_context ||
        (int64_t)(z - a) * lim->block_size < b->shape[s].context + b->shape[s].n_new)
      return rg_status_make(RG_INVALID_ARGUMENT,
                            "step message: sequence %lld's table does not hold its positions",
                            (long long)s);
  }
  for (int64_t k = 0; k < NT; k++)
    if (b->table[k] < 0 || b->table[k] >= lim->n_blocks)
      return rg_status_make(RG_INVALID_ARGUMENT,
                            "step message: block %d is outside the pool of %lld", b->table[k],
                            (long long)lim->n_blocks);
  for (int64_t t = 0; t < T; t++) {
    if (b->tokens[t] < 0 || b->tokens[t] >= lim->vocab || b->seq[t] < 0 || b->seq[t] >= S ||
        b->pos[t] < 0 || b->pos[t] >= lim->max_context)
      return rg_status_make(RG_INVALID_ARGUMENT,
                            "step message: token %lld (id %d, sequence %d, position %d) is out "
                            "of range",
                            (long long)t, b->tokens[t], b->seq[t], b->pos[t]);
    const rg_seq_step_t *sh = &b->shape[b->seq[t]];
    if (b->pos[t] < sh->context || b->pos[t] >= sh->context + sh->n_new)
      return rg_status_make(RG_INVALID_ARGUMENT,
                            "step message: token %lld's position %d is not among its "
                            "sequence's new positions",
                            (long long)t, b->pos[t]);
  }
  for (int64_t r = 0; r < NL; r++)
    if (b->lrows[r] < 0 || b->lrows[r] >= T)
      return rg_status_make(RG_INVALID_ARGUMENT,
                            "step message: logit row %d is outside the %lld tokens", b->lrows[r],
                            (long long)T);
  *out = (rg_step_t){T,        S,        NT,      NL, b->tokens, b->seq, b->pos, b->table_off,
                     b->table, b->lrows, b->shape};
  *used = off;
  return NULL;
}
