/* ibbw_ctl.c: ncclsim-ibbw's out-of-band channel — a TCP connection on the loopback interface
 * whose port the server publishes in a rendezvous file (written to a temporary name and renamed,
 * so the client never reads half of it), and fixed-size messages over it. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "ibbw_ctl.h"

int ibbw_ctl_serve(const char *file) {
  int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t al = sizeof a;
  if (ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof a) != 0 || listen(ls, 1) != 0 ||
      getsockname(ls, (struct sockaddr *)&a, &al) != 0) {
    perror("ncclsim-ibbw: listen");
    return -1;
  }
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.tmp", file);
  FILE *f = fopen(tmp, "w");
  if (!f || fprintf(f, "%d\n", ntohs(a.sin_port)) < 0 || fclose(f) != 0 || rename(tmp, file) != 0) {
    perror("ncclsim-ibbw: rendezvous file");
    return -1;
  }
  int s = accept(ls, NULL, NULL), one = 1;
  close(ls);
  if (s < 0) perror("ncclsim-ibbw: accept");
  else setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return s;
}

int ibbw_ctl_dial(const char *file, double timeout_s) {
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (;;) {
    FILE *f = fopen(file, "r");
    int port = 0;
    if (f) {
      if (fscanf(f, "%d", &port) != 1) port = 0;
      fclose(f);
    }
    if (port > 0) {
      int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      struct sockaddr_in a = {.sin_family = AF_INET,
                              .sin_port = htons((uint16_t)port),
                              .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
      if (s >= 0 && connect(s, (struct sockaddr *)&a, sizeof a) == 0) {
        int one = 1;
        setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        return s;
      }
      if (s >= 0) close(s);
    }
    clock_gettime(CLOCK_MONOTONIC, &t);
    if ((double)(t.tv_sec - t0.tv_sec) + (double)(t.tv_nsec - t0.tv_nsec) * 1e-9 > timeout_s) {
      fprintf(stderr, "ncclsim-ibbw: no server at %s after %.0f s\n", file, timeout_s);
      return -1;
    }
    usleep(20000);
  }
}

int ibbw_ctl_send(int s, const void *buf, size_t len) {
  const char *p = buf;
  while (len) {
    ssize_t n = send(s, p, len, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

int ibbw_ctl_recv(int s, void *buf, size_t len) {
  char *p = buf;
  while (len) {
    ssize_t n = recv(s, p, len, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    p += n;
    len -= (size_t)n;
  }
  return 0;
}
