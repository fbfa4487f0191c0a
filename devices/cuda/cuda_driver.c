// devices/cuda/cuda_driver.c — the cuda driver: loads libcuda.so.1 with
// dlopen, initialises it, and lists NVIDIA GPUs with their memory, SM count,
// compute capability and the catalog class each most likely is.
//
// Absence is a result, not an error: no libcuda.so.1 (no NVIDIA driver), a
// stub library (the toolkit without a driver), no device, or a driver older
// than the library's API all come back as the reason ridge prints.
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "devices/backend.h"
#include "devices/cuda/cuda_api.h"
#include "devices/cuda/cuda_status.h"

// ----- Results -----------------------------------------------------------------

// Names and meanings for results an old driver's cuGetErrorName may not know,
// and for when the library is missing altogether.
static const rg__vendor_code_t cu_codes[] = {
    {RG_CU_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {RG_CU_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {RG_CU_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {RG_CU_ERROR_STUB_LIBRARY, "CUDA_ERROR_STUB_LIBRARY",
     "libcuda.so.1 is the toolkit's stub, not a driver"},
    {RG_CU_ERROR_CALL_REQUIRES_NEWER_DRIVER, "CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER",
     "the installed NVIDIA driver is older than this call needs"},
    {RG_CU_ERROR_DEVICE_UNAVAILABLE, "CUDA_ERROR_DEVICE_UNAVAILABLE",
     "the device is busy or unavailable"},
    {RG_CU_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {RG_CU_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {RG_CU_ERROR_OPERATING_SYSTEM, "CUDA_ERROR_OPERATING_SYSTEM", "OS call failed"},
    {RG_CU_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {RG_CU_ERROR_NO_BINARY_FOR_GPU, "CUDA_ERROR_NO_BINARY_FOR_GPU",
     "no kernel image is available for execution on the device"},
    {RG_CU_ERROR_INVALID_PTX, "CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"},
    {RG_CU_ERROR_UNSUPPORTED_PTX_VERSION, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
     "the PTX was compiled by a toolkit newer than the driver"},
    {RG_CU_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {RG_CU_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {RG_CU_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS",
     "an illegal memory access was encountered"},
    {RG_CU_ERROR_LAUNCH_OUT_OF_RESOURCES, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
     "too many resources requested for launch"},
    {RG_CU_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {RG_CU_ERROR_SYSTEM_NOT_READY, "CUDA_ERROR_SYSTEM_NOT_READY",
     "system not yet initialized (is the fabric manager running?)"},
    {RG_CU_ERROR_SYSTEM_DRIVER_MISMATCH, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
     "the kernel driver and libcuda.so.1 versions differ"},
    {RG_CU_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE, "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
     "forward compatibility is not supported on this device"},
    {RG_CU_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

rg_status_t rg__cuda_status(const rg_cuda_syms_t *cu, rg_cu_result_t r, const char *call) {
  if (r == RG_CU_SUCCESS) return NULL;
  const rg__vendor_code_t *known =
      rg__vendor_code_find(cu_codes, sizeof(cu_codes) / sizeof(cu_codes[0]), (long)r);
  const char *name = known ? known->name : NULL, *text = known ? known->text : NULL;
  const char *lib_name = NULL, *lib_text = NULL;
  if (cu && cu->cuGetErrorName && cu->cuGetErrorName(r, &lib_name) == RG_CU_SUCCESS && lib_name)
    name = lib_name;
  if (cu && cu->cuGetErrorString && cu->cuGetErrorString(r, &lib_text) == RG_CU_SUCCESS && lib_text)
    text = lib_text;
  rg_code_t code = RG_INTERNAL;
  switch (r) {
    case RG_CU_ERROR_OUT_OF_MEMORY:
      code = RG_OUT_OF_MEMORY;
      break;
    case RG_CU_ERROR_INVALID_VALUE:
      code = RG_INVALID_ARGUMENT;
      break;
    case RG_CU_ERROR_NOT_INITIALIZED:
    case RG_CU_ERROR_STUB_LIBRARY:
    case RG_CU_ERROR_CALL_REQUIRES_NEWER_DRIVER:
    case RG_CU_ERROR_DEVICE_UNAVAILABLE:
    case RG_CU_ERROR_NO_DEVICE:
    case RG_CU_ERROR_SYSTEM_NOT_READY:
    case RG_CU_ERROR_SYSTEM_DRIVER_MISMATCH:
    case RG_CU_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE:
      code = RG_UNAVAILABLE;
      break;
    default:
      break;
  }
  return rg_status_make(code, "%s failed: %s (%u)%s%s", call, name ? name : "CUDA error", r,
                        text ? ": " : "", text ? text : "");
}

// ----- Loading -----------------------------------------------------------------

static struct {
  pthread_mutex_t mu;
  int loaded;
  rg_cuda_syms_t syms;
} cuda = {.mu = PTHREAD_MUTEX_INITIALIZER};

// Binds every symbol; a missing required one is the reason the driver is
// unusable (a driver too old for the calls ridge makes).
static rg_status_t bind_symbols(rg_cuda_syms_t *s) {
#define RG_REQ_(field, sym, ret, params)                                                          \
  s->field = (ret(*) params)dlsym(s->lib, sym);                                                   \
  if (!s->field)                                                                                  \
    return rg_status_make(RG_UNAVAILABLE, "%s has no %s: the NVIDIA driver is too old for ridge", \
                          s->lib_name, sym);
#define RG_OPT_(field, sym, ret, params) s->field = (ret(*) params)dlsym(s->lib, sym);
  RG_CUDA_SYMBOLS(RG_REQ_, RG_OPT_)
#undef RG_REQ_
#undef RG_OPT_
  return NULL;
}

rg_status_t rg__cuda_load(const rg_cuda_syms_t **out) {
  static const char *const names[] = {"libcuda.so.1", "libcuda.so"};
  rg_status_t s = NULL;
  pthread_mutex_lock(&cuda.mu);
  // A failed load is tried again next time (it costs a file lookup); a
  // loaded library stays for the life of the process.
  if (!cuda.loaded) {
    rg_cuda_syms_t t = {0};
    s = rg__dynlib_open("RIDGE_CUDA_LIBRARY", names, sizeof(names) / sizeof(names[0]),
                        "no NVIDIA driver is installed", &t.lib, &t.lib_name);
    if (!s) s = bind_symbols(&t);
    if (!s) s = RG_CUDA_CALL(&t, cuInit, 0);
    if (!s) s = RG_CUDA_CALL(&t, cuDriverGetVersion, &t.driver_version);
    if (s && t.lib) dlclose(t.lib);
    if (!s) {
      cuda.syms = t;
      cuda.loaded = 1;
    }
  }
  pthread_mutex_unlock(&cuda.mu);
  *out = s ? NULL : &cuda.syms;
  return s;
}

// ----- Probing -----------------------------------------------------------------

// What a GPU of compute capability major.minor runs natively, beyond f32.
static void cc_features(int major, int minor, char *out, size_t cap) {
  int cc = major * 10 + minor;
  snprintf(out, cap, "sm_%d%d%s%s%s%s", major, minor, cc >= 53 ? " f16" : "",
           cc >= 80 ? " bf16" : "", cc >= 89 ? " fp8" : "", cc >= 100 ? " fp4" : "");
}

static rg_status_t probe_one(const rg_cuda_syms_t *cu, int ordinal, rg_device_info_t *info) {
  rg_cu_device_t dev;
  RG_CUDA_CHECK(cu, cuDeviceGet, &dev, ordinal);
  char name[sizeof(info->name)] = "";
  RG_CUDA_CHECK(cu, cuDeviceGetName, name, (int)sizeof(name) - 1, dev);
  size_t mem = 0;
  RG_CUDA_CHECK(cu, cuDeviceTotalMem, &mem, dev);
  int sms = 0, major = 0, minor = 0;
  RG_CUDA_CHECK(cu, cuDeviceGetAttribute, &sms, RG_CU_ATTR_MULTIPROCESSOR_COUNT, dev);
  RG_CUDA_CHECK(cu, cuDeviceGetAttribute, &major, RG_CU_ATTR_COMPUTE_CAPABILITY_MAJOR, dev);
  RG_CUDA_CHECK(cu, cuDeviceGetAttribute, &minor, RG_CU_ATTR_COMPUTE_CAPABILITY_MINOR, dev);
  memset(info, 0, sizeof(*info));
  rg__copy(info->name, sizeof(info->name), name);
  info->memory = mem;
  info->compute_units = sms;
  cc_features(major, minor, info->features, sizeof(info->features));
  rg__copy(info->class_hint, sizeof(info->class_hint), rg__gpu_class_hint(name));
  snprintf(info->detail, sizeof(info->detail),
           "compute capability %d.%d; CUDA driver %d.%d (%s); compute units are SMs", major, minor,
           cu->driver_version / 1000, cu->driver_version % 1000 / 10, cu->lib_name);
  return NULL;
}

static rg_status_t cuda_probe(rg_driver_t *drv, rg_device_info_t *out, size_t cap, size_t *out_n) {
  const rg_cuda_syms_t *cu;
  RG_RETURN_IF_ERROR(rg__cuda_load(&cu));
  int n = 0;
  RG_CUDA_CHECK(cu, cuDeviceGetCount, &n);
  *out_n = n > 0 ? (size_t)n : 0;
  for (int i = 0; i < n && (size_t)i < cap; i++) RG_RETURN_IF_ERROR(probe_one(cu, i, &out[i]));
  return NULL;
}

static const rg_driver_vtable_t cuda_driver_vt = {
    .probe = cuda_probe,
    .open = rg__cuda_device_open,
};

static rg_driver_t cuda_driver = {
    .vt = &cuda_driver_vt,
    .name = "cuda",
    .description = "NVIDIA GPUs through the CUDA driver API (libcuda.so.1, loaded at run time)",
};

rg_driver_t *rg__cuda_driver(void) {
  return &cuda_driver;
}
