#include "base/pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

// Workers wait on a generation counter: the caller publishes a job, bumps the
// generation, runs its own chunk, then waits for `pending` to reach zero.
// Workers spin for a while (cheap wake-up between back-to-back kernels) and
// then sleep on a condition variable.
#define SPIN_ITERS 20000

struct rg_pool_s {
  int n;
  pthread_t *threads;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  atomic_uint gen;
  atomic_int pending;
  atomic_int stop;
  // The job in flight.
  rg_pool_fn_t fn;
  void *ctx;
  size_t n_items, chunk;
};

typedef struct {
  rg_pool_t *pool;
  int id;
} worker_arg_t;

static void run_chunk(rg_pool_t *p, int id) {
  size_t b = (size_t)id * p->chunk;
  if (b < p->n_items) {
    size_t e = b + p->chunk < p->n_items ? b + p->chunk : p->n_items;
    p->fn(p->ctx, b, e, id);
  }
}

static void *worker(void *arg) {
  worker_arg_t *wa = arg;
  rg_pool_t *p = wa->pool;
  int id = wa->id;
  free(wa);
  // Generation 0 is "no job yet": a worker that starts late must not skip
  // a job published before it first looked.
  unsigned seen = 0;
  for (;;) {
    int spins = 0;
    while (atomic_load_explicit(&p->gen, memory_order_acquire) == seen && !atomic_load(&p->stop)) {
      if (++spins < SPIN_ITERS) continue;
      pthread_mutex_lock(&p->mu);
      while (atomic_load(&p->gen) == seen && !atomic_load(&p->stop)) pthread_cond_wait(&p->cv, &p->mu);
      pthread_mutex_unlock(&p->mu);
    }
    if (atomic_load(&p->stop)) return NULL;
    seen = atomic_load(&p->gen);
    run_chunk(p, id);
    atomic_fetch_sub_explicit(&p->pending, 1, memory_order_release);
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
  if (n_threads > 1024) return rg_status_make(RG_INVALID_ARGUMENT, "%d threads is more than the 1024 allowed", n_threads);
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
    worker_arg_t *wa = malloc(sizeof(*wa));
    if (wa) *wa = (worker_arg_t){p, i};  // before the thread can read it
    int err = wa ? pthread_create(&p->threads[i], NULL, worker, wa) : -1;
    if (err) {
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
  free(p);
}

int rg_pool_threads(const rg_pool_t *p) { return p ? p->n : 1; }

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
  // Threads past `use` get an empty range; all workers take part so the
  // pending count is simple.
  atomic_store(&p->pending, p->n - 1);
  pthread_mutex_lock(&p->mu);
  atomic_fetch_add_explicit(&p->gen, 1, memory_order_release);
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  run_chunk(p, 0);
  while (atomic_load_explicit(&p->pending, memory_order_acquire) > 0) sched_yield();
}
