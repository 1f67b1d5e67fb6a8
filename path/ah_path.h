/* ah_path.h: the QP path and priority policy — which RoCEv2 UDP source port (ECMP path) and which
 * traffic class each RDMA queue pair gets. Pure logic: the shim's verbs hook (rdma/rdma_verbs.c)
 * asks this module at a QP's INIT→RTR transition and writes the answer into grh.flow_label and
 * grh.traffic_class; bench/path_plan runs the same planner over a modelled fat tree.
 *
 * The source port is chosen through the flow label because that is what the kernel hashes
 * (rdma-core's rdma_flow_label_to_udp_sport): a label that maps to the wanted port is
 * written, never the port itself. Policies: off (keep NCCL's QPN-derived port), spread (distinct,
 * evenly spread ports per (local NIC, remote GID) pair), file:PATH (a probed path catalog, as
 * C4P's prober produces) and plan (a topology file plus a switch hash model, balanced job-wide with
 * C4P's dual-port rule and Crux's GPU-intensity order). */
#ifndef AH_PATH_H
#define AH_PATH_H

#include <stddef.h>
#include <stdint.h>

#define AH_PATH_SPORT_MIN 0xC000u /* IB_ROCE_UDP_ENCAP_VALID_PORT_MIN */
#define AH_PATH_SPORT_MAX 0xFFFFu
#define AH_PATH_ROCE_DPORT 4791u
#define AH_PATH_LABEL_MASK 0xFFFFFu /* 20-bit IPv6 flow label */

/* ---- the kernel's arithmetic (include/rdma/ib_verbs.h) ---------------------------------------- */

/* The UDP source port the kernel derives from a flow label (rdma_flow_label_to_udp_sport). */
uint16_t ah_path_label_to_sport(uint32_t label);
/* A non-zero flow label that the kernel maps to `sport`; 0 when sport is outside 0xC000–0xFFFF.
 * Note that the label is never 0, because 0 tells the kernel "derive one from the QP numbers". */
uint32_t ah_path_sport_to_label(uint16_t sport);
/* The label the kernel uses when the modify carries 0 (rdma_calc_flow_label): NCCL's own path. */
uint32_t ah_path_label_from_qpn(uint32_t lqpn, uint32_t rqpn);
/* The traffic class written for DSCP `dscp` (0–63): dscp << 2, keeping the ECN bits of `tc`. */
uint8_t ah_path_tc_with_dscp(uint8_t tc, unsigned dscp);

/* ---- switch hash model ------------------------------------------------------------------------ */

/* A model of an ECMP/LAG hash over the RoCEv2 5-tuple (source GID, destination GID, UDP, source
 * port, 4791): CRC-32 seeded per switch. Real switches differ by vendor; `plan` is only as good
 * as this model, which is why the `file` policy (probed ports) exists. */
uint32_t ah_path_hash5(uint32_t seed, const uint8_t sgid[16], const uint8_t dgid[16],
                       uint16_t sport);
/* The same in two steps, for hashing many ports of one flow: the GIDs' part once, then per port. */
uint32_t ah_path_hash5_prefix(const uint8_t sgid[16], const uint8_t dgid[16]);
uint32_t ah_path_hash5_finish(uint32_t prefix, uint32_t seed, uint16_t sport);
/* Port k (0-based) of the spread sequence for a pair whose identity hashes to `pair_hash`: the
 * van der Corput order over the 16384 ports, so any first n ports are evenly spread. */
uint16_t ah_path_spread_port(uint32_t pair_hash, unsigned k);
/* Parses an address as written in catalogs and topology files (IPv4 dotted quad, mapped into a
 * RoCE GID ::ffff:a.b.c.d, or an IPv6/GID text). Returns 0 on success. */
int ah_path_gid_parse(const char *text, uint8_t gid_p[16]);

/* ---- topology and planner (ah_path_plan.c) ---------------------------------------------------- */

#define AH_PATH_NAME_MAX 64

typedef struct {
  char name[AH_PATH_NAME_MAX];
  int pair; /* leaf pair the host hangs off: leaves 2*pair (left), 2*pair+1 */
  int nnics;
  char (*dev)[AH_PATH_NAME_MAX]; /* device name per NIC, as the verbs device reports it */
  uint8_t (*gid)[16];            /* address per NIC (a dual-port NIC is one bonded address) */
} ah_path_host_t;

typedef struct {
  char name[AH_PATH_NAME_MAX];
  double intensity; /* Crux's GPU intensity: jobs with more get paths first */
  int nhosts;
  int *hosts;   /* indices into topo->hosts, in ring order */
  int pattern;  /* AH_PATH_PATTERN_* */
  int channels; /* QPs per connection and per NIC */
} ah_path_job_t;

enum { AH_PATH_PATTERN_RING = 0, AH_PATH_PATTERN_TREE = 1 };

typedef struct {
  int nspines, npairs;
  uint32_t seed_leaf, seed_spine, seed_lag; /* hash seeds: leaf ECMP, spine ECMP, host LAG */
  int nhosts;
  ah_path_host_t *hosts;
  int njobs;
  ah_path_job_t *jobs;
  int nfailed;
  int (*failed)[2];               /* failed links as (leaf, spine) */
  int nclasses;                   /* priority classes, highest first ("classes" line) */
  int class_tc[8], class_dscp[8]; /* each: 0..255 (whole byte) or DSCP (class_dscp 1) */
} ah_path_topo_t;

/* One long-lived flow (one QP): from NIC `snic` of host `shost` to NIC `dnic` of host `dhost`. */
typedef struct {
  int job, shost, snic, dhost, dnic;
  int k; /* index of this QP among the flows of its NIC pair */
} ah_path_flow_t;

/* A planned route: the source port, and what the model says it does. */
typedef struct {
  uint16_t sport;
  int8_t side;    /* 0 left, 1 right: the NIC port used at both ends */
  int16_t spine;  /* -1 when the flow stays under one leaf pair */
  int8_t planned; /* 0: no port met the wanted route; spread port used */
} ah_path_route_t;

/* Parses a topology file (format in docs/qp.md). Returns 0 and a topology to free with
 * ah_path_topo_free, or -1 after logging one error that names the file, line and text. */
int ah_path_topo_load(const char *path, ah_path_topo_t **topo_p);
int ah_path_topo_parse(const char *text, const char *origin, ah_path_topo_t **topo_p);
void ah_path_topo_free(ah_path_topo_t *topo);
/* The flows of every job in the topology for its traffic pattern (ring: NIC n of each host to NIC
 * n of the next, `channels` QPs each; tree: NCCL's double binary tree, both directions). Returns
 * the count and a malloc'd array in *flows_p, or -1 when out of memory. */
int ah_path_topo_flows(const ah_path_topo_t *topo, ah_path_flow_t **flows_p);
/* Where the model sends `sport` for flow f: side (LAG hash at the source host), spine (ECMP at
 * the source leaf over its live uplinks; -1 within a leaf pair) and the side it arrives on (ECMP at
 * the spine over the destination's two leaves). */
void ah_path_model_route(const ah_path_topo_t *topo, const ah_path_flow_t *f, uint16_t sport,
                         int *side_p, int *spine_p, int *rx_side_p);
/* A UDP source port for a backup connection from the NIC of sgid to the NIC of dgid whose modelled
 * spine is neither that of the primary's outgoing flow (primary_sport) nor that of the peer's flow
 * back (peer_sport), so that one failed leaf-spine link cannot cut both. Candidates are tried from
 * `start` (a port in 0xC000..0xFFFF) on. Returns the port, or 0 when the topology does not hold
 * both GIDs, the flows stay under one leaf pair, or no port in 4096 tries qualifies. */
uint16_t ah_path_backup_sport(const ah_path_topo_t *topo, const uint8_t sgid[16],
                              const uint8_t dgid[16], uint16_t primary_sport, uint16_t peer_sport,
                              uint16_t start);
/* The same for a later backup, which must also avoid the paths already in use or lost: a port whose
 * modelled spine is none of those of the outgoing ports `out` (nout of them, 0 entries ignored)
 * nor of the peer's ports back `back` (nback). Returns the port, or 0 as ah_path_backup_sport. */
uint16_t ah_path_backup_sport_avoid(const ah_path_topo_t *topo, const uint8_t sgid[16],
                                    const uint8_t dgid[16], const uint16_t *out, int nout,
                                    const uint16_t *back, int nback, uint16_t start);
/* Crux's priority assignment: jobs ranked by GPU intensity (highest first) and compressed onto the
 * topology's classes in equal shares. Returns the class index of `job`, or -1 without classes. */
int ah_path_job_class(const ah_path_topo_t *topo, int job);
/* 1 when link (leaf, spine) is failed. */
int ah_path_link_failed(const ah_path_topo_t *topo, int leaf, int spine);
/* The plan: routes for every flow so that per-link QP counts are balanced job-wide. Jobs are
 * served in decreasing GPU intensity; a NIC's left port only pairs with a left port (C4P).
 * Returns 0, or -1 when out of memory. */
int ah_path_plan(const ah_path_topo_t *topo, const ah_path_flow_t *flows, int nflows,
                 ah_path_route_t *routes);

/* ---- re-planning around failed or degraded links (ah_path_replan.c) -------------------------- */

/* A leaf–spine link's state now, both directions: its capacity fraction (0 down, between 0 and 1
 * degraded). Unlike the topology's `fail` lines, switches do not route around these links (a link
 * that went down under a running job, before routing converged): a flow hashed onto one stays. */
typedef struct {
  int leaf, spine;
  double fraction;
} ah_path_link_state_t;

typedef struct {
  double spine_rel; /* leaf–spine link capacity ÷ a NIC port's (0: 1, as on a 1:1 fabric) */
  int candidates;   /* source ports tried per moved flow (0: 256) */
} ah_path_replan_opts_t;

/* Re-plans the flows hit by failed or degraded links: routes[i].sport is flow i's current port on
 * entry; flows whose route (in the topology's hash view) crosses a link of `links` below full
 * capacity, or that have no route, get the port whose route leaves them the largest share of
 * their worst link (capacity ÷ flows), placed greedily and then re-placed until nothing improves —
 * so moved flows spread over the surviving links. Every route's side and spine are refreshed;
 * planned is 0 for a flow left without a live path. Returns the number of flows whose port changed
 * (moved[i] = 1 for those, when moved is not NULL), or -1 when out of memory.
 * Note that other flows keep their ports: the result is what the shim applies with one RTS→RTS
 * modify (mlx5dv_modify_qp_udp_sport) per moved queue pair. */
int ah_path_replan(const ah_path_topo_t *topo, const ah_path_flow_t *flows, int nflows,
                   const ah_path_link_state_t *links, int nlinks, const ah_path_replan_opts_t *opts,
                   ah_path_route_t *routes, unsigned char *moved);
/* The model's share of the slowest flow with these ports (per link capacity ÷ flows, relative to a
 * NIC port; 0 when a flow's path is down), or -1 when out of memory. */
double ah_path_replan_share(const ah_path_topo_t *topo, const ah_path_flow_t *flows, int nflows,
                            const ah_path_link_state_t *links, int nlinks,
                            const ah_path_replan_opts_t *opts, const ah_path_route_t *routes);
/* An upper bound on the slowest flow's share under any choice of ports: per NIC over its two
 * ports, per leaf pair over its live uplinks and over its live downlinks, the largest r such that
 * the links hold every flow that must cross them at r each. -1 when out of memory. */
double ah_path_replan_bound(const ah_path_topo_t *topo, const ah_path_flow_t *flows, int nflows,
                            const ah_path_link_state_t *links, int nlinks,
                            const ah_path_replan_opts_t *opts);

/* ---- runtime policy (what the shim asks) ------------------------------------------------------ */

enum { AH_PATH_SPORT_OFF = 0, AH_PATH_SPORT_SPREAD, AH_PATH_SPORT_FILE, AH_PATH_SPORT_PLAN };
enum { AH_PATH_METHOD_LABEL = 0, AH_PATH_METHOD_MLX5DV = 1 };

typedef struct ah_path_policy ah_path_policy_t;
struct ah_path_qp;

/* The settings, typed as the environment table (settings/ah_env.c) parsed them: AUTOHA_QP,
 * AUTOHA_QP_SPORT, AUTOHA_QP_TC, AUTOHA_QP_TOPO, AUTOHA_QP_METHOD. */
typedef struct {
  int on;                 /* 0: leave every QP as NCCL set it */
  int sport;              /* AH_PATH_SPORT_* */
  const char *sport_file; /* AH_PATH_SPORT_FILE: the path catalog */
  int tc, tc_is_dscp;     /* tc -1 keeps NCCL's class; with tc_is_dscp tc is a DSCP */
  const char *topo;       /* AH_PATH_SPORT_PLAN: the topology file (NULL or "": none) */
  int method;             /* AH_PATH_METHOD_* */
  const char *host;       /* local host name, to find this host in a topology */
} ah_path_settings_t;

/* Builds the policy from typed settings (their text was parsed, and bad values reported, by the
 * environment table). Never fails for bad input: a catalog or topology file that does not load is
 * logged once, naming it, and the part it governs falls back to leaving QPs as NCCL set them.
 * Returns NULL only when out of memory (the hook then passes everything through). */
ah_path_policy_t *ah_path_policy_create(const ah_path_settings_t *settings);
void ah_path_policy_free(ah_path_policy_t *policy);
/* 0 when AUTOHA_QP=off or nothing is to be changed: the hook is then pure pass-through. */
int ah_path_policy_active(const ah_path_policy_t *policy);
int ah_path_policy_sport_mode(const ah_path_policy_t *policy);
int ah_path_policy_method(const ah_path_policy_t *policy);
/* The traffic class to write for a QP NCCL gave `tc`, or -1 to keep NCCL's: a number is the
 * whole byte, dscp=N is N << 2 with NCCL's ECN bits kept. */
int ah_path_policy_tc(const ah_path_policy_t *policy, uint8_t tc);
/* The same for one QP: without AUTOHA_QP_TC, in plan mode, the class the topology gives the job of
 * the QP's host (found by local GID, else host name). */
int ah_path_policy_qp_tc(const ah_path_policy_t *policy, const struct ah_path_qp *qp, uint8_t tc);
/* The DSCP for ncclConfig_t.trafficClass (whole TC byte, ECN 0), or -1 when unset. */
int ah_path_policy_config_tc(const ah_path_policy_t *policy);

/* One QP at its RTR transition, as the hook sees it. */
typedef struct ah_path_qp {
  const char *dev;  /* local verbs device name */
  int port;         /* local port number (from the INIT modify; 1 if unknown) */
  uint8_t dgid[16]; /* remote GID */
  uint8_t sgid[16]; /* local GID, when has_sgid */
  int has_sgid;
  uint32_t lqpn, rqpn;
  /* The receiving end of a NCCL connection (created with receive WRs: NCCL's sender QPs have
   * none). Its data arrives on the peer's QP; it sends only clear-to-send writes and ACKs. Plan
   * mode plans the senders: receivers take spread ports and do not use up the pair's planned ones. */
  int receiver;
} ah_path_qp_t;

/* The source port for this QP, or 0 to leave NCCL's. Thread-safe.
 * Note that the k-th QP of a (device, port, remote GID, sender or receiver) pair gets the k-th port
 * of that pair's sequence, so ports are deterministic across runs as long as NCCL connects in the same order. */
uint16_t ah_path_policy_sport(ah_path_policy_t *policy, const ah_path_qp_t *qp);

/* Path catalog (file:PATH): per (source, destination) pair, ports known to take distinct paths.
 * Returns 0, or -1 after logging one error naming the file, line and text. */
typedef struct ah_path_catalog ah_path_catalog_t;
int ah_path_catalog_parse(const char *text, const char *origin, ah_path_catalog_t **catalog_p);
int ah_path_catalog_load(const char *path, ah_path_catalog_t **catalog_p);
void ah_path_catalog_free(ah_path_catalog_t *catalog);
/* Port k of the pair (a source matches by device name or address, or the entry's `*`); 0 when the
 * catalog has no entry for the pair. */
uint16_t ah_path_catalog_port(const ah_path_catalog_t *catalog, const char *dev,
                              const uint8_t *sgid, const uint8_t dgid[16], unsigned k);

/* Per-communicator traffic classes (AUTOHA_QP_TC_COMM): "MATCH:CLASS[;MATCH:CLASS...]", first
 * match wins. MATCH is name=GLOB (the communicator's ncclConfig_t.commName, NCCL 2.27+, fnmatch
 * pattern), ranks=N, ranks=LO-HI or ranks=LO- (its size), or * (any). CLASS is 0..255 (the whole
 * byte) or dscp=0..63. */
#define AH_PATH_TC_RULES_MAX 16
typedef struct {
  int n;
  struct {
    char name[AH_PATH_NAME_MAX]; /* "" when the rule matches by size or * */
    int lo, hi;                  /* size range; 0..INT_MAX for name and * */
    int tc;                      /* whole traffic-class byte */
  } rule[AH_PATH_TC_RULES_MAX];
} ah_path_tc_rules_t;

/* Parses the rules. Returns 0 and fills *rules_p (may be NULL to only validate), or -1 with a
 * reason naming the bad rule and its position in `why`. */
int ah_path_tc_rules_parse(const char *text, ah_path_tc_rules_t *rules_p, char *why,
                           size_t why_len);
/* The class for a communicator (name may be NULL; nranks 0 when unknown: size rules then do not
 * match), or -1 when no rule matches. */
int ah_path_tc_rules_match(const ah_path_tc_rules_t *rules, const char *name, int nranks);

/* Strict parser of AUTOHA_QP_TC (nccl|0..255|dscp=0..63, as settings/ah_env.c's row): returns 0 and
 * sets *tc_p (-1 for nccl) and *is_dscp_p, or -1 (the caller logs). */
int ah_path_parse_tc(const char *text, int *tc_p, int *is_dscp_p);

#endif
