// Tests of the device HAL (devices/devices.h) and `ridge devices`: the CPU
// device's threads and queue, buffers and their bounds, the null backend,
// what rg_devices_list reports on whatever machine runs the tests (never
// assuming a GPU), and the cuda backend end to end against a stand-in
// libcuda built here, so its probe, error conversion, buffers and queues run
// without NVIDIA hardware.
#include <cjson/cJSON.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "devices/backend.h"
#include "devices/devices.h"
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
// does; anything else shows one H100 whose allocations above 1 GiB fail.
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
    "  return *s ? 0 : 1; }\n";

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
  RG_CHECK(rg_device_supports_op(dev, RG_OP_MATMUL) == 0);

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
