/* The metrics file's writer (tuner/ah_metrics.c): label values escaped as the Prometheus text
 * format wants (backslash, double quote, newline; invalid UTF-8 made visible), never cut inside an
 * escape or a character; every family under its HELP and TYPE lines; a hostile host name stays
 * inside its label; the file written whole, with no temporary file left. */
#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ah_check.h"
#include "ah_file.h"
#include "ah_log.h"
#include "ah_metrics.h"

START_TEST(label_values_are_escaped) {
  char out[64];
  ck_assert_str_eq(ah_metrics_label_escape(out, sizeof out, "plain"), "plain");
  ck_assert_str_eq(ah_metrics_label_escape(out, sizeof out, "a\"b"), "a\\\"b");
  ck_assert_str_eq(ah_metrics_label_escape(out, sizeof out, "a\\b"), "a\\\\b");
  ck_assert_str_eq(ah_metrics_label_escape(out, sizeof out, "a\nb"), "a\\nb");
  ck_assert_str_eq(ah_metrics_label_escape(out, sizeof out, "\"\\\n"), "\\\"\\\\\\n");
  /* a stray byte becomes \xNN (ah_report_text_copy), whose backslash is escaped in turn */
  ck_assert_str_eq(ah_metrics_label_escape(out, sizeof out, "a\xff"), "a\\\\xff");
  ck_assert_str_eq(ah_metrics_label_escape(out, sizeof out, "h\xc3\xa9"), "h\xc3\xa9");
  ck_assert_str_eq(ah_metrics_label_escape(out, sizeof out, NULL), "");
}
END_TEST

START_TEST(a_short_buffer_never_cuts_an_escape_or_a_character) {
  char out[4];
  ck_assert_str_eq(ah_metrics_label_escape(out, sizeof out, "ab\"c"), "ab"); /* not ab\ */
  ck_assert_str_eq(ah_metrics_label_escape(out, sizeof out, "ab\xc3\xa9"), "ab");
  ck_assert_str_eq(ah_metrics_label_escape(out, sizeof out, "\\\\"), "\\\\");
  char one[1];
  ck_assert_str_eq(ah_metrics_label_escape(one, sizeof one, "x"), "");
}
END_TEST

/* A report of one communicator with one timed key, its host name hostile. */
static ah_report_t *report_make(void) {
  static ah_report_t r;
  static ah_report_key_t key;
  static ah_report_comm_t comm;
  memset(&r, 0, sizeof r);
  memset(&key, 0, sizeof key);
  snprintf(r.host, sizeof r.host, "no\"de\\1\nx");
  snprintf(r.job, sizeof r.job, "42");
  snprintf(r.mode, sizeof r.mode, "tune");
  r.pid = 7;
  r.rank = 3;
  r.time_s = 1.7e9;
  key.coll = 0; /* the first collective ah_coll_name knows */
  key.bin = 20;
  key.calls = 40;
  key.applied.calls = key.applied.timed = 10;
  key.applied.us_total = 1000;        /* 100 us each */
  key.applied.bytes_total = 10 * 1e6; /* 1 MB each */
  key.applied.cfg.algo = key.applied.cfg.proto = -1;
  key.nccl_default = key.applied;
  comm.id = 0xabc;
  comm.nranks = 2;
  comm.nkeys = 1;
  comm.keys = &key;
  r.ncomms = 1;
  r.comms = &comm;
  r.health_counts[5] = 2; /* two stragglers */
  r.ncoords = r.ncoords_alive = 1;
  return &r;
}

START_TEST(every_family_has_help_and_type_and_labels_stay_inside) {
  char *t = ah_metrics_to_string(report_make());
  ck_assert_ptr_nonnull(t);
  ck_assert_ptr_nonnull(strstr(t, "host=\"no\\\"de\\\\1\\nx\""));
  ck_assert_ptr_nonnull(strstr(t, "autoha_calls_total{"));
  ck_assert_ptr_nonnull(strstr(t, "kind=\"straggler\"} 2\n"));
  ck_assert_ptr_nonnull(strstr(t, "autoha_coordinator_connected{"));
  ck_assert_ptr_nonnull(strstr(t, "choice=\"applied\"} 0.0001\n"));
  /* 1 MB in 100 us = 1e10 B/s algbw */
  ck_assert_ptr_nonnull(strstr(t, "autoha_busbw_bytes_per_second{"));
  /* every sample line is of the family the last TYPE line named, and no raw newline sits in one */
  char family[128] = "";
  int samples = 0;
  for (char *line = strtok(t, "\n"); line; line = strtok(NULL, "\n")) {
    if (strncmp(line, "# HELP ", 7) == 0) continue;
    if (strncmp(line, "# TYPE ", 7) == 0) {
      ck_assert_int_eq(sscanf(line + 7, "%127s", family), 1);
      continue;
    }
    ck_assert_msg(line[0] != '#', "stray comment: %s", line);
    ck_assert_msg(
        family[0] && strncmp(line, family, strlen(family)) == 0 && line[strlen(family)] == '{',
        "sample outside its family %s: %s", family, line);
    ck_assert_msg(strstr(line, "host=\"no") && strchr(line, '}'), "bad sample: %s", line);
    samples++;
  }
  ck_assert_int_gt(samples, 15);
  free(t);
}
END_TEST

START_TEST(the_file_is_written_whole_with_no_temporary_left) {
  char dir[] = "/tmp/ah-metrics-XXXXXX", path[128], err[256];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/sub/m.prom", dir);
  ck_assert_int_eq(ah_metrics_write(report_make(), path, err, sizeof err), 0);
  size_t len;
  char *t = ah_file_read(path, 1 << 20, &len, err, sizeof err);
  ck_assert_ptr_nonnull(t);
  ck_assert_int_eq(len > 0 && t[len - 1] == '\n', 1);
  free(t);
  char sub[128];
  snprintf(sub, sizeof sub, "%s/sub", dir);
  DIR *d = opendir(sub);
  ck_assert_ptr_nonnull(d);
  int files = 0;
  for (struct dirent *e; (e = readdir(d));)
    if (e->d_name[0] != '.') files++;
  closedir(d);
  ck_assert_int_eq(files, 1);
  /* a folder in the way: an error naming the call, nothing written */
  snprintf(path, sizeof path, "%s/sub/m.prom/x.prom", dir);
  ck_assert_int_eq(ah_metrics_write(report_make(), path, err, sizeof err), -1);
  ck_assert_ptr_nonnull(strstr(err, "failed"));
  snprintf(path, sizeof path, "%s/sub/m.prom", dir);
  unlink(path);
  rmdir(sub);
  rmdir(dir);
}
END_TEST

int main(void) {
  ah_log_set_level(AH_LOG_WARN);
  const TTest *const tests[] = {label_values_are_escaped,
                                a_short_buffer_never_cuts_an_escape_or_a_character,
                                every_family_has_help_and_type_and_labels_stay_inside,
                                the_file_is_written_whole_with_no_temporary_left};
  return ah_check_main("tuner_metrics", (ah_check_case_t){.name = "metrics", .timeout = 10}, tests,
                       AH_CHECK_COUNT(tests));
}
