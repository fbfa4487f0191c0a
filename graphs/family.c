// The model-family traits table (see graphs/graphs.h).
#include <stdio.h>
#include <string.h>

#include "graphs/graphs.h"

static const rg_family_info_t families[] = {
#define RG_X_(e, mt, cls, gg, chat, tr) {mt, cls, gg, chat, tr},
    RG_FAMILY_MAP(RG_X_)
#undef RG_X_
};
_Static_assert(sizeof families / sizeof families[0] == RG_FAMILY_COUNT, "family table out of step");

static const rg_family_info_t unknown = {"?", NULL, NULL, NULL, 0};

const rg_family_info_t *rg_family_info(rg_family_t f) {
  return (unsigned)f < RG_FAMILY_COUNT ? &families[f] : &unknown;
}
const char *rg_family_name(rg_family_t f) {
  return rg_family_info(f)->model_type;
}
int rg_family_has(rg_family_t f, unsigned trait) {
  return (rg_family_info(f)->traits & trait) == trait;
}

int rg_family_from_model_type(const char *s, rg_family_t *out) {
  for (int i = 0; s && i < RG_FAMILY_COUNT; i++)
    if (!strcmp(s, families[i].model_type)) return *out = (rg_family_t)i, 0;
  return -1;
}
int rg_family_from_class(const char *s, rg_family_t *out) {
  for (int i = 0; s && i < RG_FAMILY_COUNT; i++)
    if (!strcmp(s, families[i].class_name)) return *out = (rg_family_t)i, 0;
  return -1;
}
int rg_family_from_gguf(const char *s, rg_family_t *out) {
  for (int i = 0; s && i < RG_FAMILY_COUNT; i++)  // first match: llama before mistral, mixtral
    if (families[i].gguf_arch && !strcmp(s, families[i].gguf_arch)) return *out = (rg_family_t)i, 0;
  return -1;
}

const char *rg_family_list(unsigned traits, char *buf, size_t len) {
  size_t used = 0;
  if (len) buf[0] = 0;
  for (int i = 0; i < RG_FAMILY_COUNT; i++) {
    if ((families[i].traits & traits) != traits) continue;
    int n = snprintf(buf + used, used < len ? len - used : 0, "%s%s", used ? ", " : "",
                     families[i].model_type);
    if (n > 0) used += (size_t)n;
  }
  return buf;
}
