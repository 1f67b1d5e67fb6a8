/* coord_scale_job.c: bench/coord_scale with a large job's shape. N coordinator clients stand for
 * the N processes (one GPU each) of a TP8 x PP8 x DP job on N/8 hosts of 8: client i is on host
 * h = i/8 with local index l = i%8, its pipeline stage is p = h%8 and its data-parallel index
 * d = h/8; it joins, with its real rank, its tensor-parallel communicator (its host's 8), its
 * pipeline one (local index l on hosts 8d..8d+7) and its data-parallel one (local index l, stage
 * p, on N/64 hosts): N/8 + N/8 + 64 communicators (4,160 at 16,384). One leader client publishes,
 * each round, one decision on a TP, a PP and a DP communicator (a different one each round), and
 * every member times its arrival from the publish call (one monotonic clock across processes).
 * Each client sends its three progress records once a second, as the shim's ranks do.
 *
 * Key choice: the clients live in worker processes of at most 2,048 (hosts kept whole), forked
 * before the hub opens, because one process cannot hold 16,384 clients' descriptors
 * (RLIMIT_NOFILE's hard limit is 20,000 here, a client with its relay's end takes 4 to 5). The
 * hub and the leader stay in the bench's process, whose CPU time is the hub's cost. In each worker
 * one thread stands for the waiting ranks of its processes (as in coord_scale.c): for each round
 * it takes every member's segment from its process's ring (ah_coord_poll), sleeping in
 * ah_coord_wait — woken by the host relay — while the next one has not arrived. */
#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ah_coord_internal.h"
#include "bench_proc.h"
#include "coord_scale_job.h"

#define MAX_ROUNDS 400
#define WARMUP 10
#define KINDS 3 /* TP, PP, DP */
#define PER_WORKER 2048
#define MAX_WORKERS 64
#define COMM_TAG 0x71ull /* comm ids: (COMM_TAG + kind) << 32 | index */

typedef struct {
  _Atomic uint64_t lat_ns[MAX_ROUNDS][KINDS]; /* 0: not arrived (or not a member) */
} job_rec_t;

/* Shared by the bench and its workers (an anonymous shared mapping made before they fork). */
typedef struct {
  ah_coord_stamp_t st;
  _Atomic int go;         /* st is written: the workers open their clients */
  _Atomic int ready;      /* workers whose clients all have three COMPLETE verdicts */
  _Atomic int failed;     /* a worker could not open, join or get its verdicts */
  _Atomic uint32_t round; /* rounds published (a futex word the workers sleep on) */
  _Atomic int stop;
  _Atomic uint64_t pub_ns[MAX_ROUNDS][KINDS];
  long rss_kb[MAX_WORKERS][2]; /* each worker's resident size before and after its clients */
  int hosts[MAX_WORKERS];
} job_shared_t;

static job_shared_t *g_shm; /* in a worker, for the deliver callback */

static uint64_t comm_id(int kind, int idx) {
  return (COMM_TAG + (uint64_t)kind) << 32 | (uint32_t)idx;
}

/* The communicator of `kind` that round s decides on, as its index. */
static int round_comm(int nclients, int s, int kind) {
  int nhosts = nclients / 8;
  if (kind == 0) return (int)(((long)s * 131) % nhosts); /* a host's TP communicator */
  if (kind == 1) return (int)(((long)s * 97) % nhosts);  /* PP: index d*8 + l */
  return s % 64;                                         /* DP: index p*8 + l */
}

/* Client i's communicator of kind, its index, rank and rank count. */
static int client_comm(int nclients, int i, int kind, int *rank_p, int *nranks_p) {
  int h = i / 8, l = i % 8, p = h % 8, d = h / 8;
  if (kind == 0) return *rank_p = l, *nranks_p = 8, h;
  if (kind == 1) return *rank_p = p, *nranks_p = 8, d * 8 + l;
  return *rank_p = d, *nranks_p = nclients / 64, p * 8 + l;
}

/* The members of round s's communicator of kind, into out (at most N/64 or 8); returns how many. */
static int round_members(int nclients, int s, int kind, int *out) {
  int idx = round_comm(nclients, s, kind), n = 0;
  if (kind == 0)
    for (int l = 0; l < 8; l++) out[n++] = idx * 8 + l;
  else if (kind == 1)
    for (int p = 0; p < 8; p++) out[n++] = ((idx / 8) * 8 + p) * 8 + idx % 8;
  else
    for (int d = 0; d < nclients / 64; d++) out[n++] = (d * 8 + idx / 8) * 8 + idx % 8;
  return n;
}

static void job_deliver(void *arg, const ah_key_t *key, const ah_segment_t *seg) {
  job_rec_t *r = arg;
  uint64_t now = ah_coord_now_ns();
  int kind = (int)((key->comm >> 32) - COMM_TAG);
  if (kind < 0 || kind >= KINDS || seg->first >= MAX_ROUNDS) return;
  uint64_t pub = atomic_load(&g_shm->pub_ns[seg->first][kind]);
  atomic_store(&r->lat_ns[seg->first][kind], now > pub ? now - pub : 1);
}

static void nap_us(long us) {
  struct timespec ts = {.tv_sec = us / 1000000, .tv_nsec = (us % 1000000) * 1000};
  nanosleep(&ts, NULL);
}

static long rss_kb(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[128];
  long kb = -1;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "VmRSS: %ld kB", &kb) == 1) break;
  if (f) fclose(f);
  return kb;
}

typedef struct {
  ah_coord_t **cs;
  int first, n, nclients;
} worker_t;

/* Each client's three progress records once a second, spread over the second in ten slices (each
 * process of a job ticks at its own phase). */
static void *records_main(void *arg) {
  worker_t *w = arg;
  uint64_t entered = 1;
  while (!atomic_load(&g_shm->stop)) {
    uint64_t t0 = ah_coord_now_ns();
    for (int slice = 0; slice < 10 && !atomic_load(&g_shm->stop); slice++) {
      for (int j = slice; j < w->n; j += 10)
        for (int kind = 0; kind < KINDS; kind++) {
          int rank, nranks, idx = client_comm(w->nclients, w->first + j, kind, &rank, &nranks);
          ah_health_rec_t rec = {.rank = (uint32_t)rank,
                                 .pid = (uint32_t)getpid(),
                                 .gpu = (uint16_t)((w->first + j) % 8),
                                 .state = AH_HEALTH_IDLE,
                                 .nkeys = 1};
          rec.keys[0] = (ah_health_key_t){.coll = AH_FUNC_ALLREDUCE, .bin = 22, .entered = entered};
          (void)ah_coord_progress(w->cs[j], comm_id(kind, idx), &rec);
        }
      uint64_t due = t0 + (uint64_t)(slice + 1) * 100000000ull, now = ah_coord_now_ns();
      if (due > now) nap_us((long)((due - now) / 1000));
    }
    entered++;
  }
  return NULL;
}

/* Waits (as a process's waiting rank) until client i has round s's decision of kind, or limit. */
static void rank_take(ah_coord_t *c, job_rec_t *r, int s, int kind, uint64_t limit_ns) {
  long nap = 20;
  while (!atomic_load(&r->lat_ns[s][kind]) && ah_coord_now_ns() < limit_ns) {
    uint64_t t = ah_coord_wait_ticket(c);
    (void)ah_coord_poll(c);
    if (atomic_load(&r->lat_ns[s][kind])) break;
    ah_coord_wait(c, t, nap);
    if (nap < 500) nap *= 2;
  }
}

static int worker_main(int wi, int first_host, int nhosts_w, int nclients, int rounds, int records,
                       job_rec_t *recs) {
  setpriority(PRIO_PROCESS, 0, 10); /* as coord_scale.c's clients: they stand for other hosts */
  ah_coord_net_nofile_raise(1 << 20);
  while (!atomic_load(&g_shm->go) && !atomic_load(&g_shm->stop)) nap_us(1000);
  g_shm->rss_kb[wi][0] = rss_kb();
  int first = first_host * 8, n = nhosts_w * 8;
  ah_coord_t **cs = calloc((size_t)n, sizeof *cs);
  ah_coord_client_opts_t co;
  ah_coord_client_opts_default(&co);
  co.connect_ms = 60000;
  co.relay = 1;
  int ok = cs != NULL;
  for (int j = 0; ok && j < n; j++) {
    snprintf(co.host, sizeof co.host, "host%d", (first + j) / 8);
    cs[j] = ah_coord_client_open(&g_shm->st, NULL, &co, job_deliver, &recs[first + j]);
    for (int kind = 0; cs[j] && kind < KINDS; kind++) {
      int rank, nranks, idx = client_comm(nclients, first + j, kind, &rank, &nranks);
      if (ah_coord_join_rank(cs[j], comm_id(kind, idx), nranks, rank, NULL) != 0) ok = 0;
    }
    if (!cs[j]) ok = 0;
  }
  for (int j = 0; ok && j < n; j++)
    for (int kind = 0; ok && kind < KINDS; kind++) {
      int rank, nranks, idx = client_comm(nclients, first + j, kind, &rank, &nranks), v = 0;
      for (int t = 0; t < 300000 && (v = ah_coord_verdict(cs[j], comm_id(kind, idx))) == 0; t++) {
        (void)ah_coord_poll(cs[j]);
        nap_us(1000);
      }
      if (v != AH_COORD_VERDICT_COMPLETE) {
        fprintf(stderr, "coord_scale: client %d: comm %llx verdict %d\n", first + j,
                (unsigned long long)comm_id(kind, idx), v);
        ok = 0;
      }
    }
  if (!ok) atomic_store(&g_shm->failed, 1);
  g_shm->rss_kb[wi][1] = rss_kb();
  worker_t w = {.cs = cs, .first = first, .n = n, .nclients = nclients};
  pthread_t rt;
  int rthr = ok && records && pthread_create(&rt, NULL, records_main, &w) == 0;
  if (ok) atomic_fetch_add(&g_shm->ready, 1);
  int *mem = malloc((size_t)(nclients / 64 + 8) * sizeof *mem);
  for (int s = 0; ok && mem && s < rounds && !atomic_load(&g_shm->stop); s++) {
    uint32_t seen;
    while ((seen = atomic_load(&g_shm->round)) <= (uint32_t)s && !atomic_load(&g_shm->stop)) {
      struct timespec ts = {0, 50 * 1000 * 1000};
      syscall(SYS_futex, &g_shm->round, FUTEX_WAIT, seen, &ts, NULL, 0);
    }
    uint64_t limit = ah_coord_now_ns() + 2000000000ull;
    for (int kind = 0; kind < KINDS; kind++) {
      int nm = round_members(nclients, s, kind, mem);
      for (int k = 0; k < nm; k++)
        if (mem[k] >= first && mem[k] < first + n)
          rank_take(cs[mem[k] - first], &recs[mem[k]], s, kind, limit);
    }
  }
  free(mem);
  while (!atomic_load(&g_shm->stop)) nap_us(10000);
  if (rthr) pthread_join(rt, NULL);
  /* Every communicator left first (the hub takes the closes for the job's end, not for deaths; a
   * goodbye would wait 250 ms a process), then each host's processes before its relay (the first
   * of a host), so none of them reconnects. */
  for (int j = 0; cs && j < n; j++)
    for (int kind = 0; cs[j] && kind < KINDS; kind++) {
      int rank, nranks, idx = client_comm(nclients, first + j, kind, &rank, &nranks);
      ah_coord_leave(cs[j], comm_id(kind, idx));
    }
  nap_us(500000); /* the LEAVEs reach the hub */
  for (int j = n - 1; cs && j >= 0; j--)
    if (cs[j]) ah_coord_client_close(cs[j]);
  free(cs);
  return ok ? 0 : 1;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static double cpu_ms_self(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
         (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
}

/* Fills r_p's delivery figures from the records of rounds WARMUP.. (every member must have each). */
static int job_figures(int nclients, int rounds, job_rec_t *recs, job_result_t *r_p) {
  size_t cap = (size_t)rounds * (size_t)(16 + nclients / 64), n = 0, nl = 0;
  uint64_t *all = malloc(cap * sizeof *all), *last = malloc((size_t)rounds * KINDS * sizeof *last);
  int *mem = malloc((size_t)(nclients / 64 + 8) * sizeof *mem), missing = 0;
  if (!all || !last || !mem) {
    free(all), free(last), free(mem);
    return -1;
  }
  for (int s = WARMUP; s < rounds; s++)
    for (int kind = 0; kind < KINDS; kind++) {
      int nm = round_members(nclients, s, kind, mem);
      uint64_t worst = 0;
      for (int k = 0; k < nm; k++) {
        uint64_t v = atomic_load(&recs[mem[k]].lat_ns[s][kind]);
        if (!v) missing++;
        all[n++] = v;
        if (v > worst) worst = v;
      }
      last[nl++] = worst;
    }
  if (missing) printf("coord_scale: %d deliveries never arrived\n", missing);
  qsort(all, n, sizeof *all, cmp_u64);
  qsort(last, nl, sizeof *last, cmp_u64);
  r_p->p50_ms = (double)all[n / 2] / 1e6;
  r_p->p99_ms = (double)all[(size_t)((double)n * 0.99)] / 1e6;
  r_p->last99_ms = (double)last[(size_t)((double)nl * 0.99)] / 1e6;
  free(all), free(last), free(mem);
  return missing ? -1 : 0;
}

/* Publishes the rounds from the leader, each once the previous one reached all its members (or
 * after 500 ms), pace_us apart. */
static void job_publish(ah_coord_t *lead, int nclients, int rounds, long pace_us, job_rec_t *recs) {
  int *mem = malloc((size_t)(nclients / 64 + 8) * sizeof *mem);
  for (int s = 0; mem && s < rounds; s++) {
    uint64_t t0 = ah_coord_now_ns();
    for (int kind = 0; kind < KINDS; kind++) {
      ah_key_t key = {.comm = comm_id(kind, round_comm(nclients, s, kind)),
                      .coll = AH_FUNC_ALLREDUCE,
                      .bin = 22};
      ah_segment_t seg;
      memset(&seg, 0, sizeof seg);
      seg.first = (uint64_t)s;
      seg.count = 1;
      seg.config.algo = 1;
      seg.config.proto = 2;
      seg.config.ndims = 1;
      seg.config.res[0] = s % 16 + 1;
      seg.source = AH_SOURCE_TUNED;
      atomic_store(&g_shm->pub_ns[s][kind], ah_coord_now_ns());
      ah_coord_publish(lead, &key, &seg);
    }
    atomic_store(&g_shm->round, (uint32_t)s + 1);
    syscall(SYS_futex, &g_shm->round, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
    for (int kind = 0; kind < KINDS; kind++) {
      int nm = round_members(nclients, s, kind, mem);
      for (int k = 0; k < nm; k++)
        while (!atomic_load(&recs[mem[k]].lat_ns[s][kind]) && ah_coord_now_ns() - t0 < 500000000ull)
          nap_us(200);
    }
    uint64_t spent = (ah_coord_now_ns() - t0) / 1000;
    if (spent < (uint64_t)pace_us) nap_us(pace_us - (long)spent);
  }
  free(mem);
}

int coord_scale_job_run(int nclients, int rounds, long pace_us, int records, job_result_t *r_p) {
  int nhosts = nclients / 8, nworkers = (nclients + PER_WORKER - 1) / PER_WORKER;
  if (nclients % 64 || nclients < 64 || rounds <= WARMUP || rounds > MAX_ROUNDS ||
      nworkers > MAX_WORKERS) {
    printf("coord_scale: %d clients: a multiple of 64 (TP8 x PP8), at most %d\n", nclients,
           MAX_WORKERS * PER_WORKER);
    return -1;
  }
  memset(r_p, 0, sizeof *r_p);
  r_p->ncomms = nhosts + nhosts + 64;
  r_p->nworkers = nworkers;
  size_t rec_bytes = (size_t)nclients * sizeof(job_rec_t);
  g_shm = mmap(NULL, sizeof *g_shm, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  job_rec_t *recs = mmap(NULL, rec_bytes, PROT_READ | PROT_WRITE,
                         MAP_SHARED | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (g_shm == MAP_FAILED || recs == MAP_FAILED) {
    printf("coord_scale: cannot map %zu bytes of records: %s\n", rec_bytes, strerror(errno));
    return -1;
  }
  memset(g_shm, 0, sizeof *g_shm);
  pid_t pids[MAX_WORKERS];
  int hosts_per = nhosts / nworkers, rc = -1;
  fflush(stdout);
  for (int w = 0; w < nworkers; w++) {
    int first = w * hosts_per, nh = w == nworkers - 1 ? nhosts - first : hosts_per;
    g_shm->hosts[w] = nh;
    if ((pids[w] = fork()) == 0) _exit(worker_main(w, first, nh, nclients, rounds, records, recs));
  }
  long rss0 = rss_kb();
  uint8_t secret[16];
  ah_coord_random(secret, sizeof secret);
  ah_coord_hub_opts_t ho;
  ah_coord_hub_opts_default(&ho);
  ho.max_pending = nclients + 64; /* every client connects at once */
  ho.join_ms = 600000;            /* the workers open 16,384 clients one by one */
  ah_coord_hub_t *hub = ah_coord_hub_open("127.0.0.1:0", secret, &ho, &g_shm->st);
  ah_coord_client_opts_t co;
  ah_coord_client_opts_default(&co);
  co.relay = 0;
  ah_coord_t *lead = hub ? ah_coord_client_open(&g_shm->st, NULL, &co, NULL, NULL) : NULL;
  uint64_t t_setup = ah_coord_now_ns();
  atomic_store(&g_shm->go, 1);
  while (lead && atomic_load(&g_shm->ready) < nworkers && !atomic_load(&g_shm->failed) &&
         ah_coord_now_ns() - t_setup < 600000000000ull)
    nap_us(10000);
  if (!lead || atomic_load(&g_shm->ready) < nworkers) {
    printf("coord_scale: %d clients: the workers did not all join (%d of %d ready)\n", nclients,
           atomic_load(&g_shm->ready), nworkers);
    goto out;
  }
  r_p->setup_s = (double)(ah_coord_now_ns() - t_setup) / 1e9;
  nap_us(2000000); /* the records reach their steady rate */
  double cpu0 = cpu_ms_self(), wcpu0 = 0, wcpu1 = 0;
  for (int w = 0; w < nworkers; w++) wcpu0 += bench_proc_cpu_s(pids[w]);
  uint64_t rec0 = ah_coord_hub_records(hub), t0 = ah_coord_now_ns();
  job_publish(lead, nclients, rounds, pace_us, recs);
  double wall_ms = (double)(ah_coord_now_ns() - t0) / 1e6, cpu = cpu_ms_self() - cpu0;
  uint64_t nrec = ah_coord_hub_records(hub) - rec0;
  for (int w = 0; w < nworkers; w++) wcpu1 += bench_proc_cpu_s(pids[w]);
  r_p->workers_share = (wcpu1 - wcpu0) / (wall_ms / 1e3) * 100.0;
  int ndec = rounds * KINDS;
  r_p->hub_cpu_ms = cpu / ndec;
  r_p->hub_share = cpu / wall_ms * 100.0;
  r_p->records_s = (double)nrec / (wall_ms / 1e3);
  /* The fan-out ring holds the last publishes, oldest first, in publish order: TP, PP, DP. */
  uint64_t fan[1024], fcpu[1024];
  int nf = ah_coord_hub_fanout(hub, fan, fcpu, 1024);
  double fan_all = 0, fan_dp = 0;
  int ndp = 0;
  for (int i = 0; i < nf; i++) {
    fan_all += (double)fcpu[i] / 1e6;
    if ((nf - 1 - i) % KINDS == 0) fan_dp += (double)fcpu[i] / 1e6, ndp++;
  }
  r_p->fan_cpu_us_send =
      ndp ? fan_dp / ndp * 1e3 / (nhosts / 8) : 0; /* a DP decision: N/64 hosts */
  r_p->rec_us = nrec ? (cpu - fan_all * ndec / (nf ? nf : 1)) * 1e3 / (double)nrec : 0;
  size_t peak = 0;
  r_p->tables_mib = (double)ah_coord_hub_mem_held(hub, &peak) / (1 << 20);
  r_p->tables_peak_mib = (double)peak / (1 << 20);
  r_p->hub_rss_mib = (double)(rss_kb() - rss0) / 1024.0;
  double host_kb = 0;
  for (int w = 0; w < nworkers; w++)
    host_kb += (double)(g_shm->rss_kb[w][1] - g_shm->rss_kb[w][0]) / g_shm->hosts[w];
  r_p->host_rss_mib = host_kb / nworkers / 1024.0;
  rc = job_figures(nclients, rounds, recs, r_p);
out:
  atomic_store(&g_shm->stop, 1);
  atomic_store(&g_shm->go, 1);
  syscall(SYS_futex, &g_shm->round, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
  for (int w = 0; w < nworkers; w++) {
    int status = 0;
    if (waitpid(pids[w], &status, 0) > 0 && (!WIFEXITED(status) || WEXITSTATUS(status) != 0))
      rc = -1;
  }
  if (lead) ah_coord_client_close(lead);
  if (hub) ah_coord_hub_close(hub);
  munmap(recs, rec_bytes);
  munmap(g_shm, sizeof *g_shm);
  return rc;
}
