// devices/hip/hip_driver.c — the hip driver: loads libamdhip64.so with
// dlopen and lists AMD GPUs with their memory and compute units.
//
// Opening a device is hip_device.c: buffers, streams, and ridge's GPU
// kernels (ops/cuda, built by hipcc where it was found at build time).
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "devices/backend.h"
#include "devices/hip/hip_api.h"

static const rg__vendor_code_t hip_codes[] = {
    {RG_HIP_ERROR_INVALID_VALUE, "hipErrorInvalidValue", "invalid argument"},
    {RG_HIP_ERROR_OUT_OF_MEMORY, "hipErrorOutOfMemory", "out of memory"},
    {RG_HIP_ERROR_NOT_INITIALIZED, "hipErrorNotInitialized", "initialization error"},
    {RG_HIP_ERROR_INSUFFICIENT_DRIVER, "hipErrorInsufficientDriver",
     "the installed amdgpu driver is older than this library needs"},
    {RG_HIP_ERROR_NO_DEVICE, "hipErrorNoDevice", "no ROCm-capable device is detected"},
    {RG_HIP_ERROR_INVALID_DEVICE, "hipErrorInvalidDevice", "invalid device ordinal"},
    {RG_HIP_ERROR_NOT_FOUND, "hipErrorNotFound", "named symbol not found"},
    {RG_HIP_ERROR_NOT_READY, "hipErrorNotReady", "device not ready"},
    {RG_HIP_ERROR_NOT_SUPPORTED, "hipErrorNotSupported", "operation not supported"},
    {RG_HIP_ERROR_UNKNOWN, "hipErrorUnknown", "unknown error"},
};

rg_status_t rg__hip_status(const rg_hip_syms_t *hip, rg_hip_error_t r, const char *call) {
  if (r == RG_HIP_SUCCESS) return NULL;
  const rg__vendor_code_t *known =
      rg__vendor_code_find(hip_codes, sizeof(hip_codes) / sizeof(hip_codes[0]), (long)r);
  const char *name = known ? known->name : "hip error", *text = known ? known->text : NULL;
  if (hip && hip->hipGetErrorName && hip->hipGetErrorName(r)) name = hip->hipGetErrorName(r);
  if (hip && hip->hipGetErrorString && hip->hipGetErrorString(r)) text = hip->hipGetErrorString(r);
  rg_code_t code = r == RG_HIP_ERROR_OUT_OF_MEMORY   ? RG_OUT_OF_MEMORY
                   : r == RG_HIP_ERROR_INVALID_VALUE ? RG_INVALID_ARGUMENT
                   : r == RG_HIP_ERROR_NO_DEVICE || r == RG_HIP_ERROR_INSUFFICIENT_DRIVER ||
                           r == RG_HIP_ERROR_NOT_INITIALIZED
                       ? RG_UNAVAILABLE
                       : RG_INTERNAL;
  return rg_status_make(code, "%s failed: %s (%d)%s%s", call, name, r, text ? ": " : "",
                        text ? text : "");
}

static struct {
  pthread_mutex_t mu;
  int loaded;
  rg_hip_syms_t syms;
} hip = {.mu = PTHREAD_MUTEX_INITIALIZER};

static rg_status_t bind_symbols(rg_hip_syms_t *s) {
#define RG_REQ_(field, sym, ret, params)                                                         \
  s->field = (ret(*) params)dlsym(s->lib, sym);                                                  \
  if (!s->field)                                                                                 \
    return rg_status_make(RG_UNAVAILABLE, "%s has no %s: the ROCm runtime is too old for ridge", \
                          s->lib_name, sym);
#define RG_OPT_(field, sym, ret, params) s->field = (ret(*) params)dlsym(s->lib, sym);
  RG_HIP_SYMBOLS(RG_REQ_, RG_OPT_)
#undef RG_REQ_
#undef RG_OPT_
  return NULL;
}

rg_status_t rg__hip_load(const rg_hip_syms_t **out) {
  static const char *const names[] = {"libamdhip64.so", "libamdhip64.so.7", "libamdhip64.so.6",
                                      "libamdhip64.so.5"};
  rg_status_t s = NULL;
  pthread_mutex_lock(&hip.mu);
  if (!hip.loaded) {
    rg_hip_syms_t t = {0};
    s = rg__dynlib_open("RIDGE_HIP_LIBRARY", names, sizeof(names) / sizeof(names[0]),
                        "the ROCm HIP runtime is not installed", &t.lib, &t.lib_name);
    if (!s) s = bind_symbols(&t);
    if (!s) s = RG_HIP_CALL(&t, hipInit, 0);
    if (!s) s = RG_HIP_CALL(&t, hipDriverGetVersion, &t.driver_version);
    if (s && t.lib) dlclose(t.lib);
    if (!s) {
      hip.syms = t;
      hip.loaded = 1;
    }
  }
  pthread_mutex_unlock(&hip.mu);
  *out = s ? NULL : &hip.syms;
  return s;
}

static rg_status_t probe_one(const rg_hip_syms_t *h, int ordinal, rg_device_info_t *info) {
  rg_hip_device_t dev;
  RG_HIP_CHECK(h, hipDeviceGet, &dev, ordinal);
  char name[sizeof(info->name)] = "";
  RG_HIP_CHECK(h, hipDeviceGetName, name, (int)sizeof(name) - 1, dev);
  size_t mem = 0;
  RG_HIP_CHECK(h, hipDeviceTotalMem, &mem, dev);
  int cus = 0, major = 0, minor = 0;
  RG_HIP_CHECK(h, hipDeviceGetAttribute, &cus, RG_HIP_ATTR_MULTIPROCESSOR_COUNT, dev);
  RG_HIP_CHECK(h, hipDeviceGetAttribute, &major, RG_HIP_ATTR_COMPUTE_CAPABILITY_MAJOR, dev);
  RG_HIP_CHECK(h, hipDeviceGetAttribute, &minor, RG_HIP_ATTR_COMPUTE_CAPABILITY_MINOR, dev);
  memset(info, 0, sizeof(*info));
  rg__copy(info->name, sizeof(info->name), name);
  info->memory = mem;
  info->compute_units = cus;
  rg__copy(info->class_hint, sizeof(info->class_hint), rg__gpu_class_hint(name));
  snprintf(info->detail, sizeof(info->detail),
           "gfx version %d.%d; HIP driver %d (%s); compute units are CUs", major, minor,
           h->driver_version, h->lib_name);
  return NULL;
}

static rg_status_t hip_probe(rg_driver_t *drv, rg_device_info_t *out, size_t cap, size_t *out_n) {
  const rg_hip_syms_t *h;
  RG_RETURN_IF_ERROR(rg__hip_load(&h));
  int n = 0;
  RG_HIP_CHECK(h, hipGetDeviceCount, &n);
  *out_n = n > 0 ? (size_t)n : 0;
  for (int i = 0; i < n && (size_t)i < cap; i++) RG_RETURN_IF_ERROR(probe_one(h, i, &out[i]));
  return NULL;
}

static const rg_driver_vtable_t hip_driver_vt = {
    .probe = hip_probe,
    .open = rg__hip_device_open,
};

static rg_driver_t hip_driver = {
    .vt = &hip_driver_vt,
    .name = "hip",
    .description = "AMD GPUs through the HIP runtime (libamdhip64.so, loaded at run time)",
};

rg_driver_t *rg__hip_driver(void) {
  return &hip_driver;
}
