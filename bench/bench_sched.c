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
//   sessions+tier     agentic sessions: each turn re-reads the whole conversation so far
//                     and adds a question, then the session thinks for a time drawn around
//                     the retention window before its next turn; a device pool that holds
//                     the running turns but not the thinking sessions' prefixes, and a
//                     capacity tier four times its size, so idle prefixes move down after
//                     the window and come back on the next turn
//   sessions, no tier the same sessions without the tier, for comparison: returning turns
//                     find little of their prefix and prefill it again, so far fewer
//                     sequences run per step
//
// The tier's cost grows with the blocks it moves: each block offloaded,
// reloaded or matched in a lookup is a few cache misses in tables as large
// as the pools.
//
// Columns beyond the timings: preemptions, the prefix-cache hit rate, and
// (for the tier) the share of hit tokens that came back from the tier and
// the blocks moved down and up per iteration.
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
  int sessions;          // agentic sessions: 1 over a capacity tier, 2 without one
} scenario_t;

// Sessions: their number (more than run at once: most are thinking), the
// retention window and the longest conversation before a session restarts.
enum { SESSIONS = 3 * SEQS, SESSION_CONTEXT = 2048, SESSION_WARM = 1500 };
static const double retention_s = 2.0, step_s = 0.02;

typedef struct {
  int32_t *tokens;  // (SESSION_CONTEXT) the conversation so far
  int64_t n;        // its length
  double next;      // when its next turn arrives; < 0 while a turn is being served
  int32_t handle;
} session_t;

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

// Starts a session's next turn: the conversation so far plus a question
// (a fresh conversation when the next one would not fit).
static rg_status_t add_turn(rg_sched_t *s, session_t *ss, const int32_t *shared, uint64_t id,
                            double t) {
  int64_t question = rng_range(16, 64), max_tokens = rng_range(16, 128);
  if (ss->n + question + max_tokens > SESSION_CONTEXT) {
    memcpy(ss->tokens, shared, 256 * sizeof(int32_t));
    ss->n = 256;
  }
  for (int64_t i = 0; i < question; i++) ss->tokens[ss->n++] = (int32_t)rng_range(0, VOCAB - 1);
  rg_sched_request_t q = {.id = id,
                          .prompt = ss->tokens,
                          .n_prompt = (size_t)ss->n,
                          .max_tokens = max_tokens,
                          .arrival = t};
  ss->next = -1;
  return rg_sched_add(s, &q, &ss->handle);
}

static int run_sessions(const scenario_t *sc) {
  const int32_t bs = 16;
  // The running turns' blocks fit; the thinking sessions' do not.
  int64_t n_blocks = (int64_t)(SEQS * (SESSION_CONTEXT / 2 / bs) * sc->pool_fraction);
  rg_sched_config_t c = {
      .block_size = bs,
      .n_blocks = n_blocks,
      .max_seqs = SEQS,
      .max_batch_tokens = 512,
      .max_context = SESSION_CONTEXT,
      .prefix_cache = 1,
      .n_tier_blocks = sc->sessions == 1 ? 4 * n_blocks : 0,
      .retention_s = sc->sessions == 1 ? retention_s : 0,
  };
  rg_sched_t *s;
  rg_status_t st = rg_sched_create(&c, &s);
  if (st) return fail("create", st);
  session_t *ss = calloc(SESSIONS, sizeof(*ss));
  int32_t *owner = malloc(SESSIONS * sizeof(int32_t));  // handle -> session, -1 when none
  rg_sched_result_t *res = malloc(SEQS * sizeof(*res));
  double *t_iter = malloc(TIMED * sizeof(double));
  int32_t shared[256];
  if (!ss || !owner || !res || !t_iter) {
    fprintf(stderr, "bench_sched: out of memory\n");
    return 1;
  }
  for (int i = 0; i < 256; i++) shared[i] = (int32_t)rng_range(0, VOCAB - 1);
  for (int i = 0; i < SESSIONS; i++) {
    ss[i].tokens = malloc(SESSION_CONTEXT * sizeof(int32_t));
    if (!ss[i].tokens) {
      fprintf(stderr, "bench_sched: out of memory\n");
      return 1;
    }
    memcpy(ss[i].tokens, shared, 256 * sizeof(int32_t));
    ss[i].n = 256;
    // Sessions start spread over one window, so turns do not come in waves.
    ss[i].next = retention_s * (double)i / SESSIONS;
    owner[i] = -1;
  }
  uint64_t next_id = 1;
  double clock = 0;
  int64_t running_sum = 0;
  rg_sched_stats_t s0 = {0};
  for (int it = 0; it < SESSION_WARM + TIMED; it++) {
    // Outside the timed region: the turns that arrive now, in arrival
    // order (every iteration is one step of the clock).
    for (int i = 0; i < SESSIONS; i++)
      if (ss[i].next >= 0 && ss[i].next <= clock) {
        if ((st = add_turn(s, &ss[i], shared, next_id++, clock))) return fail("add", st);
        owner[ss[i].handle] = i;
      }
    if (it == SESSION_WARM) rg_sched_stats(s, &s0);
    double t0 = now_s();
    rg_sched_batch_t b;
    if ((st = rg_sched_schedule(s, clock, &b))) return fail("schedule", st);
    size_t n = 0;
    for (size_t i = 0; i < b.n_entries; i++)
      if (b.entries[i].want_logits)
        res[n++] = (rg_sched_result_t){b.entries[i].req, (int32_t)((it * 7 + i) % VOCAB), 0};
    clock += step_s;
    if ((st = rg_sched_commit(s, clock, res, n))) return fail("commit", st);
    double dt = now_s() - t0;
    if (it >= SESSION_WARM) {
      t_iter[it - SESSION_WARM] = dt;
      running_sum += (int64_t)b.n_entries;
    }
    // A finished turn's answer joins the conversation; the person thinks.
    for (size_t i = 0; i < b.n_entries; i++) {
      int32_t h = b.entries[i].req;
      rg_sched_request_info_t info;
      if (rg_sched_request_info(s, h, &info) != NULL || info.state != RG_SCHED_FINISHED) continue;
      session_t *e = &ss[owner[h]];
      memcpy(e->tokens + e->n, info.output, (size_t)info.n_output * sizeof(int32_t));
      e->n += info.n_output;
      e->next = clock + retention_s * (0.5 + (double)rng_range(0, 1000) / 1000.0);
      owner[h] = -1;
      rg_sched_release(s, h);
    }
  }
  rg_sched_stats_t s1;
  rg_sched_stats(s, &s1);
  qsort(t_iter, TIMED, sizeof(double), cmp_double);
  double med = t_iter[TIMED / 2] * 1e6, p99 = t_iter[TIMED * 99 / 100] * 1e6;
  double avg_entries = (double)running_sum / TIMED;
  int64_t lookup = s1.prefix_lookup_tokens - s0.prefix_lookup_tokens;
  int64_t hit = s1.prefix_hit_tokens - s0.prefix_hit_tokens;
  int64_t tier_hit = s1.tier_hit_tokens - s0.tier_hit_tokens;
  printf("%-18s %8.2f us %8.2f us %9.1f %10.1f ns %9.2fx %8" PRId64
         " %7.0f%% %8.0f%% %5.1f / %.1f\n",
         sc->name, med, p99, avg_entries, med * 1e3 / avg_entries, med / goal_us,
         s1.preempt_recompute + s1.preempt_swap - s0.preempt_recompute - s0.preempt_swap,
         lookup ? 100.0 * (double)hit / (double)lookup : 0,
         hit ? 100.0 * (double)tier_hit / (double)hit : 0,
         (double)(s1.blocks_offloaded - s0.blocks_offloaded) / TIMED,
         (double)(s1.blocks_reloaded - s0.blocks_reloaded) / TIMED);
  for (int i = 0; i < SESSIONS; i++) free(ss[i].tokens);
  free(t_iter);
  free(res);
  free(owner);
  free(ss);
  rg_sched_destroy(s);
  return 0;
}

static int run(const scenario_t *sc) {
  if (sc->sessions) return run_sessions(sc);
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

// With arguments, only the scenarios whose names start with one of them.
int main(int argc, char **argv) {
  static const scenario_t scenarios[] = {
      {"decode", 0, 0, 1.0, 0},
      {"decode+cache", 1, 0, 1.0, 0},
      {"mixed", 1, 1, 1.0, 0},
      {"mixed, tight pool", 1, 1, 0.25, 0},
      {"sessions, no tier", 1, 0, 1.0, 2},
      {"sessions+tier", 1, 0, 1.0, 1},
  };
  printf(
      "bench_sched: schedule + commit per iteration, %d sequences, %d timed iterations; "
      "goal <= %.0f us\n",
      SEQS, TIMED, goal_us);
  printf("%-18s %11s %11s %9s %13s %10s %8s %8s %9s %s\n", "scenario", "median", "p99", "entries",
         "per entry", "vs goal", "preempt", "hits", "from tier", "down / up per iter");
  int rc = 0;
  for (size_t i = 0; i < sizeof scenarios / sizeof scenarios[0]; i++) {
    int want = argc < 2;
    for (int k = 1; k < argc; k++)
      want |= strncmp(scenarios[i].name, argv[k], strlen(argv[k])) == 0;
    if (want) rc |= run(&scenarios[i]);
  }
  return rc;
}
