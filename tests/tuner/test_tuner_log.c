/* ah_log's lines and AUTOHA_LOG_FILE: the NCCL-shaped prefix, the rank, timestamps, the subsystem
 * filter and its grammar, the file named by rank (lines held until the rank is known), and NCCL's
 * logger receiving lines up to info with the TUNING flag whatever AUTOHA_LOG says. Check forks
 * each test, so the process-wide log state starts fresh every time. */
#include <check.h>
#include <pthread.h>
#include <regex.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ah_capture.h"
#include "ah_check.h"
#include "ah_log.h"
#include "ah_quote.h"
#include "ah_log_file.h"

static int matches(const char *text, const char *re) {
  regex_t r;
  ck_assert_int_eq(regcomp(&r, re, REG_EXTENDED | REG_NEWLINE | REG_NOSUB), 0);
  int ok = regexec(&r, text, 0, NULL, 0) == 0;
  regfree(&r);
  return ok;
}

START_TEST(prefix_names_host_pid_tid_rank) {
  ah_log_set_level(AH_LOG_INFO);
  capture_begin();
  ah_log_at(AH_SUB_TUNE, AH_LOG_INFO, "before the rank %d", 1);
  ah_log_set_rank(3);
  ah_log_at(AH_SUB_COORD, AH_LOG_WARN, "after");
  ah_log_at(AH_SUB_TUNE, AH_LOG_DEBUG, "below the threshold");
  const char *log = capture_end();
  char host[64];
  gethostname(host, sizeof host);
  char re[256];
  snprintf(re, sizeof re, "^%s:%d:[0-9]+ \\[-\\] autoha INFO tune: before the rank 1$", host,
           (int)getpid());
  ck_assert_msg(matches(log, re), "no line matches %s in:\n%s", re, log);
  snprintf(re, sizeof re, "^%s:%d:[0-9]+ \\[3\\] autoha WARN coord: after$", host, (int)getpid());
  ck_assert_msg(matches(log, re), "no line matches %s in:\n%s", re, log);
  ck_assert_ptr_null(strstr(log, "below the threshold"));
}
END_TEST

/* A line about a device's work (a queue pair) names that device's rank, whichever thread writes
 * it: the rank in the largest communicator the device is in, the process's ranks while the device
 * has none. */
START_TEST(device_line_names_its_rank) {
  ah_log_set_level(AH_LOG_INFO);
  ah_log_set_proc_rank(4, 8);
  ah_log_set_proc_rank(5, 8);
  ah_log_set_dev_rank(1, 5, 8);
  ah_log_set_dev_rank(1, 0, 2); /* a split's rank on the same device: the world's stays */
  ah_log_set_dev_rank(0, 4, 8);
  capture_begin();
  ah_log_dev_at(AH_SUB_QP, AH_LOG_WARN, 1, "qp of dev %d", 1);
  ah_log_dev_at(AH_SUB_QP, AH_LOG_WARN, 0, "qp of dev %d", 0);
  ah_log_dev_at(AH_SUB_QP, AH_LOG_WARN, 7, "qp of an unknown device");
  ah_log_dev_at(AH_SUB_QP, AH_LOG_WARN, -1, "qp of no device");
  const char *log = capture_end();
  ck_assert_msg(matches(log, "^[^ ]+ \\[5\\] autoha WARN qp: qp of dev 1$"), "%s", log);
  ck_assert_msg(matches(log, "^[^ ]+ \\[4\\] autoha WARN qp: qp of dev 0$"), "%s", log);
  ck_assert_msg(matches(log, "^[^ ]+ \\[4-5\\] autoha WARN qp: qp of an unknown device$"), "%s",
                log);
  ck_assert_msg(matches(log, "^[^ ]+ \\[4-5\\] autoha WARN qp: qp of no device$"), "%s", log);
}
END_TEST

START_TEST(timestamp_in_front) {
  ah_log_set_time(1);
  capture_begin();
  ah_log(AH_LOG_ERROR, "stamped");
  const char *log = capture_end();
  ck_assert_msg(
      matches(
          log,
          "^\\[[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{6}\\] [^ ]+:[0-9]+:[0-9]+ "
          "\\[-\\] autoha ERROR init: stamped$"),
      "%s", log);
}
END_TEST

/* A refused value quoted in a message may hold control bytes (a newline, a terminal escape): the
 * line stays one line, each such byte shown as '?'. */
START_TEST(control_bytes_quoted_safely) {
  ah_log_set_level(AH_LOG_INFO);
  capture_begin();
  ah_log(AH_LOG_ERROR, "refused '%s'", "a\nb\x1b[31mc\x7f");
  const char *log = capture_end();
  ck_assert_msg(matches(log, "autoha ERROR init: refused 'a\\?b\\?\\[31mc\\?'$"), "%s", log);
  ck_assert_int_eq((int)(strchr(log, '\n') - log), (int)strlen(log) - 1); /* one line */
}
END_TEST

/* An outside value quoted for a line (ah_quote): control characters, DEL and bytes that are not
 * UTF-8 escaped, valid UTF-8 kept, and a value too long for the buffer cut with "..." between two
 * whole pieces. */
START_TEST(values_quoted_with_escapes) {
  char out[64];
  ck_assert_str_eq(ah_quote("tu\nne\t'x'\\", out, sizeof out), "tu\\nne\\t\\'x\\'\\\\");
  ck_assert_str_eq(ah_quote("a\x1b[31m\x7f\xff\xc3(", out, sizeof out),
                   "a\\x1b[31m\\x7f\\xff\\xc3(");
  ck_assert_str_eq(ah_quote("gr\xc3\xbc\xc3\x9f \xe2\x82\xac", out, sizeof out),
                   "gr\xc3\xbc\xc3\x9f \xe2\x82\xac");
  ck_assert_str_eq(
      ah_quote("\xed\xa0\x80\xc0\xaf", out, sizeof out), /* a surrogate, an overlong / */
      "\\xed\\xa0\\x80\\xc0\\xaf");
  ck_assert_str_eq(ah_quote(NULL, out, sizeof out), "");
  char small[10];
  ck_assert_str_eq(ah_quote("abcdefghijkl", small, sizeof small), "abcdef...");
  ck_assert_str_eq(ah_quote("abcdefghi", small, sizeof small), "abcdefghi");
  ck_assert_str_eq(ah_quote("abcde\n\n\n", small, sizeof small), "abcde..."); /* no half escape */
}
END_TEST

START_TEST(subsystem_grammar) {
  unsigned m;
  char err[128], buf[128];
  ck_assert_int_eq(ah_log_subsys_parse("tune,COORD", &m, err, sizeof err), 0);
  ck_assert_uint_eq(m, (1u << AH_SUB_TUNE) | (1u << AH_SUB_COORD));
  ck_assert_str_eq(ah_log_subsys_format(m, buf, sizeof buf), "tune,coord");
  ck_assert_int_eq(ah_log_subsys_parse("^qp,health", &m, err, sizeof err), 0);
  ck_assert_uint_eq(m, AH_LOG_SUBSYS_ALL & ~((1u << AH_SUB_QP) | (1u << AH_SUB_HEALTH)));
  ck_assert_str_eq(ah_log_subsys_format(m, buf, sizeof buf), "init,env,tune,coord,report");
  ck_assert_int_eq(ah_log_subsys_parse("all", &m, err, sizeof err), 0);
  ck_assert_str_eq(ah_log_subsys_format(m, buf, sizeof buf), "all");
  m = 77;
  ck_assert_int_eq(ah_log_subsys_parse("tune,tunning", &m, err, sizeof err), -1);
  ck_assert_str_eq(err, "unknown subsystem 'tunning'");
  ck_assert_uint_eq(m, 77); /* untouched on error */
  ck_assert_int_eq(ah_log_subsys_parse("", &m, err, sizeof err), -1);
}
END_TEST

START_TEST(subsystem_filter) {
  ah_log_set_level(AH_LOG_INFO);
  ah_log_set_subsys(AH_LOG_SUBSYS_ALL & ~(1u << AH_SUB_COORD)); /* ^coord */
  capture_begin();
  ah_log_at(AH_SUB_COORD, AH_LOG_ERROR, "hub line");
  ah_log_at(AH_SUB_TUNE, AH_LOG_INFO, "tune line");
  const char *log = capture_end();
  ck_assert_ptr_null(strstr(log, "hub line"));
  ck_assert_ptr_nonnull(strstr(log, "autoha INFO tune: tune line\n"));
}
END_TEST

static char tmpdir[64];

static const char *slurp(const char *path) {
  static char buf[8192];
  FILE *f = fopen(path, "r");
  if (!f) return NULL;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = 0;
  fclose(f);
  return buf;
}

START_TEST(file_named_by_rank_holds_early_lines) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/ah_log_XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(tmpdir));
  char tmpl[128], path[160], err[256];
  snprintf(tmpl, sizeof tmpl, "%s/sub/%%r-%%%%.log", tmpdir);
  ck_assert_int_eq(ah_log_file_start(tmpl, err, sizeof err), 0);
  capture_begin();
  ah_log(AH_LOG_WARN, "early line");
  ah_log_file_rank(-1); /* not a rank: still held */
  ah_log_file_rank(5);
  ah_log(AH_LOG_WARN, "late line");
  ah_log_file_rank(6); /* the file is named once */
  ah_log(AH_LOG_WARN, "later line");
  const char *on_stderr = capture_end();
  ck_assert_str_eq(on_stderr, "");
  snprintf(path, sizeof path, "%s/sub/5-%%.log", tmpdir);
  ck_assert_str_eq(ah_log_file_path(), path);
  const char *text = slurp(path);
  ck_assert_ptr_nonnull(text);
  const char *a = strstr(text, "early line\n"), *b = strstr(text, "late line\n"),
             *c = strstr(text, "later line\n");
  ck_assert_ptr_nonnull(a);
  ck_assert_ptr_nonnull(b);
  ck_assert_ptr_nonnull(c);
  ck_assert(a < b && b < c);
  snprintf(path, sizeof path, "%s/sub/6-%%.log", tmpdir);
  ck_assert_int_ne(access(path, F_OK), 0);
}
END_TEST

START_TEST(file_template_errors) {
  char err[256];
  ck_assert_int_eq(ah_log_file_start("/tmp/x-%q.log", err, sizeof err), -1);
  ck_assert_ptr_nonnull(strstr(err, "AUTOHA_LOG_FILE: '%q' at position"));
  ck_assert_int_eq(ah_log_file_start("/proc/no/such/dir/x.log", err, sizeof err), -1);
  ck_assert_ptr_nonnull(strstr(err, "AUTOHA_LOG_FILE"));
  capture_begin(); /* lines stay on stderr */
  ah_log(AH_LOG_ERROR, "still here");
  ck_assert_ptr_nonnull(strstr(capture_end(), "still here"));
}
END_TEST

static int nccl_calls, nccl_level;
static unsigned long nccl_flags;
static char nccl_text[512];

static __attribute__((format(printf, 5, 6))) void fake_nccl_logger(int level, unsigned long flags,
                                                                   const char *file, int line,
                                                                   const char *fmt, ...) {
  (void)file;
  (void)line;
  nccl_calls++;
  nccl_level = level;
  nccl_flags = flags;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(nccl_text, sizeof nccl_text, fmt, ap);
  va_end(ap);
}

START_TEST(nccl_logger_gets_info_lines) {
  ah_log_set_level(AH_LOG_WARN);
  ah_log_set_rank(2);
  ah_log_set_nccl(fake_nccl_logger);
  ck_assert_int_eq(ah_log_nccl_set(), 1);
  capture_begin();
  ah_log_at(AH_SUB_TUNE, AH_LOG_INFO, "a decision");
  const char *log = capture_end();
  ck_assert_str_eq(log, "");       /* AUTOHA_LOG=warn: not on stderr ... */
  ck_assert_int_eq(nccl_calls, 1); /* ... but NCCL's logger decides for its own stream */
  ck_assert_int_eq(nccl_level, 3);
  ck_assert_uint_eq(nccl_flags, 0x40);
  ck_assert_str_eq(nccl_text, "autoha [2] tune: a decision");
  capture_begin();
  ah_log_at(AH_SUB_QP, AH_LOG_ERROR, "broken");
  ah_log_at(AH_SUB_QP, AH_LOG_DEBUG, "chatter");
  log = capture_end();
  /* an error is autoha's own line, once: NCCL_DEBUG=WARN would otherwise show it twice */
  ck_assert_ptr_nonnull(strstr(log, "autoha ERROR qp: broken"));
  ck_assert_int_eq(nccl_calls, 1);
  ck_assert_str_eq(nccl_text, "autoha [2] tune: a decision");
}
END_TEST

/* A thread with no rank of its own (the HA thread, NCCL's proxy, one thread driving 4 GPUs) names
 * the process's ranks in its largest communicator; a split's ranks do not replace them. */
static void *log_from_other_thread(void *arg) {
  (void)arg;
  ah_log_at(AH_SUB_QP, AH_LOG_WARN, "from a thread without a rank");
  return NULL;
}

START_TEST(thread_without_rank_names_process_ranks) {
  capture_begin();
  ah_log_at(AH_SUB_QP, AH_LOG_WARN, "before any communicator");
  int order[] = {2, 0, 3, 1, 2};
  for (int i = 0; i < 5; i++) ah_log_set_proc_rank(order[i], 8);
  ah_log_set_proc_rank(6, 4); /* a split of 4: not the process's world ranks */
  ah_log_at(AH_SUB_QP, AH_LOG_WARN, "four GPUs");
  ah_log_set_rank(3);
  ah_log_at(AH_SUB_TUNE, AH_LOG_WARN, "this thread's rank");
  ah_log_proc_at(AH_SUB_TUNE, AH_LOG_WARN, "for the whole process");
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, log_from_other_thread, NULL), 0);
  pthread_join(t, NULL);
  ah_log_set_proc_rank(9, 16); /* a larger communicator: its rank replaces the set */
  ah_log_proc_at(AH_SUB_TUNE, AH_LOG_WARN, "after a larger one");
  const char *log = capture_end();
  const char *want[] = {" \\[-\\] autoha WARN qp: before any communicator$",
                        " \\[0-3\\] autoha WARN qp: four GPUs$",
                        " \\[3\\] autoha WARN tune: this thread's rank$",
                        " \\[0-3\\] autoha WARN tune: for the whole process$",
                        " \\[0-3\\] autoha WARN qp: from a thread without a rank$",
                        " \\[9\\] autoha WARN tune: after a larger one$"};
  for (size_t i = 0; i < sizeof want / sizeof *want; i++)
    ck_assert_msg(matches(log, want[i]), "no line matches %s in:\n%s", want[i], log);
}
END_TEST

START_TEST(ranks_written_as_ranges) {
  char buf[32];
  int some[] = {5, 0, 2, 6, 2, 7};
  ck_assert_str_eq(ah_log_ranks_format(some, 6, buf, sizeof buf), "0,2,5-7");
  ck_assert_str_eq(ah_log_ranks_format(some, 0, buf, sizeof buf), "-");
  int one[] = {12};
  ck_assert_str_eq(ah_log_ranks_format(one, 1, buf, sizeof buf), "12");
  int spread[] = {0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100};
  ck_assert_str_eq(ah_log_ranks_format(spread, 11, buf, 16), "11 ranks"); /* too long for 16 */
}
END_TEST

int main(void) {
  const TTest *const tests[] = {values_quoted_with_escapes,
                                prefix_names_host_pid_tid_rank,
                                device_line_names_its_rank,
                                timestamp_in_front,
                                control_bytes_quoted_safely,
                                subsystem_grammar,
                                subsystem_filter,
                                file_named_by_rank_holds_early_lines,
                                file_template_errors,
                                nccl_logger_gets_info_lines,
                                thread_without_rank_names_process_ranks,
                                ranks_written_as_ranges};
  return ah_check_main("tuner_log", (ah_check_case_t){.name = "log", .timeout = 20}, tests,
                       AH_CHECK_COUNT(tests));
}
