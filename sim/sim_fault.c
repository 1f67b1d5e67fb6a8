/* Faults injected into a job on sim/, for the tests of autoha's diagnosis: what a GPU job does when
 * a collective never completes on one rank, when one rank computes slowly, and when ranks issue
 * different collectives (which real NCCL does not detect: it hangs).
 *
 *   NCCLSIM_FAULT=FAULT[,FAULT...]     FAULT is one of
 *     hang:rank=R:call=N    rank R's collective #N (0-based, per communicator) moves its data and
 *                           then never completes, as a kernel that never ends: the call returns,
 *                           but its stream's clock becomes infinite, so whatever is queued on the
 *                           stream after it never runs (later collectives there do not take part)
 *                           and whatever waits for it (a sync, an event) never returns, as the host
 *                           of a GPU blocks at its next sync. The other ranks complete #N and wait
 *                           in #N+1.
 *     slow:rank=R:pct=P[:after=N]  rank R's simulated compute (ncclsimStreamAddCompute) takes P%
 *                           longer; R is the process's RANK (set by ncclsim-run). With after=N,
 *                           only the compute issued once the process has issued N collectives (over
 *                           all its communicators and ranks): a GPU that turns slow mid-job.
 *   NCCLSIM_MISMATCH=fail|hang   ranks that disagree on a collective fail it on every rank with an
 *                           error naming each rank's call (fail, the default), or block in it
 *                           forever, as real NCCL would (hang).
 *
 * A hang applies to every communicator the rank is rank R of, optionally only to those of
 * `nranks=K` ranks (hang:rank=1:call=5:nranks=8). A malformed entry is reported once by name and
 * ignored: the simulator never stops a job from starting. Each injected fault says so on stderr
 * when it strikes. */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim_fault_parse.h"
#include "sim_nccl.h"

static pthread_once_t fault_once = PTHREAD_ONCE_INIT;
static sim_fault_t faults[SIM_MAX_FAULTS];
static int nfaults;
static int mismatch_hangs;
static const sim_fault_t *slow[SIM_MAX_FAULTS]; /* this process's slow faults */
static int nslow;
static _Atomic int slow_struck[SIM_MAX_FAULTS]; /* a late one has said so */
static _Atomic uint64_t colls_issued;           /* this process's collectives so far (after=N) */

static void fault_bad(void *arg, const char *entry, const char *why) {
  (void)arg;
  sim_log_warn("invalid entry in NCCLSIM_FAULT: '%s' (%s); ignored", entry, why);
}

static void fault_init(void) {
  const char *m = getenv("NCCLSIM_MISMATCH");
  if (m && *m) {
    if (strcmp(m, "hang") == 0) mismatch_hangs = 1;
    else if (strcmp(m, "fail") != 0)
      sim_log_warn("invalid value for NCCLSIM_MISMATCH: '%s' (expected fail or hang); failing", m);
  }
  const char *s = getenv("NCCLSIM_FAULT");
  if (!s || !*s) return;
  const char *rank_env = getenv("RANK");
  long my_rank = rank_env && *rank_env ? strtol(rank_env, NULL, 10) : -1;
  nfaults = sim_fault_parse(s, faults, fault_bad, NULL);
  for (int i = 0; i < nfaults; i++)
    if (faults[i].kind == SIM_FAULT_SLOW && faults[i].rank == my_rank) slow[nslow++] = &faults[i];
}

double sim_fault_compute_factor(void) {
  pthread_once(&fault_once, fault_init);
  double factor = 1.0;
  uint64_t issued = atomic_load_explicit(&colls_issued, memory_order_relaxed);
  for (int i = 0; i < nslow; i++) {
    if (issued < slow[i]->after) continue;
    factor *= 1.0 + slow[i]->pct / 100.0;
    if (slow[i]->after && !atomic_exchange(&slow_struck[i], 1)) {
      fprintf(stderr,
              "ncclsim: fault: rank %ld computes %g%% slower from its collective #%llu on "
              "(NCCLSIM_FAULT)\n",
              slow[i]->rank, slow[i]->pct, slow[i]->after);
      fflush(stderr);
    }
  }
  return factor;
}

void sim_fault_after_coll(const struct ncclComm *c, uint64_t call, struct CUstream_st *stream) {
  pthread_once(&fault_once, fault_init);
  if (!(call >> 63)) /* not a split's exchange */
    atomic_fetch_add_explicit(&colls_issued, 1, memory_order_relaxed);
  for (int i = 0; i < nfaults; i++) {
    const sim_fault_t *f = &faults[i];
    if (f->kind != SIM_FAULT_HANG || f->rank != c->rank || f->call != call ||
        (f->nranks && f->nranks != c->nranks))
      continue;
    fprintf(stderr,
            "ncclsim: fault: rank %d of communicator %016llx never completes collective "
            "#%llu (NCCLSIM_FAULT)\n",
            c->rank, (unsigned long long)c->hash, (unsigned long long)call);
    fflush(stderr);
    sim_stream_set_time(stream, INFINITY); /* its stream never finishes: see sim_stream_stuck */
  }
}

int sim_fault_mismatch_hangs(void) {
  pthread_once(&fault_once, fault_init);
  return mismatch_hangs;
}

void sim_fault_mismatch_block(void) { sim_block_forever(); }
