// devices/hip/hip_device.c — an opened AMD GPU: device memory buffers,
// streams that run the HAL's ops with ridge's kernels (ops/cuda's sources
// built by hipcc through ops/cuda/vendor.cuh), copies and events.
//
// It mirrors devices/cuda/cuda_device.c call for call, with the HIP
// runtime's device selection (hipSetDevice before each call, from any
// thread) in place of pushing a CUDA context, and shares the translation
// of ops into launches (devices/cuda/gpu_ops.c). At open it loads the code
// objects built into ridge as modules and resolves every kernel; when that
// fails, or hipcc was not found at build time, the device still opens
// (memory and copies work) and every op is refused with the reason. There
// is no vendor BLAS yet: large matmuls run the tiled kernel.
//
// Nothing here has run on AMD hardware: this machine has neither hipcc nor
// a GPU. The conformance suite's conformance_hip_* tests run it wherever
// both are present.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "devices/backend.h"
#include "devices/cuda/gpu_images.h"
#include "devices/cuda/gpu_ops.h"
#include "devices/hip/hip_api.h"

#define MAX_MODULES 16

typedef struct {
  rg_device_t base;
  const rg_hip_syms_t *hip;
  int ordinal;
  rg_hip_module_t modules[MAX_MODULES];
  size_t n_modules;
  rg_hip_function_t fn[RG_CUK_COUNT];
  char no_kernels[320];  // "" when every kernel resolved; else why not
} hip_device_t;

typedef struct {
  rg_buffer_t base;
  void *ptr;  // NULL for an empty buffer
} hip_buffer_t;

typedef struct {
  rg_queue_t base;
  rg_hip_stream_t stream;
  void *scratch;
  size_t scratch_bytes;
} hip_queue_t;

typedef struct {
  rg_event_t base;
  rg_hip_event_t ev;
} hip_event_t;

static hip_device_t *hip_dev(rg_device_t *d) {
  return (hip_device_t *)d;
}

// The HIP runtime's current device is per thread: select ours first.
static rg_status_t use(hip_device_t *d) {
  return RG_HIP_CALL(d->hip, hipSetDevice, d->ordinal);
}

static void *hptr(rg_buffer_t *b) {
  return ((hip_buffer_t *)b)->ptr;
}

// ----- Buffers -----------------------------------------------------------------

static void hip_buffer_destroy(rg_buffer_t *b) {
  hip_device_t *d = hip_dev(b->device);
  if (hptr(b)) {
    rg_status_t s = use(d);
    // Queued work may still use the memory: wait for the device first.
    if (!s) (void)d->hip->hipDeviceSynchronize();
    if (!s) (void)d->hip->hipFree(hptr(b));
    rg_status_free(s);
  }
  free(b);
}

static rg_status_t hip_buffer_write(rg_buffer_t *b, size_t offset, const void *src, size_t len) {
  hip_device_t *d = hip_dev(b->device);
  RG_RETURN_IF_ERROR(use(d));
  return rg_status_wrap(RG_HIP_CALL(d->hip, hipMemcpy, (char *)hptr(b) + offset, src, len,
                                    RG_HIP_MEMCPY_HOST_TO_DEVICE),
                        "buffer write of %zu bytes at offset %zu on %s", len, offset,
                        d->base.label);
}

static rg_status_t hip_buffer_read(rg_buffer_t *b, size_t offset, void *dst, size_t len) {
  hip_device_t *d = hip_dev(b->device);
  RG_RETURN_IF_ERROR(use(d));
  return rg_status_wrap(RG_HIP_CALL(d->hip, hipMemcpy, dst, (char *)hptr(b) + offset, len,
                                    RG_HIP_MEMCPY_DEVICE_TO_HOST),
                        "buffer read of %zu bytes at offset %zu on %s", len, offset, d->base.label);
}

static const rg_buffer_vtable_t hip_buffer_vt = {
    .destroy = hip_buffer_destroy,
    .write = hip_buffer_write,
    .read = hip_buffer_read,
};

static rg_status_t hip_buffer_alloc(rg_device_t *dev, size_t bytes, rg_buffer_t **out) {
  hip_device_t *d = hip_dev(dev);
  char want[96];
  hip_buffer_t *hb = calloc(1, sizeof(*hb));
  if (!hb)
    return rg_status_make(RG_OUT_OF_MEMORY, "out of host memory for a buffer on %s", dev->label);
  if (bytes) {
    rg_status_t s = use(d);
    if (!s) s = RG_HIP_CALL(d->hip, hipMalloc, &hb->ptr, bytes);
    if (s) {
      free(hb);
      return rg_status_wrap(s, "cannot allocate %s on %s", rg__fmt_size(bytes, want, sizeof(want)),
                            dev->label);
    }
  }
  rg__buffer_init(&hb->base, &hip_buffer_vt, dev, bytes);
  *out = &hb->base;
  return NULL;
}

// ----- Events --------------------------------------------------------------------

static void hip_event_destroy(rg_event_t *e) {
  hip_device_t *d = hip_dev(e->device);
  rg_status_t s = use(d);
  if (!s) (void)d->hip->hipEventDestroy(((hip_event_t *)e)->ev);
  rg_status_free(s);
  free(e);
}

static rg_status_t query(rg_event_t *ev, int *out_done) {
  hip_event_t *e = (hip_event_t *)ev;
  hip_device_t *d = hip_dev(e->base.device);
  RG_RETURN_IF_ERROR(use(d));
  rg_hip_error_t r = d->hip->hipEventQuery(e->ev);
  *out_done = r != RG_HIP_ERROR_NOT_READY;
  return r == RG_HIP_ERROR_NOT_READY ? NULL : rg__hip_status(d->hip, r, "hipEventQuery");
}

static int hip_event_done(rg_event_t *e) {
  int done = 0;
  rg_status_free(query(e, &done));
  return done;
}

// hipEventSynchronize has no deadline: hipEventQuery is polled instead.
static rg_status_t hip_event_wait(rg_event_t *e, double timeout_s) {
  return rg__event_poll_wait(e, timeout_s, query);
}

static const rg_event_vtable_t hip_event_vt = {
    .destroy = hip_event_destroy,
    .wait = hip_event_wait,
    .done = hip_event_done,
};

// ----- Queues ------------------------------------------------------------------

static hip_queue_t *hq(rg_queue_t *q) {
  return (hip_queue_t *)q;
}

static rg_status_t hip_queue_wait(rg_queue_t *q) {
  hip_device_t *d = hip_dev(q->device);
  RG_RETURN_IF_ERROR(use(d));
  return rg_status_wrap(RG_HIP_CALL(d->hip, hipStreamSynchronize, hq(q)->stream),
                        "waiting on a queue of %s", d->base.label);
}

static void hip_queue_destroy(rg_queue_t *q) {
  hip_device_t *d = hip_dev(q->device);
  rg_status_t s = use(d);
  if (!s) {
    if (hq(q)->scratch) (void)d->hip->hipFree(hq(q)->scratch);
    (void)d->hip->hipStreamDestroy(hq(q)->stream);
  }
  rg_status_free(s);
  free(q);
}

static rg_status_t async_copy(rg_queue_t *q, void *dst, const void *src, size_t len, int kind,
                              const char *what) {
  hip_device_t *d = hip_dev(q->device);
  RG_RETURN_IF_ERROR(use(d));
  return rg_status_wrap(RG_HIP_CALL(d->hip, hipMemcpyAsync, dst, src, len, kind, hq(q)->stream),
                        "%s of %zu bytes on %s", what, len, d->base.label);
}

static rg_status_t hip_queue_copy(rg_queue_t *q, rg_buffer_t *dst, size_t dst_off, rg_buffer_t *src,
                                  size_t src_off, size_t len) {
  return async_copy(q, (char *)hptr(dst) + dst_off, (char *)hptr(src) + src_off, len,
                    RG_HIP_MEMCPY_DEVICE_TO_DEVICE, "copy");
}

static rg_status_t hip_queue_write(rg_queue_t *q, rg_buffer_t *dst, size_t off, const void *src,
                                   size_t len) {
  return async_copy(q, (char *)hptr(dst) + off, src, len, RG_HIP_MEMCPY_HOST_TO_DEVICE,
                    "queue write");
}

static rg_status_t hip_queue_read(rg_queue_t *q, rg_buffer_t *src, size_t off, void *dst,
                                  size_t len) {
  return async_copy(q, dst, (char *)hptr(src) + off, len, RG_HIP_MEMCPY_DEVICE_TO_HOST,
                    "queue read");
}

static rg_status_t hip_queue_record(rg_queue_t *q, rg_event_t **out) {
  hip_device_t *d = hip_dev(q->device);
  hip_event_t *e = calloc(1, sizeof(*e));
  if (!e)
    return rg_status_make(RG_OUT_OF_MEMORY, "out of memory recording an event on %s",
                          d->base.label);
  rg_status_t s = use(d);
  if (!s) s = RG_HIP_CALL(d->hip, hipEventCreateWithFlags, &e->ev, RG_HIP_EVENT_DISABLE_TIMING);
  if (!s) {
    s = RG_HIP_CALL(d->hip, hipEventRecord, e->ev, hq(q)->stream);
    if (s) (void)d->hip->hipEventDestroy(e->ev);
  }
  if (s) {
    free(e);
    return rg_status_wrap(s, "recording an event on %s", d->base.label);
  }
  rg__event_init(&e->base, &hip_event_vt, q->device);
  *out = &e->base;
  return NULL;
}

static rg_status_t hip_queue_wait_event(rg_queue_t *q, rg_event_t *ev) {
  if (ev->vt != &hip_event_vt)
    return rg_status_make(RG_UNIMPLEMENTED, "%s cannot wait on a %s event on the device",
                          q->device->label, ev->device->label);
  hip_device_t *d = hip_dev(q->device);
  RG_RETURN_IF_ERROR(use(d));
  return rg_status_wrap(
      RG_HIP_CALL(d->hip, hipStreamWaitEvent, hq(q)->stream, ((hip_event_t *)ev)->ev, 0),
      "queue on %s waiting for an event of %s", d->base.label, ev->device->label);
}

// The rg__gpu_queue_t slots.

static uint64_t gpu_addr(const rg_ref_t *r) {
  return r->buf ? (uint64_t)(uintptr_t)hptr(r->buf) + r->offset : 0;
}

static rg_status_t gpu_launch(void *ctx, rg_cuk_t k, unsigned gx, unsigned gy, unsigned gz,
                              unsigned threads, unsigned smem, const void *args, size_t size) {
  hip_queue_t *c = ctx;
  hip_device_t *d = hip_dev(c->base.device);
  void *params[1] = {(void *)args};
  (void)size;
  return RG_HIP_CALL(d->hip, hipModuleLaunchKernel, d->fn[k], gx, gy, gz, threads, 1, 1, smem,
                     c->stream, params, NULL);
}

static rg_status_t gpu_scratch(void *ctx, size_t bytes, uint64_t *out) {
  hip_queue_t *c = ctx;
  hip_device_t *d = hip_dev(c->base.device);
  if (bytes > c->scratch_bytes) {
    if (c->scratch) {
      RG_HIP_CHECK(d->hip, hipStreamSynchronize, c->stream);
      (void)d->hip->hipFree(c->scratch);
      c->scratch = NULL, c->scratch_bytes = 0;
    }
    RG_HIP_CHECK(d->hip, hipMalloc, &c->scratch, bytes);
    c->scratch_bytes = bytes;
  }
  *out = (uint64_t)(uintptr_t)c->scratch;
  return NULL;
}

static rg_status_t gpu_read(void *ctx, void *dst, uint64_t src, size_t len) {
  hip_queue_t *c = ctx;
  hip_device_t *d = hip_dev(c->base.device);
  RG_HIP_CHECK(d->hip, hipStreamSynchronize, c->stream);
  return RG_HIP_CALL(d->hip, hipMemcpy, dst, (const void *)(uintptr_t)src, len,
                     RG_HIP_MEMCPY_DEVICE_TO_HOST);
}

static rg_status_t gpu_write(void *ctx, uint64_t dst, const void *src, size_t len) {
  hip_queue_t *c = ctx;
  hip_device_t *d = hip_dev(c->base.device);
  RG_HIP_CHECK(d->hip, hipMemcpyAsync, (void *)(uintptr_t)dst, src, len,
               RG_HIP_MEMCPY_HOST_TO_DEVICE, c->stream);
  return RG_HIP_CALL(d->hip, hipStreamSynchronize, c->stream);
}

static rg_status_t hip_queue_submit(rg_queue_t *q, const rg_op_t *op) {
  hip_device_t *d = hip_dev(q->device);
  rg__gpu_queue_t g = {
      .ctx = q,
      .label = d->base.label,
      .multiprocessors = d->base.info.compute_units,
      .addr = gpu_addr,
      .launch = gpu_launch,
      .scratch = gpu_scratch,
      .read = gpu_read,
      .write = gpu_write,
      // No hipBLAS yet: have_gemm and gemm stay NULL, the tiled kernel runs.
  };
  RG_RETURN_IF_ERROR(use(d));
  return rg__gpu_submit(&g, op);
}

static const rg_queue_vtable_t hip_queue_vt = {
    .destroy = hip_queue_destroy,
    .submit = hip_queue_submit,
    .copy = hip_queue_copy,
    .write = hip_queue_write,
    .read = hip_queue_read,
    .record = hip_queue_record,
    .wait_event = hip_queue_wait_event,
    .wait = hip_queue_wait,
};

static rg_status_t hip_queue_create(rg_device_t *dev, rg_queue_t **out) {
  hip_device_t *d = hip_dev(dev);
  hip_queue_t *q = calloc(1, sizeof(*q));
  if (!q)
    return rg_status_make(RG_OUT_OF_MEMORY, "out of memory creating a queue on %s", dev->label);
  rg_status_t s = use(d);
  if (!s) s = RG_HIP_CALL(d->hip, hipStreamCreateWithFlags, &q->stream, RG_HIP_STREAM_NON_BLOCKING);
  if (s) {
    free(q);
    return rg_status_wrap(s, "cannot create a queue on %s", dev->label);
  }
  rg__queue_init(&q->base, &hip_queue_vt, dev);
  *out = &q->base;
  return NULL;
}

// ----- Kernels -------------------------------------------------------------------

static const char *const kernel_names[] = {
#define RG_X_(e, s, a) #s,
    RG_CUDA_KERNELS(RG_X_)
#undef RG_X_
};

static void load_kernels(hip_device_t *d) {
  if (!rg__hip_image_count) {
    snprintf(d->no_kernels, sizeof d->no_kernels, "%s", rg__hip_images_note);
    return;
  }
  rg_status_t s = use(d);
  for (size_t i = 0; !s && i < rg__hip_image_count && i < MAX_MODULES; i++) {
    s = RG_HIP_CALL(d->hip, hipModuleLoadData, &d->modules[i], rg__hip_images[i].data);
    if (s)
      s = rg_status_wrap(s, "the kernels of ops/cuda/%s.cu (%s) do not load on this GPU",
                         rg__hip_images[i].name, rg__hip_images_note);
    else
      d->n_modules++;
  }
  for (int k = 0; !s && k < RG_CUK_COUNT; k++) {
    rg_hip_error_t r = RG_HIP_ERROR_NOT_FOUND;
    for (size_t i = 0; i < d->n_modules && r != RG_HIP_SUCCESS; i++)
      r = d->hip->hipModuleGetFunction(&d->fn[k], d->modules[i], kernel_names[k]);
    if (r != RG_HIP_SUCCESS)
      s = rg_status_wrap(rg__hip_status(d->hip, r, "hipModuleGetFunction"),
                         "kernel %s is missing from the built images (%s)", kernel_names[k],
                         rg__hip_images_note);
  }
  if (s) snprintf(d->no_kernels, sizeof d->no_kernels, "%s", rg_status_message(s));
  rg_status_free(s);
}

// ----- Device ------------------------------------------------------------------

static void hip_device_destroy(rg_device_t *dev) {
  hip_device_t *d = hip_dev(dev);
  rg_status_t s = use(d);
  if (!s)
    for (size_t i = 0; i < d->n_modules; i++) (void)d->hip->hipModuleUnload(d->modules[i]);
  rg_status_free(s);
  free(d);
}

static int hip_supports_op(rg_device_t *dev, rg_op_kind_t op) {
  return hip_dev(dev)->no_kernels[0] == 0;
}

static rg_status_t hip_check_op(rg_device_t *dev, const rg_op_t *op) {
  hip_device_t *d = hip_dev(dev);
  if (d->no_kernels[0])
    return rg_status_make(RG_UNIMPLEMENTED, "%s has no %s kernel: %s", dev->label,
                          rg_op_name(op->kind), d->no_kernels);
  return rg__gpu_check_op(dev->label, op);
}

static const rg_device_vtable_t hip_device_vt = {
    .destroy = hip_device_destroy,
    .buffer_alloc = hip_buffer_alloc,
    .queue_create = hip_queue_create,
    .supports_op = hip_supports_op,
    .check_op = hip_check_op,
};

rg_status_t rg__hip_device_open(rg_driver_t *drv, const rg_device_info_t *info,
                                const rg_device_options_t *opts, rg_device_t **out) {
  const rg_hip_syms_t *hip;
  RG_RETURN_IF_ERROR(rg__hip_load(&hip));
  hip_device_t *d = calloc(1, sizeof(*d));
  if (!d) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
  d->hip = hip;
  d->ordinal = info->index;
  rg_status_t s = use(d);
  if (s) {
    free(d);
    return s;
  }
  rg__device_init(&d->base, &hip_device_vt, drv, info);
  load_kernels(d);
  *out = &d->base;
  return NULL;
}
