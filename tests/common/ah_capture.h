/* ah_capture.h: what the code under test writes to stderr (fd 2, where ah_log writes) between
 * capture_begin() and capture_end(), for tests that assert a log line. One capture at a time. */
#ifndef AH_CAPTURE_H
#define AH_CAPTURE_H

#include <check.h>
#include <stdio.h>
#include <unistd.h>

static int ah_capture_saved_fd = -1;
static FILE *ah_capture_file;

/* Sends fd 2 to a temporary file until capture_end(). */
static inline void capture_begin(void) {
  fflush(stderr);
  ah_capture_file = tmpfile();
  ck_assert_ptr_nonnull(ah_capture_file);
  ah_capture_saved_fd = dup(2);
  dup2(fileno(ah_capture_file), 2);
}

/* Gives fd 2 back; returns what was written meanwhile (a static buffer, the first 16 KiB). */
static inline const char *capture_end(void) {
  static char buf[16384];
  fflush(stderr);
  dup2(ah_capture_saved_fd, 2);
  close(ah_capture_saved_fd);
  rewind(ah_capture_file);
  size_t n = fread(buf, 1, sizeof buf - 1, ah_capture_file);
  buf[n] = 0;
  fclose(ah_capture_file);
  return buf;
}

#endif
