/* ncclsimExchangeUniqueId: the rendezvous that ncclsim-run offers in place of the channel (MPI,
 * torchrun's store) a real job would use to pass rank 0's ncclUniqueId to the other ranks.
 *
 * The root writes the id to a temporary file in the folder NCCLSIM_RDZV names and renames it into
 * place, so a reader sees either nothing or the whole id; readers poll for it. ncclsim-run creates
 * a fresh folder per job, so ids of earlier jobs are never read. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ncclsim.h"
#include "sim_internal.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int tag_ok(const char *tag) {
  if (!tag || !*tag || strlen(tag) > 128) return 0;
  for (const char *p = tag; *p; p++)
    if (*p == '/' || *p == '.' || *p < 0x21 || *p > 0x7e) return 0;
  return 1;
}

SIM_API int ncclsimExchangeUniqueId(const char *tag, int is_root, ncclUniqueId *id) {
  if (!id || !tag_ok(tag)) {
    fprintf(stderr,
            "ncclsim: ncclsimExchangeUniqueId: invalid tag '%s' (expected 1-128 printable "
            "characters without '/', '.' or spaces) or NULL id\n",
            tag ? tag : "(null)");
    return -1;
  }
  const char *dir = getenv("NCCLSIM_RDZV");
  if (!dir || !*dir) {
    fprintf(stderr,
            "ncclsim: ncclsimExchangeUniqueId(%s): NCCLSIM_RDZV is not set; run the job "
            "under ncclsim-run, which provides the rendezvous folder\n",
            tag);
    return -1;
  }
  char path[4096], tmp[4200];
  if (snprintf(path, sizeof path, "%s/%s.id", dir, tag) >= (int)sizeof path) {
    fprintf(stderr, "ncclsim: ncclsimExchangeUniqueId(%s): NCCLSIM_RDZV path is too long\n", tag);
    return -1;
  }
  if (is_root) {
    snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
    FILE *f = fopen(tmp, "wbx");
    if (!f) {
      fprintf(stderr, "ncclsim: ncclsimExchangeUniqueId(%s): cannot create %s: %s\n", tag, tmp,
              strerror(errno));
      return -1;
    }
    int ok = fwrite(id, sizeof *id, 1, f) == 1;
    ok = (fclose(f) == 0) && ok;
    if (!ok || link(tmp, path) != 0) { /* link, not rename: a second root with the tag fails */
      int e = errno;
      unlink(tmp);
      fprintf(stderr, "ncclsim: ncclsimExchangeUniqueId(%s): cannot publish %s: %s\n", tag, path,
              e == EEXIST ? "another root already published this tag" : strerror(e));
      return -1;
    }
    unlink(tmp);
    return 0;
  }
  double deadline = now_s() + sim_timeout_s();
  for (;;) {
    FILE *f = fopen(path, "rb");
    if (f) {
      size_t got = fread(id, sizeof *id, 1, f);
      fclose(f);
      if (got == 1) return 0;
    }
    if (now_s() > deadline) {
      fprintf(stderr,
              "ncclsim: ncclsimExchangeUniqueId(%s): no id published in %s after %.0f s "
              "(NCCLSIM_TIMEOUT_S); did the root rank start?\n",
              tag, dir, sim_timeout_s());
      return -1;
    }
    usleep(2000);
  }
}
