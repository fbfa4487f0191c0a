// devices/cuda/cuda_device.c — an opened NVIDIA GPU: device memory buffers,
// streams that run the HAL's ops with ridge's kernels, copies and events.
//
// The device holds the GPU's primary context (the one the CUDA runtime,
// cuBLAS and other libraries share) and makes it current around each call,
// so that any thread may use the device. At open it loads the kernel images
// built into ridge (devices/cuda/gpu_images.h) as modules and resolves every
// kernel of ops/cuda/kernels.h; when that fails, or no images were built,
// the device still opens (memory and copies work) and every op is refused
// with the reason.
//
// Buffers are device memory (cuMemAlloc): not host visible, so read and
// write copy. A queue is a non-blocking stream with its own scratch memory
// (attention's split partials, x narrowed for cuBLAS) and, once a large
// matmul asks, its own cuBLAS handle. Work is asynchronous: rg_queue_wait or
// an event tells when it is done. A buffer released while queued work still
// uses it is safe: its release waits for the device's work first.
//
// Lifecycle of a queue's scratch: it only grows; growing waits for the
// stream (the old allocation may be in use by queued kernels) before the
// old memory is freed.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "devices/backend.h"
#include "devices/cuda/cublas_api.h"
#include "devices/cuda/cuda_api.h"
#include "devices/cuda/cuda_bench.h"
#include "devices/cuda/cuda_status.h"
#include "devices/cuda/gpu_images.h"
#include "devices/cuda/gpu_ops.h"

#define MAX_MODULES 16

typedef struct {
  rg_device_t base;
  const rg_cuda_syms_t *cu;
  rg_cu_device_t dev;
  rg_cu_context_t ctx;  // the primary context, retained
  rg_cu_module_t modules[MAX_MODULES];
  size_t n_modules;
  rg_cu_function_t fn[RG_CUK_COUNT];
  char no_kernels[320];  // "" when every kernel resolved; else why not
} cuda_device_t;

typedef struct {
  rg_buffer_t base;
  rg_cu_deviceptr_t ptr;  // 0 for an empty buffer
} cuda_buffer_t;

typedef struct {
  rg_queue_t base;
  rg_cu_stream_t stream;
  rg_cu_deviceptr_t scratch;
  size_t scratch_bytes;
  rg_cublas_handle_t blas;  // created on first use
  int blas_absent;          // 1 once cuBLAS was looked for and not usable
} cuda_queue_t;

typedef struct {
  rg_event_t base;
  rg_cu_event_t ev;
} cuda_event_t;

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
      // Queued work may still read or write this memory (the HAL lets a
      // caller release a buffer right after submitting an op on it): wait
      // for the device first. A failed free leaves nothing to do but to go on.
      (void)d->cu->cuCtxSynchronize();
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

static rg_cu_deviceptr_t dptr(rg_buffer_t *b) {
  return ((cuda_buffer_t *)b)->ptr;
}

// ----- Events --------------------------------------------------------------------

static void cuda_event_destroy(rg_event_t *e) {
  cuda_device_t *d = cuda_dev(e->device);
  rg_status_t s = push(d);
  if (!s) {
    (void)d->cu->cuEventDestroy(((cuda_event_t *)e)->ev);
    pop(d);
  }
  rg_status_free(s);
  free(e);
}

// 1: complete; 0: pending; the status when the query fails (a failed
// kernel shows here).
static rg_status_t query(rg_event_t *ev, int *out_done) {
  cuda_event_t *e = (cuda_event_t *)ev;
  cuda_device_t *d = cuda_dev(e->base.device);
  RG_RETURN_IF_ERROR(push(d));
  rg_cu_result_t r = d->cu->cuEventQuery(e->ev);
  pop(d);
  *out_done = r != RG_CU_ERROR_NOT_READY;
  return r == RG_CU_ERROR_NOT_READY ? NULL : rg__cuda_status(d->cu, r, "cuEventQuery");
}

static int cuda_event_done(rg_event_t *e) {
  int done = 0;
  rg_status_t s = query(e, &done);
  rg_status_free(s);  // failed work counts as done: rg_event_wait reports it
  return done;
}

// cuEventSynchronize has no deadline: cuEventQuery is polled instead.
static rg_status_t cuda_event_wait(rg_event_t *e, double timeout_s) {
  return rg__event_poll_wait(e, timeout_s, query);
}

static const rg_event_vtable_t cuda_event_vt = {
    .destroy = cuda_event_destroy,
    .wait = cuda_event_wait,
    .done = cuda_event_done,
};

// ----- Queues ------------------------------------------------------------------

static cuda_queue_t *cq(rg_queue_t *q) {
  return (cuda_queue_t *)q;
}

static rg_status_t cuda_queue_wait(rg_queue_t *q) {
  cuda_device_t *d = cuda_dev(q->device);
  RG_RETURN_IF_ERROR(push(d));
  rg_status_t s = RG_CUDA_CALL(d->cu, cuStreamSynchronize, cq(q)->stream);
  pop(d);
  return rg_status_wrap(s, "waiting on a queue of %s", d->base.label);
}

static void cuda_queue_destroy(rg_queue_t *q) {
  cuda_device_t *d = cuda_dev(q->device);
  cuda_queue_t *c = cq(q);
  rg_status_t s = push(d);
  if (!s) {
    if (c->blas) {
      const rg_cublas_syms_t *b;
      rg_status_t bs = rg__cublas_load(&b);
      if (!bs) (void)b->cublasDestroy_v2(c->blas);
      rg_status_free(bs);
    }
    if (c->scratch) (void)d->cu->cuMemFree(c->scratch);
    (void)d->cu->cuStreamDestroy(c->stream);
    pop(d);
  }
  rg_status_free(s);
  free(q);
}

static rg_status_t cuda_queue_copy(rg_queue_t *q, rg_buffer_t *dst, size_t dst_off,
                                   rg_buffer_t *src, size_t src_off, size_t len) {
  cuda_device_t *d = cuda_dev(q->device);
  RG_RETURN_IF_ERROR(push(d));
  rg_status_t s = RG_CUDA_CALL(d->cu, cuMemcpyDtoDAsync, dptr(dst) + dst_off, dptr(src) + src_off,
                               len, cq(q)->stream);
  pop(d);
  return rg_status_wrap(s, "copy of %zu bytes on %s", len, d->base.label);
}

// From pageable host memory the driver stages the bytes before it returns,
// so the caller may reuse src at once; pinned memory goes by DMA.
static rg_status_t cuda_queue_write(rg_queue_t *q, rg_buffer_t *dst, size_t off, const void *src,
                                    size_t len) {
  cuda_device_t *d = cuda_dev(q->device);
  RG_RETURN_IF_ERROR(push(d));
  rg_status_t s = RG_CUDA_CALL(d->cu, cuMemcpyHtoDAsync, dptr(dst) + off, src, len, cq(q)->stream);
  pop(d);
  return rg_status_wrap(s, "queue write of %zu bytes on %s", len, d->base.label);
}

// Into pageable memory the driver completes the copy before returning
// (ordered after the stream's work); into pinned memory it stays queued.
static rg_status_t cuda_queue_read(rg_queue_t *q, rg_buffer_t *src, size_t off, void *dst,
                                   size_t len) {
  cuda_device_t *d = cuda_dev(q->device);
  RG_RETURN_IF_ERROR(push(d));
  rg_status_t s = RG_CUDA_CALL(d->cu, cuMemcpyDtoHAsync, dst, dptr(src) + off, len, cq(q)->stream);
  pop(d);
  return rg_status_wrap(s, "queue read of %zu bytes on %s", len, d->base.label);
}

static rg_status_t cuda_queue_record(rg_queue_t *q, rg_event_t **out) {
  cuda_device_t *d = cuda_dev(q->device);
  cuda_event_t *e = calloc(1, sizeof(*e));
  if (!e)
    return rg_status_make(RG_OUT_OF_MEMORY, "out of memory recording an event on %s",
                          d->base.label);
  rg_status_t s = push(d);
  if (!s) {
    s = RG_CUDA_CALL(d->cu, cuEventCreate, &e->ev, RG_CU_EVENT_DISABLE_TIMING);
    if (!s) {
      s = RG_CUDA_CALL(d->cu, cuEventRecord, e->ev, cq(q)->stream);
      if (s) (void)d->cu->cuEventDestroy(e->ev);
    }
    pop(d);
  }
  if (s) {
    free(e);
    return rg_status_wrap(s, "recording an event on %s", d->base.label);
  }
  rg__event_init(&e->base, &cuda_event_vt, q->device);
  *out = &e->base;
  return NULL;
}

// Another CUDA device's event works too: cuStreamWaitEvent crosses
// contexts. Anything else the host waits for (the wrapper's default).
static rg_status_t cuda_queue_wait_event(rg_queue_t *q, rg_event_t *ev) {
  if (ev->vt != &cuda_event_vt)
    return rg_status_make(RG_UNIMPLEMENTED, "%s cannot wait on a %s event on the device",
                          q->device->label, ev->device->label);
  cuda_device_t *d = cuda_dev(q->device);
  RG_RETURN_IF_ERROR(push(d));
  rg_status_t s =
      RG_CUDA_CALL(d->cu, cuStreamWaitEvent, cq(q)->stream, ((cuda_event_t *)ev)->ev, 0);
  pop(d);
  return rg_status_wrap(s, "queue on %s waiting for an event of %s", d->base.label,
                        ev->device->label);
}

// The rg__gpu_queue_t slots, called inside push/pop by cuda_queue_submit.

static uint64_t gpu_addr(const rg_ref_t *r) {
  return r->buf ? dptr(r->buf) + r->offset : 0;
}

static rg_status_t gpu_launch(void *ctx, rg_cuk_t k, unsigned gx, unsigned gy, unsigned gz,
                              unsigned threads, unsigned smem, const void *args, size_t size) {
  cuda_queue_t *c = ctx;
  cuda_device_t *d = cuda_dev(c->base.device);
  // The kernels take their one struct by value: the driver copies `size`
  // bytes from the pointer in params[0] when the launch is queued.
  void *params[1] = {(void *)args};
  (void)size;
  return RG_CUDA_CALL(d->cu, cuLaunchKernel, d->fn[k], gx, gy, gz, threads, 1, 1, smem, c->stream,
                      params, NULL);
}

static rg_status_t gpu_scratch(void *ctx, size_t bytes, uint64_t *out) {
  cuda_queue_t *c = ctx;
  cuda_device_t *d = cuda_dev(c->base.device);
  if (bytes > c->scratch_bytes) {
    if (c->scratch) {
      RG_CUDA_CHECK(d->cu, cuStreamSynchronize, c->stream);
      (void)d->cu->cuMemFree(c->scratch);
      c->scratch = 0, c->scratch_bytes = 0;
    }
    char want[96];
    RG_RETURN_IF_ERROR(rg_status_wrap(RG_CUDA_CALL(d->cu, cuMemAlloc, &c->scratch, bytes),
                                      "scratch of %s for a queue on %s",
                                      rg__fmt_size(bytes, want, sizeof want), d->base.label));
    c->scratch_bytes = bytes;
  }
  *out = c->scratch;
  return NULL;
}

static rg_status_t gpu_read(void *ctx, void *dst, uint64_t src, size_t len) {
  cuda_queue_t *c = ctx;
  cuda_device_t *d = cuda_dev(c->base.device);
  RG_CUDA_CHECK(d->cu, cuStreamSynchronize, c->stream);
  return RG_CUDA_CALL(d->cu, cuMemcpyDtoH, dst, src, len);
}

static rg_status_t gpu_write(void *ctx, uint64_t dst, const void *src, size_t len) {
  cuda_queue_t *c = ctx;
  cuda_device_t *d = cuda_dev(c->base.device);
  RG_CUDA_CHECK(d->cu, cuMemcpyHtoDAsync, dst, src, len, c->stream);
  return RG_CUDA_CALL(d->cu, cuStreamSynchronize, c->stream);
}

// The queue's cuBLAS handle, created on first use; 0 when cuBLAS is absent
// or will not start (then never asked again for this queue).
static int gpu_have_gemm(void *ctx) {
  cuda_queue_t *c = ctx;
  if (c->blas) return 1;
  if (c->blas_absent) return 0;
  const rg_cublas_syms_t *b;
  rg_status_t s = rg__cublas_load(&b);
  if (!s) s = rg__cublas_status(b, b->cublasCreate_v2(&c->blas), "cublasCreate");
  // Plain f32 math for f32 inputs: TF32 would round x and W to 10 bits.
  if (!s)
    s = rg__cublas_status(b, b->cublasSetMathMode(c->blas, RG_CUBLAS_DEFAULT_MATH),
                          "cublasSetMathMode");
  if (s) {
    c->blas_absent = 1;
    rg_status_free(s);
    return 0;
  }
  return 1;
}

// cuBLAS is column-major: y^T (n, m) = W (k, n)^T x^T (k, m), with W and x
// as stored (row-major) read as column-major k x n and k x m.
static rg_status_t gpu_gemm(void *ctx, rg_dtype_t type, uint64_t x, uint64_t w, uint64_t y,
                            int64_t m, int64_t n, int64_t k) {
  cuda_queue_t *c = ctx;
  if (m > 2147483647 || n > 2147483647 || k > 2147483647)
    return rg_status_make(RG_UNIMPLEMENTED, "cuBLAS takes dimensions below 2^31");
  const rg_cublas_syms_t *b;
  RG_RETURN_IF_ERROR(rg__cublas_load(&b));
  RG_RETURN_IF_ERROR(
      rg__cublas_status(b, b->cublasSetStream_v2(c->blas, c->stream), "cublasSetStream"));
  int dt = type == RG_F32 ? RG_CUDA_R_32F : type == RG_BF16 ? RG_CUDA_R_16BF : RG_CUDA_R_16F;
  const float one = 1.0f, zero = 0.0f;
  return rg__cublas_status(
      b,
      b->cublasGemmEx(c->blas, RG_CUBLAS_OP_T, RG_CUBLAS_OP_N, (int)n, (int)m, (int)k, &one,
                      (const void *)(uintptr_t)w, dt, (int)k, (const void *)(uintptr_t)x, dt,
                      (int)k, &zero, (void *)(uintptr_t)y, RG_CUDA_R_32F, (int)n,
                      RG_CUBLAS_COMPUTE_32F, RG_CUBLAS_GEMM_DEFAULT),
      "cublasGemmEx");
}

static rg_status_t cuda_queue_submit(rg_queue_t *q, const rg_op_t *op) {
  cuda_device_t *d = cuda_dev(q->device);
  rg__gpu_queue_t g = {
      .ctx = q,
      .label = d->base.label,
      .multiprocessors = d->base.info.compute_units,
      .addr = gpu_addr,
      .launch = gpu_launch,
      .scratch = gpu_scratch,
      .read = gpu_read,
      .write = gpu_write,
      .have_gemm = gpu_have_gemm,
      .gemm = gpu_gemm,
  };
  RG_RETURN_IF_ERROR(push(d));
  rg_status_t s = rg__gpu_submit(&g, op);
  pop(d);
  return s;
}

static const rg_queue_vtable_t cuda_queue_vt = {
    .destroy = cuda_queue_destroy,
    .submit = cuda_queue_submit,
    .copy = cuda_queue_copy,
    .write = cuda_queue_write,
    .read = cuda_queue_read,
    .record = cuda_queue_record,
    .wait_event = cuda_queue_wait_event,
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

// ----- Kernels -------------------------------------------------------------------

static const char *const kernel_names[] = {
#define RG_X_(e, s, a) #s,
    RG_CUDA_KERNELS(RG_X_)
#undef RG_X_
};

// Loads every embedded image into the context and finds every kernel;
// records the reason in d->no_kernels when it cannot.
static void load_kernels(cuda_device_t *d) {
  if (!rg__cuda_image_count) {
    snprintf(d->no_kernels, sizeof d->no_kernels, "%s", rg__cuda_images_note);
    return;
  }
  rg_status_t s = push(d);
  for (size_t i = 0; !s && i < rg__cuda_image_count && i < MAX_MODULES; i++) {
    s = RG_CUDA_CALL(d->cu, cuModuleLoadData, &d->modules[i], rg__cuda_images[i].data);
    if (s)
      s = rg_status_wrap(s, "the kernels of ops/cuda/%s.cu (%s) do not load on this GPU",
                         rg__cuda_images[i].name, rg__cuda_images_note);
    else
      d->n_modules++;
  }
  for (int k = 0; !s && k < RG_CUK_COUNT; k++) {
    rg_cu_result_t r = RG_CU_ERROR_NOT_FOUND;
    for (size_t i = 0; i < d->n_modules && r == RG_CU_ERROR_NOT_FOUND; i++)
      r = d->cu->cuModuleGetFunction(&d->fn[k], d->modules[i], kernel_names[k]);
    if (r == RG_CU_ERROR_NOT_FOUND)
      s = rg_status_make(RG_INTERNAL, "kernel %s is missing from the built images (%s)",
                         kernel_names[k], rg__cuda_images_note);
    else
      s = rg__cuda_status(d->cu, r, "cuModuleGetFunction");
  }
  if (s) snprintf(d->no_kernels, sizeof d->no_kernels, "%s", rg_status_message(s));
  rg_status_free(s);
  pop(d);
}

// ----- Device ------------------------------------------------------------------

static void cuda_device_destroy(rg_device_t *dev) {
  cuda_device_t *d = cuda_dev(dev);
  rg_status_t s = push(d);
  if (!s) {
    for (size_t i = 0; i < d->n_modules; i++) (void)d->cu->cuModuleUnload(d->modules[i]);
    pop(d);
  }
  rg_status_free(s);
  (void)d->cu->cuDevicePrimaryCtxRelease(d->dev);
  free(d);
}

static int cuda_supports_op(rg_device_t *dev, rg_op_kind_t op) {
  return cuda_dev(dev)->no_kernels[0] == 0;
}

static rg_status_t cuda_check_op(rg_device_t *dev, const rg_op_t *op) {
  cuda_device_t *d = cuda_dev(dev);
  if (d->no_kernels[0])
    return rg_status_make(RG_UNIMPLEMENTED, "%s has no %s kernel: %s", dev->label,
                          rg_op_name(op->kind), d->no_kernels);
  return rg__gpu_check_op(dev->label, op);
}

static const rg_device_vtable_t cuda_device_vt = {
    .destroy = cuda_device_destroy,
    .buffer_alloc = cuda_buffer_alloc,
    .queue_create = cuda_queue_create,
    .supports_op = cuda_supports_op,
    .check_op = cuda_check_op,
    // cpu_pool: NULL.
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
  load_kernels(d);
  *out = &d->base;
  return NULL;
}

// ----- Measurements for the benchmarks (cuda_bench.h) ------------------------------

static rg_status_t bench_queue(rg_queue_t *q, const char *what) {
  if (!q || q->vt != &cuda_queue_vt)
    return rg_status_make(RG_INVALID_ARGUMENT, "%s: not a cuda queue", what);
  cuda_device_t *d = cuda_dev(q->device);
  if (d->no_kernels[0]) return rg_status_make(RG_UNAVAILABLE, "%s: %s", what, d->no_kernels);
  return NULL;
}

rg_status_t rg__cuda_stream_read(rg_queue_t *q, rg_buffer_t *src, rg_buffer_t *sink) {
  RG_RETURN_IF_ERROR(bench_queue(q, "stream read"));
  if (src->device != q->device || sink->device != q->device || sink->size < 256)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "stream read: the buffers must be on %s, the sink 256 bytes",
                          q->device->label);
  cuda_device_t *d = cuda_dev(q->device);
  rg_cuk_stream_t a = {dptr(src), dptr(sink), (int64_t)(src->size / 16)};
  unsigned blocks = (unsigned)(d->base.info.compute_units > 0 ? d->base.info.compute_units : 1) * 8;
  RG_RETURN_IF_ERROR(push(d));
  rg_status_t s = gpu_launch(q, RG_CUK_STREAM_READ, blocks, 1, 1, 512, 0, &a, sizeof a);
  pop(d);
  return s;
}

rg_status_t rg__cuda_blas_gemm(rg_queue_t *q, rg_dtype_t type, rg_buffer_t *x, rg_buffer_t *w,
                               rg_buffer_t *y, int64_t m, int64_t n, int64_t k) {
  RG_RETURN_IF_ERROR(bench_queue(q, "cuBLAS GEMM"));
  cuda_device_t *d = cuda_dev(q->device);
  RG_RETURN_IF_ERROR(push(d));
  rg_status_t s = NULL;
  if (!gpu_have_gemm(q)) {
    const rg_cublas_syms_t *b;
    s = rg__cublas_load(&b);
    if (!s)
      s = rg_status_make(RG_UNAVAILABLE, "cuBLAS (%s) would not start on %s", b->lib_name,
                         d->base.label);
  }
  if (!s) s = gpu_gemm(q, type, dptr(x), dptr(w), dptr(y), m, n, k);
  pop(d);
  return s;
}
