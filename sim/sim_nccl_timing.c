/* Modelled durations of collectives and point-to-point messages. Collectives use the truth model
 * of sim/model/ with the configuration chosen at group launch, times seeded noise
 * (NCCLSIM_NOISE=sigma[,outlier-rate], NCCLSIM_SEED), and each rank's arrival skew (NCCLSIM_SKEW). The key choice: the noise of a call is drawn
 * from (seed, communicator size, collective, count, call index), so every rank computes the same
 * duration for the same call and a rerun reproduces it. Point-to-point and configuration-less calls keep the data plane's
 * simple model (a fixed latency plus bytes over a fixed bandwidth). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "sim_nccl.h"
#include "sim_nccl_net.h"
#include "sim_reduce.h"

static pthread_once_t noise_once = PTHREAD_ONCE_INIT;
static double noise_sigma, noise_outliers;
static uint64_t noise_seed = 1;
static long noise_rank; /* RANK: the process's own compute jitter */
static double
    skew_frac; /* NCCLSIM_SKEW: a rank arrives up to this fraction of the call's time late */

static void noise_init(void) {
  const char *s = getenv("NCCLSIM_NOISE");
  if (s && *s) {
    double sigma = 0, rate = 0;
    char tail;
    int n = sscanf(s, "%lf,%lf%c", &sigma, &rate, &tail);
    if (n == 1 && sscanf(s, "%lf%c", &sigma, &tail) == 1) rate = 0, n = 2;
    if (n != 2 || !(sigma >= 0 && sigma <= 1) || !(rate >= 0 && rate <= 1))
      sim_log_warn(
          "invalid value for NCCLSIM_NOISE: '%s' (expected sigma[,outlier-rate], e.g. "
          "0.02,0.01); no noise",
          s);
    else noise_sigma = sigma, noise_outliers = rate;
  }
  s = getenv("NCCLSIM_SKEW");
  if (s && *s) {
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || !(v >= 0 && v <= 10))
      sim_log_warn(
          "invalid value for NCCLSIM_SKEW: '%s' (expected a fraction of the call's time in "
          "0..10, e.g. 0.2); no skew",
          s);
    else skew_frac = v;
  }
  s = getenv("RANK");
  if (s && *s) noise_rank = strtol(s, NULL, 10) & 0xffffff;
  s = getenv("NCCLSIM_SEED");
  if (s && *s) {
    char *end;
    unsigned long long v = strtoull(s, &end, 0);
    if (*end)
      sim_log_warn("invalid value for NCCLSIM_SEED: '%s' (expected an integer); using 1", s);
    else noise_seed = v;
  }
}

static double simple_time_us(const struct ncclComm *comm, const sim_desc_t *d, double phi) {
  double bytes = (double)d->count * (double)sim_dtype_size(d->dtype);
  if (d->coll == SIM_COLL_ALLGATHER || d->coll == SIM_COLL_REDUCESCATTER) bytes *= comm->nranks;
  double bw_gbps = comm->nnodes > 1 ? 40.0 : 300.0;
  return (10.0 + bytes / (1000.0 * bw_gbps)) * (1.0 + phi);
}

double sim_coll_time_us(const struct ncclComm *comm, const sim_desc_t *d, double phi) {
  if (!comm->has_model || d->algo < 0 || d->coll < 0 || d->coll >= AH_NUM_FUNCTIONS)
    return simple_time_us(comm, d, phi);
  size_t bytes = d->count * sim_dtype_size(d->dtype);
  if (d->coll == SIM_COLL_ALLGATHER || d->coll == SIM_COLL_REDUCESCATTER)
    bytes *= (size_t)comm->nranks;
  sim_config_t cfg = {d->algo, d->proto, d->nchannels, d->nthreads, (size_t)d->chunk};
  /* The flows collide on the fabric, or a link is degraded: the NICs deliver that fraction. */
  double net = comm->net ? sim_net_bw_factor(comm, d->start_vt) : 1.0;
  sim_model_t scaled; /* 2.4 KB: a copy on the stack, not an allocation per call */
  const sim_model_t *m = &comm->model;
  if (net < 1.0) {
    scaled = comm->model;
    scaled.topo.nic_gbps *= net;
    m = &scaled;
  }
  double us = sim_model_time_at_us(m, d->coll, bytes, &cfg, phi, d->call);
  if (us < 0) return simple_time_us(comm, d, phi); /* checked at selection; kept total */
  pthread_once(&noise_once, noise_init);
  if (noise_sigma > 0 || noise_outliers > 0) {
    /* Not the communicator's hash: it comes from a random unique id, so a rerun would differ. */
    uint64_t key = ((uint64_t)comm->nranks << 40) ^ ((uint64_t)d->coll << 32) ^ d->count;
    uint64_t state = noise_seed ^ (key * 0x9e3779b97f4a7c15ull) ^ (d->call * 0xd1b54a32d192ed03ull);
    us = sim_model_truth_noise(m, us, noise_sigma, noise_outliers, key ^ (noise_seed << 1), d->call,
                               &state);
  }
  return us;
}

double sim_compute_jitter(double us, int device) {
  pthread_once(&noise_once, noise_init);
  if (!(noise_sigma > 0) || !(us > 0)) return us;
  static _Atomic uint64_t calls;
  uint64_t state = noise_seed ^ ((uint64_t)noise_rank * 0x9e3779b97f4a7c15ull) ^
                   ((uint64_t)device << 48) ^ (atomic_fetch_add(&calls, 1) * 0xd1b54a32d192ed03ull);
  return sim_model_noise(us, noise_sigma, 0, &state);
}

/* Note that the draw comes from (seed, rank, communicator size, collective, count, call index), so
 * every rank draws its own delay of each call and a rerun reproduces them, and that the call's time
 * is NCCL's own choice's: the delay stands for the rank's work before the call, which does not
 * depend on the configuration the call will run. */
double sim_skew_delay_us(struct ncclComm *comm, const sim_task_t *t) {
  pthread_once(&noise_once, noise_init);
  if (!(skew_frac > 0) || t->kind != SIM_TASK_COLL || !comm->has_model || t->coll < 0 ||
      t->coll >= AH_NUM_FUNCTIONS)
    return 0;
  double us = sim_default_time_us(comm, t);
  if (!(us > 0)) return 0;
  uint64_t key = ((uint64_t)comm->nranks << 40) ^ ((uint64_t)t->coll << 32) ^ t->count;
  uint64_t z = noise_seed ^ ((uint64_t)(comm->rank + 1) * 0xbf58476d1ce4e5b9ull) ^
               (key * 0x9e3779b97f4a7c15ull) ^ (t->desc.call * 0xd1b54a32d192ed03ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull; /* splitmix64's finaliser: a uniform 53-bit draw */
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return skew_frac * us * ((double)(z >> 11) / 9007199254740992.0);
}

double sim_p2p_time_us(const struct ncclComm *comm, int peer, size_t bytes) {
  (void)peer;
  double bw_gbps = comm->nnodes > 1 ? 40.0 : 300.0;
  return 5.0 + (double)bytes / (1000.0 * bw_gbps);
}
