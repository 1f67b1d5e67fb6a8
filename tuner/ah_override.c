/* ah_override.c: the AUTOHA_OVERRIDE grammar (tuner/ah_override.h): parsing with errors that name
 * the bad token and its position, most-specific matching, and the check against the pairs NCCL
 * allows.
 *
 * The parser works on (offset, length) spans of the original string, so every error can quote the
 * exact token and its 0-based position; a rule with an error is dropped whole and parsing goes on
 * with the next ';', so one typo never disables the rest of a user's overrides. */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "ah_override.h"

#define CHUNK_MAX ((uint64_t)1 << 30)

typedef struct {
  size_t off, len;
} span_t;

typedef struct {
  const char *s;
  char *err;
  size_t errlen, erroff;
  int nerr;
} parser_t;

static span_t span_trim(const char *s, span_t sp) {
  while (sp.len && isspace((unsigned char)s[sp.off])) sp.off++, sp.len--;
  while (sp.len && isspace((unsigned char)s[sp.off + sp.len - 1])) sp.len--;
  return sp;
}

/* First occurrence of c in the span, as an absolute offset, or (size_t)-1. */
static size_t span_find(const char *s, span_t sp, char c) {
  for (size_t i = 0; i < sp.len; i++)
    if (s[sp.off + i] == c) return sp.off + i;
  return (size_t)-1;
}

static void perr(parser_t *p, span_t tok, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void perr(parser_t *p, span_t tok, const char *fmt, ...) {
  p->nerr++;
  if (!p->err || p->errlen == 0 || p->erroff + 1 >= p->errlen) return;
  char *out = p->err + p->erroff;
  size_t room = p->errlen - p->erroff;
  int len = (int)(tok.len > 200 ? 200 : tok.len);
  int n = snprintf(out, room, "%s'%.*s' at position %zu: ", p->erroff ? "\n" : "", len,
                   p->s + tok.off, tok.off);
  if (n < 0 || (size_t)n >= room) {
    p->erroff = p->errlen - 1;
    return;
  }
  va_list ap;
  va_start(ap, fmt);
  int m = vsnprintf(out + n, room - (size_t)n, fmt, ap);
  va_end(ap);
  if (m < 0 || (size_t)(n + m) >= room) p->erroff = p->errlen - 1;
  else p->erroff += (size_t)(n + m);
}

static const char *algo_choices(void) {
  return "tree|ring|collnetdirect|collnetchain|nvls|nvlstree|pat";
}

/* Parses a range "lo-hi", "lo-", "-hi" or "n" in span sp. */
static int parse_range(parser_t *p, span_t sp, uint64_t *lo_p, uint64_t *hi_p) {
  const char *s = p->s;
  uint64_t lo = 0, hi = UINT64_MAX;
  size_t dash = span_find(s, sp, '-');
  if (dash == (size_t)-1) {
    if (ah_size_parse(s + sp.off, sp.len, &lo) != 0) {
      perr(p, sp, "bad size (expected digits with an optional K, M or G)");
      return -1;
    }
    hi = lo;
  } else {
    span_t a = span_trim(s, (span_t){sp.off, dash - sp.off});
    span_t b = span_trim(s, (span_t){dash + 1, sp.off + sp.len - dash - 1});
    if (a.len == 0 && b.len == 0) {
      perr(p, sp, "size range with no bounds (expected SIZE-SIZE, SIZE- or -SIZE)");
      return -1;
    }
    if (a.len && ah_size_parse(s + a.off, a.len, &lo) != 0) {
      perr(p, a, "bad size (expected digits with an optional K, M or G)");
      return -1;
    }
    if (b.len && ah_size_parse(s + b.off, b.len, &hi) != 0) {
      perr(p, b, "bad size (expected digits with an optional K, M or G)");
      return -1;
    }
    if (lo > hi) {
      perr(p, sp, "range ends before it starts (expected LOW-HIGH with LOW <= HIGH)");
      return -1;
    }
  }
  *lo_p = lo;
  *hi_p = hi;
  return 0;
}

/* Parses one "name=value" field into r. */
static int parse_field(parser_t *p, span_t f, ah_override_rule_t *r, unsigned *seen) {
  const char *s = p->s;
  size_t eq = span_find(s, f, '=');
  if (eq == (size_t)-1) {
    perr(p, f, "field without '=' (expected algo=, proto=, nchannels= or chunk=)");
    return -1;
  }
  span_t name = span_trim(s, (span_t){f.off, eq - f.off});
  span_t val = span_trim(s, (span_t){eq + 1, f.off + f.len - eq - 1});
  static const char *const fields[] = {"algo", "proto", "nchannels", "chunk"};
  int which = -1;
  for (int i = 0; i < 4; i++)
    if (name.len == strlen(fields[i]) && strncasecmp(s + name.off, fields[i], name.len) == 0)
      which = i;
  if (which < 0) {
    perr(p, name.len ? name : f, "unknown field (expected algo, proto, nchannels or chunk)");
    return -1;
  }
  if (*seen & (1u << which)) {
    perr(p, f, "field given twice in one rule");
    return -1;
  }
  if (val.len == 0) {
    perr(p, f, "field without a value");
    return -1;
  }
  switch (which) {
    case 0: {
      int a = ah_algo_parse(s + val.off, val.len);
      if (a < 0) {
        perr(p, f, "unknown algorithm (expected %s)", algo_choices());
        return -1;
      }
      r->cfg.algo = (int8_t)a;
      break;
    }
    case 1: {
      int pr = ah_proto_parse(s + val.off, val.len);
      if (pr < 0) {
        perr(p, f, "unknown protocol (expected ll|ll128|simple)");
        return -1;
      }
      r->cfg.proto = (int8_t)pr;
      break;
    }
    case 2: {
      uint64_t n = 0;
      int ok = 1;
      for (size_t i = 0; i < val.len; i++)
        if (!isdigit((unsigned char)s[val.off + i])) ok = 0;
      if (ok && ah_size_parse(s + val.off, val.len, &n) != 0) ok = 0;
      if (!ok || n < 1 || n > AH_OVERRIDE_MAX_NCHANNELS) {
        perr(p, f, "bad channel count (expected an integer 1..%d)", AH_OVERRIDE_MAX_NCHANNELS);
        return -1;
      }
      r->cfg.res[AH_DIM_NCHANNELS] = (int64_t)n;
      break;
    }
    default: {
      uint64_t n = 0;
      if (ah_size_parse(s + val.off, val.len, &n) != 0 || n == 0 || n > CHUNK_MAX) {
        perr(p, f, "bad chunk size (expected 1..1G bytes, K/M/G suffixes allowed)");
        return -1;
      }
      r->cfg.res[AH_DIM_CHUNK] = (int64_t)n;
      break;
    }
  }
  *seen |= 1u << which;
  return 0;
}

/* Parses one non-empty rule; returns 0 and fills r, or -1 after reporting. */
static int parse_rule(parser_t *p, span_t rule, ah_override_rule_t *r) {
  const char *s = p->s;
  memset(r, 0, sizeof *r);
  r->coll = -1;
  r->pos = (int32_t)rule.off;
  r->lo = 0;
  r->hi = UINT64_MAX;
  r->cfg.algo = -1;
  r->cfg.proto = -1;
  r->cfg.ndims = 2;
  size_t colon = span_find(s, rule, ':');
  if (colon == (size_t)-1) {
    perr(p, rule, "rule without ':' (expected COLLECTIVE[@RANGE]:FIELD=VALUE,...)");
    return -1;
  }
  span_t target = span_trim(s, (span_t){rule.off, colon - rule.off});
  span_t body = (span_t){colon + 1, rule.off + rule.len - colon - 1};
  size_t at = span_find(s, target, '@');
  span_t coll = target, range = {0, 0};
  if (at != (size_t)-1) {
    coll = span_trim(s, (span_t){target.off, at - target.off});
    range = span_trim(s, (span_t){at + 1, target.off + target.len - at - 1});
  }
  if (coll.len == 1 && s[coll.off] == '*') {
    r->coll = -1;
  } else {
    int c = ah_coll_parse(s + coll.off, coll.len);
    if (c < 0) {
      perr(p, coll.len ? coll : rule,
           "unknown collective (expected allreduce|allgather|reducescatter|broadcast|reduce|*)");
      return -1;
    }
    r->coll = c;
  }
  if (at != (size_t)-1 && range.len == 0) {
    perr(p, (span_t){at, 1},
         "empty size range after '@' (expected SIZE-SIZE, SIZE-, -SIZE or SIZE)");
    return -1;
  }
  if (at != (size_t)-1 && parse_range(p, range, &r->lo, &r->hi) != 0) return -1;
  unsigned seen = 0;
  span_t rest = body;
  for (;;) {
    size_t comma = span_find(s, rest, ',');
    span_t f = comma == (size_t)-1 ? rest : (span_t){rest.off, comma - rest.off};
    span_t ft = span_trim(s, f);
    if (ft.len == 0) {
      perr(p, (span_t){f.off ? f.off - 1 : 0, 1},
           "empty field (expected algo=, proto=, "
           "nchannels= or chunk=)");
      return -1;
    }
    if (parse_field(p, ft, r, &seen) != 0) return -1;
    if (comma == (size_t)-1) break;
    rest = (span_t){comma + 1, rest.off + rest.len - comma - 1};
  }
  return 0;
}

int ah_override_parse(const char *s, ah_override_t *ov_p, char *err, size_t errlen) {
  memset(ov_p, 0, sizeof *ov_p);
  if (err && errlen) err[0] = 0;
  if (!s) return 0;
  parser_t p = {s, err, errlen, 0, 0};
  size_t n = strlen(s), start = 0;
  while (start <= n) {
    size_t end = start;
    while (end < n && s[end] != ';') end++;
    span_t rule = span_trim(s, (span_t){start, end - start});
    if (rule.len) {
      ah_override_rule_t r;
      if (parse_rule(&p, rule, &r) == 0) {
        if (ov_p->nrules < AH_OVERRIDE_MAX_RULES) ov_p->rules[ov_p->nrules++] = r;
        else perr(&p, rule, "too many rules (at most %d)", AH_OVERRIDE_MAX_RULES);
      }
    }
    start = end + 1;
  }
  return p.nerr;
}

/* Larger is more specific: a named collective first, then a narrower range. */
static int more_specific(const ah_override_rule_t *a, const ah_override_rule_t *b) {
  if ((a->coll >= 0) != (b->coll >= 0)) return a->coll >= 0;
  return a->hi - a->lo < b->hi - b->lo;
}

static int match_range(const ah_override_t *ov, int coll, uint64_t lo, uint64_t hi,
                       ah_config_t *cfg_p) {
  int best = -1;
  for (int i = 0; i < ov->nrules; i++) {
    const ah_override_rule_t *r = &ov->rules[i];
    if (r->coll >= 0 && r->coll != coll) continue;
    if (lo < r->lo || hi > r->hi) continue;
    if (best < 0 || more_specific(r, &ov->rules[best])) best = i;
  }
  if (best >= 0) *cfg_p = ov->rules[best].cfg;
  return best;
}

int ah_override_match(const ah_override_t *ov, int coll, uint64_t bytes_per_rank,
                      ah_config_t *cfg_p) {
  return match_range(ov, coll, bytes_per_rank, bytes_per_rank, cfg_p);
}

int ah_override_match_bin(const ah_override_t *ov, int coll, int bin, ah_config_t *cfg_p) {
  uint64_t lo = ah_size_bin_floor(bin);
  uint64_t hi = bin >= 63 ? UINT64_MAX : bin <= 0 ? 1 : (((uint64_t)1 << (bin + 1)) - 1);
  return match_range(ov, coll, lo, hi, cfg_p);
}

char *ah_override_rule_format(const ah_override_rule_t *r, char *buf, size_t len) {
  char lo[32], hi[32];
  size_t off = 0;
  int n = snprintf(buf, len, "%s", r->coll < 0 ? "*" : ah_coll_name(r->coll));
  off = n < 0 ? 0 : (size_t)n;
  if ((r->lo != 0 || r->hi != UINT64_MAX) && off < len) {
    ah_size_format(r->lo, lo, sizeof lo);
    ah_size_format(r->hi, hi, sizeof hi);
    if (r->lo == r->hi) n = snprintf(buf + off, len - off, "@%s", lo);
    else
      n = snprintf(buf + off, len - off, "@%s-%s", r->lo ? lo : "", r->hi != UINT64_MAX ? hi : "");
    off += n < 0 ? 0 : (size_t)n;
  }
  const char *sep = ":";
  if (r->cfg.algo >= 0 && off < len) {
    n = snprintf(buf + off, len - off, "%salgo=%s", sep, ah_algo_name(r->cfg.algo));
    off += n < 0 ? 0 : (size_t)n;
    sep = ",";
  }
  if (r->cfg.proto >= 0 && off < len) {
    n = snprintf(buf + off, len - off, "%sproto=%s", sep, ah_proto_name(r->cfg.proto));
    off += n < 0 ? 0 : (size_t)n;
    sep = ",";
  }
  if (r->cfg.res[AH_DIM_NCHANNELS] > 0 && off < len) {
    n = snprintf(buf + off, len - off, "%snchannels=%lld", sep,
                 (long long)r->cfg.res[AH_DIM_NCHANNELS]);
    off += n < 0 ? 0 : (size_t)n;
    sep = ",";
  }
  if (r->cfg.res[AH_DIM_CHUNK] > 0 && off < len) {
    n = snprintf(buf + off, len - off, "%schunk=%s", sep,
                 ah_size_format((uint64_t)r->cfg.res[AH_DIM_CHUNK], lo, sizeof lo));
    off += n < 0 ? 0 : (size_t)n;
  }
  return buf;
}
