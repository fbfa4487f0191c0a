// cli/calibrate.c — the device classes `ridge run` predicts each stage with:
// the class a device of this machine stands for, calibrated by a quick
// profile of that device (runtime/profile.h, with the tiny test model's
// stages), cached in the user's cache directory for a day.
//
// The cache holds one calibrated class file per device
// (<cache>/ridge/calibrated/<driver>-<index>[-t<threads>]/<class>.yaml, the
// thread count when --threads set one), as `ridge profile
// -o` writes it, so what is reused is exactly what was measured, and the
// planner's own loader reads it back. A file that no longer loads is
// replaced by a fresh profile, and a device that cannot be profiled falls
// back to its datasheet class; both say why in the calibration's note.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "base/build.h"
#include "base/clock.h"
#include "base/fileio.h"
#include "base/units.h"
#include "cli/cli.h"
#include "devices/devices.h"
#include "runtime/profile.h"

rg_status_t rg_cli_calibration_dir(char *out, size_t len) {
  const char *cache = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  int n;
  if (cache && *cache)
    n = snprintf(out, len, "%s/ridge/calibrated", cache);
  else if (home && *home)
    n = snprintf(out, len, "%s/.cache/ridge/calibrated", home);
  else
    n = snprintf(out, len, "/tmp/ridge-cache/calibrated");
  if (n < 0 || (size_t)n >= len)
    return rg_status_make(RG_INVALID_ARGUMENT, "the cache directory's path is too long");
  return NULL;
}

// mkdir -p of dir.
static rg_status_t make_dirs(const char *dir) {
  char p[1024];
  snprintf(p, sizeof p, "%s", dir);
  for (char *q = p + 1;; q++) {
    if (*q && *q != '/') continue;
    char c = *q;
    *q = 0;
    if (mkdir(p, 0755) != 0 && errno != EEXIST)
      return rg_status_make(RG_IO, "cannot make the calibration cache folder %s: %s", p,
                            strerror(errno));
    if (!c) break;
    *q = c;
  }
  return NULL;
}

// Profiles dev (quick, with the tiny test model's stages) as class sheet
// and writes the calibrated class to path.
static rg_status_t profile_to(rg_device_t *dev, const rg_device_class_t *sheet, const char *path,
                              int threads, int quiet, double *seconds) {
  char model[2048];
  RG_RETURN_IF_ERROR(rg_cli_test_model(model, sizeof model, quiet));
  rg_profile_class_t pc;
  rg_profile_class_from(sheet, &pc);
  rg_profile_options_t po = {.quick = 1, .cls = &pc, .stage_model = model, .threads = threads};
  rg_profile_result_t *r = calloc(1, sizeof *r);
  if (!r) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
  rg_status_t st = rg_profile_run(dev, &po, r);
  if (!st && !r->cls.have_stages)
    st = rg_status_make(RG_UNIMPLEMENTED, "its stages were not timed: %s", r->stages.reason);
  if (!st) {
    rg_file_writer_t *w;
    st = rg_file_writer_open(path, "calibrated class", &w);
    if (!st) st = rg_file_writer_finish(w, rg_profile_write_class(r, rg_file_writer_stream(w)));
  }
  *seconds = r->seconds;
  free(r);
  return st;
}

rg_status_t rg_cli_calibrate(const rg_catalog_t *cat, const char *device,
                             const rg_cli_calibrate_options_t *o, rg_cli_calibration_t *out) {
  memset(out, 0, sizeof *out);
  snprintf(out->device, sizeof out->device, "%s", device);
  char driver[32];
  int index;
  rg_device_t *dev = NULL;
  RG_RETURN_IF_ERROR(rg_device_parse_name(device, driver, sizeof driver, &index));
  rg_device_options_t dopt = {.threads = o->threads, .batch_invariant = o->batch_invariant};
  RG_RETURN_IF_ERROR(rg_device_open(driver, index, &dopt, &dev));
  rg_status_t st = NULL;
  const rg_device_info_t *info = rg_device_info(dev);
  const char *cname = info->class_hint;
  const rg_device_class_t *c = cname[0] ? rg_catalog_find(cat, cname) : NULL;
  if (!c || !rg_class_computes(c)) {
    st = rg_status_make(RG_NOT_FOUND,
                        "%s (%s) has no computing class in `ridge devices` to calibrate; give "
                        "--no-calibrate",
                        device, info->name);
    goto done;
  }
  // The datasheet, never a calibration of the catalog's: the prediction is
  // for this device, measured here.
  out->cls = *(c->calibrated && c->datasheet ? c->datasheet : c);
  out->cls.datasheet = NULL;
  snprintf(out->class_name, sizeof out->class_name, "%s", out->cls.name);
  if (o->skip) {
    snprintf(out->note, sizeof out->note, "%s as %s's datasheet (--no-calibrate)", device,
             out->cls.name);
    goto done;
  }
  char dir[1024], key[64];
  if ((st = o->cache_dir ? NULL : rg_cli_calibration_dir(dir, sizeof dir))) goto done;
  if (o->cache_dir) snprintf(dir, sizeof dir, "%s", o->cache_dir);
  // One folder per device ("opencl:0" becomes opencl-0), and in it the
  // class file named after its class, as the loader wants.
  // CPU threads change what each op's fork and join costs: a profile on
  // other than one thread per core is cached apart ("cpu-0-t1").
  // Batch-invariant kernels are other kernels: cached apart too ("-bi").
  // So are a sanitizer build's ("-asan"): the test suite's ridge runs its
  // kernels several times slower, and its calibration, written where the
  // user's ridge looked and younger than its binary, had that ridge predict
  // every stage 15-25x slow for a day.
  snprintf(key, sizeof key, "%s", device);
  if (o->threads > 0) snprintf(key + strlen(key), sizeof key - strlen(key), "-t%d", o->threads);
  if (o->batch_invariant) snprintf(key + strlen(key), sizeof key - strlen(key), "-bi");
  snprintf(key + strlen(key), sizeof key - strlen(key), "%s", RG_BUILD_TAG);
  for (char *q = key; *q; q++)
    if (*q == ':' || *q == '/') *q = '-';
  size_t dl = strlen(dir);
  snprintf(dir + dl, sizeof dir - dl, "/%s", key);
  snprintf(out->path, sizeof out->path, "%s/%s.yaml", dir, out->cls.name);
  double max_age = o->max_age_s > 0 ? o->max_age_s : 86400;
  char why[400] = "";
  struct stat sb;
  time_t now = time(NULL);
  // A calibration older than the running binary measured another build's
  // kernels (an upgrade, a rebuild): it is profiled again.
  struct stat exe;
  const int have_exe = stat("/proc/self/exe", &exe) == 0;
  if (!o->refresh && stat(out->path, &sb) == 0) {
    double age = difftime(now, sb.st_mtime);
    if (age >= 0 && age < max_age && have_exe && sb.st_mtime < exe.st_mtime) {
      snprintf(why, sizeof why,
               "the cached calibration predates this build of ridge; profiled again");
    } else if (age >= 0 && age < max_age) {
      rg_device_class_t tmp = out->cls;
      rg_status_t ls = rg_device_class_calibrate(&tmp, out->path);
      if (!ls && !tmp.stage[RG_SLOT_ATTENTION].call && !tmp.stage[RG_SLOT_FFN].call &&
          !tmp.stage[RG_SLOT_ATTENTION].token && !tmp.stage[RG_SLOT_FFN].token &&
          !tmp.stage[RG_SLOT_ATTENTION].n_points && !tmp.stage[RG_SLOT_FFN].n_points)
        ls = rg_status_make(RG_INVALID_ARGUMENT, "it has no stages: figures");
      if (!ls) {
        out->cls = tmp;
        out->calibrated = 1;
        out->age_s = age;
        char ab[32];
        snprintf(out->note, sizeof out->note, "%s as %s calibrated %s ago (cached %s)", device,
                 out->cls.name, rg_fmt_quantity(age, RG_UNIT_TIME, ab, sizeof ab), out->path);
        goto done;
      }
      snprintf(why, sizeof why, "the cached calibration %s does not load (%s); profiled again",
               out->path, rg_status_message(ls));
      rg_status_free(ls);
    } else if (age < 0) {
      snprintf(why, sizeof why,
               "the cached calibration is dated in the future (a clock changed); profiled again");
    } else {
      char ab[32];
      snprintf(why, sizeof why, "the cached calibration is %s old; profiled again",
               rg_fmt_quantity(age, RG_UNIT_TIME, ab, sizeof ab));
    }
  }
  if ((st = make_dirs(dir))) goto fallback;
  double secs = 0;
  if ((st = profile_to(dev, &out->cls, out->path, o->threads, o->quiet, &secs))) goto fallback;
  rg_device_class_t tmp = out->cls;
  if ((st = rg_device_class_calibrate(&tmp, out->path))) goto fallback;
  out->cls = tmp;
  out->calibrated = 1;
  out->fresh = 1;
  snprintf(out->note, sizeof out->note, "%s as %s calibrated now by a %.1f s quick profile%s%s",
           device, out->cls.name, secs, why[0] ? "; " : "", why);
  goto done;
fallback:
  // A prediction on the datasheet is still a prediction: say why it is one.
  snprintf(out->note, sizeof out->note, "%s as %s's datasheet: calibration failed (%s)%s%s", device,
           out->cls.name, rg_status_message(st), why[0] ? "; " : "", why);
  rg_status_free(st);
  st = NULL;
done:
  rg_device_close(dev);
  return st;
}
