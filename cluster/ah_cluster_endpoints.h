/* ah_cluster_endpoints.h: the grammar of AUTOHA_ETCD, the etcd cluster's client URLs, and the
 * typed list it parses into. Pure C: settings/ checks the variable with it, and the etcd client
 * (ah_cluster_etcd.h) is handed the parsed list. */
#ifndef AH_CLUSTER_ENDPOINTS_H
#define AH_CLUSTER_ENDPOINTS_H

#include <stddef.h>

#define AH_CLUSTER_ENDPOINTS_MAX 8 /* members a job may name: etcd clusters have 3, 5 or 7 */
#define AH_CLUSTER_URL_MAX 128     /* "http://HOST:PORT", HOST a name or an address */

typedef struct {
  int n;                                                  /* 0: no etcd (the variable is empty) */
  char url[AH_CLUSTER_ENDPOINTS_MAX][AH_CLUSTER_URL_MAX]; /* "http://127.0.0.1:2379", no '/' */
} ah_cluster_endpoints_t;

/* Parses "http://HOST:PORT[,http://HOST:PORT...]" (HOST: a name, an IPv4 address or [IPv6];
 * PORT 1..65535; a trailing '/' is dropped; "" is the empty list) into *eps_p. Returns 0, or -1
 * with *eps_p unchanged and err naming the offending endpoint and why (no "autoha:" prefix, not
 * logged: the caller decides).
 * Note that only http:// is taken: the client has no TLS settings yet, and an https:// URL is
 * refused by name rather than dialled without verification. */
int ah_cluster_endpoints_parse(const char *text, ah_cluster_endpoints_t *eps_p, char *err,
                               size_t errlen);

/* Writes the list as the variable would be set ("" when empty). Returns buf. */
char *ah_cluster_endpoints_format(const ah_cluster_endpoints_t *eps, char *buf, size_t len);

#endif
