// devices/devices.h — the device HAL: which accelerators this machine has,
// memory on them, and queues that run work on them.
//
// ridge runs on whatever a machine holds — its CPU, NVIDIA GPUs through
// CUDA, AMD GPUs through HIP, Intel GPUs through Level Zero, anything with an
// OpenCL driver — from one binary. Each backend loads its vendor library
// with dlopen when first asked, so a machine without that vendor's driver
// runs ridge fine and is told "not present" and why. A library, once
// loaded, stays for the life of the process; RIDGE_<DRIVER>_LIBRARY (e.g.
// RIDGE_CUDA_LIBRARY) names one to load in place of the usual. The objects,
// lowest first:
//
//   driver  one per backend: "cpu", "cuda", "hip", "level_zero", "opencl",
//           "null". Probing a driver lists its devices, or gives the reason
//           it has none ("libcuda.so.1 not found", "cuInit failed:
//           CUDA_ERROR_NO_DEVICE (100): ...").
//   device  one opened device (a driver name and an index within it).
//   buffer  bytes in a device's memory.
//   queue   in-order work on a device: the HAL's ops (devices/op.h) on
//           buffers, copies buffer<->buffer and host<->device, events that
//           order work across queues and devices, and host kernels split
//           across the CPU device's threads (rg_queue_parallel_for).
//   event   a point in a queue's work; another queue can wait for it, the
//           host can wait for it with a deadline.
//
// Lifecycle (arrows are the calls that move an object along):
//
//   rg_register_available_devices()    idempotent; list and open call it
//        |
//   rg_devices_list() --> rg_device_info_t[]: devices found, and drivers
//        |                looked for and not found, each with its reason
//        v
//   rg_device_open(driver, index, opts) --> device (1 reference: yours)
//        |-- rg_buffer_alloc ------> buffer (1 reference: yours; holds one
//        |     rg_buffer_retain        on its device)      refs + 1
//        |     rg_buffer_write / rg_buffer_read / rg_buffer_host_ptr
//        |     rg_buffer_release       refs - 1; at 0 the memory is freed
//        |                             and the device reference dropped
//        |-- rg_buffer_wrap -------> buffer over caller memory (host-memory
//        |                             devices only: mapped weights, no copy)
//        |-- rg_queue_create ------> queue (holds one reference on its device)
//        |     rg_queue_submit(op) / rg_queue_copy / rg_queue_write / _read
//        |     rg_queue_record --------> event (yours: rg_event_release)
//        |     rg_queue_wait_event(ev)   later work on this queue waits for ev
//        |     rg_event_wait(ev, timeout) the host waits, with a deadline
//        |     rg_queue_parallel_for ... rg_queue_wait
//        |     rg_queue_destroy        waits for its work, drops the device
//        |
//   rg_device_close(device)   drops your reference; the device itself goes
//                             when its last buffer and queue have gone
//
// Invariants:
// - Every fallible call returns rg_status_t. Messages name the device as
//   "driver:index" ("cpu:0") and say what was asked, of what size.
// - An absent driver never stops ridge: rg_devices_list reports it with its
//   reason, and opening it returns RG_UNAVAILABLE carrying that reason.
// - A slot a backend does not implement returns RG_UNIMPLEMENTED naming the
//   device and the call; rg_device_supports_op() answers before asking.
// - Sizes are checked before any allocator sees them: a request larger than
//   the device's memory fails with RG_OUT_OF_MEMORY naming the size.
// - Vendor errors become statuses once, at the backend edge, with the
//   vendor's error name and number in the message.
//
// Threads: the registry, rg_devices_list, rg_device_open and buffer
// reference counts are safe from any thread. Buffer read/write are
// synchronous and are not ordered against queued work: rg_queue_wait first.
// A queue is driven by one thread at a time.
//
// Ownership: what rg_device_open, rg_buffer_alloc and rg_queue_create return
// belongs to the caller (close, release, destroy). Accessors (rg_device_info,
// rg_buffer_host_ptr, rg_buffer_device, rg_queue_device, rg_device_cpu_pool)
// return borrowed pointers, valid while the object they came from lives.
// Buffers and queues keep their device alive.
#ifndef RG_DEVICES_DEVICES_H
#define RG_DEVICES_DEVICES_H

#include <stddef.h>
#include <stdint.h>

#include "base/pool.h"
#include "base/status.h"
#include "devices/op.h"

typedef struct rg_driver_s rg_driver_t;
typedef struct rg_device_s rg_device_t;
typedef struct rg_buffer_s rg_buffer_t;
typedef struct rg_queue_s rg_queue_t;
typedef struct rg_event_s rg_event_t;

// ----- Drivers and what they found -------------------------------------------

// What one probe found: a device (present = 1), or a driver that was looked
// for and found nothing usable (present = 0, index = -1, reason set).
typedef struct {
  char driver[16];      // "cpu", "cuda", "hip", "level_zero", "opencl", "null"
  int index;            // within its driver, from 0; -1 for an absent driver
  int present;          // 1: a device; 0: the driver's absence, see reason
  char name[128];       // "AMD EPYC 9654", "NVIDIA H100 80GB HBM3"
  uint64_t memory;      // bytes the device can use; CPU: MemTotal capped by
                        // the cgroup memory limit; 0 when unknown
  int compute_units;    // CPU cores this process may use, CUDA SMs, HIP CUs,
                        // Level Zero EUs, OpenCL compute units; 0 unknown
  char features[256];   // space-separated: "avx2 avx512f avx512_bf16 amx_bf16",
                        // "sm_90 bf16 fp8"
  char class_hint[64];  // the configs/devices class this most likely is
                        // ("local-cpu" for the CPU, "h100-sxm"); "" unknown
  char detail[256];     // one line more: versions, where a figure came from
  char reason[256];     // present == 0: why ("libcuda.so.1 not found")
} rg_device_info_t;

// An array this long holds every entry on any machine ridge knows of; a
// longer list is still counted (see rg_devices_list).
#define RG_DEVICES_MAX 64

// Registers every backend built into ridge (all of them: vendor libraries
// are looked for at run time). Idempotent and thread-safe.
void rg_register_available_devices(void);

// Drivers in registration order (cpu, cuda, hip, level_zero, opencl, null).
size_t rg_driver_count(void);
const rg_driver_t *rg_driver_at(size_t i);  // NULL past the end
const rg_driver_t *rg_driver_find(const char *name);
const char *rg_driver_name(const rg_driver_t *driver);
// One line: what the driver drives and which library it loads.
const char *rg_driver_description(const rg_driver_t *driver);

// Probes every driver and writes one entry per device found, then one per
// driver looked for and not found (with its reason), into out[0..cap).
// *out_n is the number of entries there are, which may exceed cap (only cap
// were written; call again with a larger array). Never fails because a
// vendor library is missing or misbehaves: that becomes an absent entry.
RG_MUST_USE rg_status_t rg_devices_list(rg_device_info_t *out, size_t cap, size_t *out_n);

// ----- Devices -----------------------------------------------------------------

typedef struct {
  int threads;  // CPU: threads in its pool, 0 = one per core; others ignore it
  // CPU: the highest instruction-set level its kernels may use (an
  // rg_cpu_isa_t of ops/convert.h; 0 = AUTO, the best the CPU has). A cap
  // belongs to the device, so two engines in one process can run at
  // different levels. Above what the CPU has: RG_UNAVAILABLE at open.
  int isa;
  // CPU: batch-invariant kernels (rg_matmul_opts_t.batch_invariant): a
  // request's outputs do not depend on what it is batched with.
  int batch_invariant;
} rg_device_options_t;

// Opens device `index` of `driver`; opts may be NULL (defaults). Errors:
// RG_NOT_FOUND for an unknown driver name (with the nearest suggested) or an
// index past the driver's devices; RG_UNAVAILABLE with the reason for a
// driver that is not present; RG_INVALID_ARGUMENT for bad options.
RG_MUST_USE rg_status_t rg_device_open(const char *driver, int index,
                                       const rg_device_options_t *opts, rg_device_t **out);
// Splits a device name as users write it ("cpu:0", "opencl:1", "cpu" = index
// 0) into driver and index; RG_INVALID_ARGUMENT naming the name otherwise.
RG_MUST_USE rg_status_t rg_device_parse_name(const char *name, char *driver, size_t len,
                                             int *index);
// Drops the caller's reference (NULL is fine).
void rg_device_close(rg_device_t *dev);
// Takes one more reference, dropped by rg_device_close (an object that
// keeps a device it was given).
void rg_device_retain(rg_device_t *dev);
// What the device is (the entry rg_devices_list gave for it). Borrowed.
const rg_device_info_t *rg_device_info(const rg_device_t *dev);
// 1 when the device has a kernel for op (for some element type), 0
// otherwise. The CPU has every op; null has none.
int rg_device_supports_op(const rg_device_t *dev, rg_op_kind_t op);
// NULL when the device can run this op as described (its types included);
// else RG_UNIMPLEMENTED saying what is missing ("opencl:0 has no matmul
// kernel for q8_0 weights"). rg_queue_submit says the same.
RG_MUST_USE rg_status_t rg_device_check_op(const rg_device_t *dev, const rg_op_t *op);
// The CPU device's thread pool, for ops kernels; NULL for other devices.
// One parallel_for runs on it at a time: CPU queues take turns on it, and a
// kernel that uses it directly must be on the thread that drives the device.
rg_pool_t *rg_device_cpu_pool(const rg_device_t *dev);

// The layout dev's matmul op runs weights of type t fastest from, for the
// op's wlayout (ops/matmul.h's rg_wlayout_t): 0, rows as stored, on every
// device but the CPU at the avx512-bf16 level, whose bf16 weights go in
// packed panels (rg_matmul_relayout, once, when a stage loads them). The
// op refuses a layout its device did not ask for.
int rg_device_weight_layout(const rg_device_t *dev, rg_dtype_t t);

// ----- Buffers -------------------------------------------------------------------

// Allocates `bytes` on dev (CPU: host memory aligned to 64 bytes; 0 bytes is
// a valid empty buffer). A size larger than the device's memory, or one the
// allocator refuses, fails with RG_OUT_OF_MEMORY naming the size; it never
// aborts. The buffer holds a reference on dev.
RG_MUST_USE rg_status_t rg_buffer_alloc(rg_device_t *dev, size_t bytes, rg_buffer_t **out);
void rg_buffer_retain(rg_buffer_t *buf);
// Drops one reference; the last frees the memory. NULL is fine.
void rg_buffer_release(rg_buffer_t *buf);
size_t rg_buffer_size(const rg_buffer_t *buf);
rg_device_t *rg_buffer_device(const rg_buffer_t *buf);
// The bytes as the host sees them, or NULL when the memory is not host
// visible (device memory: use read/write).
void *rg_buffer_host_ptr(rg_buffer_t *buf);
// Copies len bytes in or out at offset. offset + len past the end is
// RG_INVALID_ARGUMENT with both figures and the buffer's size.
RG_MUST_USE rg_status_t rg_buffer_write(rg_buffer_t *buf, size_t offset, const void *src,
                                        size_t len);
RG_MUST_USE rg_status_t rg_buffer_read(rg_buffer_t *buf, size_t offset, void *dst, size_t len);

// A buffer over len bytes of caller memory at ptr, for devices whose memory
// is the host's (the CPU): weights mapped from a file run in place. The
// caller keeps the memory alive until the buffer is released (release_fn,
// when given, is called then with ctx). Other devices: RG_UNIMPLEMENTED
// (allocate and write instead).
RG_MUST_USE rg_status_t rg_buffer_wrap(rg_device_t *dev, void *ptr, size_t len,
                                       void (*release_fn)(void *ctx), void *ctx, rg_buffer_t **out);

// ----- Queues --------------------------------------------------------------------

RG_MUST_USE rg_status_t rg_queue_create(rg_device_t *dev, rg_queue_t **out);
// Runs op on q's device. Every operand is checked first (its buffer on this
// device, its range inside the buffer, the shapes; see rg_op_operands), then
// the device's support (rg_device_check_op); a failure names the device, the
// op and its label. A synchronous backend (the CPU) has finished when this
// returns; others have queued it (rg_queue_wait, or an event).
RG_MUST_USE rg_status_t rg_queue_submit(rg_queue_t *q, const rg_op_t *op);
// Copies len bytes between buffers, of this device or any other (through
// host memory when neither side can reach the other), ordered after the
// work already on q.
RG_MUST_USE rg_status_t rg_queue_copy(rg_queue_t *q, rg_buffer_t *dst, size_t dst_offset,
                                      rg_buffer_t *src, size_t src_offset, size_t len);
// Host -> buffer and buffer -> host, ordered with q's work. The host memory
// must stay valid (and, for _read, unread) until q's work reaches it: after
// rg_queue_wait or an event recorded after the call.
RG_MUST_USE rg_status_t rg_queue_write(rg_queue_t *q, rg_buffer_t *dst, size_t offset,
                                       const void *src, size_t len);
RG_MUST_USE rg_status_t rg_queue_read(rg_queue_t *q, rg_buffer_t *src, size_t offset, void *dst,
                                      size_t len);
// An event that completes when all work submitted to q so far has.
RG_MUST_USE rg_status_t rg_queue_record(rg_queue_t *q, rg_event_t **out);
// Work submitted to q after this call starts after ev completes (ev may
// come from any queue of any device).
RG_MUST_USE rg_status_t rg_queue_wait_event(rg_queue_t *q, rg_event_t *ev);
// The host waits for ev, at most timeout_s seconds: RG_UNAVAILABLE naming
// the device and the wait when it runs out.
RG_MUST_USE rg_status_t rg_event_wait(rg_event_t *ev, double timeout_s);
int rg_event_done(rg_event_t *ev);  // 1 when complete (or failed)
void rg_event_release(rg_event_t *ev);
// Runs fn over [0, n) in chunks of at least `grain` items on the device's
// threads (see rg_pool_parallel_for). A host-kernel call: only devices whose
// threads are the host's run it (the CPU); others return RG_UNIMPLEMENTED.
RG_MUST_USE rg_status_t rg_queue_parallel_for(rg_queue_t *q, size_t n, size_t grain,
                                              rg_pool_fn_t fn, void *ctx);
// Returns when all work submitted to q has finished.
RG_MUST_USE rg_status_t rg_queue_wait(rg_queue_t *q);
// Waits for q's work, then frees it. NULL is fine.
void rg_queue_destroy(rg_queue_t *q);
rg_device_t *rg_queue_device(const rg_queue_t *q);

// Op timing, off until asked for: each op submitted to q is timed from its
// submission until it has finished, and the times are summed by op kind.
// On a queue that runs work asynchronously (OpenCL, CUDA) profiling waits
// for each op before the next is submitted, so the queue loses its overlap
// while it is on; a CPU queue runs each op inside rg_queue_submit anyway.
typedef struct {
  int64_t calls[RG_OP_COUNT];
  double seconds[RG_OP_COUNT];
} rg_op_profile_t;
void rg_queue_set_profiling(rg_queue_t *q, int on);
// What q has timed since profiling began or was last reset (zeros if never).
void rg_queue_op_profile(const rg_queue_t *q, rg_op_profile_t *out);
void rg_queue_op_profile_reset(rg_queue_t *q);

#endif  // RG_DEVICES_DEVICES_H
