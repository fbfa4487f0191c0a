// base/pool.h — a thread pool for host kernels.
//
// It lives in base/ because both sides use it: the CPU kernels in ops/cpu
// split their loops over it, and the CPU device in devices/cpu owns one per
// device and runs the HAL's ops on it.
//
// Kernels split their work with rg_pool_parallel_for(): the calling thread
// takes part, so a pool of n threads runs n-1 workers. One call is in flight
// per pool at a time (a pool belongs to one queue). Decode calls it a few
// hundred times per token, so dispatch must cost microseconds, not
// milliseconds: workers spin briefly before they sleep, and a call never
// waits for a worker to wake. Chunk t is meant for thread t (the caller is
// thread 0), as a static split gives it, but a chunk still free is taken by
// whichever thread gets to it, so one no awake thread took is run by the
// caller; a call waits only for chunks already running elsewhere.
//
// Ownership: rg_pool_create returns a pool the caller destroys.
#ifndef RG_BASE_POOL_H
#define RG_BASE_POOL_H

#include <stddef.h>

#include "base/status.h"

typedef struct rg_pool_s rg_pool_t;

// fn runs on [begin, end) of the items. `slot` (0..threads-1) is the chunk's
// index: unique among the calls of one rg_pool_parallel_for, so it can pick
// per-thread scratch, but not tied to an OS thread (the caller may run
// several chunks one after the other).
typedef void (*rg_pool_fn_t)(void *ctx, size_t begin, size_t end, int slot);

// n_threads <= 0: one per core this process may run on.
RG_MUST_USE rg_status_t rg_pool_create(int n_threads, rg_pool_t **out);
void rg_pool_destroy(rg_pool_t *pool);
int rg_pool_threads(const rg_pool_t *pool);
// The number of cores this process may run on (sched_getaffinity).
int rg_cpu_count(void);

// Splits [0, n) into contiguous chunks of at least `grain` items, one per
// thread at most, and returns when all are done. pool may be NULL (runs on
// the caller).
void rg_pool_parallel_for(rg_pool_t *pool, size_t n, size_t grain, rg_pool_fn_t fn, void *ctx);

// Says no call is coming soon (the caller is about to wait for another
// process): workers still spinning for the next call go to sleep now
// rather than at the end of their spin, leaving the cores to whoever
// computes meanwhile. The next call does not wait for them to wake (see
// above). pool may be NULL.
void rg_pool_park(rg_pool_t *pool);

#endif  // RG_BASE_POOL_H
