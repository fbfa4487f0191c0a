// devices/opencl/opencl_sdk_check.c — where OpenCL headers exist
// (RG_HAVE_OPENCL), checks at compile time that the constants and types in
// opencl_api.h match CL/cl.h. Nothing here runs; without the headers it
// compiles to nothing.
#include "devices/opencl/opencl_api.h"

#if defined(RG_HAVE_OPENCL) && RG_HAVE_OPENCL && __has_include(<CL/cl.h>)
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>

#define RG_SAME_(ours, theirs) _Static_assert((long long)(ours) == (long long)(theirs), #theirs);
RG_SAME_(sizeof(rg_cl_int), sizeof(cl_int))
RG_SAME_(sizeof(rg_cl_uint), sizeof(cl_uint))
RG_SAME_(sizeof(rg_cl_ulong), sizeof(cl_device_type))
RG_SAME_(RG_CL_DEVICE_NOT_FOUND, CL_DEVICE_NOT_FOUND)
RG_SAME_(RG_CL_INVALID_PLATFORM, CL_INVALID_PLATFORM)
RG_SAME_(RG_CL_DEVICE_TYPE_CPU, CL_DEVICE_TYPE_CPU)
RG_SAME_(RG_CL_DEVICE_TYPE_GPU, CL_DEVICE_TYPE_GPU)
RG_SAME_(RG_CL_DEVICE_TYPE_ACCELERATOR, CL_DEVICE_TYPE_ACCELERATOR)
RG_SAME_(RG_CL_DEVICE_TYPE_ALL, CL_DEVICE_TYPE_ALL)
RG_SAME_(RG_CL_PLATFORM_NAME, CL_PLATFORM_NAME)
RG_SAME_(RG_CL_DEVICE_TYPE, CL_DEVICE_TYPE)
RG_SAME_(RG_CL_DEVICE_MAX_COMPUTE_UNITS, CL_DEVICE_MAX_COMPUTE_UNITS)
RG_SAME_(RG_CL_DEVICE_GLOBAL_MEM_SIZE, CL_DEVICE_GLOBAL_MEM_SIZE)
RG_SAME_(RG_CL_DEVICE_NAME, CL_DEVICE_NAME)
RG_SAME_(RG_CL_DEVICE_VERSION, CL_DEVICE_VERSION)
RG_SAME_(RG_CL_DEVICE_EXTENSIONS, CL_DEVICE_EXTENSIONS)
#undef RG_SAME_

#else
typedef int rg_opencl_sdk_check_unused_t;
#endif
