/* ah_metrics.h: the process's metrics file — the same ah_report_t the JSON report is made from,
 * written as Prometheus text (the exposition format node_exporter's textfile collector reads), so
 * an operator's dashboards and alerts see autoha's keys, findings and failovers (docs/metrics.md).
 *
 * Plain text built here, without jansson: a process whose jansson does not load still has its
 * metrics. Nothing here calls NCCL, CUDA or sockets. */
#ifndef AH_METRICS_H
#define AH_METRICS_H

#include <stddef.h>

#include "ah_report.h"

/* Copies `in` into out[len] as a Prometheus label value: first made valid UTF-8 (as
 * ah_report_text_copy does, a stray byte becoming "\xNN"), then each backslash, double quote and
 * newline written as \\, \" and \n. Returns out.
 *
 * Note that the copy stops before an escape or a character that would not fit whole, so the
 * result is always a valid label value, if shorter; 2 * AH_REPORT_TEXT_MAX + 1 bytes hold any
 * text of the report. */
char *ah_metrics_label_escape(char *out, size_t len, const char *in);

/* The metrics of report r as Prometheus text (malloc'ed, the caller frees), or NULL on allocation
 * failure. Every family has its HELP and TYPE lines, every series the process's labels (host,
 * rank, pid, autoha_job), so the files of several processes on a node never repeat a series. */
char *ah_metrics_to_string(const ah_report_t *r);

/* Writes the metrics of r to `path` atomically (ah_file_write_atomic: a temporary file in the same
 * folder, then rename). Returns 0, or -1 with err naming the failing call and the path (not
 * logged: the caller logs once). */
int ah_metrics_write(const ah_report_t *r, const char *path, char *err, size_t errlen);

#endif
