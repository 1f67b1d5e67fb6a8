/* ah_names.h: the names of algorithms, protocols and collectives that overrides, logs, reports
 * and the coordinator's findings use, both ways (value -> name, name -> value), and the numbers of
 * the collectives NCCL runs without asking a tuner. */
#ifndef AH_NAMES_H
#define AH_NAMES_H

#include <stddef.h>

#include "autoha/nccl_tuner_abi.h" /* AH_ALGO_*, AH_PROTO_*, AH_FUNC_* */

/* Collectives that NCCL (2.28+) runs as grouped point-to-point operations and never submits to a
 * tuner: the shim counts and times them and the report shows them, but nothing decides them, so
 * overrides and profiles do not name them. Numbered after the tuner ABI's AH_FUNC_* values. */
enum { AH_COLL_ALLTOALL = AH_NUM_FUNCTIONS, AH_COLL_GATHER, AH_COLL_SCATTER, AH_NUM_COLLS };

/* Names used in overrides, logs and the report: "tree", "ring", ...; "ll", "ll128", "simple";
 * "broadcast", "reduce", "allgather", "reducescatter", "allreduce" and the observed-only
 * "alltoall", "gather", "scatter". Unknown values give "?". */
const char *ah_algo_name(int algo);
const char *ah_proto_name(int proto);
const char *ah_coll_name(int coll);
/* Inverse of the above, case-insensitive. Return the value or -1. */
int ah_algo_parse(const char *s, size_t len);
int ah_proto_parse(const char *s, size_t len);
int ah_coll_parse(const char *s, size_t len);
/* Like ah_coll_parse, but also the observed-only collectives (the report reader). */
int ah_coll_parse_any(const char *s, size_t len);

#endif
