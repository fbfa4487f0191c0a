#include <dirent.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/pool.h"
#include "tests/test.h"

typedef struct {
  atomic_long sum;
  int *hits;
} sum_ctx_t;

static void add_range(void *ctx, size_t b, size_t e, int thread) {
  sum_ctx_t *c = ctx;
  long s = 0;
  for (size_t i = b; i < e; i++) {
    s += (long)i;
    c->hits[i]++;
  }
  atomic_fetch_add(&c->sum, s);
}

RG_TEST(pool_covers_every_item_once) {
  rg_pool_t *p;
  RG_REQUIRE_OK(rg_pool_create(3, &p));
  RG_CHECK(rg_pool_threads(p) == 3);
  static const size_t sizes[] = {1, 2, 3, 7, 100, 1001};
  for (int rep = 0; rep < 200; rep++)
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
      size_t n = sizes[k];
      sum_ctx_t c = {0};
      c.hits = calloc(n, sizeof(int));
      RG_REQUIRE(c.hits);
      rg_pool_parallel_for(p, n, 1, add_range, &c);
      RG_CHECK(atomic_load(&c.sum) == (long)(n * (n - 1) / 2));
      for (size_t i = 0; i < n; i++) RG_CHECK(c.hits[i] == 1);
      free(c.hits);
    }
  rg_pool_destroy(p);
  RG_CHECK(rg_cpu_count() >= 1);
}

// A worker that cannot run (here: held in a signal handler, as a sleeping
// thread is held while the core it needs runs another process) must not hold
// calls back: the caller runs the chunks nobody claimed. Before chunks were
// claimed, every call waited for every worker, so this test hung until its
// deadline.
static sem_t stall_release;
static atomic_int stall_entered;

static void stall_handler(int sig) {
  (void)sig;
  atomic_store(&stall_entered, 1);
  while (sem_wait(&stall_release) != 0) {
  }
}

typedef struct {
  rg_pool_t *pool;
  atomic_int calls_done;
  int all_covered;
} stall_jobs_t;

static void *stall_jobs(void *arg) {
  stall_jobs_t *s = arg;
  s->all_covered = 1;
  for (int rep = 0; rep < 100; rep++) {
    int hits[16] = {0};
    sum_ctx_t c = {.hits = hits};
    rg_pool_parallel_for(s->pool, 16, 1, add_range, &c);
    for (int i = 0; i < 16; i++) s->all_covered &= hits[i] == 1;
    s->all_covered &= atomic_load(&c.sum) == 120;
    atomic_fetch_add(&s->calls_done, 1);
  }
  return NULL;
}

// The thread ids of this process, into ids (at most cap); returns the count.
static size_t task_ids(pid_t *ids, size_t cap) {
  size_t n = 0;
  DIR *d = opendir("/proc/self/task");
  if (!d) return 0;
  for (struct dirent *e; (e = readdir(d)) && n < cap;)
    if (e->d_name[0] != '.') ids[n++] = (pid_t)atoi(e->d_name);
  closedir(d);
  return n;
}

// The state letter of thread tid ('R', 'S', ...), '?' if unreadable.
static char task_state(pid_t tid) {
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/self/task/%d/stat", (int)tid);
  FILE *f = fopen(path, "r");
  if (!f) return '?';
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  const char *close_paren = strrchr(buf, ')');
  return close_paren && close_paren[1] == ' ' ? close_paren[2] : '?';
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// A pool of 2 threads and the thread id of its one worker, told from the
// threads that were there before it; 0 when another thread started beside
// it (*p is then destroyed and NULL).
static pid_t pool_with_worker(rg_test_ctx_t *t, rg_pool_t **p) {
  pid_t before[256], after[256];
  size_t nb = task_ids(before, 256);
  *p = NULL;
  rg_status_t st = rg_pool_create(2, p);
  if (st) {
    rg_test_fail(t, __FILE__, __LINE__, "rg_pool_create: %s", rg_status_message(st));
    rg_status_free(st);
    return 0;
  }
  size_t na = task_ids(after, 256);
  pid_t worker = 0;
  int fresh = 0;
  for (size_t i = 0; i < na; i++) {
    int old = 0;
    for (size_t k = 0; k < nb; k++) old |= after[i] == before[k];
    if (!old) worker = after[i], fresh++;
  }
  if (fresh == 1) return worker;
  rg_pool_destroy(*p);
  *p = NULL;
  return 0;
}

RG_TEST(pool_call_does_not_wait_for_a_stalled_worker) {
  rg_pool_t *p;
  pid_t worker = pool_with_worker(t, &p);
  if (!worker)
    RG_SKIP("another thread started beside the pool's worker; cannot tell which to stall");
  // Signal it only once it sleeps on the condition variable, so the handler
  // never runs while it holds the pool's mutex.
  double t0 = now_s();
  while (task_state(worker) != 'S' && now_s() - t0 < 5) usleep(1000);
  RG_REQUIRE(task_state(worker) == 'S');
  RG_REQUIRE(sem_init(&stall_release, 0, 0) == 0);
  atomic_store(&stall_entered, 0);
  struct sigaction sa = {.sa_handler = stall_handler}, old_sa;
  sigemptyset(&sa.sa_mask);
  int sig = SIGRTMIN + 5;
  RG_REQUIRE(sigaction(sig, &sa, &old_sa) == 0);
  RG_REQUIRE(syscall(SYS_tgkill, getpid(), worker, sig) == 0);
  while (!atomic_load(&stall_entered) && now_s() - t0 < 5) usleep(1000);
  RG_CHECK(atomic_load(&stall_entered));

  stall_jobs_t s = {.pool = p};
  pthread_t th;
  RG_REQUIRE(pthread_create(&th, NULL, stall_jobs, &s) == 0);
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += 10;
  int joined = pthread_timedjoin_np(th, NULL, &deadline) == 0;
  RG_CHECK(joined);  // all 100 calls done while the worker is held
  RG_CHECK(atomic_load(&s.calls_done) == 100);
  sem_post(&stall_release);
  if (!joined) pthread_join(th, NULL);
  RG_CHECK(s.all_covered);
  rg_pool_destroy(p);
  sigaction(sig, &old_sa, NULL);
  sem_destroy(&stall_release);
}

// The CPU time thread tid has used (user + system), in clock ticks; -1 if
// unreadable.
static long task_ticks(pid_t tid) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/self/task/%d/stat", (int)tid);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  const char *p = strrchr(buf, ')');
  if (!p) return -1;
  // After the name: state, then fields 4..13, then utime (14) and stime (15).
  unsigned long ut = 0, st = 0;
  if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
    return -1;
  return (long)(ut + st);
}

// Workers spin a while after a job, so the next one starts without a
// wake-up, and then sleep: an idle pool must not keep burning a core.
RG_TEST(pool_workers_sleep_once_idle) {
  rg_pool_t *p;
  pid_t worker = pool_with_worker(t, &p);
  if (!worker)
    RG_SKIP("another thread started beside the pool's worker; cannot tell which to watch");
  for (int rep = 0; rep < 50; rep++) {
    int hits[64] = {0};
    sum_ctx_t c = {.hits = hits};
    rg_pool_parallel_for(p, 64, 1, add_range, &c);
    RG_CHECK(atomic_load(&c.sum) == 64 * 63 / 2);
  }
  // Asleep soon after the last job (the spin is under a millisecond; a
  // loaded machine may take longer to let it get there)...
  double t0 = now_s();
  while (task_state(worker) != 'S' && now_s() - t0 < 5) usleep(1000);
  RG_CHECK(task_state(worker) == 'S');
  // ...and it stays asleep: a quarter second idle costs it no CPU time
  // (a tick or two at most, for the clock's granularity).
  long t_before = task_ticks(worker);
  usleep(250000);
  long t_after = task_ticks(worker);
  RG_REQUIRE(t_before >= 0 && t_after >= 0);
  if (t_after - t_before > 2)
    rg_test_fail(t, __FILE__, __LINE__, "an idle worker used %ld ticks in 0.25 s",
                 t_after - t_before);
  RG_CHECK(task_state(worker) == 'S');
  rg_pool_destroy(p);
}

// The nanoseconds thread tid has run on a CPU (/proc's schedstat); -1 if
// unreadable.
static long long task_run_ns(pid_t tid) {
  char path[64];
  snprintf(path, sizeof path, "/proc/self/task/%d/schedstat", (int)tid);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  long long ns = -1;
  if (fscanf(f, "%lld", &ns) != 1) ns = -1;
  fclose(f);
  return ns;
}

static int cmp_ll(const void *a, const void *b) {
  long long x = *(const long long *)a, y = *(const long long *)b;
  return (x > y) - (x < y);
}

// rg_pool_park: a worker that would spin through the next 0.4 ms waiting
// for another job sleeps at once instead (a process about to wait for a
// peer leaves the cores to whoever computes meanwhile), and the next call
// still runs every item.
RG_TEST(pool_park_puts_spinning_workers_to_sleep) {
  rg_pool_t *p;
  pid_t worker = pool_with_worker(t, &p);
  if (!worker)
    RG_SKIP("another thread started beside the pool's worker; cannot tell which to watch");
  if (task_run_ns(worker) < 0) {
    rg_pool_destroy(p);
    RG_SKIP("this kernel has no /proc/self/task/<tid>/schedstat to read a thread's CPU time from");
  }
  enum { REPS = 15 };
  long long used[2][REPS];
  for (int rep = 0; rep < REPS; rep++)
    for (int park = 0; park < 2; park++) {
      int hits[64] = {0};
      sum_ctx_t c = {.hits = hits};
      rg_pool_parallel_for(p, 64, 1, add_range, &c);
      RG_CHECK(atomic_load(&c.sum) == 64 * 63 / 2);
      for (int i = 0; i < 64; i++) RG_CHECK(hits[i] == 1);
      long long t0 = task_run_ns(worker);
      if (park) rg_pool_park(p);
      usleep(2000);  // past the 0.4 ms spin either way
      used[park][rep] = task_run_ns(worker) - t0;
    }
  qsort(used[0], REPS, sizeof used[0][0], cmp_ll);
  qsort(used[1], REPS, sizeof used[1][0], cmp_ll);
  long long spun = used[0][REPS / 2], parked = used[1][REPS / 2];
  if (spun < 100000) {
    rg_pool_destroy(p);
    RG_SKIP("the worker spun too little to compare (the machine is busy)");
  }
  if (parked * 4 > spun)
    rg_test_fail(t, __FILE__, __LINE__,
                 "a parked worker ran %lld us after its job (median), against %lld us unparked",
                 parked / 1000, spun / 1000);
  rg_pool_park(NULL);  // no pool: nothing to do
  rg_pool_destroy(p);
}
