/* ah_cluster_endpoints.c: AUTOHA_ETCD's grammar, a comma-separated list of http://HOST:PORT
 * client URLs. It checks the shape only (scheme, host characters, port range), never resolves a
 * name: a member that cannot be reached is the client's error at request time, with its URL. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ah_cluster_endpoints.h"

/* One endpoint, `s` of `n` bytes. Returns 0 and writes the URL (trailing '/' dropped) to out, or
 * -1 with `why` saying what is wrong. */
static int endpoint_parse(const char *s, size_t n, char *out, char *why, size_t whylen) {
  static const char scheme[] = "http://";
  const size_t sl = sizeof scheme - 1;
  if (n > 0 && s[n - 1] == '/') n--;
  if (n >= 8 && strncmp(s, "https://", 8) == 0) {
    snprintf(why, whylen, "https is not supported yet; use http:// on a trusted network");
    return -1;
  }
  if (n < sl || strncmp(s, scheme, sl) != 0) {
    snprintf(why, whylen, "does not start with http://");
    return -1;
  }
  if (n >= AH_CLUSTER_URL_MAX) {
    snprintf(why, whylen, "longer than %d characters", AH_CLUSTER_URL_MAX - 1);
    return -1;
  }
  const char *host = s + sl, *end = s + n, *colon = NULL;
  if (host < end && *host == '[') { /* [IPv6]:PORT */
    const char *close = memchr(host, ']', (size_t)(end - host));
    if (!close || close + 1 >= end || close[1] != ':') {
      snprintf(why, whylen, "an IPv6 host is written [ADDR]:PORT");
      return -1;
    }
    for (const char *p = host + 1; p < close; p++)
      if (!isxdigit((unsigned char)*p) && *p != ':' && *p != '.') {
        snprintf(why, whylen, "'%c' in an IPv6 address", *p);
        return -1;
      }
    colon = close + 1;
  } else {
    for (const char *p = host; p < end; p++) {
      if (*p == ':') {
        colon = p;
        break;
      }
      if (!isalnum((unsigned char)*p) && *p != '-' && *p != '.' && *p != '_') {
        snprintf(why, whylen, "'%c' in the host name", *p);
        return -1;
      }
    }
  }
  if (!colon || colon == host) {
    snprintf(why, whylen, colon ? "no host" : "no :PORT");
    return -1;
  }
  long port = 0;
  const char *p = colon + 1;
  if (p == end) port = -1;
  for (; p < end && port >= 0; p++) {
    if (!isdigit((unsigned char)*p) || port > 65535) port = -1;
    else port = port * 10 + (*p - '0');
  }
  if (port < 1 || port > 65535) {
    snprintf(why, whylen, "the port is not a number in 1..65535 (no path may follow it)");
    return -1;
  }
  memcpy(out, s, n);
  out[n] = 0;
  return 0;
}

int ah_cluster_endpoints_parse(const char *text, ah_cluster_endpoints_t *eps_p, char *err,
                               size_t errlen) {
  ah_cluster_endpoints_t eps;
  memset(&eps, 0, sizeof eps);
  if (!text) text = "";
  for (const char *s = text; *s;) {
    const char *comma = strchr(s, ',');
    size_t n = comma ? (size_t)(comma - s) : strlen(s);
    char why[128];
    if (eps.n == AH_CLUSTER_ENDPOINTS_MAX) {
      if (err && errlen)
        snprintf(err, errlen, "more than %d endpoints (from '%.*s')", AH_CLUSTER_ENDPOINTS_MAX,
                 (int)(n > 64 ? 64 : n), s);
      return -1;
    }
    if (n == 0 || endpoint_parse(s, n, eps.url[eps.n], why, sizeof why) != 0) {
      if (err && errlen)
        snprintf(err, errlen, "endpoint '%.*s': %s", (int)(n > 96 ? 96 : n), s,
                 n ? why : "empty (two commas, or one at an end)");
      return -1;
    }
    eps.n++;
    if (!comma) break;
    s = comma + 1;
    if (!*s) {
      if (err && errlen) snprintf(err, errlen, "endpoint '': empty (a comma at the end)");
      return -1;
    }
  }
  *eps_p = eps;
  return 0;
}

char *ah_cluster_endpoints_format(const ah_cluster_endpoints_t *eps, char *buf, size_t len) {
  size_t o = 0;
  if (len) buf[0] = 0;
  for (int i = 0; eps && i < eps->n && o < len; i++) {
    int w = snprintf(buf + o, len - o, "%s%s", i ? "," : "", eps->url[i]);
    if (w < 0) break;
    o += (size_t)w;
  }
  return buf;
}
