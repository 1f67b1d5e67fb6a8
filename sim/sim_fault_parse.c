/* The grammar of NCCLSIM_FAULT (see sim_fault_parse.h): entries separated by commas, each a kind
 * and colon-separated key=value fields — hang:rank=R:call=N[:nranks=K], slow:rank=R:pct=P[:after=N]. */
#include "sim_fault_parse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Parses one "key=value" of an entry into *f. Returns 0, or -1. */
static int parse_field(const char *field, sim_fault_t *f, int *seen) {
  const char *eq = strchr(field, '=');
  if (!eq || eq[1] == 0) return -1;
  size_t klen = (size_t)(eq - field);
  char *end;
  if (klen == 4 && strncmp(field, "rank", 4) == 0) {
    f->rank = strtol(eq + 1, &end, 10);
    *seen |= 1;
    return *end || f->rank < 0 ? -1 : 0;
  }
  if (klen == 4 && strncmp(field, "call", 4) == 0) {
    if (eq[1] == '-') return -1;
    f->call = strtoull(eq + 1, &end, 10);
    *seen |= 2;
    return *end ? -1 : 0;
  }
  if (klen == 3 && strncmp(field, "pct", 3) == 0) {
    f->pct = strtod(eq + 1, &end);
    *seen |= 4;
    return *end || !(f->pct > 0 && f->pct <= 10000) ? -1 : 0;
  }
  if (klen == 5 && strncmp(field, "after", 5) == 0) {
    if (eq[1] == '-') return -1;
    f->after = strtoull(eq + 1, &end, 10);
    *seen |= 8;
    return *end ? -1 : 0;
  }
  if (klen == 6 && strncmp(field, "nranks", 6) == 0) {
    f->nranks = strtol(eq + 1, &end, 10);
    return *end || f->nranks < 1 ? -1 : 0;
  }
  return -1;
}

/* Parses one entry ("hang:rank=1:call=5"), which it cuts. Returns 0 with *f, or -1. */
static int parse_entry(char *entry, sim_fault_t *f) {
  memset(f, 0, sizeof *f);
  char *save = NULL, *kind = strtok_r(entry, ":", &save);
  if (!kind) return -1;
  if (strcmp(kind, "hang") == 0) f->kind = SIM_FAULT_HANG;
  else if (strcmp(kind, "slow") == 0) f->kind = SIM_FAULT_SLOW;
  else return -1;
  int seen = 0;
  for (char *field; (field = strtok_r(NULL, ":", &save));)
    if (parse_field(field, f, &seen) != 0) return -1;
  int need = f->kind == SIM_FAULT_HANG ? 1 | 2 : 1 | 4;
  if (f->kind == SIM_FAULT_HANG && (seen & 8)) return -1; /* a hang strikes at its call */
  return (seen & need) == need ? 0 : -1;
}

int sim_fault_parse(const char *text, sim_fault_t *out,
                    void (*bad)(void *arg, const char *entry, const char *why), void *arg) {
  char *copy = strdup(text);
  if (!copy) return 0;
  int n = 0;
  char *save = NULL;
  for (char *entry = strtok_r(copy, ",", &save); entry; entry = strtok_r(NULL, ",", &save)) {
    char shown[128];
    snprintf(shown, sizeof shown, "%s", entry);
    sim_fault_t f;
    if (parse_entry(entry, &f) != 0) {
      if (bad)
        bad(arg, shown, "expected hang:rank=R:call=N[:nranks=K] or slow:rank=R:pct=P[:after=N]");
    } else if (n == SIM_MAX_FAULTS) {
      if (bad) bad(arg, shown, "more than 8 faults");
    } else {
      out[n++] = f;
    }
  }
  free(copy);
  return n;
}
