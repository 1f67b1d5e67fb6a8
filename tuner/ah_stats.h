/* ah_stats.h: the robust statistics the search ranks configurations with, and the CUSUM drift
 * detector that watches a pinned configuration. Pure functions on arrays of microseconds.
 *
 * Times are compared in the log domain: noise on a collective's time is multiplicative (a slow
 * step, an outlier at 1.5x), so a relative difference is a difference of logs and one noise
 * figure (sigma of log time) serves every message size. */
#ifndef AH_STATS_H
#define AH_STATS_H

/* Robust location of n samples (us): the mean of the logs of the fastest n - ceil(n/4) samples
 * (AutoCCL's "fastest 75%", which drops rare slow outliers), corrected by the expected bias of
 * that trimmed mean under Gaussian log-noise of `sigma`, so estimates from different sample counts
 * are comparable. Returns log(us), or 0 when n <= 0. scratch must hold n doubles. */
double ah_stats_robust_log(const double *us, int n, double sigma, double *scratch);

/* Standard error (in log units) of ah_stats_robust_log for n samples under log-noise sigma. */
double ah_stats_robust_se(int n, double sigma);

/* Expected mean of the lowest k of n standard normal order statistics (Blom's approximation).
 * Exposed for the unit tests. */
double ah_stats_trim_bias(int n, int k);

/* Accumulates a pooled noise estimate: residuals of log samples around their probe's median,
 * from probes with at least 3 samples, scaled for the sample count so they are comparable; the
 * estimate is their median (so rare outliers do not inflate it). ah_stats_noise_add() takes one
 * probe's samples. */
#define AH_STATS_NOISE_MAX 512
typedef struct {
  int count;                    /* residuals pooled */
  double r[AH_STATS_NOISE_MAX]; /* |log x - median| x count correction */
} ah_stats_noise_t;
void ah_stats_noise_add(ah_stats_noise_t *nz, const double *us, int n, double *scratch);
/* sigma of log time estimated from the pool (1.4826 x median residual), or `prior` while fewer
 * than 6 residuals are pooled; never below `floor`. Reorders the pool. */
double ah_stats_noise_sigma(ah_stats_noise_t *nz, double prior, double floor);

/* Two-sided CUSUM on log(us / reference) in units of sigma, each sample clipped to +-3 sigma so
 * a rare 1.5x outlier cannot trip it alone. Trips when either sum exceeds h. With ref_us <= 0 the
 * reference is learnt from the first AH_DRIFT_WARMUP samples (their Huber location; sigma raised
 * to their Huber scale if larger), so an imprecise estimate from the search, or noise that is not
 * Gaussian, cannot itself look like drift. 48 samples: with 24 the reference's and scale's own
 * errors tripped 1-4% of stable streams with a jitter tail within 2,000 calls. */
#define AH_DRIFT_WARMUP 48
typedef struct {
  double ref_log; /* log of the reference time */
  double sigma;   /* log-noise */
  double k;       /* allowance per sample, in sigma */
  double h;       /* decision threshold, in sigma */
  double hi, lo;  /* the two cumulative sums */
  int n;          /* samples seen */
  int learning;   /* reference still being learnt */
  double warm[AH_DRIFT_WARMUP];
} ah_drift_t;
/* shift: the relative change to detect; the allowance is half of it, and at least 1 sigma. */
void ah_drift_init(ah_drift_t *d, double ref_us, double sigma, double shift, double h);
/* Adds one sample. Returns 1 when the sums show a lasting shift (then the caller re-opens). */
int ah_drift_add(ah_drift_t *d, double us);

#endif
