/* bench/diag_hub: what diagnosis costs the hub. The hub runs in a process of its own (a child),
 * 1,024 real coordinator clients in this one join one communicator (one rank each, as 1,024 rank
 * processes would) and each sends, once a second, what a rank's health thread sends: a progress
 * record with 16 keys and a SAMPLES message of 16 sampled durations (the hub judges them for
 * stragglers), and the windows of its 8 sending queue pairs (LINK_RATES: the hub puts them in the
 * communicator's matrix of connections and judges it, docs/diagnosis.md "Slow links"), each rank
 * having announced its 8 sending and 8 receiving queue pairs (a ring over 8 NICs) once; rank 5's
 * connections run at 2% of the others' rate, which the hub must find (every client gets the
 * finding: the matrix was judged, not skipped). The hub
 * process's CPU time (utime + stime from /proc) over 10 seconds of that, as a share of one core, is
 * the figure; the bar is 5%.
 *
 * Note that the clients share this machine's 2 cores with the hub (in a job they are on other
 * hosts): their I/O threads run at nice +10 so the hub is not starved, and the CPU time counted is
 * the hub process's alone. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ah_coord_internal.h"
#include "ah_coord_link.h"
#include "ah_log.h"
#include "bench_proc.h"

#define CLIENTS 1024
#define SECONDS 10
#define BAR_PCT 5.0

static void sleep_us(long us) {
  struct timespec ts = {.tv_sec = us / 1000000, .tv_nsec = (us % 1000000) * 1000};
  nanosleep(&ts, NULL);
}

/* Rank i's NIC k (RoCE's IPv4-mapped GID) and its queue pairs: the sending one to rank i + 1, the
 * receiving one from rank i - 1 (QP numbers unique in the job). */
#define NICS 8
static void nic_gid(uint8_t g[16], int i, int k) {
  memset(g, 0, 16);
  g[10] = g[11] = 0xff;
  g[12] = 10, g[13] = (uint8_t)(i >> 8), g[14] = (uint8_t)i, g[15] = (uint8_t)(4 * k + 1);
}
static uint32_t send_qpn(int i, int k) { return (uint32_t)(i * 2 * NICS + k + 1); }
static uint32_t recv_qpn(int i, int k) { return (uint32_t)(i * 2 * NICS + NICS + k + 1); }

/* Announces rank i's 16 queue pairs (LINK_QP), as its process's first tick does. */
static int link_announce(ah_coord_t *c, int i) {
  ah_link_qp_t q[2 * NICS];
  memset(q, 0, sizeof q);
  for (int k = 0; k < NICS; k++) {
    int next = (i + 1) % CLIENTS, prev = (i + CLIENTS - 1) % CLIENTS;
    ah_link_qp_t *s = &q[k], *r = &q[NICS + k];
    nic_gid(s->lgid, i, k), nic_gid(s->rgid, next, k);
    s->lqpn = send_qpn(i, k), s->rqpn = recv_qpn(next, k), s->role = AH_LINK_SENDER;
    nic_gid(r->lgid, i, k), nic_gid(r->rgid, prev, k);
    r->lqpn = recv_qpn(i, k), r->rqpn = send_qpn(prev, k), r->role = AH_LINK_RECEIVER;
    for (ah_link_qp_t *x = s; x; x = x == s ? r : NULL) {
      x->gpu = (uint16_t)(i % 8), x->port = 1, x->sport = (uint16_t)(0xc000 + k);
      snprintf(x->dev, sizeof x->dev, "mlx5_%d", k);
      x->src_leaf = x->spine = x->dst_leaf = AH_LINK_NONE;
    }
  }
  uint32_t pid = 1000u + (uint32_t)i;
  for (int n = 0; n < 2 * NICS; n += AH_LINK_QPS)
    if (ah_coord_link_qps(c, pid, q + n, 2 * NICS - n < AH_LINK_QPS ? 2 * NICS - n : AH_LINK_QPS))
      return -1;
  return 0;
}

/* The child: runs a hub, hands its stamp to the parent through fd, and waits to be killed. */
static void hub_child(int fd) {
  uint8_t secret[16];
  ah_coord_random(secret, sizeof secret);
  ah_coord_hub_opts_t ho;
  ah_coord_hub_opts_default(&ho);
  ho.max_pending = CLIENTS + 64;
  ah_coord_stamp_t st;
  ah_coord_hub_t *hub = ah_coord_hub_open("127.0.0.1:0", secret, &ho, &st);
  if (!hub || write(fd, &st, sizeof st) != (ssize_t)sizeof st) _exit(1);
  for (;;) pause();
}

int main(void) {
  ah_log_set_level(AH_LOG_ERROR); /* 1,024 clients would each log the slow link's finding */
  if (ah_coord_net_nofile_raise(8192) < 4L * CLIENTS + 64) {
    printf("diag_hub: %d clients need ~%d descriptors: FAILED\n", CLIENTS, 4 * CLIENTS + 64);
    return 1;
  }
  int p[2];
  if (pipe(p) != 0) return 1;
  pid_t hub = fork();
  if (hub == 0) {
    close(p[0]);
    hub_child(p[1]);
  }
  close(p[1]);
  ah_coord_stamp_t st;
  if (hub < 0 || read(p[0], &st, sizeof st) != (ssize_t)sizeof st) {
    printf("diag_hub: the hub did not start: FAILED\n");
    return 1;
  }
  ah_coord_client_opts_t co;
  ah_coord_client_opts_default(&co);
  co.connect_ms = 20000;
  const uint64_t comm = 0xd1a9;
  static ah_coord_t *cs[CLIENTS];
  int ok = 1;
  int nice_before = getpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid));
  setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid),
              nice_before + 10); /* inherited by I/O threads */
  for (int i = 0; i < CLIENTS && ok; i++) {
    cs[i] = ah_coord_client_open(&st, NULL, &co, NULL, NULL);
    ok = cs[i] && ah_coord_join_rank(cs[i], comm, CLIENTS, i, NULL) == 0 &&
         link_announce(cs[i], i) == 0;
  }
  setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), nice_before);
  for (int t = 0;
       ok && t < 600 && ah_coord_verdict(cs[CLIENTS - 1], comm) != AH_COORD_VERDICT_COMPLETE; t++)
    sleep_us(50000);
  if (!ok || ah_coord_verdict(cs[CLIENTS - 1], comm) != AH_COORD_VERDICT_COMPLETE) {
    printf("diag_hub: %d clients did not all join: FAILED\n", CLIENTS);
    kill(hub, SIGKILL);
    return 1;
  }
  double t0 = 0, c0 = 0;
  for (int sec = 0; sec < SECONDS + 2; sec++) {
    if (sec ==
        2) { /* the first records allocate the hub's tables: measured from the third second */
      t0 = (double)ah_coord_now_ns() / 1e9;
      c0 = bench_proc_cpu_s(hub);
    }
    uint64_t start = ah_coord_now_ns();
    for (int i = 0; i < CLIENTS; i++) {
      ah_health_rec_t rec = {.rank = (uint32_t)i,
                             .pid = 1000u + (uint32_t)i,
                             .gpu = (uint16_t)(i % 8),
                             .state = AH_HEALTH_BUSY,
                             .nkeys = AH_HEALTH_KEYS};
      ah_health_sample_t x[AH_HEALTH_SAMPLES];
      for (int k = 0; k < AH_HEALTH_KEYS; k++) {
        rec.keys[k] = (ah_health_key_t){(uint8_t)(k % AH_NUM_COLLS), (uint8_t)(10 + k),
                                        100u * (uint64_t)sec + (uint64_t)k};
        /* every rank samples the same calls; each second brings 16 new ones per key pair */
        x[k] = (ah_health_sample_t){(uint8_t)(k % 4), (uint8_t)(10 + k % 4),
                                    16u * (uint64_t)sec + (uint64_t)k,
                                    (float)(100.0 + (i * 7 + k * 13) % 10)};
      }
      ah_link_rate_t lr[NICS];
      memset(lr, 0, sizeof lr);
      for (int k = 0; k < NICS; k++) { /* every connection at about the same rate */
        nic_gid(lr[k].lgid, i, k);
        lr[k].lqpn = send_qpn(i, k);
        lr[k].bytes = 64u << 20;
        lr[k].busy_us = 100000u + (uint32_t)((i * 7 + k * 13 + sec) % 20) * 1000u;
        if (i == 5) lr[k].busy_us *= 50; /* a slow link */
        lr[k].wait_us = 2 * lr[k].busy_us;
        lr[k].wrs = 1024;
      }
      if (ah_coord_progress(cs[i], comm, &rec) != 0 ||
          ah_coord_samples(cs[i], comm, (uint32_t)i, x, AH_HEALTH_SAMPLES) != 0 ||
          ah_coord_link_rates(cs[i], 1000u + (uint32_t)i, lr, NICS) != 0)
        ok = 0;
    }
    uint64_t spent = ah_coord_now_ns() - start;
    if (spent < 1000000000ull) sleep_us((long)((1000000000ull - spent) / 1000));
  }
  double secs = (double)ah_coord_now_ns() / 1e9 - t0, used = bench_proc_cpu_s(hub) - c0;
  int found = ah_coord_client_findings(cs[0]);
  for (int i = 0; i < CLIENTS; i++) ah_coord_client_close(cs[i]);
  kill(hub, SIGKILL);
  waitpid(hub, NULL, 0);
  double pct = 100.0 * used / secs;
  int pass = ok && c0 >= 0 && pct < BAR_PCT && found >= 1;
  printf(
      "diag_hub (127.0.0.1, %ld CPUs): the hub holding %d clients' progress records, samples and "
      "%d connections' windows (the slow one found: %s) at 1 Hz used %.2f%% of one core over %.0f "
      "s (bar %.0f%%): %s\n",
      sysconf(_SC_NPROCESSORS_ONLN), CLIENTS, CLIENTS * NICS, found ? "yes" : "no", pct, secs,
      BAR_PCT, pass ? "OK" : "FAILED");
  return pass ? 0 : 1;
}
