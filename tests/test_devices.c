// Tests of the device HAL (devices/devices.h) and `ridge devices`: the CPU
// device's threads and queue, buffers and their bounds, the null backend,
// what rg_devices_list reports on whatever machine runs the tests (never
// assuming a GPU), and the cuda backend end to end against a stand-in
// libcuda built here, so its probe, error conversion, buffers and queues run
// without NVIDIA hardware.
#include <cjson/cJSON.h>
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "devices/backend.h"
#include "devices/cuda/cuda_api.h"
#include "devices/cuda/gpu_images.h"
#include "devices/devices.h"
#include "ops/cuda/kernels.h"
#include "ops/matmul.h"
#include "ops/ops.h"
#include "tests/test.h"

static const char *const vendor_drivers[] = {"cuda", "hip", "level_zero", "opencl"};

// The list entries for driver `name`: *n_present devices, and the absent
// entry (NULL when the driver found devices).
static const rg_device_info_t *entries_for(const rg_device_info_t *list, size_t n, const char *name,
                                           int *n_present) {
  const rg_device_info_t *absent = NULL;
  *n_present = 0;
  for (size_t i = 0; i < n; i++) {
    if (strcmp(list[i].driver, name)) continue;
    if (list[i].present)
      (*n_present)++;
    else
      absent = &list[i];
  }
  return absent;
}

// ----- CPU device ----------------------------------------------------------------

typedef struct {
  atomic_long sum;
  atomic_int max_thread;
  int *hits;
} sum_ctx_t;

static void sum_range(void *ctx, size_t b, size_t e, int thread) {
  sum_ctx_t *c = ctx;
  long s = 0;
  for (size_t i = b; i < e; i++) {
    s += (long)i;
    c->hits[i]++;
  }
  atomic_fetch_add(&c->sum, s);
  int m = atomic_load(&c->max_thread);
  while (thread > m && !atomic_compare_exchange_weak(&c->max_thread, &m, thread)) {
  }
}

RG_TEST(devices_cpu_opens_with_threads_and_runs_parallel_for) {
  rg_device_t *dev;
  rg_device_options_t opts = {.threads = 3};
  RG_REQUIRE_OK(rg_device_open("cpu", 0, &opts, &dev));
  const rg_device_info_t *info = rg_device_info(dev);
  RG_CHECK(!strcmp(info->driver, "cpu"));
  RG_CHECK(info->index == 0 && info->present);
  RG_CHECK(info->name[0] != 0);
  RG_CHECK(info->memory > 0);
  RG_CHECK(info->compute_units == rg_cpu_count());
  RG_CHECK(!strcmp(info->class_hint, "local-cpu"));
  RG_REQUIRE(rg_device_cpu_pool(dev) != NULL);
  RG_CHECK(rg_pool_threads(rg_device_cpu_pool(dev)) == 3);

  rg_queue_t *q;
  RG_REQUIRE_OK(rg_queue_create(dev, &q));
  RG_CHECK(rg_queue_device(q) == dev);
  const size_t n = 10007;
  sum_ctx_t c = {0};
  c.hits = calloc(n, sizeof(int));
  RG_REQUIRE(c.hits);
  for (int rep = 0; rep < 20; rep++) RG_CHECK_OK(rg_queue_parallel_for(q, n, 64, sum_range, &c));
  RG_CHECK_OK(rg_queue_wait(q));
  RG_CHECK(atomic_load(&c.sum) == 20 * (long)(n * (n - 1) / 2));
  int each_twenty = 1;
  for (size_t i = 0; i < n; i++) each_twenty &= c.hits[i] == 20;
  RG_CHECK(each_twenty);
  RG_CHECK(atomic_load(&c.max_thread) <= 2);
  // n = 0 runs nothing; a NULL kernel is refused with a message.
  RG_CHECK_OK(rg_queue_parallel_for(q, 0, 1, sum_range, &c));
  RG_CHECK_ERR(rg_queue_parallel_for(q, 10, 1, NULL, NULL), "kernel function is NULL");
  free(c.hits);
  rg_queue_destroy(q);
  rg_device_close(dev);

  // threads = 0 (and no options at all): one per core this process may use.
  RG_REQUIRE_OK(rg_device_open("cpu", 0, NULL, &dev));
  RG_CHECK(rg_pool_threads(rg_device_cpu_pool(dev)) == rg_cpu_count());
  rg_device_close(dev);
}

RG_TEST(devices_cpu_supports_ops_and_null_supports_none) {
  rg_device_t *cpu, *null;
  RG_REQUIRE_OK(rg_device_open("cpu", 0, NULL, &cpu));
  RG_REQUIRE_OK(rg_device_open("null", 0, NULL, &null));
  for (int op = 0; op < RG_OP_COUNT; op++) {
    RG_CHECK(rg_device_supports_op(cpu, (rg_op_kind_t)op) == 1);
    RG_CHECK(rg_device_supports_op(null, (rg_op_kind_t)op) == 0);
  }
  RG_CHECK(rg_device_supports_op(cpu, RG_OP_COUNT) == 0);
  RG_CHECK(rg_device_supports_op(cpu, (rg_op_kind_t)-1) == 0);
  RG_CHECK(rg_device_supports_op(NULL, RG_OP_MATMUL) == 0);
  rg_op_kind_t k;
  RG_CHECK(rg_op_from_name("attention", &k) == 0 && k == RG_OP_ATTENTION);
  RG_CHECK(rg_op_from_name("no_such_op", &k) != 0);
  RG_CHECK(!strcmp(rg_op_name(RG_OP_SAMPLE), "sample") && !strcmp(rg_op_name(RG_OP_COUNT), "?"));
  rg_device_close(null);
  rg_device_close(cpu);
}

// The CPU asks for bf16 weights in packed panels at exactly the
// avx512-bf16 level (rg_device_weight_layout), and its matmul op runs them:
// the same y as from the rows on x rounded to bf16. A device capped below
// that level, or asked for another type, wants rows and refuses the
// packed layout by name; the op refuses a layout the type has not.
RG_TEST(devices_cpu_weight_layout_and_packed_matmul) {
  rg_device_t *cpu, *low;
  rg_device_options_t lo = {.isa = RG_CPU_ISA_AVX512};
  RG_REQUIRE_OK(rg_device_open("cpu", 0, NULL, &cpu));
  rg_status_t ls = rg_device_open("cpu", 0, &lo, &low);
  if (ls) {
    rg_status_free(ls);
    low = NULL;  // a CPU without AVX-512
  }
  const int want = rg_matmul_preferred_layout(RG_CPU_ISA_AUTO, RG_BF16);
  RG_CHECK(rg_device_weight_layout(cpu, RG_BF16) == want);
  RG_CHECK(rg_device_weight_layout(cpu, RG_F16) ==
           (int)rg_matmul_preferred_layout(RG_CPU_ISA_AUTO, RG_F16));
  RG_CHECK(rg_device_weight_layout(NULL, RG_BF16) == 0);
  if (low) RG_CHECK(rg_device_weight_layout(low, RG_BF16) == 0);
  if (low) RG_CHECK(rg_device_weight_layout(low, RG_F16) == RG_WLAYOUT_F16_PANELS);
  enum { N = 40, K = 64 };
  const size_t pbytes = rg_matmul_layout_bytes(RG_WLAYOUT_BF16_PANELS, RG_BF16, N, K);
  uint16_t w[N * K];
  float x[K], y[N], ref[N];
  for (int i = 0; i < N * K; i++) w[i] = rg_f32_to_bf16((float)((i * 7) % 13) - 6.0f);
  for (int i = 0; i < K; i++) x[i] = (float)(i % 5) - 2.0f;  // exact in bf16
  rg_wmat_t rows = {w, RG_BF16, N, K, RG_WLAYOUT_ROWS};
  RG_REQUIRE_OK(rg_matmul_ref(x, 1, &rows, NULL, ref));
  rg_buffer_t *bx, *bw, *by;
  RG_REQUIRE_OK(rg_buffer_alloc(cpu, sizeof x, &bx));
  RG_REQUIRE_OK(rg_buffer_alloc(cpu, pbytes, &bw));
  RG_REQUIRE_OK(rg_buffer_alloc(cpu, sizeof y, &by));
  RG_REQUIRE_OK(rg_buffer_write(bx, 0, x, sizeof x));
  rg_op_t op = {.kind = RG_OP_MATMUL,
                .matmul = {{bx, 0}, {bw, 0}, {NULL, 0}, {by, 0}, RG_BF16, 1, N, K, 1}};
  rg_queue_t *q;
  RG_REQUIRE_OK(rg_queue_create(cpu, &q));
  if (want == RG_WLAYOUT_BF16_PANELS) {
    void *packed = aligned_alloc(64, (pbytes + 63) / 64 * 64);
    RG_REQUIRE(packed);
    RG_REQUIRE_OK(rg_matmul_relayout(NULL, &rows, RG_WLAYOUT_BF16_PANELS, packed));
    RG_REQUIRE_OK(rg_buffer_write(bw, 0, packed, pbytes));
    free(packed);
    RG_CHECK_OK(rg_queue_submit(q, &op));
    RG_REQUIRE_OK(rg_buffer_read(by, 0, y, sizeof y));
    RG_CHECK(memcmp(y, ref, sizeof y) == 0);  // small integers: every sum exact
  } else {
    RG_CHECK_ERR(rg_queue_submit(q, &op), "takes bf16 weights in rows, not in the packed layout");
  }
  op.matmul.wtype = RG_F16;
  RG_CHECK_ERR(rg_queue_submit(q, &op), "w: f16 weights have no layout 1");
  rg_queue_destroy(q);
  if (low) {
    RG_REQUIRE_OK(rg_queue_create(low, &q));
    rg_buffer_t *lx, *lw, *ly;
    RG_REQUIRE_OK(rg_buffer_alloc(low, sizeof x, &lx));
    RG_REQUIRE_OK(rg_buffer_alloc(low, pbytes, &lw));
    RG_REQUIRE_OK(rg_buffer_alloc(low, sizeof y, &ly));
    op.matmul = (rg_op_matmul_t){{lx, 0}, {lw, 0}, {NULL, 0}, {ly, 0}, RG_BF16, 1, N, K, 1};
    RG_CHECK_ERR(rg_queue_submit(q, &op), "takes bf16 weights in rows, not in the packed layout");
    rg_buffer_release(lx), rg_buffer_release(lw), rg_buffer_release(ly);
    rg_queue_destroy(q);
    rg_device_close(low);
  }
  rg_buffer_release(bx), rg_buffer_release(bw), rg_buffer_release(by);
  rg_device_close(cpu);
}

// ----- Buffers -------------------------------------------------------------------

RG_TEST(devices_buffer_write_read_and_bounds) {
  rg_device_t *dev;
  RG_REQUIRE_OK(rg_device_open("cpu", 0, NULL, &dev));
  rg_buffer_t *buf;
  RG_REQUIRE_OK(rg_buffer_alloc(dev, 1024, &buf));
  RG_CHECK(rg_buffer_size(buf) == 1024);
  RG_CHECK(rg_buffer_device(buf) == dev);
  unsigned char *p = rg_buffer_host_ptr(buf);
  RG_REQUIRE(p != NULL);
  RG_CHECK((uintptr_t)p % 64 == 0);

  unsigned char in[256], out[256];
  for (int i = 0; i < 256; i++) in[i] = (unsigned char)(i * 7 + 1);
  RG_CHECK_OK(rg_buffer_write(buf, 768, in, 256));  // ends exactly at the end
  memset(out, 0, sizeof(out));
  RG_CHECK_OK(rg_buffer_read(buf, 768, out, 256));
  RG_CHECK(memcmp(in, out, 256) == 0);
  RG_CHECK(memcmp(p + 768, in, 256) == 0);  // host-visible: the same bytes

  // Past the end: the message gives the request, the buffer and the device.
  RG_CHECK_ERR(rg_buffer_write(buf, 1000, in, 32),
               "buffer write of 32 bytes at offset 1000 runs past the end of a 1024-byte buffer "
               "on cpu:0 (it would end at byte 1032)");
  RG_CHECK_ERR(rg_buffer_read(buf, 1024, out, 1), "buffer read of 1 bytes at offset 1024");
  RG_CHECK_ERR(rg_buffer_read(buf, 2000, out, 0), "runs past the end of a 1024-byte buffer");
  // offset + len would wrap around size_t: still a bounds error, not a write.
  RG_CHECK_ERR(rg_buffer_write(buf, 16, in, SIZE_MAX), "runs past the end");
  RG_CHECK_ERR(rg_buffer_write(buf, 0, NULL, 8), "the host pointer is NULL");
  rg_status_t s = rg_buffer_write(buf, 1000, in, 32);
  RG_CHECK(rg_status_code(s) == RG_INVALID_ARGUMENT);
  rg_status_free(s);
  // Empty copies at the end are fine.
  RG_CHECK_OK(rg_buffer_write(buf, 1024, in, 0));

  // Reference counting: the buffer lives until the last release.
  rg_buffer_retain(buf);
  rg_buffer_release(buf);
  RG_CHECK_OK(rg_buffer_read(buf, 768, out, 4));
  rg_buffer_release(buf);

  // A zero-byte buffer is valid and empty.
  RG_REQUIRE_OK(rg_buffer_alloc(dev, 0, &buf));
  RG_CHECK(rg_buffer_size(buf) == 0);
  RG_CHECK(rg_buffer_host_ptr(buf) != NULL);
  RG_CHECK_ERR(rg_buffer_write(buf, 0, in, 1), "past the end of a 0-byte buffer");
  rg_buffer_release(buf);
  rg_buffer_release(NULL);
  rg_device_close(dev);
}

RG_TEST(devices_huge_buffer_fails_with_out_of_memory) {
  const char *const drivers[] = {"cpu", "null"};
  for (size_t i = 0; i < 2; i++) {
    rg_device_t *dev;
    RG_REQUIRE_OK(rg_device_open(drivers[i], 0, NULL, &dev));
    rg_buffer_t *buf = (rg_buffer_t *)1;
    rg_status_t s = rg_buffer_alloc(dev, (size_t)1 << 62, &buf);
    RG_CHECK(s != NULL);
    RG_CHECK(rg_status_code(s) == RG_OUT_OF_MEMORY);
    RG_CHECK(buf == NULL);
    char want[128];
    snprintf(want, sizeof(want), "cannot allocate 4 EiB (4611686018427387904 bytes) on %s:0",
             drivers[i]);
    RG_CHECK_CONTAINS(rg_status_message(s), want);
    RG_CHECK_CONTAINS(rg_status_message(s), "more than its");
    rg_status_free(s);
    // SIZE_MAX too: no allocator ever sees it.
    RG_CHECK_ERR(rg_buffer_alloc(dev, SIZE_MAX, &buf), "cannot allocate");
    rg_device_close(dev);
  }
}

RG_TEST(devices_buffers_and_queues_keep_their_device_alive) {
  rg_device_t *dev;
  rg_device_options_t opts = {.threads = 2};
  RG_REQUIRE_OK(rg_device_open("cpu", 0, &opts, &dev));
  rg_buffer_t *buf;
  rg_queue_t *q;
  RG_REQUIRE_OK(rg_buffer_alloc(dev, 4096, &buf));
  RG_REQUIRE_OK(rg_queue_create(dev, &q));
  rg_device_close(dev);  // the buffer and the queue still hold it
  int hits[100] = {0};
  sum_ctx_t c = {.hits = hits};
  RG_CHECK_OK(rg_queue_parallel_for(q, 100, 10, sum_range, &c));
  RG_CHECK(atomic_load(&c.sum) == 4950);
  RG_CHECK(!strcmp(rg_device_info(rg_buffer_device(buf))->driver, "cpu"));
  RG_CHECK_OK(rg_buffer_write(buf, 0, hits, sizeof(hits)));
  rg_queue_destroy(q);
  rg_buffer_release(buf);  // the last reference: the device goes now
}

// ----- Null backend --------------------------------------------------------------

RG_TEST(devices_null_allocates_but_runs_nothing) {
  rg_device_t *dev;
  RG_REQUIRE_OK(rg_device_open("null", 0, NULL, &dev));
  const rg_device_info_t *info = rg_device_info(dev);
  RG_CHECK(info->present);
  RG_CHECK_CONTAINS(info->detail, "does no work: a template and a test double");
  RG_CHECK(rg_device_cpu_pool(dev) == NULL);

  rg_buffer_t *buf;
  RG_REQUIRE_OK(rg_buffer_alloc(dev, 100, &buf));
  RG_CHECK(rg_buffer_host_ptr(buf) != NULL);
  const char msg[] = "null buffers are host memory";
  char back[sizeof(msg)] = "";
  RG_CHECK_OK(rg_buffer_write(buf, 10, msg, sizeof(msg)));
  RG_CHECK_OK(rg_buffer_read(buf, 10, back, sizeof(back)));
  RG_CHECK(!strcmp(back, msg));
  RG_CHECK_ERR(rg_buffer_read(buf, 90, back, 20), "on null:0");

  rg_queue_t *q;
  RG_REQUIRE_OK(rg_queue_create(dev, &q));
  int hits[4] = {0};
  sum_ctx_t c = {.hits = hits};
  rg_status_t s = rg_queue_parallel_for(q, 4, 1, sum_range, &c);
  RG_CHECK(rg_status_code(s) == RG_UNIMPLEMENTED);
  RG_CHECK_CONTAINS(rg_status_message(s),
                    "parallel_for on null:0: the null backend does not run "
                    "host kernels (run them on a cpu device)");
  rg_status_free(s);
  RG_CHECK(hits[0] == 0);
  RG_CHECK_OK(rg_queue_wait(q));
  rg_queue_destroy(q);
  rg_buffer_release(buf);
  rg_device_close(dev);
}

// ----- Listing and opening -------------------------------------------------------

RG_TEST(devices_list_reports_every_driver) {
  rg_device_info_t list[RG_DEVICES_MAX];
  size_t n = 0;
  RG_REQUIRE_OK(rg_devices_list(list, RG_DEVICES_MAX, &n));
  RG_REQUIRE(n >= 6 && n <= RG_DEVICES_MAX);
  int np;
  RG_CHECK(entries_for(list, n, "cpu", &np) == NULL && np == 1);
  RG_CHECK(entries_for(list, n, "null", &np) == NULL && np == 1);
  for (size_t i = 0; i < n; i++)
    if (!strcmp(list[i].driver, "cpu")) RG_CHECK(!strcmp(list[i].class_hint, "local-cpu"));
  // Each vendor driver is either present with devices or absent with a
  // reason, whatever this machine has.
  for (size_t v = 0; v < sizeof(vendor_drivers) / sizeof(vendor_drivers[0]); v++) {
    const rg_device_info_t *a = entries_for(list, n, vendor_drivers[v], &np);
    if (np > 0) {
      RG_CHECK(a == NULL);
    } else {
      RG_REQUIRE(a != NULL);
      RG_CHECK(a->index == -1 && !a->present);
      RG_CHECK(strlen(a->reason) > 0);
    }
  }
  // Devices come before absences; indices count from 0 per driver.
  int seen_absent = 0;
  for (size_t i = 0; i < n; i++) {
    if (!list[i].present) seen_absent = 1;
    RG_CHECK(!(seen_absent && list[i].present));
    if (list[i].present) RG_CHECK(list[i].index >= 0 && list[i].reason[0] == 0);
  }
  // Counting only, and a short array: the same total, only cap written.
  size_t n2 = 0;
  RG_CHECK_OK(rg_devices_list(NULL, 0, &n2));
  RG_CHECK(n2 == n);
  rg_device_info_t one[1];
  RG_CHECK_OK(rg_devices_list(one, 1, &n2));
  RG_CHECK(n2 == n && !strcmp(one[0].driver, "cpu"));
  RG_CHECK_ERR(rg_devices_list(NULL, 4, &n2), "out is NULL");
  // The registry holds the six built-in drivers in order.
  RG_CHECK(rg_driver_count() >= 6);
  RG_CHECK(!strcmp(rg_driver_name(rg_driver_at(0)), "cpu"));
  RG_CHECK(rg_driver_find("level_zero") != NULL);
  RG_CHECK(rg_driver_find("nope") == NULL);
  RG_CHECK(strlen(rg_driver_description(rg_driver_find("opencl"))) > 0);
}

RG_TEST(devices_open_absent_driver_is_unavailable_with_reason) {
  rg_device_info_t list[RG_DEVICES_MAX];
  size_t n = 0;
  RG_REQUIRE_OK(rg_devices_list(list, RG_DEVICES_MAX, &n));
  const rg_device_info_t *absent = NULL;
  for (size_t i = 0; i < n && !absent; i++)
    if (!list[i].present) absent = &list[i];
  if (!absent) RG_SKIP("every vendor driver is present on this machine");
  rg_device_t *dev = (rg_device_t *)1;
  rg_status_t s = rg_device_open(absent->driver, 0, NULL, &dev);
  RG_CHECK(rg_status_code(s) == RG_UNAVAILABLE);
  RG_CHECK(dev == NULL);
  char want[128];
  snprintf(want, sizeof(want), "cannot open %s:0: %s is not present: ", absent->driver,
           absent->driver);
  RG_CHECK_CONTAINS(rg_status_message(s), want);
  RG_CHECK_CONTAINS(rg_status_message(s), absent->reason);
  rg_status_free(s);
}

RG_TEST(devices_open_rejects_bad_names_indices_and_options) {
  rg_device_t *dev;
  rg_status_t s = rg_device_open("level-zero", 0, NULL, &dev);
  RG_CHECK(rg_status_code(s) == RG_NOT_FOUND);
  RG_CHECK_CONTAINS(rg_status_message(s),
                    "no device driver named 'level-zero'; did you mean 'level_zero'?");
  RG_CHECK_CONTAINS(rg_status_message(s), "cpu, cuda, hip, level_zero, opencl, null");
  rg_status_free(s);
  s = rg_device_open("cpu", 3, NULL, &dev);
  RG_CHECK(rg_status_code(s) == RG_NOT_FOUND);
  RG_CHECK_CONTAINS(rg_status_message(s), "cannot open cpu:3: cpu has 1 device (index 0)");
  rg_status_free(s);
  RG_CHECK_ERR(rg_device_open("cpu", -1, NULL, &dev), "a device index counts from 0");
  rg_device_options_t bad = {.threads = -2};
  RG_CHECK_ERR(rg_device_open("cpu", 0, &bad, &dev),
               "cpu:0: threads must be 0 (one per core) or more, got -2");
  bad.threads = 5000;
  RG_CHECK_ERR(rg_device_open("cpu", 0, &bad, &dev), "5000 threads is more than the 1024 allowed");
  RG_CHECK_ERR(rg_device_open(NULL, 0, NULL, &dev), "driver name is NULL");
  RG_CHECK_ERR(rg_buffer_alloc(NULL, 8, (rg_buffer_t **)&dev), "device is NULL");
  RG_CHECK_ERR(rg_queue_create(NULL, (rg_queue_t **)&dev), "device is NULL");
  rg_device_close(NULL);
  rg_queue_destroy(NULL);
}

// A driver whose probe fails: listing shows it as absent with the probe's
// message, and nothing else breaks.
static rg_status_t flaky_probe(rg_driver_t *drv, rg_device_info_t *out, size_t cap, size_t *out_n) {
  return rg_status_make(RG_INTERNAL, "flaky: the device fell off the bus");
}
static rg_status_t flaky_open(rg_driver_t *drv, const rg_device_info_t *info,
                              const rg_device_options_t *opts, rg_device_t **out) {
  return rg_status_make(RG_INTERNAL, "never reached");
}
static const rg_driver_vtable_t flaky_vt = {.probe = flaky_probe, .open = flaky_open};
static rg_driver_t flaky = {.vt = &flaky_vt, .name = "flaky", .description = "a test double"};
static rg_driver_t second_cpu = {.vt = &flaky_vt, .name = "cpu", .description = "a clash"};

RG_TEST(devices_registry_lists_a_failing_driver_as_absent) {
  if (!rg_driver_find("flaky")) RG_REQUIRE_OK(rg__driver_register(&flaky));
  RG_CHECK_ERR(rg__driver_register(&second_cpu), "a driver named 'cpu' is already registered");
  rg_device_info_t list[RG_DEVICES_MAX];
  size_t n = 0;
  RG_REQUIRE_OK(rg_devices_list(list, RG_DEVICES_MAX, &n));
  int np;
  const rg_device_info_t *a = entries_for(list, n, "flaky", &np);
  RG_REQUIRE(a != NULL);
  RG_CHECK(np == 0);
  RG_CHECK(!strcmp(a->reason, "flaky: the device fell off the bus"));
  RG_CHECK(entries_for(list, n, "cpu", &np) == NULL && np == 1);
  rg_device_t *dev;
  RG_CHECK_ERR(rg_device_open("flaky", 0, NULL, &dev),
               "cannot open flaky:0: flaky is not present: flaky: the device fell off the bus");
}

// ----- `ridge devices` -----------------------------------------------------------

static cJSON *run_json(rg_test_ctx_t *t, const char *args, int *rc) {
  char *out = NULL;
  *rc = rg_test_run_ridge(t, args, &out);
  cJSON *j = cJSON_Parse(out);
  if (!j) rg_test_fail(t, __FILE__, __LINE__, "ridge %s: not JSON:\n%s", args, out);
  free(out);
  return j;
}

static const cJSON *find_device(const cJSON *root, const char *id) {
  const cJSON *e;
  cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(root, "devices")) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(e, "id");
    if (cJSON_IsString(v) && !strcmp(v->valuestring, id)) return e;
  }
  return NULL;
}

static const char *str_of(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsString(v) ? v->valuestring : "";
}

RG_TEST(devices_cli_json_lists_the_cpu_as_local_cpu) {
  int rc;
  cJSON *j = run_json(t, "devices --threads 2 --json", &rc);
  RG_CHECK(rc == 0);
  RG_REQUIRE(j);
  const cJSON *cpu = find_device(j, "cpu:0");
  RG_REQUIRE(cpu);
  RG_CHECK(!strcmp(str_of(cpu, "class"), "local-cpu"));
  RG_CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cpu, "class_in_catalog")));
  RG_CHECK(cJSON_GetObjectItemCaseSensitive(cpu, "threads")->valuedouble == 2);
  RG_CHECK(cJSON_GetObjectItemCaseSensitive(cpu, "memory")->valuedouble > 0);
  RG_CHECK(cJSON_GetObjectItemCaseSensitive(cpu, "compute_units")->valuedouble >= 1);
  RG_CHECK(cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(cpu, "features")));
  const cJSON *null = find_device(j, "null:0");
  RG_REQUIRE(null);
  RG_CHECK_CONTAINS(str_of(null, "detail"), "does no work");
  // Every vendor driver shows up once: as devices or with a reason.
  for (size_t v = 0; v < sizeof(vendor_drivers) / sizeof(vendor_drivers[0]); v++) {
    int found = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(j, "devices")) found +=
        !strcmp(str_of(e, "driver"), vendor_drivers[v]);
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(j, "not_present")) {
      if (strcmp(str_of(e, "driver"), vendor_drivers[v])) continue;
      found++;
      RG_CHECK(strlen(str_of(e, "reason")) > 0);
    }
    RG_CHECK(found >= 1);
  }
  cJSON_Delete(j);
}

// An OpenCL device that is found is opened by `ridge devices`, which shows
// that it runs every op (PoCL makes one on every machine here).
RG_TEST(devices_cli_opens_opencl_devices_and_counts_their_ops) {
  rg_device_info_t list[RG_DEVICES_MAX];
  size_t n = 0;
  int np;
  RG_REQUIRE_OK(rg_devices_list(list, RG_DEVICES_MAX, &n));
  const rg_device_info_t *absent = entries_for(list, n, "opencl", &np);
  if (np == 0) {
    char why[300];
    snprintf(why, sizeof(why), "no OpenCL device: %s", absent ? absent->reason : "?");
    RG_SKIP(why);
  }
  char *out = NULL, want[64];
  RG_CHECK(rg_test_run_ridge(t, "devices", &out) == 0);
  snprintf(want, sizeof(want), "opens; runs %d of %d ops", (int)RG_OP_COUNT, (int)RG_OP_COUNT);
  RG_CHECK_CONTAINS(out, "opencl:0");
  RG_CHECK_CONTAINS(out, want);
  free(out);
  int rc;
  cJSON *j = run_json(t, "devices --json", &rc);
  RG_CHECK(rc == 0);
  RG_REQUIRE(j);
  const cJSON *cl = find_device(j, "opencl:0");
  RG_REQUIRE(cl);
  RG_CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cl, "opens")));
  RG_CHECK(cJSON_GetObjectItemCaseSensitive(cl, "ops")->valuedouble == RG_OP_COUNT);
  // The CPU is opened with --threads and needs no such note.
  RG_CHECK(cJSON_GetObjectItemCaseSensitive(find_device(j, "cpu:0"), "opens") == NULL);
  cJSON_Delete(j);
}

RG_TEST(devices_cli_text_help_and_bad_flags) {
  char *out = NULL;
  int rc = rg_test_run_ridge(t, "devices", &out);
  RG_CHECK(rc == 0);
  RG_CHECK_CONTAINS(out, "Devices found");
  RG_CHECK_CONTAINS(out, "cpu:0");
  RG_CHECK_CONTAINS(out, "local-cpu");
  RG_CHECK_CONTAINS(out, "null:0");
  RG_CHECK_CONTAINS(out, "does no work: a template and a test double");
  free(out);
  rc = rg_test_run_ridge(t, "devices --help", &out);
  RG_CHECK(rc == 0);
  RG_CHECK_CONTAINS(out, "usage: ridge devices [--threads N] [--json]");
  RG_CHECK_CONTAINS(out, "says \"not present\" where a vendor's driver is missing");
  free(out);
  rc = rg_test_run_ridge(t, "devices --threads -1", &out);
  RG_CHECK(rc == 2);
  RG_CHECK_CONTAINS(out, "ridge devices: --threads must be a whole number, zero or more, got '-1'");
  free(out);
  rc = rg_test_run_ridge(t, "devices --threads 4096", &out);
  RG_CHECK(rc == 2);
  RG_CHECK_CONTAINS(out, "--threads must be at most 1024");
  free(out);
  rc = rg_test_run_ridge(t, "devices --treads 2", &out);
  RG_CHECK(rc == 2);
  RG_CHECK_CONTAINS(out, "--threads");
  free(out);
  rc = rg_test_run_ridge(t, "devices cuda", &out);
  RG_CHECK(rc == 2);
  RG_CHECK_CONTAINS(out, "takes no device names, got 'cuda'");
  free(out);
  rc = rg_test_run_ridge(t, "--help", &out);
  RG_CHECK_CONTAINS(out, "devices");
  free(out);
}

// ----- The cuda backend against a stand-in libcuda -------------------------------

// Enough of the CUDA driver API for the backend, over host memory. FAKE_CUDA
// picks the behaviour: "nodevice" fails cuInit as a machine without a GPU
// does; "oldgpu" refuses every kernel image (a GPU older than the SASS and
// PTX built); "pending" never completes an event; anything else shows one
// H100 whose allocations above 1 GiB fail.
static const char fake_cuda_src[] =
    "#include <stdlib.h>\n"
    "#include <string.h>\n"
    "typedef unsigned int R;\n"
    "static int mode_ok(void) { const char *m = getenv(\"FAKE_CUDA\");\n"
    "  return !m || strcmp(m, \"nodevice\"); }\n"
    "R cuInit(unsigned int f) { (void)f; return mode_ok() ? 0 : 100; }\n"
    "R cuDriverGetVersion(int *v) { *v = 12040; return 0; }\n"
    "R cuDeviceGetCount(int *n) { *n = 1; return 0; }\n"
    "R cuDeviceGet(int *d, int i) { if (i != 0) return 101; *d = 0; return 0; }\n"
    "R cuDeviceGetName(char *s, int n, int d) { (void)d;\n"
    "  strncpy(s, \"NVIDIA H100 80GB HBM3\", (size_t)n); return 0; }\n"
    "R cuDeviceTotalMem_v2(size_t *b, int d) { (void)d; *b = (size_t)80 << 30; return 0; }\n"
    "R cuDeviceGetAttribute(int *v, unsigned a, int d) { (void)d;\n"
    "  *v = a == 16 ? 132 : a == 75 ? 9 : a == 76 ? 0 : 0; return 0; }\n"
    "static int ctx;\n"
    "R cuDevicePrimaryCtxRetain(void **c, int d) { (void)d; *c = &ctx; ctx++; return 0; }\n"
    "R cuDevicePrimaryCtxRelease_v2(int d) { (void)d; ctx--; return 0; }\n"
    "R cuCtxPushCurrent_v2(void *c) { return c == &ctx ? 0 : 201; }\n"
    "R cuCtxPopCurrent_v2(void **c) { *c = &ctx; return 0; }\n"
    "R cuMemAlloc_v2(unsigned long long *p, size_t n) {\n"
    "  if (n > ((size_t)1 << 30)) return 2; void *m = malloc(n); if (!m) return 2;\n"
    "  *p = (unsigned long long)(size_t)m; return 0; }\n"
    "R cuMemFree_v2(unsigned long long p) { free((void *)(size_t)p); return 0; }\n"
    "R cuCtxSynchronize(void) { return 0; }\n"
    "R cuMemcpyHtoD_v2(unsigned long long d, const void *s, size_t n) {\n"
    "  memcpy((void *)(size_t)d, s, n); return 0; }\n"
    "R cuMemcpyDtoH_v2(void *d, unsigned long long s, size_t n) {\n"
    "  memcpy(d, (void *)(size_t)s, n); return 0; }\n"
    "static int streams;\n"
    "R cuStreamCreate(void **s, unsigned f) { (void)f; *s = &streams; streams++; return 0; }\n"
    "R cuStreamSynchronize(void *s) { return s == &streams ? 0 : 400; }\n"
    "R cuStreamDestroy_v2(void *s) { (void)s; streams--; return 0; }\n"
    "R cuGetErrorName(R r, const char **s) {\n"
    "  *s = r == 100 ? \"CUDA_ERROR_NO_DEVICE\" : r == 2 ? \"CUDA_ERROR_OUT_OF_MEMORY\" : 0;\n"
    "  return *s ? 0 : 1; }\n"
    // Async copies run at once; events complete at once, or never in mode
    // "pending" (a wedged GPU).
    "R cuMemcpyHtoDAsync_v2(unsigned long long d, const void *s, size_t n, void *st) {\n"
    "  (void)st; memcpy((void *)(size_t)d, s, n); return 0; }\n"
    "R cuMemcpyDtoHAsync_v2(void *d, unsigned long long s, size_t n, void *st) {\n"
    "  (void)st; memcpy(d, (void *)(size_t)s, n); return 0; }\n"
    "R cuMemcpyDtoDAsync_v2(unsigned long long d, unsigned long long s, size_t n, void *st) {\n"
    "  (void)st; memmove((void *)(size_t)d, (void *)(size_t)s, n); return 0; }\n"
    "static int waits;\n"
    "int fake_cuda_waits(void) { return waits; }\n"
    "R cuStreamWaitEvent(void *s, void *e, unsigned f) { (void)s; (void)e; (void)f; waits++;\n"
    "  return 0; }\n"
    "R cuEventCreate(void **e, unsigned f) { (void)f; *e = malloc(1); return *e ? 0 : 2; }\n"
    "R cuEventRecord(void *e, void *s) { (void)e; (void)s; return 0; }\n"
    "R cuEventQuery(void *e) { const char *m = getenv(\"FAKE_CUDA\"); (void)e;\n"
    "  return m && !strcmp(m, \"pending\") ? 600 : 0; }\n"
    "R cuEventDestroy_v2(void *e) { free(e); return 0; }\n"
    // Modules: the image must start with the fatbin magic; kernels are
    // found by name and every launch is handed to the test's hook, which
    // checks the grid and the argument struct (nothing runs).
    "R cuModuleLoadData(void **m, const void *img) { const unsigned char *p = img;\n"
    "  const char *md = getenv(\"FAKE_CUDA\"); if (md && !strcmp(md, \"oldgpu\")) return 209;\n"
    "  if (p[0] != 0x50 || p[1] != 0xed || p[2] != 0x55 || p[3] != 0xba) return 200;\n"
    "  *m = malloc(1); return *m ? 0 : 2; }\n"
    "R cuModuleUnload(void *m) { free(m); return 0; }\n"
    "R cuModuleGetFunction(void **f, void *m, const char *name) { (void)m;\n"
    "  if (strncmp(name, \"rg_\", 3)) return 500; *f = (void *)name; return 0; }\n"
    "typedef void (*hook_t)(const char *, const unsigned *, void **);\n"
    "static hook_t hook;\n"
    "void fake_cuda_set_launch_hook(hook_t h) { hook = h; }\n"
    "R cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,\n"
    "  unsigned bz, unsigned smem, void *s, void **params, void **extra) {\n"
    "  unsigned g[7] = {gx, gy, gz, bx, by, bz, smem}; (void)s; (void)extra;\n"
    "  if (hook) hook((const char *)f, g, params); return 0; }\n";

// Builds the stand-in into the test's directory; NULL when no C compiler.
static const char *build_fake_cuda(rg_test_ctx_t *t, char *lib, size_t len) {
  const char *src = rg_test_write(t, "fake_cuda.c", fake_cuda_src);
  snprintf(lib, len, "%s/libfakecuda.so", rg_test_tmpdir(t));
  char cmd[1024];
  snprintf(cmd, sizeof(cmd), "cc -shared -fPIC -O0 -o '%s' '%s' 2>/dev/null", lib, src);
  return system(cmd) == 0 ? lib : NULL;
}

RG_TEST(devices_cuda_backend_against_a_stand_in_libcuda) {
  char lib[512];
  if (!build_fake_cuda(t, lib, sizeof(lib)))
    RG_SKIP("no C compiler (cc) to build a stand-in libcuda");
  // Real hardware wins: this test replaces libcuda only where there is none.
  rg_device_info_t list[RG_DEVICES_MAX];
  size_t n = 0;
  int np;
  RG_REQUIRE_OK(rg_devices_list(list, RG_DEVICES_MAX, &n));
  const rg_device_info_t *a = entries_for(list, n, "cuda", &np);
  if (!a) RG_SKIP("a real CUDA driver is loaded here");

  // NVIDIA's own stub (the toolkit without a driver), where it is installed:
  // the real library's answer, converted at the edge.
  static const char stub[] = "/usr/local/cuda/lib64/stubs/libcuda.so";
  if (access(stub, R_OK) == 0) {
    setenv("RIDGE_CUDA_LIBRARY", stub, 1);
    RG_REQUIRE_OK(rg_devices_list(list, RG_DEVICES_MAX, &n));
    a = entries_for(list, n, "cuda", &np);
    RG_REQUIRE(a != NULL);
    RG_CHECK_CONTAINS(a->reason, "cuInit failed: CUDA_ERROR_STUB_LIBRARY (34)");
  }

  setenv("RIDGE_CUDA_LIBRARY", lib, 1);
  // A driver without devices: the vendor's error, by name, is the reason.
  setenv("FAKE_CUDA", "nodevice", 1);
  RG_REQUIRE_OK(rg_devices_list(list, RG_DEVICES_MAX, &n));
  a = entries_for(list, n, "cuda", &np);
  RG_REQUIRE(a != NULL);
  RG_CHECK_CONTAINS(a->reason, "cuInit failed: CUDA_ERROR_NO_DEVICE (100): no CUDA-capable device");
  rg_device_t *dev = NULL;
  RG_CHECK_ERR(rg_device_open("cuda", 0, NULL, &dev), "cuda is not present: cuInit failed");

  // One GPU.
  setenv("FAKE_CUDA", "ok", 1);
  RG_REQUIRE_OK(rg_devices_list(list, RG_DEVICES_MAX, &n));
  RG_CHECK(entries_for(list, n, "cuda", &np) == NULL && np == 1);
  RG_REQUIRE_OK(rg_device_open("cuda", 0, NULL, &dev));
  const rg_device_info_t *info = rg_device_info(dev);
  RG_CHECK(!strcmp(info->name, "NVIDIA H100 80GB HBM3"));
  RG_CHECK(!strcmp(info->class_hint, "h100-sxm"));
  RG_CHECK(info->memory == (uint64_t)80 << 30);
  RG_CHECK(info->compute_units == 132);
  RG_CHECK(!strcmp(info->features, "sm_90 f16 bf16 fp8"));
  RG_CHECK_CONTAINS(info->detail, "compute capability 9.0; CUDA driver 12.4");
  RG_CHECK(rg_device_cpu_pool(dev) == NULL);
  // The embedded kernel images load (the stand-in checks their fatbin
  // magic), or, built without nvcc, every op says why there are none.
  RG_CHECK(rg_device_supports_op(dev, RG_OP_MATMUL) == (rg__cuda_image_count > 0));

  // Device memory: not host visible; copies go through the driver.
  rg_buffer_t *buf;
  RG_REQUIRE_OK(rg_buffer_alloc(dev, 4096, &buf));
  RG_CHECK(rg_buffer_host_ptr(buf) == NULL);
  double in[8] = {1, 2, 3, 4, 5, 6, 7, 8}, out[8] = {0};
  RG_CHECK_OK(rg_buffer_write(buf, 64, in, sizeof(in)));
  RG_CHECK_OK(rg_buffer_read(buf, 64, out, sizeof(out)));
  RG_CHECK(memcmp(in, out, sizeof(in)) == 0);
  RG_CHECK_ERR(rg_buffer_write(buf, 4090, in, sizeof(in)),
               "past the end of a 4096-byte buffer on cuda:0");
  rg_buffer_t *empty;
  RG_REQUIRE_OK(rg_buffer_alloc(dev, 0, &empty));
  rg_buffer_release(empty);
  // Larger than the GPU: refused before the driver is asked. Larger than
  // the driver will give: the driver's error, by name.
  RG_CHECK_ERR(rg_buffer_alloc(dev, (size_t)1 << 40, &empty), "more than its 80 GiB");
  rg_status_t s = rg_buffer_alloc(dev, (size_t)2 << 30, &empty);
  RG_CHECK(rg_status_code(s) == RG_OUT_OF_MEMORY);
  RG_CHECK_CONTAINS(rg_status_message(s),
                    "cannot allocate 2 GiB (2147483648 bytes) on cuda:0: cuMemAlloc failed: "
                    "CUDA_ERROR_OUT_OF_MEMORY (2)");
  rg_status_free(s);

  // A stream: waits, but runs no host kernels.
  rg_queue_t *q;
  RG_REQUIRE_OK(rg_queue_create(dev, &q));
  RG_CHECK_OK(rg_queue_wait(q));
  int hits[4] = {0};
  sum_ctx_t c = {.hits = hits};
  s = rg_queue_parallel_for(q, 4, 1, sum_range, &c);
  RG_CHECK(rg_status_code(s) == RG_UNIMPLEMENTED);
  RG_CHECK_CONTAINS(rg_status_message(s), "parallel_for on cuda:0: the cuda backend does not run");
  rg_status_free(s);
  rg_queue_destroy(q);
  rg_device_close(dev);
  rg_buffer_release(buf);

  // `ridge devices` loads the same stand-in through the environment.
  char *text = NULL;
  int rc = rg_test_run_ridge(t, "devices", &text);
  RG_CHECK(rc == 0);
  RG_CHECK_CONTAINS(text, "cuda:0");
  RG_CHECK_CONTAINS(text, "NVIDIA H100 80GB HBM3");
  RG_CHECK_CONTAINS(text, "h100-sxm");
  free(text);
  unsetenv("FAKE_CUDA");
  unsetenv("RIDGE_CUDA_LIBRARY");
}

// What the cuda backend hands the driver for each op: the kernel, its grid
// and its argument struct, seen by the stand-in's launch hook. Nothing runs
// (the stand-in has no GPU); the addresses in the structs are checked by
// reading through them, since the stand-in's device memory is host memory.
typedef struct {
  char name[48];
  unsigned g[7];  // grid x, y, z; block x, y, z; dynamic shared bytes
  unsigned char args[512];
} launch_t;

static launch_t launches[8];
static int n_launches;

static void record_launch(const char *name, const unsigned *g, void **params) {
  if (n_launches >= 8) return;
  launch_t *l = &launches[n_launches++];
  snprintf(l->name, sizeof l->name, "%s", name);
  memcpy(l->g, g, sizeof l->g);
  // Copy exactly the struct this kernel takes: reading past it would read
  // past the caller's stack variable.
  size_t size = !strncmp(name, "rg_gemv", 7) || !strcmp(name, "rg_gemm_tiled")
                    ? sizeof(rg_cuk_matmul_t)
                : !strncmp(name, "rg_attention", 12) ? sizeof(rg_cuk_attention_t)
                : !strcmp(name, "rg_add")            ? sizeof(rg_cuk_binary_t)
                : !strcmp(name, "rg_argmax")         ? sizeof(rg_cuk_argmax_t)
                                                     : 0;
  memcpy(l->args, params[0], size);
}

static float read_f32_at(uint64_t addr) {
  float v;
  memcpy(&v, (const void *)(uintptr_t)addr, sizeof v);
  return v;
}

RG_TEST(devices_cuda_ops_become_launches_on_a_stand_in) {
  char lib[512];
  if (!build_fake_cuda(t, lib, sizeof(lib)))
    RG_SKIP("no C compiler (cc) to build a stand-in libcuda");
  rg_device_info_t list[RG_DEVICES_MAX];
  size_t n = 0;
  int np;
  RG_REQUIRE_OK(rg_devices_list(list, RG_DEVICES_MAX, &n));
  // A real driver, or the stand-in an earlier test loaded (a library stays
  // for the process): only the stand-in has the hook, checked below.
  (void)entries_for(list, n, "cuda", &np);
  setenv("RIDGE_CUDA_LIBRARY", lib, 1);
  setenv("FAKE_CUDA", "ok", 1);
  // No cuBLAS for this process: large matmuls must fall back to the tiled
  // kernel (the library is looked for once, at the first large matmul).
  setenv("RIDGE_CUBLAS_LIBRARY", "/nonexistent/libcublas.so", 1);
  const rg_cuda_syms_t *cu;
  rg_status_t s = rg__cuda_load(&cu);
  if (s) {
    rg_status_free(s);
    RG_SKIP("the stand-in libcuda does not load");
  }
  void (*set_hook)(void (*)(const char *, const unsigned *, void **)) =
      (void (*)(void (*)(const char *, const unsigned *, void **)))dlsym(
          cu->lib, "fake_cuda_set_launch_hook");
  int (*waits)(void) = (int (*)(void))dlsym(cu->lib, "fake_cuda_waits");
  if (!set_hook || !waits) RG_SKIP("a real CUDA driver is loaded here");

  rg_device_t *dev;
  RG_REQUIRE_OK(rg_device_open("cuda", 0, NULL, &dev));
  rg_queue_t *q, *q2;
  RG_REQUIRE_OK(rg_queue_create(dev, &q));
  RG_REQUIRE_OK(rg_queue_create(dev, &q2));
  rg_buffer_t *b;
  RG_REQUIRE_OK(rg_buffer_alloc(dev, 1 << 20, &b));
  if (!rg__cuda_image_count) {
    rg_op_t add = {.kind = RG_OP_ADD, .add = {{b, 0}, {b, 0}, {b, 0}, 4}};
    RG_CHECK_ERR(rg_queue_submit(q, &add), "no kernels built (nvcc not found at build time)");
    goto out;
  }
  set_hook(record_launch);

  // add, in place: one grid-stride launch whose pointers are the operands'.
  float marks[3] = {1.5f, 2.5f, 3.5f};
  RG_CHECK_OK(rg_buffer_write(b, 64, &marks[0], 4));
  RG_CHECK_OK(rg_buffer_write(b, 4096, &marks[1], 4));
  n_launches = 0;
  rg_op_t add = {.kind = RG_OP_ADD, .add = {{b, 64}, {b, 4096}, {b, 64}, 1000}};
  RG_CHECK_OK(rg_queue_submit(q, &add));
  RG_REQUIRE(n_launches == 1);
  RG_CHECK(!strcmp(launches[0].name, "rg_add"));
  RG_CHECK(launches[0].g[0] == 4 && launches[0].g[3] == 256);
  rg_cuk_binary_t ba;
  memcpy(&ba, launches[0].args, sizeof ba);
  RG_CHECK(ba.n == 1000 && ba.out == ba.a);
  RG_CHECK(read_f32_at(ba.a) == 1.5f && read_f32_at(ba.b) == 2.5f);

  // matmul at decode: the bf16 GEMV for m = 1, 16-byte loads when aligned.
  rg_op_t mm = {.kind = RG_OP_MATMUL,
                .matmul = {{b, 0}, {b, 1024}, {NULL, 0}, {b, 40960}, RG_BF16, 1, 96, 128, 0}};
  n_launches = 0;
  RG_CHECK_OK(rg_queue_submit(q, &mm));
  RG_REQUIRE(n_launches == 1);
  RG_CHECK(!strcmp(launches[0].name, "rg_gemv_bf16_1"));
  rg_cuk_matmul_t ma;
  memcpy(&ma, launches[0].args, sizeof ma);
  RG_CHECK(launches[0].g[0] == 6 && launches[0].g[3] == 256);  // 16 rows of W per block
  RG_CHECK(ma.m == 1 && ma.n == 96 && ma.k == 128 && ma.w_row_bytes == 256 && ma.aligned == 1);
  RG_CHECK(ma.bias == 0 && ma.w - ma.x == 1024 && ma.y - ma.x == 40960);
  mm.matmul.w.offset = 1026;  // bf16 at a 2-byte boundary: element loads
  mm.matmul.m = 5;
  n_launches = 0;
  RG_CHECK_OK(rg_queue_submit(q, &mm));
  RG_REQUIRE(n_launches == 1);
  memcpy(&ma, launches[0].args, sizeof ma);
  RG_CHECK(!strcmp(launches[0].name, "rg_gemv_bf16_5") && ma.aligned == 0);
  // Prefill-sized, with no cuBLAS: the tiled kernel, 64x64 tiles.
  mm.matmul = (rg_op_matmul_t){{b, 0}, {b, 0}, {NULL, 0}, {b, 0}, RG_F16, 200, 64, 32, 0};
  n_launches = 0;
  RG_CHECK_OK(rg_queue_submit(q, &mm));
  RG_REQUIRE(n_launches == 1);
  RG_CHECK(!strcmp(launches[0].name, "rg_gemm_tiled"));
  RG_CHECK(launches[0].g[0] == 1 && launches[0].g[1] == 4 && launches[0].g[3] == 256);

  // What the kernels cannot take is refused before any launch, by name.
  mm.matmul = (rg_op_matmul_t){{b, 2}, {b, 0}, {NULL, 0}, {b, 0}, RG_F32, 1, 4, 4, 0};
  RG_CHECK_ERR(rg_queue_submit(q, &mm), "need operand x at a multiple of 4 bytes, not offset 2");
  mm.matmul.x.offset = 0, mm.matmul.wtype = RG_FP8;
  RG_CHECK_ERR(rg_queue_submit(q, &mm),
               "cuda:0 has no matmul kernel for fp8 weights (it runs f32, bf16, f16 and q8_0)");
  // The CPU's packed panels are not this device's layout.
  mm.matmul = (rg_op_matmul_t){{b, 0}, {b, 0}, {NULL, 0}, {b, 0}, RG_BF16, 1, 32, 32, 1};
  RG_CHECK_ERR(rg_queue_submit(q, &mm), "cuda:0 takes bf16 weights in rows, not in the packed");

  // attention: one block per (token, KV head), a warp per query head of
  // the group, q in shared memory; a long table splits the context.
  rg_op_t at = {.kind = RG_OP_ATTENTION};
  at.attention.kv = (rg_kv_ref_t){{b, 0}, {b, 0}, RG_F16, 4, 16, 2, 64};
  at.attention.meta = (rg_attn_meta_t){1, 1, 2, {b, 0}, {b, 0}, {b, 0}, {b, 0}};
  at.attention.q = (rg_ref_t){b, 0};
  at.attention.o = (rg_ref_t){b, 8192};
  at.attention.n_heads = 8;
  n_launches = 0;
  RG_CHECK_OK(rg_queue_submit(q, &at));
  RG_REQUIRE(n_launches == 1);
  RG_CHECK(!strcmp(launches[0].name, "rg_attention_f16_2"));
  RG_CHECK(launches[0].g[0] == 1 && launches[0].g[1] == 2 && launches[0].g[2] == 1);
  RG_CHECK(launches[0].g[3] == 128 && launches[0].g[6] == 4 * 64 * 4);
  rg_cuk_attention_t aa;
  memcpy(&aa, launches[0].args, sizeof aa);
  RG_CHECK(aa.splits == 1 && aa.scale == 0.125f && aa.kv.n_table == 2 && aa.part == 0);
  RG_CHECK(aa.k_vec == 1);  // head_dim 64, the pool at offset 0: 16-byte K loads
  at.attention.kv.n_blocks = 64;
  at.attention.meta.n_table = 64;  // up to 1024 positions: 4 splits of 256
  n_launches = 0;
  RG_CHECK_OK(rg_queue_submit(q, &at));
  RG_REQUIRE(n_launches == 2);
  memcpy(&aa, launches[0].args, sizeof aa);
  RG_CHECK(launches[0].g[2] == 4 && aa.splits == 4 && aa.split_len == 256 && aa.part != 0);
  RG_CHECK(!strcmp(launches[1].name, "rg_attention_merge") && launches[1].g[1] == 8);
  at.attention.kv.head_dim = 512;
  at.attention.kv.n_blocks = at.attention.meta.n_table = 2;
  RG_CHECK_ERR(rg_queue_submit(q, &at), "take head_dim up to 256, not 512");

  // sample: greedy rows on the device; a sampled row is drawn on the host
  // from the logits read back, exactly as the CPU draws it.
  {
    enum { V = 64 };
    float logits[2 * V];
    for (int i = 0; i < 2 * V; i++) logits[i] = (float)((i * 37) % 23) * 0.25f;
    RG_CHECK_OK(rg_buffer_write(b, 0, logits, sizeof logits));
    int32_t fill[2] = {-1, -1}, got[2];
    RG_CHECK_OK(rg_buffer_write(b, 8192, fill, sizeof fill));
    rg_sampler_config_t cfg[2] = {{0, 0, 1, 0}, {0.9f, 10, 0.8f, 0}};
    double u[2] = {0.5, 0.7};
    rg_op_t sm = {.kind = RG_OP_SAMPLE, .sample = {{b, 0}, {b, 8192}, 2, V, cfg, u}};
    n_launches = 0;
    RG_CHECK_OK(rg_queue_submit(q, &sm));
    RG_REQUIRE(n_launches == 1);
    RG_CHECK(!strcmp(launches[0].name, "rg_argmax") && launches[0].g[0] == 2);
    RG_CHECK_OK(rg_buffer_read(b, 8192, got, sizeof got));
    int32_t idx[V];
    float prob[V];
    RG_CHECK(got[0] == -1);  // the stand-in runs no kernel: row 0 untouched
    RG_CHECK(got[1] == rg_sample_draw_ref(&cfg[1], logits + V, V, u[1], idx, prob));
    cfg[1].top_p = 0;
    RG_CHECK_ERR(rg_queue_submit(q, &sm), "row 1: sampler temperature 0.9, top-k 10, top-p 0");
  }

  // Copies on the stream; events; one queue waiting on another's event on
  // the device; a deadline that runs out on work that never completes.
  {
    unsigned char src[256], back[256];
    for (int i = 0; i < 256; i++) src[i] = (unsigned char)(i * 7);
    RG_CHECK_OK(rg_queue_write(q, b, 100, src, sizeof src));
    RG_CHECK_OK(rg_queue_copy(q, b, 1000, b, 100, sizeof src));
    RG_CHECK_OK(rg_queue_read(q, b, 1000, back, sizeof back));
    RG_CHECK_OK(rg_queue_wait(q));
    RG_CHECK(!memcmp(src, back, sizeof src));
    rg_event_t *ev;
    RG_REQUIRE_OK(rg_queue_record(q, &ev));
    RG_CHECK(rg_event_done(ev));
    RG_CHECK_OK(rg_event_wait(ev, 1.0));
    int before = waits();
    RG_CHECK_OK(rg_queue_wait_event(q2, ev));
    RG_CHECK(waits() == before + 1);
    setenv("FAKE_CUDA", "pending", 1);
    RG_CHECK(!rg_event_done(ev));
    RG_CHECK_ERR(rg_event_wait(ev, 0.01),
                 "waiting for an event on cuda:0: the work is not done after 0.01 s");
    setenv("FAKE_CUDA", "ok", 1);
    rg_event_release(ev);
  }
  set_hook(NULL);

  // A GPU the built images do not cover: it opens, and every op says why.
  setenv("FAKE_CUDA", "oldgpu", 1);
  {
    rg_device_t *old;
    RG_REQUIRE_OK(rg_device_open("cuda", 0, NULL, &old));
    RG_CHECK(!rg_device_supports_op(old, RG_OP_ADD));
    rg_op_t op = {.kind = RG_OP_SOFTMAX};
    RG_CHECK_ERR(rg_device_check_op(old, &op),
                 "cuda:0 has no softmax kernel: the kernels of ops/cuda/attention.cu (built by ");
    s = rg_device_check_op(old, &op);
    RG_CHECK_CONTAINS(rg_status_message(s), rg__cuda_images_note);
    RG_CHECK_CONTAINS(rg_status_message(s),
                      ") do not load on this GPU: cuModuleLoadData failed: "
                      "CUDA_ERROR_NO_BINARY_FOR_GPU (209)");
    rg_status_free(s);
    rg_device_close(old);
  }
out:
  rg_buffer_release(b);
  rg_queue_destroy(q2);
  rg_queue_destroy(q);
  rg_device_close(dev);
  unsetenv("FAKE_CUDA");
  unsetenv("RIDGE_CUDA_LIBRARY");
}

// ----- The hip backend against a stand-in libamdhip64 --------------------------------

// Enough of the HIP runtime for the backend, over host memory: one MI300X.
// Modules load and kernels resolve; launches do nothing (no test here reads
// a kernel's result).
static const char fake_hip_src[] =
    "#include <stdlib.h>\n"
    "#include <string.h>\n"
    "typedef int E;\n"
    "E hipInit(unsigned f) { (void)f; return 0; }\n"
    "E hipDriverGetVersion(int *v) { *v = 60241134; return 0; }\n"
    "E hipGetDeviceCount(int *n) { *n = 1; return 0; }\n"
    "E hipDeviceGet(int *d, int i) { if (i) return 101; *d = 0; return 0; }\n"
    "E hipDeviceGetName(char *s, int n, int d) { (void)d;\n"
    "  strncpy(s, \"AMD Instinct MI300X\", (size_t)n); return 0; }\n"
    "E hipDeviceTotalMem(size_t *b, int d) { (void)d; *b = (size_t)192 << 30; return 0; }\n"
    "E hipDeviceGetAttribute(int *v, int a, int d) { (void)d;\n"
    "  *v = a == 63 ? 304 : a == 23 ? 9 : a == 61 ? 4 : 0; return 0; }\n"
    "E hipSetDevice(int d) { return d == 0 ? 0 : 101; }\n"
    "E hipMalloc(void **p, size_t n) { if (n > ((size_t)1 << 30)) return 2;\n"
    "  *p = malloc(n); return *p ? 0 : 2; }\n"
    "E hipFree(void *p) { free(p); return 0; }\n"
    "E hipDeviceSynchronize(void) { return 0; }\n"
    "E hipMemcpy(void *d, const void *s, size_t n, int k) { (void)k; memmove(d, s, n);\n"
    "  return 0; }\n"
    "E hipMemcpyAsync(void *d, const void *s, size_t n, int k, void *st) { (void)k; (void)st;\n"
    "  memmove(d, s, n); return 0; }\n"
    "static int streams;\n"
    "E hipStreamCreateWithFlags(void **s, unsigned f) { (void)f; *s = &streams; streams++;\n"
    "  return 0; }\n"
    "E hipStreamSynchronize(void *s) { return s == &streams ? 0 : 400; }\n"
    "E hipStreamDestroy(void *s) { (void)s; streams--; return 0; }\n"
    "E hipStreamWaitEvent(void *s, void *e, unsigned f) { (void)s; (void)e; (void)f; return 0; }\n"
    "E hipEventCreateWithFlags(void **e, unsigned f) { (void)f; *e = malloc(1);\n"
    "  return *e ? 0 : 2; }\n"
    "E hipEventRecord(void *e, void *s) { (void)e; (void)s; return 0; }\n"
    "E hipEventQuery(void *e) { (void)e; return 0; }\n"
    "E hipEventDestroy(void *e) { free(e); return 0; }\n"
    "E hipModuleLoadData(void **m, const void *i) { (void)i; *m = malloc(1); return 0; }\n"
    "E hipModuleUnload(void *m) { free(m); return 0; }\n"
    "E hipModuleGetFunction(void **f, void *m, const char *n) { (void)m; *f = (void *)n;\n"
    "  return 0; }\n"
    "E hipModuleLaunchKernel(void *f, unsigned a, unsigned b, unsigned c, unsigned d,\n"
    "  unsigned e, unsigned g, unsigned h, void *s, void **p, void **x) {\n"
    "  (void)f; (void)a; (void)b; (void)c; (void)d; (void)e; (void)g; (void)h; (void)s;\n"
    "  (void)p; (void)x; return 0; }\n"
    "const char *hipGetErrorName(E r) { return r == 2 ? \"hipErrorOutOfMemory\" : 0; }\n";

// Named to run after the listing and opening tests: a loaded library stays
// for the process, and those tests want some driver to be absent.
RG_TEST(devices_stand_in_hip_runs_buffers_queues_and_events) {
  rg_device_info_t list[RG_DEVICES_MAX];
  size_t n = 0;
  int np;
  RG_REQUIRE_OK(rg_devices_list(list, RG_DEVICES_MAX, &n));
  if (!entries_for(list, n, "hip", &np)) RG_SKIP("a HIP runtime is loaded here");
  const char *src = rg_test_write(t, "fake_hip.c", fake_hip_src);
  char lib[512], cmd[1200];
  snprintf(lib, sizeof lib, "%s/libfakehip.so", rg_test_tmpdir(t));
  snprintf(cmd, sizeof cmd, "cc -shared -fPIC -O0 -o '%s' '%s' 2>/dev/null", lib, src);
  if (system(cmd) != 0) RG_SKIP("no C compiler (cc) to build a stand-in libamdhip64");
  setenv("RIDGE_HIP_LIBRARY", lib, 1);
  RG_REQUIRE_OK(rg_devices_list(list, RG_DEVICES_MAX, &n));
  RG_CHECK(entries_for(list, n, "hip", &np) == NULL && np == 1);
  rg_device_t *dev;
  RG_REQUIRE_OK(rg_device_open("hip", 0, NULL, &dev));
  const rg_device_info_t *info = rg_device_info(dev);
  RG_CHECK(!strcmp(info->name, "AMD Instinct MI300X") && info->compute_units == 304);
  RG_CHECK(info->memory == (uint64_t)192 << 30);

  // Device memory through the runtime, checked ranges, the driver's errors.
  rg_buffer_t *b;
  RG_REQUIRE_OK(rg_buffer_alloc(dev, 4096, &b));
  RG_CHECK(rg_buffer_host_ptr(b) == NULL);
  unsigned char in[200], out[200];
  for (int i = 0; i < 200; i++) in[i] = (unsigned char)(i * 3);
  RG_CHECK_OK(rg_buffer_write(b, 10, in, sizeof in));
  RG_CHECK_OK(rg_buffer_read(b, 10, out, sizeof out));
  RG_CHECK(!memcmp(in, out, sizeof in));
  rg_buffer_t *big;
  RG_CHECK_ERR(rg_buffer_alloc(dev, (size_t)2 << 30, &big),
               "cannot allocate 2 GiB (2147483648 bytes) on hip:0: hipMalloc failed: "
               "hipErrorOutOfMemory (2)");

  // A stream: async copies, events, another queue waiting on the device.
  rg_queue_t *q, *q2;
  RG_REQUIRE_OK(rg_queue_create(dev, &q));
  RG_REQUIRE_OK(rg_queue_create(dev, &q2));
  memset(out, 0, sizeof out);
  RG_CHECK_OK(rg_queue_write(q, b, 1000, in, sizeof in));
  RG_CHECK_OK(rg_queue_copy(q, b, 2000, b, 1000, sizeof in));
  rg_event_t *ev;
  RG_REQUIRE_OK(rg_queue_record(q, &ev));
  RG_CHECK_OK(rg_queue_wait_event(q2, ev));
  RG_CHECK_OK(rg_queue_read(q2, b, 2000, out, sizeof out));
  RG_CHECK_OK(rg_queue_wait(q2));
  RG_CHECK_OK(rg_event_wait(ev, 1.0));
  RG_CHECK(!memcmp(in, out, sizeof in));
  rg_event_release(ev);

  // Ops: the kernels hipcc built, or the reason there are none.
  rg_op_t add = {.kind = RG_OP_ADD, .add = {{b, 0}, {b, 0}, {b, 0}, 16}};
  if (rg__hip_image_count) {
    RG_CHECK(rg_device_supports_op(dev, RG_OP_ATTENTION));
    RG_CHECK_OK(rg_queue_submit(q, &add));
  } else {
    RG_CHECK(!rg_device_supports_op(dev, RG_OP_ADD));
    RG_CHECK_ERR(rg_queue_submit(q, &add),
                 "hip:0 has no add kernel: no kernels built (hipcc not found at build time)");
  }
  rg_buffer_release(b);
  rg_queue_destroy(q2);
  rg_queue_destroy(q);
  rg_device_close(dev);
  unsetenv("RIDGE_HIP_LIBRARY");
}

// ----- The level_zero backend against a stand-in libze_loader -------------------------

// One GPU whose memory is host memory; copies are memmove.
static const char fake_ze_src[] =
    "#include <stdint.h>\n"
    "#include <stdlib.h>\n"
    "#include <string.h>\n"
    "typedef uint32_t R;\n"
    "static int drv, dev, ctx, list;\n"
    "R zeInit(uint32_t f) { (void)f; return 0; }\n"
    "R zeDriverGet(uint32_t *n, void **d) { if (d && *n) d[0] = &drv; *n = 1; return 0; }\n"
    "R zeDeviceGet(void *d, uint32_t *n, void **v) { (void)d; if (v && *n) v[0] = &dev;\n"
    "  *n = 1; return 0; }\n"
    "R zeDeviceGetProperties(void *d, void *p) { (void)d; unsigned char *b = p;\n"
    "  uint32_t *u = (uint32_t *)(b + 16); u[0] = 1; u[1] = 0x8086; u[2] = 0x0bd5;\n"
    // ze_device_properties_t: threads per EU, SIMD width, EUs per subslice,
    // subslices per slice and slices from byte 56; name at 112.
    "  u[10] = 16; u[11] = 8; u[12] = 8; u[13] = 8; u[14] = 4;\n"
    "  strcpy((char *)b + 112, \"Intel(R) Data Center GPU Max 1100\"); return 0; }\n"
    "R zeDeviceGetMemoryProperties(void *d, uint32_t *n, void *p) { (void)d;\n"
    "  if (p && *n) { uint64_t *t = (uint64_t *)((unsigned char *)p + 32);\n"
    "    *t = (uint64_t)48 << 30; } *n = 1; return 0; }\n"
    "R zeContextCreate(void *d, const void *desc, void **c) { (void)d; (void)desc; *c = &ctx;\n"
    "  return 0; }\n"
    "R zeContextDestroy(void *c) { (void)c; return 0; }\n"
    "R zeMemAllocDevice(void *c, const void *desc, size_t n, size_t a, void *d, void **p) {\n"
    "  (void)c; (void)desc; (void)a; (void)d; if (n > ((size_t)1 << 30)) return 0x70000003;\n"
    "  *p = malloc(n); return *p ? 0 : 0x70000003; }\n"
    "R zeMemFree(void *c, void *p) { (void)c; free(p); return 0; }\n"
    "R zeCommandListCreateImmediate(void *c, void *d, const void *desc, void **l) {\n"
    "  (void)c; (void)d; const uint32_t *q = desc;\n"
    "  if (q[0] != 0xe || q[7] != 1) return 0x78000004; *l = &list; return 0; }\n"
    "R zeCommandListAppendMemoryCopy(void *l, void *d, const void *s, size_t n, void *e,\n"
    "  uint32_t nw, void **w) { (void)l; (void)e; (void)nw; (void)w; memmove(d, s, n);\n"
    "  return 0; }\n"
    "R zeCommandListDestroy(void *l) { (void)l; return 0; }\n";

// After the listing and opening tests, as the hip one.
RG_TEST(devices_stand_in_level_zero_runs_memory_and_copies) {
  rg_device_info_t list[RG_DEVICES_MAX];
  size_t n = 0;
  int np;
  RG_REQUIRE_OK(rg_devices_list(list, RG_DEVICES_MAX, &n));
  if (!entries_for(list, n, "level_zero", &np)) RG_SKIP("a Level Zero loader is loaded here");
  const char *src = rg_test_write(t, "fake_ze.c", fake_ze_src);
  char lib[512], cmd[1200];
  snprintf(lib, sizeof lib, "%s/libfakeze.so", rg_test_tmpdir(t));
  snprintf(cmd, sizeof cmd, "cc -shared -fPIC -O0 -o '%s' '%s' 2>/dev/null", lib, src);
  if (system(cmd) != 0) RG_SKIP("no C compiler (cc) to build a stand-in libze_loader");
  setenv("RIDGE_LEVEL_ZERO_LIBRARY", lib, 1);
  RG_REQUIRE_OK(rg_devices_list(list, RG_DEVICES_MAX, &n));
  RG_CHECK(entries_for(list, n, "level_zero", &np) == NULL && np == 1);
  rg_device_t *dev;
  RG_REQUIRE_OK(rg_device_open("level_zero", 0, NULL, &dev));
  const rg_device_info_t *info = rg_device_info(dev);
  RG_CHECK(!strcmp(info->name, "Intel(R) Data Center GPU Max 1100"));
  RG_CHECK(info->memory == (uint64_t)48 << 30 && info->compute_units == 8 * 8 * 4);

  // Device memory and copies, through synchronous immediate command lists.
  rg_buffer_t *b, *big;
  RG_REQUIRE_OK(rg_buffer_alloc(dev, 1024, &b));
  RG_CHECK(rg_buffer_host_ptr(b) == NULL);
  unsigned char in[100], out[100];
  for (int i = 0; i < 100; i++) in[i] = (unsigned char)(i * 5 + 1);
  RG_CHECK_OK(rg_buffer_write(b, 0, in, sizeof in));
  rg_queue_t *q;
  RG_REQUIRE_OK(rg_queue_create(dev, &q));
  RG_CHECK_OK(rg_queue_copy(q, b, 500, b, 0, sizeof in));
  RG_CHECK_OK(rg_queue_read(q, b, 500, out, sizeof out));
  RG_CHECK(!memcmp(in, out, sizeof in));
  RG_CHECK_ERR(rg_buffer_alloc(dev, (size_t)2 << 30, &big),
               "cannot allocate 2 GiB (2147483648 bytes) on level_zero:0: zeMemAllocDevice failed: "
               "ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY");
  // To and from another device: staged through the host by the queue.
  rg_device_t *cpu;
  RG_REQUIRE_OK(rg_device_open("cpu", 0, NULL, &cpu));
  rg_buffer_t *hb;
  RG_REQUIRE_OK(rg_buffer_alloc(cpu, 100, &hb));
  RG_CHECK_OK(rg_queue_copy(q, hb, 0, b, 500, 100));
  RG_CHECK(!memcmp(rg_buffer_host_ptr(hb), in, sizeof in));

  // No kernels, and every op says why.
  RG_CHECK(!rg_device_supports_op(dev, RG_OP_MATMUL));
  rg_op_t add = {.kind = RG_OP_ADD, .add = {{b, 0}, {b, 0}, {b, 0}, 16}};
  RG_CHECK_ERR(rg_queue_submit(q, &add),
               "level_zero:0 has no add kernel: no kernels built (ridge has no SPIR-V toolchain");
  rg_buffer_release(hb);
  rg_device_close(cpu);
  rg_buffer_release(b);
  rg_queue_destroy(q);
  rg_device_close(dev);
  unsetenv("RIDGE_LEVEL_ZERO_LIBRARY");
}

// Op timing: nothing until asked for, then calls and time by op kind, on the
// CPU and (where one opens) on an OpenCL device, whose queue is asynchronous.
static void check_op_profile(rg_test_ctx_t *t, rg_device_t *dev) {
  rg_queue_t *q;
  RG_REQUIRE_OK(rg_queue_create(dev, &q));
  rg_buffer_t *b;
  RG_REQUIRE_OK(rg_buffer_alloc(dev, 1 << 16, &b));
  RG_CHECK_OK(rg_queue_write(q, b, 0, (float[4]){1, 2, 3, 4}, 16));
  rg_op_t add = {.kind = RG_OP_ADD, .add = {{b, 0}, {b, 0}, {b, 0}, 4}};
  RG_CHECK_OK(rg_queue_submit(q, &add));
  rg_op_profile_t p;
  rg_queue_op_profile(q, &p);
  for (int k = 0; k < RG_OP_COUNT; k++) RG_CHECK(p.calls[k] == 0 && p.seconds[k] == 0);
  rg_queue_set_profiling(q, 1);
  for (int i = 0; i < 3; i++) RG_CHECK_OK(rg_queue_submit(q, &add));
  rg_op_t bad = {.kind = RG_OP_ADD, .add = {{b, 0}, {b, 0}, {b, 0}, 1 << 20}};
  RG_CHECK_ERR(rg_queue_submit(q, &bad), "bytes");  // refused ops are not counted
  rg_queue_op_profile(q, &p);
  RG_CHECK(p.calls[RG_OP_ADD] == 3 && p.seconds[RG_OP_ADD] > 0);
  for (int k = 0; k < RG_OP_COUNT; k++)
    if (k != RG_OP_ADD) RG_CHECK(p.calls[k] == 0);
  float got[4];
  RG_CHECK_OK(rg_queue_read(q, b, 0, got, sizeof got));
  RG_CHECK_OK(rg_queue_wait(q));        // an OpenCL read is queued
  if (!(got[0] == 16 && got[3] == 64))  // x * 2^4: all four adds ran
    rg_test_fail(t, __FILE__, __LINE__, "%s: got %g %g %g %g, want 16 32 48 64",
                 rg_device_info(dev)->name, got[0], got[1], got[2], got[3]);
  rg_queue_op_profile_reset(q);
  rg_queue_op_profile(q, &p);
  RG_CHECK(p.calls[RG_OP_ADD] == 0 && p.seconds[RG_OP_ADD] == 0);
  rg_buffer_release(b);
  rg_queue_destroy(q);
}

RG_TEST(devices_queue_times_ops_by_kind_when_asked) {
  rg_device_t *dev;
  RG_REQUIRE_OK(rg_device_open("cpu", 0, NULL, &dev));
  check_op_profile(t, dev);
  rg_device_close(dev);
  rg_status_t s = rg_device_open("opencl", 0, NULL, &dev);
  if (!s) {
    check_op_profile(t, dev);
    rg_device_close(dev);
  }
  rg_status_free(s);
}
