/* `autoha plot`'s first picture: bus bandwidth against message size, one panel per collective and
 * communicator size, NCCL's default configuration against the one autoha applied — nccl-tests'
 * busbw (docs/report.md: algbw x 2(n-1)/n for AllReduce, (n-1)/n for AllGather and ReduceScatter,
 * 1 for Broadcast and Reduce), computed from each key's mean bytes and time.
 *
 * A point is one key (size bin): the median over the job's reports (ranks) of the busbw and of the
 * mean bytes per rank, so one slow rank does not move the curve. A key whose default was never timed
 * (an override from its first call) has no NCCL point. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autoha_plot.h"
#include "autoha_svg.h"

typedef struct {
  int coll, nranks, bin, which; /* which: 0 NCCL's default, 1 autoha's applied */
  double bytes, busbw;
} sample_t;

typedef struct {
  int coll, nranks, bin, which;
  double bytes, busbw; /* medians */
} point_t;

static int sample_cmp(const void *a, const void *b) {
  const sample_t *x = a, *y = b;
  if (x->coll != y->coll) return x->coll - y->coll;
  if (x->nranks != y->nranks) return x->nranks - y->nranks;
  if (x->which != y->which) return x->which - y->which;
  return x->bin - y->bin;
}

static int dbl_cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, dbl_cmp);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* The busbw of a stat, NAN when it was not timed. */
static double stat_busbw(const ah_report_stat_t *s, int coll, int nranks, double *bytes_p) {
  if (!s->timed || !(s->us_total > 0)) return NAN;
  double bytes = s->bytes_total / (double)s->timed, us = s->us_total / (double)s->timed;
  *bytes_p = bytes;
  return ah_report_algbw(coll, nranks, bytes, us) * ah_report_busbw_factor(coll, nranks);
}

/* Every timed stat of every report, reduced to one median point per (coll, nranks, which, bin). */
static int collect(const plot_reports_t *rs, point_t **pts_p) {
  int cap = 0, n = 0;
  for (int i = 0; i < rs->n; i++)
    for (int c = 0; c < rs->r[i]->ncomms; c++) cap += 2 * rs->r[i]->comms[c].nkeys;
  sample_t *s = malloc(sizeof *s * (size_t)(cap ? cap : 1));
  point_t *p = malloc(sizeof *p * (size_t)(cap ? cap : 1));
  double *v = malloc(sizeof *v * (size_t)(cap ? cap : 1)),
         *w = malloc(sizeof *w * (size_t)(cap ? cap : 1));
  if (!s || !p || !v || !w) {
    free(s), free(p), free(v), free(w);
    return -1;
  }
  for (int i = 0; i < rs->n; i++)
    for (int c = 0; c < rs->r[i]->ncomms; c++) {
      const ah_report_comm_t *cm = &rs->r[i]->comms[c];
      for (int k = 0; k < cm->nkeys; k++) {
        const ah_report_key_t *key = &cm->keys[k];
        if (key->coll >= AH_NUM_FUNCTIONS)
          continue; /* AlltoAll, Gather, Scatter: observed only, never tuned */
        for (int which = 0; which < 2; which++) {
          double bytes = 0, bw = stat_busbw(which ? &key->applied : &key->nccl_default, key->coll,
                                            cm->nranks, &bytes);
          if (isfinite(bw) && bytes > 0)
            s[n++] = (sample_t){key->coll, cm->nranks, key->bin, which, bytes, bw};
        }
      }
    }
  qsort(s, (size_t)n, sizeof *s, sample_cmp);
  int np = 0;
  for (int i = 0, j; i < n; i = j) {
    int m = 0;
    for (j = i; j < n && sample_cmp(&s[i], &s[j]) == 0; j++) v[m] = s[j].bytes, w[m++] = s[j].busbw;
    p[np++] = (point_t){s[i].coll, s[i].nranks, s[i].bin, s[i].which, median(v, m), median(w, m)};
  }
  free(s), free(v), free(w);
  *pts_p = p;
  return np;
}

#define PANEL_W 760
#define PANEL_H 300

static void draw_series(FILE *f, const svg_frame_t *fr, const point_t *p, int n) {
  static const char *const names[] = {"nccl", "autoha"};
  static const char *const colors[] = {"#888888", "#1f77b4"};
  int which = p[0].which;
  fprintf(
      f,
      "<g class=\"series\" data-coll=\"%s\" data-nranks=\"%d\" data-series=\"%s\">\n<polyline fill=\"none\" "
      "stroke=\"%s\" stroke-width=\"2\"%s points=\"",
      ah_coll_name(p[0].coll), p[0].nranks, names[which], colors[which],
      which ? "" : " stroke-dasharray=\"6 4\"");
  for (int i = 0; i < n; i++)
    fprintf(f, "%s%.1f,%.1f", i ? " " : "", svg_fx(fr, log2(p[i].bytes)), svg_fy(fr, p[i].busbw));
  fputs("\"/>\n", f);
  for (int i = 0; i < n; i++) {
    char size[24];
    fprintf(
        f,
        "<circle class=\"point\" cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"%s\" data-bin=\"%d\" data-bytes=\"%.0f\" "
        "data-busbw=\"%.3f\"><title>%s %s: %.2f GB/s at %s bytes per rank</title></circle>\n",
        svg_fx(fr, log2(p[i].bytes)), svg_fy(fr, p[i].busbw), colors[which], p[i].bin, p[i].bytes,
        p[i].busbw, names[which], ah_coll_name(p[i].coll), p[i].busbw,
        ah_size_format((uint64_t)p[i].bytes, size, sizeof size));
  }
  fputs("</g>\n", f);
}

int plot_busbw_svg(FILE *f, const plot_reports_t *rs) {
  point_t *p = NULL;
  int np = collect(rs, &p);
  if (np < 0) return -1;
  int npanels = 0;
  for (int i = 0; i < np; i++)
    if (i == 0 || p[i].coll != p[i - 1].coll || p[i].nranks != p[i - 1].nranks) npanels++;
  int height = 50 + (npanels ? npanels : 1) * PANEL_H;
  svg_begin(f, PANEL_W, height, "autoha: busbw against message size, NCCL's default and autoha's");
  svg_text(f, 20, 26, "start", "head",
           "Bus bandwidth (nccl-tests' busbw) per collective: NCCL's default against autoha's");
  if (!npanels) svg_text(f, 20, 60, "start", "note", "no timed key in these reports");
  int panel = 0;
  for (int i = 0, j; i < np; i = j, panel++) {
    for (j = i; j < np && p[j].coll == p[i].coll && p[j].nranks == p[i].nranks;) j++;
    svg_frame_t fr = {
        80, 50 + panel * PANEL_H + 30, PANEL_W - 230, PANEL_H - 90, INFINITY, -INFINITY, 0};
    for (int k = i; k < j; k++) {
      double lx = log2(p[k].bytes);
      if (lx < fr.lx0) fr.lx0 = lx;
      if (lx > fr.lx1) fr.lx1 = lx;
      if (p[k].busbw > fr.ymax) fr.ymax = p[k].busbw;
    }
    fr.lx0 = floor(fr.lx0) - 1; /* a size step of room on both sides */
    fr.lx1 = ceil(fr.lx1) + 1;
    fr.ymax *= 1.05;
    char head[128];
    snprintf(head, sizeof head, "%s, %d ranks", ah_coll_name(p[i].coll), p[i].nranks);
    fprintf(f, "<g class=\"panel\" data-coll=\"%s\" data-nranks=\"%d\">\n", ah_coll_name(p[i].coll),
            p[i].nranks);
    svg_text(f, fr.x0, fr.y0 - 10, "start", "head", head);
    svg_axes(f, &fr, "bytes per rank (the key's size)", "busbw GB/s");
    int mid = i;
    while (mid < j && p[mid].which == 0) mid++;
    if (mid > i) draw_series(f, &fr, p + i, mid - i);
    if (j > mid) draw_series(f, &fr, p + mid, j - mid);
    double lx = fr.x0 + fr.w + 20, ly = fr.y0 + 20;
    fprintf(
        f,
        "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#888888\" stroke-width=\"2\" "
        "stroke-dasharray=\"6 4\"/>\n",
        lx, ly, lx + 30, ly);
    svg_text(f, lx + 36, ly + 4, "start", NULL, "NCCL default");
    fprintf(
        f,
        "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#1f77b4\" stroke-width=\"2\"/>\n",
        lx, ly + 20, lx + 30, ly + 20);
    svg_text(f, lx + 36, ly + 24, "start", NULL, "autoha");
    fputs("</g>\n", f);
  }
  svg_end(f);
  free(p);
  return np;
}
