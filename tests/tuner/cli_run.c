/* cli_run.c: see cli_run.h. */
#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#include "cli_run.h"

int run(const char *cmd, const char **out_p) {
  static char buf[65536];
  char full[4096];
  snprintf(full, sizeof full, "%s 2>&1", cmd);
  FILE *p = popen(full, "r");
  ck_assert_ptr_nonnull(p);
  size_t n = fread(buf, 1, sizeof buf - 1, p);
  buf[n] = 0;
  int st = pclose(p);
  *out_p = buf;
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

const char *cli(int want, const char *needle, const char *fmt, ...) {
  char args[2048], cmd[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(args, sizeof args, fmt, ap);
  va_end(ap);
  snprintf(cmd, sizeof cmd, "'%s' %s", AUTOHA_CLI, args);
  const char *out;
  int rc = run(cmd, &out);
  ck_assert_msg(rc == want, "autoha %s: exit %d, want %d:\n%s", args, rc, want, out);
  if (needle)
    ck_assert_msg(strstr(out, needle) != NULL, "autoha %s: no '%s' in:\n%s", args, needle, out);
  return out;
}

ah_config_t cfg(int algo, int proto, int nch) {
  ah_config_t c;
  memset(&c, 0, sizeof c);
  c.algo = (int8_t)algo;
  c.proto = (int8_t)proto;
  c.ndims = 1;
  c.res[0] = nch;
  return c;
}
