/* The hub's straggler audits (ah_coord_audit.h): every straggler_audit_ms, each communicator the
 * hub diagnoses for stragglers (three ranks or more, every rank reporting) is sent an AUDIT naming
 * its busiest keys and the call index from which its processes time AH_AUDIT_CALLS calls of each.
 * Communicators are spread over the period (their first audit comes at a point of it their id
 * chooses), so a job of many communicators sends one burst at a time. A stalled communicator is
 * not audited: it has no calls to time, and its hang is the hang finding's. */
#include <stdlib.h>

#include "ah_coord_audit.h"
#include "ah_coord_hub_internal.h"
#include "ah_log.h"

/* A communicator not advanced this long has no calls for an audit to time. */
#define AUDIT_IDLE_NS 2000000000ull

static void audit_send(ah_coord_hub_t *h, hub_comm_t *m) {
  const ah_health_rec_t **recs = calloc(m->nranks, sizeof *recs);
  if (!recs) return; /* no audit this period; the job goes on */
  for (uint32_t r = 0; r < m->nranks; r++)
    if (m->prog[r].have && !m->prog[r].left) recs[r] = &m->prog[r].rec;
  ah_audit_t a;
  int n = ah_audit_pick(recs, m->nranks, &a);
  free(recs);
  if (n == 0) return;
  uint8_t p[8 + AH_AUDIT_BYTES];
  ah_coord_put_u64(p, m->comm);
  ah_audit_pack(&a, p + 8);
  for (int i = 0; i < m->nsubs; i++)
    ah_coord_hub_conn_send_msg(h, m->subs[i], AH_MSG_AUDIT, p, sizeof p);
  ah_log(AH_LOG_DEBUG, "coordinator hub %s: comm %016llx: audit of %d keys from call %llu", h->addr,
         (unsigned long long)m->comm, n, (unsigned long long)a.keys[0].from);
}

void ah_coord_hub_audit_tick(ah_coord_hub_t *h, uint64_t now) {
  if (h->o.straggler_audit_ms <= 0 || h->o.straggler_pct <= 0) return;
  uint64_t period = (uint64_t)h->o.straggler_audit_ms * 1000000ull;
  for (hub_comm_t *m = h->comms; m; m = m->hh.next) {
    if (!m->prog || m->nranks < 3) continue; /* two ranks: no straggler is looked for */
    if (!m->audit_ns) { /* the first: one period plus the comm's own point of a second one */
      m->audit_ns = now + period + m->comm % period;
      continue;
    }
    if (now < m->audit_ns) continue;
    m->audit_ns = now + period;
    if (m->finding || now - m->advanced_ns > AUDIT_IDLE_NS) continue;
    audit_send(h, m);
  }
}
