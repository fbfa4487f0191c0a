// `ridge simulate`: a workload's traffic through a plan on a fleet, event by
// event, with the runtime's own scheduler deciding every iteration; and the
// candidates `ridge plan --simulate` compares.
#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/fileio.h"
#include "base/units.h"
#include "cli/cli.h"
#include "cli/output.h"
#include "graphs/graphs.h"
#include "planner/planner.h"
#include "planner/simulate.h"

static const char usage[] =
    "usage: ridge simulate --model M --fleet F [--workload W] [--placement P.yaml]\n"
    "                      [--trace FILE --trace-format azure|mooncake]\n"
    "                      [--requests N] [--duration T] [--rate R] [--arrival poisson|gamma]\n"
    "                      [--cv X] [--seed S] [--preempt recompute|swap]\n"
    "                      [--prefix-cache on|off] [--tier CLASS|none] [--retention T]\n"
    "                      [--max-seqs N] [--kv-tokens N] [--block-size N] [--exact-costs]\n"
    "                      [--kv-svg FILE] [--pareto FILE] [--json] [--quiet]\n"
    "                      [--objective O] [--weight-dtype T] [--kv-dtype T]\n"
    "                      [--memory-utilization F] [--prefill-chunk N]\n"
    "\n"
    "Plays a workload's traffic through a plan on a fleet, one event at a time: requests\n"
    "arrive, every replica's scheduler (the same sched/ code `ridge run` uses) picks each\n"
    "iteration's batch on a simulated clock, the planner's cost model says how long each\n"
    "step takes on the devices it is placed on, and KV moves share the links between\n"
    "them. Preemption, swaps, prefix-cache hits and evictions, KV offloads after the\n"
    "golden time and reloads on return are the scheduler's decisions, as in the runtime.\n"
    "Thousands of devices and hours of traffic take seconds.\n"
    "\n"
    "What it plans: the plan `ridge plan` would choose for the model, fleet and workload,\n"
    "or the pools of --placement (as `ridge plan -o` writes them).\n"
    "\n"
    "What arrives (one of):\n"
    "  the workload's distributions   --requests N (default 2000), or --duration T of\n"
    "                     arrivals at its rate (--rate overrides); --arrival gamma --cv 3\n"
    "                     makes them bursty (gamma gaps, same mean rate; cv 1 is Poisson)\n"
    "  agentic sessions   a workload with `session:` (configs/workloads/agentic.yaml):\n"
    "                     sessions of requests of tool-driven steps, each step re-reading\n"
    "                     the session so far; a person thinks between requests (long\n"
    "                     tail); --duration of session arrivals (default 1 h)\n"
    "  --trace FILE       a published trace: --trace-format azure (Azure LLM inference\n"
    "                     CSV: TIMESTAMP,ContextTokens,GeneratedTokens) or mooncake\n"
    "                     (JSONL: timestamp ms, input_length, output_length, hash_ids;\n"
    "                     equal hash ids are equal 512-token prefix blocks)\n"
    "\n"
    "Options:\n"
    "  --model M, --fleet F, --workload W, --placement P, --objective O, --weight-dtype T,\n"
    "  --kv-dtype T, --memory-utilization F, --prefill-chunk N   as for ridge plan\n"
    "  --seed S           draws and routing ties (default 1); the same seed, the same run\n"
    "  --preempt P        recompute (default: a preempted request's KV is dropped and\n"
    "                     recomputed) or swap (it goes to the nodes' host DRAM and back)\n"
    "  --prefix-cache X   on or off (default: on when requests share prefixes)\n"
    "  --tier CLASS       where idle cached prefixes go after the golden time: a tier\n"
    "                     class on the KV group's nodes (host-dram, nvme-ssd), or none\n"
    "                     (default: the plan's choice for sessions, none otherwise)\n"
    "  --retention T      the golden time: how long an idle prefix stays on the device\n"
    "                     (default: the workload's session retention, else 0 = only when\n"
    "                     the device needs the room)\n"
    "  --max-seqs N       sequences per replica (default: the plan's batch)\n"
    "  --kv-tokens N      the device KV pool per replica, in tokens (default: what the\n"
    "                     devices' memory holds after weights), e.g. to match a runtime\n"
    "  --block-size N     tokens per KV block (default 16, doubled for huge fleets so the\n"
    "                     schedulers' bookkeeping stays small)\n"
    "  --exact-costs      call the cost model for every step instead of its memo\n"
    "  --kv-svg FILE      KV occupancy per tier over time (SVG)\n"
    "  --pareto FILE      tokens/s per user against tokens/s per device, simulated at\n"
    "                     growing batch caps, one curve per placement kind (SVG)\n"
    "  --json             every figure as JSON (no progress line)\n"
    "  --quiet            no progress line\n"
    "\n"
    "Prints TTFT, TBT and end-to-end p50/p90/p99, goodput at the workload's SLOs (requests\n"
    "whose TTFT and mean TBT both meet them), tokens/s per device, tokens/$ and tokens/W,\n"
    "preemptions, the prefix-cache hit rate, KV per tier, bytes on the links, and beside\n"
    "each pool what `ridge plan` predicted for it.\n"
    "\n"
    "examples:\n"
    "  ridge simulate --model llama-3.1-70b --fleet mixed --workload chat --duration 10min\n"
    "  ridge simulate --model llama-3.1-70b --fleet mixed --workload chat --arrival gamma --cv 3\n"
    "  ridge simulate --model llama-3.1-70b --fleet mixed --workload agentic --kv-svg kv.svg\n"
    "  ridge simulate --model llama-3.1-8b --fleet gpu-only --trace conv.csv --trace-format azure\n"
    "\n"
    "exit status: 0 simulated, 2 bad input (the message names the file, line and field of\n"
    "a bad trace line), 3 infeasible (nothing fits the fleet).\n";

typedef struct {
  const char *model, *fleet, *workload, *placement, *objective, *wdt, *kvdt, *mem_util, *chunk;
  const char *trace, *trace_format, *requests, *duration, *rate, *arrival, *cv, *seed, *preempt,
      *prefix_cache, *tier, *retention, *max_seqs, *kv_tokens, *block_size, *kv_svg, *pareto;
  int exact, json, quiet;
} sim_args_t;

static rg_status_t parse_args(int argc, char **argv, const rg_cli_common_t *common, sim_args_t *a,
                              int *help) {
  enum {
    O_KVTOK = 999,
    O_TRACE = 1000,
    O_FORMAT,
    O_REQUESTS,
    O_DURATION,
    O_RATE,
    O_ARRIVAL,
    O_CV,
    O_SEED,
    O_PREEMPT,
    O_PREFIX,
    O_TIER,
    O_RETENTION,
    O_MAXSEQS,
    O_BLOCK,
    O_EXACT,
    O_KVSVG,
    O_PARETO,
    O_QUIET,
    O_WDT,
    O_KVDT,
    O_MEM,
    O_CHUNK,
    O_OBJ
  };
  static const struct option longs[] = {{"model", required_argument, 0, 'm'},
                                        {"fleet", required_argument, 0, 'f'},
                                        {"workload", required_argument, 0, 'w'},
                                        {"placement", required_argument, 0, 'p'},
                                        {"objective", required_argument, 0, O_OBJ},
                                        {"weight-dtype", required_argument, 0, O_WDT},
                                        {"kv-dtype", required_argument, 0, O_KVDT},
                                        {"memory-utilization", required_argument, 0, O_MEM},
                                        {"prefill-chunk", required_argument, 0, O_CHUNK},
                                        {"trace", required_argument, 0, O_TRACE},
                                        {"trace-format", required_argument, 0, O_FORMAT},
                                        {"requests", required_argument, 0, O_REQUESTS},
                                        {"duration", required_argument, 0, O_DURATION},
                                        {"rate", required_argument, 0, O_RATE},
                                        {"arrival", required_argument, 0, O_ARRIVAL},
                                        {"cv", required_argument, 0, O_CV},
                                        {"seed", required_argument, 0, O_SEED},
                                        {"preempt", required_argument, 0, O_PREEMPT},
                                        {"prefix-cache", required_argument, 0, O_PREFIX},
                                        {"tier", required_argument, 0, O_TIER},
                                        {"retention", required_argument, 0, O_RETENTION},
                                        {"max-seqs", required_argument, 0, O_MAXSEQS},
                                        {"kv-tokens", required_argument, 0, O_KVTOK},
                                        {"block-size", required_argument, 0, O_BLOCK},
                                        {"exact-costs", no_argument, 0, O_EXACT},
                                        {"kv-svg", required_argument, 0, O_KVSVG},
                                        {"pareto", required_argument, 0, O_PARETO},
                                        {"json", no_argument, 0, 'j'},
                                        {"quiet", no_argument, 0, O_QUIET},
                                        {"help", no_argument, 0, 'h'},
                                        {0, 0, 0, 0}};
  memset(a, 0, sizeof *a);
  a->json = common->json;
  a->quiet = common->quiet;
  rg_cli_getopt_reset();
  int c;
  while ((c = getopt_long(argc, argv, ":m:f:w:p:jh", longs, NULL)) != -1) {
    switch (c) {
      case 'm':
        a->model = optarg;
        break;
      case 'f':
        a->fleet = optarg;
        break;
      case 'w':
        a->workload = optarg;
        break;
      case 'p':
        a->placement = optarg;
        break;
      case O_OBJ:
        a->objective = optarg;
        break;
      case O_WDT:
        a->wdt = optarg;
        break;
      case O_KVDT:
        a->kvdt = optarg;
        break;
      case O_MEM:
        a->mem_util = optarg;
        break;
      case O_CHUNK:
        a->chunk = optarg;
        break;
      case O_TRACE:
        a->trace = optarg;
        break;
      case O_FORMAT:
        a->trace_format = optarg;
        break;
      case O_REQUESTS:
        a->requests = optarg;
        break;
      case O_DURATION:
        a->duration = optarg;
        break;
      case O_RATE:
        a->rate = optarg;
        break;
      case O_ARRIVAL:
        a->arrival = optarg;
        break;
      case O_CV:
        a->cv = optarg;
        break;
      case O_SEED:
        a->seed = optarg;
        break;
      case O_PREEMPT:
        a->preempt = optarg;
        break;
      case O_PREFIX:
        a->prefix_cache = optarg;
        break;
      case O_TIER:
        a->tier = optarg;
        break;
      case O_RETENTION:
        a->retention = optarg;
        break;
      case O_MAXSEQS:
        a->max_seqs = optarg;
        break;
      case O_KVTOK:
        a->kv_tokens = optarg;
        break;
      case O_BLOCK:
        a->block_size = optarg;
        break;
      case O_EXACT:
        a->exact = 1;
        break;
      case O_KVSVG:
        a->kv_svg = optarg;
        break;
      case O_PARETO:
        a->pareto = optarg;
        break;
      case 'j':
        a->json = 1;
        break;
      case O_QUIET:
        a->quiet = 1;
        break;
      case 'h':
        *help = 1;
        return NULL;
      default:
        return rg_cli_getopt_error(c, argv, longs);
    }
  }
  if (optind < argc)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "unexpected argument '%s' (see ridge simulate --help)", argv[optind]);
  return NULL;
}

// ----- Numbers from flags ----------------------------------------------------------

static rg_status_t flag_count(const char *flag, const char *text, long long min, long long max,
                              long long *out) {
  RG_RETURN_IF_ERROR(rg_parse_count(flag, text, min, out));
  if (*out > max)
    return rg_status_make(RG_INVALID_ARGUMENT, "%s: '%s' is more than %lld", flag, text, max);
  return NULL;
}

// A duration: "10min", "1 h", "90 s", or plain seconds.
static rg_status_t flag_time(const char *flag, const char *text, double *out) {
  char *end;
  errno = 0;
  double v = strtod(text, &end);
  if (end != text && !*end && !errno && isfinite(v) && v >= 0) {
    *out = v;
    return NULL;
  }
  const char *why;
  if (rg_unit_parse(text, RG_UNIT_TIME, out, &why) || !(*out >= 0))
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "%s: '%s' is not a duration; write it like 90s, 10min or 1h", flag, text);
  return NULL;
}

static rg_status_t flag_number(const char *flag, const char *text, double min, double max,
                               double *out) {
  char *end;
  errno = 0;
  double v = strtod(text, &end);
  if (end == text || *end || errno || !(v >= min && v <= max))
    return rg_status_make(RG_INVALID_ARGUMENT, "%s: '%s' is not a number from %g to %g", flag, text,
                          min, max);
  *out = v;
  return NULL;
}

static rg_status_t flag_on_off(const char *flag, const char *text, int *out) {
  if (!strcmp(text, "on")) return (*out = 1), NULL;
  if (!strcmp(text, "off")) return (*out = 0), NULL;
  return rg_status_make(RG_INVALID_ARGUMENT, "%s: expected on or off, got '%s'", flag, text);
}

// ----- Progress --------------------------------------------------------------------

typedef struct {
  int tty;
  double last;
  int printed;
} progress_t;

static void on_progress(void *ctx, const rg_sim_progress_t *p) {
  progress_t *pr = ctx;
  if (p->wall_seconds - pr->last < (pr->tty ? 0.5 : 5.0)) return;
  pr->last = p->wall_seconds;
  char t1[32], t2[32], n[32];
  rg_fmt_quantity(p->sim_time, RG_UNIT_TIME, t1, sizeof t1);
  if (p->end_time > 0) rg_fmt_quantity(p->end_time, RG_UNIT_TIME, t2, sizeof t2);
  fprintf(stderr, "%sridge simulate: %s%s%s of traffic simulated, %s requests done, %.1f s%s",
          pr->tty ? "\r" : "", t1, p->end_time > 0 ? " of " : "", p->end_time > 0 ? t2 : "",
          rg_fmt_grouped((double)p->requests_done, n, sizeof n), p->wall_seconds,
          pr->tty ? "   " : "\n");
  pr->printed = 1;
}

// ----- The world: model, fleet, workload, plan ----------------------------------------

typedef struct {
  rg_catalog_t *cat;
  rg_fleet_t *fleet;
  rg_arch_t *model, *draft;
  rg_workload_t *wl, wdef;
  rg_plan_request_t *req;
  rg_plan_t *plan;
} world_t;

static void world_free(world_t *w) {
  free(w->plan);
  free(w->req);
  rg_arch_destroy(w->draft);
  rg_workload_destroy(w->wl);
  rg_arch_destroy(w->model);
  rg_fleet_destroy(w->fleet);
  rg_catalog_destroy(w->cat);
}

static rg_status_t load_world(const sim_args_t *a, const rg_cli_common_t *common, world_t *w) {
  memset(w, 0, sizeof *w);
  w->req = calloc(1, sizeof *w->req);
  w->plan = calloc(1, sizeof *w->plan);
  if (!w->req || !w->plan) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
  RG_RETURN_IF_ERROR(rg_catalog_load(common->config_dir, &w->cat));
  const char *model = a->model, *fleet = a->fleet, *wl = a->workload;
  rg_placement_meta_t meta = {0};
  if (a->placement) {
    rg_plan_request_t probe = {0};
    rg_status_t st = rg_placement_load(a->placement, w->cat, &probe, &meta);
    if (st && rg_status_code(st) == RG_INVALID_ARGUMENT &&
        strstr(rg_status_message(st), "a fleet is needed")) {
      rg_status_free(st);
      st = NULL;
    }
    RG_RETURN_IF_ERROR(st);
    if (model && meta.model[0] && strcmp(model, meta.model))
      return rg_status_make(RG_INVALID_ARGUMENT,
                            "--model %s contradicts the placement file's model: %s (%s); drop one "
                            "of them",
                            model, meta.model, meta.model_where);
    if (fleet && meta.fleet[0] && strcmp(fleet, meta.fleet))
      return rg_status_make(RG_INVALID_ARGUMENT,
                            "--fleet %s contradicts the placement file's fleet: %s (%s); drop one "
                            "of them",
                            fleet, meta.fleet, meta.fleet_where);
    if (!model && meta.model[0]) model = meta.model;
    if (!fleet && meta.fleet[0]) fleet = meta.fleet;
    if (!wl && meta.workload[0] && strcmp(meta.workload, "default")) wl = meta.workload;
  }
  if (!model || !fleet)
    return rg_status_make(RG_INVALID_ARGUMENT, "missing --%s (see ridge simulate --help)",
                          model ? "fleet" : "model");
  RG_RETURN_IF_ERROR(rg_model_load(model, common->config_dir, &w->model));
  RG_RETURN_IF_ERROR(rg_fleet_load(fleet, common->config_dir, w->cat, &w->fleet));
  if (wl)
    RG_RETURN_IF_ERROR(rg_workload_load(wl, common->config_dir, &w->wl));
  else
    rg_workload_default(&w->wdef);
  rg_plan_request_t *req = w->req;
  req->model = w->model;
  req->fleet = w->fleet;
  req->workload = w->wl ? w->wl : &w->wdef;
  if (req->workload->speculative.present) {
    rg_status_t st = rg_model_load(req->workload->speculative.draft, common->config_dir, &w->draft);
    if (st) return rg_status_wrap(st, "workload '%s' speculative.draft", req->workload->name);
    req->draft = w->draft;
  }
  req->mem_util = meta.mem_util;
  req->prefill_chunk = meta.prefill_chunk;
  if (a->chunk) {
    long long v;
    RG_RETURN_IF_ERROR(flag_count("--prefill-chunk", a->chunk, 16, 1 << 20, &v));
    req->prefill_chunk = (double)v;
  }
  if (a->mem_util)
    RG_RETURN_IF_ERROR(flag_number("--memory-utilization", a->mem_util, 0.05, 1, &req->mem_util));
  req->objective = meta.has_objective ? meta.objective : RG_OBJ_THROUGHPUT;
  if (a->objective && rg_objective_parse(a->objective, &req->objective))
    return rg_status_make(
        RG_INVALID_ARGUMENT,
        "--objective: unknown '%s'; expected throughput, tokens-per-dollar or tokens-per-watt",
        a->objective);
  req->weight_dtype = meta.has_weight_dtype ? meta.weight_dtype : w->model->weight_dtype;
  req->kv_dtype = meta.has_kv_dtype ? meta.kv_dtype : RG_BF16;
  if (a->wdt) RG_RETURN_IF_ERROR(rg_parse_dtype("--weight-dtype", a->wdt, &req->weight_dtype));
  if (a->kvdt) RG_RETURN_IF_ERROR(rg_parse_dtype("--kv-dtype", a->kvdt, &req->kv_dtype));
  if (a->placement) {
    rg_placement_meta_t again = {0};
    RG_RETURN_IF_ERROR(rg_placement_load(a->placement, w->cat, req, &again));
  }
  return NULL;
}

// ----- Options ------------------------------------------------------------------------

typedef struct {
  rg_sim_options_t o;
  rg_sim_trace_t trace;
  rg_sim_sessions_t sessions;
  char what[600];  // what arrives, for the header
} source_t;

static rg_status_t make_source(const sim_args_t *a, const world_t *w, source_t *s) {
  memset(s, 0, sizeof *s);
  rg_sim_options_t *o = &s->o;
  const rg_workload_t *wl = w->req->workload;
  o->retention_s = -1;
  o->prefix_cache = -1;
  o->seed = 1;
  if (a->seed) {
    long long v;
    RG_RETURN_IF_ERROR(flag_count("--seed", a->seed, 0, (1ll << 62), &v));
    o->seed = (uint64_t)v;
  }
  if (a->preempt) RG_RETURN_IF_ERROR(rg_sched_preempt_parse(a->preempt, &o->preempt));
  if (a->prefix_cache)
    RG_RETURN_IF_ERROR(flag_on_off("--prefix-cache", a->prefix_cache, &o->prefix_cache));
  if (a->tier) {
    if (!strcmp(a->tier, "none")) {
      o->no_tier = 1;
    } else {
      const rg_device_class_t *c = rg_catalog_find(w->cat, a->tier);
      if (!c) return rg_status_wrap(rg_catalog_unknown(w->cat, a->tier, NULL), "--tier");
      if (rg_class_computes(c))
        return rg_status_make(RG_INVALID_ARGUMENT,
                              "--tier: %s computes; a KV tier is a memory class such as host-dram "
                              "or nvme-ssd (or none)",
                              c->name);
      o->tier = c;
    }
  }
  if (a->retention) RG_RETURN_IF_ERROR(flag_time("--retention", a->retention, &o->retention_s));
  if (a->max_seqs) {
    long long v;
    RG_RETURN_IF_ERROR(flag_count("--max-seqs", a->max_seqs, 1, 1 << 16, &v));
    o->max_seqs = (int)v;
  }
  if (a->kv_tokens) {
    long long v;
    RG_RETURN_IF_ERROR(flag_count("--kv-tokens", a->kv_tokens, 1, 1ll << 40, &v));
    o->kv_tokens = v;
  }
  if (a->block_size) {
    long long v;
    RG_RETURN_IF_ERROR(flag_count("--block-size", a->block_size, 1, 4096, &v));
    if (v & (v - 1))
      return rg_status_make(RG_INVALID_ARGUMENT, "--block-size: %lld is not a power of two", v);
    o->block_size = (int)v;
  }
  o->exact_costs = a->exact;
  double duration = 0;
  if (a->duration) RG_RETURN_IF_ERROR(flag_time("--duration", a->duration, &duration));
  if (a->duration && !(duration > 0))
    return rg_status_make(RG_INVALID_ARGUMENT, "--duration: '%s' is no time at all", a->duration);
  rg_arrival_t arr = {RG_ARRIVAL_POISSON, -1, 1};
  if (a->arrival) RG_RETURN_IF_ERROR(rg_arrival_parse(a->arrival, &arr.process));
  if (a->cv) {
    if (arr.process != RG_ARRIVAL_GAMMA)
      return rg_status_make(RG_INVALID_ARGUMENT,
                            "--cv sets how bursty gamma arrivals are; add --arrival gamma");
    RG_RETURN_IF_ERROR(flag_number("--cv", a->cv, 0.01, 100, &arr.cv));
  } else if (arr.process == RG_ARRIVAL_GAMMA) {
    arr.cv = 2;
  }
  if (a->rate) {
    const char *why;
    char *end;
    errno = 0;
    double v = strtod(a->rate, &end);
    if (!(end != a->rate && !*end && !errno && v >= 0) &&
        (rg_unit_parse(a->rate, RG_UNIT_RATE, &v, &why) || !(v >= 0)))
      return rg_status_make(RG_INVALID_ARGUMENT,
                            "--rate: '%s' is not a request rate; write it like 20 or 20req/s",
                            a->rate);
    arr.rate = v;
  }
  if (a->trace) {
    if (!a->trace_format)
      return rg_status_make(RG_INVALID_ARGUMENT,
                            "--trace needs --trace-format azure (CSV: TIMESTAMP,ContextTokens,"
                            "GeneratedTokens) or mooncake (JSONL with hash_ids)");
    if (a->requests || a->rate || a->arrival)
      return rg_status_make(RG_INVALID_ARGUMENT,
                            "--trace replays the trace's own arrivals and lengths; drop "
                            "--requests, --rate and --arrival");
    rg_sim_trace_format_t fmt;
    RG_RETURN_IF_ERROR(rg_sim_trace_format_parse(a->trace_format, &fmt));
    RG_RETURN_IF_ERROR(rg_sim_trace_read(a->trace, fmt, &s->trace));
    o->trace = &s->trace;
    o->duration = duration;
    snprintf(s->what, sizeof s->what, "%zu requests of the %s trace %s%s", s->trace.n,
             rg_sim_trace_format_name(fmt), a->trace, duration > 0 ? " (cut at --duration)" : "");
    return NULL;
  }
  if (a->trace_format)
    return rg_status_make(RG_INVALID_ARGUMENT, "--trace-format needs --trace FILE");
  if (wl->session.present) {
    if (a->requests || a->arrival)
      return rg_status_make(RG_INVALID_ARGUMENT,
                            "workload '%s' is agentic sessions, which arrive as sessions: drop "
                            "--requests and --arrival (--duration and --rate set how long and "
                            "how many steps per second)",
                            wl->name);
    rg_workload_t tmp = *wl;
    if (arr.rate > 0) tmp.rate = arr.rate;
    rg_sim_sessions_from_workload(&tmp, &s->sessions);
    o->sessions = &s->sessions;
    o->duration = duration > 0 ? duration : 3600;
    char b1[32], b2[32];
    snprintf(s->what, sizeof s->what,
             "agentic sessions of workload %s: %.3g new sessions/s for %s (%.1f requests of %.1f "
             "steps each, ~%.0f-token prefixes, a person thinks %s between requests)",
             wl->name, s->sessions.rate, rg_fmt_quantity(o->duration, RG_UNIT_TIME, b2, sizeof b2),
             s->sessions.requests, s->sessions.steps_per_request, s->sessions.prefix_tokens,
             rg_fmt_quantity(s->sessions.think_time, RG_UNIT_TIME, b1, sizeof b1));
    return NULL;
  }
  double rate = arr.rate >= 0 ? arr.rate : wl->rate;
  long long n = 2000;
  if (a->requests) {
    RG_RETURN_IF_ERROR(flag_count("--requests", a->requests, 1, 100000000, &n));
  } else if (duration > 0) {
    if (!(rate > 0))
      return rg_status_make(RG_INVALID_ARGUMENT,
                            "--duration needs a rate of arrivals, and workload '%s' has none; give "
                            "--rate or --requests",
                            wl->name);
    // Enough requests to cover the duration, with room for the draws'
    // spread; arrivals past it are not started.
    n = (long long)ceil(rate * duration * 1.1 + 10 * sqrt(rate * duration) + 16);
  }
  o->duration = a->requests ? 0 : duration;
  RG_RETURN_IF_ERROR(
      rg_sim_trace_generate(wl, (size_t)n, o->seed, &arr, w->model->max_context, &s->trace));
  o->trace = &s->trace;
  char b1[32];
  if (rate > 0)
    snprintf(s->what, sizeof s->what, "%lld requests of workload %s, %s arrivals at %.3g req/s%s",
             n, wl->name, arr.process == RG_ARRIVAL_GAMMA ? "bursty gamma" : "Poisson", rate,
             o->duration > 0 ? " for " : "");
  else
    snprintf(s->what, sizeof s->what, "%lld requests of workload %s, all arriving at once", n,
             wl->name);
  if (o->duration > 0)
    snprintf(s->what + strlen(s->what), sizeof s->what - strlen(s->what), "%s",
             rg_fmt_quantity(o->duration, RG_UNIT_TIME, b1, sizeof b1));
  if (arr.process == RG_ARRIVAL_GAMMA)
    snprintf(s->what + strlen(s->what), sizeof s->what - strlen(s->what), " (cv %g)", arr.cv);
  return NULL;
}

// ----- Human output ----------------------------------------------------------------------

static const char *t(double s, char *b, size_t n) {
  return rg_fmt_quantity(s, RG_UNIT_TIME, b, n);
}
static const char *by(double v, char *b, size_t n) {
  return rg_fmt_quantity(v, RG_UNIT_BYTES, b, n);
}

static rg_status_t print_human(const world_t *w, const source_t *s, const rg_sim_report_t *r,
                               FILE *f) {
  char b1[32], b2[32], b3[32], b4[32];
  const rg_plan_option_t *o = &w->plan->chosen;
  fprintf(f, "model     %s; fleet %s\n", w->model->name, w->fleet->name);
  fprintf(f, "plan      %s:\n", o->label);
  for (int i = 0; i < r->n_pools; i++) {
    const rg_sim_pool_report_t *p = &r->pools[i];
    fprintf(f, "          %s, %d replica%s, up to %d sequences each\n", p->label, p->replicas,
            p->replicas == 1 ? "" : "s", p->max_seqs);
  }
  fprintf(f, "arrivals  %s\n", s->what);
  char b5[32], b6[32];
  fprintf(f,
          "simulated %s requests (%s output tokens) over %s of traffic in %s: %s iterations, %s "
          "events\n",
          rg_fmt_grouped((double)r->finished, b1, sizeof b1),
          rg_fmt_grouped((double)r->output_tokens, b2, sizeof b2), t(r->makespan, b3, sizeof b3),
          t(r->wall_seconds, b4, sizeof b4), rg_fmt_count((double)r->iterations, b5, sizeof b5),
          rg_fmt_count((double)r->events, b6, sizeof b6));
  if (r->refused)
    fprintf(f, "refused   %lld requests the scheduler can never run, e.g.: %s\n",
            (long long)r->refused, r->refused_reason);

  static const char *const heads[] = {"latency", "p50", "p90", "p99", "mean"};
  rg_table_t tb;
  rg_table_init(&tb, 5, heads, "lrrrr");
  const struct {
    const char *name;
    const rg_sim_pct_t *p;
  } rows[] = {{"TTFT", &r->ttft},
              {"TBT", &r->tbt},
              {"end to end", &r->e2e},
              {"TPOT (mean TBT of a request)", &r->tpot}};
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    rg_table_cell(&tb, "%s", rows[i].name);
    rg_table_cell(&tb, "%s", t(rows[i].p->p50, b1, sizeof b1));
    rg_table_cell(&tb, "%s", t(rows[i].p->p90, b1, sizeof b1));
    rg_table_cell(&tb, "%s", t(rows[i].p->p99, b1, sizeof b1));
    rg_table_cell(&tb, "%s", t(rows[i].p->mean, b1, sizeof b1));
  }
  fputc('\n', f);
  rg_status_t st = rg_table_print(&tb, f, 2);
  rg_table_deinit(&tb);
  RG_RETURN_IF_ERROR(st);

  fputc('\n', f);
  if (r->slo_ttft > 0 || r->slo_tbt > 0)
    fprintf(f, "SLOs        p%g TTFT %s, TBT %s: simulated %s and %s, %s\n", r->slo_percentile,
            r->slo_ttft > 0 ? t(r->slo_ttft, b1, sizeof b1) : "none",
            r->slo_tbt > 0 ? t(r->slo_tbt, b2, sizeof b2) : "none",
            t(r->ttft_at_slo, b3, sizeof b3), t(r->tbt_at_slo, b4, sizeof b4),
            r->meets_slo ? "met" : "missed");
  fprintf(f,
          "goodput     %.3g req/s, %s tokens/s: %.1f%% of requests meet TTFT and mean TBT SLOs\n",
          r->goodput_rps, rg_fmt_grouped(r->goodput_tps, b1, sizeof b1), 100 * r->slo_attainment);
  fprintf(f,
          "throughput  %s tokens/s, %.1f per device (%d devices); %.0f k tokens/$, %.3g tokens/J\n",
          rg_fmt_grouped(r->tokens_per_s, b1, sizeof b1), r->tokens_per_s_per_device, r->devices,
          r->tokens_per_dollar / 1e3, r->tokens_per_watt);
  fprintf(f, "scheduler   %lld preemptions (%lld recompute, %lld swap); prefix cache %s",
          (long long)(r->preempt_recompute + r->preempt_swap), (long long)r->preempt_recompute,
          (long long)r->preempt_swap, r->prefix_cache ? "on" : "off");
  if (r->prefix_cache)
    fprintf(f, ": %.1f%% of prompt tokens hit (%s of %s)", 100 * r->prefix_hit_rate,
            rg_fmt_count((double)r->prefix_hit_tokens, b1, sizeof b1),
            rg_fmt_count((double)r->prefix_lookup_tokens, b2, sizeof b2));
  fprintf(f, "; %s prefill tokens computed\n",
          rg_fmt_count((double)r->prefill_tokens, b1, sizeof b1));
  fprintf(f,
          "KV          device pool %s over all replicas (%s per device of the first pool), peak %s "
          "held",
          by(r->kv_device_capacity, b1, sizeof b1), by(r->kv_device_per_device, b2, sizeof b2),
          by(r->kv_device_peak, b3, sizeof b3));
  if (r->kv_swap_capacity > 0) fprintf(f, "; swap tier %s", by(r->kv_swap_capacity, b1, sizeof b1));
  fprintf(f, "; %lld blocks evicted; %s per %lld-token block\n", (long long)r->blocks_evicted,
          by(r->kv_block_bytes, b2, sizeof b2),
          r->kv_block_bytes > 0
              ? (long long)llround(r->kv_block_bytes /
                                   rg_arch_kv_bytes_per_token(w->model, o->pools[0].kv_dtype))
              : 0);
  if (r->kv_transfer_bytes > 0 || r->activation_bytes > 0 || r->swap_bytes > 0 ||
      r->tier_bytes > 0) {
    fprintf(f, "links      ");
    if (r->kv_transfer_bytes > 0)
      fprintf(f, " KV transfers %s (each p50 %s, p99 %s);", by(r->kv_transfer_bytes, b1, sizeof b1),
              t(r->kv_transfer_s.p50, b2, sizeof b2), t(r->kv_transfer_s.p99, b3, sizeof b3));
    if (r->activation_bytes > 0)
      fprintf(f, " activations %s;", by(r->activation_bytes, b1, sizeof b1));
    if (r->swap_bytes > 0) fprintf(f, " swaps %s;", by(r->swap_bytes, b1, sizeof b1));
    if (r->tier_bytes > 0) fprintf(f, " tier moves %s;", by(r->tier_bytes, b1, sizeof b1));
    fputc('\n', f);
  }
  if (r->sessions)
    fprintf(f,
            "sessions    %lld started, %lld ended (%lld filled the context), %lld cut by the end "
            "of arrivals; those ended lasted %s, %.1f%% of it waiting for a person\n",
            (long long)r->sessions, (long long)r->sessions_finished,
            (long long)r->sessions_context_full, (long long)r->sessions_cut,
            t(r->session_mean_s, b1, sizeof b1), 100 * r->session_wait_share);
  if (r->tier_name) {
    fprintf(f,
            "retention   golden time %s, then %s (%s): %s blocks offloaded, %s reloaded, %s "
            "dropped; %s on its links\n",
            t(r->retention_s, b1, sizeof b1), r->tier_name, by(r->kv_tier_capacity, b2, sizeof b2),
            rg_fmt_count((double)r->blocks_offloaded, b3, sizeof b3),
            rg_fmt_count((double)r->blocks_reloaded, b4, sizeof b4),
            rg_fmt_count((double)r->blocks_dropped, b5, sizeof b5),
            t(r->tier_link_seconds, b6, sizeof b6));
    fprintf(f, "            saved: %s prompt tokens found in the tier, ~%s of prefill on pool 1\n",
            rg_fmt_count((double)r->tier_hit_tokens, b1, sizeof b1),
            t(r->saved_prefill_seconds, b2, sizeof b2));
  }

  static const char *const pheads[] = {
      "pool", "tokens/s",  "plan said", "TTFT p50/p99 (plan)", "TBT p50/p99 (plan)",
      "busy", "mean batch"};
  rg_table_init(&tb, 7, pheads, "lrrrrrr");
  for (int i = 0; i < r->n_pools; i++) {
    const rg_sim_pool_report_t *p = &r->pools[i];
    rg_table_cell(&tb, "%s", p->label);
    rg_table_cell(&tb, "%s", rg_fmt_grouped(p->tokens_per_s, b1, sizeof b1));
    rg_table_cell(&tb, "%s", rg_fmt_grouped(p->pred_tokens_per_s, b1, sizeof b1));
    rg_table_cell(&tb, "%s / %s", t(p->pred_ttft_p50, b1, sizeof b1),
                  t(p->pred_ttft_p99, b2, sizeof b2));
    rg_table_cell(&tb, "%s / %s", t(p->pred_tbt_p50, b1, sizeof b1),
                  t(p->pred_tbt_p99, b2, sizeof b2));
    if (p->mode == RG_MODE_PD)
      rg_table_cell(&tb, "%.0f%% (prefill %.0f%%)", 100 * p->busy, 100 * p->prefill_busy);
    else
      rg_table_cell(&tb, "%.0f%%", 100 * p->busy);
    rg_table_cell(&tb, "%.1f", p->mean_batch);
  }
  fprintf(f, "\nper pool (simulated, beside what ridge plan predicted at the plan's load):\n");
  st = rg_table_print(&tb, f, 2);
  rg_table_deinit(&tb);
  return st;
}

// ----- JSON ------------------------------------------------------------------------------

static void json_pct(cJSON *o, const char *key, const rg_sim_pct_t *p, int *bad) {
  cJSON *e = rg_json_obj(o, key, bad);
  rg_json_num(e, "p50", p->p50, bad);
  rg_json_num(e, "p90", p->p90, bad);
  rg_json_num(e, "p99", p->p99, bad);
  rg_json_num(e, "mean", p->mean, bad);
  rg_json_num(e, "n", (double)p->n, bad);
}

static void json_report(cJSON *root, const rg_sim_report_t *r, int *bad) {
  rg_json_str(root, "source", r->source, bad);
  cJSON *q = rg_json_obj(root, "requests", bad);
  rg_json_num(q, "started", (double)r->requests, bad);
  rg_json_num(q, "finished", (double)r->finished, bad);
  rg_json_num(q, "refused", (double)r->refused, bad);
  if (r->refused) rg_json_str(q, "refused_reason", r->refused_reason, bad);
  rg_json_num(q, "unfinished", (double)r->unfinished, bad);
  rg_json_num(q, "prompt_tokens", (double)r->prompt_tokens, bad);
  rg_json_num(q, "output_tokens", (double)r->output_tokens, bad);
  rg_json_num(q, "prefill_tokens", (double)r->prefill_tokens, bad);
  rg_json_num(root, "iterations", (double)r->iterations, bad);
  rg_json_num(root, "events", (double)r->events, bad);
  rg_json_num(root, "makespan_s", r->makespan, bad);
  rg_json_num(root, "wall_s", r->wall_seconds, bad);
  cJSON *lat = rg_json_obj(root, "latency_s", bad);
  json_pct(lat, "ttft", &r->ttft, bad);
  json_pct(lat, "tbt", &r->tbt, bad);
  json_pct(lat, "e2e", &r->e2e, bad);
  json_pct(lat, "tpot", &r->tpot, bad);
  cJSON *slo = rg_json_obj(root, "slo", bad);
  rg_json_num(slo, "ttft_s", r->slo_ttft, bad);
  rg_json_num(slo, "tbt_s", r->slo_tbt, bad);
  rg_json_num(slo, "percentile", r->slo_percentile, bad);
  rg_json_num(slo, "ttft_at_percentile_s", r->ttft_at_slo, bad);
  rg_json_num(slo, "tbt_at_percentile_s", r->tbt_at_slo, bad);
  rg_json_bool(slo, "met", r->meets_slo, bad);
  rg_json_num(slo, "attainment", r->slo_attainment, bad);
  cJSON *g = rg_json_obj(root, "goodput", bad);
  rg_json_num(g, "requests_per_s", r->goodput_rps, bad);
  rg_json_num(g, "tokens_per_s", r->goodput_tps, bad);
  cJSON *tp = rg_json_obj(root, "throughput", bad);
  rg_json_num(tp, "tokens_per_s", r->tokens_per_s, bad);
  rg_json_num(tp, "tokens_per_s_per_device", r->tokens_per_s_per_device, bad);
  rg_json_num(tp, "devices", r->devices, bad);
  rg_json_num(tp, "dollars_per_hour", r->cost_per_s * 3600, bad);
  rg_json_num(tp, "watts", r->power, bad);
  rg_json_num(tp, "tokens_per_dollar", r->tokens_per_dollar, bad);
  rg_json_num(tp, "tokens_per_watt", r->tokens_per_watt, bad);
  cJSON *sc = rg_json_obj(root, "scheduler", bad);
  rg_json_str(sc, "preempt", rg_sched_preempt_name(r->preempt), bad);
  rg_json_num(sc, "preempt_recompute", (double)r->preempt_recompute, bad);
  rg_json_num(sc, "preempt_swap", (double)r->preempt_swap, bad);
  rg_json_bool(sc, "prefix_cache", r->prefix_cache, bad);
  rg_json_num(sc, "prefix_lookup_tokens", (double)r->prefix_lookup_tokens, bad);
  rg_json_num(sc, "prefix_hit_tokens", (double)r->prefix_hit_tokens, bad);
  rg_json_num(sc, "prefix_hit_rate", r->prefix_hit_rate, bad);
  rg_json_num(sc, "tier_hit_tokens", (double)r->tier_hit_tokens, bad);
  rg_json_num(sc, "blocks_evicted", (double)r->blocks_evicted, bad);
  rg_json_num(sc, "blocks_swapped_out", (double)r->blocks_swapped_out, bad);
  rg_json_num(sc, "blocks_swapped_in", (double)r->blocks_swapped_in, bad);
  rg_json_num(sc, "blocks_offloaded", (double)r->blocks_offloaded, bad);
  rg_json_num(sc, "blocks_reloaded", (double)r->blocks_reloaded, bad);
  rg_json_num(sc, "blocks_dropped", (double)r->blocks_dropped, bad);
  cJSON *ln = rg_json_obj(root, "links", bad);
  rg_json_num(ln, "kv_transfer_bytes", r->kv_transfer_bytes, bad);
  json_pct(ln, "kv_transfer_s", &r->kv_transfer_s, bad);
  rg_json_num(ln, "activation_bytes", r->activation_bytes, bad);
  rg_json_num(ln, "swap_bytes", r->swap_bytes, bad);
  rg_json_num(ln, "tier_bytes", r->tier_bytes, bad);
  cJSON *kv = rg_json_obj(root, "kv", bad);
  rg_json_num(kv, "block_bytes", r->kv_block_bytes, bad);
  rg_json_num(kv, "device_capacity_bytes", r->kv_device_capacity, bad);
  rg_json_num(kv, "device_bytes_per_device", r->kv_device_per_device, bad);
  rg_json_num(kv, "swap_capacity_bytes", r->kv_swap_capacity, bad);
  rg_json_num(kv, "tier_capacity_bytes", r->kv_tier_capacity, bad);
  rg_json_num(kv, "device_peak_bytes", r->kv_device_peak, bad);
  rg_json_num(kv, "tier_peak_bytes", r->kv_tier_peak, bad);
  cJSON *samples = rg_json_arr(kv, "over_time", bad);
  for (size_t i = 0; i < r->n_kv; i++) {
    cJSON *e = rg_json_push_obj(samples, bad);
    rg_json_num(e, "t_s", r->kv[i].t, bad);
    rg_json_num(e, "device_used_bytes", r->kv[i].device_used, bad);
    rg_json_num(e, "device_cached_bytes", r->kv[i].device_cached, bad);
    rg_json_num(e, "swap_bytes", r->kv[i].swap, bad);
    rg_json_num(e, "tier_bytes", r->kv[i].tier, bad);
  }
  cJSON *rt = rg_json_obj(root, "retention", bad);
  if (r->tier_name)
    rg_json_str(rt, "tier", r->tier_name, bad);
  else
    rg_json_null(rt, "tier", bad);
  rg_json_num(rt, "golden_time_s", r->retention_s, bad);
  rg_json_num(rt, "tier_link_s", r->tier_link_seconds, bad);
  rg_json_num(rt, "saved_prefill_s", r->saved_prefill_seconds, bad);
  if (r->sessions) {
    cJSON *se = rg_json_obj(root, "sessions", bad);
    rg_json_num(se, "started", (double)r->sessions, bad);
    rg_json_num(se, "ended", (double)r->sessions_finished, bad);
    rg_json_num(se, "context_full", (double)r->sessions_context_full, bad);
    rg_json_num(se, "cut", (double)r->sessions_cut, bad);
    rg_json_num(se, "mean_s", r->session_mean_s, bad);
    rg_json_num(se, "waiting_share", r->session_wait_share, bad);
  }
  cJSON *pools = rg_json_arr(root, "pools", bad);
  for (int i = 0; i < r->n_pools; i++) {
    const rg_sim_pool_report_t *p = &r->pools[i];
    cJSON *po = rg_json_push_obj(pools, bad);
    rg_json_str(po, "label", p->label, bad);
    rg_json_str(po, "mode", rg_mode_name(p->mode), bad);
    rg_json_num(po, "replicas", p->replicas, bad);
    rg_json_num(po, "devices", p->devices, bad);
    rg_json_num(po, "max_seqs", p->max_seqs, bad);
    rg_json_num(po, "kv_blocks_per_replica", (double)p->kv_blocks, bad);
    rg_json_num(po, "swap_blocks_per_replica", (double)p->swap_blocks, bad);
    rg_json_num(po, "tier_blocks_per_replica", (double)p->tier_blocks, bad);
    if (p->mode == RG_MODE_PD)
      rg_json_num(po, "prefill_kv_blocks_per_replica", (double)p->prefill_kv_blocks, bad);
    rg_json_num(po, "requests", (double)p->requests, bad);
    rg_json_num(po, "output_tokens", (double)p->output_tokens, bad);
    rg_json_num(po, "iterations", (double)p->iterations, bad);
    rg_json_num(po, "tokens_per_s", p->tokens_per_s, bad);
    rg_json_num(po, "mean_batch", p->mean_batch, bad);
    rg_json_num(po, "busy", p->busy, bad);
    if (p->mode == RG_MODE_PD) rg_json_num(po, "prefill_busy", p->prefill_busy, bad);
    cJSON *pr = rg_json_obj(po, "planned", bad);
    rg_json_num(pr, "tokens_per_s", p->pred_tokens_per_s, bad);
    rg_json_num(pr, "ttft_p50_s", p->pred_ttft_p50, bad);
    rg_json_num(pr, "ttft_p99_s", p->pred_ttft_p99, bad);
    rg_json_num(pr, "tbt_p50_s", p->pred_tbt_p50, bad);
    rg_json_num(pr, "tbt_p99_s", p->pred_tbt_p99, bad);
  }
}

// ----- Files -------------------------------------------------------------------------------

typedef struct {
  const rg_sim_report_t *r;
  const rg_pareto_curve_t *curves;
  int n;
  const char *title;
} svg_job_t;

static rg_status_t write_svg(const char *path, const char *what, const svg_job_t *j) {
  rg_file_writer_t *w;
  RG_RETURN_IF_ERROR(rg_file_writer_open(path, what, &w));
  FILE *f = rg_file_writer_stream(w);
  rg_status_t st = j->r ? rg_sim_write_kv_svg(j->r, j->title, f)
                        : rg_sim_write_pareto_svg(j->curves, j->n, j->title, f);
  return rg_file_writer_finish(w, st);
}

// ----- The command ---------------------------------------------------------------------------

static rg_status_t run(const sim_args_t *a, const rg_cli_common_t *common) {
  world_t w;
  source_t *s = calloc(1, sizeof *s);
  rg_sim_report_t *r = NULL;
  rg_status_t st = load_world(a, common, &w);
  if (!s && !st) st = rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
  // What arrives first (bad flags and bad traces are named before any
  // planning), then the plan.
  if (!st) st = make_source(a, &w, s);
  if (!st) st = rg_plan_solve(w.req, w.plan);
  progress_t pr = {isatty(2), 0, 0};
  if (!st) {
    if (!a->quiet && !a->json) {
      s->o.progress = on_progress;
      s->o.progress_ctx = &pr;
    }
    st = rg_simulate(w.req, &w.plan->chosen, &s->o, &r);
    if (pr.printed && pr.tty) fputc('\n', stderr);
  }
  char title[256];
  snprintf(title, sizeof title, "ridge simulate: %s on %s, %s", w.model ? w.model->name : "",
           w.fleet ? w.fleet->name : "", w.req ? w.req->workload->name : "");
  if (!st && a->kv_svg) {
    svg_job_t j = {r, NULL, 0, title};
    st = write_svg(a->kv_svg, "KV SVG", &j);
  }
  rg_pareto_curve_t curves[RG_PARETO_KINDS];
  int n_curves = 0;
  if (!st && a->pareto) {
    int n = 0;
    rg_sim_options_t po = s->o;
    po.progress = NULL;
    st = rg_sim_pareto(w.req, w.plan, &po, curves, &n);
    svg_job_t j = {NULL, curves, n, title};
    if (!st) st = write_svg(a->pareto, "Pareto SVG", &j);
    n_curves = n;
  }
  if (!st && a->json) {
    int bad = 0;
    cJSON *root = cJSON_CreateObject();
    if (!root) bad = 1;
    rg_json_str(root, "model", w.model->name, &bad);
    rg_json_str(root, "fleet", w.fleet->name, &bad);
    rg_json_str(root, "workload", w.req->workload->name, &bad);
    rg_json_str(root, "plan", w.plan->chosen.label, &bad);
    rg_json_str(root, "arrivals", s->what, &bad);
    rg_json_num(root, "seed", (double)s->o.seed, &bad);
    json_report(root, r, &bad);
    if (n_curves) {
      cJSON *pa = rg_json_arr(root, "pareto", &bad);
      for (int i = 0; i < n_curves; i++) {
        cJSON *c = rg_json_push_obj(pa, &bad);
        rg_json_str(c, "label", curves[i].label, &bad);
        cJSON *pts = rg_json_arr(c, "points", &bad);
        for (int k = 0; k < curves[i].n; k++) {
          cJSON *pt = rg_json_push_obj(pts, &bad);
          rg_json_num(pt, "max_seqs", curves[i].pt[k].batch, &bad);
          rg_json_num(pt, "tokens_per_s_per_user", curves[i].pt[k].per_user, &bad);
          rg_json_num(pt, "tokens_per_s_per_device", curves[i].pt[k].per_device, &bad);
        }
      }
    }
    st = rg_json_emit(root, bad, stdout);
  } else if (!st) {
    st = print_human(&w, s, r, stdout);
    if (!st && (a->kv_svg || a->pareto))
      printf("\nwrote%s%s%s%s\n", a->kv_svg ? " KV occupancy " : "", a->kv_svg ? a->kv_svg : "",
             a->pareto ? " pareto " : "", a->pareto ? a->pareto : "");
  }
  rg_sim_report_destroy(r);
  if (s) rg_sim_trace_free(&s->trace);
  free(s);
  world_free(&w);
  return st;
}

int rg_cmd_simulate(int argc, char **argv, const rg_cli_common_t *common) {
  sim_args_t a;
  int help = 0;
  rg_status_t st = parse_args(argc, argv, common, &a, &help);
  if (st) return rg_cli_fail("simulate", st);
  if (help) {
    fputs(usage, stdout);
    return 0;
  }
  st = run(&a, common);
  return st ? rg_cli_fail("simulate", st) : 0;
}

// ----- ridge plan --simulate -------------------------------------------------------------

// Options worth simulating: the chosen plan and its feasible baselines, best
// analytical objective first.
static double objective_of(const rg_plan_option_t *o, rg_objective_t obj) {
  return obj == RG_OBJ_TOKENS_PER_DOLLAR ? o->tokens_per_dollar
         : obj == RG_OBJ_TOKENS_PER_WATT ? o->tokens_per_joule
                                         : o->tokens_per_s;
}

rg_status_t rg_cli_plan_simulate(const rg_plan_request_t *req, rg_plan_t *plan, int top, FILE *f,
                                 cJSON **json_out) {
  const rg_plan_option_t *cand[32];
  int n = 0;
  cand[n++] = &plan->chosen;
  for (int i = 0; i < plan->n_baselines && n < 32; i++)
    if (plan->baselines[i].feasible) cand[n++] = &plan->baselines[i];
  for (int i = 2; i < n; i++)  // baselines by objective (insertion sort; the chosen stays first)
    for (int j = i;
         j > 1 && objective_of(cand[j], req->objective) > objective_of(cand[j - 1], req->objective);
         j--) {
      const rg_plan_option_t *x = cand[j];
      cand[j] = cand[j - 1];
      cand[j - 1] = x;
    }
  if (n > top) n = top;
  // The same traffic for every candidate: the workload's sessions for ten
  // minutes, or 1,000 of its requests at its rate.
  const rg_workload_t *w = req->workload;
  rg_sim_trace_t trace = {0};
  rg_sim_sessions_t ses;
  rg_sim_options_t o = {.retention_s = -1, .prefix_cache = -1, .seed = 1};
  rg_status_t st = NULL;
  if (w->session.present) {
    rg_sim_sessions_from_workload(w, &ses);
    o.sessions = &ses;
    o.duration = 600;
  } else {
    rg_arrival_t arr = {RG_ARRIVAL_POISSON, -1, 1};
    RG_RETURN_IF_ERROR(rg_sim_trace_generate(w, 1000, 1, &arr, req->model->max_context, &trace));
    o.trace = &trace;
  }
  double good[32] = {0};
  rg_sim_report_t *reps[32] = {0};
  int best = 0;
  for (int i = 0; i < n && !st; i++) {
    st = rg_simulate(req, cand[i], &o, &reps[i]);
    if (st) {
      st = rg_status_wrap(st, "simulating '%s'", cand[i]->label);
      break;
    }
    good[i] = reps[i]->goodput_tps;
    if (good[i] > good[best]) best = i;
  }
  if (!st && f) {
    char b[8][32];
    fprintf(f, "\nSimulated (%s, seed 1; the same traffic for each): analytical | simulated\n",
            o.sessions ? "10 min of the workload's sessions" : "1,000 of the workload's requests");
    static const char *const heads[] = {"option",  "tokens/s",         "TTFT p99",
                                        "TBT p99", "goodput tokens/s", "SLOs met by"};
    rg_table_t tb;
    rg_table_init(&tb, 6, heads, "lrrrrr");
    for (int i = 0; i < n; i++) {
      const rg_plan_option_t *c = cand[i];
      const rg_sim_report_t *r = reps[i];
      double ttft = 0, tbt = 0;
      for (int k = 0; k < c->n_pools; k++) {
        ttft = fmax(ttft, c->pred[k].ttft_p[RG_N_PCT - 1]);
        tbt = fmax(tbt, c->pred[k].tbt_p[RG_N_PCT - 1]);
      }
      rg_table_cell(&tb, "%s%s", c->label, i == best ? " *" : "");
      rg_table_cell(&tb, "%s | %s", rg_fmt_grouped(c->tokens_per_s, b[0], 32),
                    rg_fmt_grouped(r->tokens_per_s, b[1], 32));
      rg_table_cell(&tb, "%s | %s", t(ttft, b[2], 32), t(r->ttft.p99, b[3], 32));
      rg_table_cell(&tb, "%s | %s", t(tbt, b[4], 32), t(r->tbt.p99, b[5], 32));
      rg_table_cell(&tb, "%s", rg_fmt_grouped(r->goodput_tps, b[6], 32));
      rg_table_cell(&tb, "%.1f%% of requests", 100 * r->slo_attainment);
    }
    st = rg_table_print(&tb, f, 2);
    rg_table_deinit(&tb);
    if (!st)
      fprintf(f, "  * chosen by simulated goodput%s\n",
              best ? "; it replaces the analytical choice in the plan written"
                   : " (the analytical choice)");
  }
  if (!st && json_out) {
    int bad = 0;
    cJSON *arr = cJSON_CreateArray();
    if (!arr) bad = 1;
    for (int i = 0; i < n; i++) {
      cJSON *e = rg_json_push_obj(arr, &bad);
      double ttft = 0, tbt = 0;
      for (int k = 0; k < cand[i]->n_pools; k++) {
        ttft = fmax(ttft, cand[i]->pred[k].ttft_p[RG_N_PCT - 1]);
        tbt = fmax(tbt, cand[i]->pred[k].tbt_p[RG_N_PCT - 1]);
      }
      rg_json_str(e, "label", cand[i]->label, &bad);
      rg_json_bool(e, "chosen", i == best, &bad);
      cJSON *an = rg_json_obj(e, "analytical", &bad);
      rg_json_num(an, "tokens_per_s", cand[i]->tokens_per_s, &bad);
      rg_json_num(an, "ttft_p99_s", ttft, &bad);
      rg_json_num(an, "tbt_p99_s", tbt, &bad);
      cJSON *si = rg_json_obj(e, "simulated", &bad);
      rg_json_num(si, "tokens_per_s", reps[i]->tokens_per_s, &bad);
      rg_json_num(si, "ttft_p99_s", reps[i]->ttft.p99, &bad);
      rg_json_num(si, "tbt_p99_s", reps[i]->tbt.p99, &bad);
      rg_json_num(si, "goodput_tokens_per_s", reps[i]->goodput_tps, &bad);
      rg_json_num(si, "slo_attainment", reps[i]->slo_attainment, &bad);
    }
    if (bad) {
      cJSON_Delete(arr);
      st = rg_status_make(RG_OUT_OF_MEMORY, "out of memory for JSON");
    } else {
      *json_out = arr;
    }
  }
  if (!st && best) {
    // The simulation's pick becomes the plan (what -o writes); the
    // analytical choice stays among the options compared.
    plan->chosen = *cand[best];
    snprintf(plan->chosen.label, sizeof plan->chosen.label, "chosen by simulation: %.60s",
             cand[best]->label);
  }
  for (int i = 0; i < n; i++) rg_sim_report_destroy(reps[i]);
  rg_sim_trace_free(&trace);
  return st;
}
