/* Socket helpers in the shape of Redis's anet.c: small functions that fill an error buffer naming
 * the failing call and the peer, return AH_NET_OK/AH_NET_ERR/AH_NET_TIMEOUT, retry EINTR, set
 * close-on-exec on every descriptor, and put a deadline on every blocking wait (poll on a
 * non-blocking socket), so no coordinator call can hang a job. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/un.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "ah_coord_internal.h"

static void net_err(char *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void net_err(char *err, const char *fmt, ...) {
  if (!err) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, AH_NET_ERR_LEN, fmt, ap);
  va_end(ap);
}

uint64_t ah_coord_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int ah_coord_net_nonblock_set(char *err, int fd) {
  int flags;
  while ((flags = fcntl(fd, F_GETFL)) == -1 && errno == EINTR) {}
  if (flags == -1) {
    net_err(err, "fcntl(F_GETFL): %s", strerror(errno));
    return AH_NET_ERR;
  }
  int r;
  while ((r = fcntl(fd, F_SETFL, flags | O_NONBLOCK)) == -1 && errno == EINTR) {}
  if (r == -1) {
    net_err(err, "fcntl(F_SETFL,O_NONBLOCK): %s", strerror(errno));
    return AH_NET_ERR;
  }
  return AH_NET_OK;
}

/* Returns AH_NET_OK and fills ss_p/len_p, or AH_NET_ERR naming the text. Note that the host must
 * be a numeric address or a name getaddrinfo resolves; "" and "*" mean every IPv4 interface. */
int ah_coord_net_addr_parse(char *err, const char *text, struct sockaddr_storage *ss_p,
                            socklen_t *len_p) {
  char host[256];
  const char *colon = strrchr(text, ':');
  if (!colon) {
    net_err(err, "'%s' is not host:port", text);
    return AH_NET_ERR;
  }
  size_t hl = (size_t)(colon - text);
  if (hl >= sizeof host) {
    net_err(err, "'%s': host too long", text);
    return AH_NET_ERR;
  }
  memcpy(host, text, hl);
  host[hl] = 0;
  if (hl >= 2 && host[0] == '[' && host[hl - 1] == ']') {
    memmove(host, host + 1, hl - 2);
    host[hl - 2] = 0;
  }
  char *end;
  errno = 0;
  long port = strtol(colon + 1, &end, 10);
  if (colon[1] == 0 || *end != 0 || errno || port < 0 || port > 65535) {
    net_err(err, "'%s': port '%s' is not 0..65535", text, colon + 1);
    return AH_NET_ERR;
  }
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  int rc = getaddrinfo((host[0] && strcmp(host, "*") != 0) ? host : NULL, colon + 1, &hints, &res);
  if (rc != 0 || !res) {
    net_err(err, "'%s': cannot resolve '%s': %s", text, host, gai_strerror(rc));
    return AH_NET_ERR;
  }
  memset(ss_p, 0, sizeof *ss_p);
  memcpy(ss_p, res->ai_addr, res->ai_addrlen);
  *len_p = res->ai_addrlen;
  freeaddrinfo(res);
  return AH_NET_OK;
}

void ah_coord_net_addr_format(const struct sockaddr *sa, char *buf, size_t len) {
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (sa->sa_family == AF_INET) {
    const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)sa;
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
    port = ntohs(in->sin_port);
    snprintf(buf, len, "%s:%d", host, port);
  } else if (sa->sa_family == AF_INET6) {
    const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)(const void *)sa;
    inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
    port = ntohs(in6->sin6_port);
    snprintf(buf, len, "[%s]:%d", host, port);
  } else if (sa->sa_family == AF_UNIX) { /* a host relay's abstract endpoint */
    const struct sockaddr_un *un = (const struct sockaddr_un *)(const void *)sa;
    snprintf(buf, len, "unix:@%.60s", un->sun_path + 1);
  } else {
    snprintf(buf, len, "(family %d)", sa->sa_family);
  }
}

int ah_coord_net_listen(char *err, struct sockaddr_storage *ss, socklen_t *len, int backlog,
                        int *fd_p) {
  char a[96];
  ah_coord_net_addr_format((struct sockaddr *)ss, a, sizeof a);
  int fd = socket(ss->ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    net_err(err, "socket(): %s", strerror(errno));
    return AH_NET_ERR;
  }
  int one = 1;
  if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == -1) {
    net_err(err, "setsockopt(SO_REUSEADDR): %s", strerror(errno));
    close(fd);
    return AH_NET_ERR;
  }
  if (bind(fd, (struct sockaddr *)ss, *len) == -1) {
    net_err(err, "bind(%s): %s", a, strerror(errno));
    close(fd);
    return AH_NET_ERR;
  }
  if (listen(fd, backlog) == -1) {
    net_err(err, "listen(%s): %s", a, strerror(errno));
    close(fd);
    return AH_NET_ERR;
  }
  socklen_t l = sizeof *ss;
  if (getsockname(fd, (struct sockaddr *)ss, &l) == -1) {
    net_err(err, "getsockname(%s): %s", a, strerror(errno));
    close(fd);
    return AH_NET_ERR;
  }
  *len = l;
  *fd_p = fd;
  return AH_NET_OK;
}

int ah_coord_net_accept(char *err, int lfd, int *fd_p, char *peer, size_t peer_len) {
  struct sockaddr_storage ss;
  socklen_t l = sizeof ss;
  int fd;
  while ((fd = accept4(lfd, (struct sockaddr *)&ss, &l, SOCK_CLOEXEC | SOCK_NONBLOCK)) == -1 &&
         errno == EINTR) {}
  if (fd == -1) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) return AH_NET_TIMEOUT;
    net_err(err, "accept(): %s", strerror(errno));
    return AH_NET_ERR;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (peer) ah_coord_net_addr_format((struct sockaddr *)&ss, peer, peer_len);
  *fd_p = fd;
  return AH_NET_OK;
}

/* Waits for `events` on fd until the deadline. Returns AH_NET_OK, AH_NET_TIMEOUT or AH_NET_ERR. */
static int net_wait(char *err, int fd, short events, uint64_t deadline_ns, const char *what) {
  for (;;) {
    uint64_t now = ah_coord_now_ns();
    if (now >= deadline_ns) {
      net_err(err, "%s: timed out", what);
      return AH_NET_TIMEOUT;
    }
    uint64_t left_ms = (deadline_ns - now + 999999) / 1000000;
    struct pollfd p = {.fd = fd, .events = events, .revents = 0};
    int r = poll(&p, 1, left_ms > 60000 ? 60000 : (int)left_ms);
    if (r == -1 && errno == EINTR) continue;
    if (r == -1) {
      net_err(err, "%s: poll(): %s", what, strerror(errno));
      return AH_NET_ERR;
    }
    if (r == 1) return AH_NET_OK;
  }
}

int ah_coord_net_connect(char *err, const struct sockaddr *sa, socklen_t len, uint64_t deadline_ns,
                         int *fd_p) {
  char a[96];
  ah_coord_net_addr_format(sa, a, sizeof a);
  int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    net_err(err, "socket(): %s", strerror(errno));
    return AH_NET_ERR;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  int r;
  while ((r = connect(fd, sa, len)) == -1 && errno == EINTR) {}
  if (r == -1 && errno != EINPROGRESS) {
    int e = errno;
    net_err(err, "connect(%s): %s", a, strerror(e));
    close(fd);
    errno = e;
    return AH_NET_ERR;
  }
  if (r == -1) {
    char what[128];
    snprintf(what, sizeof what, "connect(%s)", a);
    int w = net_wait(err, fd, POLLOUT, deadline_ns, what);
    if (w != AH_NET_OK) {
      close(fd);
      return w;
    }
    int soerr = 0;
    socklen_t sl = sizeof soerr;
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
    if (soerr) {
      net_err(err, "connect(%s): %s", a, strerror(soerr));
      close(fd);
      errno = soerr;
      return AH_NET_ERR;
    }
  }
  *fd_p = fd;
  return AH_NET_OK;
}

int ah_coord_net_read_full(char *err, int fd, void *buf, size_t n, uint64_t deadline_ns) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, (char *)buf + got, n - got);
    if (r > 0) {
      got += (size_t)r;
      continue;
    }
    if (r == 0) {
      net_err(err, "read(): peer closed the connection after %zu of %zu bytes", got, n);
      return AH_NET_ERR;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      net_err(err, "read(): %s", strerror(errno));
      return AH_NET_ERR;
    }
    int w = net_wait(err, fd, POLLIN, deadline_ns, "read()");
    if (w != AH_NET_OK) return w;
  }
  return AH_NET_OK;
}

int ah_coord_net_write_full(char *err, int fd, const void *buf, size_t n, uint64_t deadline_ns) {
  size_t put = 0;
  while (put < n) {
    ssize_t r = send(fd, (const char *)buf + put, n - put, MSG_NOSIGNAL);
    if (r >= 0) {
      put += (size_t)r;
      continue;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      net_err(err, "send(): %s", strerror(errno));
      return AH_NET_ERR;
    }
    int w = net_wait(err, fd, POLLOUT, deadline_ns, "send()");
    if (w != AH_NET_OK) return w;
  }
  return AH_NET_OK;
}

/* Note that SCM_RIGHTS needs at least one byte of data to travel with; the byte is the marker
 * ah_coord_net_fd_recv checks, so a peer that sends ordinary data first is told apart. */
int ah_coord_net_fd_send(char *err, int fd, const int *passed, int n) {
  char byte = AH_NET_FD_MARK;
  struct iovec iov = {.iov_base = &byte, .iov_len = 1};
  union {
    struct cmsghdr h;
    char b[CMSG_SPACE(AH_NET_FD_MAX * sizeof(int))];
  } u;
  if (n < 1 || n > AH_NET_FD_MAX) {
    net_err(err, "cannot pass %d descriptors (1 to %d)", n, AH_NET_FD_MAX);
    return AH_NET_ERR;
  }
  memset(&u, 0, sizeof u);
  struct msghdr m = {.msg_iov = &iov,
                     .msg_iovlen = 1,
                     .msg_control = u.b,
                     .msg_controllen = CMSG_SPACE((size_t)n * sizeof(int))};
  struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN((size_t)n * sizeof(int));
  memcpy(CMSG_DATA(cm), passed, (size_t)n * sizeof(int));
  ssize_t r;
  while ((r = sendmsg(fd, &m, MSG_NOSIGNAL)) < 0 && errno == EINTR) {}
  if (r != 1) {
    net_err(err, "sendmsg(SCM_RIGHTS): %s", r < 0 ? strerror(errno) : "nothing sent");
    return AH_NET_ERR;
  }
  return AH_NET_OK;
}

int ah_coord_net_fd_recv(char *err, int fd, uint64_t deadline_ns, int *passed, int n) {
  for (;;) {
    char byte = 0;
    struct iovec iov = {.iov_base = &byte, .iov_len = 1};
    union {
      struct cmsghdr h;
      char b[CMSG_SPACE(AH_NET_FD_MAX * sizeof(int))];
    } u;
    memset(&u, 0, sizeof u);
    struct msghdr m = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.b, .msg_controllen = sizeof u.b};
    ssize_t r = recvmsg(fd, &m, MSG_CMSG_CLOEXEC);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      int w = net_wait(err, fd, POLLIN, deadline_ns, "recvmsg()");
      if (w != AH_NET_OK) return w;
      continue;
    }
    if (r <= 0) {
      net_err(err, "recvmsg(): %s", r == 0 ? "peer closed the connection" : strerror(errno));
      return AH_NET_ERR;
    }
    struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
    int got[AH_NET_FD_MAX], ngot = 0;
    if (cm && cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS &&
        cm->cmsg_len >= CMSG_LEN(0)) {
      ngot = (int)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
      if (ngot > AH_NET_FD_MAX) ngot = AH_NET_FD_MAX;
      memcpy(got, CMSG_DATA(cm), (size_t)ngot * sizeof(int));
    }
    if (byte != AH_NET_FD_MARK || ngot != n || (m.msg_flags & MSG_CTRUNC)) {
      for (int i = 0; i < ngot; i++) close(got[i]);
      net_err(err, "expected %d descriptors with marker byte 0x%02x, got byte 0x%02x and %d", n,
              AH_NET_FD_MARK & 0xff, byte & 0xff, ngot);
      return AH_NET_ERR;
    }
    memcpy(passed, got, (size_t)n * sizeof(int));
    return AH_NET_OK;
  }
}

/* Note that getifaddrs lists each address of each interface as one entry, in the kernel's order
 * (IPv4 before IPv6), so "the first entry" is the first address of the first interface chosen. */
int ah_coord_net_host_addr(const char *ifname, struct sockaddr_storage *ss_p, socklen_t *len_p,
                           char *name, size_t len) {
  memset(ss_p, 0, sizeof *ss_p);
  struct sockaddr_in *in = (struct sockaddr_in *)ss_p;
  in->sin_family = AF_INET;
  in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  *len_p = sizeof *in;
  if (name && len) name[0] = 0;
  struct ifaddrs *ifs = NULL;
  if (getifaddrs(&ifs) != 0) return ifname && *ifname ? -1 : 0;
  int n = 0;
  for (struct ifaddrs *i = ifs; i; i = i->ifa_next) n++;
  ah_coord_if_t *list = calloc((size_t)(n ? n : 1), sizeof *list);
  int rc = 0;
  if (list) {
    int k = 0;
    for (struct ifaddrs *i = ifs; i; i = i->ifa_next, k++)
      list[k] = (ah_coord_if_t){i->ifa_name, i->ifa_addr ? i->ifa_addr->sa_family : -1,
                                (i->ifa_flags & IFF_UP) != 0, i->ifa_addr};
    int c = ah_coord_if_choose(list, n, ifname);
    if (c < 0 && ifname && *ifname) {
      rc = -1;
      c = ah_coord_if_choose(list, n, NULL);
    }
    if (c >= 0) {
      socklen_t sl =
          list[c].family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
      memcpy(ss_p, list[c].addr, sl);
      *len_p = sl;
      if (list[c].family == AF_INET6) ((struct sockaddr_in6 *)ss_p)->sin6_port = 0;
      else in->sin_port = 0;
      if (name && len) snprintf(name, len, "%s", list[c].name);
    }
    free(list);
  }
  freeifaddrs(ifs);
  return rc;
}

long ah_coord_net_nofile_raise(long want) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return -1;
  rlim_t target = (rlim_t)want;
  if (rl.rlim_max != RLIM_INFINITY && target > rl.rlim_max) target = rl.rlim_max;
  if (rl.rlim_cur < target) {
    rl.rlim_cur = target;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) return -1;
  }
  getrlimit(RLIMIT_NOFILE, &rl);
  return (long)rl.rlim_cur;
}
