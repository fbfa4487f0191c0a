// devices/opencl/opencl_api.h — the part of OpenCL (the ICD loader,
// libOpenCL.so.1) the opencl backend calls, declared here so that ridge
// builds without OpenCL headers and links no loader: it is opened with
// dlopen at run time.
//
// Types and constants follow CL/cl.h (OpenCL 1.2, which every loader
// exports; nothing newer is called, so a 1.2 platform runs ridge). Where the
// headers exist (RG_HAVE_OPENCL), opencl_sdk_check.c compares every constant
// and every function's type with them at compile time. Private to
// devices/opencl/.
#ifndef RG_DEVICES_OPENCL_OPENCL_API_H
#define RG_DEVICES_OPENCL_OPENCL_API_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "devices/backend.h"

typedef int32_t rg_cl_int;
typedef uint32_t rg_cl_uint;
typedef uint64_t rg_cl_ulong;
typedef rg_cl_uint rg_cl_bool;
typedef rg_cl_ulong rg_cl_bitfield;
typedef intptr_t rg_cl_context_properties;
// The struct tags are CL/cl.h's, so the types are the same where both are seen.
typedef struct _cl_platform_id *rg_cl_platform_id;
typedef struct _cl_device_id *rg_cl_device_id;
typedef struct _cl_context *rg_cl_context;
typedef struct _cl_command_queue *rg_cl_command_queue;
typedef struct _cl_mem *rg_cl_mem;
typedef struct _cl_program *rg_cl_program;
typedef struct _cl_kernel *rg_cl_kernel;
typedef struct _cl_event *rg_cl_event;

// Every error code of CL/cl.h (through OpenCL 3.0) and the ICD loader's
// "no platform": X(name, value, what it means). One table gives the enum,
// the messages, and the compile-time check against the headers.
#define RG_CL_ERROR_MAP(X)                                                         \
  X(DEVICE_NOT_FOUND, -1, "no device of the asked type")                           \
  X(DEVICE_NOT_AVAILABLE, -2, "device not available")                              \
  X(COMPILER_NOT_AVAILABLE, -3, "the platform has no OpenCL C compiler")           \
  X(MEM_OBJECT_ALLOCATION_FAILURE, -4, "the device could not allocate the memory") \
  X(OUT_OF_RESOURCES, -5, "out of device resources")                               \
  X(OUT_OF_HOST_MEMORY, -6, "out of host memory")                                  \
  X(PROFILING_INFO_NOT_AVAILABLE, -7, "no profiling information")                  \
  X(MEM_COPY_OVERLAP, -8, "source and destination overlap")                        \
  X(IMAGE_FORMAT_MISMATCH, -9, "image formats differ")                             \
  X(IMAGE_FORMAT_NOT_SUPPORTED, -10, "image format not supported")                 \
  X(BUILD_PROGRAM_FAILURE, -11, "the program did not build")                       \
  X(MAP_FAILURE, -12, "mapping failed")                                            \
  X(MISALIGNED_SUB_BUFFER_OFFSET, -13, "sub-buffer offset not aligned")            \
  X(EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST, -14, "work this waited for failed") \
  X(COMPILE_PROGRAM_FAILURE, -15, "the program did not compile")                   \
  X(LINKER_NOT_AVAILABLE, -16, "the platform has no linker")                       \
  X(LINK_PROGRAM_FAILURE, -17, "the program did not link")                         \
  X(DEVICE_PARTITION_FAILED, -18, "device partition failed")                       \
  X(KERNEL_ARG_INFO_NOT_AVAILABLE, -19, "no kernel argument information")          \
  X(INVALID_VALUE, -30, "invalid value")                                           \
  X(INVALID_DEVICE_TYPE, -31, "invalid device type")                               \
  X(INVALID_PLATFORM, -32, "invalid platform")                                     \
  X(INVALID_DEVICE, -33, "invalid device")                                         \
  X(INVALID_CONTEXT, -34, "invalid context")                                       \
  X(INVALID_QUEUE_PROPERTIES, -35, "invalid queue properties")                     \
  X(INVALID_COMMAND_QUEUE, -36, "invalid command queue")                           \
  X(INVALID_HOST_PTR, -37, "invalid host pointer")                                 \
  X(INVALID_MEM_OBJECT, -38, "invalid buffer")                                     \
  X(INVALID_IMAGE_FORMAT_DESCRIPTOR, -39, "invalid image format")                  \
  X(INVALID_IMAGE_SIZE, -40, "invalid image size")                                 \
  X(INVALID_SAMPLER, -41, "invalid sampler")                                       \
  X(INVALID_BINARY, -42, "the program binary is not for this device")              \
  X(INVALID_BUILD_OPTIONS, -43, "invalid build options")                           \
  X(INVALID_PROGRAM, -44, "invalid program")                                       \
  X(INVALID_PROGRAM_EXECUTABLE, -45, "the program is not built")                   \
  X(INVALID_KERNEL_NAME, -46, "no kernel of that name")                            \
  X(INVALID_KERNEL_DEFINITION, -47, "invalid kernel definition")                   \
  X(INVALID_KERNEL, -48, "invalid kernel")                                         \
  X(INVALID_ARG_INDEX, -49, "invalid kernel argument index")                       \
  X(INVALID_ARG_VALUE, -50, "invalid kernel argument value")                       \
  X(INVALID_ARG_SIZE, -51, "invalid kernel argument size")                         \
  X(INVALID_KERNEL_ARGS, -52, "kernel arguments not all set")                      \
  X(INVALID_WORK_DIMENSION, -53, "invalid work dimension")                         \
  X(INVALID_WORK_GROUP_SIZE, -54, "invalid work-group size")                       \
  X(INVALID_WORK_ITEM_SIZE, -55, "invalid work-item size")                         \
  X(INVALID_GLOBAL_OFFSET, -56, "invalid global offset")                           \
  X(INVALID_EVENT_WAIT_LIST, -57, "invalid event wait list")                       \
  X(INVALID_EVENT, -58, "invalid event")                                           \
  X(INVALID_OPERATION, -59, "invalid operation")                                   \
  X(INVALID_GL_OBJECT, -60, "invalid GL object")                                   \
  X(INVALID_BUFFER_SIZE, -61, "invalid buffer size")                               \
  X(INVALID_MIP_LEVEL, -62, "invalid mip level")                                   \
  X(INVALID_GLOBAL_WORK_SIZE, -63, "invalid global work size")                     \
  X(INVALID_PROPERTY, -64, "invalid property")                                     \
  X(INVALID_IMAGE_DESCRIPTOR, -65, "invalid image descriptor")                     \
  X(INVALID_COMPILER_OPTIONS, -66, "invalid compiler options")                     \
  X(INVALID_LINKER_OPTIONS, -67, "invalid linker options")                         \
  X(INVALID_DEVICE_PARTITION_COUNT, -68, "invalid device partition count")         \
  X(INVALID_PIPE_SIZE, -69, "invalid pipe size")                                   \
  X(INVALID_DEVICE_QUEUE, -70, "invalid device queue")                             \
  X(INVALID_SPEC_ID, -71, "invalid specialization constant")                       \
  X(MAX_SIZE_RESTRICTION_EXCEEDED, -72, "a size exceeds the device's limit")       \
  X(PLATFORM_NOT_FOUND_KHR, -1001,                                                 \
    "no OpenCL platform is installed (no ICD file in /etc/OpenCL/vendors)")

enum {
  RG_CL_SUCCESS = 0,
#define RG_X_(name, value, text) RG_CL_##name = value,
  RG_CL_ERROR_MAP(RG_X_)
#undef RG_X_
};

// cl_device_type bits, and the info queries and flags used.
#define RG_CL_DEVICE_TYPE_CPU (1ULL << 1)
#define RG_CL_DEVICE_TYPE_GPU (1ULL << 2)
#define RG_CL_DEVICE_TYPE_ACCELERATOR (1ULL << 3)
#define RG_CL_DEVICE_TYPE_ALL 0xFFFFFFFFULL
#define RG_CL_MEM_READ_WRITE (1ULL << 0)
#define RG_CL_FP_FMA (1ULL << 5)
enum {
  RG_CL_FALSE = 0,
  RG_CL_TRUE = 1,
  RG_CL_PLATFORM_VERSION = 0x0901,
  RG_CL_PLATFORM_NAME = 0x0902,
  RG_CL_DEVICE_TYPE = 0x1000,
  RG_CL_DEVICE_MAX_COMPUTE_UNITS = 0x1002,
  RG_CL_DEVICE_MAX_WORK_GROUP_SIZE = 0x1004,
  RG_CL_DEVICE_MAX_MEM_ALLOC_SIZE = 0x1010,
  RG_CL_DEVICE_SINGLE_FP_CONFIG = 0x101B,
  RG_CL_DEVICE_GLOBAL_MEM_SIZE = 0x101F,
  RG_CL_DEVICE_LOCAL_MEM_SIZE = 0x1023,
  RG_CL_DEVICE_NAME = 0x102B,
  RG_CL_DRIVER_VERSION = 0x102D,
  RG_CL_DEVICE_VERSION = 0x102F,
  RG_CL_DEVICE_EXTENSIONS = 0x1030,
  RG_CL_CONTEXT_PLATFORM = 0x1084,
  RG_CL_PROGRAM_BINARY_SIZES = 0x1165,
  RG_CL_PROGRAM_BINARIES = 0x1166,
  RG_CL_PROGRAM_BUILD_LOG = 0x1183,
  RG_CL_KERNEL_WORK_GROUP_SIZE = 0x11B0,
  RG_CL_EVENT_COMMAND_EXECUTION_STATUS = 0x11D3,
  RG_CL_COMPLETE = 0x0,
};

// The symbol table: REQ(field, exported symbol, return type, parameters).
// Every one is OpenCL 1.2 core, so the table has no optional entries; OPT
// stays for the shape every backend's table has.
#define RG_CL_SYMBOLS(REQ, OPT)                                                                    \
  REQ(clGetPlatformIDs, "clGetPlatformIDs", rg_cl_int,                                             \
      (rg_cl_uint, rg_cl_platform_id *, rg_cl_uint *))                                             \
  REQ(clGetPlatformInfo, "clGetPlatformInfo", rg_cl_int,                                           \
      (rg_cl_platform_id, rg_cl_uint, size_t, void *, size_t *))                                   \
  REQ(clGetDeviceIDs, "clGetDeviceIDs", rg_cl_int,                                                 \
      (rg_cl_platform_id, rg_cl_ulong, rg_cl_uint, rg_cl_device_id *, rg_cl_uint *))               \
  REQ(clGetDeviceInfo, "clGetDeviceInfo", rg_cl_int,                                               \
      (rg_cl_device_id, rg_cl_uint, size_t, void *, size_t *))                                     \
  REQ(clCreateContext, "clCreateContext", rg_cl_context,                                           \
      (const rg_cl_context_properties *, rg_cl_uint, const rg_cl_device_id *,                      \
       void (*)(const char *, const void *, size_t, void *), void *, rg_cl_int *))                 \
  REQ(clReleaseContext, "clReleaseContext", rg_cl_int, (rg_cl_context))                            \
  REQ(clCreateCommandQueue, "clCreateCommandQueue", rg_cl_command_queue,                           \
      (rg_cl_context, rg_cl_device_id, rg_cl_bitfield, rg_cl_int *))                               \
  REQ(clReleaseCommandQueue, "clReleaseCommandQueue", rg_cl_int, (rg_cl_command_queue))            \
  REQ(clFlush, "clFlush", rg_cl_int, (rg_cl_command_queue))                                        \
  REQ(clFinish, "clFinish", rg_cl_int, (rg_cl_command_queue))                                      \
  REQ(clCreateBuffer, "clCreateBuffer", rg_cl_mem,                                                 \
      (rg_cl_context, rg_cl_bitfield, size_t, void *, rg_cl_int *))                                \
  REQ(clReleaseMemObject, "clReleaseMemObject", rg_cl_int, (rg_cl_mem))                            \
  REQ(clEnqueueReadBuffer, "clEnqueueReadBuffer", rg_cl_int,                                       \
      (rg_cl_command_queue, rg_cl_mem, rg_cl_bool, size_t, size_t, void *, rg_cl_uint,             \
       const rg_cl_event *, rg_cl_event *))                                                        \
  REQ(clEnqueueWriteBuffer, "clEnqueueWriteBuffer", rg_cl_int,                                     \
      (rg_cl_command_queue, rg_cl_mem, rg_cl_bool, size_t, size_t, const void *, rg_cl_uint,       \
       const rg_cl_event *, rg_cl_event *))                                                        \
  REQ(clEnqueueCopyBuffer, "clEnqueueCopyBuffer", rg_cl_int,                                       \
      (rg_cl_command_queue, rg_cl_mem, rg_cl_mem, size_t, size_t, size_t, rg_cl_uint,              \
       const rg_cl_event *, rg_cl_event *))                                                        \
  REQ(clEnqueueFillBuffer, "clEnqueueFillBuffer", rg_cl_int,                                       \
      (rg_cl_command_queue, rg_cl_mem, const void *, size_t, size_t, size_t, rg_cl_uint,           \
       const rg_cl_event *, rg_cl_event *))                                                        \
  REQ(clCreateProgramWithSource, "clCreateProgramWithSource", rg_cl_program,                       \
      (rg_cl_context, rg_cl_uint, const char **, const size_t *, rg_cl_int *))                     \
  REQ(clCreateProgramWithBinary, "clCreateProgramWithBinary", rg_cl_program,                       \
      (rg_cl_context, rg_cl_uint, const rg_cl_device_id *, const size_t *, const unsigned char **, \
       rg_cl_int *, rg_cl_int *))                                                                  \
  REQ(clBuildProgram, "clBuildProgram", rg_cl_int,                                                 \
      (rg_cl_program, rg_cl_uint, const rg_cl_device_id *, const char *,                           \
       void (*)(rg_cl_program, void *), void *))                                                   \
  REQ(clGetProgramInfo, "clGetProgramInfo", rg_cl_int,                                             \
      (rg_cl_program, rg_cl_uint, size_t, void *, size_t *))                                       \
  REQ(clGetProgramBuildInfo, "clGetProgramBuildInfo", rg_cl_int,                                   \
      (rg_cl_program, rg_cl_device_id, rg_cl_uint, size_t, void *, size_t *))                      \
  REQ(clReleaseProgram, "clReleaseProgram", rg_cl_int, (rg_cl_program))                            \
  REQ(clCreateKernel, "clCreateKernel", rg_cl_kernel, (rg_cl_program, const char *, rg_cl_int *))  \
  REQ(clSetKernelArg, "clSetKernelArg", rg_cl_int,                                                 \
      (rg_cl_kernel, rg_cl_uint, size_t, const void *))                                            \
  REQ(clGetKernelWorkGroupInfo, "clGetKernelWorkGroupInfo", rg_cl_int,                             \
      (rg_cl_kernel, rg_cl_device_id, rg_cl_uint, size_t, void *, size_t *))                       \
  REQ(clReleaseKernel, "clReleaseKernel", rg_cl_int, (rg_cl_kernel))                               \
  REQ(clEnqueueNDRangeKernel, "clEnqueueNDRangeKernel", rg_cl_int,                                 \
      (rg_cl_command_queue, rg_cl_kernel, rg_cl_uint, const size_t *, const size_t *,              \
       const size_t *, rg_cl_uint, const rg_cl_event *, rg_cl_event *))                            \
  REQ(clEnqueueMarkerWithWaitList, "clEnqueueMarkerWithWaitList", rg_cl_int,                       \
      (rg_cl_command_queue, rg_cl_uint, const rg_cl_event *, rg_cl_event *))                       \
  REQ(clEnqueueBarrierWithWaitList, "clEnqueueBarrierWithWaitList", rg_cl_int,                     \
      (rg_cl_command_queue, rg_cl_uint, const rg_cl_event *, rg_cl_event *))                       \
  REQ(clGetEventInfo, "clGetEventInfo", rg_cl_int,                                                 \
      (rg_cl_event, rg_cl_uint, size_t, void *, size_t *))                                         \
  REQ(clReleaseEvent, "clReleaseEvent", rg_cl_int, (rg_cl_event))

typedef struct {
  void *lib;
  const char *lib_name;
#define RG_X_(field, sym, ret, params) ret(*field) params;
  RG_CL_SYMBOLS(RG_X_, RG_X_)
#undef RG_X_
} rg_cl_syms_t;

// NULL for CL_SUCCESS; else "<call> failed: CL_DEVICE_NOT_FOUND (-1): <text>",
// coded RG_OUT_OF_MEMORY for the out-of-memory results, RG_UNAVAILABLE for
// a missing platform, device or compiler, and RG_INTERNAL otherwise (ridge
// checks what users give it before any OpenCL call sees it, so any other
// failure is ridge's or the driver's).
RG_MUST_USE rg_status_t rg__cl_status(rg_cl_int r, const char *call);
// The name of a result ("CL_INVALID_VALUE"), "CL_SUCCESS", or "CL error".
const char *rg__cl_error_name(rg_cl_int r);

// Calls cl->fn(...) and converts its result: RG_CL_CALL gives the status,
// RG_CL_CHECK returns it from the enclosing function when it is not OK.
// The calls that return an object report through their last argument;
// their result goes through rg__cl_status(err, "clCreateBuffer") the same way.
#define RG_CL_CALL(cl, fn, ...) rg__cl_status((cl)->fn(__VA_ARGS__), #fn)
#define RG_CL_CHECK(cl, fn, ...) RG_RETURN_IF_ERROR(RG_CL_CALL(cl, fn, __VA_ARGS__))

#endif  // RG_DEVICES_OPENCL_OPENCL_API_H
