// devices/queue.c — the public wrappers for ops, copies and events: argument
// checks, the defaults for optional backend slots, then dispatch (see
// devices/backend.h for what each NULL slot means).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "devices/backend.h"

// ----- Ops -----------------------------------------------------------------------

int rg_device_supports_op(const rg_device_t *dev, rg_op_kind_t op) {
  if (!dev || (unsigned)op >= RG_OP_COUNT || !dev->vt->supports_op) return 0;
  return dev->vt->supports_op((rg_device_t *)dev, op) ? 1 : 0;
}

static const char *op_label(const rg_op_t *op, char *buf, size_t len) {
  snprintf(buf, len, "%s%s%s", rg_op_name(op->kind), op->label ? " " : "",
           op->label ? op->label : "");
  return buf;
}

rg_status_t rg_device_check_op(const rg_device_t *dev, const rg_op_t *op) {
  if (!dev || !op) return rg_status_make(RG_INVALID_ARGUMENT, "rg_device_check_op: NULL argument");
  if ((unsigned)op->kind >= RG_OP_COUNT)
    return rg_status_make(RG_INVALID_ARGUMENT, "unknown op %d", (int)op->kind);
  if (!rg_device_supports_op(dev, op->kind)) {
    // A backend that knows why it has no kernel (none were built, the GPU
    // cannot load them) says so through check_op.
    rg_status_t why = dev->vt->check_op ? dev->vt->check_op((rg_device_t *)dev, op) : NULL;
    if (why) return why;
    return rg_status_make(RG_UNIMPLEMENTED, "%s has no %s kernel (the %s backend %s)", dev->label,
                          rg_op_name(op->kind), dev->driver->name,
                          dev->vt->supports_op ? "lacks this op" : "runs no ops");
  }
  if (op->kind == RG_OP_MATMUL && op->matmul.wlayout &&
      op->matmul.wlayout != rg_device_weight_layout(dev, op->matmul.wtype))
    return rg_status_make(RG_UNIMPLEMENTED,
                          "%s takes %s weights in rows, not in the packed layout %d (which is "
                          "another device's)",
                          dev->label, rg_dtype_name(op->matmul.wtype), op->matmul.wlayout);
  if (dev->vt->check_op) return dev->vt->check_op((rg_device_t *)dev, op);
  return NULL;
}

int rg_device_weight_layout(const rg_device_t *dev, rg_dtype_t t) {
  return dev && dev->vt->weight_layout ? dev->vt->weight_layout((rg_device_t *)dev, t) : 0;
}

rg_status_t rg_queue_submit(rg_queue_t *q, const rg_op_t *op) {
  if (!q || !op) return rg_status_make(RG_INVALID_ARGUMENT, "rg_queue_submit: NULL argument");
  rg_op_operand_t ops[RG_OP_MAX_OPERANDS];
  size_t n;
  char name[128];
  RG_RETURN_IF_ERROR(rg_status_wrap(rg_op_operands(op, ops, &n), "on %s", q->device->label));
  for (size_t i = 0; i < n; i++) {
    const rg_ref_t *r = ops[i].ref;
    if (!r->buf) {
      if (ops[i].optional) continue;
      return rg_status_make(RG_INVALID_ARGUMENT, "%s on %s: operand %s has no buffer",
                            op_label(op, name, sizeof name), q->device->label, ops[i].name);
    }
    if (r->buf->device != q->device)
      return rg_status_make(RG_INVALID_ARGUMENT,
                            "%s on %s: operand %s is a buffer of %s; copy it to %s first",
                            op_label(op, name, sizeof name), q->device->label, ops[i].name,
                            r->buf->device->label, q->device->label);
    if (r->offset > r->buf->size || ops[i].bytes > r->buf->size - r->offset)
      return rg_status_make(
          RG_INVALID_ARGUMENT,
          "%s on %s: operand %s needs %llu bytes at offset %zu but its buffer holds %zu",
          op_label(op, name, sizeof name), q->device->label, ops[i].name,
          (unsigned long long)ops[i].bytes, r->offset, r->buf->size);
  }
  RG_RETURN_IF_ERROR(rg_device_check_op(q->device, op));
  if (!q->vt->submit)
    return rg_status_make(RG_UNIMPLEMENTED, "%s on %s: the %s backend runs no ops",
                          op_label(op, name, sizeof name), q->device->label,
                          q->device->driver->name);
  double t0 = q->profiling ? rg_clock_now() : 0;
  rg_status_t s = q->vt->submit(q, op);
  if (q->profiling && !s) {
    // An asynchronous queue is timed to the op's end (see devices.h).
    if (q->vt->wait) s = q->vt->wait(q);
    q->profile.calls[op->kind]++;
    q->profile.seconds[op->kind] += rg_clock_now() - t0;
  }
  return s ? rg_status_wrap(s, "%s on %s", op_label(op, name, sizeof name), q->device->label)
           : NULL;
}

void rg_queue_set_profiling(rg_queue_t *q, int on) {
  if (q) q->profiling = on != 0;
}

void rg_queue_op_profile(const rg_queue_t *q, rg_op_profile_t *out) {
  if (q)
    *out = q->profile;
  else
    memset(out, 0, sizeof *out);
}

void rg_queue_op_profile_reset(rg_queue_t *q) {
  if (q) memset(&q->profile, 0, sizeof q->profile);
}

// ----- Copies ----------------------------------------------------------------------

static rg_status_t range(const rg_buffer_t *b, const char *what, size_t off, size_t len) {
  if (!b) return rg_status_make(RG_INVALID_ARGUMENT, "%s: buffer is NULL", what);
  if (off > b->size || len > b->size - off)
    return rg_status_make(
        RG_INVALID_ARGUMENT,
        "%s of %zu bytes at offset %zu runs past the end of a %zu-byte buffer on %s", what, len,
        off, b->size, b->device->label);
  return NULL;
}

rg_status_t rg_queue_write(rg_queue_t *q, rg_buffer_t *dst, size_t off, const void *src,
                           size_t len) {
  if (!q) return rg_status_make(RG_INVALID_ARGUMENT, "rg_queue_write: queue is NULL");
  RG_RETURN_IF_ERROR(range(dst, "queue write", off, len));
  if (dst->device != q->device)
    return rg_status_make(RG_INVALID_ARGUMENT, "queue write on %s: the buffer belongs to %s",
                          q->device->label, dst->device->label);
  if (!len) return NULL;
  if (!src)
    return rg_status_make(RG_INVALID_ARGUMENT, "queue write on %s: the host pointer is NULL",
                          q->device->label);
  if (q->vt->write) return q->vt->write(q, dst, off, src, len);
  RG_RETURN_IF_ERROR(rg_queue_wait(q));
  return rg_buffer_write(dst, off, src, len);
}

rg_status_t rg_queue_read(rg_queue_t *q, rg_buffer_t *src, size_t off, void *dst, size_t len) {
  if (!q) return rg_status_make(RG_INVALID_ARGUMENT, "rg_queue_read: queue is NULL");
  RG_RETURN_IF_ERROR(range(src, "queue read", off, len));
  if (src->device != q->device)
    return rg_status_make(RG_INVALID_ARGUMENT, "queue read on %s: the buffer belongs to %s",
                          q->device->label, src->device->label);
  if (!len) return NULL;
  if (!dst)
    return rg_status_make(RG_INVALID_ARGUMENT, "queue read on %s: the host pointer is NULL",
                          q->device->label);
  if (q->vt->read) return q->vt->read(q, src, off, dst, len);
  RG_RETURN_IF_ERROR(rg_queue_wait(q));
  return rg_buffer_read(src, off, dst, len);
}

rg_status_t rg_queue_copy(rg_queue_t *q, rg_buffer_t *dst, size_t dst_off, rg_buffer_t *src,
                          size_t src_off, size_t len) {
  if (!q) return rg_status_make(RG_INVALID_ARGUMENT, "rg_queue_copy: queue is NULL");
  RG_RETURN_IF_ERROR(range(dst, "copy destination", dst_off, len));
  RG_RETURN_IF_ERROR(range(src, "copy source", src_off, len));
  if (!len) return NULL;
  if (dst->device == q->device && src->device == q->device && q->vt->copy)
    return q->vt->copy(q, dst, dst_off, src, src_off, len);
  // Either side host visible: one transfer. Neither: stage through the host.
  void *sp = rg_buffer_host_ptr(src), *dp = rg_buffer_host_ptr(dst);
  RG_RETURN_IF_ERROR(rg_queue_wait(q));
  if (sp && dp) {
    memmove((char *)dp + dst_off, (char *)sp + src_off, len);
    return NULL;
  }
  if (sp) return rg_buffer_write(dst, dst_off, (char *)sp + src_off, len);
  if (dp) return rg_buffer_read(src, src_off, (char *)dp + dst_off, len);
  void *tmp = malloc(len);
  if (!tmp)
    return rg_status_make(RG_OUT_OF_MEMORY, "copy %s -> %s: no host memory to stage %zu bytes",
                          src->device->label, dst->device->label, len);
  rg_status_t s = rg_buffer_read(src, src_off, tmp, len);
  if (!s) s = rg_buffer_write(dst, dst_off, tmp, len);
  free(tmp);
  return s;
}

// ----- Events ------------------------------------------------------------------------

void rg__event_init(rg_event_t *ev, const rg_event_vtable_t *vt, rg_device_t *dev) {
  ev->vt = vt;
  ev->device = dev;
  atomic_init(&ev->refs, 1);
  rg__device_retain(dev);
}

rg_status_t rg_queue_record(rg_queue_t *q, rg_event_t **out) {
  if (!q || !out) return rg_status_make(RG_INVALID_ARGUMENT, "rg_queue_record: NULL argument");
  *out = NULL;
  if (q->vt->record) return q->vt->record(q, out);
  // A synchronous queue's work is done: the event is complete now.
  rg_event_t *ev = calloc(1, sizeof(*ev));
  if (!ev)
    return rg_status_make(RG_OUT_OF_MEMORY, "out of memory recording an event on %s",
                          q->device->label);
  rg__event_init(ev, NULL, q->device);
  *out = ev;
  return NULL;
}

int rg_event_done(rg_event_t *ev) {
  return !ev || !ev->vt || ev->vt->done(ev);
}

rg_status_t rg_event_wait(rg_event_t *ev, double timeout_s) {
  if (!ev || !ev->vt) return NULL;
  if (!(timeout_s >= 0))
    return rg_status_make(RG_INVALID_ARGUMENT, "event wait: a timeout of %g s", timeout_s);
  return ev->vt->wait(ev, timeout_s);
}

rg_status_t rg__event_poll_wait(rg_event_t *e, double timeout_s, rg__event_query_fn query) {
  double deadline = rg_clock_now() + timeout_s, nap = 20e-6;
  for (;;) {
    int done = 0;
    rg_status_t s = query(e, &done);
    if (s) return rg_status_wrap(s, "waiting for an event on %s", e->device->label);
    if (done) return NULL;
    if (rg_clock_now() >= deadline)
      return rg_status_make(RG_UNAVAILABLE,
                            "waiting for an event on %s: the work is not done after %g s",
                            e->device->label, timeout_s);
    rg_clock_sleep(nap);
    if (nap < 1e-3) nap *= 2;
  }
}

rg_status_t rg_queue_wait_event(rg_queue_t *q, rg_event_t *ev) {
  if (!q) return rg_status_make(RG_INVALID_ARGUMENT, "rg_queue_wait_event: queue is NULL");
  if (!ev || !ev->vt) return NULL;
  if (q->vt->wait_event) {
    rg_status_t s = q->vt->wait_event(q, ev);
    if (!s || rg_status_code(s) != RG_UNIMPLEMENTED) return s;
    rg_status_free(s);
  }
  // A foreign event: the host waits for it before q takes more work. Work
  // on a device is bounded, but a wedged device must not hang ridge.
  return rg_event_wait(ev, 600.0);
}

void rg_event_release(rg_event_t *ev) {
  if (!ev || atomic_fetch_sub(&ev->refs, 1) != 1) return;
  rg_device_t *dev = ev->device;
  if (ev->vt)
    ev->vt->destroy(ev);
  else
    free(ev);
  rg__device_release(dev);
}

// ----- Wrapping host memory ---------------------------------------------------------

rg_status_t rg_buffer_wrap(rg_device_t *dev, void *ptr, size_t len, void (*release_fn)(void *ctx),
                           void *ctx, rg_buffer_t **out) {
  if (!out) return rg_status_make(RG_INVALID_ARGUMENT, "rg_buffer_wrap: out is NULL");
  *out = NULL;
  if (!dev || (!ptr && len))
    return rg_status_make(RG_INVALID_ARGUMENT, "rg_buffer_wrap: NULL device or memory");
  if (!dev->vt->buffer_wrap)
    return rg_status_make(RG_UNIMPLEMENTED,
                          "%s cannot use host memory in place; allocate a buffer and write to it",
                          dev->label);
  return dev->vt->buffer_wrap(dev, ptr, len, release_fn, ctx, out);
}
