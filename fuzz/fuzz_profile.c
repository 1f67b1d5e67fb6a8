/* Fuzz target: the profile loader (AUTOHA_PROFILE), which reads a report file and turns it into
 * per-key configs for this NCCL version and topology. The input goes through a memory file, since
 * the loader takes a path as the shim gives it one. */
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ah_log.h"
#include "ah_report.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ah_log_set_level(AH_LOG_ERROR);
  int fd = memfd_create("fuzz-profile", MFD_CLOEXEC);
  if (fd < 0) return 0;
  if (size && write(fd, data, size) != (ssize_t)size) return close(fd), 0;
  char path[64];
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  ah_profile_t *p = NULL;
  /* the version and topology the docs' example report carries, so loads can succeed */
  if (ah_profile_load(
          path, (size_t)64 << 20, 22805,
          "gpu=NVIDIA H100 80GB HBM3; nodes=1; ranks=8; ranks_per_node=8; nics=8x400Gb/s; nccl=2.28.5",
          &p) == 0) {
    ah_profile_lookup(p, 8, 1, 0, 20);
    ah_profile_free(p);
  }
  close(fd);
  return 0;
}
