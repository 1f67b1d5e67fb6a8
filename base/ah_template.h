/* ah_template.h: the file-name templates of AUTOHA_REPORT, AUTOHA_LOG_FILE and the other path
 * settings — %h host, %p pid, %r rank, %j the job, %% a percent sign — and the job id %j names,
 * from the scheduler's or launcher's environment. */
#ifndef AH_TEMPLATE_H
#define AH_TEMPLATE_H

#include <stddef.h>

/* Expands a path template: %h host, %p pid, %r rank (rank < 0 gives "all"), %j the job's name
 * (NULL or "" gives "unknown"), %% a percent sign. Returns 0, or -1 when the result does not fit or
 * the template has another %-sequence, with err naming it. */
int ah_template_expand(const char *tmpl, const char *host, int pid, int rank, const char *job,
                       char *out, size_t len, char *err, size_t errlen);

/* The job id the scheduler or launcher gave this process as given (SLURM_JOB_ID, TORCHELASTIC_RUN_ID
 * unless torchrun's "none", LSB_JOBID, PBS_JOBID, FLUX_JOB_ID, PMIX_NAMESPACE: the first one set),
 * or "" when none is set. */
const char *ah_template_job_env(void);
/* The job id the scheduler or launcher gave this process — SLURM_JOB_ID, TORCHELASTIC_RUN_ID
 * (unless torchrun's "none"), LSB_JOBID, PBS_JOBID, FLUX_JOB_ID, PMIX_NAMESPACE, the first one set —
 * made safe as one path component (ah_template_job_sanitize). Returns 1, or 0 with out "" when none
 * is set. */
int ah_template_job_id(char *out, size_t len);
/* Copies `id` into out (at most len-1 bytes) as one path component: every byte outside
 * [A-Za-z0-9._-] becomes '_', and "." or ".." become "_". */
void ah_template_job_sanitize(const char *id, char *out, size_t len);

#endif
