/* ah_coord_hub_gather.c: the shortest duration of a search call across ranks. Every rank reports
 * its own measured duration of each call the leader's search probes (SEARCH_TIME); the hub keeps,
 * per (key, call index), the minimum and how many ranks reported, and sends the leader's
 * connection (the one that joined rank 0) a MIN_TIME once every rank reported or gather_ms after
 * the first did.
 *
 * Key choice: a rank's duration runs from its own arrival to the collective's end, so the ranks
 * that arrived early also time their wait for the last one; the shortest duration is the one rank
 * that waited least — the collective's own speed, which is what the search compares (docs/tuner.md
 * "Arrival skew"). The leader's own duration is one of the reports, so a call for which only it
 * reported still gives the search what it had before. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ah_coord_hub_internal.h"
#include "ah_log.h"

typedef struct {
  uint8_t coll, bin;
  uint8_t pad[6];
  uint64_t index;
} gather_key_t;

typedef struct hub_gather {
  gather_key_t k;
  float min_us;
  uint32_t reported;
  uint64_t first_ns;
  UT_hash_handle hh;
} hub_gather_t;

static void gather_send(ah_coord_hub_t *h, hub_comm_t *m, hub_gather_t *g) {
  if (m->leader && !m->leader->closing) {
    ah_coord_time_t t = {.comm = m->comm,
                         .coll = g->k.coll,
                         .bin = g->k.bin,
                         .index = g->k.index,
                         .us = g->min_us,
                         .reported = g->reported,
                         .nranks = m->nranks};
    uint8_t p[8 + 1 + 1 + 8 + 4 + 4 + 4];
    ah_coord_time_pack(AH_MSG_MIN_TIME, &t, p);
    ah_coord_hub_conn_send_msg(h, m->leader, AH_MSG_MIN_TIME, p, sizeof p);
  }
  HASH_DEL(m->gather, g);
  free(g);
  ah_coord_hub_mem_give(h, sizeof *g);
  m->ngather--;
  h->ngather--;
}

/* Note that a report is refused like a SAMPLES (connection dropped) when its sender is not a member
 * or names a rank that did not join, and dropped quietly before the communicator is COMPLETE (no
 * leader searches then); a malformed one is refused by name and dropped, the connection kept. */
void ah_coord_hub_on_search_time(ah_coord_hub_t *h, hub_conn_t *c, hub_client_t *cl,
                                 const uint8_t *p) {
  char err[160];
  ah_coord_time_t t;
  if (ah_coord_time_unpack(AH_MSG_SEARCH_TIME, p, &t, err, sizeof err) != 0) {
    ah_coord_hub_refuse(h, RATE_GATHER, "refused a SEARCH_TIME from %s: %s; message dropped",
                        c->peer, err);
    return;
  }
  hub_comm_t *m = NULL;
  HASH_FIND(hh, h->comms, &t.comm, sizeof t.comm, m);
  int member = 0;
  for (int i = 0; m && i < m->nmembers && !member; i++) member = m->members[i].client_id == cl->id;
  if (!member || (m->verdict == AH_COORD_VERDICT_COMPLETE &&
                  (t.rank >= m->nranks || !(m->joined[t.rank / 8] & (1u << (t.rank % 8)))))) {
    ah_coord_hub_refuse(h, RATE_GATHER,
                        "refused a SEARCH_TIME from %s: %s rank %u of comm %016llx; connection "
                        "dropped",
                        c->peer, member ? "no joined" : "not a member:", t.rank,
                        (unsigned long long)t.comm);
    ah_coord_hub_conn_close_later(h, c);
    return;
  }
  if (m->verdict != AH_COORD_VERDICT_COMPLETE) return;
  gather_key_t k;
  memset(&k, 0, sizeof k);
  k.coll = t.coll, k.bin = t.bin, k.index = t.index;
  hub_gather_t *g = NULL;
  HASH_FIND(hh, m->gather, &k, sizeof k, g);
  if (!g) {
    if (m->ngather >= h->o.max_comm_gathers) {
      ah_coord_hub_refuse(h, RATE_GATHER,
                          "dropped the search times of call %llu of comm %016llx: %d calls are "
                          "being gathered for it (at most %d); the search counts the call as lost",
                          (unsigned long long)t.index, (unsigned long long)t.comm, m->ngather,
                          h->o.max_comm_gathers);
      return;
    }
    if (ah_coord_hub_mem_take(h, sizeof *g) != 0) {
      ah_coord_hub_mem_refuse(h, RATE_GATHER, sizeof *g, "the search counts the call as lost",
                              "the search times of call %llu of comm %016llx",
                              (unsigned long long)t.index, (unsigned long long)t.comm);
      return;
    }
    if (!(g = calloc(1, sizeof *g))) { /* the leader's search treats the call as lost */
      ah_coord_hub_mem_give(h, sizeof *g);
      return;
    }
    g->k = k;
    g->min_us = t.us;
    g->first_ns = ah_coord_now_ns();
    HASH_ADD(hh, m->gather, k, sizeof k, g);
    m->ngather++;
    h->ngather++;
  } else if (t.us < g->min_us) {
    g->min_us = t.us;
  }
  if (++g->reported >= m->nranks) gather_send(h, m, g);
}

void ah_coord_hub_gather_tick(ah_coord_hub_t *h, uint64_t now) {
  if (h->ngather == 0) return;
  uint64_t due = (uint64_t)h->o.gather_ms * 1000000ull;
  for (hub_comm_t *m = h->comms; m; m = m->hh.next) {
    hub_gather_t *g, *gt;
    HASH_ITER(hh, m->gather, g, gt)
    if (now - g->first_ns >= due) gather_send(h, m, g);
  }
}

void ah_coord_hub_gather_free(ah_coord_hub_t *h, hub_comm_t *m) {
  hub_gather_t *g, *gt;
  HASH_ITER(hh, m->gather, g, gt) {
    HASH_DEL(m->gather, g);
    free(g);
    ah_coord_hub_mem_give(h, sizeof *g);
    h->ngather--;
  }
  m->ngather = 0;
}
