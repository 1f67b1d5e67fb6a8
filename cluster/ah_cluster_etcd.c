/* ah_cluster_etcd.c: the etcd v3 client, one JSON request per call over libcurl to the JSON
 * gateway every etcd member serves beside gRPC (POST /v3/kv/put and the like). The key choice is
 * where a request goes and for how long: the client starts at the member that answered last,
 * gives each member a share of what is left of the call's one deadline (at most a quarter of
 * it), moves on when a member
 * refuses, times out or has no leader, and after a round with no answer waits 100 ms and tries
 * again while the deadline allows (a raft election takes about a second). An answer of etcd
 * itself (a lease not found, a bad request) is final: another member would say the same. */
#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#pragma GCC visibility push(hidden)
#include <jansson.h>
#pragma GCC visibility pop

#include "ah_cluster_b64.h"
#include "ah_cluster_curl.h"
#include "ah_cluster_etcd.h"
#include "ah_jansson.h"

#define ANSWER_MAX (16u << 20) /* the largest answer read: a range of many jobs' keys */
#define ROUND_PAUSE_NS 100000000ull

/* gRPC status codes etcd puts in an error answer's "code". */
enum { GRPC_DEADLINE = 4, GRPC_NOT_FOUND = 5, GRPC_UNAVAILABLE = 14 };

struct ah_cluster_etcd {
  ah_cluster_endpoints_t eps;
  double timeout_s;
  const ah_cluster_curl_t *curl;
  uint64_t attempt_max_ns; /* a quarter of the timeout: the longest one try may take */
  _Atomic int cur;         /* the member that answered last: where the next request starts */
};

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void pause_ns(uint64_t ns) {
  struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

static void set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_err(char *err, size_t errlen, const char *fmt, ...) {
  if (!err || !errlen) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

int ah_cluster_etcd_open(const ah_cluster_endpoints_t *eps, double timeout_s,
                         ah_cluster_etcd_t **c_p, char *err, size_t errlen) {
  if (!eps || eps->n < 1) {
    set_err(err, errlen, "no etcd endpoint given (AUTOHA_ETCD is empty)");
    return -1;
  }
  if (!(timeout_s >= 0.05 && timeout_s <= 3600)) {
    set_err(err, errlen, "etcd request timeout %g s is outside 0.05..3600", timeout_s);
    return -1;
  }
  const ah_cluster_curl_t *curl = ah_cluster_curl(err, errlen);
  if (!curl) return -1;
  if (!ah_jansson_ready()) {
    set_err(err, errlen, "the etcd client needs jansson (%s), which could not be loaded",
            AH_JANSSON_SONAME);
    return -1;
  }
  ah_cluster_etcd_t *c = calloc(1, sizeof *c);
  if (!c) {
    set_err(err, errlen, "out of memory");
    return -1;
  }
  c->eps = *eps;
  c->timeout_s = timeout_s;
  c->attempt_max_ns = (uint64_t)(timeout_s * 1e9 / 4);
  c->curl = curl;
  *c_p = c;
  return 0;
}

void ah_cluster_etcd_close(ah_cluster_etcd_t *c) { free(c); }

/* ---- one HTTP exchange ------------------------------------------------------------------------ */

typedef struct {
  char *p;
  size_t n, cap;
  int over; /* the answer passed ANSWER_MAX */
} answer_t;

static size_t answer_write(char *data, size_t size, size_t nmemb, void *arg) {
  answer_t *a = arg;
  size_t n = size * nmemb;
  if (a->n + n + 1 > ANSWER_MAX) {
    a->over = 1;
    return 0; /* libcurl ends the transfer with CURLE_WRITE_ERROR */
  }
  if (a->n + n + 1 > a->cap) {
    size_t cap = a->cap ? a->cap : 4096;
    while (cap < a->n + n + 1) cap *= 2;
    char *p = realloc(a->p, cap);
    if (!p) return 0;
    a->p = p;
    a->cap = cap;
  }
  memcpy(a->p + a->n, data, n);
  a->n += n;
  a->p[a->n] = 0;
  return n;
}

/* The outcome of one attempt on one member. */
typedef enum { TRY_OK, TRY_NEXT, TRY_FINAL } try_t;

/* Sends `body` (NULL: a GET) to member i's `path` within ms milliseconds. Returns TRY_OK with
 * *resp_p, TRY_NEXT when another member may do better (why says what this one did), TRY_FINAL
 * when etcd itself answered an error (why holds its message, *code_p its gRPC code). */
static try_t try_one(ah_cluster_etcd_t *c, int i, const char *path, const char *body, long ms,
                     json_t **resp_p, int *code_p, char *why, size_t whylen) {
  const ah_cluster_curl_t *f = c->curl;
  char url[AH_CLUSTER_URL_MAX + 64];
  snprintf(url, sizeof url, "%s%s", c->eps.url[i], path);
  CURL *h = f->easy_init();
  if (!h) {
    snprintf(why, whylen, "curl_easy_init failed");
    return TRY_NEXT;
  }
  answer_t a = {0};
  struct curl_slist *hdr = NULL;
  f->easy_setopt(h, CURLOPT_URL, url);
  f->easy_setopt(h, CURLOPT_NOSIGNAL, 1L); /* threads: no SIGALRM for the timeouts */
  f->easy_setopt(h, CURLOPT_PROXY, "");    /* loopback and cluster networks: never a proxy */
  f->easy_setopt(h, CURLOPT_TIMEOUT_MS, ms);
  f->easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, ms);
  f->easy_setopt(h, CURLOPT_WRITEFUNCTION, answer_write);
  f->easy_setopt(h, CURLOPT_WRITEDATA, &a);
  if (body) {
    hdr = f->slist_append(NULL, "Content-Type: application/json");
    f->easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
    f->easy_setopt(h, CURLOPT_POSTFIELDS, body);
    f->easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
  }
  CURLcode rc = f->easy_perform(h);
  long status = 0;
  if (rc == CURLE_OK) f->easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
  f->easy_cleanup(h);
  if (hdr) f->slist_free_all(hdr);
  try_t out = TRY_NEXT;
  if (a.over) {
    snprintf(why, whylen, "its answer is larger than %u MiB", ANSWER_MAX >> 20);
    out = TRY_FINAL;
  } else if (rc != CURLE_OK) {
    snprintf(why, whylen, "%s", f->easy_strerror(rc));
  } else {
    json_error_t je;
    json_t *j = a.p ? json_loads(a.p, 0, &je) : NULL;
    if (status == 200 && json_is_object(j)) {
      *resp_p = j;
      free(a.p);
      return TRY_OK;
    }
    const char *msg = j ? json_string_value(json_object_get(j, "message")) : NULL;
    json_t *code = j ? json_object_get(j, "code") : NULL;
    int grpc = json_is_integer(code) ? (int)json_integer_value(code) : 0;
    snprintf(why, whylen, "HTTP %ld: %s", status, msg ? msg : (j ? "no message" : "not JSON"));
    /* a member without a leader or shutting down says Unavailable; another may have one */
    out = msg && status < 500 && grpc != GRPC_UNAVAILABLE && grpc != GRPC_DEADLINE ? TRY_FINAL
                                                                                   : TRY_NEXT;
    if (code_p) *code_p = grpc;
    json_decref(j);
  }
  free(a.p);
  return out;
}

/* Sends `body` (taken; NULL: a GET) to `path`, on member `only` alone (>= 0) or on the members
 * in turn (-1) within the client's timeout. Returns 0 with *resp_p, or -1 with err; *code_p
 * (when given) gets the gRPC code of etcd's own error answer, 0 for any other failure. */
static int request(ah_cluster_etcd_t *c, int only, const char *path, json_t *body, json_t **resp_p,
                   int *code_p, char *err, size_t errlen) {
  char *text = NULL;
  if (body) {
    text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    if (!text) {
      set_err(err, errlen, "etcd %s: the request could not be encoded", path);
      return -1;
    }
  }
  if (code_p) *code_p = 0;
  const uint64_t start = now_ns(), deadline = start + (uint64_t)(c->timeout_s * 1e9);
  char whys[AH_CLUSTER_ENDPOINTS_MAX][192];
  memset(whys, 0, sizeof whys);
  int n = only >= 0 ? 1 : c->eps.n, rc = -1, done = 0;
  while (!done) {
    int first = only >= 0 ? only : atomic_load(&c->cur);
    for (int k = 0; k < n && !done; k++) {
      int i = (first + k) % c->eps.n;
      uint64_t now = now_ns();
      if (now >= deadline) {
        done = 1;
        break;
      }
      /* A fair share of what is left, and at most a quarter of the whole: a member without a
       * leader holds a write until etcd's own timeout (7 s), so the call must come back to the
       * members after their election (up to two election timeouts, 2 s by default). Never under
       * 100 ms while that much is left. */
      uint64_t left = deadline - now, share = left / (uint64_t)(n - k);
      if (share > c->attempt_max_ns) share = c->attempt_max_ns;
      if (share < 100000000ull) share = left < 100000000ull ? left : 100000000ull;
      long ms = (long)(share / 1000000ull);
      if (ms < 1) ms = 1;
      try_t t = try_one(c, i, path, text, ms, resp_p, code_p, whys[i], sizeof whys[i]);
      if (t == TRY_OK) {
        if (only < 0) atomic_store(&c->cur, i);
        rc = 0;
        done = 1;
      } else if (t == TRY_FINAL) {
        set_err(err, errlen, "etcd %s%s: %s", c->eps.url[i], path, whys[i]);
        free(text);
        return -1;
      }
    }
    uint64_t now = now_ns();
    if (done || only >= 0 || now + ROUND_PAUSE_NS >= deadline) break; /* one member: one try */
    pause_ns(ROUND_PAUSE_NS);
  }
  free(text);
  if (rc == 0) return 0;
  size_t o = 0;
  if (err && errlen) {
    int w = snprintf(err, errlen, "etcd %s: no member answered within %g s:", path, c->timeout_s);
    o = w > 0 ? (size_t)w : 0;
    for (int k = 0; k < n && o < errlen; k++) {
      int i = only >= 0 ? only : k;
      w = snprintf(err + o, errlen - o, " %s (%s)%s", c->eps.url[i],
                   whys[i][0] ? whys[i] : "not tried: no time left", k + 1 < n ? ";" : "");
      if (w < 0) break;
      o += (size_t)w;
    }
  }
  return -1;
}

/* ---- the JSON of keys, values and numbers ---------------------------------------------------- */

/* A base64 string of `n` bytes of `s`, or NULL (out of memory). */
static json_t *b64_json(const void *s, size_t n) {
  char *t = malloc(ah_cluster_b64_len(n) + 1);
  if (!t) return NULL;
  ah_cluster_b64_encode(s, n, t);
  json_t *j = json_string(t);
  free(t);
  return j;
}

/* A uint64 field (member ids use the whole range, which strtoll would clip to INT64_MAX). */
static uint64_t uint64_of(const json_t *j) {
  if (json_is_integer(j)) return (uint64_t)json_integer_value(j);
  const char *s = json_string_value(j);
  return s ? strtoull(s, NULL, 10) : 0;
}

/* The gateway writes int64 fields as strings ("revision": "5"); read either form. */
static int64_t int64_of(const json_t *j) {
  if (json_is_integer(j)) return (int64_t)json_integer_value(j);
  const char *s = json_string_value(j);
  return s ? strtoll(s, NULL, 10) : 0;
}

static json_t *int64_json(int64_t v) {
  char t[24];
  snprintf(t, sizeof t, "%lld", (long long)v);
  return json_string(t);
}

/* Decodes the base64 field `name` of `o` (absent: empty) into a new NUL-terminated buffer.
 * Returns it with *len_p, or NULL (not base64, over AH_CLUSTER_VALUE_MAX, out of memory). */
static char *b64_field(const json_t *o, const char *name, size_t *len_p) {
  const char *s = json_string_value(json_object_get(o, name));
  if (!s) s = "";
  size_t n = strlen(s);
  if (n / 4 * 3 > AH_CLUSTER_VALUE_MAX) return NULL;
  unsigned char *out = malloc(n / 4 * 3 + 1);
  if (!out) return NULL;
  long m = ah_cluster_b64_decode(s, out);
  if (m < 0) {
    free(out);
    return NULL;
  }
  if (len_p) *len_p = (size_t)m;
  return (char *)out;
}

static int kv_read(const json_t *o, ah_cluster_kv_t *kv_p) {
  ah_cluster_kv_t kv = {0};
  kv.key = b64_field(o, "key", NULL);
  kv.value = b64_field(o, "value", &kv.value_len);
  if (!kv.key || !kv.value) {
    ah_cluster_kv_clear(&kv);
    return -1;
  }
  kv.lease = int64_of(json_object_get(o, "lease"));
  kv.create_revision = int64_of(json_object_get(o, "create_revision"));
  kv.mod_revision = int64_of(json_object_get(o, "mod_revision"));
  *kv_p = kv;
  return 0;
}

void ah_cluster_kv_clear(ah_cluster_kv_t *kv) {
  if (!kv) return;
  free(kv->key);
  free(kv->value);
  memset(kv, 0, sizeof *kv);
}

void ah_cluster_kvs_free(ah_cluster_kv_t *kvs, int n) {
  for (int i = 0; kvs && i < n; i++) ah_cluster_kv_clear(&kvs[i]);
  free(kvs);
}

/* Reads the "kvs" array of a range answer. Returns the count with *kvs_p, or -1. */
static int kvs_read(const json_t *range, ah_cluster_kv_t **kvs_p, char *err, size_t errlen) {
  const json_t *a = json_object_get(range, "kvs");
  size_t n = json_is_array(a) ? json_array_size(a) : 0;
  *kvs_p = NULL;
  if (n == 0) return 0;
  ah_cluster_kv_t *kvs = calloc(n, sizeof *kvs);
  if (!kvs) {
    set_err(err, errlen, "out of memory reading %zu keys", n);
    return -1;
  }
  for (size_t i = 0; i < n; i++) {
    if (kv_read(json_array_get(a, i), &kvs[i]) != 0) {
      ah_cluster_kvs_free(kvs, (int)i);
      set_err(err, errlen, "etcd answered a key or value that is not base64 (or over %d bytes)",
              AH_CLUSTER_VALUE_MAX);
      return -1;
    }
  }
  *kvs_p = kvs;
  return (int)n;
}

int ah_cluster_etcd_range_answer(const char *text, ah_cluster_kv_t **kvs_p, char *err,
                                 size_t errlen) {
  if (!ah_jansson_ready()) {
    set_err(err, errlen, "jansson (%s) could not be loaded", AH_JANSSON_SONAME);
    return -1;
  }
  json_error_t je;
  json_t *j = json_loads(text, 0, &je);
  if (!json_is_object(j)) {
    json_decref(j);
    set_err(err, errlen, "an etcd answer that is not a JSON object");
    return -1;
  }
  int n = kvs_read(j, kvs_p, err, errlen);
  json_decref(j);
  return n;
}

/* A request's {"key": base64} object, or NULL (a key over AH_CLUSTER_VALUE_MAX, no memory). */
static json_t *key_body(const char *key, char *err, size_t errlen) {
  size_t n = key ? strlen(key) : 0;
  json_t *b = json_object(), *k = n && n <= AH_CLUSTER_VALUE_MAX ? b64_json(key, n) : NULL;
  if (!b || !k || json_object_set_new(b, "key", k) != 0) {
    json_decref(b);
    set_err(err, errlen, "etcd key '%.64s': empty, too long, or no memory", key ? key : "");
    return NULL;
  }
  return b;
}

/* Adds "range_end" to `b`: the key after every key starting with `prefix` (etcd's prefix range:
 * the prefix with its last byte incremented, trailing 0xff bytes dropped; "\0" for all keys). */
static int range_end_add(json_t *b, const char *prefix) {
  size_t n = strlen(prefix);
  char *end = malloc(n + 1);
  if (!end) return -1;
  memcpy(end, prefix, n + 1);
  while (n > 0 && (unsigned char)end[n - 1] == 0xff) n--;
  if (n > 0) end[n - 1] = (char)((unsigned char)end[n - 1] + 1);
  json_t *j = n > 0 ? b64_json(end, n) : b64_json("", 1);
  free(end);
  return j ? json_object_set_new(b, "range_end", j) : -1;
}

/* ---- the calls ------------------------------------------------------------------------------- */

int ah_cluster_etcd_put(ah_cluster_etcd_t *c, const char *key, const void *value, size_t len,
                        int64_t lease, char *err, size_t errlen) {
  if (len > AH_CLUSTER_VALUE_MAX) {
    set_err(err, errlen, "etcd put '%.64s': value of %zu bytes is over %d", key, len,
            AH_CLUSTER_VALUE_MAX);
    return -1;
  }
  json_t *b = key_body(key, err, errlen), *resp = NULL;
  if (!b) return -1;
  json_object_set_new(b, "value", b64_json(value, len));
  if (lease) json_object_set_new(b, "lease", int64_json(lease));
  if (request(c, -1, "/v3/kv/put", b, &resp, NULL, err, errlen) != 0) return -1;
  json_decref(resp);
  return 0;
}

int ah_cluster_etcd_get(ah_cluster_etcd_t *c, const char *key, ah_cluster_kv_t *kv_p, char *err,
                        size_t errlen) {
  json_t *b = key_body(key, err, errlen), *resp = NULL;
  if (!b) return -1;
  if (request(c, -1, "/v3/kv/range", b, &resp, NULL, err, errlen) != 0) return -1;
  ah_cluster_kv_t *kvs;
  int n = kvs_read(resp, &kvs, err, errlen);
  json_decref(resp);
  if (n <= 0) return n;
  *kv_p = kvs[0];
  memset(&kvs[0], 0, sizeof kvs[0]);
  ah_cluster_kvs_free(kvs, n);
  return 1;
}

int ah_cluster_etcd_range(ah_cluster_etcd_t *c, const char *prefix, ah_cluster_kv_t **kvs_p,
                          char *err, size_t errlen) {
  json_t *b = key_body(prefix, err, errlen), *resp = NULL;
  if (!b) return -1;
  if (range_end_add(b, prefix) != 0) {
    json_decref(b);
    set_err(err, errlen, "out of memory");
    return -1;
  }
  if (request(c, -1, "/v3/kv/range", b, &resp, NULL, err, errlen) != 0) return -1;
  int n = kvs_read(resp, kvs_p, err, errlen);
  json_decref(resp);
  return n;
}

int ah_cluster_etcd_delete(ah_cluster_etcd_t *c, const char *key, int prefix, char *err,
                           size_t errlen) {
  json_t *b = key_body(key, err, errlen), *resp = NULL;
  if (!b) return -1;
  if (prefix && range_end_add(b, key) != 0) {
    json_decref(b);
    set_err(err, errlen, "out of memory");
    return -1;
  }
  if (request(c, -1, "/v3/kv/deleterange", b, &resp, NULL, err, errlen) != 0) return -1;
  int64_t n = int64_of(json_object_get(resp, "deleted"));
  json_decref(resp);
  return (int)n;
}

int ah_cluster_etcd_create(ah_cluster_etcd_t *c, const char *key, const void *value, size_t len,
                           int64_t lease, ah_cluster_kv_t *holder_p, char *err, size_t errlen) {
  json_t *put = key_body(key, err, errlen), *get = key_body(key, err, errlen);
  json_t *cmp = key_body(key, err, errlen), *resp = NULL;
  if (!put || !get || !cmp || len > AH_CLUSTER_VALUE_MAX) {
    json_decref(put);
    json_decref(get);
    json_decref(cmp);
    if (len > AH_CLUSTER_VALUE_MAX) set_err(err, errlen, "etcd create: value too long");
    return -1;
  }
  json_object_set_new(put, "value", b64_json(value, len));
  if (lease) json_object_set_new(put, "lease", int64_json(lease));
  json_object_set_new(cmp, "target", json_string("CREATE"));
  json_object_set_new(cmp, "result", json_string("EQUAL"));
  json_object_set_new(cmp, "create_revision", json_string("0"));
  json_t *b = json_pack("{s:[o], s:[{s:o}], s:[{s:o}]}", "compare", cmp, "success", "request_put",
                        put, "failure", "request_range", get);
  if (!b) {
    set_err(err, errlen, "etcd create: the request could not be built");
    return -1;
  }
  if (request(c, -1, "/v3/kv/txn", b, &resp, NULL, err, errlen) != 0) return -1;
  if (json_is_true(json_object_get(resp, "succeeded"))) {
    json_decref(resp);
    return 1;
  }
  json_t *r0 = json_array_get(json_object_get(resp, "responses"), 0);
  ah_cluster_kv_t *kvs = NULL;
  int n = kvs_read(json_object_get(r0, "response_range"), &kvs, err, errlen);
  json_decref(resp);
  if (n < 0) return -1;
  if (holder_p) {
    memset(holder_p, 0, sizeof *holder_p);
    if (n > 0) { /* n == 0: the holder went between the compare and the read: none to name */
      *holder_p = kvs[0];
      memset(&kvs[0], 0, sizeof kvs[0]);
    }
  }
  ah_cluster_kvs_free(kvs, n);
  return 0;
}

int ah_cluster_etcd_lease_grant(ah_cluster_etcd_t *c, int ttl_s, int64_t *id_p, char *err,
                                size_t errlen) {
  json_t *resp = NULL, *b = json_pack("{s:I}", "TTL", (json_int_t)ttl_s);
  if (request(c, -1, "/v3/lease/grant", b, &resp, NULL, err, errlen) != 0) return -1;
  int64_t id = int64_of(json_object_get(resp, "ID"));
  const char *e = json_string_value(json_object_get(resp, "error"));
  json_decref(resp);
  if (id == 0 || e) {
    set_err(err, errlen, "etcd lease grant of %d s: %s", ttl_s, e ? e : "no lease id answered");
    return -1;
  }
  *id_p = id;
  return 0;
}

int ah_cluster_etcd_lease_keepalive(ah_cluster_etcd_t *c, int64_t id, int64_t *ttl_p, char *err,
                                    size_t errlen) {
  json_t *resp = NULL, *b = json_object();
  json_object_set_new(b, "ID", int64_json(id));
  if (request(c, -1, "/v3/lease/keepalive", b, &resp, NULL, err, errlen) != 0) return -1;
  /* a stream of one message: {"result": {..., "TTL": "5"}}; no TTL when the lease is gone */
  json_t *r = json_object_get(resp, "result");
  if (!r) {
    const char *m = json_string_value(json_object_get(json_object_get(resp, "error"), "message"));
    set_err(err, errlen, "etcd lease keepalive: %s", m ? m : "no result answered");
    json_decref(resp);
    return -1;
  }
  *ttl_p = int64_of(json_object_get(r, "TTL"));
  json_decref(resp);
  return 0;
}

int ah_cluster_etcd_lease_revoke(ah_cluster_etcd_t *c, int64_t id, char *err, size_t errlen) {
  json_t *resp = NULL, *b = json_object();
  json_object_set_new(b, "ID", int64_json(id));
  int code = 0;
  if (request(c, -1, "/v3/lease/revoke", b, &resp, &code, err, errlen) != 0)
    return code == GRPC_NOT_FOUND ? 0 : -1;
  json_decref(resp);
  return 0;
}

int ah_cluster_etcd_member_healthy(ah_cluster_etcd_t *c, int i, char *err, size_t errlen) {
  if (i < 0 || i >= c->eps.n) return -1;
  json_t *resp = NULL;
  if (request(c, i, "/health", NULL, &resp, NULL, err, errlen) != 0) return 0;
  const char *h = json_string_value(json_object_get(resp, "health"));
  int ok = h && strcmp(h, "true") == 0;
  if (!ok) set_err(err, errlen, "etcd %s/health: health is %s", c->eps.url[i], h ? h : "absent");
  json_decref(resp);
  return ok;
}

int ah_cluster_etcd_leader_index(ah_cluster_etcd_t *c, char *err, size_t errlen) {
  for (int i = 0; i < c->eps.n; i++) {
    json_t *resp = NULL;
    if (request(c, i, "/v3/maintenance/status", json_object(), &resp, NULL, err, errlen) != 0)
      continue;
    uint64_t me = uint64_of(json_object_get(json_object_get(resp, "header"), "member_id"));
    uint64_t leader = uint64_of(json_object_get(resp, "leader"));
    json_decref(resp);
    if (me && me == leader) return i;
  }
  set_err(err, errlen, "no member of the %d endpoints says it is the leader", c->eps.n);
  return -1;
}
