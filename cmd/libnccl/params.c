// Per-thread string buffers for the ncclParam* functions (api.h).
#include <stdlib.h>
#include <string.h>

#include "api.h"

static __thread char *fl_strs[4];

const char *fl_thread_str(int slot, const char *s) {
  if (slot < 0 || slot >= 4) return NULL;
  size_t n = strlen(s) + 1;
  char *b = realloc(fl_strs[slot], n);
  if (!b) return NULL;
  memcpy(b, s, n);
  fl_strs[slot] = b;
  return b;
}
