// graphs/tokenizer_train.c — rg_tokenizer_build_test(): a byte-level BPE
// trained here, on text built into the binary, so that tests and the
// random-weight test model need no tokenizer download.
//
// Training is the usual BPE trainer (as Hugging Face's BpeTrainer): the text
// is pre-tokenized with Llama 3's regex, identical pieces are counted once,
// and the most frequent adjacent pair (ties: the lower pair of ids) is merged
// until n_merges merges exist. Pair counts are kept up to date as words
// change, with a max-heap whose stale entries are re-queued when popped, so
// each merge costs time in proportion to the words it touches.
#define RG_TOKENIZER_INTERNAL
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graphs/tokenizer.h"

#define MAX_TEST_MERGES 131072

// English prose and code in a few languages: what a model is asked about.
static const char corpus_text[] =
    "The quick brown fox jumps over the lazy dog. A tokenizer turns text into numbers that a "
    "model can read, and turns the numbers it writes back into text. Most words people write "
    "often become a single token; rare words are spelled out in smaller pieces.\n"
    "When the scheduler admits a request, it reserves key and value cache blocks for the "
    "prompt, then runs prefill in chunks so that decoding requests already in flight are not "
    "starved. Each decoding step adds one token to every sequence in the batch.\n"
    "Memory bandwidth, not arithmetic, bounds the decode phase of a large language model on "
    "most accelerators: every weight is read once per step, whatever the batch size. Prefill "
    "is the opposite: it does many operations for each byte it reads, so it is compute bound.\n"
    "Questions people ask: What is the capital of France? How do I sort a list in Python? "
    "Why is my build failing with an undefined reference? Can you summarize this article in "
    "three sentences? Write a short poem about the sea, the wind and the light.\n"
    "It's a truth we've learned the hard way: they'll say it's done, but you'd better check. "
    "I'm sure she's right, and I'd bet the team's tests don't lie.\n"
    "In 2024, the cluster served 1234567 requests at 89.5 tokens per second, with a p99 "
    "latency of 340 ms and 16 GPUs per node across 8 nodes.\n"
    "\n"
    "#include <stdio.h>\n"
    "#include <stdlib.h>\n"
    "\n"
    "static int count_words(const char *text, size_t len) {\n"
    "  int words = 0, in_word = 0;\n"
    "  for (size_t i = 0; i < len; i++) {\n"
    "    if (text[i] == ' ' || text[i] == '\\n') {\n"
    "      in_word = 0;\n"
    "    } else if (!in_word) {\n"
    "      in_word = 1;\n"
    "      words++;\n"
    "    }\n"
    "  }\n"
    "  return words;\n"
    "}\n"
    "\n"
    "int main(int argc, char **argv) {\n"
    "  if (argc < 2) {\n"
    "    fprintf(stderr, \"usage: %s FILE\\n\", argv[0]);\n"
    "    return 1;\n"
    "  }\n"
    "  printf(\"%d\\n\", count_words(argv[1], strlen(argv[1])));\n"
    "  return 0;\n"
    "}\n"
    "\n"
    "def fibonacci(n: int) -> list[int]:\n"
    "    \"\"\"Return the first n Fibonacci numbers.\"\"\"\n"
    "    result = []\n"
    "    a, b = 0, 1\n"
    "    for _ in range(n):\n"
    "        result.append(a)\n"
    "        a, b = b, a + b\n"
    "    return result\n"
    "\n"
    "class Config:\n"
    "    def __init__(self, path):\n"
    "        self.path = path\n"
    "        self.values = {}\n"
    "\n"
    "    def load(self):\n"
    "        with open(self.path) as f:\n"
    "            for line in f:\n"
    "                key, _, value = line.partition('=')\n"
    "                self.values[key.strip()] = value.strip()\n"
    "        return self.values\n"
    "\n"
    "{\"model\": \"llama-3.1-8b\", \"max_tokens\": 256, \"temperature\": 0.7, \"stream\": true,\n"
    " \"messages\": [{\"role\": \"user\", \"content\": \"Hello, world!\"}]}\n"
    "\n"
    "for f in *.txt; do wc -l \"$f\"; done | sort -n | tail -5\n"
    "SELECT name, COUNT(*) FROM requests WHERE status = 'ok' GROUP BY name ORDER BY 2 DESC;\n"
    "\n"
    "function render(items) {\n"
    "  return items.filter((x) => x.visible).map((x) => `<li>${x.title}</li>`).join('');\n"
    "}\n"
    "\n"
    "The results were clear. Throughput rose by forty percent when the attention layers ran on "
    "one group of devices and the feed-forward layers on another, because each group could "
    "pick the batch size that suited it. The cost was a second network hop per layer, which "
    "the pipeline hid behind the work of the other micro-batch.\n"
    "Thank you for your question! Here is a step-by-step answer. First, read the error "
    "message carefully; it usually names the file and the line. Second, check the inputs. "
    "Third, make the smallest change that could fix it, and test again.\n"
    "Unicode text matters too: café, naïve, Zürich, São Paulo, Ελληνικά, русский язык, "
    "日本語のテキスト, 中文文本, 한국어, हिन्दी, العربية, emoji "
    "🙂👍🚀.\n";

// ----- small hash maps --------------------------------------------------------------

static uint64_t mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}

static uint64_t hash_bytes(const char *s, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 0x100000001b3ull;
  return mix64(h);
}

// Byte strings, each with an index; lookups by content.
typedef struct {
  char **s;
  size_t *len;
  size_t n, cap;
  int32_t *tab;  // -1 empty
  size_t mask;
} strset_t;

static int strset_grow(strset_t *m) {
  size_t cap = m->mask ? (m->mask + 1) * 2 : 1024;
  int32_t *tab = malloc(cap * sizeof(*tab));
  if (!tab) return 0;
  memset(tab, 0xff, cap * sizeof(*tab));
  for (size_t k = 0; k < m->n; k++) {
    size_t i = hash_bytes(m->s[k], m->len[k]) & (cap - 1);
    while (tab[i] >= 0) i = (i + 1) & (cap - 1);
    tab[i] = (int32_t)k;
  }
  free(m->tab);
  m->tab = tab;
  m->mask = cap - 1;
  return 1;
}

// Index of s, adding a copy when absent (*added = 1); -1 when out of memory.
static int32_t strset_get(strset_t *m, const char *s, size_t len, int add, int *added) {
  if (added) *added = 0;
  if (!m->tab && !strset_grow(m)) return -1;
  size_t i = hash_bytes(s, len) & m->mask;
  for (; m->tab[i] >= 0; i = (i + 1) & m->mask) {
    int32_t k = m->tab[i];
    if (m->len[k] == len && memcmp(m->s[k], s, len) == 0) return k;
  }
  if (!add) return -1;
  if (m->n == m->cap) {
    size_t cap = m->cap * 2 + 256;
    char **ns = realloc(m->s, cap * sizeof(*ns));
    if (!ns) return -1;
    m->s = ns;
    size_t *nl = realloc(m->len, cap * sizeof(*nl));
    if (!nl) return -1;
    m->len = nl;
    m->cap = cap;
  }
  char *copy = malloc(len + 1);
  if (!copy) return -1;
  memcpy(copy, s, len);
  copy[len] = 0;
  int32_t k = (int32_t)m->n++;
  m->s[k] = copy;
  m->len[k] = len;
  m->tab[i] = k;
  if (added) *added = 1;
  if (m->n * 2 > m->mask + 1 && !strset_grow(m)) return -1;
  return k;
}

static void strset_free(strset_t *m) {
  for (size_t k = 0; k < m->n; k++) free(m->s[k]);
  free(m->s);
  free(m->len);
  free(m->tab);
}

// ----- trainer state ----------------------------------------------------------------

typedef struct {
  int32_t *sym;
  int32_t len;
  int32_t stamp;
  int64_t count;
} word_t;

typedef struct {
  uint64_t key;  // (left << 32) | right
  int64_t count;
  int32_t *where;  // words holding the pair (may repeat; checked when used)
  uint32_t n_where, cap_where;
  int32_t last_word, pushed;
} pair_t;

typedef struct {
  int64_t count;
  uint64_t key;
} qent_t;

typedef struct {
  strset_t types;  // distinct pieces of the text
  int64_t *type_count;
  size_t type_cap;
  size_t capacity;  // sum of (length - 1) over pieces: merges the text can still take
  word_t *words;
  size_t n_words;
  strset_t toks;  // token id -> bytes
  pair_t *pairs;
  size_t n_pairs, cap_pairs;
  uint64_t *pkeys;  // open addressing: pair key -> index in pairs; UINT64_MAX empty
  int32_t *pidx;
  size_t pmask;
  qent_t *heap;
  size_t heap_n, heap_cap;
  int32_t *changed;
  size_t n_changed, cap_changed;
  int oom;
} trainer_t;

static rg_status_t count_piece(void *ctx, const char *piece, size_t len) {
  trainer_t *tr = ctx;
  int added;
  int32_t k = strset_get(&tr->types, piece, len, 1, &added);
  if (k < 0) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory training the test tokenizer");
  if ((size_t)k >= tr->type_cap) {
    size_t cap = tr->type_cap * 2 + 1024;
    int64_t *c = realloc(tr->type_count, cap * sizeof(*c));
    if (!c) return rg_status_make(RG_OUT_OF_MEMORY, "out of memory training the test tokenizer");
    memset(c + tr->type_cap, 0, (cap - tr->type_cap) * sizeof(*c));
    tr->type_count = c;
    tr->type_cap = cap;
  }
  tr->type_count[k]++;
  if (added) tr->capacity += len - 1;
  return NULL;
}

static int pairs_grow(trainer_t *tr) {
  size_t cap = tr->pmask ? (tr->pmask + 1) * 2 : 4096;
  uint64_t *keys = malloc(cap * sizeof(*keys));
  int32_t *idx = malloc(cap * sizeof(*idx));
  if (!keys || !idx) {
    free(keys);
    free(idx);
    return 0;
  }
  memset(keys, 0xff, cap * sizeof(*keys));
  for (size_t k = 0; k < tr->n_pairs; k++) {
    size_t i = mix64(tr->pairs[k].key) & (cap - 1);
    while (keys[i] != UINT64_MAX) i = (i + 1) & (cap - 1);
    keys[i] = tr->pairs[k].key;
    idx[i] = (int32_t)k;
  }
  free(tr->pkeys);
  free(tr->pidx);
  tr->pkeys = keys;
  tr->pidx = idx;
  tr->pmask = cap - 1;
  return 1;
}

static pair_t *pair_get(trainer_t *tr, int32_t a, int32_t b) {
  uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
  if (!tr->pkeys && !pairs_grow(tr)) return NULL;
  size_t i = mix64(key) & tr->pmask;
  for (; tr->pkeys[i] != UINT64_MAX; i = (i + 1) & tr->pmask)
    if (tr->pkeys[i] == key) return &tr->pairs[tr->pidx[i]];
  if (tr->n_pairs == tr->cap_pairs) {
    size_t cap = tr->cap_pairs * 2 + 4096;
    pair_t *p = realloc(tr->pairs, cap * sizeof(*p));
    if (!p) return NULL;
    tr->pairs = p;
    tr->cap_pairs = cap;
  }
  pair_t *p = &tr->pairs[tr->n_pairs];
  memset(p, 0, sizeof(*p));
  p->key = key;
  p->last_word = -1;
  p->pushed = -1;
  tr->pkeys[i] = key;
  tr->pidx[i] = (int32_t)tr->n_pairs++;
  if (tr->n_pairs * 2 > tr->pmask + 1 && !pairs_grow(tr)) return NULL;
  return p;
}

// Adds delta to a pair's count; a rise records the word and marks the pair
// for re-queueing at the current merge (stamp).
static void pair_add(trainer_t *tr, int32_t a, int32_t b, int64_t delta, int32_t word,
                     int32_t stamp) {
  pair_t *p = pair_get(tr, a, b);
  if (!p) {
    tr->oom = 1;
    return;
  }
  p->count += delta;
  if (delta <= 0) return;
  if (p->last_word != word) {
    if (p->n_where == p->cap_where) {
      uint32_t cap = p->cap_where * 2 + 4;
      int32_t *w = realloc(p->where, cap * sizeof(*w));
      if (!w) {
        tr->oom = 1;
        return;
      }
      p->where = w;
      p->cap_where = cap;
    }
    p->where[p->n_where++] = word;
    p->last_word = word;
  }
  if (p->pushed != stamp) {
    p->pushed = stamp;
    if (tr->n_changed == tr->cap_changed) {
      size_t cap = tr->cap_changed * 2 + 256;
      int32_t *c = realloc(tr->changed, cap * sizeof(*c));
      if (!c) {
        tr->oom = 1;
        return;
      }
      tr->changed = c;
      tr->cap_changed = cap;
    }
    tr->changed[tr->n_changed++] = (int32_t)(p - tr->pairs);
  }
}

static int qless(const qent_t *x, const qent_t *y) {  // x pops after y
  return x->count != y->count ? x->count < y->count : x->key > y->key;
}

static int heap_push(trainer_t *tr, int64_t count, uint64_t key) {
  if (tr->heap_n == tr->heap_cap) {
    size_t cap = tr->heap_cap * 2 + 4096;
    qent_t *h = realloc(tr->heap, cap * sizeof(*h));
    if (!h) return 0;
    tr->heap = h;
    tr->heap_cap = cap;
  }
  qent_t e = {count, key};
  size_t i = tr->heap_n++;
  while (i > 0) {
    size_t p = (i - 1) / 2;
    if (!qless(&tr->heap[p], &e)) break;
    tr->heap[i] = tr->heap[p];
    i = p;
  }
  tr->heap[i] = e;
  return 1;
}

static qent_t heap_pop(trainer_t *tr) {
  qent_t top = tr->heap[0], last = tr->heap[--tr->heap_n];
  size_t i = 0, n = tr->heap_n;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= n) break;
    if (c + 1 < n && qless(&tr->heap[c], &tr->heap[c + 1])) c++;
    if (!qless(&last, &tr->heap[c])) break;
    tr->heap[i] = tr->heap[c];
    i = c;
  }
  if (n) tr->heap[i] = last;
  return top;
}

// Replaces each (a, b) in word w by m, moving pair counts along.
static void merge_word(trainer_t *tr, int32_t w, int32_t a, int32_t b, int32_t m, int32_t stamp) {
  word_t *wd = &tr->words[w];
  int32_t *s = wd->sym, len = wd->len, out = 0;
  int64_t c = wd->count;
  for (int32_t i = 0; i < len;) {
    if (i + 1 < len && s[i] == a && s[i + 1] == b) {
      if (out > 0) {
        pair_add(tr, s[out - 1], a, -c, w, stamp);
        pair_add(tr, s[out - 1], m, c, w, stamp);
      }
      if (i + 2 < len) {
        pair_add(tr, b, s[i + 2], -c, w, stamp);
        pair_add(tr, m, s[i + 2], c, w, stamp);
      }
      pair_add(tr, a, b, -c, w, stamp);
      s[out++] = m;
      i += 2;
    } else {
      s[out++] = s[i++];
    }
  }
  wd->len = out;
}

static void trainer_free(trainer_t *tr) {
  strset_free(&tr->types);
  strset_free(&tr->toks);
  free(tr->type_count);
  for (size_t i = 0; i < tr->n_words; i++) free(tr->words[i].sym);
  free(tr->words);
  for (size_t i = 0; i < tr->n_pairs; i++) free(tr->pairs[i].where);
  free(tr->pairs);
  free(tr->pkeys);
  free(tr->pidx);
  free(tr->heap);
  free(tr->changed);
}

static uint64_t next_rand(uint64_t *state) {  // splitmix64
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// More text when the built-in text cannot take n merges: identifiers made of
// two or three of its words (camelCase, snake_case, PascalCase), assigned
// numbers, the way code names things.
static rg_status_t extend_text(trainer_t *tr, const rg_tokenizer_t *bytes_tok, size_t want) {
  size_t n_letters = 0;
  int32_t *letters = malloc(tr->types.n * sizeof(*letters));
  if (!letters)
    return rg_status_make(RG_OUT_OF_MEMORY, "out of memory training the test tokenizer");
  for (size_t k = 0; k < tr->types.n; k++) {
    const char *s = tr->types.s[k];
    size_t l = tr->types.len[k], start = s[0] == ' ' ? 1 : 0, j = start;
    while (j < l && ((s[j] >= 'a' && s[j] <= 'z') || (s[j] >= 'A' && s[j] <= 'Z'))) j++;
    if (j == l && l - start >= 3) letters[n_letters++] = (int32_t)k;
  }
  uint64_t rng = 0x5eed;
  char line[256];
  rg_status_t st = NULL;
  while (!st && tr->capacity < want && n_letters) {
    char *p = line;
    int parts = 2 + (int)(next_rand(&rng) % 2), style = (int)(next_rand(&rng) % 3);
    for (int i = 0; i < parts; i++) {
      int32_t k = letters[next_rand(&rng) % n_letters];
      const char *w = tr->types.s[k];
      if (w[0] == ' ') w++;
      size_t l = strlen(w);
      if (l > 40) l = 40;
      if (style == 1 && i) *p++ = '_';
      for (size_t j = 0; j < l; j++) {
        char c = w[j];
        int upper = j == 0 && ((style == 0 && i) || style == 2);
        if (upper && c >= 'a' && c <= 'z') c = (char)(c - 'a' + 'A');
        if (!upper && c >= 'A' && c <= 'Z') c = (char)(c - 'A' + 'a');
        *p++ = c;
      }
    }
    p += snprintf(p, 32, " = %u;\n", (unsigned)(next_rand(&rng) % 100000));
    st = rg__tokenizer_pieces(bytes_tok, line, (size_t)(p - line), count_piece, tr);
  }
  free(letters);
  return st;
}

static rg_status_t train(const rg_tokenizer_t *bytes_tok, const uint8_t order[256], size_t n_merges,
                         size_t want, int *exhausted, rg_tokenizer_t **out) {
  trainer_t tr;
  memset(&tr, 0, sizeof tr);
  const char **tokens = NULL, **merges = NULL;
  int32_t *types = NULL;
  char *merge_text = NULL;
  size_t *merge_off = NULL;
  size_t n_tok = 0;
  rg__tok_spec_t sp;
  rg_status_t st =
      rg__tokenizer_pieces(bytes_tok, corpus_text, sizeof corpus_text - 1, count_piece, &tr);
  if (!st && tr.capacity < want) st = extend_text(&tr, bytes_tok, want);
  if (st) goto done;

  int32_t id_of_byte[256];
  for (int i = 0; i < 256; i++) {
    id_of_byte[order[i]] = i;
    char c = (char)order[i];
    if (strset_get(&tr.toks, &c, 1, 1, NULL) != i) goto nomem;
  }
  tr.words = calloc(tr.types.n ? tr.types.n : 1, sizeof(*tr.words));
  if (!tr.words) goto nomem;
  for (size_t w = 0; w < tr.types.n; w++) {
    word_t *wd = &tr.words[tr.n_words++];
    wd->len = (int32_t)tr.types.len[w];
    wd->count = tr.type_count[w];
    wd->stamp = -1;
    wd->sym = malloc((size_t)wd->len * sizeof(*wd->sym));
    if (!wd->sym) goto nomem;
    for (int32_t i = 0; i < wd->len; i++) wd->sym[i] = id_of_byte[(uint8_t)tr.types.s[w][i]];
    for (int32_t i = 0; i + 1 < wd->len; i++)
      pair_add(&tr, wd->sym[i], wd->sym[i + 1], wd->count, (int32_t)w, -2);
  }
  for (size_t i = 0; i < tr.n_pairs; i++)
    if (!heap_push(&tr, tr.pairs[i].count, tr.pairs[i].key)) goto nomem;
  if (tr.oom) goto nomem;

  merges = malloc((n_merges ? n_merges : 1) * sizeof(*merges));
  size_t text_cap = 4096, text_len = 0;
  merge_text = malloc(text_cap);
  merge_off = malloc((n_merges ? n_merges : 1) * sizeof(*merge_off));
  if (!merges || !merge_text || !merge_off) goto nomem;
  size_t done_merges = 0;
  while (done_merges < n_merges) {
    if (!tr.heap_n) {
      *exhausted = 1;
      st = rg_status_make(RG_INTERNAL,
                          "test tokenizer: the training text ran out of pairs after %zu merges",
                          done_merges);
      goto done;
    }
    qent_t top = heap_pop(&tr);
    int32_t a = (int32_t)(top.key >> 32), b = (int32_t)(top.key & 0xffffffffu);
    pair_t *p = pair_get(&tr, a, b);
    if (!p) goto nomem;
    if (top.count != p->count) {
      if (p->count > 0 && !heap_push(&tr, p->count, p->key)) goto nomem;
      continue;
    }
    if (p->count <= 0) continue;
    // The merged token; another pair may already have spelled it.
    size_t la = tr.toks.len[a], lb = tr.toks.len[b];
    char buf[512], *joined = la + lb <= sizeof buf ? buf : malloc(la + lb);
    if (!joined) goto nomem;
    memcpy(joined, tr.toks.s[a], la);
    memcpy(joined + la, tr.toks.s[b], lb);
    int32_t m = strset_get(&tr.toks, joined, la + lb, 1, NULL);
    if (joined != buf) free(joined);
    if (m < 0) goto nomem;
    // "A B" in byte-level form: at most 2 bytes per byte.
    size_t need = 2 * (la + lb) + 2;
    if (text_len + need > text_cap) {
      while (text_len + need > text_cap) text_cap *= 2;
      char *nt = realloc(merge_text, text_cap);
      if (!nt) goto nomem;
      merge_text = nt;
    }
    merge_off[done_merges] = text_len;
    for (size_t i = 0; i < la; i++)
      text_len += rg__byte_to_utf8((uint8_t)tr.toks.s[a][i], merge_text + text_len);
    merge_text[text_len++] = ' ';
    for (size_t i = 0; i < lb; i++)
      text_len += rg__byte_to_utf8((uint8_t)tr.toks.s[b][i], merge_text + text_len);
    merge_text[text_len++] = 0;
    int32_t stamp = (int32_t)done_merges;
    tr.n_changed = 0;
    // Iterate over a copy of the count: merge_word never adds to p->where
    // (the merged token differs from a and b), but pair_get may move pairs.
    size_t pi = (size_t)(p - tr.pairs);
    for (uint32_t i = 0; i < tr.pairs[pi].n_where; i++) {
      int32_t w = tr.pairs[pi].where[i];
      if (tr.words[w].stamp == stamp) continue;
      tr.words[w].stamp = stamp;
      merge_word(&tr, w, a, b, m, stamp);
    }
    p = &tr.pairs[pi];
    free(p->where);
    p->where = NULL;
    p->n_where = p->cap_where = 0;
    p->last_word = -1;
    for (size_t i = 0; i < tr.n_changed; i++) {
      pair_t *c = &tr.pairs[tr.changed[i]];
      if (c->count > 0 && !heap_push(&tr, c->count, c->key)) tr.oom = 1;
    }
    if (tr.oom) goto nomem;
    done_merges++;
  }
  for (size_t i = 0; i < n_merges; i++) merges[i] = merge_text + merge_off[i];

  // Vocabulary: bytes, merged tokens, then the special tokens.
  static const char *const specials[] = {"<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>",
                                         "<|start_header_id|>", "<|end_header_id|>"};
  n_tok = tr.toks.n + 5;
  tokens = calloc(n_tok, sizeof(*tokens));
  types = malloc(n_tok * sizeof(*types));
  if (!tokens || !types) goto nomem;
  for (size_t i = 0; i < tr.toks.n; i++) {
    char *s = malloc(2 * tr.toks.len[i] + 1);
    if (!s) goto nomem;
    size_t l = 0;
    for (size_t j = 0; j < tr.toks.len[i]; j++)
      l += rg__byte_to_utf8((uint8_t)tr.toks.s[i][j], s + l);
    s[l] = 0;
    tokens[i] = s;
    types[i] = RG_TOKEN_NORMAL;
  }
  for (size_t i = 0; i < 5; i++) {
    tokens[tr.toks.n + i] = specials[i];
    types[tr.toks.n + i] = RG_TOKEN_CONTROL;
  }
  sp = (rg__tok_spec_t){.src = "test tokenizer",
                        .tokens_field = "tokens",
                        .merges_field = "merges",
                        .tokens = tokens,
                        .types = types,
                        .n_tokens = n_tok,
                        .merges = merges,
                        .n_merges = n_merges,
                        .pre = "llama-bpe",
                        .ignore_merges = -1,
                        .bos = (int32_t)tr.toks.n,
                        .eos = (int32_t)tr.toks.n + 1,
                        .unique_tokens = 1};
  st = rg__tokenizer_build(&sp, out);
  goto done;
nomem:
  st = rg_status_make(RG_OUT_OF_MEMORY, "out of memory training the test tokenizer");
done:
  if (tokens)
    for (size_t i = 0; i < tr.toks.n && i < n_tok; i++) free((char *)tokens[i]);
  free(tokens);
  free(types);
  free(merges);
  free(merge_text);
  free(merge_off);
  trainer_free(&tr);
  return st;
}

rg_status_t rg_tokenizer_build_test(size_t n_merges, rg_tokenizer_t **out) {
  *out = NULL;
  if (n_merges > MAX_TEST_MERGES)
    return rg_status_make(RG_INVALID_ARGUMENT, "test tokenizer: %zu merges asked, at most %d",
                          n_merges, MAX_TEST_MERGES);
  // The 256 byte tokens in GPT-2's order: printable bytes first, then the
  // shifted ones.
  uint8_t order[256];
  int k = 0;
  for (int pass = 0; pass < 2; pass++)
    for (int b = 0; b < 256; b++) {
      int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
      if (printable == (pass == 0)) order[k++] = (uint8_t)b;
    }
  char byte_text[256][3];
  const char *byte_tok[256];
  for (int i = 0; i < 256; i++) {
    size_t l = rg__byte_to_utf8(order[i], byte_text[i]);
    byte_text[i][l] = 0;
    byte_tok[i] = byte_text[i];
  }
  rg__tok_spec_t sp = {.src = "test tokenizer",
                       .tokens_field = "tokens",
                       .merges_field = "merges",
                       .tokens = byte_tok,
                       .n_tokens = 256,
                       .pre = "llama-bpe",
                       .ignore_merges = -1,
                       .bos = -1,
                       .eos = -1};
  rg_tokenizer_t *bytes_tok = NULL;
  RG_RETURN_IF_ERROR(rg__tokenizer_build(&sp, &bytes_tok));
  // Merges stop when every piece is one token, which a count of the text
  // predicts only loosely: train on more text until n_merges fit.
  rg_status_t st = NULL;
  size_t want = 4 * n_merges + 256;
  for (int attempt = 0; attempt < 8; attempt++, want *= 2) {
    int exhausted = 0;
    st = train(bytes_tok, order, n_merges, want, &exhausted, out);
    if (!exhausted) break;
  }

  rg_tokenizer_destroy(bytes_tok);
  return st;
}
