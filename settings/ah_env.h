/* ah_env.h: every AUTOHA_* variable, UCX-style — one table row per variable (name, default as text,
 * syntax, a doc paragraph, a typed parser, the settings field it fills). The same table drives the
 * parsing at init, `autoha env` and docs/environment.md (a test fails when the doc and the table
 * disagree).
 *
 * A bad value logs "autoha: invalid value for AUTOHA_X: '...' (expected ...)" and keeps the default;
 * an AUTOHA_* name no row consumes gets a warning naming the nearest real name.
 *
 * Note that the process-wide settings are parsed once (ah_env_settings) and never written again,
 * so every thread, including NCCL's own, reads them without a lock. */
#ifndef AH_ENV_H
#define AH_ENV_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "ah_cluster_endpoints.h"
#include "ah_override.h"

/* The enum settings by name: each value is the index of its choice in the row's '|' list, so the
 * lists in ah_env.c and these stay in the same order. AUTOHA_LOG's are AH_LOG_* (ah_log.h),
 * AUTOHA_QP_SPORT's AH_PATH_SPORT_* (ah_path.h). Compare a setting with these, never a number
 * (tests/tuner/check_enum_names.sh greps for that). */
enum { AH_MODE_OBSERVE = 0, AH_MODE_FIXED = 1, AH_MODE_TUNE = 2 }; /* AUTOHA_MODE */
/* AUTOHA_HA */
enum { AH_HA_POLICY_OFF = 0, AH_HA_POLICY_PATH = 1, AH_HA_POLICY_PORT = 2, AH_HA_POLICY_NIC = 3 };
enum { AH_QP_METHOD_LABEL = 0, AH_QP_METHOD_MLX5DV = 1 };      /* AUTOHA_QP_METHOD */
enum { AH_HEALTH_ACTION_LOG = 0, AH_HEALTH_ACTION_ABORT = 1 }; /* AUTOHA_HEALTH_ACTION */

/* A default another component needs as a number too (the hub's options, the search's, for callers
 * that pass no settings) is defined by that component, under this table (AH_COORD_*_DEFAULT in
 * ah_coord.h, AH_TUNE_BUDGET_DEFAULT in ah_tune.h); the row's default text is made from it, so
 * each is written once. */
#define AH_ENV_DEFAULT_TEXT(n) AH_ENV_DEFAULT_TEXT_(n) /* such a number as the row's text */
#define AH_ENV_DEFAULT_TEXT_(n) #n

#define AH_ENV_PATH_MAX 1024
#define AH_ENV_ADDR_MAX 256

/* The parsed settings. Each field says which variable fills it. */
typedef struct {
  int enable;                     /* AUTOHA_ENABLE: 0 = pure pass-through */
  int mode;                       /* AUTOHA_MODE: AH_MODE_* */
  int log_level;                  /* AUTOHA_LOG: AH_LOG_* (also applied to ah_log) */
  char log_file[AH_ENV_PATH_MAX]; /* AUTOHA_LOG_FILE: path template (%h %p %r %j %%); "" = stderr */
  int log_time;                   /* AUTOHA_LOG_TIME: a timestamp in front of each line */
  int log_subsys;                 /* AUTOHA_LOG_SUBSYS: mask of 1 << AH_SUB_* (ah_log.h) */
  ah_override_t override;         /* AUTOHA_OVERRIDE: the rules that parsed */
  char override_text[AH_ENV_PATH_MAX]; /* AUTOHA_OVERRIDE as given ("" when unset) */
  char report[AH_ENV_PATH_MAX];     /* AUTOHA_REPORT: path template (%h %p %r %%); "" = no report */
  int report_interval_s;            /* AUTOHA_REPORT_INTERVAL_S: 0 = teardown and exit only */
  char metrics[AH_ENV_PATH_MAX];    /* AUTOHA_METRICS: path template of the .prom file; "" = none */
  char profile[AH_ENV_PATH_MAX];    /* AUTOHA_PROFILE: report to warm-start from; "" = none */
  int profile_max_mb;               /* AUTOHA_PROFILE_MAX_MB: a larger profile is refused */
  char jansson[AH_ENV_PATH_MAX];    /* AUTOHA_JANSSON: the file to open; "" = the search */
  double sync_warn_s;               /* AUTOHA_SYNC_WARN_S: warn when a rank waits this long */
  double sync_timeout_s;            /* AUTOHA_SYNC_TIMEOUT_S: stop waiting for a decision */
  int tune_budget;                  /* AUTOHA_TUNE_BUDGET: calls a key may spend searching */
  char coord_addr[AH_ENV_ADDR_MAX]; /* AUTOHA_COORD_ADDR: host:port; "" = from the unique id */
  char
      coord_ifname[AH_ENV_ADDR_MAX]; /* AUTOHA_COORD_IFNAME: the hub's interface (NCCL_SOCKET_IFNAME
                                      * syntax); "" = NCCL's default order */
  double coord_join_s;      /* AUTOHA_COORD_JOIN_S: all ranks must join the hub within this */
  int coord_relay;          /* AUTOHA_COORD_RELAY: one connection to the hub per host */
  int hub_mem_mb;           /* AUTOHA_HUB_MEM_MB: the hub's memory budget for the job's tables */
  int health;               /* AUTOHA_HEALTH: send progress records for hang diagnosis */
  double hang_s;            /* AUTOHA_HANG_S: no progress this long is diagnosed */
  double straggler_pct;     /* AUTOHA_STRAGGLER_PCT: lateness flagged, 0 off */
  double straggler_audit_s; /* AUTOHA_STRAGGLER_AUDIT_S: period of the hub's audits, 0 off */
  double slow_link_pct;     /* AUTOHA_SLOW_LINK_PCT: a connection's rate flagged, 0 off */
  int health_action;        /* AUTOHA_HEALTH_ACTION: AH_HEALTH_ACTION_* */
  char health_cmd[AH_ENV_PATH_MAX]; /* AUTOHA_HEALTH_CMD: run with each finding's event on stdin */
  char status_file
      [AH_ENV_PATH_MAX]; /* AUTOHA_STATUS_FILE: the hub's credentials for autoha status */
  int qp;                /* AUTOHA_QP: 0 = leave every QP as NCCL set it */
  int qp_sport;          /* AUTOHA_QP_SPORT: AH_PATH_SPORT_* (ah_path.h) */
  char qp_sport_file[AH_ENV_PATH_MAX]; /* AUTOHA_QP_SPORT=file:PATH: the PATH */
  int qp_tc;                           /* AUTOHA_QP_TC: traffic class 0..255 (a DSCP 0..63 when
                                      * qp_tc_dscp), -1 = NCCL's */
  int qp_tc_dscp; /* AUTOHA_QP_TC=dscp=N: only the DSCP bits, NCCL's ECN kept */
  char qp_topo
      [AH_ENV_PATH_MAX]; /* AUTOHA_QP_TOPO: topology file for AUTOHA_QP_SPORT=plan; "" = none */
  int qp_method;         /* AUTOHA_QP_METHOD: AH_QP_METHOD_* */
  char qp_tc_comm[AH_ENV_PATH_MAX]; /* AUTOHA_QP_TC_COMM: per-communicator class rules; "" = none */
  int ha;                           /* AUTOHA_HA: AH_HA_POLICY_* (docs/ha.md) */
  double ha_connect_s;              /* AUTOHA_HA_CONNECT_S: wait for the peer's shadow this long */
  double ha_failover_s;             /* AUTOHA_HA_FAILOVER_S: bound on agreeing with the peer */
  double ha_soft_timeout_s;         /* AUTOHA_HA_SOFT_TIMEOUT_S: fail over a stalled QP (0: auto) */
  double ha_degrade;   /* AUTOHA_HA_DEGRADE: completion-time ratio of a degraded QP (0: off) */
  double ha_degrade_s; /* AUTOHA_HA_DEGRADE_S: its measurement window */
  int ha_ib_timeout; /* AUTOHA_HA_IB_TIMEOUT: RC timeout of protected QPs, at most NCCL's (0: NCCL's) */
  int ha_ib_retry_cnt; /* AUTOHA_HA_IB_RETRY_CNT: their RC retry count, at most NCCL's */
  int ha_hb_ms;        /* AUTOHA_HA_HEARTBEAT_MS: a heartbeat on each ready standby this often */
  int ha_hb_miss[2];   /* AUTOHA_HA_HEARTBEAT_MISS: dead after [0] missed of the last [1] */
  int ha_failback;     /* AUTOHA_HA_FAILBACK: move traffic back to a recovered path (bool) */
  ah_cluster_endpoints_t etcd;       /* AUTOHA_ETCD: the etcd cluster's members; n == 0 = none */
  double etcd_timeout_s;             /* AUTOHA_ETCD_TIMEOUT_S: the bound on one etcd call */
  int etcd_ttl_s;                    /* AUTOHA_ETCD_TTL_S: the lease of a job or a candidate */
  char etcd_prefix[AH_ENV_ADDR_MAX]; /* AUTOHA_ETCD_PREFIX: where autoha's keys live */
  char torch_venv[AH_ENV_PATH_MAX]; /* AUTOHA_TORCH_VENV: scripts/torch-venv's, not the library's */
  int fuzz_seconds;                 /* AUTOHA_FUZZ_SECONDS: scripts/test's, not the library's */
} ah_settings_t;

/* Value types of the table rows. */
typedef enum {
  AH_ENV_BOOL,     /* 1|0|y|n|yes|no|on|off|true|false */
  AH_ENV_INT,      /* integer within [min, max] */
  AH_ENV_DOUBLE,   /* decimal within [min, max] */
  AH_ENV_ENUM,     /* one of a '|'-separated list; stores the index */
  AH_ENV_SIZE,     /* integer with K/M/G suffix within [min, max] */
  AH_ENV_STRING,   /* free text: addresses */
  AH_ENV_PATH,     /* a path template (%h %p %r %%) */
  AH_ENV_OVERRIDE, /* the override grammar of ah_override.h */
  AH_ENV_QP_SPORT, /* off|spread|plan|file:PATH */
  AH_ENV_TC,       /* N (0..255) or dscp=N (0..63), or "nccl" */
  AH_ENV_TC_RULES, /* MATCH:CLASS;... per-communicator classes (path/ah_path.h), kept as text */
  AH_ENV_COMMAND,  /* a shell command line, kept as text */
  AH_ENV_SUBSYS,   /* a log subsystem list as NCCL_DEBUG_SUBSYS: tune,coord or ^qp (ah_log.h) */
  AH_ENV_IFNAME,   /* an interface list as NCCL_SOCKET_IFNAME: [^][=]NAME,NAME..., kept as text */
  AH_ENV_TEXT,     /* free text, kept as is (a variable only the project's scripts read) */
  AH_ENV_FILE,     /* a file's path or name, kept as is (no template); empty = none */
  AH_ENV_RATIO,    /* N/M, integers with 1 <= N <= M <= max (an int[2]: N, M) */
  AH_ENV_ETCD,     /* http://HOST:PORT,... (cluster/ah_cluster_endpoints.h), parsed into a list */
  AH_ENV_PREFIX,   /* an etcd key prefix: starts and ends with '/', printable ASCII */
} ah_env_type_t;

/* One row of the table. */
typedef struct {
  const char *name; /* "AUTOHA_MODE" */
  ah_env_type_t type;
  const char *default_text; /* the default, as the user would write it */
  const char *syntax;       /* what a value looks like ("observe|fixed|tune", "0..3600") */
  const char *doc;          /* one paragraph: what it does, when to change it */
  double min, max;          /* bounds for INT, DOUBLE and SIZE */
  const char *choices;      /* '|'-separated for ENUM */
  size_t offset, size;      /* where the value goes in ah_settings_t, and the field's size */
  const char *invalid;      /* the value taken when the given one does not parse (NULL: the
                            * default), for a variable whose safe fallback is not its default */
} ah_env_var_t;

/* The table: number of rows and row i (NULL out of range). */
int ah_env_var_count(void);
const ah_env_var_t *ah_env_var_get(int i);
/* The row named `name` (exact match), or NULL. */
const ah_env_var_t *ah_env_var_find(const char *name);

/* The process-wide settings, parsed from the environment at the first call (any thread; later
 * calls return the same pointer without locking). Never NULL: bad values keep their defaults.
 * Note that this is the one way product code reads a setting (the shim's files included): it is
 * valid before any init has run and on every thread, so no caller guards a NULL with a default
 * of its own. */
const ah_settings_t *ah_env_settings(void);

/* Fills s_p with every default. */
void ah_env_defaults(ah_settings_t *s_p);

/* Parses the environment `envp` (NULL-terminated "NAME=value" strings, like environ) into s_p,
 * starting from the defaults. Every bad value is logged (invalid value ... (expected ...)) and its
 * default kept; every unknown AUTOHA_* name is logged with the nearest real name. Returns the
 * number of problems found (0 = all clean). Does not touch the process-wide settings, so tests and
 * `autoha env` may call it freely. */
int ah_env_parse(char *const *envp, ah_settings_t *s_p);

/* Parses one value of row v into s_p. Returns 0, or -1 with s_p unchanged; on -1, when err is
 * given, err receives "invalid value for AUTOHA_X: '...' (expected ...)" (no "autoha:" prefix,
 * not logged: the caller decides). AUTOHA_OVERRIDE is the exception: its rules that parsed are
 * stored even when others did not (-1, one err line per bad rule), because the rest still apply. */
int ah_env_parse_one(const ah_env_var_t *v, const char *value, ah_settings_t *s_p, char *err,
                     size_t errlen);

/* The row name nearest to `name` (edit distance), for "unknown variable ... (maybe AUTOHA_Y?)".
 * Returns NULL when nothing is close (distance more than a third of the name). */
const char *ah_env_nearest(const char *name);

/* Writes the current value of row v in s, as text a user could set again. Returns buf. */
char *ah_env_value_format(const ah_env_var_t *v, const ah_settings_t *s, char *buf, size_t len);

/* `autoha env`: a first line "# autoha <version>", then every row as NAME=value (from envp, or the
 * default, commented "# default"), and with `docs` the doc paragraph and a "# syntax:" line above
 * each. */
void ah_env_print(FILE *f, char *const *envp, int docs);

/* The Markdown section of docs/environment.md that the table generates, between the markers
 * "<!-- env-table:begin -->" and "<!-- env-table:end -->" (both included). The doc test compares
 * the file's section with this. */
void ah_env_doc_markdown(FILE *f);

/* Name of a mode ("observe", "fixed", "tune"; "?" otherwise). */
const char *ah_env_mode_name(int mode);

#endif
