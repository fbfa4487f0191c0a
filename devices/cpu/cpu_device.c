// devices/cpu/cpu_device.c — the CPU device: host buffers, and queues that
// run host kernels on the device's thread pool.
//
// The pool belongs to the device and runs one parallel_for at a time, so
// queues take turns on it under pool_mu. Work runs when submitted: a CPU
// queue is synchronous and rg_queue_wait has nothing to wait for.
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "devices/backend.h"

// The ops the CPU backend has kernels for, by the <name> of ops/'s
// rg_op_<name> (and rg_matmul): each has a fast CPU kernel and a plain-loop
// reference there. This list and ops/ change together; the conformance
// tests run every op on every device that claims it.
static const char *const cpu_ops[] = {
    "attention", "embed",           "kv_write", "matmul", "moe_gather", "moe_group",
    "moe_route", "moe_scatter_add", "rmsnorm",  "rope",   "softmax",    "swiglu",
};

typedef struct {
  rg_device_t base;
  rg_pool_t *pool;
  pthread_mutex_t pool_mu;  // one parallel_for on the pool at a time
} cpu_device_t;

typedef struct {
  rg_queue_t base;
} cpu_queue_t;

static void cpu_device_destroy(rg_device_t *d) {
  cpu_device_t *cd = (cpu_device_t *)d;
  rg_pool_destroy(cd->pool);
  pthread_mutex_destroy(&cd->pool_mu);
  free(cd);
}

static int cpu_supports_op(rg_device_t *d, const char *op) {
  for (size_t i = 0; i < sizeof(cpu_ops) / sizeof(cpu_ops[0]); i++)
    if (!strcmp(cpu_ops[i], op)) return 1;
  return 0;
}

static rg_pool_t *cpu_pool(rg_device_t *d) {
  return ((cpu_device_t *)d)->pool;
}

static rg_status_t cpu_queue_parallel_for(rg_queue_t *q, size_t n, size_t grain, rg_pool_fn_t fn,
                                          void *ctx) {
  cpu_device_t *cd = (cpu_device_t *)q->device;
  pthread_mutex_lock(&cd->pool_mu);
  rg_pool_parallel_for(cd->pool, n, grain, fn, ctx);
  pthread_mutex_unlock(&cd->pool_mu);
  return NULL;
}

static void cpu_queue_destroy(rg_queue_t *q) {
  free(q);
}

static const rg_queue_vtable_t cpu_queue_vt = {
    // wait: NULL, the work is done when parallel_for returns.
    .destroy = cpu_queue_destroy,
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
    .queue_create = cpu_queue_create,
    .supports_op = cpu_supports_op,
    .cpu_pool = cpu_pool,
};

rg_status_t rg__cpu_device_open(rg_driver_t *drv, const rg_device_info_t *info,
                                const rg_device_options_t *opts, rg_device_t **out) {
  cpu_device_t *cd = calloc(1, sizeof(*cd));
  if (!cd) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
  rg_status_t s = rg_pool_create(opts->threads, &cd->pool);
  if (s) {
    free(cd);
    return s;
  }
  pthread_mutex_init(&cd->pool_mu, NULL);
  rg__device_init(&cd->base, &cpu_device_vt, drv, info);
  *out = &cd->base;
  return NULL;
}
