/* autoha_plot.h: `autoha plot` and `autoha trace` — pictures of a job's reports: busbw against size
 * per collective (autoha_plot_busbw.c), the tuning timeline per key (autoha_plot_timeline.c), and
 * that timeline as Chrome trace-event JSON (autoha_trace.c). */
#ifndef AUTOHA_PLOT_H
#define AUTOHA_PLOT_H

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

/* One report per communicator for per-key pictures: for each communicator id, the report of its
 * lowest rank (or of `rank` when >= 0 and present). Calls fn(arg, report, comm) for each, in the
 * order the communicators are first seen. */
void plot_each_comm(const plot_reports_t *rs, int rank,
                    void (*fn)(void *arg, const ah_report_t *r, const ah_report_comm_t *c),
                    void *arg);

/* busbw (nccl-tests' bus bandwidth, GB/s) against bytes per rank, one panel per collective and
 * communicator size, NCCL's default against autoha's applied configuration, each point the median
 * over the ranks' reports. Returns the number of points drawn. */
int plot_busbw_svg(FILE *f, const plot_reports_t *rs);

/* The tuning timeline, one row per key of each communicator (plot_each_comm): the search's probes,
 * the pinned configuration, NCCL's default, re-openings. Returns the number of rows drawn. */
int plot_timeline_svg(FILE *f, const plot_reports_t *rs, int rank);

/* The same timeline as Chrome trace-event JSON (Perfetto, chrome://tracing): one process per
 * report, one thread per key. Returns the number of events, or -1 when it cannot be written. */
int plot_trace_json(FILE *f, const plot_reports_t *rs);

/* `autoha plot` and `autoha trace`: argv[0] is the command's name. Return the exit status. */
int cmd_plot(int argc, char **argv);
int cmd_trace(int argc, char **argv);

#endif
