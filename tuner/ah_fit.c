/* ah_fit.c: a small response surface for the search — a quadratic in two variables (the log of
 * channels and of chunk bytes) fitted by robust weighted least squares to the probes already
 * measured, and its minimum over a box of candidate points. A pipelined collective's time is a
 * smooth low-dimensional shape of its resources (a bandwidth share per channel, a fixed cost per
 * chunk, a pipeline fill growing with the chunk), so a local quadratic in the logs predicts where
 * its bottom lies from a handful of noisy points, including channel counts between the shim's
 * list values. Pure arithmetic: no NCCL, clock or socket. */
#include <math.h>
#include <string.h>

#include "ah_fit.h"

/* The basis of term k at (x, y): 1, x, y, x^2, y^2, xy. */
static double ah_fit_term(int k, double x, double y) {
  switch (k) {
    case 0: return 1.0;
    case 1: return x;
    case 2: return y;
    case 3: return x * x;
    case 4: return y * y;
    default: return x * y;
  }
}

/* Solves the m x m system a c = b in place by Gaussian elimination with partial pivoting.
 * Returns 0, or -1 when a pivot is negligible against the matrix's scale (degenerate points). */
static int ah_fit_solve(double a[AH_FIT_TERMS][AH_FIT_TERMS], double *b, int m, double *c) {
  double scale = 0;
  for (int i = 0; i < m; i++)
    for (int j = 0; j < m; j++)
      if (fabs(a[i][j]) > scale) scale = fabs(a[i][j]);
  if (scale <= 0) return -1;
  for (int col = 0; col < m; col++) {
    int piv = col;
    for (int r = col + 1; r < m; r++)
      if (fabs(a[r][col]) > fabs(a[piv][col])) piv = r;
    if (fabs(a[piv][col]) < 1e-9 * scale) return -1;
    if (piv != col) {
      for (int j = 0; j < m; j++) {
        double tmp = a[col][j];
        a[col][j] = a[piv][j];
        a[piv][j] = tmp;
      }
      double tb = b[col];
      b[col] = b[piv];
      b[piv] = tb;
    }
    for (int r = col + 1; r < m; r++) {
      double f = a[r][col] / a[col][col];
      for (int j = col; j < m; j++) a[r][j] -= f * a[col][j];
      b[r] -= f * b[col];
    }
  }
  for (int i = m - 1; i >= 0; i--) {
    double s = b[i];
    for (int j = i + 1; j < m; j++) s -= a[i][j] * c[j];
    c[i] = s / a[i][i];
  }
  return 0;
}

/* One weighted least-squares fit of the first m terms. Returns 0 or -1 (degenerate). */
static int ah_fit_wls(const ah_fit_point_t *pt, const double *w, int n, int m, double *coef) {
  double a[AH_FIT_TERMS][AH_FIT_TERMS], b[AH_FIT_TERMS];
  memset(a, 0, sizeof(a));
  memset(b, 0, sizeof(b));
  for (int i = 0; i < n; i++) {
    double f[AH_FIT_TERMS];
    for (int k = 0; k < m; k++) f[k] = ah_fit_term(k, pt[i].x, pt[i].y);
    for (int k = 0; k < m; k++) {
      b[k] += w[i] * f[k] * pt[i].z;
      for (int j = 0; j < m; j++) a[k][j] += w[i] * f[k] * f[j];
    }
  }
  for (int k = m; k < AH_FIT_TERMS; k++) coef[k] = 0;
  return ah_fit_solve(a, b, m, coef);
}

int ah_fit_quad(const ah_fit_point_t *pt, int n, double clip, double *coef) {
  if (!pt || !coef || n <= 0 || n > AH_FIT_MAX_POINTS) return -1;
  /* The full quadratic needs six points off a line and a conic; with fewer, or where the points
   * lie on a cross (no xy information), the cross term is dropped. */
  int m = n >= AH_FIT_TERMS ? AH_FIT_TERMS : AH_FIT_TERMS - 1;
  if (n < AH_FIT_TERMS - 1) return -1;
  double w[AH_FIT_MAX_POINTS];
  for (;; m--) {
    for (int i = 0; i < n; i++) w[i] = pt[i].w > 0 ? pt[i].w : 0;
    if (ah_fit_wls(pt, w, n, m, coef) == 0) break;
    if (m == AH_FIT_TERMS - 1) return -1;
  }
  /* Robust: a few Huber reweightings, a point's weight shrunk by clip / |residual| beyond clip,
   * so one outlying probe cannot drag the bottom away. */
  for (int it = 0; clip > 0 && it < 4; it++) {
    for (int i = 0; i < n; i++) {
      double r = fabs(pt[i].z - ah_fit_eval(coef, pt[i].x, pt[i].y));
      double w0 = pt[i].w > 0 ? pt[i].w : 0;
      w[i] = r > clip ? w0 * clip / r : w0;
    }
    double c2[AH_FIT_TERMS];
    if (ah_fit_wls(pt, w, n, m, c2) != 0) break;
    memcpy(coef, c2, sizeof(c2));
  }
  return 0;
}

double ah_fit_eval(const double *coef, double x, double y) {
  double z = 0;
  for (int k = 0; k < AH_FIT_TERMS; k++) z += coef[k] * ah_fit_term(k, x, y);
  return z;
}

int ah_fit_argmin(const double *coef, const double *xs, int nx, const double *ys, int ny, int *ix_p,
                  int *iy_p) {
  if (!coef || !xs || !ys || nx <= 0 || ny <= 0) return -1;
  double best = INFINITY;
  int bx = -1, by = -1;
  for (int i = 0; i < nx; i++)
    for (int j = 0; j < ny; j++) {
      double z = ah_fit_eval(coef, xs[i], ys[j]);
      if (z < best) {
        best = z;
        bx = i;
        by = j;
      }
    }
  if (bx < 0) return -1;
  *ix_p = bx;
  *iy_p = by;
  return 0;
}

double ah_fit_knee(double n_lo, double z_lo, double n_c, double z_c, double slope_hi) {
  if (!(n_lo > 0) || !(n_c > n_lo) || !(z_lo > z_c)) return 0;
  double s = slope_hi > 0 ? slope_hi : 0;
  /* z_lo - (x - ln n_lo) = z_c + s (x - ln n_c), x the log of the count */
  double k = exp((z_lo - z_c + log(n_lo) + s * log(n_c)) / (1.0 + s));
  return k > n_lo && k < n_c ? k : 0;
}
