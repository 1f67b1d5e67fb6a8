/* The pinned configuration of a key (ah_pin.h): override first, then profile, then NCCL's own.
 * Kept apart from the decision path so that it is pure and testable: the shim calls it when a
 * key is first seen and when a fixed communicator's schedule needs its segment. */
#include <string.h>

#include "ah_log.h"
#include "ah_override.h"
#include "ah_pin.h"

void ah_pin_segment(const ah_settings_t *s, const ah_profile_t *profile, uint64_t comm, int nranks,
                    int nnodes, int coll, int bin, const ah_call_t *call, ah_segment_t *seg_p) {
  memset(seg_p, 0, sizeof *seg_p);
  seg_p->first = 0;
  seg_p->count = AH_SCHED_FOREVER;
  seg_p->source = AH_SOURCE_DEFAULT;
  ah_config_keep(&seg_p->config);
  ah_config_t cfg;
  if (s && s->override.nrules > 0 &&
      ah_override_match(&s->override, coll, (uint64_t)ah_size_bin_floor(bin), &cfg) >= 0) {
    if (ah_config_allowed_call(&cfg, call)) {
      seg_p->config = cfg;
      seg_p->source = AH_SOURCE_OVERRIDE;
      return;
    }
    char buf[96];
    AH_LOG_CAPPED(5, AH_LOG_WARN,
                  "override %s for %s of %zu bytes on communicator %016llx names a "
                  "pair NCCL cannot run there; refused, NCCL's choice kept",
                  ah_config_format(&cfg, buf, sizeof buf), ah_coll_name(coll), call->nbytes,
                  (unsigned long long)comm);
  }
  const ah_profile_entry_t *e =
      profile ? ah_profile_lookup(profile, nranks, nnodes, coll, bin) : NULL;
  if (e && ah_config_allowed_call(&e->cfg, call)) {
    seg_p->config = e->cfg;
    seg_p->source = AH_SOURCE_PROFILE;
  }
}
