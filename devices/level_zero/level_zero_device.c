// devices/level_zero/level_zero_device.c — an opened Level Zero device
// (an Intel GPU, or an NPU a driver exposes): device memory and copies.
//
// The device owns a context on its driver and a synchronous immediate
// command list for buffer reads and writes; each queue has its own. In
// synchronous mode every copy has finished when the call that appends it
// returns, so queues are synchronous (their events complete when recorded)
// and rg_queue_wait has nothing to wait for.
//
// No kernels: Level Zero runs SPIR-V or native binaries, and ridge's build
// has no SPIR-V toolchain (clang with llvm-spirv) to make them from its
// kernel sources. Every op is refused with that reason; copies to and from
// the device, and between its buffers and other devices', work.
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "devices/backend.h"
#include "devices/level_zero/level_zero_api.h"

#define NO_KERNELS "no kernels built (ridge has no SPIR-V toolchain for Level Zero kernels)"

typedef struct {
  rg_device_t base;
  const rg_ze_syms_t *ze;
  rg_ze_driver_t driver;
  rg_ze_device_t dev;
  rg_ze_context_t ctx;
  rg_ze_command_list_t list;  // buffer read/write, under mu
  pthread_mutex_t mu;
} ze_device_t;

typedef struct {
  rg_buffer_t base;
  void *ptr;  // NULL for an empty buffer
} ze_buffer_t;

typedef struct {
  rg_queue_t base;
  rg_ze_command_list_t list;
} ze_queue_t;

static ze_device_t *zdev(rg_device_t *d) {
  return (ze_device_t *)d;
}

static void *zptr(rg_buffer_t *b) {
  return ((ze_buffer_t *)b)->ptr;
}

static rg_status_t make_list(ze_device_t *d, rg_ze_command_list_t *out) {
  rg_ze_command_queue_desc_t desc = {RG_ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC, NULL, 0, 0, 0,
                                     RG_ZE_COMMAND_QUEUE_MODE_SYNCHRONOUS,    0};
  return RG_ZE_CALL(d->ze, zeCommandListCreateImmediate, d->ctx, d->dev, &desc, out);
}

// One copy on a synchronous immediate list: done when this returns.
static rg_status_t copy_on(ze_device_t *d, rg_ze_command_list_t list, void *dst, const void *src,
                           size_t len) {
  return RG_ZE_CALL(d->ze, zeCommandListAppendMemoryCopy, list, dst, src, len, NULL, 0, NULL);
}

// ----- Buffers -----------------------------------------------------------------

static void ze_buffer_destroy(rg_buffer_t *b) {
  ze_device_t *d = zdev(b->device);
  if (zptr(b)) (void)d->ze->zeMemFree(d->ctx, zptr(b));
  free(b);
}

static rg_status_t ze_buffer_write(rg_buffer_t *b, size_t offset, const void *src, size_t len) {
  ze_device_t *d = zdev(b->device);
  pthread_mutex_lock(&d->mu);
  rg_status_t s = copy_on(d, d->list, (char *)zptr(b) + offset, src, len);
  pthread_mutex_unlock(&d->mu);
  return rg_status_wrap(s, "buffer write of %zu bytes at offset %zu on %s", len, offset,
                        d->base.label);
}

static rg_status_t ze_buffer_read(rg_buffer_t *b, size_t offset, void *dst, size_t len) {
  ze_device_t *d = zdev(b->device);
  pthread_mutex_lock(&d->mu);
  rg_status_t s = copy_on(d, d->list, dst, (char *)zptr(b) + offset, len);
  pthread_mutex_unlock(&d->mu);
  return rg_status_wrap(s, "buffer read of %zu bytes at offset %zu on %s", len, offset,
                        d->base.label);
}

static const rg_buffer_vtable_t ze_buffer_vt = {
    .destroy = ze_buffer_destroy,
    .write = ze_buffer_write,
    .read = ze_buffer_read,
};

static rg_status_t ze_buffer_alloc(rg_device_t *dev, size_t bytes, rg_buffer_t **out) {
  ze_device_t *d = zdev(dev);
  char want[96];
  ze_buffer_t *zb = calloc(1, sizeof(*zb));
  if (!zb)
    return rg_status_make(RG_OUT_OF_MEMORY, "out of host memory for a buffer on %s", dev->label);
  if (bytes) {
    rg_ze_device_mem_alloc_desc_t desc = {RG_ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC, NULL, 0, 0};
    // 64-byte alignment, as the CPU's buffers: enough for any element.
    rg_status_t s = RG_ZE_CALL(d->ze, zeMemAllocDevice, d->ctx, &desc, bytes, 64, d->dev, &zb->ptr);
    if (s) {
      free(zb);
      return rg_status_wrap(s, "cannot allocate %s on %s", rg__fmt_size(bytes, want, sizeof want),
                            dev->label);
    }
  }
  rg__buffer_init(&zb->base, &ze_buffer_vt, dev, bytes);
  *out = &zb->base;
  return NULL;
}

// ----- Queues ------------------------------------------------------------------

static void ze_queue_destroy(rg_queue_t *q) {
  (void)zdev(q->device)->ze->zeCommandListDestroy(((ze_queue_t *)q)->list);
  free(q);
}

static rg_status_t ze_queue_copy(rg_queue_t *q, rg_buffer_t *dst, size_t dst_off, rg_buffer_t *src,
                                 size_t src_off, size_t len) {
  ze_device_t *d = zdev(q->device);
  return rg_status_wrap(copy_on(d, ((ze_queue_t *)q)->list, (char *)zptr(dst) + dst_off,
                                (char *)zptr(src) + src_off, len),
                        "copy of %zu bytes on %s", len, d->base.label);
}

static rg_status_t ze_queue_write(rg_queue_t *q, rg_buffer_t *dst, size_t off, const void *src,
                                  size_t len) {
  ze_device_t *d = zdev(q->device);
  return rg_status_wrap(copy_on(d, ((ze_queue_t *)q)->list, (char *)zptr(dst) + off, src, len),
                        "queue write of %zu bytes on %s", len, d->base.label);
}

static rg_status_t ze_queue_read(rg_queue_t *q, rg_buffer_t *src, size_t off, void *dst,
                                 size_t len) {
  ze_device_t *d = zdev(q->device);
  return rg_status_wrap(copy_on(d, ((ze_queue_t *)q)->list, dst, (char *)zptr(src) + off, len),
                        "queue read of %zu bytes on %s", len, d->base.label);
}

static const rg_queue_vtable_t ze_queue_vt = {
    .destroy = ze_queue_destroy,
    // submit: NULL (no kernels; check_op gives the reason first).
    .copy = ze_queue_copy,
    .write = ze_queue_write,
    .read = ze_queue_read,
    // record, wait: NULL, a synchronous queue.
};

static rg_status_t ze_queue_create(rg_device_t *dev, rg_queue_t **out) {
  ze_device_t *d = zdev(dev);
  ze_queue_t *q = calloc(1, sizeof(*q));
  if (!q)
    return rg_status_make(RG_OUT_OF_MEMORY, "out of memory creating a queue on %s", dev->label);
  rg_status_t s = make_list(d, &q->list);
  if (s) {
    free(q);
    return rg_status_wrap(s, "cannot create a queue on %s", dev->label);
  }
  rg__queue_init(&q->base, &ze_queue_vt, dev);
  *out = &q->base;
  return NULL;
}

// ----- Device ------------------------------------------------------------------

static void ze_device_destroy(rg_device_t *dev) {
  ze_device_t *d = zdev(dev);
  (void)d->ze->zeCommandListDestroy(d->list);
  (void)d->ze->zeContextDestroy(d->ctx);
  pthread_mutex_destroy(&d->mu);
  free(d);
}

static int ze_supports_op(rg_device_t *dev, rg_op_kind_t op) {
  return 0;
}

static rg_status_t ze_check_op(rg_device_t *dev, const rg_op_t *op) {
  return rg_status_make(RG_UNIMPLEMENTED, "%s has no %s kernel: " NO_KERNELS, dev->label,
                        rg_op_name(op->kind));
}

static const rg_device_vtable_t ze_device_vt = {
    .destroy = ze_device_destroy,
    .buffer_alloc = ze_buffer_alloc,
    .queue_create = ze_queue_create,
    .supports_op = ze_supports_op,
    .check_op = ze_check_op,
};

rg_status_t rg__ze_device_open(rg_driver_t *drv, const rg_device_info_t *info,
                               const rg_device_options_t *opts, rg_device_t **out) {
  const rg_ze_syms_t *ze;
  RG_RETURN_IF_ERROR(rg__ze_load(&ze));
  ze_device_t *d = calloc(1, sizeof(*d));
  if (!d) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
  d->ze = ze;
  rg_status_t s = rg__ze_find_device(ze, info->index, &d->driver, &d->dev);
  if (s) goto fail_find;
  rg_ze_context_desc_t cdesc = {RG_ZE_STRUCTURE_TYPE_CONTEXT_DESC, NULL, 0};
  s = RG_ZE_CALL(ze, zeContextCreate, d->driver, &cdesc, &d->ctx);
  if (s) goto fail_find;
  s = make_list(d, &d->list);
  if (s) goto fail_list;
  pthread_mutex_init(&d->mu, NULL);
  rg__device_init(&d->base, &ze_device_vt, drv, info);
  *out = &d->base;
  return NULL;

fail_list:
  (void)ze->zeContextDestroy(d->ctx);
fail_find:
  free(d);
  return s;
}
