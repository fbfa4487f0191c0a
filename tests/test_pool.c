#include <stdatomic.h>
#include <stdlib.h>

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
