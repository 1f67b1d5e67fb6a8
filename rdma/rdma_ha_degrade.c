/* rdma_ha_degrade.c: finding a queue pair whose path is degraded rather than down (docs/ha.md,
 * "Degraded links"): a link running at a fraction of its rate gives no error, only slower
 * completions, so the background thread measures each queue pair's completion time and compares it
 * with its NIC's other queue pairs and the job's other processes (samples exchanged through the
 * hub by a thread of its own); one persistently slower is reported to the rebalance
 * (rdma_ha_rebal.c), which re-plans the flows on its links and moves queue pairs live.
 *
 * Key choice: nothing is added to the data path. Every 100 ms the background thread reads two
 * counters the data path keeps anyway — how many signalled work requests were posted and retired —
 * so it knows how many are outstanding and how many completed, and Little's law turns a window of such samples into the
 * mean time a work request waits for its completion. In a ring the slowest link paces every flow, so
 * completion *rates* stay alike and only that waiting time tells the slow flow from the others. */
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ah_env.h"
#include "rdma_ha_int.h"

#define DG_WINDOWS 3 /* windows in a row a queue pair must be slow before it is reported */
#define DG_FLOOR_S                                                                                 \
  0.0001            /* and slower than its peers by at least this much, and two grains of the
                            * estimate (a sample's worth: coarse when few work requests complete) */
#define DG_MAX 256  /* queue pairs compared per look */
#define DG_SLOTS 32 /* the job's shared samples in the hub ("HAD1"), one per process hash */

/* One process's sample in the hub: the median completion time of its measured queue pairs over its
 * last window, and when (CLOCK_REALTIME: the job's hosts share it, closely enough for seconds). */
typedef struct {
  double lat, t;
} dg_sample_t;

/* One sample of m (with m->mu held); closes m's window when it is due. */
static void sample(ha_qp_t *m, double now) {
  const ah_settings_t *env = ah_env_settings();
  ha_dg_t *d = &m->dg;
  /* every queue pair is measured (a peer of the others), once the rebalance has its plan: only one
   * the plan places can be moved, but any other one of its NIC tells what a healthy path gives */
  if (m->slog.sig_all) return;
  /* read without the data path's ordering: a sample off by one work request changes nothing */
  uint64_t done = m->slog.sig_tail, out = m->slog.nsig - m->slog.sig_tail;
  if (d->t0 == 0) {
    d->t0 = now, d->done0 = done, d->occ = 0, d->n = 0;
    return;
  }
  d->occ += (double)out;
  d->n++;
  if (now - d->t0 < env->ha_degrade_s) return;
  uint64_t k = done - d->done0;
  /* idle (nothing outstanding at any sample and nothing completed): no estimate */
  d->lat = d->occ == 0 && k == 0 ? -1 : d->occ / d->n * (now - d->t0) / (double)(k ? k : 1);
  /* what one sample with one work request outstanding adds: the estimate's grain */
  d->res = (now - d->t0) / d->n / (double)(k ? k : 1);
  d->lat_t = now;
  ah_log_dev(
      m->gpu, AH_LOG_DEBUG,
      "HA: QP %u: %.3f ms per signalled work request over %.2f s (%.1f outstanding, %llu completed; "
      "flow %d, spine %d)",
      m->qpn, d->lat * 1e3, now - d->t0, d->occ / d->n, (unsigned long long)k, m->flow,
      ah_shim_ha_rebal_spine(m));
  d->t0 = now, d->done0 = done, d->occ = 0, d->n = 0;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* The median of v[0..k), or -1 when k is 0 (v is sorted). */
static double median(double *v, int k) {
  if (!k) return -1;
  qsort(v, (size_t)k, sizeof v[0], cmp_double);
  return k & 1 ? v[k / 2] : (v[k / 2 - 1] + v[k / 2]) / 2;
}

/* What q[self] is compared with: the estimates of the other queue pairs of its NIC (the same bytes at
 * the same time on other paths) and the job's samples (other processes: every queue pair of a NIC
 * may cross the degraded link, and then only the rest of the job tells that they are slow). */
static double peers_median(ha_qp_t **q, int n, int self, const double *job, int njob) {
  double v[DG_MAX + DG_SLOTS];
  int k = 0;
  for (int i = 0; i < n; i++)
    if (i != self && q[i]->dg.lat >= 0 && q[i]->hc == q[self]->hc) v[k++] = q[i]->dg.lat;
  for (int j = 0; j < njob; j++) v[k++] = job[j];
  return median(v, k);
}

static void dg_key(uint8_t key[HA_KEY], uint32_t slot) {
  static const uint8_t job[16] = {0};
  ah_shim_ha_dir_key(key, job, slot, 0, KIND_DEGRADE);
}

/* The job-wide exchange runs on its own thread: 32 look-ups each wait for the hub's answer, and
 * the background thread, which also runs failovers, must never wait on the hub for this. The HA
 * thread leaves its process's median in dg_own; this thread publishes it and leaves the other
 * processes' fresh samples in dg_job. */
static pthread_mutex_t dg_mu = PTHREAD_MUTEX_INITIALIZER;
static double dg_own = -1, dg_job[DG_SLOTS];
static int dg_njob;
static uint32_t dg_mine; /* this process's slot */

static double real_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void *dg_thread(void *arg) {
  (void)arg;
  const ah_settings_t *env = ah_env_settings();
  /* a slot found empty is looked at again only every 4th window */
  unsigned char skip[DG_SLOTS] = {0};
  for (;;) {
    struct timespec ts = {(time_t)env->ha_degrade_s,
                          (long)((env->ha_degrade_s - (double)(time_t)env->ha_degrade_s) * 1e9)};
    nanosleep(&ts, NULL);
    uint8_t key[HA_KEY];
    pthread_mutex_lock(&dg_mu);
    double own = dg_own;
    pthread_mutex_unlock(&dg_mu);
    double now = real_now(), job[DG_SLOTS];
    if (own >= 0) {
      dg_sample_t smp = {own, now};
      dg_key(key, dg_mine);
      ah_shim_ha_dir_put(key, &smp, sizeof smp);
    }
    int nj = 0;
    for (uint32_t s = 0; s < DG_SLOTS; s++) {
      dg_sample_t smp;
      if (s == dg_mine || (skip[s] && skip[s]--)) continue;
      dg_key(key, s);
      if (ah_shim_ha_dir_get(key, &smp, sizeof smp, HA_LOOK) != (int)sizeof smp) {
        skip[s] = 3;
        continue;
      }
      if (smp.lat >= 0 && fabs(now - smp.t) < 2.5 * env->ha_degrade_s) job[nj++] = smp.lat;
    }
    pthread_mutex_lock(&dg_mu);
    memcpy(dg_job, job, (size_t)nj * sizeof job[0]);
    dg_njob = nj;
    pthread_mutex_unlock(&dg_mu);
  }
  return NULL;
}

/* Leaves this process's median estimate for the exchange thread (started on the first call) and
 * copies the other processes' latest samples into job[]; returns how many. */
static int job_samples(ha_qp_t **q, int n, double *job) {
  static int started;
  if (!started) {
    started = 1;
    uint64_t h = 1469598103934665603ull ^ (uint64_t)getpid(); /* the slot: this pid and first GID */
    for (int i = 0; i < 16; i++) h = (h ^ q[0]->sgid.raw[i]) * 1099511628211ull;
    dg_mine = (uint32_t)(h >> 32) % DG_SLOTS;
    pthread_t t;
    pthread_attr_t a;
    sigset_t all, old;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    sigfillset(&all); /* NCCL's signals stay on NCCL's threads */
    pthread_sigmask(SIG_SETMASK, &all, &old);
    if (pthread_create(&t, &a, dg_thread, NULL) != 0)
      ah_log(
          AH_LOG_WARN,
          "HA: cannot start the degraded-link exchange thread; queue pairs are compared within this process only");
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&a);
  }
  double v[DG_MAX];
  int k = 0;
  for (int i = 0; i < n; i++)
    if (q[i]->dg.lat >= 0) v[k++] = q[i]->dg.lat;
  double own = median(v, k);
  pthread_mutex_lock(&dg_mu);
  dg_own = own;
  int nj = dg_njob;
  memcpy(job, dg_job, (size_t)nj * sizeof job[0]);
  pthread_mutex_unlock(&dg_mu);
  return nj;
}

void ah_shim_ha_degrade_check(void) {
  const ah_settings_t *env = ah_env_settings();
  static double next;
  double now = ha_now_s();
  if (env->ha_degrade <= 0 || now < next) return;
  next = now + 0.1; /* a sample of every queue pair every 100 ms */
  /* every queue pair is measured (a peer of the others), once the rebalance has its plan: only one
   * the plan places can be moved, but any other one of its NIC tells what a healthy path gives */
  if (!ah_shim_ha_rebal_on()) return;
  ha_qp_t *q[DG_MAX];
  int n = 0;
  pthread_mutex_lock(&ah_shim_ha_mu);
  for (ha_qp_t *m = ah_shim_ha_qps; m && n < DG_MAX; m = m->next) {
    int st = atomic_load(&m->state);
    if ((st == HA_PEACE || st == HA_SHADOW) && !m->busy) { /* busy keeps m from a destroy */
      m->busy = 1;
      q[n++] = m;
    }
  }
  pthread_mutex_unlock(&ah_shim_ha_mu);
  for (int i = 0; i < n; i++) {
    ah_shim_ha_rebal_flow(
        q[i]); /* looked up once, while the hook's port is still the planned one */
    pthread_mutex_lock(&q[i]->mu);
    sample(q[i], now);
    pthread_mutex_unlock(&q[i]->mu);
  }
  /* the queue pairs with a fresh estimate (dg is this thread's own) */
  ha_qp_t *f[DG_MAX];
  int nf = 0;
  for (int i = 0; i < n; i++)
    if (q[i]->dg.lat_t > 0 && now - q[i]->dg.lat_t < 1.5 * env->ha_degrade_s) f[nf++] = q[i];
  double job[DG_SLOTS];
  int njob = nf ? job_samples(f, nf, job) : 0;
  for (int i = 0; i < nf; i++) {
    ha_dg_t *d = &f[i]->dg;
    double med = peers_median(f, nf, i, job, njob);
    if (d->lat_t == d->judged_t) continue; /* one verdict per window */
    d->judged_t = d->lat_t;
    if (d->lat < 0 || med < 0) continue; /* no estimate, or nothing to compare with */
    ah_log_dev(f[i]->gpu, AH_LOG_DEBUG,
               "HA: QP %u: %.3f ms against a median of %.3f ms (%d samples of other processes)",
               f[i]->qpn, d->lat * 1e3, med * 1e3, njob);
    if (d->lat >= env->ha_degrade * med && d->lat - med >= DG_FLOOR_S &&
        d->lat - med >= 2 * d->res) {
      if (++d->slow >= DG_WINDOWS && !d->reported) {
        d->reported = 1;
        AH_LOG_DEV_CAPPED(
            16, f[i]->gpu, AH_LOG_WARN,
            "HA: QP %u: its work requests wait %.1f ms for their completions, against "
            "%.1f ms for its peers (its NIC's other queue pairs, the job's other processes), for %d windows "
            "of %.1f s: its path looks degraded; re-planning around the links it crosses",
            f[i]->qpn, d->lat * 1e3, med * 1e3, d->slow, env->ha_degrade_s);
        ah_shim_ha_rebal_degraded(f[i]);
      }
    } else {
      d->slow = 0;
    }
  }
  pthread_mutex_lock(&ah_shim_ha_mu);
  for (int i = 0; i < n; i++) q[i]->busy = 0;
  pthread_cond_broadcast(&ah_shim_ha_idle_cv);
  pthread_mutex_unlock(&ah_shim_ha_mu);
}
