/* sim_model_heldout.h: the held-out truth family (docs/sim.md), truths the tuner was never fitted
 * to. Each member is drawn from a seed and perturbs the development truth's answer in the ways real
 * hardware differs from it. Selected with NCCLSIM_TRUTH=dev|heldout:SEED. The development truth
 * (sim_model_truth.c) calls this file with its own parts of a call's time; this file never calls
 * back into it. */
#ifndef SIM_MODEL_HELDOUT_H
#define SIM_MODEL_HELDOUT_H

#include <stddef.h>
#include <stdint.h>

#include "sim_model.h"

/* Which truth a model runs: the development truth (heldout 0) or held-out member `seed`. */
typedef struct {
  int heldout;
  uint64_t seed;
} sim_truth_sel_t;

/* One held-out member, every field drawn from its seed (sim_heldout_draw). */
typedef struct {
  uint64_t seed;
  int step;            /* channels are spread over this many NICs/rings */
  double step_pen;     /* share of the busiest NIC's extra load that shows in the link time */
  int cross_proto;     /* protocol faster than NCCL's table says ... */
  double cross_lo;     /* ... between these sizes (bytes, tapered over x2 either side) */
  double cross_hi;     /* ... */
  double cross_f;      /* ... by this factor on its bandwidth and fill time */
  int fast_algo;       /* subspace NCCL rates >= 2x slower than its best ... */
  int fast_proto;      /* ... */
  double fast_k;       /* ... that really runs at fast_k x NCCL's best estimate ratio */
  double fast_rmax;    /* ... where NCCL's ratio is at most this */
  double ar_rho;       /* AR(1) coefficient of the noise over calls */
  int site_period;     /* calls come from call sites in turn: 1 slow call in every site_period */
  double site_gap;     /* the slow site's extra time */
  double cont_duty;    /* a second communicator on the same links: share of time it is active */
  int cont_nch;        /* ... with this many channels (per-QP fair share of the links) */
  uint64_t drift_call; /* from this call on ... */
  int drift_nic;       /* ... the NICs (1) or NVLink (0) deliver ... */
  double drift_scale;  /* ... this share of their bandwidth */
} sim_heldout_t;

/* The parts of one call's development time (sim_model_truth.c) the family perturbs. */
typedef struct {
  double lat, adm;  /* one-time latency, CTA admission */
  double link, sm;  /* link-bound and CTA-bound bandwidth time (the call takes the larger) */
  double ovh, fill; /* per-loop handshakes, pipeline fill */
  double fnet;      /* share of pipeline steps that cross the network */
} sim_time_parts_t;

/* Parses NCCLSIM_TRUTH's text: "dev" (or empty) or "heldout:SEED" (SEED an integer >= 1). Returns
 * 0, or -1 with one message naming the text in err (sel_p left alone). */
int sim_truth_parse(const char *text, sim_truth_sel_t *sel_p, char *err, size_t errlen);

/* Draws member `seed` of the family. Note that the same seed gives the same member on every
 * platform (splitmix64), and seed 0 is a member too (callers use heldout = 0 for dev). */
void sim_heldout_draw(uint64_t seed, sim_heldout_t *h_p);

/* The links' delivered share at call `call` (the mid-job drift): NIC and NVLink scales, 1 before
 * drift_call. UINT64_MAX asks for the end of the job. */
void sim_heldout_links(const sim_heldout_t *h, uint64_t call, double *nic_p, double *nvl_p);

/* Held-out microseconds of a call whose development parts are dev (computed on the drifted
 * links), with cfg's algorithm/protocol and nc the channels it really runs. */
double sim_heldout_time_us(const sim_heldout_t *h, const sim_model_t *m, int coll, size_t nbytes,
                           const sim_config_t *cfg, int nc, const sim_time_parts_t *dev);

/* Held-out noise of call `call` of the call stream `key`: AR(1) over calls (coefficient ar_rho,
 * stationary log-sd sigma), the slow call site's gap, and x1.5 outliers at outlier_rate.
 * Note that it is a pure function of (seed, key, call): the AR(1) term is its moving-average form
 * over the last 32 innovations, so sim/ needs no state per call stream and a rerun repeats it. */
double sim_heldout_noise(const sim_heldout_t *h, double us, double sigma, double outlier_rate,
                         uint64_t key, uint64_t call);

#endif
