/* ah_cluster_curl.h: libcurl as the etcd client calls it, the distribution's libcurl.so.4 opened
 * at run time (ah_cluster_curl.c says why it is not linked). */
#ifndef AH_CLUSTER_CURL_H
#define AH_CLUSTER_CURL_H

#include <curl/curl.h>
#include <stddef.h>

#define AH_CLUSTER_CURL_SONAME "libcurl.so.4"

/* The functions of libcurl the client uses, filled whole by one load. */
typedef struct {
  CURLcode (*global_init)(long flags);
  CURL *(*easy_init)(void);
  CURLcode (*easy_setopt)(CURL *curl, CURLoption option, ...);
  CURLcode (*easy_perform)(CURL *curl);
  CURLcode (*easy_getinfo)(CURL *curl, CURLINFO info, ...);
  void (*easy_cleanup)(CURL *curl);
  const char *(*easy_strerror)(CURLcode code);
  struct curl_slist *(*slist_append)(struct curl_slist *list, const char *text);
  void (*slist_free_all)(struct curl_slist *list);
} ah_cluster_curl_t;

/* Returns libcurl's functions, loading libcurl.so.4 (and running curl_global_init) at the first
 * call from any thread, or NULL when it cannot be loaded: then err (when given) says which file
 * failed and why, at this call and every later one.
 * Note that the first call must come before the process starts threads that use libcurl on
 * their own (curl_global_init is not thread-safe against them); the etcd client calls it when a
 * client is opened, before any of its threads exist. */
const ah_cluster_curl_t *ah_cluster_curl(char *err, size_t errlen);

#endif
