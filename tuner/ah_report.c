/* ah_report.c: the tuning report as JSON (schema in docs/report.md) — serialising with jansson and
 * the atomic write (temporary file + rename). Reading a report back is ah_report_read.c. */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ah_file.h"
#include "ah_jansson.h"
#include "ah_report.h"
#include "ah_report_run.h"
#include "ah_version.h"

/* ---- writing --------------------------------------------------------------------------------- */

static json_t *num_or_null(double v) { return isfinite(v) ? json_real(v) : json_null(); }

static json_t *config_to_json(const ah_config_t *c) {
  char text[128];
  json_t *res = json_array();
  int nd = c->ndims < 0 ? 0 : c->ndims > AH_MAX_DIMS ? AH_MAX_DIMS : c->ndims;
  for (int i = 0; i < nd; i++) json_array_append_new(res, json_integer((json_int_t)c->res[i]));
  return json_pack("{s:o, s:o, s:o, s:s}", "algo",
                   c->algo >= 0 ? json_string(ah_algo_name(c->algo)) : json_null(), "proto",
                   c->proto >= 0 ? json_string(ah_proto_name(c->proto)) : json_null(), "res", res,
                   "text", ah_config_format(c, text, sizeof text));
}

static double stat_us(const ah_report_stat_t *s) {
  return s->timed > 0 ? s->us_total / (double)s->timed : NAN;
}

static json_t *stat_to_json(const ah_report_stat_t *s, int coll, int nranks) {
  double us = stat_us(s);
  double bytes = s->timed > 0 ? s->bytes_total / (double)s->timed : NAN;
  double algbw = s->timed > 0 ? ah_report_algbw(coll, nranks, bytes, us) : NAN;
  double busbw = algbw * ah_report_busbw_factor(coll, nranks);
  return json_pack("{s:o, s:I, s:I, s:o, s:o, s:o, s:o}", "config", config_to_json(&s->cfg),
                   "calls", (json_int_t)s->calls, "timed", (json_int_t)s->timed, "time_us",
                   num_or_null(us), "bytes_mean", num_or_null(bytes), "algbw_gbs",
                   num_or_null(algbw), "busbw_gbs", num_or_null(busbw));
}

static json_t *key_to_json(const ah_report_key_t *k, int nranks) {
  uint64_t bin_lo, bin_hi;
  ah_report_bin_range(k->bin, &bin_lo, &bin_hi);
  double du = stat_us(&k->nccl_default), au = stat_us(&k->applied);
  json_t *j =
      json_pack("{s:s, s:i, s:{s:I, s:I, s:I, s:I}, s:I, s:s, s:o, s:o, s:o, s:{s:I, s:o}}", "coll",
                ah_coll_name(k->coll), "bin", k->bin, "bytes", "bin_min", (json_int_t)bin_lo,
                "bin_max", (json_int_t)(bin_hi > INT64_MAX ? INT64_MAX : bin_hi), "min",
                (json_int_t)(k->bytes_min > INT64_MAX ? INT64_MAX : k->bytes_min), "max",
                (json_int_t)(k->bytes_max > INT64_MAX ? INT64_MAX : k->bytes_max), "calls",
                (json_int_t)k->calls, "source", ah_report_source_name(k->source), "default",
                stat_to_json(&k->nccl_default, k->coll, nranks), "applied",
                stat_to_json(&k->applied, k->coll, nranks), "speedup", num_or_null(du / au), "sync",
                "waits", (json_int_t)k->sync_waits, "wait_us", num_or_null(k->sync_wait_us));
  if (!j) return NULL;
  json_object_set_new(
      j, "captured_calls",
      json_integer((json_int_t)(k->captured_calls > INT64_MAX ? INT64_MAX : k->captured_calls)));
  json_object_set_new(
      j, "graph_launched_calls",
      json_integer(
          (json_int_t)(k->graph_launched_calls > INT64_MAX ? INT64_MAX : k->graph_launched_calls)));
  json_object_set_new(j, "refused", json_boolean(k->refused));
  if (k->tuned) {
    const ah_tune_status_t *t = &k->tune;
    json_t *probes = json_array();
    for (int i = 0; i < k->nprobes && k->probes; i++)
      json_array_append_new(
          probes,
          json_pack("{s:o, s:i, s:o}", "config", config_to_json(&k->probes[i].cfg), "samples",
                    k->probes[i].samples, "time_us", num_or_null(k->probes[i].us)));
    json_t *tj =
        json_pack("{s:s, s:i, s:i, s:o, s:o, s:o, s:o, s:o, s:i, s:o}", "state",
                  ah_report_tune_state_name(t->state), "calls_spent", t->calls_spent,
                  "probes_count", t->probes, "converged_at",
                  t->converged_at <= (uint64_t)INT64_MAX ? json_integer((json_int_t)t->converged_at)
                                                         : json_null(),
                  "winner", config_to_json(&t->winner), "winner_us", num_or_null(t->winner_us),
                  "default_us", num_or_null(t->default_us), "speedup",
                  num_or_null(t->winner_us > 0 ? t->default_us / t->winner_us : NAN), "reopened",
                  t->reopen_count, "probes", probes);
    json_object_set_new(j, "tuning", tj ? tj : json_null());
  }
  return j;
}

const char *ah_report_health_kind(int kind) {
  static const char *names[] = {NULL,      "missing",   "incomplete", "mismatch",
                                "resumed", "straggler", "recovered",  "slow_link",
                                "link_ok", "died",      "stopped",    "nic_down"};
  _Static_assert(sizeof names / sizeof names[0] == AH_REPORT_HEALTH_KINDS + 1, "a name per kind");
  return kind >= 1 && kind <= AH_REPORT_HEALTH_KINDS ? names[kind] : NULL;
}

static json_t *health_to_json(const ah_report_t *r) {
  json_t *a = json_array();
  for (int i = 0; i < r->nhealth && i < AH_REPORT_HEALTH_MAX; i++) {
    const ah_report_health_t *h = &r->health[i];
    char id[24], text[AH_REPORT_TEXT_MAX];
    snprintf(id, sizeof id, "0x%016" PRIx64, h->comm);
    const char *kind = ah_report_health_kind(h->kind);
    json_array_append_new(
        a,
        json_pack("{s:s, s:s, s:s, s:o}", "comm", id, "kind", kind ? kind : "unknown", "text",
                  ah_report_text_copy(text, sizeof text, h->text), "time", num_or_null(h->time_s)));
  }
  return a;
}

/* The "ha" object: shadows, failovers with their time and stall, work requests replayed. */
static json_t *ha_to_json(const ah_report_ha_t *h) {
  json_t *a = json_array();
  for (int i = 0; i < h->nfail && i < AH_REPORT_HA_MAX; i++) {
    const ah_report_failover_t *f = &h->fail[i];
    char dev[sizeof f->dev], sdev[sizeof f->shadow_dev];
    json_t *e =
        json_pack("{s:o, s:I, s:s, s:i, s:i, s:o, s:I, s:I}", "time", num_or_null(f->time_s), "qp",
                  (json_int_t)f->qpn, "dev", ah_report_text_copy(dev, sizeof dev, f->dev), "port",
                  f->port, "shadow_port", f->shadow_port, "stall_ms", num_or_null(f->stall_ms),
                  "replayed", (json_int_t)f->replayed, "synthesized", (json_int_t)f->synthesized);
    if (e && f->shadow_dev[0]) /* a shadow on another NIC (AUTOHA_HA=nic) */
      json_object_set_new(e, "shadow_dev",
                          json_string(ah_report_text_copy(sdev, sizeof sdev, f->shadow_dev)));
    json_array_append_new(a, e);
  }
  char policy[sizeof h->policy];
  json_t *o =
      json_pack("{s:s, s:I, s:I, s:I, s:I, s:o}", "policy",
                ah_report_text_copy(policy, sizeof policy, h->policy), "shadows",
                (json_int_t)h->shadows, "failovers", (json_int_t)h->failovers, "replayed",
                (json_int_t)h->replayed, "synthesized", (json_int_t)h->synthesized, "events", a);
  if (o && h->rebalances) /* only AUTOHA_HA=path with a plan re-plans */
    json_object_update_new(
        o, json_pack("{s:I, s:I, s:o, s:o, s:o}", "rebalances", (json_int_t)h->rebalances,
                     "rebalanced_qps", (json_int_t)h->rebalanced, "rebalance_before",
                     num_or_null(h->rb_before), "rebalance_share", num_or_null(h->rb_share),
                     "rebalance_bound", num_or_null(h->rb_bound)));
  return o;
}

static json_t *report_to_json(const ah_report_t *r) {
  json_t *comms = json_array();
  for (int c = 0; c < r->ncomms; c++) {
    const ah_report_comm_t *cm = &r->comms[c];
    char id[24];
    snprintf(id, sizeof id, "0x%016" PRIx64, cm->id);
    json_t *keys = json_array();
    uint64_t waits = 0;
    double wait_us = 0;
    for (int k = 0; k < cm->nkeys; k++) {
      json_t *kj = key_to_json(&cm->keys[k], cm->nranks);
      if (kj) json_array_append_new(keys, kj);
      waits += cm->keys[k].sync_waits;
      wait_us += cm->keys[k].sync_wait_us;
    }
    json_t *cj = json_pack("{s:s, s:i, s:i, s:i, s:{s:I, s:o}, s:o}", "id", id, "nranks",
                           cm->nranks, "nnodes", cm->nnodes, "rank", cm->rank, "sync", "waits",
                           (json_int_t)waits, "wait_us", num_or_null(wait_us), "keys", keys);
    if (cj && cm->destroyed) json_object_set_new(cj, "destroyed", json_true());
    json_array_append_new(comms, cj);
  }
  json_t *root = json_pack("{s:i, s:s, s:s, s:s, s:i, s:i, s:i, s:s, s:s, s:o, s:o, s:o}", "schema",
                           AH_REPORT_SCHEMA, "tool", "autoha", "job", r->job, "host", r->host,
                           "pid", r->pid, "rank", r->rank, "nccl_version", r->nccl_version,
                           "topology", r->topo, "mode", r->mode, "time", num_or_null(r->time_s),
                           "comms", comms, "health", health_to_json(r));
  if (root && r->ha.policy[0]) json_object_set_new(root, "ha", ha_to_json(&r->ha));
  const ah_report_destroyed_t *d = &r->destroyed;
  if (root && d->comms) /* the communicators destroyed beyond those kept in detail, summed */
    json_object_set_new(
        root, "destroyed",
        json_pack("{s:I, s:I, s:I, s:I, s:I, s:o, s:o, s:I, s:o}", "comms", (json_int_t)d->comms,
                  "keys", (json_int_t)d->keys, "tuned_keys", (json_int_t)d->tuned, "calls",
                  (json_int_t)d->calls, "timed", (json_int_t)d->timed, "us",
                  num_or_null(d->us_total), "bytes", num_or_null(d->bytes_total), "sync_waits",
                  (json_int_t)d->sync_waits, "sync_wait_us", num_or_null(d->sync_wait_us)));
  return root;
}

char *ah_report_to_string(const ah_report_t *r) {
  if (!ah_jansson_ready()) return NULL; /* it logged why, once */
  /* Every text field made valid UTF-8 first: jansson refuses anything else, and a report must not
   * be lost to a byte in a job id. */
  ah_report_t *t = malloc(sizeof *t); /* tens of KiB: not on a caller's stack */
  if (!t) return NULL;
  *t = *r;
  ah_report_text_copy(t->job, sizeof t->job, r->job);
  ah_report_text_copy(t->host, sizeof t->host, r->host);
  ah_report_text_copy(t->topo, sizeof t->topo, r->topo);
  ah_report_text_copy(t->mode, sizeof t->mode, r->mode);
  json_t *j = report_to_json(t);
  free(t);
  if (!j) return NULL;
  json_object_set_new(j, "autoha_version", json_string(ah_version())); /* the build that wrote it */
  if (r->run.present) {
    json_t *run = ah_report_run_to_json(&r->run);
    json_object_set_new(j, "run", run ? run : json_null());
  }
  char *s = json_dumps(j, JSON_INDENT(1) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(10));
  json_decref(j);
  return s;
}

int ah_report_write(const ah_report_t *r, const char *path, char *err, size_t errlen) {
  if (!ah_jansson_ready()) {
    if (err && errlen)
      snprintf(err, errlen, "no report is written to %s: " AH_JANSSON_SONAME " did not load", path);
    return -1;
  }
  char *text = ah_report_to_string(r); /* ah_file_write_atomic makes the folders */
  size_t len = text ? strlen(text) : 0;
  char *line = text ? realloc(text, len + 2) : NULL; /* the file ends in a newline */
  if (!line) {
    free(text);
    if (err && errlen)
      snprintf(err, errlen, "cannot format the report for %s (out of memory)", path);
    return -1;
  }
  memcpy(line + len, "\n", 2);
  int rc = ah_file_write_atomic(path, line, len + 1, err, errlen);
  free(line);
  return rc;
}
