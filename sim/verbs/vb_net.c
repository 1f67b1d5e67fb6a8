/* vb_net.c: the fabric as the provider sees it — how many NICs a node has, their ports, speed and
 * link layer, the GID of a port, and whether a flow's path and a port are up right now.
 *
 * With sim/fabric's library (VB_HAVE_FABRIC) every answer comes from ncclsim_fabric built from
 * NCCLSIM_TOPO/NCCLSIM_FABRIC, attached to the job's shared link state and fault schedule.
 * Without it, NICs and speed come from NCCLSIM_TOPO through sim/model's parser, the GID follows
 * sim_fabric.h's documented addressing, and no link ever fails. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vb_internal.h"

#ifdef VB_HAVE_FABRIC
static sim_fabric_t *fabric;
static double epoch;
#else
#include "sim_model.h"
static int nics = 8;
static double gbps = 400;
#endif
static pthread_mutex_t net_lock = PTHREAD_MUTEX_INITIALIZER;
static int net_state; /* 0 not tried, 1 ready, -1 failed */
static char net_err[256];

int vb_net_init(char *err, size_t errlen) {
  pthread_mutex_lock(&net_lock);
  if (net_state == 0) {
    const char *topo = getenv("NCCLSIM_TOPO");
    if (!topo || !*topo) topo = "nodes=1,gpus=8,gpu=h100,nic=8x400";
    net_state = -1;
#ifdef VB_HAVE_FABRIC
    char e[256] = "";
    fabric = sim_fabric_create(topo, getenv("NCCLSIM_FABRIC"), vb_settings()->node + 1, e, sizeof e);
    if (!fabric) {
      snprintf(net_err, sizeof net_err, "NCCLSIM_TOPO/NCCLSIM_FABRIC: %s", e);
    } else {
      char shm[160];
      const char *faults = getenv("NCCLSIM_FABRIC_FAULTS");
      snprintf(shm, sizeof shm, "%sfabric", vb_settings()->prefix);
      if (sim_fabric_attach(fabric, shm, e, sizeof e) != 0)
        snprintf(net_err, sizeof net_err, "fabric state %s: %s", shm, e);
      else if (faults && *faults && sim_fabric_schedule(fabric, faults, e, sizeof e) != 0)
        snprintf(net_err, sizeof net_err, "NCCLSIM_FABRIC_FAULTS: %s", e);
      else
        net_state = 1;
      epoch = vb_now();
    }
#else
    sim_topo_t t;
    char e[256] = "";
    if (sim_topo_parse(topo, 0, &t, e, sizeof e) != 0) {
      snprintf(net_err, sizeof net_err, "NCCLSIM_TOPO: %s", e);
    } else {
      nics = t.nic_count > 0 ? t.nic_count : 1;
      gbps = t.nic_gbps / 0.12; /* sim/model keeps achieved GB/s: 0.12 x line rate */
      net_state = 1;
    }
#endif
    if (net_state < 0) vb_log("%s: no devices", net_err);
  }
  int rc = net_state > 0 ? 0 : -1;
  if (rc && err) snprintf(err, errlen, "%s", net_err);
  pthread_mutex_unlock(&net_lock);
  return rc;
}

#ifdef VB_HAVE_FABRIC
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
  return sim_fabric_path_up(fabric, flow, vb_now() - epoch, 0);
}
/* A port is up when the first link of its route to any other node's NIC (the port's own cable
 * to its leaf) is. */
int vb_net_port_up(int node, int nic, int port) {
  sim_fabric_flow_t fl = {{node, nic, port}, {node + 1, nic, port}, 0, 0};
  int links[8];
  if (sim_fabric_route(fabric, &fl, links, 8) < 1) return 1;
  return sim_fabric_link_fraction(fabric, links[0], vb_now() - epoch, 0) > 0;
}
#else
int vb_net_nics(void) { return nics; }
int vb_net_ports(void) { return 1; }
int vb_net_is_ib(void) { return 0; }
double vb_net_port_gbps(void) { return gbps; }
void vb_net_gid(int node, int nic, int port, uint8_t gid[16]) {
  memset(gid, 0, 16);
  gid[10] = gid[11] = 0xff;
  gid[12] = 10;
  gid[13] = (uint8_t)(node >> 8);
  gid[14] = (uint8_t)(node & 255);
  gid[15] = (uint8_t)(nic * 4 + port);
}
int vb_net_gid_ep(const uint8_t gid[16], sim_fabric_ep_t *ep_p) {
  static const uint8_t head[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (memcmp(gid, head, 12) != 0 || gid[12] != 10 || (gid[15] & 3) == 0) return -1;
  ep_p->node = gid[13] << 8 | gid[14];
  ep_p->nic = gid[15] >> 2;
  ep_p->port = gid[15] & 3;
  return ep_p->nic < nics && ep_p->port <= 1 ? 0 : -1;
}
uint16_t vb_net_sport(uint32_t flow_label, uint32_t lqpn, uint32_t rqpn) {
  uint32_t fl = flow_label ? flow_label : (lqpn * rqpn) ^ (lqpn >> 12) ^ rqpn;
  return (uint16_t)(0xC000 | ((fl ^ (fl >> 14)) & 0x3fff));
}
int vb_net_path_up(const sim_fabric_flow_t *flow) { return 1; }
int vb_net_port_up(int node, int nic, int port) { return 1; }
#endif
