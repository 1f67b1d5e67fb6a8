/* ah_fit.h: a local response surface for the tuner's search of a (channels, chunk) plane — a
 * quadratic in two variables fitted by robust weighted least squares to measured points, and its
 * minimum over a grid of candidates. Generic shape knowledge only (a smooth bowl in the logs of
 * the resources); nothing here knows NCCL's or any simulator's formula. */
#ifndef AH_FIT_H
#define AH_FIT_H

#define AH_FIT_TERMS 6 /* 1, x, y, x^2, y^2, xy */
#define AH_FIT_MAX_POINTS 64

typedef struct {
  double x, y, z, w; /* coordinates, value (log time), weight (e.g. samples) */
} ah_fit_point_t;

/* Fits z ~ c0 + c1 x + c2 y + c3 x^2 + c4 y^2 + c5 xy to n points by weighted least squares,
 * then reweights residuals beyond `clip` (Huber; clip <= 0: plain least squares). The cross term
 * is dropped (c5 = 0) when the points cannot determine it. Returns 0 and fills coef[6], or -1
 * when fewer than 5 points, more than AH_FIT_MAX_POINTS, or degenerate. */
int ah_fit_quad(const ah_fit_point_t *pt, int n, double clip, double *coef);

/* The fitted value at (x, y). */
double ah_fit_eval(const double *coef, double x, double y);

/* The candidate (xs[*ix_p], ys[*iy_p]) of the nx x ny grid where the fit is lowest. Returns 0, or
 * -1 on an empty grid. */
int ah_fit_argmin(const double *coef, const double *xs, int nx, const double *ys, int ny, int *ix_p,
                  int *iy_p);

/* The knee of a bandwidth share: with fewer channels than it needs, a collective's time falls
 * as 1/channels; past the count where another limit (a link, the switch) binds, it stops falling
 * and each channel's own cost makes it rise slowly. In log time against log channels: a line of
 * slope -1 through a point below (n_lo channels, log time z_lo), and a line of slope slope_hi
 * (0 when negative or unknown) through the fastest point (n_c > n_lo, z_c); returns the count where
 * they meet — n_lo x exp(z_lo - z_c) for a flat right side — when strictly between n_lo and n_c,
 * else 0 (no knee between them: n_lo's time already falls slower than 1/channels, or the inputs
 * are not in that order). */
double ah_fit_knee(double n_lo, double z_lo, double n_c, double z_c, double slope_hi);

#endif
