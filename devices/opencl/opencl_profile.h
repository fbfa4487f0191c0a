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
//   rg_opencl_measure_write   write bandwidth: a kernel filling such a buffer
//   rg_opencl_measure_copy    copy bandwidth within the device (rg_queue_copy)
//   rg_opencl_measure_host_copy  host -> device and device -> host
//                             (rg_buffer_write / rg_buffer_read)
//   rg_opencl_measure_attention  decode attention over a paged KV cache of a
//                             given context length: KV bytes read per second
//   rg_opencl_measure_attention_prefill  a prompt's causal attention: FLOP/s
//   rg_opencl_measure_launch  the host's cost per op: small ops submitted
//                             back to back, then one wait
// read, write and fma need an OpenCL device; the others go through the HAL
// and work on any device, so `ridge profile` measures every device alike.
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
// Write bandwidth of a kernel storing `bytes` (0: 1 GiB, cut to the largest
// allocation): rate in bytes/s.
RG_MUST_USE rg_status_t rg_opencl_measure_write(rg_device_t *dev, size_t bytes, int reps,
                                                rg_opencl_measure_t *out);
// rg_queue_copy of `bytes` (0: 256 MiB) between two buffers of dev: work is
// the bytes copied (each crosses memory twice, `bytes` says so), rate
// bytes copied per second. Any HAL device.
RG_MUST_USE rg_status_t rg_opencl_measure_copy(rg_device_t *dev, size_t bytes, int reps,
                                               rg_opencl_measure_t *out);
// Host memory -> a buffer of dev (to_device = 1, rg_buffer_write) or back
// (0, rg_buffer_read), `bytes` (0: 256 MiB) at a time. Any HAL device.
RG_MUST_USE rg_status_t rg_opencl_measure_host_copy(rg_device_t *dev, size_t bytes, int to_device,
                                                    int reps, rg_opencl_measure_t *out);
// One decode step of attention: n_seqs sequences, one query token each at
// position context - 1, over a paged cache of kv type (f32, bf16, f16) in
// blocks of 16, n_heads query heads over n_kv_heads of head_dim. work is
// the KV bytes read per call (2 context n_kv_heads head_dim n_seqs
// elements), rate those bytes per second. Any HAL device.
RG_MUST_USE rg_status_t rg_opencl_measure_attention(rg_device_t *dev, rg_dtype_t kv, int64_t n_seqs,
                                                    int64_t context, int64_t n_heads,
                                                    int64_t n_kv_heads, int64_t head_dim, int reps,
                                                    rg_opencl_measure_t *out);
// A prompt's attention: one sequence of `tokens` new positions, causal, on
// a paged cache of bf16/f16/f32 KV; work and rate in FLOPs (QK^T and PV, 4
// per head, dimension, query and key it sees). Any HAL device.
RG_MUST_USE rg_status_t rg_opencl_measure_attention_prefill(rg_device_t *dev, rg_dtype_t kv,
                                                            int64_t tokens, int64_t n_heads,
                                                            int64_t n_kv_heads, int64_t head_dim,
                                                            int reps, rg_opencl_measure_t *out);
// Seconds per op of n tiny adds submitted back to back on a fresh queue,
// then one rg_queue_wait (the wait included, spread over the n). Any HAL
// device.
RG_MUST_USE rg_status_t rg_opencl_measure_launch(rg_device_t *dev, int n, double *out_seconds);

#endif  // RG_DEVICES_OPENCL_OPENCL_PROFILE_H
