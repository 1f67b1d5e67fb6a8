/* ah_coord_straggler.h: which rank of a communicator is consistently late (a straggler), from
 * the GPU durations every rank measures of the same sampled calls. Pure logic, fed by the hub from
 * the SAMPLES messages; see docs/diagnosis.md.
 *
 * In a synchronous collective every rank finishes together, so a rank's measured duration is the
 * call's own time plus how long it waited for the last rank to arrive: the last rank measures the
 * shortest duration. A rank's lateness in a call is (median duration - its duration) / median
 * duration — how much later than the typical rank it arrived, as a share of the call's time as
 * the typical rank saw it. No clock is compared across hosts: each duration comes from one GPU's
 * events. The shim samples the same call indices on every rank (the first 16 calls of a key, then
 * one in 64), so the hub can line a call's durations up by (collective, size bin, index). */
#ifndef AH_COORD_STRAGGLER_H
#define AH_COORD_STRAGGLER_H

#include <stddef.h>
#include <stdint.h>

#include "ah_coord_health.h"

#define AH_STRAG_WINDOW 16 /* a rank is judged on its latest complete sampled calls of a key */
#define AH_STRAG_MIN 12    /* complete calls of a key before a rank can be flagged in it */
#define AH_STRAG_KEYS 16   /* keys (collective, size bin) judged per communicator: the first ones */
#define AH_STRAG_PENDING                                                                           \
  256 /* sampled calls waiting for every rank's duration (ranks report up to a
                              * few seconds apart: a key's first 16 calls of every key must fit) */
#define AH_STRAG_MAX_AGE_NS 30000000000ull /* a call still incomplete after 30 s is dropped */

typedef struct ah_strag ah_strag_t;

/* A rank's lateness over its window. */
typedef struct {
  int calls;       /* complete calls in the window */
  int late_calls;  /* of them, calls it was late in beyond the threshold and the call's jitter */
  double late_p50; /* lateness, share of the call's time: median over the window */
  double late_p90;
  double wait_share; /* share of the window's call time the typical rank spent waiting for it */
  int flagged;
} ah_strag_stats_t;

/* A change of a rank's flag, with the figures of the key that decided. */
typedef struct {
  uint32_t rank;
  int flagged; /* 1: consistently late now, 0: recovered */
  ah_strag_stats_t st;
  uint8_t coll, bin; /* the call that decided */
  uint64_t index;
} ah_strag_event_t;

/* A detector for n ranks: a rank is flagged when, in the window of some key, it was late by more
 * than pct percent (0 < pct < 100) and by more than 4 times the call's jitter (the spread of all
 * ranks' lateness in it) in three calls of four; the key's flag clears when its median lateness
 * falls below half of pct, and the rank's when no key is flagged. NULL when out of memory. */
ah_strag_t *ah_strag_new(uint32_t nranks, double pct);
void ah_strag_free(ah_strag_t *s);
/* The bytes s holds now (its call slots and key windows are allocated as they come into use):
 * what the hub charges its memory budget for it. */
size_t ah_strag_held(const ah_strag_t *s);
/* Adds rank's duration of one sampled call (rank < nranks; a duplicate is ignored). A call every
 * rank has reported is judged at once; now_ns ages out calls some rank never reports. */
void ah_strag_add(ah_strag_t *s, uint32_t rank, const ah_health_sample_t *x, uint64_t now_ns);
/* Takes the oldest flag change not yet taken. Returns 1 with *ev, 0 when none. */
int ah_strag_next(ah_strag_t *s, ah_strag_event_t *ev);
/* The rank's current lateness figures: those of the key it is latest in. */
void ah_strag_stats(const ah_strag_t *s, uint32_t rank, ah_strag_stats_t *st);
/* Complete calls judged, and calls dropped incomplete, so far. */
uint64_t ah_strag_judged(const ah_strag_t *s);
uint64_t ah_strag_dropped(const ah_strag_t *s);

/* The finding's line for an event (AH_HEALTH_TEXT bytes); `who` names the rank's place ("host pid
 * P gpu G"). */
void ah_strag_text(uint64_t comm, const ah_strag_event_t *ev, const char *who, char *text);

#endif
