/* ah_report.c: the tuning report as JSON (schema in docs/report.md) — serialising with jansson,
 * the atomic write (temporary file + rename), and parsing a report back into ah_report_t.
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
  return json_pack("{s:o, s:o, s:o, s:s}",
                   "algo", c->algo >= 0 ? json_string(ah_algo_name(c->algo)) : json_null(),
                   "proto", c->proto >= 0 ? json_string(ah_proto_name(c->proto)) : json_null(),
                   "res", res, "text", ah_config_format(c, text, sizeof text));
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
                   "calls", (json_int_t)s->calls, "timed", (json_int_t)s->timed,
                   "time_us", num_or_null(us), "bytes_mean", num_or_null(bytes),
                   "algbw_gbs", num_or_null(algbw), "busbw_gbs", num_or_null(busbw));
}

static const char *state_name(int state) {
  return state == AH_TUNE_SEARCHING ? "searching" : state == AH_TUNE_CONVERGED ? "converged"
                                                                                : "default";
}

static json_t *key_to_json(const ah_report_key_t *k, int nranks) {
  uint64_t bin_lo = ah_size_bin_floor(k->bin);
  uint64_t bin_hi = k->bin >= 63 ? UINT64_MAX : (((uint64_t)1 << (k->bin + 1)) - 1);
  if (k->bin <= 0) bin_hi = 1;
  double du = stat_us(&k->nccl_default), au = stat_us(&k->applied);
  json_t *j = json_pack(
      "{s:s, s:i, s:{s:I, s:I, s:I, s:I}, s:I, s:s, s:o, s:o, s:o, s:{s:I, s:o}}",
      "coll", ah_coll_name(k->coll), "bin", k->bin,
      "bytes", "bin_min", (json_int_t)bin_lo, "bin_max", (json_int_t)(bin_hi > INT64_MAX ? INT64_MAX : bin_hi),
      "min", (json_int_t)(k->bytes_min > INT64_MAX ? INT64_MAX : k->bytes_min),
      "max", (json_int_t)(k->bytes_max > INT64_MAX ? INT64_MAX : k->bytes_max),
      "calls", (json_int_t)k->calls, "source", ah_report_source_name(k->source),
      "default", stat_to_json(&k->nccl_default, k->coll, nranks),
      "applied", stat_to_json(&k->applied, k->coll, nranks),
      "speedup", num_or_null(du / au),
      "sync", "waits", (json_int_t)k->sync_waits, "wait_us", num_or_null(k->sync_wait_us));
  if (!j) return NULL;
  json_object_set_new(j, "captured_calls", json_integer((json_int_t)(k->captured_calls > INT64_MAX ? INT64_MAX : k->captured_calls)));
  json_object_set_new(j, "graph_launched_calls",
                      json_integer((json_int_t)(k->graph_launched_calls > INT64_MAX ? INT64_MAX : k->graph_launched_calls)));
  json_object_set_new(j, "refused", json_boolean(k->refused));
  if (k->tuned) {
    const ah_tune_status_t *t = &k->tune;
    json_t *probes = json_array();
    for (int i = 0; i < k->nprobes && k->probes; i++)
      json_array_append_new(probes, json_pack("{s:o, s:i, s:o}", "config",
                                              config_to_json(&k->probes[i].cfg), "samples",
                                              k->probes[i].samples, "time_us",
                                              num_or_null(k->probes[i].us)));
    json_t *tj = json_pack(
        "{s:s, s:i, s:i, s:o, s:o, s:o, s:o, s:o, s:i, s:o}", "state", state_name(t->state),
        "calls_spent", t->calls_spent, "probes_count", t->probes, "converged_at",
        t->converged_at <= (uint64_t)INT64_MAX ? json_integer((json_int_t)t->converged_at)
                                               : json_null(),
        "winner", config_to_json(&t->winner), "winner_us", num_or_null(t->winner_us),
        "default_us", num_or_null(t->default_us),
        "speedup", num_or_null(t->winner_us > 0 ? t->default_us / t->winner_us : NAN),
        "reopened", t->reopen_count, "probes", probes);
    json_object_set_new(j, "tuning", tj ? tj : json_null());
  }
  return j;
}

const char *ah_report_health_kind(int kind) {
  static const char *names[] = {NULL,      "missing",   "incomplete", "mismatch",
                                "resumed", "straggler", "recovered"};
  return kind >= 1 && kind <= 6 ? names[kind] : NULL;
}

static json_t *health_to_json(const ah_report_t *r) {
  json_t *a = json_array();
  for (int i = 0; i < r->nhealth && i < AH_REPORT_HEALTH_MAX; i++) {
    const ah_report_health_t *h = &r->health[i];
    char id[24], text[AH_REPORT_TEXT_MAX];
    snprintf(id, sizeof id, "0x%016" PRIx64, h->comm);
    const char *kind = ah_report_health_kind(h->kind);
    json_array_append_new(a, json_pack("{s:s, s:s, s:s, s:o}", "comm", id, "kind", kind ? kind : "unknown",
                                       "text", ah_report_text_copy(text, sizeof text, h->text),
                                       "time", num_or_null(h->time_s)));
  }
  return a;
}

/* The "ha" object: shadows, failovers with their time and stall, work requests replayed. */
static json_t *ha_to_json(const ah_report_ha_t *h) {
  json_t *a = json_array();
  for (int i = 0; i < h->nfail && i < AH_REPORT_HA_MAX; i++) {
    const ah_report_failover_t *f = &h->fail[i];
    char dev[sizeof f->dev], sdev[sizeof f->shadow_dev];
    json_t *e = json_pack("{s:o, s:I, s:s, s:i, s:i, s:o, s:I, s:I}", "time", num_or_null(f->time_s), "qp",
                          (json_int_t)f->qpn, "dev", ah_report_text_copy(dev, sizeof dev, f->dev), "port", f->port,
                          "shadow_port", f->shadow_port, "stall_ms", num_or_null(f->stall_ms), "replayed",
                          (json_int_t)f->replayed, "synthesized", (json_int_t)f->synthesized);
    if (e && f->shadow_dev[0]) /* a shadow on another NIC (AUTOHA_HA=nic) */
      json_object_set_new(e, "shadow_dev", json_string(ah_report_text_copy(sdev, sizeof sdev, f->shadow_dev)));
    json_array_append_new(a, e);
  }
  char policy[sizeof h->policy];
  json_t *o = json_pack("{s:s, s:I, s:I, s:I, s:I, s:o}", "policy", ah_report_text_copy(policy, sizeof policy, h->policy),
                        "shadows", (json_int_t)h->shadows, "failovers", (json_int_t)h->failovers, "replayed",
                        (json_int_t)h->replayed, "synthesized", (json_int_t)h->synthesized, "events", a);
  if (o && h->rebalances) /* only AUTOHA_HA=path with a plan re-plans */
    json_object_update_new(o, json_pack("{s:I, s:I, s:o, s:o, s:o}", "rebalances", (json_int_t)h->rebalances,
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
    json_array_append_new(comms, json_pack("{s:s, s:i, s:i, s:i, s:{s:I, s:o}, s:o}", "id", id,
                                           "nranks", cm->nranks, "nnodes", cm->nnodes, "rank",
                                           cm->rank, "sync", "waits", (json_int_t)waits, "wait_us",
                                           num_or_null(wait_us), "keys", keys));
  }
  json_t *root = json_pack("{s:i, s:s, s:s, s:s, s:i, s:i, s:i, s:s, s:s, s:o, s:o, s:o}",
                   "schema", AH_REPORT_SCHEMA, "tool", "autoha", "job", r->job, "host", r->host,
                   "pid", r->pid, "rank", r->rank, "nccl_version", r->nccl_version, "topology",
                   r->topo, "mode", r->mode, "time", num_or_null(r->time_s), "comms", comms,
                   "health", health_to_json(r));
  if (root && r->ha.policy[0]) json_object_set_new(root, "ha", ha_to_json(&r->ha));
  return root;
}

char *ah_report_to_string(const ah_report_t *r) {
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
  char tmp[4096];
  int fd = -1;
  if (ah_file_make_parents(path, err, errlen) != 0) return -1;
  char *text = ah_report_to_string(r);
  if (!text) {
    if (err && errlen) snprintf(err, errlen, "cannot format the report for %s (out of memory)", path);
    return -1;
  }
  /* Unique per call, so two threads writing the same report never share a temporary file. */
  static _Atomic unsigned write_seq;
  unsigned seq = write_seq++;
  if (snprintf(tmp, sizeof tmp, "%s.tmp.%d.%u", path, (int)getpid(), seq) >= (int)sizeof tmp) {
    if (err && errlen) snprintf(err, errlen, "report path too long: %s", path);
    goto fail_text;
  }
  fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    if (err && errlen) snprintf(err, errlen, "open(%s) failed: %s", tmp, strerror(errno));
    goto fail_text;
  }
  size_t len = strlen(text), off = 0;
  while (off < len) {
    ssize_t n = write(fd, text + off, len - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (err && errlen) snprintf(err, errlen, "write(%s) failed: %s", tmp, strerror(errno));
      goto fail_file;
    }
    off += (size_t)n;
  }
  if (write(fd, "\n", 1) != 1 || close(fd) != 0) {
    fd = -1;
    if (err && errlen) snprintf(err, errlen, "write/close(%s) failed: %s", tmp, strerror(errno));
    goto fail_file;
  }
  fd = -1;
  if (rename(tmp, path) != 0) {
    if (err && errlen) snprintf(err, errlen, "rename(%s, %s) failed: %s", tmp, path, strerror(errno));
    goto fail_file;
  }
  free(text);
  return 0;
fail_file:
  if (fd >= 0) close(fd);
  unlink(tmp);
fail_text:
  free(text);
  return -1;
}

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
    int v = json_is_string(a) ? ah_algo_parse(json_string_value(a), strlen(json_string_value(a)))
                              : -2;
    sub(q, sizeof q, p, "algo");
    if (v == -2) { rerr(rd, q, "expected a string or null"); return; }
    if (v < 0) { rerr(rd, q, "unknown algorithm '%s'", json_string_value(a)); return; }
    cfg.algo = (int8_t)v;
  }
  if (pr && !json_is_null(pr)) {
    int v = json_is_string(pr)
                ? ah_proto_parse(json_string_value(pr), strlen(json_string_value(pr)))
                : -2;
    sub(q, sizeof q, p, "proto");
    if (v == -2) { rerr(rd, q, "expected a string or null"); return; }
    if (v < 0) { rerr(rd, q, "unknown protocol '%s'", json_string_value(pr)); return; }
    cfg.proto = (int8_t)v;
  }
  json_t *res = json_object_get(c, "res");
  sub(q, sizeof q, p, "res");
  if (res) {
    if (!json_is_array(res) || json_array_size(res) > AH_MAX_DIMS)
      { rerr(rd, q, "expected an array of at most %d integers", AH_MAX_DIMS); return; }
    for (size_t i = 0; i < json_array_size(res); i++) {
      json_t *e = json_array_get(res, i);
      if (!json_is_integer(e) || json_integer_value(e) < 0)
        { rerr(rd, q, "element %zu: expected a non-negative integer", i); return; }
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
  if (!json_is_object(s)) { rerr(rd, p, "expected an object"); return; }
  int64_t calls = 0, timed = 0;
  double us = NAN, bytes = NAN;
  get_config(rd, s, p, "config", &s_p->cfg);
  get_int(rd, s, p, "calls", 1, 0, INT64_MAX, &calls);
  get_int(rd, s, p, "timed", 0, 0, INT64_MAX, &timed);
  get_num(rd, s, p, "time_us", &us);
  get_num(rd, s, p, "bytes_mean", &bytes);
  if (rd->failed) return;
  if (timed > calls) { rerr(rd, p, "timed (%lld) exceeds calls (%lld)", (long long)timed,
                                 (long long)calls); return; }
  s_p->calls = (uint64_t)calls;
  s_p->timed = isfinite(us) ? (uint64_t)timed : 0;
  s_p->us_total = isfinite(us) ? us * (double)timed : 0;
  s_p->bytes_total = isfinite(bytes) ? bytes * (double)timed : 0;
}

static void get_key(reader_t *rd, json_t *kj, const char *p, ah_report_key_t *k) {
  char q[256], coll[32] = "", source[32] = "", state[32] = "";
  int64_t v = 0;
  memset(k, 0, sizeof *k);
  if (!json_is_object(kj)) { rerr(rd, p, "expected an object"); return; }
  get_str(rd, kj, p, "coll", 1, coll, sizeof coll);
  if (rd->failed) return;
  k->coll = ah_coll_parse_any(coll, strlen(coll));
  sub(q, sizeof q, p, "coll");
  if (k->coll < 0) { rerr(rd, q, "unknown collective '%s'", coll); return; }
  get_int(rd, kj, p, "bin", 1, 0, 63, &v);
  k->bin = (int)v;
  v = 0;
  get_int(rd, kj, p, "calls", 1, 0, INT64_MAX, &v);
  k->calls = (uint64_t)v;
  get_str(rd, kj, p, "source", 1, source, sizeof source);
  if (rd->failed) return;
  k->source = ah_report_source_parse(source);
  sub(q, sizeof q, p, "source");
  if (k->source < 0) { rerr(rd, q, "unknown source '%s' (expected default|override|profile|tuned)",
                                 source); return; }
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
  get_int(rd, kj, p, "graph_launched_calls", 0, 0, INT64_MAX, &v); /* optional: older reports lack it */
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
  if (!json_is_object(t)) { rerr(rd, q, "expected an object or null"); return; }
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
    { rerr(rd, r, "unknown state '%s' (expected searching|converged|default)", state); return; }
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
  if (!json_is_array(probes)) { rerr(rd, r, "expected an array"); return; }
  size_t np = json_array_size(probes);
  if (np == 0) return;
  k->probes = calloc(np, sizeof *k->probes);
  if (!k->probes) { rerr(rd, r, "out of memory"); return; }
  for (size_t i = 0; i < np && !rd->failed; i++) {
    char e[300];
    snprintf(e, sizeof e, "%s[%zu]", r, i);
    json_t *pj = json_array_get(probes, i);
    if (!json_is_object(pj)) { rerr(rd, e, "expected an object"); return; }
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
    for (int k = 0; k < r->comms[c].nkeys && r->comms[c].keys; k++) free(r->comms[c].keys[k].probes);
    free(r->comms[c].keys);
  }
  free(r->comms);
  free(r);
}

/* The optional "health" array: the findings kept, at most AH_REPORT_HEALTH_MAX (the latest). */
static void get_health(reader_t *rd, json_t *root, ah_report_t *r) {
  json_t *a = json_object_get(root, "health");
  if (!a || rd->failed) return;
  if (!json_is_array(a)) { rerr(rd, "health", "expected an array"); return; }
  size_t n = json_array_size(a), first = n > AH_REPORT_HEALTH_MAX ? n - AH_REPORT_HEALTH_MAX : 0;
  for (size_t i = first; i < n && !rd->failed; i++) {
    char p[40], id[40] = "", kind[16] = "";
    snprintf(p, sizeof p, "health[%zu]", i);
    json_t *hj = json_array_get(a, i);
    if (!json_is_object(hj)) { rerr(rd, p, "expected an object"); return; }
    ah_report_health_t *h = &r->health[r->nhealth];
    get_str(rd, hj, p, "comm", 1, id, sizeof id);
    get_str(rd, hj, p, "kind", 1, kind, sizeof kind);
    get_str(rd, hj, p, "text", 1, h->text, sizeof h->text);
    get_num(rd, hj, p, "time", &h->time_s);
    if (rd->failed) return;
    char *end;
    errno = 0;
    h->comm = strtoull(id, &end, 0);
    if (errno || *end || !*id) { rerr(rd, p, "comm '%s' is not a hexadecimal id", id); return; }
    h->kind = 0;
    for (int k = 1; ah_report_health_kind(k); k++)
      if (strcmp(kind, ah_report_health_kind(k)) == 0) h->kind = k;
    if (!h->kind) {
      rerr(rd, p, "kind '%s' is not missing, incomplete, mismatch, resumed, straggler or recovered", kind);
      return;
    }
    r->nhealth++;
  }
}

/* The optional "ha" object (ha_to_json). */
static void get_ha(reader_t *rd, json_t *root, ah_report_t *r) {
  json_t *o = json_object_get(root, "ha");
  if (!o || rd->failed) return;
  if (!json_is_object(o)) { rerr(rd, "ha", "expected an object"); return; }
  ah_report_ha_t *h = &r->ha;
  double v[4] = {0};
  get_str(rd, o, "ha", "policy", 1, h->policy, sizeof h->policy);
  static const char *const counts[] = {"shadows", "failovers", "replayed", "synthesized"};
  for (int i = 0; i < 4; i++) get_num(rd, o, "ha", counts[i], &v[i]);
  h->shadows = (uint64_t)v[0], h->failovers = (uint64_t)v[1], h->replayed = (uint64_t)v[2], h->synthesized = (uint64_t)v[3];
  double rb[2] = {0};
  get_num(rd, o, "ha", "rebalances", &rb[0]);
  get_num(rd, o, "ha", "rebalanced_qps", &rb[1]);
  get_num(rd, o, "ha", "rebalance_before", &h->rb_before);
  get_num(rd, o, "ha", "rebalance_share", &h->rb_share);
  get_num(rd, o, "ha", "rebalance_bound", &h->rb_bound);
  h->rebalances = (uint64_t)rb[0], h->rebalanced = (uint64_t)rb[1];
  json_t *a = json_object_get(o, "events");
  if (rd->failed || !a) return;
  if (!json_is_array(a)) { rerr(rd, "ha.events", "expected an array"); return; }
  for (size_t i = 0; i < json_array_size(a) && h->nfail < AH_REPORT_HA_MAX && !rd->failed; i++) {
    char p[40];
    snprintf(p, sizeof p, "ha.events[%zu]", i);
    json_t *e = json_array_get(a, i);
    if (!json_is_object(e)) { rerr(rd, p, "expected an object"); return; }
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
  if (!json_is_object(root)) { rerr(rd, "(top level)", "expected an object"); return; }
  get_int(rd, root, "", "schema", 1, 1, INT32_MAX, &v);
  if (!rd->failed && v > AH_REPORT_SCHEMA)
    { rerr(rd, "schema", "%lld is newer than the schema this autoha reads (%d)", (long long)v,
                AH_REPORT_SCHEMA); return; }
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
  if (!json_is_array(comms)) { rerr(rd, "comms", "expected an array"); return; }
  size_t nc = json_array_size(comms);
  if (nc == 0) return;
  r->comms = calloc(nc, sizeof *r->comms);
  if (!r->comms) { rerr(rd, "comms", "out of memory"); return; }
  for (size_t c = 0; c < nc && !rd->failed; c++) {
    char p[64], idtext[40] = "";
    snprintf(p, sizeof p, "comms[%zu]", c);
    json_t *cj = json_array_get(comms, c);
    ah_report_comm_t *cm = &r->comms[c];
    r->ncomms = (int)c + 1;
    if (!json_is_object(cj)) { rerr(rd, p, "expected an object"); return; }
    get_str(rd, cj, p, "id", 1, idtext, sizeof idtext);
    if (rd->failed) return;
    char *end;
    errno = 0;
    cm->id = strtoull(idtext, &end, 0);
    if (errno || *end || !*idtext) {
      char q[80];
      sub(q, sizeof q, p, "id");
      { rerr(rd, q, "'%s' is not a hexadecimal id", idtext); return; }
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
    json_t *keys = get(rd, cj, p, "keys", 1);
    if (rd->failed) return;
    char q[80];
    sub(q, sizeof q, p, "keys");
    if (!json_is_array(keys)) { rerr(rd, q, "expected an array"); return; }
    size_t nk = json_array_size(keys);
    if (nk == 0) continue;
    cm->keys = calloc(nk, sizeof *cm->keys);
    if (!cm->keys) { rerr(rd, q, "out of memory"); return; }
    for (size_t k = 0; k < nk && !rd->failed; k++) {
      char kp[128];
      snprintf(kp, sizeof kp, "%s[%zu]", q, k);
      cm->nkeys = (int)k + 1;
      get_key(rd, json_array_get(keys, k), kp, &cm->keys[k]);
    }
  }
}

int ah_report_parse(const char *text, ah_report_t **r_p, char *err, size_t errlen) {
  json_error_t je;
  json_t *root = json_loads(text ? text : "", 0, &je);
  if (!root) {
    if (err && errlen)
      snprintf(err, errlen, "line %d column %d: %s", je.line, je.column, je.text);
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
  size_t len = 0;
  char why[160];
  char *buf = ah_file_read(path, (size_t)1 << 30, &len, why, sizeof why);
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
