/* ah_metrics.c: the metrics file — an ah_report_t as Prometheus text exposition (version 0.0.4,
 * what node_exporter's textfile collector parses), built in a growing buffer and written atomically
 * through ah_file_write_atomic.
 *
 * Key choice: one family at a time over every key, because the format wants a family's samples
 * together under its HELP and TYPE lines; and the process's labels on every series, because the
 * collector merges every file of a node and refuses a series it has seen in another file. */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ah_file.h"
#include "ah_metrics.h"
#include "ah_version.h"

/* ---- text ------------------------------------------------------------------------------------ */

char *ah_metrics_label_escape(char *out, size_t len, const char *in) {
  if (!len) return out;
  char u[4 * AH_REPORT_TEXT_MAX];
  ah_report_text_copy(u, sizeof u, in ? in : "");
  size_t o = 0;
  for (const char *p = u; *p; p++) {
    const char *esc = *p == '\\' ? "\\\\" : *p == '"' ? "\\\"" : *p == '\n' ? "\\n" : NULL;
    size_t n = esc ? 2 : 1;
    /* a multi-byte character is kept whole or not at all */
    if (!esc && ((unsigned char)*p & 0xC0) == 0xC0)
      while (((unsigned char)p[n] & 0xC0) == 0x80) n++;
    if (o + n >= len) break;
    memcpy(out + o, esc ? esc : p, n);
    o += n;
    p += esc ? 0 : n - 1;
  }
  out[o] = 0;
  return out;
}

typedef struct {
  char *s;
  size_t len, cap;
  int oom;
} buf_t;

static void put(buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(buf_t *b, const char *fmt, ...) {
  if (b->oom) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    if (n < 0) {
      b->oom = 1;
      return;
    }
    if ((size_t)n < b->cap - b->len) {
      b->len += (size_t)n;
      return;
    }
    size_t cap = 2 * b->cap + (size_t)n + 1;
    char *s = realloc(b->s, cap);
    if (!s) {
      b->oom = 1;
      return;
    }
    b->s = s;
    b->cap = cap;
  }
}

/* A sample value: integers as integers, NaN and infinities as the format spells them. */
static void put_double(buf_t *b, double v) {
  if (isnan(v)) put(b, "NaN\n");
  else if (isinf(v)) put(b, v > 0 ? "+Inf\n" : "-Inf\n");
  else put(b, "%.12g\n", v);
}

static void family(buf_t *b, const char *name, const char *type, const char *help) {
  put(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* ---- per key --------------------------------------------------------------------------------- */

enum { F_CALLS, F_MEAN, F_BUSBW, F_STATE, F_CONFIG, F_WAITS, F_WAIT_S, F_SPEEDUP, F_NFAM };

static const struct {
  const char *name, *type, *help;
} key_fams[F_NFAM] = {
    {"autoha_calls_total", "counter",
     "Collective calls of the key (communicator, collective, size bin) this process made."},
    {"autoha_call_mean_seconds", "gauge",
     "Mean time of the key's timed calls, for the configuration autoha applies (choice=applied) "
     "and for NCCL's own (choice=nccl_default); absent until a call of it was timed."},
    {"autoha_busbw_bytes_per_second", "gauge",
     "nccl-tests' bus bandwidth of the key's timed calls (mean bytes over mean time), per choice."},
    {"autoha_tuning_state", "gauge",
     "1 for the key's tuning state (untuned, searching, converged, default: NCCL's choice kept), "
     "0 for the others."},
    {"autoha_applied_config_info", "gauge",
     "The configuration the key runs now (its labels), and where it came from (source); always 1."},
    {"autoha_sync_waits_total", "counter",
     "Times this rank waited for the leader's decision about one of the key's calls."},
    {"autoha_sync_wait_seconds_total", "counter", "Time this rank spent in those waits."},
    {"autoha_speedup_ratio", "gauge",
     "NCCL's own mean time over the applied configuration's (1: no gain); absent until both were "
     "timed."},
};

static double stat_mean_s(const ah_report_stat_t *s) {
  return s->timed > 0 ? s->us_total / (double)s->timed / 1e6 : NAN;
}

static double stat_busbw(const ah_report_stat_t *s, int coll, int nranks) {
  if (s->timed == 0) return NAN;
  double us = s->us_total / (double)s->timed, bytes = s->bytes_total / (double)s->timed;
  return ah_report_algbw(coll, nranks, bytes, us) * ah_report_busbw_factor(coll, nranks) * 1e9;
}

static const char *tune_state(const ah_report_key_t *k) {
  return k->tuned ? ah_report_tune_state_name(k->tune.state) : "untuned";
}

static void key_sample(buf_t *b, int fam, const char *kl, const ah_report_key_t *k, int nranks) {
  const char *name = key_fams[fam].name;
  const ah_report_stat_t *st[2] = {&k->applied, &k->nccl_default};
  static const char *choice[2] = {"applied", "nccl_default"};
  switch (fam) {
    case F_CALLS: put(b, "%s{%s} %" PRIu64 "\n", name, kl, k->calls); break;
    case F_MEAN:
    case F_BUSBW:
      for (int i = 0; i < 2; i++) {
        if (st[i]->timed == 0) continue;
        put(b, "%s{%s,choice=\"%s\"} ", name, kl, choice[i]);
        put_double(b, fam == F_MEAN ? stat_mean_s(st[i]) : stat_busbw(st[i], k->coll, nranks));
      }
      break;
    case F_STATE: {
      static const char *states[] = {"untuned", "searching", "converged", "default"};
      for (int i = 0; i < 4; i++)
        put(b, "%s{%s,state=\"%s\"} %d\n", name, kl, states[i],
            strcmp(states[i], tune_state(k)) == 0);
      break;
    }
    case F_CONFIG: {
      const ah_config_t *c = &k->applied.cfg;
      char text[128], esc[256];
      ah_config_format(c, text, sizeof text);
      put(b, "%s{%s,source=\"%s\",algo=\"%s\",proto=\"%s\",config=\"%s\"} 1\n", name, kl,
          ah_report_source_name(k->source), c->algo >= 0 ? ah_algo_name(c->algo) : "",
          c->proto >= 0 ? ah_proto_name(c->proto) : "",
          ah_metrics_label_escape(esc, sizeof esc, text));
      break;
    }
    case F_WAITS: put(b, "%s{%s} %" PRIu64 "\n", name, kl, k->sync_waits); break;
    case F_WAIT_S:
      put(b, "%s{%s} ", name, kl);
      put_double(b, k->sync_wait_us / 1e6);
      break;
    case F_SPEEDUP:
      if (k->applied.timed == 0 || k->nccl_default.timed == 0) break;
      put(b, "%s{%s} ", name, kl);
      put_double(b, stat_mean_s(&k->nccl_default) / stat_mean_s(&k->applied));
      break;
    default: break;
  }
}

static void keys_put(buf_t *b, const ah_report_t *r, const char *pl) {
  for (int fam = 0; fam < F_NFAM; fam++) {
    family(b, key_fams[fam].name, key_fams[fam].type, key_fams[fam].help);
    for (int c = 0; c < r->ncomms; c++) {
      const ah_report_comm_t *cm = &r->comms[c];
      for (int i = 0; i < cm->nkeys; i++) {
        const ah_report_key_t *k = &cm->keys[i];
        uint64_t lo, hi;
        ah_report_bin_range(k->bin, &lo, &hi);
        char kl[1536];
        snprintf(kl, sizeof kl,
                 "%s,comm=\"0x%016" PRIx64 "\",coll=\"%s\",bin=\"%d\",size_bytes=\"%" PRIu64
                 "-%" PRIu64 "\"",
                 pl, cm->id, ah_coll_name(k->coll), k->bin, lo, hi);
        key_sample(b, fam, kl, k, cm->nranks);
      }
    }
  }
}

/* ---- per process ----------------------------------------------------------------------------- */

static void process_put(buf_t *b, const ah_report_t *r, const char *pl) {
  char mode[64], ver[32], nccl[32];
  family(b, "autoha_info", "gauge",
         "The process autoha runs in (its labels: mode, NCCL and autoha versions); always 1.");
  put(b, "autoha_info{%s,mode=\"%s\",nccl_version=\"%s\",autoha_version=\"%s\"} 1\n", pl,
      ah_metrics_label_escape(mode, sizeof mode, r->mode),
      ah_report_version_text(r->nccl_version, 1, nccl, sizeof nccl),
      ah_metrics_label_escape(ver, sizeof ver, ah_version()));
  family(b, "autoha_report_time_seconds", "gauge",
         "When this file (and the report beside it) was written, seconds since the epoch.");
  put(b, "autoha_report_time_seconds{%s} ", pl);
  put_double(b, r->time_s);
  family(
      b, "autoha_communicators", "gauge",
      "Communicators this process reports in detail: the live ones and the latest 16 destroyed.");
  put(b, "autoha_communicators{%s} %d\n", pl, r->ncomms);
  family(b, "autoha_health_findings_total", "counter",
         "Findings of the hang diagnosis this process received since it started, per kind.");
  for (int kind = 1; kind <= AH_REPORT_HEALTH_KINDS; kind++)
    put(b, "autoha_health_findings_total{%s,kind=\"%s\"} %" PRIu64 "\n", pl,
        ah_report_health_kind(kind), r->health_counts[kind]);
  if (r->ncoords > 0) {
    family(b, "autoha_coordinator_connected", "gauge",
           "1 when every coordinator hub this process talks to is connected, else 0.");
    put(b, "autoha_coordinator_connected{%s} %d\n", pl, r->ncoords_alive == r->ncoords);
  }
}

static void ha_put(buf_t *b, const ah_report_t *r, const char *pl) {
  const ah_report_ha_t *h = &r->ha;
  if (!h->policy[0]) return; /* AUTOHA_HA off */
  char policy[32];
  ah_metrics_label_escape(policy, sizeof policy, h->policy);
  double stall_ms = 0, last_ms = NAN;
  for (int i = 0; i < h->nfail && i < AH_REPORT_HA_MAX; i++) {
    stall_ms += h->fail[i].stall_ms;
    last_ms = h->fail[i].stall_ms;
  }
  family(b, "autoha_ha_shadows", "gauge", "Shadow queue pairs that became ready (AUTOHA_HA).");
  put(b, "autoha_ha_shadows{%s,policy=\"%s\"} %" PRIu64 "\n", pl, policy, h->shadows);
  family(b, "autoha_ha_failovers_total", "counter",
         "Queue pairs whose work moved to their shadow after an error.");
  put(b, "autoha_ha_failovers_total{%s} %" PRIu64 "\n", pl, h->failovers);
  family(b, "autoha_ha_replayed_total", "counter", "Work requests posted again by failovers.");
  put(b, "autoha_ha_replayed_total{%s} %" PRIu64 "\n", pl, h->replayed);
  family(b, "autoha_ha_stall_seconds_total", "counter",
         "Time from a primary's error to the switch, summed over the failovers the report lists.");
  put(b, "autoha_ha_stall_seconds_total{%s} ", pl);
  put_double(b, stall_ms / 1e3);
  if (!isnan(last_ms)) {
    family(b, "autoha_ha_last_stall_seconds", "gauge", "The last listed failover's stall.");
    put(b, "autoha_ha_last_stall_seconds{%s} ", pl);
    put_double(b, last_ms / 1e3);
  }
  family(b, "autoha_ha_rebalances_total", "counter",
         "Path re-plans applied after failovers (AUTOHA_HA=path).");
  put(b, "autoha_ha_rebalances_total{%s} %" PRIu64 "\n", pl, h->rebalances);
}

char *ah_metrics_to_string(const ah_report_t *r) {
  buf_t b = {malloc(16384), 0, 16384, 0};
  if (!b.s) return NULL;
  b.s[0] = 0;
  char host[2 * AH_REPORT_TEXT_MAX + 1], job[2 * AH_REPORT_TEXT_MAX + 1], pl[1200];
  snprintf(pl, sizeof pl, "host=\"%s\",rank=\"%d\",pid=\"%d\",autoha_job=\"%s\"",
           ah_metrics_label_escape(host, sizeof host, r->host), r->rank, r->pid,
           ah_metrics_label_escape(job, sizeof job, r->job));
  process_put(&b, r, pl);
  keys_put(&b, r, pl);
  ha_put(&b, r, pl);
  if (b.oom) {
    free(b.s);
    return NULL;
  }
  return b.s;
}

int ah_metrics_write(const ah_report_t *r, const char *path, char *err, size_t errlen) {
  char *text = ah_metrics_to_string(r);
  if (!text) {
    if (err && errlen)
      snprintf(err, errlen, "cannot format the metrics for %s (out of memory)", path);
    return -1;
  }
  int rc = ah_file_write_atomic(path, text, strlen(text), err, errlen);
  free(text);
  return rc;
}
