// devices/cuda/cuda_device.c — an opened NVIDIA GPU: device memory buffers
// and streams.
//
// The device holds the GPU's primary context (the one the CUDA runtime and
// other libraries share) and makes it current around each call, so that any
// thread may use the device. Buffers are device memory (cuMemAlloc): not
// host visible, so read and write copy. A queue is a non-blocking stream;
// it runs no host kernels (parallel_for is RG_UNIMPLEMENTED) and supports no
// op until ops/cuda brings kernels.
#include <stdlib.h>

#include "devices/backend.h"
#include "devices/cuda/cuda_api.h"
#include "devices/cuda/cuda_status.h"

typedef struct {
  rg_device_t base;
  const rg_cuda_syms_t *cu;
  rg_cu_device_t dev;
  rg_cu_context_t ctx;  // the primary context, retained
} cuda_device_t;

typedef struct {
  rg_buffer_t base;
  rg_cu_deviceptr_t ptr;  // 0 for an empty buffer
} cuda_buffer_t;

typedef struct {
  rg_queue_t base;
  rg_cu_stream_t stream;
} cuda_queue_t;

static cuda_device_t *cuda_dev(rg_device_t *d) {
  return (cuda_device_t *)d;
}

// Makes the device's context current on this thread until pop().
static rg_status_t push(cuda_device_t *d) {
  return RG_CUDA_CALL(d->cu, cuCtxPushCurrent, d->ctx);
}

static void pop(cuda_device_t *d) {
  rg_cu_context_t ignored;
  // Popping the context just pushed cannot fail in a way anyone could act on.
  (void)d->cu->cuCtxPopCurrent(&ignored);
}

// ----- Buffers -----------------------------------------------------------------

static void cuda_buffer_destroy(rg_buffer_t *b) {
  cuda_buffer_t *cb = (cuda_buffer_t *)b;
  cuda_device_t *d = cuda_dev(b->device);
  if (cb->ptr) {
    rg_status_t s = push(d);
    if (!s) {
      // A failed free leaves nothing to do but to go on.
      (void)d->cu->cuMemFree(cb->ptr);
      pop(d);
    }
    rg_status_free(s);
  }
  free(cb);
}

static rg_status_t cuda_buffer_write(rg_buffer_t *b, size_t offset, const void *src, size_t len) {
  cuda_buffer_t *cb = (cuda_buffer_t *)b;
  cuda_device_t *d = cuda_dev(b->device);
  RG_RETURN_IF_ERROR(push(d));
  rg_status_t s = RG_CUDA_CALL(d->cu, cuMemcpyHtoD, cb->ptr + offset, src, len);
  pop(d);
  return rg_status_wrap(s, "buffer write of %zu bytes at offset %zu on %s", len, offset,
                        d->base.label);
}

static rg_status_t cuda_buffer_read(rg_buffer_t *b, size_t offset, void *dst, size_t len) {
  cuda_buffer_t *cb = (cuda_buffer_t *)b;
  cuda_device_t *d = cuda_dev(b->device);
  RG_RETURN_IF_ERROR(push(d));
  rg_status_t s = RG_CUDA_CALL(d->cu, cuMemcpyDtoH, dst, cb->ptr + offset, len);
  pop(d);
  return rg_status_wrap(s, "buffer read of %zu bytes at offset %zu on %s", len, offset,
                        d->base.label);
}

static const rg_buffer_vtable_t cuda_buffer_vt = {
    .destroy = cuda_buffer_destroy,
    // host_ptr: NULL, device memory is not host visible.
    .write = cuda_buffer_write,
    .read = cuda_buffer_read,
};

static rg_status_t cuda_buffer_alloc(rg_device_t *dev, size_t bytes, rg_buffer_t **out) {
  cuda_device_t *d = cuda_dev(dev);
  char want[96];
  cuda_buffer_t *cb = calloc(1, sizeof(*cb));
  if (!cb)
    return rg_status_make(RG_OUT_OF_MEMORY, "out of host memory for a buffer on %s", dev->label);
  // cuMemAlloc refuses 0 bytes; an empty buffer needs no device memory.
  if (bytes) {
    rg_status_t s = push(d);
    if (!s) {
      s = RG_CUDA_CALL(d->cu, cuMemAlloc, &cb->ptr, bytes);
      pop(d);
    }
    if (s) {
      free(cb);
      return rg_status_wrap(s, "cannot allocate %s on %s", rg__fmt_size(bytes, want, sizeof(want)),
                            dev->label);
    }
  }
  rg__buffer_init(&cb->base, &cuda_buffer_vt, dev, bytes);
  *out = &cb->base;
  return NULL;
}

// ----- Queues ------------------------------------------------------------------

static rg_status_t cuda_queue_wait(rg_queue_t *q) {
  cuda_device_t *d = cuda_dev(q->device);
  RG_RETURN_IF_ERROR(push(d));
  rg_status_t s = RG_CUDA_CALL(d->cu, cuStreamSynchronize, ((cuda_queue_t *)q)->stream);
  pop(d);
  return rg_status_wrap(s, "waiting on a queue of %s", d->base.label);
}

static void cuda_queue_destroy(rg_queue_t *q) {
  cuda_device_t *d = cuda_dev(q->device);
  rg_status_t s = push(d);
  if (!s) {
    (void)d->cu->cuStreamDestroy(((cuda_queue_t *)q)->stream);
    pop(d);
  }
  rg_status_free(s);
  free(q);
}

static const rg_queue_vtable_t cuda_queue_vt = {
    .destroy = cuda_queue_destroy,
    // parallel_for: NULL, host kernels do not run on a GPU stream.
    .wait = cuda_queue_wait,
};

static rg_status_t cuda_queue_create(rg_device_t *dev, rg_queue_t **out) {
  cuda_device_t *d = cuda_dev(dev);
  cuda_queue_t *q = calloc(1, sizeof(*q));
  if (!q)
    return rg_status_make(RG_OUT_OF_MEMORY, "out of memory creating a queue on %s", dev->label);
  rg_status_t s = push(d);
  if (!s) {
    s = RG_CUDA_CALL(d->cu, cuStreamCreate, &q->stream, RG_CU_STREAM_NON_BLOCKING);
    pop(d);
  }
  if (s) {
    free(q);
    return rg_status_wrap(s, "cannot create a queue on %s", dev->label);
  }
  rg__queue_init(&q->base, &cuda_queue_vt, dev);
  *out = &q->base;
  return NULL;
}

// ----- Device ------------------------------------------------------------------

static void cuda_device_destroy(rg_device_t *dev) {
  cuda_device_t *d = cuda_dev(dev);
  (void)d->cu->cuDevicePrimaryCtxRelease(d->dev);
  free(d);
}

static const rg_device_vtable_t cuda_device_vt = {
    .destroy = cuda_device_destroy,
    .buffer_alloc = cuda_buffer_alloc,
    .queue_create = cuda_queue_create,
    // supports_op: NULL until ops/cuda has kernels. cpu_pool: NULL.
};

rg_status_t rg__cuda_device_open(rg_driver_t *drv, const rg_device_info_t *info,
                                 const rg_device_options_t *opts, rg_device_t **out) {
  const rg_cuda_syms_t *cu;
  RG_RETURN_IF_ERROR(rg__cuda_load(&cu));
  cuda_device_t *d = calloc(1, sizeof(*d));
  if (!d) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
  d->cu = cu;
  rg_status_t s = RG_CUDA_CALL(cu, cuDeviceGet, &d->dev, info->index);
  if (!s) s = RG_CUDA_CALL(cu, cuDevicePrimaryCtxRetain, &d->ctx, d->dev);
  if (s) {
    free(d);
    return s;
  }
  rg__device_init(&d->base, &cuda_device_vt, drv, info);
  *out = &d->base;
  return NULL;
}
