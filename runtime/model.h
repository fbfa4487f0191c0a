// runtime/model.h — a model opened for running: its mapped weights, its
// architecture and hyperparameters, its tokenizer, and what every stage
// instance shares (the RoPE table, the MoE routing mode).
//
// A model is opened once per process; stage instances (runtime/stage.h) each
// take from it only the tensors of the stage they run. Opening checks that
// ridge runs the family and that the files hold every tensor the
// architecture implies with its shape, so a stage never meets a missing or
// misshapen tensor.
//
// Ownership: rg_model_open returns a model the caller closes after every
// stage made from it is destroyed; accessors return borrowed pointers.
#ifndef RG_RUNTIME_MODEL_H
#define RG_RUNTIME_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "graphs/graphs.h"
#include "graphs/tokenizer.h"
#include "graphs/weights.h"
#include "ops/ops.h"

typedef struct rg_model_s rg_model_t;

// path: a Hugging Face directory (config.json, *.safetensors, tokenizer.json)
// or a GGUF file.
RG_MUST_USE rg_status_t rg_model_open(const char *path, rg_model_t **out);
void rg_model_close(rg_model_t *m);

const char *rg_model_path(const rg_model_t *m);
const rg_arch_t *rg_model_arch(const rg_model_t *m);
const rg_weights_hparams_t *rg_model_hparams(const rg_model_t *m);
const rg_weights_t *rg_model_weights(const rg_model_t *m);
// The tokenizer beside the weights, or NULL when the model ships none.
const rg_tokenizer_t *rg_model_tokenizer(const rg_model_t *m);
// The rotary inverse frequencies (head_dim / 2 floats), scaling applied.
const float *rg_model_rope_inv_freq(const rg_model_t *m);
rg_moe_mode_t rg_model_moe_mode(const rg_model_t *m);
// The type of the model's matrices (the query projection of layer 0's).
rg_dtype_t rg_model_weight_type(const rg_model_t *m);
// Bytes of all tensors in the files.
double rg_model_file_bytes(const rg_model_t *m);

#endif  // RG_RUNTIME_MODEL_H
