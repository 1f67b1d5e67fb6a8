/* etcd_cluster.c: starts and stops the real etcd cluster the cluster/ tests run against
 * (etcd_cluster.h). Ports come from binding port 0 on 127.0.0.1 and closing it again, so another
 * program may take one in between; etcd then fails to start and the wait for /health says so. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ah_cluster_etcd.h"
#include "etcd_cluster.h"

static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  int port = -1;
  if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
      getsockname(fd, (struct sockaddr *)&a, &len) == 0)
    port = ntohs(a.sin_port);
  if (fd >= 0) close(fd);
  return port;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Starts member i with the cluster's whole --initial-cluster. Returns its pid or -1. */
static pid_t member_start(etcd_cluster_t *ec, int i, const char *initial) {
  char name[16], data[320], log[320], client[64], peer[64];
  snprintf(name, sizeof name, "m%d", i);
  snprintf(data, sizeof data, "%s/%s.data", ec->dir, name);
  snprintf(log, sizeof log, "%s/%s.log", ec->dir, name);
  snprintf(client, sizeof client, "http://127.0.0.1:%d", ec->client_port[i]);
  snprintf(peer, sizeof peer, "http://127.0.0.1:%d", ec->peer_port[i]);
  const char *bin = getenv("ETCD_BIN") ? getenv("ETCD_BIN") : "etcd";
  pid_t parent = getpid(), pid = fork();
  if (pid != 0) return pid;
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(127);
  int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd >= 0) {
    dup2(fd, 1);
    dup2(fd, 2);
  }
  execlp(bin, bin, "--name", name, "--data-dir", data, "--listen-client-urls", client,
         "--advertise-client-urls", client, "--listen-peer-urls", peer,
         "--initial-advertise-peer-urls", peer, "--initial-cluster", initial,
         "--initial-cluster-token", ec->dir, "--initial-cluster-state", "new", (char *)NULL);
  fprintf(stderr, "exec %s: %s\n", bin, strerror(errno));
  _exit(127);
}

int etcd_cluster_start(etcd_cluster_t *ec, int n, double wait_s, char *err, size_t errlen) {
  memset(ec, 0, sizeof *ec);
  if (n < 1 || n > ETCD_CLUSTER_MAX) {
    snprintf(err, errlen, "a cluster of %d members", n);
    return -1;
  }
  const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  snprintf(ec->dir, sizeof ec->dir, "%s/autoha-etcd-XXXXXX", tmp);
  if (!mkdtemp(ec->dir)) {
    snprintf(err, errlen, "mkdtemp %s: %s", ec->dir, strerror(errno));
    ec->dir[0] = 0;
    return -1;
  }
  char initial[1024] = "";
  for (int i = 0; i < n; i++) {
    ec->client_port[i] = free_port();
    ec->peer_port[i] = free_port();
    size_t o = strlen(initial);
    snprintf(initial + o, sizeof initial - o, "%sm%d=http://127.0.0.1:%d", i ? "," : "", i,
             ec->peer_port[i]);
    snprintf(ec->eps.url[i], sizeof ec->eps.url[i], "http://127.0.0.1:%d", ec->client_port[i]);
  }
  ec->eps.n = n;
  for (int i = 0; i < n; i++) {
    ec->pid[i] = member_start(ec, i, initial);
    ec->n = i + 1;
    if (ec->pid[i] < 0) {
      snprintf(err, errlen, "fork: %s", strerror(errno));
      etcd_cluster_stop(ec);
      return -1;
    }
  }
  ah_cluster_etcd_t *c;
  if (ah_cluster_etcd_open(&ec->eps, 1.0, &c, err, errlen) != 0) {
    etcd_cluster_stop(ec);
    return -1;
  }
  double until = now_s() + wait_s;
  for (int i = 0; i < n; i++) {
    while (ah_cluster_etcd_member_healthy(c, i, err, errlen) != 1) {
      int status;
      if (waitpid(ec->pid[i], &status, WNOHANG) == ec->pid[i]) {
        ec->pid[i] = 0;
        snprintf(err, errlen, "etcd member m%d exited at start (its log: %s/m%d.log)", i, ec->dir,
                 i);
      }
      if (!ec->pid[i] || now_s() > until) {
        if (ec->pid[i])
          snprintf(err + strlen(err), errlen - strlen(err), "; its log: %s/m%d.log", ec->dir, i);
        ah_cluster_etcd_close(c);
        fprintf(stderr, "etcd_cluster: %s\n", err);
        char cmd[400]; /* the member's own words, before its folder goes */
        snprintf(cmd, sizeof cmd, "tail -n 20 '%s/m%d.log' >&2", ec->dir, i);
        if (system(cmd) != 0) fprintf(stderr, "etcd_cluster: no log of m%d\n", i);
        etcd_cluster_stop(ec);
        return -1;
      }
      usleep(100000);
    }
  }
  ah_cluster_etcd_close(c);
  return 0;
}

void etcd_cluster_signal(etcd_cluster_t *ec, int i, int sig) {
  if (i < 0 || i >= ec->n || ec->pid[i] <= 0) return;
  kill(ec->pid[i], sig);
  if (sig == SIGKILL && waitpid(ec->pid[i], NULL, 0) == ec->pid[i]) ec->pid[i] = 0;
}

void etcd_cluster_stop(etcd_cluster_t *ec) {
  for (int i = 0; i < ec->n; i++)
    if (ec->pid[i] > 0) kill(ec->pid[i], SIGKILL);
  for (int i = 0; i < ec->n; i++)
    if (ec->pid[i] > 0) {
      while (waitpid(ec->pid[i], NULL, 0) < 0 && errno == EINTR) {}
      ec->pid[i] = 0;
    }
  if (ec->dir[0] && strncmp(ec->dir, "/", 1) == 0 && strstr(ec->dir, "/autoha-etcd-")) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", ec->dir);
    if (system(cmd) != 0) fprintf(stderr, "etcd_cluster: could not remove %s\n", ec->dir);
  }
  ec->dir[0] = 0;
}
