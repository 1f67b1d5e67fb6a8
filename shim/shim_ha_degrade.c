/* shim_ha_degrade.c: finding a queue pair whose path is degraded rather than down (docs/ha.md,
 * "Degraded links"): a link running at a fraction of its rate gives no error, only slower
 * completions, so the background thread measures each queue pair's completion time and compares it
 * with the other queue pairs of the process; one persistently slower is reported to the rebalance
 * (shim_ha_rebal.c), which re-plans the flows on its links and moves queue pairs live.
 *
 * Key choice: nothing is added to the data path. The thread already looks at every queue pair's send
 * log every 100 ms (heartbeats, the soft timeout); there it samples how many signalled work requests
 * are outstanding and how many completed, and Little's law turns a window of such samples into the
 * mean time a work request waits for its completion. In a ring the slowest link paces every flow, so
 * completion *rates* stay alike and only that waiting time tells the slow flow from the others. */
#include <math.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "ah_env.h"
#include "shim_ha_int.h"

#define DG_WINDOWS 3       /* windows in a row a queue pair must be slow before it is reported */
#define DG_FLOOR_S 0.0001  /* and slower than its peers by at least this much, and two grains of the
                            * estimate (a sample's worth: coarse when few work requests complete) */
#define DG_MAX 256         /* queue pairs compared per look */
#define DG_SLOTS 32        /* the job's shared samples in the hub ("HAD1"), one per process hash */

/* One process's sample in the hub: the median completion time of its measured queue pairs over its
 * last window, and when (CLOCK_REALTIME: the job's hosts share it, closely enough for seconds). */
typedef struct {
  double lat, t;
} dg_sample_t;

void ha_degrade_sample(ha_qp_t *m, double now) {
  const ah_settings_t *env = ah_env_settings();
  ha_dg_t *d = &m->dg;
  /* every queue pair is measured (a peer of the others), once the rebalance has its plan: only one
   * the plan places can be moved, but any other one of its NIC tells what a healthy path gives */
  if (env->ha_degrade <= 0 || m->slog.sig_all || (ha_rebal_flow(m) < 0 && !ha_rebal_on())) return;
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
  ah_log(AH_LOG_DEBUG, "HA: QP %u: %.3f ms per signalled work request over %.2f s (%.1f outstanding, %llu completed; "
         "flow %d, spine %d)", m->qpn, d->lat * 1e3, now - d->t0, d->occ / d->n, (unsigned long long)k, m->flow,
         ha_rebal_spine(m));
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
  ha_dir_key(key, job, slot, 0, KIND_DEGRADE);
}

/* Publishes this process's median estimate in its slot and reads the other slots' fresh samples into
 * job[] (at most DG_SLOTS - 1); returns how many. */
static int job_samples(ha_qp_t **q, int n, double win, double *job) {
  static uint32_t mine = UINT32_MAX;
  if (mine == UINT32_MAX) { /* the process's slot: a hash of its first queue pair's GID and its pid */
    uint64_t h = 1469598103934665603ull ^ (uint64_t)getpid();
    for (int i = 0; i < 16; i++) h = (h ^ q[0]->sgid.raw[i]) * 1099511628211ull;
    mine = (uint32_t)(h >> 32) % DG_SLOTS;
  }
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  double now = (double)ts.tv_sec + ts.tv_nsec * 1e-9, v[DG_MAX];
  int k = 0;
  for (int i = 0; i < n; i++)
    if (q[i]->dg.lat >= 0) v[k++] = q[i]->dg.lat;
  uint8_t key[HA_KEY];
  if (k) {
    dg_sample_t smp = {median(v, k), now};
    dg_key(key, mine);
    ha_dir_put(key, &smp, sizeof smp);
  }
  /* a slot found empty is looked at again only every 4th time: its get waits out the timeout (the
   * hub answers at once only for a key it has), on the thread that also runs failovers */
  static unsigned char skip[DG_SLOTS];
  int nj = 0;
  for (uint32_t s = 0; s < DG_SLOTS; s++) {
    dg_sample_t smp;
    if (s == mine || (skip[s] && skip[s]--)) continue;
    dg_key(key, s);
    if (ha_dir_get(key, &smp, sizeof smp, 0.02) != (int)sizeof smp) {
      skip[s] = 3;
      continue;
    }
    if (smp.lat >= 0 && fabs(now - smp.t) < 2.5 * win) job[nj++] = smp.lat;
  }
  return nj;
}

void ha_degrade_check(void) {
  const ah_settings_t *env = ah_env_settings();
  static double next;
  double now = ha_now_s();
  if (env->ha_degrade <= 0 || now < next) return;
  next = now + env->ha_degrade_s / 2;
  ha_qp_t *q[DG_MAX];
  int n = 0;
  pthread_mutex_lock(&ha_mu);
  for (ha_qp_t *m = ha_qps; m && n < DG_MAX; m = m->next) {
    int st = atomic_load(&m->state);
    /* dg is the background thread's own (this thread samples it); busy keeps m from a destroy */
    if ((st == HA_PEACE || st == HA_SHADOW) && !m->busy && m->dg.lat_t > 0 &&
        now - m->dg.lat_t < 1.5 * env->ha_degrade_s) {
      m->busy = 1;
      q[n++] = m;
    }
  }
  pthread_mutex_unlock(&ha_mu);
  double job[DG_SLOTS];
  int njob = n ? job_samples(q, n, env->ha_degrade_s, job) : 0;
  for (int i = 0; i < n; i++) {
    ha_dg_t *d = &q[i]->dg;
    double med = peers_median(q, n, i, job, njob);
    if (d->lat_t == d->judged_t) continue; /* one verdict per window */
    d->judged_t = d->lat_t;
    if (d->lat < 0 || med < 0) continue; /* no estimate, or nothing to compare with */
    ah_log(AH_LOG_DEBUG, "HA: QP %u: %.3f ms against a median of %.3f ms (%d samples of other processes)", q[i]->qpn,
           d->lat * 1e3, med * 1e3, njob);
    if (d->lat >= env->ha_degrade * med && d->lat - med >= DG_FLOOR_S && d->lat - med >= 2 * d->res) {
      if (++d->slow >= DG_WINDOWS && !d->reported) {
        d->reported = 1;
        AH_LOG_CAPPED(16, AH_LOG_WARN, "HA: QP %u: its work requests wait %.1f ms for their completions, %.1fx the "
                      "%.1f ms of its peers (its NIC's other queue pairs, the job's other processes), for %d windows "
                      "of %.1f s: its path looks "
                      "degraded; re-planning around the links it crosses", q[i]->qpn, d->lat * 1e3, d->lat / (med > 0 ? med : 1e-9),
                      med * 1e3, d->slow, env->ha_degrade_s);
        ha_rebal_degraded(q[i]);
      }
    } else {
      d->slow = 0;
    }
  }
  pthread_mutex_lock(&ha_mu);
  for (int i = 0; i < n; i++) q[i]->busy = 0;
  pthread_cond_broadcast(&ha_idle_cv);
  pthread_mutex_unlock(&ha_mu);
}
