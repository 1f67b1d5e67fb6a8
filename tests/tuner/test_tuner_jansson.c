/* Unit tests of tuner/ah_jansson.c, jansson opened at run time: one scenario per process (the
 * library is opened once per process, so each CTest runs one), named by argv[1]:
 *   missing  AUTOHA_JANSSON's file does not exist: one error naming it, logged once; every report
 *            entry point fails cleanly (no file, no folder), the forwarders return jansson's
 *            error values, and a later path changes nothing
 *   nosym    the file opens but is not jansson (libm.so.6): refused, naming the missing function
 *   real     AUTOHA_JANSSON names the distribution's file (JANSSON_RUNTIME): it is the one
 *            loaded, and a report written and read back keeps its fields
 *   search   no path: the search (beside this program, then the loader's path) finds the
 *            distribution's copy, logging no error for the copy that is not beside it */
#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ah_capture.h"
#include "ah_check.h"
#include "ah_jansson.h"
#include "ah_log.h"
#include "ah_report.h"

#define MISSING "/nonexistent/libjansson.so.4"

static const char *scenario = "missing";
static char dir[256];

static int count_lines(const char *s) {
  int n = 0;
  for (; *s; s++) n += *s == '\n';
  return n;
}

static void report_fill(ah_report_t *r) {
  memset(r, 0, sizeof *r);
  r->rank = 3;
  r->pid = 4242;
  snprintf(r->host, sizeof r->host, "node1");
  snprintf(r->job, sizeof r->job, "job-7");
  snprintf(r->mode, sizeof r->mode, "tune");
  r->nccl_version = 22805;
}

static void make_dir(void) {
  snprintf(dir, sizeof dir, "/tmp/ah-jansson-test-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void remove_dir(void) {
  if (!dir[0]) return;
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", dir);
}

START_TEST(missing_library) {
  ah_jansson_set_path(MISSING);
  capture_begin();
  int first = ah_jansson_ready(), again = ah_jansson_ready();
  const char *log = capture_end();
  ck_assert_int_eq(first, 0);
  ck_assert_int_eq(again, 0);
  ck_assert_msg(count_lines(log) == 1, "not one line: %s", log);
  ck_assert_msg(strstr(log, " ERROR ") && strstr(log, "AUTOHA_JANSSON=" MISSING " (") &&
                    strstr(log, "package libjansson4") && strstr(log, "no report is written"),
                "%s", log);
  ck_assert_msg(strstr(log, "No such file"), "the loader's reason is missing: %s", log);

  /* Every entry point fails at once, logging nothing more. */
  ah_jansson_set_path(JANSSON_RUNTIME); /* too late: loading was decided */
  make_dir();
  char path[512], err[512] = "";
  snprintf(path, sizeof path, "%s/sub/r.json", dir);
  ah_report_t *r = malloc(sizeof *r);
  ck_assert_ptr_nonnull(r);
  report_fill(r);
  capture_begin();
  int w = ah_report_write(r, path, err, sizeof err);
  char *text = ah_report_to_string(r);
  ah_report_t *back = NULL;
  char perr[512] = "", rerr[512] = "";
  int p = ah_report_parse("{\"schema\": 1}", &back, perr, sizeof perr);
  int rd = ah_report_read(path, &back, rerr, sizeof rerr);
  ah_profile_t *prof = NULL;
  int pl = ah_profile_load(path, (size_t)64 << 20, 0, NULL, &prof);
  int ready = ah_jansson_ready();
  log = capture_end();
  ck_assert_int_eq(w, -1);
  ck_assert_msg(strstr(err, "libjansson.so.4") && strstr(err, path), "%s", err);
  ck_assert_ptr_null(text);
  ck_assert_int_eq(p, -1);
  ck_assert_int_eq(rd, -1);
  ck_assert_msg(strstr(perr, "libjansson.so.4") && strstr(rerr, "libjansson.so.4"), "%s / %s", perr,
                rerr);
  ck_assert_int_eq(pl, -1);
  ck_assert_ptr_null(back);
  ck_assert_ptr_null(prof);
  ck_assert_int_eq(ready, 0);
  ck_assert_msg(log[0] == 0, "logged again: %s", log);
  struct stat st;
  ck_assert_msg(stat(path, &st) != 0, "%s was written", path);
  snprintf(path, sizeof path, "%s/sub", dir);
  ck_assert_msg(stat(path, &st) != 0, "%s was made", path);
  free(r);

  /* The forwarders return jansson's error values and touch nothing. */
  json_error_t je;
  ck_assert_ptr_null(json_object());
  ck_assert_ptr_null(json_pack("{s:i}", "a", 1));
  ck_assert_ptr_null(json_loads("{}", 0, &je));
  ck_assert_ptr_null(json_dumps(NULL, 0));
  ck_assert_int_eq(json_object_set_new(NULL, "a", NULL), -1);
  ck_assert_uint_eq(json_array_size(NULL), 0);
  json_decref(NULL);
}
END_TEST

START_TEST(not_jansson) {
  ah_jansson_set_path("libm.so.6");
  capture_begin();
  int ready = ah_jansson_ready();
  const char *log = capture_end();
  ck_assert_int_eq(ready, 0);
  ck_assert_msg(count_lines(log) == 1, "not one line: %s", log);
  ck_assert_msg(strstr(log, "AUTOHA_JANSSON=libm.so.6 (it has no json_object)"), "%s", log);
}
END_TEST

/* A report written and read back through the loaded library keeps its fields. */
static void round_trip(void) {
  make_dir();
  char path[512], err[512];
  snprintf(path, sizeof path, "%s/sub/r.json", dir);
  ah_report_t *r = malloc(sizeof *r);
  ck_assert_ptr_nonnull(r);
  report_fill(r);
  ck_assert_msg(ah_report_write(r, path, err, sizeof err) == 0, "%s", err);
  ah_report_t *back = NULL;
  ck_assert_msg(ah_report_read(path, &back, err, sizeof err) == 0, "%s", err);
  ck_assert_str_eq(back->host, "node1");
  ck_assert_str_eq(back->job, "job-7");
  ck_assert_int_eq(back->rank, 3);
  ck_assert_int_eq(back->nccl_version, 22805);
  ah_report_free(back);
  free(r);
  json_t *j = json_pack("{s:i, s:b}", "a", 7, "t", 1);
  ck_assert_ptr_nonnull(j);
  ck_assert_int_eq(json_integer_value(json_object_get(j, "a")), 7);
  ck_assert(json_is_true(json_object_get(j, "t")));
  json_decref(j);
}

START_TEST(real_library) {
  ah_log_set_level(AH_LOG_INFO);
  ah_jansson_set_path(JANSSON_RUNTIME);
  capture_begin();
  int ready = ah_jansson_ready();
  const char *log = capture_end();
  ck_assert_int_eq(ready, 1);
  ck_assert_msg(strstr(log, "loaded from " JANSSON_RUNTIME "\n") && !strstr(log, " ERROR "), "%s",
                log);
  round_trip();
}
END_TEST

START_TEST(search) {
  ah_log_set_level(AH_LOG_INFO);
  capture_begin();
  int ready = ah_jansson_ready();
  const char *log = capture_end();
  ck_assert_int_eq(ready, 1);
  ck_assert_msg(
      strstr(log, "libjansson.so.4") && strstr(log, "loaded from /") && !strstr(log, " ERROR "),
      "%s", log);
  round_trip();
}
END_TEST

int main(int argc, char **argv) {
  if (argc > 1) scenario = argv[1];
  const TTest *test = strcmp(scenario, "missing") == 0  ? missing_library
                      : strcmp(scenario, "nosym") == 0  ? not_jansson
                      : strcmp(scenario, "real") == 0   ? real_library
                      : strcmp(scenario, "search") == 0 ? search
                                                        : NULL;
  if (!test) {
    fprintf(stderr, "unknown scenario %s (missing, nosym, real, search)\n", scenario);
    return 2;
  }
  const TTest *const tests[] = {test};
  return ah_check_main(
      "tuner_jansson",
      (ah_check_case_t){.name = scenario, .timeout = 20, .setup = NULL, .teardown = remove_dir},
      tests, 1);
}
