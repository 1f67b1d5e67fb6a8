/* ah_ha_rebal.h: the rebalance after failovers (AUTOHA_HA=path, docs/ha.md "Rebalance"): which flow
 * of the topology's plan a queue pair carries, which leaf–spine links a failed primary's route
 * crossed, and the re-plan of the flows those links carried (ah_path_replan) with its model figures.
 *
 * Every process of a job computes the same re-plan from the same topology, plan and set of failed
 * links (shared through the coordinator hub), and applies only its own queue pairs' moves: no
 * process needs another's ports. Pure logic, like path/ (rdma/ah_ha_*.c: no verbs calls). */
#ifndef AH_HA_REBAL_H
#define AH_HA_REBAL_H

#include <stdint.h>

#include "ah_path.h"

/* The index of the flow from sgid's NIC to dgid's NIC whose planned port is `sport`, skipping
 * flows with taken[i] set (taken may be NULL), or -1 when the plan has no such flow (a GID the
 * topology does not name, or a queue pair the plan did not place). */
int ah_ha_rebal_flow(const ah_path_topo_t *topo, const ah_path_flow_t *flows,
                     const ah_path_route_t *plan, int nflows, const uint8_t sgid[16],
                     const uint8_t dgid[16], uint16_t sport, const unsigned char *taken);

/* The leaf–spine links flow f's route with `sport` crosses in the model, as down links (fraction
 * 0): the uplink at its source leaf and the downlink at its destination leaf. A failed primary does
 * not say which of them failed, so both are suspects; on a two-leaf-pair job the two carry the same
 * flows, so the re-plan is the same either way. Returns how many were written to out (0..2). */
int ah_ha_rebal_suspects(const ah_path_topo_t *topo, const ah_path_flow_t *f, uint16_t sport,
                         ah_path_link_state_t out[2]);

/* The flow from sgid's NIC to dgid's NIC, for a queue pair the plan did not place (k 0, job -1).
 * Returns 0, or -1 when the topology does not name both GIDs. */
int ah_ha_rebal_flow_by_gids(const ah_path_topo_t *topo, const uint8_t sgid[16],
                             const uint8_t dgid[16], ah_path_flow_t *out);

/* A source port for flow f whose modelled route crosses none of the links (leaf, spine) given with
 * a fraction below 1 (down or degraded), tried from `start` (0xC000..0xFFFF) on, skipping `avoid`
 * (the port in use). Returns the port, or 0 when the flow stays under one leaf pair or none of 4096
 * ports qualifies. For a queue pair the plan does not place: the re-plan cannot move it, but it can
 * leave the bad links. */
uint16_t ah_ha_rebal_clear_sport(const ah_path_topo_t *topo, const ah_path_flow_t *f,
                                 const ah_path_link_state_t *links, int nlinks, uint16_t start,
                                 uint16_t avoid);

typedef struct {
  int moved;     /* flows whose port changed, job-wide */
  double before; /* the slowest flow's modelled share with the plan's ports (0 when one is cut) */
  double share;  /* the same after the re-plan */
  double bound;  /* the best any choice of ports could give on the surviving links */
} ah_ha_rebal_result_t;

/* The re-plan: routes start as a copy of the plan and get ah_path_replan's ports for the flows the
 * links cut or slow; moved[i] = 1 for a flow whose port changed. Returns 0 and fills *res, or -1
 * when out of memory. */
int ah_ha_rebal_plan(const ah_path_topo_t *topo, const ah_path_flow_t *flows,
                     const ah_path_route_t *plan, int nflows, const ah_path_link_state_t *links,
                     int nlinks, ah_path_route_t *routes, unsigned char *moved,
                     ah_ha_rebal_result_t *res);

#endif
