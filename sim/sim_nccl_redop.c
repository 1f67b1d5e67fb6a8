/* User reduction operators (NCCL 2.11+): ncclRedOpCreatePreMulSum and ncclRedOpDestroy. Each
 * communicator keeps a table of its operators; a handle is ncclNumOps + index, scrambled with a
 * hash of the communicator pointer exactly as NCCL's ncclUserRedOpMangle does, so a handle used on
 * another communicator is (almost always) refused as unknown there, as in NCCL.
 *
 * The reduction itself pre-multiplies each rank's input by that rank's scalar and sums
 * (sim_reduce_premul); a scalar of residence ncclScalarDevice is read when the collective starts,
 * a host-immediate one is copied here. */
#include <stdlib.h>
#include <string.h>

#include "sim_nccl.h"
#include "sim_reduce.h"

struct sim_redop {
  int used;
  ncclDataType_t dt;
  const void *ptr; /* ncclScalarDevice: where the scalar lives */
  uint64_t bits;   /* ncclScalarHostImmediate: the scalar's bytes */
};

static ncclRedOp_t mangle(const struct ncclComm *comm, ncclRedOp_t op) {
  if ((int)op < (int)ncclNumOps) return op;
  uint64_t h = (uint64_t)(uintptr_t)comm;
  h ^= h >> 32;
  h *= 0x9e3779b97f4a7c13u;
  h >>= 32;
  h &= (uint64_t)ncclMaxRedOp;
  int op1 = (int)h ^ (int)op;
  return op1 < (int)ncclNumOps ? op : (ncclRedOp_t)op1;
}

/* The table index of a user operator handle, or -1 when the communicator does not know it. */
static int redop_index(const struct ncclComm *comm, ncclRedOp_t op) {
  int ix = (int)mangle(comm, op) - (int)ncclNumOps;
  if (ix < 0 || ix >= comm->nredops || !comm->redops[ix].used) return -1;
  return ix;
}

SIM_NCCL_API(ncclResult_t, ncclRedOpCreatePreMulSum, ncclRedOp_t *op, void *scalar,
             ncclDataType_t datatype, ncclScalarResidence_t residence, ncclComm_t comm) {
  ncclResult_t res = sim_comm_entry(comm, "ncclRedOpCreatePreMulSum", SIM_SINCE_PREMULSUM);
  if (res != ncclSuccess) return res;
  if (!op || !scalar)
    return sim_error(ncclInvalidArgument, "ncclsim: ncclRedOpCreatePreMulSum: %s is NULL",
                     op ? "scalar" : "op");
  size_t es = sim_dtype_size(datatype);
  if (es == 0)
    return sim_error(ncclInvalidArgument, "ncclsim: ncclRedOpCreatePreMulSum: invalid data type %d",
                     (int)datatype);
  if (residence != ncclScalarDevice && residence != ncclScalarHostImmediate)
    return sim_error(ncclInvalidArgument,
                     "ncclsim: ncclRedOpCreatePreMulSum: invalid scalar residence %d",
                     (int)residence);
  int ix = 0;
  while (ix < comm->nredops && comm->redops[ix].used) ix++;
  if (ix == comm->nredops) {
    int cap = comm->nredops < 4 ? 4 : 2 * comm->nredops;
    struct sim_redop *grown = realloc(comm->redops, (size_t)cap * sizeof *grown);
    if (!grown)
      return sim_error(ncclSystemError, "ncclsim: ncclRedOpCreatePreMulSum: out of memory");
    memset(grown + comm->nredops, 0, (size_t)(cap - comm->nredops) * sizeof *grown);
    comm->redops = grown;
    comm->nredops = cap;
  }
  struct sim_redop *r = &comm->redops[ix];
  r->used = 1;
  r->dt = datatype;
  r->ptr = NULL;
  r->bits = 0;
  if (residence == ncclScalarHostImmediate) memcpy(&r->bits, scalar, es);
  else r->ptr = scalar;
  *op = mangle(comm, (ncclRedOp_t)((int)ncclNumOps + ix));
  return ncclSuccess;
}

SIM_NCCL_API(ncclResult_t, ncclRedOpDestroy, ncclRedOp_t op, ncclComm_t comm) {
  ncclResult_t res = sim_nccl_since("ncclRedOpDestroy", SIM_SINCE_PREMULSUM);
  if (res != ncclSuccess) return res;
  if ((int)op >= 0 && (int)op < (int)ncclNumOps)
    return sim_error(ncclInvalidArgument,
                     "ncclsim: ncclRedOpDestroy: operator %d is a NCCL builtin", (int)op);
  if ((int)op < 0)
    return sim_error(ncclInvalidArgument, "ncclsim: ncclRedOpDestroy: operator %d is garbage",
                     (int)op);
  if (!sim_comm_usable(comm))
    return sim_error(ncclInvalidArgument, "ncclsim: ncclRedOpDestroy: invalid communicator passed");
  int ix = redop_index(comm, op);
  if (ix < 0)
    return sim_error(ncclInvalidArgument,
                     "ncclsim: ncclRedOpDestroy: operator %d unknown to this communicator",
                     (int)op);
  comm->redops[ix].used = 0;
  return ncclSuccess;
}

ncclResult_t sim_redop_resolve(struct ncclComm *comm, ncclRedOp_t op, ncclDataType_t dt,
                               const char *fn, const void **scalar_ptr_p, uint64_t *scalar_p) {
  if ((int)op >= 0 && (int)op < (int)ncclNumOps) return ncclSuccess;
  int ix = (int)op < 0 ? -1 : redop_index(comm, op);
  if (ix < 0)
    return sim_error(ncclInvalidArgument,
                     "ncclsim: %s: reduction operation %d unknown to this "
                     "communicator",
                     fn, (int)op);
  const struct sim_redop *r = &comm->redops[ix];
  if (r->dt != dt)
    return sim_error(ncclInvalidArgument,
                     "ncclsim: %s: data type %s does not match the type %s "
                     "the user-created operator %d was created for",
                     fn, sim_dtype_name(dt), sim_dtype_name(r->dt), (int)op);
  *scalar_ptr_p = r->ptr;
  *scalar_p = r->bits;
  return ncclSuccess;
}

void sim_redop_free_all(struct ncclComm *comm) {
  free(comm->redops);
  comm->redops = NULL;
  comm->nredops = 0;
}
