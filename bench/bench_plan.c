// Planner solve time on the 1,000-device fleet of 10 classes and the
// 10,000-device fleet of 12 classes, for 4 models. Goal: under 1 s each on a
// 2-core machine. Prints, per model, the wall time of rg_plan_solve (median
// of runs), the placements evaluated, the time per placement, the ratio to
// the goal and how the replica packing ended. Never fails on a timing.
//
// usage: bench_plan [FLEET...]   (default: big-1000 big-10000)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "graphs/graphs.h"
#include "planner/planner.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static int bench_fleet(const char *dir, rg_catalog_t *cat, const char *fleet_name) {
  const char *models[] = {"llama-3.1-8b", "llama-3.1-70b", "deepseek-v3", "qwen3-235b-a22b"};
  enum { RUNS = 5 };
  rg_fleet_t *fleet;
  rg_status_t st = rg_fleet_load(fleet_name, dir, cat, &fleet);
  if (st) {
    fprintf(stderr, "bench_plan: %s\n", rg_status_message(st));
    rg_status_free(st);
    return 1;
  }
  int devices = 0, classes = 0;
  for (size_t c = 0; c < cat->n; c++)
    if (rg_class_computes(cat->classes[c]) && rg_fleet_count(fleet, cat->classes[c]) > 0)
      devices += rg_fleet_count(fleet, cat->classes[c]), classes++;
  printf("bench_plan: fleet %s, %d computing devices across %d classes; goal < 1 s per solve\n",
         fleet_name, devices, classes);
  printf("%-18s %10s %12s %14s %12s %10s  %s\n", "model", "solve", "placements", "per placement",
         "vs goal", "tokens/s", "packing");
  rg_workload_t wl;
  rg_workload_default(&wl);
  for (size_t m = 0; m < sizeof models / sizeof models[0]; m++) {
    rg_arch_t *arch;
    if ((st = rg_model_load(models[m], dir, &arch))) {
      fprintf(stderr, "bench_plan: %s\n", rg_status_message(st));
      rg_status_free(st);
      continue;
    }
    rg_plan_request_t *req = calloc(1, sizeof(*req));
    rg_plan_t *plan = calloc(1, sizeof(*plan));
    if (!req || !plan) return 1;
    req->model = arch;
    req->fleet = fleet;
    req->workload = &wl;
    req->objective = RG_OBJ_THROUGHPUT;
    req->weight_dtype = arch->weight_dtype;
    req->kv_dtype = RG_BF16;
    double t[RUNS];
    for (int r = 0; r < RUNS; r++) {
      double t0 = now();
      st = rg_plan_solve(req, plan);
      t[r] = now() - t0;
      if (st) break;
    }
    if (st) {
      printf("%-18s infeasible: %s\n", models[m], rg_status_message(st));
      rg_status_free(st);
      st = NULL;
    } else {
      qsort(t, RUNS, sizeof t[0], cmp);
      printf("%-18s %8.3f s %12d %11.2f us %11.2fx %10.0f  %s\n", models[m], t[RUNS / 2],
             plan->candidates, t[RUNS / 2] / plan->candidates * 1e6, t[RUNS / 2] / 1.0,
             plan->chosen.tokens_per_s, plan->milp_status);
    }
    free(plan);
    free(req);
    rg_arch_destroy(arch);
  }
  rg_fleet_destroy(fleet);
  return 0;
}

int main(int argc, char **argv) {
  const char *dir =
      getenv("RIDGE_CONFIG_DIR") ? getenv("RIDGE_CONFIG_DIR") : RIDGE_SOURCE_DIR "/configs";
  static const char *const defaults[] = {"big-1000", "big-10000"};
  rg_catalog_t *cat;
  rg_status_t st = rg_catalog_load(dir, &cat);
  if (st) {
    fprintf(stderr, "bench_plan: %s\n", rg_status_message(st));
    return 1;
  }
  int rc = 0;
  int n = argc > 1 ? argc - 1 : 2;
  for (int i = 0; i < n; i++) {
    if (i) printf("\n");
    rc |= bench_fleet(dir, cat, argc > 1 ? argv[i + 1] : defaults[i]);
  }
  rg_catalog_destroy(cat);
  return rc;
}
