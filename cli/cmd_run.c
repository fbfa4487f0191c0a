// `ridge run`: load a model on this machine's CPU device, prefill a prompt,
// stream generated text, and report TTFT, decode tokens/s, and achieved
// GB/s and GFLOP/s against this machine's limits measured in the same run.
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/units.h"
#include "cli/cli.h"
#include "cli/output.h"
#include "graphs/tokenizer.h"
#include "graphs/weights.h"
#include "runtime/engine.h"
#include "runtime/generate.h"
#include "runtime/limits.h"

static const char usage[] =
    "usage: ridge run [--model DIR|FILE] [--prompt TEXT | --prompt-ids 1,2,3] [-n N]\n"
    "                 [--temperature T] [--top-k K] [--top-p P] [--seed S] [--chat]\n"
    "                 [--batch B] [--threads N] [--kv-dtype f32|bf16|f16] [--max-context C]\n"
    "                 [--dump-logits FILE.npy] [--isa I] [--no-measure] [--json]\n"
    "\n"
    "Runs a model on this machine's CPU: prefill the prompt, then decode N tokens,\n"
    "streaming the text as it is generated. Reports time to first token, decode\n"
    "tokens/s, and the GB/s and GFLOP/s achieved against this machine's read\n"
    "bandwidth and FMA peak, measured in the same run.\n"
    "\n"
    "  --model M        a Hugging Face directory (config.json, *.safetensors, tokenizer.json)\n"
    "                   or a .gguf file; default: the random-weight test model (`ridge\n"
    "                   testmodel`), generated once into ~/.cache/ridge\n"
    "  --prompt TEXT    default \"The quick brown fox\"; --chat wraps it in the model's chat template\n"
    "  --prompt-ids L   token ids instead of text (comma-separated)\n"
    "  -n N             tokens to generate (default 64)\n"
    "  --temperature T  0 = greedy (default 0.8); --top-k (default 40), --top-p (default 0.95)\n"
    "  --seed S         sampling seed (default 0); sequence i uses S + i\n"
    "  --batch B        decode B copies of the prompt together (default 1)\n"
    "  --threads N      CPU threads (default: one per core)\n"
    "  --kv-dtype T     KV cache dtype (default bf16)\n"
    "  --dump-logits F  write the logits behind every generated token of sequence 0 as a\n"
    "                   float32 .npy of shape (N, vocab)\n"
    "  --isa I          cap the kernels: scalar, avx2, avx512, avx512-bf16 (default: the best\n"
    "                   this CPU has; avx512 keeps bf16 matmuls' activations in f32)\n"
    "  --no-measure     skip measuring the machine's limits (saves ~0.3 s)\n"
    "  --json           statistics as JSON (text is not streamed)\n"
    "\n"
    "examples:\n"
    "  ridge run\n"
    "  ridge testmodel --arch llama --size tiny --out /tmp/tiny && ridge run --model /tmp/tiny --prompt \"hello\" -n 16\n"
    "  ridge run --model /tmp/tiny/model.gguf --temperature 0 -n 32\n";

typedef struct {
  const char *model, *prompt, *prompt_ids, *dump, *kvdt, *isa;
  long long n, top_k, seed, batch, threads, max_context;
  double temperature, top_p;
  int chat, json, no_measure;
} run_args_t;

static rg_status_t parse_num(const char *flag, const char *s, long long lo, long long hi, long long *out) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (end == s || *end || errno || v < lo || v > hi)
    return rg_status_make(RG_INVALID_ARGUMENT, "%s: expected a whole number from %lld to %lld, got '%s'", flag, lo, hi, s);
  *out = v;
  return NULL;
}

static rg_status_t parse_real(const char *flag, const char *s, double lo, double hi, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (end == s || *end || errno || !(v >= lo && v <= hi))
    return rg_status_make(RG_INVALID_ARGUMENT, "%s: expected a number from %g to %g, got '%s'", flag, lo, hi, s);
  *out = v;
  return NULL;
}

static rg_status_t parse_args(int argc, char **argv, const rg_cli_common_t *common, run_args_t *a, int *help) {
  static const struct option longs[] = {
      {"model", required_argument, 0, 'm'},       {"prompt", required_argument, 0, 'p'},
      {"prompt-ids", required_argument, 0, 'I'},  {"tokens", required_argument, 0, 'n'},
      {"temperature", required_argument, 0, 't'}, {"top-k", required_argument, 0, 'k'},
      {"top-p", required_argument, 0, 'P'},       {"seed", required_argument, 0, 's'},
      {"batch", required_argument, 0, 'b'},       {"threads", required_argument, 0, 'T'},
      {"kv-dtype", required_argument, 0, 'K'},    {"max-context", required_argument, 0, 'C'},
      {"dump-logits", required_argument, 0, 'D'}, {"chat", no_argument, 0, 'c'},
      {"no-measure", no_argument, 0, 'N'},        {"json", no_argument, 0, 'j'},
      {"isa", required_argument, 0, 'A'},         {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0}};
  memset(a, 0, sizeof(*a));
  a->n = 64;
  a->top_k = 40;
  a->top_p = 0.95;
  a->temperature = 0.8;
  a->batch = 1;
  a->json = common->json;
  rg_cli_getopt_reset();
  int c;
  while ((c = getopt_long(argc, argv, ":m:p:I:n:t:k:P:s:b:T:K:C:D:A:cNjh", longs, NULL)) != -1) {
    switch (c) {
      case 'm': a->model = optarg; break;
      case 'p': a->prompt = optarg; break;
      case 'I': a->prompt_ids = optarg; break;
      case 'n': RG_RETURN_IF_ERROR(parse_num("-n", optarg, 1, 1 << 20, &a->n)); break;
      case 't': RG_RETURN_IF_ERROR(parse_real("--temperature", optarg, 0, 100, &a->temperature)); break;
      case 'k': RG_RETURN_IF_ERROR(parse_num("--top-k", optarg, 0, INT32_MAX, &a->top_k)); break;
      case 'P': RG_RETURN_IF_ERROR(parse_real("--top-p", optarg, 1e-9, 1, &a->top_p)); break;
      case 's': RG_RETURN_IF_ERROR(parse_num("--seed", optarg, 0, LLONG_MAX, &a->seed)); break;
      case 'b': RG_RETURN_IF_ERROR(parse_num("--batch", optarg, 1, 256, &a->batch)); break;
      case 'T': RG_RETURN_IF_ERROR(parse_num("--threads", optarg, 1, 1024, &a->threads)); break;
      case 'K': a->kvdt = optarg; break;
      case 'C': RG_RETURN_IF_ERROR(parse_num("--max-context", optarg, 16, 1 << 24, &a->max_context)); break;
      case 'D': a->dump = optarg; break;
      case 'A': a->isa = optarg; break;
      case 'c': a->chat = 1; break;
      case 'N': a->no_measure = 1; break;
      case 'j': a->json = 1; break;
      case 'h': *help = 1; return NULL;
      default: return rg_cli_getopt_error(c, argv, longs);
    }
  }
  if (optind < argc)
    return rg_status_make(RG_INVALID_ARGUMENT, "unexpected argument '%s' (see ridge run --help)", argv[optind]);
  if (a->prompt && a->prompt_ids)
    return rg_status_make(RG_INVALID_ARGUMENT, "give --prompt or --prompt-ids, not both");
  if (a->chat && a->prompt_ids) return rg_status_make(RG_INVALID_ARGUMENT, "--chat applies to --prompt text, not ids");
  return NULL;
}

static rg_status_t parse_ids(const char *s, int32_t **out, size_t *n) {
  size_t cap = 16, k = 0;
  int32_t *ids = malloc(cap * sizeof(int32_t));
  if (!ids) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
  const char *p = s;
  while (*p) {
    char *end;
    errno = 0;
    long v = strtol(p, &end, 10);
    if (end == p || errno || v < 0 || v > INT32_MAX || (*end && *end != ',')) {
      free(ids);
      return rg_status_make(RG_INVALID_ARGUMENT, "--prompt-ids: expected comma-separated token ids, got '%s'", s);
    }
    if (k == cap) {
      cap *= 2;
      int32_t *ni = realloc(ids, cap * sizeof(int32_t));
      if (!ni) {
        free(ids);
        return rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
      }
      ids = ni;
    }
    ids[k++] = (int32_t)v;
    p = *end ? end + 1 : end;
  }
  if (!k) {
    free(ids);
    return rg_status_make(RG_INVALID_ARGUMENT, "--prompt-ids: no ids given");
  }
  *out = ids;
  *n = k;
  return NULL;
}

// The default model: the tiny random-weight test model, written once into
// the user's cache directory so every `ridge run` without --model is fast.
static rg_status_t default_model(char *out, size_t len, int quiet) {
  rg_testmodel_opts_t o = {0};
  o.arch = RG_TESTMODEL_LLAMA;
  o.size = RG_TESTMODEL_TINY;
  o.dtype = RG_T_BF16;
  o.gguf_type = RG_T_COUNT;
  int written;
  RG_RETURN_IF_ERROR(rg_testmodel_cached(&o, out, len, &written));
  if (written && !quiet) fprintf(stderr, "ridge run: no --model given; wrote the random-weight test model to %s\n", out);
  return NULL;
}

typedef struct {
  const rg_tokenizer_t *tok;
  int stream;
} stream_ctx_t;

static rg_status_t on_token(void *ctx, int seq, int32_t id) {
  stream_ctx_t *s = ctx;
  if (seq != 0 || !s->stream) return NULL;
  if (s->tok) {
    const char *bytes;
    size_t n;
    rg_status_t st = rg_tokenizer_token_bytes(s->tok, id, &bytes, &n);
    if (!st) {
      fwrite(bytes, 1, n, stdout);
    } else {
      // An id past the tokenizer's vocabulary (models pad their embedding
      // table) has no text; show the id rather than stop.
      rg_status_free(st);
      printf("[%d]", id);
    }
  } else {
    printf(" %d", id);
  }
  fflush(stdout);
  return NULL;
}

static rg_status_t run(const run_args_t *a, const rg_cli_common_t *common) {
  char model_path[4096];
  rg_engine_t *e = NULL;
  int32_t *ids = NULL, **out = NULL;
  float *dump = NULL;
  size_t n_ids = 0;
  char *prompt_text = NULL;
  rg_status_t st = NULL;
  int quiet = common->quiet || a->json;
  if (a->model) snprintf(model_path, sizeof model_path, "%s", a->model);
  else if ((st = default_model(model_path, sizeof model_path, quiet))) return st;

  rg_engine_options_t eo = {0};
  eo.threads = (int)a->threads;
  eo.max_seqs = (int)a->batch;
  eo.max_context = a->max_context;
  if (a->kvdt) {
    if (rg_dtype_parse(a->kvdt, &eo.kv_dtype) || (eo.kv_dtype != RG_F32 && eo.kv_dtype != RG_BF16 && eo.kv_dtype != RG_F16))
      return rg_status_make(RG_INVALID_ARGUMENT, "--kv-dtype: expected f32, bf16 or f16, got '%s'", a->kvdt);
    eo.kv_dtype_set = 1;
  }
  if (a->isa) {
    int found = 0;
    for (int i = 0; i < RG_CPU_ISA_COUNT; i++)
      if (!strcmp(a->isa, rg_cpu_isa_name((rg_cpu_isa_t)i))) eo.isa = i, found = 1;
    if (!found) return rg_status_make(RG_INVALID_ARGUMENT, "--isa: expected auto, scalar, avx2, avx512 or avx512-bf16, got '%s'", a->isa);
  }
  if ((st = rg_engine_create(model_path, &eo, &e))) return st;
  const rg_tokenizer_t *tok = rg_engine_tokenizer(e);
  const rg_arch_t *arch = rg_engine_arch(e);

  if (a->prompt_ids) {
    if ((st = parse_ids(a->prompt_ids, &ids, &n_ids))) goto done;
  } else {
    if (!tok) {
      st = rg_status_make(RG_INVALID_ARGUMENT, "%s has no tokenizer (tokenizer.json or GGUF vocabulary); give --prompt-ids",
                          model_path);
      goto done;
    }
    const char *text = a->prompt ? a->prompt : "The quick brown fox";
    if (a->chat) {
      rg_chat_msg_t m = {"user", text};
      if ((st = rg_chat_template_apply(rg_chat_template_for(arch->family), &m, 1, &prompt_text))) goto done;
      text = prompt_text;
    }
    // A chat template leaves the BOS to the encoder (tokenizer.h): Llama 3's
    // own template starts with <|begin_of_text|>.
    if ((st = rg_tokenizer_encode(tok, text, strlen(text), 1, a->chat, &ids, &n_ids))) goto done;
    if (!n_ids) {
      st = rg_status_make(RG_INVALID_ARGUMENT, "the prompt encodes to no tokens");
      goto done;
    }
  }
  int64_t vocab = rg_engine_vocab(e);
  if (a->dump && !(dump = calloc((size_t)a->n * (size_t)vocab, sizeof(float)))) {
    st = rg_status_make(RG_OUT_OF_MEMORY, "out of memory for %lld rows of logits", a->n);
    goto done;
  }
  rg_limits_t lim = {0};
  if (!a->no_measure && (st = rg_limits_measure(rg_engine_pool(e), 0.3, &lim))) goto done;
  if (!quiet) {
    char wb[32];
    fprintf(stderr, "ridge run: %s (%s; %s mapped)\n", model_path, rg_engine_describe(e),
            rg_fmt_quantity(rg_engine_weight_bytes(e), RG_UNIT_BYTES, wb, sizeof wb));
    fprintf(stderr, "ridge run: device cpu:0 %s, class local-cpu, %d threads; prompt %zu tokens, batch %lld\n",
            rg_engine_device_name(e), rg_engine_threads(e), n_ids, a->batch);
  }
  int nb = (int)a->batch;
  const int32_t **prompts = calloc((size_t)nb, sizeof(*prompts));
  size_t *lens = calloc((size_t)nb, sizeof(size_t));
  out = calloc((size_t)nb, sizeof(*out));
  if (!prompts || !lens || !out) {
    free(prompts), free(lens);
    st = rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
    goto done;
  }
  for (int i = 0; i < nb; i++) prompts[i] = ids, lens[i] = n_ids;
  stream_ctx_t sc = {tok, !a->json};
  rg_gen_params_t gp = {0};
  gp.n_new = a->n;
  gp.sampler.temperature = (float)a->temperature;
  gp.sampler.top_k = (int32_t)a->top_k;
  gp.sampler.top_p = (float)a->top_p;
  gp.sampler.seed = (uint64_t)a->seed;
  gp.stop_at_eog = !a->dump;  // a logits dump wants exactly N rows
  gp.on_token = on_token;
  gp.ctx = &sc;
  gp.dump_logits = dump;
  rg_gen_stats_t gs;
  if (!a->json && !quiet && tok && !a->prompt_ids) fputs(a->chat ? "" : (a->prompt ? a->prompt : "The quick brown fox"), stdout);
  st = rg_generate(e, (const int32_t *const *)prompts, lens, nb, &gp, out, &gs);
  free(prompts);
  free(lens);
  if (st) goto done;
  if (!a->json) printf("\n");
  if (a->dump) {
    // A sequence that stopped early leaves zero rows; the dump always has N.
    if ((st = rg_npy_write_f32(a->dump, dump, a->n, vocab))) goto done;
  }
  double dec_tok = gs.new_tokens - nb;
  double tps = gs.decode_seconds > 0 ? dec_tok / gs.decode_seconds : 0;
  double bytes = gs.decode.weight_bytes + gs.decode.kv_bytes;
  double gbs = gs.decode_seconds > 0 ? bytes / gs.decode_seconds : 0;
  double gfs = gs.decode_seconds > 0 ? gs.decode.flops / gs.decode_seconds : 0;
  double pf_tps = gs.prefill_seconds > 0 ? gs.prompt_tokens / gs.prefill_seconds : 0;
  double pf_gfs = gs.prefill_seconds > 0 ? gs.prefill.flops / gs.prefill_seconds : 0;
  if (a->json) {
    int bad = 0;
    cJSON *root = cJSON_CreateObject();
    if (!root) bad = 1;
    rg_json_str(root, "model", model_path, &bad);
    rg_json_str(root, "device", rg_engine_device_name(e), &bad);
    rg_json_str(root, "device_class", "local-cpu", &bad);
    rg_json_num(root, "threads", rg_engine_threads(e), &bad);
    rg_json_num(root, "batch", nb, &bad);
    rg_json_num(root, "prompt_tokens", (double)n_ids, &bad);
    rg_json_num(root, "new_tokens", (double)gs.new_tokens, &bad);
    rg_json_num(root, "ttft_s", gs.ttft, &bad);
    rg_json_num(root, "prefill_tokens_per_s", pf_tps, &bad);
    rg_json_num(root, "prefill_gflop_per_s", pf_gfs / 1e9, &bad);
    rg_json_num(root, "decode_tokens_per_s", tps, &bad);
    rg_json_num(root, "decode_gb_per_s", gbs / 1e9, &bad);
    rg_json_num(root, "decode_gflop_per_s", gfs / 1e9, &bad);
    if (!a->no_measure) {
      rg_json_num(root, "read_bandwidth_gb_per_s", lim.read_bandwidth / 1e9, &bad);
      rg_json_num(root, "fma_peak_gflop_per_s", lim.fma_peak / 1e9, &bad);
      rg_json_num(root, "decode_bandwidth_ratio", gbs / lim.read_bandwidth, &bad);
      rg_json_num(root, "prefill_peak_ratio", lim.fma_peak > 0 ? pf_gfs / lim.fma_peak : 0, &bad);
    }
    cJSON *toks = rg_json_arr(root, "tokens", &bad);
    for (int64_t i = 0; toks && i < a->n && i < gs.new_tokens; i++) {
      cJSON *v = cJSON_CreateNumber(out[0][i]);
      if (!v || !cJSON_AddItemToArray(toks, v)) bad = 1;
    }
    if (tok) {
      char *text = NULL;
      size_t tl;
      int64_t made = 0;
      while (made < a->n && made < gs.new_tokens) made++;
      rg_status_t ds = rg_tokenizer_decode(tok, out[0], (size_t)made, &text, &tl);
      if (!ds) rg_json_str(root, "text", text, &bad);
      else rg_json_str(root, "text_error", rg_status_message(ds), &bad);
      rg_status_free(ds);
      free(text);
    }
    st = rg_json_emit(root, bad, stdout);
  } else if (!common->quiet) {
    char b1[32], b2[32];
    fprintf(stderr, "\nprompt %lld tokens x %d: prefill %.1f tokens/s (%.2f GFLOP/s), TTFT %s\n", (long long)n_ids, nb, pf_tps,
            pf_gfs / 1e9, rg_fmt_quantity(gs.ttft, RG_UNIT_TIME, b1, sizeof b1));
    fprintf(stderr, "decode %lld tokens in %lld steps: %.1f tokens/s (%s per step)\n", (long long)dec_tok,
            (long long)gs.decode_steps, tps,
            rg_fmt_quantity(gs.decode_steps ? gs.decode_seconds / gs.decode_steps : 0, RG_UNIT_TIME, b2, sizeof b2));
    if (!a->no_measure)
      fprintf(stderr,
              "decode moved %.2f GB/s of weights and KV = %.0f%% of this machine's read bandwidth (%.1f GB/s, measured "
              "now); %.2f GFLOP/s = %.1f%% of its FMA peak (%.0f GFLOP/s, %s)\n",
              gbs / 1e9, 100 * gbs / lim.read_bandwidth, lim.read_bandwidth / 1e9, gfs / 1e9,
              100 * gfs / lim.fma_peak, lim.fma_peak / 1e9, lim.fma_isa);
  }
done:
  if (out) {
    for (int i = 0; i < (int)a->batch; i++) free(out[i]);
    free(out);
  }
  free(dump);
  free(ids);
  free(prompt_text);
  rg_engine_destroy(e);
  return st;
}

int rg_cmd_run(int argc, char **argv, const rg_cli_common_t *common) {
  run_args_t a;
  int help = 0;
  rg_status_t st = parse_args(argc, argv, common, &a, &help);
  if (st) return rg_cli_fail("run", st);
  if (help) {
    fputs(usage, stdout);
    return 0;
  }
  st = run(&a, common);
  return st ? rg_cli_fail("run", st) : 0;
}
