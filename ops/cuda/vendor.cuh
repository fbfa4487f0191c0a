// ops/cuda/vendor.cuh — the few names that differ between CUDA and HIP, so
// that one set of kernel sources builds with nvcc for NVIDIA GPUs and with
// hipcc for AMD ones (ggml's vendors/hip.h does the same).
//
// The kernels think in 32-lane warps. AMD's CDNA wavefronts have 64 lanes:
// every shuffle here passes width 32, so a wavefront holds two logical
// warps that never exchange values, and a block's thread count is always a
// multiple of 64 where it matters.
#ifndef RG_OPS_CUDA_VENDOR_CUH
#define RG_OPS_CUDA_VENDOR_CUH

#include <stdint.h>

#if defined(RG_CUDA_EMU)
// tests/cuda_emu.cpp: these sources compiled as host C++ and run on CPU
// threads, so the tests check the kernels' logic where there is no GPU. It
// defines the CUDA names it emulates before including this.
#define RG_HIP 0
#define rg_shfl_xor(v, o) rg_emu_shfl_xor((v), (o))
#define rg_shfl(v, l) rg_emu_shfl((v), (l))
#define rg_syncwarp() rg_emu_syncwarp()
#define rg_ld_stream(p) (*(p))
#define rg_ldg(p) (*(p))
#define RG_DYNAMIC_SHARED(type, name) type *name = (type *)rg_emu_dynamic_shared()
#elif defined(__HIP_PLATFORM_AMD__) || defined(__HIPCC__)
#include <hip/hip_runtime.h>
#define RG_HIP 1
#define rg_shfl_xor(v, o) __shfl_xor((v), (o), 32)
#define rg_shfl(v, l) __shfl((v), (l), 32)
// Every kernel calls rg_syncwarp with all of its block's threads, so the
// block barrier serves (and orders memory, which HIP's wavefront lockstep
// alone does not promise).
#define rg_syncwarp() __syncthreads()
// No cache hints: plain loads (HIP's __ldg does not cover every vector
// type on every ROCm release).
#define rg_ld_stream(p) (*(p))
#define rg_ldg(p) (*(p))
#define RG_DYNAMIC_SHARED(type, name) extern __shared__ type name[]
#else
#include <cuda_runtime.h>
#define RG_HIP 0
#define rg_shfl_xor(v, o) __shfl_xor_sync(0xffffffffu, (v), (o), 32)
#define rg_shfl(v, l) __shfl_sync(0xffffffffu, (v), (l), 32)
#define rg_syncwarp() __syncwarp()
// Weights are read once per call: load them evict-first, so they do not
// push activations out of L1 and L2.
#define rg_ld_stream(p) __ldcs(p)
// Activations are read by many warps: through the read-only cache.
#define rg_ldg(p) __ldg(p)
#define RG_DYNAMIC_SHARED(type, name) extern __shared__ type name[]
#endif

#define RG_WARP 32

#endif  // RG_OPS_CUDA_VENDOR_CUH
