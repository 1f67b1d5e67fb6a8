/* `autoha plot` and `autoha trace`: option parsing, reading the reports, and writing the pictures
 * (autoha_plot_busbw.c, autoha_plot_timeline.c) or the trace (autoha_trace.c) where asked. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ah_file.h"
#include "ah_jansson.h"
#include "autoha_cli.h"
#include "autoha_plot.h"

static void plot_usage(FILE *f) {
  fprintf(
      f,
      "usage: autoha plot [-o DIR] [--rank R] [--trace] DIR|FILE...\n"
      "  Draws a job's reports (a DIR: its *.json files) as SVG into DIR (default: .):\n"
      "    busbw.svg     busbw against bytes per rank per collective, NCCL's default vs autoha's\n"
      "    timeline.svg  the tuning timeline per key: probes, pinned config, re-openings\n"
      "  -o, --out DIR   where to write them (created when missing)\n"
      "  --rank R        the rank whose report gives each communicator's timeline (default: lowest)\n"
      "  --trace         also write trace.json (as autoha trace)\n"
      "  -h, --help      this text\n");
}

static void trace_usage(FILE *f) {
  fprintf(f,
          "usage: autoha trace [-o FILE] DIR|FILE...\n"
          "  Writes a job's tuning as Chrome trace-event JSON (open it in ui.perfetto.dev or\n"
          "  chrome://tracing): a process per rank, a thread per key, the probes and the pinned\n"
          "  configuration as slices lasting their collective time (calls x mean time).\n"
          "  -o, --out FILE  write there instead of to stdout\n"
          "  -h, --help      this text\n");
}

/* Opens dir/name for writing, creating dir; NULL with the reason on stderr. */
static FILE *open_out(const char *cmd, const char *dir, const char *name, char *path, size_t len) {
  char err[512];
  snprintf(path, len, "%s/%s", dir, name);
  if (ah_file_make_parents(path, err, sizeof err) != 0) {
    fprintf(stderr, "autoha %s: %s\n", cmd, err);
    return NULL;
  }
  FILE *f = fopen(path, "w");
  if (!f) fprintf(stderr, "autoha %s: cannot write %s: %s\n", cmd, path, strerror(errno));
  return f;
}

static int read_all(const char *cmd, int argc, char **argv, plot_reports_t *rs) {
  int bad = 0;
  if (!ah_jansson_ready()) return 1; /* it logged why, once: no report is read (rs->n stays 0) */
  for (int i = optind; i < argc; i++) bad += plot_reports_read(rs, argv[i]);
  if (rs->n == 0) cli_no_report(cmd, argv + optind, argc - optind);
  return bad;
}

int cmd_plot(int argc, char **argv) {
  static const struct option opts[] = {{"out", required_argument, NULL, 'o'},
                                       {"rank", required_argument, NULL, 'r'},
                                       {"trace", no_argument, NULL, 't'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  const char *dir = ".";
  int rank = -1, trace = 0, c;
  optind = 1;
  opterr = 0;
  while ((c = getopt_long(argc, argv, ":ho:", opts, NULL)) != -1) {
    switch (c) {
      case 'o': dir = optarg; break;
      case 'r': {
        char *end;
        long v = strtol(optarg, &end, 10);
        if (*end || !*optarg || v < 0 || v > 1 << 30) {
          fprintf(stderr, "autoha plot: --rank wants a rank (0, 1, ...), not '%s'\n", optarg);
          return 2;
        }
        rank = (int)v;
        break;
      }
      case 't': trace = 1; break;
      case 'h': plot_usage(stdout); return 0;
      default: return cli_bad_option("plot", c, argv, opts);
    }
  }
  if (optind >= argc) {
    fprintf(stderr, "autoha plot: no report given (see autoha plot --help)\n");
    return 2;
  }
  plot_reports_t rs = {0};
  int bad = read_all("plot", argc, argv, &rs), rc = bad ? 1 : 0;
  if (rs.n == 0) return 1;
  if (rank >= 0 && !plot_reports_have_rank(&rs, rank)) { /* not another rank's timeline instead */
    char ranks[512];
    int n = plot_reports_ranks(&rs, ranks, sizeof ranks);
    fprintf(stderr,
            "autoha plot: --rank %d: no report holds rank %d (the reports hold rank%s %s)\n", rank,
            rank, n == 1 ? "" : "s", n ? ranks : "none");
    plot_reports_free(&rs);
    return 2;
  }
  char path[4096];
  FILE *f = open_out("plot", dir, "busbw.svg", path, sizeof path);
  if (!f) rc = 1;
  else {
    int n = plot_busbw_svg(f, &rs);
    if (fclose(f) != 0 || n < 0) rc = 1;
    printf("autoha plot: wrote %s (%d points)\n", path, n);
  }
  f = open_out("plot", dir, "timeline.svg", path, sizeof path);
  if (!f) rc = 1;
  else {
    int n = plot_timeline_svg(f, &rs, rank);
    if (fclose(f) != 0) rc = 1;
    printf("autoha plot: wrote %s (%d keys)\n", path, n);
  }
  if (trace) {
    f = open_out("plot", dir, "trace.json", path, sizeof path);
    if (!f) rc = 1;
    else {
      int n = plot_trace_json(f, &rs);
      if (fclose(f) != 0 || n < 0) rc = 1;
      printf("autoha plot: wrote %s (%d trace events)\n", path, n);
    }
  }
  plot_reports_free(&rs);
  return rc;
}

int cmd_trace(int argc, char **argv) {
  static const struct option opts[] = {
      {"out", required_argument, NULL, 'o'}, {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
  const char *out = NULL;
  int c;
  optind = 1;
  opterr = 0;
  while ((c = getopt_long(argc, argv, ":ho:", opts, NULL)) != -1) {
    switch (c) {
      case 'o': out = optarg; break;
      case 'h': trace_usage(stdout); return 0;
      default: return cli_bad_option("trace", c, argv, opts);
    }
  }
  if (optind >= argc) {
    fprintf(stderr, "autoha trace: no report given (see autoha trace --help)\n");
    return 2;
  }
  plot_reports_t rs = {0};
  int rc = read_all("trace", argc, argv, &rs) ? 1 : 0;
  if (rs.n == 0) return 1;
  FILE *f = stdout;
  if (out && !(f = fopen(out, "w"))) {
    fprintf(stderr, "autoha trace: cannot write %s: %s\n", out, strerror(errno));
    plot_reports_free(&rs);
    return 1;
  }
  if (plot_trace_json(f, &rs) < 0) rc = 1;
  if (out && fclose(f) != 0) rc = 1;
  plot_reports_free(&rs);
  return rc;
}
