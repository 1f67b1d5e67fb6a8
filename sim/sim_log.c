/* Logging for the simulator: one line per message on stderr, prefixed "ncclsim:" with the pid, so
 * lines from several rank processes can be told apart. errno is preserved across a log call. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sim_internal.h"

static int level = -1; /* 0 warn, 1 info; racing first calls compute the same value */

void sim_log_reset(void) { level = -1; }

static int log_level(void) {
  if (level < 0) {
    const char *s = getenv("NCCLSIM_DEBUG");
    level = (s && (strcasecmp(s, "INFO") == 0 || strcasecmp(s, "TRACE") == 0)) ? 1 : 0;
  }
  return level;
}

static __attribute__((format(printf, 2, 0))) void log_line(const char *kind, const char *fmt,
                                                           va_list ap) {
  int saved = errno;
  char buf[1024];
  int n = snprintf(buf, sizeof buf, "ncclsim: [pid %d] %s: ", (int)getpid(), kind);
  if (n < 0) n = 0;
  if ((size_t)n < sizeof buf) vsnprintf(buf + n, sizeof buf - (size_t)n, fmt, ap);
  fprintf(stderr, "%s\n", buf);
  errno = saved;
}

void sim_log_warn(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  log_line("WARN", fmt, ap);
  va_end(ap);
}

void sim_log_info(const char *fmt, ...) {
  if (log_level() < 1) return;
  va_list ap;
  va_start(ap, fmt);
  log_line("INFO", fmt, ap);
  va_end(ap);
}
