// graphs/model_load.c — reads an architecture from ridge's model YAML
// (configs/models/NAME.yaml) or from a Hugging Face config.json.
//
// A model YAML wraps the published config.json fields, verbatim, under
// `config:`, with a name, a source and the published parameter counts
// around them; both are read by parse_hf_config(), so a config.json
// downloaded from the Hub and a file in configs/models/ mean the same thing.
//
// config.json files carry many keys ridge has no use for (token ids,
// initialiser ranges, training-only losses), so unknown keys are accepted;
// a key within a small edit distance of one ridge reads is rejected, since
// the typo would otherwise silently fall back to a default.
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/yaml.h"
#include "graphs/graphs.h"

// Defined in arch.c (see the note there).
rg_status_t rg__arch_check(const rg_arch_t *a, const rg_node_t *cfg);

// What messages call the mapping of Hugging Face fields.
static const char k_what[] = "model config";

// Every config.json key ridge reads.
static const char *const known_keys[] = {"architectures",
                                         "model_type",
                                         "hidden_size",
                                         "intermediate_size",
                                         "num_hidden_layers",
                                         "num_attention_heads",
                                         "num_key_value_heads",
                                         "head_dim",
                                         "vocab_size",
                                         "tie_word_embeddings",
                                         "attention_bias",
                                         "mlp_bias",
                                         "num_local_experts",
                                         "num_experts",
                                         "n_routed_experts",
                                         "num_experts_per_tok",
                                         "moe_intermediate_size",
                                         "n_shared_experts",
                                         "first_k_dense_replace",
                                         "decoder_sparse_step",
                                         "moe_layer_freq",
                                         "mlp_only_layers",
                                         "q_lora_rank",
                                         "kv_lora_rank",
                                         "qk_nope_head_dim",
                                         "qk_rope_head_dim",
                                         "v_head_dim",
                                         "sliding_window",
                                         "use_sliding_window",
                                         "max_window_layers",
                                         "layer_types",
                                         "max_position_embeddings",
                                         "rope_theta",
                                         "hidden_act",
                                         "torch_dtype",
                                         "dtype",
                                         "quantization_config",
                                         NULL};

static int ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && strcmp(s + n - m, suffix) == 0;
}

static int is_dir(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

// Anything at path, so a FIFO or directory where a file belongs is opened
// and refused with a message saying what it is, not taken for absent.
static int exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

// ----- reading fields ---------------------------------------------------------

static int present(const rg_node_t *map, const char *key) {
  const rg_node_t *n = rg_node_get(map, key);
  return n && !rg_node_is_null(n);
}

static rg_status_t req_int(const rg_node_t *map, const char *key, long long lo, long long hi,
                           int64_t *out) {
  if (!present(map, key)) return rg_node_missing(map, key, k_what);
  long long v = 0;
  RG_RETURN_IF_ERROR(rg_cfg_int(map, key, 1, lo, hi, &v));
  *out = (int64_t)v;
  return NULL;
}

// Leaves *out untouched when the key is absent or null (config.json writes
// `"q_lora_rank": null` for "none").
static rg_status_t opt_int(const rg_node_t *map, const char *key, long long lo, long long hi,
                           int64_t *out) {
  long long v = *out;
  RG_RETURN_IF_ERROR(rg_cfg_int(map, key, 0, lo, hi, &v));
  *out = (int64_t)v;
  return NULL;
}

static rg_status_t read_family(const rg_node_t *cfg, rg_arch_t *a) {
  const char *names[RG_FAMILY_COUNT];
  char list[256];
  for (int i = 0; i < RG_FAMILY_COUNT; i++) names[i] = rg_family_name((rg_family_t)i);
  rg_family_list(0, list, sizeof list);
  const rg_node_t *mt = rg_node_get(cfg, "model_type");
  if (mt && !rg_node_is_null(mt)) {
    const char *s = NULL;
    RG_RETURN_IF_ERROR(rg_node_str(mt, "model_type", &s));
    if (!rg_family_from_model_type(s, &a->family)) return NULL;
    const char *near = rg_nearest(s, names, RG_FAMILY_COUNT);
    return rg_status_at(RG_UNIMPLEMENTED, &mt->pos, "model_type '%s' is not a family ridge can count%s%s%s; supported: %s",
                        s, near ? " (did you mean '" : "", near ? near : "", near ? "'?)" : "", list);
  }
  const rg_node_t *archs = rg_node_get(cfg, "architectures");
  if (!archs || rg_node_is_null(archs)) return rg_node_missing(cfg, "model_type", k_what);
  RG_RETURN_IF_ERROR(rg_node_expect(archs, RG_NODE_SEQ, "architectures"));
  if (archs->n == 0)
    return rg_status_at(RG_INVALID_ARGUMENT, &archs->pos,
                        "architectures: the list is empty; expected a class such as "
                        "LlamaForCausalLM");
  const char *cls = NULL;
  RG_RETURN_IF_ERROR(rg_node_str(archs->items[0], "architectures", &cls));
  if (!rg_family_from_class(cls, &a->family)) return NULL;
  return rg_status_at(RG_UNIMPLEMENTED, &archs->items[0]->pos,
                      "architectures: '%s' is not a family ridge can count; set model_type to one of %s", cls, list);
}

static rg_status_t read_dtype(const rg_node_t *cfg, rg_arch_t *a) {
  a->weight_dtype = RG_BF16;
  const char *key = present(cfg, "torch_dtype") ? "torch_dtype" : "dtype";
  const rg_node_t *n = rg_node_get(cfg, key);
  if (n && !rg_node_is_null(n)) {
    const char *s = NULL;
    RG_RETURN_IF_ERROR(rg_node_str(n, key, &s));
    if (rg_dtype_parse(s, &a->weight_dtype))
      return rg_status_at(RG_INVALID_ARGUMENT, &n->pos,
                          "%s: '%s' is not a dtype ridge knows; expected float32, bfloat16, "
                          "float16, float8_e4m3fn or mxfp4",
                          key, s);
  }
  // Quantized checkpoints store their big matrices in the quantized format;
  // that is what they weigh in memory.
  const rg_node_t *q = rg_node_get(cfg, "quantization_config");
  if (q && !rg_node_is_null(q)) {
    RG_RETURN_IF_ERROR(rg_node_expect(q, RG_NODE_MAP, "quantization_config"));
    const rg_node_t *m = rg_node_get(q, "quant_method");
    if (!m || rg_node_is_null(m)) return rg_node_missing(q, "quant_method", "quantization_config");
    const char *s = NULL;
    RG_RETURN_IF_ERROR(rg_node_str(m, "quant_method", &s));
    if (strcmp(s, "fp8") == 0) {
      a->weight_dtype = RG_FP8;
    } else if (strcmp(s, "mxfp4") == 0) {
      a->weight_dtype = RG_FP4;
    } else {
      return rg_status_at(RG_UNIMPLEMENTED, &m->pos,
                          "quant_method: '%s' is not supported; ridge knows fp8 and mxfp4", s);
    }
  }
  return NULL;
}

// Sliding-window layers. gpt-oss lists them in layer_types; Qwen turns them
// on with use_sliding_window for layers from max_window_layers on; Mistral
// and Mixtral with a non-null sliding_window window every layer.
static rg_status_t read_sliding(const rg_node_t *cfg, rg_arch_t *a) {
  RG_RETURN_IF_ERROR(opt_int(cfg, "sliding_window", 1, 1LL << 31, &a->sliding_window));
  const rg_node_t *lt = rg_node_get(cfg, "layer_types");
  if (lt && !rg_node_is_null(lt)) {
    RG_RETURN_IF_ERROR(rg_node_expect(lt, RG_NODE_SEQ, "layer_types"));
    if ((int64_t)lt->n != a->n_layers)
      return rg_status_at(RG_INVALID_ARGUMENT, &lt->pos,
                          "layer_types: %zu entries for num_hidden_layers = %lld; expected one "
                          "per layer",
                          lt->n, (long long)a->n_layers);
    for (size_t i = 0; i < lt->n; i++) {
      const char *s = NULL;
      RG_RETURN_IF_ERROR(rg_node_str(lt->items[i], "layer_types", &s));
      if (strcmp(s, "sliding_attention") == 0) {
        a->n_sliding_layers++;
      } else if (strcmp(s, "full_attention") != 0) {
        return rg_status_at(RG_INVALID_ARGUMENT, &lt->items[i]->pos,
                            "layer_types: '%s'; expected full_attention or sliding_attention", s);
      }
    }
    return NULL;
  }
  int use = -1;
  RG_RETURN_IF_ERROR(rg_cfg_bool(cfg, "use_sliding_window", 0, &use));
  if (use == 1) {
    int64_t max_window_layers = a->n_layers;
    RG_RETURN_IF_ERROR(opt_int(cfg, "max_window_layers", 0, a->n_layers, &max_window_layers));
    a->n_sliding_layers = a->n_layers - max_window_layers;
  } else if (use == -1 && a->sliding_window > 0 &&
             (a->family == RG_FAMILY_MISTRAL || a->family == RG_FAMILY_MIXTRAL)) {
    a->n_sliding_layers = a->n_layers;
  }
  if (a->n_sliding_layers == 0) a->sliding_window = 0;
  return NULL;
}

static rg_status_t read_moe(const rg_node_t *cfg, rg_arch_t *a) {
  static const char *const expert_keys[] = {"num_local_experts", "num_experts", "n_routed_experts"};
  const char *key = NULL;
  for (size_t i = 0; i < 3 && !key; i++)
    if (present(cfg, expert_keys[i])) key = expert_keys[i];
  if (!key) return NULL;
  RG_RETURN_IF_ERROR(opt_int(cfg, key, 0, 1 << 16, &a->n_experts));
  if (a->n_experts == 0) return NULL;
  RG_RETURN_IF_ERROR(req_int(cfg, "num_experts_per_tok", 1, 1 << 16, &a->n_experts_per_tok));
  // Mixtral and gpt-oss size their experts with intermediate_size; Qwen and
  // DeepSeek keep that for dense layers and add moe_intermediate_size.
  a->d_ff_expert = a->d_ff;
  RG_RETURN_IF_ERROR(opt_int(cfg, "moe_intermediate_size", 1, 1 << 24, &a->d_ff_expert));
  RG_RETURN_IF_ERROR(opt_int(cfg, "n_shared_experts", 0, 1024, &a->n_shared_experts));
  RG_RETURN_IF_ERROR(opt_int(cfg, "first_k_dense_replace", 0, a->n_layers, &a->first_k_dense));
  RG_RETURN_IF_ERROR(opt_int(cfg, "decoder_sparse_step", 1, a->n_layers, &a->moe_layer_step));
  // DeepSeek's moe_layer_freq counts from a different origin than Qwen's
  // decoder_sparse_step; every released DeepSeek sets it to 1, which both
  // read the same way.
  int64_t freq = 1;
  RG_RETURN_IF_ERROR(opt_int(cfg, "moe_layer_freq", 1, a->n_layers, &freq));
  if (freq != 1)
    return rg_status_at(RG_UNIMPLEMENTED, &rg_node_get(cfg, "moe_layer_freq")->pos,
                        "moe_layer_freq: %lld is not supported; ridge reads only 1 (every layer "
                        "after first_k_dense_replace is MoE)",
                        (long long)freq);
  const rg_node_t *only = rg_node_get(cfg, "mlp_only_layers");
  if (only && !rg_node_is_null(only)) {
    RG_RETURN_IF_ERROR(rg_node_expect(only, RG_NODE_SEQ, "mlp_only_layers"));
    if (only->n > 0)
      return rg_status_at(RG_UNIMPLEMENTED, &only->pos,
                          "mlp_only_layers: listing dense layers by index is not supported; "
                          "ridge describes dense layers with first_k_dense_replace and "
                          "decoder_sparse_step");
  }
  return NULL;
}

static rg_status_t read_mla(const rg_node_t *cfg, rg_arch_t *a) {
  int deepseek = rg_family_has(a->family, RG_FAM_MLA);
  if (!deepseek && !present(cfg, "kv_lora_rank")) return NULL;
  a->mla = 1;
  RG_RETURN_IF_ERROR(req_int(cfg, "kv_lora_rank", 1, 1 << 16, &a->kv_lora_rank));
  RG_RETURN_IF_ERROR(req_int(cfg, "qk_nope_head_dim", 1, 1 << 14, &a->qk_nope_head_dim));
  RG_RETURN_IF_ERROR(req_int(cfg, "qk_rope_head_dim", 1, 1 << 14, &a->qk_rope_head_dim));
  RG_RETURN_IF_ERROR(req_int(cfg, "v_head_dim", 1, 1 << 14, &a->v_head_dim));
  // DeepSeek-V2-Lite writes "q_lora_rank": null: a full-rank query.
  RG_RETURN_IF_ERROR(opt_int(cfg, "q_lora_rank", 1, 1 << 16, &a->q_lora_rank));
  return NULL;
}

// The FFN activation. Every family ridge knows gates its FFN with SiLU
// (SwiGLU), and the engine runs nothing else, so a config asking for another
// must not quietly run as SiLU. Absent or null means the family's default,
// which is SiLU for all of them.
static rg_status_t read_act(const rg_node_t *cfg) {
  const rg_node_t *n = rg_node_get(cfg, "hidden_act");
  if (!n || rg_node_is_null(n)) return NULL;
  const char *s = NULL;
  RG_RETURN_IF_ERROR(rg_node_str(n, "hidden_act", &s));
  if (strcmp(s, "silu") == 0 || strcmp(s, "swish") == 0) return NULL;
  return rg_status_at(RG_UNIMPLEMENTED, &n->pos,
                      "hidden_act: '%s' is not supported; ridge runs SwiGLU feed-forward layers: "
                      "silu (or its other name, swish)",
                      s);
}

// rope_theta, when given, must be a usable base: rotary frequencies are
// theta^(-2i/d), so 0 or 1 would give every dimension the same angle. Absent
// means the family's default (10000, or 1e6 for Mixtral).
static rg_status_t read_rope_theta(const rg_node_t *cfg, rg_arch_t *a) {
  RG_RETURN_IF_ERROR(rg_cfg_num(cfg, "rope_theta", 0, 0.0, 1e12, &a->rope_theta));
  const rg_node_t *n = rg_node_get(cfg, "rope_theta");
  if (n && !rg_node_is_null(n) && !(a->rope_theta > 1.0))
    return rg_status_at(RG_INVALID_ARGUMENT, &n->pos,
                        "rope_theta: %g is not a rotary base; expected a number greater than 1 "
                        "(Llama 3 uses 500000, Qwen3 1000000), or leave it out for the family's "
                        "default",
                        a->rope_theta);
  return NULL;
}

// Maps Hugging Face config fields onto a, then checks the result, pointing
// any complaint at the field that caused it.
static rg_status_t parse_hf_config(const rg_node_t *cfg, rg_arch_t *a) {
  RG_RETURN_IF_ERROR(rg_node_check_typos(cfg, known_keys, k_what));
  RG_RETURN_IF_ERROR(read_family(cfg, a));
  RG_RETURN_IF_ERROR(req_int(cfg, "hidden_size", 1, 1 << 20, &a->d_model));
  RG_RETURN_IF_ERROR(req_int(cfg, "num_hidden_layers", 1, 10000, &a->n_layers));
  RG_RETURN_IF_ERROR(req_int(cfg, "num_attention_heads", 1, 1 << 16, &a->n_heads));
  a->n_kv_heads = a->n_heads;
  RG_RETURN_IF_ERROR(opt_int(cfg, "num_key_value_heads", 1, 1 << 16, &a->n_kv_heads));
  RG_RETURN_IF_ERROR(req_int(cfg, "vocab_size", 1, 10000000, &a->vocab));
  RG_RETURN_IF_ERROR(req_int(cfg, "intermediate_size", 1, 1 << 24, &a->d_ff));
  RG_RETURN_IF_ERROR(rg_cfg_bool(cfg, "tie_word_embeddings", 0, &a->tie_embeddings));

  RG_RETURN_IF_ERROR(read_mla(cfg, a));
  if (present(cfg, "head_dim")) {
    RG_RETURN_IF_ERROR(opt_int(cfg, "head_dim", 1, 1 << 14, &a->head_dim));
  } else if (a->mla) {
    a->head_dim = a->qk_nope_head_dim + a->qk_rope_head_dim;
  } else if (a->d_model % a->n_heads) {
    return rg_status_at(RG_INVALID_ARGUMENT, &rg_node_get(cfg, "num_attention_heads")->pos,
                        "num_attention_heads: %lld does not divide hidden_size = %lld, and no "
                        "head_dim is given",
                        (long long)a->n_heads, (long long)a->d_model);
  } else {
    a->head_dim = a->d_model / a->n_heads;
  }

  int attention_bias = 0, mlp_bias = 0;
  RG_RETURN_IF_ERROR(rg_cfg_bool(cfg, "attention_bias", 0, &attention_bias));
  RG_RETURN_IF_ERROR(rg_cfg_bool(cfg, "mlp_bias", 0, &mlp_bias));
  if (mlp_bias)
    return rg_status_at(RG_UNIMPLEMENTED, &rg_node_get(cfg, "mlp_bias")->pos,
                        "mlp_bias: dense FFN biases are not supported");
  if (attention_bias && a->mla)
    return rg_status_at(RG_UNIMPLEMENTED, &rg_node_get(cfg, "attention_bias")->pos,
                        "attention_bias: biases on multi-head latent attention are not "
                        "supported");
  // Llama, Qwen3 and gpt-oss put attention_bias on q, k, v and o alike;
  // Qwen2 always biases q, k, v and never o.
  a->qkv_bias = attention_bias || rg_family_has(a->family, RG_FAM_QKV_BIAS);
  a->o_bias = attention_bias;
  a->qk_norm = rg_family_has(a->family, RG_FAM_QK_NORM);
  if (rg_family_has(a->family, RG_FAM_EXPERT_BIAS)) a->expert_bias = 1;
  if (rg_family_has(a->family, RG_FAM_SINKS)) a->attn_sinks = 1;
  // gpt-oss biases its router; DeepSeek V3 routes with a learned per-expert
  // correction bias.
  if (rg_family_has(a->family, RG_FAM_ROUTER_BIAS)) a->router_bias = 1;

  a->moe_layer_step = 1;
  RG_RETURN_IF_ERROR(read_moe(cfg, a));
  RG_RETURN_IF_ERROR(read_sliding(cfg, a));
  RG_RETURN_IF_ERROR(opt_int(cfg, "max_position_embeddings", 1, 1LL << 32, &a->max_context));
  RG_RETURN_IF_ERROR(read_rope_theta(cfg, a));
  RG_RETURN_IF_ERROR(read_act(cfg));
  RG_RETURN_IF_ERROR(read_dtype(cfg, a));
  return rg__arch_check(a, cfg);
}

// ----- model YAML ---------------------------------------------------------------

// Copies at most n bytes of src, truncating to fit buf.
static void copy_text(char *buf, size_t len, const char *src, size_t n) {
  if (n >= len) n = len - 1;
  memcpy(buf, src, n);
  buf[n] = 0;
}

static const char *base_name(const char *path) {
  const char *s = strrchr(path, '/');
  return s ? s + 1 : path;
}

// The file name without directory and extension.
static void file_stem(const char *path, char *buf, size_t len) {
  const char *base = base_name(path);
  copy_text(buf, len, base, strlen(base));
  char *dot = strrchr(buf, '.');
  if (dot && dot != buf) *dot = 0;
}

static rg_status_t parse_model_yaml(const rg_node_t *root, const char *path, rg_arch_t *a) {
  static const char *const top_keys[] = {"name",      "description", "source",
                                         "published", "config",      NULL};
  RG_RETURN_IF_ERROR(rg_node_check_keys(root, top_keys, "model"));
  static const char *const required[] = {"name", "source", "config"};
  for (size_t i = 0; i < 3; i++)
    if (!present(root, required[i])) return rg_node_missing(root, required[i], "model");

  const char *name = NULL, *text = NULL;
  RG_RETURN_IF_ERROR(rg_cfg_str(root, "name", 1, &name));
  const rg_node_t *name_node = rg_node_get(root, "name");
  char stem[256];
  file_stem(path, stem, sizeof(stem));
  if (strlen(name) >= sizeof(a->name))
    return rg_status_at(RG_INVALID_ARGUMENT, &name_node->pos,
                        "name: '%s' is longer than %zu characters", name, sizeof(a->name) - 1);
  // As for every ridge config, the file is found by its name.
  if (strcmp(name, stem) != 0)
    return rg_status_at(RG_INVALID_ARGUMENT, &name_node->pos,
                        "name: '%s' must equal the file name '%s'", name, stem);
  snprintf(a->name, sizeof(a->name), "%s", name);
  RG_RETURN_IF_ERROR(rg_cfg_str(root, "description", 0, &text));
  RG_RETURN_IF_ERROR(rg_cfg_str(root, "source", 1, &text));

  const rg_node_t *pub = rg_node_get(root, "published");
  if (pub && !rg_node_is_null(pub)) {
    static const char *const pub_keys[] = {"params", "active_params", "source", NULL};
    RG_RETURN_IF_ERROR(rg_node_check_keys(pub, pub_keys, "published"));
    RG_RETURN_IF_ERROR(rg_cfg_num(pub, "params", 0, 1.0, 1e15, &a->published_params));
    RG_RETURN_IF_ERROR(rg_cfg_num(pub, "active_params", 0, 1.0, 1e15, &a->published_active_params));
    RG_RETURN_IF_ERROR(rg_cfg_str(pub, "source", 0, &text));
  }
  const rg_node_t *cfg = rg_node_get(root, "config");
  RG_RETURN_IF_ERROR(rg_node_expect(cfg, RG_NODE_MAP, "config"));
  return parse_hf_config(cfg, a);
}

// ----- finding the file -------------------------------------------------------

static int cmp_str(const void *x, const void *y) {
  return strcmp(*(const char *const *)x, *(const char *const *)y);
}

// NOT_FOUND for a model name, listing what configs/models/ holds and the
// nearest name.
static rg_status_t not_found(const char *name, const char *models_dir) {
  DIR *dir = opendir(models_dir);
  if (!dir)
    return rg_status_make(RG_NOT_FOUND,
                          "model '%s' not found: %s does not exist (give a model name, a path to "
                          "a model YAML, or a path to a config.json)",
                          name, models_dir);
  enum { MAX_MODELS = 512 };
  char *names[MAX_MODELS];
  size_t n = 0;
  struct dirent *e;
  while ((e = readdir(dir)) && n < MAX_MODELS) {
    if (e->d_name[0] == '.' || !ends_with(e->d_name, ".yaml")) continue;
    size_t len = strlen(e->d_name) - 5;
    char *s = malloc(len + 1);
    if (!s) break;
    memcpy(s, e->d_name, len);
    s[len] = 0;
    names[n++] = s;
  }
  closedir(dir);
  qsort(names, n, sizeof(names[0]), cmp_str);
  char list[4096] = "";
  for (size_t i = 0; i < n; i++) {
    size_t u = strlen(list);
    snprintf(list + u, sizeof(list) - u, "%s%s", i ? ", " : "", names[i]);
  }
  const char *near = rg_nearest(name, (const char *const *)names, n);
  rg_status_t st;
  if (near)
    st =
        rg_status_make(RG_NOT_FOUND, "model '%s' not found in %s; did you mean '%s'? Available: %s",
                       name, models_dir, near, list);
  else if (n)
    st = rg_status_make(RG_NOT_FOUND, "model '%s' not found in %s; did you mean one of: %s?", name,
                        models_dir, list);
  else
    st = rg_status_make(RG_NOT_FOUND, "model '%s' not found: %s holds no model YAML", name,
                        models_dir);
  for (size_t i = 0; i < n; i++) free(names[i]);
  return st;
}

// The name a config.json model goes by: its directory for .../NAME/config.json,
// else the file stem.
static void json_model_name(const char *path, char *buf, size_t len) {
  const char *base = base_name(path);
  if (strcmp(base, "config.json") == 0 && base != path) {
    const char *end = base - 1;  // the '/' before config.json
    const char *start = end;
    while (start > path && start[-1] != '/') start--;
    if (end > start)
      copy_text(buf, len, start, (size_t)(end - start));
    else
      copy_text(buf, len, "config", 6);
  } else {
    file_stem(path, buf, len);
  }
}

rg_status_t rg_model_load(const char *name_or_path, const char *config_dir, rg_arch_t **out_arch) {
  if (!out_arch) return rg_status_make(RG_INVALID_ARGUMENT, "rg_model_load: no output given");
  *out_arch = NULL;
  if (!name_or_path || !name_or_path[0])
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "no model given: expected a model name, a model "
                          "YAML or a config.json");
  char path[4096];
  int json = 0, n = 0;
  if (ends_with(name_or_path, ".json")) {
    n = snprintf(path, sizeof(path), "%s", name_or_path);
    json = 1;
  } else if (is_dir(name_or_path)) {
    n = snprintf(path, sizeof(path), "%s/config.json", name_or_path);
    if (n < (int)sizeof(path) && !exists(path))
      return rg_status_make(RG_NOT_FOUND, "%s is a directory without a config.json", name_or_path);
    json = 1;
  } else if (ends_with(name_or_path, ".yaml") || ends_with(name_or_path, ".yml") ||
             strchr(name_or_path, '/')) {
    n = snprintf(path, sizeof(path), "%s", name_or_path);
  } else {
    if (!config_dir)
      return rg_status_make(RG_INVALID_ARGUMENT, "model '%s': no config directory to look it up in",
                            name_or_path);
    char models_dir[2048];
    n = snprintf(models_dir, sizeof(models_dir), "%s/models", config_dir);
    if (n >= 0 && n < (int)sizeof(models_dir))
      n = snprintf(path, sizeof(path), "%s/%s.yaml", models_dir, name_or_path);
    if (n >= 0 && n < (int)sizeof(path) && !exists(path))
      return not_found(name_or_path, models_dir);
  }
  if (n < 0 || n >= (int)sizeof(path))
    return rg_status_make(RG_INVALID_ARGUMENT, "model path too long: %.80s...", name_or_path);

  rg_doc_t *doc = NULL;
  RG_RETURN_IF_ERROR(rg_doc_load_file(path, &doc));
  rg_arch_t *a = calloc(1, sizeof(*a));
  if (!a) {
    rg_doc_destroy(doc);
    return rg_status_make(RG_OUT_OF_MEMORY, "out of memory reading %s", path);
  }
  rg_status_t st;
  if (json) {
    json_model_name(path, a->name, sizeof(a->name));
    st = parse_hf_config(rg_doc_root(doc), a);
  } else {
    st = parse_model_yaml(rg_doc_root(doc), path, a);
  }
  rg_doc_destroy(doc);
  if (st) {
    free(a);
    return st;
  }
  *out_arch = a;
  return NULL;
}

void rg_arch_destroy(rg_arch_t *arch) {
  free(arch);
}
