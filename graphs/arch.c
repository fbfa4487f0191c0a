// graphs/arch.c — what an architecture is made of: dtypes, parameter counts,
// weight and KV sizes, and the checks that reject absurd architectures.
//
// Parameter counting follows the Hugging Face module layout of each family,
// so the totals match what `sum(p.numel())` reports for the checkpoint:
//
//   embed      vocab x d_model
//   per layer  input norm (d_model) + attention projections (+ biases,
//              QK-norms, MLA low-rank norms, attention sinks)
//              post-attention norm (d_model) + dense FFN (3 x d_model x d_ff)
//              or router (d_model x n_experts, + bias) + routed and shared
//              experts (3 x d_model x d_ff_expert each, + biases)
//   lm_head    vocab x d_model unless tied, + the final norm (d_model)
//
// DeepSeek V3's multi-token-prediction module (num_nextn_predict_layers) is
// not counted: it is an optional speculative head, and the published 671B
// total leaves it out too.
//
// "Active" parameters are those one token's matmuls use: everything above
// except the routed experts it was not sent to and the (untied) embedding
// table, of which it reads one row. OpenAI's gpt-oss card and DeepSeek count
// it so; Mistral and Qwen include the table in their active figures
// (tests/test_graphs.c shows both conventions against the published numbers).
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/yaml.h"
#include "graphs/graphs.h"

// Internals shared with stages.c and model_load.c. graphs/ has no private
// header (graphs.h is the public contract), so each user repeats these
// prototypes; keep them in step.
double rg__attn_layer_params(const rg_arch_t *a);
double rg__mla_kv_b_params(const rg_arch_t *a);
double rg__ffn_layer_params(const rg_arch_t *a);
double rg__expert_params(const rg_arch_t *a);
double rg__router_layer_params(const rg_arch_t *a);
double rg__kv_elems_per_token_layer(const rg_arch_t *a);
rg_status_t rg__arch_check(const rg_arch_t *a, const rg_node_t *cfg);


// ----- names of phases and stage kinds ---------------------------------------

const char *rg_phase_name(rg_phase_t p) {
  switch (p) {
    case RG_PHASE_PREFILL:
      return "prefill";
    case RG_PHASE_DECODE:
      return "decode";
  }
  return "?";
}

static const char *const stage_kind_names[] = {
#define RG_X_(e, n) n,
    RG_STAGE_KIND_MAP(RG_X_)
#undef RG_X_
};
_Static_assert(sizeof(stage_kind_names) / sizeof(stage_kind_names[0]) == RG_STAGE_KIND_COUNT,
               "stage kind name table out of step with RG_STAGE_KIND_MAP");

const char *rg_stage_kind_name(rg_stage_kind_t k) {
  return (unsigned)k < RG_STAGE_KIND_COUNT ? stage_kind_names[k] : "?";
}

// ----- layer structure --------------------------------------------------------

// Qwen's rule (decoder_sparse_step): layer i is MoE when (i + 1) % step == 0.
// DeepSeek's first_k_dense_replace makes the first k layers dense. With step 1
// and k 0 (Mixtral, gpt-oss) every layer is MoE.
int rg_arch_layer_is_moe(const rg_arch_t *a, int64_t layer) {
  if (!a || a->n_experts <= 0 || layer < 0 || layer >= a->n_layers) return 0;
  if (layer < a->first_k_dense) return 0;
  int64_t step = a->moe_layer_step > 0 ? a->moe_layer_step : 1;
  return (layer + 1) % step == 0;
}

int64_t rg_arch_n_moe_layers(const rg_arch_t *a) {
  if (!a || a->n_experts <= 0 || a->n_layers <= 0) return 0;
  int64_t n = 0;
  for (int64_t i = 0; i < a->n_layers; i++) n += rg_arch_layer_is_moe(a, i);
  return n;
}

// ----- parameter counts -------------------------------------------------------

// One layer's attention block: its input norm, the projections with their
// biases, and the small per-head extras.
double rg__attn_layer_params(const rg_arch_t *a) {
  double d = (double)a->d_model, h = (double)a->n_heads;
  double p = d;  // input_layernorm
  if (a->mla) {
    double qk = (double)(a->qk_nope_head_dim + a->qk_rope_head_dim);
    double kvl = (double)a->kv_lora_rank, rope = (double)a->qk_rope_head_dim;
    if (a->q_lora_rank > 0) {
      double ql = (double)a->q_lora_rank;
      p += d * ql + ql + ql * h * qk;  // q_a_proj, q_a_layernorm, q_b_proj
    } else {
      p += d * h * qk;  // q_proj
    }
    p += d * (kvl + rope) + kvl;         // kv_a_proj_with_mqa, kv_a_layernorm
    p += rg__mla_kv_b_params(a);         // kv_b_proj
    p += h * (double)a->v_head_dim * d;  // o_proj
  } else {
    double hd = (double)a->head_dim, kv = (double)a->n_kv_heads;
    p += d * h * hd + 2.0 * d * kv * hd + h * hd * d;  // q, k, v, o
    if (a->qkv_bias) p += h * hd + 2.0 * kv * hd;
    if (a->o_bias) p += d;
    if (a->qk_norm) p += 2.0 * hd;  // q_norm, k_norm over head_dim
  }
  if (a->attn_sinks) p += h;  // one sink logit per head
  return p;
}

// MLA's kv_b_proj: the latent back up to per-head K (nope part) and V. In
// the weight-absorbed decode form these same weights are folded into the
// query and output sides instead.
double rg__mla_kv_b_params(const rg_arch_t *a) {
  if (!a->mla) return 0.0;
  return (double)a->kv_lora_rank * (double)a->n_heads *
         (double)(a->qk_nope_head_dim + a->v_head_dim);
}

// A dense layer's FFN with its post-attention norm: SwiGLU gate, up, down.
double rg__ffn_layer_params(const rg_arch_t *a) {
  double d = (double)a->d_model;
  return d + 3.0 * d * (double)a->d_ff;
}

// One routed (or shared) expert: SwiGLU, plus gpt-oss's biases on the fused
// gate_up (2 x d_ff_expert) and down (d_model) projections.
double rg__expert_params(const rg_arch_t *a) {
  double d = (double)a->d_model, f = (double)a->d_ff_expert;
  double p = 3.0 * d * f;
  if (a->expert_bias) p += 2.0 * f + d;
  return p;
}

// The router of one MoE layer, with that layer's post-attention norm. The
// bias is gpt-oss's router bias or DeepSeek V3's e_score_correction_bias.
double rg__router_layer_params(const rg_arch_t *a) {
  double d = (double)a->d_model, e = (double)a->n_experts;
  return d + d * e + (a->router_bias ? e : 0.0);
}

// KV elements one token stores in one layer: K and V per KV head for GQA,
// the compressed latent plus the shared RoPE key for MLA.
double rg__kv_elems_per_token_layer(const rg_arch_t *a) {
  if (a->mla) return (double)(a->kv_lora_rank + a->qk_rope_head_dim);
  return 2.0 * (double)a->n_kv_heads * (double)a->head_dim;
}

// Parameters outside the layers: embedding table, final norm, lm_head.
static double outer_params(const rg_arch_t *a) {
  double vd = (double)a->vocab * (double)a->d_model;
  return vd + (double)a->d_model + (a->tie_embeddings ? 0.0 : vd);
}

static double layers_params(const rg_arch_t *a, int active) {
  int64_t n_moe = rg_arch_n_moe_layers(a);
  int64_t n_dense = a->n_layers - n_moe;
  double per_moe = rg__router_layer_params(a) +
                   (double)((active ? a->n_experts_per_tok : a->n_experts) + a->n_shared_experts) *
                       rg__expert_params(a);
  return (double)a->n_layers * rg__attn_layer_params(a) +
         (double)n_dense * rg__ffn_layer_params(a) + (double)n_moe * per_moe;
}

double rg_arch_params(const rg_arch_t *a) {
  return a ? outer_params(a) + layers_params(a, 0) : 0.0;
}

// A token reads one row of the embedding table, so the table is not active
// (an untied one; tied, it is the lm_head matrix every token multiplies).
// This is gpt-oss's and DeepSeek's convention ("37B activated").
double rg_arch_active_params(const rg_arch_t *a) {
  if (!a) return 0.0;
  double embed = a->tie_embeddings ? 0.0 : (double)a->vocab * (double)a->d_model;
  return outer_params(a) - embed + layers_params(a, 1);
}

double rg_arch_weight_bytes(const rg_arch_t *a, rg_dtype_t t) {
  return rg_arch_params(a) * rg_dtype_bytes(t);
}

// Sliding-window layers are left out: they hold at most `sliding_window`
// tokens whatever the context, so their KV is a constant per sequence, not a
// per-token cost (rg_stage_costs() still counts it for the moves).
double rg_arch_kv_bytes_per_token(const rg_arch_t *a, rg_dtype_t kv) {
  if (!a) return 0.0;
  double full_layers = (double)(a->n_layers - a->n_sliding_layers);
  return full_layers * rg__kv_elems_per_token_layer(a) * rg_dtype_bytes(kv);
}

double rg_arch_hidden_bytes(const rg_arch_t *a, rg_dtype_t act) {
  return a ? (double)a->d_model * rg_dtype_bytes(act) : 0.0;
}

// ----- validation -------------------------------------------------------------

// Where a field came from: its Hugging Face key names (several families
// spell some fields differently). The first listed is the name used in
// messages when the arch did not come from a config.
static const char *const k_vocab[] = {"vocab_size", NULL};
static const char *const k_d_model[] = {"hidden_size", NULL};
static const char *const k_layers[] = {"num_hidden_layers", NULL};
static const char *const k_heads[] = {"num_attention_heads", NULL};
static const char *const k_kv_heads[] = {"num_key_value_heads", NULL};
static const char *const k_head_dim[] = {"head_dim", NULL};
static const char *const k_d_ff[] = {"intermediate_size", NULL};
static const char *const k_experts[] = {"num_local_experts", "num_experts", "n_routed_experts",
                                        NULL};
static const char *const k_top_k[] = {"num_experts_per_tok", NULL};
static const char *const k_shared[] = {"n_shared_experts", NULL};
static const char *const k_d_ff_expert[] = {"moe_intermediate_size", "intermediate_size", NULL};
static const char *const k_first_dense[] = {"first_k_dense_replace", NULL};
static const char *const k_step[] = {"decoder_sparse_step", NULL};
static const char *const k_q_lora[] = {"q_lora_rank", NULL};
static const char *const k_kv_lora[] = {"kv_lora_rank", NULL};
static const char *const k_nope[] = {"qk_nope_head_dim", NULL};
static const char *const k_rope[] = {"qk_rope_head_dim", NULL};
static const char *const k_v_head[] = {"v_head_dim", NULL};
static const char *const k_window[] = {"sliding_window", NULL};
static const char *const k_layer_types[] = {"layer_types", "sliding_window", NULL};
static const char *const k_max_ctx[] = {"max_position_embeddings", NULL};
static const char *const k_rope_theta[] = {"rope_theta", NULL};

// Builds the error for a field: positioned at the field's value when the
// arch came from a config node, named by the key actually used there.
static rg_status_t field_error(const rg_arch_t *a, const rg_node_t *cfg, const char *const *keys,
                               const char *fmt, ...) RG_PRINTF(4, 5);
static rg_status_t field_error(const rg_arch_t *a, const rg_node_t *cfg, const char *const *keys,
                               const char *fmt, ...) {
  const char *key = keys[0];
  const rg_pos_t *pos = NULL;
  for (size_t i = 0; cfg && keys[i]; i++) {
    const rg_node_t *n = rg_node_get(cfg, keys[i]);
    if (n) {
      key = keys[i];
      pos = &n->pos;
      break;
    }
  }
  char why[384];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof(why), fmt, ap);
  va_end(ap);
  if (!pos && cfg) pos = &cfg->pos;
  return rg_status_at(RG_INVALID_ARGUMENT, pos, "model '%s': %s %s", a->name[0] ? a->name : "?",
                      key, why);
}

// Checks one integer field lies in [lo, hi].
#define RG_CHECK_RANGE_(field, keys, lo, hi)                                            \
  do {                                                                                  \
    if (a->field < (lo) || a->field > (hi))                                             \
      return field_error(a, cfg, keys, "= %lld is out of range; expected %lld to %lld", \
                         (long long)a->field, (long long)(lo), (long long)(hi));        \
  } while (0)

rg_status_t rg__arch_check(const rg_arch_t *a, const rg_node_t *cfg) {
  if (!a) return rg_status_make(RG_INVALID_ARGUMENT, "no architecture given");
  // Bounds are far beyond any published model (Llama 3.1 405B: 126 layers,
  // d_model 16384; the largest vocabularies are ~260k) yet small enough that
  // every product below stays exact in a double.
  RG_CHECK_RANGE_(vocab, k_vocab, 1, 10000000);
  RG_CHECK_RANGE_(d_model, k_d_model, 1, 1 << 20);
  RG_CHECK_RANGE_(n_layers, k_layers, 1, 10000);
  RG_CHECK_RANGE_(n_heads, k_heads, 1, 1 << 16);
  RG_CHECK_RANGE_(n_kv_heads, k_kv_heads, 1, a->n_heads);
  if (a->n_heads % a->n_kv_heads)
    return field_error(a, cfg, k_kv_heads,
                       "= %lld does not divide num_attention_heads = %lld; grouped-query "
                       "attention shares each KV head among a whole number of query heads",
                       (long long)a->n_kv_heads, (long long)a->n_heads);
  RG_CHECK_RANGE_(head_dim, k_head_dim, 1, 1 << 14);

  if (a->mla) {
    RG_CHECK_RANGE_(q_lora_rank, k_q_lora, 0, 1 << 16);
    RG_CHECK_RANGE_(kv_lora_rank, k_kv_lora, 1, 1 << 16);
    RG_CHECK_RANGE_(qk_nope_head_dim, k_nope, 1, 1 << 14);
    RG_CHECK_RANGE_(qk_rope_head_dim, k_rope, 1, 1 << 14);
    RG_CHECK_RANGE_(v_head_dim, k_v_head, 1, 1 << 14);
  }
  // Query width against the model width. Published models sit between 1x
  // (Llama) and a few x (gpt-oss 1.4x, Qwen3-30B-A3B 2x, DeepSeek V3's MLA
  // query 3.4x); a factor of 8 either way means a wrong field.
  double qdim = (double)a->n_heads *
                (double)(a->mla ? a->qk_nope_head_dim + a->qk_rope_head_dim : a->head_dim);
  double ratio = qdim / (double)a->d_model;
  if (ratio > 8.0 || ratio < 1.0 / 8.0)
    return field_error(a, cfg, a->mla ? k_nope : k_head_dim,
                       "x num_attention_heads = %.0f is %.3gx hidden_size = %lld; expected "
                       "within 8x of it",
                       qdim, ratio, (long long)a->d_model);

  RG_CHECK_RANGE_(n_experts, k_experts, 0, 1 << 16);
  if (a->n_experts > 0) {
    if (a->n_experts_per_tok < 1 || a->n_experts_per_tok > a->n_experts)
      return field_error(a, cfg, k_top_k,
                         "= %lld is out of range; a token picks 1 to %lld experts "
                         "(the number of routed experts)",
                         (long long)a->n_experts_per_tok, (long long)a->n_experts);
    RG_CHECK_RANGE_(d_ff_expert, k_d_ff_expert, 1, 1 << 24);
    RG_CHECK_RANGE_(n_shared_experts, k_shared, 0, 1024);
    RG_CHECK_RANGE_(first_k_dense, k_first_dense, 0, a->n_layers);
    RG_CHECK_RANGE_(moe_layer_step, k_step, 1, a->n_layers);
    if (rg_arch_n_moe_layers(a) == 0)
      return field_error(a, cfg, k_first_dense,
                         "= %lld with decoder_sparse_step = %lld leaves no MoE layer among %lld",
                         (long long)a->first_k_dense, (long long)a->moe_layer_step,
                         (long long)a->n_layers);
  }
  if (rg_arch_n_moe_layers(a) < a->n_layers) RG_CHECK_RANGE_(d_ff, k_d_ff, 1, 1 << 24);

  RG_CHECK_RANGE_(sliding_window, k_window, 0, 1LL << 31);
  RG_CHECK_RANGE_(n_sliding_layers, k_layer_types, 0, a->n_layers);
  if (a->n_sliding_layers > 0 && a->sliding_window < 1)
    return field_error(a, cfg, k_window,
                       "must be at least 1 when %lld layers use sliding-window attention",
                       (long long)a->n_sliding_layers);
  RG_CHECK_RANGE_(max_context, k_max_ctx, 0, 1LL << 32);
  // 0 means "not given" (the family's default applies); any other value is
  // the rotary base, and a base of 1 or less gives every dimension the same
  // angle.
  if (!isfinite(a->rope_theta) || a->rope_theta < 0 || (a->rope_theta > 0 && a->rope_theta <= 1))
    return field_error(a, cfg, k_rope_theta,
                       "= %g is not a rotary base; expected a number greater than 1, or 0 for "
                       "the family's default",
                       a->rope_theta);
  if ((unsigned)a->weight_dtype >= RG_DTYPE_COUNT)
    return rg_status_make(RG_INVALID_ARGUMENT, "model '%s': weight dtype %d is not a known dtype",
                          a->name, (int)a->weight_dtype);
  if (!(a->published_params >= 0) || !(a->published_active_params >= 0))
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "model '%s': published parameter counts must be non-negative", a->name);
  return NULL;
}

rg_status_t rg_arch_validate(const rg_arch_t *a) {
  return rg__arch_check(a, NULL);
}
