// devices/null/null.c — the null backend: the smallest complete backend.
//
// It finds one device, "null:0", that does no work: buffers are plain host
// memory, its queue cannot run kernels (parallel_for returns
// RG_UNIMPLEMENTED) and it supports no op. It serves two ends:
//
// - A template. Every object a backend provides is here, in the order a
//   backend is written: driver (probe, open), device, buffer, queue. To add
//   a backend, copy this file to devices/<name>/, rename null to <name>,
//   split it into <name>_driver.c, <name>_device.c, <name>_buffer.c and
//   <name>_queue.c as it grows, load the vendor library in probe with
//   rg__dynlib_open (see devices/cuda/), and add rg__<name>_driver() to the
//   built-in list in devices/device_registry.c.
// - A test double: code above the HAL can run against a device that
//   refuses work, and see the messages a user would.
//
// Slots left NULL show what the public wrappers do without them (see
// devices/backend.h): no supports_op means "supports nothing", no cpu_pool
// means "not a CPU", no buffer write/read means memcpy through host_ptr, no
// queue parallel_for means RG_UNIMPLEMENTED, no queue wait means "nothing to
// wait for".
#include <stdlib.h>
#include <string.h>

#include "devices/backend.h"

// ----- Buffer: host memory -----------------------------------------------------

typedef struct {
  rg_buffer_t base;  // first, so a rg_buffer_t * is a null_buffer_t *
  void *data;
} null_buffer_t;

static void null_buffer_destroy(rg_buffer_t *b) {
  free(((null_buffer_t *)b)->data);
  free(b);
}

static void *null_buffer_host_ptr(rg_buffer_t *b) {
  return ((null_buffer_t *)b)->data;
}

static const rg_buffer_vtable_t null_buffer_vt = {
    .destroy = null_buffer_destroy,
    .host_ptr = null_buffer_host_ptr,
};

static rg_status_t null_buffer_alloc(rg_device_t *dev, size_t bytes, rg_buffer_t **out) {
  // The wrapper has checked bytes against the device's memory, so malloc
  // sees only sizes the host could hold.
  null_buffer_t *b = calloc(1, sizeof(*b));
  void *data = b ? malloc(bytes ? bytes : 1) : NULL;
  if (!data) {
    free(b);
    char want[96];
    return rg_status_make(RG_OUT_OF_MEMORY, "cannot allocate %s on %s",
                          rg__fmt_size(bytes, want, sizeof(want)), dev->label);
  }
  b->data = data;
  rg__buffer_init(&b->base, &null_buffer_vt, dev, bytes);
  *out = &b->base;
  return NULL;
}

// ----- Queue: accepts nothing --------------------------------------------------

static void null_queue_destroy(rg_queue_t *q) {
  free(q);
}

static const rg_queue_vtable_t null_queue_vt = {
    .destroy = null_queue_destroy,
    // parallel_for: NULL, so the wrapper returns RG_UNIMPLEMENTED.
    // wait: NULL, nothing is ever in flight.
};

static rg_status_t null_queue_create(rg_device_t *dev, rg_queue_t **out) {
  rg_queue_t *q = calloc(1, sizeof(*q));
  if (!q)
    return rg_status_make(RG_OUT_OF_MEMORY, "out of memory creating a queue on %s", dev->label);
  rg__queue_init(q, &null_queue_vt, dev);
  *out = q;
  return NULL;
}

// ----- Device ------------------------------------------------------------------

static void null_device_destroy(rg_device_t *dev) {
  free(dev);
}

static const rg_device_vtable_t null_device_vt = {
    .destroy = null_device_destroy,
    .buffer_alloc = null_buffer_alloc,
    .queue_create = null_queue_create,
    // supports_op: NULL, supports nothing. cpu_pool: NULL, not a CPU.
};

// ----- Driver ------------------------------------------------------------------

static rg_status_t null_probe(rg_driver_t *drv, rg_device_info_t *out, size_t cap, size_t *out_n) {
  // A real backend loads its library here and returns RG_UNAVAILABLE with
  // the reason when it cannot ("libfoo.so.1 not found").
  *out_n = 1;
  if (cap == 0) return NULL;
  memset(&out[0], 0, sizeof(out[0]));
  rg__copy(out[0].name, sizeof(out[0].name), "null device");
  // Its buffers are host memory, so the host's memory bounds them.
  out[0].memory = rg__host_memory(NULL);
  rg__copy(out[0].detail, sizeof(out[0].detail), "does no work: a template and a test double");
  return NULL;
}

static rg_status_t null_open(rg_driver_t *drv, const rg_device_info_t *info,
                             const rg_device_options_t *opts, rg_device_t **out) {
  rg_device_t *dev = calloc(1, sizeof(*dev));
  if (!dev) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory");
  rg__device_init(dev, &null_device_vt, drv, info);
  *out = dev;
  return NULL;
}

static const rg_driver_vtable_t null_driver_vt = {
    .probe = null_probe,
    .open = null_open,
};

static rg_driver_t null_driver = {
    .vt = &null_driver_vt,
    .name = "null",
    .description = "does no work: a template and a test double",
};

rg_driver_t *rg__null_driver(void) {
  return &null_driver;
}
