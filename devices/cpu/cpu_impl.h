// devices/cpu/cpu_impl.h — the CPU backend's private types, shared by its
// files. Not part of the HAL's interface.
#ifndef RG_DEVICES_CPU_CPU_IMPL_H
#define RG_DEVICES_CPU_CPU_IMPL_H

#include <pthread.h>

#include "devices/backend.h"
#include "ops/convert.h"

typedef struct {
  rg_device_t base;
  rg_pool_t *pool;
  rg_cpu_isa_t isa;         // the cap its kernels run under (resolved, never AUTO)
  int batch_invariant;      // matmuls keep one kernel for every batch size
  pthread_mutex_t pool_mu;  // one kernel on the pool at a time; guards the scratch below
  // Host scratch for ops that need it (block tables, sampling candidates),
  // grown to the largest request and kept.
  void *scratch;
  size_t scratch_bytes;
} rg__cpu_device_t;

// Runs op on the device (the submit slot's body; called with pool_mu held).
RG_MUST_USE rg_status_t rg__cpu_run_op(rg__cpu_device_t *cd, const rg_op_t *op);

#endif  // RG_DEVICES_CPU_CPU_IMPL_H
