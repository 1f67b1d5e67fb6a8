/* autoha_run.c: the subcommands that put libautoha.so into a job — `autoha lib` (where the library
 * is), `autoha run [--] CMD ARGS...` (exec CMD with the library first on LD_PRELOAD) — and
 * `autoha --version`.
 *
 * The library is found relative to this program, never through a path fixed at build time: from
 * <prefix>/bin it is <prefix>/<libdir>/libautoha.so (the install layout, also a wheel's and a .deb's),
 * and in a build tree bin/autoha sits beside lib/libautoha.so, so a moved prefix still works. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ah_version.h"
#include "autoha_cli.h"

#ifndef AUTOHA_BIN_TO_LIB
#define AUTOHA_BIN_TO_LIB "../lib"
#endif

int cmd_version(void) {
  printf("autoha %s\n", ah_version());
  return 0;
}

/* Writes the absolute path of the libautoha.so that belongs to this program into buf. Returns 0,
 * or -1 with a message on stderr naming the places looked at. */
static int lib_find(char *buf, size_t len) {
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) {
    fprintf(stderr, "autoha: cannot find this program's own path (/proc/self/exe: %s)\n",
            strerror(errno));
    return -1;
  }
  self[n] = 0;
  char *slash = strrchr(self, '/');
  if (slash) *slash = 0;
  const char *rel[] = {AUTOHA_BIN_TO_LIB, "../lib"}; /* the install layout, then a build tree's */
  char tried[2][PATH_MAX + 32];
  for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
    snprintf(tried[i], sizeof tried[i], "%s/%s/libautoha.so", self, rel[i]);
    char real[PATH_MAX];
    if (realpath(tried[i], real) && access(real, R_OK) == 0) {
      snprintf(buf, len, "%s", real);
      return 0;
    }
  }
  fprintf(stderr, "autoha: libautoha.so is not where this program expects it (%s, %s)\n", tried[0],
          tried[1]);
  return -1;
}

/* Parses `autoha lib` and `autoha run`, which take only --help: -1 to go on (operands from optind),
 * else the exit status. run stops at its command's name, so the command's own options pass. */
static int help_only(const char *cmd, int argc, char **argv, const char *help) {
  static const struct option opts[] = {{"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
  int c;
  optind = 1;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "+:h", opts, NULL)) != -1) {
    if (c == 'h') {
      fputs(help, stdout);
      return 0;
    }
    return cli_bad_option(cmd, c, argv, opts);
  }
  return -1;
}

int cmd_lib(int argc, char **argv) {
  int rc = help_only(
      "lib", argc, argv,
      "usage: autoha lib\n"
      "  Prints the absolute path of the libautoha.so beside this program (for LD_PRELOAD).\n"
      "  -h, --help   this text\n");
  if (rc >= 0) return rc;
  if (optind < argc) {
    fprintf(stderr, "autoha lib: unexpected argument '%s' (see autoha lib --help)\n", argv[optind]);
    return 2;
  }
  char lib[PATH_MAX];
  if (lib_find(lib, sizeof lib) != 0) return 1;
  printf("%s\n", lib);
  return 0;
}

/* Whether the LD_PRELOAD entry `e` (len bytes) is the library at `lib`, or another libautoha.so:
 * both are dropped, so a job never loads two copies of autoha. */
static int entry_is_autoha(const char *e, size_t len, const char *lib) {
  char path[PATH_MAX];
  if (len == 0 || len >= sizeof path) return 0;
  memcpy(path, e, len);
  path[len] = 0;
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  if (strcmp(base, "libautoha.so") == 0) return 1;
  struct stat a, b;
  return stat(path, &a) == 0 && stat(lib, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

/* LD_PRELOAD for the job: lib first, then the entries of old (may be NULL) that are not autoha.
 * Returns a malloc'd string, or NULL when out of memory. */
static char *preload_join(const char *lib, const char *old) {
  size_t cap = strlen(lib) + (old ? strlen(old) : 0) + 2;
  char *v = malloc(cap);
  if (!v) return NULL;
  size_t used = (size_t)snprintf(v, cap, "%s", lib);
  /* ld.so separates LD_PRELOAD entries with spaces or colons; the result uses colons. */
  for (const char *p = old ? old : ""; *p;) {
    size_t len = strcspn(p, ": \t");
    if (len && !entry_is_autoha(p, len, lib)) {
      v[used++] = ':';
      memcpy(v + used, p, len);
      used += len;
      v[used] = 0;
    }
    p += len;
    p += strspn(p, ": \t");
  }
  return v;
}

int cmd_run(int argc, char **argv) {
  int rc = help_only(
      "run", argc, argv,
      "usage: autoha run [--] CMD [ARGS...]\n"
      "  Runs CMD (a launcher: torchrun, mpirun, srun, ncclsim-run...) with libautoha.so first\n"
      "  on LD_PRELOAD (other entries kept, any other autoha copy dropped); its exit status\n"
      "  passes through (127: CMD not found). Options after CMD are CMD's.\n"
      "  -h, --help   this text\n");
  if (rc >= 0) return rc;
  argc -= optind;
  argv += optind;
  if (argc == 0) {
    fprintf(stderr, "autoha run: no command given (see autoha run --help)\n");
    return 2;
  }
  char lib[PATH_MAX];
  if (lib_find(lib, sizeof lib) != 0) return 1;
  char *v = preload_join(lib, getenv("LD_PRELOAD"));
  if (!v || setenv("LD_PRELOAD", v, 1) != 0) {
    fprintf(stderr, "autoha: run: cannot set LD_PRELOAD (out of memory)\n");
    free(v);
    return 1;
  }
  free(v);
  execvp(argv[0], argv);
  int e = errno;
  fprintf(stderr, "autoha: run: cannot run %s: %s\n", argv[0], strerror(e));
  return e == ENOENT ? 127 : 126;
}
