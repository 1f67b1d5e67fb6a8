/* ah_report_util.c: the small pure pieces of the report — nccl-tests' bandwidth formulas, the
 * topology fingerprint, report path templates and source names (tuner/ah_report.h).
 *
 * Kept apart from the JSON writer so the env table can validate AUTOHA_REPORT templates, and the
 * benchmarks compute busbw, without pulling in jansson. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ah_report.h"

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

char *ah_report_fingerprint(const char *desc, char *out) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const unsigned char *p = (const unsigned char *)(desc ? desc : ""); *p; p++) {
    h ^= *p;
    h *= 0x100000001b3ull;
  }
  snprintf(out, AH_REPORT_TOPO_MAX, "fnv1a64:%016llx", (unsigned long long)h);
  return out;
}

int ah_report_path_expand(const char *tmpl, const char *host, int pid, int rank, const char *job,
                          char *out, size_t len, char *err, size_t errlen) {
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
      case 'j': add = job && *job ? job : "unknown"; break;
      case '%': add = "%"; break;
      default:
        out[0] = 0;
        if (err && errlen)
          snprintf(err, errlen, "'%%%.1s' at position %zu of '%s' (expected %%h, %%p, %%r, %%j or %%%%)",
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

void ah_report_job_sanitize(const char *id, char *out, size_t len) {
  size_t o = 0;
  if (len == 0) return;
  for (const char *p = id ? id : ""; *p && o + 1 < len; p++) {
    char c = *p;
    int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
             c == '_' || c == '-';
    out[o++] = ok ? c : '_';
  }
  out[o] = 0;
  if (strcmp(out, ".") == 0 || strcmp(out, "..") == 0) snprintf(out, len, "_");
}

int ah_report_job_id(char *out, size_t len) {
  /* The scheduler before the launcher: torchrun inside a Slurm job names the Slurm job. */
  static const char *const vars[] = {"SLURM_JOB_ID", "TORCHELASTIC_RUN_ID", "LSB_JOBID",
                                     "PBS_JOBID", "FLUX_JOB_ID", "PMIX_NAMESPACE"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    const char *v = getenv(vars[i]);
    if (!v || !*v || (i == 1 && strcmp(v, "none") == 0)) continue; /* torchrun's default run id */
    ah_report_job_sanitize(v, out, len);
    return 1;
  }
  if (len) out[0] = 0;
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
