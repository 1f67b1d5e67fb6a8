/* ah_report_run.h: the report's "run" object (ah_report_run_t in ah_report.h) to and from JSON,
 * for ah_report.c (writing) and ah_report_read.c (reading). Internal to tuner/: the types are
 * jansson's. */
#ifndef AH_REPORT_RUN_H
#define AH_REPORT_RUN_H

#include <jansson.h>
#include <stddef.h>

#include "ah_report.h"

/* The "run" object of a report (docs/report.md), or NULL on allocation failure. */
json_t *ah_report_run_to_json(const ah_report_run_t *run);

/* Reads a report's "run" object j into run_p (present = 1). Returns 0, or -1 with err naming the
 * field below "run" that is wrong ("env.NCCL_DEBUG: expected a string"); fields it does not know
 * are ignored. */
int ah_report_run_from_json(json_t *j, ah_report_run_t *run_p, char *err, size_t errlen);

#endif
