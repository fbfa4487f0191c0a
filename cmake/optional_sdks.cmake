# Detects optional accelerator SDKs. Each one found adds RG_HAVE_<X>=1 to
# RIDGE_SDK_DEFINES; a missing one is reported and never breaks the build.
set(RIDGE_SDK_DEFINES "")
set(RIDGE_SDK_SUMMARY "")

function(ridge_optional_sdk name header)
  cmake_parse_arguments(A "" "" "HINTS" ${ARGN})
  find_path(RIDGE_${name}_INCLUDE ${header} HINTS ${A_HINTS} PATH_SUFFIXES include)
  if(RIDGE_${name}_INCLUDE)
    set(RIDGE_SDK_DEFINES ${RIDGE_SDK_DEFINES} RG_HAVE_${name}=1 PARENT_SCOPE)
    set(RIDGE_SDK_SUMMARY "${RIDGE_SDK_SUMMARY} ${name}:found" PARENT_SCOPE)
  else()
    set(RIDGE_SDK_SUMMARY "${RIDGE_SDK_SUMMARY} ${name}:absent" PARENT_SCOPE)
  endif()
endfunction()

ridge_optional_sdk(CUDA cuda.h HINTS /usr/local/cuda $ENV{CUDA_HOME})
ridge_optional_sdk(HIP hip/hip_runtime_api.h HINTS /opt/rocm $ENV{ROCM_PATH})
ridge_optional_sdk(LEVEL_ZERO level_zero/ze_api.h)
ridge_optional_sdk(OPENCL CL/cl.h)
message(STATUS "ridge optional SDKs:${RIDGE_SDK_SUMMARY}")
list(APPEND RIDGE_SDK_DEFINES RIDGE_SDK_SUMMARY="${RIDGE_SDK_SUMMARY}")
