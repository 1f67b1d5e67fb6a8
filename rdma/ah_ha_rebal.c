/* ah_ha_rebal.c: the rebalance after failovers (ah_ha_rebal.h, docs/ha.md "Rebalance"): mapping a
 * queue pair to its planned flow, the links a failed primary crossed, and the re-plan with its
 * model figures.
 *
 * The key choice: a queue pair is found by its planned port, not by the order NCCL connected, so
 * the mapping needs nothing but the port the hook gave it (AUTOHA_QP_SPORT=plan). */
#include <string.h>

#include "ah_ha_rebal.h"

/* Finds the host and NIC owning gid; returns 0 when found. */
static int find_gid(const ah_path_topo_t *t, const uint8_t gid[16], int *host_p, int *nic_p) {
  for (int h = 0; h < t->nhosts; h++)
    for (int n = 0; n < t->hosts[h].nnics; n++)
      if (memcmp(t->hosts[h].gid[n], gid, 16) == 0) return *host_p = h, *nic_p = n, 0;
  return -1;
}

int ah_ha_rebal_flow(const ah_path_topo_t *t, const ah_path_flow_t *flows,
                     const ah_path_route_t *plan, int nflows, const uint8_t sgid[16],
                     const uint8_t dgid[16], uint16_t sport, const unsigned char *taken) {
  int sh, sn, dh, dn;
  if (!t || !sport || find_gid(t, sgid, &sh, &sn) || find_gid(t, dgid, &dh, &dn)) return -1;
  for (int i = 0; i < nflows; i++) {
    const ah_path_flow_t *f = &flows[i];
    if (f->shost == sh && f->snic == sn && f->dhost == dh && f->dnic == dn &&
        plan[i].sport == sport && !(taken && taken[i]))
      return i;
  }
  return -1;
}

int ah_ha_rebal_suspects(const ah_path_topo_t *t, const ah_path_flow_t *f, uint16_t sport,
                         ah_path_link_state_t out[2]) {
  int side, spine, rx;
  ah_path_model_route(t, f, sport, &side, &spine, &rx);
  int sp = t->hosts[f->shost].pair, dp = t->hosts[f->dhost].pair;
  if (sp == dp || spine < 0) return 0; /* under one leaf pair: no leaf–spine link */
  int n = 0;
  out[n++] = (ah_path_link_state_t){2 * sp + side, spine, 0.0};
  if (rx >= 0) out[n++] = (ah_path_link_state_t){2 * dp + rx, spine, 0.0};
  return n;
}

int ah_ha_rebal_flow_by_gids(const ah_path_topo_t *t, const uint8_t sgid[16],
                             const uint8_t dgid[16], ah_path_flow_t *out) {
  memset(out, 0, sizeof *out);
  out->job = -1;
  return t && find_gid(t, sgid, &out->shost, &out->snic) == 0 &&
                 find_gid(t, dgid, &out->dhost, &out->dnic) == 0
             ? 0
             : -1;
}

/* 1 when link (leaf, spine) is in links[] below full capacity. */
static int link_bad(const ah_path_link_state_t *links, int n, int leaf, int spine) {
  for (int i = 0; i < n; i++)
    if (links[i].leaf == leaf && links[i].spine == spine && links[i].fraction < 1) return 1;
  return 0;
}

uint16_t ah_ha_rebal_clear_sport(const ah_path_topo_t *t, const ah_path_flow_t *f,
                                 const ah_path_link_state_t *links, int nlinks, uint16_t start,
                                 uint16_t avoid) {
  if (t->hosts[f->shost].pair == t->hosts[f->dhost].pair) return 0;
  uint16_t p = (uint16_t)(0xC000 | (start & 0x3FFF));
  for (int i = 0; i < 4096; i++, p = (uint16_t)(0xC000 | ((p + 1) & 0x3FFF))) {
    if (p == avoid) continue;
    ah_path_link_state_t l[2];
    int n = ah_ha_rebal_suspects(t, f, p, l), bad = 0;
    for (int j = 0; j < n && !bad; j++) bad = link_bad(links, nlinks, l[j].leaf, l[j].spine);
    if (n > 0 && !bad) return p;
  }
  return 0;
}

int ah_ha_rebal_plan(const ah_path_topo_t *t, const ah_path_flow_t *flows,
                     const ah_path_route_t *plan, int nflows, const ah_path_link_state_t *links,
                     int nlinks, ah_path_route_t *routes, unsigned char *moved,
                     ah_ha_rebal_result_t *res) {
  memset(res, 0, sizeof *res);
  memcpy(routes, plan, (size_t)nflows * sizeof *routes);
  res->before = ah_path_replan_share(t, flows, nflows, links, nlinks, NULL, routes);
  int m = ah_path_replan(t, flows, nflows, links, nlinks, NULL, routes, moved);
  if (m < 0 || res->before < 0) return -1;
  res->moved = m;
  res->share = ah_path_replan_share(t, flows, nflows, links, nlinks, NULL, routes);
  res->bound = ah_path_replan_bound(t, flows, nflows, links, nlinks, NULL);
  return res->share < 0 || res->bound < 0 ? -1 : 0;
}
