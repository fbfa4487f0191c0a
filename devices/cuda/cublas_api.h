// devices/cuda/cublas_api.h — the part of cuBLAS (libcublas.so) the cuda
// backend calls for large GEMMs, declared here so that ridge builds without
// the toolkit and links nothing of NVIDIA's: the library is opened with
// dlopen the first time a matmul wants it. Absent, ridge's own tiled kernel
// runs instead (gpu_ops.c).
//
// Types and constants follow cublas_api.h and library_types.h; where the
// toolkit's headers exist (RG_HAVE_CUDA), cuda_sdk_check.c compares them at
// compile time. Private to devices/cuda/.
#ifndef RG_DEVICES_CUDA_CUBLAS_API_H
#define RG_DEVICES_CUDA_CUBLAS_API_H

#include "base/status.h"
#include "devices/cuda/cuda_api.h"

// The enums are unsigned int where all their values are non-negative and
// int where one is negative (cublasGemmAlgo_t), as C compilers type them;
// cuda_sdk_check.c holds every signature to cublas_api.h's.
typedef unsigned int rg_cublas_status_t;  // cublasStatus_t
typedef struct cublasContext *rg_cublas_handle_t;
typedef unsigned int rg_cublas_op_t;       // cublasOperation_t
typedef unsigned int rg_cuda_data_type_t;  // cudaDataType
typedef unsigned int rg_cublas_compute_t;  // cublasComputeType_t
typedef int rg_cublas_algo_t;              // cublasGemmAlgo_t
typedef unsigned int rg_cublas_math_t;     // cublasMath_t

enum {
  RG_CUBLAS_STATUS_SUCCESS = 0,
  RG_CUBLAS_OP_N = 0,
  RG_CUBLAS_OP_T = 1,
  RG_CUDA_R_32F = 0,
  RG_CUDA_R_16F = 2,
  RG_CUDA_R_16BF = 14,
  RG_CUBLAS_COMPUTE_32F = 68,
  RG_CUBLAS_GEMM_DEFAULT = -1,
  RG_CUBLAS_DEFAULT_MATH = 0,
};

// REQ(field, exported symbol, return type, parameters); OPT may be missing.
#define RG_CUBLAS_SYMBOLS(REQ, OPT)                                                            \
  REQ(cublasCreate_v2, "cublasCreate_v2", rg_cublas_status_t, (rg_cublas_handle_t *))          \
  REQ(cublasDestroy_v2, "cublasDestroy_v2", rg_cublas_status_t, (rg_cublas_handle_t))          \
  REQ(cublasSetStream_v2, "cublasSetStream_v2", rg_cublas_status_t,                            \
      (rg_cublas_handle_t, rg_cu_stream_t))                                                    \
  REQ(cublasSetMathMode, "cublasSetMathMode", rg_cublas_status_t,                              \
      (rg_cublas_handle_t, rg_cublas_math_t))                                                  \
  REQ(cublasGemmEx, "cublasGemmEx", rg_cublas_status_t,                                        \
      (rg_cublas_handle_t, rg_cublas_op_t, rg_cublas_op_t, int, int, int, const void *,        \
       const void *, rg_cuda_data_type_t, int, const void *, rg_cuda_data_type_t, int,         \
       const void *, void *, rg_cuda_data_type_t, int, rg_cublas_compute_t, rg_cublas_algo_t)) \
  OPT(cublasGetStatusString, "cublasGetStatusString", const char *, (rg_cublas_status_t))

typedef struct {
  void *lib;
  const char *lib_name;
#define RG_X_(field, sym, ret, params) ret(*field) params;
  RG_CUBLAS_SYMBOLS(RG_X_, RG_X_)
#undef RG_X_
} rg_cublas_syms_t;

// The process's cuBLAS, loaded on first use and kept; the reason when it
// cannot be (tried once: a missing library stays missing).
RG_MUST_USE rg_status_t rg__cublas_load(const rg_cublas_syms_t **out);

// NULL for success; else "<call> failed: CUBLAS_STATUS_... (n)".
RG_MUST_USE rg_status_t rg__cublas_status(const rg_cublas_syms_t *b, rg_cublas_status_t r,
                                          const char *call);

#endif  // RG_DEVICES_CUDA_CUBLAS_API_H
