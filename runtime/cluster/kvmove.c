// runtime/cluster/kvmove.c — the pieces one XFER order writes: per-head runs
// straight from the source blocks, or, where the two sides' block sizes
// differ, the same runs in the destination's order for the transport to
// gather (rg_transport_write_gather).
//
// A block holds (n_kv_heads, block_size, head_dim) elements (ops/ops.h), so
// a run of positions inside one source and one destination block is one
// piece per head. Where the sizes agree and a run fills its block, the
// heads' pieces are adjacent on both sides and the transport merges them.
// Where they differ, every piece is one head's run of at most the smaller
// block (16 tokens x 256 bytes = 4 KiB for 16 -> 64): 16 MiB of KV took 4096
// pieces, four to an fi_writemsg, and moved at 0.27 of the 1 MiB ping-pong
// bandwidth on shm (0.14 on tcp) where equal sizes moved at 0.66. Gathered,
// each (destination block, layer, K|V) is one piece of up to a whole block.
// The gather was first a copy of the whole transfer before the write began
// (16 MiB: ~1 ms in which nothing moved, and the transfer took 2.2-2.4x the
// provider's own writes of the gathered pieces on tcp, 3.7x on shm); the
// transport now copies each chunk just before it hashes and sends it.
#include <stdlib.h>
#include <string.h>

#include "runtime/cluster/cluster_impl.h"

// Appends a segment, growing *seg.
static rg_status_t push(rg_transport_segment_t **seg, size_t *n, size_t *cap,
                        rg_transport_segment_t s) {
  if (*n == *cap) {
    size_t c = *cap ? 2 * *cap : 64;
    rg_transport_segment_t *ns = realloc(*seg, c * sizeof *ns);
    if (!ns) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory for a KV transfer");
    *seg = ns, *cap = c;
  }
  (*seg)[(*n)++] = s;
  return NULL;
}

// Where position p of layer l's K (kv 0) or V (kv 1) starts for head 0, in
// the source block that holds it.
static const uint8_t *src_at(const rg__kv_geom_t *g, const rg__xfer_t *x, int64_t p, int64_t l,
                             int kv) {
  return g->src + (size_t)x->src[p / g->src_block] * g->src_per +
         ((size_t)(l - g->src_layer_begin) * 2 + (size_t)kv) * g->src_kv_bytes +
         (size_t)(p % g->src_block) * g->head;
}

// Where position p of layer l, K|V, head 0, lands in the receiver's region.
static uint64_t dst_at(const rg__kv_geom_t *g, const rg__xfer_t *x, int64_t p, int64_t l, int kv) {
  const int64_t bd = x->dst_block_size;
  const uint64_t blk = (uint64_t)bd * g->head * (uint64_t)g->heads;
  const int32_t db = x->dst[p / bd - x->pos_begin / bd];
  return ((uint64_t)(l - x->dst_layer_begin) * 2 + (uint64_t)kv) * (uint64_t)x->dst_n_blocks * blk +
         (uint64_t)db * blk + (uint64_t)(p % bd) * g->head;
}

size_t rg__kv_bytes(const rg__kv_geom_t *g, const rg__xfer_t *x) {
  return (size_t)(x->pos_end - x->pos_begin) * g->head * (size_t)g->heads * 2 *
         (size_t)(x->layer_end - x->layer_begin);
}

rg_status_t rg__kv_segments(const rg__kv_geom_t *g, const rg__xfer_t *x, bool gather,
                            rg_transport_segment_t **out, size_t *n_out) {
  *out = NULL, *n_out = 0;
  rg_transport_segment_t *seg = NULL;
  size_t n = 0, cap = 0;
  const int64_t bp = g->src_block, bd = x->dst_block_size, heads = g->heads;
  const size_t head = g->head;
  rg_status_t st = NULL;
  if (!gather) {
    // Straight from the source: one segment per (run, layer, K|V), striding
    // over the heads.
    for (int64_t p = x->pos_begin; p < x->pos_end && !st;) {
      int64_t run = bp - p % bp;
      if (bd - p % bd < run) run = bd - p % bd;
      if (x->pos_end - p < run) run = x->pos_end - p;
      for (int64_t l = x->layer_begin; l < x->layer_end && !st; l++)
        for (int kv = 0; kv < 2 && !st; kv++)
          st = push(&seg, &n, &cap,
                    (rg_transport_segment_t){.src = src_at(g, x, p, l, kv),
                                             .dst_offset = dst_at(g, x, p, l, kv),
                                             .len = (uint64_t)run * head,
                                             .count = (uint32_t)heads,
                                             .src_stride = (int64_t)((size_t)bp * head),
                                             .dst_stride = (uint64_t)bd * head});
      p += run;
    }
  } else {
    // In the destination's order: per destination block, the positions it
    // receives, [q0, q1), then per (layer, K|V) and head the runs of them,
    // one per source block, which land end to end; where the block is whole
    // the heads follow each other too.
    for (int64_t q0 = x->pos_begin; q0 < x->pos_end && !st;) {
      int64_t q1 = (q0 / bd + 1) * bd;
      if (q1 > x->pos_end) q1 = x->pos_end;
      for (int64_t l = x->layer_begin; l < x->layer_end && !st; l++)
        for (int kv = 0; kv < 2 && !st; kv++)
          for (int64_t h = 0; h < heads && !st; h++)
            for (int64_t p = q0; p < q1 && !st;) {
              int64_t run = bp - p % bp;
              if (q1 - p < run) run = q1 - p;
              st =
                  push(&seg, &n, &cap,
                       (rg_transport_segment_t){
                           .src = src_at(g, x, p, l, kv) + (size_t)h * (size_t)bp * head,
                           .dst_offset = dst_at(g, x, p, l, kv) + (uint64_t)h * (uint64_t)bd * head,
                           .len = (uint64_t)run * head,
                           .count = 1});
              p += run;
            }
      q0 = q1;
    }
  }
  if (st) {
    free(seg);
    return st;
  }
  *out = seg, *n_out = n;
  return NULL;
}
