// The DONE, KV-plan and XFER messages and receive-buffer bounds (see
// cluster_impl.h). Decoders check every count against the bytes left, so a
// hostile or cut message is refused, never read past.
#include <stdlib.h>
#include <string.h>

#include "runtime/cluster/cluster_impl.h"

static rg_status_t put(uint8_t **buf, size_t *cap, size_t *len, const void *p, size_t n) {
  if (*len + n > *cap) {
    size_t want = *len + n, c = *cap ? *cap : 512;
    while (c < want) c *= 2;
    uint8_t *nb = realloc(*buf, c);
    if (!nb) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory encoding a message");
    *buf = nb;
    *cap = c;
  }
  if (n) memcpy(*buf + *len, p, n);
  *len += n;
  return NULL;
}

#define PUT(v) RG_RETURN_IF_ERROR(put(buf, cap, len, &(v), sizeof(v)))

rg_status_t rg__done_encode(const rg__done_t *d, uint8_t **buf, size_t *cap, size_t *len) {
  RG_RETURN_IF_ERROR(put(buf, cap, len, "RGDN", 4));
  PUT(d->step);
  PUT(d->status);
  uint32_t tl = (uint32_t)strnlen(d->text, sizeof d->text);
  PUT(tl);
  RG_RETURN_IF_ERROR(put(buf, cap, len, d->text, tl));
  PUT(d->bad_hop);
  PUT(d->n_stages);
  for (uint32_t i = 0; i < d->n_stages; i++) {
    const rg_stage_counters_t *c = &d->stages[i];
    double f[5] = {c->flops, c->weight_bytes, c->kv_bytes, c->act_bytes, c->seconds};
    int64_t k[3] = {c->steps, c->tokens, c->cold_calls};
    RG_RETURN_IF_ERROR(put(buf, cap, len, f, sizeof f));
    RG_RETURN_IF_ERROR(put(buf, cap, len, k, sizeof k));
  }
  PUT(d->n_links);
  for (uint32_t i = 0; i < d->n_links; i++) {
    PUT(d->links[i].peer);
    PUT(d->links[i].bytes);
    PUT(d->links[i].seconds);
    PUT(d->links[i].messages);
  }
  PUT(d->n_events);
  for (uint32_t i = 0; i < d->n_events; i++) {
    const rg__event_t *e = &d->events[i];
    PUT(e->t0);
    PUT(e->t1);
    PUT(e->kind);
    PUT(e->mb);
    PUT(e->hop);
    PUT(e->layer);
    PUT(e->bytes);
  }
  PUT(d->n_bad_keys);
  for (uint32_t i = 0; i < d->n_bad_keys && i < 64; i++) PUT(d->bad_keys[i]);
  return NULL;
}

typedef struct {
  const uint8_t *p;
  size_t len, off;
} rd_t;

static int get(rd_t *r, void *dst, size_t n) {
  if (n > r->len - r->off) return 0;
  memcpy(dst, r->p + r->off, n);
  r->off += n;
  return 1;
}

#define GET(v) \
  if (!get(&r, &(v), sizeof(v))) goto short_msg

rg_status_t rg__done_decode(const uint8_t *buf, size_t len, rg__done_t *d) {
  memset(d, 0, sizeof *d);
  rd_t r = {buf, len, 0};
  char magic[4] = {0};
  uint32_t tl = 0;
  if (!get(&r, magic, 4) || memcmp(magic, "RGDN", 4))
    return rg_status_make(RG_INVALID_ARGUMENT, "done message: bad magic");
  GET(d->step);
  GET(d->status);
  GET(tl);
  if (tl >= sizeof d->text || !get(&r, d->text, tl)) goto short_msg;
  d->text[tl] = 0;
  GET(d->bad_hop);
  GET(d->n_stages);
  if (d->n_stages > RG_CLUSTER_MAX_STAGES) goto short_msg;
  for (uint32_t i = 0; i < d->n_stages; i++) {
    double f[5];
    int64_t k[3];
    GET(f);
    GET(k);
    d->stages[i] = (rg_stage_counters_t){f[0], f[1], f[2], f[3], f[4], k[0], k[1], k[2]};
  }
  GET(d->n_links);
  if (d->n_links > 2 * RG_CLUSTER_MAX_WORKERS + 1) goto short_msg;
  for (uint32_t i = 0; i < d->n_links; i++) {
    GET(d->links[i].peer);
    GET(d->links[i].bytes);
    GET(d->links[i].seconds);
    GET(d->links[i].messages);
  }
  GET(d->n_events);
  // The count is bounded by what is left.
  if ((size_t)d->n_events > (len - r.off) / RG__EVENT_WIRE_BYTES) goto short_msg;
  if (d->n_events) {
    d->events = malloc(d->n_events * sizeof *d->events);
    if (!d->events) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory reading trace events");
  }
  for (uint32_t i = 0; i < d->n_events; i++) {
    rg__event_t *e = &d->events[i];
    GET(e->t0);
    GET(e->t1);
    GET(e->kind);
    GET(e->mb);
    GET(e->hop);
    GET(e->layer);
    GET(e->bytes);
  }
  GET(d->n_bad_keys);
  if (d->n_bad_keys > 64) goto short_msg;
  for (uint32_t i = 0; i < d->n_bad_keys; i++) GET(d->bad_keys[i]);
  if (r.off != len) goto short_msg;
  return NULL;
short_msg:
  free(d->events);
  d->events = NULL;
  return rg_status_make(RG_INVALID_ARGUMENT, "done message: malformed or cut at byte %zu of %zu",
                        r.off, len);
}

// ----- KV plans -------------------------------------------------------------------

static rg_status_t grow(void **p, uint32_t *cap, uint32_t want, size_t elt) {
  if (want <= *cap) return NULL;
  uint32_t c = *cap ? *cap : 16;
  while (c < want) c *= 2;
  void *n = realloc(*p, (size_t)c * elt);
  if (!n) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory for a KV plan");
  *p = n;
  *cap = c;
  return NULL;
}

rg_status_t rg__kvplan_encode(const rg__kvplan_t *p, uint8_t **buf, size_t *cap, size_t *len) {
  PUT(p->n_stash);
  for (uint32_t i = 0; i < p->n_stash; i++) {
    PUT(p->stash[i].dev);
    PUT(p->stash[i].outbox);
  }
  PUT(p->n_expect);
  for (uint32_t i = 0; i < p->n_expect; i++) {
    PUT(p->expect[i].to);
    PUT(p->expect[i].from);
    PUT(p->expect[i].xfer);
    PUT(p->expect[i].key);
  }
  PUT(p->n_push);
  for (uint32_t i = 0; i < p->n_push; i++) {
    PUT(p->push[i].worker);
    PUT(p->push[i].slot);
    PUT(p->push[i].dev);
    PUT(p->push[i].dst_offset);
    PUT(p->push[i].xfer);
  }
  if (p->n_push) RG_RETURN_IF_ERROR(put(buf, cap, len, p->tier_desc, sizeof p->tier_desc));
  return NULL;
}

rg_status_t rg__kvplan_decode(const uint8_t *buf, size_t len, rg__kvplan_t *p, size_t *used) {
  rd_t r = {buf, len, 0};
  p->n_stash = p->n_expect = p->n_push = 0;
  uint32_t n;
  GET(n);
  if (n > RG__KVPLAN_MAX || n > (len - r.off) / 8) goto short_msg;
  RG_RETURN_IF_ERROR(grow((void **)&p->stash, &p->cap_stash, n, sizeof *p->stash));
  for (uint32_t i = 0; i < n; i++) {
    GET(p->stash[i].dev);
    GET(p->stash[i].outbox);
  }
  p->n_stash = n;
  GET(n);
  if (n > RG__KVPLAN_MAX || n > (len - r.off) / 24) goto short_msg;
  RG_RETURN_IF_ERROR(grow((void **)&p->expect, &p->cap_expect, n, sizeof *p->expect));
  for (uint32_t i = 0; i < n; i++) {
    GET(p->expect[i].to);
    GET(p->expect[i].from);
    GET(p->expect[i].xfer);
    GET(p->expect[i].key);
  }
  p->n_expect = n;
  GET(n);
  if (n > RG__KVPLAN_MAX || n > (len - r.off) / 28) goto short_msg;
  RG_RETURN_IF_ERROR(grow((void **)&p->push, &p->cap_push, n, sizeof *p->push));
  for (uint32_t i = 0; i < n; i++) {
    GET(p->push[i].worker);
    GET(p->push[i].slot);
    GET(p->push[i].dev);
    GET(p->push[i].dst_offset);
    GET(p->push[i].xfer);
  }
  p->n_push = n;
  if (n && !get(&r, p->tier_desc, sizeof p->tier_desc)) goto short_msg;
  *used = r.off;
  return NULL;
short_msg:
  p->n_stash = p->n_expect = p->n_push = 0;
  return rg_status_make(RG_INVALID_ARGUMENT,
                        "KV plan of a step: malformed or cut at byte %zu of %zu", r.off, len);
}

void rg__kvplan_free(rg__kvplan_t *p) {
  free(p->stash);
  free(p->expect);
  free(p->push);
  memset(p, 0, sizeof *p);
}

// ----- XFER --------------------------------------------------------------------------

rg_status_t rg__xfer_encode(const rg__xfer_t *x, uint8_t **buf, size_t *cap, size_t *len) {
  *len = 0;
  RG_RETURN_IF_ERROR(put(buf, cap, len, "RGXF", 4));
  PUT(x->xfer);
  PUT(x->key);
  PUT(x->src_kind);
  PUT(x->src_base);
  PUT(x->src_per);
  PUT(x->src_block_bytes);
  PUT(x->src_layer_begin);
  PUT(x->to);
  RG_RETURN_IF_ERROR(put(buf, cap, len, x->desc, sizeof x->desc));
  PUT(x->dst_layer_begin);
  PUT(x->dst_n_blocks);
  PUT(x->dst_block_size);
  PUT(x->layer_begin);
  PUT(x->layer_end);
  PUT(x->pos_begin);
  PUT(x->pos_end);
  PUT(x->src_block_size);
  PUT(x->n_src);
  RG_RETURN_IF_ERROR(put(buf, cap, len, x->src, (size_t)x->n_src * sizeof(int32_t)));
  PUT(x->n_dst);
  RG_RETURN_IF_ERROR(put(buf, cap, len, x->dst, (size_t)x->n_dst * sizeof(int32_t)));
  return NULL;
}

rg_status_t rg__xfer_decode(const uint8_t *buf, size_t len, rg__xfer_t *x) {
  memset(x, 0, sizeof *x);
  rd_t r = {buf, len, 0};
  char magic[4] = {0};
  if (!get(&r, magic, 4) || memcmp(magic, "RGXF", 4))
    return rg_status_make(RG_INVALID_ARGUMENT, "transfer order: bad magic");
  GET(x->xfer);
  GET(x->key);
  GET(x->src_kind);
  GET(x->src_base);
  GET(x->src_per);
  GET(x->src_block_bytes);
  GET(x->src_layer_begin);
  GET(x->to);
  if (!get(&r, x->desc, sizeof x->desc)) goto short_msg;
  if (x->src_kind > 1 || (x->src_kind == 1 && (!x->src_per || !x->src_block_bytes))) {
    rg__xfer_free(x);
    return rg_status_make(RG_INVALID_ARGUMENT, "transfer order: source kind %u", x->src_kind);
  }
  GET(x->dst_layer_begin);
  GET(x->dst_n_blocks);
  GET(x->dst_block_size);
  GET(x->layer_begin);
  GET(x->layer_end);
  GET(x->pos_begin);
  GET(x->pos_end);
  GET(x->src_block_size);
  GET(x->n_src);
  if (x->n_src > RG__XFER_MAX_BLOCKS || x->n_src > (len - r.off) / 4) goto short_msg;
  x->src = malloc((size_t)x->n_src * sizeof(int32_t) + 1);
  if (!x->src) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory reading a transfer order");
  if (!get(&r, x->src, (size_t)x->n_src * sizeof(int32_t))) goto short_msg;
  GET(x->n_dst);
  if (x->n_dst > RG__XFER_MAX_BLOCKS || x->n_dst > (len - r.off) / 4) goto short_msg;
  x->dst = malloc((size_t)x->n_dst * sizeof(int32_t) + 1);
  if (!x->dst) {
    rg__xfer_free(x);
    return rg_status_make(RG_OUT_OF_MEMORY, "out of memory reading a transfer order");
  }
  if (!get(&r, x->dst, (size_t)x->n_dst * sizeof(int32_t)) || r.off != len) goto short_msg;
  // The numbers must describe a transfer at all; the sender checks them
  // against its own pool and outbox before touching memory.
  // Sizes bounded first (a block of at most 2^20 tokens, positions below
  // 2^40), so the products below cannot overflow.
  if (x->src_block_size < 1 || x->dst_block_size < 1 || x->src_block_size > (1 << 20) ||
      x->dst_block_size > (1 << 20) || x->pos_end > ((int64_t)1 << 40) ||
      x->layer_end > (1 << 20) || x->dst_n_blocks > ((int64_t)1 << 40) || x->pos_begin < 0 ||
      x->pos_end <= x->pos_begin || x->layer_end <= x->layer_begin || x->layer_begin < 0 ||
      x->dst_layer_begin < 0 || x->dst_layer_begin > x->layer_begin || x->dst_n_blocks < 1 ||
      (int64_t)x->n_src * x->src_block_size < x->pos_end ||
      (int64_t)(x->pos_begin / x->dst_block_size + x->n_dst) * x->dst_block_size < x->pos_end) {
    rg__xfer_free(x);
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "transfer order %llu: positions [%lld, %lld) of layers [%lld, %lld) do "
                          "not fit its %u source and %u destination blocks",
                          (unsigned long long)x->xfer, (long long)x->pos_begin,
                          (long long)x->pos_end, (long long)x->layer_begin, (long long)x->layer_end,
                          x->n_src, x->n_dst);
  }
  for (uint32_t i = 0; i < x->n_dst; i++)
    if (x->dst[i] < 0 || x->dst[i] >= x->dst_n_blocks) {
      int32_t b = x->dst[i];
      rg__xfer_free(x);
      return rg_status_make(RG_INVALID_ARGUMENT,
                            "transfer order: destination block %d outside the pool's %lld", (int)b,
                            (long long)x->dst_n_blocks);
    }
  return NULL;
short_msg:
  rg__xfer_free(x);
  return rg_status_make(RG_INVALID_ARGUMENT, "transfer order: malformed or cut at byte %zu of %zu",
                        r.off, len);
}

rg_status_t rg__expect_encode(const rg__expect_order_t *e, uint8_t **buf, size_t *cap,
                              size_t *len) {
  *len = 0;
  RG_RETURN_IF_ERROR(put(buf, cap, len, "RGXE", 4));
  PUT(e->n);
  for (uint32_t i = 0; i < e->n; i++) {
    PUT(e->from[i]);
    PUT(e->xfer[i]);
    PUT(e->offset[i]);
    PUT(e->bytes[i]);
  }
  return NULL;
}

rg_status_t rg__expect_decode(const uint8_t *buf, size_t len, rg__expect_order_t *e) {
  rd_t r = {buf, len, 0};
  char magic[4] = {0};
  if (!get(&r, magic, 4) || memcmp(magic, "RGXE", 4))
    return rg_status_make(RG_INVALID_ARGUMENT, "expect order: bad magic");
  GET(e->n);
  if (e->n > RG__EXPECT_MAX || e->n > (len - r.off) / 28) goto short_msg;
  for (uint32_t i = 0; i < e->n; i++) {
    GET(e->from[i]);
    GET(e->xfer[i]);
    GET(e->offset[i]);
    GET(e->bytes[i]);
  }
  if (r.off != len) goto short_msg;
  return NULL;
short_msg:
  e->n = 0;
  return rg_status_make(RG_INVALID_ARGUMENT, "expect order: malformed or cut at byte %zu of %zu",
                        r.off, len);
}

void rg__xfer_free(rg__xfer_t *x) {
  free(x->src);
  free(x->dst);
  x->src = x->dst = NULL;
  x->n_src = x->n_dst = 0;
}

size_t rg__step_message_cap(const rg__step_bounds_t *b, int n_mb) {
  // Per micro-batch: magic, header, 4 int32 arrays of T, S+1 offsets, the
  // table, shapes; the whole step may sit in one micro-batch.
  size_t per = 4 + 32 + (size_t)b->max_tokens * 16 + ((size_t)b->max_seqs + 1) * 4 +
               (size_t)b->max_table * 4 + (size_t)b->max_seqs * 16;
  // Then the KV plan: a stash of up to a table of blocks, an expected
  // transfer per sequence from each worker.
  size_t plan = 12 + RG_TRANSPORT_DESC_BYTES +
                (size_t)b->max_table * (8 + 28 * RG_CLUSTER_MAX_WORKERS) +
                (size_t)(b->max_seqs + b->max_table) * RG_CLUSTER_MAX_WORKERS * 24;
  return RG__STEP_HEAD + (size_t)n_mb * per + plan;
}
