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

#include "base/status.h"

// Element types. Bytes per element for block formats include their scales:
// fp4 is MXFP4 (32 four-bit values share one 8-bit scale: 4.25 bits).
#define RG_DTYPE_MAP(X)      \
  X(RG_F32, "f32", 4.0)      \
  X(RG_BF16, "bf16", 2.0)    \
  X(RG_F16, "f16", 2.0)      \
  X(RG_FP8, "fp8", 1.0)      \
  X(RG_INT8, "int8", 1.0)    \
  X(RG_FP4, "fp4", 4.25 / 8.0)

typedef enum {
#define RG_X_(e, n, b) e,
  RG_DTYPE_MAP(RG_X_)
#undef RG_X_
  RG_DTYPE_COUNT
} rg_dtype_t;

const char *rg_dtype_name(rg_dtype_t t);
double rg_dtype_bytes(rg_dtype_t t);
// Accepts the names above and Hugging Face spellings (bfloat16, float16,
// float32, float8_e4m3fn, mxfp4). Returns 0 on success.
int rg_dtype_parse(const char *s, rg_dtype_t *out);

typedef struct {
  char name[64];
  char family[32];  // llama, mistral, mixtral, qwen2, qwen3, qwen3_moe,
                    // deepseek_v3, gpt_oss
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
// Finds an entry by name in a filled array, or NULL.
const rg_stage_cost_t *rg_stage_find(const rg_stage_cost_t *c, size_t n,
                                     const char *name);

#endif  // RG_GRAPHS_GRAPHS_H
