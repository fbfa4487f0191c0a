// libFuzzer target for the data plane's decoders: the bytes a worker or the
// coordinator receives from a peer — a STEP's micro-batch (rg_step_decode)
// followed by its KV plan, a DONE report, a transfer order, an expect order —
// as each side checks them before acting. The first byte picks the decoder.
// What decodes must encode again to the same meaning; nothing may crash,
// leak, hang or read past the bytes given.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cluster/cluster_impl.h"
#include "runtime/step.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  const uint8_t *p = data + 1;
  size_t n = size - 1;
  uint8_t *buf = NULL;
  size_t cap = 0, len = 0;
  switch (data[0] % 5) {
    case 0: {
      // A micro-batch, as a worker bounds it: vocab, context, blocks.
      rg_step_limits_t lim = {512, 256, 16, 64};
      rg_step_buf_t sb = {0};
      rg_step_t st;
      size_t used = 0;
      rg_status_t s = rg_step_decode(p, n, &lim, &sb, &st, &used);
      if (!s) {
        if (used > n) abort();
        rg__kvplan_t plan = {0};
        size_t used2 = 0;
        rg_status_free(rg__kvplan_decode(p + used, n - used, &plan, &used2));
        if (used2 > n - used) abort();
        rg__kvplan_free(&plan);
      }
      rg_status_free(s);
      rg_step_buf_free(&sb);
      break;
    }
    case 1: {
      rg__kvplan_t plan = {0};
      size_t used = 0;
      rg_status_t s = rg__kvplan_decode(p, n, &plan, &used);
      if (!s) {
        if (used > n) abort();
        if (rg__kvplan_encode(&plan, &buf, &cap, &len) || len != used) abort();
        if (memcmp(buf, p, len)) abort();
      }
      rg_status_free(s);
      rg__kvplan_free(&plan);
      break;
    }
    case 2: {
      rg__done_t d;
      rg_status_t s = rg__done_decode(p, n, &d);
      if (!s) {
        if (rg__done_encode(&d, &buf, &cap, &len)) abort();
        rg__done_t d2;
        if (rg__done_decode(buf, len, &d2) || d2.n_events != d.n_events ||
            d2.n_stages != d.n_stages || d2.n_bad_keys != d.n_bad_keys)
          abort();
        free(d2.events);
        free(d.events);
      }
      rg_status_free(s);
      break;
    }
    case 3: {
      rg__xfer_t x;
      rg_status_t s = rg__xfer_decode(p, n, &x);
      if (!s) {
        if (rg__xfer_encode(&x, &buf, &cap, &len) || len != n || memcmp(buf, p, n)) abort();
        rg__xfer_free(&x);
      }
      rg_status_free(s);
      break;
    }
    default: {
      static rg__expect_order_t e;
      rg_status_t s = rg__expect_decode(p, n, &e);
      if (!s && (rg__expect_encode(&e, &buf, &cap, &len) || len != n || memcmp(buf, p, n)))
        abort();
      rg_status_free(s);
      break;
    }
  }
  free(buf);
  return 0;
}
