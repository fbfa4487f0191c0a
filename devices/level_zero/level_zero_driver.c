// devices/level_zero/level_zero_driver.c — the level_zero driver: opens the
// oneAPI Level Zero loader with dlopen and lists the devices its drivers
// report (Intel GPUs, and NPUs where a driver exposes them), with memory
// and execution units.
//
// Opening a device is level_zero_device.c: memory and copies; no kernels.
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "devices/backend.h"
#include "devices/level_zero/level_zero_api.h"

#define MAX_ZE_DRIVERS 8
#define MAX_ZE_MEMORIES 8

static const rg__vendor_code_t ze_codes[] = {
    {RG_ZE_ERROR_DEVICE_LOST, "ZE_RESULT_ERROR_DEVICE_LOST", "device hung, reset or removed"},
    {RG_ZE_ERROR_OUT_OF_HOST_MEMORY, "ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY", "out of host memory"},
    {RG_ZE_ERROR_OUT_OF_DEVICE_MEMORY, "ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY",
     "out of device memory"},
    {RG_ZE_ERROR_DEPENDENCY_UNAVAILABLE, "ZE_RESULT_ERROR_DEPENDENCY_UNAVAILABLE",
     "a library the driver needs is missing"},
    {RG_ZE_ERROR_UNINITIALIZED, "ZE_RESULT_ERROR_UNINITIALIZED",
     "no Level Zero driver initialised (no supported device, or no driver installed)"},
    {RG_ZE_ERROR_UNSUPPORTED_VERSION, "ZE_RESULT_ERROR_UNSUPPORTED_VERSION",
     "unsupported API version"},
    {RG_ZE_ERROR_UNSUPPORTED_FEATURE, "ZE_RESULT_ERROR_UNSUPPORTED_FEATURE", "unsupported feature"},
    {RG_ZE_ERROR_INVALID_ARGUMENT, "ZE_RESULT_ERROR_INVALID_ARGUMENT", "invalid argument"},
    {RG_ZE_ERROR_INVALID_NULL_HANDLE, "ZE_RESULT_ERROR_INVALID_NULL_HANDLE", "null handle"},
    {RG_ZE_ERROR_INVALID_NULL_POINTER, "ZE_RESULT_ERROR_INVALID_NULL_POINTER", "null pointer"},
    {RG_ZE_ERROR_UNKNOWN, "ZE_RESULT_ERROR_UNKNOWN", "unknown error"},
};

rg_status_t rg__ze_status(rg_ze_result_t r, const char *call) {
  if (r == RG_ZE_SUCCESS) return NULL;
  const rg__vendor_code_t *known =
      rg__vendor_code_find(ze_codes, sizeof(ze_codes) / sizeof(ze_codes[0]), (long)r);
  rg_code_t code = r == RG_ZE_ERROR_OUT_OF_HOST_MEMORY || r == RG_ZE_ERROR_OUT_OF_DEVICE_MEMORY
                       ? RG_OUT_OF_MEMORY
                   : r == RG_ZE_ERROR_UNINITIALIZED || r == RG_ZE_ERROR_DEPENDENCY_UNAVAILABLE ||
                           r == RG_ZE_ERROR_DEVICE_LOST || r == RG_ZE_ERROR_UNSUPPORTED_VERSION
                       ? RG_UNAVAILABLE
                       : RG_INTERNAL;
  return rg_status_make(code, "%s failed: %s (0x%08x)%s%s", call,
                        known ? known->name : "Level Zero error", (unsigned)r, known ? ": " : "",
                        known ? known->text : "");
}

static struct {
  pthread_mutex_t mu;
  int loaded;
  rg_ze_syms_t syms;
} ze = {.mu = PTHREAD_MUTEX_INITIALIZER};

static rg_status_t bind_symbols(rg_ze_syms_t *s) {
#define RG_REQ_(field, sym, ret, params)                                                   \
  s->field = (ret(*) params)dlsym(s->lib, sym);                                            \
  if (!s->field)                                                                           \
    return rg_status_make(RG_UNAVAILABLE, "%s has no %s: the loader is too old for ridge", \
                          s->lib_name, sym);
  RG_ZE_SYMBOLS(RG_REQ_, RG_REQ_)
#undef RG_REQ_
  return NULL;
}

rg_status_t rg__ze_load(const rg_ze_syms_t **out) {
  static const char *const names[] = {"libze_loader.so.1", "libze_loader.so"};
  rg_status_t s = NULL;
  pthread_mutex_lock(&ze.mu);
  if (!ze.loaded) {
    rg_ze_syms_t t = {0};
    s = rg__dynlib_open("RIDGE_LEVEL_ZERO_LIBRARY", names, sizeof(names) / sizeof(names[0]),
                        "the oneAPI Level Zero loader is not installed", &t.lib, &t.lib_name);
    if (!s) s = bind_symbols(&t);
    // 0: every kind of device a Level Zero driver offers.
    if (!s) s = RG_ZE_CALL(&t, zeInit, 0);
    if (s && t.lib) dlclose(t.lib);
    if (!s) {
      ze.syms = t;
      ze.loaded = 1;
    }
  }
  pthread_mutex_unlock(&ze.mu);
  *out = s ? NULL : &ze.syms;
  return s;
}

static const char *type_name(uint32_t t) {
  switch (t) {
    case RG_ZE_DEVICE_TYPE_GPU:
      return "gpu";
    case RG_ZE_DEVICE_TYPE_CPU:
      return "cpu";
    case RG_ZE_DEVICE_TYPE_FPGA:
      return "fpga";
    case RG_ZE_DEVICE_TYPE_MCA:
      return "mca";
    case RG_ZE_DEVICE_TYPE_VPU:
      return "npu";
    default:
      return "device";
  }
}

static rg_status_t probe_one(const rg_ze_syms_t *z, rg_ze_device_t dev, int driver_no,
                             rg_device_info_t *info) {
  rg_ze_device_properties_t p;
  memset(&p, 0, sizeof(p));
  p.stype = RG_ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES;
  RG_ZE_CHECK(z, zeDeviceGetProperties, dev, &p);
  uint32_t n_mem = 0;
  RG_ZE_CHECK(z, zeDeviceGetMemoryProperties, dev, &n_mem, NULL);
  if (n_mem > MAX_ZE_MEMORIES) n_mem = MAX_ZE_MEMORIES;
  rg_ze_device_memory_properties_t mem[MAX_ZE_MEMORIES];
  memset(mem, 0, sizeof(mem));
  for (uint32_t i = 0; i < n_mem; i++) mem[i].stype = RG_ZE_STRUCTURE_TYPE_DEVICE_MEMORY_PROPERTIES;
  if (n_mem) RG_ZE_CHECK(z, zeDeviceGetMemoryProperties, dev, &n_mem, mem);
  uint64_t total = 0;
  for (uint32_t i = 0; i < n_mem; i++) total += mem[i].totalSize;
  memset(info, 0, sizeof(*info));
  p.name[sizeof(p.name) - 1] = 0;
  rg__copy(info->name, sizeof(info->name), p.name);
  info->memory = total;
  info->compute_units = (int)(p.numSlices * p.numSubslicesPerSlice * p.numEUsPerSubslice);
  snprintf(info->features, sizeof(info->features), "%s simd%u", type_name(p.type),
           p.physicalEUSimdWidth);
  rg__copy(info->class_hint, sizeof(info->class_hint), rg__gpu_class_hint(p.name));
  snprintf(info->detail, sizeof(info->detail),
           "vendor 0x%04x device 0x%04x; Level Zero driver %d (%s); compute units are EUs",
           p.vendorId, p.deviceId, driver_no, z->lib_name);
  return NULL;
}

static rg_status_t ze_probe(rg_driver_t *drv, rg_device_info_t *out, size_t cap, size_t *out_n) {
  const rg_ze_syms_t *z;
  RG_RETURN_IF_ERROR(rg__ze_load(&z));
  uint32_t n_drv = 0;
  RG_ZE_CHECK(z, zeDriverGet, &n_drv, NULL);
  if (n_drv > MAX_ZE_DRIVERS) n_drv = MAX_ZE_DRIVERS;
  rg_ze_driver_t drivers[MAX_ZE_DRIVERS];
  if (n_drv) RG_ZE_CHECK(z, zeDriverGet, &n_drv, drivers);
  // Devices are numbered across drivers, in the loader's order.
  size_t n = 0;
  for (uint32_t d = 0; d < n_drv; d++) {
    uint32_t n_dev = 0;
    RG_ZE_CHECK(z, zeDeviceGet, drivers[d], &n_dev, NULL);
    if (!n_dev) continue;
    rg_ze_device_t devs[RG_DEVICES_MAX];
    if (n_dev > RG_DEVICES_MAX) n_dev = RG_DEVICES_MAX;
    RG_ZE_CHECK(z, zeDeviceGet, drivers[d], &n_dev, devs);
    for (uint32_t i = 0; i < n_dev; i++, n++)
      if (n < cap) RG_RETURN_IF_ERROR(probe_one(z, devs[i], (int)d, &out[n]));
  }
  *out_n = n;
  return NULL;
}

rg_status_t rg__ze_find_device(const rg_ze_syms_t *z, int index, rg_ze_driver_t *out_driver,
                               rg_ze_device_t *out_dev) {
  uint32_t n_drv = 0;
  RG_ZE_CHECK(z, zeDriverGet, &n_drv, NULL);
  if (n_drv > MAX_ZE_DRIVERS) n_drv = MAX_ZE_DRIVERS;
  rg_ze_driver_t drivers[MAX_ZE_DRIVERS];
  if (n_drv) RG_ZE_CHECK(z, zeDriverGet, &n_drv, drivers);
  int n = 0;
  for (uint32_t d = 0; d < n_drv; d++) {
    uint32_t n_dev = 0;
    RG_ZE_CHECK(z, zeDeviceGet, drivers[d], &n_dev, NULL);
    if (!n_dev) continue;
    rg_ze_device_t devs[RG_DEVICES_MAX];
    if (n_dev > RG_DEVICES_MAX) n_dev = RG_DEVICES_MAX;
    RG_ZE_CHECK(z, zeDeviceGet, drivers[d], &n_dev, devs);
    if (index < n + (int)n_dev) {
      *out_driver = drivers[d];
      *out_dev = devs[index - n];
      return NULL;
    }
    n += (int)n_dev;
  }
  return rg_status_make(RG_NOT_FOUND, "level_zero:%d is gone (the loader now lists %d devices)",
                        index, n);
}

static const rg_driver_vtable_t ze_driver_vt = {
    .probe = ze_probe,
    .open = rg__ze_device_open,
};

static rg_driver_t ze_driver = {
    .vt = &ze_driver_vt,
    .name = "level_zero",
    .description = "Intel GPUs through oneAPI Level Zero (libze_loader.so.1, loaded at run time)",
};

rg_driver_t *rg__level_zero_driver(void) {
  return &ze_driver;
}
