/* autoha_cli.h: the subcommands of the `autoha` command that live in files of their own. */
#ifndef AUTOHA_CLI_H
#define AUTOHA_CLI_H

/* `autoha status [FILE] [--json]` (autoha_status.c). Returns the exit status. */
int cmd_status(int argc, char **argv);
/* `autoha report --merge [--csv|--json] [--pct N] DIR|FILE...` (autoha_merge.c): argv[0] is the
 * command's name, getopt_long style. Returns the exit status. */
int cmd_report_merge(int argc, char **argv);

/* `autoha --version` (autoha_run.c): prints "autoha <version>". Returns 0. */
int cmd_version(void);

/* `autoha lib` (autoha_run.c): prints the absolute path of libautoha.so. Returns the exit status. */
int cmd_lib(int argc, char **argv);

/* `autoha run [--] CMD ARGS...` (autoha_run.c): execs CMD with libautoha.so first on LD_PRELOAD.
 * Returns only on failure, with the exit status (127: CMD not found). */
int cmd_run(int argc, char **argv);

/* The one error line for a bad option that getopt_long returned as c ('?' or ':'; call it with
 * opterr = 0 and a ':' first in the short options): "autoha CMD: unknown option '--x' (see autoha CMD
 * --help)", or "option '--out' needs a value". Returns 2, the exit status for a usage error. */
struct option;
int cli_bad_option(const char *cmd, int c, char **argv, const struct option *opts);

/* The one error line when the npaths paths given read no report: "autoha CMD: no report read from
 * PATH (a report is a .json file, also in a folder's subfolders)", naming the first path. */
void cli_no_report(const char *cmd, char **paths, int npaths);

#endif
