// GGUF k-quants (q4_K, q6_K): the table rows, the reference dequantization
// against llama.cpp's own output bit for bit, every vector level against the
// reference, the numpy reference against the same vectors, and the messages
// for what ridge does not do with them.
//
// tests/kquant_vectors.h holds 8 super-blocks of each type, half from
// llama.cpp's quantizers, half random bytes with chosen scales, and what
// llama.cpp's dequantize_row_q4_K / _q6_K return for them (see
// bench/llamacpp/kquant_vectors.py, which ran the prebuilt library npm's
// node-llama-cpp ships).
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "base/dtype.h"
#include "ops/convert.h"
#include "tests/kquant_vectors.h"
#include "tests/test.h"

enum { N = 8 * 256 };

typedef struct {
  rg_dtype_t type;
  const uint8_t *blocks;
  const uint32_t *want;
} vectors_t;

static const vectors_t vectors[] = {{RG_Q4_K, q4_k_blocks, q4_k_want},
                                    {RG_Q6_K, q6_k_blocks, q6_k_want}};

// Reports the first element whose bits differ; 1 when all agree.
static int same_bits(rg_test_ctx_t *t, const char *what, const float *got, const uint32_t *want,
                     int n) {
  for (int i = 0; i < n; i++) {
    uint32_t g;
    memcpy(&g, &got[i], 4);
    if (g != want[i]) {
      float w;
      memcpy(&w, &want[i], 4);
      rg_test_fail(t, __FILE__, __LINE__,
                   "%s: block %d element %d is %.9g (0x%08x), llama.cpp %.9g (0x%08x)", what,
                   i / 256, i % 256, (double)got[i], g, (double)w, want[i]);
      return 0;
    }
  }
  return 1;
}

RG_TEST(kquants_table_rows) {
  size_t rb;
  RG_CHECK(rg_dtype_block_elems(RG_Q4_K) == 256 && rg_dtype_block_bytes(RG_Q4_K) == 144);
  RG_CHECK(rg_dtype_block_elems(RG_Q6_K) == 256 && rg_dtype_block_bytes(RG_Q6_K) == 210);
  RG_CHECK(rg_dtype_ggml_id(RG_Q4_K) == 12 && rg_dtype_ggml_id(RG_Q6_K) == 14);
  RG_CHECK(rg_dtype_bytes(RG_Q4_K) == 144.0 / 256 && rg_dtype_bytes(RG_Q6_K) == 210.0 / 256);
  RG_CHECK(!strcmp(rg_dtype_name(RG_Q4_K), "q4_K") && !strcmp(rg_dtype_name(RG_Q6_K), "q6_K"));
  rg_dtype_t d;
  RG_CHECK(rg_dtype_parse_any("Q4_K", &d) == 0 && d == RG_Q4_K);
  RG_CHECK(rg_dtype_parse("q4_K", &d) != 0);  // not a type a plan names
  RG_CHECK(rg_dtype_has_codec(RG_Q4_K) && !rg_dtype_can_narrow(RG_Q4_K));
  RG_CHECK(rg_dtype_has_codec(RG_Q6_K) && !rg_dtype_can_narrow(RG_Q6_K));
  RG_CHECK(rg_dtype_can_narrow(RG_Q8_0) && rg_dtype_can_narrow(RG_BF16));
  RG_CHECK(rg_dtype_is_weight(RG_Q4_K) && rg_dtype_is_weight(RG_Q6_K));
  RG_CHECK(rg_dtype_compute(RG_Q4_K) == RG_INT8);
  RG_CHECK_OK(rg_dtype_row_bytes(RG_Q4_K, 2048, &rb));
  RG_CHECK(rb == 8 * 144);
  RG_CHECK_OK(rg_dtype_row_bytes(RG_Q6_K, 512, &rb));
  RG_CHECK(rb == 2 * 210);
}

RG_TEST(kquants_reference_matches_llama_cpp_bit_for_bit) {
  float got[N];
  for (size_t v = 0; v < 2; v++) {
    RG_REQUIRE_OK(rg_dtype_to_f32(vectors[v].type, vectors[v].blocks, got, N));
    same_bits(t, rg_dtype_name(vectors[v].type), got, vectors[v].want, N);
  }
}

// The vector rows at every level the CPU has give the reference's bits, on
// llama.cpp's vectors and on random blocks (every scale, min and quant
// pattern, at an odd 2-byte alignment as GGUF may place them).
RG_TEST(kquants_every_level_matches_the_reference) {
  enum { RB = 64 };
  uint8_t *raw = malloc(RB * 210 + 2);
  float *ref = malloc(RB * 256 * sizeof(float)), *got = malloc(RB * 256 * sizeof(float));
  RG_REQUIRE(raw && ref && got);
  uint64_t s = 0x6b71u;
  int levels = 0;
  for (size_t v = 0; v < 2; v++) {
    rg_dtype_t ty = vectors[v].type;
    size_t bb = (size_t)rg_dtype_block_bytes(ty);
    uint8_t *blk = raw + 2;  // 2-byte aligned, not 4
    for (size_t i = 0; i < RB * bb; i++) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      blk[i] = (uint8_t)(s >> 56);
    }
    for (int b = 0; b < RB; b++) {
      // Finite scales of every magnitude, subnormal to large.
      uint16_t d = (uint16_t)((b * 977) % 0x7800), dm = (uint16_t)((b * 331) % 0x7800);
      if (ty == RG_Q4_K)
        memcpy(blk + b * bb, &d, 2), memcpy(blk + b * bb + 2, &dm, 2);
      else
        memcpy(blk + b * bb + 208, &d, 2);
    }
    RG_REQUIRE_OK(rg_dtype_to_f32(ty, blk, ref, RB * 256));
    for (int isa = RG_CPU_ISA_SCALAR; isa < RG_CPU_ISA_COUNT; isa++) {
      rg_status_t st = rg_row_to_f32_isa((rg_cpu_isa_t)isa, ty, vectors[v].blocks, got, N);
      if (st && rg_status_code(st) == RG_UNAVAILABLE) {
        rg_status_free(st);
        continue;
      }
      RG_REQUIRE_OK(st);
      levels++;
      char what[64];
      snprintf(what, sizeof what, "%s at %s", rg_dtype_name(ty),
               rg_cpu_isa_name((rg_cpu_isa_t)isa));
      same_bits(t, what, got, vectors[v].want, N);
      RG_REQUIRE_OK(rg_row_to_f32_isa((rg_cpu_isa_t)isa, ty, blk, got, RB * 256));
      int bad = 0;
      for (int i = 0; i < RB * 256; i++) bad += memcmp(&got[i], &ref[i], 4) != 0;
      if (bad)
        rg_test_fail(t, __FILE__, __LINE__,
                     "%s, random blocks: %d of %d values differ from the reference", what, bad,
                     RB * 256);
    }
  }
  RG_CHECK(levels >= 2);
  RG_CHECK_OK(rg_q4_K_dequantize_row(q4_k_blocks, got, N));
  same_bits(t, "rg_q4_K_dequantize_row", got, q4_k_want, N);
  RG_CHECK_OK(rg_q6_K_dequantize_row(q6_k_blocks, got, N));
  same_bits(t, "rg_q6_K_dequantize_row", got, q6_k_want, N);
  free(raw), free(ref), free(got);
}

// The numpy reference (tests/reference/ridge_ref.py) dequantizes the same
// blocks on its own, from the block layout, to llama.cpp's bits.
RG_TEST(kquants_numpy_reference_matches_llama_cpp) {
  if (access("/usr/bin/python3", X_OK) || system("/usr/bin/python3 -c 'import numpy' 2>/dev/null"))
    RG_SKIP(
        "/usr/bin/python3 with numpy is missing (scripts/install-deps.sh installs python3-numpy)");
  for (size_t v = 0; v < 2; v++) {
    const char *name = rg_dtype_name(vectors[v].type);
    char in[1200], out[1200], cmd[4096];
    snprintf(in, sizeof in, "%s/%s.blocks", rg_test_tmpdir(t), name);
    snprintf(out, sizeof out, "%s/%s.f32", rg_test_tmpdir(t), name);
    FILE *f = fopen(in, "wb");
    RG_REQUIRE(f);
    RG_REQUIRE(fwrite(vectors[v].blocks, (size_t)rg_dtype_block_bytes(vectors[v].type), 8, f) == 8);
    fclose(f);
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 %s/tests/reference/ridge_ref.py dequant --type %s --in %s --out %s",
             RIDGE_SOURCE_DIR, name, in, out);
    RG_REQUIRE(system(cmd) == 0);
    float got[N];
    f = fopen(out, "rb");
    RG_REQUIRE(f);
    size_t n = fread(got, sizeof(float), N, f);
    fclose(f);
    RG_REQUIRE(n == N);
    char what[64];
    snprintf(what, sizeof what, "numpy %s", name);
    same_bits(t, what, got, vectors[v].want, N);
  }
}

RG_TEST(kquants_reject_what_ridge_does_not_do) {
  float x[512] = {0};
  uint8_t q[2 * 210] = {0};
  RG_CHECK_ERR(rg_dtype_from_f32(RG_Q4_K, x, q, 256),
               "ridge reads q4_K weights but does not quantize to q4_K");
  RG_CHECK_ERR(rg_row_from_f32(RG_Q6_K, x, q, 256), "does not quantize to q6_K");
  RG_CHECK_ERR(rg_dtype_to_f32(RG_Q4_K, q, x, 300), "q4_K rows must be a multiple of 256 wide");
  RG_CHECK_ERR(rg_row_to_f32(RG_Q6_K, q, x, 100), "q6_K rows must be a multiple of 256 wide");
  RG_CHECK_ERR(rg_q4_K_dequantize_row(q, x, 255), "multiple of 256");
  size_t rb;
  RG_CHECK_ERR(rg_dtype_row_bytes(RG_Q4_K, 2000, &rb), "q4_K rows must be a multiple of 256 wide");
}
