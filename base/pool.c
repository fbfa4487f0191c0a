#include "base/pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

// A job is split into at most n chunks. The caller publishes it, bumps the
// generation, and then claims and runs chunks itself like any worker; it
// waits only for the chunks some thread has claimed. A worker that is slow to
// wake (asleep on the condition variable, or waiting for a core another
// process holds) finds nothing left to claim and goes back to waiting, so a
// small job never waits for a wake-up: after a worker has blocked (a remote
// hop, an idle server) the first kernels cost what they cost back to back,
// plus one futex wake, instead of the ~50 us a sleeping thread takes to get a
// core on a busy 2-core machine.
//
// Who runs which chunk is one 64-bit word, so a claim is one compare-and-swap
// that also checks the job is still the one the claimant saw:
//
//     bits 63..32  the job's generation
//     bits 31..16  its number of chunks
//     bits 15..0   the next unclaimed chunk
//
// The job's fields (fn, ctx, sizes) are read only after a successful claim:
// the publisher wrote them before the release store of this word, and cannot
// write the next job's until every claimed chunk has been counted off
// `pending`, so a claimant always sees one job's fields whole.
//
// Workers spin for a while (cheap wake-up between back-to-back kernels) and
// then sleep on the condition variable.
#define SPIN_ITERS 20000

struct rg_pool_s {
  int n;
  pthread_t *threads;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  atomic_uint gen;
  _Atomic uint64_t claim;
  atomic_int pending;  // chunks of the current job not finished
  atomic_int stop;
  // The job in flight.
  rg_pool_fn_t fn;
  void *ctx;
  size_t n_items, chunk;
};

// Claims and runs chunks of job `g` until none is left, or until a newer job
// has replaced it (then g is long done and this thread has nothing of it).
static void run_chunks(rg_pool_t *p, unsigned g) {
  uint64_t v = atomic_load_explicit(&p->claim, memory_order_relaxed);
  for (;;) {
    unsigned next = (unsigned)(v & 0xffff), total = (unsigned)(v >> 16 & 0xffff);
    if ((unsigned)(v >> 32) != g || next >= total) return;
    if (!atomic_compare_exchange_weak_explicit(&p->claim, &v, v + 1, memory_order_acquire,
                                               memory_order_relaxed))
      continue;
    size_t b = (size_t)next * p->chunk;
    size_t e = b + p->chunk < p->n_items ? b + p->chunk : p->n_items;
    p->fn(p->ctx, b, e, (int)next);
    atomic_fetch_sub_explicit(&p->pending, 1, memory_order_release);
    v = atomic_load_explicit(&p->claim, memory_order_relaxed);
  }
}

static void *worker(void *arg) {
  rg_pool_t *p = arg;
  // Generation 0 is "no job yet": a worker that starts late must not skip
  // a job published before it first looked.
  unsigned seen = 0;
  for (;;) {
    int spins = 0;
    while (atomic_load_explicit(&p->gen, memory_order_acquire) == seen && !atomic_load(&p->stop)) {
      if (++spins < SPIN_ITERS) continue;
      pthread_mutex_lock(&p->mu);
      while (atomic_load(&p->gen) == seen && !atomic_load(&p->stop))
        pthread_cond_wait(&p->cv, &p->mu);
      pthread_mutex_unlock(&p->mu);
    }
    if (atomic_load(&p->stop)) return NULL;
    seen = atomic_load_explicit(&p->gen, memory_order_acquire);
    run_chunks(p, seen);
  }
}

int rg_cpu_count(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

rg_status_t rg_pool_create(int n_threads, rg_pool_t **out) {
  *out = NULL;
  if (n_threads <= 0) n_threads = rg_cpu_count();
  if (n_threads > 1024)
    return rg_status_make(RG_INVALID_ARGUMENT, "%d threads is more than the 1024 allowed",
                          n_threads);
  rg_pool_t *p = calloc(1, sizeof(*p));
  if (!p) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory creating a thread pool");
  p->n = n_threads;
  p->threads = calloc((size_t)n_threads, sizeof(pthread_t));
  if (!p->threads) {
    free(p);
    return rg_status_make(RG_OUT_OF_MEMORY, "out of memory creating a thread pool");
  }
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cv, NULL);
  for (int i = 1; i < n_threads; i++) {
    if (pthread_create(&p->threads[i], NULL, worker, p)) {
      p->n = i;  // destroy joins the ones started
      rg_pool_destroy(p);
      return rg_status_make(RG_UNAVAILABLE, "could not start thread %d of %d", i, n_threads);
    }
  }
  *out = p;
  return NULL;
}

void rg_pool_destroy(rg_pool_t *p) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  atomic_store(&p->stop, 1);
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  for (int i = 1; i < p->n; i++) pthread_join(p->threads[i], NULL);
  pthread_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->cv);
  free(p->threads);
  free(p);
}

int rg_pool_threads(const rg_pool_t *p) {
  return p ? p->n : 1;
}

void rg_pool_parallel_for(rg_pool_t *p, size_t n, size_t grain, rg_pool_fn_t fn, void *ctx) {
  if (n == 0) return;
  if (grain == 0) grain = 1;
  size_t max_chunks = (n + grain - 1) / grain;
  int use = p ? p->n : 1;
  if ((size_t)use > max_chunks) use = (int)max_chunks;
  if (use <= 1) {
    fn(ctx, 0, n, 0);
    return;
  }
  p->fn = fn;
  p->ctx = ctx;
  p->n_items = n;
  p->chunk = (n + (size_t)use - 1) / (size_t)use;
  // Every chunk holds at least one item (n = 5 over 4 threads is 3 chunks of 2).
  uint64_t total = (n + p->chunk - 1) / p->chunk;
  unsigned g = atomic_load_explicit(&p->gen, memory_order_relaxed) + 1;
  atomic_store_explicit(&p->pending, (int)total, memory_order_relaxed);
  atomic_store_explicit(&p->claim, (uint64_t)g << 32 | total << 16, memory_order_release);
  pthread_mutex_lock(&p->mu);
  atomic_store_explicit(&p->gen, g, memory_order_release);
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  run_chunks(p, g);
  while (atomic_load_explicit(&p->pending, memory_order_acquire) > 0) sched_yield();
}
