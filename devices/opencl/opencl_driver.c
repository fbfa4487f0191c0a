// devices/opencl/opencl_driver.c — the opencl driver: opens the OpenCL ICD
// loader with dlopen and lists the devices of every installed platform
// (GPUs, accelerators, and CPUs where an implementation such as PoCL
// offers one), numbered across platforms in the loader's order. Opening one
// is opencl_device.c; its ops are opencl_ops.c.
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "base/build.h"
#include "devices/backend.h"
#include "devices/opencl/opencl_api.h"
#include "devices/opencl/opencl_impl.h"

#define MAX_CL_PLATFORMS 16

static const rg__vendor_code_t cl_codes[] = {
#define RG_X_(name, value, text) {RG_CL_##name, "CL_" #name, text},
    RG_CL_ERROR_MAP(RG_X_)
#undef RG_X_
};

const char *rg__cl_error_name(rg_cl_int r) {
  if (r == RG_CL_SUCCESS) return "CL_SUCCESS";
  const rg__vendor_code_t *known =
      rg__vendor_code_find(cl_codes, sizeof(cl_codes) / sizeof(cl_codes[0]), (long)r);
  return known ? known->name : "CL error";
}

rg_status_t rg__cl_status(rg_cl_int r, const char *call) {
  if (r == RG_CL_SUCCESS) return NULL;
  const rg__vendor_code_t *known =
      rg__vendor_code_find(cl_codes, sizeof(cl_codes) / sizeof(cl_codes[0]), (long)r);
  rg_code_t code;
  switch (r) {
    case RG_CL_OUT_OF_HOST_MEMORY:
    case RG_CL_OUT_OF_RESOURCES:
    case RG_CL_MEM_OBJECT_ALLOCATION_FAILURE:
      code = RG_OUT_OF_MEMORY;
      break;
    case RG_CL_PLATFORM_NOT_FOUND_KHR:
    case RG_CL_DEVICE_NOT_FOUND:
    case RG_CL_DEVICE_NOT_AVAILABLE:
    case RG_CL_COMPILER_NOT_AVAILABLE:
      code = RG_UNAVAILABLE;
      break;
    default:
      code = RG_INTERNAL;
  }
  return rg_status_make(code, "%s failed: %s (%d)%s%s", call, known ? known->name : "CL error",
                        (int)r, known ? ": " : "", known ? known->text : "");
}

// PoCL, the OpenCL platform on machines without an accelerator, compiles
// kernels with LLVM, which leaves memory allocated at exit on purpose; under
// LeakSanitizer (the sanitizer test build) that would fail every process
// that built a kernel. ridge is C, so what was allocated by LLVM, clang or
// through the C++ runtime is not ridge's; only that is suppressed. OpenCL
// objects ridge forgets to release (allocated by the ICD loader or PoCL,
// which are C) are still reported. The sanitizer runtime calls this hook.
#if RG_BUILD_SANITIZED
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) {
  return "leak:libstdc++.so\nleak:libLLVM\nleak:libclang\n";
}
// And not to list those suppressions at every exit (LSAN_OPTIONS still wins).
const char *__lsan_default_options(void);
const char *__lsan_default_options(void) {
  return "print_suppressions=0";
}
#endif

static struct {
  pthread_mutex_t mu;
  int loaded;
  rg_cl_syms_t syms;
} cl = {.mu = PTHREAD_MUTEX_INITIALIZER};

static rg_status_t bind_symbols(rg_cl_syms_t *s) {
#define RG_REQ_(field, sym, ret, params)                                                      \
  s->field = (ret(*) params)dlsym(s->lib, sym);                                               \
  if (!s->field)                                                                              \
    return rg_status_make(RG_UNAVAILABLE, "%s has no %s: not an OpenCL loader ridge can use", \
                          s->lib_name, sym);
  RG_CL_SYMBOLS(RG_REQ_, RG_REQ_)
#undef RG_REQ_
  return NULL;
}

rg_status_t rg__cl_load(const rg_cl_syms_t **out) {
  static const char *const names[] = {"libOpenCL.so.1", "libOpenCL.so"};
  rg_status_t s = NULL;
  pthread_mutex_lock(&cl.mu);
  if (!cl.loaded) {
    rg_cl_syms_t t = {0};
    s = rg__dynlib_open("RIDGE_OPENCL_LIBRARY", names, sizeof(names) / sizeof(names[0]),
                        "no OpenCL ICD loader is installed", &t.lib, &t.lib_name);
    if (!s) s = bind_symbols(&t);
    if (s && t.lib) dlclose(t.lib);
    if (!s) {
      cl.syms = t;
      cl.loaded = 1;
    }
  }
  pthread_mutex_unlock(&cl.mu);
  *out = s ? NULL : &cl.syms;
  return s;
}

// A string query into buf, always terminated ("" when it fails).
static void device_string(const rg_cl_syms_t *c, rg_cl_device_id d, rg_cl_uint what, char *buf,
                          size_t len) {
  buf[0] = 0;
  if (c->clGetDeviceInfo(d, what, len - 1, buf, NULL) != RG_CL_SUCCESS) buf[0] = 0;
  buf[len - 1] = 0;
}

static void append(char *out, size_t cap, const char *word) {
  size_t used = strlen(out);
  snprintf(out + used, cap - used, "%s%s", used ? " " : "", word);
}

static rg_status_t probe_one(const rg_cl_syms_t *c, rg_cl_device_id d, const char *platform,
                             rg_device_info_t *info) {
  rg_cl_ulong type = 0, mem = 0;
  rg_cl_uint cus = 0;
  RG_CL_CHECK(c, clGetDeviceInfo, d, RG_CL_DEVICE_TYPE, sizeof(type), &type, NULL);
  RG_CL_CHECK(c, clGetDeviceInfo, d, RG_CL_DEVICE_GLOBAL_MEM_SIZE, sizeof(mem), &mem, NULL);
  RG_CL_CHECK(c, clGetDeviceInfo, d, RG_CL_DEVICE_MAX_COMPUTE_UNITS, sizeof(cus), &cus, NULL);
  char version[128], ext[4096];
  memset(info, 0, sizeof(*info));
  device_string(c, d, RG_CL_DEVICE_NAME, info->name, sizeof(info->name));
  device_string(c, d, RG_CL_DEVICE_VERSION, version, sizeof(version));
  device_string(c, d, RG_CL_DEVICE_EXTENSIONS, ext, sizeof(ext));
  info->memory = mem;
  info->compute_units = (int)cus;
  int is_cpu = (type & RG_CL_DEVICE_TYPE_CPU) != 0;
  append(info->features, sizeof(info->features),
         is_cpu                                   ? "cpu"
         : (type & RG_CL_DEVICE_TYPE_GPU)         ? "gpu"
         : (type & RG_CL_DEVICE_TYPE_ACCELERATOR) ? "accelerator"
                                                  : "device");
  static const char *const exts[][2] = {{"cl_khr_fp16", "fp16"},
                                        {"cl_khr_fp64", "fp64"},
                                        {"cl_khr_subgroups", "subgroups"},
                                        {"cl_khr_integer_dot_product", "int8_dot"},
                                        {"cl_intel_subgroup_matrix_multiply_accumulate", "dpas"}};
  for (size_t i = 0; i < sizeof(exts) / sizeof(exts[0]); i++)
    if (strstr(ext, exts[i][0])) append(info->features, sizeof(info->features), exts[i][1]);
  // An OpenCL CPU device is this machine's processors seen through another
  // runtime: the same roofline as the cpu driver's device.
  rg__copy(info->class_hint, sizeof(info->class_hint),
           is_cpu ? "local-cpu" : rg__gpu_class_hint(info->name));
  snprintf(info->detail, sizeof(info->detail), "%s; platform %s (%s)%s",
           version[0] ? version : "OpenCL", platform, c->lib_name,
           is_cpu ? "; the host CPU, as the cpu driver also shows it" : "");
  return NULL;
}
rg_status_t rg__cl_enumerate(const rg_cl_syms_t *c, rg_cl_device_id *devs, rg_cl_platform_id *plats,
                             size_t cap, size_t *out_n) {
  *out_n = 0;
  rg_cl_uint n_plat = 0;
  RG_CL_CHECK(c, clGetPlatformIDs, 0, NULL, &n_plat);
  if (n_plat > MAX_CL_PLATFORMS) n_plat = MAX_CL_PLATFORMS;
  rg_cl_platform_id all[MAX_CL_PLATFORMS];
  if (n_plat) RG_CL_CHECK(c, clGetPlatformIDs, n_plat, all, NULL);
  size_t n = 0;
  for (rg_cl_uint p = 0; p < n_plat; p++) {
    rg_cl_uint n_dev = 0;
    rg_cl_int r = c->clGetDeviceIDs(all[p], RG_CL_DEVICE_TYPE_ALL, 0, NULL, &n_dev);
    if (r == RG_CL_DEVICE_NOT_FOUND || n_dev == 0) continue;  // a platform with nothing on it
    RG_RETURN_IF_ERROR(rg__cl_status(r, "clGetDeviceIDs"));
    if (n_dev > RG_DEVICES_MAX) n_dev = RG_DEVICES_MAX;
    rg_cl_device_id found[RG_DEVICES_MAX];
    RG_CL_CHECK(c, clGetDeviceIDs, all[p], RG_CL_DEVICE_TYPE_ALL, n_dev, found, NULL);
    for (rg_cl_uint i = 0; i < n_dev; i++, n++)
      if (n < cap) {
        devs[n] = found[i];
        plats[n] = all[p];
      }
  }
  *out_n = n;
  return NULL;
}

static rg_status_t cl_probe(rg_driver_t *drv, rg_device_info_t *out, size_t cap, size_t *out_n) {
  const rg_cl_syms_t *c;
  RG_RETURN_IF_ERROR(rg__cl_load(&c));
  rg_cl_device_id devs[RG_DEVICES_MAX];
  rg_cl_platform_id plats[RG_DEVICES_MAX];
  size_t n = 0;
  RG_RETURN_IF_ERROR(rg__cl_enumerate(c, devs, plats, RG_DEVICES_MAX, &n));
  for (size_t i = 0; i < n && i < cap && i < RG_DEVICES_MAX; i++) {
    char pname[128] = "";
    if (c->clGetPlatformInfo(plats[i], RG_CL_PLATFORM_NAME, sizeof(pname) - 1, pname, NULL))
      pname[0] = 0;
    pname[sizeof(pname) - 1] = 0;
    RG_RETURN_IF_ERROR(probe_one(c, devs[i], pname[0] ? pname : "?", &out[i]));
  }
  *out_n = n;
  return NULL;
}

static const rg_driver_vtable_t cl_driver_vt = {
    .probe = cl_probe,
    .open = rg__cl_device_open,
};

static rg_driver_t cl_driver = {
    .vt = &cl_driver_vt,
    .name = "opencl",
    .description =
        "any OpenCL platform through the ICD loader (libOpenCL.so.1, loaded at run time)",
};

rg_driver_t *rg__opencl_driver(void) {
  return &cl_driver;
}
