/* bench/coord_scale: how long a committed segment takes to reach every process of a large job.
 * By default the clients are the processes of TP8 x PP8 x DP jobs of 1,024, 8,192 and 16,384
 * processes, in worker processes, sending their progress records (coord_scale_job.c has the
 * method; bars p99 <= 10 ms at 1,024 and <= 25 ms above, issue 38). With --one-comm, this file's
 * run: one hub on 127.0.0.1, N real coordinator clients (each with its own connection and I/O thread,
 * as N rank processes would have) joined to one communicator, and a leader client publishing
 * segments at a steady pace. Each client timestamps the segment's arrival in its deliver
 * callback; latency = arrival - the leader's publish call (one monotonic clock, one process).
 *
 * --one-comm runs 64 clients, then 1,024 (or the counts given as arguments); runs above 256 clients run
 * beside one CPU-bound process the bench starts itself (issue 17's condition; --no-load: without
 * it). The clients simulate hosts of 8 processes (--per-host K; 1: every client its own host):
 * clients 0-7 are host 0, 8-15 host 1, ..., the leader is on host 0, and with more than one per
 * host the host relay is on (AUTOHA_COORD_RELAY's default; docs/coordinator.md "Host relay"), so
 * the first client of each host carries the others' connections and the hub sends once per host,
 * and the relay puts the others' frames into shared-memory rings without waking them for segments:
 * a rank waiting for a decision takes them from its process's ring (ah_coord_poll), so their arrival
 * is timed on that rank's thread. One thread stands for all of them, woken when a host's relay has
 * the segment (ranks_wait below);
 * with --rank-threads every such process has its own waiting rank, which sleeps until the relay
 * wakes it, as the shim's (rank_main).
 * Prints p50/p99 of all (client, segment) latencies per run, the p99 of the per-segment "last
 * client reached" time, the hub's own fan-out time (PUBLISH read to last subscriber's send) with
 * the hub thread's CPU time in it, the CPU time and context switches of all the bench's threads per
 * decision (getrusage over the publishing phase: what one decision costs the machine end to end),
 * the CPU share the busy process got and the share of the machine's CPU time the hypervisor took
 * over the run (steal: on a shared host it stops every thread at once, so a run that missed its
 * bar with a high figure there says so); last, one line with the load average and OK or FAILED
 * against the bars (p99 <= 2 ms at 64 clients, <= 10 ms at 1,024). Note that every figure is
 * wall-clock on this machine, shared with whatever else runs on it: the clients are threads of this
 * one process (one I/O thread each, as each process of a job has one) standing for processes on
 * many hosts, but here they share this machine's CPUs with the hub (they run at nice +10 for that
 * reason — a bench artifact, not something the job relies on); the output says so. */
#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ah_coord_internal.h"
#include "ah_log.h"
#include "bench_proc.h"
#include "coord_scale_job.h"

#define NSEG 300
#define WARMUP 20

static _Atomic uint64_t pub_ns[NSEG];

typedef struct {
  _Atomic int got;
  int relay; /* this client is its host's relay: its delivery rings relay_bell */
  uint64_t lat_ns[NSEG];
} client_rec_t;

/* The stand-in's doorbell (ranks_wait): a relay's own delivery rings it, and wakes the stand-in
 * when it sleeps, as the shim's waiting ranks are woken when their relay fills their rings. */
static _Atomic uint32_t relay_bell;
static _Atomic int standin_asleep;

static void bench_deliver(void *arg, const ah_key_t *key, const ah_segment_t *seg) {
  client_rec_t *r = arg;
  uint64_t now = ah_coord_now_ns();
  uint64_t i = seg->first;
  if (i < NSEG) r->lat_ns[i] = now - atomic_load(&pub_ns[i]);
  atomic_fetch_add(&r->got, 1);
  if (r->relay) { /* the bell, then the sleeper: the stand-in stores the reverse (no lost wake-up) */
    atomic_fetch_add(&relay_bell, 1);
    if (atomic_load(&standin_asleep))
      syscall(SYS_futex, &relay_bell, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
  }
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static void sleep_us(long us) {
  struct timespec ts = {.tv_sec = us / 1000000, .tv_nsec = (us % 1000000) * 1000};
  nanosleep(&ts, NULL);
}

/* The ranks of every client waiting for segment s at their next call (without --rank-threads). A
 * process behind a host relay is not woken for a segment; its waiting rank takes it from the
 * process's ring (ah_coord_poll). In the shim that rank sleeps in ah_coord_wait and the relay wakes
 * it when it puts the segment there (rank_main below does the same); here one thread stands for
 * all of them (in a job each is a rank on its own CPU, waiting; 56 threads woken on this machine's
 * 2 CPUs already measure the machine: at 64 clients such runs took 3.7-5.1 ms of CPU per decision,
 * the stand-in 0.5-0.9 ms). It sleeps until a host's relay has the segment (the relay's delivery
 * rings relay_bell), then takes it for that host's processes; the relay puts it into their rings
 * after its own copy, from the same read, so no process can have it sooner, and a process whose
 * ring is not filled yet is looked at again after a nap of 20 us doubling to 500 us. Clients the
 * hub reaches directly deliver on their own I/O thread, and polling them finds nothing. Returns
 * when every client has s, or after `limit_us`. */
static void ranks_wait(ah_coord_t **cs, client_rec_t *recs, int n, int per_host,
                       const int *relay_of, int s, uint64_t t0, long limit_us) {
  int nhosts = (n + per_host - 1) / per_host, left = nhosts;
  char *done = calloc((size_t)nhosts, 1);
  long nap = 20;
  while (done && left > 0) {
    uint32_t bell = atomic_load(&relay_bell);
    int filling = 0; /* a host whose relay has s, not yet every one of its processes */
    for (int h = 0; h < nhosts; h++) {
      if (done[h]) continue;
      int r = relay_of[h];
      if (r >= 0 && atomic_load(&recs[r].got) <= s) continue; /* its relay has not read it yet */
      int end = (h + 1) * per_host < n ? (h + 1) * per_host : n, all = 1;
      for (int i = h * per_host; i < end; i++)
        if (atomic_load(&recs[i].got) <= s) {
          (void)ah_coord_poll(cs[i]);
          all &= atomic_load(&recs[i].got) > s;
        }
      if (all) done[h] = 1, left--;
      else filling = 1;
    }
    if (left == 0 || (ah_coord_now_ns() - t0) / 1000 > (uint64_t)limit_us) break;
    if (filling) {
      sleep_us(nap);
      if (nap < 500) nap *= 2;
      continue;
    }
    nap = 20;
    atomic_store(&standin_asleep, 1); /* the sleeper, then the bell: see bench_deliver */
    if (atomic_load(&relay_bell) == bell) {
      struct timespec ts = {.tv_sec = 0, .tv_nsec = 500 * 1000};
      syscall(SYS_futex, &relay_bell, FUTEX_WAIT_PRIVATE, bell, &ts, NULL, 0);
    }
    atomic_store(&standin_asleep, 0);
  }
  free(done);
}

/* Waits (naps of 100 us, on this thread) until every client has segment s, or limit_us passed. */
static void all_got(client_rec_t *recs, int n, int s, uint64_t t0, long limit_us) {
  for (int i = 0; i < n; i++)
    while (atomic_load(&recs[i].got) <= s && (ah_coord_now_ns() - t0) / 1000 <= (uint64_t)limit_us)
      sleep_us(100);
}

/* One process's waiting rank, as the shim's (shim_control.c ah_shim_worker_wait): for each segment
 * in turn, it takes a ticket, looks (ah_coord_poll), and sleeps in ah_coord_wait for its nap, 20 us
 * doubling to 500 us, until the segment is there; the relay wakes it when it puts the segment into
 * its process's ring. The shim's 64 sched_yield()s before the first nap are left out: in a job the
 * rank yields on its own CPU, here 56 ranks would spin on the 2 CPUs the hub and relays need. */
typedef struct {
  ah_coord_t *c;
  client_rec_t *rec;
  int nseg;
  _Atomic int *stop;
} rank_t;

static void *rank_main(void *arg) {
  rank_t *r = arg;
  for (int s = 0; s < r->nseg && !atomic_load(r->stop); s++) {
    long nap_us = 20;
    while (atomic_load(&r->rec->got) <= s && !atomic_load(r->stop)) {
      uint64_t t = ah_coord_wait_ticket(r->c);
      (void)ah_coord_poll(r->c);
      if (atomic_load(&r->rec->got) > s) break;
      ah_coord_wait(r->c, t, nap_us);
      if (nap_us < 500) nap_us *= 2;
    }
  }
  return NULL;
}

/* Runs one configuration. Returns 0 and fills p50/p99 (ms), or -1 when a client failed to connect
 * or a segment never arrived. */
static int run(int nclients, int per_host, int rank_threads, int nseg, long pace_us, double *p50_p,
               double *p99_p, double *p99all_p, double *fan50_p, double *fan99_p, double *cpu50_p,
               double *cpu_all_p, double *csw_p, double *icsw_p) {
  uint8_t secret[16];
  ah_coord_random(secret, sizeof secret);
  ah_coord_stamp_t st;
  ah_coord_hub_opts_t ho;
  ah_coord_hub_opts_default(&ho);
  ho.max_pending = nclients + 64; /* the clients connect all at once */
  ah_coord_hub_t *hub = ah_coord_hub_open("127.0.0.1:0", secret, &ho, &st);
  if (!hub) return -1;
  ah_coord_client_opts_t co;
  ah_coord_client_opts_default(&co);
  co.connect_ms = 20000;
  co.relay =
      per_host > 1; /* clients i*per_host .. (i+1)*per_host-1 simulate one host's processes */
  snprintf(co.host, sizeof co.host, "host0");
  client_rec_t *recs = calloc((size_t)nclients, sizeof *recs);
  ah_coord_t **cs = calloc((size_t)nclients, sizeof *cs);
  /* Every page touched now, so the deliver callbacks' stores do not fault the bench's own pages in
   * during the timed phase (calloc of 2.4 MiB maps zero pages on demand; a volatile store, since a
   * memset of calloc'd memory may be compiled away). */
  for (size_t off = 0; recs && off < (size_t)nclients * sizeof *recs; off += 4096)
    ((volatile char *)recs)[off] = 0;
  int *relay_of = NULL;
  int nranks = 0; /* waiting-rank threads (rank_main) */
  rank_t *ranks = NULL;
  pthread_t *rank_thr = NULL;
  _Atomic int ranks_stop = 0;
  int rc = -1;
  const uint64_t comm = 0xc0ffee;
  ah_coord_t *lead = ah_coord_client_open(&st, NULL, &co, NULL, NULL);
  if (!lead) goto out;
  /* The simulated clients' I/O threads inherit a lower priority (nice +10) from this thread: in a
   * real job they run on other hosts and do not take CPU from the hub, whereas here 1,024 of them
   * share 2 cores with it. The hub and the leader keep the default priority. */
  int nice_before = getpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid));
  setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), nice_before + 10);
  for (int i = 0; i < nclients; i++) {
    snprintf(co.host, sizeof co.host, "host%d", per_host > 1 ? i / per_host : i);
    cs[i] = ah_coord_client_open(&st, NULL, &co, bench_deliver, &recs[i]);
    if (!cs[i] || ah_coord_join(cs[i], comm, nclients) != 0) {
      fprintf(stderr, "coord_scale: client %d of %d failed to join\n", i, nclients);
      goto out;
    }
  }
  setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), nice_before);
  for (int t = 0; t < 2000 && ah_coord_hub_clients(hub) < nclients + 1; t++) sleep_us(5000);
  sleep_us(200000); /* let every JOIN land before the first segment */
  /* Each simulated host's relay (-1: none; its processes then poll nothing). */
  int nhosts = (nclients + per_host - 1) / per_host;
  relay_of = malloc((size_t)nhosts * sizeof *relay_of);
  if (!relay_of) goto out;
  for (int h = 0; h < nhosts; h++) {
    relay_of[h] = -1;
    for (int i = h * per_host; i < nclients && i < (h + 1) * per_host; i++)
      if (ah_coord_client_relay_role(cs[i]) == 2) relay_of[h] = i;
    if (relay_of[h] >= 0) recs[relay_of[h]].relay = 1;
  }
  /* --rank-threads: every process behind a relay waits on a thread of its own. */
  if (rank_threads && per_host > 1) {
    ranks = calloc((size_t)nclients, sizeof *ranks);
    rank_thr = calloc((size_t)nclients, sizeof *rank_thr);
    if (!ranks || !rank_thr) goto out;
    setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), nice_before + 10); /* as the clients */
    for (int i = 0; i < nclients; i++) {
      if (relay_of[i / per_host] == i) continue; /* the relay delivers on its I/O thread */
      ranks[nranks] = (rank_t){.c = cs[i], .rec = &recs[i], .nseg = nseg, .stop = &ranks_stop};
      if (pthread_create(&rank_thr[nranks], NULL, rank_main, &ranks[nranks]) != 0) break;
      nranks++;
    }
    setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), nice_before);
  }
  ah_key_t key = {.comm = comm, .coll = AH_FUNC_ALLREDUCE, .bin = 22};
  struct rusage ru0, ru1;
  getrusage(RUSAGE_SELF, &ru0);
  for (int s = 0; s < nseg; s++) {
    ah_segment_t seg;
    memset(&seg, 0, sizeof seg);
    seg.first = (uint64_t)s;
    seg.count = 1;
    seg.config.algo = 1;
    seg.config.proto = 2;
    seg.config.ndims = 1;
    seg.config.res[0] = s % 16 + 1;
    seg.source = AH_SOURCE_TUNED;
    uint64_t t_pub = ah_coord_now_ns();
    atomic_store(&pub_ns[s], t_pub);
    ah_coord_publish(lead, &key, &seg);
    if (ranks) all_got(recs, nclients, s, t_pub, pace_us);
    else ranks_wait(cs, recs, nclients, per_host, relay_of, s, t_pub, pace_us);
    uint64_t spent_us = (ah_coord_now_ns() - t_pub) / 1000;
    if (spent_us < (uint64_t)pace_us) sleep_us(pace_us - (long)spent_us);
  }
  for (int t = 0; t < 3000; t++) {
    int done = 1;
    for (int i = 0; i < nclients && done; i++) done = atomic_load(&recs[i].got) >= nseg;
    if (done) break;
    sleep_us(5000);
  }
  getrusage(RUSAGE_SELF, &ru1);
  *cpu_all_p = ((double)(ru1.ru_utime.tv_sec - ru0.ru_utime.tv_sec) * 1e3 +
                (double)(ru1.ru_utime.tv_usec - ru0.ru_utime.tv_usec) / 1e3 +
                (double)(ru1.ru_stime.tv_sec - ru0.ru_stime.tv_sec) * 1e3 +
                (double)(ru1.ru_stime.tv_usec - ru0.ru_stime.tv_usec) / 1e3) /
               nseg;
  *csw_p = (double)(ru1.ru_nvcsw - ru0.ru_nvcsw) / nseg;
  *icsw_p = (double)(ru1.ru_nivcsw - ru0.ru_nivcsw) / nseg;
  size_t n = (size_t)nclients * (size_t)(nseg - WARMUP);
  uint64_t *all = malloc(n * sizeof *all);
  uint64_t *worst = calloc((size_t)nseg, sizeof *worst);
  size_t k = 0;
  for (int i = 0; i < nclients; i++) {
    if (atomic_load(&recs[i].got) != nseg) {
      fprintf(stderr, "coord_scale: client %d got %d of %d segments\n", i,
              atomic_load(&recs[i].got), nseg);
      free(all);
      free(worst);
      goto out;
    }
    for (int s = WARMUP; s < nseg; s++) {
      all[k++] = recs[i].lat_ns[s];
      if (recs[i].lat_ns[s] > worst[s]) worst[s] = recs[i].lat_ns[s];
    }
  }
  uint64_t fan[NSEG], cpu[NSEG];
  int nf = ah_coord_hub_fanout(hub, fan, cpu, NSEG);
  if (nf > WARMUP) {
    qsort(fan + WARMUP, (size_t)(nf - WARMUP), sizeof *fan, cmp_u64);
    qsort(cpu + WARMUP, (size_t)(nf - WARMUP), sizeof *cpu, cmp_u64);
    *fan50_p = (double)fan[WARMUP + (nf - WARMUP) / 2] / 1e6;
    *fan99_p = (double)fan[WARMUP + (size_t)((double)(nf - WARMUP) * 0.99)] / 1e6;
    *cpu50_p = (double)cpu[WARMUP + (nf - WARMUP) / 2] / 1e6;
  }
  qsort(all, n, sizeof *all, cmp_u64);
  qsort(worst + WARMUP, (size_t)(nseg - WARMUP), sizeof *worst, cmp_u64);
  *p50_p = (double)all[n / 2] / 1e6;
  *p99_p = (double)all[(size_t)((double)n * 0.99)] / 1e6;
  *p99all_p = (double)worst[WARMUP + (size_t)((nseg - WARMUP) * 0.99)] / 1e6;
  free(all);
  free(worst);
  rc = 0;
out:
  atomic_store(&ranks_stop, 1);
  for (int i = 0; i < nranks; i++) pthread_join(rank_thr[i], NULL);
  free(ranks);
  free(rank_thr);
  if (lead) ah_coord_client_close(lead);
  for (int i = 0; i < nclients; i++)
    if (cs[i]) ah_coord_client_close(cs[i]);
  ah_coord_hub_close(hub);
  free(relay_of);
  free(cs);
  free(recs);
  return rc;
}

/* The CPU-bound process the bar is set against (issue 17: "with one other CPU-bound process on
 * the machine"): a child spinning at the default priority, as a data loader or a second job would,
 * killed with this process. Returns its pid, or -1. */
static pid_t hog_start(void) {
  pid_t pid = fork();
  if (pid != 0) return pid;
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  prctl(PR_SET_NAME, "coord_scale-hog");
  volatile uint64_t x = 1;
  for (;;) x = x * 6364136223846793005ull + 1442695040888963407ull;
}

/* "128 hosts x 8 through a relay each", or "one host each, no relay". */
static const char *hosts_text(int n, int per_host) {
  static char t[96];
  if (per_host > 1)
    snprintf(t, sizeof t, "%d hosts x %d, one relay each", (n + per_host - 1) / per_host, per_host);
  else snprintf(t, sizeof t, "one host each, no relay");
  return t;
}

/* A whole decimal number in [lo, hi]; anything else exits with usage status 2, naming the text. */
static int parse_count(const char *what, const char *s, long lo, long hi) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi) {
    fprintf(stderr, "coord_scale: invalid %s '%s' (a whole number %ld..%ld)\n", what, s, lo, hi);
    exit(2);
  }
  return (int)v;
}

/* --one-comm: every client joined to one communicator (issue 17's bars: 64 and 1,024 clients). */
static int one_comm_main(int *counts, int nc, int load, int per_host, int rank_threads) {
  double bars[8];
  if (nc == 0) counts[0] = 64, counts[1] = 1024;
  if (nc == 0) nc = 2; /* the defaults: 64 and 1,024 clients */
  for (int i = 0; i < nc; i++) bars[i] = counts[i] <= 64 ? 2.0 : 10.0;
  long lim = ah_coord_net_nofile_raise(8192);
  pid_t hog = -1;
  int ok = 1;
  char summary[1024] = "";
  size_t off = 0;
  for (int i = 0; i < nc; i++) {
    if (lim < 4L * counts[i] + 64) {
      printf("coord_scale: %d clients need ~%d descriptors, RLIMIT_NOFILE allows %ld\n", counts[i],
             4 * counts[i] + 64, lim);
      ok = 0;
      continue;
    }
    double p50 = 0, p99 = 0, p99all = 0, fan50 = 0, fan99 = 0, cpu50 = 0, cpu_all = 0, csw = 0,
           icsw = 0;
    /* One segment in flight at a time, as a leader committing ahead does: the pace leaves the
     * 2-core machine idle between fan-outs (30 us per client), so what is measured is the latency
     * of one decision reaching all, not the machine's saturation throughput. */
    int nseg = counts[i] > 256 ? 120 : NSEG;
    long pace_us = counts[i] * 30L > 3000 ? counts[i] * 30L : 3000;
    /* The busy process runs beside the large runs only: issue 17's bar is set at 1,024 clients with
     * it; 64 clients keep their bar on an otherwise quiet machine. */
    if (load && counts[i] > 256 && hog < 0 && (hog = hog_start()) < 0) {
      printf("coord_scale: cannot start the CPU-bound process (fork: %s)\n", strerror(errno));
      return 1;
    }
    double hog0 = hog > 0 ? bench_proc_cpu_s(hog) : 0, steal0 = bench_machine_steal_s();
    uint64_t t0 = ah_coord_now_ns();
    if (run(counts[i], per_host, rank_threads, nseg, pace_us, &p50, &p99, &p99all, &fan50, &fan99,
            &cpu50, &cpu_all, &csw, &icsw) != 0) {
      printf("coord_scale: %d clients: run failed\n", counts[i]);
      ok = 0;
      continue;
    }
    double wall = (double)(ah_coord_now_ns() - t0) / 1e9;
    double share = hog > 0 ? (bench_proc_cpu_s(hog) - hog0) / wall * 100.0 : 0;
    double steal1 = bench_machine_steal_s();
    double stolen = steal0 >= 0 && steal1 >= 0
                        ? (steal1 - steal0) / (wall * (double)sysconf(_SC_NPROCESSORS_ONLN)) * 100.0
                        : -1;
    int pass = p99 <= bars[i];
    ok &= pass;
    /* The hub sends one copy per host when the relay carries the host's processes. */
    int nsend = per_host > 1 ? (counts[i] + per_host - 1) / per_host : counts[i];
    printf(
        "coord_scale: %4d clients (%s), %d segments each, one per %ld us: delivery p50 %.3f ms, p99 "
        "%.3f ms (bar %.0f ms: %s); p99 of last-client arrival %.3f ms; hub fan-out p50 %.3f ms, "
        "p99 %.3f ms, of which the hub thread's CPU p50 %.3f ms (%.1f us for each of %d sends)",
        counts[i], hosts_text(counts[i], per_host), nseg - WARMUP, pace_us, p50, p99, bars[i],
        pass ? "ok" : "over", p99all, fan50, fan99, cpu50, cpu50 * 1e3 / nsend, nsend);
    printf(
        "; per decision, all of the bench's threads: %.2f ms of CPU, %.0f voluntary and %.0f involuntary context switches",
        cpu_all, csw, icsw);
    if (per_host > 1)
      printf("; the processes behind relays wait %s",
             rank_threads ? "on a rank thread each, woken by their relay"
                          : "through one thread woken when their relay has it");
    if (hog > 0) printf("; the CPU-bound process had %.0f%% of a CPU", share);
    if (stolen >= 0)
      printf("; the hypervisor took %.1f%% of this machine's CPU time (steal)", stolen);
    printf("\n");
    off += (size_t)snprintf(summary + off, sizeof summary - off,
                            "%s%d clients (%s) p50 %.3f ms p99 %.3f ms", i ? "; " : "", counts[i],
                            hosts_text(counts[i], per_host), p50, p99);
  }
  if (hog > 0) {
    kill(hog, SIGKILL);
    waitpid(hog, NULL, 0);
  }
  /* The machine's load is part of the figure: on a shared host the fan-out competes for CPU. */
  double la[1] = {-1};
  getloadavg(la, 1);
  printf(
      "coord_scale (wall clock, 127.0.0.1, every client a thread of this process on these %ld CPUs "
      "where a job has them on many hosts, %s, load average %.1f): %s: %s\n",
      sysconf(_SC_NPROCESSORS_ONLN),
      load ? "runs above 256 clients beside one CPU-bound process at nice 0" : "no added load",
      la[0], summary, ok ? "OK" : "FAILED");
  return ok ? 0 : 1;
}

/* The default: the clients as the processes of TP8 x PP8 x DP jobs (coord_scale_job.c), 1,024,
 * 8,192 and 16,384 of them; bars p99 <= 10 ms at 1,024, <= 25 ms above (issue 38). */
static int job_main(int *counts, int nc, int load, int records, int rounds) {
  if (nc == 0) counts[0] = 1024, counts[1] = 8192, counts[2] = 16384, nc = 3;
  pid_t hog = -1;
  int ok = 1;
  char summary[1024] = "";
  size_t off = 0;
  for (int i = 0; i < nc; i++) {
    double bar = counts[i] <= 1024 ? 10.0 : 25.0;
    if (load && hog < 0 && (hog = hog_start()) < 0) {
      printf("coord_scale: cannot start the CPU-bound process (fork: %s)\n", strerror(errno));
      return 1;
    }
    double hog0 = hog > 0 ? bench_proc_cpu_s(hog) : 0, steal0 = bench_machine_steal_s();
    uint64_t t0 = ah_coord_now_ns();
    job_result_t r;
    /* One round of three decisions every 20 ms: 150 decisions a second while the records flow. */
    if (coord_scale_job_run(counts[i], rounds, 20000, records, &r) != 0) {
      printf("coord_scale: %d clients: run failed\n", counts[i]);
      ok = 0;
      continue;
    }
    double wall = (double)(ah_coord_now_ns() - t0) / 1e9;
    double share = hog > 0 ? (bench_proc_cpu_s(hog) - hog0) / wall * 100.0 : 0;
    double steal1 = bench_machine_steal_s();
    double stolen = steal0 >= 0 && steal1 >= 0
                        ? (steal1 - steal0) / (wall * (double)sysconf(_SC_NPROCESSORS_ONLN)) * 100.0
                        : -1;
    int pass = r.p99_ms <= bar;
    ok &= pass;
    printf(
        "coord_scale: %5d clients (TP8 x PP8 x DP%d: %d communicators, %d hosts x 8 with a relay "
        "each, in %d worker processes; set up in %.1f s), %d rounds of a TP, a PP and a DP "
        "decision: delivery p50 %.3f ms, p99 %.3f ms (bar %.0f ms: %s); p99 of a decision's last "
        "arrival %.3f ms\n",
        counts[i], counts[i] / 64, r.ncomms, counts[i] / 8, r.nworkers, r.setup_s, rounds - 10,
        r.p50_ms, r.p99_ms, bar, pass ? "ok" : "over", r.last99_ms);
    printf(
        "coord_scale: %5d clients: hub process CPU %.3f ms per decision (%.1f%% of a CPU, %s), "
        "of which %.1f us per host a DP decision is sent to, and %.1f us per record besides; "
        "%.0f records/s at the hub; hub tables %.1f MiB (peak %.1f; budget AUTOHA_HUB_MEM_MB), "
        "hub process resident +%.1f MiB; a simulated host (relay + 7 processes) +%.2f MiB; the "
        "simulated processes (worker processes, nice +10) took %.0f%% of a CPU",
        counts[i], r.hub_cpu_ms, r.hub_share, records ? "records included" : "no records",
        r.fan_cpu_us_send, r.rec_us, r.records_s, r.tables_mib, r.tables_peak_mib, r.hub_rss_mib,
        r.host_rss_mib, r.workers_share);
    if (hog > 0) printf("; the CPU-bound process had %.0f%% of a CPU", share);
    if (stolen >= 0) printf("; steal %.1f%% of this machine's CPU time", stolen);
    printf("; run %.0f s\n", wall);
    fflush(stdout);
    off += (size_t)snprintf(summary + off, sizeof summary - off,
                            "%s%d clients p50 %.3f ms p99 %.3f ms (bar %.0f)", i ? "; " : "",
                            counts[i], r.p50_ms, r.p99_ms, bar);
  }
  if (hog > 0) {
    kill(hog, SIGKILL);
    waitpid(hog, NULL, 0);
  }
  double la[1] = {-1};
  getloadavg(la, 1);
  printf(
      "coord_scale (wall clock, 127.0.0.1, TP8 x PP8 x DP jobs, every client a thread of a worker "
      "process on these %ld CPUs where a job has them on many hosts, %s, load average %.1f): "
      "%s: %s\n",
      sysconf(_SC_NPROCESSORS_ONLN),
      load ? "beside one CPU-bound process at nice 0" : "no added load", la[0], summary,
      ok ? "OK" : "FAILED");
  return ok ? 0 : 1;
}

int main(int argc, char **argv) {
  int counts[8] = {0};
  int nc = 0, load = 1, per_host = 8, rank_threads = 0, one_comm = 0, records = 1, rounds = 160;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--no-load") == 0) load = 0;
    else if (strcmp(argv[i], "--one-comm") == 0) one_comm = 1;
    else if (strcmp(argv[i], "--no-records") == 0) records = 0;
    else if (strcmp(argv[i], "--rank-threads") == 0) rank_threads = 1;
    else if (strcmp(argv[i], "--per-host") == 0 && i + 1 < argc)
      per_host = parse_count("--per-host", argv[++i], 1, 8192);
    else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc)
      rounds = parse_count("--rounds", argv[++i], 20, 300);
    else if (argv[i][0] != '-' && nc < 8) counts[nc++] = parse_count("CLIENTS", argv[i], 1, 131072);
    else {
      fprintf(
          stderr,
          "usage: coord_scale [--no-load] [--no-records] [--rounds R] [CLIENTS...] (TP8 x PP8 x "
          "DP jobs; default 1024 8192 16384)\n"
          "       coord_scale --one-comm [--no-load] [--per-host K] [--rank-threads] "
          "[CLIENTS...] (one communicator; default 64 1024)\n");
      return 2;
    }
  }
  if (one_comm) {
    for (int i = 0; i < nc; i++)
      if (counts[i] > 8192) {
        fprintf(stderr, "coord_scale: invalid CLIENTS '%d' with --one-comm (at most 8192)\n",
                counts[i]);
        return 2;
      }
    return one_comm_main(counts, nc, load, per_host, rank_threads);
  }
  return job_main(counts, nc, load, records, rounds);
}
