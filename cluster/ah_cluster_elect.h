/* ah_cluster_elect.h: the election of the one planner of a cluster. Each candidate (any job's
 * hub, or a standalone planner) holds a lease and tries to create the election key under it; the
 * one that created it holds the role until its lease goes (it dies, or stops), and the others,
 * polling, take it then. */
#ifndef AH_CLUSTER_ELECT_H
#define AH_CLUSTER_ELECT_H

#include <stddef.h>

#include "ah_cluster_etcd.h"

typedef struct ah_cluster_elect ah_cluster_elect_t;

/* Starts candidate `id` (its name in the key's value: non-empty, under 256 bytes) for `key`,
 * with a lease of ttl_s seconds (2..3600): one try at once, then every poll (a quarter of the TTL,
 * at most 500 ms) on a thread. Returns 0 with *e_p, or -1 with err.
 * Note that a candidate that cannot reach etcd for a whole TTL stops holding the role (its key
 * went with its lease), which it notices at its next poll; so two holders can overlap by at most
 * one poll plus the request timeout, and a planner's writes should say which holder wrote them. */
int ah_cluster_elect_start(ah_cluster_etcd_t *c, const char *key, const char *id, int ttl_s,
                           ah_cluster_elect_t **e_p, char *err, size_t errlen);

/* 1 while this candidate holds the role (as of its last poll), else 0. */
int ah_cluster_elect_is_leader(ah_cluster_elect_t *e);

/* Reads who holds `key`: returns 1 with the holder's id in out, 0 when nobody does, -1 on error. */
int ah_cluster_elect_holder(ah_cluster_etcd_t *c, const char *key, char *out, size_t len, char *err,
                            size_t errlen);

/* Withdraws: the thread stops and the lease is revoked, so a role held goes to another candidate
 * at its next poll. Returns 0, or -1 when etcd could not be told. Frees e. */
int ah_cluster_elect_stop(ah_cluster_elect_t *e, char *err, size_t errlen);

#endif
