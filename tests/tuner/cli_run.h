/* cli_run.h: running `autoha` (AUTOHA_CLI, the build's binary) and shell commands from the CLI's
 * tests, with the output captured. */
#ifndef CLI_RUN_H
#define CLI_RUN_H

#include "ah_report.h"

/* Runs a shell command; returns its exit status and its stdout+stderr (a static buffer). */
int run(const char *cmd, const char **out_p);
/* Runs `autoha ARGS` (ARGS from fmt, quoted by the caller); its exit status must be `want` and its
 * output must contain `needle` (unless NULL). Returns the output (run's static buffer). */
const char *cli(int want, const char *needle, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A configuration of one resource dimension (channels), for fixture reports. */
ah_config_t cfg(int algo, int proto, int nch);

#endif
