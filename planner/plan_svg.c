// Pictures of a plan (SVG): the roofline of every computing class in the
// fleet with each stage at its arithmetic intensity, and the
// throughput-interactivity frontier per placement kind.
//
// Labels are placed greedily: each goes at its preferred spot and moves down
// a line until its box overlaps no label placed before it, so none overlap.
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "planner/planner_impl.h"

#define SVG_W 560.0
#define SVG_H 420.0
#define PAD_L 70.0
#define PAD_B 50.0
#define PAD_T 40.0
#define PAD_R 120.0
#define X_MIN 0.1
#define X_MAX 1e5
#define LINE 12.0
#define CHAR_W 5.6

static const char *const palette[] = {
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf",
    "#bcbd22", "#7f7f7f", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd"};
#define N_COLORS (sizeof(palette) / sizeof(palette[0]))

typedef struct {
  double x_min, x_max, y_min, y_max, x0;
} axes_t;

static double px(const axes_t *a, double x) {
  return a->x0 + PAD_L +
         (log10(x) - log10(a->x_min)) / (log10(a->x_max) - log10(a->x_min)) *
             (SVG_W - PAD_L - PAD_R);
}
static double py(const axes_t *a, double y) {
  return PAD_T + (1 - (log10(y) - log10(a->y_min)) / (log10(a->y_max) - log10(a->y_min))) *
                     (SVG_H - PAD_T - PAD_B);
}

static void svg_escape(FILE *f, const char *s) {
  for (; *s; s++) {
    if (*s == '<')
      fputs("&lt;", f);
    else if (*s == '>')
      fputs("&gt;", f);
    else if (*s == '&')
      fputs("&amp;", f);
    else if (*s == '\'')
      fputs("&apos;", f);
    else
      fputc(*s, f);
  }
}

// Non-overlapping label placement.
#define MAX_LABELS 160
typedef struct {
  double x, y, w;
} box_t;
typedef struct {
  box_t b[MAX_LABELS];
  int n;
} labels_t;

static int overlaps(const box_t *a, const box_t *b) {
  return a->x < b->x + b->w && b->x < a->x + a->w && a->y - LINE < b->y && b->y - LINE < a->y;
}

// Finds a free spot for a label of `text` near (x, y), records it and
// returns its y.
static double place(labels_t *L, double x, double y, const char *text) {
  box_t b = {x, y, CHAR_W * (double)strlen(text)};
  for (int tries = 0; tries < 64; tries++) {
    int hit = 0;
    for (int i = 0; i < L->n && !hit; i++) hit = overlaps(&b, &L->b[i]);
    if (!hit) break;
    b.y += LINE;
  }
  if (L->n < MAX_LABELS) L->b[L->n++] = b;
  return b.y;
}

static void text_at(FILE *f, labels_t *L, double x, double y, const char *color,
                    const char *anchor_end, const char *text) {
  double w = CHAR_W * (double)strlen(text);
  double x0 = anchor_end ? x - w : x;
  double yy = place(L, x0, y, text);
  fprintf(f, "<text x='%.1f' y='%.1f' font-size='10' fill='%s'>", x0, yy, color);
  svg_escape(f, text);
  fprintf(f, "</text>\n");
}

static void grid(FILE *f, const axes_t *ax, rg_unit_kind_t xk, rg_unit_kind_t yk,
                 const char *xlabel, const char *ylabel) {
  for (double x = pow(10, floor(log10(ax->x_min))); x <= ax->x_max * 1.01; x *= 10) {
    if (x < ax->x_min * 0.99) continue;
    fprintf(f, "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='#ddd'/>\n", px(ax, x), PAD_T,
            px(ax, x), SVG_H - PAD_B);
    char b[32];
    if (xk == RG_UNIT_KIND_COUNT)
      snprintf(b, sizeof b, "%g", x);
    else
      rg_fmt_quantity(x, xk, b, sizeof b);
    fprintf(f, "<text x='%.1f' y='%.1f' font-size='10' text-anchor='middle'>%s</text>\n", px(ax, x),
            SVG_H - PAD_B + 14, b);
  }
  for (double y = pow(10, floor(log10(ax->y_min))); y <= ax->y_max * 1.01; y *= 10) {
    if (y < ax->y_min * 0.99) continue;
    char b[32];
    if (yk == RG_UNIT_KIND_COUNT)
      snprintf(b, sizeof b, "%g", y);
    else
      rg_fmt_quantity(y, yk, b, sizeof b);
    fprintf(f, "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='#ddd'/>\n", ax->x0 + PAD_L,
            py(ax, y), ax->x0 + SVG_W - PAD_R, py(ax, y));
    fprintf(f, "<text x='%.1f' y='%.1f' font-size='10' text-anchor='end'>%s</text>\n",
            ax->x0 + PAD_L - 4, py(ax, y) + 3, b);
  }
  fprintf(f, "<text x='%.1f' y='%.1f' font-size='11' text-anchor='middle'>%s</text>\n",
          ax->x0 + PAD_L + (SVG_W - PAD_L - PAD_R) / 2, SVG_H - 14, xlabel);
  fprintf(f,
          "<text x='%.1f' y='%.1f' font-size='11' text-anchor='middle' transform='rotate(-90 %.1f "
          "%.1f)'>%s</text>\n",
          ax->x0 + 14, (SVG_H - PAD_B + PAD_T) / 2, ax->x0 + 14, (SVG_H - PAD_B + PAD_T) / 2,
          ylabel);
}

// ----- Roofline ---------------------------------------------------------------------

typedef struct {
  const rg_device_class_t *cls[16];
  int n;
} class_set_t;

static int color_of(const class_set_t *cs, const rg_device_class_t *c) {
  for (int i = 0; i < cs->n; i++)
    if (cs->cls[i] == c) return i % (int)N_COLORS;
  return 0;
}

// The parts of a step that sit on a roof: the kernels the cost model costs.
static int drawn_part(const rg_stage_cost_t *c) {
  static const char *const names[] = {"attention.proj", "attention.core", "ffn",
                                      "moe.experts",    "moe.shared",     "lm_head"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (!strcmp(c->name, names[i])) return 1;
  return 0;
}

// Points for every drawn part of placement p at phase ph; hollow for a
// baseline, labelled when `label`.
static rg_status_t stage_points(FILE *f, const rg_plan_request_t *req, const rg_placement_t *p,
                                rg_phase_t ph, const axes_t *ax, const class_set_t *cs, labels_t *L,
                                int hollow, const char *tag) {
  rg_shape_t s = ph == RG_PHASE_DECODE ? rg_placement_decode_shape(req, p)
                                       : rg_placement_prefill_shape(req, p);
  rg_stage_cost_t costs[RG_MAX_STAGE_COSTS];
  size_t n;
  RG_RETURN_IF_ERROR(rg_stage_costs(req->model, &s, costs, RG_MAX_STAGE_COSTS, &n));
  for (size_t i = 0; i < n; i++) {
    if (!drawn_part(&costs[i]) || costs[i].intensity <= 0) continue;
    int slot = rg_slot_of_stage(costs[i].kind);
    int g = ph == RG_PHASE_PREFILL && p->mode == RG_MODE_PD ? p->slot_group[RG_SLOT_PREFILL]
                                                            : p->slot_group[slot];
    const rg_device_class_t *c = p->groups[g].cls;
    double x = fmin(fmax(costs[i].intensity, ax->x_min), ax->x_max);
    double y = fmax(fmin(rg_class_peak(c, p->weight_dtype), x * c->mem[0].bandwidth), ax->y_min);
    const char *col = palette[color_of(cs, c)];
    if (hollow)
      fprintf(f, "<circle cx='%.1f' cy='%.1f' r='4' fill='none' stroke='%s' stroke-width='1.5'/>\n",
              px(ax, x), py(ax, y), col);
    else
      fprintf(f, "<circle cx='%.1f' cy='%.1f' r='5' fill='%s' stroke='black'/>\n", px(ax, x),
              py(ax, y), col);
    if (tag) {
      char t[96];
      snprintf(t, sizeof t, "%s %.3g%s", costs[i].name, costs[i].intensity, tag);
      text_at(f, L, px(ax, x) + 7, py(ax, y) + 12, hollow ? col : "black", NULL, t);
    }
  }
  return NULL;
}

static rg_status_t roof_panel(FILE *f, const rg_plan_t *plan, const rg_plan_request_t *req,
                              rg_phase_t ph, const axes_t *ax, const class_set_t *cs) {
  labels_t L = {.n = 0};
  const rg_placement_t *p = &plan->chosen.pools[0];
  fprintf(f, "<text x='%.1f' y='24' font-size='15' font-weight='bold'>%s</text>\n", ax->x0 + PAD_L,
          ph == RG_PHASE_DECODE ? "decode" : "prefill");
  grid(f, ax, RG_UNIT_KIND_COUNT, RG_UNIT_FLOPS, "arithmetic intensity (FLOP/byte)",
       "attainable FLOP/s");
  for (int c = 0; c < cs->n; c++) {
    const rg_device_class_t *k = cs->cls[c];
    double peak = rg_class_peak(k, p->weight_dtype), bw = k->mem[0].bandwidth;
    if (peak <= 0) continue;
    double ridge = peak / bw;
    double xa = ax->x_min, xb = ridge < ax->x_min   ? ax->x_min
                                : ridge > ax->x_max ? ax->x_max
                                                    : ridge;
    const char *col = palette[c % N_COLORS];
    fprintf(f,
            "<polyline fill='none' stroke='%s' stroke-width='2' points='%.1f,%.1f %.1f,%.1f "
            "%.1f,%.1f'/>\n",
            col, px(ax, xa), py(ax, fmax(xa * bw, ax->y_min)), px(ax, xb),
            py(ax, fmin(xb * bw, peak)), px(ax, ax->x_max), py(ax, peak));
    char t[128];
    snprintf(t, sizeof t, "%s (ridge %.0f)", k->name, ridge);
    text_at(f, &L, px(ax, ax->x_max) + 4, py(ax, peak) + 3, col, NULL, t);
  }
  // Where the homogeneous baselines would run each stage (hollow), then the
  // plan's own stages (filled, labelled).
  for (int i = 0; i < plan->n_baselines; i++) {
    const rg_plan_option_t *b = &plan->baselines[i];
    if (!b->feasible || strncmp(b->label, "homogeneous", 11) ||
        b->pools[0].groups[0].cls == p->groups[0].cls)
      continue;
    RG_RETURN_IF_ERROR(stage_points(f, req, &b->pools[0], ph, ax, cs, &L, 1, NULL));
  }
  RG_RETURN_IF_ERROR(stage_points(f, req, p, ph, ax, cs, &L, 0, ""));
  fprintf(f,
          "<text x='%.1f' y='%.1f' font-size='10' fill='#555'>filled: the plan's stages on their "
          "class; hollow: "
          "the same stages in each homogeneous baseline</text>\n",
          ax->x0 + PAD_L, PAD_T - 6);
  return NULL;
}

static void fleet_classes(const rg_fleet_t *fl, class_set_t *cs) {
  cs->n = 0;
  for (int i = 0; i < fl->n_nodes; i++)
    for (int j = 0; j < fl->nodes[i].n_devs; j++) {
      const rg_device_class_t *c = fl->nodes[i].devs[j].cls;
      int dup = !rg_class_computes(c);
      for (int k = 0; k < cs->n; k++) dup |= cs->cls[k] == c;
      if (!dup && cs->n < 16) cs->cls[cs->n++] = c;
    }
}

rg_status_t rg_plan_write_svg(const rg_plan_t *plan, const rg_plan_request_t *req, FILE *f) {
  const rg_plan_option_t *o = &plan->chosen;
  if (!o->n_pools) return rg_status_make(RG_INVALID_ARGUMENT, "the plan has no pools to draw");
  class_set_t cs;
  fleet_classes(req->fleet, &cs);
  double ymax = 1;
  for (int c = 0; c < cs.n; c++)
    ymax = fmax(ymax, rg_class_peak(cs.cls[c], o->pools[0].weight_dtype));
  ymax = pow(10, ceil(log10(ymax)));
  fprintf(f,
          "<svg xmlns='http://www.w3.org/2000/svg' width='%.0f' height='%.0f' "
          "font-family='sans-serif'>\n",
          2 * SVG_W, SVG_H + 20);
  fprintf(f, "<rect width='100%%' height='100%%' fill='white'/>\n<title>ridge roofline: ");
  svg_escape(f, req->model->name);
  fprintf(f, " on ");
  svg_escape(f, req->fleet->name);
  fprintf(f, "</title>\n");
  axes_t a = {X_MIN, X_MAX, ymax / 1e6, ymax, 0};
  RG_RETURN_IF_ERROR(roof_panel(f, plan, req, RG_PHASE_DECODE, &a, &cs));
  a.x0 = SVG_W;
  RG_RETURN_IF_ERROR(roof_panel(f, plan, req, RG_PHASE_PREFILL, &a, &cs));
  fprintf(f, "</svg>\n");
  return ferror(f) ? rg_status_make(RG_IO, "could not write the SVG") : NULL;
}

// ----- Pareto -----------------------------------------------------------------------

// Sweeps the batch of placement p from 1 up by powers of two while it fits:
// tokens/s per user (1 / TBT) against tokens/s per device.
static rg_status_t sweep(const rg_plan_request_t *req, const rg_placement_t *p,
                         rg_pareto_curve_t *c) {
  rg_placement_t q = *p;
  q.replicas = 1;
  q.load_share = 0;
  int devices = 0;
  for (int g = 0; g < q.n_groups; g++) devices += q.groups[g].devices;
  c->n = 0;
  int m = q.micro_batches > 1 ? q.micro_batches : 1;
  for (int b = m; c->n < RG_PARETO_POINTS && b <= (1 << 20); b *= 2) {
    q.batch = b;
    rg_prediction_t pr;
    rg_status_t st = rg_placement_predict(req, &q, &pr);
    if (st) {
      int short_of_memory = rg_status_code(st) == RG_INFEASIBLE;
      rg_status_free(st);
      if (short_of_memory) break;
      return rg_status_make(RG_INTERNAL, "pareto sweep of '%s' failed at batch %d", c->label, b);
    }
    c->pt[c->n].per_user = 1.0 / pr.tbt;
    c->pt[c->n].per_device = pr.tokens_per_s / devices;
    c->pt[c->n].batch = b;
    c->n++;
  }
  return NULL;
}

rg_status_t rg_plan_pareto(const rg_plan_t *plan, const rg_plan_request_t *req,
                           rg_pareto_curve_t curves[RG_PARETO_KINDS], int *n_curves) {
  *n_curves = 0;
  // The frontier is drawn without the SLOs: they cut it, they do not shape it.
  rg_workload_t w = *req->workload;
  w.slo_tbt = w.slo_ttft = 0;
  rg_plan_request_t r = *req;
  r.workload = &w;
  r.n_fixed = 0;
  for (int i = 0; i < plan->n_baselines && *n_curves < RG_PARETO_KINDS - 1; i++) {
    const rg_plan_option_t *b = &plan->baselines[i];
    if (!b->feasible) continue;
    rg_pareto_curve_t *c = &curves[(*n_curves)++];
    snprintf(c->label, sizeof c->label, "%s", b->label);
    RG_RETURN_IF_ERROR(sweep(&r, &b->pools[0], c));
  }
  if (plan->chosen.n_pools) {
    rg_pareto_curve_t *c = &curves[(*n_curves)++];
    char d[80];
    rg__pool_describe(&plan->chosen.pools[0], d, sizeof d);
    snprintf(c->label, sizeof c->label, "chosen: %s", d);
    RG_RETURN_IF_ERROR(sweep(&r, &plan->chosen.pools[0], c));
  }
  return NULL;
}

rg_status_t rg_plan_write_pareto_svg(const rg_plan_t *plan, const rg_plan_request_t *req, FILE *f) {
  if (!plan->chosen.n_pools)
    return rg_status_make(RG_INVALID_ARGUMENT, "the plan has no pools to draw");
  rg_pareto_curve_t curves[RG_PARETO_KINDS];
  int n;
  RG_RETURN_IF_ERROR(rg_plan_pareto(plan, req, curves, &n));
  double xmin = INFINITY, xmax = 0, ymin = INFINITY, ymax = 0;
  for (int i = 0; i < n; i++)
    for (int j = 0; j < curves[i].n; j++) {
      xmin = fmin(xmin, curves[i].pt[j].per_user), xmax = fmax(xmax, curves[i].pt[j].per_user);
      ymin = fmin(ymin, curves[i].pt[j].per_device), ymax = fmax(ymax, curves[i].pt[j].per_device);
    }
  if (!(xmax > 0) || !(ymax > 0))
    return rg_status_make(RG_INFEASIBLE, "no placement kind has a point to draw");
  axes_t ax = {pow(10, floor(log10(xmin))), pow(10, ceil(log10(xmax))), pow(10, floor(log10(ymin))),
               pow(10, ceil(log10(ymax))), 0};
  if (ax.x_max <= ax.x_min) ax.x_max = ax.x_min * 10;
  if (ax.y_max <= ax.y_min) ax.y_max = ax.y_min * 10;
  fprintf(f,
          "<svg xmlns='http://www.w3.org/2000/svg' width='%.0f' height='%.0f' "
          "font-family='sans-serif'>\n",
          SVG_W + 160, SVG_H + 20);
  fprintf(f, "<rect width='100%%' height='100%%' fill='white'/>\n<title>ridge pareto: ");
  svg_escape(f, req->model->name);
  fprintf(f, " on ");
  svg_escape(f, req->fleet->name);
  fprintf(f,
          "</title>\n<text x='%.1f' y='24' font-size='15' font-weight='bold'>throughput vs "
          "interactivity</text>\n",
          PAD_L);
  grid(f, &ax, RG_UNIT_KIND_COUNT, RG_UNIT_KIND_COUNT, "tokens/s per user (1 / TBT)",
       "tokens/s per device");
  labels_t L = {.n = 0};
  for (int i = 0; i < n; i++) {
    const char *col = palette[i % N_COLORS];
    int chosen = i == n - 1;
    fprintf(f, "<polyline fill='none' stroke='%s' stroke-width='%s'%s points='", col,
            chosen ? "3" : "1.5", chosen ? "" : " stroke-dasharray='4 2'");
    for (int j = 0; j < curves[i].n; j++)
      fprintf(f, "%.1f,%.1f ", px(&ax, curves[i].pt[j].per_user),
              py(&ax, curves[i].pt[j].per_device));
    fprintf(f, "'/>\n");
    for (int j = 0; j < curves[i].n; j++)
      fprintf(f, "<circle cx='%.1f' cy='%.1f' r='2.5' fill='%s'><title>batch %d</title></circle>\n",
              px(&ax, curves[i].pt[j].per_user), py(&ax, curves[i].pt[j].per_device), col,
              curves[i].pt[j].batch);
    // Legend on the right, one line per kind.
    double ly = place(&L, ax.x0 + SVG_W - PAD_R + 10, PAD_T + 12 + LINE * i, curves[i].label);
    fprintf(f, "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='%s' stroke-width='2'/>\n",
            ax.x0 + SVG_W - PAD_R - 6, ly - 3, ax.x0 + SVG_W - PAD_R + 6, ly - 3, col);
    fprintf(f, "<text x='%.1f' y='%.1f' font-size='10' fill='%s'>", ax.x0 + SVG_W - PAD_R + 10, ly,
            col);
    svg_escape(f, curves[i].label);
    fprintf(f, "</text>\n");
  }
  // The chosen operating point.
  const rg_placement_t *p = &plan->chosen.pools[0];
  const rg_prediction_t *pr = &plan->chosen.pred[0];
  int devices = 0;
  for (int g = 0; g < p->n_groups; g++) devices += p->groups[g].devices;
  double x = 1.0 / pr->tbt, y = pr->tokens_per_s / ((p->replicas > 0 ? p->replicas : 1) * devices);
  if (x > 0 && y > 0) {
    fprintf(f, "<circle cx='%.1f' cy='%.1f' r='7' fill='none' stroke='black' stroke-width='2'/>\n",
            px(&ax, x), py(&ax, y));
    char t[96];
    snprintf(t, sizeof t, "chosen, batch %d", p->batch);
    text_at(f, &L, px(&ax, x) + 9, py(&ax, y) - 6, "black", NULL, t);
  }
  fprintf(f, "</svg>\n");
  return ferror(f) ? rg_status_make(RG_IO, "could not write the SVG") : NULL;
}
