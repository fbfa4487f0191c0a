#include "base/status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct rg_status_s {
  rg_code_t code;
  char message[];
};

// Returned when allocating the status itself fails. Never freed.
static struct {
  rg_code_t code;
  char message[32];
} oom_status = {RG_OUT_OF_MEMORY, "out of memory"};

static const char *const code_names[] = {
#define RG_X_(c, n, e) n,
    RG_STATUS_CODE_MAP(RG_X_)
#undef RG_X_
};
static const int code_exit[] = {
#define RG_X_(c, n, e) e,
    RG_STATUS_CODE_MAP(RG_X_)
#undef RG_X_
};
_Static_assert(sizeof(code_names) / sizeof(code_names[0]) == RG_STATUS_CODE_COUNT,
               "code name table out of step with RG_STATUS_CODE_MAP");

static rg_status_t from_text(rg_code_t code, const char *prefix, const char *text) {
  size_t pl = prefix ? strlen(prefix) : 0, tl = strlen(text);
  struct rg_status_s *s = malloc(sizeof(*s) + pl + tl + 1);
  if (!s) return (rg_status_t)&oom_status;
  s->code = code;
  if (pl) memcpy(s->message, prefix, pl);
  memcpy(s->message + pl, text, tl + 1);
  return s;
}

rg_status_t rg_status_makev(rg_code_t code, const char *fmt, va_list ap) {
  char buf[2048];
  vsnprintf(buf, sizeof(buf), fmt, ap);
  return from_text(code == RG_OK ? RG_INTERNAL : code, NULL, buf);
}

rg_status_t rg_status_make(rg_code_t code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  rg_status_t s = rg_status_makev(code, fmt, ap);
  va_end(ap);
  return s;
}

rg_status_t rg_status_at(rg_code_t code, const rg_pos_t *pos, const char *fmt, ...) {
  char prefix[512] = "", buf[2048];
  if (pos && pos->file)
    snprintf(prefix, sizeof(prefix), "%s:%d:%d: ", pos->file, pos->line, pos->col);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  return from_text(code == RG_OK ? RG_INTERNAL : code, prefix, buf);
}

rg_status_t rg_status_wrap(rg_status_t s, const char *fmt, ...) {
  if (!s) return NULL;
  char prefix[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof(prefix) - 2, fmt, ap);
  va_end(ap);
  strcat(prefix, ": ");
  rg_status_t w = from_text(s->code, prefix, s->message);
  rg_status_free(s);
  return w;
}

rg_code_t rg_status_code(rg_status_t s) { return s ? s->code : RG_OK; }
const char *rg_status_message(rg_status_t s) { return s ? s->message : ""; }

const char *rg_code_name(rg_code_t code) {
  return (unsigned)code < RG_STATUS_CODE_COUNT ? code_names[code] : "unknown";
}
int rg_code_exit_status(rg_code_t code) {
  return (unsigned)code < RG_STATUS_CODE_COUNT ? code_exit[code] : 1;
}

void rg_status_free(rg_status_t s) {
  if (s && s != (rg_status_t)&oom_status) free(s);
}
