// devices/opencl/opencl_program.c — ridge's OpenCL C programs for a device:
// built at first use, kept for the process, and cached on disk.
//
// A program is ops/opencl/common.cl followed by one of the other files,
// compiled with -D definitions of ridge's element types, error codes and
// routing modes. Compiling is slow (PoCL, the CPU platform, takes about a
// second a program), so the result is kept twice:
//   in memory  per device context, for the process (rg__cl_context_t);
//   on disk    clGetProgramInfo(CL_PROGRAM_BINARIES) in
//              ${XDG_CACHE_HOME:-~/.cache}/ridge/opencl/<program>-<key>.bin,
//              the key a hash of the device's name, driver and OpenCL
//              versions, the build options and the source, so a new driver
//              or an edited kernel misses. A binary that fails to load or
//              build is rebuilt from source and its file replaced.
// A file is written under a temporary name and renamed, so processes
// sharing the cache never read half of one.
//
// Not on PoCL, by default. Asking PoCL for a program's binary makes it
// compile every kernel of the program for any work-group size, on top of
// the compiles it does at first launch for the sizes used: 9.6 s for the
// matmul program alone, and the fifteen conformance tests took 30 s with
// empty caches against 6 s without the disk cache. PoCL keeps its own
// cache of compiled kernels (~/.cache/pocl/kcache), which brings a second
// run down to 0.8 s (0.1 s with ridge's cache too). Other platforms hand
// out the binary they built, at no cost. RIDGE_OPENCL_DISK_CACHE=1 turns
// ridge's cache on for PoCL too, =0 off everywhere.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "base/clock.h"
#include "devices/opencl/opencl_impl.h"
#include "ops/opencl/opencl_sources.h"
#include "ops/ops.h"

static const char *const program_files[] = {
#define RG_X_(e, file) file,
    RG_CL_PROGRAM_MAP(RG_X_)
#undef RG_X_
};

static const struct {
  rg__cl_prog_t prog;
  const char *name;
} kernel_info[] = {
#define RG_X_(e, prog, name) {RG__CLP_##prog, name},
    RG_CL_KERNEL_MAP(RG_X_)
#undef RG_X_
};
_Static_assert(sizeof kernel_info / sizeof kernel_info[0] == RG__CLK_COUNT,
               "kernel table out of step with RG_CL_KERNEL_MAP");

const char *rg__cl_kernel_name(rg__cl_kernel_id_t k) {
  return (unsigned)k < RG__CLK_COUNT ? kernel_info[k].name : "?";
}

// ----- Sources and options -------------------------------------------------------

// The options every program is built with. Correctly rounded division and
// square root, because the q8_0 quantizer's scale (max|x| / 127, then its
// inverse) must be the CPU's to give the same bytes. RG_HAS_FMA where the
// device fuses multiply-adds in hardware (common.cl's RG_MAD).
static void build_options(const rg__cl_context_t *cx, char *buf, size_t len) {
  int n = snprintf(buf, len,
                   "-cl-std=CL1.2 -cl-fp32-correctly-rounded-divide-sqrt%s -DRG_T_F32=%d "
                   "-DRG_T_BF16=%d -DRG_T_F16=%d -DRG_T_Q8_0=%d",
                   cx->has_fma ? " -DRG_HAS_FMA=1" : "", (int)RG_F32, (int)RG_BF16, (int)RG_F16,
                   (int)RG_Q8_0);
#define RG_X_(e, msg)           \
  if (n > 0 && (size_t)n < len) \
    n += snprintf(buf + n, len - (size_t)n, " -DRG_E_" #e "=%d", (int)RG__CLE_##e);
  RG_CL_FAULT_MAP(RG_X_)
#undef RG_X_
#define RG_X_(c, name) \
  if (n > 0 && (size_t)n < len) n += snprintf(buf + n, len - (size_t)n, " -D" #c "=%d", (int)c);
  RG_MOE_MODE_MAP(RG_X_)
#undef RG_X_
}

static rg_status_t sources(rg__cl_prog_t p, const rg_cl_source_t **common,
                           const rg_cl_source_t **body) {
  *common = rg_cl_source_find("common");
  *body = rg_cl_source_find(program_files[p]);
  if (!*common || !*body)
    return rg_status_make(RG_INTERNAL, "this ridge was built without ops/opencl/%s.cl",
                          !*common ? "common" : program_files[p]);
  return NULL;
}

// ----- The disk cache --------------------------------------------------------------

int rg__cl_disk_cache_default(const char *platform) {
  const char *env = getenv("RIDGE_OPENCL_DISK_CACHE");
  if (env && (!strcmp(env, "0") || !strcmp(env, "1"))) return env[0] == '1';
  return !platform || !strstr(platform, "Portable Computing Language");
}

const char *rg__cl_cache_dir(char *buf, size_t len) {
  const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  if (xdg && xdg[0])
    snprintf(buf, len, "%s/ridge/opencl", xdg);
  else if (home && home[0])
    snprintf(buf, len, "%s/.cache/ridge/opencl", home);
  else
    buf[0] = 0;
  return buf;
}

rg_status_t rg__cl_cache_path(rg__cl_context_t *cx, rg__cl_prog_t p, const char *cache_dir,
                              char *buf, size_t len) {
  const rg_cl_source_t *common, *body;
  RG_RETURN_IF_ERROR(sources(p, &common, &body));
  char opts[1024];
  build_options(cx, opts, sizeof(opts));
  const char *parts[] = {"ridge opencl cache 1", cx->name, cx->driver_version, cx->device_version,
                         cx->platform_version,   opts,     common->text,       body->text};
  XXH3_state_t *st = XXH3_createState();
  if (!st) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory hashing a program");
  XXH3_64bits_reset(st);
  for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++)
    XXH3_64bits_update(st, parts[i], strlen(parts[i]) + 1);  // the NUL separates the parts
  unsigned long long key = (unsigned long long)XXH3_64bits_digest(st);
  XXH3_freeState(st);
  snprintf(buf, len, "%s/%s-%016llx.bin", cache_dir, program_files[p], key);
  return NULL;
}

// mkdir -p; an existing directory is fine.
static int make_dirs(const char *path) {
  char tmp[1024];
  snprintf(tmp, sizeof(tmp), "%s", path);
  for (char *c = tmp + 1; *c; c++) {
    if (*c != '/') continue;
    *c = 0;
    if (mkdir(tmp, 0755) && errno != EEXIST) return -1;
    *c = '/';
  }
  return mkdir(tmp, 0755) && errno != EEXIST ? -1 : 0;
}

static unsigned char *read_file(const char *path, size_t *out_len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  unsigned char *buf = NULL;
  long n = -1;
  if (!fseek(f, 0, SEEK_END)) n = ftell(f);
  if (n > 0 && !fseek(f, 0, SEEK_SET)) buf = malloc((size_t)n);
  if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
    free(buf);
    buf = NULL;
  }
  fclose(f);
  *out_len = buf ? (size_t)n : 0;
  return buf;
}

// Loads the binary at path and builds it; NULL program when there is none
// or it does not load (the caller builds from source then).
static rg_cl_program load_binary(const rg_cl_syms_t *cl, rg__cl_context_t *cx, const char *path,
                                 const char *opts) {
  size_t len = 0;
  unsigned char *bin = read_file(path, &len);
  if (!bin) return NULL;
  rg_cl_int bin_status = RG_CL_SUCCESS, err = RG_CL_SUCCESS;
  const unsigned char *bins[1] = {bin};
  rg_cl_program prog =
      cl->clCreateProgramWithBinary(cx->ctx, 1, &cx->id, &len, bins, &bin_status, &err);
  free(bin);
  if (prog && (err != RG_CL_SUCCESS || bin_status != RG_CL_SUCCESS ||
               cl->clBuildProgram(prog, 1, &cx->id, opts, NULL, NULL) != RG_CL_SUCCESS)) {
    (void)cl->clReleaseProgram(prog);
    prog = NULL;
  }
  return prog;
}

// Writes prog's binary to path (best effort: a cache that cannot be written
// only costs the next process a compile).
static void save_binary(const rg_cl_syms_t *cl, rg_cl_program prog, const char *dir,
                        const char *path) {
  size_t len = 0;
  if (cl->clGetProgramInfo(prog, RG_CL_PROGRAM_BINARY_SIZES, sizeof(len), &len, NULL) || len == 0)
    return;
  unsigned char *bin = malloc(len);
  unsigned char *bins[1] = {bin};
  char tmp[1100];
  snprintf(tmp, sizeof(tmp), "%s.%ld.tmp", path, (long)getpid());
  FILE *f = NULL;
  if (bin && !cl->clGetProgramInfo(prog, RG_CL_PROGRAM_BINARIES, sizeof(bins), bins, NULL) &&
      !make_dirs(dir) && (f = fopen(tmp, "wb"))) {
    int ok = fwrite(bin, 1, len, f) == len;
    ok = !fclose(f) && ok;
    if (!ok || rename(tmp, path)) remove(tmp);
  }
  free(bin);
}

static rg_status_t build_log(const rg_cl_syms_t *cl, rg__cl_context_t *cx, rg_cl_program prog,
                             rg_status_t s, const char *file) {
  char log[2048] = "";
  size_t n = 0;
  if (!cl->clGetProgramBuildInfo(prog, cx->id, RG_CL_PROGRAM_BUILD_LOG, sizeof(log) - 1, log, &n))
    log[n < sizeof(log) ? n : sizeof(log) - 1] = 0;
  else
    log[0] = 0;
  return rg_status_wrap(s, "building ops/opencl/%s.cl for %s%s%s", file, cx->name,
                        log[0] ? "; the compiler said:\n" : "", log);
}

rg_status_t rg__cl_program_build(const rg_cl_syms_t *cl, rg__cl_context_t *cx, rg__cl_prog_t p,
                                 const char *cache_dir, rg_cl_program *out,
                                 rg__cl_origin_t *origin) {
  *out = NULL;
  const rg_cl_source_t *common, *body;
  RG_RETURN_IF_ERROR(sources(p, &common, &body));
  char opts[1024], path[1024] = "";
  build_options(cx, opts, sizeof(opts));
  if (cache_dir && cache_dir[0]) {
    RG_RETURN_IF_ERROR(rg__cl_cache_path(cx, p, cache_dir, path, sizeof(path)));
    *out = load_binary(cl, cx, path, opts);
    if (*out) {
      if (origin) *origin = RG__CL_FROM_DISK;
      return NULL;
    }
  }
  const char *texts[2] = {common->text, body->text};
  size_t lens[2] = {common->len, body->len};
  rg_cl_int err = RG_CL_SUCCESS;
  rg_cl_program prog = cl->clCreateProgramWithSource(cx->ctx, 2, texts, lens, &err);
  rg_status_t s = rg__cl_status(err, "clCreateProgramWithSource");
  if (s) return rg_status_wrap(s, "ops/opencl/%s.cl for %s", body->name, cx->name);
  s = RG_CL_CALL(cl, clBuildProgram, prog, 1, &cx->id, opts, NULL, NULL);
  if (s) {
    s = build_log(cl, cx, prog, s, body->name);
    (void)cl->clReleaseProgram(prog);
    return s;
  }
  if (path[0]) save_binary(cl, prog, cache_dir, path);
  if (origin) *origin = RG__CL_FROM_SOURCE;
  *out = prog;
  return NULL;
}

rg_status_t rg__cl_program(rg__cl_device_t *d, rg__cl_prog_t p, rg_cl_program *out,
                           rg__cl_origin_t *origin) {
  rg__cl_context_t *cx = d->cx;
  rg_status_t s = NULL;
  pthread_mutex_lock(&cx->mu);
  if (cx->programs[p]) {
    if (origin) *origin = RG__CL_FROM_MEMORY;
  } else {
    char dir[900];
    double t0 = rg_clock_now();
    s = rg__cl_program_build(d->cl, cx, p, cx->disk_cache ? rg__cl_cache_dir(dir, sizeof(dir)) : "",
                             &cx->programs[p], &cx->origin[p]);
    cx->build_seconds[p] = rg_clock_now() - t0;
    if (origin) *origin = cx->origin[p];
  }
  *out = cx->programs[p];
  pthread_mutex_unlock(&cx->mu);
  return s ? rg_status_wrap(s, "on %s", d->base.label) : NULL;
}

// ----- Kernels and launches ----------------------------------------------------------

rg_status_t rg__cl_kernel(rg__cl_queue_t *q, rg__cl_kernel_id_t k, rg_cl_kernel *out) {
  if (!q->kernels[k]) {
    rg__cl_device_t *d = (rg__cl_device_t *)q->base.device;
    rg_cl_program prog;
    RG_RETURN_IF_ERROR(rg__cl_program(d, kernel_info[k].prog, &prog, NULL));
    rg_cl_int err = RG_CL_SUCCESS;
    q->kernels[k] = d->cl->clCreateKernel(prog, kernel_info[k].name, &err);
    rg_status_t s = rg__cl_status(err, "clCreateKernel");
    if (s) {
      q->kernels[k] = NULL;
      return rg_status_wrap(s, "kernel %s on %s", kernel_info[k].name, d->base.label);
    }
  }
  *out = q->kernels[k];
  return NULL;
}

rg_status_t rg__cl_args_begin(rg__cl_queue_t *q, rg__cl_kernel_id_t id, rg__cl_args_t *a) {
  *a = (rg__cl_args_t){((rg__cl_device_t *)q->base.device)->cl, NULL, id, 0, NULL};
  return rg__cl_kernel(q, id, &a->k);
}

static void set(rg__cl_args_t *a, size_t size, const void *v) {
  if (!a->err) {
    rg_status_t s = RG_CL_CALL(a->cl, clSetKernelArg, a->k, a->n, size, v);
    if (s)
      a->err =
          rg_status_wrap(s, "argument %u of kernel %s", (unsigned)a->n, kernel_info[a->id].name);
  }
  a->n++;
}

void rg__cl_arg_mem(rg__cl_args_t *a, rg_cl_mem m) {
  set(a, sizeof(m), m ? &m : NULL);
}

void rg__cl_arg_ref(rg__cl_args_t *a, const rg_ref_t *r) {
  rg__cl_arg_mem(a, r->buf ? ((rg__cl_buffer_t *)r->buf)->mem : NULL);
  rg__cl_arg_long(a, r->buf ? (int64_t)r->offset : 0);
}

void rg__cl_arg_int(rg__cl_args_t *a, int64_t v) {
  int32_t i = (int32_t)v;
  set(a, sizeof(i), &i);
}

void rg__cl_arg_long(rg__cl_args_t *a, int64_t v) {
  uint64_t u = (uint64_t)v;
  set(a, sizeof(u), &u);
}

void rg__cl_arg_float(rg__cl_args_t *a, float v) {
  set(a, sizeof(v), &v);
}

void rg__cl_arg_local(rg__cl_args_t *a, size_t bytes) {
  set(a, bytes, NULL);
}

rg_status_t rg__cl_launch(rg__cl_queue_t *q, rg__cl_args_t *a, rg_cl_uint dims,
                          const size_t *global, const size_t *local) {
  if (a->err) return a->err;
  rg_status_t s = RG_CL_CALL(a->cl, clEnqueueNDRangeKernel, q->q, a->k, dims, NULL, global, local,
                             0, NULL, NULL);
  return s ? rg_status_wrap(s, "kernel %s over (%zu, %zu, %zu)", kernel_info[a->id].name, global[0],
                            dims > 1 ? global[1] : 1, dims > 2 ? global[2] : 1)
           : NULL;
}
