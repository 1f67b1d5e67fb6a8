/* sim_fabric_internal.h: the fabric's representation, shared by the files of sim/fabric/ (build,
 * route, state, faults, rates, text) and by nothing else. Links are numbered in two blocks: every
 * NIC port's pair (up, down) first, then every (leaf, spine) pair (up, down), so a link's number
 * alone says what it is. */
#ifndef SIM_FABRIC_INTERNAL_H
#define SIM_FABRIC_INTERNAL_H

#include <stdatomic.h>
#include <stdint.h>

#include "sim_fabric.h"

#define SIM_FABRIC_SEED_STEP 0x9E3779B9u /* per-switch seed = base + index * step */
#define SIM_FABRIC_MAX_SPINES 256        /* the planner's topology file allows 1-256 */
#define SIM_FABRIC_MAX_PAIRS 4096
#define SIM_FABRIC_ROUTE_MAX 4 /* NIC up, leaf up, spine down, NIC down */

enum { SIM_FABRIC_SCHED_STRICT = 0, SIM_FABRIC_SCHED_WRR = 1 };
enum { SIM_FABRIC_CLOCK_WALL = 0, SIM_FABRIC_CLOCK_VIRT = 1 };

/* One scheduled change: from `at` on (seconds of wall time or microseconds of virtual time since
 * the epoch) the link's scheduled fraction is `fraction`; `fatal` marks the links of a NIC that
 * failed whole (nicfatal: its device reports DEVICE_FATAL); `wcerr` marks an injected completion
 * error on the port whose up link `link` is (wcerr=rnr|access), which changes no fraction. */
typedef struct {
  int clock;
  double at;
  int link;
  double fraction;
  int fatal;
  int wcerr; /* SIM_FABRIC_WCERR_*: a completion error for the port's requesters, no rate change */
} sim_fabric_event_t;

/* The shared mapping: a header, then one double (as its bits) per link. */
typedef struct {
  _Atomic uint32_t magic; /* written last by the creator */
  uint32_t nlinks;
  int64_t epoch_ns; /* CLOCK_MONOTONIC at creation */
  _Atomic uint64_t fraction[];
} sim_fabric_shm_t;

struct sim_fabric {
  int nnodes, nics, ports, bond, ib;
  int planes;                       /* 1, or 2 on InfiniBand (planes=2) */
  double port_gbps, up_gbps;        /* NIC port and leaf-spine link line rates */
  double host_lat_us, spine_lat_us; /* per hop: NIC <-> leaf, leaf <-> spine */
  int npairs, nspines, hostsperpair;
  uint32_t seed_leaf, seed_spine, seed_lag;
  int reroute;
  int sched;                  /* SIM_FABRIC_SCHED_* */
  int rank[64];               /* strict: service rank per DSCP, 0 first */
  double weight[64];          /* wrr: weight per DSCP */
  int nlinks, nport_links;    /* all links; NIC port links (the first block) */
  unsigned char *failed;      /* per link: failed in NCCLSIM_FABRIC ("fail=") */
  sim_fabric_event_t *events; /* the schedule, sorted by time (stable) */
  int nevents;
  _Atomic uint64_t *fraction; /* per link: the set_link state (private or shared) */
  _Atomic uint64_t *private_fraction;
  sim_fabric_shm_t *shm;
  size_t shm_len;
  int64_t epoch_ns;
};

/* ---- link numbering, names and strict numbers (sim_fabric_names.c) ---- */
int sim_fabric_parse_long(const char *s, long lo, long hi, long *v_p);         /* 0 or -1 */
int sim_fabric_parse_double(const char *s, double lo, double hi, double *v_p); /* 0 or -1 */
/* The links a fault target names: "leafL-spineS" (both directions), "nodeN/mlx5_K:P" (the port's
 * up and down links) or one directed link as sim_fabric_link_name writes it. Returns 1 or 2, the
 * count written to links[2], or -1. *nic_p is set to whether the target is a NIC port. */
int sim_fabric_parse_target(const sim_fabric_t *f, const char *text, int links[2], int *nic_p);
int sim_fabric_port_index(const sim_fabric_t *f,
                          sim_fabric_ep_t ep); /* -1 when not in the fabric */
int sim_fabric_ep_leaf(const sim_fabric_t *f,
                       sim_fabric_ep_t ep); /* the leaf a NIC port is cabled to */
static inline int sim_fabric_nic_link(const sim_fabric_t *f, sim_fabric_ep_t ep, int down) {
  return 2 * sim_fabric_port_index(f, ep) + down;
}
static inline int sim_fabric_spine_link(const sim_fabric_t *f, int leaf, int spine, int down) {
  return f->nport_links + 2 * (leaf * f->nspines + spine) + down;
}

/* ---- the hash model (sim_fabric_addr.c) ---- */
uint32_t sim_fabric_hash_prefix(const uint8_t sgid[16], const uint8_t dgid[16]);
uint32_t sim_fabric_hash_finish(uint32_t prefix, uint32_t seed, uint16_t sport);

/* ---- state (sim_fabric_state.c) ---- */
double sim_fabric_load_fraction(const _Atomic uint64_t *slot);
void sim_fabric_store_fraction(_Atomic uint64_t *slot, double v);
int64_t sim_fabric_now_ns(void);
void sim_fabric_detach(sim_fabric_t *f); /* unmaps the shared state, back to the private one */

/* ---- faults (sim_fabric_faults.c) ---- */
/* The schedule's fraction of a link at a time: per clock, the latest event at or before it (1 when
 * none); the lower of the two clocks' values. */
double sim_fabric_scheduled_fraction(const sim_fabric_t *f, int link, double wall_s,
                                     double virt_us);

#endif
