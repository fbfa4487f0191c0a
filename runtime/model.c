// A model opened for running (see runtime/model.h).
#include "runtime/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct rg_model_s {
  char *path;
  rg_weights_t *w;
  rg_arch_t *arch;
  rg_weights_hparams_t hp;
  rg_tokenizer_t *tok;
  float *inv_freq;  // (head_dim / 2)
  rg_moe_mode_t moe_mode;
  rg_dtype_t weight_type;
  double file_bytes;
};

static rg_status_t check_family(const rg_arch_t *a) {
  if (rg_family_has(a->family, RG_FAM_RUNS) && !a->mla && a->sliding_window <= 0 &&
      !a->attn_sinks && a->n_shared_experts <= 0)
    return NULL;
  char list[256];
  return rg_status_make(RG_UNIMPLEMENTED,
                        "model family '%s'%s is not run by this engine yet; it runs %s",
                        rg_family_name(a->family),
                        a->mla                    ? " with MLA"
                        : a->sliding_window > 0   ? " with sliding-window attention"
                        : a->attn_sinks           ? " with attention sinks"
                        : a->n_shared_experts > 0 ? " with shared experts"
                                                  : "",
                        rg_family_list(RG_FAM_RUNS, list, sizeof list));
}

// Anything at the path counts: the loader refuses what is not a regular file
// (a FIFO, a directory) by name rather than the model running without it.
static int file_exists(const char *p) {
  struct stat st;
  return stat(p, &st) == 0;
}

static rg_status_t load_tokenizer(rg_model_t *m) {
  struct stat st;
  if (stat(m->path, &st) == 0 && S_ISDIR(st.st_mode)) {
    char p[4096];
    snprintf(p, sizeof p, "%s/tokenizer.json", m->path);
    if (file_exists(p)) return rg_tokenizer_load_hf(p, &m->tok);
    return NULL;  // a model without a tokenizer still runs on token ids
  }
  if (rg_weights_format(m->w) != RG_WEIGHTS_GGUF) return NULL;
  const char *const *tokens, *const *merges;
  const int32_t *types;
  size_t nt, nm;
  const char *pre;
  int32_t bos, eos;
  rg_status_t s = rg_weights_gguf_vocab(m->w, &tokens, &types, &nt, &merges, &nm, &pre, &bos, &eos);
  if (s && rg_status_code(s) == RG_NOT_FOUND) {
    rg_status_free(s);
    return NULL;
  }
  RG_RETURN_IF_ERROR(s);
  return rg_tokenizer_from_vocab(tokens, types, nt, merges, nm, pre, bos, eos, &m->tok);
}

static rg_status_t open_model(rg_model_t *m) {
  RG_RETURN_IF_ERROR(rg_weights_open(m->path, &m->w));
  RG_RETURN_IF_ERROR(rg_weights_arch(m->w, &m->arch));
  const rg_arch_t *a = m->arch;
  RG_RETURN_IF_ERROR(check_family(a));
  RG_RETURN_IF_ERROR(rg_weights_hparams(m->w, &m->hp));
  RG_RETURN_IF_ERROR(rg_weights_check(m->w, a));
  RG_RETURN_IF_ERROR(load_tokenizer(m));
  for (size_t i = 0; i < rg_weights_count(m->w); i++)
    m->file_bytes += (double)rg_weights_at(m->w, i)->nbytes;
  const rg_tensor_t *wq = rg_weights_find(m->w, "model.layers.0.self_attn.q_proj.weight");
  m->weight_type = wq ? wq->type : RG_BF16;

  // RoPE frequencies as the weights' hyperparameters define them (llama3
  // scaling included), computed in double and handed to kernels as f32.
  int64_t half = a->head_dim / 2;
  double *inv = malloc((size_t)half * sizeof(double));
  m->inv_freq = malloc((size_t)half * sizeof(float));
  if (!inv || !m->inv_freq) {
    free(inv);
    return rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
  }
  rg_status_t s = rg_rope_inv_freq(&m->hp, a->head_dim, inv);
  for (int64_t i = 0; !s && i < half; i++) m->inv_freq[i] = (float)inv[i];
  free(inv);
  RG_RETURN_IF_ERROR(s);
  // Qwen3-MoE configs may turn top-k renormalisation off; Mixtral always has it.
  m->moe_mode = (a->family == RG_FAMILY_QWEN3_MOE && !m->hp.norm_topk_prob)
                    ? RG_MOE_SOFTMAX_TOPK
                    : RG_MOE_SOFTMAX_TOPK_RENORM;
  return NULL;
}

rg_status_t rg_model_open(const char *path, rg_model_t **out) {
  *out = NULL;
  rg_model_t *m = calloc(1, sizeof(*m));
  if (!m || !(m->path = strdup(path))) {
    free(m);
    return rg_status_make(RG_OUT_OF_MEMORY, "out of memory opening %s", path);
  }
  rg_status_t s = open_model(m);
  if (s) {
    rg_model_close(m);
    return s;
  }
  *out = m;
  return NULL;
}

void rg_model_close(rg_model_t *m) {
  if (!m) return;
  free(m->inv_freq);
  rg_tokenizer_destroy(m->tok);
  rg_arch_destroy(m->arch);
  rg_weights_close(m->w);
  free(m->path);
  free(m);
}

const char *rg_model_path(const rg_model_t *m) {
  return m->path;
}
const rg_arch_t *rg_model_arch(const rg_model_t *m) {
  return m->arch;
}
const rg_weights_hparams_t *rg_model_hparams(const rg_model_t *m) {
  return &m->hp;
}
const rg_weights_t *rg_model_weights(const rg_model_t *m) {
  return m->w;
}
const rg_tokenizer_t *rg_model_tokenizer(const rg_model_t *m) {
  return m->tok;
}
const float *rg_model_rope_inv_freq(const rg_model_t *m) {
  return m->inv_freq;
}
rg_moe_mode_t rg_model_moe_mode(const rg_model_t *m) {
  return m->moe_mode;
}
rg_dtype_t rg_model_weight_type(const rg_model_t *m) {
  return m->weight_type;
}
double rg_model_file_bytes(const rg_model_t *m) {
  return m->file_bytes;
}
