/* `autoha trace`: a job's tuning as Chrome trace-event JSON (the "JSON Object Format" that Perfetto
 * and chrome://tracing open): one process per report (rank), one thread per key, and on each
 * thread the key's phases as complete ("X") events — every probe of the search, then the pinned
 * configuration or NCCL's default — with the re-openings as an instant event.
 *
 * Note that the time axis is the collective time the key spent, not the wall clock: a phase lasts
 * its calls x its mean time (a probe: samples x its time), as the report holds no timestamps per
 * call. Keys therefore all start at 0, and the metadata says so. Built with jansson, so the output
 * is valid JSON whatever the names hold. */
#include <jansson.h>
#include <math.h>
#include <stdint.h>

#include "autoha_reports.h"

typedef struct {
  json_t *ev;
  int pid, tid, n;
} tr_t;

static void add(tr_t *t, json_t *e) {
  if (e && json_array_append_new(t->ev, e) == 0) t->n++;
}

static void phase(tr_t *t, const char *cat, const char *name, double ts, double dur, json_t *args) {
  add(t, json_pack("{s:s, s:s, s:s, s:f, s:f, s:i, s:i, s:o}", "name", name, "cat", cat, "ph", "X",
                   "ts", ts, "dur", dur > 0 ? dur : 0.001, "pid", t->pid, "tid", t->tid, "args",
                   args ? args : json_object()));
}

static double mean_us(const ah_report_stat_t *s) {
  return s->timed ? s->us_total / (double)s->timed : NAN;
}

static void key_events(tr_t *t, const ah_report_key_t *k) {
  char cfg[96], name[160];
  double ts = 0, du = mean_us(&k->nccl_default), au = mean_us(&k->applied);
  double unit = isfinite(au)   ? au
                : isfinite(du) ? du
                               : 1; /* µs per call where a phase's own time is unknown */
  uint64_t probed = 0;
  if (k->tuned) {
    for (int i = 0; i < k->nprobes; i++) {
      const ah_report_probe_t *p = &k->probes[i];
      double us = isfinite(p->us) ? p->us : unit;
      ah_config_format(&p->cfg, cfg, sizeof cfg);
      snprintf(name, sizeof name, "probe %s", cfg);
      phase(t, "probe", name, ts, us * p->samples,
            json_pack("{s:s, s:i, s:o}", "config", cfg, "samples", p->samples, "time_us",
                      isfinite(p->us) ? json_real(p->us) : json_null()));
      ts += us * p->samples;
      probed += (uint64_t)p->samples;
    }
  }
  uint64_t rest = k->calls > probed ? k->calls - probed : 0;
  const char *cat = "default";
  if (k->tuned && k->tune.state == AH_TUNE_CONVERGED) {
    ah_config_format(&k->tune.winner, cfg, sizeof cfg);
    snprintf(name, sizeof name, "pinned %s", cfg);
    cat = "pinned";
  } else if (k->tuned && k->tune.state == AH_TUNE_SEARCHING) {
    snprintf(name, sizeof name, "searching");
    cat = "search";
  } else if (!k->tuned && k->source != AH_SOURCE_DEFAULT) {
    ah_config_format(&k->applied.cfg, cfg, sizeof cfg);
    snprintf(name, sizeof name, "%s %s", ah_report_source_name(k->source), cfg);
    cat = "pinned";
  } else {
    snprintf(name, sizeof name, "NCCL's choice");
  }
  if (rest > 0)
    phase(t, cat, name, ts, unit * (double)rest,
          json_pack("{s:I, s:o, s:o}", "calls", (json_int_t)rest, "time_us",
                    isfinite(au) ? json_real(au) : json_null(), "nccl_default_us",
                    isfinite(du) ? json_real(du) : json_null()));
  ts += unit * (double)rest;
  if (k->tuned && k->tune.reopen_count > 0)
    add(t, json_pack("{s:s, s:s, s:s, s:f, s:s, s:i, s:i, s:{s:i}}", "name", "re-opened by drift",
                     "cat", "reopen", "ph", "i", "ts", ts, "s", "t", "pid", t->pid, "tid", t->tid,
                     "args", "times", k->tune.reopen_count));
}

static void meta(tr_t *t, const char *what, int tid, const char *name) {
  add(t, json_pack("{s:s, s:s, s:i, s:i, s:{s:s}}", "name", what, "ph", "M", "pid", t->pid, "tid",
                   tid, "args", "name", name));
}

int plot_trace_json(FILE *f, const plot_reports_t *rs) {
  tr_t t = {json_array(), 0, 0, 0};
  if (!t.ev) return -1;
  for (int i = 0; i < rs->n; i++) {
    const ah_report_t *r = rs->r[i];
    char name[400];
    t.pid = r->rank >= 0 ? r->rank : 100000 + i;
    snprintf(name, sizeof name, "rank %d (%s, pid %d)", r->rank, r->host, r->pid);
    meta(&t, "process_name", 0, name);
    t.tid = 0;
    for (int c = 0; c < r->ncomms; c++)
      for (int k = 0; k < r->comms[c].nkeys; k++) {
        const ah_report_key_t *key = &r->comms[c].keys[k];
        char lo[24], hi[24];
        size_t fl = ah_size_bin_floor(key->bin);
        t.tid++;
        snprintf(name, sizeof name, "%s %s-%s comm %016llx", ah_coll_name(key->coll),
                 ah_size_format(fl, lo, sizeof lo), ah_size_format(fl ? fl * 2 : 2, hi, sizeof hi),
                 (unsigned long long)r->comms[c].id);
        meta(&t, "thread_name", t.tid, name);
        key_events(&t, key);
      }
  }
  json_t *root = json_pack(
      "{s:o, s:s, s:{s:s, s:s}}", "traceEvents", t.ev, "displayTimeUnit", "ms", "otherData", "tool",
      "autoha trace", "time_axis",
      "per key, the collective time spent in each phase (calls x mean time), from 0; not wall clock");
  if (!root) return -1;
  int rc = json_dumpf(root, f, JSON_INDENT(1) | JSON_PRESERVE_ORDER) == 0 ? t.n : -1;
  fputc('\n', f);
  json_decref(root);
  return rc;
}
