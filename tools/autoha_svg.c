/* SVG primitives for `autoha plot`: hand-written XML rather than a plotting library, so the command
 * needs nothing beyond libc. Every piece of text goes through svg_escape, which is what keeps the
 * output well-formed whatever a host name or configuration holds. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ah_config.h"
#include "autoha_svg.h"

void svg_escape(FILE *f, const char *s) {
  for (; *s; s++) {
    switch (*s) {
      case '&': fputs("&amp;", f); break;
      case '<': fputs("&lt;", f); break;
      case '>': fputs("&gt;", f); break;
      case '"': fputs("&quot;", f); break;
      case '\'': fputs("&apos;", f); break;
      default:
        if ((unsigned char)*s >= 0x20 || *s == '\t' || *s == '\n')
          fputc(*s, f); /* no control bytes in XML */
    }
  }
}

void svg_begin(FILE *f, int w, int h, const char *title) {
  fprintf(
      f,
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n<title>",
      w, h, w, h);
  svg_escape(f, title);
  fprintf(
      f,
      "</title>\n<style>.axis{stroke:#333;stroke-width:1}.grid{stroke:#ddd;stroke-width:1}"
      ".tick{fill:#333;font-size:11px}.head{font-size:14px;font-weight:bold}.note{fill:#555;font-size:11px}"
      "</style>\n<rect width=\"100%%\" height=\"100%%\" fill=\"#fff\"/>\n");
}

void svg_end(FILE *f) { fputs("</svg>\n", f); }

void svg_text(FILE *f, double x, double y, const char *anchor, const char *cls, const char *s) {
  fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\"%s%s%s>", x, y, anchor,
          cls ? " class=\"" : "", cls ? cls : "", cls ? "\"" : "");
  svg_escape(f, s);
  fputs("</text>\n", f);
}

double svg_fx(const svg_frame_t *fr, double lx) {
  double span = fr->lx1 > fr->lx0 ? fr->lx1 - fr->lx0 : 1;
  return fr->x0 + (lx - fr->lx0) / span * fr->w;
}

double svg_fy(const svg_frame_t *fr, double y) {
  return fr->y0 + fr->h - (fr->ymax > 0 ? y / fr->ymax : 0) * fr->h;
}

double svg_nice(double v) {
  if (!(v > 0)) return 1;
  double p = pow(10, floor(log10(v)));
  static const double steps[] = {1, 2, 2.5, 5, 10};
  for (int i = 0; i < 5; i++)
    if (steps[i] * p >= v * (1 - 1e-9)) return steps[i] * p;
  return 10 * p;
}

void svg_axes(FILE *f, svg_frame_t *fr, const char *xlabel, const char *ylabel) {
  fr->ymax = svg_nice(fr->ymax);
  char buf[64];
  for (int i = 0; i <= 5; i++) { /* y grid and labels */
    double v = fr->ymax * i / 5, y = svg_fy(fr, v);
    fprintf(f, "<line class=\"grid\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", fr->x0,
            y, fr->x0 + fr->w, y);
    snprintf(buf, sizeof buf, "%g", v);
    svg_text(f, fr->x0 - 6, y + 4, "end", "tick", buf);
  }
  int span = (int)(fr->lx1 - fr->lx0), step = span > 12 ? 2 : 1;
  for (int k = (int)fr->lx0; k <= (int)fr->lx1; k += step) { /* x grid at powers of two */
    double x = svg_fx(fr, k);
    fprintf(f, "<line class=\"grid\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", x,
            fr->y0, x, fr->y0 + fr->h);
    svg_text(f, x, fr->y0 + fr->h + 16, "middle", "tick",
             ah_size_format((uint64_t)1 << k, buf, sizeof buf));
  }
  fprintf(f, "<line class=\"axis\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", fr->x0,
          fr->y0 + fr->h, fr->x0 + fr->w, fr->y0 + fr->h);
  fprintf(f, "<line class=\"axis\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", fr->x0,
          fr->y0, fr->x0, fr->y0 + fr->h);
  svg_text(f, fr->x0 + fr->w / 2, fr->y0 + fr->h + 34, "middle", NULL, xlabel);
  fprintf(f,
          "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" transform=\"rotate(-90 %.1f %.1f)\">",
          fr->x0 - 48, fr->y0 + fr->h / 2, fr->x0 - 48, fr->y0 + fr->h / 2);
  svg_escape(f, ylabel);
  fputs("</text>\n", f);
}
