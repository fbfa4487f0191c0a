#include "base/hugemem.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/build.h"

enum { HUGE_PAGE = 2 << 20, SMALL_ALIGN = 64 };

void *rg_hugemem_alloc(size_t bytes, size_t *mapped) {
  *mapped = 0;
  if (bytes > SIZE_MAX / 2 - HUGE_PAGE) return NULL;  // nor any rounding below wraps
  if (RG_BUILD_SANITIZED || bytes < RG_HUGEMEM_MIN) {
    // aligned_alloc wants a multiple of the alignment; an empty request
    // still gets one line, so that its pointer is distinct and non-NULL.
    size_t n = bytes ? (bytes + SMALL_ALIGN - 1) / SMALL_ALIGN * SMALL_ALIGN : SMALL_ALIGN;
    return aligned_alloc(SMALL_ALIGN, n);
  }
  return rg__hugemem_map(bytes, mapped);
}

// Writes every page of [p, p + len) into memory: MADV_POPULATE_WRITE
// (Linux 5.14), which fails cleanly when memory is short; on an older kernel
// a store to each page, which cannot.
static int populate(uint8_t *p, size_t len) {
#ifdef MADV_POPULATE_WRITE
  if (madvise(p, len, MADV_POPULATE_WRITE) == 0) return 1;
  if (errno != EINVAL) return 0;
#endif
  const size_t page = (size_t)sysconf(_SC_PAGESIZE);
  for (size_t i = 0; i < len; i += page) ((volatile uint8_t *)p)[i] = 0;
  return 1;
}

void *rg__hugemem_map(size_t bytes, size_t *mapped) {
  *mapped = 0;
  if (bytes > SIZE_MAX / 2 - HUGE_PAGE) return NULL;
  // Over-map by one huge page and trim both ends, so the range starts on a
  // 2 MiB boundary (mmap only promises 4 KiB, and a huge page must be
  // aligned to be used).
  size_t len = bytes ? (bytes + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE : HUGE_PAGE;
  uint8_t *raw =
      mmap(NULL, len + HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return NULL;
  uintptr_t start = ((uintptr_t)raw + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1);
  uint8_t *p = (uint8_t *)start;
  if (p > raw) munmap(raw, (size_t)(p - raw));
  size_t tail = (size_t)(raw + len + HUGE_PAGE - (p + len));
  if (tail) munmap(p + len, tail);
  // Advice only: without transparent huge pages the range is plain memory.
  madvise(p, len, MADV_HUGEPAGE);
  // Fault every page in now. A first touch later would land in the middle
  // of a decode step (a KV write into a fresh block), and on a VM a fault
  // costs tens of microseconds on 4 KiB pages and, for a huge page, its
  // zeroing and compaction: 2 KiB KV writes averaged 139-150 us at batch 1
  // before this, page faults all. And memory that is not there is then an
  // error here, not a killed process later.
  if (!populate(p, len)) {
    munmap(p, len);
    return NULL;
  }
  *mapped = len;
  return p;
}

void rg_hugemem_free(void *p, size_t mapped) {
  if (!p) return;
  if (mapped)
    munmap(p, mapped);
  else
    free(p);
}
