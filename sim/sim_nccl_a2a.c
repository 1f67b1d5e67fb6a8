/* ncclAlltoAll, ncclGather and ncclScatter (NCCL 2.28.3+), built as NCCL 2.28 builds them: each is
 * a set of point-to-point sends and receives in one group (enqueue.cc's taskAppend), so the data
 * moves through sim/'s per-pair mailboxes and the tuner is never consulted for them, as in NCCL.
 * The arguments are checked first with NCCL's codes; the parts go through the strong pncclSend /
 * pncclRecv / pncclGroupStart / pncclGroupEnd names, so an interposer sees one call, not its parts. */
#include "sim_nccl.h"
#include "sim_reduce.h"

enum { A2A_ALL, A2A_GATHER, A2A_SCATTER };

static ncclResult_t a2a_check(int kind, const void *sendbuff, void *recvbuff, size_t count,
                              ncclDataType_t dt, int root, ncclComm_t comm, cudaStream_t stream,
                              const char *fn) {
  ncclResult_t res = sim_nccl_since(fn, SIM_SINCE_ALLTOALL);
  if (res != ncclSuccess) return res;
  if ((res = sim_comm_check(comm, fn)) != ncclSuccess) return res;
  if (kind != A2A_ALL && (root < 0 || root >= comm->nranks))
    return sim_error(ncclInvalidArgument,
                     "ncclsim: %s: invalid root %d (root should be in the "
                     "0..%d range)",
                     fn, root, comm->nranks - 1);
  if (sim_dtype_size(dt) == 0)
    return sim_error(ncclInvalidArgument, "ncclsim: %s: invalid data type %d", fn, (int)dt);
  if (!sim_stream_resolve(stream))
    return sim_error(ncclInvalidArgument, "ncclsim: %s: invalid stream %p", fn, (void *)stream);
  if (count == 0) return ncclSuccess;
  int me = comm->rank;
  int needs_send = kind != A2A_SCATTER || me == root, needs_recv = kind != A2A_GATHER || me == root;
  if ((needs_send && !sendbuff) || (needs_recv && !recvbuff))
    return sim_error(ncclInvalidArgument, "ncclsim: %s: %s buffer is NULL", fn,
                     needs_send && !sendbuff ? "send" : "receive");
  return ncclSuccess;
}

/* Queues the parts in one group. Returns the first error of the parts or of the group's end. */
static ncclResult_t a2a_run(int kind, const void *sendbuff, void *recvbuff, size_t count,
                            ncclDataType_t dt, int root, ncclComm_t comm, cudaStream_t stream) {
  size_t bytes = count * sim_dtype_size(dt);
  int n = comm->nranks, me = comm->rank;
  ncclResult_t res = ncclSuccess;
  pncclGroupStart();
  for (int r = 0; r < n && res == ncclSuccess; r++) {
    switch (kind) {
      case A2A_ALL:
        res = pncclSend((const char *)sendbuff + (size_t)r * bytes, count, dt, r, comm, stream);
        if (res == ncclSuccess)
          res = pncclRecv((char *)recvbuff + (size_t)r * bytes, count, dt, r, comm, stream);
        break;
      case A2A_GATHER:
        if (r == 0) res = pncclSend(sendbuff, count, dt, root, comm, stream);
        if (res == ncclSuccess && me == root)
          res = pncclRecv((char *)recvbuff + (size_t)r * bytes, count, dt, r, comm, stream);
        break;
      default:
        if (me == root)
          res = pncclSend((const char *)sendbuff + (size_t)r * bytes, count, dt, r, comm, stream);
        if (res == ncclSuccess && r == n - 1)
          res = pncclRecv(recvbuff, count, dt, root, comm, stream);
        break;
    }
  }
  ncclResult_t end = pncclGroupEnd();
  return res != ncclSuccess ? res : end;
}

SIM_NCCL_API(ncclResult_t, ncclAlltoAll, const void *sendbuff, void *recvbuff, size_t count,
             ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  ncclResult_t res =
      a2a_check(A2A_ALL, sendbuff, recvbuff, count, datatype, 0, comm, stream, "ncclAlltoAll");
  if (res != ncclSuccess || count == 0) return res;
  return a2a_run(A2A_ALL, sendbuff, recvbuff, count, datatype, 0, comm, stream);
}

SIM_NCCL_API(ncclResult_t, ncclGather, const void *sendbuff, void *recvbuff, size_t count,
             ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream) {
  ncclResult_t res =
      a2a_check(A2A_GATHER, sendbuff, recvbuff, count, datatype, root, comm, stream, "ncclGather");
  if (res != ncclSuccess || count == 0) return res;
  return a2a_run(A2A_GATHER, sendbuff, recvbuff, count, datatype, root, comm, stream);
}

SIM_NCCL_API(ncclResult_t, ncclScatter, const void *sendbuff, void *recvbuff, size_t count,
             ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream) {
  ncclResult_t res = a2a_check(A2A_SCATTER, sendbuff, recvbuff, count, datatype, root, comm, stream,
                               "ncclScatter");
  if (res != ncclSuccess || count == 0) return res;
  return a2a_run(A2A_SCATTER, sendbuff, recvbuff, count, datatype, root, comm, stream);
}
