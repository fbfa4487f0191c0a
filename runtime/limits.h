// runtime/limits.h — this machine's own limits, measured in the same run as
// the work they are compared with: STREAM-style read bandwidth and the
// matrix peak of each instruction path the CPU kernels use (f32 FMA,
// AVX512_BF16 dot products, AMX-BF16 and AMX-INT8 tiles). Reports of
// achieved GB/s and GFLOP/s divide by these, never by a datasheet figure,
// since the same CPU differs run to run (turbo, noise). `ridge run`, the
// benchmarks and `ridge profile` all measure through this one function.
//
// Each peak runs independent chains of one instruction on every thread of
// the pool, with operands in registers (tiles for AMX), so it is what the
// core can issue, not what any kernel reaches; kernels are reported as a
// fraction of the peak of the path they run.
#ifndef RG_RUNTIME_LIMITS_H
#define RG_RUNTIME_LIMITS_H

#include "base/dtype.h"
#include "base/pool.h"
#include "base/status.h"
#include "ops/convert.h"

typedef struct {
  double read_bandwidth;  // bytes/s, summing a buffer far larger than cache
  double fma_peak;        // f32 FLOP/s, independent FMA chains on every thread
  int threads;
  const char *fma_isa;  // "avx512f", "avx2", "scalar"
  // Matrix peaks of the other paths, FLOP/s (int8 OP/s for AMX-INT8), or 0
  // where the CPU lacks the instructions; *_note then says why (NULL when
  // measured).
  double bf16_dot_peak;  // vdpbf16ps (AVX512_BF16): 32 multiply-adds each
  double amx_bf16_peak;  // TDPBF16PS: 16 x 16 x 32 multiply-adds each
  double amx_int8_peak;  // TDPBSSD: 16 x 16 x 64 multiply-adds each
  const char *bf16_dot_note, *amx_note;
} rg_limits_t;

// The best matrix peak for weights of a type that the kernels reach at this
// cap (AUTO: the best level): AMX-BF16 where the tiles run that type, else
// vdpbf16ps for bf16, else f32 FMA. *path names it ("amx-bf16",
// "avx512-bf16 dot", "f32 fma"). For the reports' "fraction of peak".
double rg_limits_matrix_peak(const rg_limits_t *l, rg_dtype_t weight_dtype, rg_cpu_isa_t isa_cap,
                             const char **path);

// Takes about `budget_s` seconds (0.3 is enough for 2-digit figures).
RG_MUST_USE rg_status_t rg_limits_measure(rg_pool_t *pool, double budget_s, rg_limits_t *out);

// Keeps in *best the higher of each figure of *best and *other (two readings
// of the same pool, e.g. before and after a run). On a shared machine the
// figures move by 2x between back-to-back readings (a VM's two vCPUs put on
// one core's AMX unit halve its tile peak), and a figure can only read low,
// never high, so the best reading is the machine's limit. A path one reading
// lacks keeps the other's figure and note. Returns the largest relative move
// of any figure both measured, max(|a - b|) / max(a, b), for the reports to
// say how sure the limit is.
double rg_limits_keep_best(rg_limits_t *best, const rg_limits_t *other);

// The read bandwidth a run's predictions stand on: the best reading around
// the run (`run`, the best of those before and after it), whenever there is
// one; the profile's (`profiled`) only where the run has none. A profile
// taken just before the run used to count as well, but
// this VM's bandwidth moves by a fifth within a minute: two profiles read
// 75 and 78 GB/s, the readings around the 1B model's serving run that
// followed each 58-62, and the simulator priced the run 22-25 % fast.
double rg_limits_run_bandwidth(double run, double profiled);

// A piece of memory to read (rg_limits_read_spans).
typedef struct {
  const void *p;
  size_t bytes;
} rg_limits_span_t;

// The rate, bytes/s, at which the pool's threads read all of the spans, the
// median of `passes` passes (at least 1); 0 when there is nothing to read or
// no memory for the work list. A typical pass over memory a run really
// streams, not the best pass over a fresh buffer: on this project's VMs one
// 3 ms pass over 256 MiB read anywhere from 54 to 84 GB/s and the best of
// eight 75-80, where passes over 2 GiB read 58-66, and the 1B model's
// decode streamed its 2.1 GB of weights at 56-61. A prediction priced at
// the best short pass ran 15-30 % fast.
double rg_limits_read_spans(rg_pool_t *pool, const rg_limits_span_t *spans, size_t n, int passes);

// The largest CPU cache sysfs lists for cpu0, in bytes (0 when unknown).
size_t rg_limits_host_cache_bytes(void);

#endif  // RG_RUNTIME_LIMITS_H
