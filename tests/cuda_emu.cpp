// tests/cuda_emu.cpp — a stand-in libcuda that runs ridge's CUDA kernels on
// CPU threads, so the kernels' logic (indexing, clamping, reductions, the
// online softmax, the codecs) is tested on machines without an NVIDIA GPU.
//
// What it is: ops/cuda/*.cu compiled as host C++ with the CUDA names they
// use defined here, and the part of the driver API the cuda backend calls,
// over host memory. A launch runs the grid one block at a time; a block's
// threads are fibers, so __syncthreads is a barrier and a warp shuffle is
// an exchange through memory between 32 threads at a barrier. A kernel
// whose threads disagree about a barrier (some wait where others never
// come) hangs here as it would deadlock on a GPU.
//
// What it is not: a GPU. It proves nothing about timing, the memory model,
// occupancy, register pressure, or what nvcc makes of the sources; the
// device it shows is named as an emulation, and the tests that use it say
// so. Results are computed by the kernels themselves: nothing is faked.
//
// Loaded through RIDGE_CUDA_LIBRARY by the tests (tests/test_cuda.c), in a
// child process, since a process keeps the first libcuda it loads.
#include <ucontext.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

using std::isfinite;
using std::isnan;

// ----- The CUDA C names the kernels use ----------------------------------------------

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
};
struct alignas(16) float4 {
  float x, y, z, w;
};
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};

// A block's threads are fibers (ucontext) on one OS thread, switched only
// at barriers: a thread runs until it waits at __syncthreads, a warp
// barrier or a shuffle, then the next runnable one runs. Deterministic, and
// a thousand times cheaper than OS threads for blocks of 1024.
namespace {
struct barrier_t {
  int expected = 0, arrived = 0;
  unsigned gen = 0;
};
struct fiber_t {
  void *sp = nullptr;  // where it waits (x86-64 switch)
  ucontext_t uc;       // elsewhere: swapcontext, slower
  int done = 0;
};
struct block_t {
  barrier_t bar;
  std::vector<barrier_t> warp_bars;
  std::vector<std::array<uint64_t, 32>> slots;
  std::vector<unsigned char> dynamic_shared;
  std::vector<fiber_t> fibers;
  void *sched_sp = nullptr;
  ucontext_t sched_uc;
  int cur = 0;
};
block_t *cur_block;
int cur_lane, cur_warp;
}  // namespace

// A context switch of a few instructions: the callee-saved registers on
// the old stack, its pointer saved, the new one loaded. swapcontext makes
// a system call per switch, and the sanitizers intercept longjmp; a warp
// shuffle is 64 switches.
#if defined(__x86_64__)
__asm__(
    ".text\n"
    ".globl rg_emu_switch\n"
    ".hidden rg_emu_switch\n"
    ".type rg_emu_switch,@function\n"
    "rg_emu_switch:\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
    "  ret\n"
    ".size rg_emu_switch, .-rg_emu_switch\n");
extern "C" void rg_emu_switch(void **save_sp, void *to_sp);
#endif

namespace {
void yield_to_scheduler() {
  fiber_t &f = cur_block->fibers[cur_block->cur];
#if defined(__x86_64__)
  rg_emu_switch(&f.sp, cur_block->sched_sp);
#else
  swapcontext(&f.uc, &cur_block->sched_uc);
#endif
}

void arrive(barrier_t &b) {
  if (++b.arrived >= b.expected) {
    b.arrived = 0, b.gen++;
    return;
  }
  unsigned gen = b.gen;
  while (b.gen == gen) yield_to_scheduler();
}

// A thread that returns leaves its barriers, so the others never wait for it.
void leave(barrier_t &b) {
  b.expected--;
  if (b.arrived && b.arrived >= b.expected) b.arrived = 0, b.gen++;
}
}  // namespace

dim3 threadIdx, blockIdx, blockDim, gridDim;

#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(...)

static inline void __syncthreads() {
  arrive(cur_block->bar);
}
static inline void rg_emu_syncwarp() {
  arrive(cur_block->warp_bars[cur_warp]);
}
static inline void *rg_emu_dynamic_shared() {
  return cur_block->dynamic_shared.data();
}
template <class T>
static T rg_emu_exchange(T v, int src) {
  static_assert(sizeof(T) <= 8, "shuffle of a value above 8 bytes");
  auto &slots = cur_block->slots[cur_warp];
  memcpy(&slots[cur_lane], &v, sizeof v);
  rg_emu_syncwarp();
  T r;
  memcpy(&r, &slots[src & 31], sizeof r);
  rg_emu_syncwarp();
  return r;
}
template <class T>
static T rg_emu_shfl_xor(T v, int o) {
  return rg_emu_exchange(v, cur_lane ^ o);
}
template <class T>
static T rg_emu_shfl(T v, int l) {
  return rg_emu_exchange(v, (int)l);
}
static inline float __uint_as_float(uint32_t b) {
  float f;
  memcpy(&f, &b, 4);
  return f;
}
static inline uint32_t __float_as_uint(float f) {
  uint32_t b;
  memcpy(&b, &f, 4);
  return b;
}
static inline float __fmul_rn(float a, float b) {
  return a * b;
}
static inline float __fadd_rn(float a, float b) {
  return a + b;
}
static inline unsigned atomicXor(unsigned *p, unsigned v) {
  return __atomic_fetch_xor(p, v, __ATOMIC_RELAXED);
}

#define RG_CUDA_EMU 1
#include "ops/cuda/attention.cu"
#include "ops/cuda/elementwise.cu"
#include "ops/cuda/matmul.cu"
#include "ops/cuda/moe.cu"

// ----- Kernels by name -------------------------------------------------------------

namespace {
struct kernel_t {
  const char *name;
  void (*run)(const void *args);
};

#define RG_X_(e, s, a) {#s, [](const void *p) { s(*(const a *)p); }},
const kernel_t kernels[] = {RG_CUDA_KERNELS(RG_X_)};
#undef RG_X_

// Runs one block: blockDim fibers, each with its ids, round-robin until all
// have returned.
const kernel_t *run_kernel;
const void *run_args;
dim3 run_grid, run_block_dim, run_idx;

void fiber_main() {
  block_t &b = *cur_block;
  int t = b.cur;
  cur_lane = t % 32, cur_warp = t / 32;
  run_kernel->run(run_args);
  b.fibers[t].done = 1;
  leave(b.bar);
  leave(b.warp_bars[t / 32]);
  yield_to_scheduler();  // never resumed: it is done
  abort();
}

void set_ids(int t) {
  const dim3 &d = run_block_dim;
  threadIdx = dim3{t % d.x, (t / d.x) % d.y, t / (d.x * d.y)};
  blockIdx = run_idx, blockDim = d, gridDim = run_grid;
  cur_lane = t % 32, cur_warp = t / 32;
}

// Runs fiber t until it waits or returns.
void resume(block_t &b, int t) {
  b.cur = t;
  set_ids(t);
#if defined(__x86_64__)
  rg_emu_switch(&b.sched_sp, b.fibers[t].sp);
#else
  swapcontext(&b.sched_uc, &b.fibers[t].uc);
#endif
}

void run_block(unsigned smem) {
  static std::vector<std::vector<unsigned char>> stacks;
  const size_t stack_bytes = 256 * 1024;
  unsigned n = run_block_dim.x * run_block_dim.y * run_block_dim.z, nw = (n + 31) / 32;
  block_t b;
  b.bar.expected = (int)n;
  b.warp_bars.resize(nw);
  for (unsigned w = 0; w < nw; w++)
    b.warp_bars[w].expected = (int)(n - 32 * w < 32 ? n - 32 * w : 32);
  b.slots.resize(nw);
  b.dynamic_shared.assign(smem + 16, 0);
  b.fibers.resize(n);
  while (stacks.size() < n) stacks.emplace_back(stack_bytes);
  cur_block = &b;
  for (unsigned t = 0; t < n; t++) {
#if defined(__x86_64__)
    // A frame rg_emu_switch can return into: six zeroed registers, then
    // fiber_main as the return address, 16-byte aligned as a call leaves it.
    uintptr_t *sp = (uintptr_t *)((uintptr_t)(stacks[t].data() + stack_bytes) & ~(uintptr_t)15);
    *--sp = 0;
    *--sp = (uintptr_t)fiber_main;
    for (int r = 0; r < 6; r++) *--sp = 0;
    b.fibers[t].sp = sp;
#else
    getcontext(&b.fibers[t].uc);
    b.fibers[t].uc.uc_stack.ss_sp = stacks[t].data();
    b.fibers[t].uc.uc_stack.ss_size = stack_bytes;
    b.fibers[t].uc.uc_link = nullptr;
    makecontext(&b.fibers[t].uc, fiber_main, 0);
#endif
  }
  for (unsigned left = n; left;) {
    left = 0;
    for (unsigned t = 0; t < n; t++) {
      if (b.fibers[t].done) continue;
      resume(b, (int)t);
      left += !b.fibers[t].done;
    }
  }
}
}  // namespace

// ----- The driver API the cuda backend calls ------------------------------------------

typedef unsigned int R;
extern "C" {
R cuInit(unsigned) {
  return 0;
}
R cuDriverGetVersion(int *v) {
  *v = 13000;
  return 0;
}
R cuDeviceGetCount(int *n) {
  *n = 1;
  return 0;
}
R cuDeviceGet(int *d, int i) {
  if (i != 0) return 101;
  *d = 0;
  return 0;
}
R cuDeviceGetName(char *s, int n, int) {
  strncpy(s, "ridge CPU emulation of the CUDA kernels (not a GPU)", (size_t)n);
  return 0;
}
R cuDeviceTotalMem_v2(size_t *b, int) {
  *b = (size_t)8 << 30;
  return 0;
}
// Four "SMs", so that attention splits long contexts as it would on a GPU
// with few blocks to fill.
R cuDeviceGetAttribute(int *v, unsigned a, int) {
  *v = a == 16 ? 4 : a == 75 ? 9 : 0;
  return 0;
}
static int ctx;
R cuDevicePrimaryCtxRetain(void **c, int) {
  *c = &ctx;
  return 0;
}
R cuDevicePrimaryCtxRelease_v2(int) {
  return 0;
}
R cuCtxPushCurrent_v2(void *) {
  return 0;
}
R cuCtxPopCurrent_v2(void **c) {
  *c = &ctx;
  return 0;
}
R cuMemAlloc_v2(unsigned long long *p, size_t n) {
  void *m = aligned_alloc(256, (n + 255) / 256 * 256);
  if (!m) return 2;
  *p = (unsigned long long)(uintptr_t)m;
  return 0;
}
R cuMemFree_v2(unsigned long long p) {
  free((void *)(uintptr_t)p);
  return 0;
}
R cuCtxSynchronize(void) {
  return 0;
}
R cuMemcpyHtoD_v2(unsigned long long d, const void *s, size_t n) {
  memcpy((void *)(uintptr_t)d, s, n);
  return 0;
}
R cuMemcpyDtoH_v2(void *d, unsigned long long s, size_t n) {
  memcpy(d, (void *)(uintptr_t)s, n);
  return 0;
}
R cuMemcpyHtoDAsync_v2(unsigned long long d, const void *s, size_t n, void *) {
  return cuMemcpyHtoD_v2(d, s, n);
}
R cuMemcpyDtoHAsync_v2(void *d, unsigned long long s, size_t n, void *) {
  return cuMemcpyDtoH_v2(d, s, n);
}
R cuMemcpyDtoDAsync_v2(unsigned long long d, unsigned long long s, size_t n, void *) {
  memmove((void *)(uintptr_t)d, (void *)(uintptr_t)s, n);
  return 0;
}
static int stream;
R cuStreamCreate(void **s, unsigned) {
  *s = &stream;
  return 0;
}
R cuStreamSynchronize(void *) {
  return 0;
}
R cuStreamDestroy_v2(void *) {
  return 0;
}
R cuStreamWaitEvent(void *, void *, unsigned) {
  return 0;
}
R cuEventCreate(void **e, unsigned) {
  *e = malloc(1);
  return *e ? 0 : 2;
}
R cuEventRecord(void *, void *) {
  return 0;
}
R cuEventQuery(void *) {
  return 0;
}
R cuEventDestroy_v2(void *e) {
  free(e);
  return 0;
}
R cuModuleLoadData(void **m, const void *img) {
  const unsigned char *p = (const unsigned char *)img;
  if (p[0] != 0x50 || p[1] != 0xed || p[2] != 0x55 || p[3] != 0xba) return 200;
  *m = &stream;
  return 0;
}
R cuModuleUnload(void *) {
  return 0;
}
R cuModuleGetFunction(void **f, void *, const char *name) {
  for (const kernel_t &k : kernels)
    if (!strcmp(k.name, name)) {
      *f = (void *)&k;
      return 0;
    }
  return 500;
}
R cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                 unsigned bz, unsigned smem, void *, void **params, void **) {
  const kernel_t *k = (const kernel_t *)f;
  // The limits a real launch enforces, so a bad grid fails here too.
  if (!gx || !gy || !gz || !bx || !by || !bz || bx * by * bz > 1024 || gy > 65535 || gz > 65535 ||
      smem > 48 * 1024)
    return 1;
  dim3 grid{gx, gy, gz}, block{bx, by, bz};
  run_kernel = k, run_args = params[0], run_grid = grid, run_block_dim = block;
  for (unsigned z = 0; z < gz; z++)
    for (unsigned y = 0; y < gy; y++)
      for (unsigned x = 0; x < gx; x++) {
        run_idx = dim3{x, y, z};
        run_block(smem);
      }
  return 0;
}
R cuGetErrorName(R r, const char **s) {
  *s = r == 1 ? "CUDA_ERROR_INVALID_VALUE" : r == 500 ? "CUDA_ERROR_NOT_FOUND" : nullptr;
  return *s ? 0 : 1;
}
}
