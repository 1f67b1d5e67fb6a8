/* ah_check.h: the one way every Check test program runs its suite — in CK_NORMAL verbosity (only
 * failures are printed), with the fork mode Check chooses (CK_FORK unless the environment says
 * otherwise), and an exit status CTest reads: 0 when every test passed, 1 otherwise. */
#ifndef AH_CHECK_H
#define AH_CHECK_H

#include <check.h>

/* Runs every case of s, frees the runner (and with it s), returns the process exit status. */
static inline int ah_check_run(Suite *s) {
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}

#endif
