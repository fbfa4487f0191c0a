// base/fileio.h — opening the files ridge reads and writing the files it
// produces, without the surprises plain fopen() has at a path that is not a
// regular file.
//
// Reading. A FIFO opened for reading blocks until a writer comes, and a
// device node reads forever, so a loader handed one (by mistake or by a
// hostile config) would hang. rg_file_open_regular() opens with O_NONBLOCK,
// checks with fstat() on the open descriptor (no window between check and
// use) and refuses anything but a regular file:
//   "PATH: is a FIFO, not a regular file; the WHAT must be a regular file"
// A symbolic link to a regular file is fine. Every loader (YAML configs,
// config.json, tokenizer.json, safetensors, its index, GGUF) opens through it.
//
// Writing. What happens depends on what is at the path now:
//
//   nothing, or a regular file ──▶ written to a temporary file in the same
//       directory, fsync'd, renamed over the path: readers see the old file
//       or the new one, never half of one, and a failed write leaves the old
//       one as it was. An existing file keeps its permission bits (and, as
//       with any atomic replace, other hard links to it keep the old data).
//   a symbolic link to a regular file ──▶ the same, at the link's target;
//       the link itself stays.
//   one of this process's descriptors (/dev/stdout, /dev/fd/N,
//   /proc/self/fd/N) ──▶ written through that descriptor, so a shell's
//       redirection (a pipe, a terminal, `>> log` appending) is honoured.
//   a FIFO or a character device ──▶ opened and written through (a FIFO
//       waits for its reader, as a shell redirection does).
//   a dangling symbolic link, a directory, a block device, a socket ──▶
//       refused, naming the path; nothing is created.
//
// Every error a writer returns names the path: "cannot write WHAT 'PATH': ...".
// Writing to a FIFO whose reader has gone raises SIGPIPE, as for any pipe.
//
// Ownership: rg_file_open_regular returns a descriptor (or FILE *) the caller
// closes; rg_file_read_all returns a malloc'd buffer the caller frees. A
// writer from rg_file_writer_open belongs to the caller until
// rg_file_writer_finish, which always frees it; its stream is borrowed.
#ifndef RG_BASE_FILEIO_H
#define RG_BASE_FILEIO_H

#include <stddef.h>
#include <stdio.h>

#include "base/status.h"

// ----- Reading -------------------------------------------------------------------------

// Opens path read-only (close-on-exec). `what` names the thing read ("config",
// "tokenizer") for messages; NULL reads as "input". Errors: RG_NOT_FOUND
// "PATH: cannot open: No such file or directory"; RG_IO for other open
// failures; RG_INVALID_ARGUMENT "PATH: is a FIFO, not a regular file; ..."
// (also "a directory", "a character device", "a block device", "a socket").
RG_MUST_USE rg_status_t rg_file_open_regular(const char *path, const char *what, int *out_fd);
// The same as a buffered stream ("rb").
RG_MUST_USE rg_status_t rg_file_fopen_regular(const char *path, const char *what, FILE **out);
// Reads a whole regular file into a malloc'd, NUL-terminated buffer (*out_len
// excludes the NUL). A file larger than max_bytes is refused with
// "PATH: larger than the N bytes a WHAT may have" (RG_PARSE).
RG_MUST_USE rg_status_t rg_file_read_all(const char *path, const char *what, size_t max_bytes,
                                         char **out, size_t *out_len);

// ----- Writing -------------------------------------------------------------------------

typedef struct rg_file_writer_s rg_file_writer_t;

// Decides, from what is at path now, how it will be written (see above) and
// opens for it. `what` names the output in messages ("plan", "SVG").
RG_MUST_USE rg_status_t rg_file_writer_open(const char *path, const char *what,
                                            rg_file_writer_t **out);
// The stream to write to (borrowed; do not fclose it).
FILE *rg_file_writer_stream(rg_file_writer_t *w);
// Ends the write and frees w. With st NULL the data is flushed and, for a
// regular file, fsync'd and renamed into place; a write error becomes
// "cannot write WHAT 'PATH': <reason>". With st non-NULL (the caller's own
// failure) the temporary file is removed, the path is left as it was, and st
// is returned — unless the stream hit a write error, which is then returned
// instead, since it caused what the caller saw and names the path. Consumes st.
RG_MUST_USE rg_status_t rg_file_writer_finish(rg_file_writer_t *w, rg_status_t st);
// Writes len bytes as above in one call.
RG_MUST_USE rg_status_t rg_file_write(const char *path, const char *what, const void *data,
                                      size_t len);

#endif  // RG_BASE_FILEIO_H
