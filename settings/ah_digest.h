/* ah_digest.h: a digest of the autoha settings that decide what a rank does with a communicator's
 * collectives — its mode, its overrides and its loaded profile — so that ranks can check, when
 * they join the coordinator, that they would all make the same choice for the same call.
 *
 * Each part is compared on its own, so a difference can be named ("AUTOHA_PROFILE differs"). The
 * digests are of the parsed, canonical forms: two override strings that say the same rules in the
 * same order digest alike whatever their spacing. */
#ifndef AH_DIGEST_H
#define AH_DIGEST_H

#include <stdint.h>

#include "ah_env.h"
#include "ah_report.h"

enum { AH_DIGEST_MODE = 0, AH_DIGEST_OVERRIDE = 1, AH_DIGEST_PROFILE = 2, AH_DIGEST_PARTS = 3 };

typedef struct {
  uint64_t part[AH_DIGEST_PARTS];
} ah_digest_t;

/* Fills *d_p from the settings (NULL: defaults) and the loaded profile (NULL: none). */
void ah_digest_settings(const ah_settings_t *s, const ah_profile_t *profile, ah_digest_t *d_p);

/* The names of the parts set in `mask` (bit i = part i), comma-separated, into buf (e.g.
 * "AUTOHA_MODE, AUTOHA_PROFILE"). Returns buf. */
char *ah_digest_describe(uint32_t mask, char *buf, size_t len);

#endif
