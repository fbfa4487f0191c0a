// base/hugemem.h — large host allocations on 2 MiB pages where the kernel
// gives them (transparent huge pages, which Debian enables on request:
// "madvise").
//
// Why: what ridge keeps in host memory is streamed (weights every token, KV
// pages per step) or handed to another process (the transport's RMA
// regions: shm copies with process_vm_readv, which pins the peer's pages
// one page-table entry at a time). On 4 KiB pages both pay per page: decode
// read weights at 0.59 of read bandwidth from 4 KiB pages against ~0.9 from
// huge pages, and a 16 MiB KV write over shm took 1.5x as long.
//
// An allocation of at least RG_HUGEMEM_MIN bytes is an anonymous mapping
// aligned to 2 MiB, advised MADV_HUGEPAGE and faulted in whole before it is
// returned (MADV_POPULATE_WRITE): a first touch mid-step costs tens of
// microseconds a page on a VM, and memory that is not there is refused here
// (NULL) rather than found missing later. Smaller ones, and every one in
// a sanitizer build (whose allocator must see buffers to catch overflows
// and leaks), come from aligned_alloc (64-byte aligned). The contents start
// undefined, as malloc's do.
#ifndef RG_BASE_HUGEMEM_H
#define RG_BASE_HUGEMEM_H

#include <stddef.h>

enum { RG_HUGEMEM_MIN = 2 << 20 };

// Returns NULL when the system refuses (out of memory, or a size too large
// to address). *mapped receives what rg_hugemem_free needs back.
void *rg_hugemem_alloc(size_t bytes, size_t *mapped);
void rg_hugemem_free(void *p, size_t mapped);

// The mapping path alone, at any size and in any build (for tests):
// bytes rounded up to whole 2 MiB pages, aligned to 2 MiB, advised
// MADV_HUGEPAGE. NULL when refused; free with rg_hugemem_free.
void *rg__hugemem_map(size_t bytes, size_t *mapped);

#endif  // RG_BASE_HUGEMEM_H
