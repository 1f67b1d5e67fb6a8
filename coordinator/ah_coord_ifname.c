/* The interface whose address the coordinator hub binds and advertises, chosen as NCCL chooses its
 * socket interface (NCCL_SOCKET_IFNAME): AUTOHA_COORD_IFNAME is a comma-separated list of name
 * prefixes, '^' in front excludes them instead, '=' in front makes the names exact; unset, the
 * first interface whose name starts with "ib", else any but "docker*" and "lo*", else "docker*",
 * else "lo*" — NCCL's order.
 *
 * Pure functions over a list of (name, family, address, up) entries, so the rule is testable without
 * the host's interfaces; ah_coord_net.c feeds it getifaddrs' list. */
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

#include "ah_coord_internal.h"

int ah_coord_if_match(const char *name, const char *spec) {
  int exclude = 0, exact = 0;
  if (*spec == '^') exclude = 1, spec++;
  if (*spec == '=') exact = 1, spec++;
  for (const char *p = spec; *p;) {
    size_t len = strcspn(p, ",");
    /* An empty item ("eth,,ib", a trailing comma) names nothing. */
    if (len > 0 &&
        (exact ? strlen(name) == len && strncmp(name, p, len) == 0 : strncmp(name, p, len) == 0))
      return !exclude;
    p += len;
    if (*p == ',') p++;
  }
  return exclude;
}

/* An address clients elsewhere can dial: any IPv4 one; IPv6 but link-local (it needs a scope). */
static int usable(const ah_coord_if_t *e) {
  if (!e->up || !e->addr) return 0;
  if (e->family == AF_INET) return 1;
  if (e->family != AF_INET6) return 0;
  const struct in6_addr *a = &((const struct sockaddr_in6 *)e->addr)->sin6_addr;
  return !IN6_IS_ADDR_LINKLOCAL(a);
}

static int first_match(const ah_coord_if_t *ifs, int n, const char *spec) {
  for (int i = 0; i < n; i++)
    if (usable(&ifs[i]) && ah_coord_if_match(ifs[i].name, spec)) return i;
  return -1;
}

int ah_coord_if_choose(const ah_coord_if_t *ifs, int n, const char *spec) {
  if (spec && *spec) return first_match(ifs, n, spec);
  static const char *const order[] = {"ib", "^docker,lo", "docker", "lo"};
  for (size_t k = 0; k < sizeof order / sizeof order[0]; k++) {
    int i = first_match(ifs, n, order[k]);
    if (i >= 0) return i;
  }
  return -1;
}
