/* ah_template.c: the %h/%p/%r/%j file-name templates (AUTOHA_REPORT, AUTOHA_LOG_FILE, the
 * topology and status files) and the scheduler's job id that %j names (base/ah_template.h).
 *
 * Split out of the report's small pieces so that the logger and the env table expand a template
 * without the report module. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ah_template.h"

int ah_template_expand(const char *tmpl, const char *host, int pid, int rank, const char *job,
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
          if (rank < 0) add = "all";
          else snprintf(piece, sizeof piece, "%d", rank);
          break;
        case 'j': add = job && *job ? job : "unknown"; break;
        case '%': add = "%"; break;
        default:
          out[0] = 0;
          if (err && errlen)
            snprintf(err, errlen,
                     "'%%%.1s' at position %zu of '%s' (expected %%h, %%p, %%r, %%j or %%%%)",
                     tmpl + i + 1, i, tmpl);
          return -1;
      }
      i++;
    }
    size_t n = strlen(add);
    if (o + n >= len) {
      out[0] = 0;
      if (err && errlen)
        snprintf(err, errlen, "path from '%s' longer than %zu bytes", tmpl, len - 1);
      return -1;
    }
    memcpy(out + o, add, n);
    o += n;
  }
  out[o] = 0;
  return 0;
}

void ah_template_job_sanitize(const char *id, char *out, size_t len) {
  size_t o = 0;
  if (len == 0) return;
  for (const char *p = id ? id : ""; *p && o + 1 < len; p++) {
    char c = *p;
    int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
             c == '.' || c == '_' || c == '-';
    out[o++] = ok ? c : '_';
  }
  out[o] = 0;
  if (strcmp(out, ".") == 0 || strcmp(out, "..") == 0) snprintf(out, len, "_");
}

const char *ah_template_job_env(void) {
  /* The scheduler before the launcher: torchrun inside a Slurm job names the Slurm job. */
  static const char *const vars[] = {"SLURM_JOB_ID", "TORCHELASTIC_RUN_ID", "LSB_JOBID",
                                     "PBS_JOBID",    "FLUX_JOB_ID",         "PMIX_NAMESPACE"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    const char *v = getenv(vars[i]);
    if (!v || !*v || (i == 1 && strcmp(v, "none") == 0)) continue; /* torchrun's default run id */
    return v;
  }
  return "";
}

int ah_template_job_id(char *out, size_t len) {
  const char *v = ah_template_job_env();
  if (*v) {
    ah_template_job_sanitize(v, out, len);
    return 1;
  }
  if (len) out[0] = 0;
  return 0;
}
