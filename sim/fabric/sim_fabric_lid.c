/* sim_fabric_lid.c: the InfiniBand side of the fabric (ib=1 in NCCLSIM_TOPO) — the LIDs a subnet
 * manager gives every switch and NIC port, the port a LID names, each plane's SM, and the planes
 * themselves (planes=2 in NCCLSIM_FABRIC: two rails that share no switch).
 *
 * The key choice: one LID range for the whole fabric, swept as OpenSM sweeps a fat tree — switches
 * first (leaves, then spines), then every NIC port in (node, NIC, port) order — so a LID names one
 * port job-wide and the port a LID names is arithmetic, the same in every process. Real planes are
 * separate subnets whose SMs may hand out the same LID twice; here plane 1's SM numbers on where
 * plane 0's stopped. */
#include "sim_fabric_internal.h"

int sim_fabric_planes(const sim_fabric_t *f) { return f->planes; }

int sim_fabric_leaf_plane(const sim_fabric_t *f, int leaf) { return f->planes == 2 ? leaf % 2 : 0; }

int sim_fabric_spine_plane(const sim_fabric_t *f, int spine) {
  return f->planes == 2 ? spine % 2 : 0;
}

int sim_fabric_ep_plane(const sim_fabric_t *f, sim_fabric_ep_t ep) {
  return sim_fabric_leaf_plane(f, sim_fabric_ep_leaf(f, ep));
}

/* The first LID after the switches'. */
static int port_base(const sim_fabric_t *f) { return 1 + 2 * f->npairs + f->nspines; }

int sim_fabric_lid_count(const sim_fabric_t *f) {
  return port_base(f) - 1 + f->nnodes * f->nics * f->ports;
}

uint16_t sim_fabric_lid(const sim_fabric_t *f, sim_fabric_ep_t ep) {
  int i = sim_fabric_port_index(f, ep);
  return i < 0 ? 0 : (uint16_t)(port_base(f) + i);
}

int sim_fabric_lid_ep(const sim_fabric_t *f, uint16_t lid, sim_fabric_ep_t *ep_p) {
  int i = (int)lid - port_base(f);
  if (i < 0 || i >= f->nnodes * f->nics * f->ports) return -1;
  ep_p->port = i % f->ports + 1;
  ep_p->nic = i / f->ports % f->nics;
  ep_p->node = i / f->ports / f->nics;
  return 0;
}

uint16_t sim_fabric_sm_lid(const sim_fabric_t *f, sim_fabric_ep_t ep) {
  /* each plane's SM runs on node 0's first port in that plane */
  int plane = sim_fabric_ep_plane(f, ep);
  for (int nic = 0; nic < f->nics; nic++)
    for (int port = 1; port <= f->ports; port++) {
      sim_fabric_ep_t sm = {0, nic, port};
      if (sim_fabric_ep_plane(f, sm) == plane) return sim_fabric_lid(f, sm);
    }
  return 0;
}
