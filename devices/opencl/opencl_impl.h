// devices/opencl/opencl_impl.h — the opencl backend's private types, shared
// by its files. Not part of the HAL's interface (tests/test_opencl.c reads it
// to reach the program cache).
//
// Objects and who holds what:
//
//   rg__cl_context_t  one per OpenCL device, made at its first open and kept
//                     for the process (as CUDA keeps a primary context): the
//                     cl_context and the programs built for it, so a device
//                     opened again, or by another engine, builds nothing.
//   rg__cl_device_t   an opened device (rg_device_t): borrows its context and
//                     owns a queue for the synchronous buffer reads and writes.
//   rg__cl_buffer_t   a cl_mem (NULL for an empty buffer).
//   rg__cl_queue_t    an in-order cl_command_queue, its kernels (cl_kernel
//                     objects are not safe to set arguments on from two
//                     threads, so each queue makes its own from the shared
//                     programs) and its error word: 4 ints the kernels write
//                     when they clamp bad metadata, read at rg_queue_wait.
//   rg__cl_event_t    a marker cl_event and the context it belongs to.
#ifndef RG_DEVICES_OPENCL_OPENCL_IMPL_H
#define RG_DEVICES_OPENCL_OPENCL_IMPL_H

#include <pthread.h>

#include "devices/backend.h"
#include "devices/opencl/opencl_api.h"

// ----- Programs and kernels ------------------------------------------------------

// X(enum suffix, source file in ops/opencl): one program each, built with
// common.cl in front.
#define RG_CL_PROGRAM_MAP(X) \
  X(MATMUL, "matmul")        \
  X(ATTENTION, "attention")  \
  X(ROWS, "rows")            \
  X(MOE, "moe")              \
  X(TABLES, "tables")        \
  X(SAMPLE, "sample")        \
  X(PROFILE, "profile")

typedef enum {
#define RG_X_(e, file) RG__CLP_##e,
  RG_CL_PROGRAM_MAP(RG_X_)
#undef RG_X_
      RG__CLP_COUNT
} rg__cl_prog_t;

// X(enum suffix, program, kernel name in the source).
#define RG_CL_KERNEL_MAP(X)                              \
  X(GEMV1_F32, MATMUL, "matmul_gemv1_f32")               \
  X(GEMV4_F32, MATMUL, "matmul_gemv4_f32")               \
  X(GEMV8_F32, MATMUL, "matmul_gemv8_f32")               \
  X(GEMM_F32, MATMUL, "matmul_gemm_f32")                 \
  X(RGEMM_F32, MATMUL, "matmul_rgemm_f32")               \
  X(GEMV1_BF16, MATMUL, "matmul_gemv1_bf16")             \
  X(GEMV4_BF16, MATMUL, "matmul_gemv4_bf16")             \
  X(GEMV8_BF16, MATMUL, "matmul_gemv8_bf16")             \
  X(GEMM_BF16, MATMUL, "matmul_gemm_bf16")               \
  X(RGEMM_BF16, MATMUL, "matmul_rgemm_bf16")             \
  X(GEMV1_F16, MATMUL, "matmul_gemv1_f16")               \
  X(GEMV4_F16, MATMUL, "matmul_gemv4_f16")               \
  X(GEMV8_F16, MATMUL, "matmul_gemv8_f16")               \
  X(GEMM_F16, MATMUL, "matmul_gemm_f16")                 \
  X(RGEMM_F16, MATMUL, "matmul_rgemm_f16")               \
  X(GEMV1_Q8_0, MATMUL, "matmul_gemv1_q8_0")             \
  X(GEMV4_Q8_0, MATMUL, "matmul_gemv4_q8_0")             \
  X(GEMV8_Q8_0, MATMUL, "matmul_gemv8_q8_0")             \
  X(GEMM_Q8_0, MATMUL, "matmul_gemm_q8_0")               \
  X(RGEMM_Q8_0, MATMUL, "matmul_rgemm_q8_0")             \
  X(KV_WRITE, ATTENTION, "kv_write")                     \
  X(ATTENTION_F32, ATTENTION, "attention_f32")           \
  X(ATTENTION_BF16, ATTENTION, "attention_bf16")         \
  X(ATTENTION_F16, ATTENTION, "attention_f16")           \
  X(ATTENTION_CPU_F32, ATTENTION, "attention_cpu_f32")   \
  X(ATTENTION_CPU_BF16, ATTENTION, "attention_cpu_bf16") \
  X(ATTENTION_CPU_F16, ATTENTION, "attention_cpu_f16")   \
  X(RMSNORM, ROWS, "rmsnorm")                            \
  X(ROPE, ROWS, "rope")                                  \
  X(SOFTMAX, ROWS, "softmax")                            \
  X(SWIGLU, ROWS, "swiglu")                              \
  X(ADD, ROWS, "add")                                    \
  X(MOE_ROUTE, MOE, "moe_route")                         \
  X(MOE_GROUP, MOE, "moe_group")                         \
  X(MOE_GATHER, MOE, "moe_gather")                       \
  X(MOE_SCATTER_ADD, MOE, "moe_scatter_add")             \
  X(EMBED, TABLES, "embed")                              \
  X(CONVERT, TABLES, "convert")                          \
  X(ARGMAX, SAMPLE, "argmax")                            \
  X(STREAM_READ, PROFILE, "stream_read")                 \
  X(STREAM_WRITE, PROFILE, "stream_write")               \
  X(FMA_PEAK, PROFILE, "fma_peak")

typedef enum {
#define RG_X_(e, prog, name) RG__CLK_##e,
  RG_CL_KERNEL_MAP(RG_X_)
#undef RG_X_
      RG__CLK_COUNT
} rg__cl_kernel_id_t;

// What kernels report through the error word: X(enum suffix, message with
// the word's three figures in order). The host passes the numbers to the
// kernels with -D, so the two sides share this one table.
#define RG_CL_FAULT_MAP(X)                                                                    \
  X(SEQ, "token %d belongs to sequence %d, but the batch has %d sequences")                   \
  X(TABLE_OFF, "sequence %d's block table ends at %d, outside 0 .. %d (table_off must rise)") \
  X(POS, "token %d is at position %d, outside the %d positions its block table holds")        \
  X(BLOCK, "block table entry %d is block %d, outside the layer's %d blocks")                 \
  X(EXPERT, "token %d slot %d routes to expert %d, outside the experts")                      \
  X(PAIR, "row %d names pair %d, outside the %d (token, slot) pairs")                         \
  X(TOKEN, "the token id at index %d is %d, outside the vocabulary of %d tokens")             \
  X(Q8_VALUE, "q8_0 block %d: value %d of the block is not finite, which q8_0 cannot hold")   \
  X(Q8_SCALE, "q8_0 block %d: its scale overflows f16 (magnitudes up to 127 * 65504 fit)")

typedef enum {
  RG__CLE_NONE = 0,
#define RG_X_(e, msg) RG__CLE_##e,
  RG_CL_FAULT_MAP(RG_X_)
#undef RG_X_
      RG__CLE_COUNT
} rg__cl_fault_t;

// Where a program came from, for tests and reports.
typedef enum {
  RG__CL_FROM_SOURCE,  // compiled from the embedded OpenCL C
  RG__CL_FROM_DISK,    // a binary the disk cache held for this device
  RG__CL_FROM_MEMORY,  // already built in this process
} rg__cl_origin_t;

// ----- Objects ---------------------------------------------------------------------

typedef struct {
  rg_cl_device_id id;
  rg_cl_platform_id platform;
  rg_cl_context ctx;
  char name[128], driver_version[64], device_version[128], platform_version[128];
  uint64_t max_alloc;  // CL_DEVICE_MAX_MEM_ALLOC_SIZE
  uint64_t local_mem;  // CL_DEVICE_LOCAL_MEM_SIZE
  size_t max_wg;       // CL_DEVICE_MAX_WORK_GROUP_SIZE
  int is_cpu;
  int has_fma;  // CL_FP_FMA: fma() is one instruction, not a library call
  // 1: kernels take their CPU-device shapes (register-blocked GEMM, one
  // contiguous stream per work-item); starts as is_cpu. Tests flip it to run
  // the GPU shapes on a CPU platform.
  int cpu_shapes;
  // 1: programs are cached on disk (opencl_program.c says when not).
  int disk_cache;
  pthread_mutex_t mu;  // guards the programs
  rg_cl_program programs[RG__CLP_COUNT];
  rg__cl_origin_t origin[RG__CLP_COUNT];  // how each was first obtained
  double build_seconds[RG__CLP_COUNT];    // how long that took
} rg__cl_context_t;

typedef struct {
  rg_device_t base;
  const rg_cl_syms_t *cl;
  rg__cl_context_t *cx;  // borrowed: lives for the process
  pthread_mutex_t xfer_mu;
  rg_cl_command_queue xfer;  // synchronous buffer reads and writes
} rg__cl_device_t;

typedef struct {
  rg_buffer_t base;
  rg_cl_mem mem;  // NULL for an empty buffer
} rg__cl_buffer_t;

typedef struct {
  rg_queue_t base;
  rg_cl_command_queue q;
  rg_cl_mem err;  // (4) int: fault, then three figures
  rg_cl_kernel kernels[RG__CLK_COUNT];
} rg__cl_queue_t;

typedef struct {
  rg_event_t base;
  rg_cl_event ev;
  rg__cl_context_t *cx;
} rg__cl_event_t;

// ----- Shared functions -------------------------------------------------------------

// The loaded ICD loader (loading it on first use).
RG_MUST_USE rg_status_t rg__cl_load(const rg_cl_syms_t **out);
// Every device of every platform, in the order probe numbers them; up to cap
// ids and their platforms into devs/plats, *out_n the total.
RG_MUST_USE rg_status_t rg__cl_enumerate(const rg_cl_syms_t *cl, rg_cl_device_id *devs,
                                         rg_cl_platform_id *plats, size_t cap, size_t *out_n);
// The driver's open slot (opencl_device.c).
RG_MUST_USE rg_status_t rg__cl_device_open(rg_driver_t *drv, const rg_device_info_t *info,
                                           const rg_device_options_t *opts, rg_device_t **out);

// The program p for the device's context, built at first use (from the
// disk cache when it holds one for this device, else from source, then
// saved there) and kept for the process. *origin (optional) says how this
// call got it.
RG_MUST_USE rg_status_t rg__cl_program(rg__cl_device_t *d, rg__cl_prog_t p, rg_cl_program *out,
                                       rg__cl_origin_t *origin);
// Builds program p for cx afresh, using cache_dir (NULL or "": no disk
// cache) as rg__cl_program does, without touching cx's programs. The
// caller releases *out. For tests of the cache.
RG_MUST_USE rg_status_t rg__cl_program_build(const rg_cl_syms_t *cl, rg__cl_context_t *cx,
                                             rg__cl_prog_t p, const char *cache_dir,
                                             rg_cl_program *out, rg__cl_origin_t *origin);
// Whether programs of a platform named `platform` are cached on disk:
// RIDGE_OPENCL_DISK_CACHE=0 or 1 decides when set; otherwise yes, except on
// PoCL (see opencl_program.c).
int rg__cl_disk_cache_default(const char *platform);
// ${XDG_CACHE_HOME:-$HOME/.cache}/ridge/opencl into buf, or "" when neither
// variable is set.
const char *rg__cl_cache_dir(char *buf, size_t len);
// The file the disk cache keeps program p in for cx (under cache_dir).
RG_MUST_USE rg_status_t rg__cl_cache_path(rg__cl_context_t *cx, rg__cl_prog_t p,
                                          const char *cache_dir, char *buf, size_t len);
// Queue q's kernel k, created from its program at first use.
RG_MUST_USE rg_status_t rg__cl_kernel(rg__cl_queue_t *q, rg__cl_kernel_id_t k, rg_cl_kernel *out);
const char *rg__cl_kernel_name(rg__cl_kernel_id_t k);

// The device slots (opencl_ops.c).
int rg__cl_supports_op(rg_device_t *dev, rg_op_kind_t op);
RG_MUST_USE rg_status_t rg__cl_check_op(rg_device_t *dev, const rg_op_t *op);
RG_MUST_USE rg_status_t rg__cl_submit(rg_queue_t *q, const rg_op_t *op);
// After q's work is done: the fault a kernel reported since the last call,
// as a status naming it (and clears it), or NULL.
RG_MUST_USE rg_status_t rg__cl_take_fault(rg__cl_queue_t *q);

// Launching a kernel: arguments in order, then the range. The first failure
// is kept and reported by rg__cl_launch, naming the kernel and argument.
typedef struct {
  const rg_cl_syms_t *cl;
  rg_cl_kernel k;
  rg__cl_kernel_id_t id;
  rg_cl_uint n;
  rg_status_t err;
} rg__cl_args_t;

RG_MUST_USE rg_status_t rg__cl_args_begin(rg__cl_queue_t *q, rg__cl_kernel_id_t id,
                                          rg__cl_args_t *a);
void rg__cl_arg_ref(rg__cl_args_t *a, const rg_ref_t *r);  // the buffer, then its offset
void rg__cl_arg_mem(rg__cl_args_t *a, rg_cl_mem m);
void rg__cl_arg_int(rg__cl_args_t *a, int64_t v);  // as a 32-bit int
void rg__cl_arg_long(rg__cl_args_t *a, int64_t v);
void rg__cl_arg_float(rg__cl_args_t *a, float v);
void rg__cl_arg_local(rg__cl_args_t *a, size_t bytes);
// Enqueues the kernel over global[0..dims) (each a multiple of local's, or
// local NULL) on q.
RG_MUST_USE rg_status_t rg__cl_launch(rg__cl_queue_t *q, rg__cl_args_t *a, rg_cl_uint dims,
                                      const size_t *global, const size_t *local);

#endif  // RG_DEVICES_OPENCL_OPENCL_IMPL_H
