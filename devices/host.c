// devices/host.c — what backends share about the host: how much memory this
// process may use, 64-byte-aligned host buffers, and loading vendor
// libraries with dlopen.
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/hugemem.h"
#include "devices/backend.h"

// ----- Host memory -------------------------------------------------------------

// Reads the first line of a file into buf; 0 on success.
static int read_line(const char *path, char *buf, size_t len) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  char *ok = fgets(buf, (int)len, f);
  fclose(f);
  if (!ok) return -1;
  buf[strcspn(buf, "\n")] = 0;
  return 0;
}

// A cgroup limit file's value; 0 for "max", unreadable, or a v1 "unlimited"
// (a page-rounded INT64_MAX).
static uint64_t read_limit(const char *path) {
  char line[64];
  if (read_line(path, line, sizeof(line))) return 0;
  char *end;
  unsigned long long v = strtoull(line, &end, 10);
  if (end == line || v == 0 || v >= (1ULL << 62)) return 0;
  return (uint64_t)v;
}

// The tightest memory limit on this process's cgroup and its ancestors
// (v2), or on its memory cgroup (v1). 0 when none.
static uint64_t cgroup_limit(const char **out_source) {
  uint64_t best = 0;
  FILE *f = fopen("/proc/self/cgroup", "r");
  char line[1024], path[1400];
  while (f && fgets(line, sizeof(line), f)) {
    line[strcspn(line, "\n")] = 0;
    // "0::/a/b" (v2) or "4:memory:/a/b" (v1; controllers may be listed together).
    char *c1 = strchr(line, ':');
    char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    if (!c2) continue;
    *c2 = 0;
    const char *ctrl = c1 + 1, *cg = c2 + 1;
    int v2 = !strcmp(line, "0") && !*ctrl;
    int v1 = !v2 && (strstr(ctrl, "memory") != NULL);
    if (!v2 && !v1) continue;
    char dir[1024];
    snprintf(dir, sizeof(dir), "%s", cg);
    // Walk from the process's own group up to the root of the hierarchy.
    for (;;) {
      snprintf(path, sizeof(path),
               v2 ? "/sys/fs/cgroup%s/memory.max" : "/sys/fs/cgroup/memory%s/memory.limit_in_bytes",
               !strcmp(dir, "/") ? "" : dir);
      uint64_t v = read_limit(path);
      if (v && (!best || v < best)) {
        best = v;
        *out_source = v2 ? "cgroup memory.max" : "cgroup memory.limit_in_bytes";
      }
      char *slash = strrchr(dir, '/');
      if (!slash || slash == dir) {
        if (!strcmp(dir, "/") || !dir[0]) break;
        snprintf(dir, sizeof(dir), "/");
        continue;
      }
      *slash = 0;
    }
  }
  if (f) fclose(f);
  return best;
}

uint64_t rg__host_memory(const char **out_source) {
  const char *src = "";
  uint64_t total = 0;
  FILE *f = fopen("/proc/meminfo", "r");
  char line[256];
  while (f && fgets(line, sizeof(line), f)) {
    unsigned long long kb;
    if (sscanf(line, "MemTotal: %llu kB", &kb) == 1) {
      total = (uint64_t)kb * 1024;
      src = "MemTotal";
      break;
    }
  }
  if (f) fclose(f);
  const char *cg_src = NULL;
  uint64_t cg = cgroup_limit(&cg_src);
  if (cg && (!total || cg < total)) {
    total = cg;
    src = cg_src;
  }
  if (out_source) *out_source = src;
  return total;
}

char *rg__fmt_size(uint64_t bytes, char *buf, size_t len) {
  static const char *const pre[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = (double)bytes;
  size_t i = 0;
  while (v >= 1024 && i + 1 < sizeof(pre) / sizeof(pre[0])) {
    v /= 1024;
    i++;
  }
  if (i == 0)
    snprintf(buf, len, "%llu bytes", (unsigned long long)bytes);
  else
    snprintf(buf, len, v >= 100 ? "%.0f %s (%llu bytes)" : "%.3g %s (%llu bytes)", v, pre[i],
             (unsigned long long)bytes);
  return buf;
}

// ----- Host buffers ------------------------------------------------------------

#define HOST_ALIGN 64

typedef struct {
  rg_buffer_t base;
  void *data;
  size_t mapped;  // rg_hugemem_alloc's
} host_buffer_t;

static void host_buffer_destroy(rg_buffer_t *b) {
  host_buffer_t *hb = (host_buffer_t *)b;
  rg_hugemem_free(hb->data, hb->mapped);
  free(hb);
}

static void *host_buffer_ptr(rg_buffer_t *b) {
  return ((host_buffer_t *)b)->data;
}

static const rg_buffer_vtable_t host_buffer_vt = {
    // write and read: NULL, the wrapper copies through host_ptr.
    .destroy = host_buffer_destroy,
    .host_ptr = host_buffer_ptr,
};

rg_status_t rg__host_buffer_alloc(rg_device_t *dev, size_t bytes, rg_buffer_t **out) {
  char want[96];
  if (bytes > SIZE_MAX - HOST_ALIGN)
    return rg_status_make(RG_OUT_OF_MEMORY, "cannot allocate %s on %s: too large to address",
                          rg__fmt_size(bytes, want, sizeof(want)), dev->label);
  // Large buffers (a KV cache, an RMA region) on huge pages where the
  // kernel has them: see base/hugemem.h. At least HOST_ALIGN-aligned.
  host_buffer_t *hb = calloc(1, sizeof(*hb));
  void *data = hb ? rg_hugemem_alloc(bytes, &hb->mapped) : NULL;
  if (!data) {
    free(hb);
    return rg_status_make(RG_OUT_OF_MEMORY, "cannot allocate %s on %s: the host allocator refused",
                          rg__fmt_size(bytes, want, sizeof(want)), dev->label);
  }
  hb->data = data;
  rg__buffer_init(&hb->base, &host_buffer_vt, dev, bytes);
  *out = &hb->base;
  return NULL;
}

// A buffer over the caller's memory: destroy frees only the struct, after
// telling the owner through release_fn.
typedef struct {
  rg_buffer_t base;
  void *data;
  void (*release_fn)(void *);
  void *ctx;
} wrapped_buffer_t;

static void wrapped_buffer_destroy(rg_buffer_t *b) {
  wrapped_buffer_t *wb = (wrapped_buffer_t *)b;
  if (wb->release_fn) wb->release_fn(wb->ctx);
  free(wb);
}

static void *wrapped_buffer_ptr(rg_buffer_t *b) {
  return ((wrapped_buffer_t *)b)->data;
}

static const rg_buffer_vtable_t wrapped_buffer_vt = {
    .destroy = wrapped_buffer_destroy,
    .host_ptr = wrapped_buffer_ptr,
};

rg_status_t rg__host_buffer_wrap(rg_device_t *dev, void *ptr, size_t len,
                                 void (*release_fn)(void *), void *ctx, rg_buffer_t **out) {
  wrapped_buffer_t *wb = calloc(1, sizeof(*wb));
  if (!wb)
    return rg_status_make(RG_OUT_OF_MEMORY, "out of memory wrapping a buffer on %s", dev->label);
  wb->data = ptr;
  wb->release_fn = release_fn;
  wb->ctx = ctx;
  rg__buffer_init(&wb->base, &wrapped_buffer_vt, dev, len);
  *out = &wb->base;
  return NULL;
}

// ----- Vendor libraries --------------------------------------------------------

rg_status_t rg__dynlib_open(const char *env, const char *const *names, size_t n, const char *absent,
                            void **out_lib, const char **out_name) {
  *out_lib = NULL;
  *out_name = n ? names[0] : "";
  const char *over = env ? getenv(env) : NULL;
  const char *single[1];
  if (over && *over) {
    single[0] = over;
    names = single;
    n = 1;
  }
  char first_err[512] = "";
  for (size_t i = 0; i < n; i++) {
    dlerror();
    void *lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (lib) {
      *out_lib = lib;
      *out_name = names[i];
      return NULL;
    }
    const char *e = dlerror();
    // Keep the first error that is not plain absence: a library that exists
    // but cannot load says more than the names that do not exist.
    if (e && !strstr(e, "No such file") && !first_err[0])
      snprintf(first_err, sizeof(first_err), "%s", e);
  }
  if (first_err[0])
    return rg_status_make(RG_UNAVAILABLE, "found but could not load: %s", first_err);
  if (over && *over) return rg_status_make(RG_UNAVAILABLE, "%s not found (from $%s)", over, env);
  char also[256] = "";
  size_t used = 0;
  for (size_t i = 1; i < n; i++) {
    int w = snprintf(also + used, sizeof(also) - used, "%s%s", i == 1 ? " (also tried " : ", ",
                     names[i]);
    if (w > 0 && (size_t)w < sizeof(also) - used) used += (size_t)w;
  }
  if (used && used + 1 < sizeof(also)) strcat(also, ")");
  return rg_status_make(RG_UNAVAILABLE, "%s not found%s%s%s", n ? names[0] : "library", also,
                        absent ? ": " : "", absent ? absent : "");
}
