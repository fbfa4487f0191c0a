#include <stdlib.h>
#include <string.h>

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

// Two readings combine figure by figure into the higher one, a path one
// reading lacks takes the other's, and the largest move between figures
// both measured is returned.
RG_TEST(limits_keep_best_takes_each_higher_figure) {
  rg_limits_t best = {.read_bandwidth = 20e9,
                      .fma_peak = 300e9,
                      .fma_isa = "avx512f",
                      .amx_bf16_peak = 2000e9,
                      .amx_int8_peak = 4000e9,
                      .threads = 2};
  const rg_limits_t other = {.read_bandwidth = 25e9,
                             .fma_peak = 270e9,
                             .fma_isa = "avx512f",
                             .bf16_dot_peak = 150e9,
                             .amx_bf16_peak = 5000e9,
                             .amx_int8_peak = 3000e9,
                             .threads = 2};
  best.bf16_dot_note = "absent in this reading";
  double moved = rg_limits_keep_best(&best, &other);
  RG_CHECK(best.read_bandwidth == 25e9 && best.fma_peak == 300e9);
  RG_CHECK(best.amx_bf16_peak == 5000e9 && best.amx_int8_peak == 4000e9);
  RG_CHECK(best.bf16_dot_peak == 150e9 && best.bf16_dot_note == NULL);
  RG_CHECK(fabs(moved - 0.6) < 1e-12);  // AMX-BF16: |2000 - 5000| / 5000
  // A reading with nothing in it changes nothing and moves nothing.
  const rg_limits_t none = {0};
  rg_limits_t copy = best;
  RG_CHECK(rg_limits_keep_best(&copy, &none) == 0);
  RG_CHECK(!memcmp(&copy, &best, sizeof copy));
}

// A run is priced at the best reading around it, even where the class was
// profiled just before (that reading was of another moment); the profile's
// only where the run has none.
RG_TEST(limits_run_bandwidth_is_the_runs_own_reading) {
  RG_CHECK(rg_limits_run_bandwidth(40e9, 50e9) == 40e9);
  RG_CHECK(rg_limits_run_bandwidth(55e9, 50e9) == 55e9);
  RG_CHECK(rg_limits_run_bandwidth(0, 50e9) == 50e9);
}

// A reading of given memory reads spans of any size, and only them: odd
// sizes and one-byte spans on the heap, where AddressSanitizer catches a
// read past an end. Nothing to read reads as 0, as does no pool work.
RG_TEST(limits_read_spans_reads_only_the_spans) {
  rg_pool_t *p;
  RG_REQUIRE_OK(rg_pool_create(0, &p));
  static const size_t sizes[] = {1, 63, 255, 257, (1u << 20) + 13, (3u << 20) + 1};
  enum { N = sizeof sizes / sizeof sizes[0] };
  rg_limits_span_t sp[N];
  for (int i = 0; i < N; i++) {
    unsigned char *b = malloc(sizes[i]);
    RG_REQUIRE(b != NULL);
    memset(b, i + 1, sizes[i]);
    sp[i] = (rg_limits_span_t){b, sizes[i]};
  }
  double bw = rg_limits_read_spans(p, sp, N, 0);  // 0 passes: one
  RG_CHECK(bw > 1e6 && bw < 1e13);
  RG_CHECK(rg_limits_read_spans(p, sp, 0, 3) == 0);
  rg_limits_span_t empty = {sp[0].p, 0};
  RG_CHECK(rg_limits_read_spans(p, &empty, 1, 3) == 0);
  for (int i = 0; i < N; i++) free((void *)sp[i].p);
  rg_pool_destroy(p);
}
