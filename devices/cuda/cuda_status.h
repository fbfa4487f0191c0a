// devices/cuda/cuda_status.h — CUDA results become ridge statuses here, once,
// at the edge: "cuInit failed: CUDA_ERROR_NO_DEVICE (100): no CUDA-capable
// device is detected". Code above the backend sees only rg_status_t.
// Private to devices/cuda/.
#ifndef RG_DEVICES_CUDA_CUDA_STATUS_H
#define RG_DEVICES_CUDA_CUDA_STATUS_H

#include "devices/cuda/cuda_api.h"

// NULL for RG_CU_SUCCESS; otherwise a status whose message is "<call>
// failed: <NAME> (<number>): <text>" and whose code fits the result (no
// device or driver: RG_UNAVAILABLE; out of memory: RG_OUT_OF_MEMORY; a bad
// value: RG_INVALID_ARGUMENT; anything else: RG_INTERNAL). cu may be NULL
// (names then come from ridge's own table).
RG_MUST_USE rg_status_t rg__cuda_status(const rg_cuda_syms_t *cu, rg_cu_result_t r,
                                        const char *call);

// Calls cu->fn(...) and converts its result: RG_CUDA_CALL gives the status,
// RG_CUDA_CHECK returns it from the enclosing function when it is not OK.
#define RG_CUDA_CALL(cu, fn, ...) rg__cuda_status((cu), (cu)->fn(__VA_ARGS__), #fn)
#define RG_CUDA_CHECK(cu, fn, ...) RG_RETURN_IF_ERROR(RG_CUDA_CALL(cu, fn, __VA_ARGS__))

#endif  // RG_DEVICES_CUDA_CUDA_STATUS_H
