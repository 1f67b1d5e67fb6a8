/* Log lines with the autoha: prefix, the host and the rank, one write(2) each. The threshold comes
 * from AUTOHA_LOG, read once; an invalid value is itself reported once and the default kept. */
#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "ah_log.h"

static _Atomic int log_level = -1;
static _Thread_local int log_rank = -1;

static const char *level_names[] = {"error", "warn", "info", "debug"};

static int parse_level(const char *s) {
  for (int i = 0; i < 4; i++)
    if (strcasecmp(s, level_names[i]) == 0) return i;
  return -1;
}

int ah_log_level(void) {
  int l = atomic_load_explicit(&log_level, memory_order_relaxed);
  if (l >= 0) return l;
  const char *s = getenv("AUTOHA_LOG");
  int parsed = s && *s ? parse_level(s) : AH_LOG_WARN;
  int expected = -1;
  atomic_compare_exchange_strong(&log_level, &expected, parsed < 0 ? AH_LOG_WARN : parsed);
  if (parsed < 0 && expected == -1)
    ah_log(AH_LOG_ERROR, "invalid value for AUTOHA_LOG: '%s' (expected error|warn|info|debug); "
           "using warn", s);
  return atomic_load(&log_level);
}

void ah_log_set_level(int level) {
  if (level >= AH_LOG_ERROR && level <= AH_LOG_DEBUG) atomic_store(&log_level, level);
}

void ah_log_set_rank(int rank) { log_rank = rank; }

void ah_log(int level, const char *fmt, ...) {
  if (level > ah_log_level()) return;
  int saved = errno;
  char line[1024], host[64] = "?";
  if (gethostname(host, sizeof host) != 0) strcpy(host, "?");
  host[sizeof host - 1] = 0;
  int n = log_rank >= 0
              ? snprintf(line, sizeof line, "autoha: %s r%d: %s: ", host, log_rank, level_names[level])
              : snprintf(line, sizeof line, "autoha: %s pid %d: %s: ", host, (int)getpid(),
                         level_names[level]);
  if (n < 0) n = 0;
  va_list ap;
  va_start(ap, fmt);
  int m = vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
  va_end(ap);
  size_t len = m < 0 ? (size_t)n : (size_t)n + (size_t)m;
  if (len > sizeof line - 2) len = sizeof line - 2;
  line[len++] = '\n';
  (void)!write(STDERR_FILENO, line, len);
  errno = saved;
}
