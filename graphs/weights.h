// graphs/weights.h — model weights from safetensors and GGUF files, memory
// mapped, under their Hugging Face names; the architecture and the
// hyperparameters an engine needs besides it; writers for both formats; and
// the random-weight test model.
//
// Whatever the file format, a model's tensors are seen the Hugging Face way:
// canonical names ("model.layers.0.self_attn.q_proj.weight"), shapes listed
// outermost first (a Linear weight is (out_features, in_features)), rows laid
// out as transformers lays them out. A GGUF file is translated on open: its
// tensor names are mapped (blk.N.attn_q -> model.layers.N.self_attn.q_proj),
// its innermost-first dims reversed, its 3-D expert tensors split into one 2-D
// view per expert, and for general.architecture "llama" the rows of attn_q
// and attn_k that llama.cpp's converter interleaves for its RoPE are put back
// into Hugging Face (rotate-half) order in a private copy; see
// rg_weights_qk_permute() for the exact permutation.
//
// Invariants after a successful rg_weights_open():
//   - every tensor's bytes lie inside its file's mapping (or a private copy),
//     nbytes == elements x element size (Q8_0: rows x cols/32 x 34), and no
//     two tensors of one file overlap;
//   - names are unique across all files of a sharded checkpoint, shorter than
//     160 bytes, and every dim is >= 0 with a product that fits in int64;
//   - data is aligned to its element size (a copy is made when a file places
//     a tensor otherwise).
// Files are never trusted: any malformed, truncated or hostile input gives a
// status naming the file (and the tensor or key), never a crash, an
// out-of-bounds read or an allocation larger than the file.
//
// Ownership: rg_weights_open() returns an object the caller closes with
// rg_weights_close(); tensors, names, metadata strings and vocab arrays are
// borrowed from it and live until then. rg_weights_arch() returns an arch the
// caller frees with rg_arch_destroy(). Writers copy nothing they are given
// beyond the call.
#ifndef RG_GRAPHS_WEIGHTS_H
#define RG_GRAPHS_WEIGHTS_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "graphs/graphs.h"

// Element types are base/dtype.h's rg_dtype_t (included through graphs.h):
// a tensor of any type in that table opens; the engine runs those with a
// codec (f32, bf16, f16, q8_0).

#define RG_TENSOR_MAX_DIMS 4
#define RG_TENSOR_NAME_MAX 160

typedef struct {
  char name[RG_TENSOR_NAME_MAX];  // Hugging Face name
  rg_dtype_t type;
  int n_dims;
  int64_t shape[RG_TENSOR_MAX_DIMS];  // outermost first; unused dims are 0
  const void *data;                   // row-major (Q8_0: row-major blocks)
  uint64_t nbytes;
  const char *file;  // the file it lives in
} rg_tensor_t;

int64_t rg_tensor_elems(const rg_tensor_t *t);
// Converts elements [first, first + count) of a F32, F16, BF16 or Q8_0
// tensor to float (Q8_0: first and count multiples of 32).
RG_MUST_USE rg_status_t rg_tensor_read_f32(const rg_tensor_t *t, int64_t first, int64_t count,
                                           float *out);

// ----- Opening weights ----------------------------------------------------------

typedef struct rg_weights_s rg_weights_t;

typedef enum { RG_WEIGHTS_SAFETENSORS, RG_WEIGHTS_GGUF } rg_weights_format_t;

// path is one of:
//   - a directory holding config.json and model.safetensors, or
//     model.safetensors.index.json ({"weight_map": {name: shard}}) and its
//     shards (plain file names in that directory);
//   - a .safetensors file (config.json, if any, is looked for beside it);
//   - a .gguf file (any other file starting with the magic "GGUF" too).
// Files are mapped read-only. JSON headers are capped at
// RG_SAFETENSORS_MAX_HEADER bytes.
#define RG_SAFETENSORS_MAX_HEADER (100u << 20)
// At most this many tensors (GGUF expert views included) per checkpoint.
#define RG_WEIGHTS_MAX_TENSORS (1 << 20)
RG_MUST_USE rg_status_t rg_weights_open(const char *path, rg_weights_t **out);
void rg_weights_close(rg_weights_t *w);
// Tells the kernel that this process is done with the pages of its mapped
// files for now (MADV_DONTNEED): they leave its resident set, and a later
// read of a tensor faults them back in from the page cache or the file, so
// tensors stay valid. Called once every tensor has been copied out (weights
// copied into huge pages, or uploaded): otherwise a 2.2 GB model counted
// twice in the process's memory, once copied and once mapped.
void rg_weights_release_pages(const rg_weights_t *w);

rg_weights_format_t rg_weights_format(const rg_weights_t *w);
const char *rg_weights_path(const rg_weights_t *w);  // as given to rg_weights_open
size_t rg_weights_count(const rg_weights_t *w);
// Tensors in file order (shards in index order; GGUF experts in expert order).
const rg_tensor_t *rg_weights_at(const rg_weights_t *w, size_t i);
const rg_tensor_t *rg_weights_find(const rg_weights_t *w, const char *name);
// A string of the file's metadata: safetensors "__metadata__" entries, or
// GGUF string KVs ("general.name"). NULL when absent.
const char *rg_weights_meta_str(const rg_weights_t *w, const char *key);

// Looks up `name`, which must have exactly n_dims dims of this shape and a
// weight type (rg_dtype_is_weight). Errors name the file and tensor:
//   "<file>: tensor 'model.layers.3.mlp.up_proj.weight': shape [1024, 64] but
//    the config implies [128, 64]"
//   "<path>: missing tensor 'lm_head.weight'"
//   "<file>: tensor 'x': dtype I32 where a float or Q8_0 weight is expected"
// out may be NULL.
RG_MUST_USE rg_status_t rg_weights_expect(const rg_weights_t *w, const char *name, int n_dims,
                                          const int64_t *shape, const rg_tensor_t **out);
// Expects every tensor `a` implies (embedding, norms, attention with its
// biases and QK-norms, dense FFN or router and experts, lm_head unless tied)
// with its shape, for the families llama, mistral, mixtral, qwen2, qwen3 and
// qwen3_moe. Extra tensors are allowed, but not a layer at or past
// a->n_layers (a config that undercounts would run a truncated model). The
// first disagreement is the error.
RG_MUST_USE rg_status_t rg_weights_check(const rg_weights_t *w, const rg_arch_t *a);

// The architecture: for safetensors, config.json (rg_model_load); for GGUF,
// its metadata (general.architecture llama, qwen2, qwen3, qwen3moe; llama
// with {arch}.expert_count > 0 is mixtral), checked with rg_arch_validate().
// A GGUF arch is named after general.name, else the file's stem; its
// weight_dtype follows general.file_type (Q8_0 reads as int8).
RG_MUST_USE rg_status_t rg_weights_arch(const rg_weights_t *w, rg_arch_t **out);

// ----- Hyperparameters rg_arch_t lacks --------------------------------------------

#define RG_ROPE_SCALING_MAP(X)          \
  X(RG_ROPE_SCALING_NONE, "none")       \
  X(RG_ROPE_SCALING_LINEAR, "linear")   \
  X(RG_ROPE_SCALING_LLAMA3, "llama3")   \
  X(RG_ROPE_SCALING_YARN, "yarn")       \
  X(RG_ROPE_SCALING_DYNAMIC, "dynamic") \
  X(RG_ROPE_SCALING_FREQS, "freq_factors")

typedef enum {
#define RG_X_(e, n) e,
  RG_ROPE_SCALING_MAP(RG_X_)
#undef RG_X_
      RG_ROPE_SCALING_COUNT
} rg_rope_scaling_kind_t;
const char *rg_rope_scaling_name(rg_rope_scaling_kind_t s);

typedef struct {
  double rms_norm_eps;  // config rms_norm_eps / GGUF layer_norm_rms_epsilon
  double rope_theta;    // base of the rotary frequencies
  rg_rope_scaling_kind_t rope_scaling;
  double rope_factor;            // context extension factor (1 when none)
  double rope_low_freq_factor;   // llama3
  double rope_high_freq_factor;  // llama3
  int64_t rope_original_max;     // original_max_position_embeddings (0: unknown)
  // RG_ROPE_SCALING_FREQS: a GGUF rope_freqs.weight tensor (llama.cpp's form
  // of llama3 scaling): frequency i is divided by freq_factors[i]. Borrowed.
  const float *rope_freq_factors;
  int64_t n_rope_freq_factors;
  int tie_embeddings;
  int norm_topk_prob;  // MoE: renormalise the top-k routing weights to sum 1
  int32_t bos, eos;    // token ids; -1 when unknown
} rg_weights_hparams_t;

// From config.json (safetensors) or GGUF metadata, with the families'
// defaults where a key is absent. Errors carry file:line:col for config.json.
RG_MUST_USE rg_status_t rg_weights_hparams(const rg_weights_t *w, rg_weights_hparams_t *out);
// Rotary inverse frequencies for rotate-half RoPE over rot_dim dims:
// out[i] = rope_theta^(-2i/rot_dim), adjusted by the scaling (linear: / factor;
// llama3: Meta's smooth interpolation between high- and low-frequency bands;
// freq_factors: / factor[i]), for i in [0, rot_dim/2). yarn and dynamic are
// RG_UNIMPLEMENTED.
RG_MUST_USE rg_status_t rg_rope_inv_freq(const rg_weights_hparams_t *hp, int64_t rot_dim,
                                         double *out);

// GGUF tokenizer metadata (tokenizer.ggml.tokens, token_type, merges, pre,
// bos_token_id, eos_token_id), borrowed. token_types/merges/pre may come back
// NULL/0 when the file has none; bos/eos -1. RG_NOT_FOUND when the file has no
// token list (or is not GGUF).
RG_MUST_USE rg_status_t rg_weights_gguf_vocab(const rg_weights_t *w, const char *const **tokens,
                                              const int32_t **token_types, size_t *n_tokens,
                                              const char *const **merges, size_t *n_merges,
                                              const char **pre, int32_t *bos, int32_t *eos);

// ----- llama.cpp's Q/K row permutation ----------------------------------------------
//
// llama.cpp's converter stores attn_q (n_groups = n_heads) and attn_k
// (n_groups = n_kv_heads) with the rows of each head interleaved, for a RoPE
// that rotates adjacent pairs. With head_dim = rows / n_groups and
// half = head_dim / 2, for head h, j in [0, half) and k in {0, 1}:
//
//   gguf_row[h*head_dim + 2*j + k] = hf_row[h*head_dim + k*half + j]
//
// i.e. HF rows (0..half-1 | half..head_dim-1) of a head become pairs
// (0, half), (1, half+1), ... . inverse == 0 applies that (HF -> GGUF),
// inverse != 0 undoes it (GGUF -> HF). A row is row_bytes bytes (a Q8_0 row is
// whole blocks, so this works on quantized rows too). Rows must split into
// n_groups heads of even size. dst and src must not overlap.
RG_MUST_USE rg_status_t rg_weights_qk_permute(void *dst, const void *src, int64_t rows,
                                              uint64_t row_bytes, int64_t n_groups, int inverse);

// ----- Writers --------------------------------------------------------------------

// Produces a tensor's bytes on demand, so a writer never holds a whole model:
// fills dst (t->nbytes bytes) with tensor t's data in t->type.
typedef rg_status_t (*rg_tensor_fill_t)(void *ctx, const rg_tensor_t *t, void *dst);

// Reports progress of a long write: bytes done of total for one file.
typedef void (*rg_write_progress_t)(void *ctx, const char *file, uint64_t done, uint64_t total);

typedef struct {
  // Tensor data: each tensor's own data pointer when non-NULL, else fill().
  rg_tensor_fill_t fill;
  void *fill_ctx;
  rg_write_progress_t progress;  // optional
  void *progress_ctx;
} rg_write_source_t;

// Writes a safetensors file: header with `__metadata__` (n_meta key/value
// string pairs; may be 0) and tensors back to back in the order given (the
// format allows no holes); the header is padded with spaces so the data
// section starts on a multiple of 8. The file
// is written to "<path>.partial" and renamed, so an interrupted write never
// leaves a half file under path. Names, shapes and types are checked first.
RG_MUST_USE rg_status_t rg_safetensors_write(const char *path, const rg_tensor_t *tensors, size_t n,
                                             const char *const *meta_kv, size_t n_meta,
                                             const rg_write_source_t *src);

// What goes into a GGUF file's metadata besides the tensors.
typedef struct {
  const rg_arch_t *arch;           // required: llama/mistral/mixtral/qwen2/qwen3/qwen3_moe
  const rg_weights_hparams_t *hp;  // required
  const char *name;                // general.name (default: arch->name)
  // Tokenizer (written when tokens != NULL). The token list is padded with
  // "[PAD<id>]" tokens of type 5 (unused) up to arch->vocab, as llama.cpp's
  // converter does, so the embedding rows and the token list agree.
  const char *const *tokens;
  const int32_t *token_types;  // GGUF token types; NULL: all 1 (normal)
  size_t n_tokens;
  const char *const *merges;
  size_t n_merges;
  const char *pre;  // tokenizer.ggml.pre; NULL: "default"
  // RG_DTYPE_COUNT: every tensor keeps its type; RG_Q8_0: 2-D matrices whose
  // rows are whole blocks (embedding, projections, experts, lm_head) are
  // quantized, norms, biases and routers keep their type.
  rg_dtype_t matrix_type;
} rg_gguf_info_t;

// Writes a GGUF v3 file from tensors under their Hugging Face names and
// shapes: names mapped to llama.cpp's, dims reversed, per-expert tensors
// merged into 3-D ffn_*_exps, attn_q/attn_k rows permuted for "llama"
// (llama, mistral, mixtral), llama3 rope scaling also stored as
// rope_freqs.weight. Tensors are aligned to general.alignment = 32. Written to
// "<path>.partial" and renamed.
RG_MUST_USE rg_status_t rg_gguf_write(const char *path, const rg_gguf_info_t *info,
                                      const rg_tensor_t *tensors, size_t n,
                                      const rg_write_source_t *src);

// ----- The random-weight test model --------------------------------------------------

typedef enum { RG_TESTMODEL_LLAMA, RG_TESTMODEL_MOE } rg_testmodel_arch_t;
typedef enum { RG_TESTMODEL_TINY, RG_TESTMODEL_1B } rg_testmodel_size_t;

typedef struct {
  rg_testmodel_arch_t arch;
  rg_testmodel_size_t size;
  uint64_t seed;
  rg_dtype_t dtype;              // F32, F16 or BF16 (safetensors and GGUF "same")
  rg_dtype_t gguf_type;          // RG_DTYPE_COUNT ("same") or RG_Q8_0
  int force;                     // write into a non-empty directory
  rg_write_progress_t progress;  // optional
  void *progress_ctx;
} rg_testmodel_opts_t;

// Summary of what rg_testmodel_write() wrote.
typedef struct {
  double params;
  int64_t vocab, n_tokens;  // config vocab_size (padded) and tokenizer size
  uint64_t safetensors_bytes, gguf_bytes;
} rg_testmodel_info_t;

// Writes dir/config.json, dir/tokenizer.json, dir/model.safetensors and
// dir/model.gguf: a Hugging Face model (LlamaForCausalLM with llama3 rope
// scaling, or MixtralForCausalLM) with seeded random weights, and the same
// weights in GGUF. Creates dir when missing; refuses a non-empty dir unless
// force. Each file is written under a temporary name and renamed.
// The weights: a xoshiro256** stream per tensor, seeded by splitmix64 of
// (seed XOR FNV-1a-64(tensor name)), so a tensor's values depend only on the
// seed and its name. Each value is an Irwin-Hall(4) sum of four 16-bit
// uniforms, centred and scaled to unit variance (bounded by +-2*sqrt(3)),
// times 1/sqrt(fan_in) for matrices (embedding rows: 1), and 1 + 0.05 x that
// for norm weights. info may be NULL.
RG_MUST_USE rg_status_t rg_testmodel_write(const char *dir, const rg_testmodel_opts_t *o,
                                           rg_testmodel_info_t *info);

// The shape of the test model o describes, without writing it: what
// rg_model_load would read back from its config.json, for code that needs
// the test model's shapes (`ridge profile` sweeps matmuls at the 1b's)
// without its files. vocab is the 1b's 32768; the tiny's vocabulary is
// decided by the tokenizer it is written with, so it is 0 there.
void rg_testmodel_arch(const rg_testmodel_opts_t *o, rg_arch_t *out);

// The test model o describes (seed 0, o->force ignored) in the user's cache,
// $XDG_CACHE_HOME/ridge or ~/.cache/ridge (else /tmp/ridge-cache), as
// testmodel-<arch>-<size>-<ridge version> (bf16 weights, the GGUF the
// same; other types add theirs after the size, testmodel-llama-1b-f16-...,
// testmodel-llama-tiny-bf16-gguf-q8_0-...): written there the first time,
// reused after. *out_dir receives the directory; *out_written is set when
// this call wrote it.
RG_MUST_USE rg_status_t rg_testmodel_cached(const rg_testmodel_opts_t *o, char *out_dir, size_t len,
                                            int *out_written);

#endif  // RG_GRAPHS_WEIGHTS_H
