// The DONE message and receive-buffer bounds (see cluster_impl.h).
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
    int64_t k[2] = {c->steps, c->tokens};
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
    int64_t k[2];
    GET(f);
    GET(k);
    d->stages[i] = (rg_stage_counters_t){f[0], f[1], f[2], f[3], f[4], k[0], k[1]};
  }
  GET(d->n_links);
  if (d->n_links > RG_CLUSTER_MAX_WORKERS + 1) goto short_msg;
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
  return NULL;
short_msg:
  free(d->events);
  d->events = NULL;
  return rg_status_make(RG_INVALID_ARGUMENT, "done message: malformed or cut at byte %zu of %zu",
                        r.off, len);
}

size_t rg__step_message_cap(const rg__step_bounds_t *b, int n_mb) {
  // Per micro-batch: magic, header, 4 int32 arrays of T, S+1 offsets, the
  // table, shapes; the whole step may sit in one micro-batch.
  size_t per = 4 + 32 + (size_t)b->max_tokens * 16 + ((size_t)b->max_seqs + 1) * 4 +
               (size_t)b->max_table * 4 + (size_t)b->max_seqs * 16;
  return RG__STEP_HEAD + (size_t)n_mb * per;
}
