/* fuzz.h: the one entry point every fuzz target defines (libFuzzer's), and a helper for targets
 * whose parser takes a C string. Each target is built two ways: with clang's libFuzzer
 * (scripts/fuzz) and, under the normal compiler, with replay_main.c, which runs the target's seed
 * corpus and regression inputs in CTest. */
#ifndef AUTOHA_FUZZ_H
#define AUTOHA_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The input as a NUL-terminated string (malloc'ed; NULL when out of memory). Bytes after an
 * embedded NUL are kept but unseen by string parsers, as they would be in a file read as text. */
static inline char *fuzz_cstr(const uint8_t *data, size_t size) {
  char *s = malloc(size + 1);
  if (!s) return NULL;
  if (size) memcpy(s, data, size);
  s[size] = 0;
  return s;
}

#endif
