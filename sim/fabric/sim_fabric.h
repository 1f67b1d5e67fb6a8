/* sim_fabric.h: sim/'s RoCE or InfiniBand fabric as pure functions (no verbs, no NCCL, no I/O beyond parsing a
 * spec string or file): a two-tier leaf–spine of switches with the NICs of every simulated node
 * cabled to leaves, the switches' ECMP and the NICs' LAG hash, link faults on a schedule, and the
 * throughput each flow gets (max–min fair sharing of every link, priority by traffic class).
 *
 * Three users link it (static library ncclsim_fabric): the verbs provider (sim/verbs/, "is this
 * QP's path up?"), sim's libnccl stand-in (the modelled time of an inter-node step from the flows it
 * put on the wire), and bench/fabric. Every process of a job builds the same fabric from the same
 * environment, so a route computed in one process is the route in every other; the state that
 * changes while a job runs (link up/down/degraded, injected from a test) lives in a small shared
 * mapping every process attaches to.
 *
 * Addressing. A NIC port is an endpoint (node, nic, port); its RoCEv2 GID is the IPv4-mapped
 * ::ffff:10.<node >> 8>.<node & 255>.<nic * 4 + port> (port 1 or 2; a dual-port NIC in bonded mode
 * has one GID, that of port 1, for both ports, and its LAG hash picks the port per flow). */
#ifndef SIM_FABRIC_H
#define SIM_FABRIC_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
  int node, nic, port; /* port is 1-based, as in verbs */
} sim_fabric_ep_t;

/* A flow: one QP's traffic, from the endpoint that sends to the one that receives. */
typedef struct {
  sim_fabric_ep_t src, dst;
  uint16_t sport; /* RoCEv2 UDP source port (sim_fabric_sport) */
  uint8_t tc;     /* IP traffic class byte; DSCP = tc >> 2 picks the switch queue */
} sim_fabric_flow_t;

typedef struct sim_fabric sim_fabric_t;

/* ---- addressing and the source port ---------------------------------------------------------- */

void sim_fabric_gid(sim_fabric_ep_t ep, uint8_t gid[16]);
/* The endpoint a GID names; -1 when it is not one of this fabric's addresses. */
int sim_fabric_gid_ep(const uint8_t gid[16], sim_fabric_ep_t *ep_p);
/* The UDP source port an mlx5 NIC puts on a RoCEv2 RC QP's packets: from the QP's flow label, or,
 * when the label is 0 (NCCL's), from the label the kernel derives from the two QP numbers. */
uint16_t sim_fabric_sport(uint32_t flow_label, uint32_t lqpn, uint32_t rqpn);

/* ---- building ---------------------------------------------------------------------------------- */

/* Builds the fabric for `nnodes` nodes from NCCLSIM_TOPO's spec (NICs per node, their speed, ports
 * per NIC, link layer) and NCCLSIM_FABRIC's (leaves, spines, oversubscription, hash seeds,
 * scheduler, latencies; NULL or "" for the defaults). Returns NULL with a message naming the bad
 * text in err. */
sim_fabric_t *sim_fabric_create(const char *topo_spec, const char *fabric_spec, int nnodes,
                                char *err, size_t errlen);
void sim_fabric_free(sim_fabric_t *f);

int sim_fabric_nics(const sim_fabric_t *f);         /* NICs per node */
int sim_fabric_ports(const sim_fabric_t *f);        /* ports per NIC: 1 or 2 */
int sim_fabric_is_ib(const sim_fabric_t *f);        /* link layer InfiniBand instead of Ethernet */
int sim_fabric_planes(const sim_fabric_t *f);       /* 1, or 2 (InfiniBand's planes=2) */
double sim_fabric_port_gbps(const sim_fabric_t *f); /* line rate of one NIC port, Gb/s */

/* ---- routes and links -------------------------------------------------------------------------- */

/* The links a flow crosses, in order (NIC port up to its leaf, leaf to spine, spine to leaf, leaf
 * down to the NIC port; two links when both ends share a leaf, none on the same NIC). Returns the
 * count (<= max) or -1. Deterministic: the same flow takes the same route in every process. */
int sim_fabric_route(const sim_fabric_t *f, const sim_fabric_flow_t *flow, int *links, int max);
int sim_fabric_link_count(const sim_fabric_t *f);
/* "leaf3->spine1", "node0/mlx5_2:1->leaf0" ... for messages and bench output. */
const char *sim_fabric_link_name(const sim_fabric_t *f, int link, char *buf, size_t len);

/* ---- state: faults ------------------------------------------------------------------------------ */

/* Attaches the job's shared link state (a mapping named from `shm_name`, created by the first
 * process), so that faults injected in one process are seen by all. Without it the state is
 * private to the process. Returns 0 or -1 with err. */
int sim_fabric_attach(sim_fabric_t *f, const char *shm_name, char *err, size_t errlen);
/* Loads a fault schedule (NCCLSIM_FABRIC_FAULTS: a spec or "file:PATH"): link down/up, degraded
 * to a fraction, NIC port down, each at a wall time (seconds since the job's epoch) or a virtual
 * time (microseconds of modelled time). Returns 0 or -1 with a message naming the bad text. */
int sim_fabric_schedule(sim_fabric_t *f, const char *spec, char *err, size_t errlen);
/* Sets a link's state now (a test through ncclsim.h): capacity fraction 0 = down, 1 = up. */
int sim_fabric_set_link(sim_fabric_t *f, int link, double fraction);
/* A link's capacity fraction at (wall seconds since the epoch, virtual microseconds): the shared
 * state combined with the schedule. */
double sim_fabric_link_fraction(const sim_fabric_t *f, int link, double wall_s, double virt_us);
/* Whether every link of a flow's route is up at that time (fraction > 0). */
int sim_fabric_path_up(const sim_fabric_t *f, const sim_fabric_flow_t *flow, double wall_s,
                       double virt_us);

/* ---- throughput -------------------------------------------------------------------------------- */

/* The rate in Gb/s each of `n` concurrent, always-backlogged flows gets: links shared max–min
 * fairly within a traffic class, classes served by the fabric's scheduler (strict priority by
 * DSCP, or weighted), capacities scaled by their fraction at the given time. A flow whose path is
 * down gets 0. */
void sim_fabric_rates(const sim_fabric_t *f, const sim_fabric_flow_t *flows, int n, double wall_s,
                      double virt_us, double *gbps);

/* ---- additions: link details, routes at a time, the epoch, the planner's topology file --------- */

enum {
  SIM_FABRIC_LINK_NIC_UP = 0, /* NIC port -> its leaf */
  SIM_FABRIC_LINK_NIC_DOWN,   /* leaf -> NIC port */
  SIM_FABRIC_LINK_LEAF_UP,    /* leaf -> spine */
  SIM_FABRIC_LINK_SPINE_DOWN, /* spine -> leaf */
};

typedef struct {
  int kind;           /* SIM_FABRIC_LINK_* */
  int leaf;           /* the leaf at one end (every link has one) */
  int spine;          /* -1 on NIC links */
  sim_fabric_ep_t ep; /* NIC links: the NIC port; {-1, -1, -1} otherwise */
  double gbps;        /* nominal capacity, line rate in Gb/s (achieved GB/s = Gb/s x 0.12) */
  double latency_us;  /* one-way latency of the hop: cable plus the switch it enters */
} sim_fabric_link_t;

/* Fills *info_p for a link; returns 0, or -1 when `link` is out of range. */
int sim_fabric_link_info(const sim_fabric_t *f, int link, sim_fabric_link_t *info_p);
/* Whether the schedule failed NIC `nic` of `node` whole by now (nicfatal): its device reports
 * DEVICE_FATAL and its ports stay down. */
int sim_fabric_nic_fatal(const sim_fabric_t *f, int node, int nic, double wall_s, double virt_us);
/* Injected completion errors (NCCLSIM_FABRIC_FAULTS wcerr=rnr|access, docs/sim-fabric.md). */
enum { SIM_FABRIC_WCERR_NONE = 0, SIM_FABRIC_WCERR_RNR = 1, SIM_FABRIC_WCERR_ACCESS = 2 };
/* The latest completion error the schedule injected on NIC port ep by now (SIM_FABRIC_WCERR_*),
 * with its time in *at_p (seconds, or microseconds of virtual time); NONE when there is none. */
int sim_fabric_port_wcerr(const sim_fabric_t *f, sim_fabric_ep_t ep, double wall_s, double virt_us,
                          double *at_p);
/* The link sim_fabric_link_name calls `name` ("leaf3->spine1"); -1 when there is none. */
int sim_fabric_link_find(const sim_fabric_t *f, const char *name);
int sim_fabric_nodes(const sim_fabric_t *f);
int sim_fabric_leaves(const sim_fabric_t *f); /* 2 per leaf pair: 2p left, 2p+1 right */
int sim_fabric_spines(const sim_fabric_t *f);

/* The route a flow takes at (wall seconds, virtual microseconds). With NCCLSIM_FABRIC's reroute=0
 * (the default) it is sim_fabric_route's: switches never re-converge and a flow hashed onto a down
 * link is black-holed. With reroute=1 every hash decision skips links down at that time (a bond
 * leaves a dead port, a leaf's ECMP a dead uplink, a spine a leaf it cannot reach), as switches do
 * once routing has converged. Returns the count or -1 (no live route, bad endpoints, max too small).
 * sim_fabric_path_up and sim_fabric_rates use this route. */
int sim_fabric_route_at(const sim_fabric_t *f, const sim_fabric_flow_t *flow, double wall_s,
                        double virt_us, int *links, int max);

/* ---- InfiniBand (ib=1): LIDs and planes (sim_fabric_lid.c) ------------------------------------ */

/* The LID the subnet manager gave a NIC port (0 when the endpoint is not in the fabric): switches
 * take 1 .. leaves + spines, NIC ports the next ones in (node, NIC, port) order, so a LID names one
 * port job-wide. */
uint16_t sim_fabric_lid(const sim_fabric_t *f, sim_fabric_ep_t ep);
/* The NIC port a LID names; -1 when it names none (a switch's, or out of range). */
int sim_fabric_lid_ep(const sim_fabric_t *f, uint16_t lid, sim_fabric_ep_t *ep_p);
/* The LID of the subnet manager of the port's plane (node 0's first port in that plane). */
uint16_t sim_fabric_sm_lid(const sim_fabric_t *f, sim_fabric_ep_t ep);
/* LIDs in use, switches included (the highest one). */
int sim_fabric_lid_count(const sim_fabric_t *f);
/* The plane of a NIC port, leaf or spine: with planes=2, the left leaf of each pair (a dual-port
 * NIC's port 1, an even single-port NIC) and even spines are plane 0, the others plane 1, and no
 * link joins two planes; always 0 with one plane. */
int sim_fabric_ep_plane(const sim_fabric_t *f, sim_fabric_ep_t ep);
int sim_fabric_leaf_plane(const sim_fabric_t *f, int leaf);
int sim_fabric_spine_plane(const sim_fabric_t *f, int spine);

/* Removes the shared state object named as in sim_fabric_attach (the job's last process, or a test,
 * calls it; mappings stay valid). Returns shm_unlink's result. */
int sim_fabric_unlink(const char *shm_name);

/* Seconds since the job's epoch, now. The epoch is CLOCK_MONOTONIC at the creation of the shared
 * state (sim_fabric_attach: the first process to attach records it, so every process of a job
 * agrees), or at sim_fabric_create for a fabric that never attached. */
double sim_fabric_wall_s(const sim_fabric_t *f);

/* Writes the autoha planner's topology file (docs/qp.md, "Topology file") that describes this
 * fabric: spines, pairs, seeds, a `host` line per node (named hostnames[i], or "node<i>" when
 * hostnames is NULL), a `nic` line per NIC (device "mlx5_<n>", the IPv4 of its sim_fabric_gid)
 * and a `fail` line per link failed in NCCLSIM_FABRIC. Returns the text's length as snprintf does
 * (the output is truncated when that is >= len), or -1 when the fabric cannot be described that
 * way (single-port or unbonded NICs: the planner's model bonds two ports per NIC). */
int sim_fabric_topo_text(const sim_fabric_t *f, const char *const *hostnames, char *buf,
                         size_t len);

/* The prefix of the job's shared-memory names: NCCLSIM_SHM_PREFIX (ncclsim-run sets one per job),
 * else "ncclsim-<uid>-". Writes it into buf and returns buf. */
char *sim_shm_job_prefix(char *buf, size_t len);

/* The job's fabric, as every process of it builds it: sim_fabric_create from NCCLSIM_TOPO and
 * NCCLSIM_FABRIC for NCCLSIM_NODES nodes (ncclsim-run sets it; else the topology's nodes=, which
 * must exceed `node`, the calling process's NCCLSIM_NODE), attached to the shared link state NCCLSIM_FABRIC_SHM (default
 * "<NCCLSIM_SHM_PREFIX>fabric", or "ncclsim-<uid>-fabric" without a prefix), with
 * NCCLSIM_FABRIC_FAULTS's schedule. Returns NULL with a message naming the bad text in err. */
sim_fabric_t *sim_fabric_job(int node, char *err, size_t errlen);

#endif
