// Tests of `ridge profile` and runtime/profile.h: a quick profile of cpu:0
// (and opencl:0 where present) writes a calibrated class that the planner's
// loader accepts, `ridge catalog` shows beside the datasheet and `ridge
// plan` uses; its figures are finite, positive and agree with each other; a
// device that runs no ops is profiled as far as it goes, each gap with its
// reason; bad flags, absent devices and unusable -o targets are refused
// before anything is measured. No figure is compared with a fixed number:
// only with the other figures of the same run.
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fileio.h"
#include "graphs/weights.h"
#include "planner/planner.h"
#include "runtime/profile.h"
#include "tests/test.h"

// A config folder with the local-cpu and host-dram classes, the fleet of one
// local-cpu, the 8B model and a workload whose SLOs any CPU meets; no
// devices/calibrated (ridge profile makes it).
static const char *profile_config(rg_test_ctx_t *t) {
  const char *dir = rg_test_tmpdir(t);
  static const char *const subs[] = {"devices", "fleets", "models", "workloads"};
  static const char *const files[] = {"devices/local-cpu.yaml", "devices/host-dram.yaml",
                                      "models/llama-3.1-8b.yaml"};
  char p[700];
  for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++) {
    snprintf(p, sizeof p, "%s/%s", dir, subs[i]);
    mkdir(p, 0755);
  }
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
    snprintf(p, sizeof p, "%s/%s", rg_test_config_dir(), files[i]);
    char *text = NULL;
    size_t len = 0;
    rg_status_t s = rg_file_read_all(p, "config", 1 << 20, &text, &len);
    if (s) {
      rg_test_fail(t, __FILE__, __LINE__, "%s", rg_status_message(s));
      rg_status_free(s);
      continue;
    }
    rg_test_write(t, files[i], text);
    free(text);
  }
  rg_test_write(t, "fleets/local.yaml",
                "name: local\nprovider: shm\nnetwork: { bandwidth: 50 GB/s, latency: 1 us }\n"
                "nodes:\n  - { name: n, count: 1, devices: [ { class: local-cpu, count: 1 } ] }\n");
  rg_test_write(t, "workloads/loose.yaml",
                "name: loose\nprompt_tokens: { dist: fixed, value: 128 }\n"
                "output_tokens: { dist: fixed, value: 32 }\narrival: { process: poisson }\n"
                "slo: { ttft: 1000 s, tbt: 100 s, percentile: 50 }\n");
  return dir;
}

static double num(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static int positive(double v) {
  return isfinite(v) && v > 0;
}

// The predicted decode step of the 8B model on the one-CPU fleet.
static double plan_tbt(rg_test_ctx_t *t, const char *dir) {
  char args[900], *out = NULL;
  snprintf(args, sizeof args,
           "--config-dir '%s' --json plan --model llama-3.1-8b --fleet local --workload "
           "'%s/workloads/loose.yaml'",
           dir, dir);
  int rc = rg_test_run_ridge(t, args, &out);
  cJSON *j = rc == 0 ? cJSON_Parse(out) : NULL;
  double tbt = j ? num(cJSON_GetObjectItem(j, "chosen"), "tbt_s") : NAN;
  if (!positive(tbt)) rg_test_fail(t, __FILE__, __LINE__, "ridge plan (rc %d):\n%s", rc, out);
  cJSON_Delete(j);
  free(out);
  return tbt;
}

// Checks the JSON a profile printed against itself: every figure finite and
// positive where measured, FLOP/s rising from M = 1 to the next M (decode
// reads the weights once per token, so 16 tokens do 16x the work for the
// same bytes), copies within 10x of the read bandwidth, every efficiency in
// (0, 1] and equal to its FLOP/s over the peak it names.
static void check_figures(rg_test_ctx_t *t, const cJSON *j, const rg_device_class_t *sheet) {
  const cJSON *bw = cJSON_GetObjectItem(j, "bandwidth");
  double read = num(cJSON_GetObjectItem(bw, "read"), "bytes_per_s");
  static const char *const kinds[] = {"read", "write", "copy", "host_to_device", "device_to_host"};
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
    double v = num(cJSON_GetObjectItem(bw, kinds[i]), "bytes_per_s");
    if (!positive(v)) rg_test_fail(t, __FILE__, __LINE__, "%s bandwidth %g", kinds[i], v);
  }
  RG_CHECK(num(cJSON_GetObjectItem(bw, "copy"), "bytes_per_s") < 10 * read);
  RG_CHECK(num(cJSON_GetObjectItem(bw, "host_to_device"), "bytes_per_s") < 10 * read);
  RG_CHECK(positive(num(j, "launch_seconds")) && num(j, "launch_seconds") < 0.01);
  const cJSON *mm;
  int n_types = 0;
  double best_m1 = 0;  // the fastest m = 1 weight stream
  cJSON_ArrayForEach(mm, cJSON_GetObjectItem(j, "matmul")) {
    const char *dt = cJSON_GetStringValue(cJSON_GetObjectItem(mm, "dtype"));
    const cJSON *pts = cJSON_GetObjectItem(mm, "points");
    if (cJSON_GetArraySize(pts) < 2) {
      rg_test_fail(t, __FILE__, __LINE__, "%s: %d points (%s)", dt, cJSON_GetArraySize(pts),
                   cJSON_GetStringValue(cJSON_GetObjectItem(mm, "reason")));
      continue;
    }
    n_types++;
    const cJSON *p0 = cJSON_GetArrayItem(pts, 0), *p1 = cJSON_GetArrayItem(pts, 1);
    RG_CHECK(num(p0, "m") == 1 && num(p1, "m") > 1);
    if (num(p0, "weight_bytes_per_s") > best_m1) best_m1 = num(p0, "weight_bytes_per_s");
    // Each point streams its weights once for M rows of x: 2 M FLOPs per
    // weight, so the byte rate follows from the FLOP rate and the type's
    // size. (Which M runs fastest is the kernels' business, and timing;
    // under the sanitizers the packed bf16 kernel read 8.0 GFLOP/s at M = 1
    // and 4.7-6.4 at M = 4, instrumented loads bounding both.)
    double per = strcmp(dt, "f32") == 0 ? 4 : strcmp(dt, "q8_0") == 0 ? 34.0 / 32 : 2;
    const cJSON *p;
    double last_m = 0;
    cJSON_ArrayForEach(p, pts) {
      if (!positive(num(p, "flops")) || !positive(num(p, "weight_bytes_per_s")))
        rg_test_fail(t, __FILE__, __LINE__, "%s M %g: %g FLOP/s", dt, num(p, "m"), num(p, "flops"));
      RG_CHECK(num(p, "m") > last_m);  // points in rising M
      last_m = num(p, "m");
      RG_CHECK_NEAR(num(p, "weight_bytes_per_s"), num(p, "flops") / (2 * num(p, "m")) * per, 1e-6);
    }
  }
  RG_CHECK(n_types == RG_PROFILE_DTYPES);
  const cJSON *at;
  int n_ctx = 0;
  cJSON_ArrayForEach(at, cJSON_GetObjectItem(cJSON_GetObjectItem(j, "attention"), "points")) {
    n_ctx++;
    RG_CHECK(positive(num(at, "kv_bytes_per_s")));
  }
  RG_CHECK(n_ctx >= 2);

  const cJSON *cal = cJSON_GetObjectItem(j, "calibrated");
  RG_REQUIRE(cal);
  // The read bandwidth, or an m = 1 stream from memory that outran it (a
  // reading only falls short), and the file says which.
  const char *bw_from = cJSON_GetStringValue(cJSON_GetObjectItem(cal, "bandwidth_from"));
  RG_REQUIRE(bw_from);
  if (num(cal, "bandwidth") == read) {
    RG_CHECK(!strcmp(bw_from, "the read bandwidth"));
  } else {
    RG_CHECK(num(cal, "bandwidth") == best_m1 && best_m1 > read);
    RG_CHECK_CONTAINS(bw_from, "matmul's weight stream from memory, above the read bandwidth's");
  }
  double em = num(cal, "efficiency_memory"), ea = num(cal, "efficiency_attention");
  // A quick profile whose weights sat in cache writes no memory efficiency.
  RG_CHECK((positive(em) && em <= 1) ||
           (isnan(em) && cJSON_IsTrue(cJSON_GetObjectItem(j, "quick"))));
  RG_CHECK(positive(ea) && ea <= 1);
  // A prompt's attention, and its rate over the bf16 peak.
  const cJSON *pa = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "attention"), "prompt");
  RG_CHECK(num(pa, "tokens") == 1024 && positive(num(pa, "flops_per_s")));
  const double eac = num(cal, "efficiency_attention_compute");
  RG_CHECK(positive(eac) && eac <= 1);
  const cJSON *stages = cJSON_GetObjectItem(cal, "stages");
  if (stages) {
    // The ops a layer floor stood for run inside the stages, priced there.
    RG_CHECK(num(cal, "overhead_layer_seconds") == 0);
    // What the process paid once (a second engine told it from the stages').
    RG_CHECK(num(cal, "process_first_seconds") >= 0);
    // The same by the op kind that paid it: every kind the step ran, each
    // at least 0 (the matmul and the attention's at least).
    const cJSON *fo = cJSON_GetObjectItem(cal, "process_first_by_op_seconds");
    RG_CHECK(fo && num(fo, "matmul") >= 0 && num(fo, "attention") >= 0);
    static const char *const skinds[] = {"embed", "attention", "ffn", "lm_head"};
    double meas = 0, fitted = 0;
    for (int k = 0; k < 4; k++) {
      const cJSON *o = cJSON_GetObjectItem(stages, skinds[k]);
      RG_REQUIRE(o);
      double call = num(o, "call_s"), tok = num(o, "token_s"), eff = num(o, "efficiency");
      RG_CHECK(call >= 0 && call < 0.1 && tok >= 0 && tok < 0.1 && num(o, "first_s") >= 0);
      // After an idle gap the decode of 1 ran again: its time, and the cold
      // cost per call it gives (never negative).
      RG_CHECK(positive(num(o, "gapped_s")) && num(o, "cold_s") >= 0 && num(o, "cold_s") < 0.1);
      RG_CHECK(eff > 0 && eff <= 4);
      const cJSON *sh;
      int n = 0;
      cJSON_ArrayForEach(sh, cJSON_GetObjectItem(o, "shapes")) {
        n++;
        RG_CHECK(positive(num(sh, "measured_s")) && positive(num(sh, "roofline_s")));
        meas += num(sh, "measured_s");
        fitted += num(sh, "fitted_s");
      }
      RG_CHECK(n == RG_PROFILE_STAGE_SHAPES);
    }
    // Priced at the shapes' own points, the stages' time lands near it in all.
    if (!(fitted > meas / 2 && fitted < meas * 2))
      rg_test_fail(t, __FILE__, __LINE__, "stages fitted %g s, measured %g s", fitted, meas);
  } else {
    RG_CHECK_NEAR(num(cal, "overhead_layer_seconds"), 8 * num(j, "launch_seconds"), 1e-9);
  }
  const cJSON *cv;
  int n_curves = 0;
  cJSON_ArrayForEach(cv, cJSON_GetObjectItem(cal, "compute")) {
    n_curves++;
    rg_dtype_t ct;
    RG_REQUIRE(rg_dtype_parse(cv->string, &ct) == 0);
    const char *from = cJSON_GetStringValue(cJSON_GetObjectItem(cv, "peak_from"));
    double peak = num(cv, "peak_flops");
    // A datasheet peak is the class file's; a measured one is there because
    // the class has none, or the device beats it.
    if (from && !strcmp(from, "datasheet"))
      RG_CHECK(peak == sheet->peak[ct]);
    else
      RG_CHECK(positive(peak));
    const char *wt = cJSON_GetStringValue(cJSON_GetObjectItem(cv, "weights"));
    const cJSON *meas = NULL;
    cJSON_ArrayForEach(
        mm,
        cJSON_GetObjectItem(
            j, "matmul")) if (wt && !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(mm, "dtype")),
                                            wt)) meas = mm;
    RG_REQUIRE(meas);
    const cJSON *p;
    int k = 0;
    cJSON_ArrayForEach(p, cJSON_GetObjectItem(cv, "points")) {
      double e = num(p, "efficiency");
      const cJSON *mp = cJSON_GetArrayItem(cJSON_GetObjectItem(meas, "points"), k++);
      if (!(e > 0 && e <= 1)) rg_test_fail(t, __FILE__, __LINE__, "%s efficiency %g", wt, e);
      RG_CHECK(num(p, "m") == num(mp, "m"));
      RG_CHECK_NEAR(e, num(mp, "flops") / peak, 1e-9);
    }
  }
  RG_CHECK(n_curves == RG_PROFILE_DTYPES);
}

// The class the planner loads from dir, with the file's figures in place.
static void check_loaded(rg_test_ctx_t *t, const char *dir, const cJSON *j) {
  rg_catalog_t *cat = NULL;
  RG_REQUIRE_OK(rg_catalog_load(dir, &cat));
  const rg_device_class_t *c = rg_catalog_find(cat, "local-cpu");
  RG_REQUIRE(c && c->calibrated && c->datasheet);
  char want[200];
  snprintf(want, sizeof want, "measured by ridge profile on %s, %s",
           cJSON_GetStringValue(cJSON_GetObjectItem(j, "date")),
           cJSON_GetStringValue(cJSON_GetObjectItem(j, "device")));
  RG_CHECK_CONTAINS(c->calibration_source, want);
  RG_CHECK(strstr(c->eff_source, "measured by ridge profile") != NULL);
  const cJSON *cal = cJSON_GetObjectItem(j, "calibrated");
  // Figures are written with three significant digits.
  RG_CHECK_NEAR(c->mem[0].bandwidth, num(cal, "bandwidth"), 0.006);
  RG_CHECK_NEAR(c->mem[0].capacity, c->datasheet->mem[0].capacity, 1e-12);  // not measured
  if (isnan(num(cal, "efficiency_memory")))
    RG_CHECK(c->eff_memory == c->datasheet->eff_memory);  // not written: the class's own
  else
    RG_CHECK_NEAR(c->eff_memory, num(cal, "efficiency_memory"), 0.006);
  RG_CHECK_NEAR(c->layer_floor, num(cal, "overhead_layer_seconds"), 0.006);
  RG_CHECK_NEAR(c->eff_attention_compute, num(cal, "efficiency_attention_compute"), 0.006);
  // Attention's efficiency at each context measured, which the cost model
  // reads by a step's context.
  const cJSON *ac = cJSON_GetObjectItem(cal, "efficiency_attention_by_context"), *ap;
  RG_CHECK(c->eff_attention_ctx.n == cJSON_GetArraySize(ac));
  cJSON_ArrayForEach(ap, ac) {
    RG_CHECK_NEAR(rg_class_eff_attention(c, num(ap, "positions")), num(ap, "efficiency"), 0.006);
  }
  // Each stage kind's figures as the profile fitted them.
  static const char *const kinds[] = {"embed", "attention", "ffn", "lm_head"};
  const cJSON *stages = cJSON_GetObjectItem(cal, "stages");
  for (int k = 0; stages && k < 4; k++) {
    const cJSON *o = cJSON_GetObjectItem(stages, kinds[k]);
    RG_CHECK_NEAR(c->stage[k].call, num(o, "call_s"), 0.006);
    RG_CHECK_NEAR(c->stage[k].token, num(o, "token_s"), 0.006);
    RG_CHECK_NEAR(c->stage[k].first, num(o, "first_s"), 0.006);
    RG_CHECK_NEAR(c->stage[k].cold, num(o, "cold_s"), 0.006);
    RG_CHECK_NEAR(c->stage[k].eff > 0 ? c->stage[k].eff : 1, num(o, "efficiency"), 0.006);
    // The points the cost model prices calls by, one per tokens per call the
    // shapes have (lm_head: a prefill's one logit row is a decode's one).
    const cJSON *bt = cJSON_GetObjectItem(o, "by_tokens"), *pt;
    RG_CHECK(c->stage[k].n_points == cJSON_GetArraySize(bt));
    RG_CHECK(c->stage[k].n_points == (k == 3 ? 3 : 6));
    int i = 0;
    cJSON_ArrayForEach(pt, bt) {
      RG_CHECK(c->stage[k].by_tokens[i].tokens == num(pt, "tokens"));
      RG_CHECK_NEAR(c->stage[k].by_tokens[i].seconds, num(pt, "seconds"), 0.006);
      RG_CHECK(num(pt, "seconds") >= 0);
      i++;
    }
  }
  // With stages timed, the step's own cost is the engine's forward beyond
  // them: more than the three launches it stood for before.
  if (stages) {
    RG_CHECK(c->step_cost > 0);
    RG_CHECK_NEAR(c->step_cost, num(cal, "overhead_step_seconds"), 0.006);
    // Measured on the runtime's serving loop: it is what the class says.
    RG_CHECK(num(stages, "serving_iterations") >= 24);
    RG_CHECK_NEAR(num(cal, "overhead_step_seconds"), num(stages, "serving_step_s"), 1e-9);
  }
  RG_CHECK(!stages || strstr(c->stage_source, "measured by ridge profile") != NULL);
  if (stages) RG_CHECK_NEAR(c->process_first, num(cal, "process_first_seconds"), 0.006);
  // The class reads back the split by op kind the file wrote.
  const cJSON *fo = cJSON_GetObjectItem(cal, "process_first_by_op_seconds");
  int matched = 0;
  for (int k = 0; stages && fo && k < c->n_first_by_op; k++) {
    const cJSON *v = cJSON_GetObjectItem(fo, c->first_by_op[k].op);
    RG_CHECK(v != NULL);
    if (v && fabs(c->first_by_op[k].seconds - v->valuedouble) <= 0.006 * v->valuedouble + 1e-9)
      matched++;
  }
  if (stages && fo) RG_CHECK(matched == cJSON_GetArraySize(fo) && matched > 0);
  const cJSON *cv;
  cJSON_ArrayForEach(cv, cJSON_GetObjectItem(cal, "compute")) {
    rg_dtype_t ct;
    RG_REQUIRE(rg_dtype_parse(cv->string, &ct) == 0);
    // The planner divides by the same peak the file's curve is a fraction of.
    RG_CHECK_NEAR(rg_class_peak(c, ct), num(cv, "peak_flops"), 0.006);
    const cJSON *last =
        cJSON_GetArrayItem(cJSON_GetObjectItem(cv, "points"),
                           cJSON_GetArraySize(cJSON_GetObjectItem(cv, "points")) - 1);
    RG_CHECK_NEAR(rg_class_eff_compute(c, ct, num(last, "m")), num(last, "efficiency"), 0.006);
    // The weight stream by M, at the decode points (M <= 16) and only there.
    const cJSON *pt;
    int n_mem = 0;
    cJSON_ArrayForEach(pt, cJSON_GetObjectItem(cv, "points")) {
      double me = num(pt, "memory_efficiency"), m = num(pt, "m");
      if (isnan(me)) {
        RG_CHECK(m > 16 || c->eff_memory_m[ct].n == 0);
        continue;
      }
      n_mem++;
      RG_CHECK(m <= 16 && me > 0 && me <= 1);
      RG_CHECK_NEAR(rg_class_eff_memory(c, ct, m), me, 0.006);
    }
    RG_CHECK(c->eff_memory_m[ct].n == n_mem);
  }
  rg_catalog_destroy(cat);
}

RG_TEST(profile_cpu_quick_calibrates_the_class) {
  const char *dir = profile_config(t);
  double tbt_sheet = plan_tbt(t, dir);
  char args[900], path[700], *out = NULL;
  snprintf(path, sizeof path, "%s/devices/calibrated/local-cpu.yaml", dir);
  snprintf(args, sizeof args, "--config-dir '%s' profile --quick --json -o '%s'", dir, path);
  int rc = rg_test_run_ridge(t, args, &out);
  cJSON *j = rc == 0 ? cJSON_Parse(out) : NULL;
  if (!j) rg_test_fail(t, __FILE__, __LINE__, "ridge profile (rc %d):\n%s", rc, out);
  free(out);
  RG_REQUIRE(j);
  RG_CHECK(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(j, "device")), "cpu:0"));
  RG_CHECK(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "output"), "written")));
  rg_catalog_t *plain = NULL;
  rg_status_t s = rg_catalog_load(rg_test_config_dir(), &plain);
  const rg_device_class_t *sheet = s ? NULL : rg_catalog_find(plain, "local-cpu");
  if (sheet && sheet->calibrated) sheet = sheet->datasheet;
  RG_CHECK_OK(s);
  if (sheet) check_figures(t, j, sheet);
  rg_catalog_destroy(plain);
  check_loaded(t, dir, j);
  cJSON_Delete(j);

  // The file says what measured it, and over which peak each curve is.
  char *text = NULL;
  size_t len;
  RG_REQUIRE_OK(rg_file_read_all(path, "class", 1 << 20, &text, &len));
  RG_CHECK_CONTAINS(text, "measured: { by: ridge profile, date: ");
  RG_CHECK_CONTAINS(text, "device: \"cpu:0 ");
  RG_CHECK_CONTAINS(text, "#   f32   of the ");
  RG_CHECK_CONTAINS(text, "#   int8  of the ");
  RG_CHECK_CONTAINS(text, "measured on q8_0");
  // Decode points past the host's cache, the rest in the quick footprint.
  // (where the host's cache is larger than the quick footprint).
  RG_CHECK(strstr(text, " at M <= 16, 64.0 MiB past it") ||
           strstr(text, "# Weights cycled through 64.0 MiB (quick"));
  // Written where the m = 1 stream is (it is the curve's first point).
  RG_CHECK((strstr(text, "\nefficiency:\n  memory: ") != NULL) ==
           (strstr(text, "\n  memory_by_m:\n    f32: { 1: ") != NULL));
  RG_CHECK_CONTAINS(text, "\nstages:\n  embed: { call: ");
  RG_CHECK_CONTAINS(text, "# stages: testmodel-llama-tiny");
  free(text);

  // `ridge catalog` shows it beside the datasheet; `ridge plan` uses it.
  snprintf(args, sizeof args, "--config-dir '%s' catalog local-cpu", dir);
  RG_CHECK(rg_test_run_ridge(t, args, &out) == 0);
  RG_CHECK_CONTAINS(out, "Calibrated: measured by ridge profile on ");
  RG_CHECK_CONTAINS(out, "calibrated / datasheet");
  RG_CHECK_CONTAINS(out, "50.0 GB/s");  // the datasheet's bandwidth, beside the measured
  RG_CHECK_CONTAINS(out, "attention  by context: 128: ");
  free(out);
  double tbt_cal = plan_tbt(t, dir);
  if (!(tbt_cal != tbt_sheet))
    rg_test_fail(t, __FILE__, __LINE__, "plan TBT %g s with the calibrated class, %g without",
                 tbt_cal, tbt_sheet);
}

RG_TEST(profile_opencl_quick_calibrates_the_class) {
  rg_device_t *dev = NULL;
  rg_status_t s = rg_device_open("opencl", 0, NULL, &dev);
  if (s) {
    char why[300];
    snprintf(why, sizeof why, "no opencl device: %s", rg_status_message(s));
    rg_status_free(s);
    RG_SKIP(why);
  }
  int cpu_like = strstr(rg_device_info(dev)->features, "cpu") != NULL;
  rg_device_close(dev);
  if (!cpu_like) RG_SKIP("opencl:0 is not a CPU device, so local-cpu is not its class");
  const char *dir = profile_config(t);
  // -o -: the class on stdout, nothing else with --quiet.
  char args[900], *out = NULL;
  snprintf(args, sizeof args,
           "--config-dir '%s' --quiet profile --device opencl:0 --class local-cpu --quick -o -",
           dir);
  int rc = rg_test_run_ridge(t, args, &out);
  if (rc) rg_test_fail(t, __FILE__, __LINE__, "ridge profile (rc %d):\n%s", rc, out);
  RG_CHECK(out && !strncmp(out, "# local-cpu, calibrated by `ridge profile` on opencl:0", 54));
  RG_CHECK_CONTAINS(out, "\nefficiency:\n");
  RG_CHECK_CONTAINS(out, "OpenCL streaming-read kernel");
  snprintf(args, sizeof args, "%s/devices/calibrated", dir);
  mkdir(args, 0755);
  rg_test_write(t, "devices/calibrated/local-cpu.yaml", out ? out : "");
  free(out);
  rg_catalog_t *cat = NULL;
  RG_REQUIRE_OK(rg_catalog_load(dir, &cat));
  const rg_device_class_t *c = rg_catalog_find(cat, "local-cpu");
  RG_CHECK(c && c->calibrated && strstr(c->calibration_source, ", opencl:0 "));
  RG_CHECK(c && positive(c->mem[0].bandwidth) && c->eff_memory > 0 && c->eff_memory <= 1);
  RG_CHECK(c && rg_class_eff_compute(c, RG_BF16, 256) > rg_class_eff_compute(c, RG_BF16, 1));
  rg_catalog_destroy(cat);
}

// The null device runs no op: the profile measures what the HAL does for
// it (copies) and says why for the rest. Without -o nothing is written.
RG_TEST(profile_null_device_reports_each_gap_and_writes_nothing) {
  const char *dir = profile_config(t);
  char args[900], *out = NULL;
  snprintf(args, sizeof args, "--config-dir '%s' profile --device null:0 --class local-cpu --quick",
           dir);
  RG_CHECK(rg_test_run_ridge(t, args, &out) == 0);
  RG_CHECK_CONTAINS(out, "null:0 has no streaming-read kernel ridge knows of");
  RG_CHECK_CONTAINS(out, "not measured: null:0 has no matmul kernel");
  RG_CHECK_CONTAINS(out,
                    "decode attention, bf16 KV, 2 sequences, 32/8 heads x 64: not measured: "
                    "measuring attention over 128 positions on null:0: null:0 has no "
                    "attention kernel");
  RG_CHECK_CONTAINS(out, "nothing measured that the class has a figure for");
  RG_CHECK_CONTAINS(out, "Not written (no -o).");
  RG_CHECK_CONTAINS(out, "/devices/calibrated/local-cpu.yaml` puts it where ridge plan");
  free(out);
  struct stat st;
  snprintf(args, sizeof args, "%s/devices/calibrated", dir);
  RG_CHECK(stat(args, &st) != 0 && errno == ENOENT);
}

RG_TEST(profile_bad_flags_and_devices_are_refused_before_measuring) {
  static const struct {
    const char *args, *want;
  } cases[] = {
      {"profile --qick", "ridge profile: unknown option '--qick'; did you mean --quick?"},
      {"profile cpu:0",
       "takes no arguments besides its options, got 'cpu:0' (name the device "
       "with --device"},
      {"profile --json -o -", "--json and -o - both write to stdout"},
      {"profile --device gpu:0", "no device driver named 'gpu'; did you mean 'cpu'?"},
      {"profile --class local-cpus",
       "--class: unknown device class 'local-cpus'; did you mean 'local-cpu'?"},
      {"profile --class host-dram",
       "--class host-dram is a host-dram tier, which computes nothing"},
      {"profile --device null:0",
       "null:0 (null device) has no class in `ridge devices`; name "
       "the class it stands for with --class NAME"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char args[300], *out = NULL;
    snprintf(args, sizeof args, "--config-dir '%s' %s", rg_test_config_dir(), cases[i].args);
    int rc = rg_test_run_ridge(t, args, &out);
    if (rc != 2 || !strstr(out, cases[i].want))
      rg_test_fail(t, __FILE__, __LINE__, "ridge %s: rc %d, expected 2 and '%s':\n%s",
                   cases[i].args, rc, cases[i].want, out);
    free(out);
  }
  // An absent driver: the reason `ridge devices` gives.
  rg_device_t *dev = NULL;
  rg_status_t s = rg_device_open("cuda", 0, NULL, &dev);
  if (!s) {
    rg_device_close(dev);
    return;  // a GPU machine: cuda:0 is present
  }
  char args[300], *out = NULL;
  snprintf(args, sizeof args, "--config-dir '%s' profile --device cuda:0", rg_test_config_dir());
  RG_CHECK(rg_test_run_ridge(t, args, &out) != 0);
  RG_CHECK_CONTAINS(out, rg_status_message(s));
  free(out);
  rg_status_free(s);
}

// -o by base/fileio.h's rules, checked before a minute of measuring, and a
// FIFO refused as well: the planner reads the class back, from files only.
RG_TEST(profile_refuses_outputs_it_cannot_write_a_class_to) {
  const char *dir = profile_config(t);
  char fifo[700], link[700], sub[700], cal[700];
  snprintf(cal, sizeof cal, "%s/devices/calibrated/h100-sxm.yaml", dir);
  snprintf(fifo, sizeof fifo, "%s/class.fifo", dir);
  snprintf(link, sizeof link, "%s/dangling.yaml", dir);
  snprintf(sub, sizeof sub, "%s/devices", dir);
  RG_REQUIRE(mkfifo(fifo, 0600) == 0);
  RG_REQUIRE(symlink("no-such-file.yaml", link) == 0);
  const struct {
    const char *path, *want;
  } cases[] = {
      {fifo,
       "': it is a FIFO; ridge plan reads a calibrated class back and reads only regular "
       "files, so give a file path (or -o - for stdout)"},
      {link, "': it is a symbolic link to 'no-such-file.yaml', which does not exist"},
      {sub, "': it is a directory; give a file path"},
      {"/no/such/folder/local-cpu.yaml", "': the folder '/no/such/folder' does not exist"},
      {cal, "': a file in "},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char args[1600], *out = NULL, want[900];
    snprintf(args, sizeof args, "--config-dir '%s' profile --quick -o '%s'", dir, cases[i].path);
    snprintf(want, sizeof want, "ridge profile: cannot write calibrated class '%s%s", cases[i].path,
             cases[i].want);
    int rc = rg_test_run_ridge(t, args, &out);
    if (rc != 2 && rc != 1) rg_test_fail(t, __FILE__, __LINE__, "-o %s: rc %d", cases[i].path, rc);
    RG_CHECK_CONTAINS(out, want);
    // Refused before measuring: no progress line was printed.
    RG_CHECK(out && !strstr(out, "[ 1/"));
    free(out);
  }
  struct stat st;
  RG_CHECK(lstat(fifo, &st) == 0 && S_ISFIFO(st.st_mode));
  // Refused before anything was made: not even the calibrated folder.
  snprintf(sub, sizeof sub, "%s/devices/calibrated", dir);
  RG_CHECK(stat(sub, &st) != 0 && errno == ENOENT);
  RG_CHECK(lstat(link, &st) == 0 && S_ISLNK(st.st_mode));
}

RG_TEST(profile_write_class_needs_a_class_and_a_working_stream) {
  rg_profile_result_t *r = calloc(1, sizeof(*r));
  RG_REQUIRE(r);
  snprintf(r->device, sizeof r->device, "cpu:0");
  FILE *f = tmpfile();
  RG_REQUIRE(f);
  RG_CHECK_ERR(rg_profile_write_class(r, f),
               "the profile of cpu:0 names no device class; a calibrated file overlays a class");
  fclose(f);
  // A full device: the write error comes back, not a short file.
  r->cls.have_class = 1;
  snprintf(r->cls.sheet.name, sizeof r->cls.sheet.name, "local-cpu");
  f = fopen("/dev/full", "w");
  if (f) {
    RG_CHECK_ERR(rg_profile_write_class(r, f), "writing the calibrated class: No space left");
    fclose(f);
  }
  free(r);
}

// The shapes a profile measures by default come from rg_testmodel_arch: the
// same as rg_model_load reads from a written test model's config.json.
RG_TEST(profile_testmodel_arch_is_what_its_config_says) {
  static const rg_testmodel_arch_t archs[] = {RG_TESTMODEL_LLAMA, RG_TESTMODEL_MOE};
  for (size_t i = 0; i < 2; i++) {
    rg_testmodel_opts_t o = {
        .arch = archs[i], .size = RG_TESTMODEL_TINY, .dtype = RG_BF16, .gguf_type = RG_DTYPE_COUNT};
    char dir[1024];
    int written;
    RG_REQUIRE_OK(rg_testmodel_cached(&o, dir, sizeof dir, &written));
    rg_arch_t *loaded = NULL, a;
    RG_REQUIRE_OK(rg_model_load(dir, NULL, &loaded));
    rg_testmodel_arch(&o, &a);
    RG_CHECK(a.family == loaded->family);
    RG_CHECK(a.d_model == loaded->d_model && a.n_layers == loaded->n_layers);
    RG_CHECK(a.n_heads == loaded->n_heads && a.n_kv_heads == loaded->n_kv_heads);
    RG_CHECK(a.head_dim == loaded->head_dim && a.d_ff == loaded->d_ff);
    RG_CHECK(a.n_experts == loaded->n_experts && a.n_experts_per_tok == loaded->n_experts_per_tok);
    RG_CHECK(a.max_context == loaded->max_context && a.rope_theta == loaded->rope_theta);
    RG_CHECK(a.weight_dtype == loaded->weight_dtype);
    if (a.n_experts) RG_CHECK(a.d_ff_expert == loaded->d_ff_expert);
    rg_arch_destroy(loaded);
  }
  // The 1b, whose files are too large to write here: Llama-3.2-1B's layer.
  rg_testmodel_opts_t o = {.arch = RG_TESTMODEL_LLAMA, .size = RG_TESTMODEL_1B, .dtype = RG_BF16};
  rg_arch_t a;
  rg_testmodel_arch(&o, &a);
  RG_CHECK(!strcmp(a.name, "ridge-testmodel-llama-1b") && a.vocab == 32768);
  RG_CHECK(a.d_model == 2048 && a.n_heads == 32 && a.n_kv_heads == 8 && a.head_dim == 64);
  RG_CHECK(a.d_ff == 8192 && a.n_layers == 16);
}
