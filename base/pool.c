#include "base/pool.h"

#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "base/clock.h"

// A job is split into at most n chunks, chunk t meant for thread t (the
// caller is thread 0), as a static split would give them: a thread streams
// the same share of an op's data from one call to the next, and its cache
// still holds what that share left there. But any thread may take a chunk
// no one has taken yet: after its own, each thread looks at the others', and
// the caller waits only for chunks already running elsewhere. A worker that
// is slow to wake (asleep on the condition variable, or waiting for a core
// another process holds) finds its chunk done and goes back to waiting, so
// a small job never waits for a wake-up: after a worker has blocked (a
// remote hop, an idle server) the first kernels cost what they cost back to
// back, plus one futex wake, instead of the ~50 us a sleeping thread takes to
// get a core on a busy 2-core machine.
//
// avail[c] holds the generation of the job chunk c is free in, and a claim
// swaps it for 0, expecting exactly that generation: a thread still working
// from an older job's word can never take a chunk of a newer one. The job's
// fields (fn, ctx, sizes) and avail[] are written before the release store
// of `job` that the claimant loaded; the next job's are written only once
// every claimed chunk has been counted off `pending`, so a claimant always
// sees one job's fields whole.
//
// Workers spin for a while (cheap wake-up between back-to-back kernels) and
// then sleep on the condition variable. The while is a time, not a count:
// 20000 bare loads had been about 5 us, less than the gap between two
// serving steps (sampling, scheduling) or a run of ops too small to split,
// so each step's first parallel ops ran on the caller alone while a worker
// woke through a futex (a system call took 1 us on this project's
// paravirtualized build machine). Spinning 50 us, then yielding until
// 0.4 ms: the tiny model's serving run 2.6-3.9 -> 3.2-4.8 x 10^4 tokens/s,
// the 1B model's batch-16 decode 166 -> 176 tokens/s, and attention and FFN
// in two processes on the same two cores unchanged (yielding lets the busy
// one have the core).
#define SPIN_SECONDS 4e-4
// The caller waiting for chunks running elsewhere: about 0.3 ms of pauses
// before it yields the core (a thread preempted mid-chunk needs it).
#define WAIT_SPINS 16384

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

struct rg_pool_s {
  int n;
  pthread_t *threads;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  atomic_uint gen;
  _Atomic uint64_t job;  // generation << 32 | chunks of the job in flight
  atomic_uint *avail;    // (n) per chunk: the generation it is free in; 0 once taken
  atomic_int pending;    // chunks of the current job not finished
  atomic_int stop;
  // rg_pool_park: the generation after whose job workers sleep at once
  // rather than spin (UINT_MAX: none yet).
  atomic_uint parked_gen;
  // The job in flight.
  rg_pool_fn_t fn;
  void *ctx;
  size_t n_items, chunk;
};

// Claims and runs the current job's chunks that are still free, its own
// (`home`) first.
static void run_chunks(rg_pool_t *p, int home) {
  uint64_t j = atomic_load_explicit(&p->job, memory_order_acquire);
  unsigned g = (unsigned)(j >> 32), total = (unsigned)j;
  for (unsigned k = 0; k < total; k++) {
    unsigned c = ((unsigned)home + k) % total, want = g;
    if (atomic_load_explicit(&p->avail[c], memory_order_relaxed) != g ||
        !atomic_compare_exchange_strong_explicit(&p->avail[c], &want, 0, memory_order_acquire,
                                                 memory_order_relaxed))
      continue;
    size_t b = (size_t)c * p->chunk;
    size_t e = b + p->chunk < p->n_items ? b + p->chunk : p->n_items;
    p->fn(p->ctx, b, e, (int)c);
    atomic_fetch_sub_explicit(&p->pending, 1, memory_order_release);
  }
}

typedef struct {
  rg_pool_t *pool;
  int id;
} worker_arg_t;

static void *worker(void *arg) {
  worker_arg_t *wa = arg;
  rg_pool_t *p = wa->pool;
  const int id = wa->id;
  free(wa);
  // Generation 0 is "no job yet": a worker that starts late must not skip
  // a job published before it first looked.
  unsigned seen = 0;
  for (;;) {
    unsigned spins = 0;
    double since = 0;
    while (atomic_load_explicit(&p->gen, memory_order_acquire) == seen && !atomic_load(&p->stop)) {
      cpu_relax();
      if (++spins % 64) continue;
      double now = rg_clock_now();
      if (since == 0) since = now;
      const int park = atomic_load_explicit(&p->parked_gen, memory_order_relaxed) == seen;
      if (!park && now - since < SPIN_SECONDS / 8) continue;
      // Past the first stretch, spin yielding: a process beside this one
      // (another worker of a split on the same cores) gets the core at once.
      if (!park && now - since < SPIN_SECONDS) {
        sched_yield();
        continue;
      }
      pthread_mutex_lock(&p->mu);
      while (atomic_load(&p->gen) == seen && !atomic_load(&p->stop))
        pthread_cond_wait(&p->cv, &p->mu);
      pthread_mutex_unlock(&p->mu);
    }
    if (atomic_load(&p->stop)) return NULL;
    seen = atomic_load_explicit(&p->gen, memory_order_acquire);
    run_chunks(p, id);
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
  atomic_init(&p->parked_gen, UINT_MAX);
  p->threads = calloc((size_t)n_threads, sizeof(pthread_t));
  p->avail = calloc((size_t)n_threads, sizeof(atomic_uint));
  if (!p->threads || !p->avail) {
    free(p->threads);
    free(p->avail);
    free(p);
    return rg_status_make(RG_OUT_OF_MEMORY, "out of memory creating a thread pool");
  }
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cv, NULL);
  for (int i = 1; i < n_threads; i++) {
    worker_arg_t *wa = malloc(sizeof(*wa));
    if (wa) *wa = (worker_arg_t){p, i};  // before the thread can read it
    if (!wa || pthread_create(&p->threads[i], NULL, worker, wa)) {
      free(wa);
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
  free(p->avail);
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
  const unsigned total = (unsigned)((n + p->chunk - 1) / p->chunk);
  unsigned g = atomic_load_explicit(&p->gen, memory_order_relaxed) + 1;
  if (g == 0) g = 1;  // 0 is "taken" in avail[] and "no job yet" to a new worker
  atomic_store_explicit(&p->pending, (int)total, memory_order_relaxed);
  for (unsigned c = 0; c < total; c++) atomic_store_explicit(&p->avail[c], g, memory_order_relaxed);
  atomic_store_explicit(&p->job, (uint64_t)g << 32 | total, memory_order_release);
  pthread_mutex_lock(&p->mu);
  atomic_store_explicit(&p->gen, g, memory_order_release);
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  run_chunks(p, 0);
  // What is pending runs on other threads now. Spin before yielding: a
  // system call (1 us on a paravirtualized guest) costs more than most
  // waits for a chunk already running.
  for (unsigned spins = 0; atomic_load_explicit(&p->pending, memory_order_acquire) > 0;)
    if (++spins < WAIT_SPINS)
      cpu_relax();
    else
      sched_yield();
}

// Workers waiting after the job of generation g (seen == g) read it; one
// still finishing that job reads it as soon as it starts waiting, so no
// park is lost to a worker that had not started waiting yet.
void rg_pool_park(rg_pool_t *p) {
  if (p)
    atomic_store_explicit(&p->parked_gen, atomic_load_explicit(&p->gen, memory_order_relaxed),
                          memory_order_relaxed);
}
