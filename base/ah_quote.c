/* Log-safe text of an outside value (ah_quote.h). */
#include "ah_quote.h"

#include <stdio.h>
#include <string.h>

/* Length of the valid UTF-8 sequence at s (1..4), or 0 when its first byte does not start one:
 * no overlong forms, no surrogates, nothing above U+10FFFF. */
static int utf8_len(const unsigned char *s) {
  unsigned c = s[0];
  int n;
  unsigned min;
  if (c < 0x80) return 1;
  if (c >= 0xc2 && c <= 0xdf) n = 2, min = 0x80;
  else if (c >= 0xe0 && c <= 0xef) n = 3, min = 0x800;
  else if (c >= 0xf0 && c <= 0xf4) n = 4, min = 0x10000;
  else return 0;
  unsigned cp = c & (0x7f >> n);
  for (int i = 1; i < n; i++) {
    if ((s[i] & 0xc0) != 0x80) return 0; /* a NUL ends it too */
    cp = cp << 6 | (s[i] & 0x3f);
  }
  if (cp < min || (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff) return 0;
  return n;
}

/* The escaped length of s and all that follows it. */
static size_t rest_len(const unsigned char *s) {
  size_t len = 0;
  while (*s) {
    int take = 1;
    if (*s == '\n' || *s == '\r' || *s == '\t' || *s == '\\' || *s == '\'') len += 2;
    else if (*s < 0x20 || *s == 0x7f || !(take = utf8_len(s))) take = 1, len += 4;
    else len += (size_t)take;
    s += take;
  }
  return len;
}

char *ah_quote(const char *in, char *out, size_t outlen) {
  if (!outlen) return out;
  const unsigned char *s = (const unsigned char *)(in ? in : "");
  size_t o = 0;
  while (*s) {
    char piece[8];
    int take = 1, n;
    if (*s == '\n' || *s == '\r' || *s == '\t' || *s == '\\' || *s == '\'') {
      const char *esc = *s == '\n'   ? "\\n"
                        : *s == '\r' ? "\\r"
                        : *s == '\t' ? "\\t"
                        : *s == '\\' ? "\\\\"
                                     : "\\'";
      n = snprintf(piece, sizeof piece, "%s", esc);
    } else if (*s < 0x20 || *s == 0x7f || !(take = utf8_len(s))) {
      take = 1;
      n = snprintf(piece, sizeof piece, "\\x%02x", *s);
    } else {
      memcpy(piece, s, (size_t)take);
      n = take;
    }
    /* room for this piece and, unless it is the last, for a "..." after it: a cut never splits
     * an escape or a character */
    size_t need = (size_t)n + (s[take] ? 3 : 0) + 1;
    if (o + need > outlen && o + rest_len(s) + 1 > outlen) {
      if (o + 4 <= outlen) memcpy(out + o, "...", 4);
      else out[o] = 0;
      return out;
    }
    memcpy(out + o, piece, (size_t)n);
    o += (size_t)n;
    s += take;
  }
  out[o] = 0;
  return out;
}
