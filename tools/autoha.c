/* autoha: the command line beside libautoha.so — print a tuning report as a table, list every
 * AUTOHA_* variable with its meaning, default and current value, compare two runs' reports key by
 * key, and validate an override string before a job is launched with it.
 *
 * Everything it knows comes from tuner/ (the env table, the override parser, the report reader),
 * so what it prints is what the shim will do; it never calls NCCL, CUDA or the network. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autoha_cli.h"
#include "autoha_reports.h"
#include "ah_env.h"
#include "ah_jansson.h"
#include "ah_override.h"
#include "ah_report.h"

extern char **environ;

static void usage(FILE *f) {
  fprintf(
      f,
      "usage: autoha report DIR|FILE...      print tuning reports as tables\n"
      "       autoha report --merge DIR|FILE... [--csv|--json]  the job: one table per communicator\n"
      "       autoha compare BASE NEW        per key, the time of BASE's config against NEW's\n"
      "       autoha env [-f|--docs]         every AUTOHA_* variable: value, default, meaning\n"
      "       autoha env --markdown          the variable reference of docs/environment.md\n"
      "       autoha check-override STRING   validate an AUTOHA_OVERRIDE value\n"
      "       autoha status [FILE] [--json]  a running job's communicators, progress and hangs\n"
      "       autoha plot [-o DIR] DIR|FILE...  busbw.png and timeline.png (Python, matplotlib)\n"
      "       autoha trace [-o FILE] DIR|FILE...  the tuning timeline as Chrome trace-event JSON\n"
      "       autoha lib                     the path of libautoha.so\n"
      "       autoha run [--] CMD [ARGS...]  run CMD (a launcher) with libautoha.so preloaded\n"
      "       autoha help                    this text\n"
      "       autoha --version\n");
}

/* ---- an aligned text table ------------------------------------------------------------------- */

#define MAX_COLS 12

typedef struct {
  int ncols, nrows, cap;
  const char *head[MAX_COLS];
  int right[MAX_COLS];
  char (*cells)[MAX_COLS][48];
} table_t;

static void table_row(table_t *t, const char *const *cells) {
  if (t->nrows == t->cap) {
    int cap = t->cap ? t->cap * 2 : 16;
    void *c = realloc(t->cells, sizeof *t->cells * (size_t)cap);
    if (!c) return;
    t->cells = c;
    t->cap = cap;
  }
  for (int i = 0; i < t->ncols; i++) snprintf(t->cells[t->nrows][i], 48, "%s", cells[i]);
  t->nrows++;
}

static void table_print(FILE *f, table_t *t) {
  int w[MAX_COLS];
  for (int i = 0; i < t->ncols; i++) {
    w[i] = (int)strlen(t->head[i]);
    for (int r = 0; r < t->nrows; r++) {
      int n = (int)strlen(t->cells[r][i]);
      if (n > w[i]) w[i] = n;
    }
  }
  for (int r = -1; r < t->nrows; r++) {
    for (int i = 0; i < t->ncols; i++) {
      const char *s = r < 0 ? t->head[i] : t->cells[r][i];
      if (t->right[i]) fprintf(f, "%s%*s", i ? "  " : "  ", w[i], s);
      else fprintf(f, "%s%-*s", i ? "  " : "  ", i == t->ncols - 1 ? 0 : w[i], s);
    }
    fputc('\n', f);
  }
  free(t->cells);
  t->cells = NULL;
  t->nrows = t->cap = 0;
}

/* ---- autoha report --------------------------------------------------------------------------- */

static double mean_us(const ah_report_stat_t *s) {
  return s->timed ? s->us_total / (double)s->timed : NAN;
}

static void fmt_us(double us, char *buf, size_t len) {
  if (!isfinite(us)) snprintf(buf, len, "-");
  else if (us >= 10000) snprintf(buf, len, "%.0f", us);
  else snprintf(buf, len, "%.1f", us);
}

static void print_report(const char *path, const ah_report_t *r) {
  char ver[32]; /* the one version format: the library's banner and the report's fields too */
  if (!ah_report_version_text(r->nccl_version, 1, ver, sizeof ver)[0])
    snprintf(ver, sizeof ver, "unknown");
  printf("%s: host %s, pid %d, rank %d, NCCL %s, mode %s%s%s\n", path, r->host, r->pid, r->rank,
         ver, r->mode[0] ? r->mode : "?", r->job[0] ? ", job " : "", r->job);
  printf("  topology %s\n", r->topo);
  for (int c = 0; c < r->ncomms; c++) {
    const ah_report_comm_t *cm = &r->comms[c];
    uint64_t waits = 0;
    double wait_us = 0;
    for (int k = 0; k < cm->nkeys; k++)
      waits += cm->keys[k].sync_waits, wait_us += cm->keys[k].sync_wait_us;
    printf(
        "\ncommunicator 0x%016llx: %d ranks on %d nodes, this rank %d, %d keys, "
        "%llu sync waits (%.1f ms)%s\n",
        (unsigned long long)cm->id, cm->nranks, cm->nnodes, cm->rank, cm->nkeys,
        (unsigned long long)waits, wait_us / 1000.0, cm->destroyed ? ", destroyed" : "");
    table_t t = {.ncols = 11,
                 .head = {"coll", "bytes/rank", "calls", "source", "nccl config", "nccl us",
                          "autoha config", "autoha us", "busbw GB/s", "speedup", "tuning"},
                 .right = {0, 0, 1, 0, 0, 1, 0, 1, 1, 1, 0}};
    for (int k = 0; k < cm->nkeys; k++) {
      const ah_report_key_t *key = &cm->keys[k];
      char range[48], lo[24], hi[24], calls[24], dcfg[64], dus[24], acfg[64], aus[24], bus[24],
          sp[24], tune[48];
      uint64_t bl = ah_size_bin_floor(key->bin);
      uint64_t bh = key->bin >= 63 ? UINT64_MAX : (uint64_t)ah_size_bin_floor(key->bin + 1);
      snprintf(range, sizeof range, "%s-%s", ah_size_format(bl, lo, sizeof lo),
               bh == UINT64_MAX ? "" : ah_size_format(bh, hi, sizeof hi));
      snprintf(calls, sizeof calls, "%llu", (unsigned long long)key->calls);
      ah_config_format(&key->nccl_default.cfg, dcfg, sizeof dcfg);
      ah_config_format(&key->applied.cfg, acfg, sizeof acfg);
      double du = mean_us(&key->nccl_default), au = mean_us(&key->applied);
      fmt_us(du, dus, sizeof dus);
      fmt_us(au, aus, sizeof aus);
      double bytes = key->applied.timed ? key->applied.bytes_total / (double)key->applied.timed : 0;
      double busbw = ah_report_algbw(key->coll, cm->nranks, bytes, au) *
                     ah_report_busbw_factor(key->coll, cm->nranks);
      if (isfinite(au) && au > 0) snprintf(bus, sizeof bus, "%.2f", busbw);
      else snprintf(bus, sizeof bus, "-");
      if (isfinite(du) && isfinite(au) && au > 0) snprintf(sp, sizeof sp, "%.2fx", du / au);
      else snprintf(sp, sizeof sp, "-");
      if (key->tuned)
        snprintf(tune, sizeof tune, "%s, %d calls, %d probes",
                 key->tune.state == AH_TUNE_CONVERGED   ? "converged"
                 : key->tune.state == AH_TUNE_SEARCHING ? "searching"
                                                        : "default",
                 key->tune.calls_spent, key->tune.probes);
      else snprintf(tune, sizeof tune, "-");
      /* A key the search still runs for holds no tuned result yet: its applied config is the
       * latest one tried, so "tuned" waits for the state to be converged. */
      const char *source =
          key->source == AH_SOURCE_TUNED && key->tuned && key->tune.state == AH_TUNE_SEARCHING
              ? "searching"
              : ah_report_source_name(key->source);
      const char *row[] = {
          ah_coll_name(key->coll), range, calls, source, dcfg, dus, acfg, aus, bus, sp, tune};
      table_row(&t, row);
    }
    table_print(stdout, &t);
  }
  const ah_report_destroyed_t *d = &r->destroyed;
  if (d->comms) /* beyond the destroyed ones shown above */
    printf(
        "\n%llu more destroyed communicators, summed: %llu keys (%llu tuned), %llu calls, "
        "%llu timed (%.1f ms), %llu sync waits (%.1f ms)\n",
        (unsigned long long)d->comms, (unsigned long long)d->keys, (unsigned long long)d->tuned,
        (unsigned long long)d->calls, (unsigned long long)d->timed, d->us_total / 1000.0,
        (unsigned long long)d->sync_waits, d->sync_wait_us / 1000.0);
  const ah_report_ha_t *h = &r->ha;
  if (h->policy[0]) { /* AUTOHA_HA's failovers (docs/ha.md) */
    printf(
        "\nha (%s): %llu shadows ready, %llu failovers, %llu work requests replayed, %llu completions "
        "synthesized\n",
        h->policy, (unsigned long long)h->shadows, (unsigned long long)h->failovers,
        (unsigned long long)h->replayed, (unsigned long long)h->synthesized);
    for (int i = 0; i < h->nfail; i++) {
      const ah_report_failover_t *f = &h->fail[i];
      printf(
          "  QP %u on %s port %d -> shadow on %s%sport %d: stall %.1f ms, %u replayed, %u synthesized\n",
          f->qpn, f->dev, f->port, f->shadow_dev, f->shadow_dev[0] ? " " : "", f->shadow_port,
          f->stall_ms, f->replayed, f->synthesized);
    }
    if (h->rebalances)
      printf(
          "  rebalance: %llu re-plans, %llu queue pairs moved; modelled slowest flow %.3f of a port with the "
          "plan's ports, %.3f re-planned, best possible %.3f (%.0f%%)\n",
          (unsigned long long)h->rebalances, (unsigned long long)h->rebalanced, h->rb_before,
          h->rb_share, h->rb_bound, h->rb_bound > 0 ? 100.0 * h->rb_share / h->rb_bound : 0.0);
  }
}

/* Parses a subcommand that takes only --help: "usage" is its help text. Returns -1 to go on (the
 * operands start at optind), else the exit status. `posix`: stop at the first operand (a command
 * line to run, an override string), so what follows is not read as options. */
static int only_help(const char *cmd, int argc, char **argv, const char *help, int posix) {
  static const struct option opts[] = {{"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
  int c;
  optind = 1;
  opterr = 0;
  while ((c = getopt_long(argc, argv, posix ? "+:h" : ":h", opts, NULL)) != -1) {
    if (c == 'h') {
      fputs(help, stdout);
      return 0;
    }
    return cli_bad_option(cmd, c, argv, opts);
  }
  return -1;
}

typedef struct {
  int printed; /* reports printed so far: a blank line goes between two */
} report_walk_t;

/* cli_reports_walk's visit: prints the report at path. Returns 1 when it is not one (named). */
static int report_one(void *arg, const char *path) {
  report_walk_t *w = arg;
  ah_report_t *r = NULL;
  char err[512];
  if (ah_report_read(path, &r, err, sizeof err) != 0) {
    fprintf(stderr, "autoha: %s: %s\n", path, err);
    return 1;
  }
  if (w->printed++) printf("\n");
  print_report(path, r);
  ah_report_free(r);
  return 0;
}

static int cmd_report(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "--merge") == 0) return cmd_report_merge(argc, argv);
  int rc = only_help(
      "report", argc, argv,
      "usage: autoha report DIR|FILE...\n"
      "       autoha report --merge [--csv|--json] [--pct N] DIR|FILE...   (see autoha report --merge --help)\n"
      "  Prints each tuning report as tables: per communicator, one row per key with NCCL's\n"
      "  and autoha's configuration and time, busbw, speedup and tuning state. A folder: every\n"
      "  .json report in it and its subfolders (autoha-reports/<job>/), in name order.\n"
      "  -h, --help   this text\n",
      0);
  if (rc >= 0) return rc;
  if (optind >= argc) {
    fprintf(stderr, "autoha report: no report given (see autoha report --help)\n");
    return 2;
  }
  if (!ah_jansson_ready()) return 1; /* it logged why, once, and no file is read */
  report_walk_t w = {0};
  int bad = 0;
  for (int i = optind; i < argc; i++) bad += cli_reports_walk(argv[i], report_one, &w);
  if (!w.printed && !bad) {
    cli_no_report("report", argv + optind, argc - optind);
    return 1;
  }
  return bad ? 1 : 0;
}

/* ---- autoha compare -------------------------------------------------------------------------- */

/* Keys are matched across runs by communicator shape and key, as profiles are: ids change per run.
 * Returns the matching key of `r`, the one with the most calls when several communicators of the
 * shape have it, or NULL. */
static const ah_report_key_t *find_key(const ah_report_t *r, int nranks, int nnodes, int coll,
                                       int bin) {
  const ah_report_key_t *best = NULL;
  for (int c = 0; c < r->ncomms; c++) {
    const ah_report_comm_t *cm = &r->comms[c];
    if (cm->nranks != nranks || cm->nnodes != nnodes) continue;
    for (int k = 0; k < cm->nkeys; k++)
      if (cm->keys[k].coll == coll && cm->keys[k].bin == bin &&
          (!best || cm->keys[k].calls > best->calls))
        best = &cm->keys[k];
  }
  return best;
}

static int cmd_compare(int argc, char **argv) {
  int rc = only_help(
      "compare", argc, argv,
      "usage: autoha compare BASE NEW\n"
      "  Matches the keys of two runs' reports by communicator shape, collective and size\n"
      "  bin, prints each key's config and mean time in both and the speedup, and totals the\n"
      "  keys timed in both at NEW's call counts. BASE is normally an AUTOHA_MODE=observe run.\n"
      "  -h, --help   this text\n",
      0);
  if (rc >= 0) return rc;
  if (argc - optind != 2) {
    fprintf(stderr,
            "autoha compare: wants two reports, BASE and NEW, not %d (see autoha compare --help)\n",
            argc - optind);
    return 2;
  }
  argv += optind;
  if (!ah_jansson_ready()) return 1; /* it logged why, once, and no file is read */
  ah_report_t *r[2] = {NULL, NULL};
  for (int i = 0; i < 2; i++) {
    char err[512];
    if (ah_report_read(argv[i], &r[i], err, sizeof err) != 0) {
      fprintf(stderr, "autoha: %s: %s\n", argv[i], err);
      ah_report_free(r[0]);
      return 1;
    }
  }
  if (r[0]->nccl_version != r[1]->nccl_version || strcmp(r[0]->topo, r[1]->topo) != 0)
    printf("note: the runs differ in NCCL version or topology; times may not be comparable\n");
  printf(
      "base %s (mode %s), new %s (mode %s); keys matched by communicator shape, collective and "
      "size bin\n",
      argv[0], r[0]->mode, argv[1], r[1]->mode);
  table_t t = {.ncols = 10,
               .head = {"ranks", "coll", "bytes/rank", "calls", "base config", "base us",
                        "new config", "new us", "speedup", "new source"},
               .right = {1, 0, 0, 1, 0, 1, 0, 1, 1, 0}};
  double base_total = 0, new_total = 0;
  int matched = 0, unmatched = 0;
  /* Walk the new run's keys, one row per (shape, key), the busiest communicator's. */
  for (int c = 0; c < r[1]->ncomms; c++) {
    const ah_report_comm_t *cm = &r[1]->comms[c];
    for (int k = 0; k < cm->nkeys; k++) {
      const ah_report_key_t *nk = &cm->keys[k];
      if (find_key(r[1], cm->nranks, cm->nnodes, nk->coll, nk->bin) != nk) continue;
      const ah_report_key_t *bk = find_key(r[0], cm->nranks, cm->nnodes, nk->coll, nk->bin);
      char ranks[24], range[48], lo[24], hi[24], calls[24], bcfg[64] = "-", bus[24] = "-", ncfg[64],
                                                            nus[24], sp[24] = "-";
      snprintf(ranks, sizeof ranks, "%dx%d", cm->nnodes,
               cm->nranks / (cm->nnodes ? cm->nnodes : 1));
      uint64_t bh = nk->bin >= 63 ? UINT64_MAX : (uint64_t)ah_size_bin_floor(nk->bin + 1);
      snprintf(range, sizeof range, "%s-%s",
               ah_size_format(ah_size_bin_floor(nk->bin), lo, sizeof lo),
               bh == UINT64_MAX ? "" : ah_size_format(bh, hi, sizeof hi));
      snprintf(calls, sizeof calls, "%llu", (unsigned long long)nk->calls);
      ah_config_format(&nk->applied.cfg, ncfg, sizeof ncfg);
      double nu = mean_us(&nk->applied);
      fmt_us(nu, nus, sizeof nus);
      if (bk) {
        double bu = mean_us(&bk->applied);
        ah_config_format(&bk->applied.cfg, bcfg, sizeof bcfg);
        fmt_us(bu, bus, sizeof bus);
        if (isfinite(bu) && isfinite(nu) && nu > 0) {
          snprintf(sp, sizeof sp, "%.2fx", bu / nu);
          base_total += bu * (double)nk->calls;
          new_total += nu * (double)nk->calls;
          matched++;
        }
      } else {
        unmatched++;
      }
      const char *row[] = {
          ranks, ah_coll_name(nk->coll),           range, calls, bcfg, bus, ncfg, nus,
          sp,    ah_report_source_name(nk->source)};
      table_row(&t, row);
    }
  }
  table_print(stdout, &t);
  if (matched && new_total > 0)
    printf(
        "%d keys timed in both runs: %.1f ms in base, %.1f ms in new at the new run's call counts "
        "(%.2fx)\n",
        matched, base_total / 1000.0, new_total / 1000.0, base_total / new_total);
  else printf("no key was timed in both runs\n");
  if (unmatched) printf("%d keys of the new run are absent from the base run\n", unmatched);
  ah_report_free(r[0]);
  ah_report_free(r[1]);
  return 0;
}

/* ---- autoha env, autoha check-override --------------------------------------------------------- */

static int cmd_env(int argc, char **argv) {
  static const struct option opts[] = {{"docs", no_argument, NULL, 'f'},
                                       {"markdown", no_argument, NULL, 'm'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  int docs = 0, markdown = 0, c;
  optind = 1;
  opterr = 0;
  while ((c = getopt_long(argc, argv, ":fh", opts, NULL)) != -1) {
    switch (c) {
      case 'f': docs = 1; break;
      case 'm': markdown = 1; break;
      case 'h':
        printf(
            "usage: autoha env [-f|--docs] [--markdown]\n"
            "  Every AUTOHA_* variable: its value here (set, or the default), as NAME=value lines\n"
            "  after a first line naming this autoha's version; unknown AUTOHA_* names are warned of.\n"
            "  -f, --docs   each variable's meaning, syntax and default above it\n"
            "  --markdown   the variable reference of docs/environment.md\n"
            "  -h, --help   this text\n");
        return 0;
      default: return cli_bad_option("env", c, argv, opts);
    }
  }
  if (optind < argc) {
    fprintf(stderr, "autoha env: unexpected argument '%s' (see autoha env --help)\n", argv[optind]);
    return 2;
  }
  if (markdown) ah_env_doc_markdown(stdout);
  else ah_env_print(stdout, environ, docs);
  return 0;
}

static int cmd_check_override(int argc, char **argv) {
  int rc = only_help(
      "check-override", argc, argv,
      "usage: autoha check-override STRING\n"
      "  Validates an AUTOHA_OVERRIDE value before a job is launched with it: prints each rule\n"
      "  as understood, or each error with its token and position (exit 1).\n"
      "  -h, --help   this text\n",
      1);
  if (rc >= 0) return rc;
  if (argc - optind != 1) {
    fprintf(
        stderr,
        "autoha check-override: wants one override string, not %d (see autoha check-override --help)\n",
        argc - optind);
    return 2;
  }
  argv += optind;
  ah_override_t ov;
  char err[4096];
  int nerr = ah_override_parse(argv[0], &ov, err, sizeof err);
  for (int i = 0; i < ov.nrules; i++) {
    char buf[256];
    printf("rule %d (position %d): %s\n", i + 1, ov.rules[i].pos,
           ah_override_rule_format(&ov.rules[i], buf, sizeof buf));
  }
  if (nerr) {
    for (char *line = err, *next; line && *line; line = next) {
      next = strchr(line, '\n');
      if (next) *next++ = 0;
      fprintf(stderr, "autoha: invalid value for AUTOHA_OVERRIDE: %s\n", line);
    }
    fprintf(stderr, "autoha: %d error%s; the %d valid rule%s would still apply\n", nerr,
            nerr == 1 ? "" : "s", ov.nrules, ov.nrules == 1 ? "" : "s");
    return 1;
  }
  printf("ok: %d rule%s\n", ov.nrules, ov.nrules == 1 ? "" : "s");
  return 0;
}

/* AUTOHA_JANSSON, the one setting the command obeys itself (where jansson is, for the subcommands
 * that read reports), through its table row: the job's other variables stay the library's to
 * parse and report (check_env_once.sh). */
static void jansson_setting(void) {
  const char *v = getenv("AUTOHA_JANSSON");
  static ah_settings_t s; /* tens of KiB, and only the one field is used */
  char err[512];
  if (!v) return;
  if (ah_env_parse_one(ah_env_var_find("AUTOHA_JANSSON"), v, &s, err, sizeof err) != 0)
    fprintf(stderr, "autoha: %s; default kept\n", err);
  else ah_jansson_set_path(s.jansson);
}

int main(int argc, char **argv) {
  jansson_setting();
  if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0 ||
      strcmp(argv[1], "help") == 0) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  /* Each subcommand gets its own argv: argv[0] its name, then its options and operands. */
  if (strcmp(argv[1], "report") == 0) return cmd_report(argc - 1, argv + 1);
  if (strcmp(argv[1], "compare") == 0) return cmd_compare(argc - 1, argv + 1);
  if (strcmp(argv[1], "env") == 0) return cmd_env(argc - 1, argv + 1);
  if (strcmp(argv[1], "check-override") == 0) return cmd_check_override(argc - 1, argv + 1);
  if (strcmp(argv[1], "status") == 0) return cmd_status(argc - 1, argv + 1);
  if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "-V") == 0) return cmd_version();
  if (strcmp(argv[1], "lib") == 0) return cmd_lib(argc - 1, argv + 1);
  if (strcmp(argv[1], "run") == 0) return cmd_run(argc - 1, argv + 1);
  if (strcmp(argv[1], "plot") == 0) return cmd_plot(argc - 1, argv + 1);
  if (strcmp(argv[1], "trace") == 0) return cmd_trace(argc - 1, argv + 1);
  fprintf(stderr, "autoha: unknown command '%s'\n", argv[1]);
  usage(stderr);
  return 2;
}
