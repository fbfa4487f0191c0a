// cli/cmd_model.c — `ridge model`: what one model costs, before any device is
// chosen. Shape and parameter counts, weight bytes per dtype, KV bytes per
// token and where the KV cache overtakes the weights, and the FLOPs and bytes
// of every stage of one step, hence each stage's arithmetic intensity (to
// hold against a device's ridge point from `ridge catalog`).
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/units.h"
#include "base/yaml.h"
#include "cli/cli.h"
#include "cli/output.h"
#include "graphs/graphs.h"

#define CMD "model"

// Decode adds one token per sequence on top of a cache; prefill reads a fresh
// prompt. These are the defaults when a flag is not given.
#define DEFAULT_BATCH 1
#define DEFAULT_DECODE_CONTEXT 4096
#define DEFAULT_PREFILL_TOKENS 2048

static const long long kv_batches[] = {1, 8, 64, 512};
static const long long kv_contexts[] = {4096, 32768, 131072};
#define N_KV_B (sizeof(kv_batches) / sizeof(kv_batches[0]))
#define N_KV_C (sizeof(kv_contexts) / sizeof(kv_contexts[0]))

static void usage(FILE *f) {
  fprintf(f,
          "usage: ridge model NAME|config.json [--phase prefill|decode] [--batch B]\n"
          "                   [--context C] [--new-tokens N] [--dtype T] [--kv-dtype T] [--json]\n"
          "\n"
          "Shows a model's shape, parameters, weight bytes for every dtype, KV cache bytes per\n"
          "token and by batch x context, and the FLOPs, bytes and arithmetic intensity (FLOP/B)\n"
          "of each stage of one step. Compare a stage's intensity with a device's ridge point\n"
          "(ridge catalog): below it the stage is memory-bound there, above it compute-bound.\n"
          "\n"
          "NAME is looked up as configs/models/NAME.yaml; a path to a model YAML or to a\n"
          "Hugging Face config.json works too.\n"
          "\n"
          "  --phase P       decode (default) or prefill\n"
          "  --batch B       sequences in the step (default %d)\n"
          "  --context C     tokens already in each sequence's KV cache\n"
          "                  (default %d for decode, 0 for prefill)\n"
          "  --new-tokens N  tokens each sequence adds this step\n"
          "                  (default 1 for decode, %d for prefill)\n"
          "  --dtype T       weight dtype (default: the model's published one)\n"
          "  --kv-dtype T    KV cache dtype (default bf16)\n"
          "  --json          machine-readable output\n"
          "Dtypes: f32 bf16 f16 fp8 int8 fp4. Counts take a K or M suffix (32K = 32768).\n"
          "\n"
          "example: ridge model llama-3.1-70b --batch 512 --context 128K\n",
          DEFAULT_BATCH, DEFAULT_DECODE_CONTEXT, DEFAULT_PREFILL_TOKENS);
}

typedef struct {
  const char *model;
  rg_phase_t phase;
  long long batch, context, new_tokens;  // -1: not given
  int have_dtype, have_kv_dtype;
  rg_dtype_t dtype, kv_dtype;
  int json;
  int help;
} model_opts_t;

static rg_status_t parse_args(int argc, char **argv, model_opts_t *o) {
  enum { O_PHASE = 1000, O_BATCH, O_CONTEXT, O_NEW, O_DTYPE, O_KV_DTYPE, O_JSON, O_HELP };
  static const struct option longs[] = {
      {"phase", required_argument, NULL, O_PHASE},
      {"batch", required_argument, NULL, O_BATCH},
      {"context", required_argument, NULL, O_CONTEXT},
      {"new-tokens", required_argument, NULL, O_NEW},
      {"dtype", required_argument, NULL, O_DTYPE},
      {"kv-dtype", required_argument, NULL, O_KV_DTYPE},
      {"json", no_argument, NULL, O_JSON},
      {"help", no_argument, NULL, O_HELP},
      {NULL, 0, NULL, 0},
  };
  rg_cli_getopt_reset();
  int c;
  while ((c = getopt_long(argc, argv, ":h", longs, NULL)) != -1) {
    switch (c) {
      case O_PHASE:
        if (!strcmp(optarg, "decode"))
          o->phase = RG_PHASE_DECODE;
        else if (!strcmp(optarg, "prefill"))
          o->phase = RG_PHASE_PREFILL;
        else
          return rg_status_make(RG_INVALID_ARGUMENT,
                                "--phase must be 'prefill' or 'decode', got '%s'", optarg);
        break;
      case O_BATCH:
        RG_RETURN_IF_ERROR(rg_parse_count("--batch", optarg, 1, &o->batch));
        break;
      case O_CONTEXT:
        RG_RETURN_IF_ERROR(rg_parse_count("--context", optarg, 0, &o->context));
        break;
      case O_NEW:
        RG_RETURN_IF_ERROR(rg_parse_count("--new-tokens", optarg, 1, &o->new_tokens));
        break;
      case O_DTYPE:
        RG_RETURN_IF_ERROR(rg_parse_dtype("--dtype", optarg, &o->dtype));
        o->have_dtype = 1;
        break;
      case O_KV_DTYPE:
        RG_RETURN_IF_ERROR(rg_parse_dtype("--kv-dtype", optarg, &o->kv_dtype));
        o->have_kv_dtype = 1;
        break;
      case O_JSON:
        o->json = 1;
        break;
      case 'h':
      case O_HELP:
        o->help = 1;
        return NULL;
      default:
        return rg_cli_getopt_error(c, argv, longs);
    }
  }
  if (optind >= argc)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "which model? give a name (e.g. ridge model llama-3.1-70b) or a path "
                          "to a config.json; see ridge model --help");
  if (argc - optind > 1)
    return rg_status_make(RG_INVALID_ARGUMENT, "takes one model, got '%s' and '%s'", argv[optind],
                          argv[optind + 1]);
  o->model = argv[optind];
  return NULL;
}

// ----- Figures ---------------------------------------------------------------

typedef struct {
  rg_shape_t shape;
  double params, active;
  double weight_bytes[RG_DTYPE_COMPUTE_COUNT];
  double kv_per_token;
  double kv_equal_tokens;  // batch x context at which KV bytes == weight bytes
  rg_stage_cost_t st[RG_MAX_STAGE_COSTS];
  size_t n_st;
} model_figures_t;

static int is_move(rg_stage_kind_t k) {
  return k == RG_STAGE_KV_TRANSFER || k == RG_STAGE_KV_OFFLOAD || k == RG_STAGE_KV_RELOAD ||
         k == RG_STAGE_ACTIVATION;
}

static char *fmt_gflop(double flops, char *buf, size_t len) {
  double g = flops / 1e9;
  if (flops == 0)
    snprintf(buf, len, "-");
  else if (g >= 999.5)
    rg_fmt_grouped(g, buf, len);
  else if (g >= 99.95)
    snprintf(buf, len, "%.1f", g);
  else if (g >= 0.9995)
    snprintf(buf, len, "%.2f", g);
  else
    snprintf(buf, len, "%.3g", g);
  return buf;
}

static char *fmt_bytes_or_dash(double b, char *buf, size_t len) {
  if (b == 0)
    snprintf(buf, len, "-");
  else
    rg_fmt_quantity(b, RG_UNIT_BYTES, buf, len);
  return buf;
}

static char *fmt_intensity(double flops, double intensity, char *buf, size_t len) {
  if (flops == 0)
    snprintf(buf, len, "-");
  else if (intensity >= 999.5)
    rg_fmt_grouped(intensity, buf, len);
  else if (intensity >= 9.995)
    snprintf(buf, len, "%.1f", intensity);
  else
    snprintf(buf, len, "%.2f", intensity);
  return buf;
}

static rg_status_t print_human(const rg_arch_t *a, const model_figures_t *m) {
  const rg_shape_t *s = &m->shape;
  char b1[64], b2[64], b3[64], b4[64];
  printf("%s  (family %s)\n", a->name, rg_family_name(a->family));

  printf("  shape        %lld layers, d_model %s, %lld heads / %lld KV heads × %lld",
         (long long)a->n_layers, rg_fmt_grouped((double)a->d_model, b1, sizeof(b1)),
         (long long)a->n_heads, (long long)a->n_kv_heads, (long long)a->head_dim);
  if (a->d_ff) printf(", FFN %s", rg_fmt_grouped((double)a->d_ff, b1, sizeof(b1)));
  printf(", vocab %s\n", rg_fmt_grouped((double)a->vocab, b1, sizeof(b1)));
  if (a->mla)
    printf("               multi-head latent attention: KV rank %lld, rope dim %lld\n",
           (long long)a->kv_lora_rank, (long long)a->qk_rope_head_dim);
  if (a->n_experts) {
    char shared[48] = "";
    if (a->n_shared_experts)
      snprintf(shared, sizeof(shared), " + %lld shared", (long long)a->n_shared_experts);
    printf("               MoE: %lld experts%s, top-%lld, expert FFN %s, on %lld of %lld layers\n",
           (long long)a->n_experts, shared, (long long)a->n_experts_per_tok,
           rg_fmt_grouped((double)a->d_ff_expert, b1, sizeof(b1)),
           (long long)rg_arch_n_moe_layers(a), (long long)a->n_layers);
  }
  if (a->sliding_window && a->n_sliding_layers)
    printf("               sliding window of %s tokens on %lld of %lld layers\n",
           rg_fmt_grouped((double)a->sliding_window, b1, sizeof(b1)),
           (long long)a->n_sliding_layers, (long long)a->n_layers);
  if (a->max_context)
    printf("               max context %s tokens\n",
           rg_fmt_grouped((double)a->max_context, b1, sizeof(b1)));

  printf("  parameters   %s total, %s active per token", rg_fmt_count(m->params, b1, sizeof(b1)),
         rg_fmt_count(m->active, b2, sizeof(b2)));
  if (a->published_params > 0)
    printf(" (published %s", rg_fmt_count(a->published_params, b3, sizeof(b3)));
  if (a->published_params > 0 && a->published_active_params > 0 &&
      a->published_active_params != a->published_params)
    printf(" / %s", rg_fmt_count(a->published_active_params, b3, sizeof(b3)));
  if (a->published_params > 0) printf(")");
  printf("\n");

  printf("  weights     ");
  for (int d = 0; d < RG_DTYPE_COMPUTE_COUNT; d++)
    printf(" %s %s%s", rg_dtype_name((rg_dtype_t)d),
           rg_fmt_quantity(m->weight_bytes[d], RG_UNIT_BYTES, b1, sizeof(b1)),
           d + 1 < RG_DTYPE_COMPUTE_COUNT ? "," : "");
  printf("\n               published in %s; this step uses %s\n", rg_dtype_name(a->weight_dtype),
         rg_dtype_name(s->weight_dtype));

  printf("  KV cache     %s B (%s) per token in %s, summed over layers\n",
         rg_fmt_grouped(m->kv_per_token, b1, sizeof(b1)),
         rg_fmt_bytes_iec(m->kv_per_token, b2, sizeof(b2)), rg_dtype_name(s->kv_dtype));
  if (m->kv_per_token > 0)
    printf(
        "  KV = weights at %s tokens (batch × context): past that, the KV cache outweighs the\n"
        "               %s %s weights\n",
        rg_fmt_grouped(m->kv_equal_tokens, b1, sizeof(b1)),
        rg_fmt_quantity(m->weight_bytes[s->weight_dtype], RG_UNIT_BYTES, b2, sizeof(b2)),
        rg_dtype_name(s->weight_dtype));

  // KV cache by batch x context.
  double w = m->weight_bytes[s->weight_dtype];
  printf("\nKV cache by batch × context (%s KV; in parentheses, × the %s weights)\n",
         rg_dtype_name(s->kv_dtype), rg_dtype_name(s->weight_dtype));
  const char *kv_heads[1 + N_KV_C];
  char ctx_names[N_KV_C][32];
  kv_heads[0] = "batch";
  for (size_t c = 0; c < N_KV_C; c++) {
    char t[16];
    snprintf(ctx_names[c], sizeof(ctx_names[c]), "context %s",
             rg_fmt_tokens(kv_contexts[c], t, sizeof(t)));
    kv_heads[1 + c] = ctx_names[c];
  }
  rg_table_t kt;
  rg_table_init(&kt, 1 + (int)N_KV_C, kv_heads, "rrrr");
  for (size_t bi = 0; bi < N_KV_B; bi++) {
    rg_table_cell(&kt, "%lld", kv_batches[bi]);
    for (size_t c = 0; c < N_KV_C; c++) {
      double kv = m->kv_per_token * (double)kv_batches[bi] * (double)kv_contexts[c];
      rg_table_cell(&kt, "%s (%s×)", rg_fmt_gb(kv, b1, sizeof(b1)),
                    rg_fmt_ratio(w > 0 ? kv / w : 0, b2, sizeof(b2)));
    }
  }
  rg_status_t st = rg_table_print(&kt, stdout, 2);
  rg_table_deinit(&kt);
  RG_RETURN_IF_ERROR(st);
  if (a->sliding_window && a->n_sliding_layers)
    printf("  (sliding-window layers add the KV of at most %s tokens per sequence on top)\n",
           rg_fmt_grouped((double)a->sliding_window, b1, sizeof(b1)));

  // Stages of one step.
  printf(
      "\nStages of one %s step: batch %lld, %s new token%s each on %s tokens of context; "
      "weights %s, KV %s\n",
      rg_phase_name(s->phase), (long long)s->batch,
      rg_fmt_grouped((double)s->new_tokens, b1, sizeof(b1)), s->new_tokens == 1 ? "" : "s",
      rg_fmt_grouped((double)s->context, b2, sizeof(b2)), rg_dtype_name(s->weight_dtype),
      rg_dtype_name(s->kv_dtype));
  if (a->max_context && s->context + s->new_tokens > a->max_context)
    printf("  note: %s tokens per sequence is past the model's max context of %s\n",
           rg_fmt_grouped((double)(s->context + s->new_tokens), b1, sizeof(b1)),
           rg_fmt_grouped((double)a->max_context, b2, sizeof(b2)));
  static const char *const heads[] = {"stage",    "layers", "GFLOP", "weights", "KV read",
                                      "KV write", "act",    "bytes", "FLOP/B"};
  rg_table_t t;
  rg_table_init(&t, 9, heads, "lrrrrrrrr");
  double tot_flops = 0, tot_bytes = 0;
  for (size_t i = 0; i < m->n_st; i++) {
    const rg_stage_cost_t *c = &m->st[i];
    if (!c->is_part && !is_move(c->kind)) {
      tot_flops += c->flops;
      tot_bytes += c->bytes;
    }
    rg_table_cell(&t, "%s%s", c->is_part ? "  " : "", c->name);
    rg_table_cell(&t, "%lld", (long long)c->layers);
    rg_table_cell(&t, "%s", fmt_gflop(c->flops, b1, sizeof(b1)));
    rg_table_cell(&t, "%s", fmt_bytes_or_dash(c->weight_bytes, b1, sizeof(b1)));
    rg_table_cell(&t, "%s", fmt_bytes_or_dash(c->kv_read_bytes, b2, sizeof(b2)));
    rg_table_cell(&t, "%s", fmt_bytes_or_dash(c->kv_write_bytes, b3, sizeof(b3)));
    rg_table_cell(&t, "%s", fmt_bytes_or_dash(c->act_bytes, b4, sizeof(b4)));
    rg_table_cell(&t, "%s", fmt_bytes_or_dash(c->bytes, b1, sizeof(b1)));
    rg_table_cell(&t, "%s", fmt_intensity(c->flops, c->intensity, b2, sizeof(b2)));
  }
  st = rg_table_print(&t, stdout, 2);
  rg_table_deinit(&t);
  RG_RETURN_IF_ERROR(st);
  printf("  step (compute stages): %s GFLOP over %s, %s FLOP/B\n",
         fmt_gflop(tot_flops, b1, sizeof(b1)), fmt_bytes_or_dash(tot_bytes, b2, sizeof(b2)),
         fmt_intensity(tot_flops, tot_bytes > 0 ? tot_flops / tot_bytes : 0, b3, sizeof(b3)));
  printf(
      "  Moves (kv_*, activation) carry bytes only. A stage whose FLOP/B is below a device's\n"
      "  ridge point (ridge catalog) is memory-bound on it.\n");
  return NULL;
}

static rg_status_t print_json(const rg_arch_t *a, const model_figures_t *m) {
  const rg_shape_t *s = &m->shape;
  int bad = 0;
  cJSON *root = cJSON_CreateObject();
  if (!root) bad = 1;
  rg_json_str(root, "model", a->name, &bad);
  rg_json_str(root, "family", rg_family_name(a->family), &bad);
  rg_json_num(root, "params", m->params, &bad);
  rg_json_num(root, "active_params", m->active, &bad);
  rg_json_str(root, "weight_dtype", rg_dtype_name(a->weight_dtype), &bad);
  cJSON *arch = rg_json_obj(root, "arch", &bad);
  rg_json_num(arch, "layers", (double)a->n_layers, &bad);
  rg_json_num(arch, "d_model", (double)a->d_model, &bad);
  rg_json_num(arch, "heads", (double)a->n_heads, &bad);
  rg_json_num(arch, "kv_heads", (double)a->n_kv_heads, &bad);
  rg_json_num(arch, "head_dim", (double)a->head_dim, &bad);
  rg_json_num(arch, "d_ff", (double)a->d_ff, &bad);
  rg_json_num(arch, "vocab", (double)a->vocab, &bad);
  rg_json_num(arch, "experts", (double)a->n_experts, &bad);
  rg_json_num(arch, "experts_per_token", (double)a->n_experts_per_tok, &bad);
  rg_json_num(arch, "max_context", (double)a->max_context, &bad);
  cJSON *wb = rg_json_obj(root, "weight_bytes", &bad);
  for (int d = 0; d < RG_DTYPE_COMPUTE_COUNT; d++)
    rg_json_num(wb, rg_dtype_name((rg_dtype_t)d), m->weight_bytes[d], &bad);
  rg_json_num(root, "kv_bytes_per_token", m->kv_per_token, &bad);
  rg_json_num(root, "kv_equals_weights_tokens", m->kv_equal_tokens, &bad);
  cJSON *kt = rg_json_arr(root, "kv_table", &bad);
  double w = m->weight_bytes[s->weight_dtype];
  for (size_t bi = 0; bi < N_KV_B; bi++)
    for (size_t c = 0; c < N_KV_C; c++) {
      double kv = m->kv_per_token * (double)kv_batches[bi] * (double)kv_contexts[c];
      cJSON *e = rg_json_push_obj(kt, &bad);
      rg_json_num(e, "batch", (double)kv_batches[bi], &bad);
      rg_json_num(e, "context", (double)kv_contexts[c], &bad);
      rg_json_num(e, "bytes", kv, &bad);
      rg_json_num(e, "ratio_to_weights", w > 0 ? kv / w : 0, &bad);
    }
  cJSON *sh = rg_json_obj(root, "shape", &bad);
  rg_json_str(sh, "phase", rg_phase_name(s->phase), &bad);
  rg_json_num(sh, "batch", (double)s->batch, &bad);
  rg_json_num(sh, "new_tokens", (double)s->new_tokens, &bad);
  rg_json_num(sh, "context", (double)s->context, &bad);
  rg_json_str(sh, "dtype", rg_dtype_name(s->weight_dtype), &bad);
  rg_json_str(sh, "kv_dtype", rg_dtype_name(s->kv_dtype), &bad);
  cJSON *stages = rg_json_arr(root, "stages", &bad);
  for (size_t i = 0; i < m->n_st; i++) {
    const rg_stage_cost_t *c = &m->st[i];
    cJSON *e = rg_json_push_obj(stages, &bad);
    rg_json_str(e, "name", c->name, &bad);
    rg_json_str(e, "kind", rg_stage_kind_name(c->kind), &bad);
    rg_json_bool(e, "is_part", c->is_part, &bad);
    rg_json_num(e, "layers", (double)c->layers, &bad);
    rg_json_num(e, "flops", c->flops, &bad);
    rg_json_num(e, "bytes", c->bytes, &bad);
    rg_json_num(e, "weight_bytes", c->weight_bytes, &bad);
    rg_json_num(e, "kv_read_bytes", c->kv_read_bytes, &bad);
    rg_json_num(e, "kv_write_bytes", c->kv_write_bytes, &bad);
    rg_json_num(e, "act_bytes", c->act_bytes, &bad);
    rg_json_num(e, "intensity", c->intensity, &bad);
    rg_json_num(e, "resident_weight_bytes", c->resident_weight_bytes, &bad);
  }
  return rg_json_emit(root, bad, stdout);
}

static rg_status_t run(const model_opts_t *o, const rg_cli_common_t *common) {
  rg_arch_t *a = NULL;
  RG_RETURN_IF_ERROR(rg_model_load(o->model, common->config_dir, &a));
  model_figures_t *m = calloc(1, sizeof(*m));
  if (!m) {
    rg_arch_destroy(a);
    return rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
  }
  rg_shape_t *s = &m->shape;
  s->phase = o->phase;
  s->batch = o->batch >= 0 ? o->batch : DEFAULT_BATCH;
  if (o->phase == RG_PHASE_DECODE) {
    s->context = o->context >= 0 ? o->context : DEFAULT_DECODE_CONTEXT;
    s->new_tokens = o->new_tokens >= 0 ? o->new_tokens : 1;
  } else {
    s->context = o->context >= 0 ? o->context : 0;
    s->new_tokens = o->new_tokens >= 0 ? o->new_tokens : DEFAULT_PREFILL_TOKENS;
  }
  s->weight_dtype = o->have_dtype ? o->dtype : a->weight_dtype;
  s->kv_dtype = o->have_kv_dtype ? o->kv_dtype : RG_BF16;
  s->act_dtype = RG_BF16;

  m->params = rg_arch_params(a);
  m->active = rg_arch_active_params(a);
  for (int d = 0; d < RG_DTYPE_COMPUTE_COUNT; d++)
    m->weight_bytes[d] = rg_arch_weight_bytes(a, (rg_dtype_t)d);
  m->kv_per_token = rg_arch_kv_bytes_per_token(a, s->kv_dtype);
  m->kv_equal_tokens = m->kv_per_token > 0 ? m->weight_bytes[s->weight_dtype] / m->kv_per_token : 0;

  rg_status_t st = rg_stage_costs(a, s, m->st, RG_MAX_STAGE_COSTS, &m->n_st);
  if (!st) st = o->json ? print_json(a, m) : print_human(a, m);
  free(m);
  rg_arch_destroy(a);
  return st;
}

int rg_cmd_model(int argc, char **argv, const rg_cli_common_t *common) {
  model_opts_t o = {
      .phase = RG_PHASE_DECODE,
      .batch = -1,
      .context = -1,
      .new_tokens = -1,
      .dtype = RG_BF16,
      .kv_dtype = RG_BF16,
      .json = common->json,
  };
  rg_status_t s = parse_args(argc, argv, &o);
  if (s) return rg_cli_fail(CMD, s);
  if (o.help) {
    usage(stdout);
    return 0;
  }
  return rg_cli_fail(CMD, run(&o, common));
}
