/* ah_check.h: the one way every Check test program runs its suite — in CK_NORMAL verbosity (only
 * failures are printed), with the fork mode Check chooses (CK_FORK unless the environment says
 * otherwise), and an exit status CTest reads: 0 when every test passed, 1 otherwise. */
#ifndef AH_CHECK_H
#define AH_CHECK_H

#include <check.h>
#include <stddef.h>

/* Runs every case of s, frees the runner (and with it s), returns the process exit status. */
static inline int ah_check_run(Suite *s) {
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}

/* The whole main of a program with one suite of one case: its tests (START_TEST's names) added in
 * order, run, and the exit status returned. */
static inline int ah_check_main(const char *suite, const char *tcase, const TTest *const tests[],
                                size_t n) {
  Suite *s = suite_create(suite);
  TCase *tc = tcase_create(tcase);
  for (size_t i = 0; i < n; i++) tcase_add_test(tc, tests[i]);
  suite_add_tcase(s, tc);
  return ah_check_run(s);
}

#endif
