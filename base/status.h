// base/status.h — how every fallible ridge function reports failure.
//
// A status is a pointer: NULL means success, anything else is a heap object
// carrying a code and a message. Messages that come from a config file start
// with "file:line:col: ". The caller owns a non-NULL status and must either
// return it upward or free it with rg_status_free(). Library code never
// prints and never exits; only cli/ turns a status into output.
#ifndef RG_BASE_STATUS_H
#define RG_BASE_STATUS_H

#include <stdarg.h>
#include <stdbool.h>

#define RG_MUST_USE __attribute__((warn_unused_result))
#define RG_PRINTF(f, a) __attribute__((format(printf, f, a)))

// X-macro list: code, name, process exit status the CLI uses for it.
#define RG_STATUS_CODE_MAP(X)          \
  X(RG_OK, "ok", 0)                    \
  X(RG_INVALID_ARGUMENT, "invalid argument", 2) \
  X(RG_PARSE, "parse error", 2)        \
  X(RG_NOT_FOUND, "not found", 2)      \
  X(RG_IO, "i/o error", 1)             \
  X(RG_OUT_OF_MEMORY, "out of memory", 1) \
  X(RG_INFEASIBLE, "infeasible", 3)    \
  X(RG_UNIMPLEMENTED, "unimplemented", 1) \
  X(RG_UNAVAILABLE, "unavailable", 1)  \
  X(RG_INTERNAL, "internal error", 1)  \
  X(RG_DEADLINE_EXCEEDED, "deadline exceeded", 1) \
  X(RG_PEER_LOST, "peer lost", 1)      \
  X(RG_CANCELLED, "cancelled", 1)      \
  X(RG_TRUNCATED, "message truncated", 1) \
  X(RG_DATA_CORRUPT, "data corrupted", 1) \
  X(RG_PROTOCOL, "protocol violation", 1)

typedef enum {
#define RG_X_(c, n, e) c,
  RG_STATUS_CODE_MAP(RG_X_)
#undef RG_X_
  RG_STATUS_CODE_COUNT
} rg_code_t;

typedef struct rg_status_s *rg_status_t;

// A source position inside a config file. file is borrowed from the document
// that produced it; line and col are 1-based.
typedef struct {
  const char *file;
  int line;
  int col;
} rg_pos_t;

RG_MUST_USE rg_status_t rg_status_make(rg_code_t code, const char *fmt, ...)
    RG_PRINTF(2, 3);
RG_MUST_USE rg_status_t rg_status_makev(rg_code_t code, const char *fmt,
                                        va_list ap);
// Same, prefixed with "file:line:col: " when pos is non-NULL.
RG_MUST_USE rg_status_t rg_status_at(rg_code_t code, const rg_pos_t *pos,
                                     const char *fmt, ...) RG_PRINTF(3, 4);
// Returns a new status whose message is "<prefix>: <old message>"; consumes s.
RG_MUST_USE rg_status_t rg_status_wrap(rg_status_t s, const char *fmt, ...)
    RG_PRINTF(2, 3);

rg_code_t rg_status_code(rg_status_t s);
const char *rg_status_message(rg_status_t s);  // "" for OK
const char *rg_code_name(rg_code_t code);
int rg_code_exit_status(rg_code_t code);
void rg_status_free(rg_status_t s);

#define RG_RETURN_IF_ERROR(expr)        \
  do {                                  \
    rg_status_t rg_s_ = (expr);         \
    if (rg_s_) return rg_s_;            \
  } while (0)

#endif  // RG_BASE_STATUS_H
