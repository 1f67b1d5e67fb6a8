/* `autoha plot`'s second picture: the tuning timeline, one row per key of each communicator, over
 * the key's calls (call index 0 to `calls`, each row to its own scale): the search's probes, the
 * configuration pinned from `converged_at` on, NCCL's default where the search gave up, and how
 * often drift re-opened the search.
 *
 * Note that a report holds each probe's samples and time, not when each sample ran (the search
 * interleaves them), so the probes are drawn side by side in the order the search planned them,
 * each as wide as its samples, over the calls the search spent: the shape of the search, not a
 * record of call order. The row's text says what is exact (converged_at, calls, re-openings). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "autoha_plot.h"
#include "autoha_svg.h"

#define ROW_H 34
#define LABEL_W 250
#define BAR_W 480
#define WIDTH (LABEL_W + BAR_W + 330)
#define TOP 72 /* the first row's top */

typedef struct {
  FILE *f;
  int rows;
  int pass; /* 0: count rows, 1: draw */
} tl_t;

static void seg(FILE *f, const char *cls, double x, double y, double w, const char *fill,
                const char *tip) {
  if (w <= 0) return;
  fprintf(
      f,
      "<rect class=\"%s\" x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%d\" fill=\"%s\" stroke=\"#fff\" "
      "stroke-width=\"0.5\"><title>",
      cls, x, y, w, ROW_H - 12, fill);
  svg_escape(f, tip);
  fputs("</title></rect>\n", f);
}

/* A probe's colour: green when faster than NCCL's default, red when slower, grey when unknown. */
static const char *probe_fill(double us, double default_us) {
  if (!isfinite(us) || !isfinite(default_us) || default_us <= 0) return "#bbbbbb";
  double r = us / default_us;
  return r < 0.95 ? "#7fc97f" : r <= 1.05 ? "#fdd0a2" : "#f4a582";
}

static void key_row(tl_t *t, const ah_report_comm_t *c, const ah_report_key_t *k) {
  FILE *f = t->f;
  double y = TOP + t->rows * ROW_H, x0 = LABEL_W, calls = k->calls > 0 ? (double)k->calls : 1;
  char name[160], lo[24], hi[24], tip[256], cfg[96], note[256];
  size_t fl = ah_size_bin_floor(k->bin);
  snprintf(name, sizeof name, "%s %s-%s, comm %04llx (%d ranks)", ah_coll_name(k->coll),
           ah_size_format(fl, lo, sizeof lo), ah_size_format(fl ? fl * 2 : 2, hi, sizeof hi),
           (unsigned long long)(c->id & 0xffff), c->nranks);
  fprintf(
      f,
      "<g class=\"key\" data-coll=\"%s\" data-bin=\"%d\" data-comm=\"0x%016llx\" data-calls=\"%llu\" "
      "data-state=\"%s\" data-reopened=\"%d\">\n",
      ah_coll_name(k->coll), k->bin, (unsigned long long)c->id, (unsigned long long)k->calls,
      !k->tuned                            ? ah_report_source_name(k->source)
      : k->tune.state == AH_TUNE_CONVERGED ? "converged"
      : k->tune.state == AH_TUNE_SEARCHING ? "searching"
                                           : "default",
      k->tuned ? k->tune.reopen_count : 0);
  svg_text(f, x0 - 8, y + 15, "end", NULL, name);
  double du =
      k->nccl_default.timed ? k->nccl_default.us_total / (double)k->nccl_default.timed : NAN;
  double au = k->applied.timed ? k->applied.us_total / (double)k->applied.timed : NAN;
  ah_config_format(&k->applied.cfg, cfg, sizeof cfg);
  if (!k->tuned) { /* one configuration all along: an override, a profile, or NCCL's own */
    snprintf(tip, sizeof tip, "%s: %s for %llu calls", ah_report_source_name(k->source), cfg,
             (unsigned long long)k->calls);
    seg(f, k->source == AH_SOURCE_DEFAULT ? "default" : "pinned", x0, y, BAR_W,
        k->source == AH_SOURCE_DEFAULT ? "#d9d9d9" : "#6baed6", tip);
    snprintf(note, sizeof note, "%s: %s, %llu calls", ah_report_source_name(k->source), cfg,
             (unsigned long long)k->calls);
  } else {
    const ah_tune_status_t *st = &k->tune;
    double end = st->state == AH_TUNE_CONVERGED && st->converged_at <= k->calls
                     ? (double)st->converged_at
                 : st->state == AH_TUNE_SEARCHING ? calls
                                                  : fmin(calls, (double)st->calls_spent);
    double samples = 0, x = x0;
    for (int i = 0; i < k->nprobes; i++) samples += k->probes[i].samples;
    for (int i = 0; i < k->nprobes && samples > 0; i++) {
      const ah_report_probe_t *p = &k->probes[i];
      double w = BAR_W * end / calls * p->samples / samples;
      char pc[96];
      ah_config_format(&p->cfg, pc, sizeof pc);
      snprintf(tip, sizeof tip, "probe %d: %s, %d samples, %.1f us (NCCL's default %.1f us)", i + 1,
               pc, p->samples, p->us, st->default_us);
      seg(f, "probe", x, y, w, probe_fill(p->us, st->default_us), tip);
      x += w;
    }
    ah_config_format(&st->winner, cfg, sizeof cfg);
    double rest = BAR_W * (calls - end) / calls;
    if (st->state == AH_TUNE_CONVERGED) {
      snprintf(tip, sizeof tip, "pinned %s from call %llu: %.1f us", cfg,
               (unsigned long long)st->converged_at, au);
      seg(f, "pinned", x0 + BAR_W * end / calls, y, rest, "#2171b5", tip);
      snprintf(note, sizeof note, "pinned %s at call %llu of %llu, %.2fx NCCL", cfg,
               (unsigned long long)st->converged_at, (unsigned long long)k->calls,
               isfinite(du / au) ? du / au : 1.0);
    } else if (st->state == AH_TUNE_DEFAULT) {
      snprintf(tip, sizeof tip, "NCCL's default from call %.0f (nothing beat it beyond noise)",
               end);
      seg(f, "default", x0 + BAR_W * end / calls, y, rest, "#d9d9d9", tip);
      snprintf(note, sizeof note, "kept NCCL's choice after %d probes, %llu calls", st->probes,
               (unsigned long long)k->calls);
    } else {
      snprintf(note, sizeof note, "still searching: %d probes in %llu calls", st->probes,
               (unsigned long long)k->calls);
    }
    if (st->reopen_count > 0) {
      char r[64];
      snprintf(r, sizeof r, "; re-opened %dx", st->reopen_count);
      strncat(note, r, sizeof note - strlen(note) - 1);
      fprintf(
          f,
          "<path class=\"reopen\" d=\"M%.1f %.1f l6 -10 l6 10 z\" fill=\"#d62728\"><title>drift re-opened the "
          "search %d times</title></path>\n",
          x0 + BAR_W - 6, y + ROW_H - 12, st->reopen_count);
    }
  }
  svg_text(f, x0 + BAR_W + 10, y + 15, "start", "note", note);
  fputs("</g>\n", f);
}

static void comm_rows(void *arg, const ah_report_t *r, const ah_report_comm_t *c) {
  tl_t *t = arg;
  (void)r;
  for (int k = 0; k < c->nkeys; k++) {
    if (t->pass) key_row(t, c, &c->keys[k]);
    t->rows++;
  }
}

int plot_timeline_svg(FILE *f, const plot_reports_t *rs, int rank) {
  tl_t t = {f, 0, 0};
  plot_each_comm(rs, rank, comm_rows, &t);
  int rows = t.rows;
  svg_begin(f, WIDTH, TOP + (rows ? rows : 1) * ROW_H + 20, "autoha: tuning timeline per key");
  svg_text(f, 20, 24, "start", "head",
           "Tuning timeline per key, over the key's calls (one rank's report per communicator)");
  svg_text(
      f, 20, 42, "start", "note",
      "probes (green: faster than NCCL's default, orange: within 5%, red: slower) side by side in planned order, "
      "as wide as their samples;");
  svg_text(f, 20, 56, "start", "note",
           "blue: the pinned configuration; grey: NCCL's choice; red triangle: drift re-opened "
           "the search");
  if (!rows) svg_text(f, 20, 80, "start", "note", "no key in these reports");
  t.rows = 0;
  t.pass = 1;
  plot_each_comm(rs, rank, comm_rows, &t);
  svg_end(f);
  return rows;
}
