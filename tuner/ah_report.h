/* ah_report.h: the tuning report (JSON, schema in docs/report.md) and the profile loader that reads
 * a report back as a warm start.
 *
 * The report is plain data that the shim fills (ah_report_t: process, communicators, keys) and this
 * module serialises with jansson, writing a temporary file and renaming it so a reader never sees
 * half a file. Reading a report back gives the same structure, which `autoha report` prints and
 * ah_profile_load turns into per-key configs.
 *
 * Note that nothing here calls NCCL, CUDA or sockets: the shim hands in the NCCL version, the host
 * name and the topology fingerprint. */
#ifndef AH_REPORT_H
#define AH_REPORT_H

#include <stddef.h>
#include <stdint.h>

#include "ah_config.h"
#include "ah_sched.h"    /* AH_SOURCE_* */
#include "ah_template.h" /* the report's path: a %h/%p/%r/%j template */
#include "ah_tune.h"     /* ah_tune_status_t */

#define AH_REPORT_SCHEMA 1
#define AH_REPORT_TOPO_MAX 256
#define AH_REPORT_TEXT_MAX 256

/* Calls run under one configuration, and their measured time. */
typedef struct {
  ah_config_t cfg;
  uint64_t calls;     /* calls that ran this config */
  uint64_t timed;     /* of which were timed */
  double us_total;    /* sum of the timed calls' durations, microseconds */
  double bytes_total; /* sum of the timed calls' bytes per rank (the key's size measure) */
} ah_report_stat_t;

/* One measured configuration of a tuned key. */
typedef struct {
  ah_config_t cfg;
  int samples;
  double us; /* robust time, microseconds */
} ah_report_probe_t;

/* One key of one communicator. */
typedef struct {
  int coll; /* AH_FUNC_*, or AH_COLL_* (observed only: always source default) */
  int bin;  /* ah_size_bin() */
  uint64_t bytes_min, bytes_max; /* bytes per rank seen in this key's calls */
  uint64_t calls;                /* every call counted in the key */
  ah_report_stat_t nccl_default; /* NCCL's own choice (calls that ran it, whatever the reason) */
  ah_report_stat_t
      applied; /* the config autoha applied last (== nccl_default's config for source default) */
  int source;  /* AH_SOURCE_* of the applied config */
  int tuned;   /* 1: tune and probes below are meaningful */
  ah_tune_status_t tune;
  int nprobes;
  ah_report_probe_t *probes;     /* caller-owned when writing; owned by the report when read */
  uint64_t sync_waits;           /* times this rank waited for the leader's decision */
  double sync_wait_us;           /* total time waited */
  uint64_t captured_calls;       /* calls captured into CUDA graphs (in `calls`) */
  uint64_t graph_launched_calls; /* their replays by graph launches (not in `calls`) */
  int refused; /* 1: the configuration committed for it named a pair NCCL cannot run
                            * here, and NCCL's choice ran instead */
} ah_report_key_t;

/* One communicator, as seen by one rank of this process. */
typedef struct {
  uint64_t id; /* the identity every rank computes (shim_comm.c) */
  int nranks, nnodes, rank;
  int nkeys;
  ah_report_key_t *keys;
  int destroyed; /* 1: destroyed (ncclCommDestroy/Finalize), kept in detail as it was then */
} ah_report_comm_t;

/* Communicators destroyed beyond the last AH_REPORT_DESTROYED_DETAIL (kept in detail among the
 * comms), summed into one entry, so that a report stays bounded however many a job makes. */
#define AH_REPORT_DESTROYED_DETAIL 16
typedef struct {
  uint64_t comms;        /* communicator contexts (one per local rank) summed here */
  uint64_t keys, tuned;  /* their keys, and of which were searched */
  uint64_t calls, timed; /* every call counted in those keys; of which were timed */
  double us_total;       /* the timed calls' durations, microseconds (NCCL's choice and applied) */
  double bytes_total;    /* the timed calls' bytes per rank */
  uint64_t sync_waits;   /* waits for the leader's decision, and their time */
  double sync_wait_us;
} ah_report_destroyed_t;

/* One finding of the hang diagnosis that this process received (docs/diagnosis.md). */
#define AH_REPORT_HEALTH_MAX 16
#define AH_REPORT_HEALTH_KINDS 11 /* the highest AH_FINDING_* (ah_report_health_kind names them) */
typedef struct {
  uint64_t comm;
  int kind; /* AH_FINDING_* (ah_coord_health.h): 1 missing … 6 recovered, 7 slow_link, 8 link_ok */
  char text[AH_REPORT_TEXT_MAX];
  double time_s; /* seconds since the epoch when it arrived */
} ah_report_health_t;

/* The HA layer's record (docs/ha.md): one failover of a queue pair to its shadow. */
#define AH_REPORT_HA_MAX 32
typedef struct {
  double time_s; /* seconds since the epoch when NCCL's work moved to the shadow */
  uint32_t qpn;  /* the primary's QP number (what NCCL knows) */
  char dev[32];
  int port, shadow_port;
  char shadow_dev[32]; /* the shadow's NIC when it is another one (AUTOHA_HA=nic), else "" */
  double stall_ms;     /* from the primary's error to the switch */
  uint32_t replayed, synthesized; /* WRs posted again; completions handed over for delivered WRs */
} ah_report_failover_t;

typedef struct {
  char policy[8];   /* AUTOHA_HA: "path" | "port" | "nic"; "" when off (no "ha" section) */
  uint64_t shadows; /* shadows that became ready */
  uint64_t failovers, replayed, synthesized; /* totals (failovers beyond the list are counted) */
  uint64_t rebalances; /* re-plans applied after failovers (AUTOHA_HA=path, docs/ha.md) */
  uint64_t rebalanced; /* this process's queue pairs moved by them */
  double rb_before, rb_share, rb_bound; /* the last re-plan's modelled slowest-flow share: with the
                                       * plan's ports, re-planned, and the best possible (0: none) */
  int nfail;                            /* the first AH_REPORT_HA_MAX failovers */
  ah_report_failover_t fail[AH_REPORT_HA_MAX];
} ah_report_ha_t;

/* The name of a finding's kind ("missing", "incomplete", "mismatch", "resumed", "straggler",
 * "recovered", "slow_link", "link_ok", "died", "stopped", "nic_down"), NULL if none. */
const char *ah_report_health_kind(int kind);

/* What reproduces the run (the report's "run" object): the AUTOHA_* and NCCL_* variables of the
 * process's environment when the report is written, the GPU, the CUDA driver's and runtime's
 * versions, the job's hosts, and the AUTOHA_OVERRIDE rules that were refused (the NCCL version is
 * the report's own field). Fixed-size, so a report stays plain data; variables beyond
 * AH_REPORT_VARS_MAX are dropped (counted in vars_dropped). */
#define AH_REPORT_VARS_MAX 128
#define AH_REPORT_NODES_MAX 64
#define AH_REPORT_REFUSED_MAX 32
typedef struct {
  char name[64];
  char value[AH_REPORT_TEXT_MAX];
} ah_report_var_t;

typedef struct {
  int present;             /* 0: a report without "run" (written before it existed) */
  int nvars, vars_dropped; /* vars sorted by name */
  ah_report_var_t vars[AH_REPORT_VARS_MAX];
  char gpu[AH_REPORT_TEXT_MAX]; /* the GPU model, "" unknown */
  int cuda_driver;              /* cuDriverGetVersion (12040 = 12.4), 0 unknown */
  int cuda_runtime;             /* cudaRuntimeGetVersion of the process's runtime, 0 none */
  char gpu_driver[64]; /* the kernel driver's version (/sys/module/nvidia/version), "" none */
  int nnodes;          /* the job's hosts this process knows (at least its own) */
  char nodes[AH_REPORT_NODES_MAX][AH_REPORT_TEXT_MAX];
  int nrefused; /* AUTOHA_OVERRIDE rules that did not parse, with why */
  char refused[AH_REPORT_REFUSED_MAX][AH_REPORT_TEXT_MAX];
} ah_report_run_t;

/* 1 when the variable `name` may hold a secret (its name contains SECRET, TOKEN, PASSWORD, PASSWD,
 * CREDENTIAL or KEY as a word) and is left out of the report, else 0. */
int ah_report_var_secret(const char *name);

/* Fills run_p->vars (and nvars, vars_dropped) from envp ("NAME=value" strings, like environ): every
 * AUTOHA_* and NCCL_* variable but the secret ones, sorted by name, values made valid UTF-8. */
void ah_report_run_vars(ah_report_run_t *run_p, char *const *envp);

/* The bytes-per-rank range of size bin `bin`, as the report and the metrics state it. */
void ah_report_bin_range(int bin, uint64_t *lo_p, uint64_t *hi_p);
/* A tuning state's name (AH_TUNE_*): "searching", "converged" or "default". */
const char *ah_report_tune_state_name(int state);

/* A version code as text: CUDA's 12040 -> "12.4", NCCL's 22809 -> "2.28.9" (nccl = 1); "" for 0. */
char *ah_report_version_text(int code, int nccl, char *buf, size_t len);

/* The whole report of one process. Strings are copied into fixed buffers, so a read report owns
 * everything it points to. */
typedef struct {
  char job[AH_REPORT_TEXT_MAX]; /* job id from the scheduler (ah_template_job_id), "" if none */
  char host[AH_REPORT_TEXT_MAX];
  int pid;
  int rank;                      /* the process's lowest rank, -1 if none */
  int nccl_version;              /* NCCL_VERSION_CODE style, e.g. 22805; 0 unknown */
  char topo[AH_REPORT_TOPO_MAX]; /* topology (ah_report_topology's text) */
  char mode[16];                 /* "observe" | "fixed" | "tune" */
  double time_s;                 /* seconds since the epoch when written */
  int ncomms;
  ah_report_comm_t *comms;
  ah_report_destroyed_t destroyed; /* "destroyed", present when destroyed.comms > 0 */
  int nhealth;                     /* the latest findings, oldest first */
  ah_report_health_t health[AH_REPORT_HEALTH_MAX];
  ah_report_run_t run; /* what reproduces the run */
  ah_report_ha_t ha;   /* transparent failover (optional "ha" section) */
  /* For the metrics file (tuner/ah_metrics.h), not in the JSON: the findings received since the
   * process started, per kind (health holds only the latest), and its coordinators. */
  uint64_t health_counts[AH_REPORT_HEALTH_KINDS + 1]; /* [kind], 1..AH_REPORT_HEALTH_KINDS */
  int ncoords;       /* the coordinators (hub connections) this process has */
  int ncoords_alive; /* of which are connected now */
} ah_report_t;

/* ---- formulas -------------------------------------------------------------------------------- */

/* nccl-tests' algorithm bandwidth, GB/s (1e9 bytes/s), of a call with `bytes_per_rank` taking
 * `us`: algbw = S / t with S the whole buffer for AllGather, ReduceScatter, AlltoAll, Gather and
 * Scatter (bytes per rank x nranks; for the last three bytes per rank is one peer's block) and
 * the buffer for the others. Returns 0 when us <= 0. */
double ah_report_algbw(int coll, int nranks, double bytes_per_rank, double us);
/* nccl-tests' bus bandwidth factor: AllReduce 2(n-1)/n, AllGather, ReduceScatter, AlltoAll,
 * Gather and Scatter (n-1)/n, Broadcast and Reduce 1. So busbw = algbw x factor. */
double ah_report_busbw_factor(int coll, int nranks);

/* What makes a tuned configuration transferable from one job to another: the report's topology. */
typedef struct {
  char gpu[64];       /* the GPU model ("NVIDIA H100 80GB HBM3"; "" unknown) */
  int nodes, ranks;   /* of the job's first communicator (normally the world) */
  int nics, nic_gbps; /* RDMA NICs NCCL may use on this host, the first one's Gb/s (0: unknown) */
  int nccl_version;   /* ncclGetVersion of the loaded NCCL */
} ah_topology_t;

/* The topology as text, "gpu=...; nodes=N; ranks=N; ranks_per_node=N; nics=NxGGb/s; nccl=X.Y.Z",
 * into out (AH_REPORT_TOPO_MAX bytes); nics is "unknown" when the count is 0 and "N (speed
 * unknown)" without a speed. Returns out. */
char *ah_report_topology(const ah_topology_t *t, char *out);

/* Compares two topology texts field by field. Returns the number of fields that differ (0: the
 * same topology) and says in words which, into why: "gpu is NVIDIA A100 here and NVIDIA H100 in
 * the profile; nodes is 4 here and 2 in the profile". A text that is not of this form (a report
 * of an older autoha held a hash) differs as a whole. */
int ah_report_topology_diff(const char *here, const char *there, char *why, size_t len);

/* Copies text given by a user or the system (a job id, a host name) into out[len] as valid UTF-8:
 * each well-formed character is kept, each byte that is not part of one becomes the four ASCII
 * characters "\xNN", and the copy stops before a character that would not fit whole, so it never
 * ends inside one. Returns out.
 *
 * Note that the report stores what it was given in this form rather than refusing it: a job id
 * with a stray Latin-1 byte still gets its report, and the byte is visible in it. */
char *ah_report_text_copy(char *out, size_t len, const char *in);

/* Name of a source ("default", "override", "profile", "tuned"; "?"), and its inverse (-1). */
const char *ah_report_source_name(int source);
int ah_report_source_parse(const char *s);

/* ---- writing and reading --------------------------------------------------------------------- */

/* The report as JSON text (malloc'ed, the caller frees), or NULL on allocation failure or when
 * jansson cannot be loaded (ah_jansson_ready() logged that, once). */
char *ah_report_to_string(const ah_report_t *r);

/* Writes the report to `path` atomically: "<path>.tmp.<pid>.<n>" (n unique per call) then rename,
 * so a reader sees the old or the new file, never half of one. Folders leading to it that do not
 * exist are created. Returns 0, or -1 with err naming the
 * failing call and the path (not logged: the caller logs once); the temporary file is removed.
 * Without jansson (ah_jansson_ready() is 0) nothing is touched and err says so. */
int ah_report_write(const ah_report_t *r, const char *path, char *err, size_t errlen);

/* Parses JSON text (or a file) into a new report. Returns 0 and sets *r_p, or -1 with err naming
 * the place: "line L column C: <jansson's message>" for malformed JSON, or the JSON path of a
 * field with the wrong type ("comms[1].keys[3].applied.algo: expected a string"). Unknown fields
 * are ignored, so later schema additions still load. Without jansson (ah_jansson_ready() is 0)
 * both return -1 at once, err saying so, and read opens no file. */
int ah_report_parse(const char *text, ah_report_t **r_p, char *err, size_t errlen);
int ah_report_read(const char *path, ah_report_t **r_p, char *err, size_t errlen);
/* ah_report_read for a file of at most max_bytes (a larger one is refused before it is read). */
int ah_report_read_max(const char *path, size_t max_bytes, ah_report_t **r_p, char *err,
                       size_t errlen);

/* Frees a report from ah_report_parse/read (not one the caller filled itself). */
void ah_report_free(ah_report_t *r);

/* ---- profile (warm start) -------------------------------------------------------------------- */

/* One config to apply, keyed by communicator shape and key (communicator ids change every run). */
typedef struct {
  int nranks, nnodes;
  int coll, bin;
  ah_config_t cfg;
  double us;         /* the time it was measured at, for the log */
  double default_us; /* NCCL's default's time, for the log */
} ah_profile_entry_t;

typedef struct {
  int nentries;
  ah_profile_entry_t *entries;
} ah_profile_t;

/* Loads a report as a profile. Refuses (returns -1, logs one error) a file larger than max_bytes
 * (AUTOHA_PROFILE_MAX_MB, checked before it is read), a file that does not parse, a report from another NCCL version (when nccl_version != 0) or another topology fingerprint (when
 * topo is non-NULL and non-empty). On success returns 0 and *p_p: per (nranks, nnodes, coll, bin)
 * the config to apply — a converged tuning winner, else a non-default applied config that was not
 * slower than NCCL's default; keys that ran NCCL's default are left out. When several
 * communicators of the same shape disagree, the one with more calls wins. */
int ah_profile_load(const char *path, size_t max_bytes, int nccl_version, const char *topo,
                    ah_profile_t **p_p);

/* The profile's config for a key, or NULL. Lock-free, allocation-free (binary search over sorted
 * entries). */
const ah_profile_entry_t *ah_profile_lookup(const ah_profile_t *p, int nranks, int nnodes, int coll,
                                            int bin);

void ah_profile_free(ah_profile_t *p);

#endif
