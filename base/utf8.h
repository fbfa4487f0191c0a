// base/utf8.h — making text valid UTF-8 for output formats that require it.
//
// A tokenizer's single token may be part of a multi-byte character (byte
// fallback, or a BPE merge that splits one), so decoded text can end in, or
// hold, an incomplete sequence. JSON must be valid UTF-8; like other servers,
// ridge replaces each maximal invalid subpart with U+FFFD (the Unicode
// recommendation, W3C/WHATWG "replacement" decoding) and keeps the raw ids
// beside it.
//
// Ownership: the returned string is malloc'd; the caller frees it.
#ifndef RG_BASE_UTF8_H
#define RG_BASE_UTF8_H

#include <stddef.h>

// A NUL-terminated copy of s[0..n) with invalid sequences replaced by
// U+FFFD; *out_replaced (may be NULL) counts the replacements. NULL on out
// of memory.
char *rg_utf8_sanitize(const char *s, size_t n, size_t *out_replaced);

#endif  // RG_BASE_UTF8_H
