/* Unit tests of settings/ah_env.c: every default parses, each typed parser accepts what its syntax
 * says and refuses the rest with "invalid value for AUTOHA_X: '...' (expected ...)" while keeping
 * the default, unknown AUTOHA_* names get the nearest real name, `autoha env` output, and
 * docs/environment.md agrees with the table (this test fails when they differ). */
#include <check.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ah_capture.h"
#include "ah_check.h"
#include "ah_env.h"
#include "ah_log.h"
#include "ah_version.h"
#include "ah_path.h"

static int count_lines(const char *s) {
  int n = 0;
  for (; *s; s++) n += *s == '\n';
  return n;
}

/* ---- tests ------------------------------------------------------------------------------------- */

START_TEST(defaults_parse) {
  ah_settings_t s, t;
  for (int i = 0; i < ah_env_var_count(); i++) {
    const ah_env_var_t *v = ah_env_var_get(i);
    char err[512];
    ck_assert_msg(ah_env_parse_one(v, v->default_text, &s, err, sizeof err) == 0, "%s default: %s",
                  v->name, err);
    ck_assert_ptr_eq(ah_env_var_find(v->name), v);
    ck_assert(strncmp(v->name, "AUTOHA_", 7) == 0);
    ck_assert(strlen(v->doc) > 40);
    ck_assert(strlen(v->syntax) > 0);
  }
  ck_assert_ptr_null(ah_env_var_get(-1));
  ck_assert_ptr_null(ah_env_var_get(ah_env_var_count()));
  ah_env_defaults(&s);
  ck_assert_int_eq(s.enable, 1);
  ck_assert_int_eq(s.mode, AH_MODE_TUNE);
  ck_assert_int_eq(s.log_level, AH_LOG_WARN);
  ck_assert_int_eq(s.override.nrules, 0);
  ck_assert_str_eq(s.report, "autoha-reports/%j/%h-%p.json");
  ck_assert_int_eq(s.report_interval_s, 60);
  ck_assert_str_eq(s.profile, "");
  ck_assert_double_eq(s.sync_warn_s, 10.0);
  ck_assert_int_eq(s.tune_budget, 180);
  ck_assert_str_eq(s.coord_addr, "");
  ck_assert_int_eq(s.qp, 1);
  ck_assert_int_eq(s.qp_sport, AH_PATH_SPORT_OFF);
  ck_assert_int_eq(s.qp_tc, -1);
  /* An empty environment is the defaults, with no message. */
  char *envp[] = {"PATH=/bin", NULL};
  capture_begin();
  ck_assert_int_eq(ah_env_parse(envp, &t), 0);
  ck_assert_str_eq(capture_end(), "");
  ck_assert_int_eq(memcmp(&s, &t, sizeof s), 0);
}
END_TEST

/* Parses one value; returns 0/-1 and leaves the message in err. */
static int one(const char *name, const char *value, ah_settings_t *s, char *err, size_t len) {
  const ah_env_var_t *v = ah_env_var_find(name);
  ck_assert_ptr_nonnull(v);
  err[0] = 0;
  return ah_env_parse_one(v, value, s, err, len);
}

START_TEST(typed_parsers) {
  ah_settings_t s;
  char err[1024];
  ah_env_defaults(&s);
  /* bool */
  ck_assert_int_eq(one("AUTOHA_ENABLE", "off", &s, err, sizeof err), 0);
  ck_assert_int_eq(s.enable, 0);
  ck_assert_int_eq(one("AUTOHA_ENABLE", "YES", &s, err, sizeof err), 0);
  ck_assert_int_eq(s.enable, 1);
  ck_assert_int_eq(one("AUTOHA_ENABLE", "2", &s, err, sizeof err), -1);
  ck_assert_int_eq(s.enable, 1);
  ck_assert_str_eq(err,
                   "invalid value for AUTOHA_ENABLE: '2' (expected 1|0 (also y|n, yes|no, on|off, "
                   "true|false))");
  /* enum */
  ck_assert_int_eq(one("AUTOHA_MODE", "Observe", &s, err, sizeof err), 0);
  ck_assert_int_eq(s.mode, AH_MODE_OBSERVE);
  ck_assert_int_eq(one("AUTOHA_MODE", "fixed", &s, err, sizeof err), 0);
  ck_assert_int_eq(s.mode, AH_MODE_FIXED);
  ck_assert_int_eq(one("AUTOHA_MODE", "tunes", &s, err, sizeof err), -1);
  ck_assert_int_eq(s.mode, AH_MODE_FIXED);
  ck_assert_str_eq(err, "invalid value for AUTOHA_MODE: 'tunes' (expected observe|fixed|tune)");
  ck_assert_int_eq(one("AUTOHA_MODE", "", &s, err, sizeof err), -1);
  ck_assert_int_eq(one("AUTOHA_LOG", "debug", &s, err, sizeof err), 0);
  ck_assert_int_eq(s.log_level, AH_LOG_DEBUG);
  /* bounded int */
  ck_assert_int_eq(one("AUTOHA_REPORT_INTERVAL_S", "0", &s, err, sizeof err), 0);
  ck_assert_int_eq(s.report_interval_s, 0);
  ck_assert_int_eq(one("AUTOHA_REPORT_INTERVAL_S", "86401", &s, err, sizeof err), -1);
  ck_assert_int_eq(one("AUTOHA_REPORT_INTERVAL_S", "-1", &s, err, sizeof err), -1);
  ck_assert_int_eq(one("AUTOHA_REPORT_INTERVAL_S", "10s", &s, err, sizeof err), -1);
  ck_assert_int_eq(one("AUTOHA_REPORT_INTERVAL_S", " 5", &s, err, sizeof err), -1);
  ck_assert_int_eq(one("AUTOHA_REPORT_INTERVAL_S", "99999999999999999999999", &s, err, sizeof err),
                   -1);
  ck_assert_int_eq(s.report_interval_s, 0);
  ck_assert_str_eq(err,
                   "invalid value for AUTOHA_REPORT_INTERVAL_S: '99999999999999999999999' "
                   "(expected 0..86400)");
  ck_assert_int_eq(one("AUTOHA_TUNE_BUDGET", "0", &s, err, sizeof err), -1);
  ck_assert_int_eq(one("AUTOHA_TUNE_BUDGET", "250", &s, err, sizeof err), 0);
  ck_assert_int_eq(s.tune_budget, 250);
  /* double */
  ck_assert_int_eq(one("AUTOHA_SYNC_WARN_S", "2.5", &s, err, sizeof err), 0);
  ck_assert_double_eq(s.sync_warn_s, 2.5);
  ck_assert_int_eq(one("AUTOHA_SYNC_WARN_S", "nan", &s, err, sizeof err), -1);
  ck_assert_int_eq(one("AUTOHA_SYNC_WARN_S", "inf", &s, err, sizeof err), -1);
  ck_assert_int_eq(one("AUTOHA_SYNC_WARN_S", "0", &s, err, sizeof err), -1);
  ck_assert_int_eq(one("AUTOHA_SYNC_WARN_S", "1e9", &s, err, sizeof err), -1);
  ck_assert_int_eq(one("AUTOHA_SYNC_WARN_S", "3x", &s, err, sizeof err), -1);
  ck_assert_double_eq(s.sync_warn_s, 2.5);
  /* path templates */
  ck_assert_int_eq(one("AUTOHA_REPORT", "/tmp/r-%h-%p-%r-%%.json", &s, err, sizeof err), 0);
  ck_assert_str_eq(s.report, "/tmp/r-%h-%p-%r-%%.json");
  ck_assert_int_eq(one("AUTOHA_REPORT", "/tmp/r-%q.json", &s, err, sizeof err), -1);
  ck_assert_str_eq(s.report, "/tmp/r-%h-%p-%r-%%.json");
  ck_assert_ptr_nonnull(strstr(err, "invalid value for AUTOHA_REPORT: '/tmp/r-%q.json' ("));
  ck_assert_ptr_nonnull(strstr(err, "'%q' at position 7"));
  ck_assert_int_eq(one("AUTOHA_REPORT", "off", &s, err, sizeof err), 0);
  ck_assert_str_eq(s.report, "");
  ck_assert_int_eq(one("AUTOHA_PROFILE", "prof-%h.json", &s, err, sizeof err), 0);
  ck_assert_str_eq(s.profile, "prof-%h.json");
  char longpath[AH_ENV_PATH_MAX + 10];
  memset(longpath, 'a', sizeof longpath - 1);
  longpath[sizeof longpath - 1] = 0;
  ck_assert_int_eq(one("AUTOHA_PROFILE", longpath, &s, err, sizeof err), -1);
  ck_assert_str_eq(s.profile, "prof-%h.json");
  /* address */
  ck_assert_int_eq(one("AUTOHA_COORD_ADDR", "10.0.0.1:29400", &s, err, sizeof err), 0);
  ck_assert_str_eq(s.coord_addr, "10.0.0.1:29400");
  ck_assert_int_eq(one("AUTOHA_COORD_ADDR", "[fe80::1]:5000", &s, err, sizeof err), 0);
  ck_assert_int_eq(one("AUTOHA_COORD_ADDR", "host", &s, err, sizeof err), -1);
  ck_assert_int_eq(one("AUTOHA_COORD_ADDR", "host:0", &s, err, sizeof err), -1);
  ck_assert_int_eq(one("AUTOHA_COORD_ADDR", "host:70000", &s, err, sizeof err), -1);
  ck_assert_int_eq(one("AUTOHA_COORD_ADDR", ":80", &s, err, sizeof err), -1);
  ck_assert_int_eq(one("AUTOHA_COORD_ADDR", "fe80::1]:80", &s, err, sizeof err), 0);
  /* AUTOHA_COORD_IFNAME: NCCL_SOCKET_IFNAME's shape, kept as text. */
  ck_assert_int_eq(one("AUTOHA_COORD_IFNAME", "^docker,lo", &s, err, sizeof err), 0);
  ck_assert_str_eq(s.coord_ifname, "^docker,lo");
  ck_assert_int_eq(one("AUTOHA_COORD_IFNAME", "=eth0,ib0", &s, err, sizeof err), 0);
  ck_assert_int_eq(one("AUTOHA_COORD_IFNAME", "^=enp1s0f0.100", &s, err, sizeof err), 0);
  ck_assert_int_eq(one("AUTOHA_COORD_IFNAME", "lo", &s, err, sizeof err), 0);
  ck_assert_int_eq(one("AUTOHA_COORD_IFNAME", "eth0;reboot", &s, err, sizeof err), -1);
  ck_assert_ptr_nonnull(strstr(err, "invalid value for AUTOHA_COORD_IFNAME: 'eth0;reboot'"));
  ck_assert_int_eq(one("AUTOHA_COORD_IFNAME", "a_name_longer_than_15", &s, err, sizeof err), -1);
  ck_assert_int_eq(one("AUTOHA_COORD_IFNAME", "eth^", &s, err, sizeof err), -1);
  ck_assert_str_eq(s.coord_ifname, "lo"); /* unchanged by the refused ones */
  ck_assert_str_eq(s.coord_addr, "fe80::1]:80");
  /* QP source-port policy and traffic class */
  ck_assert_int_eq(one("AUTOHA_QP_SPORT", "spread", &s, err, sizeof err), 0);
  ck_assert_int_eq(s.qp_sport, AH_PATH_SPORT_SPREAD);
  ck_assert_int_eq(one("AUTOHA_QP_SPORT", "file:/etc/paths.txt", &s, err, sizeof err), 0);
  ck_assert_int_eq(s.qp_sport, AH_PATH_SPORT_FILE);
  ck_assert_str_eq(s.qp_sport_file, "/etc/paths.txt");
  ck_assert_int_eq(one("AUTOHA_QP_SPORT", "file:", &s, err, sizeof err), -1);
  ck_assert_int_eq(one("AUTOHA_QP_SPORT", "file", &s, err, sizeof err), -1);
  ck_assert_int_eq(one("AUTOHA_QP_SPORT", "random", &s, err, sizeof err), -1);
  ck_assert_int_eq(s.qp_sport, AH_PATH_SPORT_FILE);
  ck_assert_int_eq(one("AUTOHA_QP_SPORT", "plan", &s, err, sizeof err), 0);
  ck_assert_int_eq(s.qp_sport, AH_PATH_SPORT_PLAN);
  ck_assert_str_eq(s.qp_sport_file, "");
  ck_assert_int_eq(one("AUTOHA_QP_TC", "dscp=26", &s, err, sizeof err), 0);
  ck_assert_int_eq(s.qp_tc, 26); /* a DSCP: NCCL's ECN bits are kept when it is applied */
  ck_assert_int_eq(s.qp_tc_dscp, 1);
  char shown[32];
  ck_assert_str_eq(ah_env_value_format(ah_env_var_find("AUTOHA_QP_TC"), &s, shown, sizeof shown),
                   "dscp=26");
  ck_assert_int_eq(one("AUTOHA_QP_TC", "106", &s, err, sizeof err), 0);
  ck_assert_int_eq(s.qp_tc, 106);
  ck_assert_int_eq(s.qp_tc_dscp, 0);
  ck_assert_int_eq(one("AUTOHA_QP_TC", "dscp=64", &s, err, sizeof err), -1);
  ck_assert_int_eq(one("AUTOHA_QP_TC", "256", &s, err, sizeof err), -1);
  ck_assert_int_eq(s.qp_tc, 106);
  ck_assert_int_eq(one("AUTOHA_QP_TC", "NCCL", &s, err, sizeof err), 0);
  ck_assert_int_eq(s.qp_tc, -1);
  /* N/M (AUTOHA_HA_HEARTBEAT_MISS): 1 <= N <= M <= 32; a bad one leaves the value as it was */
  ck_assert_int_eq(one("AUTOHA_HA_HEARTBEAT_MISS", "3/5", &s, err, sizeof err), 0);
  ck_assert_int_eq(s.ha_hb_miss[0], 3);
  ck_assert_int_eq(s.ha_hb_miss[1], 5);
  ck_assert_str_eq(
      ah_env_value_format(ah_env_var_find("AUTOHA_HA_HEARTBEAT_MISS"), &s, shown, sizeof shown),
      "3/5");
  const char *bad_ratio[] = {"5/3", "0/2", "3", "3/", "/5", "2/33", "2/5x", " 2/5", "-1/2", "a/b"};
  for (size_t i = 0; i < sizeof bad_ratio / sizeof bad_ratio[0]; i++) {
    ck_assert_msg(one("AUTOHA_HA_HEARTBEAT_MISS", bad_ratio[i], &s, err, sizeof err) == -1, "%s",
                  bad_ratio[i]);
    ck_assert_int_eq(s.ha_hb_miss[0], 3);
    ck_assert_int_eq(s.ha_hb_miss[1], 5);
  }
  ck_assert_str_eq(err,
                   "invalid value for AUTOHA_HA_HEARTBEAT_MISS: 'a/b' (expected N/M (1 <= N "
                   "<= M <= 32))");
  ck_assert_int_eq(one("AUTOHA_HA_HEARTBEAT_MISS", "32/32", &s, err, sizeof err), 0);
  ck_assert_int_eq(s.ha_hb_miss[0], 32);
  /* A size-typed row (none is in the table yet): K/M/G within bounds. */
  ah_env_var_t sz = {"AUTOHA_TEST_SIZE",
                     AH_ENV_SIZE,
                     "1M",
                     "0..1G",
                     "test row",
                     0,
                     1 << 30,
                     NULL,
                     offsetof(ah_settings_t, sync_warn_s),
                     sizeof(int64_t),
                     NULL};
  union {
    ah_settings_t s;
    char pad[sizeof(ah_settings_t) + 16];
  } u;
  ck_assert_int_eq(ah_env_parse_one(&sz, "64K", &u.s, err, sizeof err), 0);
  int64_t got;
  memcpy(&got, (char *)&u.s + sz.offset, sizeof got);
  ck_assert_int_eq(got, 65536);
  ck_assert_int_eq(ah_env_parse_one(&sz, "2G", &u.s, err, sizeof err), -1);
  ck_assert_str_eq(err, "invalid value for AUTOHA_TEST_SIZE: '2G' (expected 0..1G)");
}
END_TEST

START_TEST(override_keeps_good_rules) {
  ah_settings_t s;
  char err[2048];
  ah_env_defaults(&s);
  ck_assert_int_eq(
      one("AUTOHA_OVERRIDE", "allreduce@1M-64M:algo=rong,proto=simple;allgather:nchannels=8;x", &s,
          err, sizeof err),
      -1);
  ck_assert_int_eq(s.override.nrules, 1);
  ck_assert_int_eq(s.override.rules[0].coll, AH_FUNC_ALLGATHER);
  ck_assert_int_eq(count_lines(err), 1); /* two lines, newline-separated */
  ck_assert_ptr_nonnull(strstr(err,
                               "invalid value for AUTOHA_OVERRIDE: 'algo=rong' at position 17: "
                               "unknown algorithm"));
  ck_assert_ptr_nonnull(strstr(err, "\ninvalid value for AUTOHA_OVERRIDE: 'x' at position 62"));
  char buf[512];
  ck_assert_str_eq(ah_env_value_format(ah_env_var_find("AUTOHA_OVERRIDE"), &s, buf, sizeof buf),
                   "allgather:nchannels=8");
  ck_assert_int_eq(
      one("AUTOHA_OVERRIDE", "allreduce:algo=ring;*@1M-:nchannels=4", &s, err, sizeof err), 0);
  ck_assert_int_eq(s.override.nrules, 2);
  ck_assert_str_eq(ah_env_value_format(ah_env_var_find("AUTOHA_OVERRIDE"), &s, buf, sizeof buf),
                   "allreduce:algo=ring;*@1M-:nchannels=4");
}
END_TEST

START_TEST(parse_environment_logs) {
  char *envp[] = {"HOME=/root",
                  "AUTOHA_MODE=tunes",
                  "AUTOHA_REPOT=x.json",
                  "AUTOHA_QP_TC=dscp=26",
                  "AUTOHA_OVERRIDE=allreduce:algo=rong;allgather:nchannels=8",
                  "AUTOHA_ZZZZZZZZZZZZZZZZZZZZZZZ=1",
                  "AUTOHA_QP_TC=7", /* a second definition is ignored, as getenv would */
                  "AUTOHA_HA_HEARTBEAT_MISS=4/3",
                  NULL};
  ah_settings_t s;
  ah_log_set_level(AH_LOG_WARN);
  capture_begin();
  int problems = ah_env_parse(envp, &s);
  const char *log = capture_end();
  ck_assert_int_eq(problems, 5);
  ck_assert_int_eq(count_lines(log), 5);
  ck_assert_ptr_nonnull(strstr(log, " [-] autoha ERROR env: invalid value for AUTOHA_MODE"));
  /* one line naming the text and the default the process runs with */
  ck_assert_ptr_nonnull(strstr(log,
                               "invalid value for AUTOHA_HA_HEARTBEAT_MISS: '4/3' (expected "
                               "N/M (1 <= N <= M <= 32)); default kept "
                               "(AUTOHA_HA_HEARTBEAT_MISS=1/1)\n"));
  ck_assert_ptr_nonnull(
      strstr(log, " [-] autoha WARN env: unknown environment variable AUTOHA_REPOT"));
  /* a mode that does not parse falls back to the least invasive one, and says which */
  ck_assert_ptr_nonnull(
      strstr(log,
             "invalid value for AUTOHA_MODE: 'tunes' (expected observe|fixed|tune); "
             "using AUTOHA_MODE=observe instead (the safe fallback)\n"));
  ck_assert_ptr_nonnull(
      strstr(log, "unknown environment variable AUTOHA_REPOT (maybe AUTOHA_REPORT?)"));
  ck_assert_ptr_nonnull(
      strstr(log, "invalid value for AUTOHA_OVERRIDE: 'algo=rong' at position 10"));
  ck_assert_ptr_nonnull(strstr(log, "the other rules still apply"));
  ck_assert_ptr_nonnull(
      strstr(log, "unknown environment variable AUTOHA_ZZZZZZZZZZZZZZZZZZZZZZZ; it is ignored"));
  ck_assert_int_eq(s.mode, AH_MODE_OBSERVE);
  ck_assert_int_eq(s.qp_tc, 26);
  ck_assert_int_eq(s.qp_tc_dscp, 1);
  ck_assert_int_eq(s.override.nrules, 1);
  ck_assert_int_eq(s.ha_hb_miss[0], 1);
  ck_assert_int_eq(s.ha_hb_miss[1], 1);
}
END_TEST

/* A value with a newline or bytes that are not UTF-8 is logged escaped, on its one line. */
START_TEST(invalid_values_are_logged_escaped) {
  char *envp[] = {"AUTOHA_MODE=tune\nobserve", "AUTOHA_HANG_S=\xff\xfe", NULL};
  ah_settings_t s;
  ah_log_set_level(AH_LOG_WARN);
  capture_begin();
  int problems = ah_env_parse(envp, &s);
  const char *log = capture_end();
  ck_assert_int_eq(problems, 2);
  ck_assert_int_eq(count_lines(log), 2);
  ck_assert_msg(strstr(log, "invalid value for AUTOHA_MODE: 'tune\\nobserve' ("), "%s", log);
  ck_assert_msg(strstr(log, "invalid value for AUTOHA_HANG_S: '\\xff\\xfe' ("), "%s", log);
}
END_TEST

START_TEST(log_variables) {
  ah_settings_t s;
  char err[512], buf[256];
  ah_env_defaults(&s);
  ck_assert_int_eq(s.log_subsys, (int)AH_LOG_SUBSYS_ALL);
  ck_assert_int_eq(s.log_time, 0);
  ck_assert_str_eq(s.log_file, "");
  ck_assert_int_eq(one("AUTOHA_LOG_SUBSYS", "^coord,qp", &s, err, sizeof err), 0);
  ck_assert_str_eq(ah_env_value_format(ah_env_var_find("AUTOHA_LOG_SUBSYS"), &s, buf, sizeof buf),
                   "init,env,tune,report,health");
  ck_assert_int_eq(one("AUTOHA_LOG_SUBSYS", "tune,hubb", &s, err, sizeof err), -1);
  ck_assert_str_eq(
      err,
      "invalid value for AUTOHA_LOG_SUBSYS: 'tune,hubb' (unknown subsystem 'hubb'; expected "
      "all, or SUB,SUB... or ^SUB,SUB... (SUB: init|env|tune|coord|qp|report|health))");
  ck_assert_int_eq(one("AUTOHA_LOG_FILE", "logs/%h-%r.log", &s, err, sizeof err), 0);
  ck_assert_str_eq(s.log_file, "logs/%h-%r.log");
  ck_assert_int_eq(one("AUTOHA_LOG_FILE", "logs/%x.log", &s, err, sizeof err), -1);
  ck_assert_ptr_nonnull(strstr(err, "invalid value for AUTOHA_LOG_FILE: 'logs/%x.log'"));
  ck_assert_int_eq(one("AUTOHA_LOG_TIME", "yes", &s, err, sizeof err), 0);
  ck_assert_int_eq(s.log_time, 1);
}
END_TEST

/* A configuration error is printed once per process, however often the settings are asked for,
 * and it already goes to AUTOHA_LOG_FILE and carries the prefix. */
START_TEST(config_error_once_into_log_file) {
  char dir[] = "/tmp/ah_envlog_XXXXXX", tmpl[128], text[4096];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(tmpl, sizeof tmpl, "%s/p%%p.log", dir);
  setenv("AUTOHA_LOG_FILE", tmpl, 1);
  setenv("AUTOHA_TUNE_BUDGET", "lots", 1);
  for (int i = 0; i < 3; i++) ah_env_settings();
  char path[160];
  snprintf(path, sizeof path, "%s/p%d.log", dir, (int)getpid());
  FILE *f = fopen(path, "r");
  ck_assert_ptr_nonnull(f);
  size_t n = fread(text, 1, sizeof text - 1, f);
  text[n] = 0;
  fclose(f);
  ck_assert_int_eq(count_lines(text), 1);
  ck_assert_ptr_nonnull(
      strstr(text, "] autoha ERROR env: invalid value for AUTOHA_TUNE_BUDGET: 'lots'"));
}
END_TEST

START_TEST(nearest_names) {
  ck_assert_str_eq(ah_env_nearest("AUTOHA_MDOE"), "AUTOHA_MODE");
  ck_assert_str_eq(ah_env_nearest("AUTOHA_OVERIDE"), "AUTOHA_OVERRIDE");
  ck_assert_str_eq(ah_env_nearest("autoha_profile"), "AUTOHA_PROFILE");
  ck_assert_str_eq(ah_env_nearest("AUTOHA_REPORT_INTERVAL"), "AUTOHA_REPORT_INTERVAL_S");
  ck_assert_str_eq(ah_env_nearest("AUTOHA_QP_PORT"), "AUTOHA_QP_SPORT");
  ck_assert_ptr_null(ah_env_nearest("AUTOHA_SOMETHING_ELSE_ENTIRELY"));
  ck_assert_ptr_null(ah_env_nearest(NULL));
}
END_TEST

START_TEST(process_settings_once) {
  setenv("AUTOHA_MODE", "observe", 1);
  setenv("AUTOHA_LOG", "error", 1);
  const ah_settings_t *a = ah_env_settings();
  setenv("AUTOHA_MODE", "fixed", 1);
  const ah_settings_t *b = ah_env_settings();
  ck_assert_ptr_eq(a, b);
  ck_assert_int_eq(b->mode, AH_MODE_OBSERVE); /* parsed once, never rewritten */
  ck_assert_int_eq(ah_log_level(), AH_LOG_ERROR);
}
END_TEST

/* Reads a whole file (static buffer). */
static const char *slurp(const char *path) {
  static char buf[1 << 17];
  FILE *f = fopen(path, "r");
  ck_assert_msg(f != NULL, "cannot open %s", path);
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  return buf;
}

START_TEST(env_print) {
  char *envp[] = {"AUTOHA_MODE=fixed", "AUTOHA_TUNE_BUDGET=lots", NULL};
  char *out = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&out, &len);
  capture_begin();
  ah_env_print(f, envp, 0);
  capture_end();
  fclose(f);
  /* A first line naming the build, then one line per variable. */
  ck_assert_int_eq(count_lines(out), ah_env_var_count() + 1);
  char head[128];
  snprintf(head, sizeof head, "# autoha %s\n", ah_version());
  ck_assert_int_eq(strncmp(out, head, strlen(head)), 0);
  ck_assert_ptr_nonnull(strstr(out, "AUTOHA_MODE=fixed "));
  ck_assert_ptr_nonnull(
      strstr(out, "What autoha does with each collective. (set; default: tune)\n"));
  ck_assert_ptr_nonnull(strstr(out, "AUTOHA_TUNE_BUDGET=180 "));
  ck_assert_ptr_nonnull(strstr(out, "(INVALID 'lots' ignored; default: 180)"));
  ck_assert_ptr_nonnull(strstr(out, "AUTOHA_ENABLE=1 "));
  ck_assert_ptr_nonnull(strstr(out, "# Turns autoha on. (default)\n"));
  free(out);
  f = open_memstream(&out, &len);
  capture_begin();
  ah_env_print(f, envp, 1);
  capture_end();
  fclose(f);
  for (int i = 0; i < ah_env_var_count(); i++) {
    char syn[512];
    snprintf(syn, sizeof syn, "# syntax:  %s\n", ah_env_var_get(i)->syntax);
    ck_assert_ptr_nonnull(strstr(out, syn));
  }
  ck_assert_ptr_nonnull(strstr(out, "AUTOHA_QP_TC=nccl    # default\n"));
  free(out);
}
END_TEST

/* docs/environment.md must hold exactly the section the table generates, and name no AUTOHA_*
 * variable the table lacks. */
START_TEST(doc_agrees_with_table) {
  const char *doc = slurp(AUTOHA_SOURCE_DIR "/docs/environment.md");
  char *gen = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&gen, &len);
  ah_env_doc_markdown(f);
  fclose(f);
  const char *b = strstr(doc, "<!-- env-table:begin -->");
  const char *e = strstr(doc, "<!-- env-table:end -->");
  ck_assert_msg(b && e && e > b, "docs/environment.md lacks the env-table markers");
  ck_assert_msg(
      !strstr(b + 1, "<!-- env-table:begin -->") && !strstr(e + 1, "<!-- env-table:end -->"),
      "docs/environment.md holds an env-table marker twice (a pasted section's leftovers)");
  e += strlen("<!-- env-table:end -->\n");
  size_t dlen = (size_t)(e - b);
  if (dlen != len || memcmp(b, gen, len) != 0) {
    size_t i = 0;
    while (i < len && i < dlen && b[i] == gen[i]) i++;
    ck_abort_msg(
        "docs/environment.md differs from the table at byte %zu of the section: doc has "
        "'%.60s', table gives '%.60s' (regenerate with `autoha env --markdown`)",
        i, b + i, gen + i);
  }
  free(gen);
  for (const char *p = doc; (p = strstr(p, "AUTOHA_")) != NULL; p++) {
    char name[64];
    size_t n = 0;
    while ((isupper((unsigned char)p[n]) || isdigit((unsigned char)p[n]) || p[n] == '_') && n < 63)
      n++;
    memcpy(name, p, n);
    name[n] = 0;
    if (strcmp(name, "AUTOHA_REPOT") == 0 || strcmp(name, "AUTOHA_") == 0)
      continue; /* the typo example */
    ck_assert_msg(ah_env_var_find(name) != NULL,
                  "docs/environment.md names %s, which the table lacks", name);
  }
  /* And every row is documented. */
  for (int i = 0; i < ah_env_var_count(); i++) {
    char head[96];
    snprintf(head, sizeof head, "\n### %s\n", ah_env_var_get(i)->name);
    ck_assert_msg(strstr(doc, head) != NULL, "docs/environment.md has no section for %s",
                  ah_env_var_get(i)->name);
  }
}
END_TEST

int main(void) {
  const TTest *const tests[] = {defaults_parse,
                                typed_parsers,
                                override_keeps_good_rules,
                                parse_environment_logs,
                                invalid_values_are_logged_escaped,
                                log_variables,
                                config_error_once_into_log_file,
                                nearest_names,
                                process_settings_once,
                                env_print,
                                doc_agrees_with_table};
  return ah_check_main("tuner_env", (ah_check_case_t){.name = "env", .timeout = 10}, tests,
                       AH_CHECK_COUNT(tests));
}
