// Lookups into the kernel sources the build embedded (opencl_sources.h).
#include "ops/opencl/opencl_sources.h"

#include <string.h>

size_t rg_cl_source_count(void) {
  return rg__cl_source_count;
}

const rg_cl_source_t *rg_cl_source_at(size_t i) {
  return i < rg__cl_source_count ? &rg__cl_sources[i] : NULL;
}

const rg_cl_source_t *rg_cl_source_find(const char *name) {
  for (size_t i = 0; name && i < rg__cl_source_count; i++)
    if (!strcmp(rg__cl_sources[i].name, name)) return &rg__cl_sources[i];
  return NULL;
}
