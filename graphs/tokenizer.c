// graphs/tokenizer.c — the tokenizer core: building one from a vocabulary,
// encoding (added tokens, pre-tokenizer regexes through PCRE2, BPE by merge
// rank), the normalizers tokenizer.json files declare (through utf8proc) and
// decoding. The tokenizer.json reader and writer live in tokenizer_hf.c, the
// test-vocabulary trainer in tokenizer_train.c.
#define RG_TOKENIZER_INTERNAL
#include "graphs/tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

// Pre-tokenizer regexes, as the tokenizer.json files of these models spell
// them (after JSON unescaping).
static const char LLAMA3_RE[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char QWEN2_RE[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char GPT2_RE[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static const struct {
  const char *name;  // canonical name first in each group
  const char *regex;
  int ignore_merges;
} known_pre[] = {
    {"llama-bpe", LLAMA3_RE, 1}, {"llama3", LLAMA3_RE, 1},          {"llama-v3", LLAMA3_RE, 1},
    {"qwen2", QWEN2_RE, 0},      {"deepseek-r1-qwen", QWEN2_RE, 0}, {"gpt-2", GPT2_RE, 0},
    {"gpt2", GPT2_RE, 0},        {"default", GPT2_RE, 0},
};
#define N_KNOWN_PRE (sizeof(known_pre) / sizeof(known_pre[0]))
#define MAX_REGEXES 8
#define MAX_TOKEN_BYTES (1u << 20)

static const char *const eog_names[] = {"<|eot_id|>",    "<|eom_id|>",   "<|end_of_text|>",
                                        "<|endoftext|>", "<|im_end|>",   "</s>",
                                        "<|end|>",       "<end_of_turn>"};
#define MAX_EOG 16

typedef struct {
  int32_t rank;  // -1: empty slot
  int32_t result;
  int32_t left, right;
} merge_slot_t;

struct rg_tokenizer_s {
  size_t n;           // vocabulary size
  char **tok;         // (n) token strings, GGUF form, NUL-terminated, in tok_arena
  uint32_t *tok_len;  // (n)
  int32_t *type;      // (n) GGUF token types
  char *tok_arena;
  char *bytes;        // decoded bytes of every token, back to back
  size_t *bytes_off;  // (n + 1) token i is bytes[bytes_off[i] .. bytes_off[i+1])
  size_t n_merges;
  char **merge;  // (n_merges) "a b", in merge_arena
  char *merge_arena;
  char *pre;
  int ignore_merges;
  int32_t bos, eos;
  int32_t byte_id[256];  // token of each single byte, -1 if the vocabulary lacks it
  int32_t *str_tab;      // open addressing over token strings; -1 empty
  size_t str_mask;
  merge_slot_t *merge_tab;  // open addressing over (left, right) ids
  size_t merge_mask;
  int32_t *special;  // control and user-defined ids, by first byte, longest first
  size_t n_special;
  uint32_t special_at[257];  // special[special_at[c] .. special_at[c+1]) start with byte c
  int32_t eog[MAX_EOG];
  size_t n_eog;
  size_t n_re;
  char *re_src[MAX_REGEXES];
  char *re_field[MAX_REGEXES];  // where each regex came from, for messages
  pcre2_code *re[MAX_REGEXES];
  rg__norm_t norm[RG__MAX_NORM];
  size_t n_norm;
  char *src;  // the file it was read from, for messages at encode time
};

static const char *const norm_names[] = {
#define RG_X_(e, n) n,
    RG__NORM_MAP(RG_X_)
#undef RG_X_
};
_Static_assert(sizeof(norm_names) / sizeof(norm_names[0]) == RG__NORM_COUNT,
               "norm_names out of step with RG__NORM_MAP");

const char *rg__norm_name(rg__norm_kind_t k) {
  return (unsigned)k < RG__NORM_COUNT ? norm_names[k] : "?";
}

// ----- GPT-2 bytes_to_unicode ---------------------------------------------------
//
// Printable Latin-1 bytes ('!'..'~', '¡'..'¬', '®'..'ÿ') stand for themselves;
// the other 68 bytes (controls, space, DEL, NBSP, soft hyphen) are shifted to
// U+0100.. in byte order, so every byte is a visible character.

static int byte_printable(unsigned b) {
  return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
}

static uint32_t byte_cp(uint8_t b) {
  if (byte_printable(b)) return b;
  if (b <= 32) return 256u + b;
  if (b >= 127 && b <= 160) return 256u + 33u + (b - 127u);
  return 256u + 33u + 34u;  // 173
}

// The byte a codepoint stands for, or -1.
static int cp_byte(uint32_t cp) {
  if (cp < 256) return byte_printable(cp) ? (int)cp : -1;
  if (cp < 256 + 33) return (int)(cp - 256);
  if (cp < 256 + 33 + 34) return (int)(cp - 256 - 33 + 127);
  if (cp == 256 + 33 + 34) return 173;
  return -1;
}

size_t rg__byte_to_utf8(uint8_t b, char out[2]) {
  uint32_t cp = byte_cp(b);
  if (cp < 0x80) {
    out[0] = (char)cp;
    return 1;
  }
  out[0] = (char)(0xC0 | (cp >> 6));
  out[1] = (char)(0x80 | (cp & 0x3F));
  return 2;
}

// Decodes one UTF-8 character at s (n > 0 bytes left). Returns its length;
// *cp is UINT32_MAX for an invalid sequence, whose length is then 1.
static size_t utf8_next(const uint8_t *s, size_t n, uint32_t *cp) {
  uint8_t c = s[0];
  size_t len;
  uint32_t v, min;
  if (c < 0x80) {
    *cp = c;
    return 1;
  } else if ((c & 0xE0) == 0xC0) {
    len = 2, v = c & 0x1F, min = 0x80;
  } else if ((c & 0xF0) == 0xE0) {
    len = 3, v = c & 0x0F, min = 0x800;
  } else if ((c & 0xF8) == 0xF0) {
    len = 4, v = c & 0x07, min = 0x10000;
  } else {
    *cp = UINT32_MAX;
    return 1;
  }
  if (len > n) {
    *cp = UINT32_MAX;
    return 1;
  }
  for (size_t i = 1; i < len; i++) {
    if ((s[i] & 0xC0) != 0x80) {
      *cp = UINT32_MAX;
      return 1;
    }
    v = (v << 6) | (s[i] & 0x3F);
  }
  if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) {
    *cp = UINT32_MAX;
    return 1;
  }
  *cp = v;
  return len;
}

// ----- hashing --------------------------------------------------------------------

static uint64_t hash_bytes(const char *s, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 0x100000001b3ull;
  return h ^ (h >> 29);
}

static uint64_t hash_pair(int32_t a, int32_t b) {
  uint64_t x = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}

static size_t pow2_at_least(size_t n) {
  size_t c = 16;
  while (c < n) c <<= 1;
  return c;
}

static int32_t find_str(const rg_tokenizer_t *t, const char *s, size_t n) {
  for (size_t i = hash_bytes(s, n) & t->str_mask;; i = (i + 1) & t->str_mask) {
    int32_t id = t->str_tab[i];
    if (id < 0) return -1;
    if (t->tok_len[id] == n && memcmp(t->tok[id], s, n) == 0) return id;
  }
}

static const merge_slot_t *find_merge(const rg_tokenizer_t *t, int32_t a, int32_t b) {
  for (size_t i = hash_pair(a, b) & t->merge_mask;; i = (i + 1) & t->merge_mask) {
    const merge_slot_t *m = &t->merge_tab[i];
    if (m->rank < 0) return NULL;
    if (m->left == a && m->right == b) return m;
  }
}

// ----- pre-tokenizer names ----------------------------------------------------------

const char *rg__pre_regex(const char *pre) {
  for (size_t i = 0; pre && i < N_KNOWN_PRE; i++)
    if (strcmp(pre, known_pre[i].name) == 0) return known_pre[i].regex;
  return NULL;
}

const char *rg__pre_name(const char *const *regexes, size_t n) {
  if (n != 1) return "custom";
  for (size_t i = 0; i < N_KNOWN_PRE; i++)
    if (strcmp(regexes[0], known_pre[i].regex) == 0) return known_pre[i].name;
  return "custom";
}

static int pre_ignores_merges(const char *pre) {
  for (size_t i = 0; i < N_KNOWN_PRE; i++)
    if (strcmp(pre, known_pre[i].name) == 0) return known_pre[i].ignore_merges;
  return 0;
}

// ----- building ----------------------------------------------------------------------

void rg_tokenizer_destroy(rg_tokenizer_t *t) {
  if (!t) return;
  free(t->tok);
  free(t->tok_len);
  free(t->type);
  free(t->tok_arena);
  free(t->bytes);
  free(t->bytes_off);
  free(t->merge);
  free(t->merge_arena);
  free(t->pre);
  free(t->str_tab);
  free(t->merge_tab);
  free(t->special);
  for (size_t i = 0; i < t->n_re; i++) {
    free(t->re_src[i]);
    free(t->re_field[i]);
    pcre2_code_free(t->re[i]);
  }
  free(t->src);
  free(t);
}

static rg_status_t oom(const char *src) {
  return rg_status_make(RG_OUT_OF_MEMORY, "%s: out of memory building the tokenizer", src);
}

// A printable excerpt of a token for messages: at most 40 bytes, quoted.
static const char *excerpt(const char *s, char buf[64]) {
  size_t n = strlen(s), k = 0;
  buf[k++] = '"';
  for (size_t i = 0; i < n && i < 40; i++) buf[k++] = (s[i] == '\n' || s[i] == '\r') ? ' ' : s[i];
  if (n > 40) buf[k++] = '.', buf[k++] = '.', buf[k++] = '.';
  buf[k++] = '"';
  buf[k] = 0;
  return buf;
}

static rg_status_t copy_tokens(rg_tokenizer_t *t, const rg__tok_spec_t *sp) {
  size_t total = 0;
  for (size_t i = 0; i < t->n; i++) {
    if (!sp->tokens[i])
      return rg_status_make(RG_INVALID_ARGUMENT, "%s: %s[%zu] is missing", sp->src,
                            sp->tokens_field, i);
    size_t len = strlen(sp->tokens[i]);
    if (len > MAX_TOKEN_BYTES)
      return rg_status_make(RG_INVALID_ARGUMENT, "%s: %s[%zu] is %zu bytes long (at most %u)",
                            sp->src, sp->tokens_field, i, len, MAX_TOKEN_BYTES);
    total += len + 1;
  }
  t->tok = malloc(t->n * sizeof(*t->tok));
  t->tok_len = malloc(t->n * sizeof(*t->tok_len));
  t->type = malloc(t->n * sizeof(*t->type));
  t->tok_arena = malloc(total);
  if (!t->tok || !t->tok_len || !t->type || !t->tok_arena) return oom(sp->src);
  char *p = t->tok_arena;
  for (size_t i = 0; i < t->n; i++) {
    size_t len = strlen(sp->tokens[i]);
    memcpy(p, sp->tokens[i], len + 1);
    t->tok[i] = p;
    t->tok_len[i] = (uint32_t)len;
    p += len + 1;
    int32_t ty = sp->types ? sp->types[i] : RG_TOKEN_NORMAL;
    if (ty == 0) ty = RG_TOKEN_NORMAL;  // GGUF "undefined"
    if (ty < RG_TOKEN_NORMAL || ty > RG_TOKEN_BYTE)
      return rg_status_make(RG_INVALID_ARGUMENT,
                            "%s: token_type[%zu] is %d; GGUF token types are 1 to 6", sp->src, i,
                            (int)ty);
    t->type[i] = ty;
  }
  return NULL;
}

static int is_literal(int32_t type) {
  return type == RG_TOKEN_CONTROL || type == RG_TOKEN_USER_DEFINED;
}

// Byte-level decoding of every token (added tokens keep their text).
static rg_status_t decode_tokens(rg_tokenizer_t *t, const char *src) {
  size_t total = 0;
  for (size_t i = 0; i < t->n; i++) total += t->tok_len[i];
  t->bytes = malloc(total ? total : 1);
  t->bytes_off = malloc((t->n + 1) * sizeof(*t->bytes_off));
  if (!t->bytes || !t->bytes_off) return oom(src);
  size_t k = 0;
  for (size_t i = 0; i < t->n; i++) {
    t->bytes_off[i] = k;
    const uint8_t *s = (const uint8_t *)t->tok[i];
    size_t n = t->tok_len[i];
    if (is_literal(t->type[i])) {
      memcpy(t->bytes + k, s, n);
      k += n;
      continue;
    }
    for (size_t j = 0; j < n;) {
      uint32_t cp;
      size_t l = utf8_next(s + j, n - j, &cp);
      int b = cp == UINT32_MAX ? -1 : cp_byte(cp);
      if (b >= 0) {
        t->bytes[k++] = (char)b;
      } else {  // not a byte-level character: keep it as written
        memcpy(t->bytes + k, s + j, l);
        k += l;
      }
      j += l;
    }
  }
  t->bytes_off[t->n] = k;
  return NULL;
}

static rg_status_t hash_tokens(rg_tokenizer_t *t, const rg__tok_spec_t *sp, int dup_is_error) {
  size_t cap = pow2_at_least(t->n * 2);
  t->str_tab = malloc(cap * sizeof(*t->str_tab));
  if (!t->str_tab) return oom(sp->src);
  memset(t->str_tab, 0xff, cap * sizeof(*t->str_tab));
  t->str_mask = cap - 1;
  // Vocabulary tokens go in before added ones, so where a GGUF array spells
  // both the same, lookups (and so BPE) find the vocabulary token.
  for (size_t k = 0; k < 2 * t->n; k++) {
    size_t id = k % t->n;
    if (is_literal(t->type[id]) != (k >= t->n)) continue;
    if (t->type[id] == RG_TOKEN_UNUSED || t->tok_len[id] == 0) continue;
    size_t i = hash_bytes(t->tok[id], t->tok_len[id]) & t->str_mask;
    for (;; i = (i + 1) & t->str_mask) {
      int32_t other = t->str_tab[i];
      if (other < 0) {
        t->str_tab[i] = (int32_t)id;
        break;
      }
      if (t->tok_len[other] == t->tok_len[id] &&
          memcmp(t->tok[other], t->tok[id], t->tok_len[id]) == 0) {
        if (dup_is_error) {
          char b[64];
          return rg_status_make(RG_INVALID_ARGUMENT, "%s: %s: %s has two ids, %d and %zu", sp->src,
                                sp->tokens_field, excerpt(t->tok[id], b),
                                (int)(other < (int32_t)id ? other : (int32_t)id),
                                (size_t)(other < (int32_t)id ? (int32_t)id : other));
        }
        break;  // the lowest id keeps the string
      }
    }
  }
  for (int b = 0; b < 256; b++) {
    char u[2];
    size_t l = rg__byte_to_utf8((uint8_t)b, u);
    int32_t id = find_str(t, u, l);
    t->byte_id[b] = (id >= 0 && !is_literal(t->type[id])) ? id : -1;
  }
  return NULL;
}

static rg_status_t build_merges(rg_tokenizer_t *t, const rg__tok_spec_t *sp) {
  size_t total = 0;
  for (size_t i = 0; i < sp->n_merges; i++) {
    if (!sp->merges[i])
      return rg_status_make(RG_INVALID_ARGUMENT, "%s: %s[%zu] is missing", sp->src,
                            sp->merges_field, i);
    total += strlen(sp->merges[i]) + 1;
  }
  size_t cap = pow2_at_least(sp->n_merges * 2);
  t->merge = malloc((sp->n_merges ? sp->n_merges : 1) * sizeof(*t->merge));
  t->merge_arena = malloc(total ? total : 1);
  t->merge_tab = malloc(cap * sizeof(*t->merge_tab));
  if (!t->merge || !t->merge_arena || !t->merge_tab) return oom(sp->src);
  for (size_t i = 0; i < cap; i++) t->merge_tab[i].rank = -1;
  t->merge_mask = cap - 1;
  t->n_merges = sp->n_merges;
  char *p = t->merge_arena;
  char *joined = NULL;
  size_t joined_cap = 0;
  rg_status_t st = NULL;
  for (size_t r = 0; r < sp->n_merges; r++) {
    const char *m = sp->merges[r];
    size_t len = strlen(m);
    memcpy(p, m, len + 1);
    t->merge[r] = p;
    p += len + 1;
    // GGUF and llama.cpp split at the first space after the first byte.
    const char *sp1 = len > 1 ? memchr(m + 1, ' ', len - 1) : NULL;
    char b[64];
    if (!sp1 || sp1 + 1 == m + len) {
      st = rg_status_make(RG_INVALID_ARGUMENT, "%s: %s[%zu] %s is not two tokens \"a b\"", sp->src,
                          sp->merges_field, r, excerpt(m, b));
      break;
    }
    size_t la = (size_t)(sp1 - m), lb = len - la - 1;
    int32_t a = find_str(t, m, la), bb = find_str(t, sp1 + 1, lb);
    if (a >= 0 && is_literal(t->type[a])) a = -1;
    if (bb >= 0 && is_literal(t->type[bb])) bb = -1;
    if (a < 0 || bb < 0) {
      char c[64];
      snprintf(c, sizeof c, "%.*s", (int)(a < 0 ? (la > 40 ? 40 : la) : (lb > 40 ? 40 : lb)),
               a < 0 ? m : sp1 + 1);
      st = rg_status_make(RG_INVALID_ARGUMENT, "%s: %s[%zu] %s: \"%s\" is not in %s", sp->src,
                          sp->merges_field, r, excerpt(m, b), c, sp->tokens_field);
      break;
    }
    if (la + lb > joined_cap) {
      joined_cap = (la + lb) * 2;
      char *nj = realloc(joined, joined_cap);
      if (!nj) {
        st = oom(sp->src);
        break;
      }
      joined = nj;
    }
    memcpy(joined, m, la);
    memcpy(joined + la, sp1 + 1, lb);
    int32_t res = find_str(t, joined, la + lb);
    if (res >= 0 && is_literal(t->type[res])) {
      st = rg_status_make(RG_INVALID_ARGUMENT,
                          "%s: %s[%zu] %s: the merged token is an added token, not a BPE one",
                          sp->src, sp->merges_field, r, excerpt(m, b));
      break;
    }
    if (res < 0) {
      st = rg_status_make(RG_INVALID_ARGUMENT, "%s: %s[%zu] %s: the merged token is not in %s",
                          sp->src, sp->merges_field, r, excerpt(m, b), sp->tokens_field);
      break;
    }
    size_t i = hash_pair(a, bb) & t->merge_mask;
    for (;; i = (i + 1) & t->merge_mask) {
      merge_slot_t *s = &t->merge_tab[i];
      if (s->rank < 0) {
        *s = (merge_slot_t){(int32_t)r, res, a, bb};
        break;
      }
      if (s->left == a && s->right == bb) break;  // a repeated merge keeps its first rank
    }
  }
  free(joined);
  return st;
}

static int special_cmp_ctx_less(const rg_tokenizer_t *t, int32_t x, int32_t y) {
  uint8_t cx = (uint8_t)t->tok[x][0], cy = (uint8_t)t->tok[y][0];
  if (cx != cy) return cx < cy;
  if (t->tok_len[x] != t->tok_len[y]) return t->tok_len[x] > t->tok_len[y];
  return x < y;
}

static rg_status_t build_specials(rg_tokenizer_t *t, const char *src) {
  size_t n = 0;
  for (size_t i = 0; i < t->n; i++)
    if (is_literal(t->type[i]) && t->tok_len[i] > 0) n++;
  t->special = malloc((n ? n : 1) * sizeof(*t->special));
  if (!t->special) return oom(src);
  t->n_special = 0;
  for (size_t i = 0; i < t->n; i++)
    if (is_literal(t->type[i]) && t->tok_len[i] > 0) t->special[t->n_special++] = (int32_t)i;
  // Insertion sort is fine for the few hundred added tokens models ship;
  // a merge sort keeps pathological vocabularies (all added) fast too.
  int32_t *tmp = malloc((n ? n : 1) * sizeof(*tmp));
  if (!tmp) return oom(src);
  for (size_t w = 1; w < n; w *= 2) {
    for (size_t lo = 0; lo < n; lo += 2 * w) {
      size_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
      size_t a = lo, b = mid, k = lo;
      while (a < mid && b < hi)
        tmp[k++] = special_cmp_ctx_less(t, t->special[b], t->special[a]) ? t->special[b++]
                                                                         : t->special[a++];
      while (a < mid) tmp[k++] = t->special[a++];
      while (b < hi) tmp[k++] = t->special[b++];
    }
    memcpy(t->special, tmp, n * sizeof(*tmp));
  }
  free(tmp);
  size_t k = 0;
  for (int c = 0; c <= 256; c++) {
    while (c < 256 && k < n && (uint8_t)t->tok[t->special[k]][0] < c) k++;
    t->special_at[c] = (uint32_t)k;
  }
  t->special_at[256] = (uint32_t)n;
  return NULL;
}

static void build_eog(rg_tokenizer_t *t) {
  t->n_eog = 0;
  if (t->eos >= 0) t->eog[t->n_eog++] = t->eos;
  for (size_t k = 0; k < t->n_special; k++) {
    int32_t id = t->special[k];
    if (t->type[id] != RG_TOKEN_CONTROL && t->type[id] != RG_TOKEN_USER_DEFINED) continue;
    for (size_t j = 0; j < sizeof(eog_names) / sizeof(eog_names[0]); j++) {
      if (strcmp(t->tok[id], eog_names[j]) != 0 || id == t->eos) continue;
      if (t->n_eog < MAX_EOG) t->eog[t->n_eog++] = id;
    }
  }
}

static rg_status_t compile_regexes(rg_tokenizer_t *t, const rg__tok_spec_t *sp) {
  const char *one[1];
  const char *const *res = sp->regexes;
  size_t n = sp->n_regexes;
  if (!res) {
    one[0] = rg__pre_regex(sp->pre);
    if (!one[0])
      return rg_status_make(RG_INVALID_ARGUMENT,
                            "%s: pre-tokenizer \"%s\" is not one ridge knows (llama-bpe, llama3, "
                            "llama-v3, qwen2, deepseek-r1-qwen, gpt-2, gpt2, default)",
                            sp->src, sp->pre ? sp->pre : "(none)");
    res = one;
    n = 1;
  }
  if (n > MAX_REGEXES)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "%s: pre_tokenizer has %zu Split regexes (at most %d)", sp->src, n,
                          MAX_REGEXES);
  for (size_t i = 0; i < n; i++) {
    // Messages name the field the regex came from, or for a vocabulary that
    // names its pre-tokenizer only, that name.
    char field[128];
    if (sp->regex_fields && sp->regex_fields[i])
      snprintf(field, sizeof field, "%s", sp->regex_fields[i]);
    else
      snprintf(field, sizeof field, "the regex of pre-tokenizer \"%s\"", sp->pre ? sp->pre : "");
    int err;
    PCRE2_SIZE at;
    pcre2_code *re =
        pcre2_compile((PCRE2_SPTR)res[i], PCRE2_ZERO_TERMINATED,
                      PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &at, NULL);
    if (!re) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      return rg_status_make(RG_INVALID_ARGUMENT,
                            "%s: %s: pre_tokenizer regex %zu does not compile at offset %zu: %s",
                            sp->src, field, i, (size_t)at, (const char *)msg);
    }
    // JIT is several times faster; where it is unavailable the interpreter
    // gives the same matches.
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
    t->re[t->n_re] = re;
    t->re_src[t->n_re] = strdup(res[i]);
    t->re_field[t->n_re] = strdup(field);
    t->n_re++;
    if (!t->re_src[t->n_re - 1] || !t->re_field[t->n_re - 1]) return oom(sp->src);
  }
  return NULL;
}

static rg_status_t build(const rg__tok_spec_t *sp, int dup_is_error, rg_tokenizer_t **out) {
  *out = NULL;
  if (sp->n_tokens == 0)
    return rg_status_make(RG_INVALID_ARGUMENT, "%s: %s is empty", sp->src, sp->tokens_field);
  if (sp->n_tokens > RG_TOKENIZER_MAX_VOCAB)
    return rg_status_make(RG_INVALID_ARGUMENT, "%s: %s has %zu tokens (at most %d)", sp->src,
                          sp->tokens_field, sp->n_tokens, RG_TOKENIZER_MAX_VOCAB);
  if (sp->n_merges > RG_TOKENIZER_MAX_MERGES)
    return rg_status_make(RG_INVALID_ARGUMENT, "%s: %s has %zu merges (at most %d)", sp->src,
                          sp->merges_field, sp->n_merges, RG_TOKENIZER_MAX_MERGES);
  if (sp->bos < -1 || sp->bos >= (int64_t)sp->n_tokens)
    return rg_status_make(RG_INVALID_ARGUMENT, "%s: bos id %d is out of range (%zu tokens)",
                          sp->src, (int)sp->bos, sp->n_tokens);
  if (sp->eos < -1 || sp->eos >= (int64_t)sp->n_tokens)
    return rg_status_make(RG_INVALID_ARGUMENT, "%s: eos id %d is out of range (%zu tokens)",
                          sp->src, (int)sp->eos, sp->n_tokens);
  const char *pre = sp->pre ? sp->pre : "";
  if (!sp->regexes && strcmp(pre, "custom") == 0)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "%s: pre-tokenizer \"custom\" needs its regexes, which a GGUF "
                          "vocabulary does not carry",
                          sp->src);
  rg_tokenizer_t *t = calloc(1, sizeof(*t));
  if (!t) return oom(sp->src);
  t->n = sp->n_tokens;
  t->bos = sp->bos;
  t->eos = sp->eos;
  rg_status_t st;
  if (sp->n_norm > RG__MAX_NORM) {
    st = rg_status_make(RG_INVALID_ARGUMENT, "%s: normalizer has %zu steps (at most %d)", sp->src,
                        sp->n_norm, RG__MAX_NORM);
    goto fail;
  }
  for (size_t i = 0; i < sp->n_norm; i++) t->norm[i] = sp->norm[i];
  t->n_norm = sp->n_norm;
  if (!(t->src = strdup(sp->src))) {
    st = oom(sp->src);
    goto fail;
  }
  if ((st = compile_regexes(t, sp))) goto fail;
  if ((st = copy_tokens(t, sp))) goto fail;
  if ((st = decode_tokens(t, sp->src))) goto fail;
  if ((st = hash_tokens(t, sp, dup_is_error))) goto fail;
  if ((st = build_merges(t, sp))) goto fail;
  if ((st = build_specials(t, sp->src))) goto fail;
  build_eog(t);
  t->pre = strdup(pre);
  if (!t->pre) {
    st = oom(sp->src);
    goto fail;
  }
  t->ignore_merges = sp->ignore_merges >= 0 ? sp->ignore_merges : pre_ignores_merges(pre);
  *out = t;
  return NULL;
fail:
  rg_tokenizer_destroy(t);
  return st;
}

rg_status_t rg__tokenizer_build(const rg__tok_spec_t *sp, rg_tokenizer_t **out) {
  return build(sp, sp->unique_tokens, out);
}

rg_status_t rg_tokenizer_from_vocab(const char *const *tokens, const int32_t *token_types,
                                    size_t n_tokens, const char *const *merges, size_t n_merges,
                                    const char *pre, int32_t bos, int32_t eos,
                                    rg_tokenizer_t **out) {
  *out = NULL;
  if (!tokens || (n_merges && !merges))
    return rg_status_make(RG_INVALID_ARGUMENT, "GGUF vocabulary: tokens or merges array is NULL");
  if (pre && strcmp(pre, "custom") != 0 && !rg__pre_regex(pre))
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "GGUF vocabulary: tokenizer.ggml.pre \"%s\" is not one ridge knows "
                          "(llama-bpe, llama3, llama-v3, qwen2, deepseek-r1-qwen, gpt-2, gpt2, "
                          "default)",
                          pre);
  rg__tok_spec_t sp = {
      .src = "GGUF vocabulary",
      .tokens_field = "tokenizer.ggml.tokens",
      .merges_field = "tokenizer.ggml.merges",
      .tokens = tokens,
      .types = token_types,
      .n_tokens = n_tokens,
      .merges = merges,
      .n_merges = n_merges,
      .pre = pre ? pre : "default",
      .ignore_merges = -1,
      .bos = bos,
      .eos = eos,
  };
  return rg__tokenizer_build(&sp, out);
}

// ----- accessors -------------------------------------------------------------------

size_t rg_tokenizer_vocab_size(const rg_tokenizer_t *t) {
  return t->n;
}
int32_t rg_tokenizer_bos(const rg_tokenizer_t *t) {
  return t->bos;
}
int32_t rg_tokenizer_eos(const rg_tokenizer_t *t) {
  return t->eos;
}

int rg_tokenizer_is_eog(const rg_tokenizer_t *t, int32_t id) {
  for (size_t i = 0; i < t->n_eog; i++)
    if (t->eog[i] == id) return 1;
  return 0;
}

void rg_tokenizer_vocab(const rg_tokenizer_t *t, const char *const **tokens,
                        const int32_t **token_types, size_t *n_tokens, const char *const **merges,
                        size_t *n_merges, const char **pre) {
  if (tokens) *tokens = (const char *const *)t->tok;
  if (token_types) *token_types = t->type;
  if (n_tokens) *n_tokens = t->n;
  if (merges) *merges = (const char *const *)t->merge;
  if (n_merges) *n_merges = t->n_merges;
  if (pre) *pre = t->pre;
}

size_t rg__tokenizer_regexes(const rg_tokenizer_t *t, const char *const **out) {
  *out = (const char *const *)t->re_src;
  return t->n_re;
}

int rg__tokenizer_ignore_merges(const rg_tokenizer_t *t) {
  return t->ignore_merges;
}

size_t rg__tokenizer_normalizers(const rg_tokenizer_t *t, const rg__norm_t **out) {
  *out = t->norm;
  return t->n_norm;
}

rg_status_t rg_tokenizer_token_bytes(const rg_tokenizer_t *t, int32_t id, const char **out,
                                     size_t *out_len) {
  if (id < 0 || (size_t)id >= t->n) {
    *out = NULL;
    *out_len = 0;
    return rg_status_make(RG_INVALID_ARGUMENT, "token id %d is out of range (vocabulary of %zu)",
                          (int)id, t->n);
  }
  *out = t->bytes + t->bytes_off[id];
  *out_len = t->bytes_off[id + 1] - t->bytes_off[id];
  return NULL;
}

rg_status_t rg_tokenizer_decode(const rg_tokenizer_t *t, const int32_t *ids, size_t n,
                                char **out_text, size_t *out_len) {
  *out_text = NULL;
  *out_len = 0;
  size_t total = 0;
  for (size_t i = 0; i < n; i++) {
    if (ids[i] < 0 || (size_t)ids[i] >= t->n)
      return rg_status_make(RG_INVALID_ARGUMENT,
                            "token %zu of %zu has id %d, out of range (vocabulary of %zu)", i, n,
                            (int)ids[i], t->n);
    total += t->bytes_off[ids[i] + 1] - t->bytes_off[ids[i]];
  }
  char *s = malloc(total + 1);
  if (!s) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory decoding %zu tokens", n);
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    size_t off = t->bytes_off[ids[i]], l = t->bytes_off[ids[i] + 1] - off;
    memcpy(s + k, t->bytes + off, l);
    k += l;
  }
  s[k] = 0;
  *out_text = s;
  *out_len = k;
  return NULL;
}

// ----- normalizers ------------------------------------------------------------------
//
// Each step rewrites a segment (the text between two added tokens, as Hugging
// Face's tokenizers normalize it) into a growing buffer. utf8proc does the
// Unicode work; it wants valid UTF-8, so a step runs over each maximal valid
// stretch and copies an invalid byte through between them.

typedef struct {
  char *p;
  size_t n, cap;
} nbuf_t;

static int nb_put(nbuf_t *b, const void *s, size_t n) {
  if (b->n + n > b->cap) {
    size_t cap = (b->n + n) * 2 + 64;
    char *p = realloc(b->p, cap);
    if (!p) return 0;
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->n, s, n);
  b->n += n;
  return 1;
}

static int nb_put_cp(nbuf_t *b, int32_t cp) {
  utf8proc_uint8_t u[4];
  return nb_put(b, u, (size_t)utf8proc_encode_char(cp, u));
}

static rg_status_t norm_oom(void) {
  return rg_status_make(RG_OUT_OF_MEMORY, "out of memory normalizing text");
}

// Unicode's White_Space property (what Rust's char::is_whitespace tests).
static int is_white_space(int32_t c) {
  if ((c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680) return 1;
  if ((c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F) return 1;
  return c == 0x205F || c == 0x3000;
}

static int is_mark(int32_t c) {
  utf8proc_category_t k = utf8proc_category(c);
  return k == UTF8PROC_CATEGORY_MN || k == UTF8PROC_CATEGORY_MC || k == UTF8PROC_CATEGORY_ME;
}

// Unicode's Cased, from the general category and utf8proc's case mappings.
static int is_cased(int32_t c) {
  utf8proc_category_t k = utf8proc_category(c);
  return k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LT ||
         utf8proc_islower(c) || utf8proc_isupper(c);
}

// Unicode's Case_Ignorable: marks, format characters, modifiers, and the
// word-internal punctuation of Word_Break MidLetter, MidNumLet, Single_Quote.
static int is_case_ignorable(int32_t c) {
  static const int32_t mid[] = {0x27,   0x2E,   0x3A,   0xB7,   0x387,  0x55F,
                                0x5F4,  0x2018, 0x2019, 0x2024, 0x2027, 0xFE13,
                                0xFE52, 0xFE55, 0xFF07, 0xFF0E, 0xFF1A};
  utf8proc_category_t k = utf8proc_category(c);
  if (k == UTF8PROC_CATEGORY_MN || k == UTF8PROC_CATEGORY_ME || k == UTF8PROC_CATEGORY_CF ||
      k == UTF8PROC_CATEGORY_LM || k == UTF8PROC_CATEGORY_SK)
    return 1;
  for (size_t i = 0; i < sizeof mid / sizeof mid[0]; i++)
    if (c == mid[i]) return 1;
  return 0;
}

// Whether, skipping case-ignorable characters from cps[i] on in direction
// step, a cased letter comes next.
static int cased_after_ignorables(const int32_t *cps, size_t n, size_t i, int step) {
  for (ptrdiff_t k = (ptrdiff_t)i; k >= 0 && (size_t)k < n; k += step) {
    if (is_case_ignorable(cps[k])) continue;
    return is_cased(cps[k]);
  }
  return 0;
}

// Full lowercasing as Rust's str::to_lowercase does it: utf8proc's simple
// mapping plus the two rules SpecialCasing adds for any language: U+0130
// becomes "i" + U+0307, and a capital sigma ending a word becomes final ς.
static rg_status_t lowercase(const int32_t *cps, size_t n, nbuf_t *out) {
  for (size_t i = 0; i < n; i++) {
    int32_t c = cps[i];
    int ok;
    if (c == 0x130) {
      ok = nb_put(out, "i\xcc\x87", 3);
    } else if (c == 0x3A3) {
      int final = i > 0 && cased_after_ignorables(cps, n, i - 1, -1) &&
                  !cased_after_ignorables(cps, n, i + 1, 1);
      ok = nb_put_cp(out, final ? 0x3C2 : 0x3C3);
    } else {
      ok = nb_put_cp(out, utf8proc_tolower(c));
    }
    if (!ok) return norm_oom();
  }
  return NULL;
}

// One step over valid UTF-8.
static rg_status_t norm_valid(const rg_tokenizer_t *t, const rg__norm_t *step, const uint8_t *s,
                              size_t n, nbuf_t *out) {
  utf8proc_option_t opt = UTF8PROC_STABLE;
  switch (step->kind) {
    case RG__NORM_NFC:
      opt |= UTF8PROC_COMPOSE;
      break;
    case RG__NORM_NFD:
      opt |= UTF8PROC_DECOMPOSE;
      break;
    case RG__NORM_NFKC:
      opt |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
      break;
    case RG__NORM_NFKD:
      opt |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
      break;
    default: {
      int32_t *cps = malloc((n ? n : 1) * sizeof(*cps));
      if (!cps) return norm_oom();
      size_t k = 0;
      for (size_t i = 0; i < n;) {
        utf8proc_int32_t c;
        utf8proc_ssize_t l = utf8proc_iterate(s + i, (utf8proc_ssize_t)(n - i), &c);
        i += l > 0 ? (size_t)l : 1;
        if (l > 0) cps[k++] = c;
      }
      rg_status_t st = NULL;
      if (step->kind == RG__NORM_LOWERCASE) {
        st = lowercase(cps, k, out);
      } else {  // StripAccents: every mark goes
        for (size_t i = 0; i < k && !st; i++)
          if (!is_mark(cps[i]) && !nb_put_cp(out, cps[i])) st = norm_oom();
      }
      free(cps);
      return st;
    }
  }
  utf8proc_uint8_t *dst = NULL;
  utf8proc_ssize_t r = utf8proc_map(s, (utf8proc_ssize_t)n, &dst, opt);
  if (r < 0)
    return rg_status_make(RG_INTERNAL, "%s: normalizer %s failed: %s", t->src,
                          rg__norm_name(step->kind), utf8proc_errmsg(r));
  int ok = nb_put(out, dst, (size_t)r);
  free(dst);
  return ok ? NULL : norm_oom();
}

static rg_status_t norm_step(const rg_tokenizer_t *t, const rg__norm_t *step, const char *text,
                             size_t n, nbuf_t *out) {
  const uint8_t *s = (const uint8_t *)text;
  out->n = 0;
  if (step->kind == RG__NORM_STRIP) {
    size_t begin = 0, end = 0;  // [begin, end): from the first to the last non-space
    int seen = 0;
    for (size_t i = 0; i < n;) {
      uint32_t cp;
      size_t l = utf8_next(s + i, n - i, &cp);
      if (cp == UINT32_MAX || !is_white_space((int32_t)cp)) {
        if (!seen) begin = i;
        seen = 1;
        end = i + l;
      }
      i += l;
    }
    if (!seen) return NULL;
    if (!step->strip_left) begin = 0;
    if (!step->strip_right) end = n;
    return nb_put(out, s + begin, end - begin) ? NULL : norm_oom();
  }
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j < n) {
      uint32_t cp;
      size_t l = utf8_next(s + j, n - j, &cp);
      if (cp == UINT32_MAX) break;
      j += l;
    }
    if (j > i) RG_RETURN_IF_ERROR(norm_valid(t, step, s + i, j - i, out));
    if (j < n && !nb_put(out, s + j, 1)) return norm_oom();
    i = j + 1;
  }
  return NULL;
}

// ----- encoding ----------------------------------------------------------------------

typedef struct {
  int32_t id, prev, next;
} bpe_sym_t;

typedef struct {
  int32_t rank, left, right, lid, rid, result;
} bpe_cand_t;

typedef struct {
  const rg_tokenizer_t *t;
  int32_t *ids;
  size_t n, cap;
  pcre2_match_data *md[MAX_REGEXES];
  pcre2_match_context *mctx;
  pcre2_jit_stack *jit;
  bpe_sym_t *sym;
  size_t sym_cap;
  bpe_cand_t *heap;
  size_t heap_n, heap_cap;
  char *word;  // the byte-level spelling of a piece, for whole-piece lookups
  size_t word_cap;
  nbuf_t norm[2];  // normalizer steps write these in turn
} enc_t;

static rg_status_t push_id(enc_t *e, int32_t id) {
  if (e->n == e->cap) {
    size_t cap = e->cap * 2 + 16;
    int32_t *ids = realloc(e->ids, cap * sizeof(*ids));
    if (!ids) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory encoding text");
    e->ids = ids;
    e->cap = cap;
  }
  e->ids[e->n++] = id;
  return NULL;
}

static int cand_less(const bpe_cand_t *a, const bpe_cand_t *b) {
  return a->rank != b->rank ? a->rank < b->rank : a->left < b->left;
}

static void heap_push(enc_t *e, bpe_cand_t c) {
  size_t i = e->heap_n++;
  while (i > 0) {
    size_t p = (i - 1) / 2;
    if (!cand_less(&c, &e->heap[p])) break;
    e->heap[i] = e->heap[p];
    i = p;
  }
  e->heap[i] = c;
}

static bpe_cand_t heap_pop(enc_t *e) {
  bpe_cand_t top = e->heap[0], last = e->heap[--e->heap_n];
  size_t i = 0, n = e->heap_n;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= n) break;
    if (c + 1 < n && cand_less(&e->heap[c + 1], &e->heap[c])) c++;
    if (!cand_less(&e->heap[c], &last)) break;
    e->heap[i] = e->heap[c];
    i = c;
  }
  if (n) e->heap[i] = last;
  return top;
}

static void try_pair(enc_t *e, int32_t left, int32_t right) {
  if (left < 0 || right < 0) return;
  const merge_slot_t *m = find_merge(e->t, e->sym[left].id, e->sym[right].id);
  if (!m) return;
  heap_push(e, (bpe_cand_t){m->rank, left, right, e->sym[left].id, e->sym[right].id, m->result});
}

static rg_status_t no_byte_token(uint8_t b) {
  return rg_status_make(RG_INVALID_ARGUMENT,
                        "the text holds byte 0x%02x, which has no token in this vocabulary", b);
}

// Byte-level BPE of one pre-tokenizer piece: bytes become their tokens, then
// the adjacent pair with the lowest merge rank (leftmost among equals) is
// merged until no pair has a merge. Symbols form a linked list and candidate
// pairs a heap, with stale candidates skipped when popped, so a piece of n
// bytes costs O(n log n).
static rg_status_t bpe_piece(void *ctx, const char *p, size_t n) {
  enc_t *e = ctx;
  const rg_tokenizer_t *t = e->t;
  const uint8_t *s = (const uint8_t *)p;
  if (n == 0) return NULL;
  if (n == 1) {
    if (t->byte_id[s[0]] < 0) return no_byte_token(s[0]);
    return push_id(e, t->byte_id[s[0]]);
  }
  if (n > INT32_MAX / 4)
    return rg_status_make(RG_INVALID_ARGUMENT, "a piece of %zu bytes is too long to encode", n);
  if (t->ignore_merges) {
    if (2 * n > e->word_cap) {
      char *w = realloc(e->word, 2 * n);
      if (!w) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory encoding text");
      e->word = w;
      e->word_cap = 2 * n;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += rg__byte_to_utf8(s[i], e->word + k);
    int32_t id = find_str(t, e->word, k);
    if (id >= 0 && !is_literal(t->type[id])) return push_id(e, id);
  }
  if (n > e->sym_cap) {
    bpe_sym_t *sym = realloc(e->sym, n * sizeof(*sym));
    if (!sym) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory encoding text");
    e->sym = sym;
    e->sym_cap = n;
  }
  if (3 * n > e->heap_cap) {
    bpe_cand_t *h = realloc(e->heap, 3 * n * sizeof(*h));
    if (!h) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory encoding text");
    e->heap = h;
    e->heap_cap = 3 * n;
  }
  for (size_t i = 0; i < n; i++) {
    if (t->byte_id[s[i]] < 0) return no_byte_token(s[i]);
    e->sym[i] = (bpe_sym_t){t->byte_id[s[i]], (int32_t)i - 1, i + 1 < n ? (int32_t)i + 1 : -1};
  }
  e->heap_n = 0;
  for (size_t i = 0; i + 1 < n; i++) try_pair(e, (int32_t)i, (int32_t)i + 1);
  while (e->heap_n) {
    bpe_cand_t c = heap_pop(e);
    bpe_sym_t *l = &e->sym[c.left], *r = &e->sym[c.right];
    if (l->id != c.lid || l->next != c.right || r->id != c.rid) continue;  // stale
    l->id = c.result;
    l->next = r->next;
    if (r->next >= 0) e->sym[r->next].prev = c.left;
    r->id = -1;
    try_pair(e, l->prev, c.left);
    try_pair(e, c.left, l->next);
  }
  for (int32_t i = 0; i >= 0; i = e->sym[i].next) RG_RETURN_IF_ERROR(push_id(e, e->sym[i].id));
  return NULL;
}

// A failed match names the tokenizer file and the regex's field: the regex
// is the file's, and the text only one a user typed.
static rg_status_t match_err(const rg_tokenizer_t *t, size_t level, int rc, size_t n) {
  PCRE2_UCHAR msg[256];
  pcre2_get_error_message(rc, msg, sizeof msg);
  if (rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT || rc == PCRE2_ERROR_HEAPLIMIT ||
      rc == PCRE2_ERROR_JIT_STACKLIMIT)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "%s: %s: the pre-tokenizer regex gave up on a %zu-byte stretch of the "
                          "text: %s (the pattern backtracks too much on it)",
                          t->src, t->re_field[level], n, (const char *)msg);
  return rg_status_make(RG_INTERNAL, "%s: %s: the pre-tokenizer regex failed: %s", t->src,
                        t->re_field[level], (const char *)msg);
}

// Splits s by regex `level` and each later one in turn; matches and the text
// between them (Hugging Face's "Isolated" behaviour) are pieces. Invalid
// UTF-8 never matches, so it lands in the gaps and is still encoded.
static rg_status_t split(enc_t *e, size_t level, const char *s, size_t n, rg__piece_fn fn,
                         void *ctx) {
  const rg_tokenizer_t *t = e->t;
  if (n == 0) return NULL;
  if (level == t->n_re) return fn(ctx, s, n);
  size_t off = 0, gap = 0;
  while (off < n) {
    int rc = pcre2_match(t->re[level], (PCRE2_SPTR)s, n, off, 0, e->md[level], e->mctx);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !e->jit) {
      // Long pieces against a backtracking regex can need more than the
      // default 32 KiB JIT stack.
      e->mctx = pcre2_match_context_create(NULL);
      e->jit = pcre2_jit_stack_create(32 * 1024, 64 * 1024 * 1024, NULL);
      if (!e->mctx || !e->jit)
        return rg_status_make(RG_OUT_OF_MEMORY, "out of memory encoding text");
      pcre2_jit_stack_assign(e->mctx, NULL, e->jit);
      continue;
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) return match_err(t, level, rc, n);
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(e->md[level]);
    size_t ms = ov[0], me = ov[1];
    if (ms < off || me > n) return match_err(t, level, PCRE2_ERROR_INTERNAL, n);
    if (me <= ms) {  // an empty match: step over one character and look again
      off = ms + 1;
      while (off < n && ((uint8_t)s[off] & 0xC0) == 0x80) off++;
      continue;
    }
    if (ms > gap) RG_RETURN_IF_ERROR(split(e, level + 1, s + gap, ms - gap, fn, ctx));
    RG_RETURN_IF_ERROR(split(e, level + 1, s + ms, me - ms, fn, ctx));
    gap = off = me;
  }
  if (gap < n) RG_RETURN_IF_ERROR(split(e, level + 1, s + gap, n - gap, fn, ctx));
  return NULL;
}

static rg_status_t enc_init(enc_t *e, const rg_tokenizer_t *t) {
  memset(e, 0, sizeof(*e));
  e->t = t;
  for (size_t i = 0; i < t->n_re; i++) {
    e->md[i] = pcre2_match_data_create_from_pattern(t->re[i], NULL);
    if (!e->md[i]) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory encoding text");
  }
  return NULL;
}

static void enc_deinit(enc_t *e) {
  for (size_t i = 0; i < MAX_REGEXES; i++) pcre2_match_data_free(e->md[i]);
  pcre2_match_context_free(e->mctx);
  pcre2_jit_stack_free(e->jit);
  free(e->sym);
  free(e->heap);
  free(e->word);
  free(e->norm[0].p);
  free(e->norm[1].p);
  free(e->ids);
}

// A segment between added tokens: normalized, then split and encoded.
static rg_status_t segment(enc_t *e, const char *s, size_t n, rg__piece_fn fn, void *ctx) {
  const rg_tokenizer_t *t = e->t;
  for (size_t k = 0; k < t->n_norm && n; k++) {
    nbuf_t *out = &e->norm[k % 2];
    RG_RETURN_IF_ERROR(norm_step(t, &t->norm[k], s, n, out));
    s = out->p;
    n = out->n;
  }
  return split(e, 0, s, n, fn, ctx);
}

rg_status_t rg__tokenizer_pieces(const rg_tokenizer_t *t, const char *text, size_t len,
                                 rg__piece_fn fn, void *ctx) {
  enc_t e;
  rg_status_t st = enc_init(&e, t);
  if (!st) st = segment(&e, text, len, fn, ctx);
  enc_deinit(&e);
  return st;
}

// The longest added token at text[i..len), or -1.
static int32_t special_at(const rg_tokenizer_t *t, const char *text, size_t i, size_t len,
                          int parse_special) {
  uint8_t c = (uint8_t)text[i];
  for (uint32_t k = t->special_at[c]; k < t->special_at[c + 1]; k++) {
    int32_t id = t->special[k];
    if (t->type[id] == RG_TOKEN_CONTROL && !parse_special) continue;
    size_t l = t->tok_len[id];
    if (l <= len - i && memcmp(text + i, t->tok[id], l) == 0) return id;
  }
  return -1;
}

rg_status_t rg_tokenizer_encode(const rg_tokenizer_t *t, const char *text, size_t len, int add_bos,
                                int parse_special, int32_t **out_ids, size_t *out_n) {
  *out_ids = NULL;
  *out_n = 0;
  if (!text && len) return rg_status_make(RG_INVALID_ARGUMENT, "encode: text is NULL");
  enc_t e;
  rg_status_t st = enc_init(&e, t);
  if (st) goto done;
  e.cap = len / 3 + 16;
  e.ids = malloc(e.cap * sizeof(*e.ids));
  if (!e.ids) {
    st = rg_status_make(RG_OUT_OF_MEMORY, "out of memory encoding %zu bytes", len);
    goto done;
  }
  if (add_bos && t->bos >= 0 && (st = push_id(&e, t->bos))) goto done;
  // Added tokens are split out first, leftmost and then longest, and the text
  // between them goes through the pre-tokenizer and BPE.
  size_t seg = 0;
  for (size_t i = 0; i < len;) {
    int32_t id = t->n_special ? special_at(t, text, i, len, parse_special) : -1;
    if (id < 0) {
      i++;
      continue;
    }
    if ((st = segment(&e, text + seg, i - seg, bpe_piece, &e))) goto done;
    if ((st = push_id(&e, id))) goto done;
    i += t->tok_len[id];
    seg = i;
  }
  if ((st = segment(&e, text + seg, len - seg, bpe_piece, &e))) goto done;
  *out_ids = e.ids;
  *out_n = e.n;
  e.ids = NULL;
done:
  enc_deinit(&e);
  return st;
}
