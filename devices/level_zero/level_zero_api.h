// devices/level_zero/level_zero_api.h — the part of oneAPI Level Zero
// (libze_loader.so.1) the level_zero backend calls, declared here so that
// ridge builds without the Level Zero headers and links nothing of Intel's:
// the loader is opened with dlopen at run time.
//
// Types, constants and struct layouts follow ze_api.h (spec 1.x). Where the
// headers exist (RG_HAVE_LEVEL_ZERO), level_zero_sdk_check.c compares the
// layouts with ze_api.h at compile time. Private to devices/level_zero/.
#ifndef RG_DEVICES_LEVEL_ZERO_LEVEL_ZERO_API_H
#define RG_DEVICES_LEVEL_ZERO_LEVEL_ZERO_API_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "devices/backend.h"

typedef uint32_t rg_ze_result_t;  // ze_result_t
typedef struct _ze_driver_handle_t *rg_ze_driver_t;
typedef struct _ze_device_handle_t *rg_ze_device_t;
typedef struct _ze_context_handle_t *rg_ze_context_t;
typedef struct _ze_command_list_handle_t *rg_ze_command_list_t;
typedef struct _ze_event_handle_t *rg_ze_event_t;

enum {
  RG_ZE_SUCCESS = 0,
  RG_ZE_ERROR_DEVICE_LOST = 0x70000001,
  RG_ZE_ERROR_OUT_OF_HOST_MEMORY = 0x70000002,
  RG_ZE_ERROR_OUT_OF_DEVICE_MEMORY = 0x70000003,
  RG_ZE_ERROR_DEPENDENCY_UNAVAILABLE = 0x70020000,
  RG_ZE_ERROR_UNINITIALIZED = 0x78000001,
  RG_ZE_ERROR_UNSUPPORTED_VERSION = 0x78000002,
  RG_ZE_ERROR_UNSUPPORTED_FEATURE = 0x78000003,
  RG_ZE_ERROR_INVALID_ARGUMENT = 0x78000004,
  RG_ZE_ERROR_INVALID_NULL_HANDLE = 0x78000005,
  RG_ZE_ERROR_INVALID_NULL_POINTER = 0x78000007,
  RG_ZE_ERROR_UNKNOWN = 0x7ffffffe,
};

enum {
  RG_ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES = 0x3,
  RG_ZE_STRUCTURE_TYPE_DEVICE_MEMORY_PROPERTIES = 0x7,
  RG_ZE_STRUCTURE_TYPE_CONTEXT_DESC = 0xd,
  RG_ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC = 0xe,
  RG_ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC = 0x15,
};

// ze_command_queue_mode_t: a synchronous immediate command list finishes
// each command before the call that appends it returns.
enum { RG_ZE_COMMAND_QUEUE_MODE_SYNCHRONOUS = 1 };

enum {
  RG_ZE_DEVICE_TYPE_GPU = 1,
  RG_ZE_DEVICE_TYPE_CPU = 2,
  RG_ZE_DEVICE_TYPE_FPGA = 3,
  RG_ZE_DEVICE_TYPE_MCA = 4,
  RG_ZE_DEVICE_TYPE_VPU = 5
};

// ze_device_properties_t.
typedef struct {
  uint32_t stype;  // RG_ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES
  void *pNext;
  uint32_t type;  // RG_ZE_DEVICE_TYPE_*
  uint32_t vendorId;
  uint32_t deviceId;
  uint32_t flags;
  uint32_t subdeviceId;
  uint32_t coreClockRate;
  uint64_t maxMemAllocSize;
  uint32_t maxHardwareContexts;
  uint32_t maxCommandQueuePriority;
  uint32_t numThreadsPerEU;
  uint32_t physicalEUSimdWidth;
  uint32_t numEUsPerSubslice;
  uint32_t numSubslicesPerSlice;
  uint32_t numSlices;
  uint64_t timerResolution;
  uint32_t timestampValidBits;
  uint32_t kernelTimestampValidBits;
  uint8_t uuid[16];
  char name[256];
} rg_ze_device_properties_t;

// ze_device_memory_properties_t.
typedef struct {
  uint32_t stype;  // RG_ZE_STRUCTURE_TYPE_DEVICE_MEMORY_PROPERTIES
  void *pNext;
  uint32_t flags;
  uint32_t maxClockRate;
  uint32_t maxBusWidth;
  uint64_t totalSize;
  char name[256];
} rg_ze_device_memory_properties_t;

// ze_context_desc_t.
typedef struct {
  uint32_t stype;  // RG_ZE_STRUCTURE_TYPE_CONTEXT_DESC
  const void *pNext;
  uint32_t flags;
} rg_ze_context_desc_t;

// ze_device_mem_alloc_desc_t.
typedef struct {
  uint32_t stype;  // RG_ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC
  const void *pNext;
  uint32_t flags;
  uint32_t ordinal;  // the memory of the device to use (0: its first)
} rg_ze_device_mem_alloc_desc_t;

// ze_command_queue_desc_t.
typedef struct {
  uint32_t stype;  // RG_ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC
  const void *pNext;
  uint32_t ordinal;  // command queue group (0: the first, compute on GPUs)
  uint32_t index;
  uint32_t flags;
  uint32_t mode;  // RG_ZE_COMMAND_QUEUE_MODE_*
  uint32_t priority;
} rg_ze_command_queue_desc_t;

// REQ(field, exported symbol, return type, parameters).
#define RG_ZE_SYMBOLS(REQ, OPT)                                                                   \
  REQ(zeInit, "zeInit", rg_ze_result_t, (uint32_t))                                               \
  REQ(zeDriverGet, "zeDriverGet", rg_ze_result_t, (uint32_t *, rg_ze_driver_t *))                 \
  REQ(zeDeviceGet, "zeDeviceGet", rg_ze_result_t, (rg_ze_driver_t, uint32_t *, rg_ze_device_t *)) \
  REQ(zeDeviceGetProperties, "zeDeviceGetProperties", rg_ze_result_t,                             \
      (rg_ze_device_t, rg_ze_device_properties_t *))                                              \
  REQ(zeDeviceGetMemoryProperties, "zeDeviceGetMemoryProperties", rg_ze_result_t,                 \
      (rg_ze_device_t, uint32_t *, rg_ze_device_memory_properties_t *))                           \
  REQ(zeContextCreate, "zeContextCreate", rg_ze_result_t,                                         \
      (rg_ze_driver_t, const rg_ze_context_desc_t *, rg_ze_context_t *))                          \
  REQ(zeContextDestroy, "zeContextDestroy", rg_ze_result_t, (rg_ze_context_t))                    \
  REQ(zeMemAllocDevice, "zeMemAllocDevice", rg_ze_result_t,                                       \
      (rg_ze_context_t, const rg_ze_device_mem_alloc_desc_t *, size_t, size_t, rg_ze_device_t,    \
       void **))                                                                                  \
  REQ(zeMemFree, "zeMemFree", rg_ze_result_t, (rg_ze_context_t, void *))                          \
  REQ(zeCommandListCreateImmediate, "zeCommandListCreateImmediate", rg_ze_result_t,               \
      (rg_ze_context_t, rg_ze_device_t, const rg_ze_command_queue_desc_t *,                       \
       rg_ze_command_list_t *))                                                                   \
  REQ(zeCommandListAppendMemoryCopy, "zeCommandListAppendMemoryCopy", rg_ze_result_t,             \
      (rg_ze_command_list_t, void *, const void *, size_t, rg_ze_event_t, uint32_t,               \
       rg_ze_event_t *))                                                                          \
  REQ(zeCommandListDestroy, "zeCommandListDestroy", rg_ze_result_t, (rg_ze_command_list_t))

typedef struct {
  void *lib;
  const char *lib_name;
#define RG_X_(field, sym, ret, params) ret(*field) params;
  RG_ZE_SYMBOLS(RG_X_, RG_X_)
#undef RG_X_
} rg_ze_syms_t;

// NULL for success; else "<call> failed: ZE_RESULT_ERROR_UNINITIALIZED
// (0x78000001): <text>".
RG_MUST_USE rg_status_t rg__ze_status(rg_ze_result_t r, const char *call);
// The process's copy of the loader, initialised (level_zero_driver.c).
RG_MUST_USE rg_status_t rg__ze_load(const rg_ze_syms_t **out);
// The handles of device `index` in the probe's numbering (across drivers,
// in the loader's order).
RG_MUST_USE rg_status_t rg__ze_find_device(const rg_ze_syms_t *ze, int index,
                                           rg_ze_driver_t *out_driver, rg_ze_device_t *out_dev);
// The driver's open slot (level_zero_device.c).
RG_MUST_USE rg_status_t rg__ze_device_open(rg_driver_t *drv, const rg_device_info_t *info,
                                           const rg_device_options_t *opts, rg_device_t **out);

#define RG_ZE_CALL(ze, fn, ...) rg__ze_status((ze)->fn(__VA_ARGS__), #fn)
#define RG_ZE_CHECK(ze, fn, ...) RG_RETURN_IF_ERROR(RG_ZE_CALL(ze, fn, __VA_ARGS__))

#endif  // RG_DEVICES_LEVEL_ZERO_LEVEL_ZERO_API_H
