// devices/opencl/opencl_profile.h — what an OpenCL device really does,
// measured on the device itself: the figures `ridge profile` writes into a
// calibrated device class, and the limits bench/bench_opencl holds ridge's
// kernels against.
//
//   rg_opencl_measure_read    read bandwidth: a streaming kernel summing a
//                             buffer larger than any cache (1 GiB, or the
//                             largest allocation the device allows)
//   rg_opencl_measure_fma     peak f32 multiply-add rate: independent chains
//                             of 16-wide fused multiply-adds (fma() where
//                             the device has it, else mad()) on every unit
//   rg_opencl_measure_matmul  one matmul op (y = x W^T) of a given shape and
//                             weight type, through rg_queue_submit, weights
//                             cycled through enough copies to stream from
//                             memory as a model's layers do; works on any
//                             HAL device, so a profile can sweep M the same
//                             way everywhere
//   rg_opencl_measure_launch  the host's cost per op: small ops submitted
//                             back to back, then one wait
//
// Each runs its work once to warm up (kernels compiled, memory touched),
// then `reps` times, and reports the fastest, so a busy machine reads low
// rather than noisy. Nothing here asserts a figure; callers print ratios.
//
// Ownership: the device is borrowed for the call; every buffer and queue a
// measurement makes is freed before it returns.
#ifndef RG_DEVICES_OPENCL_OPENCL_PROFILE_H
#define RG_DEVICES_OPENCL_OPENCL_PROFILE_H

#include <stddef.h>
#include <stdint.h>

#include "base/dtype.h"
#include "base/status.h"
#include "devices/devices.h"

typedef struct {
  double seconds;  // the fastest pass
  double work;     // bytes read (read, and matmul's weights) or FLOPs (fma, matmul) per pass
  double rate;     // work / seconds
  double bytes;    // matmul: bytes of weights, activations and output moved per pass
} rg_opencl_measure_t;

// bytes: the buffer to stream (0: 1 GiB), cut to the device's largest
// allocation. reps: passes to time (0: 5). Fails with RG_INVALID_ARGUMENT
// for a device that is not an OpenCL one.
RG_MUST_USE rg_status_t rg_opencl_measure_read(rg_device_t *dev, size_t bytes, int reps,
                                               rg_opencl_measure_t *out);
// FLOP/s (2 per multiply-add) of f32 multiply-adds with every unit busy.
RG_MUST_USE rg_status_t rg_opencl_measure_fma(rg_device_t *dev, int reps, rg_opencl_measure_t *out);
// y (m, n) = x (m, k) W^T with W (n, k) in wtype: rate is FLOP/s (2 m n k),
// work the FLOPs; bytes what crosses memory. The weights are cycled through
// copies totalling at least `footprint` bytes (0: 1 GiB, cut to a quarter
// of the device's memory). Any HAL device with a matmul kernel.
RG_MUST_USE rg_status_t rg_opencl_measure_matmul(rg_device_t *dev, rg_dtype_t wtype, int64_t m,
                                                 int64_t n, int64_t k, size_t footprint, int reps,
                                                 rg_opencl_measure_t *out);
// Seconds per op of n tiny adds submitted back to back on a fresh queue,
// then one rg_queue_wait (the wait included, spread over the n). Any HAL
// device.
RG_MUST_USE rg_status_t rg_opencl_measure_launch(rg_device_t *dev, int n, double *out_seconds);

#endif  // RG_DEVICES_OPENCL_OPENCL_PROFILE_H
