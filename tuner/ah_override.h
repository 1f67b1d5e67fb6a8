/* ah_override.h: AUTOHA_OVERRIDE, the per-collective pinning of configurations, e.g.
 *
 *     allreduce@1M-64M:algo=ring,proto=simple,nchannels=16;allgather:nchannels=8
 *
 * Grammar (docs/environment.md has the user's version):
 *     overrides := rule { ';' rule }              empty rules ("a;;b", trailing ';') are skipped
 *     rule      := target ':' field { ',' field }
 *     target    := (collective | '*') [ '@' range ]
 *     range     := size '-' size | size '-' | '-' size | size      bytes per rank, inclusive ends
 *     size      := digits [ 'K' | 'M' | 'G' ] [ 'B' ]              binary units, case-insensitive
 *     field     := 'algo=' name | 'proto=' name | 'nchannels=' 1..64 | 'chunk=' size
 * Whitespace around tokens is ignored. "Bytes per rank" is the size that keys a call (ah_size_bin):
 * the per-rank share for AllGather and ReduceScatter, the buffer for the others.
 *
 * Matching picks the MOST SPECIFIC matching rule, not the first: a rule naming the collective beats
 * '*', then a narrower byte range beats a wider one, and among equals the earlier rule wins. So
 * "*:nchannels=8;allreduce:algo=ring" gives AllReduce algo=ring with NCCL's channels, and every other
 * collective 8 channels. Rules are not merged: the chosen rule's fields are the whole override.
 *
 * Note that the shim attaches configurations to keys (collective, size bin), not to single calls,
 * so every call of a key runs one configuration: it matches a key with ah_override_match() on the
 * bin's lower bound, ah_size_bin_floor(bin) (docs/environment.md says so to users).
 *
 * Pure parsing and matching: no logging here. The caller (the env table, `autoha check-override`)
 * reports the errors this returns, so each is printed once by whoever decided it is fatal. */
#ifndef AH_OVERRIDE_H
#define AH_OVERRIDE_H

#include <stddef.h>
#include <stdint.h>

#include "ah_config.h"

#define AH_OVERRIDE_MAX_RULES 32
#define AH_OVERRIDE_MAX_NCHANNELS 64

typedef struct {
  int32_t coll;    /* AH_FUNC_*, or -1 for '*' */
  int32_t pos;     /* 0-based character position of the rule in the string */
  uint64_t lo, hi; /* bytes per rank, inclusive; 0 and UINT64_MAX for open ends */
  ah_config_t cfg; /* the partial config: algo/proto -1 and res[] 0 where the rule is silent;
                          res[AH_DIM_NCHANNELS] = nchannels, res[AH_DIM_CHUNK] = chunk bytes */
} ah_override_rule_t;

typedef struct {
  int nrules;
  ah_override_rule_t rules[AH_OVERRIDE_MAX_RULES];
} ah_override_t;

/* Parses an override string into ov_p (always initialised, even when s is NULL or empty). A rule
 * with any error is dropped whole and the others are kept. Returns the number of errors; when
 * err/errlen are given, err receives one line per error (newline-separated, no "autoha:" prefix),
 * each naming the bad token and its 0-based character position, e.g.
 *     'algo=rong' at position 12: unknown algorithm (expected tree|ring|collnetdirect|...)
 * Note that a string of more than AH_OVERRIDE_MAX_RULES rules counts the extra rules as errors. */
int ah_override_parse(const char *s, ah_override_t *ov_p, char *err, size_t errlen);

/* The rule that applies to a call of collective `coll` (AH_FUNC_*) with `bytes_per_rank`, by the
 * most-specific rule documented above. Returns its index and copies its partial config to cfg_p,
 * or returns -1 (cfg_p untouched) when no rule matches. Lock-free and allocation-free: the shim
 * calls it on the decision path. */
int ah_override_match(const ah_override_t *ov, int coll, uint64_t bytes_per_rank,
                      ah_config_t *cfg_p);

/* Same, for a whole size bin: a rule matches when its byte range contains the bin's every size
 * [ah_size_bin_floor(bin), ah_size_bin_floor(bin+1)-1]. For callers that key by bin only. */
int ah_override_match_bin(const ah_override_t *ov, int coll, int bin, ah_config_t *cfg_p);

/* Writes a rule back in the grammar ("allreduce@1M-64M:algo=ring,nchannels=16"). Returns buf. */
char *ah_override_rule_format(const ah_override_rule_t *r, char *buf, size_t len);

#endif
