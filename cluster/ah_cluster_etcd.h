/* ah_cluster_etcd.h: an etcd v3 client over etcd's JSON gateway (POST /v3/..., keys and values
 * base64), on libcurl and jansson, both opened at run time. Requests go to the members of
 * AUTOHA_ETCD in turn: one that fails on a member (refused, timed out, no leader) is sent to the
 * next, and every call is bounded by the client's timeout, so etcd down is an error, never a
 * hang (docs/cluster.md).
 *
 * Every call returns -1 with `err` (when given; AH_CLUSTER_ERR_LEN bytes suffice) naming the
 * members tried and why each failed; nothing is logged here: the caller decides. A client is
 * safe to use from several threads at once (each request has its own libcurl handle). */
#ifndef AH_CLUSTER_ETCD_H
#define AH_CLUSTER_ETCD_H

#include <stddef.h>
#include <stdint.h>

#include "ah_cluster_endpoints.h"

#define AH_CLUSTER_ERR_LEN 1024
#define AH_CLUSTER_VALUE_MAX (1 << 20) /* the largest value put or read: 1 MiB (etcd's is 1.5) */

typedef struct ah_cluster_etcd ah_cluster_etcd_t;

/* One key as read: key and value NUL-terminated (binary values keep their length), the lease
 * it is attached to (0: none) and its revisions. */
typedef struct {
  char *key;
  char *value;
  size_t value_len;
  int64_t lease;
  int64_t create_revision, mod_revision;
} ah_cluster_kv_t;

/* Opens a client of the members `eps` (at least one) whose every call takes at most timeout_s
 * seconds (0.05..3600). Loads libcurl and jansson at the first call. Returns 0 with *c_p, or -1
 * (no member, a bad timeout, a library that cannot be loaded). Sends nothing. */
int ah_cluster_etcd_open(const ah_cluster_endpoints_t *eps, double timeout_s,
                         ah_cluster_etcd_t **c_p, char *err, size_t errlen);
void ah_cluster_etcd_close(ah_cluster_etcd_t *c);

/* Puts key = value (len bytes), attached to `lease` (0: none). Returns 0 or -1. */
int ah_cluster_etcd_put(ah_cluster_etcd_t *c, const char *key, const void *value, size_t len,
                        int64_t lease, char *err, size_t errlen);

/* Reads one key. Returns 1 with *kv_p filled (free it with ah_cluster_kv_clear), 0 when the key
 * does not exist, -1 on error. */
int ah_cluster_etcd_get(ah_cluster_etcd_t *c, const char *key, ah_cluster_kv_t *kv_p, char *err,
                        size_t errlen);

/* Reads every key starting with `prefix` (non-empty), in key order. Returns the number of keys
 * (0..) with *kvs_p (free with ah_cluster_kvs_free; NULL when none), or -1. */
int ah_cluster_etcd_range(ah_cluster_etcd_t *c, const char *prefix, ah_cluster_kv_t **kvs_p,
                          char *err, size_t errlen);

/* Deletes `key`, or with `prefix` set every key starting with it. Returns the number deleted or
 * -1. */
int ah_cluster_etcd_delete(ah_cluster_etcd_t *c, const char *key, int prefix, char *err,
                           size_t errlen);

/* Creates `key` = value under `lease` only if it does not exist (one txn: create_revision == 0).
 * Returns 1 when this call created it, 0 when it existed (then *holder_p, when given, is the
 * key as it is: its value and lease; free with ah_cluster_kv_clear), -1 on error.
 * Note that a request retried on another member after a lost answer may find the key its first
 * attempt created: the caller tells by the holder's lease, which is then its own. */
int ah_cluster_etcd_create(ah_cluster_etcd_t *c, const char *key, const void *value, size_t len,
                           int64_t lease, ah_cluster_kv_t *holder_p, char *err, size_t errlen);

/* Grants a lease of ttl_s seconds (etcd may raise a short one to its minimum). Returns 0 with
 * *id_p, or -1.
 * Note that a grant whose answer was lost and that was retried on another member leaves the
 * first lease unused: nothing is attached to it, and etcd drops it at its TTL. */
int ah_cluster_etcd_lease_grant(ah_cluster_etcd_t *c, int ttl_s, int64_t *id_p, char *err,
                                size_t errlen);

/* Renews lease `id` once. Returns 0 with *ttl_p the seconds it now has, 0 when the lease no
 * longer exists (it expired: every key attached to it is gone), or -1. */
int ah_cluster_etcd_lease_keepalive(ah_cluster_etcd_t *c, int64_t id, int64_t *ttl_p, char *err,
                                    size_t errlen);

/* Revokes lease `id`, deleting every key attached to it. Returns 0 (a lease that no longer
 * exists counts as revoked) or -1. */
int ah_cluster_etcd_lease_revoke(ah_cluster_etcd_t *c, int64_t id, char *err, size_t errlen);

/* Asks member `i` alone (GET /health). Returns 1 when it reports healthy, 0 when it answers
 * unhealthy or not at all (err says which), -1 for an i out of range. */
int ah_cluster_etcd_member_healthy(ah_cluster_etcd_t *c, int i, char *err, size_t errlen);

/* Which of the client's endpoints is the raft leader: asks each member for its status and
 * returns the index whose member id is the leader it reports, or -1 when none answers so. */
int ah_cluster_etcd_leader_index(ah_cluster_etcd_t *c, char *err, size_t errlen);

/* Decodes `text`, an answer of etcd's /v3/kv/range (or a txn's response_range): the keys of its
 * "kvs", as ah_cluster_etcd_range returns them. Returns their number with *kvs_p, or -1 with err
 * (not JSON, a key or value not base64 or over AH_CLUSTER_VALUE_MAX). The answer's decoder on its
 * own, without a request: fuzz/fuzz_etcd.c feeds it. */
int ah_cluster_etcd_range_answer(const char *text, ah_cluster_kv_t **kvs_p, char *err,
                                 size_t errlen);

void ah_cluster_kv_clear(ah_cluster_kv_t *kv);
void ah_cluster_kvs_free(ah_cluster_kv_t *kvs, int n);

#endif
