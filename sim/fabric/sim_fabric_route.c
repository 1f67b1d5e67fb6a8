/* sim_fabric_route.c: the links a flow crosses — three hash decisions over its 5-tuple, exactly as
 * autoha's planner models them (docs/qp.md): a bonded NIC's LAG picks the port (so the source leaf
 * of the pair), the source leaf's ECMP picks a spine among its live uplinks, the spine's ECMP picks
 * which leaf of the destination pair delivers. Each switch hashes with its own seed, base + index x
 * 0x9E3779B9 (the host's index for the LAG).
 *
 * The key choice: "live" means not failed in NCCLSIM_FABRIC for sim_fabric_route (the planner's
 * `fail` lines); sim_fabric_route_at with reroute=1 also skips links down at the time asked. With
 * two InfiniBand planes a leaf has uplinks only to its plane's spines, and a port in one plane
 * reaches no port in the other. */
#include "sim_fabric_internal.h"

/* Whether a link carries traffic in the routing view: statically failed links never do; with a
 * time (t != NULL, reroute on) neither do links down at that time. */
typedef struct {
  int dynamic;
  double wall_s, virt_us;
} view_t;

static int live(const sim_fabric_t *f, const view_t *v, int link) {
  if (f->failed[link]) return 0;
  return !v->dynamic || sim_fabric_link_fraction(f, link, v->wall_s, v->virt_us) > 0;
}

/* The address a NIC port is reached at: a bonded NIC's one GID (port 1's), else the port's own. */
static void ep_gid(const sim_fabric_t *f, sim_fabric_ep_t ep, uint8_t gid[16]) {
  if (f->bond) ep.port = 1;
  sim_fabric_gid(ep, gid);
}

/* Whether spine sp has a live link down to one of the nd leaves: an InfiniBand subnet manager
 * routes with the whole subnet in view, so a leaf never sends to a spine that cannot deliver. */
static int spine_reaches(const sim_fabric_t *f, const view_t *v, int sp, const int *dleaf, int nd) {
  for (int i = 0; i < nd; i++)
    if (live(f, v, sim_fabric_spine_link(f, dleaf[i], sp, 1))) return 1;
  return 0;
}

static int route(const sim_fabric_t *f, const sim_fabric_flow_t *fl, const view_t *v, int *links,
                 int max) {
  sim_fabric_ep_t s = fl->src, d = fl->dst;
  if (f->bond) s.port = d.port = 1; /* the port is the LAG's choice, below */
  if (sim_fabric_port_index(f, s) < 0 || sim_fabric_port_index(f, d) < 0) return -1;
  if (s.node == d.node && s.nic == d.nic) return 0; /* the NIC loops it back */
  uint8_t sg[16], dg[16];
  ep_gid(f, s, sg);
  ep_gid(f, d, dg);
  uint32_t prefix = sim_fabric_hash_prefix(sg, dg);
  int dleaf[2], nd = 0; /* the leaves that can deliver to the destination, left first */
  if (f->bond) {
    int side = (int)(sim_fabric_hash_finish(
                         prefix, f->seed_lag + (uint32_t)s.node * SIM_FABRIC_SEED_STEP, fl->sport) &
                     1u);
    s.port = side + 1;
    sim_fabric_ep_t other = {s.node, s.nic, 2 - side};
    if (v->dynamic && !live(f, v, sim_fabric_nic_link(f, s, 0)) &&
        live(f, v, sim_fabric_nic_link(f, other, 0)))
      s = other; /* the bond leaves a dead port */
    for (int p = 1; p <= 2; p++) {
      sim_fabric_ep_t e = {d.node, d.nic, p};
      if (!v->dynamic || live(f, v, sim_fabric_nic_link(f, e, 1)))
        dleaf[nd++] = sim_fabric_ep_leaf(f, e);
    }
    if (!nd) return -1;
  } else {
    dleaf[nd++] = sim_fabric_ep_leaf(f, d);
  }
  int sleaf = sim_fabric_ep_leaf(f, s), n = 0, spine = -1, rleaf = -1;
  int plane = sim_fabric_leaf_plane(f, sleaf), nsame = 0;
  for (int i = 0; i < nd; i++) /* no link joins two planes */
    if (sim_fabric_leaf_plane(f, dleaf[i]) == plane) dleaf[nsame++] = dleaf[i];
  if (!(nd = nsame)) return -1;
  int out[SIM_FABRIC_ROUTE_MAX];
  out[n++] = sim_fabric_nic_link(f, s, 0);
  for (int i = 0; i < nd; i++)
    if (dleaf[i] == sleaf) rleaf = sleaf; /* the leaf delivers it, no spine */
  if (rleaf < 0) {
    int up[SIM_FABRIC_MAX_SPINES], nup = 0;
    for (int sp = 0; sp < f->nspines; sp++)
      if (sim_fabric_spine_plane(f, sp) == plane &&
          live(f, v, sim_fabric_spine_link(f, sleaf, sp, 0)) &&
          (!f->ib || !v->dynamic || spine_reaches(f, v, sp, dleaf, nd)))
        up[nup++] = sp;
    if (!nup) return -1;
    spine = up[sim_fabric_hash_finish(prefix, f->seed_leaf + (uint32_t)sleaf * SIM_FABRIC_SEED_STEP,
                                      fl->sport) %
               (uint32_t)nup];
    int cand[2], nc = 0;
    for (int i = 0; i < nd; i++)
      if (live(f, v, sim_fabric_spine_link(f, dleaf[i], spine, 1))) cand[nc++] = dleaf[i];
    if (!nc) return -1;
    rleaf = cand[nc == 1 ? 0
                         : sim_fabric_hash_finish(
                               prefix, f->seed_spine + (uint32_t)spine * SIM_FABRIC_SEED_STEP,
                               fl->sport) %
                               (uint32_t)nc];
    out[n++] = sim_fabric_spine_link(f, sleaf, spine, 0);
    out[n++] = sim_fabric_spine_link(f, rleaf, spine, 1);
  }
  if (f->ports == 2) d.port = rleaf % 2 + 1; /* the destination port on the delivering leaf */
  out[n++] = sim_fabric_nic_link(f, d, 1);
  if (n > max) return -1;
  for (int i = 0; i < n; i++) links[i] = out[i];
  return n;
}

int sim_fabric_route(const sim_fabric_t *f, const sim_fabric_flow_t *flow, int *links, int max) {
  view_t v = {0, 0, 0};
  return route(f, flow, &v, links, max);
}

int sim_fabric_route_at(const sim_fabric_t *f, const sim_fabric_flow_t *flow, double wall_s,
                        double virt_us, int *links, int max) {
  view_t v = {f->reroute, wall_s, virt_us};
  return route(f, flow, &v, links, max);
}

int sim_fabric_path_up(const sim_fabric_t *f, const sim_fabric_flow_t *flow, double wall_s,
                       double virt_us) {
  int links[SIM_FABRIC_ROUTE_MAX];
  int n = sim_fabric_route_at(f, flow, wall_s, virt_us, links, SIM_FABRIC_ROUTE_MAX);
  if (n < 0) return 0;
  for (int i = 0; i < n; i++)
    if (!(sim_fabric_link_fraction(f, links[i], wall_s, virt_us) > 0)) return 0;
  return 1;
}
