/* etcd_cluster.h: a real etcd cluster on loopback for the cluster/ tests — Debian's etcd (package
 * etcd-server, scripts/install-deps), its members started as this process's children on free
 * ports picked at run time, data and logs in a temporary folder, every member killed (SIGKILL)
 * and reaped at the end, and by the kernel when this process dies first (PR_SET_PDEATHSIG). */
#ifndef ETCD_CLUSTER_H
#define ETCD_CLUSTER_H

#include <sys/types.h>

#include "ah_cluster_endpoints.h"

#define ETCD_CLUSTER_MAX 5

typedef struct {
  int n;
  pid_t pid[ETCD_CLUSTER_MAX];
  int client_port[ETCD_CLUSTER_MAX], peer_port[ETCD_CLUSTER_MAX];
  char dir[256];              /* the temporary folder: NAME.data/, NAME.log */
  ah_cluster_endpoints_t eps; /* the members' client URLs, member i at index i */
} etcd_cluster_t;

/* Starts an n-member cluster (etcd from PATH, or $ETCD_BIN) and waits, at most wait_s seconds,
 * for every member's /health. Returns 0, or -1 with err (what is already started is stopped). */
int etcd_cluster_start(etcd_cluster_t *ec, int n, double wait_s, char *err, size_t errlen);

/* Kills member i with `sig` (SIGKILL, SIGSTOP, ...). From the starting process a SIGKILLed member
 * is also reaped. */
void etcd_cluster_signal(etcd_cluster_t *ec, int i, int sig);

/* Kills and reaps every member and removes the folder. Safe to call twice. */
void etcd_cluster_stop(etcd_cluster_t *ec);

#endif
