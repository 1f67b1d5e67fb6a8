/* The collective and point-to-point entry points: argument checks with NCCL's error codes, then a
 * task for the calling thread's group. ncclBcast goes through the exported ncclBroadcast, as in
 * libnccl, so an interposer sees legacy broadcasts as ncclBroadcast calls. */
#include <stdlib.h>

#include "sim_nccl.h"
#include "sim_reduce.h"

ncclResult_t sim_comm_check(ncclComm_t comm, const char *fn) {
  ncclResult_t res = sim_comm_live(comm, fn);
  if (res != ncclSuccess) return res;
  if (comm->async_error != ncclSuccess)
    return sim_error(comm->async_error,
                     "ncclsim: %s: communicator %016llx failed earlier (%s); "
                     "destroy or abort it",
                     fn, (unsigned long long)comm->hash, ncclGetErrorString(comm->async_error));
  if (comm->revoked)
    return sim_error(ncclInvalidUsage, "ncclsim: %s: communicator %016llx was revoked", fn,
                     (unsigned long long)comm->hash);
  if (comm->suspended)
    return sim_error(ncclInvalidUsage,
                     "ncclsim: %s: communicator %016llx is suspended "
                     "(ncclCommSuspend); resume it first",
                     fn, (unsigned long long)comm->hash);
  return ncclSuccess;
}

static ncclResult_t enqueue(int kind, int coll, const void *sendbuff, void *recvbuff, size_t count,
                            ncclDataType_t dt, ncclRedOp_t op, int root, ncclComm_t comm,
                            cudaStream_t stream, const char *fn) {
  ncclResult_t res = sim_comm_check(comm, fn);
  if (res != ncclSuccess) return res;
  if (sim_dtype_size(dt) == 0)
    return sim_error(ncclInvalidArgument, "ncclsim: %s: invalid data type %d", fn, (int)dt);
  int reduces =
      coll == SIM_COLL_ALLREDUCE || coll == SIM_COLL_REDUCE || coll == SIM_COLL_REDUCESCATTER;
  const void *scalar_ptr = NULL;
  uint64_t scalar = 0;
  if (kind == SIM_TASK_COLL && reduces) {
    if ((int)op < 0)
      return sim_error(ncclInvalidArgument, "ncclsim: %s: invalid reduction operation %d", fn,
                       (int)op);
    res = sim_redop_resolve(comm, op, dt, fn, &scalar_ptr, &scalar);
    if (res != ncclSuccess) return res;
  }
  int premul = kind == SIM_TASK_COLL && reduces && (int)op >= (int)ncclNumOps;
  if (root < 0 || root >= comm->nranks)
    return sim_error(ncclInvalidArgument, "ncclsim: %s: %s %d is out of range [0, %d)", fn,
                     kind == SIM_TASK_COLL ? "root" : "peer", root, comm->nranks);
  struct CUstream_st *s = sim_stream_resolve(stream);
  if (!s)
    return sim_error(ncclInvalidArgument, "ncclsim: %s: invalid stream %p", fn, (void *)stream);
  if (count == 0) return ncclSuccess;
  int needs_send = kind == SIM_TASK_SEND ||
                   (kind == SIM_TASK_COLL && (coll != SIM_COLL_BROADCAST || comm->rank == root));
  int needs_recv = kind == SIM_TASK_RECV ||
                   (kind == SIM_TASK_COLL && (coll != SIM_COLL_REDUCE || comm->rank == root));
  if ((needs_send && !sendbuff) || (needs_recv && !recvbuff))
    return sim_error(ncclInvalidArgument, "ncclsim: %s: %s buffer is NULL", fn,
                     needs_send && !sendbuff ? "send" : "receive");
  sim_task_t *t = sim_task_new();
  if (!t) return sim_error(ncclSystemError, "ncclsim: %s: out of memory", fn);
  t->kind = kind;
  t->comm = comm;
  t->stream = s;
  t->coll = coll;
  t->sendbuf = sendbuff;
  t->recvbuf = recvbuff;
  t->count = count;
  t->dtype = dt;
  t->op = !reduces ? ncclSum : premul ? SIM_OP_PREMULSUM : op;
  t->scalar_ptr = scalar_ptr;
  t->desc.scalar = scalar;
  t->root = kind == SIM_TASK_COLL ? root : 0;
  t->peer = kind == SIM_TASK_COLL ? -1 : root;
  t->desc.coll = coll;
  t->desc.dtype = dt;
  t->desc.op = t->op;
  t->desc.root = (coll == SIM_COLL_BROADCAST || coll == SIM_COLL_REDUCE) ? root : 0;
  t->desc.count = count;
  t->desc.algo = t->desc.proto = t->desc.nchannels = -1;
  if (kind == SIM_TASK_COLL) t->desc.call = comm->coll_calls++;
  else if (kind == SIM_TASK_SEND) t->desc.call = comm->p2p_sent[root]++;
  else t->desc.call = comm->p2p_recvd[root]++;
  return sim_group_submit(t);
}

SIM_NCCL_API(ncclResult_t, ncclAllReduce, const void *sendbuff, void *recvbuff, size_t count,
             ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return enqueue(SIM_TASK_COLL, SIM_COLL_ALLREDUCE, sendbuff, recvbuff, count, datatype, op, 0,
                 comm, stream, "ncclAllReduce");
}

SIM_NCCL_API(ncclResult_t, ncclBroadcast, const void *sendbuff, void *recvbuff, size_t count,
             ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream) {
  return enqueue(SIM_TASK_COLL, SIM_COLL_BROADCAST, sendbuff, recvbuff, count, datatype, ncclSum,
                 root, comm, stream, "ncclBroadcast");
}

SIM_NCCL_API(ncclResult_t, ncclBcast, void *buff, size_t count, ncclDataType_t datatype, int root,
             ncclComm_t comm, cudaStream_t stream) {
  return ncclBroadcast(buff, buff, count, datatype, root, comm, stream);
}

SIM_NCCL_API(ncclResult_t, ncclReduce, const void *sendbuff, void *recvbuff, size_t count,
             ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
             cudaStream_t stream) {
  return enqueue(SIM_TASK_COLL, SIM_COLL_REDUCE, sendbuff, recvbuff, count, datatype, op, root,
                 comm, stream, "ncclReduce");
}

SIM_NCCL_API(ncclResult_t, ncclAllGather, const void *sendbuff, void *recvbuff, size_t sendcount,
             ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  return enqueue(SIM_TASK_COLL, SIM_COLL_ALLGATHER, sendbuff, recvbuff, sendcount, datatype,
                 ncclSum, 0, comm, stream, "ncclAllGather");
}

SIM_NCCL_API(ncclResult_t, ncclReduceScatter, const void *sendbuff, void *recvbuff,
             size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
             cudaStream_t stream) {
  return enqueue(SIM_TASK_COLL, SIM_COLL_REDUCESCATTER, sendbuff, recvbuff, recvcount, datatype, op,
                 0, comm, stream, "ncclReduceScatter");
}

SIM_NCCL_API(ncclResult_t, ncclSend, const void *sendbuff, size_t count, ncclDataType_t datatype,
             int peer, ncclComm_t comm, cudaStream_t stream) {
  return enqueue(SIM_TASK_SEND, -1, sendbuff, NULL, count, datatype, ncclSum, peer, comm, stream,
                 "ncclSend");
}

SIM_NCCL_API(ncclResult_t, ncclRecv, void *recvbuff, size_t count, ncclDataType_t datatype,
             int peer, ncclComm_t comm, cudaStream_t stream) {
  return enqueue(SIM_TASK_RECV, -1, NULL, recvbuff, count, datatype, ncclSum, peer, comm, stream,
                 "ncclRecv");
}
