// devices/cpu/cpu_device.c — the CPU device: host buffers (allocated, or
// wrapping caller memory such as mapped weights), and synchronous queues that
// run the HAL's ops with the kernels of ops/cpu on the device's thread pool.
//
// The pool belongs to the device and runs one kernel at a time, so queues
// take turns on it under pool_mu. Work runs when submitted: a CPU queue is
// synchronous, its events are complete when recorded, and rg_queue_wait has
// nothing to wait for.
#include <stdlib.h>
#include <string.h>

#include "devices/cpu/cpu_impl.h"
#include "ops/matmul.h"

typedef struct {
  rg_queue_t base;
} cpu_queue_t;

static void cpu_device_destroy(rg_device_t *d) {
  rg__cpu_device_t *cd = (rg__cpu_device_t *)d;
  rg_pool_destroy(cd->pool);
  pthread_mutex_destroy(&cd->pool_mu);
  free(cd->scratch);
  free(cd);
}

// Every op of the list has a CPU kernel in ops/cpu; which element types it
// takes is check_op's business.
static int cpu_supports_op(rg_device_t *d, rg_op_kind_t op) {
  return (unsigned)op < RG_OP_COUNT;
}

static rg_status_t cpu_check_op(rg_device_t *d, const rg_op_t *op) {
  rg_dtype_t t = rg_op_key_type(op);
  if (op->kind == RG_OP_CONVERT) {
    if (!rg_dtype_has_codec(op->convert.from) || !rg_dtype_has_codec(op->convert.to))
      return rg_status_make(RG_UNIMPLEMENTED,
                            "%s converts between f32, bf16, f16 and q8_0, not %s -> %s", d->label,
                            rg_dtype_name(op->convert.from), rg_dtype_name(op->convert.to));
    return NULL;
  }
  if (!rg_dtype_has_codec(t))
    return rg_status_make(RG_UNIMPLEMENTED,
                          "%s has no %s kernel for %s (it runs f32, bf16, f16 and q8_0)", d->label,
                          rg_op_name(op->kind), rg_dtype_name(t));
  return NULL;
}

static rg_pool_t *cpu_pool(rg_device_t *d) {
  return ((rg__cpu_device_t *)d)->pool;
}

// Weights this device's level runs fastest from packed panels (bf16 at
// avx512-bf16): a stage packs them once when it loads them.
static int cpu_weight_layout(rg_device_t *d, rg_dtype_t t) {
  return (int)rg_matmul_preferred_layout(((rg__cpu_device_t *)d)->isa, t);
}

static rg_status_t cpu_queue_submit(rg_queue_t *q, const rg_op_t *op) {
  rg__cpu_device_t *cd = (rg__cpu_device_t *)q->device;
  pthread_mutex_lock(&cd->pool_mu);
  rg_cpu_isa_t prev = rg_ops_isa_push(cd->isa);
  rg_status_t s = rg__cpu_run_op(cd, op);
  rg_ops_isa_pop(prev);
  pthread_mutex_unlock(&cd->pool_mu);
  return s;
}

static rg_status_t cpu_queue_parallel_for(rg_queue_t *q, size_t n, size_t grain, rg_pool_fn_t fn,
                                          void *ctx) {
  rg__cpu_device_t *cd = (rg__cpu_device_t *)q->device;
  pthread_mutex_lock(&cd->pool_mu);
  rg_pool_parallel_for(cd->pool, n, grain, fn, ctx);
  pthread_mutex_unlock(&cd->pool_mu);
  return NULL;
}

static void cpu_queue_destroy(rg_queue_t *q) {
  free(q);
}

static const rg_queue_vtable_t cpu_queue_vt = {
    // copy, write, read: NULL, the wrappers copy through host pointers.
    // record: NULL, events are complete at once. wait: NULL, the work is
    // done when submit returns.
    .destroy = cpu_queue_destroy,
    .submit = cpu_queue_submit,
    .parallel_for = cpu_queue_parallel_for,
};

static rg_status_t cpu_queue_create(rg_device_t *d, rg_queue_t **out) {
  cpu_queue_t *q = calloc(1, sizeof(*q));
  if (!q) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory creating a queue on %s", d->label);
  rg__queue_init(&q->base, &cpu_queue_vt, d);
  *out = &q->base;
  return NULL;
}

static const rg_device_vtable_t cpu_device_vt = {
    .destroy = cpu_device_destroy,
    .buffer_alloc = rg__host_buffer_alloc,
    .buffer_wrap = rg__host_buffer_wrap,
    .queue_create = cpu_queue_create,
    .supports_op = cpu_supports_op,
    .check_op = cpu_check_op,
    .cpu_pool = cpu_pool,
    .weight_layout = cpu_weight_layout,
};

rg_status_t rg__cpu_device_open(rg_driver_t *drv, const rg_device_info_t *info,
                                const rg_device_options_t *opts, rg_device_t **out) {
  rg_cpu_isa_t isa;
  RG_RETURN_IF_ERROR(rg_cpu_isa_resolve((rg_cpu_isa_t)opts->isa, &isa));
  rg__cpu_device_t *cd = calloc(1, sizeof(*cd));
  if (!cd) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
  rg_status_t s = rg_pool_create(opts->threads, &cd->pool);
  if (s) {
    free(cd);
    return s;
  }
  cd->isa = isa;
  cd->batch_invariant = opts->batch_invariant;
  pthread_mutex_init(&cd->pool_mu, NULL);
  rg__device_init(&cd->base, &cpu_device_vt, drv, info);
  *out = &cd->base;
  return NULL;
}
