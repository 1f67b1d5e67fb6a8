/* shim_error_wait.c: a NCCL call that a peer made fail waits, briefly, for the hub's finding.
 *
 * When a rank's process dies (SIGKILL, an OOM kill), its peers' next NCCL calls fail with
 * ncclRemoteError or ncclSystemError, and most programs exit or abort right after (PyTorch's
 * watchdog, a launcher ending the job). The hub names the dead rank as soon as its socket closes,
 * but on a loaded machine that finding can reach the survivors a few hundred milliseconds after
 * their own transport has told them: every survivor then exits without a word of who died (seen
 * on sim/ at load 40: 0 of 7 processes logged the finding). So the first such failure of each
 * communicator, in a process connected to a hub, waits up to ERROR_WAIT_MS for a finding to
 * arrive, unless one came in the last FRESH_S seconds; the finding's line and AUTOHA_HEALTH_CMD's
 * event are out before the call returns (the handler runs both before it signals). The call's
 * result is NCCL's, unchanged: the wait only delays it, once per communicator, and never when the
 * process has no hub to hear from. */
#include <errno.h>
#include <pthread.h>
#include <time.h>

#include "ah_env.h"
#include "shim_coord.h"
#include "shim_internal.h"

#define ERROR_WAIT_MS 1000
#define FRESH_S 5
#define SLICE_MS 20
#define WAITED_MAX 64 /* communicators remembered as waited for; beyond that, no more waits */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv; /* on CLOCK_MONOTONIC, set up once */
static pthread_once_t cv_once = PTHREAD_ONCE_INIT;
static uint64_t nfindings; /* findings handled so far */
static uint64_t last_ns;   /* when the last one was (monotonic) */
static ncclComm_t waited[WAITED_MAX];
static int nwaited;

static uint64_t mono_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static void cv_init(void) {
  pthread_condattr_t a;
  pthread_condattr_init(&a);
  pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
  pthread_cond_init(&cv, &a);
  pthread_condattr_destroy(&a);
}

void ah_shim_error_finding(void) {
  pthread_once(&cv_once, cv_init);
  pthread_mutex_lock(&mu);
  nfindings++;
  last_ns = mono_ns();
  pthread_cond_broadcast(&cv);
  pthread_mutex_unlock(&mu);
}

void ah_shim_error_wait(ncclComm_t comm, ncclResult_t rc) {
  if (rc != ncclRemoteError && rc != ncclSystemError) return;
  if (!ah_env_settings()->health || !ah_shim_coord_reachable()) return;
  int saved = errno; /* as the real call left it */
  pthread_once(&cv_once, cv_init);
  pthread_mutex_lock(&mu);
  uint64_t now = mono_ns(), until = now + (uint64_t)ERROR_WAIT_MS * 1000000ull;
  int seen = 0;
  for (int i = 0; i < nwaited && !seen; i++) seen = waited[i] == comm;
  int fresh = nfindings && now - last_ns < (uint64_t)FRESH_S * 1000000000ull;
  if (!seen && !fresh && nwaited < WAITED_MAX) {
    waited[nwaited++] = comm;
    /* in slices, so that a hub lost meanwhile (the dead process ran it) ends the wait: no finding
     * can come then, and the program's exit is not held up. The connection is read without mu
     * held (it takes the shim's coordinator lock). */
    for (uint64_t before = nfindings, t = now; nfindings == before && t < until; t = mono_ns()) {
      pthread_mutex_unlock(&mu);
      int up = ah_shim_coord_reachable();
      pthread_mutex_lock(&mu);
      if (!up || nfindings != before) break;
      uint64_t end = t + SLICE_MS * 1000000ull < until ? t + SLICE_MS * 1000000ull : until;
      struct timespec ts = {(time_t)(end / 1000000000ull), (long)(end % 1000000000ull)};
      pthread_cond_timedwait(&cv, &mu, &ts);
    }
  }
  pthread_mutex_unlock(&mu);
  errno = saved;
}
