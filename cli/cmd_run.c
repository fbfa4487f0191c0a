// `ridge run`: run a model on this machine's devices. One prompt (streamed,
// optionally decoded in copies), a file of requests, or a synthetic
// workload, all through continuous batching (runtime/serve.h over sched/).
// Reports per-request TTFT and TBT, their percentiles, throughput, KV
// occupancy, the prefix-cache hit rate, and per stage the measured time
// beside the planner's cost model for that stage over the steps the run
// took, on the class of the device it ran on calibrated by a quick profile
// of that device (cli/calibrate.c).
#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/units.h"
#include "base/utf8.h"
#include "cli/cli.h"
#include "cli/output.h"
#include "graphs/tokenizer.h"
#include "graphs/weights.h"
#include "planner/workload_gen.h"
#include "runtime/cluster.h"
#include "runtime/engine.h"
#include "runtime/generate.h"
#include "runtime/limits.h"
#include "runtime/serve.h"

static const char usage[] =
    "usage: ridge run [--model DIR|FILE] [--prompt TEXT | --prompt-ids 1,2,3 | --requests "
    "FILE.jsonl |\n"
    "                 --workload W --num-requests N] [-n N] [--temperature T] [--top-k K] [--top-p "
    "P]\n"
    "                 [--seed S] [--chat] [--batch B] [--device D] [--threads N] [--isa I]\n"
    "                 [--batch-invariant] [--profile-ops]\n"
    "                 [--max-seqs N] [--max-batch-tokens N] [--block-size N] [--prefix-cache "
    "on|off]\n"
    "                 [--max-context C] [--kv-tokens N] [--kv-dtype f32|bf16|f16] [--swap-tokens "
    "N]\n"
    "                 [--preempt recompute|swap] [--dump-logits FILE.npy] [--no-measure] [--json]\n"
    "                 [--layout L [--workers D1,D2] [--micro-batches 2] [--provider P] [--trace "
    "F]\n"
    "                  [--listen HOST:PORT --secret-file F]]\n"
    "                 [--plan FILE [--pool N] [--provider P] [--trace F] ...]\n"
    "\n"
    "Runs a model on this machine with continuous batching: every iteration the scheduler takes "
    "the\n"
    "running decodes, then prefill chunks, within a token budget. Reports time to first token "
    "(TTFT),\n"
    "time between tokens (TBT) and end-to-end latency per request and as p50/p90/p99, throughput, "
    "KV\n"
    "occupancy, the prefix-cache hit rate, and for each stage the measured time beside the "
    "planner's\n"
    "cost model for that stage over the same steps, on the class of the device it ran on "
    "calibrated\n"
    "by a quick profile of that device (a few seconds the first time; cached for a day in\n"
    "~/.cache/ridge/calibrated, one file per device).\n"
    "\n"
    "What to run (one of):\n"
    "  --prompt TEXT      default \"The quick brown fox\", streamed; --chat wraps it in the "
    "model's\n"
    "                     chat template; --batch B decodes B copies together\n"
    "  --prompt-ids L     token ids instead of text (comma-separated)\n"
    "  --requests F       one JSON object a line: \"prompt\" (text) or \"prompt_ids\" (ids), and\n"
    "                     optionally \"max_tokens\", \"temperature\", \"top_k\", \"top_p\", "
    "\"seed\",\n"
    "                     \"arrival_s\" (seconds after the start). A line with a bad field fails "
    "alone,\n"
    "                     named by its line and field; the others run\n"
    "  --workload W       synthetic requests from a workload (configs/workloads/W.yaml or a "
    "path):\n"
    "                     its prompt and output lengths and its arrival process; --num-requests N\n"
    "                     (default 16), --rate R req/s overrides its rate (0: all at once)\n"
    "\n"
    "  --model M          a Hugging Face directory (config.json, *.safetensors, tokenizer.json) or "
    "a\n"
    "                     .gguf file; default: the random-weight test model (`ridge testmodel`),\n"
    "                     generated once into ~/.cache/ridge\n"
    "  -n N               tokens to generate per request (default 64; a request's max_tokens "
    "wins)\n"
    "  --temperature T    0 = greedy (default 0.8); --top-k (default 40), --top-p (default 0.95)\n"
    "  --seed S           sampling seed (default 0); request i samples with S + i\n"
    "  --device D         where the stages run: cpu:0 (default) or another device `ridge devices` "
    "lists\n"
    "  --threads N        CPU threads (default: one per core)\n"
    "  --isa I            cap the CPU kernels: scalar, avx2, avx512, avx512-bf16, amx (default: "
    "the best\n"
    "                     this CPU has; avx512 keeps the matmuls' activations in f32)\n"
    "  --batch-invariant  CPU kernels whose results do not depend on the batch: a request's\n"
    "                     tokens are the same alone, in any batch, or after a preemption that\n"
    "                     recomputes it (greedy). Costs batch-1 decode speed: the matmuls keep\n"
    "                     the batch kernel (AMX tiles where present) at every batch size\n"
    "\n"
    "Scheduling (defaults suit a CPU of this size):\n"
    "  --max-seqs N       sequences running at once (default 16; with --batch, B)\n"
    "  --max-batch-tokens N  tokens per iteration, decodes + prefill chunks (default 512)\n"
    "  --block-size N     tokens per KV block (default 16)\n"
    "  --prefix-cache on|off  share the KV of identical prompt prefixes (default on)\n"
    "  --max-context C    tokens per sequence (default min(model, 4096))\n"
    "  --kv-tokens N      KV capacity over all sequences (default max-seqs x max-context);\n"
    "                     on the CPU it is all in memory from the start\n"
    "  --kv-dtype T       KV cache dtype (default bf16)\n"
    "  --swap-tokens N    a host-memory tier for preempted KV (default 0: none)\n"
    "  --preempt P        recompute (default) or swap (needs --swap-tokens)\n"
    "  --tier-tokens N    a capacity tier for idle cached prefixes (default 0: none): host\n"
    "                     memory standing in for DRAM or SSD; with --layout, its own worker\n"
    "  --retention S      seconds an unused cached prefix stays on the device before it moves\n"
    "                     to the tier (the golden time; default 0: only when room is needed)\n"
    "\n"
    "Across processes (the dataflow runtime: one `ridge worker` per device, linked by libfabric):\n"
    "  --layout L         colocated (every stage on one worker), attention-ffn (embed, attention\n"
    "                     and its KV, lm_head on the first worker; FFN/MoE on the second),\n"
    "                     experts (an MoE model's experts split between two workers), pipeline\n"
    "                     (the first half of the layers on one worker, the rest on the other) or\n"
    "                     prefill-decode (prompts on the first worker, whose KV pages go by RMA\n"
    "                     into the second's pool, which decodes; --block-size is the prefill\n"
    "                     side's, --decode-block-size N the decode side's: pages are split or\n"
    "                     merged between them, and a prefix cached on the decode side is not "
    "sent).\n"
    "                     The coordinator (this process) schedules, samples and reports; the\n"
    "                     logits are those of the single-process run\n"
    "  --workers D1,D2    each worker's device (default cpu:0 for each)\n"
    "  --micro-batches N  2: split each step in two and ping-pong them between the workers, so\n"
    "                     both sides of an attention-FFN split compute at once (default 1)\n"
    "  --provider P       libfabric provider for the data plane (default: $FI_PROVIDER, else shm,\n"
    "                     then tcp;ofi_rxm)\n"
    "  --trace F          a Chrome trace (chrome://tracing, Perfetto) of every worker's stages,\n"
    "                     waits and transfers\n"
    "  --listen H:P       start no workers: wait for `ridge worker --coordinator H:P --name wN`\n"
    "                     to join (w0, w1, ... in layout order); needs --secret-file F\n"
    "  --step-timeout S   seconds a step may take before the worker that owes it is named (default "
    "10)\n"
    "  --plan F           run one pool of a plan (`ridge plan -o F`, or a placement written by "
    "hand)\n"
    "                     the same way: one worker per group, on the first device present here of\n"
    "                     those its class's fleet entry names in run_on: "
    "(configs/fleets/local-hetero\n"
    "                     plays an H100, a Bertha 500 and host DRAM on this machine). Each worker "
    "is\n"
    "                     labelled with the class it stands in for, and the plan's predictions "
    "for\n"
    "                     its classes are printed beside what runs. One device per group and one\n"
    "                     replica: wider plans are refused. Not with --layout, --workers or\n"
    "                     --micro-batches (the plan gives them)\n"
    "  --pool N           which pool of the plan runs (default 1)\n"
    "\n"
    "  --dump-logits F    the logits behind every generated token of request 0, a float32 .npy of\n"
    "                     shape (N, vocab)\n"
    "  --no-measure       skip measuring the machine's limits and predicting each stage (saves\n"
    "                     ~0.3 s, and the profiles the predictions need)\n"
    "  --no-calibrate     predict each stage on its device's datasheet class, not profiled\n"
    "  --recalibrate      profile each device again even if its cached calibration is young\n"
    "  --profile-ops      time every op of every stage and print, per op kind, its calls, total\n"
    "                     and share of the stages' time (single process only; an asynchronous\n"
    "                     device waits for each op while this is on)\n"
    "  --json             every figure as JSON (text is not streamed)\n"
    "\n"
    "examples:\n"
    "  ridge run\n"
    "  ridge run --workload chat --num-requests 32 --rate 4\n"
    "  ridge run --requests reqs.jsonl --max-seqs 8 --json\n"
    "  ridge run --layout attention-ffn --micro-batches 2 --workload chat --trace /tmp/afd.json\n"
    "  ridge plan --model DIR --placement configs/placements/local-hetero.yaml -o /tmp/plan.yaml\n"
    "  ridge run --model DIR --plan /tmp/plan.yaml\n"
    "  ridge testmodel --arch llama --size tiny --out /tmp/tiny && ridge run --model /tmp/tiny "
    "--prompt hi -n 16\n";

typedef struct {
  const char *model, *prompt, *prompt_ids, *dump, *kvdt, *isa, *requests, *workload, *device,
      *ffn_device;
  const char *preempt, *layout, *workers, *provider, *trace, *listen, *secret_file;
  const char *plan, *config_dir;
  long long pool;
  double step_timeout;
  long long micro_batches;
  long long n, top_k, seed, batch, threads, max_context, max_seqs, max_batch_tokens, block_size,
      kv_tokens;
  long long swap_tokens, num_requests, decode_block_size, tier_tokens;
  double retention;
  double temperature, top_p, rate;
  int chat, json, no_measure, prefix_cache, no_calibrate, recalibrate, batch_invariant;
  int profile_ops;
} run_args_t;

static rg_status_t parse_num(const char *flag, const char *s, long long lo, long long hi,
                             long long *out) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (end == s || *end || errno || v < lo || v > hi)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "%s: expected a whole number from %lld to %lld, got '%s'", flag, lo, hi,
                          s);
  *out = v;
  return NULL;
}

static rg_status_t parse_real(const char *flag, const char *s, double lo, double hi, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (end == s || *end || errno || !(v >= lo && v <= hi))
    return rg_status_make(RG_INVALID_ARGUMENT, "%s: expected a number from %g to %g, got '%s'",
                          flag, lo, hi, s);
  *out = v;
  return NULL;
}

enum {
  O_REQUESTS = 1000,
  O_WORKLOAD,
  O_NUM,
  O_RATE,
  O_DEVICE,
  O_FFN_DEVICE,
  O_MAX_SEQS,
  O_MAX_BATCH,
  O_BLOCK,
  O_PREFIX,
  O_KV_TOKENS,
  O_SWAP,
  O_PREEMPT,
  O_LAYOUT,
  O_WORKERS,
  O_MICRO,
  O_PROVIDER,
  O_TRACE,
  O_LISTEN,
  O_SECRET,
  O_STEP_TIMEOUT,
  O_DECODE_BLOCK,
  O_TIER,
  O_RETENTION,
  O_PLAN,
  O_POOL,
  O_NO_CALIBRATE,
  O_RECALIBRATE,
  O_BATCH_INVARIANT,
  O_PROFILE_OPS
};

static rg_status_t parse_args(int argc, char **argv, const rg_cli_common_t *common, run_args_t *a,
                              int *help) {
  static const struct option longs[] = {{"model", required_argument, 0, 'm'},
                                        {"prompt", required_argument, 0, 'p'},
                                        {"prompt-ids", required_argument, 0, 'I'},
                                        {"tokens", required_argument, 0, 'n'},
                                        {"temperature", required_argument, 0, 't'},
                                        {"top-k", required_argument, 0, 'k'},
                                        {"top-p", required_argument, 0, 'P'},
                                        {"seed", required_argument, 0, 's'},
                                        {"batch", required_argument, 0, 'b'},
                                        {"threads", required_argument, 0, 'T'},
                                        {"kv-dtype", required_argument, 0, 'K'},
                                        {"max-context", required_argument, 0, 'C'},
                                        {"dump-logits", required_argument, 0, 'D'},
                                        {"chat", no_argument, 0, 'c'},
                                        {"no-measure", no_argument, 0, 'N'},
                                        {"json", no_argument, 0, 'j'},
                                        {"isa", required_argument, 0, 'A'},
                                        {"requests", required_argument, 0, O_REQUESTS},
                                        {"workload", required_argument, 0, O_WORKLOAD},
                                        {"num-requests", required_argument, 0, O_NUM},
                                        {"rate", required_argument, 0, O_RATE},
                                        {"device", required_argument, 0, O_DEVICE},
                                        {"ffn-device", required_argument, 0, O_FFN_DEVICE},
                                        {"max-seqs", required_argument, 0, O_MAX_SEQS},
                                        {"max-batch-tokens", required_argument, 0, O_MAX_BATCH},
                                        {"block-size", required_argument, 0, O_BLOCK},
                                        {"prefix-cache", required_argument, 0, O_PREFIX},
                                        {"kv-tokens", required_argument, 0, O_KV_TOKENS},
                                        {"swap-tokens", required_argument, 0, O_SWAP},
                                        {"preempt", required_argument, 0, O_PREEMPT},
                                        {"layout", required_argument, 0, O_LAYOUT},
                                        {"workers", required_argument, 0, O_WORKERS},
                                        {"micro-batches", required_argument, 0, O_MICRO},
                                        {"provider", required_argument, 0, O_PROVIDER},
                                        {"trace", required_argument, 0, O_TRACE},
                                        {"listen", required_argument, 0, O_LISTEN},
                                        {"secret-file", required_argument, 0, O_SECRET},
                                        {"step-timeout", required_argument, 0, O_STEP_TIMEOUT},
                                        {"decode-block-size", required_argument, 0, O_DECODE_BLOCK},
                                        {"tier-tokens", required_argument, 0, O_TIER},
                                        {"retention", required_argument, 0, O_RETENTION},
                                        {"plan", required_argument, 0, O_PLAN},
                                        {"pool", required_argument, 0, O_POOL},
                                        {"no-calibrate", no_argument, 0, O_NO_CALIBRATE},
                                        {"recalibrate", no_argument, 0, O_RECALIBRATE},
                                        {"batch-invariant", no_argument, 0, O_BATCH_INVARIANT},
                                        {"profile-ops", no_argument, 0, O_PROFILE_OPS},
                                        {"help", no_argument, 0, 'h'},
                                        {0, 0, 0, 0}};
  memset(a, 0, sizeof(*a));
  a->n = 64;
  a->top_k = 40;
  a->top_p = 0.95;
  a->temperature = 0.8;
  a->batch = 1;
  a->num_requests = 16;
  a->rate = -1;
  a->prefix_cache = 1;
  a->json = common->json;
  a->config_dir = common->config_dir;
  rg_cli_getopt_reset();
  int c;
  long long v;
  while ((c = getopt_long(argc, argv, ":m:p:I:n:t:k:P:s:b:T:K:C:D:A:cNjh", longs, NULL)) != -1) {
    switch (c) {
      case 'm':
        a->model = optarg;
        break;
      case 'p':
        a->prompt = optarg;
        break;
      case 'I':
        a->prompt_ids = optarg;
        break;
      case 'n':
        RG_RETURN_IF_ERROR(parse_num("-n", optarg, 1, 1 << 20, &a->n));
        break;
      case 't':
        RG_RETURN_IF_ERROR(parse_real("--temperature", optarg, 0, 100, &a->temperature));
        break;
      case 'k':
        RG_RETURN_IF_ERROR(parse_num("--top-k", optarg, 0, INT32_MAX, &a->top_k));
        break;
      case 'P':
        RG_RETURN_IF_ERROR(parse_real("--top-p", optarg, 1e-9, 1, &a->top_p));
        break;
      case 's':
        RG_RETURN_IF_ERROR(parse_num("--seed", optarg, 0, LLONG_MAX, &a->seed));
        break;
      case 'b':
        RG_RETURN_IF_ERROR(parse_num("--batch", optarg, 1, 256, &a->batch));
        break;
      case 'T':
        RG_RETURN_IF_ERROR(parse_num("--threads", optarg, 1, 1024, &a->threads));
        break;
      case 'K':
        a->kvdt = optarg;
        break;
      case 'C':
        RG_RETURN_IF_ERROR(rg_parse_count("--max-context", optarg, 16, &a->max_context));
        break;
      case 'D':
        a->dump = optarg;
        break;
      case 'A':
        a->isa = optarg;
        break;
      case O_BATCH_INVARIANT:
        a->batch_invariant = 1;
        break;
      case O_PROFILE_OPS:
        a->profile_ops = 1;
        break;
      case 'c':
        a->chat = 1;
        break;
      case 'N':
        a->no_measure = 1;
        break;
      case 'j':
        a->json = 1;
        break;
      case O_REQUESTS:
        a->requests = optarg;
        break;
      case O_WORKLOAD:
        a->workload = optarg;
        break;
      case O_NUM:
        RG_RETURN_IF_ERROR(parse_num("--num-requests", optarg, 1, 1 << 20, &a->num_requests));
        break;
      case O_RATE:
        RG_RETURN_IF_ERROR(parse_real("--rate", optarg, 0, 1e6, &a->rate));
        break;
      case O_DEVICE:
        a->device = optarg;
        break;
      case O_FFN_DEVICE:
        a->ffn_device = optarg;
        break;
      case O_MAX_SEQS:
        RG_RETURN_IF_ERROR(parse_num("--max-seqs", optarg, 1, 4096, &a->max_seqs));
        break;
      case O_MAX_BATCH:
        RG_RETURN_IF_ERROR(rg_parse_count("--max-batch-tokens", optarg, 1, &v));
        a->max_batch_tokens = v;
        break;
      case O_BLOCK:
        RG_RETURN_IF_ERROR(parse_num("--block-size", optarg, 1, 1024, &a->block_size));
        break;
      case O_PREFIX:
        if (!strcmp(optarg, "on") || !strcmp(optarg, "off"))
          a->prefix_cache = !strcmp(optarg, "on");
        else
          return rg_status_make(RG_INVALID_ARGUMENT, "--prefix-cache: expected on or off, got '%s'",
                                optarg);
        break;
      case O_KV_TOKENS:
        RG_RETURN_IF_ERROR(rg_parse_count("--kv-tokens", optarg, 1, &a->kv_tokens));
        break;
      case O_SWAP:
        RG_RETURN_IF_ERROR(rg_parse_count("--swap-tokens", optarg, 0, &a->swap_tokens));
        break;
      case O_PREEMPT:
        a->preempt = optarg;
        break;
      case O_LAYOUT:
        a->layout = optarg;
        break;
      case O_WORKERS:
        a->workers = optarg;
        break;
      case O_MICRO:
        RG_RETURN_IF_ERROR(parse_num("--micro-batches", optarg, 1, 2, &a->micro_batches));
        break;
      case O_PROVIDER:
        a->provider = optarg;
        break;
      case O_TRACE:
        a->trace = optarg;
        break;
      case O_LISTEN:
        a->listen = optarg;
        break;
      case O_SECRET:
        a->secret_file = optarg;
        break;
      case O_TIER:
        RG_RETURN_IF_ERROR(rg_parse_count("--tier-tokens", optarg, 0, &a->tier_tokens));
        break;
      case O_RETENTION:
        RG_RETURN_IF_ERROR(parse_real("--retention", optarg, 0, 1e7, &a->retention));
        break;
      case O_DECODE_BLOCK:
        RG_RETURN_IF_ERROR(
            parse_num("--decode-block-size", optarg, 1, 1024, &a->decode_block_size));
        break;
      case O_STEP_TIMEOUT:
        RG_RETURN_IF_ERROR(parse_real("--step-timeout", optarg, 0.01, 3600, &a->step_timeout));
        break;
      case O_PLAN:
        a->plan = optarg;
        break;
      case O_POOL:
        RG_RETURN_IF_ERROR(parse_num("--pool", optarg, 1, RG_MAX_POOLS, &a->pool));
        break;
      case O_NO_CALIBRATE:
        a->no_calibrate = 1;
        break;
      case O_RECALIBRATE:
        a->recalibrate = 1;
        break;
      case 'h':
        *help = 1;
        return NULL;
      default:
        return rg_cli_getopt_error(c, argv, longs);
    }
  }
  if (optind < argc)
    return rg_status_make(RG_INVALID_ARGUMENT, "unexpected argument '%s' (see ridge run --help)",
                          argv[optind]);
  int sources = !!a->prompt + !!a->prompt_ids + !!a->requests + !!a->workload;
  if (sources > 1)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "give one of --prompt, --prompt-ids, --requests and --workload");
  if (a->chat && (a->prompt_ids || a->requests || a->workload))
    return rg_status_make(RG_INVALID_ARGUMENT, "--chat applies to --prompt text");
  if (a->retention > 0 && !a->tier_tokens)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "--retention is how long a prefix waits before moving to the capacity "
                          "tier: give --tier-tokens too");
  if (a->tier_tokens && !a->prefix_cache)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "--tier-tokens holds cached prefixes: it needs --prefix-cache on");
  if (a->decode_block_size &&
      (!a->layout || (strcmp(a->layout, "prefill-decode") && strcmp(a->layout, "pd"))))
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "--decode-block-size goes with --layout prefill-decode");
  if (a->plan && a->layout)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "give --layout or --plan, not both: a plan's pool is its own layout");
  if (a->plan && (a->workers || a->micro_batches || a->device || a->ffn_device))
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "--plan gives the devices and micro-batches: each group runs where its "
                          "class's fleet entry says in run_on:, so --workers, --micro-batches, "
                          "--device and --ffn-device do not go with it");
  if (a->pool && !a->plan) return rg_status_make(RG_INVALID_ARGUMENT, "--pool goes with --plan");
  if (a->profile_ops && (a->layout || a->plan))
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "--profile-ops times the ops of this process's stages; with --%s the "
                          "stages run in worker processes, which do not report op times",
                          a->layout ? "layout" : "plan");
  if (a->no_calibrate && a->recalibrate)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "give --no-calibrate or --recalibrate, not both: one skips the profile, "
                          "the other forces it");
  if (a->no_measure && (a->no_calibrate || a->recalibrate))
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "--no-measure skips the predictions, so %s has nothing to do",
                          a->no_calibrate ? "--no-calibrate" : "--recalibrate");
  if (!a->layout && a->workers)
    return rg_status_make(RG_INVALID_ARGUMENT, "--workers goes with --layout");
  if (!a->layout && !a->plan &&
      (a->micro_batches || a->provider || a->trace || a->listen || a->secret_file ||
       a->step_timeout))
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "--micro-batches, --provider, --trace, --listen, --secret-file and "
                          "--step-timeout go with --layout or --plan");
  if (a->layout && (a->device || a->ffn_device))
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "with --layout, --workers names the devices (not --device/--ffn-device)");
  if (a->listen && !a->secret_file)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "--listen needs --secret-file: workers joining from elsewhere prove they "
                          "share it");
  if (a->secret_file && !a->listen)
    return rg_status_make(
        RG_INVALID_ARGUMENT,
        "--secret-file goes with --listen (workers ridge starts get a fresh one)");
  if (a->batch > 1 && (a->requests || a->workload))
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "--batch copies one prompt; with --requests or --workload use "
                          "--max-seqs for how many run together");
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
      return rg_status_make(RG_INVALID_ARGUMENT,
                            "--prompt-ids: expected comma-separated token ids, got '%s'", s);
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
rg_status_t rg_cli_test_model(char *out, size_t len, int quiet) {
  rg_testmodel_opts_t o = {0};
  o.arch = RG_TESTMODEL_LLAMA;
  o.size = RG_TESTMODEL_TINY;
  o.dtype = RG_BF16;
  o.gguf_type = RG_DTYPE_COUNT;
  int written;
  RG_RETURN_IF_ERROR(rg_testmodel_cached(&o, out, len, &written));
  if (written && !quiet)
    fprintf(stderr, "ridge run: no --model given; wrote the random-weight test model to %s\n", out);
  return NULL;
}

// ----- Requests ------------------------------------------------------------------

// One request as the command knows it: the serve request, the ids it owns,
// where it came from, and why it cannot run (then it is never served).
typedef struct {
  rg_serve_request_t r;
  int32_t *ids;
  long line;  // in the requests file; 0 otherwise
  char error[320];
} req_t;

typedef struct {
  req_t *v;
  size_t n, cap;
} reqs_t;

static req_t *push_req(reqs_t *rs) {
  if (rs->n == rs->cap) {
    size_t cap = rs->cap ? rs->cap * 2 : 16;
    req_t *n = realloc(rs->v, cap * sizeof(*n));
    if (!n) return NULL;
    rs->v = n;
    rs->cap = cap;
  }
  req_t *q = &rs->v[rs->n++];
  memset(q, 0, sizeof(*q));
  return q;
}

static void free_reqs(reqs_t *rs) {
  for (size_t i = 0; i < rs->n; i++) free(rs->v[i].ids);
  free(rs->v);
}

static rg_sampler_config_t sampler_of(const run_args_t *a, uint64_t i) {
  return (rg_sampler_config_t){(float)a->temperature, (int32_t)a->top_k, (float)a->top_p,
                               (uint64_t)a->seed + i};
}

static int whole(const cJSON *v, double lo, double hi) {
  return cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble) && v->valuedouble >= lo &&
         v->valuedouble <= hi;
}

// One line of a requests file into q; a bad line leaves q->error set.
static void parse_line(const run_args_t *a, const rg_tokenizer_t *tok, int64_t vocab,
                       const char *file, long line, const char *text, size_t index, req_t *q) {
  static const char *const keys[] = {"prompt", "prompt_ids", "max_tokens", "temperature",
                                     "top_k",  "top_p",      "seed",       "arrival_s"};
  q->line = line;
  q->r.id = index;
  q->r.max_tokens = a->n;
  q->r.sampler = sampler_of(a, index);
  cJSON *j = cJSON_Parse(text);
  if (!cJSON_IsObject(j)) {
    snprintf(q->error, sizeof q->error, "%s:%ld: not a JSON object", file, line);
    cJSON_Delete(j);
    return;
  }
#define BAD(field, ...)                                                                   \
  do {                                                                                    \
    char m_[200];                                                                         \
    snprintf(m_, sizeof m_, __VA_ARGS__);                                                 \
    snprintf(q->error, sizeof q->error, "%s:%ld: field '%s': %s", file, line, field, m_); \
    goto out;                                                                             \
  } while (0)
  for (const cJSON *it = j->child; it; it = it->next) {
    size_t k = 0;
    while (k < sizeof keys / sizeof keys[0] && strcmp(it->string, keys[k])) k++;
    if (k == sizeof keys / sizeof keys[0])
      BAD(it->string,
          "unknown field; expected prompt, prompt_ids, max_tokens, temperature, top_k, top_p, "
          "seed, "
          "arrival_s");
  }
  const cJSON *p = cJSON_GetObjectItemCaseSensitive(j, "prompt"),
              *ids = cJSON_GetObjectItemCaseSensitive(j, "prompt_ids");
  if (p && ids) BAD("prompt", "give prompt or prompt_ids, not both");
  if (!p && !ids) BAD("prompt", "missing; give prompt (text) or prompt_ids (token ids)");
  if (p) {
    if (!cJSON_IsString(p)) BAD("prompt", "expected a string");
    if (!tok) BAD("prompt", "the model has no tokenizer; give prompt_ids");
    size_t n = 0;
    rg_status_t s =
        rg_tokenizer_encode(tok, p->valuestring, strlen(p->valuestring), 1, 0, &q->ids, &n);
    if (s) {
      char m[200];
      snprintf(m, sizeof m, "%s", rg_status_message(s));
      rg_status_free(s);
      BAD("prompt", "%s", m);
    }
    if (!n) BAD("prompt", "encodes to no tokens");
    q->r.n_prompt = n;
  } else {
    int n = cJSON_GetArraySize(ids);
    if (!cJSON_IsArray(ids) || n < 1) BAD("prompt_ids", "expected a non-empty array of token ids");
    if (!(q->ids = malloc((size_t)n * sizeof(int32_t)))) BAD("prompt_ids", "out of memory");
    int i = 0;
    for (const cJSON *v = ids->child; v; v = v->next, i++) {
      if (!whole(v, 0, INT32_MAX))
        BAD("prompt_ids", "entry %d is not a token id (a whole number from 0)", i);
      if (v->valuedouble >= (double)vocab)
        BAD("prompt_ids", "entry %d is id %.0f, outside the vocabulary (0..%lld)", i,
            v->valuedouble, (long long)vocab - 1);
      q->ids[i] = (int32_t)v->valuedouble;
    }
    q->r.n_prompt = (size_t)n;
  }
  const cJSON *v;
  if ((v = cJSON_GetObjectItemCaseSensitive(j, "max_tokens"))) {
    if (!whole(v, 1, 1 << 24)) BAD("max_tokens", "expected a whole number from 1");
    q->r.max_tokens = (int64_t)v->valuedouble;
  }
  if ((v = cJSON_GetObjectItemCaseSensitive(j, "temperature"))) {
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0 && v->valuedouble <= 100))
      BAD("temperature", "expected a number from 0 (greedy) to 100");
    q->r.sampler.temperature = (float)v->valuedouble;
  }
  if ((v = cJSON_GetObjectItemCaseSensitive(j, "top_k"))) {
    if (!whole(v, 0, INT32_MAX)) BAD("top_k", "expected a whole number from 0 (off)");
    q->r.sampler.top_k = (int32_t)v->valuedouble;
  }
  if ((v = cJSON_GetObjectItemCaseSensitive(j, "top_p"))) {
    if (!cJSON_IsNumber(v) || !(v->valuedouble > 0 && v->valuedouble <= 1))
      BAD("top_p", "expected a number in (0, 1]");
    q->r.sampler.top_p = (float)v->valuedouble;
  }
  if ((v = cJSON_GetObjectItemCaseSensitive(j, "seed"))) {
    if (!whole(v, 0, 9007199254740992.0)) BAD("seed", "expected a whole number from 0");
    q->r.sampler.seed = (uint64_t)v->valuedouble;
  }
  if ((v = cJSON_GetObjectItemCaseSensitive(j, "arrival_s"))) {
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0 && v->valuedouble <= 1e7))
      BAD("arrival_s", "expected seconds after the start, a number from 0");
    q->r.arrival = v->valuedouble;
  }
#undef BAD
out:
  cJSON_Delete(j);
}

static rg_status_t read_requests(const run_args_t *a, const rg_tokenizer_t *tok, int64_t vocab,
                                 reqs_t *rs) {
  FILE *f = fopen(a->requests, "r");
  if (!f) return rg_status_make(RG_IO, "%s: %s", a->requests, strerror(errno));
  char *line = NULL;
  size_t cap = 0;
  ssize_t len;
  long no = 0;
  rg_status_t st = NULL;
  while (!st && (len = getline(&line, &cap, f)) >= 0) {
    no++;
    while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
    size_t sp = strspn(line, " \t");
    if (!line[sp] || line[sp] == '#') continue;  // blank lines and comments
    req_t *q = push_req(rs);
    if (!q)
      st = rg_status_make(RG_OUT_OF_MEMORY, "out of memory reading %s", a->requests);
    else
      parse_line(a, tok, vocab, a->requests, no, line + sp, rs->n - 1, q);
  }
  if (!st && ferror(f)) st = rg_status_make(RG_IO, "%s: %s", a->requests, strerror(errno));
  free(line);
  fclose(f);
  if (!st && !rs->n) st = rg_status_make(RG_INVALID_ARGUMENT, "%s holds no requests", a->requests);
  return st;
}

static rg_status_t workload_requests(const run_args_t *a, const rg_cli_common_t *common,
                                     int64_t max_context, int64_t vocab, reqs_t *rs) {
  rg_workload_t *w = NULL;
  RG_RETURN_IF_ERROR(rg_workload_load(a->workload, common->config_dir, &w));
  size_t n = (size_t)a->num_requests;
  rg_gen_request_t *g = malloc(n * sizeof(*g));
  rg_status_t st = g ? rg_workload_sample(w, n, (uint64_t)a->seed, max_context, a->rate, g)
                     : rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
  // Token ids are drawn uniformly (a random-weight model has no language to
  // imitate); the lengths and arrivals are the workload's.
  uint64_t s = (uint64_t)a->seed * 0x9e3779b97f4a7c15ull + 1;
  for (size_t i = 0; !st && i < n; i++) {
    req_t *q = push_req(rs);
    if (!q || !(q->ids = malloc((size_t)g[i].prompt_tokens * sizeof(int32_t)))) {
      st = rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
      break;
    }
    for (int64_t k = 0; k < g[i].prompt_tokens; k++) {
      s ^= s << 13, s ^= s >> 7, s ^= s << 17;  // xorshift64
      q->ids[k] = (int32_t)(s % (uint64_t)vocab);
    }
    q->r = (rg_serve_request_t){
        i, q->ids, (size_t)g[i].prompt_tokens, g[i].output_tokens, sampler_of(a, i), g[i].arrival};
  }
  free(g);
  rg_workload_destroy(w);
  return st;
}

// ----- Output ----------------------------------------------------------------------

typedef struct {
  const rg_tokenizer_t *tok;
  int stream;
} stream_ctx_t;

static rg_status_t on_token(void *ctx, size_t req, int32_t id) {
  stream_ctx_t *s = ctx;
  if (req != 0 || !s->stream) return NULL;
  const char *bytes;
  size_t n;
  rg_status_t st = s->tok ? rg_tokenizer_token_bytes(s->tok, id, &bytes, &n) : NULL;
  if (s->tok && !st) {
    fwrite(bytes, 1, n, stdout);
  } else {
    // An id past the tokenizer's vocabulary (models pad their embedding
    // table) has no text; show the id rather than stop.
    rg_status_free(st);
    printf(s->tok ? "[%d]" : " %d", id);
  }
  fflush(stdout);
  return NULL;
}

// The text of tokens as valid UTF-8 (an incomplete byte sequence becomes
// U+FFFD, as other servers do); NULL when there is no tokenizer. Ids past
// the tokenizer's vocabulary (models pad their embedding table) have no
// text and are left out; the ids beside the text keep them.
static char *text_of(const rg_tokenizer_t *tok, const int32_t *ids, size_t n, size_t *replaced) {
  if (!tok) return NULL;
  int32_t *known = malloc((n + 1) * sizeof(int32_t));
  if (!known) return NULL;
  size_t k = 0, vs = rg_tokenizer_vocab_size(tok);
  for (size_t i = 0; i < n; i++)
    if (ids[i] >= 0 && (size_t)ids[i] < vs) known[k++] = ids[i];
  char *raw = NULL, *clean = NULL;
  size_t len;
  rg_status_t s = rg_tokenizer_decode(tok, known, k, &raw, &len);
  if (!s) clean = rg_utf8_sanitize(raw, len, replaced);
  rg_status_free(s);
  free(raw);
  free(known);
  return clean;
}

static void json_percentiles(cJSON *root, const char *key, const rg_percentiles_t *p, int *bad) {
  cJSON *o = rg_json_obj(root, key, bad);
  rg_json_num(o, "p50", p->p50, bad);
  rg_json_num(o, "p90", p->p90, bad);
  rg_json_num(o, "p99", p->p99, bad);
  rg_json_num(o, "n", (double)p->n, bad);
}

// What the requests run on: the engine in this process, or a coordinator of
// worker processes. Both serve through an executor (runtime/serve.h).
typedef struct {
  rg_engine_t *e;
  rg_cluster_t *c;
  rg_pool_t *pool;  // this process's threads, for measuring limits beside a cluster
  rg_executor_t x;
  const rg_arch_t *arch;
  const char *plan_mode;                 // --plan: the pool's mode, reported as the layout
  double plan_tps, plan_ttft, plan_tbt;  // --plan: what the plan predicts for its classes
  int plan_mb;                           // --plan: the micro-batches that run
  int micro_batches;                     // of the cluster's steps (1 in one process)
  // The cluster's workers' roles, by name: a prefill-decode run's stages run
  // only their side's steps.
  struct {
    char name[48];
    char device[32];
    rg_cluster_role_t role;
  } roles[RG_CLUSTER_MAX_WORKERS];
  int n_roles;
} backend_t;

// ----- Steps, for the predictions ------------------------------------------------
//
// The cost model prices a step from its shape, so every step the executor
// runs is recorded (its decodes and prefill chunks, and the two halves a
// step of two micro-batches splits into); each stage's prediction is the
// sum over the steps it ran.

typedef struct {
  int side;  // -1: both (a plain forward); 0 prefill, 1 decode (prefill-decode)
  rg_step_mix_t full, half[2];
} step_rec_t;

typedef struct {
  rg_executor_t inner;
  step_rec_t *v;
  size_t n, cap;
} recorder_t;

static void mix_add(rg_step_mix_t *m, const rg_step_entry_t *e) {
  // A decode carries one token after its prompt; a chunk starts a prompt or
  // carries more than one token.
  if (e->n > 1 || e->pos == 0) {
    m->prefill_context = (m->prefill_context * m->prefill_tokens + (double)e->n * (double)e->pos) /
                         (m->prefill_tokens + e->n);
    m->prefills++;
    m->prefill_tokens += e->n;
  } else {
    m->decode_context = (m->decode_context * m->decodes + (double)e->pos) / (m->decodes + 1);
    m->decodes++;
  }
}

static rg_status_t record(recorder_t *r, int side, const rg_step_entry_t *en, size_t n) {
  if (r->n == r->cap) {
    size_t cap = r->cap ? 2 * r->cap : 256;
    step_rec_t *v = realloc(r->v, cap * sizeof *v);
    if (!v) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory recording steps");
    r->v = v, r->cap = cap;
  }
  step_rec_t *q = &r->v[r->n++];
  memset(q, 0, sizeof *q);
  q->side = side;
  // Two micro-batches take the first half of the entries and the rest.
  size_t h = (n + 1) / 2;
  for (size_t i = 0; i < n; i++) {
    mix_add(&q->full, &en[i]);
    mix_add(&q->half[i < h ? 0 : 1], &en[i]);
  }
  return NULL;
}

static rg_status_t rec_forward(void *impl, const rg_step_entry_t *en, size_t n, float *logits) {
  recorder_t *r = impl;
  RG_RETURN_IF_ERROR(record(r, -1, en, n));
  return r->inner.forward(r->inner.impl, en, n, logits);
}
static rg_status_t rec_swap(void *impl, const rg_engine_copy_t *out, size_t n_out,
                            const rg_engine_copy_t *in, size_t n_in) {
  recorder_t *r = impl;
  return r->inner.swap(r->inner.impl, out, n_out, in, n_in);
}
static rg_status_t rec_tier(void *impl, const rg_engine_copy_t *off, size_t n_off,
                            const rg_engine_copy_t *rel, size_t n_rel) {
  recorder_t *r = impl;
  return r->inner.tier(r->inner.impl, off, n_off, rel, n_rel);
}
static void rec_counters(void *impl, rg_engine_counters_t *out) {
  recorder_t *r = impl;
  r->inner.counters(r->inner.impl, out);
}
static rg_status_t rec_begin(void *impl, int side, const rg_step_entry_t *en, const uint64_t *keys,
                             size_t n, const rg_pd_import_t *imports, size_t n_imports,
                             float *logits) {
  recorder_t *r = impl;
  RG_RETURN_IF_ERROR(record(r, side, en, n));
  return r->inner.begin(r->inner.impl, side, en, keys, n, imports, n_imports, logits);
}
static rg_status_t rec_poll(void *impl, int side, int *done, uint64_t *bad, size_t cap,
                            size_t *n_bad) {
  recorder_t *r = impl;
  return r->inner.poll(r->inner.impl, side, done, bad, cap, n_bad);
}
static void rec_forget(void *impl, uint64_t key) {
  recorder_t *r = impl;
  r->inner.forget(r->inner.impl, key);
}
static void rec_side_counters(void *impl, int side, rg_engine_counters_t *out) {
  recorder_t *r = impl;
  r->inner.side_counters(r->inner.impl, side, out);
}

static uint64_t rec_kv_losses(void *impl, int side, char *why, size_t cap) {
  recorder_t *r = impl;
  return r->inner.kv_losses(r->inner.impl, side, why, cap);
}

// The executor x, recording every step into r (which must outlive it).
// Every function of x is wrapped: each takes x's impl, not r.
static rg_executor_t recording(const rg_executor_t *x, recorder_t *r) {
  r->inner = *x;
  rg_executor_t w = *x;
  w.impl = r;
#define WRAP_(f) w.f = x->f ? rec_##f : NULL
  WRAP_(forward);
  WRAP_(swap);
  WRAP_(tier);
  WRAP_(counters);
  WRAP_(begin);
  WRAP_(poll);
  WRAP_(forget);
  WRAP_(side_counters);
  WRAP_(kv_losses);
#undef WRAP_
  return w;
}

typedef struct {
  char name[192];
  char stage[96];   // the instance's own name: "ffn[0,2) on opencl:0"
  char worker[48];  // "" in one process
  const char *kind;
  rg_stage_kind_t k;
  rg_stage_counters_t c;
} stage_row_t;

static size_t stage_count(const backend_t *b) {
  return b->e ? rg_engine_stage_count(b->e) : rg_cluster_stage_count(b->c);
}

static void stage_row(const backend_t *b, size_t i, stage_row_t *r) {
  if (b->e) {
    const rg_stage_t *s = rg_engine_stage_at(b->e, i);
    snprintf(r->name, sizeof r->name, "%s", rg_stage_name(s));
    snprintf(r->stage, sizeof r->stage, "%s", rg_stage_name(s));
    r->worker[0] = 0;
    r->k = rg_stage_spec(s)->kind;
    r->kind = rg_stage_kind_name(r->k);
    rg_stage_counters(s, &r->c);
    return;
  }
  rg_cluster_stage_info_t ci;
  rg_cluster_stage_info(b->c, i, &ci);
  if (ci.plays[0])
    snprintf(r->name, sizeof r->name, "%s [%s, standing in for %s]", ci.stage, ci.worker, ci.plays);
  else
    snprintf(r->name, sizeof r->name, "%s [%s]", ci.stage, ci.worker);
  snprintf(r->stage, sizeof r->stage, "%s", ci.stage);
  snprintf(r->worker, sizeof r->worker, "%s", ci.worker);
  r->k = ci.kind;
  r->kind = rg_stage_kind_name(ci.kind);
  r->c = ci.c;
}

// ----- Predictions -----------------------------------------------------------------

#define MAX_CALIBRATED 4

// Per stage row: the cost model's time over the steps it ran, on the
// calibrated class of the device it ran on.
static int layered_kind(rg_stage_kind_t k) {
  return k == RG_STAGE_ATTENTION || k == RG_STAGE_FFN || k == RG_STAGE_MOE;
}

// Whether row i is the stage its process's one-off costs land in: the first
// layered stage of its worker, or the worker's first stage where it has no
// layered one.
static int pays_process_first(const backend_t *b, size_t i) {
  stage_row_t r;
  stage_row(b, i, &r);
  size_t first = SIZE_MAX, first_layered = SIZE_MAX, n = stage_count(b);
  for (size_t j = 0; j < n; j++) {
    stage_row_t o;
    stage_row(b, j, &o);
    if (strcmp(o.worker, r.worker)) continue;
    if (first == SIZE_MAX) first = j;
    if (first_layered == SIZE_MAX && layered_kind(o.k)) first_layered = j;
  }
  return i == (first_layered != SIZE_MAX ? first_layered : first);
}

// The op kinds of every stage row i's worker runs (its process), named, for
// rg_class_process_first; *n = 0 where the list would not fit.
static void worker_ops(const backend_t *b, size_t i, const char **names, size_t cap, size_t *n) {
  stage_row_t r;
  stage_row(b, i, &r);
  *n = 0;
  for (size_t j = 0, rows = stage_count(b); j < rows; j++) {
    stage_row_t o;
    stage_row(b, j, &o);
    if (strcmp(o.worker, r.worker)) continue;
    const rg_op_kind_t *ops;
    size_t k = rg_stage_kind_ops(o.k, &ops);
    for (size_t q = 0; q < k; q++) {
      if (*n == cap) {
        *n = 0;
        return;
      }
      names[(*n)++] = rg_op_name(ops[q]);
    }
  }
}

typedef struct {
  int on;  // predictions were asked for (not --no-measure)
  rg_cli_calibration_t cal[MAX_CALIBRATED];
  int n_cal;
  double *pred;    // per row; < 0: none (see why)
  int *cal_of;     // per row: index into cal, -1: none
  char why[512];   // when a row has none
  char note[768];  // about what the calibrations stand for ("" when nothing to add)
} predict_t;

// "attention[0,2) on cpu:0": the device after " on ", and the layers of the
// range (0 when it has none).
static void stage_place(const char *stage, char *dev, size_t len, double *layers) {
  const char *on = strstr(stage, " on ");
  snprintf(dev, len, "%s", on ? on + 4 : "");
  long long a0, b0;
  const char *br = strchr(stage, '[');
  *layers = br && sscanf(br, "[%lld,%lld)", &a0, &b0) == 2 && b0 > a0 ? (double)(b0 - a0) : 0;
}

// The side of a prefill-decode run whose steps a worker runs (-1: all).
static int worker_side(const backend_t *b, const char *worker) {
  for (int i = 0; i < b->n_roles; i++)
    if (!strcmp(b->roles[i].name, worker))
      return b->roles[i].role == RG_CLUSTER_ROLE_PREFILL  ? 0
             : b->roles[i].role == RG_CLUSTER_ROLE_DECODE ? 1
                                                          : -1;
  return -1;
}

// Workers that share a device (two local workers on cpu:0) split its cores
// and memory bandwidth whenever their work overlaps, which the cost model,
// pricing each stage on the device alone, does not see: say so beside the
// table, where measured / predicted then reads up to about the number of
// workers sharing it (attention-ffn in ping-pong on one 2-core CPU:
// 1.7-2.8 for the 1b model's chat workload).
static void note_shared_devices(const backend_t *b, predict_t *P) {
  for (int i = 0; i < b->n_roles; i++) {
    if (b->roles[i].role == RG_CLUSTER_ROLE_TIER) continue;
    int first = 1, n = 0;
    for (int j = 0; j < i; j++)
      if (b->roles[j].role != RG_CLUSTER_ROLE_TIER &&
          !strcmp(b->roles[j].device, b->roles[i].device))
        first = 0;
    if (!first) continue;
    char names[256] = "";
    for (int j = i; j < b->n_roles; j++)
      if (b->roles[j].role != RG_CLUSTER_ROLE_TIER &&
          !strcmp(b->roles[j].device, b->roles[i].device)) {
        size_t len = strlen(names);
        snprintf(names + len, sizeof names - len, "%s%s", n ? " and " : "", b->roles[j].name);
        n++;
      }
    if (n < 2) continue;
    size_t len = strlen(P->note);
    snprintf(P->note + len, sizeof P->note - len,
             "%s%s share %s: each stage is predicted with the device to itself, and while "
             "their work overlaps they split its cores and memory bandwidth, so measured / "
             "predicted reads up to about %d there",
             len ? "; " : "", names, b->roles[i].device, n);
  }
}

// The calibrated class of every device that runs stages, before the run
// (profiling one during it, or beside busy workers, would measure the run).
static void calibrate_devices(const run_args_t *a, const rg_cli_common_t *common,
                              const backend_t *b, const rg_engine_options_t *eo, predict_t *P) {
  const char *devs[RG_CLUSTER_MAX_WORKERS + 2];
  int n = 0;
  if (b->e) {
    devs[n++] = eo->device ? eo->device : "cpu:0";
    if (eo->ffn_device) devs[n++] = eo->ffn_device;
  }
  for (int i = 0; i < b->n_roles; i++)
    if (b->roles[i].role != RG_CLUSTER_ROLE_TIER) devs[n++] = b->roles[i].device;
  if (a->listen)
    snprintf(P->note, sizeof P->note,
             "workers joined by hand may run on other hosts: each is predicted on this host's "
             "device of the same name");
  else
    note_shared_devices(b, P);
  rg_catalog_t *cat = NULL;
  rg_status_t cs = rg_catalog_load(common->config_dir, &cat);
  if (cs) {
    snprintf(P->why, sizeof P->why, "the device catalog does not load: %s", rg_status_message(cs));
    rg_status_free(cs);
    return;
  }
  rg_cli_calibrate_options_t co = {.skip = a->no_calibrate,
                                   .refresh = a->recalibrate,
                                   .threads = eo->threads,
                                   .batch_invariant = eo->batch_invariant,
                                   .quiet = 1};
  for (int i = 0; i < n && P->n_cal < MAX_CALIBRATED; i++) {
    int k = 0;
    while (k < P->n_cal && strcmp(P->cal[k].device, devs[i])) k++;
    if (k < P->n_cal) continue;
    cs = rg_cli_calibrate(cat, devs[i], &co, &P->cal[k]);
    if (cs) {
      snprintf(P->why, sizeof P->why, "%s: %s", devs[i], rg_status_message(cs));
      rg_status_free(cs);
      continue;
    }
    P->n_cal++;
  }
  rg_catalog_destroy(cat);
}

// Seconds of each limits reading, before and after the run: the same for
// both, so that the higher of the two is a like-for-like best.
#define RUN_LIMITS_S 0.3

// The read bandwidth (and FMA peak) for this run's figures: measured again
// after the run and the higher reading kept, the rule `ridge profile` keeps
// its own by. A calibrated class's efficiencies are shares of the profile's
// best reading, so pricing them at one reading (which on a shared machine
// lands low as often as not) made every predicted stage slow by the
// reading's shortfall.
static void run_bandwidth(rg_pool_t *pool, rg_limits_t *lim) {
  rg_limits_t after = {0};
  rg_status_t s = rg_limits_measure(pool, RUN_LIMITS_S, &after);
  if (s) {
    rg_status_free(s);  // the reading from before the run stands
    return;
  }
  (void)rg_limits_keep_best(lim, &after);
}

// The host's read bandwidth measured in this run replaces the one a CPU
// class was profiled with: a calibration cached while the machine was busy
// (or quiet) would otherwise predict this run at that machine's speed. The
// efficiencies and fixed costs keep their profiled values. The best of the
// readings before and after the run stands for it (a shared machine's one
// reading falls short of a best by 10-20 % one time in three), also where
// this run profiled the class seconds before: that reading was of another
// moment (rg_limits_run_bandwidth).
//
// A model past the caches is priced at its stages' weights read as a decode
// streams them, before and after the run (the mean of the two readings, each
// the median of its passes; rg_engine_stream_bandwidth): that rate, not the
// best pass over a fresh 256 MiB, is what the run's memory-bound steps see.
// Priced at the best pass, the 1B model's serving run read 15-30 % faster in
// the simulator and in this table than it ran.
// `how` says which reading it is, between the figure and the profile's.
static void use_run_bandwidth(predict_t *P, double read_bandwidth, const char *how) {
  for (int k = 0; k < P->n_cal; k++) {
    rg_cli_calibration_t *c = &P->cal[k];
    if (!c->calibrated || strncmp(c->device, "cpu:", 4) || c->cls.mem[0].bandwidth <= 0) continue;
    double was = c->cls.mem[0].bandwidth, bw = rg_limits_run_bandwidth(read_bandwidth, was);
    c->cls.mem[0].bandwidth = bw;
    size_t at = strlen(c->note);
    snprintf(c->note + at, sizeof c->note - at,
             "; read bandwidth %.3g GB/s%s%.3g GB/s when profiled)", bw / 1e9, how, was / 1e9);
  }
}

// Passes of each reading of the stages' weights (their median counts).
#define STREAM_PASSES 3

static rg_status_t predict_stages(const backend_t *b, const recorder_t *rec, rg_dtype_t kv,
                                  predict_t *P) {
  size_t n = stage_count(b);
  P->pred = malloc((n + 1) * sizeof *P->pred);
  P->cal_of = malloc((n + 1) * sizeof *P->cal_of);
  rg_fleet_t *f = calloc(1, sizeof *f);
  rg_status_t st = NULL;
  if (!P->pred || !P->cal_of || !f) {
    st = rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
    goto done;
  }
  for (size_t i = 0; i < n; i++) P->pred[i] = -1, P->cal_of[i] = -1;
  f->n_nodes = 1;
  f->nodes[0].count = 1;
  f->nodes[0].n_devs = 1;
  f->nodes[0].devs[0].count = 1;
  const rg_arch_t *arch = b->arch;
  rg_plan_request_t req = {
      .model = arch, .fleet = f, .weight_dtype = arch->weight_dtype, .kv_dtype = kv};
  for (size_t i = 0; i < n; i++) {
    stage_row_t r;
    stage_row(b, i, &r);
    char dev[64];
    double layers;
    stage_place(r.stage, dev, sizeof dev, &layers);
    int slot = rg_slot_of_stage(r.k);
    if (!dev[0] || slot < RG_SLOT_EMBED || slot > RG_SLOT_LM_HEAD) continue;
    int k = 0;
    while (k < P->n_cal && strcmp(P->cal[k].device, dev)) k++;
    if (k == P->n_cal) continue;  // not calibrated: P->why says why
    const rg_device_class_t *c = &P->cal[k].cls;
    f->nodes[0].devs[0].cls = c;
    rg_group_t g = {"stage", c, 1, 1, 1, 1};
    int side = r.worker[0] ? worker_side(b, r.worker) : -1;
    // The first call's one-off cost (planner.h), once, and what the process
    // pays once (its kernel builds, a BLAS's first buffers): its first
    // layered stage, where the matmuls are, or its first stage where it has
    // none (an embed had been charged it on the CPU while attention's first
    // matmul paid it: 0.08 and 1.36 of predicted in the default job). A
    // worker is a process of its own; one process that profiled the device
    // just now (a fresh calibration) has paid its builds in the profile.
    double t = r.c.steps > 0 ? c->stage[slot].first : 0;
    // By the op kinds its worker runs where the class splits it so (a worker
    // holding only the FFN builds only the FFN's kernels).
    if (pays_process_first(b, i) && r.c.steps > 0 && (r.worker[0] || !P->cal[k].fresh)) {
      const char *ops[64];
      size_t n_ops;
      worker_ops(b, i, ops, sizeof ops / sizeof *ops, &n_ops);
      t += rg_class_process_first(c, n_ops ? ops : NULL, n_ops);
    }
    // Calls its worker made after waiting for another's data (planner.h).
    t += c->stage[slot].cold * (double)r.c.cold_calls;
    for (size_t q = 0; q < rec->n; q++) {
      const step_rec_t *sr = &rec->v[q];
      if (side >= 0 && sr->side >= 0 && sr->side != side) continue;
      int halves = b->micro_batches > 1 && sr->half[1].decodes + sr->half[1].prefills > 0;
      for (int h = 0; h < (halves ? 2 : 1); h++) {
        double x;
        if ((st = rg_slot_mixed_time(&req, &g, (rg_slot_t)slot, halves ? &sr->half[h] : &sr->full,
                                     layers, &x)))
          goto done;
        t += x;
      }
    }
    P->pred[i] = t;
    P->cal_of[i] = k;
  }
done:
  free(f);
  return st;
}

static void predict_free(predict_t *P) {
  free(P->pred);
  free(P->cal_of);
}

// Per stage: graphs' FLOPs and bytes, measured seconds, and the cost
// model's time on its device's calibrated class.
static void stage_rows(const backend_t *b, const predict_t *P, cJSON *arr, int *bad,
                       rg_table_t *tb) {
  for (size_t i = 0; i < stage_count(b); i++) {
    stage_row_t r;
    stage_row(b, i, &r);
    const rg_stage_counters_t c = r.c;
    double bytes = c.weight_bytes + c.kv_bytes + c.act_bytes;
    int measured = P->on && P->pred && P->pred[i] >= 0;
    double pred = measured ? P->pred[i] : 0;
    const rg_cli_calibration_t *cal = measured ? &P->cal[P->cal_of[i]] : NULL;
    if (arr) {
      cJSON *o = rg_json_push_obj(arr, bad);
      rg_json_str(o, "stage", r.name, bad);
      rg_json_str(o, "kind", r.kind, bad);
      rg_json_num(o, "steps", (double)c.steps, bad);
      rg_json_num(o, "cold_calls", (double)c.cold_calls, bad);
      rg_json_num(o, "flops", c.flops, bad);
      rg_json_num(o, "weight_bytes", c.weight_bytes, bad);
      rg_json_num(o, "kv_bytes", c.kv_bytes, bad);
      rg_json_num(o, "act_bytes", c.act_bytes, bad);
      rg_json_num(o, "measured_s", c.seconds, bad);
      if (measured) {
        rg_json_str(o, "device", cal->device, bad);
        rg_json_str(o, "class", cal->class_name, bad);
        rg_json_num(o, "predicted_s", pred, bad);
        rg_json_num(o, "measured_over_predicted", pred > 0 ? c.seconds / pred : 0, bad);
      }
      rg_json_num(o, "gb_per_s", c.seconds > 0 ? bytes / c.seconds / 1e9 : 0, bad);
      rg_json_num(o, "gflop_per_s", c.seconds > 0 ? c.flops / c.seconds / 1e9 : 0, bad);
    }
    if (tb) {
      char b1[32], b2[32];
      rg_table_cell(tb, "%s", r.name);
      rg_table_cell(tb, "%.3g", c.flops / 1e9);
      rg_table_cell(tb, "%.3g", bytes / 1e6);
      rg_table_cell(tb, "%s", rg_fmt_quantity(c.seconds, RG_UNIT_TIME, b1, sizeof b1));
      if (measured) {
        rg_table_cell(tb, "%s", rg_fmt_quantity(pred, RG_UNIT_TIME, b2, sizeof b2));
        rg_table_cell(tb, "%.2f", pred > 0 ? c.seconds / pred : 0);
      } else {
        rg_table_cell(tb, "-");
        rg_table_cell(tb, "-");
      }
      rg_table_cell(tb, "%.2f", c.seconds > 0 ? bytes / c.seconds / 1e9 : 0);
      rg_table_cell(tb, "%.2f", c.seconds > 0 ? c.flops / c.seconds / 1e9 : 0);
    }
  }
}

// Per link of a multi-process run: what went over it and how fast.
static void link_rows(const backend_t *b, cJSON *arr, int *bad, rg_table_t *tb) {
  for (size_t i = 0; b->c && i < rg_cluster_link_count(b->c); i++) {
    rg_cluster_link_info_t l;
    rg_cluster_link_info(b->c, i, &l);
    double gbs = l.seconds > 0 ? l.bytes / l.seconds / 1e9 : 0;
    if (arr) {
      cJSON *o = rg_json_push_obj(arr, bad);
      rg_json_str(o, "from", l.from, bad);
      rg_json_str(o, "to", l.to, bad);
      rg_json_num(o, "bytes", l.bytes, bad);
      rg_json_num(o, "messages", (double)l.messages, bad);
      rg_json_num(o, "seconds", l.seconds, bad);
      rg_json_num(o, "gb_per_s", gbs, bad);
    }
    if (tb) {
      char b1[32], b2[32];
      rg_table_cell(tb, "%s -> %s", l.from, l.to);
      rg_table_cell(tb, "%lld", (long long)l.messages);
      rg_table_cell(tb, "%s", rg_fmt_quantity(l.bytes, RG_UNIT_BYTES, b1, sizeof b1));
      rg_table_cell(tb, "%s", rg_fmt_quantity(l.seconds, RG_UNIT_TIME, b2, sizeof b2));
      rg_table_cell(tb, "%.2f", gbs);
    }
  }
}

// What the predicted column is, in the text and in --json.
static void predict_json(const predict_t *P, cJSON *root, int *bad) {
  cJSON *o = rg_json_obj(root, "prediction", bad);
  rg_json_str(o, "what",
              !P->on ? "none (--no-measure)"
                     : "the planner's cost model per stage (rg_slot_mixed_time) over the steps "
                       "the run took, on each device's class calibrated by a quick profile",
              bad);
  if (P->why[0]) rg_json_str(o, "missing", P->why, bad);
  if (P->note[0]) rg_json_str(o, "note", P->note, bad);
  cJSON *arr = rg_json_arr(o, "devices", bad);
  for (int k = 0; k < P->n_cal; k++) {
    const rg_cli_calibration_t *c = &P->cal[k];
    cJSON *d = rg_json_push_obj(arr, bad);
    rg_json_str(d, "device", c->device, bad);
    rg_json_str(d, "class", c->class_name, bad);
    rg_json_num(d, "calibrated", c->calibrated, bad);
    rg_json_num(d, "profiled_now", c->fresh, bad);
    if (c->calibrated && !c->fresh) rg_json_num(d, "age_s", c->age_s, bad);
    if (c->path[0]) rg_json_str(d, "cache", c->path, bad);
    rg_json_str(d, "source", c->calibrated ? c->cls.calibration_source : "datasheet", bad);
    rg_json_str(d, "note", c->note, bad);
    rg_json_num(d, "read_bandwidth", c->cls.mem[0].bandwidth, bad);
  }
}

// --profile-ops: each op kind's calls and time, summed over this process's
// stages, and its share of the stages' measured time (the rest is the
// stages' own work between ops: uploads, waits, bookkeeping).
static void op_rows(const backend_t *b, cJSON *arr, int *bad, rg_table_t *tb) {
  if (!b->e) return;  // workers do not report op times (parse_args refuses that)
  rg_op_profile_t sum;
  rg_engine_op_profile(b->e, &sum);
  const double stage_s = rg_engine_stages_seconds(b->e);
  for (int k = 0; k < RG_OP_COUNT; k++) {
    if (!sum.calls[k]) continue;
    double mean = sum.seconds[k] / (double)sum.calls[k];
    double share = stage_s > 0 ? sum.seconds[k] / stage_s : 0;
    if (arr) {
      cJSON *o = rg_json_push_obj(arr, bad);
      rg_json_str(o, "op", rg_op_name((rg_op_kind_t)k), bad);
      rg_json_num(o, "calls", (double)sum.calls[k], bad);
      rg_json_num(o, "seconds", sum.seconds[k], bad);
      rg_json_num(o, "share_of_stages", share, bad);
    }
    if (tb) {
      char b1[32], b2[32];
      rg_table_cell(tb, "%s", rg_op_name((rg_op_kind_t)k));
      rg_table_cell(tb, "%lld", (long long)sum.calls[k]);
      rg_table_cell(tb, "%s", rg_fmt_quantity(sum.seconds[k], RG_UNIT_TIME, b1, sizeof b1));
      rg_table_cell(tb, "%s", rg_fmt_quantity(mean, RG_UNIT_TIME, b2, sizeof b2));
      rg_table_cell(tb, "%.1f%%", 100 * share);
    }
  }
}

static rg_status_t print_ops(const backend_t *b) {
  static const char *const heads[] = {"op", "calls", "total", "mean", "of stages"};
  rg_table_t tb;
  rg_table_init(&tb, 5, heads, "lrrrr");
  op_rows(b, NULL, NULL, &tb);
  fprintf(stderr,
          "\nper op (--profile-ops: every stage's ops timed from submission to completion, "
          "summed by kind):\n");
  rg_status_t s = rg_table_print(&tb, stderr, 2);
  rg_table_deinit(&tb);
  return s;
}

static rg_status_t print_stages(const backend_t *b, const predict_t *P) {
  static const char *const heads[] = {"stage",     "GFLOP",     "MB",   "measured",
                                      "predicted", "meas/pred", "GB/s", "GFLOP/s"};
  rg_table_t tb;
  rg_table_init(&tb, 8, heads, "lrrrrrrr");
  stage_rows(b, P, NULL, NULL, &tb);
  if (!P->on)
    fprintf(stderr,
            "\nper stage (FLOPs and bytes from the planner's formulas; no predictions: "
            "--no-measure):\n");
  else
    fprintf(
        stderr,
        "\nper stage (FLOPs and bytes from the planner's formulas; predicted = the planner's "
        "cost model for\nthat stage over the steps this run took, plus its first call's "
        "one-off cost (a worker's first layered\nstage also its kernel builds) and the cold cost "
        "of "
        "each call made after its worker waited, on the\nclass of the device it ran on%s):\n",
        P->n_cal && P->cal[0].calibrated ? ", calibrated by a quick profile of the device" : "");
  for (int k = 0; k < P->n_cal; k++) {
    const rg_cli_calibration_t *c = &P->cal[k];
    fprintf(stderr, "  %s%s%s\n", c->note, c->calibrated ? "; " : "",
            c->calibrated ? c->cls.calibration_source : "");
  }
  if (P->on && P->why[0]) fprintf(stderr, "  no prediction for some stages: %s\n", P->why);
  if (P->on && P->note[0]) fprintf(stderr, "  note: %s\n", P->note);
  rg_status_t s = rg_table_print(&tb, stderr, 2);
  rg_table_deinit(&tb);
  if (s || !b->c || !rg_cluster_link_count(b->c)) return s;
  static const char *const lheads[] = {"link", "messages", "bytes", "in flight", "GB/s"};
  rg_table_init(&tb, 5, lheads, "lrrrr");
  link_rows(b, NULL, NULL, &tb);
  fprintf(stderr,
          "\nper link (hidden states between workers, logits to the coordinator; "
          "in flight = time sends were outstanding):\n");
  s = rg_table_print(&tb, stderr, 2);
  rg_table_deinit(&tb);
  return s;
}

// The layout --layout names, on the devices --workers names.
static rg_status_t make_layout(const run_args_t *a, const rg_arch_t *arch, rg_cluster_layout_t *l) {
  char devs[2][32] = {"cpu:0", "cpu:0"};
  int n_devs = 0;
  if (a->workers) {
    const char *p = a->workers;
    while (*p) {
      const char *comma = strchr(p, ',');
      size_t len = comma ? (size_t)(comma - p) : strlen(p);
      if (n_devs == 2 || !len || len >= sizeof devs[0])
        return rg_status_make(RG_INVALID_ARGUMENT,
                              "--workers: expected one or two devices like cpu:0,opencl:0, got "
                              "'%s'",
                              a->workers);
      memcpy(devs[n_devs], p, len);
      devs[n_devs++][len] = 0;
      p = comma ? comma + 1 : p + len;
    }
    if (n_devs == 1) memcpy(devs[1], devs[0], sizeof devs[0]);
  }
  int mb = (int)(a->micro_batches ? a->micro_batches : 1);
  if (!strcmp(a->layout, "colocated")) {
    RG_RETURN_IF_ERROR(rg_cluster_layout_colocated(arch, devs[0], l));
    l->micro_batches = mb;
  } else if (!strcmp(a->layout, "attention-ffn") || !strcmp(a->layout, "afd")) {
    RG_RETURN_IF_ERROR(rg_cluster_layout_afd(arch, devs[0], devs[1], mb, l));
  } else if (!strcmp(a->layout, "experts")) {
    RG_RETURN_IF_ERROR(rg_cluster_layout_experts(arch, devs[0], devs[1], l));
    l->micro_batches = mb;
  } else if (!strcmp(a->layout, "prefill-decode") || !strcmp(a->layout, "pd")) {
    if (a->micro_batches > 1)
      return rg_status_make(RG_INVALID_ARGUMENT,
                            "--micro-batches: prefill-decode runs one batch per side");
    RG_RETURN_IF_ERROR(
        rg_cluster_layout_pd(arch, devs[0], devs[1], a->block_size, a->decode_block_size, l));
  } else if (!strcmp(a->layout, "pipeline")) {
    RG_RETURN_IF_ERROR(rg_cluster_layout_pipeline(arch, devs[0], devs[1], l));
    l->micro_batches = mb;
  } else {
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "--layout: expected colocated, attention-ffn, experts, pipeline or "
                          "prefill-decode, got '%s'",
                          a->layout);
  }
  // The capacity tier: a worker of its own holding idle prefixes' KV.
  if (a->tier_tokens) RG_RETURN_IF_ERROR(rg_cluster_layout_add_tier(l, devs[0], a->tier_tokens));
  return NULL;
}

// The layout --plan names: one pool of the plan, each group on the device
// its class's fleet entry names in run_on, printed beside what the plan
// predicts for its classes.
static rg_status_t plan_layout(const run_args_t *a, const char *model_path, const rg_arch_t *arch,
                               const rg_engine_options_t *eo, int quiet, backend_t *be,
                               rg_cluster_layout_t *out) {
  rg_cluster_plan_t *p = NULL;
  RG_RETURN_IF_ERROR(rg_cluster_plan_load(a->plan, a->config_dir, model_path, &p));
  rg_cluster_plan_binding_t *b = calloc(1, sizeof *b);
  rg_status_t st = NULL;
  const rg_plan_option_t *o = &p->plan->chosen;
  int k = a->pool ? (int)a->pool - 1 : 0;
  if (!b) {
    st = rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
    goto done;
  }
  if (k >= o->n_pools) {
    st = rg_status_make(RG_INVALID_ARGUMENT, "--pool %lld: %s has %d pool%s", a->pool, a->plan,
                        o->n_pools, o->n_pools == 1 ? "" : "s");
    goto done;
  }
  const rg_placement_t *pool = &o->pools[k];
  const rg_prediction_t *pr = &o->pred[k];
  // The run's KV pool as the coordinator sizes it, to size a capacity tier.
  int64_t ctx = eo->max_context > 0 ? eo->max_context : 4096;
  if (arch->max_context > 0 && ctx > arch->max_context) ctx = arch->max_context;
  rg_dtype_t kv = eo->kv_dtype_set ? eo->kv_dtype : RG_BF16;
  rg_cluster_plan_options_t po = {.arch = arch,
                                  .fleet = p->fleet,
                                  .pool = pool,
                                  .pool_index = k,
                                  .kv_dtype = kv,
                                  .kv_tokens = eo->kv_tokens > 0
                                                   ? eo->kv_tokens
                                                   : ctx * (eo->max_seqs > 0 ? eo->max_seqs : 16)};
  if ((st = rg_cluster_layout_from_plan(&po, b))) goto done;
  *out = b->layout;
  be->plan_mode = rg_mode_name(pool->mode);
  be->plan_tps = pr->tokens_per_s, be->plan_ttft = pr->ttft, be->plan_tbt = pr->tbt;
  be->plan_mb = out->micro_batches;
  if (quiet) goto done;
  fprintf(stderr, "ridge run: %s, pool %d of %d: %s on fleet %s, planned for workload %s\n",
          a->plan, k + 1, o->n_pools, rg_mode_name(pool->mode), p->fleet->name, p->workload->name);
  static const char *const heads[] = {"group", "class", "in the plan", "runs here"};
  rg_table_t tb;
  rg_table_init(&tb, 4, heads, "llll");
  for (int i = 0; i < b->n_groups; i++) {
    const rg_cluster_plan_group_t *g = &b->groups[i];
    const rg_cluster_worker_t *w = &out->workers[g->worker];
    char what[160] = "", b1[32];
    if (w->role == RG_CLUSTER_ROLE_TIER) {
      snprintf(what, sizeof what, "idle sessions' KV");
    } else {
      int gi = 0;
      while (gi < pool->n_groups && strcmp(pool->groups[gi].name, g->group)) gi++;
      size_t u = (size_t)snprintf(what, sizeof what, "%d device:", pool->groups[gi].devices);
      for (int s = RG_SLOT_EMBED; s <= RG_SLOT_PREFILL && u < sizeof what; s++)
        if (pool->slot_group[s] == gi && (s != RG_SLOT_PREFILL || pool->mode == RG_MODE_PD))
          u += (size_t)snprintf(what + u, sizeof what - u, " %s%s", rg_slot_name((rg_slot_t)s),
                                s == RG_SLOT_PREFILL ? " (every stage)" : "");
    }
    rg_table_cell(&tb, "%s", g->group);
    rg_table_cell(&tb, "%s", g->cls);
    rg_table_cell(&tb, "%s", what);
    if (w->role == RG_CLUSTER_ROLE_TIER)
      rg_table_cell(&tb, "%s on %s%s%s, %s tokens of KV", w->name, w->device,
                    w->plays[0] ? " standing in for " : "", w->plays,
                    rg_fmt_grouped((double)b->tier_tokens, b1, sizeof b1));
    else
      rg_table_cell(&tb, "%s on %s%s%s", w->name, w->device, w->plays[0] ? " standing in for " : "",
                    w->plays);
  }
  if ((st = rg_table_print(&tb, stderr, 2))) {
    rg_table_deinit(&tb);
    goto done;
  }
  rg_table_deinit(&tb);
  for (int i = 0; i < b->n_groups; i++)
    if (b->groups[i].passed[0])
      fprintf(stderr, "  %s: passed over %s\n", b->groups[i].group, b->groups[i].passed);
  char b1[32], b2[32], b3[32];
  fprintf(stderr,
          "  the plan predicts, for its classes: %s tokens/s, TTFT %s, TBT %s; batch %d, %d "
          "micro-batch%s, KV %s\n",
          rg_fmt_grouped(pr->tokens_per_s, b1, sizeof b1),
          rg_fmt_quantity(pr->ttft, RG_UNIT_TIME, b2, sizeof b2),
          rg_fmt_quantity(pr->tbt, RG_UNIT_TIME, b3, sizeof b3), pool->batch, pool->micro_batches,
          pool->micro_batches == 1 ? "" : "es", rg_dtype_name(pool->kv_dtype));
  fprintf(stderr,
          "  this run, on this machine: at most %d sequence%s, %d micro-batch%s, KV %s; measured "
          "below\n",
          eo->max_seqs > 0 ? eo->max_seqs : 16, eo->max_seqs == 1 ? "" : "s", out->micro_batches,
          out->micro_batches == 1 ? "" : "es", rg_dtype_name(kv));
  if (p->model_note[0]) fprintf(stderr, "  note: %s\n", p->model_note);
  for (int i = 0; i < b->n_notes; i++) fprintf(stderr, "  note: %s\n", b->notes[i]);
done:
  free(b);
  rg_cluster_plan_destroy(p);
  return st;
}

// Starts the coordinator (and, without --listen, one worker process per
// worker of the layout) and waits for every worker to load its stages.
static rg_status_t start_cluster(const run_args_t *a, const char *model_path,
                                 const rg_engine_options_t *eo, int quiet, backend_t *be) {
  rg_model_t *m = NULL;
  RG_RETURN_IF_ERROR(rg_model_open(model_path, &m));
  rg_cluster_options_t co = {0};
  rg_status_t st = a->plan ? plan_layout(a, model_path, rg_model_arch(m), eo, quiet, be, &co.layout)
                           : make_layout(a, rg_model_arch(m), &co.layout);
  rg_model_close(m);
  RG_RETURN_IF_ERROR(st);
  for (int i = 0; i < co.layout.n_workers && i < RG_CLUSTER_MAX_WORKERS; i++) {
    snprintf(be->roles[i].name, sizeof be->roles[i].name, "%s", co.layout.workers[i].name);
    snprintf(be->roles[i].device, sizeof be->roles[i].device, "%s", co.layout.workers[i].device);
    be->roles[i].role = co.layout.workers[i].role;
    be->n_roles = i + 1;
  }
  be->micro_batches = co.layout.micro_batches > 1 ? co.layout.micro_batches : 1;
  if (eo->swap_tokens)
    return rg_status_make(RG_UNIMPLEMENTED,
                          "--swap-tokens: the swap tier is not run across workers yet; preempted "
                          "sequences recompute");
  rg_control_secret_t secret;
  co.model_path = model_path;
  co.engine = *eo;
  co.provider = a->provider;
  co.trace_path = a->trace;
  co.quiet = quiet;
  co.step_timeout_s = a->step_timeout;
  co.launch = !a->listen;
  char host[256];
  if (a->listen) {
    RG_RETURN_IF_ERROR(rg_control_parse_endpoint(a->listen, host, sizeof host, &co.port));
    co.bind_host = host;
    RG_RETURN_IF_ERROR(rg_control_secret_load(a->secret_file, &secret));
    co.secret = &secret;
    co.join_timeout_s = 600;  // people start workers by hand
  }
  st = rg_cluster_create(&co, &be->c);
  memset(&secret, 0, sizeof secret);
  RG_RETURN_IF_ERROR(st);
  be->x = rg_cluster_executor(be->c);
  be->arch = rg_cluster_arch(be->c);
  return rg_pool_create(eo->threads, &be->pool);
}

static volatile int g_stop;
static void on_signal(int sig) {
  (void)sig;
  g_stop = 1;
}

// ----- The command ---------------------------------------------------------------

static rg_status_t run(const run_args_t *a, const rg_cli_common_t *common, int *exit_status) {
  char model_path[4096];
  backend_t be = {0};
  be.micro_batches = 1;
  recorder_t rec = {0};
  predict_t pr = {.on = !a->no_measure};
  reqs_t rs = {0};
  rg_serve_request_t *sr = NULL;
  rg_serve_result_t *res = NULL;
  size_t *served_of = NULL, n_served = 0;
  float *dump = NULL;
  char *prompt_text = NULL;
  rg_status_t st = NULL;
  int quiet = common->quiet || a->json;
  int single = !a->requests && !a->workload;
  if (a->model)
    snprintf(model_path, sizeof model_path, "%s", a->model);
  else if ((st = rg_cli_test_model(model_path, sizeof model_path, quiet)))
    return st;

  rg_engine_options_t eo = {0};
  eo.device = a->device;
  eo.ffn_device = a->ffn_device;
  eo.threads = (int)a->threads;
  eo.max_seqs = (int)(a->max_seqs ? a->max_seqs : single ? a->batch : 16);
  eo.max_context = a->max_context;
  eo.block_size = (int)a->block_size;
  eo.kv_tokens = a->kv_tokens;
  eo.swap_tokens = a->swap_tokens;
  eo.tier_tokens = a->tier_tokens;
  if (a->kvdt) {
    if (rg_dtype_parse(a->kvdt, &eo.kv_dtype) ||
        (eo.kv_dtype != RG_F32 && eo.kv_dtype != RG_BF16 && eo.kv_dtype != RG_F16))
      return rg_status_make(RG_INVALID_ARGUMENT, "--kv-dtype: expected f32, bf16 or f16, got '%s'",
                            a->kvdt);
    eo.kv_dtype_set = 1;
  }
  if (a->isa) {
    rg_cpu_isa_t isa;
    RG_RETURN_IF_ERROR(rg_cpu_isa_parse("--isa", a->isa, &isa));
    eo.isa = (int)isa;
  }
  eo.batch_invariant = a->batch_invariant;
  rg_sched_preempt_t preempt = RG_SCHED_PREEMPT_RECOMPUTE;
  if (a->preempt)
    RG_RETURN_IF_ERROR(rg_status_wrap(rg_sched_preempt_parse(a->preempt, &preempt), "--preempt"));
  if (a->layout || a->plan) {
    if ((st = start_cluster(a, model_path, &eo, quiet, &be))) goto done;
  } else {
    if ((st = rg_engine_create(model_path, &eo, &be.e))) return st;
    be.x = rg_engine_executor(be.e);
    be.arch = rg_engine_arch(be.e);
    if (a->profile_ops) rg_engine_set_op_profiling(be.e, 1);
  }
  const rg_tokenizer_t *tok = be.x.tokenizer;
  const rg_arch_t *arch = be.arch;
  int64_t vocab = be.x.vocab;

  // The requests.
  if (a->requests) {
    if ((st = read_requests(a, tok, vocab, &rs))) goto done;
  } else if (a->workload) {
    if ((st = workload_requests(a, common, be.x.max_context, vocab, &rs))) goto done;
  } else {
    int32_t *ids = NULL;
    size_t n_ids = 0;
    if (a->prompt_ids) {
      if ((st = parse_ids(a->prompt_ids, &ids, &n_ids))) goto done;
    } else {
      if (!tok) {
        st = rg_status_make(
            RG_INVALID_ARGUMENT,
            "%s has no tokenizer (tokenizer.json or GGUF vocabulary); give --prompt-ids",
            model_path);
        goto done;
      }
      const char *text = a->prompt ? a->prompt : "The quick brown fox";
      const char *tmpl = rg_family_info(arch->family)->chat_template;
      if (a->chat) {
        rg_chat_msg_t m = {"user", text};
        if ((st = rg_chat_template_apply(tmpl, &m, 1, &prompt_text))) goto done;
        text = prompt_text;
      }
      // A chat template leaves the BOS to the encoder (tokenizer.h): Llama 3's
      // own template starts with <|begin_of_text|>.
      if ((st = rg_tokenizer_encode(tok, text, strlen(text), 1, a->chat, &ids, &n_ids))) goto done;
      if (!n_ids) {
        free(ids);
        st = rg_status_make(RG_INVALID_ARGUMENT, "the prompt encodes to no tokens");
        goto done;
      }
    }
    for (long long i = 0; i < a->batch; i++) {
      req_t *q = push_req(&rs);
      if (!q || (i && !(q->ids = malloc(n_ids * sizeof(int32_t))))) {
        free(ids);
        st = rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
        goto done;
      }
      if (i)
        memcpy(q->ids, ids, n_ids * sizeof(int32_t));
      else
        q->ids = ids;
      q->r = (rg_serve_request_t){(uint64_t)i, q->ids, n_ids, a->n, sampler_of(a, (uint64_t)i), 0};
    }
  }
  size_t n = rs.n;
  sr = calloc(n, sizeof(*sr));
  res = calloc(n, sizeof(*res));
  served_of = calloc(n, sizeof(*served_of));
  if (!sr || !res || !served_of) {
    st = rg_status_make(RG_OUT_OF_MEMORY, "out of memory for %zu requests", n);
    goto done;
  }
  for (size_t i = 0; i < n; i++) {
    rs.v[i].r.prompt = rs.v[i].ids;
    if (!rs.v[i].error[0]) served_of[n_served] = i, sr[n_served++] = rs.v[i].r;
  }
  if (a->dump && !(dump = calloc((size_t)a->n * (size_t)vocab, sizeof(float)))) {
    st = rg_status_make(RG_OUT_OF_MEMORY, "out of memory for %lld rows of logits", a->n);
    goto done;
  }
  if (pr.on) calibrate_devices(a, common, &be, &eo, &pr);
  rg_limits_t lim = {0};
  if (!a->no_measure &&
      (st = rg_limits_measure(be.e ? rg_engine_pool(be.e) : be.pool, RUN_LIMITS_S, &lim)))
    goto done;
  int measured = !a->no_measure && lim.read_bandwidth > 0 && lim.fma_peak > 0;
  // The stages' own weights read as a decode streams them, for the
  // predictions (rg_engine_stream_bandwidth): before the run here, after it
  // below.
  double stream_bytes = 0,
         stream0 = measured && pr.on && be.e
                       ? rg_engine_stream_bandwidth(be.e, STREAM_PASSES, &stream_bytes)
                       : 0;
  if (!quiet && be.e) {
    char wb[32];
    fprintf(stderr, "ridge run: %s (%s; %s of weights)\n", model_path, rg_engine_describe(be.e),
            rg_fmt_quantity(rg_engine_weight_bytes(be.e), RG_UNIT_BYTES, wb, sizeof wb));
    fprintf(stderr, "ridge run: device %s %s (class local-cpu), %d threads%s; %zu request%s",
            rg_engine_device_label(be.e), rg_engine_device_name(be.e), rg_engine_threads(be.e),
            a->batch_invariant ? ", batch-invariant kernels" : "", n, n == 1 ? "" : "s");
    if (single) fprintf(stderr, ", prompt %zu tokens", rs.v[0].r.n_prompt);
    fprintf(stderr, "; KV %lld blocks of %d tokens\n", (long long)be.x.kv_blocks, be.x.block_size);
  } else if (!quiet) {
    fprintf(stderr, "ridge run: %zu request%s", n, n == 1 ? "" : "s");
    if (single) fprintf(stderr, ", prompt %zu tokens", rs.v[0].r.n_prompt);
    fprintf(stderr, "; KV %lld blocks of %d tokens on the attention workers\n",
            (long long)be.x.kv_blocks, be.x.block_size);
  }
  stream_ctx_t sc = {tok, single && !a->json && !common->quiet};
  rg_serve_options_t so = {.max_batch_tokens = a->max_batch_tokens,
                           .max_seqs = (int)eo.max_seqs,
                           .prefix_cache = a->prefix_cache,
                           .preempt = preempt,
                           .stop_at_eog = !a->dump,  // a logits dump wants exactly N rows
                           .on_token = on_token,
                           .ctx = &sc,
                           .dump_logits = dump,
                           .dump_rows = a->n,
                           .retention_s = a->retention};
  if (sc.stream && tok && !a->prompt_ids)
    fputs(a->chat ? "" : (a->prompt ? a->prompt : "The quick brown fox"), stdout);
  rg_serve_stats_t ss;
  rg_executor_t xr = recording(&be.x, &rec);
  rg_serve_result_t *sres = calloc(n_served + 1, sizeof(*sres));
  if (!sres) {
    st = rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
    goto done;
  }
  // Ctrl-C (or SIGTERM) from here on stops the run cleanly: the steps in
  // flight finish, the workers are shut down, the requests end "interrupted".
  struct sigaction sa = {0}, old_int, old_term;
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  so.stop = &g_stop;
  st = rg_serve_on(&xr, sr, n_served, &so, sres, &ss);
  sigaction(SIGINT, &old_int, NULL);
  sigaction(SIGTERM, &old_term, NULL);
  for (size_t k = 0; k < n_served; k++) res[served_of[k]] = sres[k];
  free(sres);
  if (st) goto done;
  if (sc.stream) printf("\n");
  if (a->dump && (st = rg_npy_write_f32(a->dump, dump, a->n, vocab))) goto done;
  if (measured) run_bandwidth(be.e ? rg_engine_pool(be.e) : be.pool, &lim);
  if (pr.on && measured) {
    const double stream1 = stream0 > 0 ? rg_engine_stream_bandwidth(be.e, STREAM_PASSES, NULL) : 0;
    if (stream0 > 0 && stream1 > 0) {
      char b[32], how[200];
      snprintf(how, sizeof how,
               ": the stages' own %s of weights read before and after this run, as a decode "
               "streams them (the best pass over 256 MiB read %.3g GB/s; ",
               rg_fmt_quantity(stream_bytes, RG_UNIT_BYTES, b, sizeof b), lim.read_bandwidth / 1e9);
      use_run_bandwidth(&pr, 0.5 * (stream0 + stream1), how);
    } else {
      use_run_bandwidth(&pr, lim.read_bandwidth,
                        " as measured in this run, best of before and after it (");
    }
  }
  if (pr.on && (st = predict_stages(&be, &rec, eo.kv_dtype_set ? eo.kv_dtype : RG_BF16, &pr)))
    goto done;

  int n_bad = 0, n_failed = 0;
  for (size_t i = 0; i < n; i++) {
    if (rs.v[i].error[0]) {
      n_bad++;
      res[i].finish = "error";
      snprintf(res[i].error, sizeof res[i].error, "%s", rs.v[i].error);
    } else if (res[i].finish && !strcmp(res[i].finish, "error")) {
      n_failed++;
    }
  }
  *exit_status = n_bad ? 2 : n_failed ? 1 : 0;
  // The phases, for the single-prompt report.
  double pf_s = ss.prefill.seconds, dec_s = ss.decode.seconds;
  double dec_tok = (double)ss.decode.tokens, pf_tok = (double)ss.prefill.tokens;
  double dec_bytes = ss.decode.weight_bytes + ss.decode.kv_bytes;
  if (a->json) {
    int bad = 0;
    cJSON *root = cJSON_CreateObject();
    if (!root) bad = 1;
    rg_json_str(root, "model", model_path, &bad);
    if (be.e) {
      rg_json_str(root, "device", rg_engine_device_label(be.e), &bad);
      rg_json_str(root, "device_name", rg_engine_device_name(be.e), &bad);
      rg_json_str(root, "device_class", "local-cpu", &bad);
      rg_json_num(root, "threads", rg_engine_threads(be.e), &bad);
      rg_json_bool(root, "batch_invariant", a->batch_invariant, &bad);
    } else {
      rg_json_str(root, "layout", be.plan_mode ? be.plan_mode : a->layout, &bad);
      if (a->plan) {
        rg_json_str(root, "plan", a->plan, &bad);
        cJSON *pp = rg_json_obj(root, "plan_predicted", &bad);
        rg_json_num(pp, "tokens_per_s", be.plan_tps, &bad);
        rg_json_num(pp, "ttft_s", be.plan_ttft, &bad);
        rg_json_num(pp, "tbt_s", be.plan_tbt, &bad);
      }
      rg_json_num(root, "micro_batches",
                  be.plan_mode ? be.plan_mb : (double)(a->micro_batches ? a->micro_batches : 1),
                  &bad);
      link_rows(&be, rg_json_arr(root, "links", &bad), &bad, NULL);
      // KV transfers that failed on their senders, as they reported them.
      cJSON *kf = rg_json_arr(root, "kv_transfer_faults", &bad);
      for (size_t i = 0; i < rg_cluster_kv_fault_count(be.c); i++) {
        const rg_cluster_kv_fault_t *f = rg_cluster_kv_fault(be.c, i);
        cJSON *o = rg_json_push_obj(kf, &bad);
        if (f->request != RG_CLUSTER_KEY_RELOAD)
          rg_json_num(o, "request", (double)f->request, &bad);
        rg_json_str(o, "worker", f->worker, &bad);
        rg_json_str(o, "to", f->to, &bad);
        rg_json_str(o, "stage", f->stage, &bad);
        rg_json_num(o, "bytes", (double)f->bytes, &bad);
        rg_json_str(o, "error", f->error, &bad);
        rg_json_str(o, "message", f->message, &bad);
      }
    }
    rg_json_num(root, "requests", (double)n, &bad);
    rg_json_num(root, "failed", n_bad + n_failed, &bad);
    rg_json_num(root, "prompt_tokens", (double)ss.prompt_tokens + 0 * pf_tok, &bad);
    rg_json_num(root, "new_tokens", (double)ss.new_tokens, &bad);
    rg_json_num(root, "iterations", (double)ss.iterations, &bad);
    rg_json_num(root, "wall_s", ss.wall_s, &bad);
    rg_json_num(root, "tokens_per_s", ss.tokens_per_s, &bad);
    json_percentiles(root, "ttft_s", &ss.ttft, &bad);
    json_percentiles(root, "tbt_s", &ss.tbt, &bad);
    json_percentiles(root, "e2e_s", &ss.e2e, &bad);
    rg_json_num(root, "kv_used_mean", ss.kv_used_mean, &bad);
    rg_json_num(root, "kv_used_max", ss.kv_used_max, &bad);
    rg_json_num(root, "prefix_hit_rate", ss.prefix_hit_rate, &bad);
    rg_json_num(root, "prefix_hit_tokens", (double)ss.prefix_hit_tokens, &bad);
    rg_json_num(root, "prefix_lookup_tokens", (double)ss.prefix_lookup_tokens, &bad);
    rg_json_num(root, "preemptions_recompute", (double)ss.preempt_recompute, &bad);
    rg_json_num(root, "preemptions_swap", (double)ss.preempt_swap, &bad);
    rg_json_num(root, "kv_recomputed", (double)ss.kv_recomputed, &bad);
    if (a->tier_tokens) {
      rg_json_num(root, "tier_offloaded_blocks", (double)ss.tier_offloaded, &bad);
      rg_json_num(root, "tier_reloaded_blocks", (double)ss.tier_reloaded, &bad);
      rg_json_num(root, "tier_hit_tokens", (double)ss.tier_hit_tokens, &bad);
      rg_json_num(root, "tier_copy_s", ss.tier_seconds, &bad);
      double rate = ss.prefill.seconds > 0 ? (double)ss.prefill.tokens / ss.prefill.seconds : 0;
      if (rate > 0)
        rg_json_num(root, "tier_recompute_estimate_s", (double)ss.tier_hit_tokens / rate, &bad);
    }
    rg_json_num(root, "prefill_tokens_per_s", pf_s > 0 ? pf_tok / pf_s : 0, &bad);
    rg_json_num(root, "prefill_gflop_per_s", pf_s > 0 ? ss.prefill.flops / pf_s / 1e9 : 0, &bad);
    rg_json_num(root, "decode_tokens_per_s", dec_s > 0 ? dec_tok / dec_s : 0, &bad);
    rg_json_num(root, "decode_gb_per_s", dec_s > 0 ? dec_bytes / dec_s / 1e9 : 0, &bad);
    rg_json_num(root, "decode_gflop_per_s", dec_s > 0 ? ss.decode.flops / dec_s / 1e9 : 0, &bad);
    if (single) rg_json_num(root, "ttft_s_single", res[0].n_tokens ? res[0].times[0] : 0, &bad);
    if (measured) {
      rg_json_num(root, "read_bandwidth_gb_per_s", lim.read_bandwidth / 1e9, &bad);
      rg_json_num(root, "fma_peak_gflop_per_s", lim.fma_peak / 1e9, &bad);
      rg_json_num(root, "decode_bandwidth_ratio",
                  dec_s > 0 ? dec_bytes / dec_s / lim.read_bandwidth : 0, &bad);
      rg_json_num(root, "prefill_peak_ratio", pf_s > 0 ? ss.prefill.flops / pf_s / lim.fma_peak : 0,
                  &bad);
    }
    predict_json(&pr, root, &bad);
    stage_rows(&be, &pr, rg_json_arr(root, "stages", &bad), &bad, NULL);
    if (a->profile_ops) op_rows(&be, rg_json_arr(root, "ops", &bad), &bad, NULL);
    cJSON *arr = rg_json_arr(root, "per_request", &bad);
    for (size_t i = 0; i < n; i++) {
      const rg_serve_result_t *q = &res[i];
      cJSON *o = rg_json_push_obj(arr, &bad);
      rg_json_num(o, "index", (double)i, &bad);
      if (rs.v[i].line) rg_json_num(o, "line", (double)rs.v[i].line, &bad);
      rg_json_num(o, "prompt_tokens", (double)rs.v[i].r.n_prompt, &bad);
      rg_json_num(o, "arrival_s", rs.v[i].r.arrival, &bad);
      rg_json_str(o, "finish", q->finish ? q->finish : "error", &bad);
      if (q->finish && !strcmp(q->finish, "error")) rg_json_str(o, "error", q->error, &bad);
      rg_json_num(o, "new_tokens", (double)q->n_tokens, &bad);
      if (q->n_tokens) {
        rg_json_num(o, "ttft_s", q->times[0] - q->arrival, &bad);
        rg_json_num(o, "e2e_s", q->finished - q->arrival, &bad);
        rg_json_num(o, "tbt_mean_s",
                    q->n_tokens > 1
                        ? (q->times[q->n_tokens - 1] - q->times[0]) / (double)(q->n_tokens - 1)
                        : 0,
                    &bad);
      }
      rg_json_num(o, "cached_tokens", (double)q->cached_tokens, &bad);
      rg_json_num(o, "preemptions", q->preemptions, &bad);
      cJSON *toks = rg_json_arr(o, "tokens", &bad);
      for (int64_t k = 0; toks && k < q->n_tokens; k++) {
        cJSON *v = cJSON_CreateNumber(q->tokens[k]);
        if (!v || !cJSON_AddItemToArray(toks, v)) bad = 1;
      }
      size_t replaced = 0;
      char *text = text_of(tok, q->tokens, (size_t)q->n_tokens, &replaced);
      if (text) rg_json_str(o, "text", text, &bad);
      if (replaced) rg_json_num(o, "text_replacements", (double)replaced, &bad);
      free(text);
    }
    // The single-prompt fields scripts already read.
    if (single && n) {
      cJSON *toks = rg_json_arr(root, "tokens", &bad);
      for (int64_t k = 0; toks && k < res[0].n_tokens; k++) {
        cJSON *v = cJSON_CreateNumber(res[0].tokens[k]);
        if (!v || !cJSON_AddItemToArray(toks, v)) bad = 1;
      }
      size_t replaced = 0;
      char *text = text_of(tok, res[0].tokens, (size_t)res[0].n_tokens, &replaced);
      if (text) rg_json_str(root, "text", text, &bad);
      free(text);
      rg_json_num(root, "batch", (double)a->batch, &bad);
    }
    st = rg_json_emit(root, bad, stdout);
  } else if (!common->quiet) {
    char b1[32], b2[32], b3[32];
    if (!single) {
      static const char *const heads[] = {"req",      "line", "prompt", "out",   "TTFT",
                                          "TBT mean", "e2e",  "cached", "finish"};
      rg_table_t tb;
      rg_table_init(&tb, 9, heads, "rrrrrrrrl");
      const size_t show = 40;  // the rest are in --json
      for (size_t i = 0; i < n && i < show; i++) {
        const rg_serve_result_t *q = &res[i];
        rg_table_cell(&tb, "%zu", i);
        rg_table_cell(&tb, "%ld", rs.v[i].line);
        rg_table_cell(&tb, "%zu", rs.v[i].r.n_prompt);
        rg_table_cell(&tb, "%lld", (long long)q->n_tokens);
        rg_table_cell(&tb, "%s",
                      q->n_tokens
                          ? rg_fmt_quantity(q->times[0] - q->arrival, RG_UNIT_TIME, b1, sizeof b1)
                          : "-");
        double tbt = q->n_tokens > 1
                         ? (q->times[q->n_tokens - 1] - q->times[0]) / (double)(q->n_tokens - 1)
                         : 0;
        rg_table_cell(&tb, "%s",
                      q->n_tokens > 1 ? rg_fmt_quantity(tbt, RG_UNIT_TIME, b2, sizeof b2) : "-");
        rg_table_cell(&tb, "%s",
                      q->n_tokens
                          ? rg_fmt_quantity(q->finished - q->arrival, RG_UNIT_TIME, b3, sizeof b3)
                          : "-");
        rg_table_cell(&tb, "%lld", (long long)q->cached_tokens);
        if (q->finish && !strcmp(q->finish, "error"))
          rg_table_cell(&tb, "error (below)");
        else
          rg_table_cell(&tb, "%s", q->finish ? q->finish : "?");
      }
      fputc('\n', stderr);
      if ((st = rg_table_print(&tb, stderr, 2))) {
        rg_table_deinit(&tb);
        goto done;
      }
      rg_table_deinit(&tb);
      if (n > show) fprintf(stderr, "  ... and %zu more (--json lists every request)\n", n - show);
    }
    fprintf(stderr,
            "\n%zu request%s (%d failed), %lld prompt and %lld new tokens in %lld iterations over "
            "%s: %.1f "
            "tokens/s\n",
            n, n == 1 ? "" : "s", n_bad + n_failed, (long long)ss.prompt_tokens,
            (long long)ss.new_tokens, (long long)ss.iterations,
            rg_fmt_quantity(ss.wall_s, RG_UNIT_TIME, b1, sizeof b1), ss.tokens_per_s);
    const struct {
      const char *name;
      const rg_percentiles_t *p;
    } pcts[] = {{"TTFT", &ss.ttft}, {"TBT ", &ss.tbt}, {"e2e ", &ss.e2e}};
    for (size_t k = 0; k < 3; k++)
      if (pcts[k].p->n)
        fprintf(stderr, "  %s p50 %s  p90 %s  p99 %s\n", pcts[k].name,
                rg_fmt_quantity(pcts[k].p->p50, RG_UNIT_TIME, b1, sizeof b1),
                rg_fmt_quantity(pcts[k].p->p90, RG_UNIT_TIME, b2, sizeof b2),
                rg_fmt_quantity(pcts[k].p->p99, RG_UNIT_TIME, b3, sizeof b3));
    fprintf(stderr,
            "  KV occupancy mean %.1f%%, max %.1f%%; prefix cache %s: %.1f%% of prompt tokens hit "
            "(%lld of "
            "%lld); preemptions: %lld recompute, %lld swap\n",
            100 * ss.kv_used_mean, 100 * ss.kv_used_max, a->prefix_cache ? "on" : "off",
            100 * ss.prefix_hit_rate, (long long)ss.prefix_hit_tokens,
            (long long)ss.prefix_lookup_tokens, (long long)ss.preempt_recompute,
            (long long)ss.preempt_swap);
    if (a->tier_tokens) {
      // Offload against recompute, both from this run: the copies' time, and
      // what prefilling the tokens found in the tier would have taken at the
      // prefill rate measured here.
      double rate = ss.prefill.seconds > 0 ? (double)ss.prefill.tokens / ss.prefill.seconds : 0;
      fprintf(stderr,
              "  capacity tier: %lld blocks moved down, %lld brought back (%lld prompt tokens "
              "found there instead of recomputed); copies took %s",
              (long long)ss.tier_offloaded, (long long)ss.tier_reloaded,
              (long long)ss.tier_hit_tokens,
              rg_fmt_quantity(ss.tier_seconds, RG_UNIT_TIME, b1, sizeof b1));
      if (rate > 0 && ss.tier_hit_tokens)
        fprintf(stderr,
                ", recomputing them would have taken about %s at this run's %.0f prefill "
                "tokens/s",
                rg_fmt_quantity((double)ss.tier_hit_tokens / rate, RG_UNIT_TIME, b2, sizeof b2),
                rate);
      fputc('\n', stderr);
    }
    if (ss.kv_recomputed)
      fprintf(stderr,
              "  %lld request%s recomputed: imported KV pages failed their checksum or did not "
              "come\n",
              (long long)ss.kv_recomputed, ss.kv_recomputed == 1 ? "" : "s");
    for (size_t i = 0; be.c && i < rg_cluster_kv_fault_count(be.c); i++)
      fprintf(stderr, "  %s\n", rg_cluster_kv_fault(be.c, i)->message);
    fprintf(stderr, "  prefill %.1f tokens/s (%.2f GFLOP/s); decode %.1f tokens/s",
            pf_s > 0 ? pf_tok / pf_s : 0, pf_s > 0 ? ss.prefill.flops / pf_s / 1e9 : 0,
            dec_s > 0 ? dec_tok / dec_s : 0);
    if (ss.decode.steps)
      fprintf(stderr, " (%s per step)",
              rg_fmt_quantity(dec_s / (double)ss.decode.steps, RG_UNIT_TIME, b1, sizeof b1));
    fputc('\n', stderr);
    if (measured && dec_s > 0)
      fprintf(stderr,
              "  decode moved %.2f GB/s of weights and KV = %.0f%% of this machine's read "
              "bandwidth (%.1f GB/s, "
              "measured now); %.2f GFLOP/s = %.1f%% of its FMA peak (%.0f GFLOP/s, %s)\n",
              dec_bytes / dec_s / 1e9, 100 * dec_bytes / dec_s / lim.read_bandwidth,
              lim.read_bandwidth / 1e9, ss.decode.flops / dec_s / 1e9,
              100 * ss.decode.flops / dec_s / lim.fma_peak, lim.fma_peak / 1e9, lim.fma_isa);
    st = print_stages(&be, &pr);
    if (!st && a->profile_ops) st = print_ops(&be);
    for (size_t i = 0; i < n && n_bad + n_failed; i++)
      if (res[i].finish && !strcmp(res[i].finish, "error"))
        fprintf(stderr, "ridge run: request %zu: %s\n", i, res[i].error);
  }
done:
  predict_free(&pr);
  free(rec.v);
  if (res) rg_serve_results_free(res, n_served ? rs.n : 0);
  free(res);
  free(sr);
  free(served_of);
  free_reqs(&rs);
  free(dump);
  free(prompt_text);
  rg_engine_destroy(be.e);
  rg_cluster_destroy(be.c);
  rg_pool_destroy(be.pool);
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
  int status = 0;
  st = run(&a, common, &status);
  if (st && rg_status_code(st) == RG_CANCELLED) {
    rg_cli_fail("run", st);
    return 130;  // as a shell reports a command ended by SIGINT
  }
  return st ? rg_cli_fail("run", st) : status;
}
