// devices/cuda/cuda_api.h — the part of the CUDA driver API (libcuda.so.1)
// the cuda backend calls, declared here so that ridge builds without the
// CUDA toolkit and links nothing of NVIDIA's: the library is loaded with
// dlopen at run time and its functions looked up from the symbol table
// below (IREE's cuda_dynamic_symbol_table.h does the same).
//
// Types and constants follow cuda.h. Where the toolkit's headers exist
// (RG_HAVE_CUDA), cuda_sdk_check.c compares every declaration here with
// cuda.h at compile time, so a mismatch breaks the build, not a GPU run.
// Private to devices/cuda/.
#ifndef RG_DEVICES_CUDA_CUDA_API_H
#define RG_DEVICES_CUDA_CUDA_API_H

#include <stddef.h>

#include "base/status.h"
#include "devices/backend.h"

// cuda.h: CUresult is an enum of non-negative codes, CUdevice an int,
// CUdeviceptr a 64-bit integer; contexts and streams are opaque pointers
// (the struct tags are cuda.h's, so the types match when both are seen).
typedef unsigned int rg_cu_result_t;
typedef int rg_cu_device_t;
typedef unsigned long long rg_cu_deviceptr_t;
typedef struct CUctx_st *rg_cu_context_t;
typedef struct CUstream_st *rg_cu_stream_t;
typedef unsigned int rg_cu_attribute_t;  // CUdevice_attribute
typedef struct CUmod_st *rg_cu_module_t;
typedef struct CUfunc_st *rg_cu_function_t;
typedef struct CUevent_st *rg_cu_event_t;

enum {
  RG_CU_SUCCESS = 0,
  RG_CU_ERROR_INVALID_VALUE = 1,
  RG_CU_ERROR_OUT_OF_MEMORY = 2,
  RG_CU_ERROR_NOT_INITIALIZED = 3,
  RG_CU_ERROR_STUB_LIBRARY = 34,
  RG_CU_ERROR_CALL_REQUIRES_NEWER_DRIVER = 36,
  RG_CU_ERROR_DEVICE_UNAVAILABLE = 46,
  RG_CU_ERROR_NO_DEVICE = 100,
  RG_CU_ERROR_INVALID_DEVICE = 101,
  RG_CU_ERROR_INVALID_IMAGE = 200,
  RG_CU_ERROR_NO_BINARY_FOR_GPU = 209,
  RG_CU_ERROR_INVALID_PTX = 218,
  RG_CU_ERROR_UNSUPPORTED_PTX_VERSION = 222,
  RG_CU_ERROR_NOT_FOUND = 500,
  RG_CU_ERROR_NOT_READY = 600,
  RG_CU_ERROR_ILLEGAL_ADDRESS = 700,
  RG_CU_ERROR_LAUNCH_OUT_OF_RESOURCES = 701,
  RG_CU_ERROR_LAUNCH_FAILED = 719,
  RG_CU_ERROR_OPERATING_SYSTEM = 304,
  RG_CU_ERROR_SYSTEM_NOT_READY = 802,
  RG_CU_ERROR_SYSTEM_DRIVER_MISMATCH = 803,
  RG_CU_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE = 804,
  RG_CU_ERROR_UNKNOWN = 999,
};

enum {
  RG_CU_ATTR_MULTIPROCESSOR_COUNT = 16,
  RG_CU_ATTR_COMPUTE_CAPABILITY_MAJOR = 75,
  RG_CU_ATTR_COMPUTE_CAPABILITY_MINOR = 76,
};

enum { RG_CU_STREAM_NON_BLOCKING = 0x1 };
enum { RG_CU_EVENT_DISABLE_TIMING = 0x2 };

// The symbol table: REQ(field, exported symbol, return type, parameters) for
// what the backend cannot do without, OPT(...) for what an old driver may
// lack (the backend copes when it is NULL). Exported names carry the _v2
// suffixes cuda.h's #defines map the plain names to.
#define RG_CUDA_SYMBOLS(REQ, OPT)                                                                  \
  REQ(cuInit, "cuInit", rg_cu_result_t, (unsigned int))                                            \
  REQ(cuDriverGetVersion, "cuDriverGetVersion", rg_cu_result_t, (int *))                           \
  REQ(cuDeviceGetCount, "cuDeviceGetCount", rg_cu_result_t, (int *))                               \
  REQ(cuDeviceGet, "cuDeviceGet", rg_cu_result_t, (rg_cu_device_t *, int))                         \
  REQ(cuDeviceGetName, "cuDeviceGetName", rg_cu_result_t, (char *, int, rg_cu_device_t))           \
  REQ(cuDeviceTotalMem, "cuDeviceTotalMem_v2", rg_cu_result_t, (size_t *, rg_cu_device_t))         \
  REQ(cuDeviceGetAttribute, "cuDeviceGetAttribute", rg_cu_result_t,                                \
      (int *, rg_cu_attribute_t, rg_cu_device_t))                                                  \
  REQ(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", rg_cu_result_t,                        \
      (rg_cu_context_t *, rg_cu_device_t))                                                         \
  REQ(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", rg_cu_result_t, (rg_cu_device_t)) \
  REQ(cuCtxPushCurrent, "cuCtxPushCurrent_v2", rg_cu_result_t, (rg_cu_context_t))                  \
  REQ(cuCtxPopCurrent, "cuCtxPopCurrent_v2", rg_cu_result_t, (rg_cu_context_t *))                  \
  REQ(cuMemAlloc, "cuMemAlloc_v2", rg_cu_result_t, (rg_cu_deviceptr_t *, size_t))                  \
  REQ(cuMemFree, "cuMemFree_v2", rg_cu_result_t, (rg_cu_deviceptr_t))                              \
  REQ(cuCtxSynchronize, "cuCtxSynchronize", rg_cu_result_t, (void))                                \
  REQ(cuMemcpyHtoD, "cuMemcpyHtoD_v2", rg_cu_result_t, (rg_cu_deviceptr_t, const void *, size_t))  \
  REQ(cuMemcpyDtoH, "cuMemcpyDtoH_v2", rg_cu_result_t, (void *, rg_cu_deviceptr_t, size_t))        \
  REQ(cuStreamCreate, "cuStreamCreate", rg_cu_result_t, (rg_cu_stream_t *, unsigned int))          \
  REQ(cuStreamSynchronize, "cuStreamSynchronize", rg_cu_result_t, (rg_cu_stream_t))                \
  REQ(cuStreamDestroy, "cuStreamDestroy_v2", rg_cu_result_t, (rg_cu_stream_t))                     \
  REQ(cuStreamWaitEvent, "cuStreamWaitEvent", rg_cu_result_t,                                      \
      (rg_cu_stream_t, rg_cu_event_t, unsigned int))                                               \
  REQ(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", rg_cu_result_t,                                   \
      (rg_cu_deviceptr_t, const void *, size_t, rg_cu_stream_t))                                   \
  REQ(cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2", rg_cu_result_t,                                   \
      (void *, rg_cu_deviceptr_t, size_t, rg_cu_stream_t))                                         \
  REQ(cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2", rg_cu_result_t,                                   \
      (rg_cu_deviceptr_t, rg_cu_deviceptr_t, size_t, rg_cu_stream_t))                              \
  REQ(cuEventCreate, "cuEventCreate", rg_cu_result_t, (rg_cu_event_t *, unsigned int))             \
  REQ(cuEventRecord, "cuEventRecord", rg_cu_result_t, (rg_cu_event_t, rg_cu_stream_t))             \
  REQ(cuEventQuery, "cuEventQuery", rg_cu_result_t, (rg_cu_event_t))                               \
  REQ(cuEventDestroy, "cuEventDestroy_v2", rg_cu_result_t, (rg_cu_event_t))                        \
  REQ(cuModuleLoadData, "cuModuleLoadData", rg_cu_result_t, (rg_cu_module_t *, const void *))      \
  REQ(cuModuleUnload, "cuModuleUnload", rg_cu_result_t, (rg_cu_module_t))                          \
  REQ(cuModuleGetFunction, "cuModuleGetFunction", rg_cu_result_t,                                  \
      (rg_cu_function_t *, rg_cu_module_t, const char *))                                          \
  REQ(cuLaunchKernel, "cuLaunchKernel", rg_cu_result_t,                                            \
      (rg_cu_function_t, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int,     \
       unsigned int, unsigned int, rg_cu_stream_t, void **, void **))                              \
  OPT(cuGetErrorName, "cuGetErrorName", rg_cu_result_t, (rg_cu_result_t, const char **))           \
  OPT(cuGetErrorString, "cuGetErrorString", rg_cu_result_t, (rg_cu_result_t, const char **))

// The loaded library: one function pointer per symbol, named as in cuda.h.
typedef struct {
  void *lib;
  const char *lib_name;  // the name that loaded: "libcuda.so.1"
  int driver_version;    // 12040 for CUDA 12.4
#define RG_X_(field, sym, ret, params) ret(*field) params;
  RG_CUDA_SYMBOLS(RG_X_, RG_X_)
#undef RG_X_
} rg_cuda_syms_t;

// The process's copy of the library, loaded on first use and kept (the
// driver is not made to be unloaded). Returns the reason when it is absent.
RG_MUST_USE rg_status_t rg__cuda_load(const rg_cuda_syms_t **out);

// The driver's open slot (cuda_device.c).
RG_MUST_USE rg_status_t rg__cuda_device_open(rg_driver_t *drv, const rg_device_info_t *info,
                                             const rg_device_options_t *opts, rg_device_t **out);

#endif  // RG_DEVICES_CUDA_CUDA_API_H
