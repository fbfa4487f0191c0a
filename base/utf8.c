// Valid UTF-8 for output (see base/utf8.h), decoding with utf8proc.
#include "base/utf8.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

char *rg_utf8_sanitize(const char *s, size_t n, size_t *out_replaced) {
  // Each input byte becomes at most 3 output bytes (U+FFFD).
  char *out = malloc(3 * n + 1);
  if (!out) return NULL;
  size_t o = 0, replaced = 0, i = 0;
  while (i < n) {
    utf8proc_int32_t cp;
    utf8proc_ssize_t len =
        utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &cp);
    if (len > 0 && cp != 0) {
      memcpy(out + o, s + i, (size_t)len);
      o += (size_t)len;
      i += (size_t)len;
      continue;
    }
    // An invalid sequence (or NUL): a lead byte and the continuation bytes
    // that follow it, up to the length the lead announces, are one maximal
    // subpart; a stray byte is one by itself. Each becomes one U+FFFD.
    unsigned char lead = (unsigned char)s[i++];
    size_t want = lead >= 0xf0 && lead <= 0xf4   ? 3
                  : lead >= 0xe0 && lead <= 0xef ? 2
                  : lead >= 0xc2 && lead <= 0xdf ? 1
                                                 : 0;
    while (want-- > 0 && i < n && ((unsigned char)s[i] & 0xc0) == 0x80) i++;
    memcpy(out + o, "\xef\xbf\xbd", 3);
    o += 3;
    replaced++;
  }
  out[o] = 0;
  if (out_replaced) *out_replaced = replaced;
  return out;
}
