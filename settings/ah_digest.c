/* Digests of the settings that decide a rank's choices (ah_digest.h): FNV-1a over canonical
 * texts — the mode's name, each override rule as ah_override_rule_format prints it, and each
 * profile entry's shape, key and configuration (not its measured times, which do not change
 * what a rank runs). */
#include <stdio.h>
#include <string.h>

#include "ah_digest.h"
#include "ah_override.h"

#define FNV_BASIS 0xcbf29ce484222325ull

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

static uint64_t fnv_str(uint64_t h, const char *s) { return fnv(h, s, strlen(s) + 1); }

void ah_digest_settings(const ah_settings_t *s, const ah_profile_t *profile, ah_digest_t *d_p) {
  char buf[256];
  memset(d_p, 0, sizeof *d_p);
  d_p->part[AH_DIGEST_MODE] = fnv_str(FNV_BASIS, ah_env_mode_name(s ? s->mode : AH_MODE_TUNE));
  uint64_t h = FNV_BASIS;
  for (int i = 0; s && i < s->override.nrules; i++)
    h = fnv_str(h, ah_override_rule_format(&s->override.rules[i], buf, sizeof buf));
  d_p->part[AH_DIGEST_OVERRIDE] = h;
  h = FNV_BASIS;
  for (int i = 0; profile && i < profile->nentries; i++) {
    const ah_profile_entry_t *e = &profile->entries[i];
    int n = snprintf(buf, sizeof buf, "%d %d %d %d ", e->nranks, e->nnodes, e->coll, e->bin);
    if (n > 0 && (size_t)n < sizeof buf) ah_config_format(&e->cfg, buf + n, sizeof buf - (size_t)n);
    h = fnv_str(h, buf);
  }
  d_p->part[AH_DIGEST_PROFILE] = h;
}

char *ah_digest_describe(uint32_t mask, char *buf, size_t len) {
  static const char *names[AH_DIGEST_PARTS] = {"AUTOHA_MODE", "AUTOHA_OVERRIDE",
                                               "AUTOHA_PROFILE (the loaded profile)"};
  size_t off = 0;
  if (len) buf[0] = 0;
  for (int i = 0; i < AH_DIGEST_PARTS; i++) {
    if (!(mask & (1u << i)) || off >= len) continue;
    int n = snprintf(buf + off, len - off, "%s%s", off ? ", " : "", names[i]);
    if (n > 0) off += (size_t)n;
  }
  if (len && !buf[0]) snprintf(buf, len, "settings");
  return buf;
}
