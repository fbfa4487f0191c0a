// devices/cuda/gpu_images.h — the GPU kernel images built into ridge
// (cmake/gpu_kernels.cmake generates their table): CUDA fatbins for
// devices/cuda, AMD code objects for devices/hip, one per ops/cuda source.
// An empty table means the compiler was not found when ridge was built;
// the note says so, and the backend repeats it for every op it refuses.
// Private to devices/cuda/ and devices/hip/.
#ifndef RG_DEVICES_CUDA_GPU_IMAGES_H
#define RG_DEVICES_CUDA_GPU_IMAGES_H

#include <stddef.h>

typedef struct {
  const char *name;           // the source: "matmul" for ops/cuda/matmul.cu
  const unsigned char *data;  // the image, as cuModuleLoadData takes it
} rg__gpu_image_t;

extern const rg__gpu_image_t rg__cuda_images[];
extern const size_t rg__cuda_image_count;
// "built by /usr/local/cuda/bin/nvcc for sm 80;90", or "no kernels built
// (nvcc not found at build time)".
extern const char *const rg__cuda_images_note;
size_t rg__cuda_image_size(size_t i);  // bytes of image i

extern const rg__gpu_image_t rg__hip_images[];
extern const size_t rg__hip_image_count;
extern const char *const rg__hip_images_note;
size_t rg__hip_image_size(size_t i);

#endif  // RG_DEVICES_CUDA_GPU_IMAGES_H
