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
typedef void *rg_hip_deviceptr_t;
// The struct tags are hip_runtime_api.h's. No compile-time check against
// those headers exists yet (cuda has cuda_sdk_check.c): none were at hand
// where this was written, and a check that was never compiled could break
// the build on a ROCm machine.
typedef struct ihipStream_t *rg_hip_stream_t;
typedef struct ihipEvent_t *rg_hip_event_t;
typedef struct ihipModule_t *rg_hip_module_t;
typedef struct ihipModuleSymbol_t *rg_hip_function_t;

enum {
  RG_HIP_SUCCESS = 0,
  RG_HIP_ERROR_INVALID_VALUE = 1,
  RG_HIP_ERROR_OUT_OF_MEMORY = 2,
  RG_HIP_ERROR_NOT_INITIALIZED = 3,
  RG_HIP_ERROR_INSUFFICIENT_DRIVER = 35,
  RG_HIP_ERROR_NO_DEVICE = 100,
  RG_HIP_ERROR_INVALID_DEVICE = 101,
  RG_HIP_ERROR_NOT_FOUND = 500,
  RG_HIP_ERROR_NOT_READY = 600,
  RG_HIP_ERROR_NOT_SUPPORTED = 801,
  RG_HIP_ERROR_UNKNOWN = 999,
};

// hipDeviceAttribute_t positions (the CUDA-compatible block, counted from 0).
enum {
  RG_HIP_ATTR_COMPUTE_CAPABILITY_MAJOR = 23,
  RG_HIP_ATTR_COMPUTE_CAPABILITY_MINOR = 61,
  RG_HIP_ATTR_MULTIPROCESSOR_COUNT = 63,
};

enum {
  RG_HIP_MEMCPY_HOST_TO_DEVICE = 1,
  RG_HIP_MEMCPY_DEVICE_TO_HOST = 2,
  RG_HIP_MEMCPY_DEVICE_TO_DEVICE = 3,
  RG_HIP_STREAM_NON_BLOCKING = 0x1,
  RG_HIP_EVENT_DISABLE_TIMING = 0x2,
};

// REQ(field, exported symbol, return type, parameters); OPT may be missing.
#define RG_HIP_SYMBOLS(REQ, OPT)                                                                 \
  REQ(hipInit, "hipInit", rg_hip_error_t, (unsigned int))                                        \
  REQ(hipDriverGetVersion, "hipDriverGetVersion", rg_hip_error_t, (int *))                       \
  REQ(hipGetDeviceCount, "hipGetDeviceCount", rg_hip_error_t, (int *))                           \
  REQ(hipDeviceGet, "hipDeviceGet", rg_hip_error_t, (rg_hip_device_t *, int))                    \
  REQ(hipDeviceGetName, "hipDeviceGetName", rg_hip_error_t, (char *, int, rg_hip_device_t))      \
  REQ(hipDeviceTotalMem, "hipDeviceTotalMem", rg_hip_error_t, (size_t *, rg_hip_device_t))       \
  REQ(hipDeviceGetAttribute, "hipDeviceGetAttribute", rg_hip_error_t, (int *, int, int))         \
  REQ(hipSetDevice, "hipSetDevice", rg_hip_error_t, (int))                                       \
  REQ(hipMalloc, "hipMalloc", rg_hip_error_t, (void **, size_t))                                 \
  REQ(hipFree, "hipFree", rg_hip_error_t, (void *))                                              \
  REQ(hipDeviceSynchronize, "hipDeviceSynchronize", rg_hip_error_t, (void))                      \
  REQ(hipMemcpy, "hipMemcpy", rg_hip_error_t, (void *, const void *, size_t, int))               \
  REQ(hipMemcpyAsync, "hipMemcpyAsync", rg_hip_error_t,                                          \
      (void *, const void *, size_t, int, rg_hip_stream_t))                                      \
  REQ(hipStreamCreateWithFlags, "hipStreamCreateWithFlags", rg_hip_error_t,                      \
      (rg_hip_stream_t *, unsigned int))                                                         \
  REQ(hipStreamSynchronize, "hipStreamSynchronize", rg_hip_error_t, (rg_hip_stream_t))           \
  REQ(hipStreamDestroy, "hipStreamDestroy", rg_hip_error_t, (rg_hip_stream_t))                   \
  REQ(hipStreamWaitEvent, "hipStreamWaitEvent", rg_hip_error_t,                                  \
      (rg_hip_stream_t, rg_hip_event_t, unsigned int))                                           \
  REQ(hipEventCreateWithFlags, "hipEventCreateWithFlags", rg_hip_error_t,                        \
      (rg_hip_event_t *, unsigned int))                                                          \
  REQ(hipEventRecord, "hipEventRecord", rg_hip_error_t, (rg_hip_event_t, rg_hip_stream_t))       \
  REQ(hipEventQuery, "hipEventQuery", rg_hip_error_t, (rg_hip_event_t))                          \
  REQ(hipEventDestroy, "hipEventDestroy", rg_hip_error_t, (rg_hip_event_t))                      \
  REQ(hipModuleLoadData, "hipModuleLoadData", rg_hip_error_t, (rg_hip_module_t *, const void *)) \
  REQ(hipModuleUnload, "hipModuleUnload", rg_hip_error_t, (rg_hip_module_t))                     \
  REQ(hipModuleGetFunction, "hipModuleGetFunction", rg_hip_error_t,                              \
      (rg_hip_function_t *, rg_hip_module_t, const char *))                                      \
  REQ(hipModuleLaunchKernel, "hipModuleLaunchKernel", rg_hip_error_t,                            \
      (rg_hip_function_t, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int,  \
       unsigned int, unsigned int, rg_hip_stream_t, void **, void **))                           \
  OPT(hipGetErrorName, "hipGetErrorName", const char *, (rg_hip_error_t))                        \
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
// The process's copy of the runtime, loaded on first use and kept; the
// reason when it is absent (hip_driver.c).
RG_MUST_USE rg_status_t rg__hip_load(const rg_hip_syms_t **out);

// The driver's open slot (hip_device.c).
RG_MUST_USE rg_status_t rg__hip_device_open(rg_driver_t *drv, const rg_device_info_t *info,
                                            const rg_device_options_t *opts, rg_device_t **out);

#define RG_HIP_CALL(hip, fn, ...) rg__hip_status((hip), (hip)->fn(__VA_ARGS__), #fn)
#define RG_HIP_CHECK(hip, fn, ...) RG_RETURN_IF_ERROR(RG_HIP_CALL(hip, fn, __VA_ARGS__))

#endif  // RG_DEVICES_HIP_HIP_API_H
