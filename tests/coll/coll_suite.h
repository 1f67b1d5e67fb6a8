/* coll_suite.h: the whole collective check, as run by every rank of every configuration (rank per
 * process, rank per thread, all ranks driven by one thread), and the ways of creating the
 * communicators it runs on. */
#ifndef COLL_SUITE_H
#define COLL_SUITE_H

#include "coll_lib.h"

/* Runs every collective x data type x reduction op x in/out-of-place on `a`, ungrouped and in
 * groups (only grouped when one thread drives several ranks: calls must then be grouped), then
 * grouped calls spanning `a` and a second communicator `b` over the same ranks, then (when `large`)
 * multi-chunk and zero-count calls. Returns 0 when every call succeeded and every element matched. */
int coll_suite_run(const coll_comms_t *a, const coll_comms_t *b, int large, coll_tally_t *tally);

/* Creates the two communicators of one rank that this thread drives: `a` by ncclCommInitRank from
 * `id` (inside ncclGroupStart/End when `grouped`), `b` by ncclCommSplit of `a` (one colour,
 * key = rank, so b numbers the ranks as a does). Returns 0, or -1 with a message on stderr. */
int coll_comms_init_rank(int nranks, int rank, int dev, ncclUniqueId id, int grouped,
                         coll_comms_t *a, coll_comms_t *b);

/* Creates `a` with ncclCommInitAll over devices 0..n-1 and `b` with ncclCommInitRank for every
 * device inside one group, both driven by the calling thread. Returns 0, or -1. */
int coll_comms_init_all(int n, coll_comms_t *a, coll_comms_t *b);

#endif
