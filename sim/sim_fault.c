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
 *     slow:rank=R:pct=P     rank R's simulated compute (ncclsimStreamAddCompute) takes P% longer;
 *                           R is the process's RANK (set by ncclsim-run).
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

#include "sim_nccl.h"

#define MAX_FAULTS 8

typedef enum { FAULT_HANG = 1, FAULT_SLOW = 2 } fault_kind_t;

typedef struct {
  fault_kind_t kind;
  long rank, nranks; /* nranks 0: any communicator */
  unsigned long long call;
  double pct;
} fault_t;

static pthread_once_t fault_once = PTHREAD_ONCE_INIT;
static fault_t faults[MAX_FAULTS];
static int nfaults;
static int mismatch_hangs;
static double slow_factor = 1.0; /* this process's compute factor */

/* Parses one "key=value" of an entry into *f. Returns 0, or -1. */
static int parse_field(const char *field, fault_t *f, int *seen) {
  const char *eq = strchr(field, '=');
  if (!eq || eq[1] == 0) return -1;
  size_t klen = (size_t)(eq - field);
  char *end;
  if (klen == 4 && strncmp(field, "rank", 4) == 0) {
    f->rank = strtol(eq + 1, &end, 10);
    *seen |= 1;
    return *end || f->rank < 0 ? -1 : 0;
  }
  if (klen == 4 && strncmp(field, "call", 4) == 0) {
    if (eq[1] == '-') return -1;
    f->call = strtoull(eq + 1, &end, 10);
    *seen |= 2;
    return *end ? -1 : 0;
  }
  if (klen == 3 && strncmp(field, "pct", 3) == 0) {
    f->pct = strtod(eq + 1, &end);
    *seen |= 4;
    return *end || !(f->pct > 0 && f->pct <= 10000) ? -1 : 0;
  }
  if (klen == 6 && strncmp(field, "nranks", 6) == 0) {
    f->nranks = strtol(eq + 1, &end, 10);
    return *end || f->nranks < 1 ? -1 : 0;
  }
  return -1;
}

/* Parses one entry ("hang:rank=1:call=5"). Returns 0 with *f, or -1. */
static int parse_entry(char *entry, fault_t *f) {
  memset(f, 0, sizeof *f);
  char *save = NULL, *kind = strtok_r(entry, ":", &save);
  if (!kind) return -1;
  if (strcmp(kind, "hang") == 0) f->kind = FAULT_HANG;
  else if (strcmp(kind, "slow") == 0) f->kind = FAULT_SLOW;
  else return -1;
  int seen = 0;
  for (char *field; (field = strtok_r(NULL, ":", &save));)
    if (parse_field(field, f, &seen) != 0) return -1;
  int need = f->kind == FAULT_HANG ? 1 | 2 : 1 | 4;
  return (seen & need) == need ? 0 : -1;
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
  char *copy = strdup(s);
  if (!copy) return;
  const char *rank_env = getenv("RANK");
  long my_rank = rank_env && *rank_env ? strtol(rank_env, NULL, 10) : -1;
  char *save = NULL;
  for (char *entry = strtok_r(copy, ",", &save); entry; entry = strtok_r(NULL, ",", &save)) {
    char text[128];
    snprintf(text, sizeof text, "%s", entry);
    fault_t f;
    if (parse_entry(entry, &f) != 0) {
      sim_log_warn("invalid entry in NCCLSIM_FAULT: '%s' (expected hang:rank=R:call=N[:nranks=K] "
                   "or slow:rank=R:pct=P); ignored", text);
      continue;
    }
    if (nfaults == MAX_FAULTS) {
      sim_log_warn("NCCLSIM_FAULT: more than %d faults; '%s' ignored", MAX_FAULTS, text);
      continue;
    }
    faults[nfaults++] = f;
    if (f.kind == FAULT_SLOW && f.rank == my_rank) slow_factor *= 1.0 + f.pct / 100.0;
  }
  free(copy);
}

double sim_fault_compute_factor(void) {
  pthread_once(&fault_once, fault_init);
  return slow_factor;
}


void sim_fault_after_coll(const struct ncclComm *c, uint64_t call, struct CUstream_st *stream) {
  pthread_once(&fault_once, fault_init);
  for (int i = 0; i < nfaults; i++) {
    const fault_t *f = &faults[i];
    if (f->kind != FAULT_HANG || f->rank != c->rank || f->call != call ||
        (f->nranks && f->nranks != c->nranks))
      continue;
    fprintf(stderr, "ncclsim: fault: rank %d of communicator %016llx never completes collective "
            "#%llu (NCCLSIM_FAULT)\n", c->rank, (unsigned long long)c->hash,
            (unsigned long long)call);
    fflush(stderr);
    sim_stream_set_time(stream, INFINITY); /* its stream never finishes: see sim_stream_stuck */
  }
}

int sim_fault_mismatch_hangs(void) {
  pthread_once(&fault_once, fault_init);
  return mismatch_hangs;
}

void sim_fault_mismatch_block(void) { sim_block_forever(); }
