// Tests of the opencl backend (devices/opencl) beyond the op-by-op
// conformance suite: buffers and their limits, copies and events, the
// error word through which kernels report bad metadata, the program cache
// on disk, matmul shapes the suite does not reach (both kernel shapes), a
// decode loop on fresh devices against the CPU, and the profile
// measurements. Every test skips, with the driver's reason, where no
// OpenCL device is present (machines here have PoCL).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "devices/opencl/opencl_impl.h"
#include "devices/opencl/opencl_profile.h"
#include "graphs/weights.h"
#include "ops/convert.h"
#include "ops/matmul.h"
#include "ops/ops.h"
#include "runtime/engine.h"
#include "runtime/serve.h"
#include "tests/test.h"

// Opens opencl:0, or skips the test with the reason it cannot.
#define OPEN_OR_SKIP(dev)                                                         \
  do {                                                                            \
    rg_status_t s_ = rg_device_open("opencl", 0, NULL, &(dev));                   \
    if (s_) {                                                                     \
      char why_[300];                                                             \
      snprintf(why_, sizeof why_, "no opencl device: %s", rg_status_message(s_)); \
      rg_status_free(s_);                                                         \
      RG_SKIP(why_);                                                              \
    }                                                                             \
  } while (0)

static uint64_t rng = 0x2545f4914f6cdd1dull;
static float frand(float lo, float hi) {
  rng = rng * 6364136223846793005ull + 1442695040888963407ull;
  return lo + (hi - lo) * (float)((rng >> 40) * 0x1p-24);
}

static rg_buffer_t *upload(rg_test_ctx_t *t, rg_device_t *dev, const void *data, size_t bytes) {
  rg_buffer_t *b = NULL;
  rg_status_t s = rg_buffer_alloc(dev, bytes, &b);
  if (!s && data && bytes) s = rg_buffer_write(b, 0, data, bytes);
  if (s) {
    rg_test_fail(t, __FILE__, __LINE__, "upload: %s", rg_status_message(s));
    rg_status_free(s);
  }
  return b;
}

static double nmse(const float *got, const float *want, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    double d = (double)got[i] - want[i];
    num += d * d;
    den += (double)want[i] * want[i];
  }
  return den > 0 ? num / den : num;
}

// ----- Errors at the edge ---------------------------------------------------------

RG_TEST(opencl_errors_name_the_result_and_number) {
  // No device needed: the table is ridge's own.
  rg_status_t s = rg__cl_status(RG_CL_OUT_OF_RESOURCES, "clEnqueueNDRangeKernel");
  RG_CHECK(rg_status_code(s) == RG_OUT_OF_MEMORY);
  RG_CHECK_CONTAINS(rg_status_message(s),
                    "clEnqueueNDRangeKernel failed: CL_OUT_OF_RESOURCES (-5): out of device "
                    "resources");
  rg_status_free(s);
  s = rg__cl_status(RG_CL_BUILD_PROGRAM_FAILURE, "clBuildProgram");
  RG_CHECK(rg_status_code(s) == RG_INTERNAL);
  RG_CHECK_CONTAINS(rg_status_message(s), "CL_BUILD_PROGRAM_FAILURE (-11)");
  rg_status_free(s);
  s = rg__cl_status(RG_CL_PLATFORM_NOT_FOUND_KHR, "clGetPlatformIDs");
  RG_CHECK(rg_status_code(s) == RG_UNAVAILABLE);
  rg_status_free(s);
  s = rg__cl_status(-9999, "clFoo");
  RG_CHECK_CONTAINS(rg_status_message(s), "clFoo failed: CL error (-9999)");
  rg_status_free(s);
  RG_CHECK(rg__cl_status(RG_CL_SUCCESS, "clFinish") == NULL);
  RG_CHECK(!strcmp(rg__cl_error_name(RG_CL_INVALID_KERNEL_ARGS), "CL_INVALID_KERNEL_ARGS"));
}

// ----- Devices and buffers --------------------------------------------------------

RG_TEST(opencl_opens_with_every_op_and_refuses_other_types) {
  rg_device_t *dev;
  OPEN_OR_SKIP(dev);
  const rg_device_info_t *info = rg_device_info(dev);
  RG_CHECK(!strcmp(info->driver, "opencl") && info->index == 0 && info->present);
  RG_CHECK(info->memory > 0 && info->name[0]);
  for (int k = 0; k < RG_OP_COUNT; k++) RG_CHECK(rg_device_supports_op(dev, (rg_op_kind_t)k));
  RG_CHECK(rg_device_cpu_pool(dev) == NULL);
  rg_buffer_t *b = upload(t, dev, NULL, 4096);
  RG_REQUIRE(b);
  rg_op_t mm = {.kind = RG_OP_MATMUL,
                .matmul = {{b, 0}, {b, 0}, {NULL, 0}, {b, 0}, RG_FP8, 1, 4, 4, 0}};
  RG_CHECK_ERR(rg_device_check_op(dev, &mm),
               "opencl:0 has no matmul kernel for fp8 (it runs f32, bf16, f16 and q8_0)");
  rg_op_t cv = {.kind = RG_OP_CONVERT, .convert = {{b, 0}, {b, 0}, RG_F32, RG_INT8, 8}};
  RG_CHECK_ERR(rg_device_check_op(dev, &cv),
               "opencl:0 converts between f32, bf16, f16 and q8_0, not f32 -> int8");
  // Offsets the element type cannot start at, and sizes past 32-bit indices.
  rg_op_t add = {.kind = RG_OP_ADD, .add = {{b, 2}, {b, 0}, {b, 0}, 8}};
  RG_CHECK_ERR(rg_device_check_op(dev, &add),
               "opencl:0 reads operand a at offset 2, which is not a multiple of 4");
  mm.matmul.wtype = RG_BF16, mm.matmul.w.offset = 1;
  RG_CHECK_ERR(rg_device_check_op(dev, &mm), "operand w at offset 1, which is not a multiple of 2");
  mm.matmul.w.offset = 0, mm.matmul.m = (int64_t)1 << 31;
  RG_CHECK_ERR(rg_device_check_op(dev, &mm),
               "opencl:0's matmul kernel indexes with 32-bit integers; a size of 2147483648");
  // A buffer of the device cannot be used in place from the host.
  RG_CHECK(rg_buffer_host_ptr(b) == NULL);
  float mem[4];
  rg_buffer_t *w = NULL;
  RG_CHECK_ERR(rg_buffer_wrap(dev, mem, sizeof mem, NULL, NULL, &w),
               "opencl:0 cannot use host memory in place");
  rg_buffer_release(b);
  rg_device_close(dev);
}

RG_TEST(opencl_buffers_round_trip_and_respect_the_allocation_cap) {
  rg_device_t *dev;
  OPEN_OR_SKIP(dev);
  rg_buffer_t *b;
  RG_REQUIRE_OK(rg_buffer_alloc(dev, 1000, &b));
  unsigned char in[300], out[300];
  for (int i = 0; i < 300; i++) in[i] = (unsigned char)(i * 31 + 7);
  RG_CHECK_OK(rg_buffer_write(b, 700, in, 300));  // ends at the end
  memset(out, 0, sizeof out);
  RG_CHECK_OK(rg_buffer_read(b, 700, out, 300));
  RG_CHECK(!memcmp(in, out, 300));
  RG_CHECK_ERR(rg_buffer_write(b, 701, in, 300),
               "buffer write of 300 bytes at offset 701 runs past the end of a 1000-byte buffer "
               "on opencl:0");
  rg_buffer_release(b);
  RG_REQUIRE_OK(rg_buffer_alloc(dev, 0, &b));  // empty: no device memory at all
  RG_CHECK(rg_buffer_size(b) == 0);
  RG_CHECK_OK(rg_buffer_write(b, 0, in, 0));
  rg_buffer_release(b);
  // One past the driver's largest allocation, with room in its memory: the
  // message names both sizes and the limit.
  uint64_t cap = ((rg__cl_device_t *)dev)->cx->max_alloc;
  if (cap + 1 <= rg_device_info(dev)->memory) {
    char want[200], c1[96], c2[96];
    snprintf(want, sizeof want,
             "cannot allocate %s on opencl:0: more than its largest single allocation, %s "
             "(CL_DEVICE_MAX_MEM_ALLOC_SIZE)",
             rg__fmt_size(cap + 1, c1, sizeof c1), rg__fmt_size(cap, c2, sizeof c2));
    rg_status_t s = rg_buffer_alloc(dev, (size_t)cap + 1, &b);
    RG_CHECK(rg_status_code(s) == RG_OUT_OF_MEMORY);
    RG_CHECK_CONTAINS(rg_status_message(s), want);
    rg_status_free(s);
  }
  // More than the device's memory: the HAL's own check, before the driver's.
  RG_CHECK_ERR(rg_buffer_alloc(dev, (size_t)1 << 62, &b), "more than its");
  rg_device_close(dev);
}

RG_TEST(opencl_queue_copies_writes_and_reads_in_order) {
  rg_device_t *dev, *cpu;
  OPEN_OR_SKIP(dev);
  RG_REQUIRE_OK(rg_device_open("cpu", 0, NULL, &cpu));
  rg_queue_t *q;
  RG_REQUIRE_OK(rg_queue_create(dev, &q));
  rg_buffer_t *a = upload(t, dev, NULL, 512), *b = upload(t, dev, NULL, 512), *h = NULL;
  RG_REQUIRE_OK(rg_buffer_alloc(cpu, 512, &h));
  unsigned char src[512], back[512];
  for (int i = 0; i < 512; i++) src[i] = (unsigned char)(i * 13 + 1);
  // Enqueued in order: write a, copy a -> b, copy within b overlapping
  // itself (staged through the host), read b; nothing is waited for between.
  RG_CHECK_OK(rg_queue_write(q, a, 0, src, 512));
  RG_CHECK_OK(rg_queue_copy(q, b, 0, a, 0, 512));
  RG_CHECK_OK(rg_queue_copy(q, b, 8, b, 0, 100));
  memset(back, 0, sizeof back);
  RG_CHECK_OK(rg_queue_read(q, b, 0, back, 512));
  RG_CHECK_OK(rg_queue_wait(q));
  RG_CHECK(!memcmp(back, src, 8) && !memcmp(back + 8, src, 100) &&
           !memcmp(back + 108, src + 108, 404));
  // Across devices: opencl -> cpu and back, through the host.
  RG_CHECK_OK(rg_queue_copy(q, h, 0, a, 0, 512));
  RG_CHECK(!memcmp(rg_buffer_host_ptr(h), src, 512));
  RG_CHECK_OK(rg_queue_copy(q, b, 0, h, 256, 256));
  RG_CHECK_OK(rg_buffer_read(b, 0, back, 256));
  RG_CHECK(!memcmp(back, src + 256, 256));
  RG_CHECK_ERR(rg_queue_read(q, h, 0, back, 8),
               "queue read on opencl:0: the buffer belongs to cpu:0");
  rg_buffer_release(a);
  rg_buffer_release(b);
  rg_buffer_release(h);
  rg_queue_destroy(q);
  rg_device_close(cpu);
  rg_device_close(dev);
}

RG_TEST(opencl_events_order_queues_and_waits_have_deadlines) {
  rg_device_t *dev, *cpu;
  OPEN_OR_SKIP(dev);
  RG_REQUIRE_OK(rg_device_open("cpu", 0, NULL, &cpu));
  rg_queue_t *q1, *q2, *qc;
  RG_REQUIRE_OK(rg_queue_create(dev, &q1));
  RG_REQUIRE_OK(rg_queue_create(dev, &q2));
  RG_REQUIRE_OK(rg_queue_create(cpu, &qc));
  // Work long enough (about 4 GFLOP) that a wait with no time left finds it
  // unfinished, followed on q1 by a write the second queue must see.
  const int64_t m = 512, n = 2048, k = 2048;
  rg_buffer_t *x = upload(t, dev, NULL, (size_t)(m * k) * 4),
              *w = upload(t, dev, NULL, (size_t)(n * k) * 2),
              *y = upload(t, dev, NULL, (size_t)(m * n) * 4), *flag = upload(t, dev, NULL, 16);
  RG_REQUIRE(x && w && y && flag);
  rg_op_t mm = {.kind = RG_OP_MATMUL,
                .matmul = {{x, 0}, {w, 0}, {NULL, 0}, {y, 0}, RG_BF16, m, n, k, 0}};
  static const int32_t set[4] = {7, 7, 7, 7};
  RG_CHECK_OK(rg_queue_submit(q1, &mm));
  RG_CHECK_OK(rg_queue_write(q1, flag, 0, set, sizeof set));
  rg_event_t *ev;
  RG_REQUIRE_OK(rg_queue_record(q1, &ev));
  rg_status_t s = rg_event_wait(ev, 0.0);
  RG_CHECK(rg_status_code(s) == RG_UNAVAILABLE);
  RG_CHECK_CONTAINS(rg_status_message(s),
                    "opencl:0: the work before this event was not done after 0 s");
  rg_status_free(s);
  // q2 waits on the device for q1's event, then reads what q1 wrote.
  int32_t got[4] = {0};
  RG_CHECK_OK(rg_queue_wait_event(q2, ev));
  RG_CHECK_OK(rg_queue_read(q2, flag, 0, got, sizeof got));
  RG_CHECK_OK(rg_queue_wait(q2));
  RG_CHECK(got[0] == 7 && got[3] == 7);
  RG_CHECK(rg_event_done(ev));
  RG_CHECK_OK(rg_event_wait(ev, 60.0));
  // A CPU queue given the OpenCL event waits for it on the host.
  RG_CHECK_OK(rg_queue_wait_event(qc, ev));
  RG_CHECK_ERR(rg_event_wait(ev, -1), "event wait: a timeout of -1 s");
  rg_event_release(ev);
  rg_buffer_release(x);
  rg_buffer_release(w);
  rg_buffer_release(y);
  rg_buffer_release(flag);
  rg_queue_destroy(q1);
  rg_queue_destroy(q2);
  rg_queue_destroy(qc);
  rg_device_close(cpu);
  rg_device_close(dev);
}

// ----- Bad metadata: clamped on the device, reported at the wait ---------------------

RG_TEST(opencl_bad_metadata_comes_back_from_the_wait_by_name) {
  rg_device_t *dev;
  OPEN_OR_SKIP(dev);
  rg_queue_t *q;
  RG_REQUIRE_OK(rg_queue_create(dev, &q));
  float table[8 * 32] = {0}, nan_row[64];
  int32_t ids[2] = {3, 8}, idx[4] = {0, 1, 9, 2}, seq[1] = {5}, pos[1] = {0}, off[2] = {0, 1},
          blk[1] = {0};
  for (int i = 0; i < 64; i++) nan_row[i] = i == 40 ? NAN : 1.0f;
  rg_buffer_t *tb = upload(t, dev, table, sizeof table), *ib = upload(t, dev, ids, sizeof ids),
              *out = upload(t, dev, NULL, 4096), *xb = upload(t, dev, idx, sizeof idx),
              *nb = upload(t, dev, nan_row, sizeof nan_row), *sb = upload(t, dev, seq, 4),
              *pb = upload(t, dev, pos, 4), *ob = upload(t, dev, off, 8),
              *bb = upload(t, dev, blk, 4), *kv = upload(t, dev, NULL, 1 * 1 * 4 * 16 * 4);
  RG_REQUIRE(tb && ib && out && xb && nb && sb && pb && ob && bb && kv);
  rg_op_t embed = {.kind = RG_OP_EMBED, .embed = {{tb, 0}, {ib, 0}, {out, 0}, RG_F32, 8, 2, 32}};
  RG_CHECK_OK(rg_queue_submit(q, &embed));
  rg_status_t s = rg_queue_wait(q);
  RG_CHECK(rg_status_code(s) == RG_INVALID_ARGUMENT);
  RG_CHECK_CONTAINS(rg_status_message(s),
                    "opencl:0: a kernel was given bad metadata and clamped it (its output is not "
                    "meaningful): the token id at index 1 is 8, outside the vocabulary of 8 "
                    "tokens");
  rg_status_free(s);
  RG_CHECK_OK(rg_queue_wait(q));  // reported once, then cleared
  rg_op_t group = {.kind = RG_OP_MOE_GROUP, .moe_group = {{xb, 0}, {out, 0}, {out, 64}, 2, 2, 4}};
  RG_CHECK_OK(rg_queue_submit(q, &group));
  RG_CHECK_ERR(rg_queue_wait(q), "token 1 slot 0 routes to expert 9, outside the experts");
  rg_op_t kvw = {.kind = RG_OP_KV_WRITE};
  kvw.kv_write.kv = (rg_kv_ref_t){{kv, 0}, {kv, 0}, RG_F32, 1, 4, 1, 16};
  kvw.kv_write.meta = (rg_attn_meta_t){1, 1, 1, {sb, 0}, {pb, 0}, {ob, 0}, {bb, 0}};
  kvw.kv_write.k = kvw.kv_write.v = (rg_ref_t){out, 0};
  RG_CHECK_OK(rg_queue_submit(q, &kvw));
  RG_CHECK_ERR(rg_queue_wait(q), "token 0 belongs to sequence 5, but the batch has 1 sequences");
  rg_op_t cv = {.kind = RG_OP_CONVERT, .convert = {{nb, 0}, {out, 0}, RG_F32, RG_Q8_0, 64}};
  RG_CHECK_OK(rg_queue_submit(q, &cv));
  RG_CHECK_ERR(rg_queue_wait(q),
               "q8_0 block 1: value 8 of the block is not finite, which q8_0 cannot hold");
  rg_buffer_release(tb), rg_buffer_release(ib), rg_buffer_release(out), rg_buffer_release(xb);
  rg_buffer_release(nb), rg_buffer_release(sb), rg_buffer_release(pb), rg_buffer_release(ob);
  rg_buffer_release(bb), rg_buffer_release(kv);
  rg_queue_destroy(q);
  rg_device_close(dev);
}

// ----- The program cache -----------------------------------------------------------

static long file_size(const char *path) {
  struct stat st;
  return stat(path, &st) ? -1 : (long)st.st_size;
}

RG_TEST(opencl_programs_are_cached_on_disk_and_rebuilt_when_bad) {
  rg_device_t *dev;
  OPEN_OR_SKIP(dev);
  rg__cl_device_t *d = (rg__cl_device_t *)dev;
  const char *dir = rg_test_tmpdir(t);
  char cache[600], path[1024];
  snprintf(cache, sizeof cache, "%s/cache/ridge/opencl", dir);
  RG_REQUIRE_OK(rg__cl_cache_path(d->cx, RG__CLP_SAMPLE, cache, path, sizeof path));
  RG_CHECK_CONTAINS(path, "/cache/ridge/opencl/sample-");
  // Cold: compiled from source, and the binary saved (directories made).
  rg_cl_program p = NULL;
  rg__cl_origin_t origin = RG__CL_FROM_MEMORY;
  RG_REQUIRE_OK(rg__cl_program_build(d->cl, d->cx, RG__CLP_SAMPLE, cache, &p, &origin));
  RG_CHECK(origin == RG__CL_FROM_SOURCE);
  (void)d->cl->clReleaseProgram(p);
  long size = file_size(path);
  RG_CHECK(size > 0);
  // Warm: loaded from the file.
  RG_REQUIRE_OK(rg__cl_program_build(d->cl, d->cx, RG__CLP_SAMPLE, cache, &p, &origin));
  RG_CHECK(origin == RG__CL_FROM_DISK);
  (void)d->cl->clReleaseProgram(p);
  // A file that is not a binary for this device: rebuilt, and replaced.
  FILE *f = fopen(path, "wb");
  RG_REQUIRE(f);
  fputs("not a program binary", f);
  fclose(f);
  RG_REQUIRE_OK(rg__cl_program_build(d->cl, d->cx, RG__CLP_SAMPLE, cache, &p, &origin));
  RG_CHECK(origin == RG__CL_FROM_SOURCE);
  (void)d->cl->clReleaseProgram(p);
  RG_CHECK(file_size(path) == size);
  RG_REQUIRE_OK(rg__cl_program_build(d->cl, d->cx, RG__CLP_SAMPLE, cache, &p, &origin));
  RG_CHECK(origin == RG__CL_FROM_DISK);
  (void)d->cl->clReleaseProgram(p);
  // No cache directory at all: built from source, nothing written.
  RG_REQUIRE_OK(rg__cl_program_build(d->cl, d->cx, RG__CLP_SAMPLE, "", &p, &origin));
  RG_CHECK(origin == RG__CL_FROM_SOURCE);
  (void)d->cl->clReleaseProgram(p);
  // In the process: the second ask is answered from memory.
  RG_REQUIRE_OK(rg__cl_program(d, RG__CLP_SAMPLE, &p, &origin));
  RG_REQUIRE_OK(rg__cl_program(d, RG__CLP_SAMPLE, &p, &origin));
  RG_CHECK(origin == RG__CL_FROM_MEMORY);
  // Whether a platform's programs go to disk: not PoCL's (it keeps its own
  // cache, and handing out a binary costs it a compile of every kernel),
  // unless RIDGE_OPENCL_DISK_CACHE says otherwise.
  char *env = getenv("RIDGE_OPENCL_DISK_CACHE") ? strdup(getenv("RIDGE_OPENCL_DISK_CACHE")) : NULL;
  unsetenv("RIDGE_OPENCL_DISK_CACHE");
  RG_CHECK(!rg__cl_disk_cache_default("Portable Computing Language"));
  RG_CHECK(rg__cl_disk_cache_default("NVIDIA CUDA"));
  setenv("RIDGE_OPENCL_DISK_CACHE", "1", 1);
  RG_CHECK(rg__cl_disk_cache_default("Portable Computing Language"));
  setenv("RIDGE_OPENCL_DISK_CACHE", "0", 1);
  RG_CHECK(!rg__cl_disk_cache_default("NVIDIA CUDA"));
  if (env)
    setenv("RIDGE_OPENCL_DISK_CACHE", env, 1);
  else
    unsetenv("RIDGE_OPENCL_DISK_CACHE");
  free(env);
  // Where the cache lives: XDG_CACHE_HOME, else ~/.cache, else nowhere.
  char *xdg = getenv("XDG_CACHE_HOME") ? strdup(getenv("XDG_CACHE_HOME")) : NULL;
  char *home = getenv("HOME") ? strdup(getenv("HOME")) : NULL;
  char buf[600];
  setenv("XDG_CACHE_HOME", "/x/cache", 1);
  RG_CHECK(!strcmp(rg__cl_cache_dir(buf, sizeof buf), "/x/cache/ridge/opencl"));
  unsetenv("XDG_CACHE_HOME");
  setenv("HOME", "/home/u", 1);
  RG_CHECK(!strcmp(rg__cl_cache_dir(buf, sizeof buf), "/home/u/.cache/ridge/opencl"));
  unsetenv("HOME");
  RG_CHECK(!strcmp(rg__cl_cache_dir(buf, sizeof buf), ""));
  if (xdg) setenv("XDG_CACHE_HOME", xdg, 1);
  if (home) setenv("HOME", home, 1);
  free(xdg);
  free(home);
  rg_device_close(dev);
}

// ----- Matmul shapes the suite does not reach, on both kernel shapes ---------------------

RG_TEST(opencl_matmul_odd_shapes_on_cpu_and_gpu_kernel_shapes) {
  rg_device_t *dev;
  OPEN_OR_SKIP(dev);
  rg__cl_context_t *cx = ((rg__cl_device_t *)dev)->cx;
  rg_queue_t *q;
  RG_REQUIRE_OK(rg_queue_create(dev, &q));
  // m across the GEMV row counts (1, 4, 8) and the GEMM, n not a multiple of
  // the tiles, k with a tail past 32 and 16 (q8_0 rows are whole blocks).
  const int64_t ms[] = {2, 7, 9, 70}, ns[] = {3, 67};
  const rg_dtype_t types[] = {RG_F32, RG_BF16, RG_F16, RG_Q8_0};
  int saved = cx->cpu_shapes;
  for (int shapes = 0; shapes < 2; shapes++) {
    cx->cpu_shapes = shapes;
    // The GPU shapes widen weights with the same one-weight loads the GEMV
    // tails use (run below for every type): f32 and q8_0 cover its layouts,
    // and each kernel costs PoCL about a second to compile the first time.
    for (size_t ti = 0; ti < 4; ti++)
      for (size_t mi = 0; mi < 4; mi++)
        for (size_t ni = 0; ni < 2; ni++) {
          if (!shapes && ms[mi] <= 8) continue;  // the GEMV has one shape
          if (!shapes && (types[ti] == RG_BF16 || types[ti] == RG_F16)) continue;
          int64_t m = ms[mi], n = ns[ni], k = types[ti] == RG_Q8_0 ? 96 : 57;
          float *x = malloc((size_t)(m * k) * 4), *w = malloc((size_t)(n * k) * 4),
                *wide = malloc((size_t)(n * k) * 4), *bias = malloc((size_t)n * 4),
                *want = malloc((size_t)(m * n) * 4), *got = malloc((size_t)(m * n) * 4);
          for (int64_t i = 0; i < m * k; i++) x[i] = frand(-1, 1);
          for (int64_t i = 0; i < n * k; i++) w[i] = frand(-0.2f, 0.2f);
          for (int64_t i = 0; i < n; i++) bias[i] = frand(-1, 1);
          int ok;
          size_t wb = (size_t)rg_dtype_nbytes(types[ti], n * k, &ok);
          void *packed = malloc(wb);
          RG_CHECK_OK(rg_dtype_from_f32(types[ti], w, packed, n * k));
          RG_CHECK_OK(rg_dtype_to_f32(types[ti], packed, wide, n * k));
          rg_wmat_t ref = {wide, RG_F32, n, k, RG_WLAYOUT_ROWS};
          RG_CHECK_OK(rg_matmul_ref(x, m, &ref, bias, want));
          rg_buffer_t *bx = upload(t, dev, x, (size_t)(m * k) * 4),
                      *bw = upload(t, dev, packed, wb), *bb = upload(t, dev, bias, (size_t)n * 4),
                      *by = upload(t, dev, NULL, (size_t)(m * n) * 4);
          rg_op_t op = {.kind = RG_OP_MATMUL,
                        .matmul = {{bx, 0}, {bw, 0}, {bb, 0}, {by, 0}, types[ti], m, n, k, 0}};
          RG_CHECK_OK(rg_queue_submit(q, &op));
          RG_CHECK_OK(rg_queue_wait(q));
          RG_CHECK_OK(rg_buffer_read(by, 0, got, (size_t)(m * n) * 4));
          double e = nmse(got, want, (size_t)(m * n));
          if (!(e < 1e-9))
            rg_test_fail(t, __FILE__, __LINE__, "%s kernels, %s m=%lld n=%lld k=%lld: nmse %g",
                         shapes ? "cpu" : "gpu", rg_dtype_name(types[ti]), (long long)m,
                         (long long)n, (long long)k, e);
          rg_buffer_release(bx), rg_buffer_release(bw), rg_buffer_release(bb),
              rg_buffer_release(by);
          free(x), free(w), free(wide), free(bias), free(want), free(got), free(packed);
        }
  }
  cx->cpu_shapes = saved;
  rg_queue_destroy(q);
  rg_device_close(dev);
}

// ----- Attention and row ops at sizes the suite does not reach --------------------------

// Contexts over several 64-position tiles (the online softmax's rescaling
// between tiles), a window spanning tiles, and query-head groups above the
// 16 one work-group serves (MQA with 20 heads: two groups per kv head), on
// both kernel shapes (a CPU device's one-item walk, a GPU's work-group).
RG_TEST(opencl_attention_over_many_tiles_and_wide_groups) {
  rg_device_t *dev;
  OPEN_OR_SKIP(dev);
  rg_queue_t *q;
  RG_REQUIRE_OK(rg_queue_create(dev, &q));
  const struct {
    int64_t heads, kv_heads, hd, window;
    rg_dtype_t t;
    int sinks;
  } cases[] = {{8, 2, 64, 0, RG_F16, 0}, {20, 1, 40, 0, RG_BF16, 1}, {4, 4, 32, 100, RG_F32, 0}};
  const int64_t bs = 16, blocks = 24, n_tok = 3;
  // Three tokens of two sequences: a decode at 300 and a prefill pair at 70, 71.
  int32_t seq[3] = {0, 1, 1}, pos[3] = {300, 70, 71}, off[3] = {0, 19, 24}, table[24];
  for (int i = 0; i < 24; i++) table[i] = (i * 5) % 24;
  rg_block_table_t tabs[2] = {{table, 19}, {table + 19, 5}};
  rg__cl_context_t *cx = ((rg__cl_device_t *)dev)->cx;
  int saved = cx->cpu_shapes;
  for (size_t c = 0; c < 2 * sizeof cases / sizeof cases[0]; c++) {
    cx->cpu_shapes = c % 2;
    int64_t nh = cases[c / 2].heads, nkv = cases[c / 2].kv_heads, hd = cases[c / 2].hd;
    size_t pool = (size_t)(blocks * nkv * bs * hd), qn = (size_t)(n_tok * nh * hd);
    int ok;
    size_t pool_bytes = (size_t)rg_dtype_nbytes(cases[c / 2].t, (int64_t)pool, &ok);
    float *kf = malloc(pool * 4), *vf = malloc(pool * 4), *qv = malloc(qn * 4),
          *want = malloc(qn * 4), *got = malloc(qn * 4), sinks[20];
    void *kp = malloc(pool_bytes), *vp = malloc(pool_bytes);
    for (size_t i = 0; i < pool; i++) kf[i] = frand(-1, 1), vf[i] = frand(-1, 1);
    for (size_t i = 0; i < qn; i++) qv[i] = frand(-2, 2);
    for (int i = 0; i < 20; i++) sinks[i] = frand(-1, 1);
    RG_CHECK_OK(rg_dtype_from_f32(cases[c / 2].t, kf, kp, (int64_t)pool));
    RG_CHECK_OK(rg_dtype_from_f32(cases[c / 2].t, vf, vp, (int64_t)pool));
    rg_kv_layer_t ref = {
        cases[c / 2].t, (size_t)blocks, (size_t)bs, (size_t)nkv, (size_t)hd, kp, vp};
    rg_attn_batch_t ab = {3, seq, pos, tabs, 2};
    rg_attn_params_t ap = {(size_t)nh, 0, (size_t)cases[c / 2].window,
                           cases[c / 2].sinks ? sinks : NULL, 0};
    RG_CHECK_OK(rg_op_attention_ref(NULL, &ref, &ab, &ap, qv, want));
    rg_buffer_t *bk = upload(t, dev, kp, pool_bytes), *bv = upload(t, dev, vp, pool_bytes),
                *bs_ = upload(t, dev, seq, sizeof seq), *bp = upload(t, dev, pos, sizeof pos),
                *bo = upload(t, dev, off, sizeof off), *bt = upload(t, dev, table, sizeof table),
                *bq = upload(t, dev, qv, qn * 4), *bout = upload(t, dev, NULL, qn * 4),
                *bsk = upload(t, dev, sinks, sizeof sinks);
    rg_op_t op = {.kind = RG_OP_ATTENTION};
    op.attention.kv = (rg_kv_ref_t){{bk, 0}, {bv, 0}, cases[c / 2].t, blocks, bs, nkv, hd};
    op.attention.meta = (rg_attn_meta_t){n_tok, 2, 24, {bs_, 0}, {bp, 0}, {bo, 0}, {bt, 0}};
    op.attention.q = (rg_ref_t){bq, 0};
    op.attention.o = (rg_ref_t){bout, 0};
    op.attention.sinks = cases[c / 2].sinks ? (rg_ref_t){bsk, 0} : (rg_ref_t){0};
    op.attention.n_heads = nh;
    op.attention.window = cases[c / 2].window;
    RG_CHECK_OK(rg_queue_submit(q, &op));
    RG_CHECK_OK(rg_queue_wait(q));
    RG_CHECK_OK(rg_buffer_read(bout, 0, got, qn * 4));
    double e = nmse(got, want, qn);
    if (!(e < 1e-8))
      rg_test_fail(t, __FILE__, __LINE__, "%s shape, case %zu (%lld/%lld heads of %lld): nmse %g",
                   c % 2 ? "cpu" : "gpu", c / 2, (long long)nh, (long long)nkv, (long long)hd, e);
    rg_buffer_t *all[] = {bk, bv, bs_, bp, bo, bt, bq, bout, bsk};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) rg_buffer_release(all[i]);
    free(kf), free(vf), free(qv), free(want), free(got), free(kp), free(vp);
  }
  cx->cpu_shapes = saved;
  rg_queue_destroy(q);
  rg_device_close(dev);
}

// Rows longer than one work-group's pass (rmsnorm, softmax over a
// vocabulary), rope at a model's head size, and a greedy pick over 32000.
RG_TEST(opencl_row_ops_at_model_sizes) {
  rg_device_t *dev;
  OPEN_OR_SKIP(dev);
  rg_queue_t *q;
  RG_REQUIRE_OK(rg_queue_create(dev, &q));
  const size_t dim = 2048, vocab = 32000, heads = 32, hd = 128;
  float *x = malloc(vocab * 2 * 4), *w = malloc(dim * 4), *want = malloc(vocab * 2 * 4),
        *got = malloc(vocab * 2 * 4);
  for (size_t i = 0; i < vocab * 2; i++) x[i] = frand(-8, 8);
  for (size_t i = 0; i < dim; i++) w[i] = frand(0.5f, 1.5f);
  rg_buffer_t *bx = upload(t, dev, x, vocab * 2 * 4), *bw = upload(t, dev, w, dim * 4),
              *by = upload(t, dev, NULL, vocab * 2 * 4), *bi = upload(t, dev, NULL, 8);
  // rmsnorm, 3 rows of 2048.
  rg_op_rmsnorm_ref(NULL, x, w, want, 3, dim, 1e-6f);
  rg_op_t op = {.kind = RG_OP_RMSNORM,
                .rmsnorm = {{bx, 0}, {bw, 0}, {by, 0}, 3, (int64_t)dim, 1e-6f}};
  RG_CHECK_OK(rg_queue_submit(q, &op));
  RG_CHECK_OK(rg_queue_wait(q));
  RG_CHECK_OK(rg_buffer_read(by, 0, got, 3 * dim * 4));
  RG_CHECK(nmse(got, want, 3 * dim) < 1e-10);
  // Greedy over two rows of 32000 (the winner planted in a late slot), then
  // softmax over them, in place.
  x[31999] = 50, x[vocab + 17] = 50;
  RG_CHECK_OK(rg_buffer_write(bx, 0, x, vocab * 2 * 4));
  rg_sampler_config_t greedy[2] = {{0, 0, 1, 0}, {0, 0, 1, 0}};
  double u[2] = {0, 0};
  op = (rg_op_t){.kind = RG_OP_SAMPLE, .sample = {{bx, 0}, {bi, 0}, 2, (int64_t)vocab, greedy, u}};
  RG_CHECK_OK(rg_queue_submit(q, &op));
  op = (rg_op_t){.kind = RG_OP_SOFTMAX, .softmax = {{bx, 0}, 2, (int64_t)vocab}};
  RG_CHECK_OK(rg_queue_submit(q, &op));
  int32_t ids[2] = {-1, -1};
  RG_CHECK_OK(rg_queue_read(q, bi, 0, ids, sizeof ids));
  RG_CHECK_OK(rg_queue_read(q, bx, 0, got, vocab * 2 * 4));
  RG_CHECK_OK(rg_queue_wait(q));
  RG_CHECK(ids[0] == 31999 && ids[1] == 17);
  memcpy(want, x, vocab * 2 * 4);
  rg_op_softmax_ref(NULL, want, 2, vocab);
  RG_CHECK(nmse(got, want, vocab * 2) < 1e-10);
  // rope over 32 heads of 128 at two positions.
  rg_rope_t rope;
  RG_REQUIRE_OK(rg_rope_init(&rope, hd, 500000.0, NULL));
  int32_t pos[2] = {7, 8191};
  rg_buffer_t *bp = upload(t, dev, pos, sizeof pos),
              *bf = upload(t, dev, rope.inv_freq, hd / 2 * 4);
  RG_CHECK_OK(rg_buffer_write(by, 0, x, 2 * heads * hd * 4));
  memcpy(want, x, 2 * heads * hd * 4);
  rg_op_rope_ref(NULL, &rope, want, 2, heads, pos);
  op = (rg_op_t){.kind = RG_OP_ROPE,
                 .rope = {{by, 0}, {bp, 0}, {bf, 0}, 2, (int64_t)heads, (int64_t)hd}};
  RG_CHECK_OK(rg_queue_submit(q, &op));
  RG_CHECK_OK(rg_queue_wait(q));
  RG_CHECK_OK(rg_buffer_read(by, 0, got, 2 * heads * hd * 4));
  RG_CHECK(nmse(got, want, 2 * heads * hd) < 1e-10);
  rg_rope_deinit(&rope);
  rg_buffer_release(bx), rg_buffer_release(bw), rg_buffer_release(by), rg_buffer_release(bi);
  rg_buffer_release(bp), rg_buffer_release(bf);
  free(x), free(w), free(want), free(got);
  rg_queue_destroy(q);
  rg_device_close(dev);
}

// ----- A decode loop, from fresh devices, against the CPU ------------------------------

// A one-layer Llama-shaped model, small: enough to run every op an engine's
// decode step submits, in order, with buffers reused between steps.
enum { VOCAB = 96, DIM = 64, HEADS = 4, KV_HEADS = 2, HD = 16, FFN = 96, BS = 4, BLOCKS = 8 };

typedef struct {
  rg_device_t *dev;
  rg_queue_t *q;
  rg_buffer_t *emb, *norm, *wq, *wk, *wv, *wo, *wg, *wu, *wd, *head, *inv, *kc, *vc;
  rg_buffer_t *tok, *pos, *seq, *off, *table, *h, *hn, *qb, *kb, *vb, *att, *tmp, *g, *u, *logits,
      *next;
} model_t;

static void model_free(model_t *mo) {
  rg_buffer_t **all[] = {&mo->emb, &mo->norm, &mo->wq,  &mo->wk,     &mo->wv,  &mo->wo,
                         &mo->wg,  &mo->wu,   &mo->wd,  &mo->head,   &mo->inv, &mo->kc,
                         &mo->vc,  &mo->tok,  &mo->pos, &mo->seq,    &mo->off, &mo->table,
                         &mo->h,   &mo->hn,   &mo->qb,  &mo->kb,     &mo->vb,  &mo->att,
                         &mo->tmp, &mo->g,    &mo->u,   &mo->logits, &mo->next};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) rg_buffer_release(*all[i]);
  rg_queue_destroy(mo->q);
  rg_device_close(mo->dev);
}

static rg_status_t model_make(model_t *mo, const char *driver, const float *const *weights,
                              const float *inv_freq) {
  memset(mo, 0, sizeof *mo);
  // The CPU reference keeps activations in f32 (no AMX or bf16 dot products),
  // as the OpenCL kernels do, so the two agree to f32 rounding.
  rg_device_options_t exact = {.isa = rg_cpu_isa_best() < RG_CPU_ISA_AVX512 ? RG_CPU_ISA_AUTO
                                                                            : RG_CPU_ISA_AVX512};
  RG_RETURN_IF_ERROR(rg_device_open(driver, 0, strcmp(driver, "cpu") ? NULL : &exact, &mo->dev));
  RG_RETURN_IF_ERROR(rg_queue_create(mo->dev, &mo->q));
  // Weights: the embedding f32, the projections bf16, the FFN q8_0, the
  // head f16, so each weight kernel runs.
  const struct {
    rg_buffer_t **b;
    rg_dtype_t t;
    int64_t n;
  } w[] = {{&mo->emb, RG_F32, VOCAB * DIM},         {&mo->norm, RG_F32, DIM},
           {&mo->wq, RG_BF16, DIM * DIM},           {&mo->wk, RG_BF16, KV_HEADS * HD * DIM},
           {&mo->wv, RG_BF16, KV_HEADS * HD * DIM}, {&mo->wo, RG_BF16, DIM * DIM},
           {&mo->wg, RG_Q8_0, FFN * DIM},           {&mo->wu, RG_Q8_0, FFN * DIM},
           {&mo->wd, RG_Q8_0, DIM * FFN},           {&mo->head, RG_F16, VOCAB * DIM}};
  for (size_t i = 0; i < sizeof w / sizeof w[0]; i++) {
    int ok;
    size_t bytes = (size_t)rg_dtype_nbytes(w[i].t, w[i].n, &ok);
    void *p = malloc(bytes);
    rg_status_t s = rg_dtype_from_f32(w[i].t, weights[i], p, w[i].n);
    if (!s) s = rg_buffer_alloc(mo->dev, bytes, w[i].b);
    if (!s) s = rg_buffer_write(*w[i].b, 0, p, bytes);
    free(p);
    RG_RETURN_IF_ERROR(s);
  }
  const struct {
    rg_buffer_t **b;
    size_t bytes;
  } a[] = {{&mo->inv, HD / 2 * 4},
           {&mo->kc, BLOCKS * KV_HEADS * BS * HD * 2},
           {&mo->vc, BLOCKS * KV_HEADS * BS * HD * 2},
           {&mo->tok, 4},
           {&mo->pos, 4},
           {&mo->seq, 4},
           {&mo->off, 8},
           {&mo->table, BLOCKS * 4},
           {&mo->h, DIM * 4},
           {&mo->hn, DIM * 4},
           {&mo->qb, DIM * 4},
           {&mo->kb, KV_HEADS * HD * 4},
           {&mo->vb, KV_HEADS * HD * 4},
           {&mo->att, DIM * 4},
           {&mo->tmp, DIM * 4},
           {&mo->g, FFN * 4},
           {&mo->u, FFN * 4},
           {&mo->logits, VOCAB * 4},
           {&mo->next, 4}};
  for (size_t i = 0; i < sizeof a / sizeof a[0]; i++)
    RG_RETURN_IF_ERROR(rg_buffer_alloc(mo->dev, a[i].bytes, a[i].b));
  int32_t seq = 0, off[2] = {0, BLOCKS}, table[BLOCKS];
  for (int i = 0; i < BLOCKS; i++) table[i] = (i * 3) % BLOCKS;  // interleaved, as a free list
  RG_RETURN_IF_ERROR(rg_buffer_write(mo->inv, 0, inv_freq, HD / 2 * 4));
  RG_RETURN_IF_ERROR(rg_buffer_write(mo->seq, 0, &seq, 4));
  RG_RETURN_IF_ERROR(rg_buffer_write(mo->off, 0, off, 8));
  return rg_buffer_write(mo->table, 0, table, sizeof table);
}

static rg_status_t mm(model_t *mo, rg_buffer_t *x, rg_buffer_t *w, rg_dtype_t t, rg_buffer_t *y,
                      int64_t n, int64_t k) {
  rg_op_t op = {.kind = RG_OP_MATMUL, .matmul = {{x, 0}, {w, 0}, {NULL, 0}, {y, 0}, t, 1, n, k, 0}};
  return rg_queue_submit(mo->q, &op);
}

// One decode step for token `tok` at position `p`: 17 ops, then the logits
// and the greedy token are read back.
static rg_status_t model_step(model_t *mo, int32_t tok, int32_t p, float *logits, int32_t *next) {
  rg_queue_t *q = mo->q;
  RG_RETURN_IF_ERROR(rg_queue_write(q, mo->tok, 0, &tok, 4));
  RG_RETURN_IF_ERROR(rg_queue_write(q, mo->pos, 0, &p, 4));
  rg_op_t op = {.kind = RG_OP_EMBED,
                .embed = {{mo->emb, 0}, {mo->tok, 0}, {mo->h, 0}, RG_F32, VOCAB, 1, DIM}};
  RG_RETURN_IF_ERROR(rg_queue_submit(q, &op));
  op = (rg_op_t){.kind = RG_OP_RMSNORM,
                 .rmsnorm = {{mo->h, 0}, {mo->norm, 0}, {mo->hn, 0}, 1, DIM, 1e-5f}};
  RG_RETURN_IF_ERROR(rg_queue_submit(q, &op));
  RG_RETURN_IF_ERROR(mm(mo, mo->hn, mo->wq, RG_BF16, mo->qb, DIM, DIM));
  RG_RETURN_IF_ERROR(mm(mo, mo->hn, mo->wk, RG_BF16, mo->kb, KV_HEADS * HD, DIM));
  RG_RETURN_IF_ERROR(mm(mo, mo->hn, mo->wv, RG_BF16, mo->vb, KV_HEADS * HD, DIM));
  op = (rg_op_t){.kind = RG_OP_ROPE,
                 .rope = {{mo->qb, 0}, {mo->pos, 0}, {mo->inv, 0}, 1, HEADS, HD}};
  RG_RETURN_IF_ERROR(rg_queue_submit(q, &op));
  op.rope.x = (rg_ref_t){mo->kb, 0}, op.rope.n_heads = KV_HEADS;
  RG_RETURN_IF_ERROR(rg_queue_submit(q, &op));
  rg_kv_ref_t kv = {{mo->kc, 0}, {mo->vc, 0}, RG_F16, BLOCKS, BS, KV_HEADS, HD};
  rg_attn_meta_t meta = {1, 1, BLOCKS, {mo->seq, 0}, {mo->pos, 0}, {mo->off, 0}, {mo->table, 0}};
  op = (rg_op_t){.kind = RG_OP_KV_WRITE, .kv_write = {kv, meta, {mo->kb, 0}, {mo->vb, 0}}};
  RG_RETURN_IF_ERROR(rg_queue_submit(q, &op));
  op = (rg_op_t){.kind = RG_OP_ATTENTION};
  op.attention = (rg_op_attention_t){kv, meta, {mo->qb, 0}, {mo->att, 0}, {NULL, 0}, HEADS, 0, 0};
  RG_RETURN_IF_ERROR(rg_queue_submit(q, &op));
  RG_RETURN_IF_ERROR(mm(mo, mo->att, mo->wo, RG_BF16, mo->tmp, DIM, DIM));
  op = (rg_op_t){.kind = RG_OP_ADD, .add = {{mo->h, 0}, {mo->tmp, 0}, {mo->h, 0}, DIM}};
  RG_RETURN_IF_ERROR(rg_queue_submit(q, &op));
  op = (rg_op_t){.kind = RG_OP_RMSNORM,
                 .rmsnorm = {{mo->h, 0}, {mo->norm, 0}, {mo->hn, 0}, 1, DIM, 1e-5f}};
  RG_RETURN_IF_ERROR(rg_queue_submit(q, &op));
  RG_RETURN_IF_ERROR(mm(mo, mo->hn, mo->wg, RG_Q8_0, mo->g, FFN, DIM));
  RG_RETURN_IF_ERROR(mm(mo, mo->hn, mo->wu, RG_Q8_0, mo->u, FFN, DIM));
  op = (rg_op_t){.kind = RG_OP_SWIGLU, .swiglu = {{mo->g, 0}, {mo->u, 0}, {mo->g, 0}, FFN}};
  RG_RETURN_IF_ERROR(rg_queue_submit(q, &op));
  RG_RETURN_IF_ERROR(mm(mo, mo->g, mo->wd, RG_Q8_0, mo->tmp, DIM, FFN));
  op = (rg_op_t){.kind = RG_OP_ADD, .add = {{mo->h, 0}, {mo->tmp, 0}, {mo->h, 0}, DIM}};
  RG_RETURN_IF_ERROR(rg_queue_submit(q, &op));
  RG_RETURN_IF_ERROR(mm(mo, mo->h, mo->head, RG_F16, mo->logits, VOCAB, DIM));
  rg_sampler_config_t greedy = {0, 0, 1, 0};
  double u = 0;
  op = (rg_op_t){.kind = RG_OP_SAMPLE,
                 .sample = {{mo->logits, 0}, {mo->next, 0}, 1, VOCAB, &greedy, &u}};
  RG_RETURN_IF_ERROR(rg_queue_submit(q, &op));
  RG_RETURN_IF_ERROR(rg_queue_read(q, mo->logits, 0, logits, VOCAB * 4));
  RG_RETURN_IF_ERROR(rg_queue_read(q, mo->next, 0, next, 4));
  return rg_queue_wait(q);
}

RG_TEST(opencl_decode_steps_on_fresh_devices_match_the_cpu) {
  rg_device_t *probe;
  OPEN_OR_SKIP(probe);
  rg_device_close(probe);
  const int64_t sizes[] = {VOCAB * DIM,         DIM,        DIM * DIM, KV_HEADS * HD * DIM,
                           KV_HEADS * HD * DIM, DIM * DIM,  FFN * DIM, FFN * DIM,
                           DIM * FFN,           VOCAB * DIM};
  float *weights[10];
  for (int i = 0; i < 10; i++) {
    weights[i] = malloc((size_t)sizes[i] * 4);
    for (int64_t j = 0; j < sizes[i]; j++)
      weights[i][j] = i == 1 ? frand(0.5f, 1.5f) : frand(-0.3f, 0.3f);
  }
  rg_rope_t rope;
  RG_REQUIRE_OK(rg_rope_init(&rope, HD, 10000.0, NULL));
  model_t cpu;
  RG_REQUIRE_OK(model_make(&cpu, "cpu", (const float *const *)weights, rope.inv_freq));
  enum { STEPS = 2 * BS + 3 };  // past the first blocks of the table
  float want[STEPS][VOCAB], got[VOCAB];
  int32_t tokens[STEPS + 1];
  tokens[0] = 5;
  for (int s = 0; s < STEPS; s++)
    RG_REQUIRE_OK(model_step(&cpu, tokens[s], s, want[s], &tokens[s + 1]));
  model_free(&cpu);
  // Three times: a fresh device and queue, every step's ops submitted
  // without waiting, buffers reused, the CPU's tokens fed back.
  for (int round = 0; round < 3; round++) {
    model_t cl;
    RG_REQUIRE_OK(model_make(&cl, "opencl", (const float *const *)weights, rope.inv_freq));
    for (int s = 0; s < STEPS; s++) {
      int32_t next = -1;
      RG_REQUIRE_OK(model_step(&cl, tokens[s], s, got, &next));
      double e = nmse(got, want[s], VOCAB);
      if (!(e < 1e-8))
        rg_test_fail(t, __FILE__, __LINE__, "round %d step %d: logits nmse %g", round, s, e);
      // Greedy picks the same token unless the top two are within rounding.
      float best = -INFINITY, second = -INFINITY;
      for (int i = 0; i < VOCAB; i++)
        if (want[s][i] > best)
          second = best, best = want[s][i];
        else if (want[s][i] > second)
          second = want[s][i];
      if (best - second > 1e-4f && next != tokens[s + 1])
        rg_test_fail(t, __FILE__, __LINE__, "round %d step %d: token %d, the CPU's %d", round, s,
                     next, tokens[s + 1]);
    }
    model_free(&cl);
  }
  rg_rope_deinit(&rope);
  for (int i = 0; i < 10; i++) free(weights[i]);
}

// ----- The profile measurements -----------------------------------------------------------

RG_TEST(opencl_measurements_run_and_refuse_other_devices) {
  rg_device_t *dev, *cpu;
  OPEN_OR_SKIP(dev);
  RG_REQUIRE_OK(rg_device_open("cpu", 0, NULL, &cpu));
  rg_opencl_measure_t m;
  RG_REQUIRE_OK(rg_opencl_measure_read(dev, (size_t)16 << 20, 1, &m));
  RG_CHECK(m.work == (double)(16 << 20) && m.seconds > 0 && m.rate == m.work / m.seconds);
  RG_REQUIRE_OK(rg_opencl_measure_fma(dev, 1, &m));
  RG_CHECK(m.rate > 0 && m.seconds > 0);
  RG_REQUIRE_OK(rg_opencl_measure_matmul(dev, RG_Q8_0, 3, 64, 128, 1 << 16, 1, &m));
  RG_CHECK(m.work == 2.0 * 3 * 64 * 128 && m.rate > 0);
  RG_CHECK(m.bytes == 64.0 * 128 / 32 * 34 + 4.0 * (3 * 128 + 3 * 64));
  // The matmul and launch measures work on any HAL device.
  RG_REQUIRE_OK(rg_opencl_measure_matmul(cpu, RG_BF16, 1, 64, 64, 1 << 16, 1, &m));
  RG_REQUIRE_OK(rg_opencl_measure_write(dev, (size_t)8 << 20, 1, &m));
  RG_CHECK(m.work == (double)(8 << 20) && m.rate > 0);
  RG_REQUIRE_OK(rg_opencl_measure_copy(dev, (size_t)4 << 20, 1, &m));
  RG_CHECK(m.work == (double)(4 << 20) && m.bytes == 2.0 * (4 << 20) && m.rate > 0);
  RG_REQUIRE_OK(rg_opencl_measure_host_copy(dev, (size_t)4 << 20, 1, 1, &m));
  RG_REQUIRE_OK(rg_opencl_measure_host_copy(cpu, (size_t)4 << 20, 0, 1, &m));
  RG_CHECK(m.rate > 0);
  // Attention: 2 sequences over 100 positions of f16 K and V, 2 kv heads of 32.
  RG_REQUIRE_OK(rg_opencl_measure_attention(dev, RG_F16, 2, 100, 8, 2, 32, 1, &m));
  RG_CHECK(m.work == 2.0 * 100 * 2 * 32 * 2 * 2 && m.rate > 0);
  RG_CHECK_ERR(rg_opencl_measure_attention(dev, RG_Q8_0, 1, 100, 8, 2, 32, 1, &m), "bad arguments");
  double per_op = 0;
  RG_REQUIRE_OK(rg_opencl_measure_launch(dev, 20, &per_op));
  RG_CHECK(per_op > 0);
  RG_CHECK_ERR(rg_opencl_measure_read(cpu, 0, 1, &m),
               "rg_opencl_measure_read measures OpenCL devices, not cpu:0");
  RG_CHECK_ERR(rg_opencl_measure_fma(cpu, 1, &m), "measures OpenCL devices, not cpu:0");
  RG_CHECK_ERR(rg_opencl_measure_write(cpu, 0, 1, &m), "measures OpenCL devices, not cpu:0");
  RG_CHECK_ERR(rg_opencl_measure_matmul(dev, RG_Q8_0, 1, 4, 40, 0, 1, &m), "not whole blocks");
  rg_device_close(cpu);
  rg_device_close(dev);
}

// `ridge run --device opencl:0`: the whole model (embed to lm_head, weights
// uploaded rather than mapped) on the OpenCL device gives the CPU's greedy
// tokens, and logits within f32 rounding of the CPU's f32-activation kernels.
RG_TEST(opencl_engine_runs_the_whole_model) {
  rg_device_t *probe;
  OPEN_OR_SKIP(probe);
  rg_device_close(probe);
  char dir[1100];
  snprintf(dir, sizeof dir, "%s/m", rg_test_tmpdir(t));
  rg_testmodel_opts_t mo = {.arch = RG_TESTMODEL_LLAMA,
                            .size = RG_TESTMODEL_TINY,
                            .dtype = RG_BF16,
                            .gguf_type = RG_DTYPE_COUNT,
                            .seed = 3};
  RG_REQUIRE_OK(rg_testmodel_write(dir, &mo, NULL));
  enum { N = 3, OUT = 8 };
  int32_t ids[N][12];
  rg_serve_request_t r[N];
  for (int i = 0; i < N; i++) {
    for (int k = 0; k < 12; k++) ids[i][k] = (i * 29 + k * 7 + 1) % 400;
    r[i] = (rg_serve_request_t){(uint64_t)i, ids[i], (size_t)(12 - i * 2), OUT, {0, 0, 1, 0}, 0};
  }
  const char *devs[2] = {"cpu:0", "opencl:0"};
  rg_serve_result_t res[2][N];
  float *logits[2] = {NULL, NULL};
  int64_t vocab = 0;
  for (int d = 0; d < 2; d++) {
    rg_engine_options_t eo = {
        .device = devs[d],
        .kv_dtype = RG_F32,
        .kv_dtype_set = 1,
        .isa = rg_cpu_isa_best() < RG_CPU_ISA_AVX512 ? RG_CPU_ISA_AUTO : RG_CPU_ISA_AVX512,
        .max_context = 64,
        .max_seqs = 4};
    rg_engine_t *e;
    RG_REQUIRE_OK(rg_engine_create(dir, &eo, &e));
    vocab = rg_engine_vocab(e);
    logits[d] = calloc((size_t)OUT * (size_t)vocab, sizeof(float));
    RG_REQUIRE(logits[d]);
    rg_serve_options_t so = {.max_batch_tokens = 32, .dump_logits = logits[d], .dump_rows = OUT};
    rg_serve_stats_t ss;
    rg_status_t st = rg_serve(e, r, N, &so, res[d], &ss);
    rg_engine_destroy(e);
    RG_REQUIRE_OK(st);
  }
  for (int i = 0; i < N; i++) {
    RG_CHECK(res[0][i].n_tokens == OUT && res[1][i].n_tokens == OUT);
    RG_CHECK(!memcmp(res[0][i].tokens, res[1][i].tokens, OUT * sizeof(int32_t)));
  }
  double e = nmse(logits[1], logits[0], (size_t)OUT * (size_t)vocab);
  printf("    opencl:0 vs cpu:0 over %d decode rows: logits nmse %.2g\n", OUT, e);
  RG_CHECK(e < 1e-8);
  rg_serve_results_free(res[0], N);
  rg_serve_results_free(res[1], N);
  free(logits[0]);
  free(logits[1]);
}
