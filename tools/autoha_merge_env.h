/* autoha_merge_env.h: the environment and refused overrides of a job's reports, tallied for
 * `autoha report --merge` (autoha_merge_env.c). */
#ifndef AUTOHA_MERGE_ENV_H
#define AUTOHA_MERGE_ENV_H

#include "ah_report.h"

/* One (label, value) seen in `count` reports: a variable's name and value, a fact ("GPU"), or an
 * internal label starting with '~' (hosts, refused overrides). */
typedef struct {
  char label[64];
  char text[AH_REPORT_TEXT_MAX];
  int count;
} merge_env_entry_t;

typedef struct {
  int nreports, nrun; /* reports added, and of those with a "run" record */
  int n, cap;
  merge_env_entry_t *e;
} merge_env_t;

/* Tallies one report's run record, host, NCCL version and refused keys. */
void merge_env_add(merge_env_t *m, const ah_report_t *r);
/* Prints "environment (...)" (hosts, GPU/CUDA/NCCL, then each variable, with counts where reports
 * differ) and "refused overrides:" to stdout. Sorts m's entries. */
void merge_env_print(merge_env_t *m);
void merge_env_free(merge_env_t *m);

#endif
