/* ah_report_util.c: the small pure pieces of the report — nccl-tests' bandwidth formulas, the
 * topology fingerprint, source names and text copies (tuner/ah_report.h).
 *
 * Kept apart from the JSON writer so the benchmarks compute busbw without pulling in jansson. The
 * report path's %h/%p/%r/%j templates are base/ah_template.c's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ah_quote.h"
#include "ah_report.h"
#include "ah_size.h"

double ah_report_busbw_factor(int coll, int nranks) {
  double n = nranks > 0 ? (double)nranks : 1.0;
  switch (coll) {
    case AH_FUNC_ALLREDUCE: return 2.0 * (n - 1.0) / n;
    case AH_FUNC_ALLGATHER:
    case AH_FUNC_REDUCESCATTER:
    case AH_COLL_ALLTOALL: /* nccl-tests' factors for these three too */
    case AH_COLL_GATHER:
    case AH_COLL_SCATTER: return (n - 1.0) / n;
    default: return 1.0;
  }
}

double ah_report_algbw(int coll, int nranks, double bytes_per_rank, double us) {
  if (!(us > 0)) return 0;
  double s = bytes_per_rank;
  if ((coll == AH_FUNC_ALLGATHER || coll == AH_FUNC_REDUCESCATTER || coll >= AH_COLL_ALLTOALL) &&
      nranks > 0)
    s *= (double)nranks; /* AlltoAll/Gather/Scatter: bytes per rank is one peer's block */
  return s / (us * 1e-6) / 1e9;
}

char *ah_report_topology(const ah_topology_t *t, char *out) {
  char gpu[sizeof t->gpu];
  size_t n = 0;
  for (const char *p = t->gpu; *p && n + 1 < sizeof gpu; p++) /* ';' and '=' separate fields */
    gpu[n++] = *p == ';' || *p == '=' ? ' ' : *p;
  gpu[n] = 0;
  char nics[48] = "unknown";
  if (t->nics > 0 && t->nic_gbps > 0)
    snprintf(nics, sizeof nics, "%dx%dGb/s", t->nics, t->nic_gbps);
  else if (t->nics > 0) snprintf(nics, sizeof nics, "%d (speed unknown)", t->nics);
  snprintf(out, AH_REPORT_TOPO_MAX,
           "gpu=%s; nodes=%d; ranks=%d; ranks_per_node=%d; nics=%s; nccl=%d.%d.%d",
           gpu[0] ? gpu : "unknown", t->nodes, t->ranks,
           t->nodes > 0 ? t->ranks / t->nodes : t->ranks, nics, t->nccl_version / 10000,
           t->nccl_version / 100 % 100, t->nccl_version % 100);
  return out;
}

/* The value of field `key` in a topology text, copied into val; 0 when absent. */
static int topo_field(const char *topo, const char *key, char *val, size_t len) {
  size_t kl = strlen(key);
  for (const char *p = topo; p && *p;) {
    while (*p == ' ') p++;
    const char *end = strchr(p, ';');
    size_t fl = end ? (size_t)(end - p) : strlen(p);
    if (fl > kl && strncmp(p, key, kl) == 0 && p[kl] == '=') {
      size_t vl = fl - kl - 1;
      if (vl >= len) vl = len - 1;
      memcpy(val, p + kl + 1, vl);
      val[vl] = 0;
      return 1;
    }
    p = end ? end + 1 : NULL;
  }
  return 0;
}

int ah_report_topology_diff(const char *here, const char *there, char *why, size_t len) {
  static const char *const keys[] = {"gpu", "nodes", "ranks", "ranks_per_node", "nics", "nccl"};
  size_t off = 0;
  int ndiff = 0;
  if (len) why[0] = 0;
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
    char a[AH_REPORT_TOPO_MAX], b[AH_REPORT_TOPO_MAX];
    int ha = topo_field(here, keys[i], a, sizeof a), hb = topo_field(there, keys[i], b, sizeof b);
    if (!ha || !hb) {
      if (ha || hb || i == 0) { /* not of this form: compare as a whole */
        if (strcmp(here, there) == 0) return 0;
        snprintf(why, len, "the topology is '%s' here and '%s' there", here, there);
        return 1;
      }
      continue;
    }
    if (strcmp(a, b) == 0) continue;
    ndiff++;
    if (off < len) {
      int n = snprintf(why + off, len - off, "%s%s is %s here and %s there", off ? "; " : "",
                       keys[i], a, b);
      if (n > 0) off += (size_t)n;
    }
  }
  return ndiff;
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

char *ah_report_text_copy(char *out, size_t len, const char *in) {
  if (!len) return out;
  const unsigned char *p = (const unsigned char *)in;
  size_t o = 0;
  while (*p) {
    size_t n = ah_utf8_len(p);
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

void ah_report_bin_range(int bin, uint64_t *lo_p, uint64_t *hi_p) {
  *lo_p = ah_size_bin_floor(bin);
  *hi_p = bin <= 0 ? 1 : bin >= 63 ? UINT64_MAX : (((uint64_t)1 << (bin + 1)) - 1);
}

const char *ah_report_tune_state_name(int state) {
  return state == AH_TUNE_SEARCHING   ? "searching"
         : state == AH_TUNE_CONVERGED ? "converged"
                                      : "default";
}
