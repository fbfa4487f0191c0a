// ops/opencl/opencl_sources.h — the OpenCL C source of ridge's kernels,
// carried in the binary. The build turns each ops/opencl/<name>.cl into an
// entry here (see CMakeLists.txt); the opencl backend (devices/opencl)
// compiles them for each device at first use and caches the result.
//
// "common" (element-type codecs, operand addressing, the error word) is
// prepended to every other file to make one program. The sources expect the
// host to define RG_T_* (element types), RG_E_* (error codes) and the
// RG_MOE_* routing modes with -D from its own tables.
//
// Ownership: entries are static and live for the process.
#ifndef RG_OPS_OPENCL_OPENCL_SOURCES_H
#define RG_OPS_OPENCL_OPENCL_SOURCES_H

#include <stddef.h>

typedef struct {
  const char *name;  // the file's name without .cl: "matmul"
  const char *text;  // its bytes, NUL-terminated
  size_t len;        // without the NUL
} rg_cl_source_t;

// The entry for name, or NULL.
const rg_cl_source_t *rg_cl_source_find(const char *name);
size_t rg_cl_source_count(void);
const rg_cl_source_t *rg_cl_source_at(size_t i);  // NULL past the end

// The generated table (opencl_kernels.c in the build folder).
extern const rg_cl_source_t rg__cl_sources[];
extern const size_t rg__cl_source_count;

#endif  // RG_OPS_OPENCL_OPENCL_SOURCES_H
