// graphs/tokenizer.h — byte-level BPE tokenizers and chat templates.
//
// A tokenizer turns UTF-8 text into token ids and back, the way the model it
// ships with was trained: GPT-2's byte-level BPE as Llama 3 and Qwen2/3 use
// it. It is read from a Hugging Face tokenizer.json or from the vocabulary
// arrays a GGUF file stores, and both give the same encodings for the same
// vocabulary. Encoding is, in order:
//
//   text ──split out added tokens──▶ segments ──normalizer (if the
//   tokenizer.json declares one)──▶ ──pre-tokenizer regex(es)──▶ pieces
//   ──bytes → 256 byte tokens──▶ BPE merges, lowest rank first ──▶ ids
//
// Invariants:
//  - Every byte string encodes, including invalid UTF-8 and NULs, provided
//    the vocabulary holds a token for each byte (every byte-level BPE does).
//    Without a normalizer decode(encode(x)) == x byte for byte, with or
//    without parse_special; with one, decode gives the normalized text.
//  - Normalizers work on valid UTF-8; invalid bytes pass through unchanged
//    and split the text around them (Hugging Face's tokenizers never see
//    invalid UTF-8, so there is nothing there to agree with).
//  - Token ids are dense, 0 .. vocab_size-1. Ids a tokenizer.json leaves out
//    are filled with "[PAD<id>]" tokens of type UNUSED, which never match.
//  - A loaded tokenizer is immutable: every function taking a const
//    rg_tokenizer_t * may be called from many threads at once.
//
// Token types are GGUF's (tokenizer.ggml.token_type): 1 normal, 2 unknown,
// 3 control (special added tokens: matched in text only with parse_special),
// 4 user-defined (non-special added tokens: always matched in text), 5 unused,
// 6 byte. Control and user-defined tokens decode to their text as written;
// the others are byte-level decoded (GPT-2's bytes_to_unicode, reversed).
//
// Pre-tokenizer names (GGUF tokenizer.ggml.pre) ridge knows:
//   "llama-bpe" (also "llama3", "llama-v3"): Llama 3's regex, digits in
//       groups of up to 3; merges are skipped for a piece that is itself a
//       vocabulary entry (tokenizer.json "ignore_merges": true).
//   "qwen2" (also "deepseek-r1-qwen"): the same regex with single digits.
//   "gpt-2" (also "gpt2", "default"): GPT-2's regex. llama.cpp's "default"
//       first splits runs of punctuation; ridge reads it as GPT-2's.
// A tokenizer.json whose Split regexes are none of these loads with pre
// "custom" and keeps its regexes; rg_tokenizer_from_vocab() refuses "custom".
//
// Normalizers ridge applies (with utf8proc), alone or in a Sequence: NFC,
// NFD, NFKC, NFKD, Lowercase (full Unicode lowercasing: İ becomes i + U+0307
// and a word-final Σ becomes ς, as Rust's to_lowercase does), Strip
// (White_Space at either end) and StripAccents (drops every mark, category
// M). Any other normalizer is refused when the file is read. Qwen2/3 declare
// NFC; Llama 3 declares none.
//
// Known differences from Hugging Face tokenizers: added tokens are split out
// before normalizing even when marked "normalized": true (it matters only for
// an added token that normalization would change), their lstrip/rstrip/
// single_word flags are ignored, and a GGUF vocabulary carries no normalizer
// (llama.cpp applies none either), so one written from a Qwen tokenizer.json
// does not normalize.
//
// Ownership: what _load_hf / _from_vocab / _build_test return belongs to the
// caller (rg_tokenizer_destroy). token_bytes and vocab return borrowed
// pointers valid while the tokenizer lives. encode, decode and
// rg_chat_template_apply return malloc'd buffers the caller frees.
#ifndef RG_GRAPHS_TOKENIZER_H
#define RG_GRAPHS_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

typedef struct rg_tokenizer_s rg_tokenizer_t;

// GGUF token types.
enum {
  RG_TOKEN_NORMAL = 1,
  RG_TOKEN_UNKNOWN = 2,
  RG_TOKEN_CONTROL = 3,
  RG_TOKEN_USER_DEFINED = 4,
  RG_TOKEN_UNUSED = 5,
  RG_TOKEN_BYTE = 6,
};

// Limits past which a vocabulary is refused as corrupt rather than allocated.
#define RG_TOKENIZER_MAX_VOCAB (1 << 24)
#define RG_TOKENIZER_MAX_MERGES (1 << 24)
#define RG_TOKENIZER_MAX_FILE_BYTES ((size_t)1 << 30)

// Reads a Hugging Face tokenizer.json: model.type "BPE" with a ByteLevel
// pre-tokenizer (alone, with use_regex, or after Split regexes), a ByteLevel
// decoder and one of the normalizers above or none. The BOS id comes from a TemplateProcessing
// post_processor; the EOS id from the first of <|end_of_text|>,
// <|endoftext|>, <|im_end|>, </s> present as an added token. A
// tokenizer_config.json beside the file, when there is one, overrides both
// with its bos_token / eos_token. Every error names the file and the field.
RG_MUST_USE rg_status_t rg_tokenizer_load_hf(const char *tokenizer_json_path, rg_tokenizer_t **out);
// The same from text in memory (need not end in a NUL); `name` prefixes
// messages. No tokenizer_config.json is looked for.
RG_MUST_USE rg_status_t rg_tokenizer_load_hf_string(const char *name, const char *json, size_t len,
                                                    rg_tokenizer_t **out);

// From GGUF metadata arrays (tokenizer.ggml.model == "gpt2"): tokens
// (strings), merges ("a b" strings, split at the first space after the first
// byte), token_type (may be NULL: all normal), bos/eos ids (-1: none), and
// pre naming the pre-tokenizer (see above; NULL reads as "default"). The
// arrays are copied. A string may repeat (the lowest id keeps it).
RG_MUST_USE rg_status_t rg_tokenizer_from_vocab(const char *const *tokens,
                                                const int32_t *token_types, size_t n_tokens,
                                                const char *const *merges, size_t n_merges,
                                                const char *pre, int32_t bos, int32_t eos,
                                                rg_tokenizer_t **out);
void rg_tokenizer_destroy(rg_tokenizer_t *t);

size_t rg_tokenizer_vocab_size(const rg_tokenizer_t *t);
int32_t rg_tokenizer_bos(const rg_tokenizer_t *t);  // -1 if none
int32_t rg_tokenizer_eos(const rg_tokenizer_t *t);  // -1 if none
// End of generation: eos, and control tokens named <|eot_id|>, <|eom_id|>,
// <|end_of_text|>, <|endoftext|>, <|im_end|>, </s>, <|end|>, <end_of_turn>.
int rg_tokenizer_is_eog(const rg_tokenizer_t *t, int32_t id);

// Encodes len bytes of text (any bytes). With add_bos, the BOS id (if the
// tokenizer has one) comes first. With parse_special, control tokens written
// literally in the text (e.g. "<|begin_of_text|>") become their ids;
// without, they are encoded as text. User-defined tokens always match.
// *out_ids is malloc'd (never NULL on success, even for zero ids). A
// pre-tokenizer regex that exceeds PCRE2's match limits on the text fails
// with an error naming the tokenizer file and the regex's field.
RG_MUST_USE rg_status_t rg_tokenizer_encode(const rg_tokenizer_t *t, const char *text, size_t len,
                                            int add_bos, int parse_special, int32_t **out_ids,
                                            size_t *out_n);
// The bytes one token stands for, for streaming output: *out_len bytes at
// *out (borrowed; not NUL-terminated in general). An invalid id is an error.
RG_MUST_USE rg_status_t rg_tokenizer_token_bytes(const rg_tokenizer_t *t, int32_t id,
                                                 const char **out, size_t *out_len);
// Concatenated token bytes; *out_text is malloc'd and NUL-terminated (the
// text itself may hold NULs: use *out_len).
RG_MUST_USE rg_status_t rg_tokenizer_decode(const rg_tokenizer_t *t, const int32_t *ids, size_t n,
                                            char **out_text, size_t *out_len);

// The vocabulary as GGUF stores it, to write a model's GGUF copy: token
// strings (byte-level form for normal tokens), types, "a b" merges in rank
// order, and the pre-tokenizer name. All borrowed.
void rg_tokenizer_vocab(const rg_tokenizer_t *t, const char *const **tokens,
                        const int32_t **token_types, size_t *n_tokens, const char *const **merges,
                        size_t *n_merges, const char **pre);

// A small deterministic byte-level BPE, trained on built-in English and code
// text, so tests and the random-weight test model need no download: the 256
// byte tokens (ids 0..255, GPT-2's order), then one token per merge
// (n_merges merges; a merge whose result already exists adds no token), then
// <|begin_of_text|> (bos), <|end_of_text|> (eos), <|eot_id|>,
// <|start_header_id|>, <|end_header_id|> as control tokens. Pre "llama-bpe".
// Where the text runs out of pairs, identifiers composed from its words by a
// fixed pseudo-random sequence extend it. At most 131072 merges; 32000 take
// about a second to train.
RG_MUST_USE rg_status_t rg_tokenizer_build_test(size_t n_merges, rg_tokenizer_t **out);

// Writes t as a Hugging Face tokenizer.json, in the layout Meta's Llama 3
// file has (merges as "a b" strings), that rg_tokenizer_load_hf reads back
// with identical vocabulary, merges and encodings. When the EOS would
// not come back from that file alone (see rg_tokenizer_load_hf), a
// tokenizer_config.json naming bos_token and eos_token is written beside it.
RG_MUST_USE rg_status_t rg_tokenizer_write_hf(const rg_tokenizer_t *t, const char *path);

// Chat templates for the common families, written by hand (no Jinja):
//   "llama3":  <|start_header_id|>ROLE<|end_header_id|>\n\nCONTENT<|eot_id|>
//              per message (content trimmed, as Meta's template does), then
//              <|start_header_id|>assistant<|end_header_id|>\n\n
//   "chatml":  <|im_start|>ROLE\nCONTENT<|im_end|>\n per message, then
//              <|im_start|>assistant\n
//   "mistral": [INST] USER [/INST]ASSISTANT</s> ... ending in " [/INST]";
//              a system message is put before the next user message,
//              separated by a blank line. Roles: system, user, assistant.
// The BOS token is not part of the text, as in llama.cpp: encode it with
// add_bos = 1 and parse_special = 1, which gives the ids the models' own
// templates give (Llama 3's writes <|begin_of_text|> first; ChatML has no
// BOS, and Qwen's tokenizers have none to add). Content is copied as is, so special
// tokens a user writes in it are parsed as such with parse_special; strip
// them from untrusted content first if that matters. Returns malloc'd text.
typedef struct {
  const char *role;
  const char *content;
} rg_chat_msg_t;
RG_MUST_USE rg_status_t rg_chat_template_apply(const char *family, const rg_chat_msg_t *msgs,
                                               size_t n, char **out_text);
// Which template a model family uses is its row of the family table
// (rg_family_info(f)->chat_template in graphs/graphs.h).

// ----- internal to graphs/tokenizer*.c ---------------------------------------
#ifdef RG_TOKENIZER_INTERNAL
// Normalizer steps, by their tokenizer.json type names.
#define RG__NORM_MAP(X)              \
  X(RG__NORM_NFC, "NFC")             \
  X(RG__NORM_NFD, "NFD")             \
  X(RG__NORM_NFKC, "NFKC")           \
  X(RG__NORM_NFKD, "NFKD")           \
  X(RG__NORM_LOWERCASE, "Lowercase") \
  X(RG__NORM_STRIP, "Strip")         \
  X(RG__NORM_STRIP_ACCENTS, "StripAccents")
typedef enum {
#define RG_X_(e, n) e,
  RG__NORM_MAP(RG_X_)
#undef RG_X_
      RG__NORM_COUNT
} rg__norm_kind_t;
typedef struct {
  rg__norm_kind_t kind;
  int strip_left, strip_right;  // Strip only
} rg__norm_t;
#define RG__MAX_NORM 8
const char *rg__norm_name(rg__norm_kind_t k);

// Everything a tokenizer is built from; both loaders and the trainer fill one.
typedef struct {
  const char *src;           // file name or "GGUF vocabulary": prefixes errors
  const char *tokens_field;  // field names used in errors
  const char *merges_field;
  const char *const *tokens;
  const int32_t *types;  // NULL: all normal
  size_t n_tokens;
  const char *const *merges;  // "a b"
  size_t n_merges;
  const char *pre;             // a known name, or "custom" with regexes
  const char *const *regexes;  // NULL: the regex of `pre`
  // (n_regexes) where each regex was given ("pre_tokenizer.pretokenizers[0]
  // .pattern"), for messages; NULL: named after `pre`.
  const char *const *regex_fields;
  size_t n_regexes;
  const rg__norm_t *norm;  // (n_norm) normalizer steps, in order
  size_t n_norm;
  int ignore_merges;  // -1: as `pre` implies
  int32_t bos, eos;
  int unique_tokens;  // a string twice is an error (tokenizer.json), else the lowest id wins
} rg__tok_spec_t;
RG_MUST_USE rg_status_t rg__tokenizer_build(const rg__tok_spec_t *spec, rg_tokenizer_t **out);
// The regex of a known pre name, or NULL; the pre name of a regex list, or
// "custom".
const char *rg__pre_regex(const char *pre);
const char *rg__pre_name(const char *const *regexes, size_t n);
size_t rg__tokenizer_regexes(const rg_tokenizer_t *t, const char *const **out);
int rg__tokenizer_ignore_merges(const rg_tokenizer_t *t);
// The normalizer steps a tokenizer applies (borrowed); returns their count.
size_t rg__tokenizer_normalizers(const rg_tokenizer_t *t, const rg__norm_t **out);
// Calls fn on each pre-tokenizer piece of text (no added-token splitting).
typedef rg_status_t (*rg__piece_fn)(void *ctx, const char *piece, size_t len);
RG_MUST_USE rg_status_t rg__tokenizer_pieces(const rg_tokenizer_t *t, const char *text, size_t len,
                                             rg__piece_fn fn, void *ctx);
// GPT-2 bytes_to_unicode: the UTF-8 form (1 or 2 bytes) of byte b.
size_t rg__byte_to_utf8(uint8_t b, char out[2]);
#endif

#endif  // RG_GRAPHS_TOKENIZER_H
