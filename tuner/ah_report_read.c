/* ah_report_read.c: parsing a tuning report (docs/report.md) back into ah_report_t, for a profile
 * and for `autoha report`.
 *
 * Parsing checks types field by field and names the JSON path of the first field that is wrong
 * ("comms[1].keys[3].applied.config.algo: expected a string or null"), so a hand-edited or
 * truncated profile is rejected with a message a person can act on. Fields it does not know are
 * ignored, so a newer writer's additions do not break an older reader. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
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

/* ---- reading --------------------------------------------------------------------------------- */

typedef struct {
  char *err;
  size_t errlen;
  int failed;
} reader_t;

static void rerr(reader_t *rd, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void rerr(reader_t *rd, const char *path, const char *fmt, ...) {
  if (rd->failed) return;
  rd->failed = 1;
  if (!rd->err || !rd->errlen) return;
  int n = snprintf(rd->err, rd->errlen, "%s: ", path);
  if (n < 0 || (size_t)n >= rd->errlen) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(rd->err + n, rd->errlen - (size_t)n, fmt, ap);
  va_end(ap);
}

/* out = base "." field (or field alone at the top), cut to fit: a JSON path for messages. */
static void sub(char *out, size_t len, const char *base, const char *field) {
  size_t o = 0;
  for (const char *p = base; *p && o + 1 < len; p++) out[o++] = *p;
  if (*base && o + 1 < len) out[o++] = '.';
  for (const char *p = field; *p && o + 1 < len; p++) out[o++] = *p;
  out[o] = 0;
}

/* Field getters: a missing optional field leaves *v_p; a field of the wrong type is an error. */
static json_t *get(reader_t *rd, json_t *o, const char *base, const char *field, int required) {
  json_t *v = json_object_get(o, field);
  if (!v && required) {
    char p[256];
    sub(p, sizeof p, base, field);
    rerr(rd, p, "missing");
  }
  return v;
}

static void get_int(reader_t *rd, json_t *o, const char *base, const char *field, int required,
                    int64_t lo, int64_t hi, int64_t *v_p) {
  json_t *v = get(rd, o, base, field, required);
  if (!v || rd->failed) return;
  char p[256];
  sub(p, sizeof p, base, field);
  if (!json_is_integer(v)) {
    rerr(rd, p, "expected an integer");
    return;
  }
  json_int_t n = json_integer_value(v);
  if (n < lo || n > hi) {
    rerr(rd, p, "%lld out of range %lld..%lld", (long long)n, (long long)lo, (long long)hi);
    return;
  }
  *v_p = n;
}

static void get_num(reader_t *rd, json_t *o, const char *base, const char *field, double *v_p) {
  json_t *v = get(rd, o, base, field, 0);
  if (!v || rd->failed) return;
  if (json_is_null(v)) {
    *v_p = NAN;
    return;
  }
  if (!json_is_number(v)) {
    char p[256];
    sub(p, sizeof p, base, field);
    rerr(rd, p, "expected a number or null");
    return;
  }
  *v_p = json_number_value(v);
}

static void get_str(reader_t *rd, json_t *o, const char *base, const char *field, int required,
                    char *out, size_t len) {
  json_t *v = get(rd, o, base, field, required);
  if (!v || rd->failed) return;
  if (!json_is_string(v)) {
    char p[256];
    sub(p, sizeof p, base, field);
    rerr(rd, p, "expected a string");
    return;
  }
  ah_report_text_copy(out, len, json_string_value(v)); /* never cut inside a character */
}

static void get_config(reader_t *rd, json_t *o, const char *base, const char *field,
                       ah_config_t *c_p) {
  char p[256], q[256];
  sub(p, sizeof p, base, field);
  json_t *c = get(rd, o, base, field, 1);
  if (!c || rd->failed) return;
  if (!json_is_object(c)) {
    rerr(rd, p, "expected an object");
    return;
  }
  ah_config_t cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.algo = cfg.proto = -1;
  json_t *a = json_object_get(c, "algo"), *pr = json_object_get(c, "proto");
  if (a && !json_is_null(a)) {
    int v =
        json_is_string(a) ? ah_algo_parse(json_string_value(a), strlen(json_string_value(a))) : -2;
    sub(q, sizeof q, p, "algo");
    if (v == -2) {
      rerr(rd, q, "expected a string or null");
      return;
    }
    if (v < 0) {
      rerr(rd, q, "unknown algorithm '%s'", json_string_value(a));
      return;
    }
    cfg.algo = (int8_t)v;
  }
  if (pr && !json_is_null(pr)) {
    int v = json_is_string(pr)
                ? ah_proto_parse(json_string_value(pr), strlen(json_string_value(pr)))
                : -2;
    sub(q, sizeof q, p, "proto");
    if (v == -2) {
      rerr(rd, q, "expected a string or null");
      return;
    }
    if (v < 0) {
      rerr(rd, q, "unknown protocol '%s'", json_string_value(pr));
      return;
    }
    cfg.proto = (int8_t)v;
  }
  json_t *res = json_object_get(c, "res");
  sub(q, sizeof q, p, "res");
  if (res) {
    if (!json_is_array(res) || json_array_size(res) > AH_MAX_DIMS) {
      rerr(rd, q, "expected an array of at most %d integers", AH_MAX_DIMS);
      return;
    }
    for (size_t i = 0; i < json_array_size(res); i++) {
      json_t *e = json_array_get(res, i);
      if (!json_is_integer(e) || json_integer_value(e) < 0) {
        rerr(rd, q, "element %zu: expected a non-negative integer", i);
        return;
      }
      cfg.res[i] = json_integer_value(e);
    }
    cfg.ndims = (int32_t)json_array_size(res);
  }
  *c_p = cfg;
}

static void get_stat(reader_t *rd, json_t *o, const char *base, const char *field,
                     ah_report_stat_t *s_p) {
  char p[256];
  sub(p, sizeof p, base, field);
  json_t *s = get(rd, o, base, field, 1);
  if (!s || rd->failed) return;
  if (!json_is_object(s)) {
    rerr(rd, p, "expected an object");
    return;
  }
  int64_t calls = 0, timed = 0;
  double us = NAN, bytes = NAN;
  get_config(rd, s, p, "config", &s_p->cfg);
  get_int(rd, s, p, "calls", 1, 0, INT64_MAX, &calls);
  get_int(rd, s, p, "timed", 0, 0, INT64_MAX, &timed);
  get_num(rd, s, p, "time_us", &us);
  get_num(rd, s, p, "bytes_mean", &bytes);
  if (rd->failed) return;
  if (timed > calls) {
    rerr(rd, p, "timed (%lld) exceeds calls (%lld)", (long long)timed, (long long)calls);
    return;
  }
  s_p->calls = (uint64_t)calls;
  s_p->timed = isfinite(us) ? (uint64_t)timed : 0;
  s_p->us_total = isfinite(us) ? us * (double)timed : 0;
  s_p->bytes_total = isfinite(bytes) ? bytes * (double)timed : 0;
}

static void get_key(reader_t *rd, json_t *kj, const char *p, ah_report_key_t *k) {
  char q[256], coll[32] = "", source[32] = "", state[32] = "";
  int64_t v = 0;
  memset(k, 0, sizeof *k);
  if (!json_is_object(kj)) {
    rerr(rd, p, "expected an object");
    return;
  }
  get_str(rd, kj, p, "coll", 1, coll, sizeof coll);
  if (rd->failed) return;
  k->coll = ah_coll_parse_any(coll, strlen(coll));
  sub(q, sizeof q, p, "coll");
  if (k->coll < 0) {
    rerr(rd, q, "unknown collective '%s'", coll);
    return;
  }
  get_int(rd, kj, p, "bin", 1, 0, 63, &v);
  k->bin = (int)v;
  v = 0;
  get_int(rd, kj, p, "calls", 1, 0, INT64_MAX, &v);
  k->calls = (uint64_t)v;
  get_str(rd, kj, p, "source", 1, source, sizeof source);
  if (rd->failed) return;
  k->source = ah_report_source_parse(source);
  sub(q, sizeof q, p, "source");
  if (k->source < 0) {
    rerr(rd, q, "unknown source '%s' (expected default|override|profile|tuned)", source);
    return;
  }
  json_t *bytes = json_object_get(kj, "bytes");
  if (json_is_object(bytes)) {
    int64_t lo = 0, hi = 0;
    sub(q, sizeof q, p, "bytes");
    get_int(rd, bytes, q, "min", 0, 0, INT64_MAX, &lo);
    get_int(rd, bytes, q, "max", 0, 0, INT64_MAX, &hi);
    k->bytes_min = (uint64_t)lo;
    k->bytes_max = (uint64_t)hi;
  }
  get_stat(rd, kj, p, "default", &k->nccl_default);
  get_stat(rd, kj, p, "applied", &k->applied);
  v = 0;
  get_int(rd, kj, p, "captured_calls", 0, 0, INT64_MAX, &v); /* optional: older reports lack it */
  k->captured_calls = (uint64_t)v;
  v = 0;
  get_int(rd, kj, p, "graph_launched_calls", 0, 0, INT64_MAX,
          &v); /* optional: older reports lack it */
  k->graph_launched_calls = (uint64_t)v;
  json_t *refused = json_object_get(kj, "refused"); /* optional: older reports lack it */
  if (refused && !json_is_boolean(refused)) {
    sub(q, sizeof q, p, "refused");
    rerr(rd, q, "expected true or false");
    return;
  }
  k->refused = json_is_true(refused);
  json_t *sync = json_object_get(kj, "sync");
  if (json_is_object(sync)) {
    int64_t w = 0;
    double us = 0;
    sub(q, sizeof q, p, "sync");
    get_int(rd, sync, q, "waits", 0, 0, INT64_MAX, &w);
    get_num(rd, sync, q, "wait_us", &us);
    k->sync_waits = (uint64_t)w;
    k->sync_wait_us = isfinite(us) ? us : 0;
  }
  json_t *t = json_object_get(kj, "tuning");
  if (!t || json_is_null(t) || rd->failed) return;
  sub(q, sizeof q, p, "tuning");
  if (!json_is_object(t)) {
    rerr(rd, q, "expected an object or null");
    return;
  }
  ah_tune_status_t *st = &k->tune;
  int64_t n = 0;
  get_str(rd, t, q, "state", 1, state, sizeof state);
  st->state = strcmp(state, "searching") == 0   ? AH_TUNE_SEARCHING
              : strcmp(state, "converged") == 0 ? AH_TUNE_CONVERGED
              : strcmp(state, "default") == 0   ? AH_TUNE_DEFAULT
                                                : -1;
  if (!rd->failed && st->state < 0) {
    char r[256];
    sub(r, sizeof r, q, "state");
    {
      rerr(rd, r, "unknown state '%s' (expected searching|converged|default)", state);
      return;
    }
  }
  get_int(rd, t, q, "calls_spent", 0, 0, INT32_MAX, &n);
  st->calls_spent = (int)n;
  n = 0;
  get_int(rd, t, q, "probes_count", 0, 0, INT32_MAX, &n);
  st->probes = (int)n;
  st->converged_at = UINT64_MAX;
  json_t *ca = json_object_get(t, "converged_at");
  if (ca && !json_is_null(ca)) {
    n = 0;
    get_int(rd, t, q, "converged_at", 0, 0, INT64_MAX, &n);
    st->converged_at = (uint64_t)n;
  }
  get_config(rd, t, q, "winner", &st->winner);
  st->winner_us = st->default_us = NAN;
  get_num(rd, t, q, "winner_us", &st->winner_us);
  get_num(rd, t, q, "default_us", &st->default_us);
  n = 0;
  get_int(rd, t, q, "reopened", 0, 0, INT32_MAX, &n);
  st->reopen_count = (int)n;
  json_t *probes = json_object_get(t, "probes");
  if (rd->failed) return;
  k->tuned = 1;
  if (!probes) return;
  char r[256];
  sub(r, sizeof r, q, "probes");
  if (!json_is_array(probes)) {
    rerr(rd, r, "expected an array");
    return;
  }
  size_t np = json_array_size(probes);
  if (np == 0) return;
  k->probes = calloc(np, sizeof *k->probes);
  if (!k->probes) {
    rerr(rd, r, "out of memory");
    return;
  }
  for (size_t i = 0; i < np && !rd->failed; i++) {
    char e[300];
    snprintf(e, sizeof e, "%s[%zu]", r, i);
    json_t *pj = json_array_get(probes, i);
    if (!json_is_object(pj)) {
      rerr(rd, e, "expected an object");
      return;
    }
    int64_t samples = 0;
    double us = NAN;
    get_config(rd, pj, e, "config", &k->probes[i].cfg);
    get_int(rd, pj, e, "samples", 0, 0, INT32_MAX, &samples);
    get_num(rd, pj, e, "time_us", &us);
    k->probes[i].samples = (int)samples;
    k->probes[i].us = us;
    k->nprobes = (int)i + 1;
  }
}

void ah_report_free(ah_report_t *r) {
  if (!r) return;
  for (int c = 0; c < r->ncomms && r->comms; c++) {
    for (int k = 0; k < r->comms[c].nkeys && r->comms[c].keys; k++)
      free(r->comms[c].keys[k].probes);
    free(r->comms[c].keys);
  }
  free(r->comms);
  free(r);
}

/* The optional "health" array: the findings kept, at most AH_REPORT_HEALTH_MAX (the latest). */
static void get_health(reader_t *rd, json_t *root, ah_report_t *r) {
  json_t *a = json_object_get(root, "health");
  if (!a || rd->failed) return;
  if (!json_is_array(a)) {
    rerr(rd, "health", "expected an array");
    return;
  }
  size_t n = json_array_size(a), first = n > AH_REPORT_HEALTH_MAX ? n - AH_REPORT_HEALTH_MAX : 0;
  for (size_t i = first; i < n && !rd->failed; i++) {
    char p[40], id[40] = "", kind[16] = "";
    snprintf(p, sizeof p, "health[%zu]", i);
    json_t *hj = json_array_get(a, i);
    if (!json_is_object(hj)) {
      rerr(rd, p, "expected an object");
      return;
    }
    ah_report_health_t *h = &r->health[r->nhealth];
    get_str(rd, hj, p, "comm", 1, id, sizeof id);
    get_str(rd, hj, p, "kind", 1, kind, sizeof kind);
    get_str(rd, hj, p, "text", 1, h->text, sizeof h->text);
    get_num(rd, hj, p, "time", &h->time_s);
    if (rd->failed) return;
    char *end;
    errno = 0;
    h->comm = strtoull(id, &end, 0);
    if (errno || *end || !*id) {
      rerr(rd, p, "comm '%s' is not a hexadecimal id", id);
      return;
    }
    h->kind = 0;
    for (int k = 1; ah_report_health_kind(k); k++)
      if (strcmp(kind, ah_report_health_kind(k)) == 0) h->kind = k;
    if (!h->kind) {
      rerr(rd, p,
           "kind '%s' is not missing, incomplete, mismatch, resumed, straggler, recovered, "
           "slow_link, link_ok, died, stopped or nic_down",
           kind);
      return;
    }
    r->nhealth++;
  }
}

/* The optional top-level object `name`: NULL when absent, after an earlier error, or (an error
 * named) when it is not an object. */
static json_t *optional_object(reader_t *rd, json_t *root, const char *name) {
  json_t *o = json_object_get(root, name);
  if (!o || rd->failed) return NULL;
  if (!json_is_object(o)) {
    rerr(rd, name, "expected an object");
    return NULL;
  }
  return o;
}

/* The optional "destroyed" object: communicators summed beyond those kept in detail. */
static void get_destroyed(reader_t *rd, json_t *root, ah_report_t *r) {
  json_t *d = optional_object(rd, root, "destroyed");
  if (!d) return;
  ah_report_destroyed_t *o = &r->destroyed;
  struct {
    const char *name;
    uint64_t *v;
  } counts[] = {{"comms", &o->comms}, {"keys", &o->keys},   {"tuned_keys", &o->tuned},
                {"calls", &o->calls}, {"timed", &o->timed}, {"sync_waits", &o->sync_waits}};
  for (size_t i = 0; i < sizeof counts / sizeof counts[0] && !rd->failed; i++) {
    int64_t v = 0;
    get_int(rd, d, "destroyed", counts[i].name, 1, 0, INT64_MAX, &v);
    *counts[i].v = (uint64_t)v;
  }
  get_num(rd, d, "destroyed", "us", &o->us_total);
  get_num(rd, d, "destroyed", "bytes", &o->bytes_total);
  get_num(rd, d, "destroyed", "sync_wait_us", &o->sync_wait_us);
}

/* The optional "ha" object (ha_to_json). */
static void get_ha(reader_t *rd, json_t *root, ah_report_t *r) {
  json_t *o = optional_object(rd, root, "ha");
  if (!o) return;
  ah_report_ha_t *h = &r->ha;
  double v[4] = {0};
  get_str(rd, o, "ha", "policy", 1, h->policy, sizeof h->policy);
  static const char *const counts[] = {"shadows", "failovers", "replayed", "synthesized"};
  for (int i = 0; i < 4; i++) get_num(rd, o, "ha", counts[i], &v[i]);
  h->shadows = (uint64_t)v[0], h->failovers = (uint64_t)v[1], h->replayed = (uint64_t)v[2],
  h->synthesized = (uint64_t)v[3];
  double rb[2] = {0};
  get_num(rd, o, "ha", "rebalances", &rb[0]);
  get_num(rd, o, "ha", "rebalanced_qps", &rb[1]);
  get_num(rd, o, "ha", "rebalance_before", &h->rb_before);
  get_num(rd, o, "ha", "rebalance_share", &h->rb_share);
  get_num(rd, o, "ha", "rebalance_bound", &h->rb_bound);
  h->rebalances = (uint64_t)rb[0], h->rebalanced = (uint64_t)rb[1];
  json_t *a = json_object_get(o, "events");
  if (rd->failed || !a) return;
  if (!json_is_array(a)) {
    rerr(rd, "ha.events", "expected an array");
    return;
  }
  for (size_t i = 0; i < json_array_size(a) && h->nfail < AH_REPORT_HA_MAX && !rd->failed; i++) {
    char p[40];
    snprintf(p, sizeof p, "ha.events[%zu]", i);
    json_t *e = json_array_get(a, i);
    if (!json_is_object(e)) {
      rerr(rd, p, "expected an object");
      return;
    }
    ah_report_failover_t *f = &h->fail[h->nfail];
    double qp = 0, port = 0, sport = 0, rep = 0, syn = 0;
    get_num(rd, e, p, "time", &f->time_s);
    get_num(rd, e, p, "qp", &qp);
    get_str(rd, e, p, "dev", 1, f->dev, sizeof f->dev);
    get_num(rd, e, p, "port", &port);
    get_num(rd, e, p, "shadow_port", &sport);
    get_str(rd, e, p, "shadow_dev", 0, f->shadow_dev, sizeof f->shadow_dev);
    get_num(rd, e, p, "stall_ms", &f->stall_ms);
    get_num(rd, e, p, "replayed", &rep);
    get_num(rd, e, p, "synthesized", &syn);
    if (rd->failed) return;
    f->qpn = (uint32_t)qp, f->port = (int)port, f->shadow_port = (int)sport;
    f->replayed = (uint32_t)rep, f->synthesized = (uint32_t)syn;
    h->nfail++;
  }
}

static void get_report(reader_t *rd, json_t *root, ah_report_t *r) {
  int64_t v = 0;
  if (!json_is_object(root)) {
    rerr(rd, "(top level)", "expected an object");
    return;
  }
  get_int(rd, root, "", "schema", 1, 1, INT32_MAX, &v);
  if (!rd->failed && v > AH_REPORT_SCHEMA) {
    rerr(rd, "schema", "%lld is newer than the schema this autoha reads (%d)", (long long)v,
         AH_REPORT_SCHEMA);
    return;
  }
  get_str(rd, root, "", "job", 0, r->job, sizeof r->job);
  get_str(rd, root, "", "host", 1, r->host, sizeof r->host);
  v = 0;
  get_int(rd, root, "", "pid", 0, 0, INT32_MAX, &v);
  r->pid = (int)v;
  v = -1;
  get_int(rd, root, "", "rank", 0, -1, INT32_MAX, &v);
  r->rank = (int)v;
  v = 0;
  get_int(rd, root, "", "nccl_version", 1, 0, INT32_MAX, &v);
  r->nccl_version = (int)v;
  get_str(rd, root, "", "topology", 1, r->topo, sizeof r->topo);
  json_t *mode = json_object_get(root, "mode");
  if (mode && !rd->failed) {
    const char *m = json_string_value(mode);
    if (!m || (strcmp(m, "observe") && strcmp(m, "fixed") && strcmp(m, "tune"))) {
      char shown[64];
      rerr(rd, "mode", "'%s' is not a mode (expected observe, fixed or tune)",
           m ? ah_report_text_copy(shown, sizeof shown, m) : "(not a string)");
      return;
    }
    snprintf(r->mode, sizeof r->mode, "%s", m);
  }
  get_num(rd, root, "", "time", &r->time_s);
  /* Reports written before autoha stopped recommending NCCL_NTHREADS / NCCL_BUFFSIZE hold a
   * "recommended" object of placeholders: ignored, like any field this reader does not know. */
  get_health(rd, root, r);
  get_ha(rd, root, r);
  get_destroyed(rd, root, r);
  json_t *run = json_object_get(root, "run"); /* optional: older reports lack it */
  if (run && !json_is_null(run) && !rd->failed) {
    char why[200];
    if (ah_report_run_from_json(run, &r->run, why, sizeof why) != 0) {
      rerr(rd, "run", "%s", why);
      return;
    }
  }
  json_t *comms = get(rd, root, "", "comms", 1);
  if (rd->failed) return;
  if (!json_is_array(comms)) {
    rerr(rd, "comms", "expected an array");
    return;
  }
  size_t nc = json_array_size(comms);
  if (nc == 0) return;
  r->comms = calloc(nc, sizeof *r->comms);
  if (!r->comms) {
    rerr(rd, "comms", "out of memory");
    return;
  }
  for (size_t c = 0; c < nc && !rd->failed; c++) {
    char p[64], idtext[40] = "";
    snprintf(p, sizeof p, "comms[%zu]", c);
    json_t *cj = json_array_get(comms, c);
    ah_report_comm_t *cm = &r->comms[c];
    r->ncomms = (int)c + 1;
    if (!json_is_object(cj)) {
      rerr(rd, p, "expected an object");
      return;
    }
    get_str(rd, cj, p, "id", 1, idtext, sizeof idtext);
    if (rd->failed) return;
    char *end;
    errno = 0;
    cm->id = strtoull(idtext, &end, 0);
    if (errno || *end || !*idtext) {
      char q[80];
      sub(q, sizeof q, p, "id");
      {
        rerr(rd, q, "'%s' is not a hexadecimal id", idtext);
        return;
      }
    }
    v = 0;
    get_int(rd, cj, p, "nranks", 1, 1, INT32_MAX, &v);
    cm->nranks = (int)v;
    v = 1;
    get_int(rd, cj, p, "nnodes", 0, 1, INT32_MAX, &v);
    cm->nnodes = (int)v;
    v = -1;
    get_int(rd, cj, p, "rank", 0, -1, INT32_MAX, &v);
    cm->rank = (int)v;
    json_t *gone = json_object_get(cj, "destroyed"); /* optional: absent while it lives */
    if (gone && !json_is_boolean(gone)) {
      char q[80];
      sub(q, sizeof q, p, "destroyed");
      rerr(rd, q, "expected true or false");
      return;
    }
    cm->destroyed = gone && json_is_true(gone);
    json_t *keys = get(rd, cj, p, "keys", 1);
    if (rd->failed) return;
    char q[80];
    sub(q, sizeof q, p, "keys");
    if (!json_is_array(keys)) {
      rerr(rd, q, "expected an array");
      return;
    }
    size_t nk = json_array_size(keys);
    if (nk == 0) continue;
    cm->keys = calloc(nk, sizeof *cm->keys);
    if (!cm->keys) {
      rerr(rd, q, "out of memory");
      return;
    }
    for (size_t k = 0; k < nk && !rd->failed; k++) {
      char kp[128];
      snprintf(kp, sizeof kp, "%s[%zu]", q, k);
      cm->nkeys = (int)k + 1;
      get_key(rd, json_array_get(keys, k), kp, &cm->keys[k]);
    }
  }
}

/* 0 when jansson is loaded; else -1 with err saying so (ah_jansson_ready() logged the cause). */
static int need_jansson(char *err, size_t errlen) {
  if (ah_jansson_ready()) return 0;
  if (err && errlen) snprintf(err, errlen, "no report is read: " AH_JANSSON_SONAME " did not load");
  return -1;
}

int ah_report_parse(const char *text, ah_report_t **r_p, char *err, size_t errlen) {
  if (need_jansson(err, errlen) != 0) return -1;
  json_error_t je;
  json_t *root = json_loads(text ? text : "", 0, &je);
  if (!root) {
    if (err && errlen) snprintf(err, errlen, "line %d column %d: %s", je.line, je.column, je.text);
    return -1;
  }
  ah_report_t *r = calloc(1, sizeof *r);
  if (!r) {
    json_decref(root);
    if (err && errlen) snprintf(err, errlen, "out of memory");
    return -1;
  }
  r->rank = -1;
  reader_t rd = {err, errlen, 0};
  get_report(&rd, root, r);
  json_decref(root);
  if (rd.failed) {
    ah_report_free(r);
    return -1;
  }
  *r_p = r;
  return 0;
}

int ah_report_read(const char *path, ah_report_t **r_p, char *err, size_t errlen) {
  return ah_report_read_max(path, (size_t)1 << 30, r_p, err, errlen);
}

int ah_report_read_max(const char *path, size_t max_bytes, ah_report_t **r_p, char *err,
                       size_t errlen) {
  size_t len = 0;
  char why[160];
  if (need_jansson(err, errlen) != 0) return -1; /* before opening a file it cannot parse */
  char *buf = ah_file_read(path, max_bytes, &len, why, sizeof why);
  if (!buf) {
    if (err && errlen) snprintf(err, errlen, "%s", why);
    return -1;
  }
  size_t nul = strlen(buf);
  if (nul != len) {
    free(buf);
    if (err && errlen) snprintf(err, errlen, "byte %zu: NUL byte in a JSON file", nul);
    return -1;
  }
  int rc = ah_report_parse(buf, r_p, err, errlen);
  free(buf);
  return rc;
}
