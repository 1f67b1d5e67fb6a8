/* ah_check.h: the one way every Check test program runs its suite — in CK_NORMAL verbosity (only
 * failures are printed), with the fork mode Check chooses (CK_FORK unless the environment says
 * otherwise), and an exit status CTest reads: 0 when every test passed, 1 otherwise. A case is
 * described by one ah_check_case_t and a list of its tests, so a program's main is that list and
 * one call, not Check's suite/case/timeout/fixture calls written out again. */
#ifndef AH_CHECK_H
#define AH_CHECK_H

#include <check.h>
#include <stddef.h>

/* One case of a suite. */
typedef struct {
  const char *name;     /* as CK_RUN_CASE selects it */
  double timeout;       /* seconds for each test: every case has one, so a hang fails fast */
  SFun setup, teardown; /* the checked fixture run around each test, or NULL */
} ah_check_case_t;

/* Runs every case of s, frees the runner (and with it s), returns the process exit status. */
static inline int ah_check_run(Suite *s) {
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}

/* Adds to s the case c holding the n tests (START_TEST's names) in order. */
static inline void ah_check_add(Suite *s, ah_check_case_t c, const TTest *const tests[], size_t n) {
  TCase *tc = tcase_create(c.name);
  tcase_set_timeout(tc, c.timeout);
  if (c.setup || c.teardown) tcase_add_checked_fixture(tc, c.setup, c.teardown);
  for (size_t i = 0; i < n; i++) tcase_add_test(tc, tests[i]);
  suite_add_tcase(s, tc);
}

/* The whole main of a program with one suite of one case: the case added, run, and the exit
 * status returned. */
static inline int ah_check_main(const char *suite, ah_check_case_t c, const TTest *const tests[],
                                size_t n) {
  Suite *s = suite_create(suite);
  ah_check_add(s, c, tests, n);
  return ah_check_run(s);
}

/* The count of an array of tests, for the n of ah_check_add and ah_check_main. */
#define AH_CHECK_COUNT(tests) (sizeof(tests) / sizeof((tests)[0]))

#endif
