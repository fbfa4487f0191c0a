// Layouts of stage instances over workers, and the hops of a step (see
// runtime/cluster.h).
#include <stdio.h>
#include <string.h>

#include "runtime/cluster.h"

const char *rg_cluster_role_name(rg_cluster_role_t r) {
  static const char *const names[] = {"all", "prefill", "decode", "tier"};
  return (unsigned)r < sizeof names / sizeof names[0] ? names[r] : "?";
}

rg_status_t rg_cluster_worker_add(rg_cluster_worker_t *w, const rg_stage_spec_t *spec) {
  if (w->n_stages >= RG_CLUSTER_MAX_STAGES)
    return rg_status_make(RG_INVALID_ARGUMENT, "worker %s: more than %d stage instances", w->name,
                          RG_CLUSTER_MAX_STAGES);
  rg_stage_spec_t s = *spec;
  if (spec->experts) {
    if (w->n_experts_used + spec->n_experts > RG_CLUSTER_MAX_EXPERTS)
      return rg_status_make(RG_INVALID_ARGUMENT, "worker %s: more than %d experts listed", w->name,
                            RG_CLUSTER_MAX_EXPERTS);
    memcpy(w->experts + w->n_experts_used, spec->experts, spec->n_experts * sizeof(int32_t));
    s.experts = w->experts + w->n_experts_used;
    w->n_experts_used += spec->n_experts;
  }
  w->stages[w->n_stages++] = s;
  return NULL;
}

static rg_cluster_worker_t *add_worker(rg_cluster_layout_t *l, const char *name, const char *dev) {
  if (l->n_workers >= RG_CLUSTER_MAX_WORKERS) return NULL;
  rg_cluster_worker_t *w = &l->workers[l->n_workers++];
  memset(w, 0, sizeof *w);
  snprintf(w->name, sizeof w->name, "%s", name);
  snprintf(w->device, sizeof w->device, "%s", dev);
  return w;
}

// Feed-forward instances over [l0, l1): maximal runs of dense and of MoE
// layers, optionally a subset of the experts for the MoE runs.
static rg_status_t add_ffn(rg_cluster_worker_t *w, const rg_arch_t *a, int64_t l0, int64_t l1,
                           const int32_t *experts, size_t n_experts) {
  for (int64_t r0 = l0; r0 < l1;) {
    int moe = a->n_experts > 0 && rg_arch_layer_is_moe(a, r0);
    int64_t r1 = r0 + 1;
    while (r1 < l1 && (a->n_experts > 0 && rg_arch_layer_is_moe(a, r1)) == moe) r1++;
    rg_stage_spec_t s = {moe ? RG_STAGE_MOE : RG_STAGE_FFN, r0, r1, moe ? experts : NULL,
                         moe ? n_experts : 0};
    RG_RETURN_IF_ERROR(rg_cluster_worker_add(w, &s));
    r0 = r1;
  }
  return NULL;
}

static rg_status_t add_block(rg_cluster_worker_t *w, const rg_arch_t *a, int64_t l0, int64_t l1) {
  rg_stage_spec_t s = {RG_STAGE_ATTENTION, l0, l1, NULL, 0};
  RG_RETURN_IF_ERROR(rg_cluster_worker_add(w, &s));
  return add_ffn(w, a, l0, l1, NULL, 0);
}

static const rg_stage_spec_t k_embed = {RG_STAGE_EMBED, 0, 0, NULL, 0};
static const rg_stage_spec_t k_head = {RG_STAGE_LM_HEAD, 0, 0, NULL, 0};

rg_status_t rg_cluster_layout_colocated(const rg_arch_t *a, const char *dev,
                                        rg_cluster_layout_t *out) {
  memset(out, 0, sizeof *out);
  out->micro_batches = 1;
  rg_cluster_worker_t *w = add_worker(out, "w0-all", dev);
  RG_RETURN_IF_ERROR(rg_cluster_worker_add(w, &k_embed));
  RG_RETURN_IF_ERROR(add_block(w, a, 0, a->n_layers));
  return rg_cluster_worker_add(w, &k_head);
}

rg_status_t rg_cluster_layout_afd(const rg_arch_t *a, const char *dev_a, const char *dev_b,
                                  int micro_batches, rg_cluster_layout_t *out) {
  memset(out, 0, sizeof *out);
  if (micro_batches < 1 || micro_batches > 2)
    return rg_status_make(RG_INVALID_ARGUMENT, "micro_batches is %d; 1, or 2 for ping-pong",
                          micro_batches);
  out->micro_batches = micro_batches;
  rg_cluster_worker_t *w = add_worker(out, "w0-attention", dev_a);
  RG_RETURN_IF_ERROR(rg_cluster_worker_add(w, &k_embed));
  rg_stage_spec_t at = {RG_STAGE_ATTENTION, 0, a->n_layers, NULL, 0};
  RG_RETURN_IF_ERROR(rg_cluster_worker_add(w, &at));
  RG_RETURN_IF_ERROR(rg_cluster_worker_add(w, &k_head));
  return add_ffn(add_worker(out, "w1-ffn", dev_b), a, 0, a->n_layers, NULL, 0);
}

rg_status_t rg_cluster_layout_experts(const rg_arch_t *a, const char *dev_a, const char *dev_b,
                                      rg_cluster_layout_t *out) {
  memset(out, 0, sizeof *out);
  if (a->n_experts < 2)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "an expert split needs an MoE model; %s has %lld experts", a->name,
                          (long long)a->n_experts);
  if (a->n_experts > RG_CLUSTER_MAX_EXPERTS)
    return rg_status_make(RG_INVALID_ARGUMENT, "%s has %lld experts; at most %d", a->name,
                          (long long)a->n_experts, RG_CLUSTER_MAX_EXPERTS);
  out->micro_batches = 1;
  int32_t lo[RG_CLUSTER_MAX_EXPERTS], hi[RG_CLUSTER_MAX_EXPERTS];
  size_t half = (size_t)a->n_experts / 2, n_hi = (size_t)a->n_experts - half;
  for (size_t i = 0; i < half; i++) lo[i] = (int32_t)i;
  for (size_t i = 0; i < n_hi; i++) hi[i] = (int32_t)(half + i);
  rg_cluster_worker_t *w = add_worker(out, "w0-experts-lo", dev_a);
  RG_RETURN_IF_ERROR(rg_cluster_worker_add(w, &k_embed));
  rg_stage_spec_t at = {RG_STAGE_ATTENTION, 0, a->n_layers, NULL, 0};
  RG_RETURN_IF_ERROR(rg_cluster_worker_add(w, &at));
  RG_RETURN_IF_ERROR(add_ffn(w, a, 0, a->n_layers, lo, half));
  RG_RETURN_IF_ERROR(rg_cluster_worker_add(w, &k_head));
  rg_cluster_worker_t *v = add_worker(out, "w1-experts-hi", dev_b);
  // Only the MoE layers: dense layers stay with worker 0.
  for (int64_t l = 0; l < a->n_layers; l++)
    if (rg_arch_layer_is_moe(a, l)) {
      int64_t l1 = l + 1;
      while (l1 < a->n_layers && rg_arch_layer_is_moe(a, l1)) l1++;
      rg_stage_spec_t m = {RG_STAGE_MOE, l, l1, hi, n_hi};
      RG_RETURN_IF_ERROR(rg_cluster_worker_add(v, &m));
      l = l1 - 1;
    }
  // Worker 0's feed-forward instances over dense layers keep all (none) experts.
  return NULL;
}

rg_status_t rg_cluster_layout_pipeline(const rg_arch_t *a, const char *dev_a, const char *dev_b,
                                       rg_cluster_layout_t *out) {
  memset(out, 0, sizeof *out);
  if (a->n_layers < 2)
    return rg_status_make(RG_INVALID_ARGUMENT, "a pipeline of two needs two layers; %s has %lld",
                          a->name, (long long)a->n_layers);
  out->micro_batches = 1;
  int64_t mid = a->n_layers / 2;
  rg_cluster_worker_t *w = add_worker(out, "w0-layers-lo", dev_a);
  RG_RETURN_IF_ERROR(rg_cluster_worker_add(w, &k_embed));
  RG_RETURN_IF_ERROR(add_block(w, a, 0, mid));
  rg_cluster_worker_t *v = add_worker(out, "w1-layers-hi", dev_b);
  RG_RETURN_IF_ERROR(add_block(v, a, mid, a->n_layers));
  return rg_cluster_worker_add(v, &k_head);
}

rg_status_t rg_cluster_layout_pd(const rg_arch_t *a, const char *dev_p, const char *dev_d,
                                 int64_t block_p, int64_t block_d, rg_cluster_layout_t *out) {
  memset(out, 0, sizeof *out);
  if (block_p < 0 || block_d < 0 || block_p > 1024 || block_d > 1024)
    return rg_status_make(
        RG_INVALID_ARGUMENT,
        "KV block sizes of %lld and %lld tokens; expected 1 to 1024 (0: the run's)",
        (long long)block_p, (long long)block_d);
  out->micro_batches = 1;
  const char *names[2] = {"w0-prefill", "w1-decode"}, *devs[2] = {dev_p, dev_d};
  const rg_cluster_role_t roles[2] = {RG_CLUSTER_ROLE_PREFILL, RG_CLUSTER_ROLE_DECODE};
  const int64_t blocks[2] = {block_p, block_d};
  for (int i = 0; i < 2; i++) {
    rg_cluster_worker_t *w = add_worker(out, names[i], devs[i]);
    w->role = roles[i];
    w->block_size = blocks[i];
    RG_RETURN_IF_ERROR(rg_cluster_worker_add(w, &k_embed));
    RG_RETURN_IF_ERROR(add_block(w, a, 0, a->n_layers));
    RG_RETURN_IF_ERROR(rg_cluster_worker_add(w, &k_head));
  }
  return NULL;
}

rg_status_t rg_cluster_layout_add_tier(rg_cluster_layout_t *l, const char *dev,
                                       int64_t tier_tokens) {
  if (tier_tokens < 1)
    return rg_status_make(RG_INVALID_ARGUMENT, "a capacity tier of %lld tokens; expected >= 1",
                          (long long)tier_tokens);
  for (int i = 0; i < l->n_workers; i++)
    if (l->workers[i].role == RG_CLUSTER_ROLE_TIER)
      return rg_status_make(RG_INVALID_ARGUMENT, "the layout has a capacity tier already (%s)",
                            l->workers[i].name);
  char name[48];
  snprintf(name, sizeof name, "w%d-tier", l->n_workers);
  rg_cluster_worker_t *w = add_worker(l, name, dev);
  if (!w)
    return rg_status_make(RG_INVALID_ARGUMENT, "a layout holds at most %d workers",
                          RG_CLUSTER_MAX_WORKERS);
  w->role = RG_CLUSTER_ROLE_TIER;
  w->tier_tokens = tier_tokens;
  return NULL;
}

int rg_cluster_layout_is_pd(const rg_cluster_layout_t *l) {
  for (int i = 0; i < l->n_workers; i++)
    if (l->workers[i].role == RG_CLUSTER_ROLE_PREFILL ||
        l->workers[i].role == RG_CLUSTER_ROLE_DECODE)
      return 1;
  return 0;
}

// ----- Hops ------------------------------------------------------------------------

static int covers(const rg_stage_spec_t *s, int64_t l) {
  return l >= s->layer_begin && l < s->layer_end;
}

static int first_expert(const rg_stage_spec_t *s) {
  return s->experts ? s->experts[0] : 0;
}

static rg_status_t push(rg_cluster_hop_t *out, size_t cap, size_t *n, rg_cluster_hop_t h) {
  if (*n >= cap)
    return rg_status_make(RG_INVALID_ARGUMENT, "the layout has more than %zu hops", cap);
  out[(*n)++] = h;
  return NULL;
}

// The one instance of `kind` (embed, lm_head) in the layout.
static rg_status_t find_single(const rg_cluster_layout_t *l, rg_cluster_role_t role,
                               rg_stage_kind_t kind, rg_cluster_hop_t *out) {
  int found = 0;
  for (int w = 0; w < l->n_workers; w++)
    for (int s = 0; l->workers[w].role == role && s < l->workers[w].n_stages; s++)
      if (l->workers[w].stages[s].kind == kind) {
        if (found++)
          return rg_status_make(
              RG_INVALID_ARGUMENT, "the layout has two %s instances (on %s and %s)",
              rg_stage_kind_name(kind), l->workers[out->worker].name, l->workers[w].name);
        *out = (rg_cluster_hop_t){w, s, kind, -1, 0};
      }
  if (!found)
    return rg_status_make(RG_INVALID_ARGUMENT, "the layout has no %s instance",
                          rg_stage_kind_name(kind));
  return NULL;
}

rg_status_t rg_cluster_layout_hops(const rg_arch_t *a, const rg_cluster_layout_t *l,
                                   rg_cluster_role_t role, rg_cluster_hop_t *out, size_t cap,
                                   size_t *n) {
  *n = 0;
  if (l->n_workers < 1) return rg_status_make(RG_INVALID_ARGUMENT, "the layout has no workers");
  int pd = rg_cluster_layout_is_pd(l);
  for (int w = 0; w < l->n_workers; w++) {
    if (pd && l->workers[w].role == RG_CLUSTER_ROLE_ALL)
      return rg_status_make(RG_INVALID_ARGUMENT,
                            "worker %s runs every phase in a prefill-decode layout; give it the "
                            "prefill or the decode role",
                            l->workers[w].name);
    if (l->workers[w].role == RG_CLUSTER_ROLE_TIER && l->workers[w].n_stages)
      return rg_status_make(RG_INVALID_ARGUMENT, "worker %s is a capacity tier and runs no stages",
                            l->workers[w].name);
  }
  if (role == RG_CLUSTER_ROLE_TIER || (pd && role == RG_CLUSTER_ROLE_ALL) ||
      (!pd && role != RG_CLUSTER_ROLE_ALL))
    return rg_status_make(RG_INVALID_ARGUMENT, "the layout has no %s pipeline",
                          rg_cluster_role_name(role));
  rg_cluster_hop_t h;
  RG_RETURN_IF_ERROR(find_single(l, role, RG_STAGE_EMBED, &h));
  RG_RETURN_IF_ERROR(push(out, cap, n, h));
  for (int64_t layer = 0; layer < a->n_layers; layer++) {
    // Attention: exactly one.
    int found = 0;
    for (int w = 0; w < l->n_workers; w++)
      for (int s = 0; l->workers[w].role == role && s < l->workers[w].n_stages; s++) {
        const rg_stage_spec_t *sp = &l->workers[w].stages[s];
        if (sp->kind != RG_STAGE_ATTENTION || !covers(sp, layer)) continue;
        if (found++)
          return rg_status_make(RG_INVALID_ARGUMENT, "layer %lld has two attention instances",
                                (long long)layer);
        RG_RETURN_IF_ERROR(
            push(out, cap, n, (rg_cluster_hop_t){w, s, RG_STAGE_ATTENTION, layer, 0}));
      }
    if (!found)
      return rg_status_make(RG_INVALID_ARGUMENT, "no attention instance covers layer %lld",
                            (long long)layer);
    int moe = a->n_experts > 0 && rg_arch_layer_is_moe(a, layer);
    rg_stage_kind_t want = moe ? RG_STAGE_MOE : RG_STAGE_FFN;
    // Feed-forward: one ffn, or moe instances in order of their first expert.
    rg_cluster_hop_t ff[RG_CLUSTER_MAX_WORKERS * RG_CLUSTER_MAX_STAGES];
    size_t nf = 0;
    for (int w = 0; w < l->n_workers; w++)
      for (int s = 0; l->workers[w].role == role && s < l->workers[w].n_stages; s++) {
        const rg_stage_spec_t *sp = &l->workers[w].stages[s];
        if ((sp->kind == RG_STAGE_FFN || sp->kind == RG_STAGE_MOE) && covers(sp, layer)) {
          if (sp->kind != want)
            return rg_status_make(RG_INVALID_ARGUMENT,
                                  "layer %lld is %s but %s's %s instance covers it",
                                  (long long)layer, moe ? "an MoE layer" : "dense",
                                  l->workers[w].name, rg_stage_kind_name(sp->kind));
          ff[nf++] = (rg_cluster_hop_t){w, s, want, layer, 0};
        }
      }
    if (!nf)
      return rg_status_make(RG_INVALID_ARGUMENT, "no %s instance covers layer %lld",
                            rg_stage_kind_name(want), (long long)layer);
    if (!moe && nf > 1)
      return rg_status_make(RG_INVALID_ARGUMENT, "layer %lld has two ffn instances",
                            (long long)layer);
    for (size_t i = 1; i < nf; i++)  // insertion sort by first expert
      for (size_t j = i; j > 0; j--) {
        const rg_stage_spec_t *x = &l->workers[ff[j].worker].stages[ff[j].stage],
                              *y = &l->workers[ff[j - 1].worker].stages[ff[j - 1].stage];
        if (first_expert(x) >= first_expert(y)) break;
        rg_cluster_hop_t t = ff[j];
        ff[j] = ff[j - 1];
        ff[j - 1] = t;
      }
    if (moe) {
      // The subsets must partition 0..E-1.
      unsigned char seen[RG_CLUSTER_MAX_EXPERTS] = {0};
      int64_t E = a->n_experts, count = 0;
      for (size_t i = 0; i < nf; i++) {
        const rg_stage_spec_t *sp = &l->workers[ff[i].worker].stages[ff[i].stage];
        size_t ne = sp->experts ? sp->n_experts : (size_t)E;
        for (size_t k = 0; k < ne; k++) {
          int64_t x = sp->experts ? sp->experts[k] : (int64_t)k;
          if (x < 0 || x >= E || x >= RG_CLUSTER_MAX_EXPERTS)
            return rg_status_make(RG_INVALID_ARGUMENT, "layer %lld: expert %lld is not in 0..%lld",
                                  (long long)layer, (long long)x, (long long)E - 1);
          if (seen[x]++)
            return rg_status_make(RG_INVALID_ARGUMENT,
                                  "layer %lld: expert %lld is held by two instances",
                                  (long long)layer, (long long)x);
          count++;
        }
      }
      if (count != E)
        return rg_status_make(RG_INVALID_ARGUMENT,
                              "layer %lld: the instances hold %lld of its %lld experts",
                              (long long)layer, (long long)count, (long long)E);
    }
    for (size_t i = 0; i < nf; i++) {
      ff[i].continues = i > 0;
      RG_RETURN_IF_ERROR(push(out, cap, n, ff[i]));
    }
  }
  RG_RETURN_IF_ERROR(find_single(l, role, RG_STAGE_LM_HEAD, &h));
  return push(out, cap, n, h);
}
