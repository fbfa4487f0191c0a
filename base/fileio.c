// base/fileio.c — see fileio.h for the rules; this file has the reasons.
#include "base/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

// ----- Reading -------------------------------------------------------------------------

static const char *kind_of(mode_t m) {
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISDIR(m)) return "a directory";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISLNK(m)) return "a symbolic link";
  return "a special file";
}

static rg_status_t not_regular(const char *path, const char *what, mode_t m) {
  return rg_status_make(RG_INVALID_ARGUMENT,
                        "%s: is %s, not a regular file (ridge reads a %s only from a regular file)",
                        path, kind_of(m), what ? what : "input");
}

rg_status_t rg_file_open_regular(const char *path, const char *what, int *out_fd) {
  *out_fd = -1;
  if (!path || !*path)
    return rg_status_make(RG_INVALID_ARGUMENT, "no path given for the %s", what ? what : "input");
  // O_NONBLOCK makes opening a FIFO return at once instead of waiting for a
  // writer; the fstat below then refuses it before anything reads.
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    int e = errno;
    struct stat st;
    // A Unix socket cannot be opened at all (ENXIO); say what it is.
    if (e == ENXIO && stat(path, &st) == 0 && !S_ISREG(st.st_mode))
      return not_regular(path, what, st.st_mode);
    return rg_status_make(e == ENOENT || e == ENOTDIR ? RG_NOT_FOUND : RG_IO, "%s: cannot open: %s",
                          path, strerror(e));
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    close(fd);
    return rg_status_make(RG_IO, "%s: cannot stat: %s", path, strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return not_regular(path, what, st.st_mode);
  }
  // Regular files ignore O_NONBLOCK, but a descriptor handed on should carry
  // the flags a plain open would have given.
  int fl = fcntl(fd, F_GETFL);
  if (fl >= 0) (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  *out_fd = fd;
  return NULL;
}

rg_status_t rg_file_fopen_regular(const char *path, const char *what, FILE **out) {
  *out = NULL;
  int fd;
  RG_RETURN_IF_ERROR(rg_file_open_regular(path, what, &fd));
  FILE *f = fdopen(fd, "rb");
  if (!f) {
    int e = errno;
    close(fd);
    return rg_status_make(RG_IO, "%s: cannot open: %s", path, strerror(e));
  }
  *out = f;
  return NULL;
}

rg_status_t rg_file_read_all(const char *path, const char *what, size_t max_bytes, char **out,
                             size_t *out_len) {
  *out = NULL;
  *out_len = 0;
  if (!what) what = "input";
  int fd;
  RG_RETURN_IF_ERROR(rg_file_open_regular(path, what, &fd));
  rg_status_t st = NULL;
  struct stat sb;
  size_t cap = 0, len = 0;
  char *buf = NULL;
  if (fstat(fd, &sb) != 0) sb.st_size = 0;
  if ((uint64_t)sb.st_size > max_bytes) {
    st = rg_status_make(RG_PARSE, "%s: larger than the %zu bytes a %s may have", path, max_bytes,
                        what);
    goto done;
  }
  // The size is a first guess only: the file may grow or shrink while read.
  cap = (size_t)sb.st_size + 1;
  for (;;) {
    if (len + 1 >= cap || !buf) {
      if (buf && cap > max_bytes) {
        st = rg_status_make(RG_PARSE, "%s: larger than the %zu bytes a %s may have", path,
                            max_bytes, what);
        break;
      }
      size_t ncap = buf ? cap * 2 : (cap < 4096 ? 4096 : cap);
      if (ncap > max_bytes + 2) ncap = max_bytes + 2;
      char *nb = realloc(buf, ncap);
      if (!nb) {
        st = rg_status_make(RG_OUT_OF_MEMORY, "%s: out of memory reading the %s", path, what);
        break;
      }
      buf = nb;
      cap = ncap;
    }
    ssize_t r = read(fd, buf + len, cap - 1 - len);
    if (r < 0) {
      if (errno == EINTR) continue;
      st = rg_status_make(RG_IO, "%s: read error: %s", path, strerror(errno));
      break;
    }
    if (r == 0) break;
    len += (size_t)r;
    if (len > max_bytes) {
      st = rg_status_make(RG_PARSE, "%s: larger than the %zu bytes a %s may have", path, max_bytes,
                          what);
      break;
    }
  }
done:
  close(fd);
  if (st) {
    free(buf);
    return st;
  }
  buf[len] = 0;
  *out = buf;
  *out_len = len;
  return NULL;
}

// ----- Writing -------------------------------------------------------------------------

struct rg_file_writer_s {
  char *path;  // as given: every message names it
  char *what;
  char *tmp;    // the temporary file, or NULL when writing through
  char *final;  // where tmp is renamed to
  int fd;
  FILE *f;
  int err;  // the first write error's errno
};

static void writer_free(rg_file_writer_t *w) {
  if (!w) return;
  free(w->path);
  free(w->what);
  free(w->tmp);
  free(w->final);
  free(w);
}

static rg_status_t write_error(const rg_file_writer_t *w, const char *fmt, ...) RG_PRINTF(2, 3);
static rg_status_t write_error(const rg_file_writer_t *w, const char *fmt, ...) {
  char why[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  return rg_status_make(RG_IO, "cannot write %s '%s': %s", w->what, w->path, why);
}

// The stream writes straight to the descriptor so the first failure's errno
// is kept: a caller printing with fprintf rarely checks each call, and by the
// time ferror() says something went wrong errno has long been overwritten.
static ssize_t cookie_write(void *c, const char *buf, size_t n) {
  rg_file_writer_t *w = c;
  size_t done = 0;
  while (done < n) {
    ssize_t r = write(w->fd, buf + done, n - done);
    if (r < 0) {
      if (errno == EINTR) continue;
      if (!w->err) w->err = errno;
      return -1;
    }
    done += (size_t)r;
  }
  return (ssize_t)n;
}

static int cookie_close(void *c) {
  (void)c;  // the descriptor is closed by rg_file_writer_finish
  return 0;
}

// If path leads, through ordinary symbolic links, to /proc/self/fd/N,
// /proc/<our pid>/fd/N or /dev/fd/N (as /dev/stdout does), returns N: the
// path names one of our own descriptors. Else -1.
static int own_descriptor(const char *path) {
  char cur[PATH_MAX], link[PATH_MAX], pid_prefix[64];
  snprintf(pid_prefix, sizeof pid_prefix, "/proc/%ld/fd/", (long)getpid());
  const char *prefixes[] = {"/proc/self/fd/", "/dev/fd/", pid_prefix};
  if (strlen(path) >= sizeof cur) return -1;
  strcpy(cur, path);
  for (int hop = 0; hop < 40; hop++) {
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++) {
      size_t pl = strlen(prefixes[i]);
      const char *num = cur + pl;
      if (strncmp(cur, prefixes[i], pl) != 0 || !*num || strspn(num, "0123456789") != strlen(num))
        continue;
      long fd = strtol(num, NULL, 10);
      return fd <= INT_MAX && fcntl((int)fd, F_GETFD) >= 0 ? (int)fd : -1;
    }
    ssize_t n = readlink(cur, link, sizeof link - 1);
    if (n < 0) return -1;  // not a link: the path ends here
    link[n] = 0;
    if (link[0] == '/') {
      strcpy(cur, link);
    } else {
      char *slash = strrchr(cur, '/');
      size_t dl = slash ? (size_t)(slash - cur) + 1 : 0;
      if (dl + (size_t)n >= sizeof cur) return -1;
      memcpy(cur + dl, link, (size_t)n + 1);
    }
  }
  return -1;
}

// Creates the temporary file beside final (a regular file's real path, or a
// path that does not exist yet), with the permission bits of the file it
// replaces (old may be NULL).
static rg_status_t open_temp(rg_file_writer_t *w, const char *final, const struct stat *old) {
  static unsigned counter;
  const char *slash = strrchr(final, '/');
  const char *base = slash ? slash + 1 : final;
  if (!*base) return write_error(w, "the path names a directory");
  size_t dl = slash ? (size_t)(slash - final) + 1 : 0;
  size_t len = dl + strlen(base) + 64;
  w->final = strdup(final);
  w->tmp = malloc(len);
  if (!w->final || !w->tmp) return write_error(w, "out of memory");
  int e = 0;
  for (int attempt = 0; attempt < 100; attempt++) {
    // The name starts with a dot so directory listings (and ridge's own
    // scans of configs/) skip a file left behind by a crash.
    snprintf(w->tmp, len, "%.*s.%.200s.%ld.%u.tmp", (int)dl, final, base, (long)getpid(),
             counter++);
    w->fd = open(w->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (w->fd >= 0) break;
    e = errno;
    if (e != EEXIST) break;
  }
  if (w->fd < 0) {
    free(w->tmp);
    w->tmp = NULL;
    if (e == EACCES || e == EROFS || e == EPERM)
      return write_error(w,
                         "cannot create a file in %.*s: %s (a file is replaced by writing a "
                         "new one beside it)",
                         dl ? (int)dl : 1, dl ? final : ".", strerror(e));
    return write_error(w, "%s", strerror(e));
  }
  if (!old) return NULL;
  if (fchmod(w->fd, old->st_mode & 07777) != 0) return write_error(w, "%s", strerror(errno));
  // Only root can give a file to another owner; for anyone else the new file
  // is theirs, as it would be had they written it from scratch.
  if (old->st_uid != geteuid() || old->st_gid != getegid()) {
    int given = fchown(w->fd, old->st_uid, old->st_gid);
    (void)given;
  }
  return NULL;
}

// Opens a FIFO or character device for writing. The type is checked again on
// the open descriptor: were the path swapped for a regular file in between,
// writing without O_TRUNC would leave the old tail behind.
static rg_status_t open_through(rg_file_writer_t *w, const char *path) {
  w->fd = open(path, O_WRONLY | O_CLOEXEC | O_NOCTTY);
  if (w->fd < 0) return write_error(w, "%s", strerror(errno));
  struct stat st;
  if (fstat(w->fd, &st) != 0 || !(S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode)))
    return write_error(w, "the path changed while it was opened");
  return NULL;
}

static rg_status_t refuse(rg_file_writer_t *w, mode_t m) {
  return rg_status_make(RG_INVALID_ARGUMENT, "cannot write %s '%s': it is %s; give a file path",
                        w->what, w->path, kind_of(m));
}

static rg_status_t choose(rg_file_writer_t *w, const char *path) {
  int own = own_descriptor(path);
  if (own >= 0) {
    w->fd = fcntl(own, F_DUPFD_CLOEXEC, 3);
    return w->fd < 0 ? write_error(w, "%s", strerror(errno)) : NULL;
  }
  struct stat lst, st;
  if (lstat(path, &lst) != 0) {
    if (errno != ENOENT) return write_error(w, "%s", strerror(errno));
    return open_temp(w, path, NULL);
  }
  if (S_ISLNK(lst.st_mode)) {
    if (stat(path, &st) != 0) {
      int e = errno;
      char target[PATH_MAX];
      ssize_t n = readlink(path, target, sizeof target - 1);
      target[n > 0 ? n : 0] = 0;
      if (e == ENOENT)
        return rg_status_make(RG_INVALID_ARGUMENT,
                              "cannot write %s '%s': it is a symbolic link to '%s', which does "
                              "not exist",
                              w->what, w->path, target);
      return write_error(w, "%s", strerror(e));
    }
    if (S_ISREG(st.st_mode)) {
      // Renaming over the link would replace the link; the file it points
      // at is what the user means.
      char *real = realpath(path, NULL);
      if (!real) return write_error(w, "%s", strerror(errno));
      rg_status_t s = open_temp(w, real, &st);
      free(real);
      return s;
    }
  } else {
    st = lst;
  }
  if (S_ISREG(st.st_mode)) return open_temp(w, path, &st);
  if (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode)) return open_through(w, path);
  return refuse(w, st.st_mode);
}

rg_status_t rg_file_writer_open(const char *path, const char *what, rg_file_writer_t **out) {
  *out = NULL;
  if (!what) what = "output";
  if (!path || !*path) return rg_status_make(RG_INVALID_ARGUMENT, "no path given for the %s", what);
  rg_file_writer_t *w = calloc(1, sizeof(*w));
  if (!w || !(w->path = strdup(path)) || !(w->what = strdup(what))) {
    writer_free(w);
    return rg_status_make(RG_OUT_OF_MEMORY, "out of memory writing '%s'", path);
  }
  w->fd = -1;
  rg_status_t st = choose(w, path);
  if (!st) {
    cookie_io_functions_t io = {
        .read = NULL, .write = cookie_write, .seek = NULL, .close = cookie_close};
    w->f = fopencookie(w, "w", io);
    if (!w->f) st = write_error(w, "%s", strerror(errno));
  }
  if (st) return rg_file_writer_finish(w, st);
  setvbuf(w->f, NULL, _IOFBF, 1 << 16);
  *out = w;
  return NULL;
}

FILE *rg_file_writer_stream(rg_file_writer_t *w) {
  return w->f;
}

rg_status_t rg_file_writer_finish(rg_file_writer_t *w, rg_status_t st) {
  if (!w) return st;
  if (w->f) {
    if (fflush(w->f) != 0 && !w->err) w->err = errno ? errno : EIO;
    if (ferror(w->f) && !w->err) w->err = EIO;
    fclose(w->f);
  }
  // A write error is the cause of whatever the caller saw go wrong with the
  // stream, and unlike the caller's message it names the path.
  if (w->err) {
    rg_status_free(st);
    st = write_error(w, "%s", strerror(w->err));
  }
  if (!st && w->tmp && fsync(w->fd) != 0) st = write_error(w, "fsync: %s", strerror(errno));
  // Some file systems (NFS) report a failed write only when it is closed.
  if (w->fd >= 0 && close(w->fd) != 0 && !st && w->tmp) st = write_error(w, "%s", strerror(errno));
  if (!st && w->tmp) {
    if (rename(w->tmp, w->final) != 0) {
      st = write_error(w, "cannot rename %s into place: %s", w->tmp, strerror(errno));
    } else {
      // The rename is durable once the directory is; a failure here leaves
      // a complete file in place, so it is not reported.
      char *slash = strrchr(w->final, '/');
      char *dir = slash ? strndup(w->final, (size_t)(slash - w->final) + 1) : strdup(".");
      int dfd = dir ? open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
      if (dfd >= 0) {
        (void)fsync(dfd);
        close(dfd);
      }
      free(dir);
    }
  }
  if (st && w->tmp) unlink(w->tmp);
  writer_free(w);
  return st;
}

rg_status_t rg_file_write(const char *path, const char *what, const void *data, size_t len) {
  rg_file_writer_t *w;
  RG_RETURN_IF_ERROR(rg_file_writer_open(path, what, &w));
  if (len) fwrite(data, 1, len, rg_file_writer_stream(w));
  return rg_file_writer_finish(w, NULL);
}
