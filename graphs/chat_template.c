// graphs/chat_template.c — the chat formats of the common model families,
// written out by hand (the Jinja templates models ship reduce to these for
// plain role/content messages). See rg_chat_template_apply in tokenizer.h.
#include <stdlib.h>
#include <string.h>

#include "graphs/tokenizer.h"

typedef struct {
  char *s;
  size_t n, cap;
  int oom;
} buf_t;

static void put(buf_t *b, const char *s, size_t n) {
  if (b->oom) return;
  if (b->n + n + 1 > b->cap) {
    size_t cap = (b->n + n + 1) * 2;
    char *ns = realloc(b->s, cap);
    if (!ns) {
      b->oom = 1;
      return;
    }
    b->s = ns;
    b->cap = cap;
  }
  memcpy(b->s + b->n, s, n);
  b->n += n;
  b->s[b->n] = 0;
}

static void puts_(buf_t *b, const char *s) {
  put(b, s, strlen(s));
}

static int is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

// Meta's template trims each message's content (Jinja's | trim).
static void put_trimmed(buf_t *b, const char *s) {
  size_t n = strlen(s), i = 0;
  while (i < n && is_space(s[i])) i++;
  while (n > i && is_space(s[n - 1])) n--;
  put(b, s + i, n - i);
}

static void llama3(buf_t *b, const rg_chat_msg_t *m, size_t n) {
  for (size_t i = 0; i < n; i++) {
    puts_(b, "<|start_header_id|>");
    puts_(b, m[i].role);
    puts_(b, "<|end_header_id|>\n\n");
    put_trimmed(b, m[i].content);
    puts_(b, "<|eot_id|>");
  }
  puts_(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

static void chatml(buf_t *b, const rg_chat_msg_t *m, size_t n) {
  for (size_t i = 0; i < n; i++) {
    puts_(b, "<|im_start|>");
    puts_(b, m[i].role);
    puts_(b, "\n");
    puts_(b, m[i].content);
    puts_(b, "<|im_end|>\n");
  }
  puts_(b, "<|im_start|>assistant\n");
}

// Mistral / Mixtral instruct v0.1-style: [INST] user [/INST]assistant</s>.
// The format has no system role; a system message is put before the next
// user message, as Mistral's own later templates do.
static rg_status_t mistral(buf_t *b, const rg_chat_msg_t *m, size_t n) {
  const char *system = NULL;
  int open = 0;  // an [INST] ... [/INST] waits for the assistant's answer
  for (size_t i = 0; i < n; i++) {
    if (strcmp(m[i].role, "system") == 0) {
      system = m[i].content;
    } else if (strcmp(m[i].role, "user") == 0) {
      puts_(b, "[INST] ");
      if (system) {
        puts_(b, system);
        puts_(b, "\n\n");
        system = NULL;
      }
      puts_(b, m[i].content);
      puts_(b, " [/INST]");
      open = 1;
    } else if (strcmp(m[i].role, "assistant") == 0) {
      puts_(b, m[i].content);
      puts_(b, "</s>");
      open = 0;
    } else {
      return rg_status_make(RG_INVALID_ARGUMENT,
                            "chat template mistral: message %zu has role \"%s\"; the format has "
                            "system, user and assistant only",
                            i, m[i].role);
    }
  }
  if (system) {
    puts_(b, "[INST] ");
    puts_(b, system);
    puts_(b, " [/INST]");
    open = 1;
  }
  if (!open)
    return rg_status_make(RG_INVALID_ARGUMENT,
                          "chat template mistral: the last message must be from the user (the "
                          "format has no turn for the assistant to answer otherwise)");
  return NULL;
}

rg_status_t rg_chat_template_apply(const char *family, const rg_chat_msg_t *msgs, size_t n,
                                   char **out_text) {
  *out_text = NULL;
  if (!family) return rg_status_make(RG_INVALID_ARGUMENT, "chat template: no family given");
  for (size_t i = 0; i < n; i++)
    if (!msgs[i].role || !msgs[i].content || !msgs[i].role[0])
      return rg_status_make(RG_INVALID_ARGUMENT, "chat template %s: message %zu lacks a %s", family,
                            i, !msgs[i].content ? "content" : "role");
  buf_t b = {0};
  put(&b, "", 0);
  rg_status_t st = NULL;
  if (strcmp(family, "llama3") == 0) {
    llama3(&b, msgs, n);
  } else if (strcmp(family, "chatml") == 0) {
    chatml(&b, msgs, n);
  } else if (strcmp(family, "mistral") == 0) {
    st = mistral(&b, msgs, n);
  } else {
    st = rg_status_make(RG_INVALID_ARGUMENT,
                        "chat template \"%s\" is not one ridge knows (llama3, chatml, mistral)",
                        family);
  }
  if (!st && b.oom) st = rg_status_make(RG_OUT_OF_MEMORY, "out of memory applying a chat template");
  if (st) {
    free(b.s);
    return st;
  }
  *out_text = b.s;
  return NULL;
}
