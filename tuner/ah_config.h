/* ah_config.h: the vocabulary every layer of autoha shares — a collective's key, a configuration,
 * and the space a key may be tuned over. Pure data: tuner/ never calls NCCL, CUDA or sockets.
 *
 * A configuration is an implementation subspace (algorithm, protocol) plus a vector of resource
 * values (channels; chunk bytes where the NCCL version takes a per-call chunk). The search engine
 * is generic over the number of resource dimensions; the shim maps dimension 0 to nChannels and
 * dimension 1 to the v6 chunk size. */
#ifndef AH_CONFIG_H
#define AH_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "autoha/nccl_tuner_abi.h" /* AH_ALGO_*, AH_PROTO_*, AH_FUNC_* */

#define AH_MAX_DIMS 4
#define AH_MAX_DIM_VALUES 64
#define AH_MAX_SUBSPACES (AH_NUM_ALGOS * AH_NUM_PROTOS)

enum { AH_DIM_NCHANNELS = 0, AH_DIM_CHUNK = 1 };

/* Collectives that NCCL (2.28+) runs as grouped point-to-point operations and never submits to a
 * tuner: the shim counts and times them and the report shows them, but nothing decides them, so
 * overrides and profiles do not name them. Numbered after the tuner ABI's AH_FUNC_* values. */
enum { AH_COLL_ALLTOALL = AH_NUM_FUNCTIONS, AH_COLL_GATHER, AH_COLL_SCATTER, AH_NUM_COLLS };

/* Key of a collective: (communicator identity, collective type, size bin). The communicator
 * identity is the same on every rank (see shim/shim_comm.c). */
typedef struct {
  uint64_t comm;
  int32_t coll;   /* AH_FUNC_*, or AH_COLL_* for an observed-only collective */
  int32_t bin;    /* ah_size_bin() */
} ah_key_t;

/* A configuration. algo/proto -1 and a resource value 0 mean "NCCL's own choice". */
typedef struct {
  int8_t algo, proto;
  int16_t pad;
  int32_t ndims;
  int64_t res[AH_MAX_DIMS];
} ah_config_t;

/* One resource dimension: its legal values, ascending. */
typedef struct {
  int nvalues;
  int64_t values[AH_MAX_DIM_VALUES];
} ah_dim_t;

/* What a key may be tuned over: the (algorithm, protocol) pairs NCCL allows for the call (the
 * cost-table cells that are not -1), the resource dimensions, and NCCL's own choice, which the
 * search starts from and must beat beyond noise. */
typedef struct {
  int nsub;
  struct { int8_t algo, proto; } sub[AH_MAX_SUBSPACES];
  int ndims;
  ah_dim_t dims[AH_MAX_DIMS];
  ah_config_t start;
  /* NCCL's own estimate (microseconds) of each subspace, from the cost table of the call the
   * space was built at; 0 where unknown. The search's prior: it orders and prunes subspaces. */
  float est_us[AH_MAX_SUBSPACES];
} ah_space_t;

/* Size bin of a call: floor(log2(bytes per rank)), with bytes per rank = nbytes / nranks for
 * AllGather and ReduceScatter (NCCL passes the total buffer for those) and nbytes otherwise.
 * 0 bytes is bin 0. Returns the bin. */
int ah_size_bin(int coll, size_t nbytes, int nranks);
/* Lower bound, in bytes per rank, of a bin. */
size_t ah_size_bin_floor(int bin);

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

/* Equality of two configurations (every field). */
int ah_config_equal(const ah_config_t *a, const ah_config_t *b);
/* Formats "ring/simple nch=16 chunk=512K" into buf. Returns buf. */
char *ah_config_format(const ah_config_t *c, char *buf, size_t len);

#endif
