// `ridge plan`: place a model's stages on a fleet and predict what it yields,
// beside the best homogeneous placement on each class and the disaggregated
// variants, with one line per stage saying which roof bounds it.
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fileio.h"
#include "base/units.h"
#include "cli/cli.h"
#include "cli/output.h"
#include "graphs/graphs.h"
#include "planner/planner.h"

static const char usage[] =
    "usage: ridge plan --model M --fleet F [--workload W] [--objective O]\n"
    "                  [--placement P.yaml] [-o plan.yaml] [--svg roofline.svg]\n"
    "                  [--pareto pareto.svg] [--json] [--weight-dtype T] [--kv-dtype T]\n"
    "                  [--memory-utilization F] [--prefill-chunk N] [--simulate]\n"
    "\n"
    "Searches placements of the model's stages (attention, FFN or experts, embed and\n"
    "lm_head, the KV home) on the fleet's device classes: colocated on one class,\n"
    "attention-FFN disaggregated across two, prefill-decode disaggregated on one or two;\n"
    "sizes each group to hold its weights and KV, finds the largest batch that meets\n"
    "the workload's SLOs at its percentile, and packs replicas into the fleet (GLPK\n"
    "integer program). Prints predicted tokens/s, TTFT and TBT (p50/p90/p99), tokens/$\n"
    "and tokens/W beside the best homogeneous placement on each class and the\n"
    "disaggregated variants. Classes calibrated by `ridge profile` (configs/devices/\n"
    "calibrated/) are used in place of their datasheet figures.\n"
    "\n"
    "  --model M          name in configs/models, a model YAML, or a config.json\n"
    "  --fleet F          name in configs/fleets or a fleet YAML\n"
    "  --workload W       name in configs/workloads or a YAML (default: 1024-token\n"
    "                     prompts, 256-token outputs, TTFT 2 s, TBT 100 ms)\n"
    "  --objective O      throughput (default), tokens-per-dollar, tokens-per-watt\n"
    "  --placement P      a placement YAML: whole pools (as -o writes them) to\n"
    "                     evaluate, or `pin:`/`forbid:` constraints for the search\n"
    "  -o FILE            write the plan as a placement YAML (feeds --placement)\n"
    "  --svg FILE         write a roofline picture of the plan (every class in the fleet)\n"
    "  --pareto FILE      write tokens/s per user against tokens/s per device across\n"
    "                     batch sizes, one curve per placement kind (SVG)\n"
    "  --memory-utilization F  share of each device's memory for weights, KV and\n"
    "                     activations (default 0.90, as vLLM's gpu_memory_utilization)\n"
    "  --prefill-chunk N  tokens of prompt prefilled per step (default: 2048, or the\n"
    "                     largest power of two that keeps the TBT SLO): smaller chunks\n"
    "                     stall decoding less (TBT tail) and cost more weight reads\n"
    "  --weight-dtype T   weights as f32, bf16, f16, fp8, int8, fp4 (default: as published)\n"
    "  --kv-dtype T       KV cache dtype (default bf16)\n"
    "  --simulate         also simulate the plan and the best baselines (4 in all) on the\n"
    "                     same traffic with the runtime's scheduler (ridge simulate), print\n"
    "                     both predictions, and choose the one with the most simulated\n"
    "                     goodput (what -o then writes)\n"
    "  --json             machine-readable output\n"
    "\n"
    "examples:\n"
    "  ridge plan --model llama-3.1-70b --fleet mixed\n"
    "  ridge plan --model deepseek-v3 --fleet mixed --workload agentic --objective "
    "tokens-per-dollar\n"
    "  ridge plan --model llama-3.1-70b --fleet mixed -o plan.yaml && ridge plan --placement "
    "plan.yaml\n"
    "\n"
    "exit status: 0 planned, 2 bad input, 3 infeasible (the message says what is short).\n";

typedef struct {
  const char *model, *fleet, *workload, *placement, *out, *svg, *pareto, *wdt, *kvdt, *objective,
      *mem_util, *chunk;
  int json, simulate;
} plan_args_t;

static rg_status_t parse_args(int argc, char **argv, const rg_cli_common_t *common, plan_args_t *a,
                              int *help) {
  static const struct option longs[] = {{"model", required_argument, 0, 'm'},
                                        {"fleet", required_argument, 0, 'f'},
                                        {"workload", required_argument, 0, 'w'},
                                        {"objective", required_argument, 0, 'O'},
                                        {"placement", required_argument, 0, 'p'},
                                        {"output", required_argument, 0, 'o'},
                                        {"svg", required_argument, 0, 's'},
                                        {"weight-dtype", required_argument, 0, 'W'},
                                        {"kv-dtype", required_argument, 0, 'K'},
                                        {"json", no_argument, 0, 'j'},
                                        {"pareto", required_argument, 0, 'P'},
                                        {"memory-utilization", required_argument, 0, 'U'},
                                        {"prefill-chunk", required_argument, 0, 'C'},
                                        {"simulate", no_argument, 0, 'S'},
                                        {"help", no_argument, 0, 'h'},
                                        {0, 0, 0, 0}};
  memset(a, 0, sizeof(*a));
  a->json = common->json;
  rg_cli_getopt_reset();
  int c;
  while ((c = getopt_long(argc, argv, ":m:f:w:O:p:o:s:W:K:P:U:C:jh", longs, NULL)) != -1) {
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
      case 'O':
        a->objective = optarg;
        break;
      case 'p':
        a->placement = optarg;
        break;
      case 'o':
        a->out = optarg;
        break;
      case 's':
        a->svg = optarg;
        break;
      case 'W':
        a->wdt = optarg;
        break;
      case 'K':
        a->kvdt = optarg;
        break;
      case 'P':
        a->pareto = optarg;
        break;
      case 'U':
        a->mem_util = optarg;
        break;
      case 'C':
        a->chunk = optarg;
        break;
      case 'j':
        a->json = 1;
        break;
      case 'S':
        a->simulate = 1;
        break;
      case 'h':
        *help = 1;
        return NULL;
      default:
        return rg_cli_getopt_error(c, argv, longs);
    }
  }
  if (optind < argc)
    return rg_status_make(RG_INVALID_ARGUMENT, "unexpected argument '%s' (see ridge plan --help)",
                          argv[optind]);
  return NULL;
}

// ----- Human output --------------------------------------------------------------

static void describe_fleet(const rg_fleet_t *f, char *buf, size_t len) {
  buf[0] = 0;
  const rg_device_class_t *seen[32];
  int n = 0;
  for (int i = 0; i < f->n_nodes; i++)
    for (int j = 0; j < f->nodes[i].n_devs; j++) {
      const rg_device_class_t *c = f->nodes[i].devs[j].cls;
      int dup = 0;
      for (int k = 0; k < n; k++) dup |= seen[k] == c;
      if (dup || n == 32) continue;
      seen[n++] = c;
      size_t u = strlen(buf);
      snprintf(buf + u, len - u, "%s%d x %s%s", n > 1 ? ", " : "", rg_fleet_count(f, c), c->name,
               rg_class_computes(c) ? "" : " (tier)");
    }
}

static void pool_line(const rg_plan_request_t *req, const rg_placement_t *p, char *buf,
                      size_t len) {
  size_t u = 0;
  for (int g = 0; g < p->n_groups && u < len; g++) {
    u += snprintf(buf + u, len - u, "%s%s %d x %s", g ? " | " : "", p->groups[g].name,
                  p->groups[g].devices, p->groups[g].cls->name);
    const rg_group_t *gr = &p->groups[g];
    if (u < len && gr->devices > 1) {
      char kv[48] = "";
      const rg_arch_t *a = req->model;
      if (!a->mla && gr->tp > a->n_kv_heads && p->slot_group[RG_SLOT_ATTENTION] == g)
        snprintf(kv, sizeof kv, "; each KV head on %lld devices",
                 (long long)(gr->tp / a->n_kv_heads));
      u += snprintf(buf + u, len - u, " (tp %d, pp %d, dp %d%s%s)", gr->tp, gr->pp, gr->dp, kv,
                    gr->dp > 1 && a->n_experts > 0 && p->slot_group[RG_SLOT_FFN] == g
                        ? "; experts over tp x dp"
                        : "");
    }
    if (u < len && req->draft && p->slot_group[RG_SLOT_DRAFT] == g)
      u += snprintf(buf + u, len - u, " [draft]");
  }
}

static void print_option_row(rg_table_t *t, const rg_plan_option_t *o,
                             const rg_plan_option_t *chosen, rg_objective_t obj) {
  char a[32], b[32], c[32];
  rg_table_cell(t, "%s", o->label);
  if (!o->feasible) {
    rg_table_cell(t, "does not fit or meet the SLOs");
    for (int i = 0; i < 5; i++) rg_table_cell(t, "-");
    return;
  }
  if (o->n_pools == 1) {
    const rg_placement_t *p = &o->pools[0];
    char desc[160];
    size_t u = 0;
    for (int g = 0; g < p->n_groups && u < sizeof desc; g++)
      u += snprintf(desc + u, sizeof desc - u, "%s%s%s%d %s", g ? " | " : "",
                    p->n_groups > 1 ? p->groups[g].name : "", p->n_groups > 1 ? " " : "",
                    p->groups[g].devices, p->groups[g].cls->name);
    rg_table_cell(t, "%d x (%s) b%d", p->replicas, desc, p->batch);
  } else {
    rg_table_cell(t, "%d pools, as above", o->n_pools);
  }
  rg_table_cell(t, "%s", rg_fmt_grouped(o->tokens_per_s, a, sizeof a));
  rg_table_cell(t, "%s", rg_fmt_quantity(o->ttft, RG_UNIT_TIME, b, sizeof b));
  rg_table_cell(t, "%s", rg_fmt_quantity(o->tbt, RG_UNIT_TIME, c, sizeof c));
  rg_table_cell(t, "%.0f k", o->tokens_per_dollar / 1e3);
  double mine = 0, theirs = 0;
  switch (obj) {
    case RG_OBJ_THROUGHPUT:
      mine = chosen->tokens_per_s, theirs = o->tokens_per_s;
      break;
    case RG_OBJ_TOKENS_PER_DOLLAR:
      mine = chosen->tokens_per_dollar, theirs = o->tokens_per_dollar;
      break;
    case RG_OBJ_TOKENS_PER_WATT:
      mine = chosen->tokens_per_joule, theirs = o->tokens_per_joule;
      break;
    default:
      break;
  }
  rg_table_cell(
      t, "%.2f tok/J   %s", o->tokens_per_joule,
      o == chosen ? "" : (theirs > 0 ? (snprintf(a, sizeof a, "%.2fx", mine / theirs), a) : "-"));
}

static rg_status_t explain_stages(const rg_plan_request_t *req, const rg_placement_t *p, FILE *f) {
  rg_shape_t s = rg_placement_decode_shape(req, p);
  rg_stage_cost_t c[RG_MAX_STAGE_COSTS];
  size_t n;
  RG_RETURN_IF_ERROR(rg_stage_costs(req->model, &s, c, RG_MAX_STAGE_COSTS, &n));
  fprintf(f, "\nWhy, per stage (decode, %lld sequences per micro-batch, context %lld):\n",
          (long long)s.batch, (long long)s.context);
  for (size_t i = 0; i < n; i++) {
    char b1[32];
    if (c[i].kind == RG_STAGE_ACTIVATION) {
      if (p->slot_group[RG_SLOT_ATTENTION] == p->slot_group[RG_SLOT_FFN]) continue;
      fprintf(f, "  %-15s %s per step between attention and FFN groups\n", c[i].name,
              rg_fmt_quantity(c[i].bytes, RG_UNIT_BYTES, b1, sizeof b1));
      continue;
    }
    int slot = rg_slot_of_stage(c[i].kind);
    if (slot < 0) continue;  // KV moves: bytes only, nothing to place on a roof
    const rg_group_t *g = &p->groups[p->slot_group[slot]];
    const rg_device_class_t *cls = g->cls;
    // The datasheet ridge says where the roofs cross at peak; which roof a
    // stage meets depends on what its kernels reach: compute efficiency at
    // its GEMM's M (a batch per attention replica; the queries sharing a KV
    // head for the attention core) against the bandwidth efficiency.
    int core = !strcmp(c[i].name, "attention.core");
    rg_dtype_t dt = core ? RG_BF16 : p->weight_dtype;
    double m = (double)s.batch * (double)s.new_tokens / (g->dp > 0 ? g->dp : 1);
    if (core)
      m = (double)s.new_tokens *
          (req->model->mla ? (double)req->model->n_heads
                           : (double)req->model->n_heads / (double)req->model->n_kv_heads);
    double em = core && cls->eff_attention > 0 ? cls->eff_attention : cls->eff_memory;
    double ridge = rg_class_ridge(cls, dt);
    double working = em > 0 ? ridge * rg_class_eff_compute(cls, dt, m) / em : ridge;
    const char *roof = c[i].intensity >= working ? "compute roof" : "memory roof (bandwidth-bound)";
    fprintf(f,
            "  %s%-*s intensity %8.1f FLOP/B on %-12s (ridge %4.0f, %4.0f as kernels run at M "
            "%.0f): %s\n",
            c[i].is_part ? "  " : "", c[i].is_part ? 13 : 15, c[i].name, c[i].intensity, cls->name,
            ridge, working, m, roof);
  }
  if (p->mode == RG_MODE_PD)
    fprintf(
        f, "  prefill runs on group '%s' (%s); its KV moves to the decode group over the network\n",
        p->groups[p->slot_group[RG_SLOT_PREFILL]].name,
        p->groups[p->slot_group[RG_SLOT_PREFILL]].cls->name);
  return NULL;
}

static rg_status_t print_human(const rg_plan_t *plan, const rg_plan_request_t *req, FILE *f) {
  char b1[64], b2[64], b3[64], fl[512];
  const rg_arch_t *a = req->model;
  const rg_workload_t *w = req->workload;
  describe_fleet(req->fleet, fl, sizeof fl);
  fprintf(f, "model     %s: %s params, %s of %s weights\n", a->name,
          rg_fmt_count(rg_arch_params(a), b1, sizeof b1),
          rg_fmt_quantity(rg_arch_weight_bytes(a, req->weight_dtype), RG_UNIT_BYTES, b2, sizeof b2),
          rg_dtype_name(req->weight_dtype));
  fprintf(f, "fleet     %s: %s\n", req->fleet->name, fl);
  rg_request_shape_t rq = rg_workload_request(w);
  fprintf(f, "workload  %s: prompt %.0f, output %.0f tokens", w->name, rq.prompt, rq.output);
  if (w->session.present) fprintf(f, " on a %.0f-token cached prefix", w->session.prefix_tokens);
  if (!w->session.present && rq.prefix > 0)
    fprintf(f, " after %.0f cached prefix tokens", rq.prefix);
  if (w->speculative.present)
    fprintf(f, "; speculative: %s proposes %d, %.0f%% accepted (%.2f tokens per step)",
            w->speculative.draft, w->speculative.tokens, w->speculative.acceptance * 100,
            rg_speculative_tokens_per_step(&w->speculative));
  fprintf(f, "; SLO p%g TTFT %s, TBT %s\n", w->slo_percentile,
          w->slo_ttft > 0 ? rg_fmt_quantity(w->slo_ttft, RG_UNIT_TIME, b1, sizeof b1) : "none",
          w->slo_tbt > 0 ? rg_fmt_quantity(w->slo_tbt, RG_UNIT_TIME, b2, sizeof b2) : "none");
  fprintf(f, "objective %s; %d placements evaluated in %s; replica packing: %s\n",
          rg_objective_name(req->objective), plan->candidates,
          rg_fmt_quantity(plan->solve_seconds, RG_UNIT_TIME, b3, sizeof b3),
          plan->milp_status[0] ? plan->milp_status : "as given");

  const rg_plan_option_t *o = &plan->chosen;
  fprintf(f, "\nPlan (%s):\n", o->label);
  for (int i = 0; i < o->n_pools; i++) {
    const rg_placement_t *p = &o->pools[i];
    const rg_prediction_t *pr = &o->pred[i];
    char desc[200];
    pool_line(req, p, desc, sizeof desc);
    fprintf(f, "  pool %d: %d replica%s, %s: %s; batch %d%s, prefill chunks of %.0f tokens\n",
            i + 1, p->replicas, p->replicas == 1 ? "" : "s", rg_mode_name(p->mode), desc, p->batch,
            p->micro_batches < 2    ? ""
            : p->mode == RG_MODE_AF ? ", 2 micro-batches (ping-pong)"
                                    : ", 2 micro-batches (two-batch overlap)",
            pr->prefill_chunk);
    for (int g = 0; g < p->n_groups; g++) {
      // A group idle while decoding (a prefill-decode prefill group) is
      // bounded by what its prefill step is.
      const char *bound = pr->bound[g], *only = "";
      if (!strcmp(bound, "-")) {
        rg_shape_t ps = rg_placement_prefill_shape(req, p);
        rg_step_cost_t sc;
        RG_RETURN_IF_ERROR(rg_group_step_time(req, p, g, RG_PHASE_PREFILL, (double)ps.batch,
                                              (double)ps.new_tokens, (double)ps.context, &sc));
        bound = sc.bound ? sc.bound : "compute";
        only = "prefill only, ";
      }
      fprintf(f, "          %-8s %s of %s per device used; %s%s-bound\n", p->groups[g].name,
              rg_fmt_quantity(pr->mem_used[g], RG_UNIT_BYTES, b1, sizeof b1),
              rg_fmt_quantity(pr->mem_cap[g], RG_UNIT_BYTES, b2, sizeof b2), only, bound);
    }
    fprintf(f, "          %s tokens/s, TTFT %s, TBT %s (means)\n",
            rg_fmt_grouped(pr->tokens_per_s, b1, sizeof b1),
            rg_fmt_quantity(pr->ttft, RG_UNIT_TIME, b2, sizeof b2),
            rg_fmt_quantity(pr->tbt, RG_UNIT_TIME, b3, sizeof b3));
    fprintf(f, "         ");
    for (int k = 0; k < RG_N_PCT; k++)
      fprintf(f, " p%g TTFT %s TBT %s%s", rg_pct[k],
              rg_fmt_quantity(pr->ttft_p[k], RG_UNIT_TIME, b1, sizeof b1),
              rg_fmt_quantity(pr->tbt_p[k], RG_UNIT_TIME, b2, sizeof b2),
              k + 1 < RG_N_PCT ? ";" : "\n");
    const rg_group_t *ga = &p->groups[p->slot_group[RG_SLOT_ATTENTION]];
    fprintf(f, "          KV of running sequences: group '%s' (%s %s)\n", ga->name, ga->cls->name,
            ga->cls->mem[0].name);
    if (w->session.present) {
      char c1[32], c2[32];
      fprintf(f, "          KV of %.0f idle sessions (%s): ", pr->idle_sessions,
              rg_fmt_quantity(pr->idle_kv_bytes, RG_UNIT_BYTES, b1, sizeof b1));
      if (pr->kv_policy == RG_KV_TIER)
        fprintf(f, "offloaded to %s (%s available), reload %s vs recompute %s\n", pr->kv_tier->name,
                rg_fmt_quantity(pr->kv_tier_capacity, RG_UNIT_BYTES, c1, sizeof c1),
                rg_fmt_quantity(pr->kv_reload_time, RG_UNIT_TIME, b2, sizeof b2),
                rg_fmt_quantity(pr->kv_recompute_time, RG_UNIT_TIME, c2, sizeof c2));
      else if (pr->kv_reload_time > 0)
        fprintf(f, "dropped and recomputed on return (%s), faster than a reload (%s)\n",
                rg_fmt_quantity(pr->kv_recompute_time, RG_UNIT_TIME, b2, sizeof b2),
                rg_fmt_quantity(pr->kv_reload_time, RG_UNIT_TIME, c2, sizeof c2));
      else
        fprintf(f, "dropped and recomputed on return (%s): no tier on these nodes holds it\n",
                rg_fmt_quantity(pr->kv_recompute_time, RG_UNIT_TIME, b2, sizeof b2));
    }
  }
  fprintf(f, "  total: %s tokens/s, %s, %.1f kW, %.0f k tokens/$, %.2f tokens/J\n",
          rg_fmt_grouped(o->tokens_per_s, b1, sizeof b1),
          rg_fmt_quantity(o->cost_per_s, RG_UNIT_PRICE, b2, sizeof b2), o->power / 1e3,
          o->tokens_per_dollar / 1e3, o->tokens_per_joule);
  if (w->rate > 0) {
    double demand = w->rate * rq.output;
    double cover = o->tokens_per_s / demand;
    char ratio[32];
    if (cover < 1000)
      snprintf(ratio, sizeof ratio, "%.3gx", cover);
    else
      snprintf(ratio, sizeof ratio, "over 1,000x");
    fprintf(f, "  the workload asks %s tokens/s (%.3g req/s): the plan covers %s of it%s\n",
            rg_fmt_grouped(demand, b1, sizeof b1), w->rate, ratio,
            o->tokens_per_s < demand
                ? "; queues grow without bound at that rate (TTFT shown at 95% load)"
                : "");
  }
  for (int i = 0; i < o->n_pools; i++)
    if (!o->pred[i].meets_slo)
      fprintf(f,
              "  warning: at the workload's rate pool %d misses its SLOs (p%g TTFT %s, TBT %s at "
              "%.0f%% load)\n",
              i + 1, w->slo_percentile,
              rg_fmt_quantity(o->pred[i].ttft_slo, RG_UNIT_TIME, b1, sizeof b1),
              rg_fmt_quantity(o->pred[i].tbt_slo, RG_UNIT_TIME, b2, sizeof b2),
              100 * o->pred[i].load);
  RG_RETURN_IF_ERROR(explain_stages(req, &o->pools[0], f));

  fprintf(f, "\nCompared with (the best placement of each kind, replicated across the fleet):\n");
  static const char *const heads[] = {"option",   "placement",           "tokens/s", "TTFT", "TBT",
                                      "tokens/$", "tokens/W   chosen is"};
  rg_table_t t;
  rg_table_init(&t, 7, heads, "llrrrrl");
  print_option_row(&t, o, o, req->objective);
  for (int i = 0; i < plan->n_baselines; i++)
    print_option_row(&t, &plan->baselines[i], o, req->objective);
  rg_status_t st = rg_table_print(&t, f, 2);
  rg_table_deinit(&t);
  return st;
}

// ----- JSON ----------------------------------------------------------------------

static void json_option(cJSON *o, const rg_plan_option_t *op, const rg_plan_request_t *req,
                        int *bad) {
  rg_json_str(o, "label", op->label, bad);
  rg_json_bool(o, "feasible", op->feasible, bad);
  if (!op->feasible) {
    rg_json_str(o, "why", op->why, bad);
    return;
  }
  rg_json_num(o, "tokens_per_s", op->tokens_per_s, bad);
  rg_json_num(o, "ttft_s", op->ttft, bad);
  rg_json_num(o, "tbt_s", op->tbt, bad);
  rg_json_num(o, "tokens_per_dollar", op->tokens_per_dollar, bad);
  rg_json_num(o, "tokens_per_watt", op->tokens_per_joule, bad);
  rg_json_num(o, "dollars_per_hour", op->cost_per_s * 3600, bad);
  rg_json_num(o, "watts", op->power, bad);
  cJSON *pools = rg_json_arr(o, "pools", bad);
  for (int i = 0; i < op->n_pools; i++) {
    const rg_placement_t *p = &op->pools[i];
    const rg_prediction_t *pr = &op->pred[i];
    cJSON *po = rg_json_push_obj(pools, bad);
    rg_json_str(po, "mode", rg_mode_name(p->mode), bad);
    rg_json_num(po, "replicas", p->replicas, bad);
    rg_json_num(po, "batch", p->batch, bad);
    rg_json_num(po, "micro_batches", p->micro_batches, bad);
    rg_json_num(po, "tokens_per_s", pr->tokens_per_s, bad);
    rg_json_num(po, "ttft_s", pr->ttft, bad);
    rg_json_num(po, "tbt_s", pr->tbt, bad);
    rg_json_num(po, "load", pr->load, bad);
    cJSON *pct = rg_json_obj(po, "percentiles", bad);
    for (int k = 0; k < RG_N_PCT; k++) {
      char key[16];
      snprintf(key, sizeof key, "p%g", rg_pct[k]);
      cJSON *e = rg_json_obj(pct, key, bad);
      rg_json_num(e, "ttft_s", pr->ttft_p[k], bad);
      rg_json_num(e, "tbt_s", pr->tbt_p[k], bad);
    }
    rg_json_num(po, "tokens_per_step", pr->tokens_per_step, bad);
    rg_json_num(po, "kv_tokens_per_sequence", pr->kv_tokens, bad);
    rg_json_bool(po, "meets_slo", pr->meets_slo, bad);
    cJSON *gs = rg_json_arr(po, "groups", bad);
    for (int g = 0; g < p->n_groups; g++) {
      cJSON *go = rg_json_push_obj(gs, bad);
      rg_json_str(go, "name", p->groups[g].name, bad);
      rg_json_str(go, "class", p->groups[g].cls->name, bad);
      rg_json_num(go, "devices", p->groups[g].devices, bad);
      rg_json_num(go, "tp", p->groups[g].tp, bad);
      rg_json_num(go, "pp", p->groups[g].pp, bad);
      rg_json_num(go, "dp", p->groups[g].dp, bad);
      rg_json_num(go, "memory_used_bytes", pr->mem_used[g], bad);
      rg_json_num(go, "memory_usable_bytes", pr->mem_cap[g], bad);
      rg_json_str(go, "bound", pr->bound[g], bad);
    }
    const rg_group_t *ga = &p->groups[p->slot_group[RG_SLOT_ATTENTION]];
    cJSON *kvo = rg_json_obj(po, "kv", bad);
    rg_json_str(kvo, "home", ga->name, bad);
    if (req->workload->session.present) {
      rg_json_str(kvo, "idle_policy", pr->kv_policy == RG_KV_TIER ? "offload" : "recompute", bad);
      if (pr->kv_policy == RG_KV_TIER) rg_json_str(kvo, "idle_tier", pr->kv_tier->name, bad);
      rg_json_num(kvo, "idle_sessions", pr->idle_sessions, bad);
      rg_json_num(kvo, "idle_bytes", pr->idle_kv_bytes, bad);
      rg_json_num(kvo, "reload_s", pr->kv_reload_time, bad);
      rg_json_num(kvo, "recompute_s", pr->kv_recompute_time, bad);
    }
    cJSON *st = rg_json_obj(po, "stages", bad);
    for (int s = 0; s < RG_SLOT_COUNT; s++)
      if (s != RG_SLOT_DRAFT || req->draft)
        rg_json_str(st, rg_slot_name((rg_slot_t)s), p->groups[p->slot_group[s]].name, bad);
  }
}

static rg_status_t print_json(const rg_plan_t *plan, const rg_plan_request_t *req, cJSON *simulated,
                              FILE *f) {
  int bad = 0;
  cJSON *root = cJSON_CreateObject();
  if (!root) bad = 1;
  rg_json_str(root, "model", req->model->name, &bad);
  rg_json_str(root, "fleet", req->fleet->name, &bad);
  rg_json_str(root, "workload", req->workload->name, &bad);
  rg_json_str(root, "objective", rg_objective_name(req->objective), &bad);
  rg_json_num(root, "solve_seconds", plan->solve_seconds, &bad);
  rg_json_num(root, "candidates", plan->candidates, &bad);
  rg_json_str(root, "packing", plan->milp_status, &bad);
  json_option(rg_json_obj(root, "chosen", &bad), &plan->chosen, req, &bad);
  cJSON *bl = rg_json_arr(root, "baselines", &bad);
  for (int i = 0; i < plan->n_baselines; i++)
    json_option(rg_json_push_obj(bl, &bad), &plan->baselines[i], req, &bad);
  if (simulated && root)
    cJSON_AddItemToObject(root, "simulated", simulated);
  else
    cJSON_Delete(simulated);
  return rg_json_emit(root, bad, f);
}

// ----- The command ----------------------------------------------------------------

static rg_status_t write_file(const char *path, const char *what, const rg_plan_t *plan,
                              const rg_plan_request_t *req, const rg_placement_meta_t *names,
                              int svg) {
  // A regular file is replaced atomically; /dev/stdout, a FIFO or a device is
  // written through, never replaced (see base/fileio.h).
  rg_file_writer_t *w;
  RG_RETURN_IF_ERROR(rg_file_writer_open(path, what, &w));
  FILE *f = rg_file_writer_stream(w);
  rg_status_t st = svg == 2 ? rg_plan_write_pareto_svg(plan, req, f)
                   : svg    ? rg_plan_write_svg(plan, req, f)
                            : rg_plan_write_yaml(plan, req, names, f);
  return rg_file_writer_finish(w, st);
}

static rg_status_t run(const plan_args_t *a, const rg_cli_common_t *common) {
  rg_catalog_t *cat = NULL;
  rg_fleet_t *fleet = NULL;
  rg_arch_t *model = NULL;
  rg_workload_t *wl = NULL, wdef;
  rg_plan_request_t *req = calloc(1, sizeof(*req));
  rg_plan_t *plan = calloc(1, sizeof(*plan));
  rg_placement_meta_t meta = {0}, names = {0};
  rg_arch_t *draft = NULL;
  const char *workload_note = NULL;
  char *sim_text = NULL;  // --simulate's table, printed after the plan
  size_t sim_len = 0;
  cJSON *sim_json = NULL;
  rg_status_t st = NULL;
  if (!req || !plan) {
    st = rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
    goto done;
  }
  st = rg_catalog_load(common->config_dir, &cat);
  if (st) goto done;
  // The placement file may name the model, fleet and workload; flags win.
  const char *model_name = a->model, *fleet_name = a->fleet, *wl_name = a->workload;
  if (a->placement) {
    // First pass for names only; pools need the fleet and are read below.
    rg_plan_request_t probe = {0};
    st = rg_placement_load(a->placement, cat, &probe, &meta);
    if (st && rg_status_code(st) == RG_INVALID_ARGUMENT &&
        strstr(rg_status_message(st), "a fleet is needed")) {
      rg_status_free(st);
      st = NULL;
    }
    if (st) goto done;
    // The file's pools were planned for its model and fleet: a flag naming
    // another would evaluate them against something else, so say so.
    if (model_name && meta.model[0] && strcmp(model_name, meta.model)) {
      st = rg_status_make(
          RG_INVALID_ARGUMENT,
          "--model %s contradicts the placement file's model: %s (%s); drop one of them",
          model_name, meta.model, meta.model_where);
      goto done;
    }
    if (fleet_name && meta.fleet[0] && strcmp(fleet_name, meta.fleet)) {
      st = rg_status_make(
          RG_INVALID_ARGUMENT,
          "--fleet %s contradicts the placement file's fleet: %s (%s); drop one of them",
          fleet_name, meta.fleet, meta.fleet_where);
      goto done;
    }
    if (!model_name && meta.model[0]) model_name = meta.model;
    if (!fleet_name && meta.fleet[0]) fleet_name = meta.fleet;
    if (wl_name && meta.workload[0] && strcmp(wl_name, meta.workload))
      workload_note = meta.workload;
    if (!wl_name && meta.workload[0] && strcmp(meta.workload, "default")) wl_name = meta.workload;
  }
  if (!model_name || !fleet_name) {
    st = rg_status_make(RG_INVALID_ARGUMENT,
                        "missing --%s (see ridge plan --help; `ridge` alone plans %s on %s)",
                        model_name ? "fleet" : "model", RG_DEFAULT_MODEL, RG_DEFAULT_FLEET);
    goto done;
  }
  snprintf(names.model, sizeof names.model, "%s", model_name);
  snprintf(names.fleet, sizeof names.fleet, "%s", fleet_name);
  snprintf(names.workload, sizeof names.workload, "%s", wl_name ? wl_name : "default");
  if ((st = rg_model_load(model_name, common->config_dir, &model))) goto done;
  if ((st = rg_fleet_load(fleet_name, common->config_dir, cat, &fleet))) goto done;
  if (wl_name) {
    if ((st = rg_workload_load(wl_name, common->config_dir, &wl))) goto done;
  } else {
    rg_workload_default(&wdef);
  }
  req->model = model;
  req->fleet = fleet;
  req->workload = wl ? wl : &wdef;
  if (req->workload->speculative.present) {
    st = rg_model_load(req->workload->speculative.draft, common->config_dir, &draft);
    if (st) {
      st = rg_status_wrap(st, "workload '%s' speculative.draft", req->workload->name);
      goto done;
    }
    req->draft = draft;
  }
  req->mem_util = meta.mem_util;
  req->prefill_chunk = meta.prefill_chunk;
  if (a->chunk) {
    char *end;
    errno = 0;
    long v = strtol(a->chunk, &end, 10);
    if (*end || errno || v < 16 || v > (1 << 20)) {
      st =
          rg_status_make(RG_INVALID_ARGUMENT,
                         "--prefill-chunk: '%s' is not a token count from 16 to 1048576", a->chunk);
      goto done;
    }
    req->prefill_chunk = (double)v;
  }
  if (a->mem_util) {
    char *end;
    errno = 0;
    double v = strtod(a->mem_util, &end);
    if (*end || errno || !(v >= 0.05 && v <= 1)) {
      st = rg_status_make(RG_INVALID_ARGUMENT,
                          "--memory-utilization: '%s' is not a fraction from 0.05 to 1",
                          a->mem_util);
      goto done;
    }
    req->mem_util = v;
  }
  req->objective = meta.has_objective ? meta.objective : RG_OBJ_THROUGHPUT;
  if (a->objective && rg_objective_parse(a->objective, &req->objective)) {
    st = rg_status_make(
        RG_INVALID_ARGUMENT,
        "--objective: unknown '%s'; expected throughput, tokens-per-dollar or tokens-per-watt",
        a->objective);
    goto done;
  }
  // Dtypes: the file's, where it names them, else the model's published
  // weights and bf16 KV; flags win over both.
  req->weight_dtype = meta.has_weight_dtype ? meta.weight_dtype : model->weight_dtype;
  req->kv_dtype = meta.has_kv_dtype ? meta.kv_dtype : RG_BF16;
  if (a->wdt && (st = rg_parse_dtype("--weight-dtype", a->wdt, &req->weight_dtype))) goto done;
  if (a->kvdt && (st = rg_parse_dtype("--kv-dtype", a->kvdt, &req->kv_dtype))) goto done;
  if (a->placement) {
    rg_placement_meta_t again = {0};
    if ((st = rg_placement_load(a->placement, cat, req, &again))) goto done;
  }
  if ((st = rg_plan_solve(req, plan))) goto done;
  // --simulate: its table is printed after the plan, and its pick is what
  // the files below get.
  if (a->simulate) {
    FILE *mem = a->json ? NULL : open_memstream(&sim_text, &sim_len);
    if (!a->json && !mem) {
      st = rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
      goto done;
    }
    st = rg_cli_plan_simulate(req, plan, 4, mem, a->json ? &sim_json : NULL);
    if (mem) fclose(mem);
    if (st) goto done;
  }
  if (a->out && (st = write_file(a->out, "plan", plan, req, &names, 0))) goto done;
  if (a->svg && (st = write_file(a->svg, "SVG", plan, req, &names, 1))) goto done;
  if (a->pareto && (st = write_file(a->pareto, "Pareto SVG", plan, req, &names, 2))) goto done;
  if (!a->json && workload_note)
    printf("note: evaluating under workload %s (--workload); the placement file names %s\n",
           wl_name, workload_note);
  st = a->json ? print_json(plan, req, sim_json, stdout) : print_human(plan, req, stdout);
  sim_json = NULL;
  if (!st && sim_text) fputs(sim_text, stdout);
  if (!st && !a->json && (a->out || a->svg || a->pareto))
    printf("\nwrote%s%s%s%s%s%s\n", a->out ? " plan " : "", a->out ? a->out : "",
           a->svg ? " roofline " : "", a->svg ? a->svg : "", a->pareto ? " pareto " : "",
           a->pareto ? a->pareto : "");
done:
  free(sim_text);
  cJSON_Delete(sim_json);
  free(plan);
  free(req);
  rg_arch_destroy(draft);
  rg_workload_destroy(wl);
  rg_arch_destroy(model);
  rg_fleet_destroy(fleet);
  rg_catalog_destroy(cat);
  return st;
}

int rg_cmd_plan(int argc, char **argv, const rg_cli_common_t *common) {
  plan_args_t a;
  int help = 0;
  rg_status_t st = parse_args(argc, argv, common, &a, &help);
  if (st) return rg_cli_fail("plan", st);
  if (help) {
    fputs(usage, stdout);
    return 0;
  }
  st = run(&a, common);
  return st ? rg_cli_fail("plan", st) : 0;
}
