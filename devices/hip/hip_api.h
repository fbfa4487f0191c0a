// devices/hip/hip_api.h — the part of the HIP runtime (libamdhip64.so) the
// hip backend calls, declared here so that ridge builds without ROCm and
// links nothing of AMD's: the library is loaded with dlopen at run time.
//
// Types and constants follow hip/hip_runtime_api.h (ROCm 5 and 6 agree on
// every value used here). Private to devices/hip/.
#ifndef RG_DEVICES_HIP_HIP_API_H
#define RG_DEVICES_HIP_HIP_API_H

#include <stddef.h>

#include "base/status.h"
#include "devices/backend.h"

typedef int rg_hip_error_t;   // hipError_t
typedef int rg_hip_device_t;  // hipDevice_t

enum {
  RG_HIP_SUCCESS = 0,
  RG_HIP_ERROR_INVALID_VALUE = 1,
  RG_HIP_ERROR_OUT_OF_MEMORY = 2,
  RG_HIP_ERROR_NOT_INITIALIZED = 3,
  RG_HIP_ERROR_INSUFFICIENT_DRIVER = 35,
  RG_HIP_ERROR_NO_DEVICE = 100,
  RG_HIP_ERROR_INVALID_DEVICE = 101,
  RG_HIP_ERROR_NOT_SUPPORTED = 801,
  RG_HIP_ERROR_UNKNOWN = 999,
};

// hipDeviceAttribute_t positions (the CUDA-compatible block, counted from 0).
enum {
  RG_HIP_ATTR_COMPUTE_CAPABILITY_MAJOR = 23,
  RG_HIP_ATTR_COMPUTE_CAPABILITY_MINOR = 61,
  RG_HIP_ATTR_MULTIPROCESSOR_COUNT = 63,
};

// REQ(field, exported symbol, return type, parameters); OPT may be missing.
#define RG_HIP_SYMBOLS(REQ, OPT)                                                            \
  REQ(hipInit, "hipInit", rg_hip_error_t, (unsigned int))                                   \
  REQ(hipDriverGetVersion, "hipDriverGetVersion", rg_hip_error_t, (int *))                  \
  REQ(hipGetDeviceCount, "hipGetDeviceCount", rg_hip_error_t, (int *))                      \
  REQ(hipDeviceGet, "hipDeviceGet", rg_hip_error_t, (rg_hip_device_t *, int))               \
  REQ(hipDeviceGetName, "hipDeviceGetName", rg_hip_error_t, (char *, int, rg_hip_device_t)) \
  REQ(hipDeviceTotalMem, "hipDeviceTotalMem", rg_hip_error_t, (size_t *, rg_hip_device_t))  \
  REQ(hipDeviceGetAttribute, "hipDeviceGetAttribute", rg_hip_error_t, (int *, int, int))    \
  OPT(hipGetErrorName, "hipGetErrorName", const char *, (rg_hip_error_t))                   \
  OPT(hipGetErrorString, "hipGetErrorString", const char *, (rg_hip_error_t))

typedef struct {
  void *lib;
  const char *lib_name;
  int driver_version;
#define RG_X_(field, sym, ret, params) ret(*field) params;
  RG_HIP_SYMBOLS(RG_X_, RG_X_)
#undef RG_X_
} rg_hip_syms_t;

// NULL for success; else "<call> failed: hipErrorNoDevice (100): <text>".
RG_MUST_USE rg_status_t rg__hip_status(const rg_hip_syms_t *hip, rg_hip_error_t r,
                                       const char *call);
#define RG_HIP_CALL(hip, fn, ...) rg__hip_status((hip), (hip)->fn(__VA_ARGS__), #fn)
#define RG_HIP_CHECK(hip, fn, ...) RG_RETURN_IF_ERROR(RG_HIP_CALL(hip, fn, __VA_ARGS__))

#endif  // RG_DEVICES_HIP_HIP_API_H
