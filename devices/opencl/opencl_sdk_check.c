// devices/opencl/opencl_sdk_check.c — where OpenCL headers exist
// (RG_HAVE_OPENCL), checks at compile time that opencl_api.h declares what
// CL/cl.h declares: the same constants, type sizes, every error code, and
// for every symbol in the table a function type compatible with the
// header's. Nothing here runs; without the headers it compiles to nothing.
#include "devices/opencl/opencl_api.h"

#if defined(RG_HAVE_OPENCL) && RG_HAVE_OPENCL && __has_include(<CL/cl.h>)
// The 3.0 headers declare every code the error table names; the 1.2 calls
// ridge makes (clCreateCommandQueue among them) stay declared, without the
// deprecation attribute, when asked for.
#define CL_TARGET_OPENCL_VERSION 300
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#include <CL/cl.h>
#include <CL/cl_ext.h>

_Static_assert(__builtin_types_compatible_p(rg_cl_int, cl_int), "cl_int");
_Static_assert(__builtin_types_compatible_p(rg_cl_uint, cl_uint), "cl_uint");
_Static_assert(__builtin_types_compatible_p(rg_cl_ulong, cl_ulong), "cl_ulong");
_Static_assert(__builtin_types_compatible_p(rg_cl_bitfield, cl_device_type), "cl_bitfield");
_Static_assert(__builtin_types_compatible_p(rg_cl_context_properties, cl_context_properties),
               "cl_context_properties");
_Static_assert(__builtin_types_compatible_p(rg_cl_event, cl_event), "cl_event");
_Static_assert(__builtin_types_compatible_p(rg_cl_mem, cl_mem), "cl_mem");

#define RG_SAME_(ours, theirs) _Static_assert((long long)(ours) == (long long)(theirs), #theirs);
#define RG_ERR_(name, value, text) RG_SAME_(RG_CL_##name, CL_##name)
RG_CL_ERROR_MAP(RG_ERR_)
#undef RG_ERR_
RG_SAME_(RG_CL_SUCCESS, CL_SUCCESS)
RG_SAME_(RG_CL_DEVICE_TYPE_CPU, CL_DEVICE_TYPE_CPU)
RG_SAME_(RG_CL_DEVICE_TYPE_GPU, CL_DEVICE_TYPE_GPU)
RG_SAME_(RG_CL_DEVICE_TYPE_ACCELERATOR, CL_DEVICE_TYPE_ACCELERATOR)
RG_SAME_(RG_CL_DEVICE_TYPE_ALL, CL_DEVICE_TYPE_ALL)
RG_SAME_(RG_CL_MEM_READ_WRITE, CL_MEM_READ_WRITE)
RG_SAME_(RG_CL_FP_FMA, CL_FP_FMA)
RG_SAME_(RG_CL_FALSE, CL_FALSE)
RG_SAME_(RG_CL_TRUE, CL_TRUE)
RG_SAME_(RG_CL_PLATFORM_VERSION, CL_PLATFORM_VERSION)
RG_SAME_(RG_CL_PLATFORM_NAME, CL_PLATFORM_NAME)
RG_SAME_(RG_CL_DEVICE_TYPE, CL_DEVICE_TYPE)
RG_SAME_(RG_CL_DEVICE_MAX_COMPUTE_UNITS, CL_DEVICE_MAX_COMPUTE_UNITS)
RG_SAME_(RG_CL_DEVICE_MAX_WORK_GROUP_SIZE, CL_DEVICE_MAX_WORK_GROUP_SIZE)
RG_SAME_(RG_CL_DEVICE_MAX_MEM_ALLOC_SIZE, CL_DEVICE_MAX_MEM_ALLOC_SIZE)
RG_SAME_(RG_CL_DEVICE_SINGLE_FP_CONFIG, CL_DEVICE_SINGLE_FP_CONFIG)
RG_SAME_(RG_CL_DEVICE_GLOBAL_MEM_SIZE, CL_DEVICE_GLOBAL_MEM_SIZE)
RG_SAME_(RG_CL_DEVICE_LOCAL_MEM_SIZE, CL_DEVICE_LOCAL_MEM_SIZE)
RG_SAME_(RG_CL_DEVICE_NAME, CL_DEVICE_NAME)
RG_SAME_(RG_CL_DRIVER_VERSION, CL_DRIVER_VERSION)
RG_SAME_(RG_CL_DEVICE_VERSION, CL_DEVICE_VERSION)
RG_SAME_(RG_CL_DEVICE_EXTENSIONS, CL_DEVICE_EXTENSIONS)
RG_SAME_(RG_CL_CONTEXT_PLATFORM, CL_CONTEXT_PLATFORM)
RG_SAME_(RG_CL_PROGRAM_BINARY_SIZES, CL_PROGRAM_BINARY_SIZES)
RG_SAME_(RG_CL_PROGRAM_BINARIES, CL_PROGRAM_BINARIES)
RG_SAME_(RG_CL_PROGRAM_BUILD_LOG, CL_PROGRAM_BUILD_LOG)
RG_SAME_(RG_CL_KERNEL_WORK_GROUP_SIZE, CL_KERNEL_WORK_GROUP_SIZE)
RG_SAME_(RG_CL_EVENT_COMMAND_EXECUTION_STATUS, CL_EVENT_COMMAND_EXECUTION_STATUS)
RG_SAME_(RG_CL_COMPLETE, CL_COMPLETE)
#undef RG_SAME_

// Each field's type against the function CL/cl.h declares under the same
// name (CL_API_CALL and CL_CALLBACK are empty on the platforms ridge runs on).
#define RG_SIG_(field, sym, ret, params)                                          \
  _Static_assert(__builtin_types_compatible_p(__typeof__(&field), ret(*) params), \
                 #field " differs from CL/cl.h");
RG_CL_SYMBOLS(RG_SIG_, RG_SIG_)
#undef RG_SIG_

#else
// Without the headers there is nothing to compare against.
typedef int rg_opencl_sdk_check_unused_t;
#endif
