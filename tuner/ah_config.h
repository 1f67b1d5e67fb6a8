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

#include "ah_names.h" /* AH_COLL_*, the names of algorithms, protocols and collectives */
#include "ah_size.h"  /* ah_size_bin (a key's bin), sizes as text */
#include "autoha/nccl_tuner_abi.h" /* AH_ALGO_*, AH_PROTO_*, AH_FUNC_* */

#define AH_MAX_DIMS 4
#define AH_MAX_DIM_VALUES 64
#define AH_MAX_SUBSPACES (AH_NUM_ALGOS * AH_NUM_PROTOS)

enum { AH_DIM_NCHANNELS = 0, AH_DIM_CHUNK = 1 };

/* Key of a collective: (communicator identity, collective type, size bin). The communicator
 * identity is the same on every rank (see shim/shim_comm.c). */
typedef struct {
  uint64_t comm;
  int32_t coll; /* AH_FUNC_*, or AH_COLL_* for an observed-only collective */
  int32_t bin;  /* ah_size_bin() */
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
  struct {
    int8_t algo, proto;
  } sub[AH_MAX_SUBSPACES];
  int ndims;
  ah_dim_t dims[AH_MAX_DIMS];
  ah_config_t start;
  /* NCCL's own estimate (microseconds) of each subspace, from the cost table of the call the
   * space was built at; 0 where unknown. The search's prior: it orders and prunes subspaces. */
  float est_us[AH_MAX_SUBSPACES];
  /* The values of each dimension worth probing in each subspace, as indices [lo, lo + n) into the
   * dimension's list; n 0 means the whole list. Where NCCL runs every value past a point as that
   * point (a protocol's largest chunk, a chunk past the whole message), the rest would measure
   * the same and only cost calls. With a window, `at` is where the search starts a dimension the
   * start leaves to NCCL (value 0). */
  struct {
    int8_t lo, n, at;
  } win[AH_MAX_SUBSPACES][AH_MAX_DIMS];
} ah_space_t;

/* Fills dimension AH_DIM_CHUNK of a space whose subspaces are set: the chunk sizes the shim offers
 * a v6 tuner (1 KiB .. 4 MiB, doubling) and each subspace's window of them for a call of nbytes
 * (NCCL's convention) of collective coll (AH_FUNC_*) on a communicator of nranks ranks on nnodes
 * nodes, with the window's start (`at`) where the pipeline's depth and the bytes per stage put the
 * best chunk. Note that the windows follow NCCL's default buffer sizes: LL's largest chunk is
 * 32 KiB, LL128's 576000 bytes (and its 1920-byte grain makes 1 and 2 KiB alike), Simple's 2 MiB;
 * and a chunk at least the whole message runs as the message. Shared by the shim and
 * bench/tuner_quality, so the bench models the space the shim offers. */
void ah_space_chunk_build(ah_space_t *sp, size_t nbytes, int coll, int nranks, int nnodes);

/* Equality of two configurations (every field). */
int ah_config_equal(const ah_config_t *a, const ah_config_t *b);
/* Formats "ring/simple nch=16 chunk=512K" into buf. Returns buf. */
char *ah_config_format(const ah_config_t *c, char *buf, size_t len);

/* What NCCL tells a tuner about one bucket (one collective, or several aggregated by NCCL). */
typedef struct {
  int coll;
  size_t nbytes; /* NCCL's convention: the total buffer for AllGather/ReduceScatter */
  int num_pipe_ops;
  int reg_buff;
  const float *table; /* v3+: the cost table, float[num_algo][num_proto]; NULL for v1/v2 */
  int num_algo, num_proto;
  int collnet, nvls; /* v1/v2: NCCL's support flags */
} ah_call_t;

/* "NCCL's own choice" in every field, and whether a config is that. */
void ah_config_keep(ah_config_t *cfg);
int ah_config_is_keep(const ah_config_t *cfg);

/* Whether NCCL can run a partial config's (algorithm, protocol): 1 when some allowed pair agrees
 * with every field the config sets (-1 fields are wildcards), else 0; a config that sets neither
 * is always allowed. Against a space's pairs, against NCCL's cost table (float[nalgo][nproto],
 * row-major as the tuner ABI passes it; a cell of AH_COST_IGNORE (-1) is a pair NCCL cannot or may
 * not run), or against one call (its table, or for v1/v2 its support flags, since NCCL 2.19-2.21
 * check nothing themselves). */
int ah_config_allowed_space(const ah_config_t *cfg, const ah_space_t *space);
int ah_config_allowed_table(const ah_config_t *cfg, const float *table, int nalgo, int nproto);
int ah_config_allowed_call(const ah_config_t *cfg, const ah_call_t *call);

/* NCCL's own choice from a v3+ call's table: the argmin over non-negative cells, ties to the
 * first; "keep" for v1/v2. */
void ah_config_table_argmin(const ah_call_t *call, ah_config_t *cfg);

#endif
