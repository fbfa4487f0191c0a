// Pictures of a simulation (SVG): KV occupancy per tier over time, and the
// throughput-interactivity frontier found by simulating each placement kind.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/units.h"
#include "planner/planner_impl.h"
#include "planner/simulate.h"

#define W 720.0
#define PANEL_H 230.0
#define PAD_L 80.0
#define PAD_R 190.0
#define PAD_T 36.0
#define PAD_B 40.0

static const char *const colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd",
                                     "#ff7f0e", "#8c564b", "#e377c2", "#17becf"};
#define N_COLORS (sizeof colors / sizeof colors[0])

static void escape(FILE *f, const char *s) {
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

static void header(FILE *f, double w, double h, const char *title) {
  fprintf(f,
          "<svg xmlns='http://www.w3.org/2000/svg' width='%.0f' height='%.0f' "
          "font-family='sans-serif'>\n<rect width='100%%' height='100%%' fill='white'/>\n<title>",
          w, h);
  escape(f, title);
  fprintf(f, "</title>\n<text x='%.0f' y='22' font-size='14' font-weight='bold'>", PAD_L);
  escape(f, title);
  fprintf(f, "</text>\n");
}

// A round step for a linear axis spanning `span`: 1, 2 or 5 times a power of ten.
static double nice_step(double span) {
  double raw = span / 5, p = pow(10, floor(log10(raw))), m = raw / p;
  return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
}

// ----- KV occupancy ------------------------------------------------------------------

typedef struct {
  double y0;  // top of the panel
  double t_max, v_max;
} panel_t;

static double kx(const panel_t *p, double t) {
  return PAD_L + t / p->t_max * (W - PAD_L - PAD_R);
}
static double ky(const panel_t *p, double v) {
  return p->y0 + PAD_T + (1 - v / p->v_max) * (PANEL_H - PAD_T - PAD_B);
}

static void panel_axes(FILE *f, const panel_t *p, const char *name) {
  fprintf(f, "<text x='%.0f' y='%.0f' font-size='12' font-weight='bold'>%s</text>\n", PAD_L,
          p->y0 + PAD_T - 8, name);
  double ts = nice_step(p->t_max), vs = nice_step(p->v_max);
  int minutes = p->t_max >= 600;
  for (double t = 0; t <= p->t_max * 1.0001; t += ts) {
    fprintf(f, "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='#ddd'/>\n", kx(p, t),
            ky(p, p->v_max), kx(p, t), ky(p, 0));
    fprintf(f, "<text x='%.1f' y='%.1f' font-size='10' text-anchor='middle'>%g%s</text>\n",
            kx(p, t), ky(p, 0) + 13, minutes ? t / 60 : t, minutes ? " min" : " s");
  }
  for (double v = 0; v <= p->v_max * 1.0001; v += vs) {
    char b[32];
    rg_fmt_quantity(v, RG_UNIT_BYTES, b, sizeof b);
    fprintf(f, "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='#ddd'/>\n", kx(p, 0),
            ky(p, v), kx(p, p->t_max), ky(p, v));
    fprintf(f, "<text x='%.1f' y='%.1f' font-size='10' text-anchor='end'>%s</text>\n", PAD_L - 4,
            ky(p, v) + 3, v > 0 ? b : "0");
  }
}

static void series(FILE *f, const panel_t *p, const rg_sim_report_t *r, int which, const char *col,
                   const char *label, int row) {
  fprintf(f, "<polyline fill='none' stroke='%s' stroke-width='2' points='", col);
  for (size_t i = 0; i < r->n_kv; i++) {
    const rg_sim_kv_sample_t *k = &r->kv[i];
    double v = which == 0   ? k->device_used
               : which == 1 ? k->device_cached
               : which == 2 ? k->swap
                            : k->tier;
    fprintf(f, "%.1f,%.1f ", kx(p, k->t), ky(p, v));
  }
  fprintf(f, "'/>\n");
  double ly = p->y0 + PAD_T + 14.0 * row;
  fprintf(f, "<line x1='%.0f' y1='%.1f' x2='%.0f' y2='%.1f' stroke='%s' stroke-width='2'/>\n",
          W - PAD_R + 10, ly - 3, W - PAD_R + 26, ly - 3, col);
  fprintf(f, "<text x='%.0f' y='%.1f' font-size='10'>%s</text>\n", W - PAD_R + 30, ly, label);
}

static void capacity_line(FILE *f, const panel_t *p, double v, const char *col, const char *label,
                          int row) {
  if (!(v > 0)) return;
  fprintf(f, "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='%s' stroke-dasharray='5 3'/>\n",
          kx(p, 0), ky(p, v), kx(p, p->t_max), ky(p, v), col);
  double ly = p->y0 + PAD_T + 14.0 * row;
  char b[32];
  rg_fmt_quantity(v, RG_UNIT_BYTES, b, sizeof b);
  fprintf(f, "<line x1='%.0f' y1='%.1f' x2='%.0f' y2='%.1f' stroke='%s' stroke-dasharray='5 3'/>\n",
          W - PAD_R + 10, ly - 3, W - PAD_R + 26, ly - 3, col);
  fprintf(f, "<text x='%.0f' y='%.1f' font-size='10'>%s %s</text>\n", W - PAD_R + 30, ly, label, b);
}

rg_status_t rg_sim_write_kv_svg(const rg_sim_report_t *r, const char *title, FILE *f) {
  if (!r->n_kv)
    return rg_status_make(RG_INVALID_ARGUMENT, "the simulation has no KV samples to draw");
  double t_max = r->kv[r->n_kv - 1].t, dev = r->kv_device_capacity, host = 0;
  for (size_t i = 0; i < r->n_kv; i++) {
    const rg_sim_kv_sample_t *k = &r->kv[i];
    dev = fmax(dev, k->device_used + k->device_cached);
    host = fmax(host, fmax(k->swap, k->tier));
  }
  host = fmax(host, fmax(r->kv_swap_capacity, r->kv_tier_capacity));
  int tiers = host > 0;
  header(f, W, PANEL_H * (1 + tiers) + 30, title);
  panel_t p = {30, t_max > 0 ? t_max : 1, dev > 0 ? dev * 1.05 : 1};
  panel_axes(f, &p, "device KV pool (all replicas)");
  series(f, &p, r, 0, colors[0], "in use by requests", 0);
  series(f, &p, r, 1, colors[2], "cached (prefixes kept)", 1);
  capacity_line(f, &p, r->kv_device_capacity, "#555", "capacity", 2);
  if (tiers) {
    panel_t q = {30 + PANEL_H, p.t_max, host * 1.05};
    panel_axes(f, &q, "host tiers");
    int row = 0;
    if (r->kv_swap_capacity > 0) {
      series(f, &q, r, 2, colors[3], "swap (preempted)", row++);
      capacity_line(f, &q, r->kv_swap_capacity, colors[3], "swap capacity", row++);
    }
    if (r->kv_tier_capacity > 0) {
      char lbl[96];
      snprintf(lbl, sizeof lbl, "%s tier (idle prefixes)",
               r->tier_name ? r->tier_name : "capacity");
      series(f, &q, r, 3, colors[1], lbl, row++);
      capacity_line(f, &q, r->kv_tier_capacity, colors[1], "tier capacity", row++);
    }
  }
  fprintf(f, "</svg>\n");
  return ferror(f) ? rg_status_make(RG_IO, "could not write the SVG") : NULL;
}

// ----- Pareto by simulation ----------------------------------------------------------------

// One replica of placement p at a sequence cap of `seqs`, under a full
// queue: (tokens/s per user, tokens/s per device).
static rg_status_t pareto_point(const rg_plan_request_t *req, const rg_placement_t *p, int seqs,
                                const rg_sim_options_t *base, rg_pareto_point_t *out, int *fits) {
  rg_plan_option_t *opt = calloc(1, sizeof *opt);
  rg_sim_trace_t tr = {0};
  rg_sim_report_t *rep = NULL;
  rg_status_t st = NULL;
  *fits = 0;
  if (!opt) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
  opt->n_pools = 1;
  opt->pools[0] = *p;
  opt->pools[0].replicas = 1;
  opt->pools[0].load_share = 0;
  opt->pools[0].batch = seqs;
  opt->pools[0].max_batch = 0;
  // Memory first: a cap whose KV the devices cannot hold ends the curve.
  st = rg_placement_predict(req, &opt->pools[0], &opt->pred[0]);
  if (st) {
    if (rg_status_code(st) == RG_INFEASIBLE) {
      rg_status_free(st);
      st = NULL;
    }
    goto done;
  }
  *fits = 1;
  size_t n = (size_t)(3 * seqs < 24 ? 24 : 3 * seqs);
  rg_arrival_t all_at_once = {RG_ARRIVAL_POISSON, 0, 1};
  if ((st = rg_sim_trace_generate(req->workload, n, base->seed, &all_at_once,
                                  req->model->max_context, &tr)))
    goto done;
  rg_sim_options_t o = *base;
  o.trace = &tr;
  o.sessions = NULL;
  o.duration = 0;
  o.max_seqs = seqs;
  o.progress = NULL;
  o.on_step = NULL;
  if ((st = rg_simulate(req, opt, &o, &rep))) goto done;
  out->batch = seqs;
  out->per_user = rep->tbt.p50 > 0 ? 1.0 / rep->tbt.p50 : 0;
  out->per_device = rep->tokens_per_s_per_device;
done:
  rg_sim_report_destroy(rep);
  rg_sim_trace_free(&tr);
  free(opt);
  return st;
}

static rg_status_t pareto_curve(const rg_plan_request_t *req, const rg_placement_t *p,
                                const rg_sim_options_t *base, rg_pareto_curve_t *c) {
  c->n = 0;
  for (int seqs = 1; c->n < RG_PARETO_POINTS && seqs <= 4096; seqs *= 2) {
    int fits;
    rg_pareto_point_t pt;
    RG_RETURN_IF_ERROR(pareto_point(req, p, seqs, base, &pt, &fits));
    if (!fits) break;
    if (pt.per_user > 0 && pt.per_device > 0) c->pt[c->n++] = pt;
  }
  return NULL;
}

rg_status_t rg_sim_pareto(const rg_plan_request_t *req, const rg_plan_t *plan,
                          const rg_sim_options_t *base, rg_pareto_curve_t curves[RG_PARETO_KINDS],
                          int *n_curves) {
  *n_curves = 0;
  // The frontier is traced without SLOs: they cut it, they do not shape it.
  rg_workload_t w = *req->workload;
  w.slo_tbt = w.slo_ttft = 0;
  rg_plan_request_t r = *req;
  r.workload = &w;
  for (int i = 0; i < plan->n_baselines && *n_curves < RG_PARETO_KINDS - 1; i++) {
    const rg_plan_option_t *b = &plan->baselines[i];
    if (!b->feasible) continue;
    rg_pareto_curve_t *c = &curves[*n_curves];
    snprintf(c->label, sizeof c->label, "%s", b->label);
    RG_RETURN_IF_ERROR(pareto_curve(&r, &b->pools[0], base, c));
    if (c->n) (*n_curves)++;
  }
  if (plan->chosen.n_pools) {
    rg_pareto_curve_t *c = &curves[*n_curves];
    char d[80];
    rg__pool_describe(&plan->chosen.pools[0], d, sizeof d);
    snprintf(c->label, sizeof c->label, "chosen: %s", d);
    RG_RETURN_IF_ERROR(pareto_curve(&r, &plan->chosen.pools[0], base, c));
    if (c->n) (*n_curves)++;
  }
  if (!*n_curves)
    return rg_status_make(RG_INFEASIBLE, "no placement kind of the plan has a point to simulate");
  return NULL;
}

typedef struct {
  double x0, x1, y0, y1;
} logax_t;

static double lx(const logax_t *a, double x) {
  return PAD_L + (log10(x) - a->x0) / (a->x1 - a->x0) * (W - PAD_L - PAD_R);
}
static double ly(const logax_t *a, double y) {
  return PAD_T + 10 + (1 - (log10(y) - a->y0) / (a->y1 - a->y0)) * (2 * PANEL_H - PAD_T - PAD_B);
}

rg_status_t rg_sim_write_pareto_svg(const rg_pareto_curve_t *curves, int n, const char *title,
                                    FILE *f) {
  double xmin = INFINITY, xmax = 0, ymin = INFINITY, ymax = 0;
  for (int i = 0; i < n; i++)
    for (int j = 0; j < curves[i].n; j++) {
      xmin = fmin(xmin, curves[i].pt[j].per_user), xmax = fmax(xmax, curves[i].pt[j].per_user);
      ymin = fmin(ymin, curves[i].pt[j].per_device), ymax = fmax(ymax, curves[i].pt[j].per_device);
    }
  if (!(xmax > 0) || !(ymax > 0))
    return rg_status_make(RG_INVALID_ARGUMENT, "no Pareto point to draw");
  logax_t a = {floor(log10(xmin)), ceil(log10(xmax)), floor(log10(ymin)), ceil(log10(ymax))};
  if (a.x1 <= a.x0) a.x1 = a.x0 + 1;
  if (a.y1 <= a.y0) a.y1 = a.y0 + 1;
  header(f, W, 2 * PANEL_H + 20, title);
  for (double e = a.x0; e <= a.x1; e++) {
    fprintf(f, "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='#ddd'/>\n",
            lx(&a, pow(10, e)), ly(&a, pow(10, a.y1)), lx(&a, pow(10, e)), ly(&a, pow(10, a.y0)));
    fprintf(f, "<text x='%.1f' y='%.1f' font-size='10' text-anchor='middle'>%g</text>\n",
            lx(&a, pow(10, e)), ly(&a, pow(10, a.y0)) + 13, pow(10, e));
  }
  for (double e = a.y0; e <= a.y1; e++) {
    fprintf(f, "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='#ddd'/>\n",
            lx(&a, pow(10, a.x0)), ly(&a, pow(10, e)), lx(&a, pow(10, a.x1)), ly(&a, pow(10, e)));
    fprintf(f, "<text x='%.1f' y='%.1f' font-size='10' text-anchor='end'>%g</text>\n", PAD_L - 4,
            ly(&a, pow(10, e)) + 3, pow(10, e));
  }
  double bottom = ly(&a, pow(10, a.y0));
  fprintf(f,
          "<text x='%.1f' y='%.1f' font-size='11' text-anchor='middle'>tokens/s per user (1 / "
          "median TBT, simulated)</text>\n",
          PAD_L + (W - PAD_L - PAD_R) / 2, bottom + 30);
  fprintf(f,
          "<text x='14' y='%.1f' font-size='11' text-anchor='middle' transform='rotate(-90 14 "
          "%.1f)'>tokens/s per device</text>\n",
          (bottom + PAD_T) / 2, (bottom + PAD_T) / 2);
  for (int i = 0; i < n; i++) {
    const char *col = colors[i % N_COLORS];
    int chosen = i == n - 1;
    fprintf(f, "<polyline fill='none' stroke='%s' stroke-width='%s'%s points='", col,
            chosen ? "3" : "1.5", chosen ? "" : " stroke-dasharray='4 2'");
    for (int j = 0; j < curves[i].n; j++)
      fprintf(f, "%.1f,%.1f ", lx(&a, curves[i].pt[j].per_user),
              ly(&a, curves[i].pt[j].per_device));
    fprintf(f, "'/>\n");
    for (int j = 0; j < curves[i].n; j++)
      fprintf(
          f, "<circle cx='%.1f' cy='%.1f' r='2.5' fill='%s'><title>%d sequences</title></circle>\n",
          lx(&a, curves[i].pt[j].per_user), ly(&a, curves[i].pt[j].per_device), col,
          curves[i].pt[j].batch);
    double y = PAD_T + 14.0 * i;
    fprintf(f, "<line x1='%.0f' y1='%.1f' x2='%.0f' y2='%.1f' stroke='%s' stroke-width='2'/>\n",
            W - PAD_R + 10, y - 3, W - PAD_R + 26, y - 3, col);
    fprintf(f, "<text x='%.0f' y='%.1f' font-size='10' fill='%s'>", W - PAD_R + 30, y, col);
    escape(f, curves[i].label);
    fprintf(f, "</text>\n");
  }
  fprintf(f, "</svg>\n");
  return ferror(f) ? rg_status_make(RG_IO, "could not write the SVG") : NULL;
}
