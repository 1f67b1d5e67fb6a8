/* Log-safe text of an outside value (ah_quote.h). */
#include "ah_quote.h"

#include <stdio.h>
#include <string.h>

size_t ah_utf8_len(const unsigned char *p) {
  unsigned c = p[0];
  if (c < 0x80) return 1;
  size_t n;
  unsigned lo = 0x80, hi = 0xbf;
  if (c >= 0xc2 && c <= 0xdf) n = 2;
  else if (c >= 0xe0 && c <= 0xef) {
    n = 3;
    if (c == 0xe0) lo = 0xa0;
    if (c == 0xed) hi = 0x9f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4;
    if (c == 0xf0) lo = 0x90;
    if (c == 0xf4) hi = 0x8f;
  } else return 0;
  if (p[1] < lo || p[1] > hi) return 0;
  for (size_t i = 2; i < n; i++)
    if (p[i] < 0x80 || p[i] > 0xbf) return 0;
  return n;
}

/* The escaped length of s and all that follows it. */
static size_t rest_len(const unsigned char *s) {
  size_t len = 0;
  while (*s) {
    int take = 1;
    if (*s == '\n' || *s == '\r' || *s == '\t' || *s == '\\' || *s == '\'') len += 2;
    else if (*s < 0x20 || *s == 0x7f || !(take = ah_utf8_len(s))) take = 1, len += 4;
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
    } else if (*s < 0x20 || *s == 0x7f || !(take = ah_utf8_len(s))) {
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
