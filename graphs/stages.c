// graphs/stages.c — FLOPs and bytes of each stage for one step of a batch.
//
// A step: `batch` sequences each add `new_tokens` tokens (T = batch x
// new_tokens in all) on top of `context` cached tokens. The rules:
//
// - A matmul costs 2 FLOPs per weight per token. Norms, biases and sinks are
//   counted the same way; they are a rounding error next to the matmuls.
// - Weights are read once per step: every sequence in the batch shares them.
// - MoE: each token runs its top-k experts (FLOPs), but the step reads every
//   expert that at least one of its T tokens picked. With uniform routing the
//   expected number of distinct experts is E x (1 - (1 - k/E)^T).
// - Attention core, causal: new token i (0-based) of a sequence attends to
//   context + i + 1 positions; on sliding-window layers at most `window`.
//   GQA costs 4 x n_heads x head_dim FLOPs per position (QK^T and PV).
// - MLA (DeepSeek): decode runs the weight-absorbed form, as DeepSeek's and
//   vLLM's decode kernels do: kv_b_proj is folded into the query (W_UK) and
//   output (W_UV) sides, so attention runs over the cached latent itself —
//   scores over kv_lora_rank + qk_rope_head_dim, PV over kv_lora_rank, all
//   heads sharing one latent (MQA-like, hence high intensity). Prefill runs
//   the materialised form: kv_b_proj decompresses the latent of every
//   position (context and new) into per-head K and V, and attention costs
//   QK over qk_nope + qk_rope and PV over v_head_dim. For long prompts this is
//   the cheaper form, which is why engines switch forms by phase.
// - KV read: the cached context of every sequence (a sliding layer only its
//   window); KV written: the new tokens' KV, all layers.
// - Activations: each stage reads its input hidden states and writes its
//   output, in act_dtype. Attention's core also reads its query and writes
//   its output (per-head widths); the MoE router writes its logits; lm_head
//   writes logits over the vocabulary.
// - lm_head runs on the tokens that are sampled: in prefill only the last
//   token of each sequence, in decode every new token (new_tokens > 1 is a
//   speculative verify step).
// - Moves carry bytes only, in one field so `bytes` is the amount moved:
//   kv_transfer and kv_offload in kv_read_bytes (the source reads the KV
//   out), kv_reload in kv_write_bytes (the destination writes it back),
//   activation in act_bytes.
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/yaml.h"
#include "graphs/graphs.h"

// Defined in arch.c (see the note there).
double rg__attn_layer_params(const rg_arch_t *a);
double rg__mla_kv_b_params(const rg_arch_t *a);
double rg__ffn_layer_params(const rg_arch_t *a);
double rg__expert_params(const rg_arch_t *a);
double rg__router_layer_params(const rg_arch_t *a);
double rg__kv_elems_per_token_layer(const rg_arch_t *a);

static double min_d(double x, double y) {
  return x < y ? x : y;
}

// Sum over the new tokens of one sequence of the positions each attends to:
// token i sees p = context + i + 1 positions, capped at window (0: none).
static double attended_positions(double context, double n_new, double window) {
  double first = context + 1.0, last = context + n_new;
  if (window <= 0.0 || last <= window) return n_new * context + n_new * (n_new + 1.0) / 2.0;
  if (first > window) return n_new * window;
  // Tokens up to position `window` see p each; the rest see `window`.
  return (window * (window + 1.0) / 2.0 - (first - 1.0) * first / 2.0) + (last - window) * window;
}

typedef struct {
  double flops, weight, kv_read, kv_write, act, resident;
} parts_t;

static void emit(rg_stage_cost_t *out, size_t *n, rg_stage_kind_t kind, const char *name,
                 int is_part, int64_t layers, parts_t p) {
  rg_stage_cost_t *c = &out[(*n)++];
  memset(c, 0, sizeof(*c));
  c->kind = kind;
  snprintf(c->name, sizeof(c->name), "%s", name);
  c->is_part = is_part;
  c->layers = layers;
  c->flops = p.flops;
  c->weight_bytes = p.weight;
  c->kv_read_bytes = p.kv_read;
  c->kv_write_bytes = p.kv_write;
  c->act_bytes = p.act;
  c->bytes = p.weight + p.kv_read + p.kv_write + p.act;
  c->intensity = c->bytes > 0.0 ? c->flops / c->bytes : 0.0;
  c->resident_weight_bytes = p.resident;
}

static parts_t sum_parts(parts_t x, parts_t y) {
  return (parts_t){x.flops + y.flops,       x.weight + y.weight, x.kv_read + y.kv_read,
                   x.kv_write + y.kv_write, x.act + y.act,       x.resident + y.resident};
}

static rg_status_t check_shape(const rg_shape_t *s) {
  if (s->phase != RG_PHASE_PREFILL && s->phase != RG_PHASE_DECODE)
    return rg_status_make(RG_INVALID_ARGUMENT, "step shape: phase %d is neither prefill nor decode",
                          (int)s->phase);
  // 2^31 sequences or tokens is far past any batch; the bound keeps T exact.
  if (s->batch < 1 || s->batch > (1LL << 31))
    return rg_status_make(RG_INVALID_ARGUMENT, "step shape: batch %lld; expected 1 to 2^31",
                          (long long)s->batch);
  if (s->new_tokens < 1 || s->new_tokens > (1LL << 31))
    return rg_status_make(RG_INVALID_ARGUMENT, "step shape: new_tokens %lld; expected 1 to 2^31",
                          (long long)s->new_tokens);
  if (s->context < 0 || s->context > (1LL << 40))
    return rg_status_make(RG_INVALID_ARGUMENT, "step shape: context %lld; expected 0 to 2^40",
                          (long long)s->context);
  if ((unsigned)s->weight_dtype >= RG_DTYPE_COUNT || (unsigned)s->kv_dtype >= RG_DTYPE_COUNT ||
      (unsigned)s->act_dtype >= RG_DTYPE_COUNT)
    return rg_status_make(RG_INVALID_ARGUMENT, "step shape: unknown dtype");
  return NULL;
}

// What one step puts through the stages, summed over its sequences and
// over the layers in question: every formula below reads only these, so the
// planner's uniform shapes (rg_stage_costs) and the engine's real batches
// (rg_stage_costs_batch) cost a step the same way.
typedef struct {
  int prefill;
  double T;            // tokens
  double sampled;      // rows lm_head computes
  double L, Lf, Ls;    // attention layers; full-context and sliding ones among them
  double Ld, Lm;       // dense FFN and MoE layers
  double E_frac;       // share of the routed experts held (1: all)
  double positions;    // sum over sequences and attention layers of attended positions
  double ctx;          // sum over sequences and layers of cached positions read
  double latent;       // sum over sequences of context + new (MLA prefill decompresses them)
  double kept;         // sum over sequences and layers of positions kept after the step
  double moved;        // sum over sequences and layers of the new positions (kv_transfer)
  rg_dtype_t wdt, kvdt, adt;
} step_agg_t;

static rg_status_t emit_costs(const rg_arch_t *a, const step_agg_t *g, rg_stage_cost_t *out, size_t cap,
                              size_t *out_n) {
  const int prefill = g->prefill;
  const int64_t n_moe = (int64_t)g->Lm, n_dense = (int64_t)g->Ld;
  const int has_shared = n_moe > 0 && a->n_shared_experts > 0;
  size_t need = 1 + 3 + (n_dense > 0) + (n_moe > 0 ? 3 + (size_t)has_shared : 0) + 1 + 4;
  if (cap < need)
    return rg_status_make(RG_INVALID_ARGUMENT, "rg_stage_costs: room for %zu entries, model '%s' needs %zu", cap,
                          a->name, need);
  const double T = g->T, L = g->L, Lm = g->Lm, Ld = g->Ld;
  const double wb = rg_dtype_bytes(g->wdt), kb = rg_dtype_bytes(g->kvdt), ab = rg_dtype_bytes(g->adt);
  const double d = (double)a->d_model, V = (double)a->vocab, h = (double)a->n_heads;
  const double kv_tok_layer = rg__kv_elems_per_token_layer(a) * kb;
  size_t n = 0;

  // embed: a gather of one table row per token; no FLOPs.
  parts_t embed = {0};
  embed.weight = min_d(T, V) * d * wb;
  embed.act = T * d * ab;
  embed.resident = V * d * wb;
  emit(out, &n, RG_STAGE_EMBED, "embed", 0, 0, embed);

  // attention.proj: QKV and O projections (MLA: the low-rank chain).
  const double p_attn = rg__attn_layer_params(a);
  parts_t proj = {0};
  proj.weight = proj.resident = L * p_attn * wb;
  if (a->mla && prefill) {
    // kv_b_proj runs over every position's latent, cached and new.
    double kv_b = rg__mla_kv_b_params(a);
    double kv_heads_width = h * (double)(a->qk_nope_head_dim + a->v_head_dim);
    proj.flops = 2.0 * L * ((p_attn - kv_b) * T + kv_b * g->latent);
    proj.act = L * (2.0 * T * d + g->latent * kv_heads_width) * ab;
  } else {
    proj.flops = 2.0 * T * L * p_attn;
    proj.act = 2.0 * T * L * d * ab;
  }

  // attention.core: scores and weighted sum over the KV.
  parts_t core = {0};
  double flops_per_pos, act_per_tok;  // act_per_tok: per token per layer, elements
  if (!a->mla) {
    double hd = (double)a->head_dim;
    flops_per_pos = 4.0 * h * hd;
    act_per_tok = 2.0 * h * hd;  // q in (n_heads, head_dim), output out
  } else if (!prefill) {
    double kvl = (double)a->kv_lora_rank, rope = (double)a->qk_rope_head_dim;
    flops_per_pos = 2.0 * h * (kvl + rope) + 2.0 * h * kvl;
    act_per_tok = h * (kvl + rope) + h * kvl;  // absorbed q (n_heads, kvl+rope), latent out
  } else {
    double qk = (double)(a->qk_nope_head_dim + a->qk_rope_head_dim), vh = (double)a->v_head_dim;
    flops_per_pos = 2.0 * h * qk + 2.0 * h * vh;
    act_per_tok = h * qk + h * vh;
  }
  core.flops = g->positions * flops_per_pos;
  core.kv_read = g->ctx * kv_tok_layer;
  core.kv_write = T * L * kv_tok_layer;
  core.act = T * L * act_per_tok * ab;
  if (a->mla && prefill)  // the decompressed K and V that proj wrote
    core.act += g->latent * L * h * (double)(a->qk_nope_head_dim + a->v_head_dim) * ab;
  emit(out, &n, RG_STAGE_ATTENTION, "attention", 0, (int64_t)L, sum_parts(proj, core));
  emit(out, &n, RG_STAGE_ATTENTION, "attention.proj", 1, (int64_t)L, proj);
  emit(out, &n, RG_STAGE_ATTENTION, "attention.core", 1, (int64_t)L, core);

  if (n_dense > 0) {
    const double p_ffn = rg__ffn_layer_params(a);
    parts_t ffn = {0};
    ffn.flops = 2.0 * T * Ld * p_ffn;
    ffn.weight = ffn.resident = Ld * p_ffn * wb;
    ffn.act = 2.0 * T * Ld * d * ab;
    emit(out, &n, RG_STAGE_FFN, "ffn", 0, n_dense, ffn);
  }

  if (n_moe > 0) {
    const double E = (double)a->n_experts, k = (double)a->n_experts_per_tok;
    const double p_exp = rg__expert_params(a), p_router = rg__router_layer_params(a);
    parts_t router = {0}, experts = {0}, shared = {0};
    router.flops = 2.0 * T * Lm * p_router;
    router.weight = router.resident = Lm * p_router * wb;
    router.act = T * Lm * E * ab;  // logits; the hidden input is counted on experts
    // Expected distinct experts the step's T tokens touch in one layer; an
    // instance holding a share of the experts sees that share of them.
    double touched = E * (1.0 - pow(1.0 - k / E, T));
    experts.flops = 2.0 * T * Lm * k * p_exp * g->E_frac;
    experts.weight = Lm * touched * p_exp * wb * g->E_frac;
    experts.resident = Lm * E * p_exp * wb * g->E_frac;
    experts.act = 2.0 * T * Lm * d * ab;
    // Shared experts see every token and read the hidden state the routed
    // experts already read (engines fuse them), so they add no activations.
    shared.flops = 2.0 * T * Lm * (double)a->n_shared_experts * p_exp;
    shared.weight = shared.resident = Lm * (double)a->n_shared_experts * p_exp * wb;
    emit(out, &n, RG_STAGE_MOE, "moe", 0, n_moe, sum_parts(sum_parts(router, experts), shared));
    emit(out, &n, RG_STAGE_MOE, "moe.router", 1, n_moe, router);
    emit(out, &n, RG_STAGE_MOE, "moe.experts", 1, n_moe, experts);
    if (has_shared) emit(out, &n, RG_STAGE_MOE, "moe.shared", 1, n_moe, shared);
  }

  // lm_head, with the final norm. When tied it reads the embedding table,
  // which embed already keeps resident.
  parts_t head = {0};
  double sampled = g->sampled;
  head.flops = 2.0 * sampled * V * d;
  head.weight = (V * d + d) * wb;
  head.resident = ((a->tie_embeddings ? 0.0 : V * d) + d) * wb;
  head.act = sampled * (d + V) * ab;
  emit(out, &n, RG_STAGE_LM_HEAD, "lm_head", 0, 0, head);

  // Moves. A sliding layer keeps only its last `window` tokens, so only those
  // travel.
  parts_t transfer = {0}, offload = {0}, reload = {0}, activation = {0};
  if (prefill) transfer.kv_read = g->moved * kv_tok_layer;
  double kept = g->kept * kv_tok_layer;
  offload.kv_read = kept;
  reload.kv_write = kept;
  activation.act = 2.0 * T * L * d * ab;
  emit(out, &n, RG_STAGE_KV_TRANSFER, "kv_transfer", 0, (int64_t)L, transfer);
  emit(out, &n, RG_STAGE_KV_OFFLOAD, "kv_offload", 0, (int64_t)L, offload);
  emit(out, &n, RG_STAGE_KV_RELOAD, "kv_reload", 0, (int64_t)L, reload);
  emit(out, &n, RG_STAGE_ACTIVATION, "activation", 0, (int64_t)L, activation);

  *out_n = n;
  return NULL;
}

rg_status_t rg_stage_costs(const rg_arch_t *a, const rg_shape_t *s, rg_stage_cost_t *out,
                           size_t cap, size_t *out_n) {
  if (out_n) *out_n = 0;
  if (!a || !s || !out || !out_n)
    return rg_status_make(RG_INVALID_ARGUMENT, "rg_stage_costs: NULL argument");
  RG_RETURN_IF_ERROR(rg_arch_validate(a));
  RG_RETURN_IF_ERROR(check_shape(s));
  const int64_t n_moe = rg_arch_n_moe_layers(a);
  const double B = (double)s->batch, N = (double)s->new_tokens, C = (double)s->context;
  const double L = (double)a->n_layers, Ls = (double)a->n_sliding_layers, Lf = L - Ls;
  const double W = (double)a->sliding_window;
  step_agg_t g = {.prefill = s->phase == RG_PHASE_PREFILL,
                  .T = B * N,
                  .L = L,
                  .Lf = Lf,
                  .Ls = Ls,
                  .Ld = (double)(a->n_layers - n_moe),
                  .Lm = (double)n_moe,
                  .E_frac = 1.0,
                  .positions = B * (Lf * attended_positions(C, N, 0.0) + Ls * attended_positions(C, N, W)),
                  .ctx = B * (Lf * C + Ls * min_d(C, W)),
                  .latent = B * (C + N),
                  .kept = B * (Lf * (C + N) + Ls * min_d(C + N, W)),
                  .moved = B * (Lf * N + Ls * min_d(N, W)),
                  .wdt = s->weight_dtype,
                  .kvdt = s->kv_dtype,
                  .adt = s->act_dtype};
  // lm_head runs on the sampled tokens: the last of each prompt in prefill,
  // every new token in decode (several: a speculative verify step).
  g.sampled = g.prefill ? B : g.T;
  return emit_costs(a, &g, out, cap, out_n);
}

rg_status_t rg_stage_costs_batch(const rg_arch_t *a, const rg_batch_shape_t *b, rg_stage_cost_t *out, size_t cap,
                                 size_t *out_n) {
  if (out_n) *out_n = 0;
  if (!a || !b || !out || !out_n || (b->n_seqs && !b->seqs))
    return rg_status_make(RG_INVALID_ARGUMENT, "rg_stage_costs_batch: NULL argument");
  RG_RETURN_IF_ERROR(rg_arch_validate(a));
  int64_t l0 = b->layer_begin, l1 = b->layer_end ? b->layer_end : a->n_layers;
  if (l0 < 0 || l1 > a->n_layers || l0 >= l1)
    return rg_status_make(RG_INVALID_ARGUMENT, "rg_stage_costs_batch: layers [%lld, %lld) of a %lld-layer model",
                          (long long)l0, (long long)l1, (long long)a->n_layers);
  if ((unsigned)b->weight_dtype >= RG_DTYPE_COUNT || (unsigned)b->kv_dtype >= RG_DTYPE_COUNT ||
      (unsigned)b->act_dtype >= RG_DTYPE_COUNT)
    return rg_status_make(RG_INVALID_ARGUMENT, "rg_stage_costs_batch: unknown dtype");
  double Lm = 0;
  for (int64_t l = l0; l < l1; l++) Lm += a->n_experts > 0 && rg_arch_layer_is_moe(a, l);
  double L = (double)(l1 - l0);
  // Which layers slide is not in rg_arch_t, only how many: a range gets its
  // share of them.
  double Ls = a->n_layers > 0 ? (double)a->n_sliding_layers * L / (double)a->n_layers : 0.0, Lf = L - Ls;
  double W = (double)a->sliding_window;
  step_agg_t g = {.prefill = 0, .L = L, .Lf = Lf, .Ls = Ls, .Ld = L - Lm, .Lm = Lm,
                  .E_frac = b->expert_fraction > 0 ? b->expert_fraction : 1.0,
                  .sampled = (double)b->n_logits, .wdt = b->weight_dtype, .kvdt = b->kv_dtype,
                  .adt = b->act_dtype};
  for (size_t i = 0; i < b->n_seqs; i++) {
    double N = (double)b->seqs[i].n_new, C = (double)b->seqs[i].context;
    if (b->seqs[i].n_new < 1 || b->seqs[i].context < 0)
      return rg_status_make(RG_INVALID_ARGUMENT, "rg_stage_costs_batch: sequence %zu adds %lld tokens to %lld", i,
                            (long long)b->seqs[i].n_new, (long long)b->seqs[i].context);
    g.prefill |= b->seqs[i].n_new > 1;
    g.T += N;
    g.positions += Lf * attended_positions(C, N, 0.0) + Ls * attended_positions(C, N, W);
    g.ctx += Lf * C + Ls * min_d(C, W);
    g.latent += C + N;
    g.kept += Lf * (C + N) + Ls * min_d(C + N, W);
    g.moved += Lf * N + Ls * min_d(N, W);
  }
  return emit_costs(a, &g, out, cap, out_n);
}

const rg_stage_cost_t *rg_stage_find(const rg_stage_cost_t *c, size_t n, const char *name) {
  if (!c || !name) return NULL;
  for (size_t i = 0; i < n; i++)
    if (strcmp(c[i].name, name) == 0) return &c[i];
  return NULL;
}
