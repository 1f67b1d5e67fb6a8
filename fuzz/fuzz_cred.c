/* Fuzz target: the hub's credentials file that `autoha status` reads (AUTOHA_STATUS_FILE), through
 * a memory file, since the reader takes a path; a file that reads must write back and read again
 * to the same credentials. */
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ah_coord_status.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  int fd = memfd_create("fuzz-cred", MFD_CLOEXEC);
  if (fd < 0) return 0;
  if (size && write(fd, data, size) != (ssize_t)size) return close(fd), 0;
  char path[64], err[512];
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  ah_coord_stamp_t st, back;
  if (ah_coord_cred_read(path, &st, err, sizeof err) == 0) {
    int fd2 = memfd_create("fuzz-cred-back", MFD_CLOEXEC);
    char path2[64];
    snprintf(path2, sizeof path2, "/proc/self/fd/%d", fd2);
    if (fd2 >= 0 && ah_coord_cred_write(path2, &st, err, sizeof err) == 0 &&
        (ah_coord_cred_read(path2, &back, err, sizeof err) != 0 ||
         memcmp(&st, &back, sizeof st) != 0))
      abort();
    if (fd2 >= 0) close(fd2);
  }
  close(fd);
  return 0;
}
