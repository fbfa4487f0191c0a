// The one element-type table (base/dtype.h) and the model-family traits
// table (graphs/graphs.h): lookups in every direction, sizes, and that the
// vectorised row codecs in ops/ give the reference codecs' bits.
#include <stdlib.h>

#include "base/dtype.h"
#include "graphs/graphs.h"
#include "ops/convert.h"
#include "tests/test.h"

RG_TEST(dtype_table_round_trips_every_name_and_id) {
  for (int i = 0; i < RG_DTYPE_COUNT; i++) {
    rg_dtype_t ty = (rg_dtype_t)i, back;
    RG_CHECK(rg_dtype_parse_any(rg_dtype_name(ty), &back) == 0 && back == ty);
    const char *st = rg_dtype_safetensors_name(ty);
    if (st) RG_CHECK(rg_dtype_from_safetensors(st, &back) == 0 && back == ty);
    int64_t g = rg_dtype_ggml_id(ty);
    if (g >= 0) RG_CHECK(rg_dtype_from_ggml(g, &back) == 0 && back == ty);
    RG_CHECK(rg_dtype_block_elems(ty) >= 1 && rg_dtype_block_bytes(ty) >= 1);
    RG_CHECK(rg_dtype_compute(ty) < RG_DTYPE_COMPUTE_COUNT);
    // Planning parses only the compute types.
    RG_CHECK((rg_dtype_parse(rg_dtype_name(ty), &back) == 0) == (i < RG_DTYPE_COMPUTE_COUNT));
  }
  // ggml's ids for the types GGUF files carry.
  rg_dtype_t d;
  RG_CHECK(rg_dtype_from_ggml(0, &d) == 0 && d == RG_F32);
  RG_CHECK(rg_dtype_from_ggml(1, &d) == 0 && d == RG_F16);
  RG_CHECK(rg_dtype_from_ggml(8, &d) == 0 && d == RG_Q8_0);
  RG_CHECK(rg_dtype_from_ggml(30, &d) == 0 && d == RG_BF16);
  RG_CHECK(rg_dtype_from_ggml(12, &d) == 0 && d == RG_Q4_K);
  RG_CHECK(rg_dtype_from_ggml(14, &d) == 0 && d == RG_Q6_K);
  RG_CHECK(rg_dtype_from_ggml(13, &d) != 0);             // Q5_K: not in the table
  RG_CHECK(rg_dtype_from_safetensors("bf16", &d) != 0);  // the format's spelling is exact
  RG_CHECK(rg_dtype_parse_any("F8_E5M2", &d) == 0 && d == RG_FP8_E5M2);
  RG_CHECK(rg_dtype_parse("float8_e5m2", &d) == 0 && d == RG_FP8);  // one byte is all a plan needs
  RG_CHECK(rg_dtype_parse("q8_0", &d) != 0);
  RG_CHECK(rg_dtype_bytes(RG_Q8_0) == 34.0 / 32.0 && rg_dtype_bytes(RG_FP4) == 4.25 / 8.0);
  RG_CHECK(rg_dtype_compute(RG_Q8_0) == RG_INT8);
  int ok;
  RG_CHECK(rg_dtype_nbytes(RG_Q8_0, 64, &ok) == 68 && ok);
  RG_CHECK(rg_dtype_nbytes(RG_Q8_0, 63, &ok) == 0 && !ok);
  RG_CHECK(rg_dtype_nbytes(RG_F64, INT64_MAX, &ok) == 0 && !ok);
  size_t rb;
  RG_CHECK_ERR(rg_dtype_row_bytes(RG_Q8_0, 48, &rb), "q8_0 rows must be a multiple of 32 wide");
  RG_CHECK_OK(rg_dtype_row_bytes(RG_BF16, 48, &rb));
  RG_CHECK(rb == 96);
  float f[4] = {0};
  RG_CHECK_ERR(rg_dtype_to_f32(RG_FP8, f, f, 4), "ridge has no fp8 <-> f32 conversion");
}

// The vectorised widening in ops/ gives the reference codec's bits for every
// bf16 and f16 pattern and for q8_0 blocks at every level the CPU has.
RG_TEST(dtype_ops_rows_match_the_reference_codecs) {
  enum { N = 65536 };
  uint16_t *h = malloc(N * 2);
  float *ref = malloc(N * 4), *got = malloc(N * 4);
  RG_REQUIRE(h && ref && got);
  for (int i = 0; i < N; i++) h[i] = (uint16_t)i;
  const rg_dtype_t types[] = {RG_BF16, RG_F16};
  for (size_t k = 0; k < 2; k++) {
    RG_REQUIRE_OK(rg_dtype_to_f32(types[k], h, ref, N));
    for (int isa = RG_CPU_ISA_SCALAR; isa < RG_CPU_ISA_COUNT; isa++) {
      rg_status_t st = rg_row_to_f32_isa((rg_cpu_isa_t)isa, types[k], h, got, N);
      if (st && rg_status_code(st) == RG_UNAVAILABLE) {
        rg_status_free(st);
        continue;
      }
      RG_REQUIRE_OK(st);
      RG_CHECK(memcmp(ref, got, N * 4) == 0);
    }
  }
  // q8_0: random blocks, every level.
  enum { Q = 32 * 256 };
  float x[Q];
  unsigned char q[Q / 32 * 34];
  uint64_t s = 1;
  for (int i = 0; i < Q; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x[i] = (float)((int64_t)(s >> 11) % 20001 - 10000) * 1e-3f * (float)(1 + i / 1024);
  }
  RG_REQUIRE_OK(rg_q8_0_quantize_row(x, q, Q));
  RG_REQUIRE_OK(rg_dtype_to_f32(RG_Q8_0, q, ref, Q));
  for (int isa = RG_CPU_ISA_SCALAR; isa < RG_CPU_ISA_COUNT; isa++) {
    rg_status_t st = rg_row_to_f32_isa((rg_cpu_isa_t)isa, RG_Q8_0, q, got, Q);
    if (st && rg_status_code(st) == RG_UNAVAILABLE) {
      rg_status_free(st);
      continue;
    }
    RG_REQUIRE_OK(st);
    RG_CHECK(memcmp(ref, got, Q * 4) == 0);
  }
  // Narrowing through ops/ is the same quantizer.
  unsigned char q2[sizeof q];
  RG_REQUIRE_OK(rg_row_from_f32(RG_Q8_0, x, q2, Q));
  RG_CHECK(memcmp(q, q2, sizeof q) == 0);
  x[5] = NAN;
  RG_CHECK_ERR(rg_q8_0_quantize_row(x, q, Q), "q8_0 cannot hold value nan at index 5");
  free(h), free(ref), free(got);
}

RG_TEST(family_table_answers_every_lookup) {
  for (int i = 0; i < RG_FAMILY_COUNT; i++) {
    rg_family_t f = (rg_family_t)i, back;
    const rg_family_info_t *fi = rg_family_info(f);
    RG_CHECK(rg_family_from_model_type(fi->model_type, &back) == 0 && back == f);
    RG_CHECK(rg_family_from_class(fi->class_name, &back) == 0 && back == f);
    // Every family the engine runs reads and writes GGUF.
    if (rg_family_has(f, RG_FAM_RUNS)) RG_CHECK(fi->gguf_arch != NULL && fi->chat_template != NULL);
  }
  rg_family_t f;
  RG_CHECK(rg_family_from_gguf("llama", &f) == 0 && f == RG_FAMILY_LLAMA);
  RG_CHECK(rg_family_from_gguf("qwen3moe", &f) == 0 && f == RG_FAMILY_QWEN3_MOE);
  RG_CHECK(rg_family_from_gguf("gemma2", &f) != 0);
  RG_CHECK(rg_family_has(RG_FAMILY_MIXTRAL, RG_FAM_MIXTRAL_MOE | RG_FAM_GGUF_QK_PERM));
  RG_CHECK(!rg_family_has(RG_FAMILY_QWEN2, RG_FAM_QK_NORM) &&
           rg_family_has(RG_FAMILY_QWEN2, RG_FAM_QKV_BIAS));
  char list[256];
  RG_CHECK(!strcmp(rg_family_list(RG_FAM_RUNS, list, sizeof list),
                   "llama, mistral, mixtral, qwen2, qwen3, qwen3_moe"));
  RG_CHECK(!strcmp(rg_family_name(RG_FAMILY_COUNT), "?"));
}
