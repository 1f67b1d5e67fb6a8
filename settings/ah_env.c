/* ah_env.c: the one set of typed parsers behind the table of every AUTOHA_* variable
 * (ah_env_table.c, settings/ah_env.h), UCX's config-table model: the row is the single source for
 * parsing, for `autoha env` and for docs/environment.md.
 *
 * A value that does not parse keeps the row's default and logs one line naming the variable, the
 * text and what was expected; an AUTOHA_* name that no row knows is reported with the nearest real
 * name, since a misspelt variable silently doing nothing is the worst outcome for a user. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "ah_env.h"
#include "ah_jansson.h"
#include "ah_log.h"
#include "ah_log_file.h"
#include "ah_path.h"
#include "ah_quote.h"
#include "ah_template.h"
#include "ah_version.h"

extern char **environ;

/* ---- typed parsers --------------------------------------------------------------------------- */

static void *field_of(const ah_env_var_t *v, ah_settings_t *s) { return (char *)s + v->offset; }
static const void *cfield_of(const ah_env_var_t *v, const ah_settings_t *s) {
  return (const char *)s + v->offset;
}

static int parse_bool(const char *s, int *v_p) {
  static const char *const yes[] = {"1", "y", "yes", "on", "true"};
  static const char *const no[] = {"0", "n", "no", "off", "false"};
  for (int i = 0; i < 5; i++) {
    if (strcasecmp(s, yes[i]) == 0) return *v_p = 1, 0;
    if (strcasecmp(s, no[i]) == 0) return *v_p = 0, 0;
  }
  return -1;
}

/* Index of s in a '|'-separated list, case-insensitive, or -1. */
static int parse_choice(const char *choices, const char *s) {
  size_t n = strlen(s);
  int idx = 0;
  for (const char *p = choices; *p; idx++) {
    const char *e = strchr(p, '|');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    if (len == n && n > 0 && strncasecmp(p, s, n) == 0) return idx;
    if (!e) break;
    p = e + 1;
  }
  return -1;
}

static const char *choice_at(const char *choices, int idx, char *buf, size_t len) {
  const char *p = choices;
  for (int i = 0; i < idx && p; i++) {
    p = strchr(p, '|');
    if (p) p++;
  }
  if (!p) return "?";
  const char *e = strchr(p, '|');
  size_t n = e ? (size_t)(e - p) : strlen(p);
  if (n >= len) n = len - 1;
  memcpy(buf, p, n);
  buf[n] = 0;
  return buf;
}

static int parse_long(const char *s, long long *v_p) {
  char *end;
  if (!*s || isspace((unsigned char)*s)) return -1;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || *end) return -1;
  *v_p = v;
  return 0;
}

/* NCCL_SOCKET_IFNAME's shape: an optional '^', an optional '=', then comma-separated names of at
 * most 15 characters (IFNAMSIZ - 1) of letters, digits and . _ - : @ (empty items are allowed, as
 * NCCL skips them). */
static int valid_ifname(const char *s) {
  if (*s == '^') s++;
  if (*s == '=') s++;
  for (size_t item = 0; *s; s++) {
    if (*s == ',') {
      item = 0;
      continue;
    }
    if (!(isalnum((unsigned char)*s) || strchr("._-:@", *s)) || ++item > 15) return 0;
  }
  return 1;
}

/* host:port, [v6]:port; port 1..65535. */
static int valid_addr(const char *s) {
  const char *colon = strrchr(s, ':');
  if (!colon || colon == s || !colon[1]) return 0;
  long long port;
  if (parse_long(colon + 1, &port) != 0 || port < 1 || port > 65535) return 0;
  if (s[0] == '[' && colon[-1] != ']') return 0;
  for (const char *p = s; p < colon; p++)
    if (isspace((unsigned char)*p)) return 0;
  return 1;
}

static int set_text(char *dst, size_t size, const char *src) {
  size_t n = strlen(src);
  if (n >= size) return -1;
  memcpy(dst, src, n + 1);
  return 0;
}

int ah_env_parse_one(const ah_env_var_t *v, const char *value, ah_settings_t *s_p, char *err,
                     size_t errlen) {
  char why[768] = "";
  const char *expected = v->syntax;
  if (!value) value = "";
  switch (v->type) {
    case AH_ENV_BOOL: {
      int b;
      if (parse_bool(value, &b) != 0) break;
      *(int *)field_of(v, s_p) = b;
      return 0;
    }
    case AH_ENV_ENUM: {
      int i = parse_choice(v->choices, value);
      if (i < 0) break;
      *(int *)field_of(v, s_p) = i;
      return 0;
    }
    case AH_ENV_INT: {
      long long n;
      if (parse_long(value, &n) != 0 || (double)n < v->min || (double)n > v->max) break;
      *(int *)field_of(v, s_p) = (int)n;
      return 0;
    }
    case AH_ENV_DOUBLE: {
      char *end;
      errno = 0;
      double d = *value && !isspace((unsigned char)*value) ? strtod(value, &end) : NAN;
      if (errno || isnan(d) || *end || !isfinite(d) || d < v->min || d > v->max) break;
      *(double *)field_of(v, s_p) = d;
      return 0;
    }
    case AH_ENV_SIZE: {
      uint64_t n;
      if (ah_size_parse(value, strlen(value), &n) != 0 || (double)n < v->min || (double)n > v->max)
        break;
      *(int64_t *)field_of(v, s_p) = (int64_t)n;
      return 0;
    }
    case AH_ENV_STRING:
      if (*value && !valid_addr(value)) break;
      if (set_text(field_of(v, s_p), v->size, value) != 0) {
        snprintf(why, sizeof why, "longer than %zu characters", v->size - 1);
        break;
      }
      return 0;
    case AH_ENV_IFNAME:
      if (!valid_ifname(value)) break;
      if (set_text(field_of(v, s_p), v->size, value) != 0) {
        snprintf(why, sizeof why, "longer than %zu characters", v->size - 1);
        break;
      }
      return 0;
    case AH_ENV_COMMAND:
    case AH_ENV_TEXT:
    case AH_ENV_FILE:
      if (set_text(field_of(v, s_p), v->size, value) != 0) {
        snprintf(why, sizeof why, "longer than %zu characters", v->size - 1);
        break;
      }
      return 0;
    case AH_ENV_PATH: {
      if (!*value || strcasecmp(value, "off") == 0 || strcasecmp(value, "none") == 0) {
        *(char *)field_of(v, s_p) = 0;
        return 0;
      }
      char tmp[AH_ENV_PATH_MAX * 2], perr[512];
      if (ah_template_expand(value, "host", 1, 0, "job", tmp, sizeof tmp, perr, sizeof perr) != 0) {
        snprintf(why, sizeof why, "%s", perr);
        break;
      }
      if (set_text(field_of(v, s_p), v->size, value) != 0) {
        snprintf(why, sizeof why, "longer than %zu characters", v->size - 1);
        break;
      }
      return 0;
    }
    case AH_ENV_OVERRIDE: {
      char perr[2048];
      if (strlen(value) >= sizeof s_p->override_text) {
        snprintf(why, sizeof why, "longer than %zu characters", sizeof s_p->override_text - 1);
        break;
      }
      int nerr = ah_override_parse(value, &s_p->override, perr, sizeof perr);
      memcpy(s_p->override_text, value, strlen(value) + 1);
      if (nerr == 0) return 0;
      if (err && errlen) {
        /* One "invalid value" line per bad rule. */
        size_t o = 0;
        err[0] = 0;
        for (char *line = perr, *next; line && *line && o + 1 < errlen; line = next) {
          next = strchr(line, '\n');
          if (next) *next++ = 0;
          int n = snprintf(err + o, errlen - o, "%sinvalid value for %s: %s", o ? "\n" : "",
                           v->name, line);
          if (n < 0) break;
          o += (size_t)n;
          if (o >= errlen) o = errlen - 1;
        }
      }
      return -1;
    }
    case AH_ENV_QP_SPORT: {
      static const char *const modes[] = {"off", "spread", "file", "plan"};
      for (int i = 0; i < 4; i++) {
        if (i != AH_PATH_SPORT_FILE && strcasecmp(value, modes[i]) == 0) {
          s_p->qp_sport = i;
          s_p->qp_sport_file[0] = 0;
          return 0;
        }
      }
      if (strncasecmp(value, "file:", 5) == 0 && value[5]) {
        if (set_text(s_p->qp_sport_file, sizeof s_p->qp_sport_file, value + 5) != 0) {
          snprintf(why, sizeof why, "path longer than %zu characters",
                   sizeof s_p->qp_sport_file - 1);
          break;
        }
        s_p->qp_sport = AH_PATH_SPORT_FILE;
        return 0;
      }
      break;
    }
    case AH_ENV_TC: {
      int tc, dscp; /* the path code's grammar, the only one (nccl | 0..255 | dscp=0..63) */
      if (ah_path_parse_tc(value, &tc, &dscp) != 0) break;
      *(int *)field_of(v, s_p) = tc;
      s_p->qp_tc_dscp = dscp;
      return 0;
    }
    case AH_ENV_SUBSYS: {
      unsigned mask;
      if (ah_log_subsys_parse(value, &mask, why, sizeof why) != 0) break;
      *(int *)field_of(v, s_p) = (int)mask;
      return 0;
    }
    case AH_ENV_RATIO: {
      long long n, m;
      const char *slash = strchr(value, '/');
      char head[24];
      if (!slash || (size_t)(slash - value) >= sizeof head) break;
      memcpy(head, value, (size_t)(slash - value));
      head[slash - value] = 0;
      if (parse_long(head, &n) != 0 || parse_long(slash + 1, &m) != 0 || n < 1 || n > m ||
          (double)m > v->max)
        break;
      ((int *)field_of(v, s_p))[0] = (int)n;
      ((int *)field_of(v, s_p))[1] = (int)m;
      return 0;
    }
    case AH_ENV_ETCD: /* the client's grammar, the only one */
      if (ah_cluster_endpoints_parse(value, field_of(v, s_p), why, sizeof why) != 0) break;
      return 0;
    case AH_ENV_PREFIX: {
      size_t n = strlen(value);
      int ok = n >= 2 && value[0] == '/' && value[n - 1] == '/';
      for (size_t i = 0; ok && i < n; i++) ok = value[i] > ' ' && value[i] <= '~';
      if (!ok) break;
      if (set_text(field_of(v, s_p), v->size, value) != 0) {
        snprintf(why, sizeof why, "longer than %zu characters", v->size - 1);
        break;
      }
      return 0;
    }
    case AH_ENV_TC_RULES:
      if (*value && ah_path_tc_rules_parse(value, NULL, why, sizeof why) != 0) break;
      if (set_text(field_of(v, s_p), v->size, value) != 0) {
        snprintf(why, sizeof why, "longer than %zu characters", v->size - 1);
        break;
      }
      return 0;
  }
  if (err && errlen) { /* the value as one line shows it: a newline or raw byte escaped */
    char shown[160];
    ah_quote(value, shown, sizeof shown);
    if (why[0])
      snprintf(err, errlen, "invalid value for %s: '%s' (%s; expected %s)", v->name, shown, why,
               expected);
    else
      snprintf(err, errlen, "invalid value for %s: '%s' (expected %s)", v->name, shown, expected);
  }
  return -1;
}

void ah_env_defaults(ah_settings_t *s_p) {
  memset(s_p, 0, sizeof *s_p);
  for (int i = 0; i < ah_env_var_count(); i++) {
    /* Defaults are checked by tests/tuner (every default parses), so this cannot fail. */
    (void)ah_env_parse_one(ah_env_var_get(i), ah_env_var_get(i)->default_text, s_p, NULL, 0);
  }
}

/* Edit distance, for the "maybe" hint. Names longer than 63 characters are cut. */
static int edit_distance(const char *a, const char *b) {
  int la = (int)strlen(a), lb = (int)strlen(b);
  if (la > 63) la = 63;
  if (lb > 63) lb = 63;
  int prev[64], cur[64];
  for (int j = 0; j <= lb; j++) prev[j] = j;
  for (int i = 1; i <= la; i++) {
    cur[0] = i;
    for (int j = 1; j <= lb; j++) {
      int sub =
          prev[j - 1] + (toupper((unsigned char)a[i - 1]) != toupper((unsigned char)b[j - 1]));
      int del = prev[j] + 1, ins = cur[j - 1] + 1;
      cur[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
    }
    memcpy(prev, cur, sizeof(int) * (size_t)(lb + 1));
  }
  return prev[lb];
}

const char *ah_env_nearest(const char *name) {
  const char *best = NULL;
  int bestd = 1 << 30;
  if (!name) return NULL;
  for (int i = 0; i < ah_env_var_count(); i++) {
    int d = edit_distance(name, ah_env_var_get(i)->name);
    if (d < bestd) bestd = d, best = ah_env_var_get(i)->name;
  }
  int len = (int)strlen(name);
  return bestd <= (len / 3 > 2 ? len / 3 : 2) ? best : NULL;
}

int ah_env_parse(char *const *envp, ah_settings_t *s_p) {
  int problems = 0;
  ah_env_defaults(s_p);
  for (int i = 0; envp && envp[i]; i++) {
    const char *e = envp[i];
    if (strncmp(e, "AUTOHA_", 7) != 0) continue;
    const char *eq = strchr(e, '=');
    if (!eq) continue;
    char name[128];
    size_t n = (size_t)(eq - e);
    if (n >= sizeof name) n = sizeof name - 1;
    memcpy(name, e, n);
    name[n] = 0;
    /* The first definition wins, as with getenv. */
    int dup = 0;
    for (int j = 0; j < i; j++)
      if (strncmp(envp[j], e, (size_t)(eq - e) + 1) == 0) dup = 1;
    if (dup) continue;
    const ah_env_var_t *v = ah_env_var_find(name);
    if (!v) {
      const char *near = ah_env_nearest(name);
      if (near)
        ah_log(AH_LOG_WARN, "unknown environment variable %s (maybe %s?); it is ignored", name,
               near);
      else
        ah_log(AH_LOG_WARN,
               "unknown environment variable %s; it is ignored "
               "(`autoha env` lists the known ones)",
               name);
      problems++;
      continue;
    }
    char err[4096], fallback[320];
    /* the default named, so the line says what the process runs with */
    snprintf(fallback, sizeof fallback, "; default kept (%s=%s)", v->name, v->default_text);
    if (ah_env_parse_one(v, eq + 1, s_p, err, sizeof err) != 0) {
      char ignored[256];
      if (v->type == AH_ENV_OVERRIDE)
        snprintf(fallback, sizeof fallback, "; the other rules still apply");
      else if (v->invalid && ah_env_parse_one(v, v->invalid, s_p, ignored, sizeof ignored) == 0)
        snprintf(fallback, sizeof fallback, "; using %s=%s instead (the safe fallback)", v->name,
                 v->invalid);
      for (char *line = err, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        ah_log(AH_LOG_ERROR, "%s%s", line, fallback);
      }
      problems++;
    }
  }
  return problems;
}

/* ---- the process-wide settings --------------------------------------------------------------- */

static ah_settings_t g_settings;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void settings_init(void) {
  /* The log's own rows first, quietly: the full parse then reports each problem once, as set. */
  ah_settings_t early;
  ah_env_defaults(&early);
  static const char *const log_vars[] = {"AUTOHA_LOG", "AUTOHA_LOG_SUBSYS", "AUTOHA_LOG_TIME",
                                         "AUTOHA_LOG_FILE"};
  for (size_t i = 0; i < sizeof log_vars / sizeof log_vars[0]; i++) {
    const char *val = getenv(log_vars[i]);
    if (val) (void)ah_env_parse_one(ah_env_var_find(log_vars[i]), val, &early, NULL, 0);
  }
  ah_log_set_level(early.log_level);
  ah_log_set_subsys((unsigned)early.log_subsys);
  ah_log_set_time(early.log_time);
  char err[4096];
  if (ah_log_file_start(early.log_file, err, sizeof err) != 0)
    ah_log(AH_LOG_ERROR, "%s; logging to stderr", err);
  ah_env_parse(environ, &g_settings);
  ah_jansson_set_path(g_settings.jansson); /* before any report: jansson opens at the first */
}

const ah_settings_t *ah_env_settings(void) {
  pthread_once(&g_once, settings_init);
  return &g_settings;
}

/* ---- printing -------------------------------------------------------------------------------- */

char *ah_env_value_format(const ah_env_var_t *v, const ah_settings_t *s, char *buf, size_t len) {
  const void *f = cfield_of(v, s);
  switch (v->type) {
    case AH_ENV_BOOL: snprintf(buf, len, "%d", *(const int *)f); break;
    case AH_ENV_INT: snprintf(buf, len, "%d", *(const int *)f); break;
    case AH_ENV_DOUBLE: snprintf(buf, len, "%g", *(const double *)f); break;
    case AH_ENV_ENUM: choice_at(v->choices, *(const int *)f, buf, len); break;
    case AH_ENV_SIZE: ah_size_format((uint64_t) * (const int64_t *)f, buf, len); break;
    case AH_ENV_STRING: snprintf(buf, len, "%s", (const char *)f); break;
    case AH_ENV_OVERRIDE: {
      /* The rules in effect, canonical: what applies, not what was typed. */
      size_t o = 0;
      buf[0] = 0;
      for (int i = 0; i < s->override.nrules && o + 1 < len; i++) {
        char rule[256];
        int n = snprintf(buf + o, len - o, "%s%s", i ? ";" : "",
                         ah_override_rule_format(&s->override.rules[i], rule, sizeof rule));
        if (n < 0) break;
        o += (size_t)n;
      }
      break;
    }
    case AH_ENV_PATH: snprintf(buf, len, "%s", *(const char *)f ? (const char *)f : "off"); break;
    case AH_ENV_TC_RULES:
    case AH_ENV_IFNAME:
    case AH_ENV_TEXT:
    case AH_ENV_FILE:
    case AH_ENV_COMMAND: snprintf(buf, len, "%s", (const char *)f); break;
    case AH_ENV_SUBSYS: ah_log_subsys_format((unsigned)*(const int *)f, buf, len); break;
    case AH_ENV_RATIO: snprintf(buf, len, "%d/%d", ((const int *)f)[0], ((const int *)f)[1]); break;
    case AH_ENV_ETCD: ah_cluster_endpoints_format(f, buf, len); break;
    case AH_ENV_PREFIX: snprintf(buf, len, "%s", (const char *)f); break;
    case AH_ENV_QP_SPORT:
      if (s->qp_sport == AH_PATH_SPORT_FILE) snprintf(buf, len, "file:%s", s->qp_sport_file);
      else
        snprintf(buf, len, "%s",
                 s->qp_sport == AH_PATH_SPORT_SPREAD ? "spread"
                 : s->qp_sport == AH_PATH_SPORT_PLAN ? "plan"
                                                     : "off");
      break;
    case AH_ENV_TC:
      if (*(const int *)f < 0) snprintf(buf, len, "nccl");
      else snprintf(buf, len, s->qp_tc_dscp ? "dscp=%d" : "%d", *(const int *)f);
      break;
  }
  return buf;
}

/* Writes text wrapped at `width` columns, each line starting with `prefix`. */
static void print_wrapped(FILE *f, const char *prefix, const char *text, int width) {
  const char *p = text;
  while (*p) {
    int room = width - (int)strlen(prefix);
    int n = (int)strlen(p);
    if (n > room) {
      n = room;
      while (n > 0 && p[n] != ' ') n--;
      if (n == 0) n = room;
    }
    fprintf(f, "%s%.*s\n", prefix, n, p);
    p += n;
    while (*p == ' ') p++;
  }
}

static const char *env_lookup(char *const *envp, const char *name) {
  size_t n = strlen(name);
  for (int i = 0; envp && envp[i]; i++)
    if (strncmp(envp[i], name, n) == 0 && envp[i][n] == '=') return envp[i] + n + 1;
  return NULL;
}

void ah_env_print(FILE *f, char *const *envp, int docs) {
  ah_settings_t s;
  ah_env_parse(envp, &s);
  fprintf(f, "# autoha %s\n", ah_version()); /* which build these defaults and meanings are from */
  for (int i = 0; i < ah_env_var_count(); i++) {
    const ah_env_var_t *v = ah_env_var_get(i);
    const char *given = env_lookup(envp, v->name);
    char val[AH_ENV_PATH_MAX + 16];
    ah_env_value_format(v, &s, val, sizeof val);
    char tmp[512];
    ah_settings_t probe = s;
    int bad = given && ah_env_parse_one(v, given, &probe, tmp, sizeof tmp) != 0;
    if (docs) {
      fprintf(f, "#\n");
      print_wrapped(f, "# ", v->doc, 100);
      fprintf(f, "#\n# syntax:  %s\n# default: %s\n#\n", v->syntax,
              *v->default_text ? v->default_text : "(empty)");
      fprintf(f, "%s=%s%s\n\n", v->name, val,
              bad ? (v->invalid ? "    # INVALID, safe fallback" : "    # INVALID, default kept")
              : given ? ""
                      : "    # default");
    } else {
      /* The first sentence of the doc is the meaning: up to the first ". " not ending "e.g.". */
      const char *dot = v->doc;
      while ((dot = strstr(dot, ". ")) && dot - v->doc >= 3 &&
             (strncmp(dot - 3, "e.g", 3) == 0 || strncmp(dot - 3, "i.e", 3) == 0))
        dot += 2;
      int mlen = dot ? (int)(dot - v->doc) : (int)strlen(v->doc);
      if (mlen > 0 && v->doc[mlen - 1] == '.') mlen--;
      char line[AH_ENV_PATH_MAX + 64], state[AH_ENV_PATH_MAX + 64];
      char val_shown[AH_ENV_PATH_MAX + 8];
      snprintf(line, sizeof line, "%s=%s", v->name, ah_quote(val, val_shown, sizeof val_shown));
      char shown[160];
      ah_quote(given, shown, sizeof shown);
      if (bad && v->type == AH_ENV_OVERRIDE)
        snprintf(state, sizeof state, "set, invalid rules dropped");
      else if (bad && v->invalid)
        snprintf(state, sizeof state, "INVALID '%s': safe fallback %s", shown, v->invalid);
      else if (bad) snprintf(state, sizeof state, "INVALID '%s' ignored", shown);
      else snprintf(state, sizeof state, "%s", given ? "set" : "");
      if (state[0])
        fprintf(f, "%-44s # %.*s. (%s; default: %s)\n", line, mlen, v->doc, state,
                *v->default_text ? v->default_text : "empty");
      else fprintf(f, "%-44s # %.*s. (default)\n", line, mlen, v->doc);
    }
  }
}

void ah_env_doc_markdown(FILE *f) {
  fprintf(f, "<!-- env-table:begin -->\n");
  fprintf(f,
          "<!-- Generated from settings/ah_env_table.c by `autoha env --markdown`; "
          "tests/tuner fails when this section and the table differ. -->\n");
  for (int i = 0; i < ah_env_var_count(); i++) {
    const ah_env_var_t *v = ah_env_var_get(i);
    fprintf(f, "\n### %s\n\n", v->name);
    if (*v->default_text)
      fprintf(f, "Default: `%s` · Syntax: `%s`\n\n", v->default_text, v->syntax);
    else fprintf(f, "Default: empty · Syntax: `%s`\n\n", v->syntax);
    fprintf(f, "%s\n", v->doc);
  }
  fprintf(f, "\n<!-- env-table:end -->\n");
}
