// The OpenCL device's matmuls against its own limits, measured in the same
// run on the device itself (devices/opencl/opencl_profile.h):
//   limits   read bandwidth (a streaming kernel over 1 GiB, more than any
//            cache here) and the f32 FMA peak (independent fma() chains);
//            a large GEMM (f32, 2048 x 2048 x 2048) through the matmul op
//   copies   write bandwidth (a kernel), copies within the device, host <->
//            device (what `ridge profile` records beside the read bandwidth)
//   launch   the host's cost per op (1000 small adds back to back, one wait)
//   decode   GEMV m = 1 at a 1.1B model's shapes (TinyLlama: d 2048, ffn
//            5632, 4 kv heads of 64), f32/bf16/f16/q8_0 weights cycled
//            through 1 GiB of copies so each call streams from memory:
//            GB/s of weights and the ratio to the read bandwidth
//   prefill  GEMM m = 512 at the same shapes: GFLOP/s and the ratios to the
//            FMA peak and to the large GEMM
//   attention  decode over a paged bf16 cache (32 heads over 4 of 64, as
//            TinyLlama) at growing contexts: KV GB/s against the read bandwidth
// Timings are the best of several passes. On a machine others share, the
// load changes from one second to the next, so each kernel's ratio is taken
// against the limit measured just before it (read bandwidth for the GEMVs,
// the FMA peak for the GEMMs), and the run-wide limits are the best seen.
// Prints ratios; never fails on a timing.
//
//   build/bench_opencl [--device N] [--quick]
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "devices/devices.h"
#include "devices/opencl/opencl_profile.h"

static void die(rg_status_t s) {
  if (!s) return;
  fprintf(stderr, "bench_opencl: %s\n", rg_status_message(s));
  exit(1);
}

typedef struct {
  const char *name;
  int64_t n, k;
} shape_t;

// One transformer layer of a 1.1B Llama (TinyLlama-1.1B): the projections
// a decode step streams, in order.
static const shape_t layer[] = {{"q", 2048, 2048},   {"k", 256, 2048},     {"v", 256, 2048},
                                {"o", 2048, 2048},   {"gate", 5632, 2048}, {"up", 5632, 2048},
                                {"down", 2048, 5632}};
#define N_LAYER (sizeof layer / sizeof layer[0])

int main(int argc, char **argv) {
  int index = 0, quick = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--device") && i + 1 < argc)
      index = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--quick"))
      quick = 1;
    else {
      fprintf(stderr, "usage: bench_opencl [--device N] [--quick]\n");
      return 2;
    }
  }
  rg_device_t *dev;
  rg_status_t s = rg_device_open("opencl", index, NULL, &dev);
  if (s) {
    printf("bench_opencl: skipped: %s\n", rg_status_message(s));
    rg_status_free(s);
    return 0;
  }
  const rg_device_info_t *info = rg_device_info(dev);
  printf("device opencl:%d  %s  (%d compute units, %s)\n", index, info->name, info->compute_units,
         info->detail);
  int reps = quick ? 2 : 5;

  rg_opencl_measure_t rd, fma, big;
  die(rg_opencl_measure_read(dev, 0, reps, &rd));
  die(rg_opencl_measure_fma(dev, reps, &fma));
  die(rg_opencl_measure_matmul(dev, RG_F32, 2048, 2048, 2048, 1, quick ? 1 : 3, &big));
  double launch;
  die(rg_opencl_measure_launch(dev, 1000, &launch));
  rg_opencl_measure_t wr, cp, h2d, d2h;
  die(rg_opencl_measure_write(dev, 0, reps, &wr));
  die(rg_opencl_measure_copy(dev, 0, reps, &cp));
  die(rg_opencl_measure_host_copy(dev, 0, 1, reps, &h2d));
  die(rg_opencl_measure_host_copy(dev, 0, 0, reps, &d2h));
  printf("\nlimits, measured on the device (the better of the start and the end of the run)\n");
  static const rg_dtype_t types[] = {RG_BF16, RG_F16, RG_Q8_0, RG_F32};
  size_t n_types = sizeof types / sizeof types[0];
  // Measure everything first, print after the limits are measured again.
  enum { N_TYPES = 4, N_PRE = 3 };
  static const size_t pre[N_PRE] = {0, 4, 6};  // q (2048 x 2048), gate (5632 x 2048), down
  rg_opencl_measure_t dec[N_TYPES][N_LAYER], fill[N_TYPES][N_PRE];
  double dec_bw[N_TYPES][N_LAYER], fill_peak[N_TYPES][N_PRE];  // the limit just before each
  for (size_t t = 0; t < n_types; t++) {
    for (size_t i = 0; i < N_LAYER; i++) {
      rg_opencl_measure_t lim;
      die(rg_opencl_measure_read(dev, 0, 2, &lim));
      dec_bw[t][i] = lim.rate;
      die(rg_opencl_measure_matmul(dev, types[t], 1, layer[i].n, layer[i].k, 0, reps, &dec[t][i]));
    }
    for (size_t j = 0; j < (quick ? 1 : N_PRE); j++) {
      rg_opencl_measure_t lim;
      die(rg_opencl_measure_fma(dev, 2, &lim));
      fill_peak[t][j] = lim.rate;
      die(rg_opencl_measure_matmul(dev, types[t], 512, layer[pre[j]].n, layer[pre[j]].k, 1,
                                   quick ? 1 : 2, &fill[t][j]));
    }
  }
  rg_opencl_measure_t rd2, fma2, big2;
  die(rg_opencl_measure_read(dev, 0, reps, &rd2));
  die(rg_opencl_measure_fma(dev, reps, &fma2));
  die(rg_opencl_measure_matmul(dev, RG_F32, 2048, 2048, 2048, 1, quick ? 1 : 3, &big2));
  printf("  read bandwidth   %8.2f GB/s     (streaming %.0f MiB; %.2f and %.2f)\n",
         (rd2.rate > rd.rate ? rd2.rate : rd.rate) / 1e9, rd.work / (1 << 20), rd.rate / 1e9,
         rd2.rate / 1e9);
  if (rd2.rate > rd.rate) rd = rd2;
  printf("  f32 FMA peak     %8.2f GFLOP/s   (%.2f and %.2f)\n",
         (fma2.rate > fma.rate ? fma2.rate : fma.rate) / 1e9, fma.rate / 1e9, fma2.rate / 1e9);
  if (fma2.rate > fma.rate) fma = fma2;
  if (big2.rate > big.rate) big = big2;
  printf(
      "  large GEMM       %8.2f GFLOP/s   f32 2048^3 through the matmul op: %.2f of the FMA "
      "peak\n",
      big.rate / 1e9, big.rate / fma.rate);
  printf("  launch overhead  %8.2f us/op     (1000 adds back to back, then one wait)\n",
         launch * 1e6);
  printf("  write bandwidth  %8.2f GB/s     copy on the device %.2f GB/s copied (%.2f moved)\n",
         wr.rate / 1e9, cp.rate / 1e9, 2 * cp.rate / 1e9);
  printf("  host -> device   %8.2f GB/s     device -> host %.2f GB/s (256 MiB a copy)\n",
         h2d.rate / 1e9, d2h.rate / 1e9);

  printf("\ndecode: GEMV m = 1 at TinyLlama-1.1B shapes, weights streamed from 1 GiB of copies\n");
  printf("  %-6s", "type");
  for (size_t i = 0; i < N_LAYER; i++) printf(" %6s", layer[i].name);
  printf("   layer GB/s  of read BW  of best BW\n");
  for (size_t t = 0; t < n_types; t++) {
    printf("  %-6s", rg_dtype_name(types[t]));
    double bytes = 0, secs = 0, bw = 0;
    for (size_t i = 0; i < N_LAYER; i++) {
      printf(" %6.2f", dec[t][i].bytes / dec[t][i].seconds / dec_bw[t][i]);
      bytes += dec[t][i].bytes;
      secs += dec[t][i].seconds;
      bw += dec_bw[t][i] * dec[t][i].seconds;  // time-weighted, as the layer's GB/s is
    }
    printf("   %9.2f  %10.2f  %10.2f\n", bytes / secs / 1e9, bytes / bw, bytes / secs / rd.rate);
  }
  printf(
      "  (per shape: its GB/s over the read bandwidth measured just before it; \"of best\"\n"
      "   against the best read bandwidth of the run)\n");

  printf("\nprefill: GEMM m = 512 at the same shapes (of FMA: the peak measured just before it)\n");
  printf("  %-6s %-10s %10s %10s %10s %12s\n", "type", "shape", "GFLOP/s", "of FMA", "of GEMM",
         "of best FMA");
  for (size_t t = 0; t < n_types; t++)
    for (size_t j = 0; j < (quick ? 1 : N_PRE); j++) {
      const shape_t *sh = &layer[pre[j]];
      char shape[32];
      snprintf(shape, sizeof shape, "%lldx%lld", (long long)sh->n, (long long)sh->k);
      printf("  %-6s %-10s %10.2f %10.2f %10.2f %12.2f\n", rg_dtype_name(types[t]), shape,
             fill[t][j].rate / 1e9, fill[t][j].rate / fill_peak[t][j], fill[t][j].rate / big.rate,
             fill[t][j].rate / fma.rate);
    }

  printf(
      "\nattention: one decode token per sequence over a bf16 paged cache, 32 / 4 heads of 64\n");
  printf("  %-8s %-8s %10s %10s %10s\n", "seqs", "context", "us/call", "KV GB/s", "of read BW");
  static const int64_t ctxs[] = {512, 2048, 8192};
  for (int si = 0; si < 2; si++)
    for (size_t c = 0; c < (quick ? 1 : sizeof ctxs / sizeof ctxs[0]); c++) {
      int64_t seqs = si ? 8 : 1;
      rg_opencl_measure_t lim, at;
      die(rg_opencl_measure_read(dev, 0, 2, &lim));
      die(rg_opencl_measure_attention(dev, RG_BF16, seqs, ctxs[c], 32, 4, 64, reps, &at));
      printf("  %-8lld %-8lld %10.1f %10.2f %10.2f\n", (long long)seqs, (long long)ctxs[c],
             at.seconds * 1e6, at.rate / 1e9, at.rate / lim.rate);
    }
  rg_device_close(dev);
  return 0;
}
