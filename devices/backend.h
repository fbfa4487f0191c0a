// devices/backend.h — what a backend implements, and the helpers backends
// share. Private to devices/: users include devices/devices.h.
//
// Every object starts with a base struct that holds a const vtable pointer
// (ggml-backend-impl.h, IREE hal). A backend embeds the base as its first
// member, fills it with rg__*_init, and casts back in its vtable functions.
// The public wrappers in device_registry.c check arguments, fill in what an
// optional slot leaves out, and dispatch:
//
//   slot                  NULL means
//   device.supports_op    supports nothing
//   device.check_op       supports every op supports_op claims, any type
//                         (when supports_op says no, check_op, if given,
//                         is asked for the reason)
//   device.buffer_wrap    cannot wrap host memory (RG_UNIMPLEMENTED)
//   device.cpu_pool       not a CPU device (rg_device_cpu_pool gives NULL)
//   buffer.host_ptr       not host visible; write/read must be given
//   buffer.write/read     memcpy through host_ptr
//   queue.submit          runs no op (RG_UNIMPLEMENTED naming the op)
//   queue.copy            same-device copies through write/read/host_ptr
//   queue.write/read      the buffer's synchronous write/read
//   queue.record          a synchronous queue: events are complete at once
//   queue.wait_event      the host waits for a foreign event first
//   queue.parallel_for    RG_UNIMPLEMENTED naming the device
//   queue.wait            nothing to wait for (a synchronous queue)
//
// The wrappers have done the checks a backend would repeat: pointers are
// non-NULL, buffer ranges lie inside the buffer, len > 0 for write/read,
// the requested size is within the device's memory, every operand of a
// submitted op is a buffer of this device with its range inside it, and
// check_op (or supports_op) accepted the op. devices/null/ is the
// smallest complete backend; copy it to start a new one.
#ifndef RG_DEVICES_BACKEND_H
#define RG_DEVICES_BACKEND_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "devices/devices.h"

// ----- Driver ------------------------------------------------------------------

typedef struct {
  // Writes up to cap devices into out and sets *out_n to how many there are.
  // Fills every field but driver, index and present, which the registry
  // sets. Returns a status (any code) whose message is the reason when the
  // driver has nothing to offer; zero devices with OK reads as "no devices".
  rg_status_t (*probe)(rg_driver_t *drv, rg_device_info_t *out, size_t cap, size_t *out_n);
  // Opens the device `info` describes (from this driver's probe, index in
  // range). opts is never NULL. Must call rg__device_init on the result.
  rg_status_t (*open)(rg_driver_t *drv, const rg_device_info_t *info,
                      const rg_device_options_t *opts, rg_device_t **out);
} rg_driver_vtable_t;

struct rg_driver_s {
  const rg_driver_vtable_t *vt;
  const char *name;         // short, unique: "cuda"
  const char *description;  // "NVIDIA GPUs through the CUDA driver API (libcuda.so.1)"
};

// Adds a driver after the built-in ones (a backend outside the tree, or a
// test double). The driver must outlive the process. RG_INVALID_ARGUMENT
// when the name is taken or the table (16 drivers) is full.
RG_MUST_USE rg_status_t rg__driver_register(rg_driver_t *drv);

// The built-in drivers, one per folder.
rg_driver_t *rg__cpu_driver(void);
rg_driver_t *rg__cuda_driver(void);
rg_driver_t *rg__hip_driver(void);
rg_driver_t *rg__level_zero_driver(void);
rg_driver_t *rg__opencl_driver(void);
rg_driver_t *rg__null_driver(void);
// The CPU driver's open slot (devices/cpu/cpu_device.c).
RG_MUST_USE rg_status_t rg__cpu_device_open(rg_driver_t *drv, const rg_device_info_t *info,
                                            const rg_device_options_t *opts, rg_device_t **out);

// ----- Device ------------------------------------------------------------------

typedef struct {
  void (*destroy)(rg_device_t *dev);  // when the last reference goes
  // bytes may be 0. Called only when bytes <= the device's memory.
  rg_status_t (*buffer_alloc)(rg_device_t *dev, size_t bytes, rg_buffer_t **out);
  rg_status_t (*queue_create)(rg_device_t *dev, rg_queue_t **out);
  int (*supports_op)(rg_device_t *dev, rg_op_kind_t op);         // optional
  rg_status_t (*check_op)(rg_device_t *dev, const rg_op_t *op);  // optional
  rg_status_t (*buffer_wrap)(rg_device_t *dev, void *ptr, size_t len, void (*release_fn)(void *),
                             void *ctx, rg_buffer_t **out);  // optional
  rg_pool_t *(*cpu_pool)(rg_device_t *dev);                  // optional
  int (*weight_layout)(rg_device_t *dev, rg_dtype_t t);      // optional (rg_device_weight_layout)
} rg_device_vtable_t;

struct rg_device_s {
  const rg_device_vtable_t *vt;
  rg_driver_t *driver;
  rg_device_info_t info;
  atomic_int refs;
  char label[32];  // "cpu:0", for messages
};

void rg__device_init(rg_device_t *dev, const rg_device_vtable_t *vt, rg_driver_t *drv,
                     const rg_device_info_t *info);
// Buffers and queues hold their device with these.
void rg__device_retain(rg_device_t *dev);
void rg__device_release(rg_device_t *dev);

// ----- Buffer ------------------------------------------------------------------

typedef struct {
  void (*destroy)(rg_buffer_t *buf);    // frees the memory and the struct
  void *(*host_ptr)(rg_buffer_t *buf);  // optional
  rg_status_t (*write)(rg_buffer_t *buf, size_t offset, const void *src, size_t len);
  rg_status_t (*read)(rg_buffer_t *buf, size_t offset, void *dst, size_t len);
} rg_buffer_vtable_t;

struct rg_buffer_s {
  const rg_buffer_vtable_t *vt;
  rg_device_t *device;  // one reference held
  size_t size;
  atomic_int refs;
};

// Sets the base fields and takes a reference on dev.
void rg__buffer_init(rg_buffer_t *buf, const rg_buffer_vtable_t *vt, rg_device_t *dev, size_t size);

// A host-memory buffer aligned to 64 bytes, for backends whose memory is the
// host's (the CPU). Its destroy slot frees the memory.
RG_MUST_USE rg_status_t rg__host_buffer_alloc(rg_device_t *dev, size_t bytes, rg_buffer_t **out);
// The device.buffer_wrap slot for host-memory backends.
RG_MUST_USE rg_status_t rg__host_buffer_wrap(rg_device_t *dev, void *ptr, size_t len,
                                             void (*release_fn)(void *), void *ctx,
                                             rg_buffer_t **out);

// ----- Queue -------------------------------------------------------------------

typedef struct {
  void (*destroy)(rg_queue_t *q);                           // after the wrapper has waited
  rg_status_t (*submit)(rg_queue_t *q, const rg_op_t *op);  // optional
  // Same-device copy (src and dst on q's device); optional.
  rg_status_t (*copy)(rg_queue_t *q, rg_buffer_t *dst, size_t dst_off, rg_buffer_t *src,
                      size_t src_off, size_t len);
  rg_status_t (*write)(rg_queue_t *q, rg_buffer_t *dst, size_t off, const void *src,
                       size_t len);  // optional
  rg_status_t (*read)(rg_queue_t *q, rg_buffer_t *src, size_t off, void *dst,
                      size_t len);  // optional
  // An event for the work so far (rg__event_init on it); optional.
  rg_status_t (*record)(rg_queue_t *q, rg_event_t **out);
  // Make later work wait for ev when ev is this backend's; return
  // RG_UNIMPLEMENTED to have the wrapper wait on the host instead. Optional.
  rg_status_t (*wait_event)(rg_queue_t *q, rg_event_t *ev);
  rg_status_t (*parallel_for)(rg_queue_t *q, size_t n, size_t grain, rg_pool_fn_t fn,
                              void *ctx);  // optional
  rg_status_t (*wait)(rg_queue_t *q);      // optional
} rg_queue_vtable_t;

struct rg_queue_s {
  const rg_queue_vtable_t *vt;
  rg_device_t *device;  // one reference held
  int profiling;        // rg_queue_set_profiling
  rg_op_profile_t profile;
};

void rg__queue_init(rg_queue_t *q, const rg_queue_vtable_t *vt, rg_device_t *dev);

// ----- Event -------------------------------------------------------------------

typedef struct {
  void (*destroy)(rg_event_t *ev);
  // Waits at most timeout_s; RG_UNAVAILABLE when it runs out.
  rg_status_t (*wait)(rg_event_t *ev, double timeout_s);
  int (*done)(rg_event_t *ev);
} rg_event_vtable_t;

struct rg_event_s {
  const rg_event_vtable_t *vt;  // NULL: complete when created (synchronous queues)
  rg_device_t *device;          // one reference held
  atomic_int refs;
};

void rg__event_init(rg_event_t *ev, const rg_event_vtable_t *vt, rg_device_t *dev);

// ----- Host facts --------------------------------------------------------------

// Memory this process may use: MemTotal from /proc/meminfo, lowered to the
// cgroup (v2 memory.max or v1 memory.limit_in_bytes) limit when there is
// one. *out_source says which ("MemTotal", "cgroup memory.max"). 0 when
// nothing could be read.
uint64_t rg__host_memory(const char **out_source);

// "4096 PiB (4611686018427387904 bytes)" — a size in a message.
char *rg__fmt_size(uint64_t bytes, char *buf, size_t len);

// Copies src into a fixed field, cutting it to fit.
void rg__copy(char *dst, size_t cap, const char *src);

// The configs/devices class a GPU's marketing name most likely is
// ("NVIDIA H100 80GB HBM3" -> "h100-sxm"), or "" when ridge cannot tell.
const char *rg__gpu_class_hint(const char *name);

// ----- Vendor libraries --------------------------------------------------------

// Waits for an event whose driver can only be polled, or whose blocking wait
// has no deadline (cuda, hip): query says whether the work is done (non-OK
// when it failed); naps grow from 20 us to 1 ms, so a short wait costs
// little latency and a long one little CPU, and after timeout_s it fails
// naming the device, so a wedged GPU cannot hang ridge.
typedef rg_status_t (*rg__event_query_fn)(rg_event_t *e, int *done);
RG_MUST_USE rg_status_t rg__event_poll_wait(rg_event_t *e, double timeout_s,
                                            rg__event_query_fn query);

// Opens the first library in names[0..n) that loads (dlopen, RTLD_NOW |
// RTLD_LOCAL). When the environment variable `env` is set, its value is the
// only path tried (a library in an unusual place, or a test double). None
// found: RG_UNAVAILABLE "libcuda.so.1 not found (also tried libcuda.so):
// <absent>", where `absent` says what that means ("no NVIDIA driver is
// installed"); found but unloadable: the loader's message. *out_name is the
// name that loaded (borrowed from names or the environment).
RG_MUST_USE rg_status_t rg__dynlib_open(const char *env, const char *const *names, size_t n,
                                        const char *absent, void **out_lib, const char **out_name);

// A vendor result code's name and meaning, for the error tables backends
// keep (CUDA's own lookup functions may be missing from an old driver; Level
// Zero and OpenCL have none).
typedef struct {
  long code;
  const char *name;  // "CUDA_ERROR_NO_DEVICE"
  const char *text;  // "no CUDA-capable device is detected"
} rg__vendor_code_t;

// The entry for code, or NULL.
const rg__vendor_code_t *rg__vendor_code_find(const rg__vendor_code_t *table, size_t n, long code);

#endif  // RG_DEVICES_BACKEND_H
