/* autoha_svg.h: the few SVG pieces `autoha plot` draws with (autoha_svg.c) — a document, escaped
 * text, and a chart frame with a log2 x axis and a linear y axis. */
#ifndef AUTOHA_SVG_H
#define AUTOHA_SVG_H

#include <stdio.h>

/* Opens a standalone SVG document of w x h pixels with a white background and a <title>. */
void svg_begin(FILE *f, int w, int h, const char *title);
void svg_end(FILE *f);
/* Writes s with &, <, >, " and ' escaped for XML text and attribute values. */
void svg_escape(FILE *f, const char *s);
/* <text x y text-anchor class>escaped s</text>; anchor "start", "middle" or "end". */
void svg_text(FILE *f, double x, double y, const char *anchor, const char *cls, const char *s);

/* A chart frame: the plot area [x0, x0+w] x [y0, y0+h] in pixels, x in log2 units [lx0, lx1], y in
 * [0, ymax]. */
typedef struct {
  double x0, y0, w, h;
  double lx0, lx1, ymax;
} svg_frame_t;

double svg_fx(const svg_frame_t *fr, double log2x);
double svg_fy(const svg_frame_t *fr, double y);
/* Draws the frame's axes, grid, tick labels (sizes as 1K, 64M on x; y with ylabel) and the x label.
 * Returns a y maximum rounded up to a tidy value, already stored in fr->ymax. */
void svg_axes(FILE *f, svg_frame_t *fr, const char *xlabel, const char *ylabel);
/* The smallest of 1, 2, 2.5, 5 x 10^k that is >= v (v > 0), for axis ends. */
double svg_nice(double v);

#endif
