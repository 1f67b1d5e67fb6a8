/* ah_pin.h: the configuration a key runs without tuning — an override, else the loaded profile's
 * entry, else NCCL's own choice — as the forever segment every rank commits by itself. */
#ifndef AH_PIN_H
#define AH_PIN_H

#include <stdint.h>

#include "ah_config.h"
#include "ah_env.h"
#include "ah_report.h"
#include "ah_sched.h"

/* Fills *seg_p with the pinned segment of key (coll, bin) of a communicator of nranks ranks on
 * nnodes nodes, for a call of that key (`call`: what NCCL can run). `s` and `profile` may be NULL.
 * An override naming a pair NCCL cannot run is refused with one (capped) warning naming `comm`.
 *
 * Note that the result is deterministic in (settings, profile, communicator shape, key, what NCCL
 * allows), so every rank with the same settings computes the same segment: that is what lets each
 * rank commit it alone. A key matches a rule when the lowest size of its bin lies in the rule's
 * range (sizes are bytes per rank): keys, not single calls, carry a configuration. */
void ah_pin_segment(const ah_settings_t *s, const ah_profile_t *profile, uint64_t comm, int nranks,
                    int nnodes, int coll, int bin, const ah_call_t *call, ah_segment_t *seg_p);

#endif
