// cli/cmd_testmodel.c — `ridge testmodel`: writes a random-weight model in
// Hugging Face form (config.json, tokenizer.json, model.safetensors) and as
// GGUF (model.gguf), so loaders, engines and benchmarks run without a
// download. The work is rg_testmodel_write(); this file parses flags and
// reports.
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/units.h"
#include "base/yaml.h"
#include "cli/cli.h"
#include "cli/output.h"
#include "graphs/weights.h"

#define CMD "testmodel"

static void usage(FILE *f) {
  fprintf(
      f,
      "usage: ridge testmodel --out DIR [--arch llama|moe] [--size tiny|1b] [--seed S]\n"
      "                       [--dtype bf16|f32|f16] [--gguf-type same|q8_0] [--force] [--json]\n"
      "\n"
      "Writes a model with seeded random weights and a small trained BPE tokenizer, in both\n"
      "formats ridge reads:\n"
      "  DIR/config.json        Hugging Face config (LlamaForCausalLM with llama3 rope\n"
      "                         scaling, or MixtralForCausalLM)\n"
      "  DIR/tokenizer.json     the tokenizer (byte-level BPE)\n"
      "  DIR/model.safetensors  the weights\n"
      "  DIR/model.gguf         the same weights and tokenizer as GGUF v3\n"
      "\n"
      "  --out DIR        where to write (created if missing; must be empty without --force)\n"
      "  --arch A         llama (default) or moe (Mixtral-style, top-2 of 4 or 8 experts)\n"
      "  --size S         tiny (default; d_model 64, 2 layers, a few hundred KB) or 1b\n"
      "                   (Llama-3.2-1B-like, about 1.1 B parameters: 2.2 GB per copy in bf16)\n"
      "  --seed S         PRNG seed (default 1); the same seed gives the same bytes\n"
      "  --dtype T        weight type: bf16 (default), f32 or f16\n"
      "  --gguf-type T    same (default: the GGUF holds the same values as the safetensors)\n"
      "                   or q8_0 (matrices quantized; norms keep --dtype)\n"
      "  --force          write into a non-empty DIR, replacing the files above\n"
      "  --json           machine-readable summary\n"
      "\n"
      "example: ridge testmodel --arch moe --size tiny --out /tmp/tiny-moe\n");
}

typedef struct {
  rg_testmodel_opts_t m;
  const char *out;
  int json, help;
} testmodel_opts_t;

// Matches text against a list of choices; the error names the flag and
// suggests the nearest choice.
static rg_status_t choose(const char *flag, const char *text, const char *const *names, size_t n,
                          int *out) {
  for (size_t i = 0; i < n; i++) {
    if (!strcmp(text, names[i])) {
      *out = (int)i;
      return NULL;
    }
  }
  char list[128] = "";
  for (size_t i = 0; i < n; i++) {
    size_t u = strlen(list);
    snprintf(list + u, sizeof(list) - u, "%s%s", i ? ", " : "", names[i]);
  }
  const char *near = rg_nearest(text, names, n);
  if (near)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "%s: unknown value '%s'; did you mean %s? (one of %s)", flag, text, near,
                          list);
  return rg_status_make(RG_INVALID_ARGUMENT, "%s: unknown value '%s'; use one of %s", flag, text,
                        list);
}

static rg_status_t parse_args(int argc, char **argv, testmodel_opts_t *o) {
  enum { O_ARCH = 1000, O_SIZE, O_OUT, O_SEED, O_DTYPE, O_GGUF, O_FORCE, O_JSON, O_HELP };
  static const struct option longs[] = {
      {"arch", required_argument, NULL, O_ARCH},   {"size", required_argument, NULL, O_SIZE},
      {"out", required_argument, NULL, O_OUT},     {"seed", required_argument, NULL, O_SEED},
      {"dtype", required_argument, NULL, O_DTYPE}, {"gguf-type", required_argument, NULL, O_GGUF},
      {"force", no_argument, NULL, O_FORCE},       {"json", no_argument, NULL, O_JSON},
      {"help", no_argument, NULL, O_HELP},         {NULL, 0, NULL, 0},
  };
  static const char *const archs[] = {"llama", "moe"};
  static const char *const sizes[] = {"tiny", "1b"};
  static const char *const dtypes[] = {"bf16", "f32", "f16"};
  static const rg_dtype_t dtype_of[] = {RG_BF16, RG_F32, RG_F16};
  static const char *const gguf_types[] = {"same", "q8_0"};
  rg_cli_getopt_reset();
  int c, k = 0;
  while ((c = getopt_long(argc, argv, ":h", longs, NULL)) != -1) {
    switch (c) {
      case O_ARCH:
        RG_RETURN_IF_ERROR(choose("--arch", optarg, archs, 2, &k));
        o->m.arch = k ? RG_TESTMODEL_MOE : RG_TESTMODEL_LLAMA;
        break;
      case O_SIZE:
        RG_RETURN_IF_ERROR(choose("--size", optarg, sizes, 2, &k));
        o->m.size = k ? RG_TESTMODEL_1B : RG_TESTMODEL_TINY;
        break;
      case O_OUT:
        if (!*optarg) return rg_status_make(RG_INVALID_ARGUMENT, "--out needs a directory");
        o->out = optarg;
        break;
      case O_SEED: {
        char *end = NULL;
        if (optarg[0] == '-' || !optarg[0])
          return rg_status_make(RG_INVALID_ARGUMENT, "--seed: '%s' is not a non-negative integer",
                                optarg);
        unsigned long long v = strtoull(optarg, &end, 0);
        if (*end)
          return rg_status_make(RG_INVALID_ARGUMENT, "--seed: '%s' is not a non-negative integer",
                                optarg);
        o->m.seed = v;
        break;
      }
      case O_DTYPE:
        RG_RETURN_IF_ERROR(choose("--dtype", optarg, dtypes, 3, &k));
        o->m.dtype = dtype_of[k];
        break;
      case O_GGUF:
        RG_RETURN_IF_ERROR(choose("--gguf-type", optarg, gguf_types, 2, &k));
        o->m.gguf_type = k ? RG_Q8_0 : RG_DTYPE_COUNT;
        break;
      case O_FORCE:
        o->m.force = 1;
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
  if (optind < argc)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "unexpected argument '%s'; the output directory goes after --out",
                          argv[optind]);
  if (!o->out)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "where to? give --out DIR (e.g. ridge testmodel --out /tmp/tiny)");
  return NULL;
}

typedef struct {
  int last_pct;
  const char *last_file;
} progress_t;

static void progress(void *ctx, const char *file, uint64_t done, uint64_t total) {
  progress_t *p = ctx;
  int pct = total ? (int)(100.0 * (double)done / (double)total) : 100;
  if (file == p->last_file && pct == p->last_pct) return;
  p->last_file = file;
  p->last_pct = pct;
  char b1[32], b2[32];
  fprintf(stderr, "\rwriting %s: %3d%% (%s of %s)", file, pct,
          rg_fmt_quantity((double)done, RG_UNIT_BYTES, b1, sizeof(b1)),
          rg_fmt_quantity((double)total, RG_UNIT_BYTES, b2, sizeof(b2)));
  if (done >= total) fputc('\n', stderr);
  fflush(stderr);
}

int rg_cmd_testmodel(int argc, char **argv, const rg_cli_common_t *common) {
  testmodel_opts_t o;
  memset(&o, 0, sizeof(o));
  o.m.seed = 1;
  o.m.dtype = RG_BF16;
  o.m.gguf_type = RG_DTYPE_COUNT;
  rg_status_t s = parse_args(argc, argv, &o);
  if (s) return rg_cli_fail(CMD, s);
  if (o.help) {
    usage(stdout);
    return 0;
  }
  int json = o.json || common->json;
  progress_t pr = {-1, NULL};
  if (o.m.size == RG_TESTMODEL_1B && !common->quiet) {
    o.m.progress = progress;
    o.m.progress_ctx = &pr;
  }
  rg_testmodel_info_t info;
  memset(&info, 0, sizeof(info));
  s = rg_testmodel_write(o.out, &o.m, &info);
  if (s) return rg_cli_fail(CMD, s);
  const char *arch = o.m.arch == RG_TESTMODEL_MOE ? "moe" : "llama";
  const char *size = o.m.size == RG_TESTMODEL_1B ? "1b" : "tiny";
  const char *gguf = rg_dtype_name(o.m.gguf_type == RG_Q8_0 ? RG_Q8_0 : o.m.dtype);
  if (json) {
    int bad = 0;
    cJSON *root = cJSON_CreateObject();
    if (!root) bad = 1;
    rg_json_str(root, "dir", o.out, &bad);
    rg_json_str(root, "arch", arch, &bad);
    rg_json_str(root, "size", size, &bad);
    rg_json_num(root, "seed", (double)o.m.seed, &bad);
    rg_json_num(root, "params", info.params, &bad);
    rg_json_num(root, "vocab_size", (double)info.vocab, &bad);
    rg_json_num(root, "tokenizer_tokens", (double)info.n_tokens, &bad);
    rg_json_str(root, "dtype", rg_dtype_name(o.m.dtype), &bad);
    rg_json_str(root, "gguf_type", gguf, &bad);
    rg_json_num(root, "safetensors_bytes", (double)info.safetensors_bytes, &bad);
    rg_json_num(root, "gguf_bytes", (double)info.gguf_bytes, &bad);
    return rg_cli_fail(CMD, rg_json_emit(root, bad, stdout));
  }
  char b1[32], b2[32], b3[32];
  printf("wrote %s: %s %s, %s parameters, vocab %lld (%lld tokenizer tokens), seed %llu\n", o.out,
         arch, size, rg_fmt_count(info.params, b1, sizeof(b1)), (long long)info.vocab,
         (long long)info.n_tokens, (unsigned long long)o.m.seed);
  printf("  config.json, tokenizer.json\n");
  printf("  model.safetensors  %s (%s)\n",
         rg_fmt_quantity((double)info.safetensors_bytes, RG_UNIT_BYTES, b2, sizeof(b2)),
         rg_dtype_name(o.m.dtype));
  printf("  model.gguf         %s (%s)\n",
         rg_fmt_quantity((double)info.gguf_bytes, RG_UNIT_BYTES, b3, sizeof(b3)), gguf);
  return 0;
}
