// devices/opencl/opencl_api.h — the part of OpenCL (the ICD loader,
// libOpenCL.so.1) the opencl backend calls, declared here so that ridge
// builds without OpenCL headers and links no loader: it is opened with
// dlopen at run time.
//
// Types and constants follow CL/cl.h (OpenCL 1.2, which every loader
// exports). Where the headers exist (RG_HAVE_OPENCL), opencl_sdk_check.c
// compares them at compile time. Private to devices/opencl/.
#ifndef RG_DEVICES_OPENCL_OPENCL_API_H
#define RG_DEVICES_OPENCL_OPENCL_API_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "devices/backend.h"

typedef int32_t rg_cl_int;
typedef uint32_t rg_cl_uint;
typedef uint64_t rg_cl_ulong;
typedef struct _cl_platform_id *rg_cl_platform_id;
typedef struct _cl_device_id *rg_cl_device_id;

enum {
  RG_CL_SUCCESS = 0,
  RG_CL_DEVICE_NOT_FOUND = -1,
  RG_CL_DEVICE_NOT_AVAILABLE = -2,
  RG_CL_OUT_OF_RESOURCES = -5,
  RG_CL_OUT_OF_HOST_MEMORY = -6,
  RG_CL_INVALID_VALUE = -30,
  RG_CL_INVALID_DEVICE_TYPE = -31,
  RG_CL_INVALID_PLATFORM = -32,
  RG_CL_INVALID_DEVICE = -33,
  RG_CL_PLATFORM_NOT_FOUND_KHR = -1001,
};

// cl_device_type bits and the info queries used.
#define RG_CL_DEVICE_TYPE_CPU (1ULL << 1)
#define RG_CL_DEVICE_TYPE_GPU (1ULL << 2)
#define RG_CL_DEVICE_TYPE_ACCELERATOR (1ULL << 3)
#define RG_CL_DEVICE_TYPE_ALL 0xFFFFFFFFULL
enum {
  RG_CL_PLATFORM_NAME = 0x0902,
  RG_CL_DEVICE_TYPE = 0x1000,
  RG_CL_DEVICE_MAX_COMPUTE_UNITS = 0x1002,
  RG_CL_DEVICE_GLOBAL_MEM_SIZE = 0x101F,
  RG_CL_DEVICE_NAME = 0x102B,
  RG_CL_DEVICE_VERSION = 0x102F,
  RG_CL_DEVICE_EXTENSIONS = 0x1030,
};

// REQ(field, exported symbol, return type, parameters).
#define RG_CL_SYMBOLS(REQ, OPT)                                                      \
  REQ(clGetPlatformIDs, "clGetPlatformIDs", rg_cl_int,                               \
      (rg_cl_uint, rg_cl_platform_id *, rg_cl_uint *))                               \
  REQ(clGetPlatformInfo, "clGetPlatformInfo", rg_cl_int,                             \
      (rg_cl_platform_id, rg_cl_uint, size_t, void *, size_t *))                     \
  REQ(clGetDeviceIDs, "clGetDeviceIDs", rg_cl_int,                                   \
      (rg_cl_platform_id, rg_cl_ulong, rg_cl_uint, rg_cl_device_id *, rg_cl_uint *)) \
  REQ(clGetDeviceInfo, "clGetDeviceInfo", rg_cl_int,                                 \
      (rg_cl_device_id, rg_cl_uint, size_t, void *, size_t *))

typedef struct {
  void *lib;
  const char *lib_name;
#define RG_X_(field, sym, ret, params) ret(*field) params;
  RG_CL_SYMBOLS(RG_X_, RG_X_)
#undef RG_X_
} rg_cl_syms_t;

// NULL for CL_SUCCESS; else "<call> failed: CL_DEVICE_NOT_FOUND (-1): <text>".
RG_MUST_USE rg_status_t rg__cl_status(rg_cl_int r, const char *call);
#define RG_CL_CALL(cl, fn, ...) rg__cl_status((cl)->fn(__VA_ARGS__), #fn)
#define RG_CL_CHECK(cl, fn, ...) RG_RETURN_IF_ERROR(RG_CL_CALL(cl, fn, __VA_ARGS__))

#endif  // RG_DEVICES_OPENCL_OPENCL_API_H
