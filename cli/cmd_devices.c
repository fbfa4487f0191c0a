// cli/cmd_devices.c — `ridge devices`: what this machine has, as ridge's
// device backends find it at run time. One line per device found (driver,
// index, name, memory, cores or compute units, features, and the catalog
// class `ridge plan` would use for it), then one line per driver looked for
// and not found, with the reason. The CPU device is opened (with --threads)
// to show it starts, and every other device found is opened to show whether
// it can be used and how many of the HAL's ops it runs.
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/units.h"
#include "cli/cli.h"
#include "cli/output.h"
#include "devices/devices.h"
#include "planner/planner.h"

#define CMD "devices"

static void usage(FILE *f) {
  fprintf(f,
          "usage: ridge devices [--threads N] [--json]\n"
          "\n"
          "Lists the devices on this machine as ridge's backends find them when it runs: one\n"
          "line per device (driver:index, name, memory, cores or compute units, features such\n"
          "as avx512_bf16 or sm_90 bf16 fp8, and the device class in configs/devices whose\n"
          "roofline `ridge plan` uses for it), then one line per driver looked for and not\n"
          "found, with the reason: no vendor library, a library without a driver, no device,\n"
          "a driver too old. Vendor libraries (libcuda.so.1, libamdhip64.so, libze_loader.so.1,\n"
          "libOpenCL.so.1) are loaded with dlopen, so one ridge binary runs on any machine and\n"
          "says \"not present\" where a vendor's driver is missing.\n"
          "\n"
          "  --threads N  threads the CPU device runs kernels on (default 0: one per core this\n"
          "               process may use); the CPU device is opened with N to show it starts\n"
          "  --json       machine-readable output\n"
          "\n"
          "Every device found other than the CPU is opened to show it can be used: its note\n"
          "reads e.g. \"opens; runs 15 of 15 ops\" (how many of the HAL's ops it has kernels\n"
          "for), or \"cannot open:\" and the reason.\n"
          "\n"
          "The null driver's device is always present and does no work: it is the template\n"
          "for new backends and a test double. A class marked \"(not in catalog)\" is ridge's\n"
          "guess at a class configs/devices lacks; add a class file to plan with that device.\n"
          "\n"
          "Environment: RIDGE_CUDA_LIBRARY, RIDGE_HIP_LIBRARY, RIDGE_LEVEL_ZERO_LIBRARY and\n"
          "RIDGE_OPENCL_LIBRARY name a vendor library to load in place of the usual one.\n"
          "\n"
          "example: ridge devices --threads 4 --json\n");
}

// Whether a device's class hint names a class in the catalog: 1 yes, 0 no,
// -1 when there is no hint or the catalog could not be read.
static int class_known(const rg_catalog_t *cat, const rg_device_info_t *d) {
  if (!d->class_hint[0] || !cat) return -1;
  return rg_catalog_find(cat, d->class_hint) != NULL;
}

// What opening a vendor device showed: whether it opens, and how many of
// the HAL's ops it has kernels for (or why it does not open).
typedef struct {
  int tried, opens, ops;
  char error[256];
} open_check_t;

static void check_open(const rg_device_info_t *d, open_check_t *c) {
  memset(c, 0, sizeof(*c));
  if (!strcmp(d->driver, "cpu") || !strcmp(d->driver, "null")) return;
  c->tried = 1;
  rg_device_t *dev = NULL;
  rg_status_t s = rg_device_open(d->driver, d->index, NULL, &dev);
  if (s) {
    snprintf(c->error, sizeof(c->error), "%s", rg_status_message(s));
    rg_status_free(s);
    return;
  }
  c->opens = 1;
  for (int k = 0; k < RG_OP_COUNT; k++) c->ops += rg_device_supports_op(dev, (rg_op_kind_t)k);
  rg_device_close(dev);
}

// Threads of the opened CPU device, for the device entry `d` (0 for others).
static int threads_of(const rg_device_info_t *d, const rg_device_t *cpu) {
  if (!cpu || strcmp(d->driver, "cpu") || d->index != 0) return 0;
  return rg_pool_threads(rg_device_cpu_pool(cpu));
}

static rg_status_t print_text(const rg_device_info_t *list, const open_check_t *opened, size_t n,
                              const rg_catalog_t *cat, const char *cat_error,
                              const rg_device_t *cpu) {
  static const char *const heads[] = {"device",   "name",  "memory", "cores/CUs",
                                      "features", "class", "note"};
  rg_table_t tb;
  rg_table_init(&tb, 7, heads, "llrrlll");
  size_t n_found = 0, n_absent = 0;
  int unknown_class = 0;
  char b[64];
  for (size_t i = 0; i < n; i++) {
    const rg_device_info_t *d = &list[i];
    if (!d->present) {
      n_absent++;
      continue;
    }
    n_found++;
    rg_table_cell(&tb, "%s:%d", d->driver, d->index);
    rg_table_cell(&tb, "%s", d->name[0] ? d->name : "-");
    rg_table_cell(&tb, "%s", d->memory ? rg_fmt_bytes_iec((double)d->memory, b, sizeof(b)) : "-");
    if (d->compute_units > 0)
      rg_table_cell(&tb, "%d", d->compute_units);
    else
      rg_table_cell(&tb, "-");
    rg_table_cell(&tb, "%s", d->features[0] ? d->features : "-");
    int known = class_known(cat, d);
    if (known == 0) unknown_class = 1;
    rg_table_cell(&tb, "%s%s", d->class_hint[0] ? d->class_hint : "-",
                  known == 0 ? " (not in catalog)" : "");
    int threads = threads_of(d, cpu);
    if (threads)
      rg_table_cell(&tb, "runs kernels on %d thread%s", threads, threads == 1 ? "" : "s");
    else if (!strcmp(d->driver, "null"))
      rg_table_cell(&tb, "%s", d->detail);
    else if (opened[i].opens)
      rg_table_cell(&tb, "opens; runs %d of %d ops", opened[i].ops, (int)RG_OP_COUNT);
    else if (opened[i].tried)
      rg_table_cell(&tb, "cannot open: %s", opened[i].error);
    else
      rg_table_cell(&tb, "%s", "");
  }
  printf("Devices found (%zu):\n", n_found);
  rg_status_t s = rg_table_print(&tb, stdout, 2);
  rg_table_deinit(&tb);
  RG_RETURN_IF_ERROR(s);

  if (n_absent) {
    static const char *const aheads[] = {"driver", "reason"};
    rg_table_t ta;
    rg_table_init(&ta, 2, aheads, "ll");
    for (size_t i = 0; i < n; i++)
      if (!list[i].present) {
        rg_table_cell(&ta, "%s", list[i].driver);
        rg_table_cell(&ta, "%s", list[i].reason);
      }
    printf("\nDrivers looked for and not present (%zu):\n", n_absent);
    s = rg_table_print(&ta, stdout, 2);
    rg_table_deinit(&ta);
    RG_RETURN_IF_ERROR(s);
  }
  printf(
      "\nclass: the configs/devices class whose roofline `ridge plan` uses for the device "
      "(ridge catalog NAME).\n");
  if (unknown_class)
    printf(
        "(not in catalog): ridge's guess at a class configs/devices lacks; add a class file to "
        "plan with it.\n");
  if (cat_error) printf("Classes unchecked: the catalog could not be read (%s).\n", cat_error);
  printf("Details: ridge devices --json\n");
  return NULL;
}

static rg_status_t print_json(const rg_device_info_t *list, const open_check_t *opened, size_t n,
                              const rg_catalog_t *cat, const rg_device_t *cpu) {
  int bad = 0;
  cJSON *root = cJSON_CreateObject();
  if (!root) bad = 1;
  cJSON *devs = rg_json_arr(root, "devices", &bad);
  cJSON *absent = rg_json_arr(root, "not_present", &bad);
  for (size_t i = 0; i < n; i++) {
    const rg_device_info_t *d = &list[i];
    const rg_driver_t *drv = rg_driver_find(d->driver);
    if (!d->present) {
      cJSON *e = rg_json_push_obj(absent, &bad);
      rg_json_str(e, "driver", d->driver, &bad);
      rg_json_str(e, "description", rg_driver_description(drv), &bad);
      rg_json_str(e, "reason", d->reason, &bad);
      continue;
    }
    cJSON *e = rg_json_push_obj(devs, &bad);
    char id[40];
    snprintf(id, sizeof(id), "%s:%d", d->driver, d->index);
    rg_json_str(e, "id", id, &bad);
    rg_json_str(e, "driver", d->driver, &bad);
    rg_json_num(e, "index", d->index, &bad);
    rg_json_str(e, "name", d->name, &bad);
    rg_json_num(e, "memory", (double)d->memory, &bad);
    rg_json_num(e, "compute_units", d->compute_units, &bad);
    cJSON *feats = rg_json_arr(e, "features", &bad);
    char words[sizeof(d->features)];
    snprintf(words, sizeof(words), "%s", d->features);
    char *save = NULL;
    for (char *w = strtok_r(words, " ", &save); w && feats; w = strtok_r(NULL, " ", &save)) {
      cJSON *str = cJSON_CreateString(w);
      if (!str || !cJSON_AddItemToArray(feats, str)) {
        cJSON_Delete(str);
        bad = 1;
      }
    }
    if (d->class_hint[0])
      rg_json_str(e, "class", d->class_hint, &bad);
    else
      rg_json_null(e, "class", &bad);
    int known = class_known(cat, d);
    if (known < 0)
      rg_json_null(e, "class_in_catalog", &bad);
    else
      rg_json_bool(e, "class_in_catalog", known, &bad);
    int threads = threads_of(d, cpu);
    if (threads) rg_json_num(e, "threads", threads, &bad);
    if (opened[i].tried) {
      rg_json_bool(e, "opens", opened[i].opens, &bad);
      if (opened[i].opens)
        rg_json_num(e, "ops", opened[i].ops, &bad);
      else
        rg_json_str(e, "open_error", opened[i].error, &bad);
    }
    rg_json_str(e, "detail", d->detail, &bad);
  }
  return rg_json_emit(root, bad, stdout);
}

int rg_cmd_devices(int argc, char **argv, const rg_cli_common_t *common) {
  enum { O_THREADS = 1000, O_JSON, O_HELP };
  static const struct option longs[] = {
      {"threads", required_argument, NULL, O_THREADS},
      {"json", no_argument, NULL, O_JSON},
      {"help", no_argument, NULL, O_HELP},
      {NULL, 0, NULL, 0},
  };
  int json = common->json;
  long long threads = 0;
  rg_cli_getopt_reset();
  int c;
  while ((c = getopt_long(argc, argv, ":h", longs, NULL)) != -1) {
    switch (c) {
      case O_THREADS: {
        rg_status_t s = rg_parse_count("--threads", optarg, 0, &threads);
        if (!s && threads > 1024)
          s = rg_status_make(RG_INVALID_ARGUMENT,
                             "--threads must be at most 1024, got '%s' (0 means one per core)",
                             optarg);
        if (s) return rg_cli_fail(CMD, s);
        break;
      }
      case O_JSON:
        json = 1;
        break;
      case 'h':
      case O_HELP:
        usage(stdout);
        return 0;
      default:
        return rg_cli_fail(CMD, rg_cli_getopt_error(c, argv, longs));
    }
  }
  if (optind < argc)
    return rg_cli_fail(CMD, rg_status_make(RG_INVALID_ARGUMENT,
                                           "takes no device names, got '%s' (see ridge devices "
                                           "--help)",
                                           argv[optind]));

  // The catalog only checks class hints; a machine without configs still
  // gets its device list.
  rg_catalog_t *cat = NULL;
  char *cat_error = NULL;
  rg_status_t s = rg_catalog_load(common->config_dir, &cat);
  if (s) {
    cat_error = strdup(rg_status_message(s));
    rg_status_free(s);
    cat = NULL;
  }

  rg_device_t *cpu = NULL;
  rg_device_info_t *list = calloc(RG_DEVICES_MAX, sizeof(*list));
  open_check_t *opened = calloc(RG_DEVICES_MAX, sizeof(*opened));
  size_t n = 0;
  s = list && opened ? NULL : rg_status_make(RG_OUT_OF_MEMORY, "out of memory listing devices");
  if (!s) s = rg_devices_list(list, RG_DEVICES_MAX, &n);
  if (n > RG_DEVICES_MAX) n = RG_DEVICES_MAX;
  for (size_t i = 0; !s && i < n; i++)
    if (list[i].present) check_open(&list[i], &opened[i]);
  if (!s) {
    rg_device_options_t opts = {.threads = (int)threads};
    s = rg_device_open("cpu", 0, &opts, &cpu);
    if (s && threads) s = rg_status_wrap(s, "--threads %lld", threads);
  }
  if (!s)
    s = json ? print_json(list, opened, n, cat, cpu)
             : print_text(list, opened, n, cat, cat_error && cat_error[0] ? cat_error : NULL, cpu);
  rg_device_close(cpu);
  free(opened);
  free(list);
  free(cat_error);
  if (cat) rg_catalog_destroy(cat);
  return rg_cli_fail(CMD, s);
}
