// devices/cpu/cpu_driver.c — the CPU driver: one device, the host's
// processors as this process may use them. Probing reads /proc/cpuinfo (the
// model name and the vector and matrix extensions kernels care about) and
// the memory the process may use (MemTotal, capped by a cgroup limit).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "devices/backend.h"

// Extensions worth showing, in the order shown: (name in /proc/cpuinfo, name
// ridge prints). x86 lists them under "flags", Arm under "Features".
static const char *const x86_features[][2] = {
    {"avx2", "avx2"},
    {"fma", "fma"},
    {"avx512f", "avx512f"},
    {"avx512bw", "avx512bw"},
    {"avx512vl", "avx512vl"},
    {"avx512_vnni", "avx512_vnni"},
    {"avx512_bf16", "avx512_bf16"},
    {"avx512_fp16", "avx512_fp16"},
    {"avx_vnni", "avx_vnni"},
    {"amx_tile", "amx_tile"},
    {"amx_bf16", "amx_bf16"},
    {"amx_int8", "amx_int8"},
    {"amx_fp16", "amx_fp16"},
};
static const char *const arm_features[][2] = {
    {"asimd", "neon"}, {"asimdhp", "fp16"}, {"asimddp", "dotprod"}, {"i8mm", "i8mm"},
    {"bf16", "bf16"},  {"sve", "sve"},      {"sve2", "sve2"},       {"sme", "sme"},
};

// Whether the space-separated list `flags` holds the word w.
static int has_word(const char *flags, const char *w) {
  size_t wl = strlen(w);
  for (const char *p = flags; (p = strstr(p, w)) != NULL; p += wl) {
    int starts = p == flags || p[-1] == ' ' || p[-1] == '\t';
    int ends = p[wl] == 0 || p[wl] == ' ' || p[wl] == '\n' || p[wl] == '\t';
    if (starts && ends) return 1;
  }
  return 0;
}

static void append_features(char *out, size_t cap, const char *flags, const char *const (*tab)[2],
                            size_t n) {
  size_t used = strlen(out);
  for (size_t i = 0; i < n; i++) {
    if (!has_word(flags, tab[i][0])) continue;
    int w = snprintf(out + used, cap - used, "%s%s", used ? " " : "", tab[i][1]);
    if (w < 0 || (size_t)w >= cap - used) break;
    used += (size_t)w;
  }
}

// The value of "key : value" when line starts with key, else NULL.
static const char *value_of(const char *line, const char *key) {
  size_t kl = strlen(key);
  if (strncmp(line, key, kl) != 0) return NULL;
  const char *p = line + kl;
  while (*p == ' ' || *p == '\t') p++;
  if (*p != ':') return NULL;
  p++;
  while (*p == ' ' || *p == '\t') p++;
  return p;
}

// Fills name and features from /proc/cpuinfo (the first processor's block
// speaks for all).
static void read_cpuinfo(rg_device_info_t *info) {
  FILE *f = fopen("/proc/cpuinfo", "r");
  char *line = NULL;
  size_t cap = 0;
  int have_flags = 0;
  while (f && getline(&line, &cap, f) > 0) {
    line[strcspn(line, "\n")] = 0;
    const char *v;
    if (!info->name[0] && ((v = value_of(line, "model name")) || (v = value_of(line, "Hardware"))))
      rg__copy(info->name, sizeof(info->name), v);
    if (!have_flags && (v = value_of(line, "flags"))) {
      append_features(info->features, sizeof(info->features), v, x86_features,
                      sizeof(x86_features) / sizeof(x86_features[0]));
      have_flags = 1;
    } else if (!have_flags && (v = value_of(line, "Features"))) {
      append_features(info->features, sizeof(info->features), v, arm_features,
                      sizeof(arm_features) / sizeof(arm_features[0]));
      have_flags = 1;
    }
    if (info->name[0] && have_flags) break;
  }
  free(line);
  if (f) fclose(f);
}

static rg_status_t cpu_probe(rg_driver_t *drv, rg_device_info_t *out, size_t cap, size_t *out_n) {
  *out_n = 1;
  if (cap == 0) return NULL;
  rg_device_info_t *info = &out[0];
  memset(info, 0, sizeof(*info));
  read_cpuinfo(info);
  struct utsname u;
  const char *arch = uname(&u) == 0 ? u.machine : "unknown";
  if (!info->name[0]) snprintf(info->name, sizeof(info->name), "%s CPU", arch);
  const char *mem_source = "";
  info->memory = rg__host_memory(&mem_source);
  info->compute_units = rg_cpu_count();
  rg__copy(info->class_hint, sizeof(info->class_hint), "local-cpu");
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  snprintf(info->detail, sizeof(info->detail), "%s; %d of %ld online cores usable; memory from %s",
           arch, info->compute_units, online > 0 ? online : (long)info->compute_units,
           mem_source[0] ? mem_source : "nowhere (unknown)");
  return NULL;
}

static const rg_driver_vtable_t cpu_driver_vt = {
    .probe = cpu_probe,
    .open = rg__cpu_device_open,
};

static rg_driver_t cpu_driver = {
    .vt = &cpu_driver_vt,
    .name = "cpu",
    .description = "the host's processors, run by ridge's own thread pool",
};

rg_driver_t *rg__cpu_driver(void) {
  return &cpu_driver;
}
