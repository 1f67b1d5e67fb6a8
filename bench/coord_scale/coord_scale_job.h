/* coord_scale_job.h: bench/coord_scale's run with a TP8 x PP8 x DP job's communicators
 * (coord_scale_job.c). */
#ifndef COORD_SCALE_JOB_H
#define COORD_SCALE_JOB_H

/* What one run measured. */
typedef struct {
  int ncomms, nworkers;
  double p50_ms, p99_ms, last99_ms;   /* deliveries; the p99 of each decision's last arrival */
  double hub_cpu_ms;                  /* the hub's process's CPU per decision (records included) */
  double hub_share;                   /* the same, as a share of one CPU over the timed phase (%) */
  double fan_cpu_us_send;             /* the hub thread's CPU in a DP decision's sends, per send */
  double rec_us;                      /* the hub process's CPU besides the fan-outs, per record */
  double records_s;                   /* PROGRESS records the hub handled a second */
  double tables_mib, tables_peak_mib; /* charged to the hub's memory budget */
  double hub_rss_mib;   /* the hub's process's resident growth from before it opened */
  double host_rss_mib;  /* a worker's resident growth per simulated host (8 clients) */
  double workers_share; /* the worker processes' CPU over the timed phase (% of one) */
  double setup_s;       /* from the first client opened to every verdict COMPLETE */
} job_result_t;

/* Runs nclients (a multiple of 64) as the processes of a TP8 x PP8 x DP(nclients/64) job, in
 * worker processes of at most 2,048 clients each, and publishes `rounds` rounds of three decisions
 * (one TP, one PP, one DP communicator each) paced pace_us apart. records: each client sends each
 * of its communicators' progress record once a second, as the shim's ranks do. Returns 0 and fills
 * *r_p, or -1 after printing why. */
int coord_scale_job_run(int nclients, int rounds, long pace_us, int records, job_result_t *r_p);

#endif
