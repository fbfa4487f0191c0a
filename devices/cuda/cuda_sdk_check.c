// devices/cuda/cuda_sdk_check.c — where the CUDA toolkit's headers exist
// (RG_HAVE_CUDA), checks at compile time that cuda_api.h declares what
// cuda.h declares: the same constants, type sizes, and for every symbol in
// the table a function type compatible with cuda.h's. Nothing here runs;
// without the toolkit it compiles to nothing.
#include "devices/cuda/cuda_api.h"

#if defined(RG_HAVE_CUDA) && RG_HAVE_CUDA && __has_include(<cuda.h>)
#include <cuda.h>

_Static_assert(sizeof(rg_cu_result_t) == sizeof(CUresult), "CUresult size");
_Static_assert(sizeof(rg_cu_device_t) == sizeof(CUdevice), "CUdevice size");
_Static_assert(sizeof(rg_cu_deviceptr_t) == sizeof(CUdeviceptr), "CUdeviceptr size");
_Static_assert(__builtin_types_compatible_p(rg_cu_context_t, CUcontext), "CUcontext");
_Static_assert(__builtin_types_compatible_p(rg_cu_stream_t, CUstream), "CUstream");
_Static_assert(__builtin_types_compatible_p(rg_cu_module_t, CUmodule), "CUmodule");
_Static_assert(__builtin_types_compatible_p(rg_cu_function_t, CUfunction), "CUfunction");
_Static_assert(__builtin_types_compatible_p(rg_cu_event_t, CUevent), "CUevent");

#define RG_SAME_(ours, theirs) _Static_assert((long)(ours) == (long)(theirs), #theirs);
RG_SAME_(RG_CU_SUCCESS, CUDA_SUCCESS)
RG_SAME_(RG_CU_ERROR_INVALID_VALUE, CUDA_ERROR_INVALID_VALUE)
RG_SAME_(RG_CU_ERROR_OUT_OF_MEMORY, CUDA_ERROR_OUT_OF_MEMORY)
RG_SAME_(RG_CU_ERROR_NOT_INITIALIZED, CUDA_ERROR_NOT_INITIALIZED)
RG_SAME_(RG_CU_ERROR_STUB_LIBRARY, CUDA_ERROR_STUB_LIBRARY)
RG_SAME_(RG_CU_ERROR_CALL_REQUIRES_NEWER_DRIVER, CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER)
RG_SAME_(RG_CU_ERROR_DEVICE_UNAVAILABLE, CUDA_ERROR_DEVICE_UNAVAILABLE)
RG_SAME_(RG_CU_ERROR_NO_DEVICE, CUDA_ERROR_NO_DEVICE)
RG_SAME_(RG_CU_ERROR_INVALID_DEVICE, CUDA_ERROR_INVALID_DEVICE)
RG_SAME_(RG_CU_ERROR_OPERATING_SYSTEM, CUDA_ERROR_OPERATING_SYSTEM)
RG_SAME_(RG_CU_ERROR_INVALID_IMAGE, CUDA_ERROR_INVALID_IMAGE)
RG_SAME_(RG_CU_ERROR_NO_BINARY_FOR_GPU, CUDA_ERROR_NO_BINARY_FOR_GPU)
RG_SAME_(RG_CU_ERROR_INVALID_PTX, CUDA_ERROR_INVALID_PTX)
RG_SAME_(RG_CU_ERROR_UNSUPPORTED_PTX_VERSION, CUDA_ERROR_UNSUPPORTED_PTX_VERSION)
RG_SAME_(RG_CU_ERROR_NOT_FOUND, CUDA_ERROR_NOT_FOUND)
RG_SAME_(RG_CU_ERROR_NOT_READY, CUDA_ERROR_NOT_READY)
RG_SAME_(RG_CU_ERROR_ILLEGAL_ADDRESS, CUDA_ERROR_ILLEGAL_ADDRESS)
RG_SAME_(RG_CU_ERROR_LAUNCH_OUT_OF_RESOURCES, CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES)
RG_SAME_(RG_CU_ERROR_LAUNCH_FAILED, CUDA_ERROR_LAUNCH_FAILED)
RG_SAME_(RG_CU_EVENT_DISABLE_TIMING, CU_EVENT_DISABLE_TIMING)
RG_SAME_(RG_CU_ERROR_SYSTEM_NOT_READY, CUDA_ERROR_SYSTEM_NOT_READY)
RG_SAME_(RG_CU_ERROR_SYSTEM_DRIVER_MISMATCH, CUDA_ERROR_SYSTEM_DRIVER_MISMATCH)
RG_SAME_(RG_CU_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE, CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE)
RG_SAME_(RG_CU_ERROR_UNKNOWN, CUDA_ERROR_UNKNOWN)
RG_SAME_(RG_CU_ATTR_MULTIPROCESSOR_COUNT, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
RG_SAME_(RG_CU_ATTR_COMPUTE_CAPABILITY_MAJOR, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
RG_SAME_(RG_CU_ATTR_COMPUTE_CAPABILITY_MINOR, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
RG_SAME_(RG_CU_STREAM_NON_BLOCKING, CU_STREAM_NON_BLOCKING)
#undef RG_SAME_

// Each field's type against the function cuda.h declares under the same
// name (its #defines turn cuDeviceTotalMem into cuDeviceTotalMem_v2 and so
// on, matching the exported symbols the table loads).
#define RG_SIG_(field, sym, ret, params)                                          \
  _Static_assert(__builtin_types_compatible_p(__typeof__(&field), ret(*) params), \
                 #field " differs from cuda.h");
RG_CUDA_SYMBOLS(RG_SIG_, RG_SIG_)
#undef RG_SIG_

// cuBLAS, loaded for large matmuls (cublas_api.h): the same comparison.
#if __has_include(<cublas_api.h>)
#include <cublas_api.h>

#include "devices/cuda/cublas_api.h"

#define RG_SAME_(ours, theirs) _Static_assert((long)(ours) == (long)(theirs), #theirs);
RG_SAME_(RG_CUBLAS_STATUS_SUCCESS, CUBLAS_STATUS_SUCCESS)
RG_SAME_(RG_CUBLAS_OP_N, CUBLAS_OP_N)
RG_SAME_(RG_CUBLAS_OP_T, CUBLAS_OP_T)
RG_SAME_(RG_CUDA_R_32F, CUDA_R_32F)
RG_SAME_(RG_CUDA_R_16F, CUDA_R_16F)
RG_SAME_(RG_CUDA_R_16BF, CUDA_R_16BF)
RG_SAME_(RG_CUBLAS_COMPUTE_32F, CUBLAS_COMPUTE_32F)
RG_SAME_(RG_CUBLAS_GEMM_DEFAULT, CUBLAS_GEMM_DEFAULT)
RG_SAME_(RG_CUBLAS_DEFAULT_MATH, CUBLAS_DEFAULT_MATH)
#undef RG_SAME_
_Static_assert(__builtin_types_compatible_p(rg_cublas_handle_t, cublasHandle_t), "cublasHandle_t");
_Static_assert(__builtin_types_compatible_p(rg_cu_stream_t, cudaStream_t), "cudaStream_t");
#define RG_SIG_(field, sym, ret, params)                                          \
  _Static_assert(__builtin_types_compatible_p(__typeof__(&field), ret(*) params), \
                 #field " differs from cublas_api.h");
RG_CUBLAS_SYMBOLS(RG_SIG_, RG_SIG_)
#undef RG_SIG_
#endif

#else
// Without the toolkit there is nothing to compare against.
typedef int rg_cuda_sdk_check_unused_t;
#endif
