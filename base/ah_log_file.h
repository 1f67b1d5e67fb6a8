/* ah_log_file.h: AUTOHA_LOG_FILE — the log lines of a process go to a file named from a template
 * (%h host, %p pid, %r the process's rank, %j the job, %% a percent sign; base/ah_template.h's
 * template code), one file per process, instead of stderr.
 *
 * Note that a template naming %r cannot be expanded before the process knows its rank (its first
 * communicator): until then lines are held in memory (ah_log_set_fd(AH_LOG_FD_HOLD)) and the file,
 * once opened, starts with them. A process that never learns a rank writes them at exit, %r being
 * "all". */
#ifndef AH_LOG_FILE_H
#define AH_LOG_FILE_H

#include <stddef.h>

/* Sends the process's log lines to the file `tmpl` names ("" or NULL: stderr, nothing done).
 * Returns 0 (opened, or held until the rank is known), or -1 with err set when the template does
 * not expand or the file cannot be opened (lines stay on stderr). Call once, before any rank is
 * known (the env table does, when it parses AUTOHA_LOG_FILE). */
int ah_log_file_start(const char *tmpl, char *err, size_t errlen);

/* The process's rank is known: opens the file whose name was waiting for it. Only the first call
 * with rank >= 0 does anything, so the shim calls it at every communicator's creation. */
void ah_log_file_rank(int rank);

/* The path the log file was opened at ("" when lines go to stderr or are still held). */
const char *ah_log_file_path(void);

#endif
