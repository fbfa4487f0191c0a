// The cuda backend against the GPU's own limits, measured in the same run:
//   0. HBM read bandwidth: ridge's streaming kernel over 4 GiB (16-byte
//      evict-first loads), best of 5 passes of 10; and the cuBLAS bf16 GEMM
//      peak at 8192^3 (tensor cores, f32 accumulation), best of 5.
//   1. decode at batch 1: every matmul of the 1b test model's 16 layers and
//      its lm_head (Llama-3.2-1B shapes: d 2048, 32/8 heads of 64, FFN 8192,
//      vocab 32768) at m = 1, back to back on one queue, per weight type:
//      weight bytes streamed per second / HBM bandwidth (goal >= 0.8); then
//      each shape alone (16 matrices of it), to show where time goes.
//   2. prefill of 512 tokens: the same matmuls at m = 512 with bf16 and f16
//      weights (x narrowed on the device, then cuBLAS): FLOP/s / cuBLAS bf16
//      GEMM peak (goal >= 0.6). The narrowing is counted in the time.
// Prints ratios; never fails on a timing. Without a CUDA device (or without
// kernels) it says why and exits 0, so scripts/gpu-check.sh can run it
// anywhere.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "devices/cuda/cuda_bench.h"
#include "devices/devices.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

static int fail(const char *what, rg_status_t s) {
  fprintf(stderr, "bench_cuda: %s: %s\n", what, rg_status_message(s));
  rg_status_free(s);
  return 1;
}

#define CHECK(what, expr)            \
  do {                               \
    rg_status_t s_ = (expr);         \
    if (s_) return fail((what), s_); \
  } while (0)

// One matmul shape of a layer: n rows of W, k columns; `count` per layer.
typedef struct {
  const char *name;
  int64_t n, k;
  int count;
} shape_t;

static const shape_t layer_shapes[] = {
    {"q,o 2048x2048", 2048, 2048, 2},
    {"k,v 512x2048", 512, 2048, 2},
    {"gate,up 8192x2048", 8192, 2048, 2},
    {"down 2048x8192", 2048, 8192, 1},
};
#define N_LAYERS 16
#define VOCAB 32768
#define D_MODEL 2048

typedef struct {
  rg_buffer_t *w[N_LAYERS][7];  // the layer's matrices, in layer_shapes order
  rg_buffer_t *lm_head;
  int64_t n[7], k[7];
  double bytes;  // weight bytes of one pass
  double flops_per_row;
} model_t;

// Uploads one matrix per shape from the host (values don't change the
// timing, but q8_0 scales must be finite), then copies it on the device
// into every layer: the weights occupy as much memory as the real model's,
// far beyond the L2 cache.
static rg_status_t model_init(rg_device_t *dev, rg_queue_t *q, rg_dtype_t wt, model_t *m) {
  memset(m, 0, sizeof *m);
  int j = 0;
  for (size_t s = 0; s < sizeof layer_shapes / sizeof layer_shapes[0]; s++)
    for (int c = 0; c < layer_shapes[s].count; c++, j++)
      m->n[j] = layer_shapes[s].n, m->k[j] = layer_shapes[s].k;
  float *host = malloc((size_t)VOCAB * D_MODEL * sizeof(float));
  void *packed = malloc((size_t)VOCAB * D_MODEL * sizeof(float));
  if (!host || !packed) return rg_status_make(RG_OUT_OF_MEMORY, "no host memory for the weights");
  for (size_t i = 0; i < (size_t)VOCAB * D_MODEL; i++)
    host[i] = (float)((int)(i * 2654435761u % 2001) - 1000) * 1e-4f;
  rg_status_t s = NULL;
  for (int i = 0; !s && i <= 7; i++) {
    int64_t n = i < 7 ? m->n[i] : VOCAB, k = i < 7 ? m->k[i] : D_MODEL;
    int ok;
    size_t bytes = rg_dtype_nbytes(wt, n * k, &ok);
    s = rg_dtype_from_f32(wt, host, packed, n * k);
    for (int l = 0; !s && l < (i < 7 ? N_LAYERS : 1); l++) {
      rg_buffer_t **slot = i < 7 ? &m->w[l][i] : &m->lm_head;
      s = rg_buffer_alloc(dev, bytes, slot);
      if (!s && l == 0) s = rg_buffer_write(*slot, 0, packed, bytes);
      if (!s && l > 0) s = rg_queue_copy(q, *slot, 0, m->w[0][i], 0, bytes);
      m->bytes += (double)bytes;
      m->flops_per_row += 2.0 * (double)n * (double)k;
    }
  }
  free(host), free(packed);
  if (!s) s = rg_queue_wait(q);
  return s;
}

static void model_free(model_t *m) {
  for (int l = 0; l < N_LAYERS; l++)
    for (int i = 0; i < 7; i++) rg_buffer_release(m->w[l][i]);
  rg_buffer_release(m->lm_head);
}

// Every matmul of the model once at `rows` rows of x; seconds of the best
// of `reps` passes.
static rg_status_t model_pass(rg_queue_t *q, rg_dtype_t wt, const model_t *m, int64_t rows,
                              rg_buffer_t *x, rg_buffer_t *y, int reps, double *out_s) {
  double best = 1e30;
  for (int r = 0; r < reps + 1; r++) {
    double t0 = now();
    for (int l = 0; l < N_LAYERS; l++)
      for (int i = 0; i < 7; i++) {
        rg_op_t op = {
            .kind = RG_OP_MATMUL,
            .matmul = {{x, 0}, {m->w[l][i], 0}, {NULL, 0}, {y, 0}, wt, rows, m->n[i], m->k[i], 0}};
        RG_RETURN_IF_ERROR(rg_queue_submit(q, &op));
      }
    rg_op_t head = {
        .kind = RG_OP_MATMUL,
        .matmul = {{x, 0}, {m->lm_head, 0}, {NULL, 0}, {y, 0}, wt, rows, VOCAB, D_MODEL, 0}};
    RG_RETURN_IF_ERROR(rg_queue_submit(q, &head));
    RG_RETURN_IF_ERROR(rg_queue_wait(q));
    double dt = now() - t0;
    if (r && dt < best) best = dt;  // the first pass loads modules, cuBLAS, caches
  }
  *out_s = best;
  return NULL;
}

// One shape's matmuls of every layer (matrix i of each), back to back:
// seconds of the best of `reps` passes. Shows which shapes fall short.
static rg_status_t shape_pass(rg_queue_t *q, rg_dtype_t wt, const model_t *m, int i, rg_buffer_t *x,
                              rg_buffer_t *y, int reps, double *out_s) {
  double best = 1e30;
  for (int r = 0; r < reps + 1; r++) {
    double t0 = now();
    for (int l = 0; l < N_LAYERS; l++) {
      rg_op_t op = {
          .kind = RG_OP_MATMUL,
          .matmul = {{x, 0}, {m->w[l][i], 0}, {NULL, 0}, {y, 0}, wt, 1, m->n[i], m->k[i], 0}};
      RG_RETURN_IF_ERROR(rg_queue_submit(q, &op));
    }
    RG_RETURN_IF_ERROR(rg_queue_wait(q));
    double dt = now() - t0;
    if (r && dt < best) best = dt;
  }
  *out_s = best;
  return NULL;
}

int main(void) {
  rg_device_t *dev;
  rg_status_t s = rg_device_open("cuda", 0, NULL, &dev);
  if (s) {
    printf("no CUDA device: %s\n", rg_status_message(s));
    rg_status_free(s);
    return 0;
  }
  const rg_device_info_t *info = rg_device_info(dev);
  printf("device: %s (%s), %d SMs, %.0f GiB\n", info->name, info->features, info->compute_units,
         (double)info->memory / (1 << 30));
  if (!rg_device_supports_op(dev, RG_OP_MATMUL)) {
    rg_op_t op = {.kind = RG_OP_MATMUL};
    s = rg_device_check_op(dev, &op);
    printf("no CUDA kernels: %s\n", s ? rg_status_message(s) : "?");
    rg_status_free(s);
    rg_device_close(dev);
    return 0;
  }
  rg_queue_t *q;
  CHECK("queue", rg_queue_create(dev, &q));

  // 0. The limits.
  const size_t stream_bytes = (size_t)4 << 30;
  rg_buffer_t *big, *sink;
  CHECK("4 GiB for the bandwidth probe", rg_buffer_alloc(dev, stream_bytes, &big));
  CHECK("sink", rg_buffer_alloc(dev, 256, &sink));
  double bw = 0;
  for (int r = 0; r < 6; r++) {
    double t0 = now();
    for (int i = 0; i < 10; i++) CHECK("stream read", rg__cuda_stream_read(q, big, sink));
    CHECK("stream read", rg_queue_wait(q));
    double g = 10.0 * (double)stream_bytes / (now() - t0) / 1e9;
    if (r && g > bw) bw = g;
  }
  rg_buffer_release(big);
  printf("0. HBM read bandwidth (streaming kernel, 4 GiB): %.0f GB/s\n", bw);

  const int64_t G = 8192;
  rg_buffer_t *ga, *gb, *gc;
  CHECK("GEMM operands", rg_buffer_alloc(dev, (size_t)(G * G * 2), &ga));
  CHECK("GEMM operands", rg_buffer_alloc(dev, (size_t)(G * G * 2), &gb));
  CHECK("GEMM operands", rg_buffer_alloc(dev, (size_t)(G * G * 4), &gc));
  CHECK("GEMM operands", rg_queue_copy(q, gb, 0, ga, 0, (size_t)(G * G * 2)));
  double peak = 0;
  s = NULL;
  for (int r = 0; r < 6 && !s; r++) {
    double t0 = now();
    s = rg__cuda_blas_gemm(q, RG_BF16, ga, gb, gc, G, G, G);
    if (!s) s = rg_queue_wait(q);
    double f = 2.0 * G * G * G / (now() - t0) / 1e12;
    if (!s && r && f > peak) peak = f;
  }
  rg_buffer_release(ga), rg_buffer_release(gb), rg_buffer_release(gc);
  if (s) {
    printf("   cuBLAS bf16 GEMM peak: not measured: %s\n", rg_status_message(s));
    rg_status_free(s);
  } else {
    printf("   cuBLAS bf16 GEMM peak (8192^3): %.0f TFLOP/s\n", peak);
  }

  // 1 and 2. The 1b model's matmuls.
  rg_buffer_t *x, *y;
  CHECK("activations", rg_buffer_alloc(dev, (size_t)512 * 8192 * 4, &x));
  CHECK("activations", rg_buffer_alloc(dev, (size_t)512 * VOCAB * 4, &y));
  {
    float *hx = calloc((size_t)512 * 8192, sizeof(float));
    for (size_t i = 0; hx && i < (size_t)512 * 8192; i++) hx[i] = (float)(i % 17) * 0.01f;
    if (hx) CHECK("activations", rg_buffer_write(x, 0, hx, (size_t)512 * 8192 * 4));
    free(hx);
  }
  const rg_dtype_t types[] = {RG_BF16, RG_F16, RG_Q8_0};
  for (size_t ti = 0; ti < 3; ti++) {
    rg_dtype_t wt = types[ti];
    model_t m;
    CHECK("weights", model_init(dev, q, wt, &m));
    double t1;
    CHECK("decode", model_pass(q, wt, &m, 1, x, y, 5, &t1));
    double gbs = m.bytes / t1 / 1e9;
    printf(
        "1. decode m=1, %-4s weights (%.2f GB, %d matmuls): %.3f ms, %.0f GB/s = %.2f of HBM "
        "bandwidth (goal >= 0.8)\n",
        rg_dtype_name(wt), m.bytes / 1e9, N_LAYERS * 7 + 1, t1 * 1e3, gbs, gbs / bw);
    // Per shape (the first matrix of each kind), to see where time goes.
    for (int i = 0, j = 0; i < 7; j++) {
      double ts;
      CHECK("decode", shape_pass(q, wt, &m, i, x, y, 5, &ts));
      int ok;
      double bytes = (double)rg_dtype_nbytes(wt, m.n[i] * m.k[i], &ok) * N_LAYERS;
      printf("   %-18s x%d layers: %.1f us per matmul, %.0f GB/s = %.2f of HBM bandwidth\n",
             layer_shapes[j].name, N_LAYERS, ts / N_LAYERS * 1e6, bytes / ts / 1e9,
             bytes / ts / 1e9 / bw);
      i += layer_shapes[j].count;
    }
    if (wt != RG_Q8_0) {
      double t512;
      CHECK("prefill", model_pass(q, wt, &m, 512, x, y, 3, &t512));
      double tf = 512.0 * m.flops_per_row / t512 / 1e12;
      if (peak > 0)
        printf(
            "2. prefill m=512, %-4s weights: %.2f ms, %.0f TFLOP/s = %.2f of cuBLAS bf16 GEMM "
            "(goal >= 0.6)\n",
            rg_dtype_name(wt), t512 * 1e3, tf, tf / peak);
      else
        printf(
            "2. prefill m=512, %-4s weights: %.2f ms, %.0f TFLOP/s (no cuBLAS peak to compare)\n",
            rg_dtype_name(wt), t512 * 1e3, tf);
    }
    model_free(&m);
  }
  rg_buffer_release(x), rg_buffer_release(y), rg_buffer_release(sink);
  rg_queue_destroy(q);
  rg_device_close(dev);
  return 0;
}
