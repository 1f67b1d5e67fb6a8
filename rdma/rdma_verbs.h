/* rdma_verbs.h: what the verbs hook (rdma_verbs.c) lends the rest of rdma/ beyond the HA layer's
 * table (rdma_ha.h): the real verbs for the shim's own reads of the host's devices. */
#ifndef AH_RDMA_VERBS_H
#define AH_RDMA_VERBS_H

/* The real verb name@version: from the libibverbs NCCL resolved its verbs from, or when NCCL has
 * resolved none yet, from the library NCCL's net_ib would open ($NCCL_IBVERBS_LIB, else
 * libibverbs.so.1; opened once, RTLD_LOCAL). NULL when neither has it.
 * Note that the lookup never goes through the shim's own dlvsym, so it moves none of the hook's
 * state: NCCL's handle stays the one NCCL opened. */
void *ah_shim_verbs_lookup(const char *name, const char *version);

#endif
