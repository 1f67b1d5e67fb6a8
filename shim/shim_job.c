/* The job as this process sees it: the shape and identity of its first communicator (normally the
 * world), the job's name for report paths, the topology reports carry and profiles must match, and
 * the profile (AUTOHA_PROFILE) loaded when the first communicator is created. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "shim_internal.h"

static pthread_mutex_t job_lock = PTHREAD_MUTEX_INITIALIZER;
static char job_fallback[AH_SHIM_JOB_MAX]; /* "comm-<id>", fixed at its first use */

static void largest_comm(void *arg, ah_comm_t *c) {
  ah_comm_t **best = arg;
  if (!*best || c->nranks > (*best)->nranks ||
      (c->nranks == (*best)->nranks && c->id < (*best)->id))
    *best = c;
}

void ah_shim_job_name(uint64_t hint_id, char *out, size_t len) {
  if (ah_template_job_id(out, len)) return;
  pthread_mutex_lock(&job_lock);
  if (!job_fallback[0]) {
    ah_comm_t *best = NULL;
    ah_comm_foreach(largest_comm, &best);
    uint64_t id = best ? best->id : hint_id;
    if (id) snprintf(job_fallback, sizeof job_fallback, "comm-%016llx", (unsigned long long)id);
  }
  snprintf(out, len, "%s", job_fallback[0] ? job_fallback : "unknown");
  pthread_mutex_unlock(&job_lock);
}

/* ---- profile (warm start), loaded at the first communicator -------------------------------------- */

static pthread_once_t profile_once = PTHREAD_ONCE_INIT;
static int profile_nranks, profile_nnodes;
static _Thread_local int arg_nranks, arg_nnodes, arg_rank; /* read by the once routine's thread */
static _Thread_local uint64_t arg_id;

/* The topology of this job as the shim sees it, with the shape of the first communicator (normally
 * the world): the same when writing a report and when loading one as a profile. */
void ah_shim_fingerprint(char out[AH_REPORT_TOPO_MAX]) {
  ah_shim_topology(profile_nranks, profile_nnodes, out);
}

static void first_comm_run(void) {
  profile_nranks = arg_nranks;
  profile_nnodes = arg_nnodes;
  const ah_settings_t *s = ah_env_settings();
  if (!s->profile[0]) return;
  char topo[AH_REPORT_TOPO_MAX], path[AH_ENV_PATH_MAX], host[256] = "?", err[256],
                                                        job[AH_SHIM_JOB_MAX];
  if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "?");
  host[sizeof host - 1] = 0;
  ah_shim_job_name(arg_id, job, sizeof job);
  if (ah_template_expand(s->profile, host, (int)getpid(), arg_rank, job, path, sizeof path, err,
                         sizeof err) != 0) {
    ah_log(AH_LOG_ERROR, "AUTOHA_PROFILE: %s: no profile is loaded", err);
    return;
  }
  ah_shim_fingerprint(topo);
  ah_profile_t *p = NULL;
  if (ah_profile_load(path, (size_t)s->profile_max_mb << 20, ah_shim.nccl_version, topo, &p) == 0) {
    ah_shim.profile = p;
    ah_log(AH_LOG_INFO, "profile %s loaded: %d configurations", path, p->nentries);
  } /* ah_profile_load logged why it refused */
}

void ah_shim_first_comm(uint64_t id, int nranks, int nnodes, int rank) {
  arg_id = id;
  arg_nranks = nranks;
  arg_nnodes = nnodes;
  arg_rank = rank;
  pthread_once(&profile_once, first_comm_run);
}
