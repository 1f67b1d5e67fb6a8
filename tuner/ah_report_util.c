/* ah_report_util.c: the small pure pieces of the report — nccl-tests' bandwidth formulas, the
 * topology fingerprint, report path templates and source names (tuner/ah_report.h).
 *
 * Kept apart from the JSON writer so the env table can validate AUTOHA_REPORT templates, and the
 * benchmarks compute busbw, without pulling in jansson. */
#include <stdio.h>
#include <string.h>

#include "ah_report.h"

double ah_report_busbw_factor(int coll, int nranks) {
  double n = nranks > 0 ? (double)nranks : 1.0;
  switch (coll) {
  case AH_FUNC_ALLREDUCE: return 2.0 * (n - 1.0) / n;
  case AH_FUNC_ALLGATHER:
  case AH_FUNC_REDUCESCATTER: return (n - 1.0) / n;
  default: return 1.0;
  }
}

double ah_report_algbw(int coll, int nranks, double bytes_per_rank, double us) {
  if (!(us > 0)) return 0;
  double s = bytes_per_rank;
  if ((coll == AH_FUNC_ALLGATHER || coll == AH_FUNC_REDUCESCATTER) && nranks > 0)
    s *= (double)nranks;
  return s / (us * 1e-6) / 1e9;
}

char *ah_report_fingerprint(const char *desc, char *out) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const unsigned char *p = (const unsigned char *)(desc ? desc : ""); *p; p++) {
    h ^= *p;
    h *= 0x100000001b3ull;
  }
  snprintf(out, AH_REPORT_TOPO_MAX, "fnv1a64:%016llx", (unsigned long long)h);
  return out;
}

int ah_report_path_expand(const char *tmpl, const char *host, int pid, int rank, char *out,
                          size_t len, char *err, size_t errlen) {
  size_t o = 0;
  if (!tmpl || !out || len == 0) {
    if (err && errlen) snprintf(err, errlen, "no path template");
    return -1;
  }
  for (size_t i = 0; tmpl[i]; i++) {
    char piece[64];
    const char *add = piece;
    if (tmpl[i] != '%') {
      piece[0] = tmpl[i];
      piece[1] = 0;
    } else {
      switch (tmpl[i + 1]) {
      case 'h': add = host && *host ? host : "unknown"; break;
      case 'p': snprintf(piece, sizeof piece, "%d", pid); break;
      case 'r':
        if (rank < 0)
          add = "all";
        else
          snprintf(piece, sizeof piece, "%d", rank);
        break;
      case '%': add = "%"; break;
      default:
        out[0] = 0;
        if (err && errlen)
          snprintf(err, errlen, "'%%%.1s' at position %zu of '%s' (expected %%h, %%p, %%r or %%%%)",
                   tmpl + i + 1, i, tmpl);
        return -1;
      }
      i++;
    }
    size_t n = strlen(add);
    if (o + n >= len) {
      out[0] = 0;
      if (err && errlen) snprintf(err, errlen, "path from '%s' longer than %zu bytes", tmpl, len - 1);
      return -1;
    }
    memcpy(out + o, add, n);
    o += n;
  }
  out[o] = 0;
  return 0;
}

static const char *const source_names[] = {"default", "override", "profile", "tuned"};

const char *ah_report_source_name(int source) {
  return source >= 0 && source < 4 ? source_names[source] : "?";
}

int ah_report_source_parse(const char *s) {
  for (int i = 0; s && i < 4; i++)
    if (strcmp(s, source_names[i]) == 0) return i;
  return -1;
}

/* Length of the well-formed UTF-8 character at p (RFC 3629: no overlongs, no surrogates, at most
 * U+10FFFF), or 0 when p does not start one. */
static size_t utf8_char_len(const unsigned char *p) {
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
  } else
    return 0;
  if (p[1] < lo || p[1] > hi) return 0;
  for (size_t i = 2; i < n; i++)
    if (p[i] < 0x80 || p[i] > 0xbf) return 0;
  return n;
}

char *ah_report_text_copy(char *out, size_t len, const char *in) {
  if (!len) return out;
  const unsigned char *p = (const unsigned char *)in;
  size_t o = 0;
  while (*p) {
    size_t n = utf8_char_len(p);
    if (n) {
      if (o + n >= len) break;
      memcpy(out + o, p, n);
      o += n;
      p += n;
    } else {
      if (o + 4 >= len) break;
      snprintf(out + o, len - o, "\\x%02x", *p);
      o += 4;
      p++;
    }
  }
  out[o] = 0;
  return out;
}
