// The control plane: handshake and messages between a coordinator and
// workers (threads and forked processes), the shared secret, hostile peers
// speaking raw TCP, heartbeats noticing killed and stopped processes, and
// the frame reader on its own.
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "runtime/control.h"
#include "runtime/control/control_impl.h"
#include "tests/test.h"

// The fuzz target, under another name, to replay its corpus here.
#define LLVMFuzzerTestOneInput rg_fuzz_control_one
#include "tests/fuzz/fuzz_control.c"
#undef LLVMFuzzerTestOneInput

// Short deadlines keep the suite fast; the defaults are 0.5 s and 3 s.
static const rg_control_limits_t fast = {
    .heartbeat_interval_s = 0.1, .heartbeat_timeout_s = 0.6, .handshake_timeout_s = 0.6};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static rg_control_secret_t secret_of(const char *text) {
  rg_control_secret_t s;
  rg_status_t st = rg_control_secret_from_text(text, strlen(text), &s);
  if (st) abort();
  return s;
}

static rg_status_t start_server(const rg_control_secret_t *secret, int port,
                                rg_control_server_t **out) {
  rg_control_server_options_t o = {.secret = secret, .port = port, .limits = fast};
  return rg_control_server_create(&o, out);
}

static rg_control_client_options_t worker_opts(int port, const rg_control_secret_t *secret,
                                               const char *name, const char *device) {
  rg_control_client_options_t o = {.host = "127.0.0.1",
                                   .port = port,
                                   .secret = secret,
                                   .connect_timeout_s = 5,
                                   .name = name,
                                   .hostname = "testhost",
                                   .device = device,
                                   .device_name = "Test CPU",
                                   .fabric_provider = "shm",
                                   .limits = fast};
  return o;
}

// The next event of the given kind within timeout_s, skipping others (and
// freeing them); false when none came.
static bool wait_kind(rg_control_server_t *s, rg_control_event_kind_t kind, double timeout_s,
                      rg_control_event_t *ev) {
  double end = now_s() + timeout_s;
  while (now_s() < end) {
    rg_status_t st = rg_control_server_recv(s, end - now_s(), ev);
    if (st) {
      rg_status_free(st);
      return false;
    }
    if (ev->kind == kind) return true;
    rg_control_event_deinit(ev);
  }
  return false;
}

// The next event about peer within timeout_s.
static bool wait_peer(rg_control_server_t *s, const char *peer, double timeout_s,
                      rg_control_event_t *ev) {
  double end = now_s() + timeout_s;
  while (now_s() < end) {
    rg_status_t st = rg_control_server_recv(s, end - now_s(), ev);
    if (st) {
      rg_status_free(st);
      return false;
    }
    if (ev->kind != RG_CONTROL_EVENT_NONE && strcmp(ev->peer, peer) == 0) return true;
    rg_control_event_deinit(ev);
  }
  return false;
}

static bool client_wait_msg(rg_control_client_t *c, rg_control_msg_type_t type, double timeout_s,
                            rg_control_event_t *ev) {
  double end = now_s() + timeout_s;
  while (now_s() < end) {
    rg_status_t st = rg_control_client_recv(c, end - now_s(), ev);
    if (st) {
      rg_status_free(st);
      return false;
    }
    if (ev->kind == RG_CONTROL_EVENT_MESSAGE && ev->type == type) return true;
    rg_control_event_deinit(ev);
  }
  return false;
}

// ---- A worker's side of the conversation, shared by threads and children -----

// Joins, answers an Assign with a Ready counting its stages and echoing its
// KV block count, expects a PeerTable naming itself, then a Shutdown.
// Returns NULL or what went wrong.
static const char *run_worker(int port, const char *secret, const char *name, const char *device) {
  rg_control_secret_t key = secret_of(secret);
  rg_control_client_options_t o = worker_opts(port, &key, name, device);
  static const uint8_t addr[] = {0xfa, 0xb1, 0x1c, 0x00, 0x07};
  o.fabric_address = addr;
  o.fabric_address_len = sizeof addr;
  rg_control_client_t *c = NULL;
  rg_status_t st = rg_control_client_create(&o, &c);
  if (st) {
    rg_status_free(st);
    return "join failed";
  }
  const char *err = NULL;
  rg_control_event_t ev;
  if (!client_wait_msg(c, RG_CONTROL_MSG_ASSIGN, 5, &ev)) {
    err = "no Assign";
    goto done;
  }
  const rg_control_assign_t *a = RG_CONTROL_MSG_AS(ev.msg, assign);
  rg_control_ready_t r = RIDGE__CONTROL__READY__INIT;
  r.stages_loaded = (uint32_t)a->n_stages;
  r.kv_bytes = a->kv_block_count * a->kv_block_size;
  rg_control_event_deinit(&ev);
  st = rg_control_client_send(c, &r.base);
  if (st) {
    rg_status_free(st);
    err = "send Ready failed";
    goto done;
  }
  if (!client_wait_msg(c, RG_CONTROL_MSG_PEER_TABLE, 5, &ev)) {
    err = "no PeerTable";
    goto done;
  }
  const rg_control_peer_table_t *pt = RG_CONTROL_MSG_AS(ev.msg, peer_table);
  bool found = false;
  for (size_t i = 0; i < pt->n_peers; i++)
    found |= pt->peers[i]->worker_id == rg_control_client_worker_id(c) &&
             strcmp(pt->peers[i]->worker_name, name) == 0;
  rg_control_event_deinit(&ev);
  if (!found) {
    err = "PeerTable lacks this worker";
    goto done;
  }
  if (!client_wait_msg(c, RG_CONTROL_MSG_SHUTDOWN, 5, &ev)) {
    err = "no Shutdown";
    goto done;
  }
  rg_control_event_deinit(&ev);
done:
  rg_control_client_destroy(c);
  return err;
}

typedef struct {
  int port;
  const char *name, *device;
  const char *err;
} worker_thread_t;

static void *worker_thread(void *arg) {
  worker_thread_t *w = arg;
  w->err = run_worker(w->port, "correct horse battery staple", w->name, w->device);
  return NULL;
}

// The coordinator's side: an Assign to worker `id` with `stages` stage
// instances, and the Ready that must come back.
static void assign_and_expect_ready(rg_test_ctx_t *t, rg_control_server_t *s, uint32_t id,
                                    int stages) {
  rg_control_stage_instance_t st[4], *sp[4];
  for (int i = 0; i < stages; i++) {
    st[i] = (rg_control_stage_instance_t)RIDGE__CONTROL__STAGE_INSTANCE__INIT;
    RG_CHECK_OK(
        rg_control_stage_kind_to_wire(i == 0 ? RG_STAGE_ATTENTION : RG_STAGE_FFN, &st[i].kind));
    st[i].layer_begin = 0;
    st[i].layer_end = 16;
    st[i].role = RIDGE__CONTROL__ROLE__ROLE_DECODE;
    sp[i] = &st[i];
  }
  rg_control_assign_t a = RIDGE__CONTROL__ASSIGN__INIT;
  a.model_path = "/models/test";
  a.n_stages = (size_t)stages;
  a.stages = sp;
  a.kv_block_size = 16;
  a.kv_block_count = 100 + id;
  RG_CHECK_OK(rg_control_server_send(s, id, &a.base));
}

RG_TEST(control_handshake_and_messages_with_two_worker_threads) {
  rg_control_secret_t key = secret_of("correct horse battery staple");
  rg_control_server_t *s = NULL;
  RG_REQUIRE_OK(start_server(&key, 0, &s));
  int port = rg_control_server_port(s);
  RG_CHECK(port > 0);
  worker_thread_t w[2] = {{port, "alpha", "cpu:0", NULL}, {port, "beta", "cpu:1", NULL}};
  pthread_t th[2];
  for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, worker_thread, &w[i]);

  uint32_t ids[2] = {0, 0};
  rg_control_peer_t peers[2], *pp[2];
  for (int i = 0; i < 2; i++) {
    rg_control_event_t ev;
    RG_REQUIRE(wait_kind(s, RG_CONTROL_EVENT_JOINED, 5, &ev));
    const rg_control_hello_t *h = RG_CONTROL_MSG_AS(ev.msg, hello);
    RG_REQUIRE(h);
    int k = strcmp(h->worker_name, "alpha") == 0 ? 0 : 1;
    ids[k] = ev.worker_id;
    RG_CHECK(ev.worker_id >= 1);
    RG_CHECK_CONTAINS(ev.text, "joined from 127.0.0.1:");
    RG_CHECK_CONTAINS(ev.text, k == 0 ? "'alpha'" : "'beta'");
    RG_CHECK_CONTAINS(ev.text, k == 0 ? "device cpu:0 'Test CPU'" : "device cpu:1 'Test CPU'");
    RG_CHECK(strcmp(h->host, "testhost") == 0);
    RG_CHECK(h->pid == (uint32_t)getpid());
    RG_CHECK(strcmp(h->fabric_provider, "shm") == 0);
    RG_CHECK(h->fabric_address.len == 5 && h->fabric_address.data[0] == 0xfa &&
             h->fabric_address.data[4] == 0x07);
    peers[k] = (rg_control_peer_t)RIDGE__CONTROL__PEER__INIT;
    peers[k].worker_id = ev.worker_id;
    peers[k].worker_name = k == 0 ? "alpha" : "beta";
    pp[k] = &peers[k];
    rg_control_event_deinit(&ev);
  }
  RG_CHECK(ids[0] && ids[1] && ids[0] != ids[1]);
  assign_and_expect_ready(t, s, ids[0], 1);
  assign_and_expect_ready(t, s, ids[1], 3);
  for (int i = 0; i < 2; i++) {
    rg_control_event_t ev;
    RG_REQUIRE(wait_kind(s, RG_CONTROL_EVENT_MESSAGE, 5, &ev));
    const rg_control_ready_t *r = RG_CONTROL_MSG_AS(ev.msg, ready);
    RG_REQUIRE(r);
    int k = ev.worker_id == ids[0] ? 0 : 1;
    RG_CHECK(r->stages_loaded == (k == 0 ? 1u : 3u));
    RG_CHECK(r->kv_bytes == (100 + ids[k]) * 16);
    RG_CHECK_CONTAINS(ev.text, "Ready from worker");
    rg_control_event_deinit(&ev);
  }
  rg_control_peer_table_t pt = RIDGE__CONTROL__PEER_TABLE__INIT;
  pt.n_peers = 2;
  pt.peers = pp;
  RG_CHECK_OK(rg_control_server_send(s, RG_CONTROL_ALL, &pt.base));
  rg_control_shutdown_t sd = RIDGE__CONTROL__SHUTDOWN__INIT;
  sd.reason = "done";
  RG_CHECK_OK(rg_control_server_send(s, RG_CONTROL_ALL, &sd.base));
  for (int i = 0; i < 2; i++) {
    pthread_join(th[i], NULL);
    if (w[i].err) rg_test_fail(t, __FILE__, __LINE__, "worker %s: %s", w[i].name, w[i].err);
  }
  // Both workers hung up after the Shutdown: each is reported, by name.
  for (int i = 0; i < 2; i++) {
    rg_control_event_t ev;
    RG_REQUIRE(wait_kind(s, RG_CONTROL_EVENT_LOST, 5, &ev));
    RG_CHECK_CONTAINS(ev.text, "closed the connection");
    RG_CHECK_CONTAINS(ev.text,
                      ev.worker_id == ids[0] ? "'alpha' (device cpu:0" : "'beta' (device cpu:1");
    rg_control_event_deinit(&ev);
  }
  rg_control_server_destroy(s);
}

// ---- Forked processes ---------------------------------------------------------

// Forks a child that reads a port from a pipe and runs fn(port, arg), exiting
// with its result. Forking before the coordinator exists keeps the child free
// of the parent's threads. Returns the pid; *wfd is the pipe's write end.
static pid_t fork_child(int (*fn)(int port, const void *arg), const void *arg, int *wfd) {
  int p[2];
  if (pipe(p) != 0) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    close(p[1]);
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the test run
    int port = 0;
    if (read(p[0], &port, sizeof port) != sizeof port) _exit(3);
    _exit(fn(port, arg));
  }
  close(p[0]);
  *wfd = p[1];
  return pid;
}

static void send_port(int wfd, int port) {
  if (write(wfd, &port, sizeof port) != sizeof port) abort();
  close(wfd);
}

static int child_worker(int port, const void *arg) {
  return run_worker(port, "correct horse battery staple", (const char *)arg, "cpu:7") ? 1 : 0;
}

RG_TEST(control_worker_in_a_forked_process) {
  int wfd;
  pid_t pid = fork_child(child_worker, "forked", &wfd);
  RG_REQUIRE(pid > 0);
  rg_control_secret_t key = secret_of("correct horse battery staple");
  rg_control_server_t *s = NULL;
  rg_status_t st = start_server(&key, 0, &s);
  if (st) kill(pid, SIGKILL);
  RG_REQUIRE_OK(st);
  send_port(wfd, rg_control_server_port(s));
  rg_control_event_t ev;
  RG_CHECK(wait_kind(s, RG_CONTROL_EVENT_JOINED, 5, &ev));
  uint32_t id = ev.worker_id;
  const rg_control_hello_t *h = RG_CONTROL_MSG_AS(ev.msg, hello);
  RG_CHECK(h && h->pid == (uint32_t)pid);
  RG_CHECK_CONTAINS(ev.text, "'forked'");
  rg_control_event_deinit(&ev);
  assign_and_expect_ready(t, s, id, 2);
  RG_CHECK(wait_kind(s, RG_CONTROL_EVENT_MESSAGE, 5, &ev));
  const rg_control_ready_t *r = RG_CONTROL_MSG_AS(ev.msg, ready);
  RG_CHECK(r && r->stages_loaded == 2 && r->kv_bytes == (100 + id) * 16);
  rg_control_event_deinit(&ev);
  rg_control_peer_t peer = RIDGE__CONTROL__PEER__INIT, *pp = &peer;
  peer.worker_id = id;
  peer.worker_name = "forked";
  rg_control_peer_table_t pt = RIDGE__CONTROL__PEER_TABLE__INIT;
  pt.n_peers = 1;
  pt.peers = &pp;
  RG_CHECK_OK(rg_control_server_send(s, id, &pt.base));
  rg_control_shutdown_t sd = RIDGE__CONTROL__SHUTDOWN__INIT;
  RG_CHECK_OK(rg_control_server_send(s, id, &sd.base));
  int status = 0;
  waitpid(pid, &status, 0);
  RG_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  rg_control_server_destroy(s);
}

// Joins, then idles (heartbeats flowing on the loop thread) until killed.
static int child_idle_worker(int port, const void *arg) {
  const char *const *nd = arg;
  rg_control_secret_t key = secret_of("s3cret");
  rg_control_client_options_t o = worker_opts(port, &key, nd[0], nd[1]);
  rg_control_client_t *c = NULL;
  rg_status_t st = rg_control_client_create(&o, &c);
  if (st) return 1;
  for (int i = 0; i < 200; i++) usleep(50000);  // at most 10 s, the parent kills it sooner
  rg_control_client_destroy(c);
  return 0;
}

RG_TEST(control_killed_and_stopped_workers_are_declared_lost) {
  static const char *const victim_kill[] = {"victim-kill", "cpu:1"};
  static const char *const victim_stop[] = {"victim-stop", "cpu:2"};
  int wk, ws;
  pid_t pk = fork_child(child_idle_worker, victim_kill, &wk);
  pid_t ps = fork_child(child_idle_worker, victim_stop, &ws);
  RG_REQUIRE(pk > 0 && ps > 0);
  rg_control_secret_t key = secret_of("s3cret");
  rg_control_server_t *s = NULL;
  rg_status_t st = start_server(&key, 0, &s);
  if (st) kill(pk, SIGKILL), kill(ps, SIGKILL);
  RG_REQUIRE_OK(st);
  send_port(wk, rg_control_server_port(s));
  send_port(ws, rg_control_server_port(s));
  uint32_t id_kill = 0, id_stop = 0;
  for (int i = 0; i < 2; i++) {
    rg_control_event_t ev;
    if (!wait_kind(s, RG_CONTROL_EVENT_JOINED, 5, &ev)) break;
    if (strstr(ev.text, "victim-kill")) id_kill = ev.worker_id;
    if (strstr(ev.text, "victim-stop")) id_stop = ev.worker_id;
    rg_control_event_deinit(&ev);
  }
  RG_CHECK(id_kill && id_stop);
  // Let a few heartbeats pass, so silence is what the coordinator notices.
  usleep(300000);

  kill(pk, SIGKILL);
  rg_control_event_t ev;
  RG_CHECK(wait_kind(s, RG_CONTROL_EVENT_LOST, 3, &ev));
  RG_CHECK(ev.worker_id == id_kill);
  RG_CHECK_CONTAINS(ev.text, "'victim-kill' (device cpu:1, host testhost, 127.0.0.1:");
  RG_CHECK_CONTAINS(ev.text, "lost: closed the connection; last heard from");
  rg_control_event_deinit(&ev);

  double t0 = now_s();
  kill(ps, SIGSTOP);
  RG_CHECK(wait_kind(s, RG_CONTROL_EVENT_LOST, 5, &ev));
  double took = now_s() - t0;
  RG_CHECK(ev.worker_id == id_stop);
  RG_CHECK_CONTAINS(ev.text, "'victim-stop' (device cpu:2, host testhost, 127.0.0.1:");
  RG_CHECK_CONTAINS(ev.text, "lost: silent for ");
  RG_CHECK_CONTAINS(ev.text, "(heartbeat timeout 0.60 s)");
  // Declared after the timeout, and well before anyone would call it a hang.
  RG_CHECK(took >= 0.5 && took < 3.0);
  rg_control_event_deinit(&ev);
  // Once lost, the worker is no longer an addressee.
  rg_control_shutdown_t sd = RIDGE__CONTROL__SHUTDOWN__INIT;
  RG_CHECK_ERR(rg_control_server_send(s, id_stop, &sd.base),
               "no such worker has joined, or it was lost");
  kill(ps, SIGKILL);
  waitpid(pk, NULL, 0);
  waitpid(ps, NULL, 0);
  rg_control_server_destroy(s);
}

// A coordinator in a child process, listening until it is stopped or killed.
static int child_coordinator(int port_unused, const void *arg) {
  int fd = *(const int *)arg;
  rg_control_secret_t key = secret_of("s3cret");
  rg_control_server_t *s = NULL;
  if (start_server(&key, 0, &s)) return 1;
  int port = rg_control_server_port(s);
  if (write(fd, &port, sizeof port) != sizeof port) return 2;
  for (int i = 0; i < 200; i++) {
    rg_control_event_t ev;
    rg_status_t st = rg_control_server_recv(s, 0.05, &ev);
    if (st) break;
    rg_control_event_deinit(&ev);
  }
  rg_control_server_destroy(s);
  return 0;
}

RG_TEST(control_worker_errors_when_its_coordinator_is_stopped_or_gone) {
  // A coordinator process that stops answering (SIGSTOP): the worker's recv
  // fails within the heartbeat timeout, naming it.
  int back[2];
  RG_REQUIRE(pipe(back) == 0);
  int wfd;
  pid_t pid = fork_child(child_coordinator, &back[1], &wfd);
  RG_REQUIRE(pid > 0);
  send_port(wfd, 0);
  close(back[1]);
  int port = 0;
  struct timeval tv = {5, 0};
  fd_set fds;
  FD_ZERO(&fds);
  FD_SET(back[0], &fds);
  if (select(back[0] + 1, &fds, NULL, NULL, &tv) != 1 ||
      read(back[0], &port, sizeof port) != sizeof port) {
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    close(back[0]);
    RG_REQUIRE(!"the child coordinator did not report its port");
  }
  close(back[0]);
  rg_control_secret_t key = secret_of("s3cret");
  rg_control_client_options_t o = worker_opts(port, &key, "orphan", "cpu:0");
  rg_control_client_t *c = NULL;
  rg_status_t st = rg_control_client_create(&o, &c);
  if (st) kill(pid, SIGKILL), waitpid(pid, NULL, 0);
  RG_REQUIRE_OK(st);
  // The coordinator's timeout (0.6 s) came with the Welcome.
  double t0 = now_s();
  kill(pid, SIGSTOP);
  rg_control_event_t ev;
  st = rg_control_client_recv(c, 5, &ev);
  double took = now_s() - t0;
  RG_CHECK(st != NULL);
  char want[64];
  snprintf(want, sizeof want, "the coordinator at 127.0.0.1:%d is lost: silent for ", port);
  RG_CHECK_CONTAINS(rg_status_message(st), want);
  RG_CHECK_CONTAINS(rg_status_message(st), "(heartbeat timeout 0.60 s)");
  rg_status_free(st);
  RG_CHECK(took >= 0.5 && took < 3.0);
  // Sends fail the same way once it is lost.
  rg_control_error_t e = RIDGE__CONTROL__ERROR__INIT;
  RG_CHECK_ERR(rg_control_client_send(c, &e.base), "is lost: silent for");
  rg_control_client_destroy(c);
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);

  // A coordinator that closes: the worker hears at once.
  rg_control_server_t *s = NULL;
  RG_REQUIRE_OK(start_server(&key, 0, &s));
  o = worker_opts(rg_control_server_port(s), &key, "orphan2", "cpu:0");
  RG_REQUIRE_OK(rg_control_client_create(&o, &c));
  rg_control_server_destroy(s);
  t0 = now_s();
  RG_CHECK_ERR(rg_control_client_recv(c, 5, &ev), "is lost: closed the connection");
  RG_CHECK(now_s() - t0 < 2.0);
  rg_control_client_destroy(c);
}

// ---- Joining ------------------------------------------------------------------

static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
      getsockname(fd, (struct sockaddr *)&a, &len) != 0)
    abort();
  close(fd);
  return ntohs(a.sin_port);
}

typedef struct {
  rg_control_client_options_t opt;
  rg_status_t status;
  rg_control_client_t *client;
} join_thread_t;

static void *join_thread(void *arg) {
  join_thread_t *j = arg;
  j->status = rg_control_client_create(&j->opt, &j->client);
  return NULL;
}

RG_TEST(control_worker_started_before_its_coordinator_joins) {
  rg_control_secret_t key = secret_of("early bird");
  int port = free_port();
  join_thread_t j = {.opt = worker_opts(port, &key, "early", "cpu:0")};
  pthread_t th;
  pthread_create(&th, NULL, join_thread, &j);
  usleep(300000);  // the worker retries against a closed port meanwhile
  rg_control_server_t *s = NULL;
  rg_status_t st = start_server(&key, port, &s);
  pthread_join(th, NULL);
  RG_REQUIRE_OK(st);
  RG_CHECK_OK(j.status);
  j.status = NULL;
  rg_control_event_t ev;
  RG_CHECK(wait_kind(s, RG_CONTROL_EVENT_JOINED, 3, &ev));
  RG_CHECK_CONTAINS(ev.text, "'early'");
  RG_CHECK(j.client && ev.worker_id == rg_control_client_worker_id(j.client));
  rg_control_event_deinit(&ev);
  rg_control_client_destroy(j.client);
  rg_control_server_destroy(s);
}

RG_TEST(control_unreachable_coordinator_fails_at_the_deadline) {
  rg_control_secret_t key = secret_of("x");
  int port = free_port();
  rg_control_client_options_t o = worker_opts(port, &key, "lonely", "cpu:0");
  o.connect_timeout_s = 0.3;
  rg_control_client_t *c = NULL;
  double t0 = now_s();
  char want[96];
  snprintf(want, sizeof want, "could not connect to the coordinator at 127.0.0.1:%d within 0.3 s",
           port);
  rg_status_t st = rg_control_client_create(&o, &c);
  RG_CHECK(st && c == NULL);
  RG_CHECK_CONTAINS(rg_status_message(st), want);
  RG_CHECK_CONTAINS(rg_status_message(st), "connection refused (ECONNREFUSED)");
  rg_status_free(st);
  RG_CHECK(now_s() - t0 < 2.0);
}

RG_TEST(control_connection_attempt_without_answer_is_abandoned_at_the_deadline) {
  // A listener whose accept queue is full drops new SYNs, so a connection
  // attempt hangs in the kernel: the stand-in for a host that never answers.
  int l = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  RG_REQUIRE(bind(l, (struct sockaddr *)&a, sizeof a) == 0 && listen(l, 0) == 0 &&
             getsockname(l, (struct sockaddr *)&a, &len) == 0);
  int fill[4];
  for (int i = 0; i < 4; i++) {
    fill[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (connect(fill[i], (struct sockaddr *)&a, sizeof a) != 0 && errno != EINPROGRESS) abort();
  }
  usleep(100000);
  rg_control_secret_t key = secret_of("x");
  rg_control_client_options_t o = worker_opts(ntohs(a.sin_port), &key, "patient", "cpu:0");
  o.connect_timeout_s = 0.3;
  rg_control_client_t *c = NULL;
  double t0 = now_s();
  rg_status_t st = rg_control_client_create(&o, &c);
  double took = now_s() - t0;
  RG_CHECK(st && !c);
  RG_CHECK_CONTAINS(rg_status_message(st),
                    "within 0.3 s (1 attempt): the last attempt got no answer");
  rg_status_free(st);
  RG_CHECK(took >= 0.3 && took < 2.0);
  for (int i = 0; i < 4; i++) close(fill[i]);
  close(l);
}

RG_TEST(control_wrong_secret_is_refused_on_both_sides_and_others_still_join) {
  rg_control_secret_t key = secret_of("the right one");
  rg_control_secret_t wrong = secret_of("a wrong one");
  rg_control_server_t *s = NULL;
  RG_REQUIRE_OK(start_server(&key, 0, &s));
  int port = rg_control_server_port(s);
  rg_control_client_options_t o = worker_opts(port, &wrong, "intruder", "cpu:3");
  rg_control_client_t *c = NULL;
  rg_status_t st = rg_control_client_create(&o, &c);
  RG_CHECK(st && !c);
  RG_CHECK_CONTAINS(rg_status_message(st), "authentication with the coordinator at 127.0.0.1:");
  RG_CHECK_CONTAINS(rg_status_message(st), "does not match this worker's shared secret");
  rg_status_free(st);
  rg_control_event_t ev;
  RG_CHECK(wait_kind(s, RG_CONTROL_EVENT_REFUSED, 3, &ev));
  RG_CHECK_CONTAINS(ev.text, "(worker 'intruder' from host testhost, device cpu:3)");
  RG_CHECK_CONTAINS(ev.text, "authentication failed");
  RG_CHECK(ev.worker_id == 0);
  rg_control_event_deinit(&ev);

  o = worker_opts(port, &key, "friend", "cpu:0");
  RG_REQUIRE_OK(rg_control_client_create(&o, &c));
  RG_CHECK(wait_kind(s, RG_CONTROL_EVENT_JOINED, 3, &ev));
  RG_CHECK_CONTAINS(ev.text, "'friend'");
  rg_control_event_deinit(&ev);
  rg_control_client_destroy(c);
  rg_control_server_destroy(s);
}

// A raw TCP peer that never speaks the protocol properly.
static int raw_connect(int port, char *local, size_t cap) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_port = htons((uint16_t)port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) abort();
  struct sockaddr_in me;
  socklen_t len = sizeof me;
  getsockname(fd, (struct sockaddr *)&me, &len);
  rg__control_format_addr((struct sockaddr *)&me, local, cap);
  struct timeval tv = {3, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

// Reads until the coordinator closes; the bytes it sent go to buf.
static size_t read_to_close(int fd, uint8_t *buf, size_t cap, bool *closed) {
  size_t have = 0;
  *closed = false;
  for (;;) {
    uint8_t scratch[256];
    ssize_t n =
        read(fd, have < cap ? buf + have : scratch, have < cap ? cap - have : sizeof scratch);
    // A reset is a close too: bytes the coordinator had not read when it
    // closed make the kernel answer with one.
    if (n == 0 || (n < 0 && errno == ECONNRESET)) *closed = true;
    if (n <= 0) break;
    if (have < cap) have += (size_t)n;
  }
  return have;
}

typedef struct {
  const char *what;
  uint8_t bytes[64];
  size_t len;
  bool half_close;  // shut the write side after sending (a peer that hangs up)
  const char *needle;
} hostile_t;

#define STR_(x) #x
#define STR(x) STR_(x)

static size_t header(uint8_t *out, uint16_t version, uint16_t type, uint32_t length) {
  rg__control_header_put(out, version, type, length);
  return RG__CONTROL_HEADER_BYTES;
}

RG_TEST(control_hostile_peers_are_refused_and_the_coordinator_keeps_serving) {
  rg_control_secret_t key = secret_of("k");
  rg_control_server_t *s = NULL;
  RG_REQUIRE_OK(start_server(&key, 0, &s));
  int port = rg_control_server_port(s);
  hostile_t cases[10] = {
      {.what = "header cut short",
       .len = 5,
       .half_close = true,
       .needle = "closed the connection mid-frame, after 5 of the 12 header bytes"},
      {.what = "payload cut short",
       .len = 22,
       .half_close = true,
       .needle = "closed the connection mid-frame, after 10 of the 100 payload bytes of a Hello"},
      {.what = "oversized length",
       .len = 12,
       .needle = "Hello frame of 100 MiB (104857600 bytes) exceeds the 64.0 KiB limit"},
      {.what = "wrong magic",
       .len = 18,
       .needle = "not a ridge control frame: it starts with 47 45 54 20 (\"GET \")"},
      {.what = "wrong version",
       .len = 12,
       .needle = "the peer speaks control protocol version 99, this side speaks " STR(
           RG_CONTROL_PROTOCOL_VERSION)},
      {.what = "unknown type", .len = 12, .needle = "unknown message type 999"},
      {.what = "garbage payload",
       .len = 28,
       .needle = "the 16-byte payload of a Hello frame does not unpack as a Hello"},
      {.what = "Auth before Hello", .len = 46, .needle = "sent Auth before its Hello"},
      {.what = "bad nonce", .len = 17, .needle = "Hello.nonce is 3 bytes, expected 32"},
      {.what = "silent", .len = 0, .needle = "sent no Hello within the 0.6 s handshake timeout"},
  };
  uint8_t *b;
  b = cases[0].bytes;
  header(b, RG_CONTROL_PROTOCOL_VERSION, RG_CONTROL_MSG_HELLO, 100);
  b = cases[1].bytes;
  header(b, RG_CONTROL_PROTOCOL_VERSION, RG_CONTROL_MSG_HELLO, 100);
  memset(b + 12, 0x42, 10);
  header(cases[2].bytes, RG_CONTROL_PROTOCOL_VERSION, RG_CONTROL_MSG_HELLO, 100u << 20);
  memcpy(cases[3].bytes, "GET / HTTP/1.1\r\n\r\n", 18);
  header(cases[4].bytes, 99, RG_CONTROL_MSG_HELLO, 0);
  header(cases[5].bytes, RG_CONTROL_PROTOCOL_VERSION, 999, 0);
  b = cases[6].bytes;
  header(b, RG_CONTROL_PROTOCOL_VERSION, RG_CONTROL_MSG_HELLO, 16);
  memset(b + 12, 0xff, 16);
  // An Auth with a well-formed 32-byte proof (field 1, bytes: 0x0a, 0x20).
  b = cases[7].bytes;
  header(b, RG_CONTROL_PROTOCOL_VERSION, RG_CONTROL_MSG_AUTH, 34);
  memcpy(b + 12, "\x0a\x20", 2);
  memset(b + 14, 0xab, 32);
  // A Hello whose nonce (field 10, bytes) is 3 bytes long: 0x52 = 10 << 3 | 2.
  b = cases[8].bytes;
  header(b, RG_CONTROL_PROTOCOL_VERSION, RG_CONTROL_MSG_HELLO, 5);
  memcpy(b + 12, "\x52\x03\x01\x02\x03", 5);

  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    hostile_t *h = &cases[i];
    char local[64];
    int fd = raw_connect(port, local, sizeof local);
    if (h->len && write(fd, h->bytes, h->len) != (ssize_t)h->len) abort();
    if (h->half_close) shutdown(fd, SHUT_WR);
    rg_control_event_t ev;
    if (!wait_peer(s, local, 3, &ev)) {
      rg_test_fail(t, __FILE__, __LINE__, "%s: no event for %s", h->what, local);
      close(fd);
      continue;
    }
    RG_CHECK(ev.kind == RG_CONTROL_EVENT_REFUSED);
    char want[128];
    snprintf(want, sizeof want, "refused %s: ", local);
    RG_CHECK_CONTAINS(ev.text, want);
    RG_CHECK_CONTAINS(ev.text, h->needle);
    rg_control_event_deinit(&ev);
    uint8_t reply[512];
    bool closed;
    size_t n = read_to_close(fd, reply, sizeof reply, &closed);
    if (!closed) rg_test_fail(t, __FILE__, __LINE__, "%s: the coordinator did not close", h->what);
    if (strcmp(h->what, "wrong version") == 0) {
      // Answered with a Reject naming both versions, then closed.
      rg__control_header_t hd;
      RG_REQUIRE(n >= RG__CONTROL_HEADER_BYTES);
      rg__control_header_get(reply, &hd);
      RG_CHECK(hd.magic == RG__CONTROL_MAGIC && hd.version == RG_CONTROL_PROTOCOL_VERSION &&
               hd.type == RG_CONTROL_MSG_REJECT);
      RG_REQUIRE(n == RG__CONTROL_HEADER_BYTES + hd.length);
      rg_control_reject_t *r = ridge__control__reject__unpack(NULL, hd.length, reply + 12);
      RG_REQUIRE(r);
      char why[160];
      snprintf(why, sizeof why,
               "protocol version mismatch: the worker speaks control protocol version 99, "
               "this coordinator speaks %d",
               RG_CONTROL_PROTOCOL_VERSION);
      RG_CHECK_CONTAINS(r->reason, why);
      RG_CHECK(r->protocol_version == RG_CONTROL_PROTOCOL_VERSION);
      ridge__control__reject__free_unpacked(r, NULL);
    } else {
      RG_CHECK(n == 0);
    }
    close(fd);
  }
  // Still serving.
  rg_control_client_options_t o = worker_opts(port, &key, "survivor", "cpu:0");
  rg_control_client_t *c = NULL;
  RG_CHECK_OK(rg_control_client_create(&o, &c));
  rg_control_client_destroy(c);
  rg_control_server_destroy(s);
}

RG_TEST(control_joined_worker_over_the_size_limit_is_dropped) {
  rg_control_secret_t key = secret_of("k");
  rg_control_server_options_t so = {.secret = &key, .limits = fast};
  so.limits.max_message_bytes = 4096;
  rg_control_server_t *s = NULL;
  RG_REQUIRE_OK(rg_control_server_create(&so, &s));
  rg_control_client_options_t o = worker_opts(rg_control_server_port(s), &key, "chatty", "cpu:5");
  o.limits.max_message_bytes = 1 << 20;
  rg_control_client_t *c = NULL;
  RG_REQUIRE_OK(rg_control_client_create(&o, &c));
  char *text = malloc(10000);
  memset(text, 'x', 9999);
  text[9999] = 0;
  rg_control_error_t e = RIDGE__CONTROL__ERROR__INIT;
  e.text = text;
  RG_CHECK_OK(rg_control_client_send(c, &e.base));
  rg_control_event_t ev;
  RG_CHECK(wait_kind(s, RG_CONTROL_EVENT_LOST, 3, &ev));
  RG_CHECK_CONTAINS(ev.text, "'chatty' (device cpu:5");
  RG_CHECK_CONTAINS(ev.text,
                    "dropped: Error frame of 9.77 KiB (10002 bytes) exceeds the 4.00 KiB limit");
  rg_control_event_deinit(&ev);
  // The coordinator's own sends are held to its limit before they leave.
  RG_CHECK_ERR(rg_control_client_recv(c, 3, &ev), "closed the connection");
  rg_control_assign_t a = RIDGE__CONTROL__ASSIGN__INIT;
  a.model_path = text;
  RG_CHECK_ERR(rg_control_server_send(s, RG_CONTROL_ALL, &a.base),
               "coordinator: cannot send to the workers: Assign of 9.77 KiB (10002 bytes) exceeds "
               "the 4.00 KiB message limit");
  free(text);
  rg_control_client_destroy(c);
  rg_control_server_destroy(s);
}

// ---- Stopping from a signal handler ---------------------------------------------

static rg_control_server_t *volatile sig_server;
static void on_sigusr1(int sig) {
  rg_control_server_interrupt(sig_server);
}

typedef struct {
  pthread_t target;
} kicker_t;

static void *kick_later(void *arg) {
  kicker_t *k = arg;
  usleep(100000);
  pthread_kill(k->target, SIGUSR1);
  return NULL;
}

RG_TEST(control_interrupt_from_a_signal_handler_stops_a_blocked_recv) {
  rg_control_secret_t key = secret_of("k");
  rg_control_server_t *s = NULL;
  RG_REQUIRE_OK(start_server(&key, 0, &s));
  rg_control_client_options_t o = worker_opts(rg_control_server_port(s), &key, "w", "cpu:0");
  rg_control_client_t *c = NULL;
  RG_REQUIRE_OK(rg_control_client_create(&o, &c));
  rg_control_event_t ev;
  RG_CHECK(wait_kind(s, RG_CONTROL_EVENT_JOINED, 3, &ev));
  rg_control_event_deinit(&ev);
  sig_server = s;
  struct sigaction sa = {.sa_handler = on_sigusr1}, old;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGUSR1, &sa, &old);
  kicker_t k = {pthread_self()};
  pthread_t th;
  pthread_create(&th, NULL, kick_later, &k);
  double t0 = now_s();
  RG_CHECK_ERR(rg_control_server_recv(s, 5, &ev), "coordinator control plane interrupted");
  RG_CHECK(now_s() - t0 < 2.0);
  pthread_join(th, NULL);
  sigaction(SIGUSR1, &old, NULL);
  // Sends fail from then on; the worker sees its coordinator go.
  rg_control_shutdown_t sd = RIDGE__CONTROL__SHUTDOWN__INIT;
  RG_CHECK_ERR(rg_control_server_send(s, RG_CONTROL_ALL, &sd.base), "interrupted");
  RG_CHECK_ERR(rg_control_client_recv(c, 3, &ev), "closed the connection");
  rg_control_client_destroy(c);
  rg_control_server_destroy(s);
}

// ---- Arguments and the secret ---------------------------------------------------

RG_TEST(control_bad_arguments_are_refused_with_messages) {
  rg_control_secret_t key = secret_of("k");
  rg_control_server_options_t so = {.secret = &key};
  rg_control_server_t *s = NULL;
  so.limits = (rg_control_limits_t){.heartbeat_interval_s = 1, .heartbeat_timeout_s = 0.5};
  RG_CHECK_ERR(rg_control_server_create(&so, &s),
               "coordinator: heartbeat timeout 0.5 s must exceed the heartbeat interval 1 s");
  so.limits = (rg_control_limits_t){.max_message_bytes = 10};
  RG_CHECK_ERR(rg_control_server_create(&so, &s), "maximum message size 10 bytes");
  so.limits = fast;
  so.bind_host = "localhost";
  RG_CHECK_ERR(rg_control_server_create(&so, &s),
               "bind address 'localhost' is not an IPv4 or IPv6 address");
  so.bind_host = NULL;
  so.secret = NULL;
  RG_CHECK_ERR(rg_control_server_create(&so, &s), "a shared secret is required");
  so.secret = &key;
  RG_REQUIRE_OK(rg_control_server_create(&so, &s));
  // The same port twice.
  rg_control_server_t *s2 = NULL;
  so.port = rg_control_server_port(s);
  char want[96];
  snprintf(want, sizeof want, "cannot listen on 127.0.0.1:%d: address already in use (EADDRINUSE)",
           so.port);
  RG_CHECK_ERR(rg_control_server_create(&so, &s2), want);
  RG_CHECK(s2 == NULL);
  rg_control_heartbeat_t hb = RIDGE__CONTROL__HEARTBEAT__INIT;
  RG_CHECK_ERR(rg_control_server_send(s, RG_CONTROL_ALL, &hb.base),
               "Heartbeat belongs to the handshake and heartbeats");
  rg_control_stage_instance_t si = RIDGE__CONTROL__STAGE_INSTANCE__INIT;
  RG_CHECK_ERR(rg_control_server_send(s, RG_CONTROL_ALL, &si.base),
               "'ridge.control.StageInstance' is not a control message");
  rg_control_shutdown_t sd = RIDGE__CONTROL__SHUTDOWN__INIT;
  RG_CHECK_ERR(rg_control_server_send(s, 42, &sd.base),
               "cannot send Shutdown to worker 42: no such worker has joined");
  rg_control_event_t ev;
  RG_CHECK_OK(rg_control_server_recv(s, 0.01, &ev));
  RG_CHECK(ev.kind == RG_CONTROL_EVENT_NONE && ev.msg == NULL);
  rg_control_server_destroy(s);

  rg_control_client_options_t co = worker_opts(0, &key, "w", "cpu:0");
  rg_control_client_t *c = NULL;
  RG_CHECK_ERR(rg_control_client_create(&co, &c), "coordinator port 0 is not between 1 and 65535");
  co.port = 1;
  co.secret = NULL;
  RG_CHECK_ERR(rg_control_client_create(&co, &c), "worker: a shared secret is required");

  char host[64];
  int port = 0;
  RG_CHECK_OK(rg_control_parse_endpoint("node3.example:4000", host, sizeof host, &port));
  RG_CHECK(strcmp(host, "node3.example") == 0 && port == 4000);
  RG_CHECK_OK(rg_control_parse_endpoint("[fe80::1]:7", host, sizeof host, &port));
  RG_CHECK(strcmp(host, "fe80::1") == 0 && port == 7);
  RG_CHECK_ERR(rg_control_parse_endpoint("node3", host, sizeof host, &port),
               "coordinator address 'node3' is not HOST:PORT");
  RG_CHECK_ERR(rg_control_parse_endpoint("fe80::1:7", host, sizeof host, &port),
               "is not HOST:PORT");
  RG_CHECK_ERR(rg_control_parse_endpoint("node3:http", host, sizeof host, &port),
               "port 'http' is not a number from 1 to 65535");
  RG_CHECK_ERR(rg_control_parse_endpoint("node3:70000", host, sizeof host, &port),
               "port '70000' is not a number");

  rg_stage_kind_t k;
  Ridge__Control__StageKind w;
  RG_CHECK_OK(rg_control_stage_kind_to_wire(RG_STAGE_MOE, &w));
  RG_CHECK(w == RIDGE__CONTROL__STAGE_KIND__STAGE_KIND_MOE);
  RG_CHECK_OK(rg_control_stage_kind_from_wire(w, &k));
  RG_CHECK(k == RG_STAGE_MOE);
  RG_CHECK_ERR(rg_control_stage_kind_to_wire(RG_STAGE_KV_TRANSFER, &w),
               "stage kind 'kv_transfer' is a move, not a stage a worker hosts");
  RG_CHECK_ERR(rg_control_stage_kind_from_wire(0, &k), "stage kind 0 on the wire is not one of");
}

static bool same_key(const rg_control_secret_t *a, const rg_control_secret_t *b) {
  return memcmp(a->key, b->key, sizeof a->key) == 0;
}

RG_TEST(control_secret_from_a_file_or_the_environment) {
  const char *path = rg_test_write(t, "secret", "hunter2 hunter2\n");
  char p[512];
  snprintf(p, sizeof p, "%s", path);
  rg_control_secret_t a, b = secret_of("hunter2 hunter2");
  chmod(p, 0644);
  char want[640];
  snprintf(want, sizeof want,
           "secret file '%s' has mode 0644: other users can read it; a shared secret must be "
           "private to its owner (chmod 600 '%s')",
           p, p);
  RG_CHECK_ERR(rg_control_secret_load(p, &a), want);
  chmod(p, 0620);
  RG_CHECK_ERR(rg_control_secret_load(p, &a), "has mode 0620: other users can write it");
  chmod(p, 0600);
  RG_CHECK_OK(rg_control_secret_load(p, &a));
  RG_CHECK(same_key(&a, &b));  // the trailing newline is not part of it
  chmod(p, 0400);
  RG_CHECK_OK(rg_control_secret_load(p, &a));
  RG_CHECK(same_key(&a, &b));
  const char *empty = rg_test_write(t, "empty", "\n");
  snprintf(p, sizeof p, "%s", empty);
  chmod(p, 0600);
  RG_CHECK_ERR(rg_control_secret_load(p, &a), "is empty");
  snprintf(p, sizeof p, "%s/missing", rg_test_tmpdir(t));
  RG_CHECK_ERR(rg_control_secret_load(p, &a), "cannot open secret file");
  RG_CHECK_ERR(rg_control_secret_load(rg_test_tmpdir(t), &a), "is not a regular file");

  char *saved = getenv("RIDGE_SECRET") ? strdup(getenv("RIDGE_SECRET")) : NULL;
  unsetenv("RIDGE_SECRET");
  RG_CHECK_ERR(rg_control_secret_load(NULL, &a),
               "no shared secret: give --secret-file FILE or set RIDGE_SECRET");
  setenv("RIDGE_SECRET", "", 1);
  RG_CHECK_ERR(rg_control_secret_load(NULL, &a), "RIDGE_SECRET is set but empty");
  setenv("RIDGE_SECRET", "hunter2 hunter2", 1);
  RG_CHECK_OK(rg_control_secret_load(NULL, &a));
  RG_CHECK(same_key(&a, &b));
  if (saved)
    setenv("RIDGE_SECRET", saved, 1);
  else
    unsetenv("RIDGE_SECRET");
  free(saved);

  char text[65];
  rg_control_secret_t g, g2;
  RG_CHECK_OK(rg_control_secret_generate(text, &g));
  RG_CHECK(strlen(text) == 64 && strspn(text, "0123456789abcdef") == 64);
  RG_CHECK_OK(rg_control_secret_from_text(text, 64, &g2));
  RG_CHECK(same_key(&g, &g2) && !same_key(&g, &b));
}

// ---- The frame reader ------------------------------------------------------------

RG_TEST(control_frames_reassemble_from_any_cut) {
  rg_control_stage_instance_t si = RIDGE__CONTROL__STAGE_INSTANCE__INIT, *sp = &si;
  uint32_t experts[] = {3, 5, 8};
  si.kind = RIDGE__CONTROL__STAGE_KIND__STAGE_KIND_MOE;
  si.layer_begin = 4;
  si.layer_end = 12;
  si.n_experts = 3;
  si.experts = experts;
  si.role = RIDGE__CONTROL__ROLE__ROLE_KV_TIER;
  rg_control_option_t op = RIDGE__CONTROL__OPTION__INIT, *opp = &op;
  op.key = "kv_dtype";
  op.value = "bf16";
  rg_control_assign_t a = RIDGE__CONTROL__ASSIGN__INIT;
  a.model_path = "/m";
  a.n_options = 1;
  a.options = &opp;
  a.n_stages = 1;
  a.stages = &sp;
  a.kv_block_count = 1ull << 40;
  rg_control_heartbeat_t hb = RIDGE__CONTROL__HEARTBEAT__INIT;
  hb.sequence = 7;
  rg__control_frame_t *f1 = NULL, *f2 = NULL;
  RG_REQUIRE_OK(rg__control_frame_pack(&a.base, RG_CONTROL_PROTOCOL_VERSION, 1 << 20, &f1));
  RG_REQUIRE_OK(rg__control_frame_pack(&hb.base, RG_CONTROL_PROTOCOL_VERSION, 1 << 20, &f2));
  uint8_t stream[512];
  RG_REQUIRE(f1->len + f2->len <= sizeof stream);
  memcpy(stream, f1->data, f1->len);
  memcpy(stream + f1->len, f2->data, f2->len);
  size_t total = f1->len + f2->len;
  rg__control_frame_release(f1);
  rg__control_frame_release(f2);
  // Every read size from one byte to the whole stream yields the same two
  // messages.
  for (size_t chunk = 1; chunk <= total; chunk++) {
    rg__control_reader_t r;
    rg__control_reader_init(&r, 1 << 20);
    int got = 0;
    for (size_t off = 0; off < total;) {
      size_t n = total - off < chunk ? total - off : chunk, pos = 0;
      while (pos < n) {
        size_t used;
        bool done;
        rg_status_t s = rg__control_reader_feed(&r, stream + off + pos, n - pos, &used, &done);
        RG_REQUIRE_OK(s);
        pos += used;
        if (!done) continue;
        ProtobufCMessage *m = NULL;
        RG_REQUIRE_OK(rg__control_reader_take(&r, &m));
        const rg_control_assign_t *ga = RG_CONTROL_MSG_AS(m, assign);
        const rg_control_heartbeat_t *gh = RG_CONTROL_MSG_AS(m, heartbeat);
        if (got == 0)
          RG_CHECK(ga && ga->n_stages == 1 && ga->stages[0]->n_experts == 3 &&
                   ga->stages[0]->experts[2] == 8 && ga->stages[0]->layer_end == 12 &&
                   ga->stages[0]->role == RIDGE__CONTROL__ROLE__ROLE_KV_TIER &&
                   strcmp(ga->options[0]->value, "bf16") == 0 && ga->kv_block_count == 1ull << 40);
        else
          RG_CHECK(gh && gh->sequence == 7);
        got++;
        protobuf_c_message_free_unpacked(m, NULL);
      }
      off += n;
    }
    RG_CHECK(got == 2);
    RG_CHECK_OK(rg__control_reader_eof(&r));
    rg__control_reader_deinit(&r);
  }
  RG_CHECK(strcmp(rg_control_msg_name(RG_CONTROL_MSG_PEER_TABLE), "PeerTable") == 0);
  RG_CHECK(strcmp(rg_control_msg_name(77), "type 77") == 0);
}

static int replay_dir(rg_test_ctx_t *t, const char *dir) {
  DIR *d = opendir(dir);
  if (!d) {
    rg_test_fail(t, __FILE__, __LINE__, "cannot open %s", dir);
    return 0;
  }
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    FILE *f = fopen(path, "rb");
    if (!f) continue;
    static uint8_t buf[1 << 16];
    size_t len = fread(buf, 1, sizeof buf, f);
    fclose(f);
    uint8_t *exact = malloc(len ? len : 1);  // exact size, so ASan sees overreads
    memcpy(exact, buf, len);
    rg_fuzz_control_one(exact, len);
    free(exact);
    n++;
  }
  closedir(d);
  return n;
}

RG_TEST(control_fuzz_corpus_replays_cleanly) {
  RG_CHECK(replay_dir(t, RIDGE_SOURCE_DIR "/tests/fuzz/corpus/control") >= 6);
}
