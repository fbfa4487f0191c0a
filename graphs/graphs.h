// graphs/graphs.h — model architectures and their stage graph.
//
// An architecture (rg_arch_t) is read from ridge's model YAML or from a
// Hugging Face config.json. From it, rg_stage_costs() breaks one forward step
// of a batch into the stages of DESIGN.md (embed, attention, ffn or moe,
// lm_head, and the moves kv_transfer, kv_offload, kv_reload, activation) and
// reports for each its FLOPs and the bytes it reads and writes (weights, KV,
// activations), hence its arithmetic intensity. This module never touches a
// device.
//
// Ownership: rg_model_load() returns an arch the caller frees with
// rg_arch_destroy(); rg_stage_costs() writes into caller-provided storage.
#ifndef RG_GRAPHS_GRAPHS_H
#define RG_GRAPHS_GRAPHS_H

#include <stddef.h>
#include <stdint.h>

#include "base/dtype.h"
#include "base/status.h"

// Model families and what each implies, one row per family, so no file
// compares family names as strings. Columns: enum, Hugging Face model_type,
// its `architectures` class, GGUF general.architecture (NULL: ridge reads
// and writes no GGUF of it), chat template (NULL: none known), traits.
#define RG_FAM_RUNS 0x01          // the engine runs it (runtime/)
#define RG_FAM_QKV_BIAS 0x02      // q/k/v projections carry biases (Qwen2)
#define RG_FAM_QK_NORM 0x04       // RMS norm on q and k per head (Qwen3)
#define RG_FAM_MIXTRAL_MOE 0x08   // experts under block_sparse_moe, w1/w3/w2
#define RG_FAM_GGUF_QK_PERM 0x10  // GGUF stores attn_q/attn_k rows interleaved
#define RG_FAM_MLA 0x20           // multi-head latent attention (DeepSeek)
#define RG_FAM_ROUTER_BIAS 0x40   // the MoE router carries a bias
#define RG_FAM_EXPERT_BIAS 0x80   // experts carry biases (gpt-oss)
#define RG_FAM_SINKS 0x100        // per-head attention sink logits (gpt-oss)
// clang-format off
#define RG_FAMILY_MAP(X)                                                                       \
  X(RG_FAMILY_LLAMA,       "llama",       "LlamaForCausalLM",       "llama",    "llama3",     \
    RG_FAM_RUNS | RG_FAM_GGUF_QK_PERM)                                                          \
  X(RG_FAMILY_MISTRAL,     "mistral",     "MistralForCausalLM",     "llama",    "mistral",    \
    RG_FAM_RUNS | RG_FAM_GGUF_QK_PERM)                                                          \
  X(RG_FAMILY_MIXTRAL,     "mixtral",     "MixtralForCausalLM",     "llama",    "mistral",    \
    RG_FAM_RUNS | RG_FAM_GGUF_QK_PERM | RG_FAM_MIXTRAL_MOE)                                     \
  X(RG_FAMILY_QWEN2,       "qwen2",       "Qwen2ForCausalLM",       "qwen2",    "chatml",     \
    RG_FAM_RUNS | RG_FAM_QKV_BIAS)                                                              \
  X(RG_FAMILY_QWEN3,       "qwen3",       "Qwen3ForCausalLM",       "qwen3",    "chatml",     \
    RG_FAM_RUNS | RG_FAM_QK_NORM)                                                               \
  X(RG_FAMILY_QWEN3_MOE,   "qwen3_moe",   "Qwen3MoeForCausalLM",    "qwen3moe", "chatml",     \
    RG_FAM_RUNS | RG_FAM_QK_NORM)                                                               \
  X(RG_FAMILY_DEEPSEEK_V2, "deepseek_v2", "DeepseekV2ForCausalLM",  NULL,       NULL,         \
    RG_FAM_MLA)                                                                                 \
  X(RG_FAMILY_DEEPSEEK_V3, "deepseek_v3", "DeepseekV3ForCausalLM",  NULL,       NULL,         \
    RG_FAM_MLA | RG_FAM_ROUTER_BIAS)                                                            \
  X(RG_FAMILY_GPT_OSS,     "gpt_oss",     "GptOssForCausalLM",      NULL,       NULL,         \
    RG_FAM_ROUTER_BIAS | RG_FAM_EXPERT_BIAS | RG_FAM_SINKS)

typedef enum {
#define RG_X_(e, mt, cls, gg, chat, tr) e,
  RG_FAMILY_MAP(RG_X_)
#undef RG_X_
  RG_FAMILY_COUNT
} rg_family_t;
// clang-format on

typedef struct {
  const char *model_type;     // "qwen3_moe"
  const char *class_name;     // "Qwen3MoeForCausalLM"
  const char *gguf_arch;      // "qwen3moe", or NULL
  const char *chat_template;  // "chatml", or NULL
  unsigned traits;            // RG_FAM_*
} rg_family_info_t;

// The row for f; a row of "?" and NULLs outside the enum (never NULL).
const rg_family_info_t *rg_family_info(rg_family_t f);
const char *rg_family_name(rg_family_t f);  // model_type
int rg_family_has(rg_family_t f, unsigned trait);
// Lookups by model_type, class name and GGUF architecture; 0 on success.
// GGUF "llama" is ambiguous (llama, mistral and mixtral all write it):
// rg_family_from_gguf gives llama, and the loader picks mixtral when the
// file has experts.
int rg_family_from_model_type(const char *s, rg_family_t *out);
int rg_family_from_class(const char *s, rg_family_t *out);
int rg_family_from_gguf(const char *s, rg_family_t *out);
// "llama, mistral, ..." of the families with every bit of `traits` (0: all),
// for messages.
const char *rg_family_list(unsigned traits, char *buf, size_t len);

typedef struct {
  char name[64];
  rg_family_t family;  // see RG_FAMILY_MAP
  int64_t vocab;
  int64_t d_model;     // hidden_size
  int64_t n_layers;    // num_hidden_layers
  int64_t n_heads;     // num_attention_heads
  int64_t n_kv_heads;  // num_key_value_heads (== n_heads for MHA, 1 for MQA)
  int64_t head_dim;
  int64_t d_ff;        // dense FFN intermediate size (SwiGLU: 3 matrices)
  int tie_embeddings;
  int qkv_bias;        // Qwen2, gpt-oss
  int o_bias;          // gpt-oss
  int qk_norm;         // Qwen3
  // Multi-head latent attention (DeepSeek V2/V3). mla == 0: plain GQA.
  int mla;
  int64_t q_lora_rank;  // 0: no low-rank query
  int64_t kv_lora_rank;
  int64_t qk_nope_head_dim;
  int64_t qk_rope_head_dim;
  int64_t v_head_dim;
  // Mixture of experts. n_experts == 0: dense.
  int64_t n_experts;         // routed experts per MoE layer
  int64_t n_experts_per_tok; // top-k
  int64_t n_shared_experts;  // always-on experts (DeepSeek)
  int64_t d_ff_expert;       // intermediate size of one routed expert
  int64_t first_k_dense;     // leading layers that are dense (DeepSeek)
  int64_t moe_layer_step;    // every n-th layer is MoE (Qwen decoder_sparse_step)
  int expert_bias;           // gpt-oss experts carry biases
  int router_bias;           // gpt-oss router carries a bias
  // Attention window: layers with a sliding window keep at most `window`
  // tokens of KV (gpt-oss alternates sliding and full layers).
  int64_t sliding_window;
  int64_t n_sliding_layers;
  int attn_sinks;            // gpt-oss per-head sink logits
  int64_t max_context;
  double rope_theta;
  rg_dtype_t weight_dtype;   // as published (torch_dtype / quantization)
  // Published figures for cross-checking (0 when unknown).
  double published_params;
  double published_active_params;
} rg_arch_t;

// Loads NAME (looked up as configs/models/NAME.yaml under the config
// directory), a path to a model YAML, or a path to a Hugging Face
// config.json. Errors carry file:line:col.
RG_MUST_USE rg_status_t rg_model_load(const char *name_or_path,
                                      const char *config_dir,
                                      rg_arch_t **out_arch);
void rg_arch_destroy(rg_arch_t *arch);
// Checks an arch read from anywhere for absurd or inconsistent fields.
RG_MUST_USE rg_status_t rg_arch_validate(const rg_arch_t *arch);

int64_t rg_arch_n_moe_layers(const rg_arch_t *a);
int rg_arch_layer_is_moe(const rg_arch_t *a, int64_t layer);
double rg_arch_params(const rg_arch_t *a);         // total parameters
double rg_arch_active_params(const rg_arch_t *a);  // per token
double rg_arch_weight_bytes(const rg_arch_t *a, rg_dtype_t t);
// KV bytes one token adds across all layers that keep full-length KV.
double rg_arch_kv_bytes_per_token(const rg_arch_t *a, rg_dtype_t kv);
// Activation bytes of one token's hidden state (what crosses attention->FFN).
double rg_arch_hidden_bytes(const rg_arch_t *a, rg_dtype_t act);

typedef enum { RG_PHASE_PREFILL, RG_PHASE_DECODE } rg_phase_t;
const char *rg_phase_name(rg_phase_t p);

#define RG_STAGE_KIND_MAP(X)            \
  X(RG_STAGE_EMBED, "embed")            \
  X(RG_STAGE_ATTENTION, "attention")    \
  X(RG_STAGE_FFN, "ffn")                \
  X(RG_STAGE_MOE, "moe")                \
  X(RG_STAGE_LM_HEAD, "lm_head")        \
  X(RG_STAGE_KV_TRANSFER, "kv_transfer") \
  X(RG_STAGE_KV_OFFLOAD, "kv_offload")  \
  X(RG_STAGE_KV_RELOAD, "kv_reload")    \
  X(RG_STAGE_ACTIVATION, "activation")

typedef enum {
#define RG_X_(e, n) e,
  RG_STAGE_KIND_MAP(RG_X_)
#undef RG_X_
  RG_STAGE_KIND_COUNT
} rg_stage_kind_t;
const char *rg_stage_kind_name(rg_stage_kind_t k);

// One step of a batch: `batch` sequences each adding `new_tokens` tokens on
// top of `context` tokens already in their KV cache. Decode: new_tokens = 1.
typedef struct {
  rg_phase_t phase;
  int64_t batch;
  int64_t new_tokens;
  int64_t context;
  rg_dtype_t weight_dtype;
  rg_dtype_t kv_dtype;
  rg_dtype_t act_dtype;
} rg_shape_t;

// Costs of one stage for one step, summed over every layer it covers.
// Sub-parts are reported as their own entries, named "<stage>.<part>"
// (attention.proj, attention.core, moe.router, moe.experts, moe.shared), after
// the whole-stage entry, whose figures are their sum.
typedef struct {
  rg_stage_kind_t kind;
  char name[32];
  int is_part;              // a sub-part of the previous whole-stage entry
  int64_t layers;           // how many layers this entry sums over
  double flops;
  double weight_bytes;      // weights read this step
  double kv_read_bytes;
  double kv_write_bytes;
  double act_bytes;         // activations read + written
  double bytes;             // all of the above
  double intensity;         // flops / bytes (0 when bytes == 0)
  double resident_weight_bytes;  // weights this stage keeps in memory
} rg_stage_cost_t;

#define RG_MAX_STAGE_COSTS 24

// Fills out[0..*out_n). The moves (kv_transfer, kv_offload, kv_reload,
// activation) report bytes only: kv_transfer the KV the step's prefill wrote,
// kv_offload/kv_reload the KV of all `context + new_tokens` tokens of the
// batch, activation the hidden states crossing attention<->FFN in both
// directions for every layer.
RG_MUST_USE rg_status_t rg_stage_costs(const rg_arch_t *a, const rg_shape_t *s,
                                       rg_stage_cost_t *out, size_t cap,
                                       size_t *out_n);
// One step of a real batch, as an engine runs it: every sequence adds its
// own number of tokens to its own cached context, and a stage instance may
// hold a range of layers and a share of the experts. Costs the step with the
// very formulas rg_stage_costs uses (a batch of equal sequences over all
// layers gives the same figures), so the engine's counters and the
// planner's predictions compare term by term.
typedef struct {
  int64_t n_new;    // tokens this sequence adds (>= 1)
  int64_t context;  // tokens already in its KV cache
} rg_seq_step_t;

typedef struct {
  const rg_seq_step_t *seqs;
  size_t n_seqs;
  int64_t n_logits;                // rows lm_head computes
  int64_t layer_begin, layer_end;  // [begin, end); end 0 = all layers
  double expert_fraction;          // share of routed experts held; 0 = all
  rg_dtype_t weight_dtype, kv_dtype, act_dtype;
} rg_batch_shape_t;

// Fills out[0..*out_n) like rg_stage_costs: the entries of the stages over
// the given layers (embed and lm_head always; they hold no layers).
RG_MUST_USE rg_status_t rg_stage_costs_batch(const rg_arch_t *a, const rg_batch_shape_t *b,
                                             rg_stage_cost_t *out, size_t cap, size_t *out_n);
// Finds an entry by name in a filled array, or NULL.
const rg_stage_cost_t *rg_stage_find(const rg_stage_cost_t *c, size_t n,
                                     const char *name);

#endif  // RG_GRAPHS_GRAPHS_H
