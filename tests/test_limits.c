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

// Every matrix peak the CPU has is measured, and one it lacks says why; the
// peak a report divides by follows the weight type and the level cap.
RG_TEST(limits_matrix_peaks_per_path) {
  rg_pool_t *p;
  RG_REQUIRE_OK(rg_pool_create(1, &p));
  rg_limits_t l;
  RG_REQUIRE_OK(rg_limits_measure(p, 0.05, &l));
  rg_cpu_isa_t best = rg_cpu_isa_best();
  if (best >= RG_CPU_ISA_AVX512_BF16) {
    RG_CHECK(l.bf16_dot_peak > 1e8 && l.bf16_dot_peak < 1e15 && !l.bf16_dot_note);
  } else {
    RG_CHECK(l.bf16_dot_peak == 0 && l.bf16_dot_note != NULL);
  }
  if (best >= RG_CPU_ISA_AMX) {
    RG_CHECK(l.amx_bf16_peak > 1e9 && l.amx_bf16_peak < 1e16 && !l.amx_note);
    RG_CHECK(l.amx_int8_peak > 1e9 && l.amx_int8_peak < 1e16);
  } else {
    RG_CHECK(l.amx_bf16_peak == 0 && l.amx_int8_peak == 0 && l.amx_note != NULL);
  }
  const char *path = NULL;
  double v = rg_limits_matrix_peak(&l, RG_BF16, RG_CPU_ISA_AVX512, &path);
  RG_CHECK(v == l.fma_peak && path && !strcmp(path, "f32 fma"));
  v = rg_limits_matrix_peak(&l, RG_F32, RG_CPU_ISA_AUTO, &path);
  RG_CHECK(v == l.fma_peak && !strcmp(path, "f32 fma"));
  v = rg_limits_matrix_peak(&l, RG_BF16, RG_CPU_ISA_AUTO, &path);
  if (best >= RG_CPU_ISA_AMX)
    RG_CHECK(v == l.amx_bf16_peak && !strcmp(path, "amx-bf16"));
  else if (best >= RG_CPU_ISA_AVX512_BF16)
    RG_CHECK(v == l.bf16_dot_peak && !strcmp(path, "avx512-bf16 dot"));
  rg_pool_destroy(p);
}
