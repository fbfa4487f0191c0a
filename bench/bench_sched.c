// sched/ decision time: one rg_sched_schedule plus one rg_sched_commit with
// 256 running sequences, the cost a simulator pays per iteration. Goal:
// 20 us (a simulated hour of traffic is millions of iterations). Prints, per
// scenario, the median and 99th percentile per iteration, the cost per
// running sequence, and the ratio of the median to the goal. Never fails on
// a timing; fails only if the scheduler returns an error.
//
// Scenarios:
//   decode            256 sequences decoding, prefix cache off
//   decode+cache      the same with the cache on (each full block is hashed
//                     and entered as it fills)
//   mixed             256 running with turnover: requests finish, new ones
//                     with shared prefixes arrive and prefill in chunks
//   mixed, tight pool the same in a pool a quarter of what the longest requests need, so
//                     preemptions (recompute) happen all the time
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sched/sched.h"

enum { SEQS = 256, WARM = 200, TIMED = 3000, VOCAB = 32000 };
static const double goal_us = 20.0;

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint64_t rng_state = 42;
static uint64_t rng_next(void) {  // splitmix64
  uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static int64_t rng_range(int64_t lo, int64_t hi) {
  return lo + (int64_t)(rng_next() % (uint64_t)(hi - lo + 1));
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

typedef struct {
  const char *name;
  int prefix_cache;
  int mixed;
  double pool_fraction;  // of what SEQS requests of the longest kind need
} scenario_t;

static int fail(const char *what, rg_status_t st) {
  fprintf(stderr, "bench_sched: %s: %s\n", what, rg_status_message(st));
  rg_status_free(st);
  return 1;
}

// Adds one request: in the mixed scenarios a shared 256-token system
// prompt plus a random question, otherwise a fixed 128-token prompt with
// room to decode through the whole run.
static rg_status_t add_one(rg_sched_t *s, const scenario_t *sc, const int32_t *shared, int32_t *buf,
                           uint64_t id, double t) {
  size_t n;
  int64_t max_tokens;
  if (sc->mixed) {
    size_t own = (size_t)rng_range(16, 256);
    memcpy(buf, shared, 256 * sizeof(int32_t));
    for (size_t i = 0; i < own; i++) buf[256 + i] = (int32_t)rng_range(0, VOCAB - 1);
    n = 256 + own;
    max_tokens = rng_range(16, 256);
  } else {
    n = 128;
    for (size_t i = 0; i < n; i++) buf[i] = (int32_t)((id * 131 + i) % VOCAB);
    max_tokens = WARM + TIMED + 64;
  }
  rg_sched_request_t q = {
      .id = id, .prompt = buf, .n_prompt = n, .max_tokens = max_tokens, .arrival = t};
  int32_t h;
  return rg_sched_add(s, &q, &h);
}

static int run(const scenario_t *sc) {
  const int32_t bs = 16;
  int64_t longest = sc->mixed ? 256 + 256 + 256 : 128 + WARM + TIMED + 64;
  int64_t per_seq = (longest + bs - 1) / bs;
  rg_sched_config_t c = {
      .block_size = bs,
      .n_blocks = (int64_t)(SEQS * per_seq * sc->pool_fraction),
      .max_seqs = SEQS,
      .max_batch_tokens = 512,
      .max_context = longest,
      .prefix_cache = sc->prefix_cache,
  };
  rg_sched_t *s;
  rg_status_t st = rg_sched_create(&c, &s);
  if (st) return fail("create", st);
  int32_t shared[256], *buf = malloc((size_t)longest * sizeof(int32_t));
  rg_sched_result_t *res = malloc(SEQS * sizeof(*res));
  double *t_iter = malloc(TIMED * sizeof(double));
  int32_t *done = malloc(SEQS * sizeof(int32_t));
  if (!buf || !res || !t_iter || !done) {
    fprintf(stderr, "bench_sched: out of memory\n");
    return 1;
  }
  for (int i = 0; i < 256; i++) shared[i] = (int32_t)rng_range(0, VOCAB - 1);
  uint64_t next_id = 1;
  double clock = 0;
  // Twice as many requests as fit keep a queue waiting in the mixed runs.
  int initial = sc->mixed ? 2 * SEQS : SEQS;
  for (int i = 0; i < initial; i++)
    if ((st = add_one(s, sc, shared, buf, next_id++, 0))) return fail("add", st);
  int64_t running_sum = 0;
  for (int it = 0; it < WARM + TIMED; it++) {
    double t0 = now_s();
    rg_sched_batch_t b;
    if ((st = rg_sched_schedule(s, clock, &b))) return fail("schedule", st);
    size_t n = 0;
    for (size_t i = 0; i < b.n_entries; i++)
      if (b.entries[i].want_logits)
        res[n++] = (rg_sched_result_t){b.entries[i].req, (int32_t)((it * 7 + i) % VOCAB), 0};
    clock += 0.02;
    if ((st = rg_sched_commit(s, clock, res, n))) return fail("commit", st);
    double dt = now_s() - t0;
    if (it >= WARM) {
      t_iter[it - WARM] = dt;
      running_sum += (int64_t)b.n_entries;
    }
    // Keep the queue topped up (outside the timed region): release each
    // finished request and add a new one in its place.
    if (sc->mixed) {
      size_t n_done = 0;
      for (size_t i = 0; i < b.n_entries; i++) {
        rg_sched_request_info_t info;
        if (rg_sched_request_info(s, b.entries[i].req, &info) == NULL &&
            info.state == RG_SCHED_FINISHED)
          done[n_done++] = b.entries[i].req;
      }
      for (size_t i = 0; i < n_done; i++) {
        rg_sched_release(s, done[i]);
        if ((st = add_one(s, sc, shared, buf, next_id++, clock))) return fail("add", st);
      }
    }
  }
  rg_sched_stats_t ss;
  rg_sched_stats(s, &ss);
  qsort(t_iter, TIMED, sizeof(double), cmp_double);
  double med = t_iter[TIMED / 2] * 1e6, p99 = t_iter[TIMED * 99 / 100] * 1e6;
  double avg_entries = (double)running_sum / TIMED;
  double hit = ss.prefix_lookup_tokens ? (double)ss.prefix_hit_tokens / ss.prefix_lookup_tokens : 0;
  printf("%-18s %8.2f us %8.2f us %9.1f %10.1f ns %9.2fx %8" PRId64 " %7.0f%%\n", sc->name, med,
         p99, avg_entries, med * 1e3 / avg_entries, med / goal_us,
         ss.preempt_recompute + ss.preempt_swap, hit * 100);
  free(done);
  free(t_iter);
  free(res);
  free(buf);
  rg_sched_destroy(s);
  return 0;
}

int main(void) {
  static const scenario_t scenarios[] = {
      {"decode", 0, 0, 1.0},
      {"decode+cache", 1, 0, 1.0},
      {"mixed", 1, 1, 1.0},
      {"mixed, tight pool", 1, 1, 0.25},
  };
  printf(
      "bench_sched: schedule + commit per iteration, %d sequences, %d timed iterations; "
      "goal <= %.0f us\n",
      SEQS, TIMED, goal_us);
  printf("%-18s %11s %11s %9s %13s %10s %8s %8s\n", "scenario", "median", "p99", "entries",
         "per entry", "vs goal", "preempt", "hits");
  int rc = 0;
  for (size_t i = 0; i < sizeof scenarios / sizeof scenarios[0]; i++) rc |= run(&scenarios[i]);
  return rc;
}
