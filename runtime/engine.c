// The single-process pipeline (see runtime/engine.h).
#include "runtime/engine.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/units.h"
#include "devices/devices.h"
#include "ops/convert.h"

#define MAX_DEVICES 2  // the main device and, optionally, the feed-forward one

typedef struct {
  rg_device_t *dev;
  rg_queue_t *q;   // for copies of hidden states onto this device
  rg_buffer_t *x;  // (T, d) hidden states, grown to the largest step
  size_t x_bytes;
} dev_slot_t;

struct rg_engine_s {
  rg_model_t *m;
  const rg_arch_t *a;
  dev_slot_t devs[MAX_DEVICES];
  int n_devs;
  rg_device_t *host;  // a CPU device for the swap tier (one of devs, or its own)
  rg_weight_cache_t *cache;
  rg_stage_t **stages;  // pipeline order: embed, then per range attention + ffn/moe, then lm_head
  size_t n_stages;
  rg_stage_t *embed, *lm_head;
  rg_stage_t **attn_of, **ffn_of;  // (n_layers): the instance running each layer
  rg_buffer_t *logits;             // (n_logits, vocab) on lm_head's device
  size_t logits_bytes;
  rg_buffer_t **tiers;  // swap tier per attention stage (host memory), or NULL
  // KV geometry.
  rg_dtype_t kv_type;
  int block_size, max_seqs;
  int64_t n_blocks, max_context, swap_blocks, cap_blocks;
  rg_buffer_t **caps;  // per stage: the capacity tier's share (attention stages only)
  double kv_bytes, weight_bytes;
  rg_step_buf_t sb;  // host scratch for one step's metadata
  rg_engine_counters_t c;
  char describe[256];
};

// ----- Creation --------------------------------------------------------------------

static rg_status_t open_device(rg_engine_t *e, const char *name, const rg_engine_options_t *o,
                               int *slot) {
  char driver[32];
  int index;
  RG_RETURN_IF_ERROR(rg_device_parse_name(name, driver, sizeof driver, &index));
  for (int i = 0; i < e->n_devs; i++) {
    const rg_device_info_t *di = rg_device_info(e->devs[i].dev);
    if (!strcmp(di->driver, driver) && di->index == index) return *slot = i, NULL;
  }
  if (e->n_devs == MAX_DEVICES)
    return rg_status_make(RG_INVALID_ARGUMENT, "at most %d devices", MAX_DEVICES);
  rg_device_options_t dopt = {
      .threads = o->threads, .isa = o->isa, .batch_invariant = o->batch_invariant};
  dev_slot_t *d = &e->devs[e->n_devs];
  RG_RETURN_IF_ERROR(rg_device_open(driver, index, &dopt, &d->dev));
  e->n_devs++;
  RG_RETURN_IF_ERROR(rg_queue_create(d->dev, &d->q));
  *slot = e->n_devs - 1;
  return NULL;
}

// MemAvailable from /proc/meminfo, in bytes; 0 when unknown.
static uint64_t mem_available(void) {
  FILE *f = fopen("/proc/meminfo", "r");
  char line[256];
  unsigned long long kb = 0;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
  if (f) fclose(f);
  return (uint64_t)kb * 1024;
}

// A KV pool larger than the memory the device can give would thrash the
// machine or be killed: say what fits instead.
static rg_status_t check_kv_fits(rg_engine_t *e, rg_device_t *dev, double bytes, double weights) {
  const rg_device_info_t *di = rg_device_info(dev);
  double have = (double)di->memory;
  const char *what = "of memory";
  if (rg_device_cpu_pool(dev)) {
    uint64_t avail = mem_available();
    if (avail) have = (double)avail, what = "available (MemAvailable)";
  }
  if (have <= 0 || bytes + weights <= 0.9 * have) return NULL;
  double per_token = bytes / ((double)e->n_blocks * e->block_size);
  double fits = per_token > 0 ? (0.9 * have - weights) / per_token : 0;
  char need[32], got[32];
  return rg_status_make(
      RG_OUT_OF_MEMORY,
      "the KV cache for %lld tokens (%d sequence%s x %lld context, %s) needs %s, but %s:%d has %s "
      "%s "
      "besides %.3g GB of weights; about %.0f tokens fit: lower --max-seqs, --max-context or "
      "--kv-tokens",
      (long long)(e->n_blocks * e->block_size), e->max_seqs, e->max_seqs == 1 ? "" : "s",
      (long long)e->max_context, rg_dtype_name(e->kv_type),
      rg_fmt_bytes_iec(bytes, need, sizeof need), di->driver, di->index,
      rg_fmt_bytes_iec(have, got, sizeof got), what, weights / 1e9, fits > 0 ? fits : 0.0);
}

static rg_status_t add_stage(rg_engine_t *e, const rg_stage_spec_t *spec, rg_device_t *dev,
                             const rg_stage_options_t *so, rg_stage_t **out) {
  rg_stage_t **n = realloc(e->stages, (e->n_stages + 1) * sizeof(*n));
  if (!n) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
  e->stages = n;
  RG_RETURN_IF_ERROR(rg_stage_create(e->m, spec, dev, so, &e->stages[e->n_stages]));
  rg_stage_t *s = e->stages[e->n_stages++];
  e->weight_bytes += rg_stage_weight_bytes(s);
  e->kv_bytes += rg_stage_kv_bytes(s);
  if (out) *out = s;
  return NULL;
}

static rg_status_t create(rg_engine_t *e, const char *path, const rg_engine_options_t *o) {
  RG_RETURN_IF_ERROR(rg_model_open(path, &e->m));
  const rg_arch_t *a = e->a = rg_model_arch(e->m);
  int main_slot, ffn_slot;
  rg_register_available_devices();
  RG_RETURN_IF_ERROR(open_device(e, o->device ? o->device : "cpu:0", o, &main_slot));
  RG_RETURN_IF_ERROR(open_device(
      e, o->ffn_device ? o->ffn_device : (o->device ? o->device : "cpu:0"), o, &ffn_slot));
  rg_device_t *main_dev = e->devs[main_slot].dev, *ffn_dev = e->devs[ffn_slot].dev;

  int copy = rg_engine_copies_weights(o->load, e->m);

  e->max_seqs = o->max_seqs > 0 ? o->max_seqs : 16;
  e->max_context = o->max_context > 0 ? o->max_context : 4096;
  if (a->max_context > 0 && e->max_context > a->max_context) e->max_context = a->max_context;
  e->block_size = o->block_size > 0 ? o->block_size : 16;
  int64_t kv_tokens = o->kv_tokens > 0 ? o->kv_tokens : e->max_context * e->max_seqs;
  e->n_blocks = (kv_tokens + e->block_size - 1) / e->block_size;
  e->kv_type = o->kv_dtype_set ? o->kv_dtype : RG_BF16;
  if (e->kv_type != RG_F32 && e->kv_type != RG_BF16 && e->kv_type != RG_F16)
    return rg_status_make(RG_INVALID_ARGUMENT, "KV dtype %s is not supported; use f32, bf16 or f16",
                          rg_dtype_name(e->kv_type));
  e->swap_blocks = o->swap_tokens > 0 ? (o->swap_tokens + e->block_size - 1) / e->block_size : 0;
  e->cap_blocks = o->tier_tokens > 0 ? (o->tier_tokens + e->block_size - 1) / e->block_size : 0;
  double kv = (double)a->n_layers * 2.0 * (double)e->n_blocks * e->block_size *
              (double)(a->n_kv_heads * a->head_dim) * rg_dtype_bytes(e->kv_type);
  RG_RETURN_IF_ERROR(
      check_kv_fits(e, main_dev, kv, main_dev == ffn_dev ? rg_model_file_bytes(e->m) : 0));

  RG_RETURN_IF_ERROR(rg_weight_cache_create(&e->cache));
  rg_stage_options_t so = {e->kv_type, e->n_blocks, e->block_size, copy, e->cache};
  e->attn_of = calloc((size_t)a->n_layers, sizeof(rg_stage_t *));
  e->ffn_of = calloc((size_t)a->n_layers, sizeof(rg_stage_t *));
  if (!e->attn_of || !e->ffn_of) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory");

  rg_stage_spec_t sp = {.kind = RG_STAGE_EMBED};
  RG_RETURN_IF_ERROR(add_stage(e, &sp, main_dev, &so, &e->embed));
  int64_t step = o->layers_per_stage > 0 ? o->layers_per_stage : a->n_layers;
  for (int64_t l0 = 0; l0 < a->n_layers; l0 += step) {
    int64_t l1 = l0 + step < a->n_layers ? l0 + step : a->n_layers;
    rg_stage_t *s;
    sp = (rg_stage_spec_t){.kind = RG_STAGE_ATTENTION, .layer_begin = l0, .layer_end = l1};
    RG_RETURN_IF_ERROR(add_stage(e, &sp, main_dev, &so, &s));
    for (int64_t l = l0; l < l1; l++) e->attn_of[l] = s;
    // Feed-forward: maximal runs of dense and of MoE layers in the range.
    for (int64_t r0 = l0; r0 < l1;) {
      int moe = a->n_experts > 0 && rg_arch_layer_is_moe(a, r0);
      int64_t r1 = r0 + 1;
      while (r1 < l1 && (a->n_experts > 0 && rg_arch_layer_is_moe(a, r1)) == moe) r1++;
      sp = (rg_stage_spec_t){
          .kind = moe ? RG_STAGE_MOE : RG_STAGE_FFN, .layer_begin = r0, .layer_end = r1};
      RG_RETURN_IF_ERROR(add_stage(e, &sp, ffn_dev, &so, &s));
      for (int64_t l = r0; l < r1; l++) e->ffn_of[l] = s;
      r0 = r1;
    }
  }
  sp = (rg_stage_spec_t){.kind = RG_STAGE_LM_HEAD};
  RG_RETURN_IF_ERROR(add_stage(e, &sp, main_dev, &so, &e->lm_head));
  // Every weight is copied out now: the file's pages need not stay mapped.
  if (copy) rg_weights_release_pages(rg_model_weights(e->m));

  if (e->swap_blocks || e->cap_blocks) {
    for (int i = 0; i < e->n_devs && !e->host; i++)
      if (rg_device_cpu_pool(e->devs[i].dev)) {
        e->host = e->devs[i].dev;
        rg_device_retain(e->host);
      }
    if (!e->host) {
      rg_device_options_t ho = {.threads = 1};
      RG_RETURN_IF_ERROR(rg_device_open("cpu", 0, &ho, &e->host));
    }
    // Host tiers are host memory: refuse what would not fit, naming the flag.
    double per_all = 0;
    for (size_t i = 0; i < e->n_stages; i++)
      if (rg_stage_spec(e->stages[i])->kind == RG_STAGE_ATTENTION)
        per_all += (double)rg_stage_kv_block_bytes(e->stages[i]);
    double want = per_all * (double)(e->swap_blocks + e->cap_blocks);
    uint64_t avail = mem_available();
    if (avail && want > 0.9 * (double)avail) {
      char need[32], got[32];
      return rg_status_make(RG_OUT_OF_MEMORY,
                            "the host tiers (%lld swap and %lld capacity blocks) need %s, but %s "
                            "is available: lower --swap-tokens or --tier-tokens",
                            (long long)e->swap_blocks, (long long)e->cap_blocks,
                            rg_fmt_bytes_iec(want, need, sizeof need),
                            rg_fmt_bytes_iec((double)avail, got, sizeof got));
    }
    if (!(e->tiers = calloc(e->n_stages, sizeof(rg_buffer_t *))) ||
        !(e->caps = calloc(e->n_stages, sizeof(rg_buffer_t *))))
      return rg_status_make(RG_OUT_OF_MEMORY, "oom");
    for (size_t i = 0; i < e->n_stages; i++) {
      if (rg_stage_spec(e->stages[i])->kind != RG_STAGE_ATTENTION) continue;
      size_t per = rg_stage_kv_block_bytes(e->stages[i]);
      if (e->swap_blocks)
        RG_RETURN_IF_ERROR(rg_buffer_alloc(e->host, (size_t)e->swap_blocks * per, &e->tiers[i]));
      if (e->cap_blocks)
        RG_RETURN_IF_ERROR(rg_buffer_alloc(e->host, (size_t)e->cap_blocks * per, &e->caps[i]));
    }
  }
  snprintf(e->describe, sizeof e->describe,
           "%s, %lld layers, d_model %lld, %lld/%lld heads%s, %s weights, %s KV",
           rg_family_name(a->family), (long long)a->n_layers, (long long)a->d_model,
           (long long)a->n_heads, (long long)a->n_kv_heads, a->n_experts ? ", MoE" : "",
           rg_dtype_name(rg_model_weight_type(e->m)), rg_dtype_name(e->kv_type));
  return NULL;
}

int rg_engine_copies_weights(int load, const rg_model_t *m) {
  if (load != RG_LOAD_AUTO) return load == RG_LOAD_COPY;
  // Copy when the weights fit in a quarter of physical memory.
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 && rg_model_file_bytes(m) < 0.25 * (double)pages * (double)page;
}

rg_status_t rg_engine_create(const char *model_path, const rg_engine_options_t *opt,
                             rg_engine_t **out) {
  *out = NULL;
  rg_engine_t *e = calloc(1, sizeof(*e));
  if (!e) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory creating the engine");
  rg_engine_options_t o = opt ? *opt : (rg_engine_options_t){0};
  rg_status_t st = create(e, model_path, &o);
  if (st) {
    rg_engine_destroy(e);
    return st;
  }
  *out = e;
  return NULL;
}

void rg_engine_destroy(rg_engine_t *e) {
  if (!e) return;
  for (size_t i = 0; i < e->n_stages; i++) {
    if (e->tiers) rg_buffer_release(e->tiers[i]);
    if (e->caps) rg_buffer_release(e->caps[i]);
    rg_stage_destroy(e->stages[i]);
  }
  free(e->tiers);
  free(e->caps);
  free(e->stages);
  free(e->attn_of), free(e->ffn_of);
  rg_weight_cache_destroy(e->cache);
  rg_buffer_release(e->logits);
  for (int i = 0; i < e->n_devs; i++) {
    rg_buffer_release(e->devs[i].x);
    rg_queue_destroy(e->devs[i].q);
    rg_device_close(e->devs[i].dev);
  }
  rg_device_close(e->host);
  rg_step_buf_free(&e->sb);
  rg_model_close(e->m);
  free(e);
}

const rg_model_t *rg_engine_model(const rg_engine_t *e) {
  return e->m;
}
const rg_arch_t *rg_engine_arch(const rg_engine_t *e) {
  return e->a;
}
const rg_tokenizer_t *rg_engine_tokenizer(const rg_engine_t *e) {
  return rg_model_tokenizer(e->m);
}
int64_t rg_engine_vocab(const rg_engine_t *e) {
  return e->a->vocab;
}
const char *rg_engine_describe(const rg_engine_t *e) {
  return e->describe;
}
double rg_engine_weight_bytes(const rg_engine_t *e) {
  return e->weight_bytes;
}
int rg_engine_threads(const rg_engine_t *e) {
  rg_pool_t *p = rg_engine_pool(e);
  return p ? rg_pool_threads(p) : 0;
}
const char *rg_engine_device_name(const rg_engine_t *e) {
  return rg_device_info(e->devs[0].dev)->name;
}
const char *rg_engine_device_label(const rg_engine_t *e) {
  static _Thread_local char label[48];
  const rg_device_info_t *di = rg_device_info(e->devs[0].dev);
  snprintf(label, sizeof label, "%s:%d", di->driver, di->index);
  return label;
}
struct rg_pool_s *rg_engine_pool(const rg_engine_t *e) {
  for (int i = 0; i < e->n_devs; i++)
    if (rg_device_cpu_pool(e->devs[i].dev)) return rg_device_cpu_pool(e->devs[i].dev);
  return NULL;
}
double rg_engine_stream_bandwidth(rg_engine_t *e, int passes, double *bytes) {
  if (bytes) *bytes = 0;
  rg_pool_t *pool = rg_engine_pool(e);
  if (!pool) return 0;
  size_t n = 0;
  for (size_t i = 0; i < e->n_stages; i++) n += rg_stage_weight_spans(e->stages[i], NULL, 0);
  if (!n) return 0;
  rg_limits_span_t *sp = malloc(n * sizeof *sp);
  if (!sp) return 0;
  size_t k = 0;
  double total = 0;
  for (size_t i = 0; i < e->n_stages; i++) k += rg_stage_weight_spans(e->stages[i], sp + k, n - k);
  for (size_t i = 0; i < k; i++) total += (double)sp[i].bytes;
  if (bytes) *bytes = total;
  // Twice the largest cache, and never under 256 MiB: some machines list
  // no caches (this project's VMs), and no host cache holds that much.
  double cache = 2.0 * (double)rg_limits_host_cache_bytes();
  double bw =
      total >= fmax(cache, 256.0 * (1 << 20)) ? rg_limits_read_spans(pool, sp, k, passes) : 0;
  free(sp);
  return bw;
}

int64_t rg_engine_kv_blocks(const rg_engine_t *e) {
  return e->n_blocks;
}
int rg_engine_block_size(const rg_engine_t *e) {
  return e->block_size;
}
int64_t rg_engine_max_context(const rg_engine_t *e) {
  return e->max_context;
}
int rg_engine_max_seqs(const rg_engine_t *e) {
  return e->max_seqs;
}
int64_t rg_engine_swap_blocks(const rg_engine_t *e) {
  return e->swap_blocks;
}
double rg_engine_kv_bytes(const rg_engine_t *e) {
  return e->kv_bytes;
}
size_t rg_engine_stage_count(const rg_engine_t *e) {
  return e->n_stages;
}
const rg_stage_t *rg_engine_stage_at(const rg_engine_t *e, size_t i) {
  return i < e->n_stages ? e->stages[i] : NULL;
}

void rg_engine_counters(const rg_engine_t *e, rg_engine_counters_t *out) {
  *out = e->c;
  out->weight_bytes = out->kv_bytes = out->flops = 0;
  for (size_t i = 0; i < e->n_stages; i++) {
    rg_stage_counters_t c;
    rg_stage_counters(e->stages[i], &c);
    out->weight_bytes += c.weight_bytes;
    out->kv_bytes += c.kv_bytes;
    out->flops += c.flops;
  }
}

void rg_engine_counters_reset(rg_engine_t *e) {
  memset(&e->c, 0, sizeof e->c);
  for (size_t i = 0; i < e->n_stages; i++) rg_stage_counters_reset(e->stages[i]);
}

double rg_engine_stages_seconds(const rg_engine_t *e) {
  double s = 0;
  for (size_t i = 0; i < e->n_stages; i++) {
    rg_stage_counters_t c;
    rg_stage_counters(e->stages[i], &c);
    s += c.seconds;
  }
  return s;
}

void rg_engine_set_op_profiling(rg_engine_t *e, int on) {
  for (size_t i = 0; i < e->n_stages; i++) rg_queue_set_profiling(rg_stage_queue(e->stages[i]), on);
}

void rg_engine_op_profile(const rg_engine_t *e, rg_op_profile_t *out) {
  memset(out, 0, sizeof *out);
  for (size_t i = 0; i < e->n_stages; i++) {
    rg_op_profile_t p;
    rg_queue_op_profile(rg_stage_queue(e->stages[i]), &p);
    for (int k = 0; k < RG_OP_COUNT; k++) {
      out->calls[k] += p.calls[k];
      out->seconds[k] += p.seconds[k];
    }
  }
}

// ----- A step ----------------------------------------------------------------------

static rg_status_t build_step(rg_engine_t *e, const rg_engine_entry_t *b, size_t n, rg_step_t *st) {
  rg_step_limits_t lim = {e->a->vocab, e->max_context, e->block_size, e->n_blocks};
  return rg_step_build(&e->sb, &lim, b, n, st);
}

static dev_slot_t *slot_of(rg_engine_t *e, rg_device_t *d) {
  for (int i = 0; i < e->n_devs; i++)
    if (e->devs[i].dev == d) return &e->devs[i];
  return NULL;
}

static rg_status_t ensure_x(rg_engine_t *e, size_t bytes) {
  for (int i = 0; i < e->n_devs; i++) {
    dev_slot_t *d = &e->devs[i];
    if (d->x_bytes >= bytes && d->x) continue;
    rg_buffer_release(d->x);
    d->x = NULL;
    d->x_bytes = 0;
    size_t want = bytes > 2 * d->x_bytes ? bytes : 2 * d->x_bytes;
    RG_RETURN_IF_ERROR(rg_buffer_alloc(d->dev, want, &d->x));
    d->x_bytes = want;
  }
  return NULL;
}

// Moves the hidden states to stage s's device when they are elsewhere.
static rg_status_t follow(rg_engine_t *e, rg_stage_t *s, dev_slot_t **cur, size_t bytes) {
  dev_slot_t *want = slot_of(e, rg_stage_device(s));
  if (want == *cur) return NULL;
  RG_RETURN_IF_ERROR(rg_queue_copy(want->q, want->x, 0, (*cur)->x, 0, bytes));
  RG_RETURN_IF_ERROR(rg_queue_wait(want->q));
  *cur = want;
  return NULL;
}

static int finite_all(const float *p, size_t n, size_t *bad) {
  for (size_t i = 0; i < n; i++)
    if (!isfinite(p[i])) return *bad = i, 0;
  return 1;
}

// Re-runs the step reading the hidden states after every stage, to name
// the first one whose output is not finite. The step's KV writes are the
// same values again, so running it twice changes nothing.
static rg_status_t find_nonfinite(rg_engine_t *e, const rg_step_t *st, size_t x_bytes) {
  size_t n = x_bytes / sizeof(float);
  float *h = malloc(x_bytes ? x_bytes : 1);
  if (!h) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory checking the hidden states");
  rg_status_t s = NULL;
  const char *where = NULL;
  int64_t layer = -1;
  size_t bad = 0;
  dev_slot_t *cur = slot_of(e, rg_stage_device(e->embed));
  for (size_t i = 0; i < e->n_stages && !s; i++) s = rg_stage_begin(e->stages[i], NULL, st);
  if (!s) s = rg_stage_run(e->embed, NULL, 0, cur->x, NULL);
  if (!s) s = rg_buffer_read(cur->x, 0, h, x_bytes);
  if (!s && !finite_all(h, n, &bad)) where = rg_stage_name(e->embed);
  for (int64_t l = 0; !s && !where && l < e->a->n_layers; l++) {
    rg_stage_t *pair[2] = {e->attn_of[l], e->ffn_of[l]};
    for (int k = 0; k < 2 && !s && !where; k++) {
      s = follow(e, pair[k], &cur, x_bytes);
      if (!s) s = rg_stage_run(pair[k], NULL, l, cur->x, NULL);
      if (!s) s = rg_buffer_read(cur->x, 0, h, x_bytes);
      if (!s && !finite_all(h, n, &bad)) where = rg_stage_name(pair[k]), layer = l;
    }
  }
  for (size_t i = 0; i < e->n_stages; i++) rg_stage_cancel(e->stages[i], NULL);
  free(h);
  if (s) return s;
  int64_t d = e->a->d_model;
  if (!where)
    return rg_status_make(
        RG_INTERNAL,
        "the logits are not finite, but every hidden state was: lm_head's output (the final norm "
        "or its weights) is where they appear");
  if (layer < 0)
    return rg_status_make(
        RG_INTERNAL, "non-finite values appear in %s: token %zu, element %zu (check the weights)",
        where, bad / (size_t)d, bad % (size_t)d);
  return rg_status_make(
      RG_INTERNAL,
      "non-finite values first appear after %s at layer %lld: token %zu, element %zu of the hidden "
      "state (check that layer's weights)",
      where, (long long)layer, bad / (size_t)d, bad % (size_t)d);
}

static rg_status_t forward(rg_engine_t *e, const rg_engine_entry_t *b, size_t n, float *logits) {
  rg_step_t st;
  RG_RETURN_IF_ERROR(build_step(e, b, n, &st));
  size_t x_bytes = (size_t)st.n_tokens * (size_t)e->a->d_model * sizeof(float);
  size_t l_bytes = (size_t)st.n_logits * (size_t)e->a->vocab * sizeof(float);
  RG_RETURN_IF_ERROR(ensure_x(e, x_bytes));
  if (l_bytes > e->logits_bytes || !e->logits) {
    rg_buffer_release(e->logits);
    e->logits = NULL;
    e->logits_bytes = 0;
    RG_RETURN_IF_ERROR(
        rg_buffer_alloc(rg_stage_device(e->lm_head), l_bytes ? l_bytes : 4, &e->logits));
    e->logits_bytes = l_bytes;
  }
  rg_status_t s = NULL;
  size_t begun = 0;
  for (; begun < e->n_stages && !s; begun++) s = rg_stage_begin(e->stages[begun], NULL, &st);
  dev_slot_t *cur = slot_of(e, rg_stage_device(e->embed));
  if (!s) s = rg_stage_run(e->embed, NULL, 0, cur->x, NULL);
  for (int64_t l = 0; !s && l < e->a->n_layers; l++) {
    s = follow(e, e->attn_of[l], &cur, x_bytes);
    if (!s) s = rg_stage_run(e->attn_of[l], NULL, l, cur->x, NULL);
    if (!s) s = follow(e, e->ffn_of[l], &cur, x_bytes);
    if (!s) s = rg_stage_run(e->ffn_of[l], NULL, l, cur->x, NULL);
  }
  if (!s) s = follow(e, e->lm_head, &cur, x_bytes);
  if (!s) s = rg_stage_run(e->lm_head, NULL, 0, cur->x, e->logits);
  if (!s && l_bytes) s = rg_buffer_read(e->logits, 0, logits, l_bytes);
  for (size_t i = 0; i < begun; i++) rg_stage_end(e->stages[i], NULL);
  if (s) return s;
  size_t bad;
  if (l_bytes && !finite_all(logits, l_bytes / sizeof(float), &bad))
    return find_nonfinite(e, &st, x_bytes);
  e->c.tokens += st.n_tokens;
  e->c.steps++;
  return NULL;
}

rg_status_t rg_engine_forward(rg_engine_t *e, const rg_engine_entry_t *entries, size_t n,
                              float *logits) {
  if (!n) return NULL;
  if (!entries) return rg_status_make(RG_INVALID_ARGUMENT, "rg_engine_forward: no entries");
  double t0 = rg_clock_now();
  rg_status_t st = forward(e, entries, n, logits);
  e->c.seconds += rg_clock_now() - t0;
  return st;
}

// Block copies between the device pools and one tier (per attention stage).
static rg_status_t tier_copy(rg_engine_t *e, rg_buffer_t **tiers, int64_t n_blocks,
                             const char *what, const rg_engine_copy_t *out, size_t n_out,
                             const rg_engine_copy_t *in, size_t n_in) {
  if (!n_out && !n_in) return NULL;
  if (!tiers || !n_blocks)
    return rg_status_make(RG_INVALID_ARGUMENT, "this engine has no %s tier", what);
  int32_t *src = malloc((n_out + n_in + 1) * sizeof(int32_t)),
          *dst = malloc((n_out + n_in + 1) * sizeof(int32_t));
  rg_status_t s = src && dst ? NULL : rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
  for (size_t i = 0; !s && i < n_out + n_in; i++) {
    const rg_engine_copy_t *c = i < n_out ? &out[i] : &in[i - n_out];
    src[i] = c->src, dst[i] = c->dst;
    int32_t tier = i < n_out ? c->dst : c->src;
    if (tier < 0 || tier >= n_blocks)
      s = rg_status_make(RG_INVALID_ARGUMENT, "%s: tier block %d is outside the tier of %lld", what,
                         (int)tier, (long long)n_blocks);
  }
  for (size_t i = 0; !s && i < e->n_stages; i++) {
    if (!tiers[i]) continue;
    s = rg_stage_kv_copy(e->stages[i], tiers[i], src, dst, n_out, 1);
    if (!s) s = rg_stage_kv_copy(e->stages[i], tiers[i], src + n_out, dst + n_out, n_in, 0);
  }
  free(src), free(dst);
  return s;
}

rg_status_t rg_engine_swap(rg_engine_t *e, const rg_engine_copy_t *out, size_t n_out,
                           const rg_engine_copy_t *in, size_t n_in) {
  return tier_copy(e, e->tiers, e->swap_blocks, "swap", out, n_out, in, n_in);
}

rg_status_t rg_engine_tier(rg_engine_t *e, const rg_engine_copy_t *out, size_t n_out,
                           const rg_engine_copy_t *in, size_t n_in) {
  return tier_copy(e, e->caps, e->cap_blocks, "capacity", out, n_out, in, n_in);
}

int64_t rg_engine_tier_blocks(const rg_engine_t *e) {
  return e->cap_blocks;
}
