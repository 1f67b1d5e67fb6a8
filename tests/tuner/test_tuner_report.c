/* Unit tests of the report (tuner/ah_report*.c) and the profile loader (tuner/ah_profile.c):
 * nccl-tests' bandwidth formulas, path templates, a write/read round trip, the atomic write,
 * malformed reports rejected with the place named, and profiles refused for another NCCL version
 * or topology, with per-key configs chosen as documented. */
#include <check.h>
#include <dirent.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ah_capture.h"
#include "ah_check.h"
#include "ah_file.h"
#include "ah_log.h"
#include "ah_report.h"

static char dir[256];

static void make_dir(void) {
  snprintf(dir, sizeof dir, "/tmp/ah-report-test-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
}

static ah_config_t cfg(int algo, int proto, int nch) {
  ah_config_t c;
  memset(&c, 0, sizeof c);
  c.algo = (int8_t)algo;
  c.proto = (int8_t)proto;
  c.ndims = 2;
  c.res[0] = nch;
  return c;
}

static ah_report_stat_t stat_of(ah_config_t c, uint64_t calls, double us, double bytes) {
  ah_report_stat_t s;
  memset(&s, 0, sizeof s);
  s.cfg = c;
  s.calls = calls;
  s.timed = calls;
  s.us_total = us * (double)calls;
  s.bytes_total = bytes * (double)calls;
  return s;
}

/* A report with one 8-rank communicator and three keys: tuned (converged), overridden, default. */
static ah_report_probe_t probes[2];
static ah_report_key_t keys[3];
static ah_report_comm_t comm;
static ah_report_t rep;

static void build_report(void) {
  memset(&rep, 0, sizeof rep);
  memset(keys, 0, sizeof keys);
  snprintf(rep.job, sizeof rep.job, "job-42");
  snprintf(rep.host, sizeof rep.host, "node1");
  rep.pid = 4242;
  rep.rank = 0;
  rep.nccl_version = 22805;
  ah_topology_t topo = {.gpu = "NVIDIA H100 80GB HBM3",
                        .nodes = 1,
                        .ranks = 8,
                        .nics = 8,
                        .nic_gbps = 400,
                        .nccl_version = 22805};
  ah_report_topology(&topo, rep.topo);
  snprintf(rep.mode, sizeof rep.mode, "tune");
  rep.time_s = 1763838000.5;
  rep.ncomms = 1;
  rep.comms = &comm;
  comm.id = 0xfedcba9876543210ull;
  comm.nranks = 8;
  comm.nnodes = 1;
  comm.rank = 0;
  comm.nkeys = 3;
  comm.keys = keys;

  keys[0].coll = AH_FUNC_ALLREDUCE;
  keys[0].bin = 24;
  keys[0].bytes_min = keys[0].bytes_max = 25u << 20;
  keys[0].calls = 400;
  keys[0].nccl_default = stat_of(cfg(AH_ALGO_RING, AH_PROTO_SIMPLE, 16), 60, 1000.0, 25u << 20);
  keys[0].applied = stat_of(cfg(AH_ALGO_RING, AH_PROTO_SIMPLE, 24), 300, 800.0, 25u << 20);
  keys[0].source = AH_SOURCE_TUNED;
  keys[0].tuned = 1;
  keys[0].tune.state = AH_TUNE_CONVERGED;
  keys[0].tune.calls_spent = 100;
  keys[0].tune.probes = 2;
  keys[0].tune.converged_at = 100;
  keys[0].tune.winner = cfg(AH_ALGO_RING, AH_PROTO_SIMPLE, 24);
  keys[0].tune.winner_us = 799.0;
  keys[0].tune.default_us = 1001.0;
  keys[0].nprobes = 2;
  keys[0].probes = probes;
  probes[0].cfg = cfg(AH_ALGO_TREE, AH_PROTO_SIMPLE, 16);
  probes[0].samples = 10;
  probes[0].us = 1500.0;
  probes[1].cfg = cfg(AH_ALGO_RING, AH_PROTO_SIMPLE, 24);
  probes[1].samples = 10;
  probes[1].us = 799.0;
  keys[0].sync_waits = 3;
  keys[0].sync_wait_us = 120.0;

  keys[1].coll = AH_FUNC_ALLGATHER;
  keys[1].bin = 20;
  keys[1].bytes_min = keys[1].bytes_max = 1u << 20;
  keys[1].calls = 50;
  keys[1].nccl_default = stat_of(cfg(AH_ALGO_RING, AH_PROTO_LL128, 16), 0, 0, 0);
  keys[1].applied = stat_of(cfg(-1, -1, 8), 50, 250.0, 1u << 20);
  keys[1].source = AH_SOURCE_OVERRIDE;

  keys[2].coll = AH_FUNC_BROADCAST;
  keys[2].bin = 10;
  keys[2].calls = 5;
  keys[2].nccl_default = stat_of(cfg(AH_ALGO_RING, AH_PROTO_LL, 2), 5, 10.0, 1024);
  keys[2].applied = keys[2].nccl_default;
  keys[2].source = AH_SOURCE_DEFAULT;
}

START_TEST(formulas) {
  /* nccl-tests: AllReduce busbw = algbw * 2(n-1)/n; AllGather S = per-rank bytes * n. */
  ck_assert_double_eq_tol(ah_report_busbw_factor(AH_FUNC_ALLREDUCE, 8), 1.75, 1e-12);
  ck_assert_double_eq_tol(ah_report_busbw_factor(AH_FUNC_ALLGATHER, 8), 0.875, 1e-12);
  ck_assert_double_eq_tol(ah_report_busbw_factor(AH_FUNC_REDUCESCATTER, 4), 0.75, 1e-12);
  ck_assert_double_eq_tol(ah_report_busbw_factor(AH_FUNC_BROADCAST, 8), 1.0, 1e-12);
  ck_assert_double_eq_tol(ah_report_busbw_factor(AH_FUNC_REDUCE, 8), 1.0, 1e-12);
  ck_assert_double_eq_tol(ah_report_busbw_factor(AH_FUNC_ALLREDUCE, 1), 0.0, 1e-12);
  ck_assert_double_eq_tol(ah_report_algbw(AH_FUNC_ALLREDUCE, 8, 1e9, 1e6), 1.0, 1e-12);
  ck_assert_double_eq_tol(ah_report_algbw(AH_FUNC_ALLGATHER, 8, 1e9, 1e6), 8.0, 1e-12);
  ck_assert_double_eq_tol(ah_report_algbw(AH_FUNC_REDUCESCATTER, 4, 1e6, 100.0), 40.0, 1e-9);
  ck_assert_double_eq(ah_report_algbw(AH_FUNC_ALLREDUCE, 8, 1e9, 0), 0);
  ck_assert_double_eq(ah_report_algbw(AH_FUNC_ALLREDUCE, 8, 1e9, NAN), 0);
}
END_TEST

/* The job's id, from the first scheduler or launcher variable set, as one safe path component. */
START_TEST(job_ids) {
  static const char *const vars[] = {"SLURM_JOB_ID", "TORCHELASTIC_RUN_ID", "LSB_JOBID",
                                     "PBS_JOBID",    "FLUX_JOB_ID",         "PMIX_NAMESPACE"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) unsetenv(vars[i]);
  char out[32];
  ck_assert_int_eq(ah_template_job_id(out, sizeof out), 0);
  ck_assert_str_eq(out, "");
  setenv("TORCHELASTIC_RUN_ID", "none", 1); /* torchrun's default: no id */
  ck_assert_int_eq(ah_template_job_id(out, sizeof out), 0);
  setenv("PMIX_NAMESPACE", "prterun-node1-77@1", 1);
  ck_assert_int_eq(ah_template_job_id(out, sizeof out), 1);
  ck_assert_str_eq(out, "prterun-node1-77_1");
  setenv("TORCHELASTIC_RUN_ID", "run/../x y", 1);
  ck_assert_int_eq(ah_template_job_id(out, sizeof out), 1);
  ck_assert_str_eq(out, "run_.._x_y");
  setenv("SLURM_JOB_ID", "123456", 1); /* the scheduler first */
  ck_assert_int_eq(ah_template_job_id(out, sizeof out), 1);
  ck_assert_str_eq(out, "123456");
  setenv("SLURM_JOB_ID", "..", 1);
  ck_assert_int_eq(ah_template_job_id(out, sizeof out), 1);
  ck_assert_str_eq(out, "_");
  ah_template_job_sanitize("0123456789abcdefghijklmnopqrstuvwxyz", out, 8);
  ck_assert_str_eq(out, "0123456");
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) unsetenv(vars[i]);
}
END_TEST

START_TEST(paths_and_names) {
  char out[64], err[256];
  ck_assert_int_eq(
      ah_template_expand("r-%h-%p-%r-%%.json", "n1", 77, 3, "j9", out, sizeof out, err, sizeof err),
      0);
  ck_assert_str_eq(out, "r-n1-77-3-%.json");
  ck_assert_int_eq(ah_template_expand("r%r", "n1", 77, -1, "j9", out, sizeof out, err, sizeof err),
                   0);
  ck_assert_str_eq(out, "rall");
  ck_assert_int_eq(ah_template_expand("rep/%j/%h-%p.json", "n1", 77, 0, "4242", out, sizeof out,
                                      err, sizeof err),
                   0);
  ck_assert_str_eq(out, "rep/4242/n1-77.json");
  ck_assert_int_eq(ah_template_expand("%j", "n1", 77, 0, NULL, out, sizeof out, err, sizeof err),
                   0);
  ck_assert_str_eq(out, "unknown");
  ck_assert_int_eq(ah_template_expand("r%x", "n1", 77, 0, "j9", out, sizeof out, err, sizeof err),
                   -1);
  ck_assert_str_eq(err, "'%x' at position 1 of 'r%x' (expected %h, %p, %r, %j or %%)");
  ck_assert_int_eq(ah_template_expand("r%", "n1", 77, 0, "j9", out, sizeof out, err, sizeof err),
                   -1);
  ck_assert_int_eq(ah_template_expand("%h%h%h%h%h%h%h%h%h%h", "a-long-host-name", 1, 0, "j9", out,
                                      sizeof out, err, sizeof err),
                   -1);
  ck_assert_ptr_nonnull(strstr(err, "longer than 63 bytes"));
  for (int s = 0; s < 4; s++) ck_assert_int_eq(ah_report_source_parse(ah_report_source_name(s)), s);
  ck_assert_str_eq(ah_report_source_name(AH_SOURCE_OVERRIDE), "override");
  ck_assert_str_eq(ah_report_source_name(9), "?");
  ck_assert_int_eq(ah_report_source_parse("forced"), -1);
  /* The topology: what makes a tuned configuration transferable, in words. */
  char a[AH_REPORT_TOPO_MAX], b[AH_REPORT_TOPO_MAX], why[512];
  ah_topology_t t = {.gpu = "NVIDIA H100 80GB HBM3",
                     .nodes = 2,
                     .ranks = 16,
                     .nics = 8,
                     .nic_gbps = 400,
                     .nccl_version = 22809};
  ck_assert_str_eq(ah_report_topology(&t, a),
                   "gpu=NVIDIA H100 80GB HBM3; nodes=2; ranks=16; ranks_per_node=8; "
                   "nics=8x400Gb/s; nccl=2.28.9");
  ck_assert_int_eq(ah_report_topology_diff(a, a, why, sizeof why), 0);
  ck_assert_str_eq(why, "");
  ah_topology_t n = t; /* NICs nothing could list are unknown, not 0x0 */
  n.nics = n.nic_gbps = 0;
  ck_assert_ptr_nonnull(strstr(ah_report_topology(&n, b), "; nics=unknown; "));
  n.nics = 4; /* a count without a rate */
  ck_assert_ptr_nonnull(strstr(ah_report_topology(&n, b), "; nics=4 (speed unknown); "));
  ah_topology_t u = t;
  snprintf(u.gpu, sizeof u.gpu, "NVIDIA A100;SXM4=40GB"); /* separators in a name are blanked */
  u.nodes = 4;
  u.ranks = 32;
  ah_report_topology(&u, b);
  ck_assert_ptr_nonnull(strstr(b, "gpu=NVIDIA A100 SXM4 40GB;"));
  ck_assert_int_eq(ah_report_topology_diff(b, a, why, sizeof why), 3);
  ck_assert_str_eq(
      why,
      "gpu is NVIDIA A100 SXM4 40GB here and NVIDIA H100 80GB HBM3 there; nodes is 4 here "
      "and 2 there; ranks is 32 here and 16 there");
  u = t;
  u.nics = 4;
  u.nic_gbps = 200;
  u.nccl_version = 23007;
  ck_assert_int_eq(ah_report_topology_diff(ah_report_topology(&u, b), a, why, sizeof why), 2);
  ck_assert_str_eq(
      why, "nics is 4x200Gb/s here and 8x400Gb/s there; nccl is 2.30.7 here and 2.28.9 there");
  /* an older report's hash is not comparable field by field: it differs as a whole */
  ck_assert_int_eq(ah_report_topology_diff(a, "fnv1a64:cbf29ce484222325", why, sizeof why), 1);
  ck_assert_ptr_nonnull(strstr(why, "'fnv1a64:cbf29ce484222325' there"));
}
END_TEST

/* Copies the report at `src` to `dst` with the "recommended" object that reports carried before
 * autoha stopped writing it (NCCL_NTHREADS / NCCL_BUFFSIZE placeholders). */
static void add_old_recommended(const char *src, const char *dst) {
  char err[256];
  size_t len = 0;
  char *text = ah_file_read(src, 1 << 24, &len, err, sizeof err);
  ck_assert_msg(text != NULL, "%s", err);
  ck_assert_ptr_null(strstr(text, "recommended")); /* no longer written */
  ck_assert_ptr_null(strstr(text, "nthreads"));
  char *at = strstr(text, "\"comms\"");
  ck_assert_ptr_nonnull(at);
  FILE *f = fopen(dst, "w");
  ck_assert_ptr_nonnull(f);
  fprintf(f, "%.*s\"recommended\": {\"nccl_nthreads\": 256, \"nccl_buffsize\": 8388608},\n %s",
          (int)(at - text), text, at);
  fclose(f);
  free(text);
}

START_TEST(round_trip) {
  build_report();
  rep.nhealth = 2;
  rep.health[0] = (ah_report_health_t){
      0xabcull, 1, "hang on comm 0000000000000abc: rank 3 never entered", 1.5e9};
  rep.health[1] =
      (ah_report_health_t){0xabcull, 4, "comm 0000000000000abc advances again (rank 3)", 1.5e9 + 9};
  make_dir();
  char path[512], err[512];
  snprintf(path, sizeof path, "%s/r.json", dir);
  ck_assert_int_eq(ah_report_write(&rep, path, err, sizeof err), 0);
  ah_report_t *r = NULL;
  ck_assert_msg(ah_report_read(path, &r, err, sizeof err) == 0, "%s", err);
  ck_assert_str_eq(r->job, "job-42");
  ck_assert_str_eq(r->host, "node1");
  ck_assert_int_eq(r->pid, 4242);
  ck_assert_int_eq(r->nccl_version, 22805);
  ck_assert_str_eq(r->topo, rep.topo);
  ck_assert_str_eq(r->mode, "tune");
  ck_assert_int_eq(r->ncomms, 1);
  ck_assert_int_eq(r->nhealth, 2); /* the hang diagnosis' findings */
  ck_assert_uint_eq(r->health[0].comm, 0xabc);
  ck_assert_int_eq(r->health[0].kind, 1);
  ck_assert_str_eq(r->health[1].text, "comm 0000000000000abc advances again (rank 3)");
  ck_assert_double_eq_tol(r->health[1].time_s, 1.5e9 + 9, 1e-3);
  {
    char old[600];
    snprintf(old, sizeof old, "%s/r-old.json", dir);
    add_old_recommended(path, old);
    ah_report_t *ro = NULL;
    ck_assert_msg(ah_report_read(old, &ro, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(ro->ncomms, 1);
    ck_assert_int_eq(ro->comms[0].nkeys, 3);
    ah_report_free(ro);
  }
  ck_assert_uint_eq(r->comms[0].id, 0xfedcba9876543210ull);
  ck_assert_int_eq(r->comms[0].nranks, 8);
  ck_assert_int_eq(r->comms[0].nkeys, 3);
  const ah_report_key_t *k = &r->comms[0].keys[0];
  ck_assert_int_eq(k->coll, AH_FUNC_ALLREDUCE);
  ck_assert_int_eq(k->bin, 24);
  ck_assert_uint_eq(k->calls, 400);
  ck_assert_int_eq(k->source, AH_SOURCE_TUNED);
  ck_assert(ah_config_equal(&k->nccl_default.cfg, &keys[0].nccl_default.cfg));
  ck_assert(ah_config_equal(&k->applied.cfg, &keys[0].applied.cfg));
  ck_assert_uint_eq(k->applied.timed, 300);
  ck_assert_double_eq_tol(k->applied.us_total / (double)k->applied.timed, 800.0, 1e-6);
  ck_assert_int_eq(k->tuned, 1);
  ck_assert_int_eq(k->tune.state, AH_TUNE_CONVERGED);
  ck_assert_uint_eq(k->tune.converged_at, 100);
  ck_assert(ah_config_equal(&k->tune.winner, &keys[0].tune.winner));
  ck_assert_int_eq(k->nprobes, 2);
  ck_assert_int_eq(k->probes[0].cfg.algo, AH_ALGO_TREE);
  ck_assert_double_eq_tol(k->probes[1].us, 799.0, 1e-9);
  ck_assert_uint_eq(k->sync_waits, 3);
  const ah_report_key_t *o = &r->comms[0].keys[1];
  ck_assert_int_eq(o->source, AH_SOURCE_OVERRIDE);
  ck_assert_int_eq(o->applied.cfg.algo, -1);
  ck_assert_int_eq(o->applied.cfg.res[0], 8);
  ck_assert_uint_eq(o->nccl_default.timed, 0);
  ck_assert_int_eq(r->comms[0].keys[2].tuned, 0);
  ah_report_free(r);

  /* The JSON carries nccl-tests' bandwidths: AllReduce 25 MiB in 800 us on 8 ranks. */
  char *text = ah_report_to_string(&rep);
  ck_assert_ptr_nonnull(text);
  double algbw = (25.0 * 1048576) / 800e-6 / 1e9;
  char want[64];
  snprintf(want, sizeof want, "\"busbw_gbs\": %.6g", algbw * 1.75);
  ck_assert_msg(strstr(text, want) != NULL, "no %s in the report", want);
  ck_assert_ptr_nonnull(strstr(text, "\"source\": \"override\""));
  ck_assert_ptr_nonnull(strstr(text, "\"time_us\": null")); /* AllGather default never timed */
  ck_assert_ptr_nonnull(strstr(text, "\"id\": \"0xfedcba9876543210\""));
  ck_assert_ptr_nonnull(strstr(text, "\"text\": \"ring/simple nch=24\""));
  free(text);
}
END_TEST

/* Files named *.tmp.* left in the test directory. */
static int leftovers(void) {
  int n = 0;
  DIR *d = opendir(dir);
  ck_assert_ptr_nonnull(d);
  for (struct dirent *e; (e = readdir(d)) != NULL;)
    if (strstr(e->d_name, ".tmp.")) n++;
  closedir(d);
  return n;
}

/* What reproduces the run: the variables (secret-looking names left out, sorted), the GPU, CUDA
 * and kernel driver versions, the hosts and refused override rules survive a write and a read. */
START_TEST(run_record) {
  build_report();
  char *envp[] = {"PATH=/bin",
                  "NCCL_SOCKET_IFNAME=eth0",
                  "AUTOHA_MODE=tune",
                  "AUTOHA_COORD_SECRET=s3cr3t",
                  "NCCL_IB_PKEY=1",
                  "NCCL_API_TOKEN=t",
                  "AUTOHA_KEYS_SECRET=x",
                  "HF_TOKEN=y",
                  NULL};
  ah_report_run_vars(&rep.run, envp);
  ck_assert_int_eq(rep.run.nvars, 3);
  ck_assert_str_eq(rep.run.vars[0].name, "AUTOHA_MODE");
  ck_assert_str_eq(rep.run.vars[1].name, "NCCL_IB_PKEY");
  ck_assert_str_eq(rep.run.vars[2].name, "NCCL_SOCKET_IFNAME");
  ck_assert_str_eq(rep.run.vars[2].value, "eth0");
  ck_assert_int_eq(ah_report_var_secret("AUTOHA_COORD_SECRET"), 1);
  ck_assert_int_eq(ah_report_var_secret("NCCL_IB_PKEY"), 0);
  ck_assert_int_eq(ah_report_var_secret("MY_API_KEYS"), 1);
  rep.run.present = 1;
  snprintf(rep.run.gpu, sizeof rep.run.gpu, "NVIDIA H100 80GB HBM3");
  rep.run.cuda_driver = 12040;
  rep.run.cuda_runtime = 12020;
  snprintf(rep.run.gpu_driver, sizeof rep.run.gpu_driver, "550.54.15");
  rep.run.nnodes = 2;
  snprintf(rep.run.nodes[0], sizeof rep.run.nodes[0], "node1");
  snprintf(rep.run.nodes[1], sizeof rep.run.nodes[1], "node2");
  rep.run.nrefused = 1;
  snprintf(rep.run.refused[0], sizeof rep.run.refused[0],
           "'algo=rong' at position 12: unknown algorithm");
  keys[1].refused = 1;
  char *text = ah_report_to_string(&rep);
  ck_assert_ptr_nonnull(text);
  ck_assert_ptr_nonnull(strstr(text, "\"cuda_driver\": \"12.4\""));
  ck_assert_ptr_nonnull(strstr(text, "\"cuda_runtime\": \"12.2\""));
  ck_assert_ptr_null(strstr(text, "s3cr3t"));
  char err[256];
  ah_report_t *r = NULL;
  ck_assert_msg(ah_report_parse(text, &r, err, sizeof err) == 0, "%s", err);
  free(text);
  ck_assert_int_eq(r->run.present, 1);
  ck_assert_int_eq(r->run.nvars, 3);
  ck_assert_str_eq(r->run.vars[2].value, "eth0");
  ck_assert_str_eq(r->run.gpu, "NVIDIA H100 80GB HBM3");
  ck_assert_int_eq(r->run.cuda_driver, 12040);
  ck_assert_int_eq(r->run.cuda_runtime, 12020);
  ck_assert_str_eq(r->run.gpu_driver, "550.54.15");
  ck_assert_int_eq(r->run.nnodes, 2);
  ck_assert_str_eq(r->run.nodes[1], "node2");
  ck_assert_int_eq(r->run.nrefused, 1);
  ck_assert_str_eq(r->run.refused[0], "'algo=rong' at position 12: unknown algorithm");
  ck_assert_int_eq(r->comms[0].keys[1].refused, 1);
  ck_assert_int_eq(r->comms[0].keys[0].refused, 0);
  ah_report_free(r);
  char v[32];
  ck_assert_str_eq(ah_report_version_text(22809, 1, v, sizeof v), "2.28.9");
  ck_assert_str_eq(ah_report_version_text(13000, 0, v, sizeof v), "13.0");
  ck_assert_str_eq(ah_report_version_text(0, 0, v, sizeof v), "");
  /* A record of the wrong shape is refused, naming the field. */
  const char *bad =
      "{\"schema\": 1, \"host\": \"h\", \"nccl_version\": 0, \"topology\": \"\", \"comms\": [], "
      "\"run\": {\"env\": {\"NCCL_ALGO\": 3}}}";
  ck_assert_int_eq(ah_report_parse(bad, &r, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "env.NCCL_ALGO: expected a string") != NULL, "%s", err);
  /* A report without one still loads (older writers). */
  const char *old =
      "{\"schema\": 1, \"host\": \"h\", \"nccl_version\": 0, \"topology\": \"\", \"comms\": []}";
  ck_assert_msg(ah_report_parse(old, &r, err, sizeof err) == 0, "%s", err);
  ck_assert_int_eq(r->run.present, 0);
  ah_report_free(r);
}
END_TEST

START_TEST(atomic_write) {
  build_report();
  make_dir();
  char path[512], err[512];
  snprintf(path, sizeof path, "%s/r.json", dir);
  FILE *f = fopen(path, "w");
  fputs("old contents", f);
  fclose(f);
  ck_assert_int_eq(ah_report_write(&rep, path, err, sizeof err), 0);
  ck_assert_int_eq(leftovers(), 0); /* no temporary left behind */
  ah_report_t *r = NULL;
  ck_assert_int_eq(ah_report_read(path, &r, err, sizeof err), 0);
  ah_report_free(r);
  /* Folders that do not exist yet are created (the default path is autoha-reports/<job>/...). */
  snprintf(path, sizeof path, "%s/missing/deeper/r.json", dir);
  ck_assert_int_eq(ah_report_write(&rep, path, err, sizeof err), 0);
  ck_assert_int_eq(ah_report_read(path, &r, err, sizeof err), 0);
  ah_report_free(r);
  /* A folder that cannot be made (under a file): an error naming the call and path. */
  snprintf(path, sizeof path, "%s/r.json/sub/r.json", dir);
  ck_assert_int_eq(ah_report_write(&rep, path, err, sizeof err), -1);
  ck_assert_ptr_nonnull(strstr(err, "mkdir("));
  ck_assert_ptr_nonnull(strstr(err, "/r.json/sub) failed: Not a directory"));
  /* A name whose folder is a file: open fails, nothing written. */
  snprintf(path, sizeof path, "%s/r.json/x.json", dir);
  ck_assert_int_eq(ah_report_write(&rep, path, err, sizeof err), -1);
  ck_assert_ptr_nonnull(strstr(err, "open("));
  ck_assert_ptr_nonnull(strstr(err, "/r.json/x.json.tmp."));
  /* Renaming onto a directory fails after the temporary was written: it is removed. */
  snprintf(path, sizeof path, "%s/adir", dir);
  ck_assert_int_eq(mkdir(path, 0755), 0);
  char inner[600];
  snprintf(inner, sizeof inner, "%s/x", path);
  ck_assert_int_eq(mkdir(inner, 0755), 0);
  ck_assert_int_eq(ah_report_write(&rep, path, err, sizeof err), -1);
  ck_assert_ptr_nonnull(strstr(err, "rename("));
  ck_assert_int_eq(leftovers(), 0);
}
END_TEST

/* Two writers rewriting one report while a reader keeps reading it: every read sees a whole
 * report (the rename is atomic and the writers never share a temporary file). */
static char shared_path[512];
static _Atomic int writers_done;

static void *writer(void *arg) {
  char err[256];
  void *rc = arg;
  for (int i = 0; i < 100 && !rc; i++)
    if (ah_report_write(&rep, shared_path, err, sizeof err) != 0) rc = (void *)1;
  writers_done++;
  return rc;
}

START_TEST(concurrent_writers_and_reader) {
  build_report();
  make_dir();
  snprintf(shared_path, sizeof shared_path, "%s/r.json", dir);
  char err[512];
  ck_assert_int_eq(ah_report_write(&rep, shared_path, err, sizeof err), 0);
  writers_done = 0;
  pthread_t t[2];
  for (int i = 0; i < 2; i++) ck_assert_int_eq(pthread_create(&t[i], NULL, writer, NULL), 0);
  int reads = 0;
  int bad_reads = 0;
  while (writers_done < 2) {
    ah_report_t *r = NULL;
    if (ah_report_read(shared_path, &r, err, sizeof err) != 0) {
      bad_reads++;
      continue;
    }
    ck_assert_int_eq(r->comms[0].nkeys, 3);
    ah_report_free(r);
    reads++;
  }
  for (int i = 0; i < 2; i++) {
    void *rc;
    pthread_join(t[i], &rc);
    ck_assert_msg(rc == NULL, "a writer failed");
  }
  ck_assert_msg(bad_reads == 0, "%d reads saw an incomplete report (last: %s)", bad_reads, err);
  ck_assert_int_gt(reads, 0);
  ck_assert_int_eq(leftovers(), 0);
}
END_TEST

static void check_bad(const char *text, const char *needle) {
  ah_report_t *r = (ah_report_t *)0x1;
  char err[512] = "";
  ck_assert_int_eq(ah_report_parse(text, &r, err, sizeof err), -1);
  ck_assert_ptr_eq(r, (ah_report_t *)0x1);
  ck_assert_msg(strstr(err, needle) != NULL, "error '%s' lacks '%s'", err, needle);
}

START_TEST(malformed_reports) {
  check_bad("", "line 1 column 0");
  check_bad("{\"schema\": 1,\n \"host\": \"a\",\n \"comms\": [}", "line 3 column");
  check_bad("[]", "(top level): expected an object");
  check_bad("{\"schema\": 1}", "host: missing");
  check_bad(
      "{\"schema\": 2, \"host\": \"a\", \"nccl_version\": 1, \"topology\": \"t\", \"comms\": []}",
      "schema: 2 is newer");
  check_bad("{\"schema\": 1, \"host\": 5, \"nccl_version\": 1, \"topology\": \"t\", \"comms\": []}",
            "host: expected a string");
  check_bad(
      "{\"schema\": 1, \"host\": \"a\", \"nccl_version\": \"2.28\", \"topology\": \"t\", \"comms\": []}",
      "nccl_version: expected an integer");
  check_bad(
      "{\"schema\": 1, \"host\": \"a\", \"nccl_version\": 1, \"topology\": \"t\", \"comms\": {}}",
      "comms: expected an array");
  const char *head =
      "{\"schema\": 1, \"host\": \"a\", \"nccl_version\": 1, \"topology\": \"t\", \"comms\": "
      "[{\"id\": \"0x1\", \"nranks\": 2, \"keys\": [";
  char buf[2048];
  snprintf(buf, sizeof buf, "%s{\"coll\": \"alltoallv\"}]}]}", head);
  check_bad(buf, "comms[0].keys[0].coll: unknown collective 'alltoallv'");
  snprintf(buf, sizeof buf, "%s{\"coll\": \"allreduce\", \"bin\": 70}]}]}", head);
  check_bad(buf, "comms[0].keys[0].bin: 70 out of range 0..63");
  const char *stat = "{\"config\": {\"algo\": null, \"proto\": null, \"res\": []}, \"calls\": 1}";
  snprintf(
      buf, sizeof buf,
      "%s{\"coll\": \"allreduce\", \"bin\": 3, \"calls\": 1, \"source\": \"tuned\", \"default\": %s, "
      "\"applied\": {\"config\": {\"algo\": \"rong\"}, \"calls\": 1}}]}]}",
      head, stat);
  check_bad(buf, "comms[0].keys[0].applied.config.algo: unknown algorithm 'rong'");
  snprintf(
      buf, sizeof buf,
      "%s{\"coll\": \"allreduce\", \"bin\": 3, \"calls\": 1, \"source\": \"magic\", \"default\": %s, "
      "\"applied\": %s}]}]}",
      head, stat, stat);
  check_bad(buf, "comms[0].keys[0].source: unknown source 'magic'");
  snprintf(
      buf, sizeof buf,
      "%s{\"coll\": \"allreduce\", \"bin\": 3, \"calls\": 1, \"source\": \"tuned\", \"default\": %s, "
      "\"applied\": %s, \"tuning\": {\"state\": \"converged\", \"winner\": {\"res\": [1, -2]}}}]}]}",
      head, stat, stat);
  check_bad(buf, "comms[0].keys[0].tuning.winner.res: element 1: expected a non-negative integer");
  snprintf(buf, sizeof buf,
           "{\"schema\": 1, \"host\": \"a\", \"nccl_version\": 1, \"topology\": \"t\", "
           "\"comms\": [{\"id\": \"zz\", \"nranks\": 2, \"keys\": []}]}");
  check_bad(buf, "comms[0].id: 'zz' is not a hexadecimal id");
  check_bad(
      "{\"schema\": 1, \"host\": \"a\", \"nccl_version\": 1, \"topology\": \"t\", \"comms\": [], "
      "\"health\": [{\"comm\": \"0x1\", \"kind\": \"doom\", \"text\": \"x\", \"time\": 1}]}",
      "health[0]: kind 'doom' is not missing, incomplete, mismatch, resumed, straggler, recovered, "
      "slow_link, link_ok, died, stopped or nic_down");
  /* A minimal valid one parses, unknown fields ignored. */
  ah_report_t *r = NULL;
  char err[256];
  ck_assert_int_eq(
      ah_report_parse("{\"schema\": 1, \"host\": \"a\", \"nccl_version\": 1, \"topology\": "
                      "\"t\", \"comms\": [], \"future_field\": [1,2]}",
                      &r, err, sizeof err),
      0);
  ck_assert_int_eq(r->ncomms, 0);
  ah_report_free(r);
  /* Reading: a missing file names the cause. */
  ck_assert_int_eq(ah_report_read("/nonexistent/r.json", &r, err, sizeof err), -1);
  ck_assert_ptr_nonnull(strstr(err, "No such file"));
}
END_TEST

START_TEST(profile_load) {
  build_report();
  /* A second communicator of the same shape with fewer calls disagrees on the AllReduce key, and a
   * default-sourced key and a slower override give nothing. */
  ah_report_comm_t comms[2];
  ah_report_key_t k2[2];
  memset(k2, 0, sizeof k2);
  comms[0] = comm;
  comms[1] = comm;
  comms[1].id = 7;
  comms[1].nkeys = 2;
  comms[1].keys = k2;
  k2[0] = keys[0];
  k2[0].calls = 10;
  k2[0].tune.winner = cfg(AH_ALGO_TREE, AH_PROTO_LL128, 4);
  k2[0].nprobes = 0;
  k2[0].probes = NULL;
  k2[1].coll = AH_FUNC_REDUCESCATTER;
  k2[1].bin = 16;
  k2[1].calls = 9;
  k2[1].nccl_default = stat_of(cfg(AH_ALGO_RING, AH_PROTO_SIMPLE, 8), 9, 100, 65536);
  k2[1].applied = stat_of(cfg(AH_ALGO_RING, AH_PROTO_LL, 8), 9, 150, 65536);
  k2[1].source = AH_SOURCE_OVERRIDE;
  rep.comms = comms;
  rep.ncomms = 2;
  make_dir();
  char path[512], err[512];
  snprintf(path, sizeof path, "%s/p.json", dir);
  ck_assert_int_eq(ah_report_write(&rep, path, err, sizeof err), 0);

  ah_profile_t *p = NULL;
  ah_log_set_level(AH_LOG_WARN);
  capture_begin();
  ck_assert_int_eq(ah_profile_load(path, (size_t)64 << 20, 22805, rep.topo, &p), 0);
  ck_assert_str_eq(capture_end(), "");
  ck_assert_int_eq(p->nentries, 2);
  /* A report from before the "recommended" object was dropped loads the same, silently. */
  char old[600];
  snprintf(old, sizeof old, "%s/p-old.json", dir);
  add_old_recommended(path, old);
  ah_profile_t *po = NULL;
  capture_begin();
  ck_assert_int_eq(ah_profile_load(old, (size_t)64 << 20, 22805, rep.topo, &po), 0);
  ck_assert_str_eq(capture_end(), "");
  ck_assert_int_eq(po->nentries, 2);
  ah_profile_free(po);
  const ah_profile_entry_t *e = ah_profile_lookup(p, 8, 1, AH_FUNC_ALLREDUCE, 24);
  ck_assert_ptr_nonnull(e);
  ck_assert_int_eq(e->cfg.algo, AH_ALGO_RING); /* the busier communicator's winner */
  ck_assert_int_eq(e->cfg.res[0], 24);
  ck_assert_double_eq_tol(e->us, 799.0, 1e-9);
  e = ah_profile_lookup(p, 8, 1, AH_FUNC_ALLGATHER, 20); /* override, default never timed */
  ck_assert_ptr_nonnull(e);
  ck_assert_int_eq(e->cfg.res[0], 8);
  ck_assert_ptr_null(ah_profile_lookup(p, 8, 1, AH_FUNC_BROADCAST, 10));     /* NCCL's default */
  ck_assert_ptr_null(ah_profile_lookup(p, 8, 1, AH_FUNC_REDUCESCATTER, 16)); /* slower override */
  ck_assert_ptr_null(ah_profile_lookup(p, 16, 2, AH_FUNC_ALLREDUCE, 24));    /* another shape */
  ck_assert_ptr_null(ah_profile_lookup(NULL, 8, 1, AH_FUNC_ALLREDUCE, 24));
  ah_profile_free(p);
  /* Version 0 and topology NULL mean "do not check". */
  ck_assert_int_eq(ah_profile_load(path, (size_t)64 << 20, 0, NULL, &p), 0);
  ah_profile_free(p);

  /* Refusals: one error line each, output untouched. */
  p = (ah_profile_t *)0x1;
  capture_begin();
  ck_assert_int_eq(ah_profile_load(path, (size_t)64 << 20, 23001, rep.topo, &p), -1);
  const char *log = capture_end();
  ck_assert_ptr_nonnull(strstr(log, "measured with NCCL 2.28.5 and this job runs NCCL 2.30.1"));
  ck_assert_int_eq((int)(strchr(log, '\n') - log) + 1, (int)strlen(log));
  capture_begin();
  ah_topology_t other = {.gpu = "NVIDIA H100 80GB HBM3",
                         .nodes = 2,
                         .ranks = 16,
                         .nics = 8,
                         .nic_gbps = 400,
                         .nccl_version = 22805};
  char other_text[AH_REPORT_TOPO_MAX];
  ck_assert_int_eq(
      ah_profile_load(path, (size_t)64 << 20, 22805, ah_report_topology(&other, other_text), &p),
      -1);
  log = capture_end();
  ck_assert_ptr_nonnull(
      strstr(log,
             "not loaded: it was measured on another topology (nodes is 2 here and "
             "1 there; ranks is 16 here and 8 there; 'here' is this job"));
  ck_assert_ptr_eq(p, (ah_profile_t *)0x1);

  FILE *f = fopen(path, "w");
  fputs("{\"schema\": 1,\n  \"host\": \"a\",,\n}", f);
  fclose(f);
  capture_begin();
  ck_assert_int_eq(ah_profile_load(path, (size_t)64 << 20, 22805, NULL, &p), -1);
  log = capture_end();
  ck_assert_ptr_nonnull(strstr(log, "not loaded: line 2 column"));
  ck_assert_ptr_eq(p, (ah_profile_t *)0x1);
}
END_TEST

/* Every proper prefix of a valid report (a file cut short by a crash, a partial copy) is refused
 * with a message, never half-loaded; the whole text loads. */
START_TEST(truncated_reports) {
  build_report();
  char *text = ah_report_to_string(&rep);
  ck_assert_ptr_nonnull(text);
  size_t len = strlen(text);
  char *cut = malloc(len + 1);
  for (size_t n = 0; n < len; n++) {
    memcpy(cut, text, n);
    cut[n] = 0;
    ah_report_t *r = NULL;
    char err[512] = "";
    ck_assert_msg(ah_report_parse(cut, &r, err, sizeof err) == -1, "prefix of %zu bytes loaded", n);
    ck_assert_ptr_null(r);
    ck_assert_ptr_nonnull(strstr(err, "line "));
  }
  ah_report_t *r = NULL;
  char err[512];
  ck_assert_int_eq(ah_report_parse(text, &r, err, sizeof err), 0);
  ah_report_free(r);
  free(cut);
  free(text);
}
END_TEST

/* Removes the test's temporary directory (runs in the forked test process). */
static void remove_dir(void) {
  if (!dir[0]) return;
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  dir[0] = 0;
}

/* Issue 18 #1: a job id with an invalid byte, or one cut inside a multi-byte character, still
 * gets its report (valid JSON, the byte shown as \xNN, never half a character); a loaded report's
 * mode is one of the three modes or the report is refused naming it. */
START_TEST(non_utf8_text_still_reports) {
  build_report();
  snprintf(rep.job, sizeof rep.job, "job-\xff-\xc3\xa9");
  char *text = ah_report_to_string(&rep);
  ck_assert_ptr_nonnull(text);
  ah_report_t *back = NULL;
  char err[256];
  ck_assert_int_eq(ah_report_parse(text, &back, err, sizeof err), 0);
  ck_assert_str_eq(back->job, "job-\\xff-\xc3\xa9");
  ah_report_free(back);
  free(text);
  /* a two-byte character cut by the old fixed-size copy: its lead byte alone at the end */
  memset(rep.job, 'j', sizeof rep.job);
  rep.job[sizeof rep.job - 2] = (char)0xc3;
  rep.job[sizeof rep.job - 1] = 0;
  text = ah_report_to_string(&rep);
  ck_assert_ptr_nonnull(text);
  free(text);
  /* copies stop before a character that does not fit whole */
  char small[6];
  ck_assert_str_eq(ah_report_text_copy(small, sizeof small, "abcd\xc3\xa9"), "abcd");
  ck_assert_str_eq(ah_report_text_copy(small, sizeof small,
                                       "a\xe2\x82\xac"
                                       "b"),
                   "a\xe2\x82\xac"
                   "b");
  ck_assert_str_eq(ah_report_text_copy(small, sizeof small, "ab\xed\xa0\x80"), "ab");
  /* a 300-byte job id loaded back is cut at a character boundary and can be written again */
  build_report();
  char *orig = ah_report_to_string(&rep);
  ck_assert_ptr_nonnull(orig);
  char longjob[400];
  memset(longjob, 'x', 254);
  for (int i = 254; i < 300; i += 2) longjob[i] = (char)0xc3, longjob[i + 1] = (char)0xa9;
  longjob[300] = 0;
  char *jobat = strstr(orig, "\"job-42\"");
  ck_assert_ptr_nonnull(jobat);
  char *doc = malloc(strlen(orig) + 400);
  snprintf(doc, strlen(orig) + 400, "%.*s\"%s\"%s", (int)(jobat - orig), orig, longjob,
           jobat + strlen("\"job-42\""));
  ck_assert_int_eq(ah_report_parse(doc, &back, err, sizeof err), 0);
  ck_assert_uint_eq(strlen(back->job), 254); /* 255 would split the first é */
  text = ah_report_to_string(back);
  ck_assert_ptr_nonnull(text);
  free(text);
  ah_report_free(back);
  /* mode: one of the three, or refused by name */
  const char *modes[] = {
      "\"bogus\"", "\"\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\"", "7"};
  const char *want[] = {"mode: 'bogus' is not a mode",
                        "is not a mode (expected observe, fixed or tune)",
                        "mode: '(not a string)' is not a mode"};
  for (int i = 0; i < 3; i++) {
    char *modeat = strstr(orig, "\"tune\"");
    ck_assert_ptr_nonnull(modeat);
    snprintf(doc, strlen(orig) + 400, "%.*s%s%s", (int)(modeat - orig), orig, modes[i],
             modeat + strlen("\"tune\""));
    ck_assert_int_eq(ah_report_parse(doc, &back, err, sizeof err), -1);
    ck_assert_msg(strstr(err, want[i]) != NULL, "error '%s' lacks '%s'", err, want[i]);
  }
  free(doc);
  free(orig);
}
END_TEST

/* Destroyed communicators (docs/report.md): one kept in detail carries "destroyed": true, the
 * summed ones the top-level "destroyed" object; both survive a write and a read, a live report has
 * neither, and a wrong type is refused naming the field. */
START_TEST(destroyed_round_trip) {
  build_report();
  char *text = ah_report_to_string(&rep);
  ck_assert_ptr_nonnull(text);
  ck_assert_ptr_null(strstr(text, "\"destroyed\"")); /* nothing destroyed: neither field */
  free(text);
  comm.destroyed = 1;
  rep.destroyed = (ah_report_destroyed_t){.comms = 285,
                                          .keys = 290,
                                          .tuned = 280,
                                          .calls = 1234567890123ull,
                                          .timed = 285,
                                          .us_total = 2400.5,
                                          .bytes_total = 1167360,
                                          .sync_waits = 7,
                                          .sync_wait_us = 31.25};
  text = ah_report_to_string(&rep);
  ck_assert_ptr_nonnull(text);
  ah_report_t *r = NULL;
  char err[512];
  ck_assert_msg(ah_report_parse(text, &r, err, sizeof err) == 0, "%s", err);
  ck_assert_int_eq(r->ncomms, 1);
  ck_assert_int_eq(r->comms[0].destroyed, 1);
  ck_assert_uint_eq(r->destroyed.comms, 285);
  ck_assert_uint_eq(r->destroyed.keys, 290);
  ck_assert_uint_eq(r->destroyed.tuned, 280);
  ck_assert_uint_eq(r->destroyed.calls, 1234567890123ull);
  ck_assert_uint_eq(r->destroyed.timed, 285);
  ck_assert_double_eq_tol(r->destroyed.us_total, 2400.5, 1e-9);
  ck_assert_double_eq_tol(r->destroyed.bytes_total, 1167360, 1e-9);
  ck_assert_uint_eq(r->destroyed.sync_waits, 7);
  ck_assert_double_eq_tol(r->destroyed.sync_wait_us, 31.25, 1e-9);
  ah_report_free(r);
  /* a hand-edited report with the wrong types is refused, naming the field */
  char *at = strstr(text, "\"destroyed\": true");
  ck_assert_ptr_nonnull(at);
  memcpy(at, "\"destroyed\": 1   ", strlen("\"destroyed\": true"));
  ck_assert_int_eq(ah_report_parse(text, &r, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "comms[0].destroyed") && strstr(err, "expected true or false"), "%s",
                err);
  free(text);
  comm.destroyed = 0;
  rep.destroyed.comms = 0;
  const char *bad =
      "{\"schema\": 1, \"host\": \"a\", \"nccl_version\": 1, \"topology\": \"t\", "
      "\"mode\": \"tune\", \"comms\": [], \"destroyed\": {\"comms\": -1}}";
  ck_assert_int_eq(ah_report_parse(bad, &r, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "destroyed.comms"), "%s", err);
  memset(&rep.destroyed, 0, sizeof rep.destroyed);
}
END_TEST

int main(void) {
  const TTest *const tests[] = {
      formulas,          destroyed_round_trip, paths_and_names,   job_ids,
      round_trip,        run_record,           atomic_write,      concurrent_writers_and_reader,
      malformed_reports, profile_load,         truncated_reports, non_utf8_text_still_reports};
  return ah_check_main(
      "tuner_report",
      (ah_check_case_t){.name = "report", .timeout = 20, .setup = NULL, .teardown = remove_dir},
      tests, AH_CHECK_COUNT(tests));
}
