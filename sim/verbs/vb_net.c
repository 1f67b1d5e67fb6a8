/* vb_net.c: the fabric as the provider sees it — how many NICs a node has, their ports, speed and
 * link layer, the GID of a port, and whether a flow's path and a port are up right now. Every
 * answer comes from sim/fabric's model (ncclsim_fabric, linked in with hidden visibility), built
 * from NCCLSIM_TOPO/NCCLSIM_FABRIC, attached to the job's shared link state and loaded with
 * NCCLSIM_FABRIC_FAULTS, so every process of a job sees the same links go down at the same time.
 *
 * A dual-port NIC in bonded mode (the fabric's default) is one verbs port with port 1's GID, as a
 * RoCE LAG device is; it is up while either member is, and the fabric's LAG hash picks the member
 * per flow. Unbonded, each port is a verbs port with its own GID. On InfiniBand (ib=1) ports are
 * never bonded, and each also has the LID the fabric's subnet manager gave it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vb_internal.h"

static sim_fabric_t *fabric;
static int bonded;
static pthread_mutex_t net_lock = PTHREAD_MUTEX_INITIALIZER;
static int net_state; /* 0 not tried, 1 ready, -1 failed */
static char net_err[320];

int vb_net_init(char *err, size_t errlen) {
  pthread_mutex_lock(&net_lock);
  if (net_state == 0) {
    /* The job's fabric, built as every other process of the job (and sim/'s libnccl) builds it */
    char e[256] = "";
    net_state = -1;
    fabric = sim_fabric_job(vb_settings()->node, e, sizeof e);
    if (!fabric) {
      snprintf(net_err, sizeof net_err, "%s", e);
    } else {
      /* the planner's topology file describes exactly the bonded dual-port fabrics */
      bonded = sim_fabric_ports(fabric) == 2 && sim_fabric_topo_text(fabric, NULL, NULL, 0) >= 0;
      net_state = 1;
    }
    if (net_state < 0) vb_log("%s: no devices", net_err);
  }
  int rc = net_state > 0 ? 0 : -1;
  if (rc && err) snprintf(err, errlen, "%s", net_err);
  pthread_mutex_unlock(&net_lock);
  return rc;
}

int vb_net_nics(void) { return sim_fabric_nics(fabric); }
int vb_net_ports(void) { return bonded ? 1 : sim_fabric_ports(fabric); }

/* NCCLSIM_VERBS_PORTS, parsed once: shown[k] the ports NIC k shows, 0 for the fabric's. */
static int shown[64];
static pthread_once_t shown_once = PTHREAD_ONCE_INIT;
static void shown_read(void) {
  const char *s = vb_settings()->ports;
  int k = 0, v[64];
  const char *p = s;
  while (*p) {
    char *end;
    long n = strtol(p, &end, 10);
    if (end == p || (*end && *end != ',') || n < 1 || n > 2 || k >= 64) {
      vb_log(
          "invalid value for NCCLSIM_VERBS_PORTS: '%s' (expected a port count, 1 or 2, per "
          "NIC, comma-separated); every NIC shows the fabric's ports",
          s);
      return;
    }
    v[k++] = (int)n;
    p = *end ? end + 1 : end;
  }
  memcpy(shown, v, sizeof(int) * (size_t)k);
}

int vb_net_nic_ports(int nic) {
  pthread_once(&shown_once, shown_read);
  int n = vb_net_ports();
  return nic >= 0 && nic < 64 && shown[nic] && shown[nic] < n ? shown[nic] : n;
}
int vb_net_is_ib(void) { return sim_fabric_is_ib(fabric); }
double vb_net_port_gbps(void) { return sim_fabric_port_gbps(fabric) * (bonded ? 2 : 1); }

void vb_net_gid(int node, int nic, int port, uint8_t gid[16]) {
  sim_fabric_ep_t ep = {node, nic, bonded ? 1 : port};
  sim_fabric_gid(ep, gid);
}

int vb_net_gid_ep(const uint8_t gid[16], sim_fabric_ep_t *ep_p) {
  sim_fabric_ep_t ep;
  if (sim_fabric_gid_ep(gid, &ep) != 0 || ep.node >= sim_fabric_nodes(fabric) ||
      ep.nic >= sim_fabric_nics(fabric) || ep.port > sim_fabric_ports(fabric))
    return -1;
  *ep_p = ep;
  return 0;
}

uint16_t vb_net_lid(int node, int nic, int port) {
  return sim_fabric_lid(fabric, (sim_fabric_ep_t){node, nic, port});
}

uint16_t vb_net_sm_lid(int node, int nic, int port) {
  return sim_fabric_sm_lid(fabric, (sim_fabric_ep_t){node, nic, port});
}

int vb_net_lid_ep(uint16_t lid, sim_fabric_ep_t *ep_p) {
  return sim_fabric_lid_ep(fabric, lid, ep_p);
}

uint16_t vb_net_sport(uint32_t flow_label, uint32_t lqpn, uint32_t rqpn) {
  return sim_fabric_sport(flow_label, lqpn, rqpn);
}

int vb_net_path_up(const sim_fabric_flow_t *flow) {
  return sim_fabric_path_up(fabric, flow, sim_fabric_wall_s(fabric), 0);
}

double vb_net_path_frac(const sim_fabric_flow_t *flow) {
  int links[8];
  double now = sim_fabric_wall_s(fabric), frac = 1;
  int n = sim_fabric_route_at(fabric, flow, now, 0, links, 8);
  if (n < 0) return 0;
  for (int i = 0; i < n; i++) {
    double f = sim_fabric_link_fraction(fabric, links[i], now, 0);
    if (f < frac) frac = f;
  }
  return frac;
}

/* A fabric port is up when both its links (to its leaf and back) carry traffic. */
static int member_up(int node, int nic, int port, double now) {
  int n = sim_fabric_link_count(fabric), seen = 0;
  for (int l = 0; l < n && seen < 2; l++) {
    sim_fabric_link_t li;
    if (sim_fabric_link_info(fabric, l, &li) != 0 ||
        (li.kind != SIM_FABRIC_LINK_NIC_UP && li.kind != SIM_FABRIC_LINK_NIC_DOWN) ||
        li.ep.node != node || li.ep.nic != nic || li.ep.port != port)
      continue;
    seen++;
    if (sim_fabric_link_fraction(fabric, l, now, 0) <= 0) return 0;
  }
  return 1;
}

int vb_net_nic_fatal(int node, int nic) {
  return sim_fabric_nic_fatal(fabric, node, nic, sim_fabric_wall_s(fabric), 0);
}

int vb_net_port_up(int node, int nic, int port) {
  double now = sim_fabric_wall_s(fabric);
  if (bonded) return member_up(node, nic, 1, now) || member_up(node, nic, 2, now);
  return member_up(node, nic, port, now);
}

int vb_net_port_wcerr(int node, int nic, int port, double *at_p) {
  double now = sim_fabric_wall_s(fabric), at = 0, best = -1;
  int kind = SIM_FABRIC_WCERR_NONE;
  for (int p = bonded ? 1 : port; p <= (bonded ? 2 : port); p++) {
    int k = sim_fabric_port_wcerr(fabric, (sim_fabric_ep_t){node, nic, p}, now, 0, &at);
    if (k != SIM_FABRIC_WCERR_NONE && at > best) kind = k, best = at;
  }
  if (kind == SIM_FABRIC_WCERR_NONE) return 0;
  *at_p = best;
  return kind == SIM_FABRIC_WCERR_RNR ? IBV_WC_RNR_RETRY_EXC_ERR : IBV_WC_REM_ACCESS_ERR;
}
