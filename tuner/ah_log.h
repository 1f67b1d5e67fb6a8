/* ah_log.h: autoha's log lines — "autoha: <host> r<rank>: <level>: message" on stderr, filtered by
 * AUTOHA_LOG=error|warn|info|debug (default warn).
 *
 * Note that logging never changes errno and never allocates: a guest library must leave the
 * application's state as it found it. Lines are written with one write(2) so lines from several
 * ranks of a process do not interleave. */
#ifndef AH_LOG_H
#define AH_LOG_H

enum { AH_LOG_ERROR = 0, AH_LOG_WARN = 1, AH_LOG_INFO = 2, AH_LOG_DEBUG = 3 };

/* Current threshold (reads AUTOHA_LOG once). */
int ah_log_level(void);
/* Sets the threshold (tests, or the env table after it validated AUTOHA_LOG). */
void ah_log_set_level(int level);
/* Sets the rank shown in log lines of the calling thread (-1: none). */
void ah_log_set_rank(int rank);

void ah_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Logs at most `cap` times per call site; the last permitted line says further ones are
 * suppressed. Usage: AH_LOG_CAPPED(3, AH_LOG_WARN, "...", ...). */
#define AH_LOG_CAPPED(cap, level, ...)                                                             \
  do {                                                                                             \
    static _Atomic int ah_log_count_;                                                              \
    int ah_n_ = ah_log_count_++;                                                                   \
    if (ah_n_ < (cap)) ah_log((level), __VA_ARGS__);                                               \
    if (ah_n_ == (cap)-1) ah_log((level), "(further messages like the last are suppressed)");      \
  } while (0)

#endif
