// tests/fuzz/fuzz_memfd.h — fuzz input as a file the path-taking loaders can
// open: the bytes go to an anonymous memfd named /proc/self/fd/N, so nothing
// touches the disk. Returns the descriptor (close it when done) and fills
// path, or -1 when the memfd cannot be made.
#ifndef RG_TESTS_FUZZ_MEMFD_H
#define RG_TESTS_FUZZ_MEMFD_H

#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

static inline int rg_fuzz_memfd(const char *name, const uint8_t *data, size_t size, char *path, size_t len) {
  int fd = memfd_create(name, 0);
  if (fd < 0) return -1;
  if (write(fd, data, size) != (ssize_t)size) {
    close(fd);
    return -1;
  }
  snprintf(path, len, "/proc/self/fd/%d", fd);
  return fd;
}

#endif  // RG_TESTS_FUZZ_MEMFD_H
