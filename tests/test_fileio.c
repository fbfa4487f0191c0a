// tests/test_fileio.c — base/fileio: readers refuse what is not a regular
// file without blocking, and writers replace a regular file atomically, keep
// symbolic links, write through FIFOs, devices and our own descriptors, and
// refuse the rest, naming the path every time.
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/fileio.h"
#include "base/yaml.h"
#include "graphs/graphs.h"
#include "graphs/tokenizer.h"
#include "graphs/weights.h"
#include "planner/planner.h"
#include "tests/test.h"

static const char *tmp_path(rg_test_ctx_t *t, const char *name) {
  static char buf[8][1024];
  static int k;
  char *p = buf[k++ % 8];
  snprintf(p, sizeof buf[0], "%s/%s", rg_test_tmpdir(t), name);
  return p;
}

static char *slurp(const char *path) {
  char *buf = NULL;
  size_t len = 0;
  rg_status_t st = rg_file_read_all(path, "test file", 1 << 20, &buf, &len);
  rg_status_free(st);
  return buf;
}

// Files in dir whose names start with '.', other than . and ..: a writer's
// temporary files, which must never outlive it.
static int leftovers(const char *dir) {
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "test -z \"$(find '%s' -name '.*.tmp')\"", dir);
  return system(cmd) != 0;
}

// ----- reading -------------------------------------------------------------------------

RG_TEST(fileio_open_regular_refuses_all_but_regular_files) {
  const char *file = rg_test_write(t, "a.yaml", "x: 1\n");
  int fd = -1;
  RG_CHECK_OK(rg_file_open_regular(file, "config", &fd));
  RG_CHECK(fd >= 0 && !(fcntl(fd, F_GETFL) & O_NONBLOCK));
  if (fd >= 0) close(fd);
  // A link to a regular file reads as the file.
  const char *link = tmp_path(t, "link.yaml");
  RG_REQUIRE(symlink(file, link) == 0);
  char *text = slurp(link);
  RG_CHECK(text && strcmp(text, "x: 1\n") == 0);
  free(text);

  const char *fifo = tmp_path(t, "fifo.yaml");
  RG_REQUIRE(mkfifo(fifo, 0600) == 0);
  char want[1200];
  snprintf(want, sizeof want, "%s: is a FIFO, not a regular file (ridge reads a config only", fifo);
  RG_CHECK_ERR(rg_file_open_regular(fifo, "config", &fd), want);
  RG_CHECK(fd == -1);
  snprintf(want, sizeof want, "%s: is a directory, not a regular file", rg_test_tmpdir(t));
  RG_CHECK_ERR(rg_file_open_regular(rg_test_tmpdir(t), "config", &fd), want);
  RG_CHECK_ERR(rg_file_open_regular("/dev/null", "tokenizer", &fd),
               "/dev/null: is a character device, not a regular file (ridge reads a tokenizer");
  rg_status_t st = rg_file_open_regular(tmp_path(t, "missing.yaml"), "config", &fd);
  RG_CHECK(rg_status_code(st) == RG_NOT_FOUND);
  RG_CHECK_CONTAINS(rg_status_message(st), "missing.yaml: cannot open: No such file or directory");
  rg_status_free(st);
  FILE *f = NULL;
  RG_CHECK_ERR(rg_file_fopen_regular(fifo, "tokenizer", &f), "is a FIFO, not a regular file");
  RG_CHECK(f == NULL);
}

RG_TEST(fileio_read_all_reads_to_the_end_and_caps_the_size) {
  const char *file = rg_test_write(t, "big.txt", "0123456789");
  char *buf = NULL;
  size_t len = 0;
  RG_REQUIRE_OK(rg_file_read_all(file, "config", 10, &buf, &len));
  RG_CHECK(len == 10 && memcmp(buf, "0123456789", 11) == 0);
  free(buf);
  char want[1200];
  snprintf(want, sizeof want, "%s: larger than the 9 bytes a config may have", file);
  RG_CHECK_ERR(rg_file_read_all(file, "config", 9, &buf, &len), want);
  RG_CHECK(buf == NULL && len == 0);
  // An empty file is an empty, NUL-terminated buffer.
  RG_REQUIRE_OK(rg_file_read_all(rg_test_write(t, "empty", ""), "config", 9, &buf, &len));
  RG_CHECK(buf && len == 0 && buf[0] == 0);
  free(buf);
}

// ----- writing -------------------------------------------------------------------------

RG_TEST(fileio_writer_replaces_regular_files_atomically) {
  const char *dir = rg_test_tmpdir(t);
  const char *path = tmp_path(t, "plan.yaml");
  RG_REQUIRE_OK(rg_file_write(path, "plan", "new\n", 4));
  char *text = slurp(path);
  RG_CHECK(text && strcmp(text, "new\n") == 0);
  free(text);
  // Replacing keeps the permission bits and swaps the inode in one rename.
  RG_REQUIRE(chmod(path, 0640) == 0);
  struct stat before, after;
  RG_REQUIRE(stat(path, &before) == 0);
  RG_REQUIRE_OK(rg_file_write(path, "plan", "second\n", 7));
  RG_REQUIRE(stat(path, &after) == 0);
  RG_CHECK((after.st_mode & 07777) == 0640);
  RG_CHECK(after.st_ino != before.st_ino);
  text = slurp(path);
  RG_CHECK(text && strcmp(text, "second\n") == 0);
  free(text);
  // A failure of the caller's own leaves the old file whole.
  rg_file_writer_t *w = NULL;
  RG_REQUIRE_OK(rg_file_writer_open(path, "plan", &w));
  fputs("half a pla", rg_file_writer_stream(w));
  RG_CHECK_ERR(rg_file_writer_finish(w, rg_status_make(RG_INTERNAL, "the planner gave up")),
               "the planner gave up");
  text = slurp(path);
  RG_CHECK(text && strcmp(text, "second\n") == 0);
  free(text);
  RG_CHECK(!leftovers(dir));
  // A directory that does not exist is named with the path.
  RG_CHECK_ERR(rg_file_write("/nonexistent-dir/x.yaml", "plan", "x", 1),
               "cannot write plan '/nonexistent-dir/x.yaml': No such file or directory");
}

RG_TEST(fileio_writer_keeps_symlinks_and_refuses_dangling_ones) {
  const char *target = rg_test_write(t, "real.yaml", "old\n");
  const char *link = tmp_path(t, "link.yaml");
  RG_REQUIRE(symlink("real.yaml", link) == 0);  // relative, as people write them
  RG_REQUIRE_OK(rg_file_write(link, "plan", "through the link\n", 17));
  struct stat st;
  RG_REQUIRE(lstat(link, &st) == 0);
  RG_CHECK(S_ISLNK(st.st_mode));
  char *text = slurp(target);
  RG_CHECK(text && strcmp(text, "through the link\n") == 0);
  free(text);

  const char *dangling = tmp_path(t, "dangling.svg");
  RG_REQUIRE(symlink("nowhere/x.svg", dangling) == 0);
  char want[1200];
  snprintf(want, sizeof want,
           "cannot write SVG '%s': it is a symbolic link to 'nowhere/x.svg', which does not exist",
           dangling);
  RG_CHECK_ERR(rg_file_write(dangling, "SVG", "x", 1), want);
  RG_REQUIRE(lstat(dangling, &st) == 0);
  RG_CHECK(S_ISLNK(st.st_mode));
  RG_CHECK(!leftovers(rg_test_tmpdir(t)));
}

RG_TEST(fileio_writer_writes_through_fifos_devices_and_own_descriptors) {
  // A FIFO: with its reader already open, the write goes into it and the
  // FIFO stays a FIFO.
  const char *fifo = tmp_path(t, "out.fifo");
  RG_REQUIRE(mkfifo(fifo, 0600) == 0);
  int rd = open(fifo, O_RDONLY | O_NONBLOCK);
  RG_REQUIRE(rd >= 0);
  RG_CHECK_OK(rg_file_write(fifo, "plan", "via fifo\n", 9));
  char buf[64] = {0};
  RG_CHECK(read(rd, buf, sizeof buf - 1) == 9 && strcmp(buf, "via fifo\n") == 0);
  close(rd);
  struct stat st;
  RG_REQUIRE(lstat(fifo, &st) == 0);
  RG_CHECK(S_ISFIFO(st.st_mode));

  // A character device is written, never replaced.
  RG_CHECK_OK(rg_file_write("/dev/null", "plan", "gone\n", 5));
  RG_REQUIRE(lstat("/dev/null", &st) == 0);
  RG_CHECK(S_ISCHR(st.st_mode));
  // Write errors name the path.
  if (access("/dev/full", W_OK) == 0)
    RG_CHECK_ERR(rg_file_write("/dev/full", "plan", "x", 1),
                 "cannot write plan '/dev/full': No space left on device");

  // /dev/stdout-style paths write through the descriptor itself: a pipe...
  int p[2];
  RG_REQUIRE(pipe(p) == 0);
  char path[64];
  snprintf(path, sizeof path, "/proc/self/fd/%d", p[1]);
  RG_CHECK_OK(rg_file_write(path, "plan", "via pipe\n", 9));
  memset(buf, 0, sizeof buf);
  RG_CHECK(read(p[0], buf, sizeof buf - 1) == 9 && strcmp(buf, "via pipe\n") == 0);
  close(p[0]);
  close(p[1]);
  // ... and a file opened for appending (`>> log`), which is appended to,
  // not replaced.
  const char *log = rg_test_write(t, "log.txt", "earlier\n");
  int fd = open(log, O_WRONLY | O_APPEND);
  RG_REQUIRE(fd >= 0);
  snprintf(path, sizeof path, "/dev/fd/%d", fd);
  RG_CHECK_OK(rg_file_write(path, "plan", "appended\n", 9));
  close(fd);
  char *text = slurp(log);
  RG_CHECK(text && strcmp(text, "earlier\nappended\n") == 0);
  free(text);
}

RG_TEST(fileio_writer_refuses_directories_and_block_devices) {
  char want[1200];
  snprintf(want, sizeof want, "cannot write plan '%s': it is a directory; give a file path",
           rg_test_tmpdir(t));
  RG_CHECK_ERR(rg_file_write(rg_test_tmpdir(t), "plan", "x", 1), want);
  // A block device node of a device that does not exist: were the refusal
  // broken, opening it would fail rather than write anywhere. Making one
  // needs root.
  const char *blk = tmp_path(t, "disk");
  if (mknod(blk, S_IFBLK | 0600, makedev(0, 0)) != 0) {
    printf("    block device case skipped: mknod needs root (%s)\n", strerror(errno));
    return;
  }
  snprintf(want, sizeof want, "cannot write SVG '%s': it is a block device; give a file path", blk);
  RG_CHECK_ERR(rg_file_write(blk, "SVG", "x", 1), want);
  struct stat st;
  RG_REQUIRE(lstat(blk, &st) == 0);
  RG_CHECK(S_ISBLK(st.st_mode));
}

// ----- every loader, handed a FIFO -------------------------------------------------------
//
// Each loader runs in a child process that the test kills after a few
// seconds, so a regression that blocks on the FIFO fails this test instead of
// hanging the suite.

typedef rg_status_t (*loader_fn)(const char *path);

static rg_status_t load_doc(const char *path) {
  rg_doc_t *d = NULL;
  return rg_doc_load_file(path, &d);
}
static rg_status_t load_model(const char *path) {
  rg_arch_t *a = NULL;
  return rg_model_load(path, NULL, &a);
}
static rg_status_t load_weights(const char *path) {
  rg_weights_t *w = NULL;
  return rg_weights_open(path, &w);
}
static rg_status_t load_tokenizer(const char *path) {
  rg_tokenizer_t *tok = NULL;
  return rg_tokenizer_load_hf(path, &tok);
}
static rg_status_t load_fleet(const char *path) {
  rg_fleet_t *f = NULL;
  return rg_fleet_load(path, NULL, NULL, &f);
}
static rg_status_t load_workload(const char *path) {
  rg_workload_t *w = NULL;
  return rg_workload_load(path, NULL, &w);
}
static rg_status_t load_placement(const char *path) {
  static rg_plan_request_t req;
  static rg_placement_meta_t meta;
  return rg_placement_load(path, NULL, &req, &meta);
}
static rg_status_t load_catalog(const char *dir) {
  rg_catalog_t *c = NULL;
  return rg_catalog_load(dir, &c);
}

// Runs fn(path) in a child; copies its message (or "ok") to msg. Returns 0,
// or -1 when the child had to be killed after `seconds`.
static int run_in_child(loader_fn fn, const char *path, char *msg, size_t len, int seconds) {
  int p[2];
  if (pipe(p) != 0) return snprintf(msg, len, "pipe: %s", strerror(errno)), 0;
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    close(p[0]);
    rg_status_t st = fn(path);
    const char *m = st ? rg_status_message(st) : "ok";
    ssize_t unused = write(p[1], m, strlen(m));
    (void)unused;
    _exit(0);
  }
  close(p[1]);
  struct pollfd pf = {p[0], POLLIN, 0};
  int ready = pid > 0 ? poll(&pf, 1, seconds * 1000) : -1;
  size_t k = 0;
  if (ready > 0) {
    ssize_t r;
    while (k + 1 < len && (r = read(p[0], msg + k, len - 1 - k)) > 0) k += (size_t)r;
  }
  msg[k] = 0;
  close(p[0]);
  if (pid > 0) {
    if (ready <= 0) kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
  }
  return ready > 0 ? 0 : -1;
}

RG_TEST(fileio_every_loader_refuses_a_fifo_without_blocking) {
  const char *dir = rg_test_tmpdir(t);
  char sub[1100];
  // A model directory whose files are all FIFOs, and a config folder whose
  // device catalog holds one.
  snprintf(sub, sizeof sub, "%s/model", dir);
  RG_REQUIRE(mkdir(sub, 0700) == 0);
  snprintf(sub, sizeof sub, "%s/cfg", dir);
  RG_REQUIRE(mkdir(sub, 0700) == 0);
  snprintf(sub, sizeof sub, "%s/cfg/devices", dir);
  RG_REQUIRE(mkdir(sub, 0700) == 0);
  // A real tokenizer.json whose tokenizer_config.json beside it is a FIFO.
  snprintf(sub, sizeof sub, "%s/tok", dir);
  RG_REQUIRE(mkdir(sub, 0700) == 0);
  rg_tokenizer_t *tok = NULL;
  RG_REQUIRE_OK(rg_tokenizer_build_test(10, &tok));
  RG_REQUIRE_OK(rg_tokenizer_write_hf(tok, tmp_path(t, "tok/tokenizer.json")));
  rg_tokenizer_destroy(tok);
  unlink(tmp_path(t, "tok/tokenizer_config.json"));

  static const struct {
    const char *fifo;  // relative to the tmpdir
    const char *arg;   // what the loader is given
    loader_fn fn;
    const char *name;
  } cases[] = {
      {"plain.yaml", "plain.yaml", load_doc, "YAML document"},
      {"config.json", "config.json", load_model, "config.json"},
      {"model/config.json", "model", load_model, "model directory's config.json"},
      {"w.safetensors", "w.safetensors", load_weights, ".safetensors"},
      {"w.gguf", "w.gguf", load_weights, ".gguf"},
      {"weights.bin", "weights.bin", load_weights, "weights of no known suffix"},
      {"model/model.safetensors.index.json", "model", load_weights, "safetensors index"},
      {"tokenizer.json", "tokenizer.json", load_tokenizer, "tokenizer.json"},
      {"tok/tokenizer_config.json", "tok/tokenizer.json", load_tokenizer, "tokenizer_config.json"},
      {"fleet.yaml", "fleet.yaml", load_fleet, "fleet"},
      {"workload.yaml", "workload.yaml", load_workload, "workload"},
      {"placement.yaml", "placement.yaml", load_placement, "placement"},
      {"cfg/devices/gpu.yaml", "cfg", load_catalog, "device catalog"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const char *fifo = tmp_path(t, cases[i].fifo);
    RG_REQUIRE(mkfifo(fifo, 0600) == 0);
    char msg[2048], want[1200];
    if (run_in_child(cases[i].fn, tmp_path(t, cases[i].arg), msg, sizeof msg, 5) != 0) {
      rg_test_fail(t, __FILE__, __LINE__, "%s: the loader blocked on the FIFO %s", cases[i].name,
                   fifo);
      continue;
    }
    snprintf(want, sizeof want, "%s: is a FIFO, not a regular file", fifo);
    if (!strstr(msg, want))
      rg_test_fail(t, __FILE__, __LINE__, "%s: message '%s' lacks '%s'", cases[i].name, msg, want);
  }
}

// ----- the CLI's outputs ---------------------------------------------------------------------

RG_TEST(fileio_plan_outputs_keep_symlinks_and_name_the_path) {
  // -o through a symlink writes its target and leaves the link; --svg into a
  // full device names the device in the error.
  const char *target = rg_test_write(t, "real.yaml", "old\n");
  const char *link = tmp_path(t, "plan.yaml");
  RG_REQUIRE(symlink(target, link) == 0);
  char args[1400], *out = NULL;
  const char *svg = access("/dev/full", W_OK) == 0 ? "/dev/full" : "/nonexistent-dir/p.svg";
  snprintf(args, sizeof args, "plan --model llama-3.1-70b --fleet mixed -o '%s' --svg %s", link,
           svg);
  int rc = rg_test_run_ridge(t, args, &out);
  RG_CHECK(rc == 1);
  char want[128];
  snprintf(want, sizeof want, "cannot write SVG '%s': ", svg);
  RG_CHECK_CONTAINS(out, want);
  free(out);
  struct stat st;
  RG_REQUIRE(lstat(link, &st) == 0);
  RG_CHECK(S_ISLNK(st.st_mode));
  char *text = slurp(target);
  RG_CHECK_CONTAINS(text, "# ridge plan: llama-3.1-70b on fleet mixed");
  free(text);
  RG_CHECK(!leftovers(rg_test_tmpdir(t)));
}
