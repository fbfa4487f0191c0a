// ops/cpu/cpu_impl.h — private to ops/cpu: the target strings every vector
// kernel is compiled with, and the pieces the files of ops/cpu share (the
// matmul's job description, the k-quant rows, the AMX GEMM). Nothing outside
// ops/cpu includes it; the public interfaces are ops/convert.h and
// ops/matmul.h.
#ifndef RG_OPS_CPU_CPU_IMPL_H
#define RG_OPS_CPU_CPU_IMPL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/pool.h"
#include "ops/convert.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define RG_X86 1
#else
#define RG_X86 0
#endif

// Function-level targets, so the build needs no -m flags and one binary runs
// on any x86-64; the level is picked at run time.
#define T_AVX2 "avx2,fma,f16c"
#define T_AVX512 "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c"
#define T_AVX512BF16 T_AVX512 ",avx512bf16"
#define T_VNNI T_AVX512BF16 ",avx512vnni"
#define T_AMX T_AVX512BF16 ",amx-tile,amx-bf16,amx-int8"
#define INLINE static inline __attribute__((always_inline))

enum { RG__NR = 4 };  // weight rows per GEMV tile

// How the GEMV kernels that read one sequential stream of weights per
// thread (one weight row at a time: the m = 1 kernels) prefetch: into L2
// (prefetcht1), 8 KiB ahead of the line being read. Measured at m = 1, n =
// 8192, k = 2048 from DRAM on 2 threads of a Sapphire Rapids VM, share of
// read bandwidth against prefetcht0 one or two rows ahead (1.1-4 KiB), A/B
// in the same run: f16 66 -> 85%, bf16 69 -> 91%, q8_0 64 -> 73%; 16 and 24
// KiB ahead were no better, 2-4 KiB worse. For q4_K and q6_K a first run
// showed 52 -> 61% and 55 -> 63%, but 11 rounds A/B later gave 58 -> 60% and
// 59 -> 58%: those kernels are bound by their vector work (14-16 GB/s a
// core from L2), so they keep the same prefetch as the others for one rule. A
// prefetcht0 holds one of the core's few L1 fill buffers until its line
// arrives from DRAM, so it caps the lines in flight; one into L2 does not,
// and the L1 streamer brings the lines on from L2 in time. The 4-row tiles
// (four streams) had stayed on prefetcht0 one tile ahead, where prefetcht1
// ran 3-10 points slower (Sapphire Rapids, when m = 1 still ran on them);
// at m = 2-16 the rows of x share L1 with the tile and evicted the next one
// before its first pass, and into L2 they ran 1.1-2x faster (Zen 4 VM,
// bf16 and f16, 2 threads, alternated calls), so they go to L2 too.
enum { RG__PF_L2_AHEAD = 8192 };
// Locality 2 is prefetcht1 on x86.
#define RG__PREFETCH_L2(p) __builtin_prefetch((p), 0, 2)

// q8_0 rows are 34-byte blocks, so one prefetch per block asks for most
// lines twice and one every other block (68 bytes) skips a line in 17,
// which on a Zen 4 VM held m = 1 at 15-20 GB/s from DRAM against 27-30.
// The kernels ask for each 64-byte line once, in the block it starts in:
// while the next line (*line, from 0) starts before `end`, the bytes of the
// row read so far, *at gets it and *line moves past it.
static inline int rg__q8_line_due(size_t *line, size_t end, size_t *at) {
  if (*line >= end) return 0;
  *at = *line;
  *line += 64;
  return 1;
}

// One matmul call, as the kernels see it (see ops/cpu/matmul.c).
typedef struct rg__mm_job_s {
  const float *x;  // (m, k)
  int64_t m, n, k;
  const unsigned char *w;  // (n, row_bytes)
  size_t row_bytes;
  rg_dtype_t type;
  const float *bias;  // (n) or NULL
  float *y;           // (m, n)
  rg_cpu_isa_t isa;
  int invariant;  // batch-invariant: the GEMV's 4-row shape for every row of x
  // GEMV: rows of x per pass over a thread's weight rows, so that the rows
  // of x in play stay in L2 however large m is.
  int64_t m_chunk;
  // GEMV with vdpbf16ps: x rounded to bf16, rows padded with zeros to kp.
  const uint16_t *xb;  // (m, kp)
  int64_t kp;
  // f16 weights packed in panels: x in f32, rows padded with zeros to kp.
  const float *xf;  // (m, kp)
  // k-quant GEMV at avx512-bf16 and up: x split into bf16 hi + lo, pairs
  // interleaved (m, 2 * kp), and x summed per 32 values (m, kp / 32).
  const uint16_t *xhl;
  const float *xsum;
  // k-quant and q8_0 GEMV with vpdpwssd (gemv_kquant.c): x as int16 per 256
  // values (nb = ceil(k / 256), mp, 256), its scales (nb, mp), and xsum as (nb, mp,
  // 16): the 8 group sums of each super-block, then 8 zeros; mp =
  // rg__x16_rows(m), the rows past m zero. mp is also the AMX field.
  const int16_t *xq;
  const float *xd;
  // m = 1 on vpdpbusd (rg__gemv_kquant_x8): xq split into two int8 terms,
  // (nb, RG__X8_BYTES), see rg__prepare_x8; NULL otherwise.
  const int8_t *x8;
  // GEMM path: one f32 tile buffer of tile_rows × k per thread.
  float *tiles;
  int64_t tile_rows;
  // AMX path: x packed into bf16 tiles (see matmul_amx.c), per-thread
  // weight panels, and the rows of weights each item covers.
  const uint16_t *xpack;
  int64_t mp;        // m rounded up to the tile width (16 or 32)
  uint16_t *panels;  // per thread: panel_elems bf16
  float *scratch;    // per thread: kp floats
  size_t panel_elems;
  int64_t amx_rows;  // weight rows per work item
  // Work split (see claim() in matmul.c): items are GEMV groups of NR rows,
  // GEMM tiles or AMX row blocks; shares[t] packs thread t's unclaimed
  // range, front | back << 32.
  _Atomic uint64_t *shares;
  int n_shares;
  uint32_t chunk;
} rg__mm_job_t;

// The next chunk [*b, *e) of items for the thread owning share `me`; 0
// when none is left anywhere.
int rg__mm_claim(rg__mm_job_t *j, int me, size_t *b, size_t *e);

// ---- k-quants (kquants.c) ------------------------------------------------
// `blocks` super-blocks of 256 to f32 at a level; same bits as base/dtype.c.
void rg__kquant_to_f32(rg_cpu_isa_t isa, rg_dtype_t t, const void *src, float *dst, int64_t blocks);
// GEMV over weight rows [r0, r1) for q4_K / q6_K (AVX-512; the avx512-bf16
// variant uses j->xhl and j->xsum).
void rg__gemv_kquant_avx512(const rg__mm_job_t *j, int64_t r0, int64_t r1);
void rg__gemv_kquant_dpbf16(const rg__mm_job_t *j, int64_t r0, int64_t r1);
// Prepares x for rg__gemv_kquant_dpbf16: xhl (m, 2 kp) and xsum (m, kp/32).
void rg__kquant_prepare_x(const float *x, int64_t m, int64_t k, int64_t kp, uint16_t *xhl,
                          float *xsum);

// ---- k-quants with AVX512_VNNI (gemv_kquant.c) ----------------------------
// Whether the CPU has AVX512_VNNI (cpuid), which every CPU with AVX512_BF16
// that ridge knows has; the kernel runs from the avx512-bf16 level on.
int rg__cpu_has_vnni(void);
// Rows of x the layout holds: m and the padding of the last register block.
int64_t rg__x16_rows(int64_t m);
// Prepares x (m, k), k a multiple of 32, for rg__gemv_kquant_vnni and
// rg__gemv_q8_0_vnni: j->xq, j->xd and j->xsum's layouts.
void rg__prepare_x16(const float *x, int64_t m, int64_t k, int16_t *xq, float *xd, float *xs);
// GEMV over weight rows [r0, r1) for q4_K / q6_K, up to 8 rows of x per
// unpacked super-block.
void rg__gemv_kquant_vnni(const rg__mm_job_t *j, int64_t r0, int64_t r1);
// The same for q8_0, one row of x at a time (used for m <= 2).
void rg__gemv_q8_0_vnni(const rg__mm_job_t *j, int64_t r0, int64_t r1);
// m = 1 for q4_K / q6_K on vpdpbusd with x split into two int8 terms: xq
// (nb super-blocks of one row, rg__prepare_x16's layout at m = 1) into x8,
// RG__X8_BYTES per super-block: 256 high bytes, 256 low bytes (in the
// groups' order for `type`), then the negated sums of the high bytes per 16
// values, each twice, as int16 (q6_K's -32 offset).
enum { RG__X8_BYTES = 576 };
void rg__prepare_x8(const int16_t *xq, int64_t nb, rg_dtype_t type, int8_t *x8);
void rg__gemv_kquant_x8(const rg__mm_job_t *j, int64_t r0, int64_t r1);

// ---- AMX (matmul_amx.c) --------------------------------------------------
// Packs x (m, k) into bf16 tiles for the B operand; mp = m rounded up.
void rg__amx_pack_x(rg_pool_t *pool, rg__mm_job_t *j);
// Pool worker: claims blocks of j->amx_rows weight rows and runs the tiles.
void rg__amx_worker(void *ctx, size_t me, size_t unused, int thread);
// Weight rows per work item for m, k and the pool's threads (a multiple of
// 32, at most 256).
int64_t rg__amx_rows(const rg__mm_job_t *j, size_t threads);
// Elements of one thread's panels for k and the rows per item.
size_t rg__amx_panel_elems(const rg__mm_job_t *j);

// The 8 scales (bytes of out[0..1]) and 8 mins (out[2..3]) of a q4_K
// block's 12 packed bytes, four at a time in 32-bit words: sub-blocks 0-3
// keep the low 6 bits of bytes 0-3 (scales) and 4-7 (mins); 4-7 take the
// low (scales) or high (mins) nibble of bytes 8-11 plus the top 2 bits of
// bytes 0-3 or 4-7. Same values as rg_q4_K_scale_min; inline here for the
// GEMV kernels of kquants.c and gemv_kquant.c.
static inline void rg__q4_K_unpack_scales(const uint8_t *p, uint32_t out[4]) {
  uint32_t u0, u1, u2;
  memcpy(&u0, p, 4);
  memcpy(&u1, p + 4, 4);
  memcpy(&u2, p + 8, 4);
  out[0] = u0 & 0x3f3f3f3fu;
  out[1] = (u2 & 0x0f0f0f0fu) | (((u0 >> 6) & 0x03030303u) << 4);
  out[2] = u1 & 0x3f3f3f3fu;
  out[3] = ((u2 >> 4) & 0x0f0f0f0fu) | (((u1 >> 6) & 0x03030303u) << 4);
}

// ---- Shared by the AMX files -----------------------------------------------
#if RG_X86
// Transposes a 16 × 16 matrix of 32-bit elements held as 16 rows: how a
// block of 16 rows of 32 bf16 values becomes a B tile (row kk holds the
// pair 2kk, 2kk + 1 of each of the 16 rows), and a panel of the
// vdpbf16ps GEMM in matmul.c; and how a C tile's columns become rows.
INLINE __attribute__((target(T_AVX512))) void rg__transpose16(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  // u[4b + c] holds, in 128-bit lane L, column 4L + c of rows 4b..4b+3.
  __m512i u[16];
  for (int b = 0; b < 16; b += 4) {
    u[b] = _mm512_unpacklo_epi64(t[b], t[b + 2]);
    u[b + 1] = _mm512_unpackhi_epi64(t[b], t[b + 2]);
    u[b + 2] = _mm512_unpacklo_epi64(t[b + 1], t[b + 3]);
    u[b + 3] = _mm512_unpackhi_epi64(t[b + 1], t[b + 3]);
  }
  // Column 4L + c is lane L of u[c], u[4 + c], u[8 + c], u[12 + c].
  for (int c = 0; c < 4; c++) {
    __m512i ab0 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0x44),
            ab1 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0xee),
            cd0 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0x44),
            cd1 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0xee);
    r[c] = _mm512_shuffle_i32x4(ab0, cd0, 0x88);
    r[4 + c] = _mm512_shuffle_i32x4(ab0, cd0, 0xdd);
    r[8 + c] = _mm512_shuffle_i32x4(ab1, cd1, 0x88);
    r[12 + c] = _mm512_shuffle_i32x4(ab1, cd1, 0xdd);
  }
}

// The tile configuration every AMX kernel here loads: palette 1, 8 tiles of
// 16 rows × 64 bytes. Static, not built on the stack: GCC 12 does not see
// ldtilecfg read the whole 64 bytes and may drop the stores of colsb and
// rows as dead, leaving a configuration with no tiles (the first tile
// instruction then faults).
typedef struct {
  uint8_t palette, start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} rg__tilecfg_t;

INLINE __attribute__((target(T_AMX))) void rg__amx_load_tiles(void) {
  static const rg__tilecfg_t cfg = {
      .palette = 1,
      .colsb = {64, 64, 64, 64, 64, 64, 64, 64},
      .rows = {16, 16, 16, 16, 16, 16, 16, 16},
  };
  _tile_loadconfig(&cfg);
}
#endif

// ---- Attention prefill blocks on the tiles (attention_amx.c) ---------------
// One block of a prefill run for one kv head, as attention.c hands it over:
// T consecutive tokens of one sequence at positions P0 .. P0 + T - 1, each
// with the G query heads of kv head h, so R = T * G query rows (row r is
// token r / G, head h * G + r % G), R <= RG__ATTN_AMX_ROWS. The KV is bf16
// in the paged layout of ops/ops.h.
enum { RG__ATTN_AMX_ROWS = 128, RG__ATTN_AMX_SLICE = 64 };
typedef struct {
  const uint16_t *k, *v;  // the layer's (n_blocks, n_kv_heads, block_size, head_dim)
  size_t n_kv_heads, block_size, head_dim;  // head_dim: a multiple of 32, <= 256
  const int32_t *blocks;                    // the sequence's block table
  size_t h, G, T, P0;
  size_t window;       // 0: causal; W: a token at p sees p - W + 1 .. p
  float scale;         // logit scale
  const float *q;      // query row (t, g) at q + t * q_stride + g * head_dim
  float *o;            // output, the same layout
  size_t q_stride;     // floats between tokens' rows: n_heads * head_dim
  const float *sinks;  // NULL, or the G heads' sink logits
  // V^T of kv head h packed by rg__attn_amx_pack_vt, slice by slice from
  // position vt_lo (a multiple of RG__ATTN_AMX_SLICE), SLICE x head_dim
  // bf16 each, over at least the positions the block sees.
  const uint16_t *vt;
  size_t vt_lo;
  void *scratch;  // rg__attn_amx_scratch_bytes(head_dim), 64-byte aligned
} rg__attn_amx_block_t;
// Packs V^T of the slice [jb, jb + SLICE) of b's kv head h into dst (SLICE
// x head_dim bf16, 64-byte aligned); positions outside [lo, hi) are zero.
// Only b's k, v, layout, blocks and h are read. Once per run and kv head,
// shared by the run's blocks.
void rg__attn_amx_pack_vt(const rg__attn_amx_block_t *b, size_t jb, size_t lo, size_t hi,
                          uint16_t *dst);
// Bytes of one thread's scratch for blocks of this head_dim.
size_t rg__attn_amx_scratch_bytes(size_t head_dim);
// Configures the tiles on the calling thread (before its first block; the
// process has AMX permission at the amx level), and releases them after.
void rg__attn_amx_begin(void);
void rg__attn_amx_end(void);
// Runs one block: writes the R rows of o.
void rg__attn_amx_run(const rg__attn_amx_block_t *b);

#endif  // RG_OPS_CPU_CPU_IMPL_H
