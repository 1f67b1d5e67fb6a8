/* Whole-file reads for every folder's parsers: one bounded loop of fread into a doubling buffer,
 * so every reader fails the same way on a missing, unreadable or oversized file; and the folders a
 * written file needs, and the atomic write (a temporary file beside it, then rename) that every
 * file a reader may open at any moment — a report, a metrics file — goes through. */
#include <errno.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ah_file.h"

char *ah_file_read(const char *path, size_t max_bytes, size_t *len_p, char *err, size_t errlen) {
  /* Non-blocking, and regular files only, checked before a byte is read: a FIFO would block the
   * open (and the job's ncclCommInitRank with it) for good, /dev/zero or /dev/urandom would be read
   * to the bound */
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    snprintf(err, errlen, "cannot open: %s", strerror(errno));
    return NULL;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const char *what = S_ISFIFO(st.st_mode)   ? "a FIFO"
                       : S_ISCHR(st.st_mode)  ? "a character device"
                       : S_ISDIR(st.st_mode)  ? "a folder"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                                              : "not a regular file";
    snprintf(err, errlen, "not a regular file (%s)", what);
    close(fd);
    return NULL;
  }
  if ((uint64_t)st.st_size > max_bytes) {
    snprintf(err, errlen, "larger than %zu bytes (%lld)", max_bytes, (long long)st.st_size);
    close(fd);
    return NULL;
  }
  FILE *f = fdopen(fd, "r");
  if (!f) {
    snprintf(err, errlen, "cannot open: %s", strerror(errno));
    close(fd);
    return NULL;
  }
  size_t cap = 4096, len = 0;
  char *buf = malloc(cap);
  const char *why = buf ? NULL : "out of memory";
  while (buf) {
    len += fread(buf + len, 1, cap - len - 1, f);
    if (len + 1 < cap) break;
    if (len >= max_bytes) {
      why = "too large";
      break;
    }
    char *nb = realloc(buf, cap * 2);
    if (!nb) {
      why = "out of memory";
      break;
    }
    buf = nb;
    cap *= 2;
  }
  if (!why && ferror(f)) why = "read error";
  int saved = errno;
  fclose(f);
  if (why) {
    free(buf);
    if (strcmp(why, "too large") == 0) snprintf(err, errlen, "larger than %zu bytes", max_bytes);
    else if (strcmp(why, "read error") == 0)
      snprintf(err, errlen, "read error: %s", strerror(saved));
    else snprintf(err, errlen, "%s", why);
    return NULL;
  }
  buf[len] = '\0';
  if (len_p) *len_p = len;
  return buf;
}

/* Creates the folders leading to `path` that do not exist yet (mkdir -p of its directory). Note
 * that another process of the job may create the same folder at the same moment: EEXIST is fine. */
int ah_file_make_parents(const char *path, char *err, size_t errlen) {
  char dir[4096];
  size_t n = strlen(path);
  if (n >= sizeof dir) {
    if (err && errlen) snprintf(err, errlen, "path too long: %s", path);
    return -1;
  }
  memcpy(dir, path, n + 1);
  for (char *p = dir + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
      if (err && errlen) snprintf(err, errlen, "mkdir(%s) failed: %s", dir, strerror(errno));
      return -1;
    }
    *p = '/';
  }
  return 0;
}

int ah_file_write_atomic(const char *path, const char *text, size_t len, char *err, size_t errlen) {
  char tmp[4096];
  if (ah_file_make_parents(path, err, errlen) != 0) return -1;
  /* Unique per call, so two threads writing the same file never share a temporary file. */
  static _Atomic unsigned write_seq;
  unsigned seq = write_seq++;
  if (snprintf(tmp, sizeof tmp, "%s.tmp.%d.%u", path, (int)getpid(), seq) >= (int)sizeof tmp) {
    if (err && errlen) snprintf(err, errlen, "path too long: %s", path);
    return -1;
  }
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    if (err && errlen) snprintf(err, errlen, "open(%s) failed: %s", tmp, strerror(errno));
    return -1;
  }
  size_t off = 0;
  while (off < len) {
    ssize_t n = write(fd, text + off, len - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (err && errlen) snprintf(err, errlen, "write(%s) failed: %s", tmp, strerror(errno));
      goto fail_file;
    }
    off += (size_t)n;
  }
  int rc = close(fd);
  fd = -1;
  if (rc != 0) {
    if (err && errlen) snprintf(err, errlen, "write/close(%s) failed: %s", tmp, strerror(errno));
    goto fail_file;
  }
  if (rename(tmp, path) != 0) {
    if (err && errlen)
      snprintf(err, errlen, "rename(%s, %s) failed: %s", tmp, path, strerror(errno));
    goto fail_file;
  }
  return 0;
fail_file:
  if (fd >= 0) close(fd);
  unlink(tmp);
  return -1;
}
