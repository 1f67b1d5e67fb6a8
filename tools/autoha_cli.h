/* autoha_cli.h: the subcommands of the `autoha` command that live in files of their own. */
#ifndef AUTOHA_CLI_H
#define AUTOHA_CLI_H

/* `autoha status [FILE] [--json]` (autoha_status.c). Returns the exit status. */
int cmd_status(int argc, char **argv);
/* `autoha report --merge [--csv|--json] [--pct N] DIR|FILE...` (autoha_merge.c): argv[0] is the
 * command's name, getopt_long style. Returns the exit status. */
int cmd_report_merge(int argc, char **argv);

#endif
