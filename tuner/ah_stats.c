/* ah_stats.c: robust statistics and CUSUM drift detection for the tuning engine.
 *
 * The key choice is a trimmed mean of log times with a bias correction: dropping the slowest
 * quarter of samples makes an estimate immune to rare outliers, but it also pulls the estimate
 * down by an amount that depends on the sample count; correcting by the expected order statistics
 * lets a config measured twice be ranked fairly against one measured eight times. */
#include "ah_stats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Inverse of the standard normal CDF (Acklam's rational approximation, relative error < 1.2e-9). */
static double ah_stats_norm_quantile(double p) {
  static const double a[] = {-3.969683028665376e+01, 2.209460984245205e+02,  -2.759285104469687e+02,
                             1.383577518672690e+02,  -3.066479806614716e+01, 2.506628277459239e+00};
  static const double b[] = {-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
                             6.680131188771972e+01, -1.328068155288572e+01};
  static const double c[] = {-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
                             -2.549732539343734e+00, 4.374664141464968e+00,  2.938163982698783e+00};
  static const double d[] = {7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
                             3.754408661907416e+00};
  const double plow = 0.02425;
  if (p <= 0.0) return -INFINITY;
  if (p >= 1.0) return INFINITY;
  if (p < plow) {
    double q = sqrt(-2 * log(p));
    return (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
           ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  }
  if (p > 1 - plow) {
    double q = sqrt(-2 * log(1 - p));
    return -(((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
           ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  }
  double q = p - 0.5, r = q * q;
  return (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
         (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
}

double ah_stats_trim_bias(int n, int k) {
  if (n <= 1 || k <= 0) return 0.0;
  if (k > n) k = n;
  double s = 0.0;
  for (int i = 1; i <= k; i++) s += ah_stats_norm_quantile((i - 0.375) / (n + 0.25));
  return s / k;
}

static int ah_stats_cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Samples kept by the trimmed mean: all but the slowest ceil(n/4). */
static int ah_stats_kept(int n) { return n - (n + 3) / 4 > 0 ? n - (n + 3) / 4 : 1; }

double ah_stats_robust_log(const double *us, int n, double sigma, double *scratch) {
  if (n <= 0) return 0.0;
  int m = 0;
  for (int i = 0; i < n; i++)
    if (us[i] > 0) scratch[m++] = log(us[i]);
  if (m == 0) return 0.0;
  qsort(scratch, (size_t)m, sizeof(double), ah_stats_cmp_double);
  int k = ah_stats_kept(m);
  double s = 0.0;
  for (int i = 0; i < k; i++) s += scratch[i];
  return s / k - sigma * ah_stats_trim_bias(m, k);
}

double ah_stats_robust_se(int n, double sigma) {
  if (n <= 0) return INFINITY;
  return sigma / sqrt((double)ah_stats_kept(n));
}

void ah_stats_noise_add(ah_stats_noise_t *nz, const double *us, int n, double *scratch) {
  if (n < 3) return;
  int m = 0;
  for (int i = 0; i < n; i++)
    if (us[i] > 0) scratch[m++] = log(us[i]);
  if (m < 3) return;
  qsort(scratch, (size_t)m, sizeof(double), ah_stats_cmp_double);
  double med = (m % 2) ? scratch[m / 2] : 0.5 * (scratch[m / 2 - 1] + scratch[m / 2]);
  /* Residuals around a sample median are smaller than around the true centre. For odd m the
   * median sample's own zero residual is left out, which leaves them nearly unbiased (x0.98); for
   * even m they are scaled by 1 + 1.5/m (both from Monte Carlo on Gaussian samples). */
  double c = (m % 2) ? 0.98 : 1.0 + 1.5 / m;
  for (int i = 0; i < m && nz->count < AH_STATS_NOISE_MAX; i++) {
    if ((m % 2) && i == m / 2) continue;
    nz->r[nz->count++] = fabs(scratch[i] - med) * c;
  }
}

double ah_stats_noise_sigma(ah_stats_noise_t *nz, double prior, double floor) {
  double s = prior;
  if (nz->count >= 6) {
    qsort(nz->r, (size_t)nz->count, sizeof(double), ah_stats_cmp_double);
    int h = nz->count / 2;
    double med = (nz->count % 2) ? nz->r[h] : 0.5 * (nz->r[h - 1] + nz->r[h]);
    s = 1.4826 * med;
  }
  return s < floor ? floor : s;
}

void ah_drift_init(ah_drift_t *d, double ref_us, double sigma, double shift, double h) {
  memset(d, 0, sizeof(*d));
  d->ref_log = ref_us > 0 ? log(ref_us) : 0.0;
  d->learning = !(ref_us > 0);
  d->sigma = sigma > 1e-4 ? sigma : 1e-4;
  d->k = 0.5 * log(1.0 + shift); /* in log units until the sigma is final */
  d->h = h;
}

static void ah_drift_settle(ah_drift_t *d) {
  double k = d->k / d->sigma;
  d->k = k < 1.0 ? 1.0 : (k > 2.0 ? 2.0 : k);
}

/* Fits the reference and sigma to the warm-up samples (logs in d->warm) as the CUSUM will use
 * them: median and MAD first, then Huber's location with the CUSUM's own clip at 3 sigma, so the
 * clipped z of a stationary stream averages 0 whatever the noise's shape, and a scale from the
 * deviations winsorised at 2 sigma (normalised by their Gaussian mean square, 0.7737) — at 3 an
 * outlier or two in the warm-up would blow the scale up until a 10% shift hid in it. The median
 * alone leaves a right-skewed noise (jitter, arrival waits) a positive mean z that eats the
 * allowance, and the MAD under-states a heavy tail; with either, a stable job re-tuned after a few
 * hundred calls. Returns nothing; sets ref_log and sigma. */
static void ah_drift_fit(ah_drift_t *d) {
  double dev[AH_DRIFT_WARMUP];
  memcpy(dev, d->warm, sizeof(dev));
  qsort(dev, AH_DRIFT_WARMUP, sizeof(double), ah_stats_cmp_double);
  d->ref_log = 0.5 * (dev[AH_DRIFT_WARMUP / 2 - 1] + dev[AH_DRIFT_WARMUP / 2]);
  for (int i = 0; i < AH_DRIFT_WARMUP; i++) dev[i] = fabs(dev[i] - d->ref_log);
  qsort(dev, AH_DRIFT_WARMUP, sizeof(double), ah_stats_cmp_double);
  double s = 1.4826 * 0.5 * (dev[AH_DRIFT_WARMUP / 2 - 1] + dev[AH_DRIFT_WARMUP / 2]);
  if (s > d->sigma) d->sigma = s;
  for (int it = 0; it < 20; it++) {
    double m = 0.0, v = 0.0;
    for (int i = 0; i < AH_DRIFT_WARMUP; i++) {
      double z = (d->warm[i] - d->ref_log) / d->sigma;
      double w = z > 2.0 ? 2.0 : (z < -2.0 ? -2.0 : z);
      m += z > 3.0 ? 3.0 : (z < -3.0 ? -3.0 : z);
      v += w * w;
    }
    d->ref_log += d->sigma * m / AH_DRIFT_WARMUP;
    v /= AH_DRIFT_WARMUP * 0.7737;
    if (v > 1.0) d->sigma *= sqrt(v);
  }
}

int ah_drift_add(ah_drift_t *d, double us) {
  if (!(us > 0)) return 0;
  if (d->learning) {
    d->warm[d->n++] = log(us);
    if (d->n < AH_DRIFT_WARMUP) return 0;
    ah_drift_fit(d);
    d->learning = 0;
    ah_drift_settle(d);
    return 0;
  }
  if (d->n == 0) ah_drift_settle(d);
  double z = (log(us) - d->ref_log) / d->sigma;
  if (z > 3.0) z = 3.0;
  if (z < -3.0) z = -3.0;
  d->hi = fmax(0.0, d->hi + z - d->k);
  d->lo = fmax(0.0, d->lo - z - d->k);
  d->n++;
  return d->hi > d->h || d->lo > d->h;
}
