/* sim_fabric_build.c: builds a fabric from NCCLSIM_TOPO (NICs per node, line rate, ports, link
 * layer, through sim/model's parser so both read the same spec the same way) and NCCLSIM_FABRIC
 * (the leaf-spine's size, speed, seeds, scheduler, latencies; grammar in docs/sim-fabric.md).
 *
 * The key choice: the defaults make a 1:1 fabric with one node per leaf pair, so every inter-node
 * flow crosses a spine and ECMP matters; a spec names only what differs, and every item is checked
 * strictly, an error quoting the item. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "sim_fabric_internal.h"
#include "sim_model.h"

/* Spec values as written (0 or negative: not given). */
typedef struct {
  long spines, pairs, hostsperpair, bond, planes;
  double oversub, upgbps;
  char *fail; /* the text of fail=, applied once the size is known */
} spec_t;

static const char *const EXPECTED =
    "spines=N, pairs=N, hostsperpair=N, oversub=X, upgbps=G, seeds=LEAF:SPINE:LAG, "
    "sched=strict[:DSCP/...]|wrr:DSCP=W/..., lat=HOST_US:SPINE_US, bond=0|1, reroute=0|1, "
    "planes=1|2 (ib=1 only), fail=LEAF-SPINE/...";

/* Parses sched=...; returns 0 or -1. */
static int parse_sched(sim_fabric_t *f, const char *v) {
  for (int d = 0; d < 64; d++) {
    f->rank[d] = 64 + (63 - d); /* unlisted DSCPs: after the listed ones, higher DSCP first */
    f->weight[d] = 1.0;
  }
  if (strcasecmp(v, "strict") == 0 || strcasecmp(v, "wrr") == 0) {
    f->sched = strcasecmp(v, "wrr") == 0 ? SIM_FABRIC_SCHED_WRR : SIM_FABRIC_SCHED_STRICT;
    return 0;
  }
  int wrr = strncasecmp(v, "wrr:", 4) == 0;
  if (!wrr && strncasecmp(v, "strict:", 7) != 0) return -1;
  f->sched = wrr ? SIM_FABRIC_SCHED_WRR : SIM_FABRIC_SCHED_STRICT;
  char buf[256];
  if (snprintf(buf, sizeof buf, "%s", v + (wrr ? 4 : 7)) >= (int)sizeof buf) return -1;
  int n = 0;
  char *save = NULL;
  for (char *t = strtok_r(buf, "/", &save); t; t = strtok_r(NULL, "/", &save), n++) {
    long dscp;
    double w;
    char *eq = strchr(t, '=');
    if (wrr) {
      if (!eq) return -1;
      *eq = '\0';
      if (sim_fabric_parse_double(eq + 1, 1e-9, 1e9, &w)) return -1;
      if (strcmp(t, "*") == 0) {
        for (int d = 0; d < 64; d++) f->weight[d] = w;
        continue;
      }
      if (sim_fabric_parse_long(t, 0, 63, &dscp)) return -1;
      f->weight[dscp] = w;
    } else {
      if (eq || sim_fabric_parse_long(t, 0, 63, &dscp) || f->rank[dscp] < 64) return -1;
      f->rank[dscp] = n;
    }
  }
  return n ? 0 : -1;
}

/* Applies one "key=value" item; returns 0 or -1. */
static int apply(sim_fabric_t *f, spec_t *s, char *item) {
  char *v = strchr(item, '=');
  if (!v) return -1;
  *v++ = '\0';
  int rc = -1;
  long x;
  if (strcasecmp(item, "spines") == 0)
    rc = sim_fabric_parse_long(v, 1, SIM_FABRIC_MAX_SPINES, &s->spines);
  else if (strcasecmp(item, "pairs") == 0)
    rc = sim_fabric_parse_long(v, 1, SIM_FABRIC_MAX_PAIRS, &s->pairs);
  else if (strcasecmp(item, "hostsperpair") == 0)
    rc = sim_fabric_parse_long(v, 1, 4096, &s->hostsperpair);
  else if (strcasecmp(item, "oversub") == 0)
    rc = sim_fabric_parse_double(v, 1e-3, 1e3, &s->oversub);
  else if (strcasecmp(item, "upgbps") == 0) rc = sim_fabric_parse_double(v, 1e-3, 1e6, &s->upgbps);
  else if (strcasecmp(item, "bond") == 0) rc = sim_fabric_parse_long(v, 0, 1, &s->bond);
  else if (strcasecmp(item, "planes") == 0) rc = sim_fabric_parse_long(v, 1, 2, &s->planes);
  else if (strcasecmp(item, "sched") == 0) rc = parse_sched(f, v);
  else if (strcasecmp(item, "reroute") == 0) {
    rc = sim_fabric_parse_long(v, 0, 1, &x);
    f->reroute = (int)x;
  } else if (strcasecmp(item, "seeds") == 0) {
    long sd[3];
    char *a = v, *b = strchr(a, ':'), *c = b ? strchr(b + 1, ':') : NULL;
    if (!b || !c) return -1;
    *b++ = '\0';
    *c++ = '\0';
    if (sim_fabric_parse_long(a, 0, 0xFFFFFFFFL, &sd[0]) ||
        sim_fabric_parse_long(b, 0, 0xFFFFFFFFL, &sd[1]) ||
        sim_fabric_parse_long(c, 0, 0xFFFFFFFFL, &sd[2]))
      return -1;
    f->seed_leaf = (uint32_t)sd[0];
    f->seed_spine = (uint32_t)sd[1];
    f->seed_lag = (uint32_t)sd[2];
    rc = 0;
  } else if (strcasecmp(item, "lat") == 0) {
    char *b = strchr(v, ':');
    if (!b) return -1;
    *b++ = '\0';
    rc = sim_fabric_parse_double(v, 0, 1e6, &f->host_lat_us) ||
         sim_fabric_parse_double(b, 0, 1e6, &f->spine_lat_us);
  } else if (strcasecmp(item, "fail") == 0) {
    free(s->fail);
    s->fail = strdup(v);
    rc = s->fail ? 0 : -1;
  }
  return rc ? -1 : 0;
}

/* Sizes the fabric from the spec and the NICs; returns 0 or -1 with err. */
static int size_fabric(sim_fabric_t *f, const spec_t *s, char *err, size_t errlen) {
  f->hostsperpair = s->hostsperpair > 0 ? (int)s->hostsperpair : 1;
  int need = (f->nnodes + f->hostsperpair - 1) / f->hostsperpair;
  f->npairs = s->pairs > 0 ? (int)s->pairs : need;
  if (f->npairs < need) {
    snprintf(
        err, errlen,
        "NCCLSIM_FABRIC: pairs=%d with hostsperpair=%d holds %d nodes, fewer than the job's %d",
        f->npairs, f->hostsperpair, f->npairs * f->hostsperpair, f->nnodes);
    return -1;
  }
  /* Downlink line rate of the busiest leaf: a dual-port NIC has a port on each leaf of its pair,
   * single-port NICs alternate between the two. */
  int per_leaf = f->ports == 2 ? f->nics : (f->nics + 1) / 2;
  double down = (double)f->hostsperpair * per_leaf * f->port_gbps;
  int given = (s->spines > 0) + (s->oversub > 0) + (s->upgbps > 0);
  if (given == 3) {
    snprintf(err, errlen,
             "NCCLSIM_FABRIC: give at most two of spines, oversub and upgbps (the third follows)");
    return -1;
  }
  /* Two of (spines, oversub, upgbps) fix the third; with oversub alone the spine count is the
   * smallest at port speed and the uplinks slow down so the ratio is exactly the one asked. */
  double oversub = s->oversub > 0 ? s->oversub : 1.0;
  double up = s->upgbps > 0 ? s->upgbps : f->port_gbps;
  f->nspines = s->spines > 0 ? (int)s->spines : (int)ceil(down / (oversub * up) - 1e-9);
  if (f->nspines < 1) f->nspines = 1;
  if (f->planes == 2 && f->nspines % 2) {
    if (s->spines > 0) {
      snprintf(err, errlen, "NCCLSIM_FABRIC: planes=2 needs an even spine count, not spines=%ld",
               s->spines);
      return -1;
    }
    f->nspines++; /* each plane gets half; one more keeps its share of the uplinks */
  }
  f->up_gbps = s->oversub > 0 && !(s->upgbps > 0) ? down / (oversub * f->nspines) : up;
  if (f->nspines < 1 || f->nspines > SIM_FABRIC_MAX_SPINES) {
    snprintf(err, errlen,
             "NCCLSIM_FABRIC: the fabric needs %d spines (1-%d allowed): raise oversub or upgbps",
             f->nspines, SIM_FABRIC_MAX_SPINES);
    return -1;
  }
  return 0;
}

/* Marks the links of fail=LEAF-SPINE/... ; returns 0 or -1 with err. */
static int apply_fail(sim_fabric_t *f, const char *text, char *err, size_t errlen) {
  char buf[1024];
  if (snprintf(buf, sizeof buf, "%s", text) >= (int)sizeof buf) goto bad;
  char *save = NULL;
  for (char *t = strtok_r(buf, "/", &save); t; t = strtok_r(NULL, "/", &save)) {
    long leaf, spine;
    char *dash = strchr(t, '-');
    if (!dash) goto bad;
    *dash = '\0';
    if (sim_fabric_parse_long(t, 0, 2L * f->npairs - 1, &leaf) ||
        sim_fabric_parse_long(dash + 1, 0, f->nspines - 1, &spine))
      goto bad;
    f->failed[sim_fabric_spine_link(f, (int)leaf, (int)spine, 0)] = 1;
    f->failed[sim_fabric_spine_link(f, (int)leaf, (int)spine, 1)] = 1;
  }
  return 0;
bad:
  snprintf(err, errlen,
           "NCCLSIM_FABRIC: invalid item 'fail=%s' (expected fail=LEAF-SPINE[/LEAF-SPINE...], "
           "leaves 0-%d, spines 0-%d)",
           text, 2 * f->npairs - 1, f->nspines - 1);
  return -1;
}

sim_fabric_t *sim_fabric_create(const char *topo_spec, const char *fabric_spec, int nnodes,
                                char *err, size_t errlen) {
  sim_topo_t topo;
  spec_t s = {.bond = -1, .planes = 1};
  char *text = NULL;
  if (errlen) err[0] = '\0';
  if (sim_topo_parse(topo_spec, 0, &topo, err, errlen)) return NULL;
  sim_fabric_t *f = calloc(1, sizeof *f);
  if (!f) goto oom;
  f->nnodes = nnodes > 0 ? nnodes : topo.nnodes;
  f->nics = topo.nic_count;
  f->ports = topo.nic_ports == 2 ? 2 : 1;
  f->port_gbps = topo.nic_line_gbps;
  f->ib = topo.ib;
  f->seed_leaf = 1;
  f->seed_spine = 2;
  f->seed_lag = 3;
  f->host_lat_us = f->spine_lat_us = 0.5;
  parse_sched(f, "strict");
  /* an IB subnet manager re-sweeps on a link's trap and reprograms the forwarding tables around it;
   * RoCE's switches here keep hashing onto a dead link (reroute=0) unless told */
  f->reroute = f->ib;
  if (f->nnodes > 65535 || f->nics > 63) {
    snprintf(err, errlen,
             "fabric: %d nodes of %d NICs do not fit the addressing (at most 65535 nodes, 63 NICs)",
             f->nnodes, f->nics);
    goto fail;
  }
  text = strdup(fabric_spec ? fabric_spec : "");
  if (!text) goto oom;
  char *save = NULL;
  for (char *item = strtok_r(text, ", \t\r\n", &save); item;
       item = strtok_r(NULL, ", \t\r\n", &save)) {
    char quoted[256];
    snprintf(quoted, sizeof quoted, "%s", item);
    if (apply(f, &s, item)) {
      snprintf(err, errlen, "NCCLSIM_FABRIC: invalid item '%s' (expected %s)", quoted, EXPECTED);
      goto fail;
    }
  }
  /* InfiniBand has no link aggregation: each port of a dual-port HCA is its own verbs port and LID */
  if (f->ib && s.bond == 1) {
    snprintf(err, errlen, "NCCLSIM_FABRIC: bond=1 is RoCE's link aggregation; ib=1 has none");
    goto fail;
  }
  if (!f->ib && s.planes == 2) {
    snprintf(err, errlen,
             "NCCLSIM_FABRIC: planes=2 is an InfiniBand subnet's (ib=1 in NCCLSIM_TOPO)");
    goto fail;
  }
  f->planes = (int)s.planes;
  f->bond = f->ports == 2 && s.bond != 0 && !f->ib;
  if (size_fabric(f, &s, err, errlen)) goto fail;
  f->nport_links = 2 * f->nnodes * f->nics * f->ports;
  f->nlinks = f->nport_links + 2 * (2 * f->npairs) * f->nspines;
  if (f->ib && sim_fabric_lid_count(f) > 0xBFFF) {
    snprintf(err, errlen, "fabric: %d LIDs needed, more than InfiniBand's 49151 unicast LIDs",
             sim_fabric_lid_count(f));
    goto fail;
  }
  f->failed = calloc((size_t)f->nlinks, 1);
  f->private_fraction = malloc((size_t)f->nlinks * sizeof *f->private_fraction);
  if (!f->failed || !f->private_fraction) goto oom;
  for (int l = 0; l < f->nlinks; l++) sim_fabric_store_fraction(&f->private_fraction[l], 1.0);
  f->fraction = f->private_fraction;
  f->epoch_ns = sim_fabric_now_ns();
  if (s.fail && apply_fail(f, s.fail, err, errlen)) goto fail;
  free(s.fail);
  free(text);
  return f;
oom:
  snprintf(err, errlen, "fabric: out of memory");
fail:
  free(s.fail);
  free(text);
  sim_fabric_free(f);
  return NULL;
}

void sim_fabric_free(sim_fabric_t *f) {
  if (!f) return;
  sim_fabric_detach(f);
  free(f->events);
  free(f->failed);
  free(f->private_fraction);
  free(f);
}

int sim_fabric_nics(const sim_fabric_t *f) { return f->nics; }
int sim_fabric_ports(const sim_fabric_t *f) { return f->ports; }
int sim_fabric_is_ib(const sim_fabric_t *f) { return f->ib; }
double sim_fabric_port_gbps(const sim_fabric_t *f) { return f->port_gbps; }
int sim_fabric_nodes(const sim_fabric_t *f) { return f->nnodes; }
int sim_fabric_leaves(const sim_fabric_t *f) { return 2 * f->npairs; }
int sim_fabric_spines(const sim_fabric_t *f) { return f->nspines; }
int sim_fabric_link_count(const sim_fabric_t *f) { return f->nlinks; }
