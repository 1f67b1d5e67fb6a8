/* Communicator identity, the registry of communicators the shim knows, and which of them are
 * wholly inside this process.
 *
 * The identity must be the same on every rank without any exchange, because decisions are keyed
 * by it: for a root communicator it is a hash of the 128-byte unique id (which every rank
 * receives), for a split child a hash of (parent identity, index of the split on the parent,
 * colour). NCCL's v5+ tuner init passes its own commHash, which the shim prefers when given.
 *
 * Locality: the API wrappers announce each local rank of an identity *before* calling NCCL's
 * constructor. A constructor cannot complete until every rank of the communicator has entered
 * it, so by the time any rank issues a collective, every rank living in this process has been
 * announced: `announced == nranks` then means the whole communicator is here and can be tuned
 * without a coordinator. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shim_internal.h"

static uint64_t fnv1a(const void *p, size_t n, uint64_t h) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) {
    h ^= b[i];
    h *= 0x100000001b3ull;
  }
  return h;
}
#define FNV_SEED 0xcbf29ce484222325ull

uint64_t ah_comm_id_from_unique_id(const ncclUniqueId *id) {
  return fnv1a(id->internal, sizeof id->internal, FNV_SEED);
}

uint64_t ah_comm_id_for_split(uint64_t parent, int split_index, int color) {
  uint64_t parts[3] = {parent, (uint64_t)split_index, (uint64_t)(uint32_t)color};
  return fnv1a(parts, sizeof parts, FNV_SEED);
}

uint64_t ah_comm_id_for_shrink(uint64_t parent, int shrink_index, const int *sorted_excl,
                               int nexcl) {
  uint64_t h = fnv1a("shrink", 6, FNV_SEED);
  h = fnv1a(&parent, sizeof parent, h);
  h = fnv1a(&shrink_index, sizeof shrink_index, h);
  return fnv1a(sorted_excl, (size_t)nexcl * sizeof *sorted_excl, h);
}

/* Pending identities of the calling thread: pushed by the constructor wrappers in call order,
 * popped by the tuner's init when NCCL runs it on this thread. A small fixed ring: a thread
 * creates at most a few communicators per group. */
#define PENDING_MAX 16
static _Thread_local struct {
  uint64_t id;
  int rank, dev;
} pending[PENDING_MAX];
static AH_TLS_HOT int pending_head, pending_count;
static _Thread_local ah_comm_t *last_created;

void ah_comm_pending_push(uint64_t id, int rank, int dev) {
  if (pending_count == PENDING_MAX) { /* drop the oldest rather than fail the init */
    pending_head = (pending_head + 1) % PENDING_MAX;
    pending_count--;
  }
  int slot = (pending_head + pending_count) % PENDING_MAX;
  pending[slot].id = id;
  pending[slot].rank = rank;
  pending[slot].dev = dev;
  pending_count++;
  ah_thread.comm_pending = 1;
}

/* Whether an entry bound to device `have` may be the communicator being initialised on `want`
 * (either unknown: -1). */
static int dev_fits(int have, int want) { return have < 0 || want < 0 || have == want; }

int ah_comm_pending_pop(int dev, uint64_t *id_p, int *rank_p) {
  if (pending_count == 0) return 0;
  int at = 0; /* the oldest entry of the device, else the oldest */
  while (at < pending_count && !dev_fits(pending[(pending_head + at) % PENDING_MAX].dev, dev)) at++;
  if (at == pending_count) at = 0;
  int slot = (pending_head + at) % PENDING_MAX;
  *id_p = pending[slot].id;
  *rank_p = pending[slot].rank;
  for (int i = at; i > 0; i--) /* close the gap: the older entries move up one */
    pending[(pending_head + i) % PENDING_MAX] = pending[(pending_head + i - 1) % PENDING_MAX];
  pending_head = (pending_head + 1) % PENDING_MAX;
  pending_count--;
  return 1;
}

void ah_comm_pending_clear(void) { pending_head = pending_count = 0; }

void ah_comm_pending_group_end(void) {
  int saved = errno; /* called after the real ncclGroupEnd: a guest leaves errno as NCCL left it */
  ah_comm_pending_clear();
  ah_comm_pending_unshare_mine();
  ah_thread.comm_pending = 0;
  errno = saved;
}

/* ---- shared pending entries (grouped constructors) --------------------------------------------- */

#define SHARED_MAX 256
static pthread_mutex_t shared_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
  uint64_t id, alt;
  int nranks, rank, dev, used;
  pthread_t owner;
  uint64_t seq;
} shared[SHARED_MAX];
static int nshared;
static uint64_t shared_seq;
static AH_TLS_HOT int shared_by_me; /* this thread has entries: unsharing costs a lock only then */

uint64_t ah_comm_alt_id_from_unique_id(const ncclUniqueId *id) {
  uint64_t h = 5381;
  for (size_t i = 0; i < sizeof id->internal; i++)
    h = ((h << 5) + h) ^ (uint64_t)(int64_t)id->internal[i];
  return h;
}

void ah_comm_pending_share(uint64_t id, uint64_t alt_id, int nranks, int rank, int dev) {
  pthread_mutex_lock(&shared_lock);
  if (nshared == SHARED_MAX) { /* drop the oldest */
    memmove(&shared[0], &shared[1], sizeof shared[0] * (SHARED_MAX - 1));
    nshared--;
  }
  shared[nshared].id = id;
  shared[nshared].alt = alt_id;
  shared[nshared].nranks = nranks;
  shared[nshared].rank = rank;
  shared[nshared].dev = dev;
  shared[nshared].used = 0;
  shared[nshared].owner = pthread_self();
  shared[nshared].seq = shared_seq++;
  nshared++;
  pthread_mutex_unlock(&shared_lock);
  shared_by_me = 1;
  ah_thread.comm_pending = 1;
}

int ah_comm_pending_claim(uint64_t comm_id, int nranks, int dev, uint64_t *id_p, int *rank_p) {
  int found = -1;
  pthread_mutex_lock(&shared_lock);
  /* by identity: the oldest entry of the device when there is one (the local ranks of one
   * communicator share its identity, and NCCL runs their inits in an order of its own) */
  for (int pass = 0; pass < 2 && found < 0 && comm_id; pass++)
    for (int i = 0; i < nshared && found < 0; i++)
      if (!shared[i].used && (pass || dev_fits(shared[i].dev, dev)) &&
          (shared[i].id == comm_id || (shared[i].alt && shared[i].alt == comm_id)))
        found = i;
  if (found < 0) { /* by rank count, only when unambiguous */
    uint64_t ident = 0;
    int ambiguous = 0;
    for (int i = 0; i < nshared; i++) {
      if (shared[i].used || shared[i].nranks != nranks || !dev_fits(shared[i].dev, dev)) continue;
      if (found < 0) {
        found = i;
        ident = shared[i].id;
      } else if (shared[i].id != ident) {
        ambiguous = 1;
      }
    }
    if (ambiguous) found = -1;
  }
  if (found >= 0) {
    shared[found].used = 1;
    *id_p = shared[found].id;
    *rank_p = shared[found].rank;
  }
  pthread_mutex_unlock(&shared_lock);
  return found >= 0;
}

void ah_comm_pending_unshare_mine(void) {
  if (!shared_by_me) return;
  shared_by_me = 0;
  pthread_t me = pthread_self();
  pthread_mutex_lock(&shared_lock);
  int j = 0;
  for (int i = 0; i < nshared; i++)
    if (!pthread_equal(shared[i].owner, me)) shared[j++] = shared[i];
  nshared = j;
  pthread_mutex_unlock(&shared_lock);
}

ah_comm_t *ah_comm_last_created(void) { return last_created; }
void ah_comm_last_reset(void) { last_created = NULL; }

/* ---- identities announced in this process ------------------------------------------------------ */

static pthread_mutex_t rec_lock = PTHREAD_MUTEX_INITIALIZER;
static ah_commrec_t *recs;

static ah_commrec_t *rec_find_locked(uint64_t id) {
  ah_commrec_t *r = NULL;
  HASH_FIND(hh, recs, &id, sizeof id, r);
  return r;
}

ah_commrec_t *ah_commrec_get(uint64_t id, int nranks) {
  pthread_mutex_lock(&rec_lock);
  ah_commrec_t *r = rec_find_locked(id);
  if (!r && (r = calloc(1, sizeof *r)) != NULL) {
    r->id = id;
    r->nranks = nranks;
    atomic_init(&r->ctl, -1);
    HASH_ADD(hh, recs, id, sizeof(uint64_t), r);
    if (!AH_HASH_ADDED(r)) { /* out of memory: as for calloc */
      free(r);
      r = NULL;
    }
  }
  if (r && r->nranks <= 0) r->nranks = nranks;
  pthread_mutex_unlock(&rec_lock);
  return r;
}

ah_commrec_t *ah_commrec_announce(uint64_t id, int nranks) {
  ah_commrec_t *r = ah_commrec_get(id, nranks);
  if (r) atomic_fetch_add(&r->announced, 1);
  return r;
}

/* ---- contexts ---------------------------------------------------------------------------------- */

/* Two lists under one lock: the live contexts, and the parked ones — finalized, but their
 * communicator still has a live local context or has not yet left the hub, so the health thread
 * still reports them (ah_comm_foreach). A released context is on neither: nothing walks it again,
 * and what only a live communicator needs can go (shim_retire.c). Contexts themselves are never
 * freed: a rank key's `comm`, a record's `leader` and a thread's pending timing records point at
 * them for as long as the process lives. */
static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static ah_comm_t *live, *parked;

static void list_unlink(ah_comm_t **head, ah_comm_t *c) {
  if (c->live_prev) c->live_prev->live_next = c->live_next;
  else *head = c->live_next;
  if (c->live_next) c->live_next->live_prev = c->live_prev;
  c->live_prev = c->live_next = NULL;
}

static void list_push(ah_comm_t **head, ah_comm_t *c) {
  c->live_prev = NULL;
  c->live_next = *head;
  if (*head) (*head)->live_prev = c;
  *head = c;
}

ah_comm_t *ah_comm_create(uint64_t id, uint64_t rec_id, int nranks, int nnodes, int rank, int abi) {
  ah_comm_t *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->keys = calloc(AH_NUM_COLLS, sizeof *c->keys);
  if (!c->keys) {
    free(c);
    return NULL;
  }
  c->id = id;
  c->nranks = nranks;
  c->nnodes = nnodes;
  c->rank = rank;
  c->abi = abi;
  c->ctl = -1;
  c->pid = (int)getpid();
  c->rec = ah_commrec_get(rec_id ? rec_id : id, nranks);
  pthread_mutex_init(&c->lock, NULL);
  pthread_mutex_lock(&registry_lock);
  list_push(&live, c);
  c->live = AH_COMM_LIVE;
  pthread_mutex_unlock(&registry_lock);
  last_created = c;
  return c;
}

void ah_comm_finalize(ah_comm_t *c) {
  if (!c) return;
  pthread_mutex_lock(&registry_lock);
  atomic_store(&c->finalized, 1);
  if (c->live == AH_COMM_LIVE) {
    list_unlink(&live, c);
    list_push(&parked, c);
    c->live = AH_COMM_PARKED;
  }
  pthread_mutex_unlock(&registry_lock);
}

int ah_comm_release(const ah_commrec_t *rec, ah_comm_t **out, int max) {
  int n = 0;
  pthread_mutex_lock(&registry_lock);
  for (ah_comm_t *c = live; c; c = c->live_next)
    if (c->rec == rec) { /* a context of the record was made again since: it keeps its state */
      pthread_mutex_unlock(&registry_lock);
      return 0;
    }
  for (ah_comm_t *c = parked, *next; c && n < max; c = next) {
    next = c->live_next;
    /* A v1 tuner context (NCCL 2.19/2.20) is finalized without NCCL saying which it is, so it may
     * be another, live communicator's: it stays parked, with everything it holds. */
    if (c->rec != rec || c->abi == 1) continue;
    list_unlink(&parked, c);
    c->live = AH_COMM_RELEASED;
    out[n++] = c;
  }
  pthread_mutex_unlock(&registry_lock);
  return n;
}

/* What a released context's table becomes: no key. Note that it is writable: a call on a
 * communicator after its destroy (undefined in NCCL) would make its key here, not fault. */
static ah_shim_rankkey_t *no_keys[AH_NUM_COLLS][AH_BINS];

void ah_comm_keys_release(ah_comm_t *c) {
  ah_shim_rankkey_t *(*keys)[AH_BINS] = __atomic_exchange_n(&c->keys, no_keys, __ATOMIC_ACQ_REL);
  if (keys != no_keys) free(keys);
}

ah_comm_t *ah_comm_find(uint64_t rec_id, int rank) {
  pthread_mutex_lock(&registry_lock);
  ah_comm_t *found = NULL;
  for (ah_comm_t *c = live; c && !found; c = c->live_next)
    if (c->rec && c->rec->id == rec_id && c->rank == rank) found = c;
  pthread_mutex_unlock(&registry_lock);
  return found;
}

void ah_comm_foreach_live(void (*fn)(void *arg, ah_comm_t *c), void *arg) {
  pthread_mutex_lock(&registry_lock);
  for (ah_comm_t *c = live; c; c = c->live_next) fn(arg, c);
  pthread_mutex_unlock(&registry_lock);
}

void ah_comm_foreach(void (*fn)(void *arg, ah_comm_t *c), void *arg) {
  /* A snapshot, so that fn runs without the lock (the health thread's tick talks to the hub and
   * the GPU; the report's walk takes each context's lock): contexts are never freed, so every
   * pointer in it stays valid, and one released meanwhile is only visited once more. */
  ah_comm_t *few[64], **all = few;
  size_t n = 0, cap = sizeof few / sizeof few[0];
  pthread_mutex_lock(&registry_lock);
  for (int list = 0; list < 2; list++)
    for (ah_comm_t *c = list ? parked : live; c; c = c->live_next) {
      if (n == cap) {
        ah_comm_t **more = malloc(2 * cap * sizeof *more);
        if (!more) break; /* out of memory: the first `cap` are visited */
        memcpy(more, all, n * sizeof *more);
        if (all != few) free(all);
        all = more;
        cap *= 2;
      }
      all[n++] = c;
    }
  pthread_mutex_unlock(&registry_lock);
  for (size_t i = 0; i < n; i++) fn(arg, all[i]);
  if (all != few) free(all);
}

/* Communicators created where no identity was available: (nranks, nnodes) and the process's
 * creation order of such communicators. */
uint64_t ah_comm_fallback_id(size_t nranks, size_t nnodes) {
  static _Atomic uint64_t counter;
  uint64_t parts[3] = {(uint64_t)nranks, (uint64_t)nnodes, atomic_fetch_add(&counter, 1)};
  return fnv1a(parts, sizeof parts, 0x9e3779b97f4a7c15ull);
}
