// devices/level_zero/level_zero_sdk_check.c — where the Level Zero headers
// exist (RG_HAVE_LEVEL_ZERO), checks at compile time that the structs and
// constants in level_zero_api.h match ze_api.h. Nothing here runs; without
// the headers it compiles to nothing.
#include "devices/level_zero/level_zero_api.h"

#if defined(RG_HAVE_LEVEL_ZERO) && RG_HAVE_LEVEL_ZERO && __has_include(<level_zero/ze_api.h>)
#include <level_zero/ze_api.h>
#include <stddef.h>

#define RG_SAME_(ours, theirs) _Static_assert((long)(ours) == (long)(theirs), #theirs);
RG_SAME_(RG_ZE_ERROR_UNINITIALIZED, ZE_RESULT_ERROR_UNINITIALIZED)
RG_SAME_(RG_ZE_ERROR_DEVICE_LOST, ZE_RESULT_ERROR_DEVICE_LOST)
RG_SAME_(RG_ZE_ERROR_OUT_OF_DEVICE_MEMORY, ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY)
RG_SAME_(RG_ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES, ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES)
RG_SAME_(RG_ZE_STRUCTURE_TYPE_DEVICE_MEMORY_PROPERTIES, ZE_STRUCTURE_TYPE_DEVICE_MEMORY_PROPERTIES)
RG_SAME_(RG_ZE_DEVICE_TYPE_GPU, ZE_DEVICE_TYPE_GPU)
RG_SAME_(RG_ZE_DEVICE_TYPE_VPU, ZE_DEVICE_TYPE_VPU)
RG_SAME_(sizeof(rg_ze_device_properties_t), sizeof(ze_device_properties_t))
RG_SAME_(offsetof(rg_ze_device_properties_t, numSlices),
         offsetof(ze_device_properties_t, numSlices))
RG_SAME_(offsetof(rg_ze_device_properties_t, name), offsetof(ze_device_properties_t, name))
RG_SAME_(sizeof(rg_ze_device_memory_properties_t), sizeof(ze_device_memory_properties_t))
RG_SAME_(offsetof(rg_ze_device_memory_properties_t, totalSize),
         offsetof(ze_device_memory_properties_t, totalSize))
RG_SAME_(RG_ZE_STRUCTURE_TYPE_CONTEXT_DESC, ZE_STRUCTURE_TYPE_CONTEXT_DESC)
RG_SAME_(RG_ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC, ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC)
RG_SAME_(RG_ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC, ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC)
RG_SAME_(RG_ZE_COMMAND_QUEUE_MODE_SYNCHRONOUS, ZE_COMMAND_QUEUE_MODE_SYNCHRONOUS)
RG_SAME_(sizeof(rg_ze_context_desc_t), sizeof(ze_context_desc_t))
RG_SAME_(sizeof(rg_ze_device_mem_alloc_desc_t), sizeof(ze_device_mem_alloc_desc_t))
RG_SAME_(offsetof(rg_ze_device_mem_alloc_desc_t, ordinal),
         offsetof(ze_device_mem_alloc_desc_t, ordinal))
RG_SAME_(sizeof(rg_ze_command_queue_desc_t), sizeof(ze_command_queue_desc_t))
RG_SAME_(offsetof(rg_ze_command_queue_desc_t, mode), offsetof(ze_command_queue_desc_t, mode))
#undef RG_SAME_

#else
typedef int rg_level_zero_sdk_check_unused_t;
#endif
