/* A user-named tuner plugin run underneath autoha (shim_chain.c). */
#ifndef AH_SHIM_CHAIN_H
#define AH_SHIM_CHAIN_H

#include <stddef.h>
#include <stdint.h>

#include "autoha/nccl_tuner_abi.h"

typedef struct {
  int abi; /* ncclTunerPlugin_vN found in the user's library; 0: no chained tuner */
  const void *plugin;
  void *handle;
  char name[256];
} ah_chain_t;

extern ah_chain_t ah_chain;

/* Opens the tuner named by NCCL_TUNER_PLUGIN (NAME, then libnccl-tuner-NAME.so) unless it is
 * autoha itself, "none" or STATIC_PLUGIN. Returns 1 when it will run underneath autoha (the caller
 * then points NCCL_TUNER_PLUGIN at autoha), 0 otherwise (logged when the name cannot be used). */
int ah_shim_chain_load(const char *name, const char *self_path);

/* Whether NCCL_TUNER_PLUGIN=name opens autoha itself (another spelling of its path, or STATIC_PLUGIN,
 * which finds the preloaded autoha's symbols first). */
int ah_shim_chain_is_self(const char *name, const char *self_path);

/* The chained plugin's context for a new communicator (non-NULL once initialised), or NULL.
 * constants: NCCL's table, an ah_tuner_constants_v7_t when kabi is 7, else a v5 one (or NULL);
 * converted when the chained plugin speaks the other layout, and its edits copied back. */
void *ah_shim_chain_init(uint64_t id, size_t nranks, size_t nnodes, ah_nccl_logger_t log,
                         ah_nvl_domain_info_v5_t *dom, void *constants, int kabi);
void ah_shim_chain_finalize(void *ctx);
/* Lets the chained plugin edit the cost table and channel count first (v3+ faces). */
void ah_shim_chain_table(void *ctx, int coll, size_t nbytes, int npipe, float **table, int nalgo,
                         int nproto, int regbuff, int *nch);
/* Lets it answer first through the v1/v2 out-parameters (v1/v2 faces). */
void ah_shim_chain_flags(void *ctx, int coll, size_t nbytes, int collnet, int nvls, int npipe,
                         int *algo, int *proto, int *nch);
/* Lets it set the chunk size first (v6). */
void ah_shim_chain_chunk(void *ctx, int coll, size_t nbytes, int algo, int proto, int nch,
                         size_t *chunk);

#endif
