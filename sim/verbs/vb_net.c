/* vb_net.c: the fabric as the provider sees it — how many NICs a node has, their ports, speed and
 * link layer, the GID of a port, and whether a flow's path and a port are up right now.
 * Every answer comes from sim/fabric (ncclsim_fabric, linked statically), the job's fabric. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vb_internal.h"

static sim_fabric_t *fabric;
static pthread_mutex_t net_lock = PTHREAD_MUTEX_INITIALIZER;
static int net_state; /* 0 not tried, 1 ready, -1 failed */
static char net_err[256];

int vb_net_init(char *err, size_t errlen) {
  pthread_mutex_lock(&net_lock);
  if (net_state == 0) {
    /* The job's fabric, built as every other process of the job (and sim/'s libnccl) builds it:
     * NCCLSIM_NODES nodes (what ncclsim-run --nodes sets; at least this node's), the shared link
     * state when the job has a prefix of its own, NCCLSIM_FABRIC_FAULTS. */
    const char *ns = getenv("NCCLSIM_NODES");
    int nodes = ns && *ns ? atoi(ns) : 0;
    if (nodes <= vb_settings()->node) nodes = vb_settings()->node + 1;
    char e[256] = "";
    fabric = sim_fabric_job(nodes, e, sizeof e);
    net_state = fabric ? 1 : -1;
    if (!fabric) {
      snprintf(net_err, sizeof net_err, "%s", e);
      vb_log("%s: no devices", net_err);
    }
  }
  int rc = net_state > 0 ? 0 : -1;
  if (rc && err) snprintf(err, errlen, "%s", net_err);
  pthread_mutex_unlock(&net_lock);
  return rc;
}

int vb_net_nics(void) { return sim_fabric_nics(fabric); }
int vb_net_ports(void) { return sim_fabric_ports(fabric); }
int vb_net_is_ib(void) { return sim_fabric_is_ib(fabric); }
double vb_net_port_gbps(void) { return sim_fabric_port_gbps(fabric); }
void vb_net_gid(int node, int nic, int port, uint8_t gid[16]) {
  sim_fabric_ep_t ep = {node, nic, port};
  sim_fabric_gid(ep, gid);
}
int vb_net_gid_ep(const uint8_t gid[16], sim_fabric_ep_t *ep_p) { return sim_fabric_gid_ep(gid, ep_p); }
uint16_t vb_net_sport(uint32_t flow_label, uint32_t lqpn, uint32_t rqpn) {
  return sim_fabric_sport(flow_label, lqpn, rqpn);
}
int vb_net_path_up(const sim_fabric_flow_t *flow) {
  return sim_fabric_path_up(fabric, flow, sim_fabric_wall_s(fabric), 0);
}
/* A port is up when the first link of its route to any other node's NIC (the port's own cable
 * to its leaf) is. */
int vb_net_port_up(int node, int nic, int port) {
  sim_fabric_flow_t fl = {{node, nic, port}, {node + 1, nic, port}, 0, 0};
  int links[8];
  if (sim_fabric_route(fabric, &fl, links, 8) < 1) return 1;
  return sim_fabric_link_fraction(fabric, links[0], sim_fabric_wall_s(fabric), 0) > 0;
}

