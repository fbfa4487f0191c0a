// devices/cuda/cuda_blas.c — cuBLAS through dlopen, for the matmuls with
// many rows of x (prefill), where a tuned tensor-core GEMM beats anything
// ridge would write for now. Decode-sized matmuls never come here: they are
// memory-bound and ridge's GEMV streams the weights itself.
//
// The library is looked for once per process (RIDGE_CUBLAS_LIBRARY, then
// the sonames of CUDA 13, 12 and 11, then the toolkit's usual folder);
// absent, the cuda backend runs its own tiled kernel and says so in the
// device's detail line.
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "devices/backend.h"
#include "devices/cuda/cublas_api.h"

static const rg__vendor_code_t cublas_codes[] = {
    {1, "CUBLAS_STATUS_NOT_INITIALIZED", "the library was not initialized"},
    {3, "CUBLAS_STATUS_ALLOC_FAILED", "resource allocation failed"},
    {7, "CUBLAS_STATUS_INVALID_VALUE", "an invalid value was passed"},
    {8, "CUBLAS_STATUS_ARCH_MISMATCH", "the GPU does not support this operation"},
    {11, "CUBLAS_STATUS_MAPPING_ERROR", "access to GPU memory space failed"},
    {13, "CUBLAS_STATUS_EXECUTION_FAILED", "the GPU program failed to execute"},
    {14, "CUBLAS_STATUS_INTERNAL_ERROR", "an internal operation failed"},
    {15, "CUBLAS_STATUS_NOT_SUPPORTED", "the functionality requested is not supported"},
    {16, "CUBLAS_STATUS_LICENSE_ERROR", "license error"},
};

rg_status_t rg__cublas_status(const rg_cublas_syms_t *b, rg_cublas_status_t r, const char *call) {
  if (r == RG_CUBLAS_STATUS_SUCCESS) return NULL;
  const rg__vendor_code_t *known =
      rg__vendor_code_find(cublas_codes, sizeof cublas_codes / sizeof cublas_codes[0], r);
  const char *text = b && b->cublasGetStatusString ? b->cublasGetStatusString(r) : NULL;
  return rg_status_make(r == 3   ? RG_OUT_OF_MEMORY
                        : r == 7 ? RG_INVALID_ARGUMENT
                                 : RG_INTERNAL,
                        "%s failed: %s (%d): %s", call, known ? known->name : "cuBLAS error", r,
                        text    ? text
                        : known ? known->text
                                : "unknown");
}

static struct {
  pthread_once_t once;
  rg_status_t err;
  rg_cublas_syms_t syms;
} blas = {.once = PTHREAD_ONCE_INIT};

static void load_once(void) {
  static const char *const names[] = {"libcublas.so.13",
                                      "libcublas.so.12",
                                      "libcublas.so.11",
                                      "libcublas.so",
                                      "/usr/local/cuda/lib64/libcublas.so.13",
                                      "/usr/local/cuda/lib64/libcublas.so.12"};
  rg_cublas_syms_t *s = &blas.syms;
  rg_status_t e = rg__dynlib_open("RIDGE_CUBLAS_LIBRARY", names, sizeof names / sizeof names[0],
                                  "cuBLAS is not installed", &s->lib, &s->lib_name);
  if (e) {
    blas.err = e;
    return;
  }
#define RG_REQ_(field, sym, ret, params)                                                   \
  s->field = (ret(*) params)dlsym(s->lib, sym);                                            \
  if (!s->field) {                                                                         \
    blas.err = rg_status_make(RG_UNAVAILABLE, "%s has no %s: cuBLAS is too old for ridge", \
                              s->lib_name, sym);                                           \
    dlclose(s->lib);                                                                       \
    s->lib = NULL;                                                                         \
    return;                                                                                \
  }
#define RG_OPT_(field, sym, ret, params) s->field = (ret(*) params)dlsym(s->lib, sym);
  RG_CUBLAS_SYMBOLS(RG_REQ_, RG_OPT_)
#undef RG_REQ_
#undef RG_OPT_
}

rg_status_t rg__cublas_load(const rg_cublas_syms_t **out) {
  pthread_once(&blas.once, load_once);
  *out = blas.err ? NULL : &blas.syms;
  return blas.err ? rg_status_make(rg_status_code(blas.err), "%s", rg_status_message(blas.err))
                  : NULL;
}
