/* ah_cluster_curl.c: opens the distribution's libcurl.so.4 with dlopen, once, for the etcd
 * client. As with jansson (tuner/ah_jansson.c), libautoha.so is a guest in the user's process:
 * it needs nothing beyond the C library (tests/install/check_needed.sh), so libcurl is opened
 * only by a process that is given AUTOHA_ETCD, RTLD_LOCAL so its names never join the process's.
 * The `autoha` command and the tests go through the same loader, so there is one code path. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "ah_cluster_curl.h"

static ah_cluster_curl_t fns;
static int fns_ok;              /* written once in load(); read after pthread_once */
static char load_err[512] = ""; /* why the load failed, for every caller */
static pthread_once_t load_once = PTHREAD_ONCE_INIT;

/* Resolves `name` into *slot (a function pointer of any type, copied bytewise). */
static int resolve(void *h, const char *name, void *slot, size_t size) {
  void *p = dlsym(h, name);
  if (!p || size != sizeof p) return -1;
  memcpy(slot, &p, sizeof p);
  return 0;
}

static void load(void) {
  void *h = dlopen(AH_CLUSTER_CURL_SONAME, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *e = dlerror();
    snprintf(load_err, sizeof load_err,
             "the etcd client needs %s (Debian/Ubuntu package libcurl4): %s",
             AH_CLUSTER_CURL_SONAME, e ? e : "dlopen failed");
    return;
  }
  ah_cluster_curl_t f;
#define AH_CURL_RESOLVE(field, name)                                                               \
  if (resolve(h, name, &f.field, sizeof f.field) != 0) {                                           \
    snprintf(load_err, sizeof load_err, "%s has no %s", AH_CLUSTER_CURL_SONAME, name);             \
    dlclose(h);                                                                                    \
    return;                                                                                        \
  }
  AH_CURL_RESOLVE(global_init, "curl_global_init")
  AH_CURL_RESOLVE(easy_init, "curl_easy_init")
  AH_CURL_RESOLVE(easy_setopt, "curl_easy_setopt")
  AH_CURL_RESOLVE(easy_perform, "curl_easy_perform")
  AH_CURL_RESOLVE(easy_getinfo, "curl_easy_getinfo")
  AH_CURL_RESOLVE(easy_cleanup, "curl_easy_cleanup")
  AH_CURL_RESOLVE(easy_strerror, "curl_easy_strerror")
  AH_CURL_RESOLVE(slist_append, "curl_slist_append")
  AH_CURL_RESOLVE(slist_free_all, "curl_slist_free_all")
#undef AH_CURL_RESOLVE
  /* CURL_GLOBAL_NOTHING: no TLS (the client speaks http:// only) and no signal handler
   * changes in the user's process. */
  CURLcode rc = f.global_init(CURL_GLOBAL_NOTHING);
  if (rc != CURLE_OK) {
    snprintf(load_err, sizeof load_err, "curl_global_init failed: %s", f.easy_strerror(rc));
    return; /* the handle stays open: libcurl may have started something we cannot undo */
  }
  fns = f;
  fns_ok = 1;
}

const ah_cluster_curl_t *ah_cluster_curl(char *err, size_t errlen) {
  pthread_once(&load_once, load);
  if (fns_ok) return &fns;
  if (err && errlen) snprintf(err, errlen, "%s", load_err);
  return NULL;
}
