/* The shim's side of the coordinator: stamps the hub's address and the job secret into every
 * ncclUniqueId this process makes, connects to the hub named by the id a rank initialises with,
 * and installs the hooks through which the decision path (shim_decide.c) attaches communicators
 * that span processes, publishes the leader's segments and asks whether the hub is still there.
 * Segments arriving from the hub go straight to ah_shim_deliver.
 *
 * Key choice: one coordinator per stamp (normally one per job); a communicator is mapped to the
 * coordinator of the id it was created from, and a split child — created without an id — to the
 * process's coordinator when there is exactly one. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ah_coord.h"
#include "ah_coord_status.h"
#include "ah_digest.h"
#include "shim_coord.h"
#include "shim_decide.h"
#include "rdma.h"
#include "shim_internal.h"

#define COORD_MAP_MAX 4096

typedef struct {
  uint64_t comm;
  ah_coord_t *coord; /* NULL: no stamp, or its hub could not be reached (pass-through) */
  int stamped;
} coord_map_t;

static pthread_mutex_t map_lock = PTHREAD_MUTEX_INITIALIZER;
static coord_map_t map[COORD_MAP_MAX];
static int nmap;
static ah_coord_t *coords[8]; /* distinct coordinators of this process (normally one) */
static int ncoords;

static void map_put(uint64_t comm, ah_coord_t *coord, int stamped) {
  for (int i = 0; i < nmap; i++)
    if (map[i].comm == comm) {
      map[i].coord = coord;
      map[i].stamped = stamped;
      return;
    }
  if (nmap < COORD_MAP_MAX) map[nmap++] = (coord_map_t){comm, coord, stamped};
  else
    AH_LOG_CAPPED(1, AH_LOG_WARN, "more than %d communicators: later ones are not coordinated",
                  COORD_MAP_MAX);
}

/* Returns the coordinator of comm; *known_p is 0 when comm was not created from an id, 1 when its
 * id had no stamp, 2 when it had one. */
static ah_coord_t *map_get(uint64_t comm, int *known_p) {
  ah_coord_t *c = NULL;
  int known = 0;
  pthread_mutex_lock(&map_lock);
  for (int i = 0; i < nmap; i++)
    if (map[i].comm == comm) {
      c = map[i].coord;
      known = map[i].stamped ? 2 : 1;
      break;
    }
  if (!known && ncoords == 1) c = coords[0];
  pthread_mutex_unlock(&map_lock);
  if (known_p) *known_p = known;
  return c;
}

static int hook_attach(void *arg, uint64_t comm, int nranks, int rank) {
  (void)arg;
  int known;
  ah_coord_t *c = map_get(comm, &known);
  if (!c) {
    if (ah_env_settings()->mode == AH_MODE_OBSERVE)
      return 0; /* it runs NCCL's own choices anyway */
    if (known == 2)
      ah_log(AH_LOG_WARN,
             "communicator %016llx: the coordinator hub its unique id names could not "
             "be reached (see the error above): ranks cannot agree on autoha's choices, so this "
             "rank runs NCCL's own for it",
             (unsigned long long)comm);
    else if (known == 1)
      ah_log(AH_LOG_WARN,
             "communicator %016llx was made from a unique id without autoha's stamp "
             "(created by a process without libautoha.so?): ranks cannot agree on autoha's "
             "choices, so this rank runs NCCL's own for it",
             (unsigned long long)comm);
    return 0;
  }
  ah_digest_t d;
  ah_coord_digest_t cd;
  ah_digest_settings(ah_env_settings(), ah_shim.profile, &d);
  _Static_assert(AH_DIGEST_PARTS == AH_COORD_DIGEST_PARTS, "the coordinator carries every part");
  memcpy(cd.part, d.part, sizeof cd.part);
  if (!ah_coord_alive(c) || ah_coord_join_rank(c, comm, nranks, rank, &cd) != 0) {
    ah_log(AH_LOG_WARN,
           "communicator %016llx (rank %d): the coordinator hub is gone; every rank "
           "runs NCCL's own choices for it",
           (unsigned long long)comm, rank);
    return 0;
  }
  ah_shim_health_start(); /* its ranks' progress goes to the hub from now on */
  return 1;
}

/* Says once per communicator which ranks' settings differ from which and in what. */
static void mismatch_log(ah_coord_t *c, uint64_t comm) {
  static uint64_t logged[64]; /* communicators already named (beyond 64, the log cap applies) */
  static int nlogged;
  ah_coord_mismatch_t m;
  if (!ah_coord_mismatch(c, comm, &m)) return;
  pthread_mutex_lock(&map_lock);
  int seen = 0;
  for (int i = 0; i < nlogged; i++) seen |= logged[i] == comm;
  if (!seen && nlogged < 64) logged[nlogged++] = comm;
  pthread_mutex_unlock(&map_lock);
  if (seen) return;
  char what[160];
  AH_LOG_CAPPED(64, AH_LOG_WARN,
                "communicator %016llx: the ranks' autoha settings differ: rank %u%s differs "
                "from rank %u in %s; every rank runs NCCL's own choices for it",
                (unsigned long long)comm, m.first_rank, m.ndiffer > 1 ? " (and other ranks)" : "",
                m.ref_rank, ah_digest_describe(m.mask, what, sizeof what));
  if (m.ndiffer > 1)
    ah_log(AH_LOG_INFO, "communicator %016llx: %u ranks differ from rank %u",
           (unsigned long long)comm, m.ndiffer, m.ref_rank);
}

static int hook_verdict(void *arg, uint64_t comm) {
  (void)arg;
  ah_coord_t *c = map_get(comm, NULL);
  if (!c || !ah_coord_alive(c)) return AH_VERDICT_GONE;
  switch (ah_coord_verdict(c, comm)) {
    case AH_COORD_VERDICT_COMPLETE: return AH_VERDICT_COMPLETE;
    case AH_COORD_VERDICT_ABANDONED: return AH_VERDICT_ABANDONED;
    case AH_COORD_VERDICT_MISMATCH: mismatch_log(c, comm); return AH_VERDICT_MISMATCH;
    default: return AH_VERDICT_PENDING;
  }
}

static void hook_publish(void *arg, const ah_key_t *key, const ah_segment_t *seg) {
  (void)arg;
  ah_coord_t *c = map_get(key->comm, NULL);
  if (c && ah_coord_publish(c, key, seg) != 0)
    AH_LOG_CAPPED(3, AH_LOG_ERROR,
                  "cannot publish a decision of communicator %016llx: the "
                  "coordinator hub is gone",
                  (unsigned long long)key->comm);
}

static int hook_alive(void *arg, uint64_t comm) {
  (void)arg;
  return ah_coord_alive(map_get(comm, NULL));
}

static void hook_poll(void *arg, uint64_t comm) {
  (void)arg;
  (void)ah_coord_poll(map_get(comm, NULL));
}

static uint64_t hook_ticket(void *arg, uint64_t comm) {
  (void)arg;
  return ah_coord_wait_ticket(map_get(comm, NULL));
}

static void hook_wait(void *arg, uint64_t comm, uint64_t ticket, long timeout_us) {
  (void)arg;
  ah_coord_wait(map_get(comm, NULL), ticket, timeout_us);
}

static void hook_progress(void *arg, uint64_t comm, const struct ah_health_rec *rec) {
  (void)arg;
  ah_coord_t *c = map_get(comm, NULL);
  if (c) (void)ah_coord_progress(c, comm, rec); /* a hub that is gone was logged already */
}

static void hook_samples(void *arg, uint64_t comm, uint32_t rank, const ah_health_sample_t *x,
                         int n) {
  (void)arg;
  ah_coord_t *c = map_get(comm, NULL);
  if (c) (void)ah_coord_samples(c, comm, rank, x, n);
}

static void hook_search_time(void *arg, uint64_t comm, uint32_t rank, int coll, int bin,
                             uint64_t index, double us) {
  (void)arg;
  ah_coord_t *c = map_get(comm, NULL);
  if (c) (void)ah_coord_search_time(c, comm, rank, coll, bin, index, us); /* lost with a gone hub */
}

/* The hub's shortest duration of a search call (the leader's process), on the coordinator's thread. */
static void on_min_time(uint64_t comm, int coll, int bin, uint64_t index, double us,
                        uint32_t reported, uint32_t nranks) {
  (void)reported, (void)nranks;
  ah_key_t k = {.comm = comm, .coll = coll, .bin = bin};
  ah_shim_search_observe(&k, index, us);
}

/* The hub's straggler audit of a key of this process (ah_coord_audit.h), on the coordinator's thread. */
static void on_audit(uint64_t comm, int coll, int bin, uint64_t from, unsigned calls) {
  ah_key_t k = {.comm = comm, .coll = coll, .bin = bin};
  ah_shim_audit(&k, from, calls);
}

/* The process's last local rank of `comm` is gone: leave it at the hub. */
static void hook_detach(void *arg, uint64_t comm) {
  (void)arg;
  ah_coord_t *c = map_get(comm, NULL);
  if (c) ah_coord_leave(c, comm);
}

static void hooks_install(void) {
  static const ah_shim_coord_hooks_t h = {.attach = hook_attach,
                                          .verdict = hook_verdict,
                                          .publish = hook_publish,
                                          .alive = hook_alive,
                                          .poll = hook_poll,
                                          .ticket = hook_ticket,
                                          .wait = hook_wait,
                                          .progress = hook_progress,
                                          .samples = hook_samples,
                                          .search_time = hook_search_time,
                                          .detach = hook_detach};
  ah_shim_set_coord_hooks(&h);
  ah_coord_set_mintime_handler(on_min_time);
  ah_coord_set_audit_handler(on_audit);
}

/* The coordinator's setup, from the settings the environment table parsed (one parser for each
 * variable: the coordinator reads no environment). */
static ah_coord_setup_t coord_setup(void) {
  const ah_settings_t *s = ah_env_settings();
  ah_coord_setup_t setup = {
      .addr = s->coord_addr,
      .join_s = s->coord_join_s,
      .hang_s = s->hang_s,
      .straggler_pct = s->straggler_pct > 0 ? s->straggler_pct : -1,
      .straggler_audit_s = s->straggler_audit_s > 0 ? s->straggler_audit_s : -1,
      .slow_link_pct = s->slow_link_pct > 0 ? s->slow_link_pct : -1,
      .ifname = s->coord_ifname,
      .relay = s->coord_relay,
      .hub_mem_mb = s->hub_mem_mb};
  return setup;
}

/* The hub's credentials for `autoha status` (AUTOHA_STATUS_FILE), once per process: the job's name
 * (%j) is fixed from the first id it stamps, normally the world's. */
static void cred_write(const ah_coord_stamp_t *st, uint64_t hint_id) {
  static int done;
  const ah_settings_t *s = ah_env_settings();
  if (__atomic_exchange_n(&done, 1, __ATOMIC_ACQ_REL) || !s->status_file[0]) return;
  char host[256] = "?", job[AH_SHIM_JOB_MAX], path[AH_ENV_PATH_MAX], err[512],
       beside[AH_ENV_PATH_MAX];
  /* By default the file sits beside the reports, wherever AUTOHA_REPORT puts them. */
  const char *tmpl = s->status_file;
  const ah_env_var_t *sv = ah_env_var_find("AUTOHA_STATUS_FILE"),
                     *rv = ah_env_var_find("AUTOHA_REPORT");
  if (sv && rv && strcmp(tmpl, sv->default_text) == 0 && s->report[0] &&
      strcmp(s->report, rv->default_text) != 0) {
    const char *slash = strrchr(s->report, '/');
    if (slash)
      snprintf(beside, sizeof beside, "%.*s/hub-%%h-%%p.cred", (int)(slash - s->report), s->report);
    else snprintf(beside, sizeof beside, "hub-%%h-%%p.cred");
    tmpl = beside;
  }
  gethostname(host, sizeof host - 1);
  ah_shim_job_name(hint_id, job, sizeof job);
  if (ah_template_expand(tmpl, host, (int)getpid(), -1, job, path, sizeof path, err, sizeof err) !=
          0 ||
      ah_coord_cred_write(path, st, err, sizeof err) != 0)
    ah_log(AH_LOG_WARN, "AUTOHA_STATUS_FILE: %s: autoha status cannot reach this job", err);
  else ah_log(AH_LOG_INFO, "hub credentials for autoha status: %s", path);
}

void ah_shim_coord_stamp(ncclUniqueId *id) {
  ah_shim_init();
  if (!ah_shim.enabled || !id) return;
  ah_coord_stamp_t st;
  ah_coord_setup_t setup = coord_setup();
  if (ah_coord_hub_start(&setup, &st) != 0) {
    AH_LOG_CAPPED(1, AH_LOG_WARN,
                  "no coordinator hub: communicators spanning processes are not tuned");
    return;
  }
  ah_coord_stamp_write(&st, (unsigned char *)id->internal);
  cred_write(&st, ah_comm_id_from_unique_id(id));
}

/* The coordinators this process talks to (normally one), and how many of them are connected now,
 * for the metrics (ah_shim_report_set_coord_count). Cheap: a lock over at most 8 entries. */
static void coord_count(int *n_p, int *alive_p) {
  int n = 0, alive = 0;
  pthread_mutex_lock(&map_lock);
  for (int i = 0; i < ncoords && i < 8; i++, n++) alive += ah_coord_alive(coords[i]);
  pthread_mutex_unlock(&map_lock);
  *n_p = n;
  *alive_p = alive;
}

static void coord_goodbye(void);

void ah_shim_coord_seen(const ncclUniqueId *id) {
  ah_shim_init();
  if (!ah_shim.enabled || !id) return;
  uint64_t comm = ah_comm_id_from_unique_id(id);
  ah_coord_stamp_t st;
  ah_coord_t *c = NULL;
  int stamped = ah_coord_stamp_read((const unsigned char *)id->internal, &st) == 0;
  ah_coord_setup_t setup = coord_setup();
  if (stamped) c = ah_coord_connect(&st, &setup, ah_shim_deliver, NULL);
  pthread_mutex_lock(&map_lock);
  map_put(comm, c, stamped);
  int seen = 0;
  for (int i = 0; i < ncoords && i < 8; i++) seen |= coords[i] == c;
  if (c && !seen) {
    if (ncoords < 8) coords[ncoords] = c;
    if (ncoords++ == 0) {
      atexit(coord_goodbye);
      ah_shim_report_set_coord_count(coord_count);
    }
  }
  ah_shim_ha_set_coord(ncoords == 1 ? coords[0] : NULL); /* shadows need exactly one hub */
  pthread_mutex_unlock(&map_lock);
  /* Installed even without a coordinator, so that a communicator made from an unstamped id and
   * spanning processes reaches hook_attach, which says why it is not tuned. */
  hooks_install();
}

/* At exit (registered at the first connection, so it runs before the report is written): says
 * goodbye to every hub this process talks to, so that its leaving is not taken for a death, and
 * has the hub this process runs say goodbye to its clients. */
static void coord_goodbye(void) {
  pthread_mutex_lock(&map_lock);
  for (int i = 0; i < ncoords && i < 8; i++) ah_coord_goodbye(coords[i]);
  pthread_mutex_unlock(&map_lock);
  ah_coord_hub_goodbye(); /* when this process runs the hub */
}

int ah_shim_coord_reachable(void) {
  int up = 0;
  pthread_mutex_lock(&map_lock);
  for (int i = 0; i < ncoords && i < 8; i++) up |= ah_coord_reachable(coords[i]);
  pthread_mutex_unlock(&map_lock);
  return up;
}

void ah_shim_coord_on_finding(void (*fn)(uint64_t comm, const ah_finding_t *f)) {
  ah_coord_set_finding_handler(fn);
}
