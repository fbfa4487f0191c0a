// The loop core of both control-plane endpoints: a libuv loop on its own
// thread, an async handle through which caller threads (and signal
// handlers) wake it, a tick timer for heartbeats and deadlines, and the two
// queues between the threads — events out of the loop, frames into it.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/control/control_impl.h"

uint64_t rg__control_now_ns(void) {
  return uv_hrtime();
}

void rg__control_format_addr(const struct sockaddr *sa, char *out, size_t cap) {
  char ip[64] = "?";
  int port = 0;
  if (sa->sa_family == AF_INET) {
    const struct sockaddr_in *a = (const struct sockaddr_in *)sa;
    uv_ip4_name(a, ip, sizeof ip);
    port = ntohs(a->sin_port);
    snprintf(out, cap, "%s:%d", ip, port);
  } else if (sa->sa_family == AF_INET6) {
    const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)sa;
    uv_ip6_name(a, ip, sizeof ip);
    port = ntohs(a->sin6_port);
    snprintf(out, cap, "[%s]:%d", ip, port);
  } else {
    snprintf(out, cap, "(address family %d)", sa->sa_family);
  }
}

typedef struct {
  uv_write_t req;
  rg__control_frame_t *frame;
} write_req_t;

static void on_write(uv_write_t *req, int status) {
  write_req_t *w = (write_req_t *)req;
  rg__control_frame_release(w->frame);
  free(w);
}

int rg__control_write(uv_stream_t *stream, rg__control_frame_t *frame) {
  write_req_t *w = malloc(sizeof *w);
  if (!w) {
    rg__control_frame_release(frame);
    return UV_ENOMEM;
  }
  w->frame = frame;
  uv_buf_t buf = uv_buf_init((char *)frame->data, (unsigned)frame->len);
  int rc = uv_write(&w->req, stream, &buf, 1, on_write);
  if (rc) {
    rg__control_frame_release(frame);
    free(w);
  }
  return rc;
}

int rg__control_write_msg(uv_stream_t *stream, const ProtobufCMessage *msg, uint16_t version) {
  rg__control_frame_t *f = NULL;
  rg_status_t s = rg__control_frame_pack(msg, version, UINT32_MAX, &f);
  if (s) {
    rg_status_free(s);
    return UV_ENOMEM;
  }
  return rg__control_write(stream, f);
}

// The stop, on the loop thread: the failure text first, so a caller blocked
// in recv wakes with the reason, then every handle closes and uv_run returns.
static void begin_stop(rg__control_core_t *core) {
  if (core->stopping) return;
  core->stopping = true;
  int why = atomic_load(&core->stop_requested);
  pthread_mutex_lock(&core->mu);
  if (!core->failed) {
    core->failed = true;
    snprintf(core->failure, sizeof core->failure, "%s control plane %s", core->who,
             why == 2 ? "interrupted" : "stopped");
  }
  core->wake_closed = true;
  atomic_store(&core->signal_ok, false);
  pthread_cond_broadcast(&core->cv);
  pthread_mutex_unlock(&core->mu);
  if (core->on_stop) core->on_stop(core);
  uv_timer_stop(&core->tick);
  uv_close((uv_handle_t *)&core->tick, NULL);
  uv_close((uv_handle_t *)&core->wake, NULL);
}

static void on_wake(uv_async_t *h) {
  rg__control_core_t *core = h->data;
  if (core->stopping) return;
  if (atomic_load(&core->stop_requested)) {
    begin_stop(core);
    return;
  }
  if (core->on_wake) core->on_wake(core);
}

static void on_tick(uv_timer_t *h) {
  rg__control_core_t *core = h->data;
  if (!core->stopping && core->on_tick) core->on_tick(core);
}

static void *loop_main(void *arg) {
  rg__control_core_t *core = arg;
  uv_run(&core->loop, UV_RUN_DEFAULT);
  return NULL;
}

uint64_t rg__control_tick_ms(const rg_control_limits_t *l) {
  // Silence is noticed within a quarter of the timeout past it, and
  // heartbeats leave on time.
  double t = fmin(l->heartbeat_interval_s, l->heartbeat_timeout_s / 4);
  t = fmin(t, l->handshake_timeout_s / 4);
  uint64_t ms = (uint64_t)(t * 1000);
  return ms ? ms : 1;
}

rg_status_t rg__control_core_init(rg__control_core_t *core, const char *who,
                                  const rg_control_limits_t *limits) {
  core->who = who;
  core->limits = *limits;
  core->tick_ms = rg__control_tick_ms(limits);
  atomic_init(&core->stop_requested, 0);
  atomic_init(&core->signal_ok, false);
  int rc = uv_loop_init(&core->loop);
  if (rc)
    return rg_status_make(RG_INTERNAL, "%s: cannot start an event loop: %s", who, uv_strerror(rc));
  rc = uv_async_init(&core->loop, &core->wake, on_wake);
  if (rc) {
    uv_loop_close(&core->loop);
    return rg_status_make(RG_INTERNAL, "%s: cannot create a wake-up handle: %s", who,
                          uv_strerror(rc));
  }
  core->wake.data = core;
  uv_timer_init(&core->loop, &core->tick);
  core->tick.data = core;
  pthread_mutex_init(&core->mu, NULL);
  // recv's deadlines must not move when the wall clock is set.
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&core->cv, &ca);
  pthread_condattr_destroy(&ca);
  core->initialized = true;
  atomic_store(&core->signal_ok, true);
  return NULL;
}

void rg__control_core_retick(rg__control_core_t *core) {
  core->tick_ms = rg__control_tick_ms(&core->limits);
  uv_timer_start(&core->tick, on_tick, core->tick_ms, core->tick_ms);
}

rg_status_t rg__control_core_start(rg__control_core_t *core) {
  uv_timer_start(&core->tick, on_tick, core->tick_ms, core->tick_ms);
  int rc = pthread_create(&core->thread, NULL, loop_main, core);
  if (rc)
    return rg_status_make(RG_INTERNAL, "%s: cannot start the control thread: %s", core->who,
                          strerror(rc));
  core->thread_started = true;
  return NULL;
}

void rg__control_core_interrupt(rg__control_core_t *core) {
  int expected = 0;
  atomic_compare_exchange_strong(&core->stop_requested, &expected, 2);
  if (atomic_load(&core->signal_ok)) uv_async_send(&core->wake);
}

void rg__control_core_deinit(rg__control_core_t *core) {
  if (!core->initialized) return;
  int expected = 0;
  atomic_compare_exchange_strong(&core->stop_requested, &expected, 1);
  if (core->thread_started) {
    pthread_mutex_lock(&core->mu);
    if (!core->wake_closed) uv_async_send(&core->wake);
    pthread_mutex_unlock(&core->mu);
    pthread_join(core->thread, NULL);
  } else {
    // The loop never ran: close the handles here, where no other thread
    // can touch them, and let uv_run call their close callbacks.
    begin_stop(core);
    uv_run(&core->loop, UV_RUN_DEFAULT);
  }
  uv_loop_close(&core->loop);
  for (rg__control_event_node_t *n = core->in_head, *next; n; n = next) {
    next = n->next;
    rg_control_event_deinit(&n->ev);
    free(n);
  }
  for (rg__control_out_t *o = core->out_head, *next; o; o = next) {
    next = o->next;
    rg__control_frame_release(o->frame);
    free(o);
  }
  core->in_head = core->in_tail = NULL;
  core->out_head = core->out_tail = NULL;
  pthread_cond_destroy(&core->cv);
  pthread_mutex_destroy(&core->mu);
  core->initialized = false;
}

void rg__control_core_push_event(rg__control_core_t *core, const rg_control_event_t *ev) {
  rg__control_event_node_t *n = malloc(sizeof *n);
  if (!n) {
    // Nowhere to put it; the message would leak otherwise.
    rg_control_event_t copy = *ev;
    rg_control_event_deinit(&copy);
    return;
  }
  n->ev = *ev;
  n->next = NULL;
  pthread_mutex_lock(&core->mu);
  if (core->in_tail)
    core->in_tail->next = n;
  else
    core->in_head = n;
  core->in_tail = n;
  pthread_cond_broadcast(&core->cv);
  pthread_mutex_unlock(&core->mu);
}

void rg__control_core_fail(rg__control_core_t *core, const char *text) {
  pthread_mutex_lock(&core->mu);
  if (!core->failed) {
    core->failed = true;
    snprintf(core->failure, sizeof core->failure, "%s", text);
  }
  pthread_cond_broadcast(&core->cv);
  pthread_mutex_unlock(&core->mu);
}

rg_status_t rg__control_core_post(rg__control_core_t *core, uint32_t worker_id,
                                  rg__control_frame_t *frame) {
  rg__control_out_t *o = malloc(sizeof *o);
  if (!o) {
    rg__control_frame_release(frame);
    return rg_status_make(RG_OUT_OF_MEMORY, "out of memory queueing a control message");
  }
  o->worker_id = worker_id;
  o->frame = frame;
  o->next = NULL;
  pthread_mutex_lock(&core->mu);
  if (core->failed) {
    rg_status_t s = rg_status_make(RG_UNAVAILABLE, "%s", core->failure);
    pthread_mutex_unlock(&core->mu);
    rg__control_frame_release(frame);
    free(o);
    return s;
  }
  if (core->out_tail)
    core->out_tail->next = o;
  else
    core->out_head = o;
  core->out_tail = o;
  // Under the lock, so the loop cannot close `wake` between the check of
  // `failed` above and this call.
  uv_async_send(&core->wake);
  pthread_mutex_unlock(&core->mu);
  return NULL;
}

rg__control_out_t *rg__control_core_take_outbox(rg__control_core_t *core) {
  pthread_mutex_lock(&core->mu);
  rg__control_out_t *o = core->out_head;
  core->out_head = core->out_tail = NULL;
  pthread_mutex_unlock(&core->mu);
  return o;
}

rg_status_t rg__control_core_failure(rg__control_core_t *core) {
  pthread_mutex_lock(&core->mu);
  rg_status_t s = core->failed ? rg_status_make(RG_UNAVAILABLE, "%s", core->failure) : NULL;
  pthread_mutex_unlock(&core->mu);
  return s;
}

rg_status_t rg__control_core_recv(rg__control_core_t *core, double timeout_s,
                                  rg_control_event_t *out) {
  memset(out, 0, sizeof *out);
  if (!(timeout_s > 0)) timeout_s = 0;  // NaN and negatives poll
  if (timeout_s > 1e6) timeout_s = 1e6;
  struct timespec deadline;
  clock_gettime(CLOCK_MONOTONIC, &deadline);
  double whole = floor(timeout_s);
  deadline.tv_sec += (time_t)whole;
  deadline.tv_nsec += (long)((timeout_s - whole) * 1e9);
  if (deadline.tv_nsec >= 1000000000L) {
    deadline.tv_sec++;
    deadline.tv_nsec -= 1000000000L;
  }
  pthread_mutex_lock(&core->mu);
  while (!core->in_head && !core->failed) {
    if (pthread_cond_timedwait(&core->cv, &core->mu, &deadline) != 0) break;
  }
  rg__control_event_node_t *n = core->in_head;
  if (n) {
    core->in_head = n->next;
    if (!core->in_head) core->in_tail = NULL;
    pthread_mutex_unlock(&core->mu);
    *out = n->ev;
    free(n);
    return NULL;
  }
  rg_status_t s = core->failed ? rg_status_make(RG_UNAVAILABLE, "%s", core->failure) : NULL;
  pthread_mutex_unlock(&core->mu);
  out->kind = RG_CONTROL_EVENT_NONE;
  return s;
}
