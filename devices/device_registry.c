// devices/device_registry.c — the driver registry, rg_devices_list,
// rg_device_open, and the public wrappers that check arguments and dispatch
// to a backend's vtable (see devices/backend.h for what each slot may leave
// out).
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/yaml.h"
#include "devices/backend.h"

// ----- Registry ----------------------------------------------------------------

#define MAX_DRIVERS 16

static struct {
  pthread_mutex_t mu;
  rg_driver_t *drivers[MAX_DRIVERS];
  size_t n;
} registry = {.mu = PTHREAD_MUTEX_INITIALIZER};

static pthread_once_t builtins_once = PTHREAD_ONCE_INIT;

static rg_status_t add_driver(rg_driver_t *drv) {
  if (!drv || !drv->vt || !drv->name || !drv->name[0] || !drv->vt->probe || !drv->vt->open)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "a driver needs a name and the probe and open slots");
  rg_status_t s = NULL;
  pthread_mutex_lock(&registry.mu);
  for (size_t i = 0; i < registry.n && !s; i++)
    if (!strcmp(registry.drivers[i]->name, drv->name))
      s = rg_status_make(RG_INVALID_ARGUMENT, "a driver named '%s' is already registered",
                         drv->name);
  if (!s && registry.n == MAX_DRIVERS)
    s = rg_status_make(RG_INVALID_ARGUMENT, "cannot register driver '%s': all %d slots are taken",
                       drv->name, MAX_DRIVERS);
  if (!s) registry.drivers[registry.n++] = drv;
  pthread_mutex_unlock(&registry.mu);
  return s;
}

static void register_builtins(void) {
  // Real devices first, the CPU leading; the null double last.
  rg_driver_t *builtins[] = {rg__cpu_driver(),        rg__cuda_driver(),   rg__hip_driver(),
                             rg__level_zero_driver(), rg__opencl_driver(), rg__null_driver()};
  for (size_t i = 0; i < sizeof(builtins) / sizeof(builtins[0]); i++) {
    // Built-in names are distinct and fit the table, so this cannot fail;
    // a failure would be a bug caught by the devices tests.
    rg_status_t s = add_driver(builtins[i]);
    rg_status_free(s);
  }
}

void rg_register_available_devices(void) {
  pthread_once(&builtins_once, register_builtins);
}

rg_status_t rg__driver_register(rg_driver_t *drv) {
  rg_register_available_devices();
  return add_driver(drv);
}

size_t rg_driver_count(void) {
  rg_register_available_devices();
  pthread_mutex_lock(&registry.mu);
  size_t n = registry.n;
  pthread_mutex_unlock(&registry.mu);
  return n;
}

const rg_driver_t *rg_driver_at(size_t i) {
  rg_register_available_devices();
  pthread_mutex_lock(&registry.mu);
  const rg_driver_t *d = i < registry.n ? registry.drivers[i] : NULL;
  pthread_mutex_unlock(&registry.mu);
  return d;
}

static rg_driver_t *find_driver(const char *name) {
  rg_register_available_devices();
  rg_driver_t *d = NULL;
  pthread_mutex_lock(&registry.mu);
  for (size_t i = 0; i < registry.n && !d; i++)
    if (!strcmp(registry.drivers[i]->name, name)) d = registry.drivers[i];
  pthread_mutex_unlock(&registry.mu);
  return d;
}

const rg_driver_t *rg_driver_find(const char *name) {
  return name ? find_driver(name) : NULL;
}
const char *rg_driver_name(const rg_driver_t *d) {
  return d ? d->name : "";
}
const char *rg_driver_description(const rg_driver_t *d) {
  return d && d->description ? d->description : "";
}

// ----- Small shared helpers ------------------------------------------------------

void rg__copy(char *dst, size_t cap, const char *src) {
  if (!cap) return;
  snprintf(dst, cap, "%s", src ? src : "");
}

const rg__vendor_code_t *rg__vendor_code_find(const rg__vendor_code_t *t, size_t n, long code) {
  for (size_t i = 0; i < n; i++)
    if (t[i].code == code) return &t[i];
  return NULL;
}

// Catalog classes by the words in a device's name. A name matching no row,
// or matching an `unless` word (a PCIe or NVL variant with other clocks and
// memory than the class describes), gets no hint rather than a wrong one.
static const struct {
  const char *has, *unless1, *unless2, *cls;
} gpu_classes[] = {
    {"H100", "PCIe", "NVL", "h100-sxm"},
    {"H200", "NVL", NULL, "h200"},
    {"B200", NULL, NULL, "b200"},
    {"MI300X", NULL, NULL, "mi300x"},
};

const char *rg__gpu_class_hint(const char *name) {
  if (!name) return "";
  for (size_t i = 0; i < sizeof(gpu_classes) / sizeof(gpu_classes[0]); i++) {
    if (!strstr(name, gpu_classes[i].has)) continue;
    if (gpu_classes[i].unless1 && strstr(name, gpu_classes[i].unless1)) return "";
    if (gpu_classes[i].unless2 && strstr(name, gpu_classes[i].unless2)) return "";
    return gpu_classes[i].cls;
  }
  return "";
}

static const char *dev_label(const rg_device_t *d) {
  return d->label;
}

// ----- Probing -------------------------------------------------------------------

// Probes one driver into a scratch array. Returns the number of devices it
// has (0 when absent, with *reason set).
static size_t probe_driver(rg_driver_t *drv, rg_device_info_t *out, size_t cap, char *reason,
                           size_t reason_len) {
  size_t n = 0;
  reason[0] = 0;
  rg_status_t s = drv->vt->probe(drv, out, cap, &n);
  if (s) {
    rg__copy(reason, reason_len, rg_status_message(s));
    if (!reason[0]) rg__copy(reason, reason_len, rg_code_name(rg_status_code(s)));
    rg_status_free(s);
    return 0;
  }
  // A driver with more devices than fit is shown with the first cap.
  if (n > cap) n = cap;
  if (n == 0) rg__copy(reason, reason_len, "the driver loaded but reports no devices");
  for (size_t i = 0; i < n; i++) {
    rg__copy(out[i].driver, sizeof(out[i].driver), drv->name);
    out[i].index = (int)i;
    out[i].present = 1;
    out[i].reason[0] = 0;
  }
  return n;
}

rg_status_t rg_devices_list(rg_device_info_t *out, size_t cap, size_t *out_n) {
  if (!out_n) return rg_status_make(RG_INVALID_ARGUMENT, "rg_devices_list: out_n is NULL");
  *out_n = 0;
  if (!out && cap) return rg_status_make(RG_INVALID_ARGUMENT, "rg_devices_list: out is NULL");
  size_t n_drivers = rg_driver_count();
  rg_device_info_t *scratch = calloc(RG_DEVICES_MAX, sizeof(*scratch));
  char(*reasons)[sizeof(scratch->reason)] = calloc(n_drivers, sizeof(*reasons));
  if (!scratch || !reasons) {
    free(scratch);
    free(reasons);
    return rg_status_make(RG_OUT_OF_MEMORY, "out of memory listing devices");
  }
  // Devices first, in driver order; then the drivers that found none.
  size_t total = 0;
  for (size_t d = 0; d < n_drivers; d++) {
    rg_driver_t *drv = (rg_driver_t *)rg_driver_at(d);
    memset(scratch, 0, RG_DEVICES_MAX * sizeof(*scratch));
    size_t n = probe_driver(drv, scratch, RG_DEVICES_MAX, reasons[d], sizeof(reasons[d]));
    for (size_t i = 0; i < n; i++, total++)
      if (total < cap) out[total] = scratch[i];
  }
  for (size_t d = 0; d < n_drivers; d++) {
    if (!reasons[d][0]) continue;
    if (total < cap) {
      rg_device_info_t *e = &out[total];
      memset(e, 0, sizeof(*e));
      rg__copy(e->driver, sizeof(e->driver), rg_driver_name(rg_driver_at(d)));
      e->index = -1;
      e->present = 0;
      rg__copy(e->reason, sizeof(e->reason), reasons[d]);
    }
    total++;
  }
  free(scratch);
  free(reasons);
  *out_n = total;
  return NULL;
}

// ----- Devices -------------------------------------------------------------------

void rg__device_init(rg_device_t *dev, const rg_device_vtable_t *vt, rg_driver_t *drv,
                     const rg_device_info_t *info) {
  dev->vt = vt;
  dev->driver = drv;
  dev->info = *info;
  atomic_init(&dev->refs, 1);
  snprintf(dev->label, sizeof(dev->label), "%s:%d", drv->name, info->index);
}

void rg__device_retain(rg_device_t *dev) {
  atomic_fetch_add(&dev->refs, 1);
}

void rg__device_release(rg_device_t *dev) {
  if (dev && atomic_fetch_sub(&dev->refs, 1) == 1) dev->vt->destroy(dev);
}

static rg_status_t unknown_driver(const char *name) {
  size_t n = rg_driver_count();
  const char *names[MAX_DRIVERS];
  char list[256] = "";
  size_t used = 0;
  for (size_t i = 0; i < n; i++) {
    names[i] = rg_driver_name(rg_driver_at(i));
    int w = snprintf(list + used, sizeof(list) - used, "%s%s", i ? ", " : "", names[i]);
    if (w > 0 && (size_t)w < sizeof(list) - used) used += (size_t)w;
  }
  const char *near = rg_nearest(name, names, n);
  if (near)
    return rg_status_make(RG_NOT_FOUND,
                          "no device driver named '%s'; did you mean '%s'? (drivers: %s)", name,
                          near, list);
  return rg_status_make(RG_NOT_FOUND, "no device driver named '%s' (drivers: %s)", name, list);
}

rg_status_t rg_device_open(const char *driver, int index, const rg_device_options_t *opts,
                           rg_device_t **out) {
  if (!out) return rg_status_make(RG_INVALID_ARGUMENT, "rg_device_open: out is NULL");
  *out = NULL;
  if (!driver) return rg_status_make(RG_INVALID_ARGUMENT, "rg_device_open: driver name is NULL");
  rg_driver_t *drv = find_driver(driver);
  if (!drv) return unknown_driver(driver);
  rg_device_options_t o = opts ? *opts : (rg_device_options_t){0};
  if (o.threads < 0)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "%s:%d: threads must be 0 (one per core) or more, got %d", driver, index,
                          o.threads);
  if (index < 0)
    return rg_status_make(RG_NOT_FOUND, "%s:%d: a device index counts from 0", driver, index);

  rg_device_info_t *found = calloc(RG_DEVICES_MAX, sizeof(*found));
  if (!found) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory opening %s:%d", driver, index);
  char reason[sizeof(found->reason)];
  size_t n = probe_driver(drv, found, RG_DEVICES_MAX, reason, sizeof(reason));
  rg_status_t s = NULL;
  if (n == 0) {
    s = rg_status_make(RG_UNAVAILABLE, "cannot open %s:%d: %s is not present: %s", driver, index,
                       driver, reason);
  } else if ((size_t)index >= n) {
    if (n == 1)
      s = rg_status_make(RG_NOT_FOUND, "cannot open %s:%d: %s has 1 device (index 0)", driver,
                         index, driver);
    else
      s = rg_status_make(RG_NOT_FOUND, "cannot open %s:%d: %s has %zu devices (index 0 to %zu)",
                         driver, index, driver, n, n - 1);
  } else {
    rg_device_t *dev = NULL;
    s = drv->vt->open(drv, &found[index], &o, &dev);
    if (s)
      s = rg_status_wrap(s, "cannot open %s:%d (%s)", driver, index, found[index].name);
    else
      *out = dev;
  }
  free(found);
  return s;
}

void rg_device_close(rg_device_t *dev) {
  rg__device_release(dev);
}

void rg_device_retain(rg_device_t *dev) {
  if (dev) rg__device_retain(dev);
}

const rg_device_info_t *rg_device_info(const rg_device_t *dev) {
  return dev ? &dev->info : NULL;
}

rg_pool_t *rg_device_cpu_pool(const rg_device_t *dev) {
  if (!dev || !dev->vt->cpu_pool) return NULL;
  return dev->vt->cpu_pool((rg_device_t *)dev);
}

// ----- Buffers -------------------------------------------------------------------

void rg__buffer_init(rg_buffer_t *buf, const rg_buffer_vtable_t *vt, rg_device_t *dev,
                     size_t size) {
  buf->vt = vt;
  buf->device = dev;
  buf->size = size;
  atomic_init(&buf->refs, 1);
  rg__device_retain(dev);
}

rg_status_t rg_buffer_alloc(rg_device_t *dev, size_t bytes, rg_buffer_t **out) {
  if (!out) return rg_status_make(RG_INVALID_ARGUMENT, "rg_buffer_alloc: out is NULL");
  *out = NULL;
  if (!dev) return rg_status_make(RG_INVALID_ARGUMENT, "rg_buffer_alloc: device is NULL");
  // Checked here so that no allocator ever sees an impossible size: some
  // (AddressSanitizer's among them) abort instead of returning NULL.
  // A device whose memory is unknown is still bounded by what a process can
  // address (2^47 bytes of user space on x86-64 and most Arm kernels).
  uint64_t mem = dev->info.memory ? dev->info.memory : (uint64_t)1 << 47;
  if ((uint64_t)bytes > mem) {
    char want[96], have[96];
    return rg_status_make(RG_OUT_OF_MEMORY, "cannot allocate %s on %s: more than its %s of memory",
                          rg__fmt_size(bytes, want, sizeof(want)), dev_label(dev),
                          rg__fmt_size(mem, have, sizeof(have)));
  }
  rg_buffer_t *b = NULL;
  rg_status_t s = dev->vt->buffer_alloc(dev, bytes, &b);
  if (s) return s;
  *out = b;
  return NULL;
}

void rg_buffer_retain(rg_buffer_t *buf) {
  if (buf) atomic_fetch_add(&buf->refs, 1);
}

void rg_buffer_release(rg_buffer_t *buf) {
  if (!buf || atomic_fetch_sub(&buf->refs, 1) != 1) return;
  rg_device_t *dev = buf->device;
  buf->vt->destroy(buf);
  rg__device_release(dev);
}

size_t rg_buffer_size(const rg_buffer_t *buf) {
  return buf ? buf->size : 0;
}
rg_device_t *rg_buffer_device(const rg_buffer_t *buf) {
  return buf ? buf->device : NULL;
}

void *rg_buffer_host_ptr(rg_buffer_t *buf) {
  if (!buf || !buf->vt->host_ptr) return NULL;
  return buf->vt->host_ptr(buf);
}

static rg_status_t check_range(const rg_buffer_t *buf, const char *what, size_t offset, size_t len,
                               const void *p) {
  if (!buf) return rg_status_make(RG_INVALID_ARGUMENT, "buffer %s: buffer is NULL", what);
  if (!p && len)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "buffer %s of %zu bytes on %s: the host pointer is NULL", what, len,
                          dev_label(buf->device));
  if (offset > buf->size || len > buf->size - offset)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "buffer %s of %zu bytes at offset %zu runs past the end of a %zu-byte "
                          "buffer on %s (it would end at byte %llu)",
                          what, len, offset, buf->size, dev_label(buf->device),
                          (unsigned long long)offset + (unsigned long long)len);
  return NULL;
}

rg_status_t rg_buffer_write(rg_buffer_t *buf, size_t offset, const void *src, size_t len) {
  RG_RETURN_IF_ERROR(check_range(buf, "write", offset, len, src));
  if (len == 0) return NULL;
  if (buf->vt->write) return buf->vt->write(buf, offset, src, len);
  memcpy((char *)buf->vt->host_ptr(buf) + offset, src, len);
  return NULL;
}

rg_status_t rg_buffer_read(rg_buffer_t *buf, size_t offset, void *dst, size_t len) {
  RG_RETURN_IF_ERROR(check_range(buf, "read", offset, len, dst));
  if (len == 0) return NULL;
  if (buf->vt->read) return buf->vt->read(buf, offset, dst, len);
  memcpy(dst, (const char *)buf->vt->host_ptr(buf) + offset, len);
  return NULL;
}

// ----- Queues --------------------------------------------------------------------

void rg__queue_init(rg_queue_t *q, const rg_queue_vtable_t *vt, rg_device_t *dev) {
  q->vt = vt;
  q->device = dev;
  q->profiling = 0;
  memset(&q->profile, 0, sizeof q->profile);
  rg__device_retain(dev);
}

rg_status_t rg_queue_create(rg_device_t *dev, rg_queue_t **out) {
  if (!out) return rg_status_make(RG_INVALID_ARGUMENT, "rg_queue_create: out is NULL");
  *out = NULL;
  if (!dev) return rg_status_make(RG_INVALID_ARGUMENT, "rg_queue_create: device is NULL");
  return dev->vt->queue_create(dev, out);
}

rg_status_t rg_queue_parallel_for(rg_queue_t *q, size_t n, size_t grain, rg_pool_fn_t fn,
                                  void *ctx) {
  if (!q) return rg_status_make(RG_INVALID_ARGUMENT, "rg_queue_parallel_for: queue is NULL");
  if (!fn)
    return rg_status_make(RG_INVALID_ARGUMENT, "parallel_for on %s: the kernel function is NULL",
                          dev_label(q->device));
  if (!q->vt->parallel_for)
    return rg_status_make(RG_UNIMPLEMENTED,
                          "parallel_for on %s: the %s backend does not run host kernels%s",
                          dev_label(q->device), q->device->driver->name,
                          q->device->vt->cpu_pool ? "" : " (run them on a cpu device)");
  if (n == 0) return NULL;
  return q->vt->parallel_for(q, n, grain, fn, ctx);
}

rg_status_t rg_queue_wait(rg_queue_t *q) {
  if (!q) return rg_status_make(RG_INVALID_ARGUMENT, "rg_queue_wait: queue is NULL");
  return q->vt->wait ? q->vt->wait(q) : NULL;
}

void rg_queue_destroy(rg_queue_t *q) {
  if (!q) return;
  // Nobody is left to hear about a failed wait; the backend's destroy
  // releases what it can either way.
  rg_status_free(rg_queue_wait(q));
  rg_device_t *dev = q->device;
  q->vt->destroy(q);
  rg__device_release(dev);
}

rg_device_t *rg_queue_device(const rg_queue_t *q) {
  return q ? q->device : NULL;
}

rg_status_t rg_device_parse_name(const char *s, char *driver, size_t len, int *index) {
  const char *colon = strchr(s, ':');
  size_t n = colon ? (size_t)(colon - s) : strlen(s);
  if (!n || n >= len)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "device '%s': expected driver:index, like cpu:0 or opencl:0", s);
  memcpy(driver, s, n);
  driver[n] = 0;
  *index = 0;
  if (colon) {
    char *end;
    long v = strtol(colon + 1, &end, 10);
    if (end == colon + 1 || *end || v < 0 || v > 1024)
      return rg_status_make(RG_INVALID_ARGUMENT,
                            "device '%s': the index after ':' must be a number from 0", s);
    *index = (int)v;
  }
  return NULL;
}
