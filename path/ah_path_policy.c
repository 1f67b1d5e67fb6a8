/* ah_path_policy.c: the runtime policy the verbs hook asks at each RTR — per-communicator traffic
 * classes, the probed path catalog, and the source port and traffic class of each queue pair, from
 * the planner (ah_path_plan.c) or the spread rule.
 *
 * Every parser here is strict and reports the first bad line with its text; a policy whose input
 * is bad degrades to "leave the QP as NCCL set it". */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fnmatch.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "ah_file.h"
#include "ah_log.h"
#include "ah_path.h"
#include "ah_path_text.h"
#include "ah_uthash.h"

/* ---- per-communicator traffic classes ---------------------------------------------------------- */

int ah_path_tc_rules_parse(const char *text, ah_path_tc_rules_t *rules_p, char *why,
                           size_t why_len) {
  ah_path_tc_rules_t r;
  memset(&r, 0, sizeof r);
  char *copy = strdup(text ? text : "");
  if (!copy) return snprintf(why, why_len, "out of memory"), -1;
  int rc = 0, pos = 0;
  char *save = NULL;
  for (char *rule = strtok_r(copy, ";", &save); rule && rc == 0;
       rule = strtok_r(NULL, ";", &save)) {
    pos++;
    char *colon = strrchr(rule, ':');
    int tc, dscp;
    long lo = 0, hi = 0;
    if (r.n == AH_PATH_TC_RULES_MAX) {
      snprintf(why, why_len, "more than %d rules", AH_PATH_TC_RULES_MAX);
      rc = -1;
      break;
    }
    if (!colon || ah_path_parse_tc(colon + 1, &tc, &dscp) || tc < 0) {
      snprintf(why, why_len, "rule %d '%s': expected MATCH:CLASS with CLASS 0..255 or dscp=0..63",
               pos, rule);
      rc = -1;
      break;
    }
    *colon = '\0';
    r.rule[r.n].tc = dscp ? tc << 2 : tc;
    r.rule[r.n].lo = 0;
    r.rule[r.n].hi = INT_MAX;
    if (strcmp(rule, "*") == 0) {
      r.n++;
    } else if (strncmp(rule, "name=", 5) == 0 && rule[5] && strlen(rule + 5) < AH_PATH_NAME_MAX) {
      snprintf(r.rule[r.n].name, AH_PATH_NAME_MAX, "%s", rule + 5);
      r.n++;
    } else if (strncmp(rule, "ranks=", 6) == 0) {
      char *dash = strchr(rule + 6, '-');
      if (dash) *dash = '\0';
      if (ah_path_text_long(rule + 6, 1, INT_MAX, &lo) ||
          (dash && dash[1] && ah_path_text_long(dash + 1, lo, INT_MAX, &hi))) {
        snprintf(why, why_len, "rule %d: ranks must be N, LO-HI or LO- with 1 <= LO <= HI", pos);
        rc = -1;
        break;
      }
      r.rule[r.n].lo = (int)lo;
      r.rule[r.n].hi = dash ? (dash[1] ? (int)hi : INT_MAX) : (int)lo;
      r.n++;
    } else {
      snprintf(why, why_len, "rule %d '%s': MATCH must be name=GLOB, ranks=N[-M] or *", pos, rule);
      rc = -1;
    }
  }
  free(copy);
  if (rc == 0 && rules_p) *rules_p = r;
  return rc;
}

int ah_path_tc_rules_match(const ah_path_tc_rules_t *r, const char *name, int nranks) {
  for (int i = 0; r && i < r->n; i++) {
    if (r->rule[i].name[0]) {
      if (name && fnmatch(r->rule[i].name, name, 0) == 0) return r->rule[i].tc;
    } else if (r->rule[i].lo == 0 || (nranks >= r->rule[i].lo && nranks <= r->rule[i].hi)) {
      return r->rule[i].tc;
    }
  }
  return -1;
}

/* ---- path catalog ----------------------------------------------------------------------------- */

typedef struct {
  char src[AH_PATH_NAME_MAX]; /* device name, or "*" */
  int src_is_gid;
  uint8_t sgid[16];
  uint8_t dgid[16];
  int nports;
  uint16_t *ports;
} cat_entry_t;

struct ah_path_catalog {
  int n;
  cat_entry_t *e;
};

void ah_path_catalog_free(ah_path_catalog_t *c) {
  if (!c) return;
  for (int i = 0; i < c->n; i++) free(c->e[i].ports);
  free(c->e);
  free(c);
}

/* Parses "p1,p2,..." into e->ports. */
static int cat_ports(char *list, cat_entry_t *e) {
  int n = 1;
  for (const char *p = list; *p; p++) n += *p == ',';
  e->ports = calloc((size_t)n, sizeof *e->ports);
  if (!e->ports) return -1;
  char *save = NULL;
  e->nports = 0;
  for (char *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    long v;
    if (ah_path_text_long(t, AH_PATH_SPORT_MIN, AH_PATH_SPORT_MAX, &v)) return -1;
    e->ports[e->nports++] = (uint16_t)v;
  }
  return e->nports == n ? 0 : -1;
}

int ah_path_catalog_parse(const char *text, const char *origin, ah_path_catalog_t **catalog_p) {
  ah_path_catalog_t *c = calloc(1, sizeof *c);
  char *copy = text ? strdup(text) : NULL;
  int cap = 0, lineno = 0, rc = -1;
  if (!c || !copy) goto out;
  char *cur = copy, *line, orig[256];
  while ((line = ah_path_text_line(&cur, &lineno, orig, sizeof orig)) != NULL) {
    char *w[4];
    int nw = ah_path_text_words(line, w, 3);
    if (nw == 0) continue;
    if (c->n == cap) {
      int ncap = cap ? cap * 2 : 16;
      cat_entry_t *ne = realloc(c->e, (size_t)ncap * sizeof *ne);
      if (!ne) goto out;
      c->e = ne;
      cap = ncap;
    }
    cat_entry_t *e = &c->e[c->n];
    memset(e, 0, sizeof *e);
    const char *why = NULL;
    if (nw != 3) {
      why = "expected: SOURCE DESTINATION PORT[,PORT...]";
    } else if (strlen(w[0]) >= AH_PATH_NAME_MAX) {
      why = "source name too long";
    } else if (ah_path_gid_parse(w[1], e->dgid)) {
      why = "destination is not an IPv4/IPv6 address or GID";
    } else {
      snprintf(e->src, sizeof e->src, "%s", w[0]);
      e->src_is_gid = ah_path_gid_parse(w[0], e->sgid) == 0;
      c->n++; /* owns e->ports from here, freed with the catalog */
      if (cat_ports(w[2], e))
        why = "ports must be numbers in 49152-65535 (0xC000-0xFFFF), comma-separated";
    }
    if (why) {
      ah_log(AH_LOG_ERROR, "path catalog %s line %d: '%s': %s", origin, lineno, orig, why);
      goto out;
    }
  }
  *catalog_p = c;
  c = NULL;
  rc = 0;
out:
  if (rc && !copy) ah_log(AH_LOG_ERROR, "path catalog %s: out of memory", origin);
  free(copy);
  ah_path_catalog_free(c);
  return rc;
}

int ah_path_catalog_load(const char *path, ah_path_catalog_t **catalog_p) {
  char *text = ah_path_text_read(path, "path catalog");
  if (!text) return -1;
  int rc = ah_path_catalog_parse(text, path, catalog_p);
  free(text);
  return rc;
}

uint16_t ah_path_catalog_port(const ah_path_catalog_t *c, const char *dev, const uint8_t *sgid,
                              const uint8_t dgid[16], unsigned k) {
  const cat_entry_t *wild = NULL;
  for (int i = 0; c && i < c->n; i++) {
    const cat_entry_t *e = &c->e[i];
    if (memcmp(e->dgid, dgid, 16) != 0 || e->nports == 0) continue;
    if (strcmp(e->src, "*") == 0) {
      if (!wild) wild = e;
      continue;
    }
    int match = e->src_is_gid ? (sgid && memcmp(e->sgid, sgid, 16) == 0)
                              : (dev && strcmp(e->src, dev) == 0);
    if (match) return e->ports[k % (unsigned)e->nports];
  }
  return wild ? wild->ports[k % (unsigned)wild->nports] : 0;
}

/* ---- runtime policy --------------------------------------------------------------------------- */

typedef struct {
  char dev[AH_PATH_NAME_MAX];
  int port;
  uint8_t dgid[16];
  int receiver; /* the two ends of a connection count their QPs apart */
} pair_key_t;

typedef struct {
  pair_key_t key;
  unsigned next; /* QPs of this pair seen so far */
  UT_hash_handle hh;
} pair_t;

struct ah_path_policy {
  int active;
  int mode, method;
  int tc, tc_is_dscp; /* tc -1: keep NCCL's */
  char host[AH_PATH_NAME_MAX];
  ah_path_catalog_t *catalog;
  ah_path_topo_t *topo;
  ah_path_flow_t *flows;
  ah_path_route_t *routes;
  int nflows, local_host;
  pthread_mutex_t lock;
  pair_t *pairs;
};

static void policy_load_plan(ah_path_policy_t *p, const char *topo_path) {
  if (!topo_path || !*topo_path) {
    ah_log(AH_LOG_ERROR,
           "AUTOHA_QP_SPORT=plan needs AUTOHA_QP_TOPO=PATH (a topology file); "
           "leaving source ports as NCCL sets them");
    p->mode = AH_PATH_SPORT_OFF;
    return;
  }
  if (ah_path_topo_load(topo_path, &p->topo)) {
    p->mode = AH_PATH_SPORT_OFF;
    return;
  }
  p->local_host = -1;
  for (int i = 0; i < p->topo->nhosts; i++)
    if (strcmp(p->topo->hosts[i].name, p->host) == 0) p->local_host = i;
  int n = ah_path_topo_flows(p->topo, &p->flows);
  if (n >= 0) {
    p->nflows = n;
    p->routes = calloc((size_t)(n ? n : 1), sizeof *p->routes);
  }
  if (n < 0 || !p->routes || ah_path_plan(p->topo, p->flows, n, p->routes)) {
    ah_log(AH_LOG_ERROR, "path plan for %s: out of memory; leaving source ports as NCCL sets them",
           topo_path);
    p->mode = AH_PATH_SPORT_OFF;
    return;
  }
  if (p->local_host < 0)
    ah_log(AH_LOG_INFO,
           "host '%s' is not in topology %s: its QPs are matched by their local address "
           "(spread ports where that fails)",
           p->host, topo_path);
}

ah_path_policy_t *ah_path_policy_create(const ah_path_settings_t *s) {
  ah_path_policy_t *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  pthread_mutex_init(&p->lock, NULL);
  p->tc = -1;
  p->mode = AH_PATH_SPORT_OFF;
  snprintf(p->host, sizeof p->host, "%s", s->host ? s->host : "");
  if (!s->on) return p; /* active stays 0: pure pass-through */
  p->active = 1;
  p->method = s->method == AH_PATH_METHOD_MLX5DV ? AH_PATH_METHOD_MLX5DV : AH_PATH_METHOD_LABEL;
  p->tc = s->tc >= 0 && s->tc <= (s->tc_is_dscp ? 63 : 255) ? s->tc : -1;
  p->tc_is_dscp = p->tc >= 0 && s->tc_is_dscp;
  p->mode = AH_PATH_SPORT_OFF;
  if (s->sport == AH_PATH_SPORT_SPREAD) {
    p->mode = AH_PATH_SPORT_SPREAD;
  } else if (s->sport == AH_PATH_SPORT_FILE && s->sport_file && *s->sport_file) {
    p->mode =
        ah_path_catalog_load(s->sport_file, &p->catalog) ? AH_PATH_SPORT_OFF : AH_PATH_SPORT_FILE;
  } else if (s->sport == AH_PATH_SPORT_PLAN) {
    p->mode = AH_PATH_SPORT_PLAN;
    policy_load_plan(p, s->topo);
  }
  if (p->mode == AH_PATH_SPORT_OFF && p->tc < 0) p->active = 0;
  return p;
}

void ah_path_policy_free(ah_path_policy_t *p) {
  if (!p) return;
  pair_t *e, *tmp;
  HASH_ITER(hh, p->pairs, e, tmp) {
    HASH_DEL(p->pairs, e);
    free(e);
  }
  ah_path_catalog_free(p->catalog);
  ah_path_topo_free(p->topo);
  free(p->flows);
  free(p->routes);
  pthread_mutex_destroy(&p->lock);
  free(p);
}

int ah_path_policy_active(const ah_path_policy_t *p) { return p && p->active; }
int ah_path_policy_sport_mode(const ah_path_policy_t *p) {
  return p && p->active ? p->mode : AH_PATH_SPORT_OFF;
}
int ah_path_policy_method(const ah_path_policy_t *p) {
  return p ? p->method : AH_PATH_METHOD_LABEL;
}

/* Finds the host and NIC owning `gid` in the topology; returns 0 when found. */
static int topo_find_gid(const ah_path_topo_t *t, const uint8_t gid[16], int *host_p, int *nic_p) {
  for (int h = 0; h < t->nhosts; h++)
    for (int n = 0; n < t->hosts[h].nnics; n++)
      if (memcmp(t->hosts[h].gid[n], gid, 16) == 0) return *host_p = h, *nic_p = n, 0;
  return -1;
}

int ah_path_policy_qp_tc(const ah_path_policy_t *p, const ah_path_qp_t *qp, uint8_t tc) {
  if (!p || !p->active) return -1;
  if (p->tc >= 0 || p->mode != AH_PATH_SPORT_PLAN || !p->topo || !p->topo->nclasses)
    return ah_path_policy_tc(p, tc);
  int host = p->local_host, nic;
  if (qp && qp->has_sgid) topo_find_gid(p->topo, qp->sgid, &host, &nic);
  for (int j = 0; host >= 0 && j < p->topo->njobs; j++)
    for (int i = 0; i < p->topo->jobs[j].nhosts; i++)
      if (p->topo->jobs[j].hosts[i] == host) {
        int c = ah_path_job_class(p->topo, j);
        return p->topo->class_dscp[c] ? ah_path_tc_with_dscp(tc, (unsigned)p->topo->class_tc[c])
                                      : p->topo->class_tc[c];
      }
  return -1;
}

int ah_path_policy_tc(const ah_path_policy_t *p, uint8_t tc) {
  if (!p || !p->active || p->tc < 0) return -1;
  return p->tc_is_dscp ? ah_path_tc_with_dscp(tc, (unsigned)p->tc) : p->tc;
}

int ah_path_policy_config_tc(const ah_path_policy_t *p) {
  if (!p || !p->active || p->tc < 0) return -1;
  return p->tc_is_dscp ? p->tc << 2 : p->tc;
}

static uint16_t plan_port(const ah_path_policy_t *p, const ah_path_qp_t *qp, unsigned k) {
  const ah_path_topo_t *t = p->topo;
  int sh = p->local_host, sn = -1, dh, dn;
  if (topo_find_gid(t, qp->dgid, &dh, &dn)) return 0;
  if (!qp->has_sgid || topo_find_gid(t, qp->sgid, &sh, &sn)) { /* else: by host name and device */
    if (sh < 0) return 0;
    for (int n = 0; n < t->hosts[sh].nnics; n++)
      if (qp->dev && strcmp(t->hosts[sh].dev[n], qp->dev) == 0) sn = n;
  }
  if (sn < 0) return 0;
  for (int i = 0; i < p->nflows; i++) {
    const ah_path_flow_t *f = &p->flows[i];
    if (f->shost == sh && f->snic == sn && f->dhost == dh && f->dnic == dn && f->k == (int)k)
      return p->routes[i].sport;
  }
  return 0;
}

uint16_t ah_path_policy_sport(ah_path_policy_t *p, const ah_path_qp_t *qp) {
  if (!p || !p->active || p->mode == AH_PATH_SPORT_OFF) return 0;
  pair_key_t key;
  memset(&key, 0, sizeof key);
  snprintf(key.dev, sizeof key.dev, "%s", qp->dev ? qp->dev : "");
  key.port = qp->port;
  memcpy(key.dgid, qp->dgid, 16);
  key.receiver = qp->receiver;
  unsigned k = 0;
  pthread_mutex_lock(&p->lock);
  pair_t *e = NULL;
  HASH_FIND(hh, p->pairs, &key, sizeof key, e);
  if (!e && (e = calloc(1, sizeof *e)) != NULL) {
    e->key = key;
    HASH_ADD(hh, p->pairs, key, sizeof key, e);
    if (!AH_HASH_ADDED(e)) { /* out of memory: this pair's QPs all count as its first */
      free(e);
      e = NULL;
    }
  }
  if (e) k = e->next++;
  pthread_mutex_unlock(&p->lock);

  uint16_t port = 0;
  if (p->mode == AH_PATH_SPORT_FILE)
    port = ah_path_catalog_port(p->catalog, qp->dev, qp->has_sgid ? qp->sgid : NULL, qp->dgid, k);
  else if (p->mode == AH_PATH_SPORT_PLAN && !qp->receiver) port = plan_port(p, qp, k);
  if (port == 0 && p->mode != AH_PATH_SPORT_FILE) {
    /* spread, and plan's fallback for a QP the plan does not know */
    uint32_t h = ~0u;
    h = ah_path_crc32_update(h, (const uint8_t *)p->host, strlen(p->host));
    h = ah_path_crc32_update(h, (const uint8_t *)&key, sizeof key);
    if (qp->has_sgid) h = ah_path_crc32_update(h, qp->sgid, 16);
    port = ah_path_spread_port(~h, k);
  }
  return port;
}
