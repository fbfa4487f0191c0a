// libFuzzer target for the config loaders: arbitrary bytes as a YAML or JSON
// document, then as a device class, fleet, workload, model and placement.
// Every input must end in OK or a status, never a crash, leak or hang.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/yaml.h"
#include "tests/fuzz/fuzz_memfd.h"
#include "graphs/graphs.h"
#include "planner/planner.h"

static rg_catalog_t *cat;

static void drop(rg_status_t s) { rg_status_free(s); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!cat) {
    const char *dir = getenv("RIDGE_CONFIG_DIR");
    rg_status_t s = rg_catalog_load(dir ? dir : RIDGE_SOURCE_DIR "/configs", &cat);
    if (s) abort();  // the shipped catalog must load
  }
  // The first byte picks the format, so the fuzzer explores both.
  int json = size > 0 && (data[0] & 1);
  rg_doc_t *doc = NULL;
  drop(rg_doc_load_string(json ? "fuzz.json" : "fuzz.yaml", (const char *)data, size, json, &doc));
  rg_doc_destroy(doc);

  // The file-based loaders read a memfd through /proc so nothing touches disk.
  char path[64];
  int fd = rg_fuzz_memfd("fuzz", data, size, path, sizeof path);
  if (fd < 0) return 0;
  const char *dir = cat->dir;
  rg_device_class_t *dc = NULL;
  drop(rg_device_class_load(path, &dc));
  free(dc);
  rg_fleet_t *fl = NULL;
  drop(rg_fleet_load(path, dir, cat, &fl));
  rg_fleet_destroy(fl);
  rg_workload_t *wl = NULL;
  drop(rg_workload_load(path, dir, &wl));
  rg_workload_destroy(wl);
  rg_arch_t *arch = NULL;
  drop(rg_model_load(path, dir, &arch));
  rg_arch_destroy(arch);
  rg_fleet_t *local = NULL;
  if (!rg_fleet_load("local", dir, cat, &local)) {
    rg_plan_request_t *req = calloc(1, sizeof(*req));
    rg_placement_meta_t meta;
    memset(&meta, 0, sizeof meta);
    if (req) {
      req->fleet = local;
      drop(rg_placement_load(path, cat, req, &meta));
    }
    free(req);
  }
  rg_fleet_destroy(local);
  close(fd);
  return 0;
}
