/* Whole-file reads (base/ah_file.c), which every profile, report, catalog and topology reader
 * goes through: a FIFO (which would block the open, and the job's ncclCommInitRank with it),
 * /dev/zero, a folder and a file over the bound are refused before a byte is read, each with a
 * reason naming it; a FIFO given as AUTOHA_PROFILE's file costs the profile loader one error line
 * and no wait, and so does a profile over its bound (AUTOHA_PROFILE_MAX_MB), which the line names. */
#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ah_capture.h"
#include "ah_check.h"
#include "ah_file.h"
#include "ah_log.h"
#include "ah_report.h"

static char dir[64];

static void setup(void) {
  snprintf(dir, sizeof dir, "/tmp/ah-file-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

START_TEST(only_regular_files_within_the_bound_are_read) {
  setup();
  char err[160], path[128];
  snprintf(path, sizeof path, "%s/fifo", dir);
  ck_assert_int_eq(mkfifo(path, 0600), 0);
  double t0 = now_s();
  ck_assert_ptr_null(ah_file_read(path, 1 << 20, NULL, err, sizeof err));
  ck_assert_double_lt(now_s() - t0, 1.0); /* no writer ever comes: a blocking open never returns */
  ck_assert_str_eq(err, "not a regular file (a FIFO)");
  unlink(path);
  ck_assert_ptr_null(ah_file_read("/dev/zero", 1 << 20, NULL, err, sizeof err));
  ck_assert_str_eq(err, "not a regular file (a character device)");
  ck_assert_ptr_null(ah_file_read(dir, 1 << 20, NULL, err, sizeof err));
  ck_assert_str_eq(err, "not a regular file (a folder)");
  /* a sparse file of 3 GiB: refused by its size, not after reading up to the bound */
  snprintf(path, sizeof path, "%s/big", dir);
  int fd = open(path, O_CREAT | O_WRONLY, 0600);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(ftruncate(fd, (off_t)3 << 30), 0);
  close(fd);
  t0 = now_s();
  ck_assert_ptr_null(ah_file_read(path, (size_t)1 << 30, NULL, err, sizeof err));
  ck_assert_double_lt(now_s() - t0, 1.0);
  ck_assert_str_eq(err, "larger than 1073741824 bytes (3221225472)");
  unlink(path);
  snprintf(path, sizeof path, "%s/ok", dir);
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fputs("{\"a\": 1}\n", f);
  fclose(f);
  size_t len = 0;
  char *text = ah_file_read(path, 1 << 20, &len, err, sizeof err);
  ck_assert_msg(text != NULL, "%s", err);
  ck_assert_uint_eq(len, 9);
  ck_assert_str_eq(text, "{\"a\": 1}\n");
  free(text);
  unlink(path);
  snprintf(path, sizeof path, "%s/missing", dir);
  ck_assert_ptr_null(ah_file_read(path, 1 << 20, NULL, err, sizeof err));
  ck_assert_str_eq(err, "cannot open: No such file or directory");
  rmdir(dir);
}
END_TEST

START_TEST(a_fifo_profile_is_one_error_and_no_wait) {
  setup();
  char path[128];
  snprintf(path, sizeof path, "%s/profile.json", dir);
  ck_assert_int_eq(mkfifo(path, 0600), 0);
  ah_profile_t *p = NULL;
  capture_begin();
  double t0 = now_s();
  int rc = ah_profile_load(path, (size_t)64 << 20, 0, NULL, &p);
  double took = now_s() - t0;
  const char *log = capture_end();
  ck_assert_int_eq(rc, -1);
  ck_assert_ptr_null(p);
  ck_assert_double_lt(took, 1.0);
  ck_assert_msg(strstr(log, path) && strstr(log, "not a regular file (a FIFO)"), "%s", log);
  int lines = 0;
  for (const char *s = log; *s; s++) lines += *s == '\n';
  ck_assert_int_eq(lines, 1);
  unlink(path);
  rmdir(dir);
}
END_TEST

START_TEST(a_profile_over_its_bound_is_one_error_naming_the_setting) {
  setup();
  char path[128];
  snprintf(path, sizeof path, "%s/profile.json", dir);
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fprintf(f, "{\"schema\": 1, \"pad\": \"");
  for (int i = 0; i < 4096; i++) fputc('x', f);
  fprintf(f, "\"}\n");
  ck_assert_int_eq(fclose(f), 0);
  ah_profile_t *p = NULL;
  capture_begin();
  int rc = ah_profile_load(path, 4096, 0, NULL, &p);
  const char *log = capture_end();
  ck_assert_int_eq(rc, -1);
  ck_assert_ptr_null(p);
  ck_assert_msg(strstr(log, path) && strstr(log, "larger than 4096 bytes") &&
                    strstr(log, "AUTOHA_PROFILE_MAX_MB"),
                "%s", log);
  int lines = 0;
  for (const char *s = log; *s; s++) lines += *s == '\n';
  ck_assert_int_eq(lines, 1);
  /* within the bound the same file is read: it fails later, as a report without comms */
  capture_begin();
  rc = ah_profile_load(path, (size_t)1 << 20, 0, NULL, &p);
  log = capture_end();
  ck_assert_msg(!strstr(log, "larger than"), "%s", log);
  if (rc == 0) ah_profile_free(p);
  unlink(path);
  rmdir(dir);
}
END_TEST

int main(void) {
  ah_log_set_level(AH_LOG_WARN);
  const TTest *const tests[] = {only_regular_files_within_the_bound_are_read,
                                a_fifo_profile_is_one_error_and_no_wait,
                                a_profile_over_its_bound_is_one_error_naming_the_setting};
  return ah_check_main("tuner_file", (ah_check_case_t){.name = "file", .timeout = 10}, tests,
                       AH_CHECK_COUNT(tests));
}
