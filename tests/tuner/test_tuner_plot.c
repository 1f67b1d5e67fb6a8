/* Tests of `autoha plot` and `autoha trace` on fixture reports of three ranks of one 8-rank
 * communicator (a converged AllReduce key with three probes and one re-opening, an AllReduce key
 * left to NCCL, an AllGather key whose search kept NCCL's choice): check_trace.py parses the trace
 * as JSON and checks its processes, threads and events; `plot` hands the pictures to Python, and
 * where python3 or matplotlib is missing it says in one line how to get them and exits 1 (the
 * pictures themselves, drawn with matplotlib from a sim/ job through `autoha plot`, are
 * test_python_plots'); the options' --help and errors are checked here. */
#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ah_check.h"
#include "ah_report.h"
#include "cli_run.h"

static char dir[256];

static ah_report_stat_t stat_of(ah_config_t c, uint64_t calls, double us, double bytes) {
  ah_report_stat_t s = {c, calls, calls, us * (double)calls, bytes * (double)calls};
  return s;
}

static void write_rank(const char *path, int rank) {
  static ah_report_t r;
  static ah_report_key_t keys[3];
  static ah_report_comm_t comm;
  static ah_report_probe_t probes[5];
  memset(&r, 0, sizeof r);
  memset(keys, 0, sizeof keys);
  snprintf(r.host, sizeof r.host, "node%d", rank);
  r.pid = 100 + rank;
  r.rank = rank;
  r.nccl_version = 22809;
  snprintf(r.mode, sizeof r.mode, "tune");
  r.ncomms = 1;
  r.comms = &comm;
  comm = (ah_report_comm_t){
      .id = 0xabc, .nranks = 8, .nnodes = 1, .rank = rank, .nkeys = 3, .keys = keys};
  ah_report_key_t *k = &keys[0];
  k->coll = AH_FUNC_ALLREDUCE;
  k->bin = 24;
  k->calls = 400;
  k->source = AH_SOURCE_TUNED;
  k->nccl_default = stat_of(cfg(AH_ALGO_TREE, AH_PROTO_SIMPLE, 16), 100, 2000.0, 16777216.0);
  k->applied =
      stat_of(cfg(AH_ALGO_RING, AH_PROTO_SIMPLE, 24), 300, rank == 2 ? 1500.0 : 1000.0, 16777216.0);
  k->tuned = 1;
  k->tune.state = AH_TUNE_CONVERGED;
  k->tune.calls_spent = 100;
  k->tune.probes = 3;
  k->tune.converged_at = 100;
  k->tune.winner = cfg(AH_ALGO_RING, AH_PROTO_SIMPLE, 24);
  k->tune.winner_us = 1000.0;
  k->tune.default_us = 2000.0;
  k->tune.reopen_count = 1;
  k->nprobes = 3;
  k->probes = probes;
  probes[0] = (ah_report_probe_t){cfg(AH_ALGO_TREE, AH_PROTO_SIMPLE, 16), 10, 2000.0};
  probes[1] = (ah_report_probe_t){cfg(AH_ALGO_RING, AH_PROTO_SIMPLE, 16), 10, 1200.0};
  probes[2] = (ah_report_probe_t){cfg(AH_ALGO_RING, AH_PROTO_SIMPLE, 24), 10, 1000.0};
  k = &keys[1];
  k->coll = AH_FUNC_ALLREDUCE;
  k->bin = 16;
  k->calls = 20;
  k->source = AH_SOURCE_DEFAULT;
  k->nccl_default = stat_of(cfg(AH_ALGO_RING, AH_PROTO_LL, 4), 20, 20.0, 65536.0);
  k->applied = k->nccl_default;
  k = &keys[2];
  k->coll = AH_FUNC_ALLGATHER;
  k->bin = 20;
  k->calls = 50;
  k->source = AH_SOURCE_DEFAULT;
  k->nccl_default = stat_of(cfg(AH_ALGO_RING, AH_PROTO_SIMPLE, 16), 50, 300.0, 1048576.0);
  k->applied = k->nccl_default;
  k->tuned = 1;
  k->tune.state = AH_TUNE_DEFAULT;
  k->tune.calls_spent = 40;
  k->tune.probes = 2;
  k->tune.converged_at = UINT64_MAX;
  k->tune.winner = k->nccl_default.cfg;
  k->tune.winner_us = k->tune.default_us = 300.0;
  k->nprobes = 2;
  k->probes = probes + 3;
  probes[3] = (ah_report_probe_t){cfg(AH_ALGO_RING, AH_PROTO_LL128, 16), 20, 320.0};
  probes[4] = (ah_report_probe_t){cfg(AH_ALGO_RING, AH_PROTO_SIMPLE, 16), 20, 300.0};
  char err[256];
  ck_assert_msg(ah_report_write(&r, path, err, sizeof err) == 0, "%s", err);
}

static void make_fixture(void) {
  snprintf(dir, sizeof dir, "/tmp/ah-plot-test-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
  char path[512];
  for (int rank = 0; rank < 3; rank++) {
    snprintf(path, sizeof path, "%s/reports/node%d-%d.json", dir, rank, 100 + rank);
    write_rank(path, rank);
  }
}

static void remove_dir(void) {
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

/* The trace from a folder of reports, checked by check_trace.py, and `autoha trace` writing the
 * same; the pictures need python3 with matplotlib, and without either `plot` says how to get them
 * in one line and exits 1 (the trace it was asked for is written all the same). */
START_TEST(plot_trace_and_python) {
  char cmd[2048];
  const char *out;
  /* no python3 on PATH (the program is named by its full path) */
  snprintf(cmd, sizeof cmd, "PATH=/nonexistent '%s' plot -o '%s/pics' --trace '%s/reports' 2>&1",
           AUTOHA_CLI, dir, dir);
  ck_assert_int_eq(run(cmd, &out), 1);
  ck_assert_msg(strstr(out,
                       "autoha plot: the pictures are drawn by Python 3 with matplotlib, and "
                       "there is no python3 on PATH: install Python 3, then pip install "
                       "'autoha[plot]'\n"),
                "%s", out);
  ck_assert_ptr_nonnull(strstr(out, "trace.json ("));
  snprintf(cmd, sizeof cmd, "python3 '%s' '%s/pics'", CHECK_TRACE, dir);
  ck_assert_msg(run(cmd, &out) == 0 && strstr(out, "check_trace: ok"), "%s", out);
  /* python3 without matplotlib (a package of that name that fails to import stands in front) */
  snprintf(cmd, sizeof cmd,
           "mkdir -p '%s/nompl/matplotlib' && echo 'raise ImportError(\"hidden by the test\")' > "
           "'%s/nompl/matplotlib/__init__.py'",
           dir, dir);
  ck_assert_int_eq(run(cmd, &out), 0);
  snprintf(cmd, sizeof cmd, "PYTHONPATH='%s/nompl' '%s' plot -o '%s/p2' --rank 2 '%s/reports' 2>&1",
           dir, AUTOHA_CLI, dir, dir);
  ck_assert_int_eq(run(cmd, &out), 1);
  ck_assert_msg(strstr(out, "needs matplotlib") && strstr(out, "hidden by the test") &&
                    strstr(out, "pip install 'autoha[plot]'"),
                "%s", out);
  ck_assert_msg(!strchr(out, '\n') || !strchr(strchr(out, '\n') + 1, '\n'), "not one line: %s",
                out);
  snprintf(cmd, sizeof cmd, "test -e '%s/p2/busbw.png'", dir);
  ck_assert_int_ne(run(cmd, &out), 0);
  /* autoha trace alone writes the same trace, and python3 -m json.tool accepts it. */
  cli(0, NULL,
      "trace -o '%s/t.json' '%s/reports/node0-100.json' '%s/reports/node1-101.json' '%s/reports/node2-102.json'",
      dir, dir, dir, dir);
  snprintf(cmd, sizeof cmd, "python3 -m json.tool '%s/t.json' | grep -c '\"ph\": \"X\"'", dir);
  ck_assert_int_eq(run(cmd, &out), 0);
  ck_assert_int_gt(atoi(out), 6);
  snprintf(cmd, sizeof cmd, "cmp '%s/t.json' '%s/pics/trace.json'", dir, dir);
  ck_assert_int_eq(run(cmd, &out), 0);
}
END_TEST

START_TEST(plot_options) {
  cli(0, "usage: autoha plot", "plot --help");
  cli(0, "usage: autoha trace", "trace -h");
  const char *out =
      cli(2, "autoha plot: unknown option '--bogus' (see autoha plot --help)", "plot --bogus x");
  ck_assert_ptr_null(strchr(strchr(out, '\n') + 1, '\n')); /* one line */
  cli(2, "autoha trace: unknown option '-z'", "trace -z x");
  cli(2, "autoha plot: option '--out' needs a value", "plot '%s/reports' --out", dir);
  cli(2, "autoha plot: option '--trace' takes no value", "plot --trace=1 '%s/reports'", dir);
  cli(2, "--rank wants a rank", "plot --rank x '%s/reports'", dir);
  /* A rank no report holds is refused by name, not drawn from another rank's report. */
  out = cli(2, "autoha plot: --rank 99: no report holds rank 99 (the reports hold ranks 0, 1, 2)",
            "plot -o '%s/r99' --rank 99 '%s/reports'", dir, dir);
  const char *nl = strchr(out, '\n');
  ck_assert_ptr_nonnull(nl);
  ck_assert_ptr_null(strchr(nl + 1, '\n')); /* one line */
  char path[512];
  snprintf(path, sizeof path, "%s/r99", dir);
  ck_assert_msg(access(path, F_OK) != 0, "a refused --rank wrote %s", path);
  cli(2, "no report given", "trace");
  cli(1, "no report read", "plot -o '%s/p' '%s/none'", dir, dir);
}
END_TEST

int main(void) {
  const TTest *const tests[] = {plot_trace_and_python, plot_options};
  return ah_check_main(
      "tuner_plot",
      (ah_check_case_t){
          .name = "plot", .timeout = 30, .setup = make_fixture, .teardown = remove_dir},
      tests, AH_CHECK_COUNT(tests));
}
