// libFuzzer target for the control plane's decoder: arbitrary bytes as the
// stream a peer sends, cut into reads of a size the first byte picks,
// reassembled into frames, unpacked and field-checked, as both endpoints do
// before they act on anything. Each message that passes is packed again and
// must unpack again. Every input must end in messages or a refusal, never a
// crash, leak or hang.
#include <stdint.h>
#include <stdlib.h>

#include "runtime/control/control_impl.h"

static void exercise(const ProtobufCMessage *m) {
  rg_control_msg_type_t type = rg_control_msg_type(m);
  if (type == RG_CONTROL_MSG_NONE) abort();  // the reader hands out control messages only
  (void)rg_control_msg_name(type);
  const rg_control_hello_t *h = RG_CONTROL_MSG_AS(m, hello);
  if (h) {
    char name[64];
    rg__control_sanitize(name, sizeof name, h->worker_name);
  }
  const rg_control_assign_t *a = RG_CONTROL_MSG_AS(m, assign);
  for (size_t i = 0; a && i < a->n_stages; i++) {
    rg_stage_kind_t k;
    rg_status_free(rg_control_stage_kind_from_wire(a->stages[i]->kind, &k));
  }
  rg__control_frame_t *f = NULL;
  rg_status_t s = rg__control_frame_pack(m, RG_CONTROL_PROTOCOL_VERSION, UINT32_MAX, &f);
  if (s) abort();  // whatever unpacked must pack
  rg__control_reader_t again;
  rg__control_reader_init(&again, UINT32_MAX);
  size_t used = 0;
  bool done = false;
  s = rg__control_reader_feed(&again, f->data, f->len, &used, &done);
  if (s || !done || used != f->len) abort();
  ProtobufCMessage *m2 = NULL;
  s = rg__control_reader_take(&again, &m2);
  if (s) abort();
  protobuf_c_message_free_unpacked(m2, NULL);
  rg__control_reader_deinit(&again);
  rg__control_frame_release(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0) return 0;
  // The first byte: how the stream is cut into reads (1 to 64 bytes), and
  // the limit in force (a stranger's 64 KiB, or a joined worker's 1 MiB).
  uint8_t ctl = data[0];
  data++;
  size--;
  size_t chunk = (size_t)(ctl & 0x3f) + 1;
  size_t max = (ctl & 0x40) ? RG__CONTROL_PREAUTH_MAX_BYTES : (1u << 20);
  rg__control_reader_t r;
  rg__control_reader_init(&r, max);
  for (size_t off = 0; off < size;) {
    size_t n = size - off < chunk ? size - off : chunk;
    for (size_t pos = 0; pos < n;) {
      size_t used = 0;
      bool done = false;
      rg_status_t s = rg__control_reader_feed(&r, data + off + pos, n - pos, &used, &done);
      pos += used;
      if (s) {
        rg_status_free(s);
        goto out;
      }
      if (!done) continue;
      ProtobufCMessage *m = NULL;
      s = rg__control_reader_take(&r, &m);
      if (s) {
        rg_status_free(s);
        goto out;
      }
      exercise(m);
      protobuf_c_message_free_unpacked(m, NULL);
    }
    off += n;
  }
  rg_status_free(rg__control_reader_eof(&r));
out:
  rg__control_reader_deinit(&r);
  return 0;
}
