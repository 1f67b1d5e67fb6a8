/* autoha_reports.h: a job's reports as `autoha report`, `plot` and `trace` read them
 * (autoha_reports.c), the tuning timeline as Chrome trace-event JSON (autoha_trace.c), and the two
 * commands: `trace`, and `plot`, which checks its options here and has the Python package draw
 * (autoha_plot.c). */
#ifndef AUTOHA_REPORTS_H
#define AUTOHA_REPORTS_H

#include <stdio.h>

#include "ah_report.h"

/* The reports of a job, read from files and folders (a folder: its *.json files and its
 * subfolders'). */
typedef struct {
  int n, cap;
  ah_report_t **r;
} plot_reports_t;

/* Appends the reports `path` names to rs; a file that is not a report is named on stderr. Returns
 * the number of such problems. */
int plot_reports_read(plot_reports_t *rs, const char *path);
void plot_reports_free(plot_reports_t *rs);

/* Calls fn(arg, file) for `path` when it is not a folder, else for each *.json file in it and in
 * its subfolders, in name order (hidden names skipped). Returns the sum of fn's returns (the
 * problems), plus 1 for a folder that cannot be listed (named on stderr). */
int cli_reports_walk(const char *path, int (*fn)(void *arg, const char *file), void *arg);

/* The ranks of rs's communicators, for naming them: "0, 1, 2" into out. Returns how many differ. */
int plot_reports_ranks(const plot_reports_t *rs, char *out, size_t len);
/* 1 when some report of rs holds a communicator seen by rank `rank`, else 0. */
int plot_reports_have_rank(const plot_reports_t *rs, int rank);

/* The tuning timeline as Chrome trace-event JSON (Perfetto, chrome://tracing): one process per
 * report, one thread per key. Returns the number of events, or -1 when it cannot be written. */
int plot_trace_json(FILE *f, const plot_reports_t *rs);

/* `autoha plot` and `autoha trace` (autoha_plot.c): argv[0] is the command's
 * name. Return the exit status. */
int cmd_plot(int argc, char **argv);
int cmd_trace(int argc, char **argv);

#endif
