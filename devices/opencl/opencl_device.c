// devices/opencl/opencl_device.c — an opened OpenCL device: its context,
// buffers (cl_mem), in-order queues, and marker events.
//
// Buffers are device memory, not host visible: rg_buffer_write/read copy on
// a queue of the device's own (blocking), the queue's write/read/copy are
// enqueued in order with its kernels. An event is a marker: another queue of
// the same context waits for it with a barrier on the device, anything else
// waits on the host, and the host polls it with a deadline (OpenCL's own
// clWaitForEvents has none).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "devices/opencl/opencl_impl.h"

static rg__cl_device_t *cl_dev(rg_device_t *d) {
  return (rg__cl_device_t *)d;
}

// ----- Contexts: one per OpenCL device, for the process --------------------------

static struct {
  pthread_mutex_t mu;
  size_t n;
  rg__cl_context_t *slots[RG_DEVICES_MAX];
} contexts = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void info_string(const rg_cl_syms_t *cl, rg_cl_device_id d, rg_cl_uint what, char *buf,
                        size_t len) {
  if (cl->clGetDeviceInfo(d, what, len - 1, buf, NULL) != RG_CL_SUCCESS) buf[0] = 0;
  buf[len - 1] = 0;
}

static rg_status_t context_make(const rg_cl_syms_t *cl, rg_cl_device_id id, rg_cl_platform_id plat,
                                rg__cl_context_t **out) {
  rg__cl_context_t *cx = calloc(1, sizeof(*cx));
  if (!cx) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory for an OpenCL context");
  cx->id = id;
  cx->platform = plat;
  rg_cl_ulong type = 0;
  rg_status_t s = RG_CL_CALL(cl, clGetDeviceInfo, id, RG_CL_DEVICE_TYPE, sizeof(type), &type, NULL);
  if (!s)
    s = RG_CL_CALL(cl, clGetDeviceInfo, id, RG_CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof(cx->max_alloc),
                   &cx->max_alloc, NULL);
  if (!s)
    s = RG_CL_CALL(cl, clGetDeviceInfo, id, RG_CL_DEVICE_LOCAL_MEM_SIZE, sizeof(cx->local_mem),
                   &cx->local_mem, NULL);
  if (!s)
    s = RG_CL_CALL(cl, clGetDeviceInfo, id, RG_CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof(cx->max_wg),
                   &cx->max_wg, NULL);
  rg_cl_bitfield fp = 0;
  if (!s)
    s = RG_CL_CALL(cl, clGetDeviceInfo, id, RG_CL_DEVICE_SINGLE_FP_CONFIG, sizeof(fp), &fp, NULL);
  if (s) goto fail;
  cx->has_fma = (fp & RG_CL_FP_FMA) != 0;
  cx->is_cpu = (type & RG_CL_DEVICE_TYPE_CPU) != 0;
  cx->cpu_shapes = cx->is_cpu;
  info_string(cl, id, RG_CL_DEVICE_NAME, cx->name, sizeof(cx->name));
  info_string(cl, id, RG_CL_DRIVER_VERSION, cx->driver_version, sizeof(cx->driver_version));
  info_string(cl, id, RG_CL_DEVICE_VERSION, cx->device_version, sizeof(cx->device_version));
  if (cl->clGetPlatformInfo(plat, RG_CL_PLATFORM_VERSION, sizeof(cx->platform_version) - 1,
                            cx->platform_version, NULL) != RG_CL_SUCCESS)
    cx->platform_version[0] = 0;
  char pname[128] = "";
  if (cl->clGetPlatformInfo(plat, RG_CL_PLATFORM_NAME, sizeof(pname) - 1, pname, NULL) !=
      RG_CL_SUCCESS)
    pname[0] = 0;
  cx->disk_cache = rg__cl_disk_cache_default(pname);
  rg_cl_context_properties props[] = {RG_CL_CONTEXT_PLATFORM, (rg_cl_context_properties)plat, 0};
  rg_cl_int err = RG_CL_SUCCESS;
  cx->ctx = cl->clCreateContext(props, 1, &id, NULL, NULL, &err);
  s = rg__cl_status(err, "clCreateContext");
  if (s) goto fail;
  pthread_mutex_init(&cx->mu, NULL);
  *out = cx;
  return NULL;
fail:
  free(cx);
  return s;
}

// The context of device id, made on first use. Contexts are never released:
// they hold the programs built for the device, which a later open reuses.
static rg_status_t context_for(const rg_cl_syms_t *cl, rg_cl_device_id id, rg_cl_platform_id plat,
                               rg__cl_context_t **out) {
  rg_status_t s = NULL;
  pthread_mutex_lock(&contexts.mu);
  *out = NULL;
  for (size_t i = 0; i < contexts.n && !*out; i++)
    if (contexts.slots[i]->id == id) *out = contexts.slots[i];
  if (!*out) {
    if (contexts.n == RG_DEVICES_MAX)
      s = rg_status_make(RG_OUT_OF_MEMORY, "more than %d OpenCL devices", RG_DEVICES_MAX);
    if (!s) s = context_make(cl, id, plat, out);
    if (!s) contexts.slots[contexts.n++] = *out;
  }
  pthread_mutex_unlock(&contexts.mu);
  return s;
}

// ----- Buffers ---------------------------------------------------------------------

static void cl_buffer_destroy(rg_buffer_t *b) {
  rg__cl_buffer_t *cb = (rg__cl_buffer_t *)b;
  // A failed release leaves nothing to do but to go on.
  if (cb->mem) (void)cl_dev(b->device)->cl->clReleaseMemObject(cb->mem);
  free(cb);
}

static rg_status_t cl_buffer_write(rg_buffer_t *b, size_t offset, const void *src, size_t len) {
  rg__cl_device_t *d = cl_dev(b->device);
  pthread_mutex_lock(&d->xfer_mu);
  rg_status_t s = RG_CL_CALL(d->cl, clEnqueueWriteBuffer, d->xfer, ((rg__cl_buffer_t *)b)->mem,
                             RG_CL_TRUE, offset, len, src, 0, NULL, NULL);
  pthread_mutex_unlock(&d->xfer_mu);
  return rg_status_wrap(s, "buffer write of %zu bytes at offset %zu on %s", len, offset,
                        d->base.label);
}

static rg_status_t cl_buffer_read(rg_buffer_t *b, size_t offset, void *dst, size_t len) {
  rg__cl_device_t *d = cl_dev(b->device);
  pthread_mutex_lock(&d->xfer_mu);
  rg_status_t s = RG_CL_CALL(d->cl, clEnqueueReadBuffer, d->xfer, ((rg__cl_buffer_t *)b)->mem,
                             RG_CL_TRUE, offset, len, dst, 0, NULL, NULL);
  pthread_mutex_unlock(&d->xfer_mu);
  return rg_status_wrap(s, "buffer read of %zu bytes at offset %zu on %s", len, offset,
                        d->base.label);
}

static const rg_buffer_vtable_t cl_buffer_vt = {
    .destroy = cl_buffer_destroy,
    // host_ptr: NULL, device memory is not host visible.
    .write = cl_buffer_write,
    .read = cl_buffer_read,
};

static rg_status_t cl_buffer_alloc(rg_device_t *dev, size_t bytes, rg_buffer_t **out) {
  rg__cl_device_t *d = cl_dev(dev);
  char want[96], most[96];
  // OpenCL caps each allocation, well below the device's memory on many
  // devices (a quarter of it is the minimum the standard allows).
  if ((uint64_t)bytes > d->cx->max_alloc)
    return rg_status_make(RG_OUT_OF_MEMORY,
                          "cannot allocate %s on %s: more than its largest single allocation, %s "
                          "(CL_DEVICE_MAX_MEM_ALLOC_SIZE); split the tensor",
                          rg__fmt_size(bytes, want, sizeof(want)), dev->label,
                          rg__fmt_size(d->cx->max_alloc, most, sizeof(most)));
  rg__cl_buffer_t *cb = calloc(1, sizeof(*cb));
  if (!cb)
    return rg_status_make(RG_OUT_OF_MEMORY, "out of host memory for a buffer on %s", dev->label);
  // clCreateBuffer refuses 0 bytes; an empty buffer needs no device memory.
  if (bytes) {
    rg_cl_int err = RG_CL_SUCCESS;
    cb->mem = d->cl->clCreateBuffer(d->cx->ctx, RG_CL_MEM_READ_WRITE, bytes, NULL, &err);
    rg_status_t s = rg__cl_status(err, "clCreateBuffer");
    if (s) {
      free(cb);
      return rg_status_wrap(s, "cannot allocate %s on %s", rg__fmt_size(bytes, want, sizeof(want)),
                            dev->label);
    }
  }
  rg__buffer_init(&cb->base, &cl_buffer_vt, dev, bytes);
  *out = &cb->base;
  return NULL;
}

// ----- Events ----------------------------------------------------------------------

static rg_status_t event_status(rg__cl_event_t *e, rg_cl_int *status) {
  const rg_cl_syms_t *cl = cl_dev(e->base.device)->cl;
  return RG_CL_CALL(cl, clGetEventInfo, e->ev, RG_CL_EVENT_COMMAND_EXECUTION_STATUS,
                    sizeof(*status), status, NULL);
}

static int cl_event_done(rg_event_t *ev) {
  rg_cl_int st = RG_CL_COMPLETE;
  rg_status_t s = event_status((rg__cl_event_t *)ev, &st);
  rg_status_free(s);
  return s || st <= RG_CL_COMPLETE;  // complete, or failed (negative)
}

// Polls with a back-off from 20 us to 1 ms: short waits (a decode step)
// return soon after the work does, long ones cost little host time.
static rg_status_t cl_event_wait(rg_event_t *ev, double timeout_s) {
  rg__cl_event_t *e = (rg__cl_event_t *)ev;
  double deadline = rg_clock_now() + timeout_s, nap = 20e-6;
  for (;;) {
    rg_cl_int st;
    RG_RETURN_IF_ERROR(
        rg_status_wrap(event_status(e, &st), "waiting for an event on %s", ev->device->label));
    if (st == RG_CL_COMPLETE) return NULL;
    if (st < 0)
      return rg_status_make(RG_INTERNAL, "%s: the work before this event failed: %s (%d)",
                            ev->device->label, rg__cl_error_name(st), (int)st);
    double left = deadline - rg_clock_now();
    if (left <= 0)
      return rg_status_make(RG_UNAVAILABLE,
                            "%s: the work before this event was not done after %g s (the wait's "
                            "deadline)",
                            ev->device->label, timeout_s);
    double t = nap < left ? nap : left;
    struct timespec ts = {(time_t)t, (long)((t - (double)(time_t)t) * 1e9)};
    nanosleep(&ts, NULL);
    if (nap < 1e-3) nap *= 2;
  }
}

static void cl_event_destroy(rg_event_t *ev) {
  rg__cl_event_t *e = (rg__cl_event_t *)ev;
  (void)cl_dev(ev->device)->cl->clReleaseEvent(e->ev);
  free(e);
}

static const rg_event_vtable_t cl_event_vt = {
    .destroy = cl_event_destroy,
    .wait = cl_event_wait,
    .done = cl_event_done,
};

// ----- Queues ----------------------------------------------------------------------

static rg__cl_queue_t *cl_q(rg_queue_t *q) {
  return (rg__cl_queue_t *)q;
}

static rg_status_t cl_queue_wait(rg_queue_t *q) {
  rg__cl_device_t *d = cl_dev(q->device);
  RG_RETURN_IF_ERROR(rg_status_wrap(RG_CL_CALL(d->cl, clFinish, cl_q(q)->q),
                                    "waiting on a queue of %s", d->base.label));
  return rg__cl_take_fault(cl_q(q));
}

static rg_status_t cl_queue_copy(rg_queue_t *q, rg_buffer_t *dst, size_t dst_off, rg_buffer_t *src,
                                 size_t src_off, size_t len) {
  rg__cl_device_t *d = cl_dev(q->device);
  rg_cl_mem sm = ((rg__cl_buffer_t *)src)->mem, dm = ((rg__cl_buffer_t *)dst)->mem;
  // OpenCL refuses overlapping copies within one buffer; such a copy goes
  // through the host, as memmove would.
  if (sm == dm && src_off < dst_off + len && dst_off < src_off + len) {
    void *tmp = malloc(len);
    if (!tmp)
      return rg_status_make(RG_OUT_OF_MEMORY, "copy on %s: no host memory to stage %zu bytes",
                            d->base.label, len);
    rg_status_t s = RG_CL_CALL(d->cl, clEnqueueReadBuffer, cl_q(q)->q, sm, RG_CL_TRUE, src_off, len,
                               tmp, 0, NULL, NULL);
    if (!s)
      s = RG_CL_CALL(d->cl, clEnqueueWriteBuffer, cl_q(q)->q, dm, RG_CL_TRUE, dst_off, len, tmp, 0,
                     NULL, NULL);
    free(tmp);
    return rg_status_wrap(s, "overlapping copy of %zu bytes on %s", len, d->base.label);
  }
  return rg_status_wrap(RG_CL_CALL(d->cl, clEnqueueCopyBuffer, cl_q(q)->q, sm, dm, src_off, dst_off,
                                   len, 0, NULL, NULL),
                        "copy of %zu bytes on %s", len, d->base.label);
}

static rg_status_t cl_queue_write(rg_queue_t *q, rg_buffer_t *dst, size_t off, const void *src,
                                  size_t len) {
  rg__cl_device_t *d = cl_dev(q->device);
  return rg_status_wrap(
      RG_CL_CALL(d->cl, clEnqueueWriteBuffer, cl_q(q)->q, ((rg__cl_buffer_t *)dst)->mem,
                 RG_CL_FALSE, off, len, src, 0, NULL, NULL),
      "queue write of %zu bytes at offset %zu on %s", len, off, d->base.label);
}

static rg_status_t cl_queue_read(rg_queue_t *q, rg_buffer_t *src, size_t off, void *dst,
                                 size_t len) {
  rg__cl_device_t *d = cl_dev(q->device);
  return rg_status_wrap(
      RG_CL_CALL(d->cl, clEnqueueReadBuffer, cl_q(q)->q, ((rg__cl_buffer_t *)src)->mem, RG_CL_FALSE,
                 off, len, dst, 0, NULL, NULL),
      "queue read of %zu bytes at offset %zu on %s", len, off, d->base.label);
}

static rg_status_t cl_queue_record(rg_queue_t *q, rg_event_t **out) {
  rg__cl_device_t *d = cl_dev(q->device);
  rg__cl_event_t *e = calloc(1, sizeof(*e));
  if (!e)
    return rg_status_make(RG_OUT_OF_MEMORY, "out of memory recording an event on %s",
                          d->base.label);
  rg_status_t s = RG_CL_CALL(d->cl, clEnqueueMarkerWithWaitList, cl_q(q)->q, 0, NULL, &e->ev);
  // Flushed, so that the marker reaches the device whoever waits for it.
  if (!s) s = RG_CL_CALL(d->cl, clFlush, cl_q(q)->q);
  if (s) {
    if (e->ev) (void)d->cl->clReleaseEvent(e->ev);
    free(e);
    return rg_status_wrap(s, "recording an event on %s", d->base.label);
  }
  e->cx = d->cx;
  rg__event_init(&e->base, &cl_event_vt, q->device);
  *out = &e->base;
  return NULL;
}

static rg_status_t cl_queue_wait_event(rg_queue_t *q, rg_event_t *ev) {
  rg__cl_device_t *d = cl_dev(q->device);
  // Another backend's event, or another context's: the host waits instead.
  if (ev->vt != &cl_event_vt || ((rg__cl_event_t *)ev)->cx != d->cx)
    return rg_status_make(RG_UNIMPLEMENTED, "not an event of %s's context", d->base.label);
  return rg_status_wrap(RG_CL_CALL(d->cl, clEnqueueBarrierWithWaitList, cl_q(q)->q, 1,
                                   &((rg__cl_event_t *)ev)->ev, NULL),
                        "waiting for an event on %s", d->base.label);
}

// Releases what a queue holds (any of it may be missing).
static void queue_free(rg__cl_device_t *d, rg__cl_queue_t *cq) {
  for (int k = 0; k < RG__CLK_COUNT; k++)
    if (cq->kernels[k]) (void)d->cl->clReleaseKernel(cq->kernels[k]);
  if (cq->err) (void)d->cl->clReleaseMemObject(cq->err);
  if (cq->q) (void)d->cl->clReleaseCommandQueue(cq->q);
  free(cq);
}

static void cl_queue_destroy(rg_queue_t *q) {
  queue_free(cl_dev(q->device), cl_q(q));
}

static const rg_queue_vtable_t cl_queue_vt = {
    .destroy = cl_queue_destroy,
    .submit = rg__cl_submit,
    .copy = cl_queue_copy,
    .write = cl_queue_write,
    .read = cl_queue_read,
    .record = cl_queue_record,
    .wait_event = cl_queue_wait_event,
    // parallel_for: NULL, host kernels do not run on an OpenCL queue.
    .wait = cl_queue_wait,
};

static rg_status_t cl_queue_create(rg_device_t *dev, rg_queue_t **out) {
  rg__cl_device_t *d = cl_dev(dev);
  rg__cl_queue_t *cq = calloc(1, sizeof(*cq));
  if (!cq)
    return rg_status_make(RG_OUT_OF_MEMORY, "out of memory creating a queue on %s", dev->label);
  rg_cl_int err = RG_CL_SUCCESS;
  // In order (no properties): ops run one after another, as the HAL says.
  cq->q = d->cl->clCreateCommandQueue(d->cx->ctx, d->cx->id, 0, &err);
  rg_status_t s = rg__cl_status(err, "clCreateCommandQueue");
  if (!s) {
    cq->err =
        d->cl->clCreateBuffer(d->cx->ctx, RG_CL_MEM_READ_WRITE, 4 * sizeof(int32_t), NULL, &err);
    s = rg__cl_status(err, "clCreateBuffer");
  }
  if (!s) {
    static const int32_t zero[4] = {0};
    s = RG_CL_CALL(d->cl, clEnqueueWriteBuffer, cq->q, cq->err, RG_CL_TRUE, 0, sizeof(zero), zero,
                   0, NULL, NULL);
  }
  if (s) {
    queue_free(d, cq);
    return rg_status_wrap(s, "cannot create a queue on %s", dev->label);
  }
  rg__queue_init(&cq->base, &cl_queue_vt, dev);
  *out = &cq->base;
  return NULL;
}

// ----- Device ----------------------------------------------------------------------

static void cl_device_destroy(rg_device_t *dev) {
  rg__cl_device_t *d = cl_dev(dev);
  (void)d->cl->clReleaseCommandQueue(d->xfer);
  pthread_mutex_destroy(&d->xfer_mu);
  free(d);
}

static const rg_device_vtable_t cl_device_vt = {
    .destroy = cl_device_destroy,
    .buffer_alloc = cl_buffer_alloc,
    .queue_create = cl_queue_create,
    .supports_op = rg__cl_supports_op,
    .check_op = rg__cl_check_op,
    // buffer_wrap: NULL, device memory. cpu_pool: NULL, not a CPU device of
    // ridge's (PoCL's threads are its own).
};

rg_status_t rg__cl_device_open(rg_driver_t *drv, const rg_device_info_t *info,
                               const rg_device_options_t *opts, rg_device_t **out) {
  const rg_cl_syms_t *cl;
  RG_RETURN_IF_ERROR(rg__cl_load(&cl));
  rg_cl_device_id devs[RG_DEVICES_MAX];
  rg_cl_platform_id plats[RG_DEVICES_MAX];
  size_t n = 0;
  RG_RETURN_IF_ERROR(rg__cl_enumerate(cl, devs, plats, RG_DEVICES_MAX, &n));
  if ((size_t)info->index >= n || info->index >= RG_DEVICES_MAX)
    return rg_status_make(RG_NOT_FOUND, "the OpenCL platforms list %zu devices now", n);
  rg__cl_context_t *cx;
  RG_RETURN_IF_ERROR(context_for(cl, devs[info->index], plats[info->index], &cx));
  rg__cl_device_t *d = calloc(1, sizeof(*d));
  if (!d) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
  d->cl = cl;
  d->cx = cx;
  rg_cl_int err = RG_CL_SUCCESS;
  d->xfer = cl->clCreateCommandQueue(cx->ctx, cx->id, 0, &err);
  rg_status_t s = rg__cl_status(err, "clCreateCommandQueue");
  if (s) {
    free(d);
    return s;
  }
  pthread_mutex_init(&d->xfer_mu, NULL);
  rg__device_init(&d->base, &cl_device_vt, drv, info);
  *out = &d->base;
  return NULL;
}
