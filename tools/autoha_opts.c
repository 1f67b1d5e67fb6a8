/* Option errors for every `autoha` subcommand: getopt_long runs with its own messages off (opterr
 * = 0, a ':' first in the short options) and this prints one line naming the option and the way to
 * the help, so every subcommand fails the same way with exit status 2. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "autoha_cli.h"

int cli_bad_option(const char *cmd, int c, char **argv, const struct option *opts) {
  const char *arg = optind > 0 ? argv[optind - 1] : "";
  if (strncmp(arg, "--", 2) != 0) { /* a short option: getopt names it in optopt */
    if (c == ':')
      fprintf(stderr, "autoha %s: option '-%c' needs a value (see autoha %s --help)\n", cmd, optopt,
              cmd);
    else
      fprintf(stderr, "autoha %s: unknown option '-%c' (see autoha %s --help)\n", cmd, optopt, cmd);
    return 2;
  }
  /* A long option, as the user wrote it in argv[optind - 1]: unknown, without its value, or with a
   * value it does not take. */
  const char *eq = strchr(arg, '=');
  size_t nl = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);
  int known = 0;
  for (const struct option *o = opts; o && o->name; o++)
    known |= strlen(o->name) == nl && strncmp(arg + 2, o->name, nl) == 0;
  if (known && c == ':')
    fprintf(stderr, "autoha %s: option '%s' needs a value (see autoha %s --help)\n", cmd, arg, cmd);
  else if (known && eq)
    fprintf(stderr, "autoha %s: option '%.*s' takes no value (see autoha %s --help)\n", cmd,
            (int)(eq - arg), arg, cmd);
  else
    fprintf(stderr, "autoha %s: unknown option '%.*s' (see autoha %s --help)\n", cmd,
            (int)(eq ? eq - arg : (long)strlen(arg)), arg, cmd);
  return 2;
}

void cli_no_report(const char *cmd, char **paths, int npaths) {
  if (npaths > 0)
    fprintf(stderr,
            "autoha %s: no report read from %s%s (a report is a .json file, also in a folder's "
            "subfolders)\n",
            cmd, paths[0], npaths > 1 ? " and the other paths" : "");
  else fprintf(stderr, "autoha %s: no report read\n", cmd);
}
