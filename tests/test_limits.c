#include "runtime/limits.h"
#include "tests/test.h"

// The figures are timings, so only their plausibility is checked: positive,
// and within physical bounds for a CPU (no test may fail on a slow machine).
RG_TEST(limits_measure_plausible_figures) {
  rg_pool_t *p;
  RG_REQUIRE_OK(rg_pool_create(0, &p));
  rg_limits_t l;
  RG_REQUIRE_OK(rg_limits_measure(p, 0.1, &l));
  RG_CHECK(l.threads == rg_pool_threads(p));
  RG_CHECK(l.read_bandwidth > 1e8 && l.read_bandwidth < 1e13);
  if (strcmp(l.fma_isa, "scalar")) RG_CHECK(l.fma_peak > 1e8 && l.fma_peak < 1e14);
  rg_pool_destroy(p);
}
