/* `autoha plot` and `autoha trace`: option parsing and reading the reports; the trace is written
 * here (autoha_trace.c), the pictures by the Python package (python/autoha/plots.py, matplotlib).
 *
 * Key choice: `plot` checks what it can without Python — the options, that the reports read, that
 * --rank names a rank they hold — and then runs python3 with the package found where this program
 * was installed (share/autoha/python), in the source tree it was built from, or wherever Python
 * finds it (a pip install), so a missing Python or matplotlib is one line naming the pip command. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ah_file.h"
#include "ah_jansson.h"
#include "autoha_cli.h"
#include "autoha_reports.h"

static void plot_usage(FILE *f) {
  fprintf(
      f,
      "usage: autoha plot [-o DIR] [--rank R] [--trace] DIR|FILE...\n"
      "  Draws a job's reports (a DIR: its *.json files) as PNG into DIR (default: .), with\n"
      "  python3 -m autoha plot (matplotlib: pip install 'autoha[plot]'):\n"
      "    busbw.png     busbw against bytes per rank per collective, NCCL's default vs autoha's\n"
      "    timeline.png  the tuning timeline per key: probes, pinned config, re-openings\n"
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

/* How python3 finds the package: it is importable (a pip install), or it is the folder this
 * program was installed beside, or the source tree it was built from. Exits 1 with one line when
 * it is not, or when matplotlib is missing (autoha.plots says so). */
static const char py_main[] =
    "import sys\n"
    "try:\n"
    "    from autoha.plots import main\n"
    "except ImportError as e:\n"
    "    sys.exit(\"autoha plot: the autoha Python package is not importable (%s): \"\n"
    "             \"pip install 'autoha[plot]'\" % e)\n"
    "sys.exit(main(sys.argv[1:]))\n";

/* The first executable `name` on PATH into out; 0 when there is none. */
static int path_find(const char *name, char *out, size_t len) {
  const char *path = getenv("PATH");
  for (const char *p = path; p && *p;) {
    const char *end = strchr(p, ':');
    size_t n = end ? (size_t)(end - p) : strlen(p);
    snprintf(out, len, "%.*s/%s", (int)(n ? n : 1), n ? p : ".", name);
    if (access(out, X_OK) == 0) return 1;
    p = end ? end + 1 : NULL;
  }
  return 0;
}

/* PYTHONPATH with the package's folders that exist in front: <bin>/AUTOHA_BIN_TO_PYTHON (the
 * installed share/autoha/python) and AUTOHA_SOURCE_PYTHON (the checkout this was built from). */
static void python_path(char *out, size_t len) {
  char self[PATH_MAX], cand[2][PATH_MAX + 64];
  size_t o = 0;
  out[0] = 0;
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  self[n > 0 ? n : 0] = 0;
  char *slash = strrchr(self, '/');
  if (slash) *slash = 0;
  if (snprintf(cand[0], sizeof cand[0], "%s/%s", self, AUTOHA_BIN_TO_PYTHON) >= (int)sizeof cand[0])
    n = 0;
  snprintf(cand[1], sizeof cand[1], "%s", AUTOHA_SOURCE_PYTHON);
  for (int i = 0; i < 2; i++) {
    char probe[sizeof cand[0] + 32];
    if (snprintf(probe, sizeof probe, "%s/autoha/plots.py", cand[i]) >= (int)sizeof probe) continue;
    char real[PATH_MAX];
    if ((i == 0 && n <= 0) || access(probe, R_OK) != 0 || !realpath(cand[i], real)) continue;
    int w = snprintf(out + o, len - o, "%s%s", o ? ":" : "", real);
    if (w > 0 && (size_t)w < len - o) o += (size_t)w;
  }
  const char *old = getenv("PYTHONPATH");
  if (old && *old && o + 1 < len) snprintf(out + o, len - o, "%s%s", o ? ":" : "", old);
}

/* Runs `python3 -c py_main --out DIR [--rank R] REPORTS...` and waits for it. Returns 0 when it
 * drew both pictures, else 1 (its own line, or this one when there is no python3). */
static int python_plot(const char *dir, int rank, int nrep, char **reps) {
  char py[PATH_MAX], pypath[3 * PATH_MAX], rtext[16];
  if (!path_find("python3", py, sizeof py)) {
    fprintf(stderr,
            "autoha plot: the pictures are drawn by Python 3 with matplotlib, and there is "
            "no python3 on PATH: install Python 3, then pip install 'autoha[plot]'\n");
    return 1;
  }
  python_path(pypath, sizeof pypath);
  char **args = calloc((size_t)nrep + 8, sizeof *args);
  if (!args) return 1;
  int a = 0;
  args[a++] = "python3";
  args[a++] = "-c";
  args[a++] = (char *)py_main;
  args[a++] = "--out";
  args[a++] = (char *)dir;
  if (rank >= 0) {
    snprintf(rtext, sizeof rtext, "%d", rank);
    args[a++] = "--rank";
    args[a++] = rtext;
  }
  for (int i = 0; i < nrep; i++) args[a++] = reps[i];
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    if (pypath[0]) setenv("PYTHONPATH", pypath, 1);
    execv(py, args);
    fprintf(stderr, "autoha plot: cannot run %s: %s\n", py, strerror(errno));
    _exit(127);
  }
  free(args);
  int st = 0;
  if (pid < 0) {
    fprintf(stderr, "autoha plot: cannot start %s: %s\n", py, strerror(errno));
    return 1;
  }
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
  return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
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
  if (trace) {
    FILE *f = open_out("plot", dir, "trace.json", path, sizeof path);
    if (!f) rc = 1;
    else {
      int n = plot_trace_json(f, &rs);
      if (fclose(f) != 0 || n < 0) rc = 1;
      printf("autoha plot: wrote %s (%d trace events)\n", path, n);
    }
  }
  int py = python_plot(dir, rank, argc - optind, argv + optind);
  if (py) rc = py;
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
