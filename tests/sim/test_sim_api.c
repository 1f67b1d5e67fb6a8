/* The functions of nccl.h 2.19-2.28 that sim/ provides, checked for NCCL's semantics on several
 * ranks (threads of this process, one per rank; two forked processes for CUDA IPC): AlltoAll,
 * Gather and Scatter move exactly the right bytes (also beyond one staging slot), PreMulSum
 * operators multiply each rank's input by that rank's own scalar, read from the host at creation
 * or from device memory at the call, CommShrink gives the remaining ranks a working communicator,
 * registration and windows round-trip with NCCL's error codes, Revoke and GroupSimulateEnd behave,
 * and a call newer than NCCLSIM_VERSION is refused with a text naming the release that added it
 * (the "version" case, run again by CTest under NCCLSIM_VERSION=2.27.7). */
#include <check.h>
#include <pthread.h>
#include <stdint.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "ah_check.h"

#define NR 4

typedef ncclResult_t (*rank_fn)(int rank, ncclComm_t comm, void *arg);
typedef struct {
  int rank, nranks;
  ncclUniqueId id;
  rank_fn fn;
  void *arg;
  ncclResult_t res;
  char last[512];
} rank_arg_t;

static void *rank_main(void *p) {
  rank_arg_t *a = p;
  ncclComm_t comm = NULL;
  cudaSetDevice(a->rank);
  a->res = ncclCommInitRank(&comm, a->nranks, a->id, a->rank);
  if (a->res == ncclSuccess) a->res = a->fn(a->rank, comm, a->arg);
  snprintf(a->last, sizeof a->last, "%s", ncclGetLastError(comm));
  if (comm) ncclCommDestroy(comm);
  return NULL;
}

/* Runs fn on n ranks, one thread each, and asserts every rank returned ncclSuccess. */
static void run_ranks(int n, rank_fn fn, void *arg) {
  rank_arg_t args[NR];
  pthread_t th[NR];
  ncclUniqueId id;
  ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  for (int r = 0; r < n; r++) {
    args[r] = (rank_arg_t){r, n, id, fn, arg, ncclSuccess, ""};
    ck_assert_int_eq(pthread_create(&th[r], NULL, rank_main, &args[r]), 0);
  }
  for (int r = 0; r < n; r++) ck_assert_int_eq(pthread_join(th[r], NULL), 0);
  for (int r = 0; r < n; r++)
    ck_assert_msg(args[r].res == ncclSuccess, "rank %d: %s (%s)", r,
                  ncclGetErrorString(args[r].res), args[r].last);
}

/* Element i of the block that rank `from` sends to rank `to`. */
static int32_t val(int from, int to, size_t i) {
  return (int32_t)(from * 100000000 + to * 1000000 + (int)(i % 999983));
}

/* ---- AlltoAll, Gather, Scatter ------------------------------------------------------------------ */

static size_t xcount; /* elements per block: set per test */

/* Runs fn on every rank with small blocks, then with large ones (many mailbox chunks per pair). */
static void run_small_and_large(rank_fn fn, size_t small, size_t large) {
  xcount = small;
  run_ranks(NR, fn, NULL);
  xcount = large;
  run_ranks(NR, fn, NULL);
}

static ncclResult_t do_alltoall(int rank, ncclComm_t comm, void *arg) {
  (void)arg;
  size_t n = xcount;
  int32_t *s, *r;
  if (cudaMalloc((void **)&s, n * NR * 4) != cudaSuccess ||
      cudaMalloc((void **)&r, n * NR * 4) != cudaSuccess)
    return ncclSystemError;
  for (int to = 0; to < NR; to++)
    for (size_t i = 0; i < n; i++) s[to * n + i] = val(rank, to, i);
  ncclResult_t res = ncclAlltoAll(s, r, n, ncclInt32, comm, NULL);
  for (int from = 0; from < NR && res == ncclSuccess; from++)
    for (size_t i = 0; i < n; i++)
      if (r[from * n + i] != val(from, rank, i)) return ncclInternalError; /* wrong bytes */
  cudaFree(s);
  cudaFree(r);
  return res;
}

START_TEST(test_alltoall_exact) {
  run_small_and_large(do_alltoall, 1000, 600000);
} /* 2.4 MB blocks */
END_TEST

static ncclResult_t do_gather_scatter(int rank, ncclComm_t comm, void *arg) {
  (void)arg;
  size_t n = xcount;
  int32_t *mine = malloc(n * 4), *all = calloc(n * NR, 4), *back = calloc(n, 4);
  if (!mine || !all || !back) return ncclSystemError;
  for (size_t i = 0; i < n; i++) mine[i] = val(rank, 2, i);
  ncclResult_t res = ncclGather(mine, all, n, ncclInt32, 2, comm, NULL);
  if (res == ncclSuccess && rank == 2)
    for (int from = 0; from < NR; from++)
      for (size_t i = 0; i < n; i++)
        if (all[from * n + i] != val(from, 2, i)) return ncclInternalError;
  if (res == ncclSuccess && rank != 2)
    for (size_t i = 0; i < n * NR; i++)
      if (all[i] != 0) return ncclInternalError; /* recvbuff of a non-root is not written */
  /* Scatter from root 1, then in place at the root: recvbuff == sendbuff + root * count. */
  for (int to = 0; to < NR; to++)
    for (size_t i = 0; i < n; i++) all[to * n + i] = val(1, to, i);
  if (res == ncclSuccess) res = ncclScatter(all, back, n, ncclInt32, 1, comm, NULL);
  for (size_t i = 0; i < n && res == ncclSuccess; i++)
    if (back[i] != val(1, rank, i)) return ncclInternalError;
  if (res == ncclSuccess)
    res = ncclScatter(all, rank == 1 ? all + n : back, n, ncclInt32, 1, comm, NULL);
  if (res == ncclSuccess && rank == 1)
    for (size_t i = 0; i < n; i++)
      if (all[n + i] != val(1, 1, i)) return ncclInternalError;
  /* Bad root: NCCL's code and text. */
  if (res == ncclSuccess) {
    if (ncclGather(mine, all, n, ncclInt32, NR, comm, NULL) != ncclInvalidArgument)
      return ncclInternalError;
    if (!strstr(ncclGetLastError(comm), "invalid root 4")) return ncclInternalError;
  }
  free(mine);
  free(all);
  free(back);
  return res;
}

START_TEST(test_gather_scatter_exact) { run_small_and_large(do_gather_scatter, 777, 400000); }
END_TEST

/* One thread driving every rank (ncclCommInitAll) with the calls grouped, as nccl-tests do. */
START_TEST(test_alltoall_one_thread) {
  ncclComm_t comms[NR];
  ck_assert_int_eq(ncclCommInitAll(comms, NR, NULL), ncclSuccess);
  enum { N = 300000 };
  int32_t *s[NR], *r[NR];
  for (int k = 0; k < NR; k++) {
    s[k] = malloc((size_t)N * NR * 4);
    r[k] = malloc((size_t)N * NR * 4);
    for (int to = 0; to < NR; to++)
      for (size_t i = 0; i < N; i++) s[k][to * (size_t)N + i] = val(k, to, i);
  }
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  for (int k = 0; k < NR; k++)
    ck_assert_int_eq(ncclAlltoAll(s[k], r[k], N, ncclInt32, comms[k], NULL), ncclSuccess);
  ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
  for (int k = 0; k < NR; k++) {
    for (int from = 0; from < NR; from++)
      for (size_t i = 0; i < N; i += 997)
        ck_assert_int_eq(r[k][from * (size_t)N + i], val(from, k, i));
    free(s[k]);
    free(r[k]);
    ck_assert_int_eq(ncclCommDestroy(comms[k]), ncclSuccess);
  }
}
END_TEST

/* ---- PreMulSum ---------------------------------------------------------------------------------- */

static ncclResult_t do_premulsum(int rank, ncclComm_t comm, void *arg) {
  (void)arg;
  enum { N = 1000 };
  float in[N], out[N], rs[N / NR], scalar = (float)(rank + 1);
  double din[N], dout[N], *dscalar;
  int32_t iin[N], iout[N], iscalar = 3 + rank;
  for (int i = 0; i < N; i++) {
    in[i] = (float)(i % 17);
    din[i] = i * 0.5;
    iin[i] = i + rank;
  }
  ncclRedOp_t op, dop, iop;
  ncclResult_t res =
      ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat32, ncclScalarHostImmediate, comm);
  if (res != ncclSuccess) return res;
  scalar = 1000; /* host-immediate: copied at creation, this store must not matter */
  if ((res = ncclAllReduce(in, out, N, ncclFloat32, op, comm, NULL)) != ncclSuccess) return res;
  for (int i = 0; i < N; i++) /* sum over r of (r+1) * x = 10 x */
    if (out[i] != 10.0f * (float)(i % 17)) return ncclInternalError;
  if ((res = ncclReduceScatter(in, rs, N / NR, ncclFloat32, op, comm, NULL)) != ncclSuccess)
    return res;
  for (int i = 0; i < N / NR; i++)
    if (rs[i] != 10.0f * (float)((rank * (N / NR) + i) % 17)) return ncclInternalError;
  /* Device residence: the scalar is read when the collective runs. */
  if (cudaMalloc((void **)&dscalar, sizeof *dscalar) != cudaSuccess) return ncclSystemError;
  *dscalar = -1;
  if ((res = ncclRedOpCreatePreMulSum(&dop, dscalar, ncclFloat64, ncclScalarDevice, comm)) !=
      ncclSuccess)
    return res;
  *dscalar = 0.25 * (rank + 1);
  if ((res = ncclReduce(din, dout, N, ncclFloat64, dop, 3, comm, NULL)) != ncclSuccess) return res;
  if (rank == 3)
    for (int i = 0; i < N; i++)
      if (dout[i] != 2.5 * din[i]) return ncclInternalError; /* 0.25 * (1+2+3+4) */
  /* Integers wrap: (i + r) * (3 + r) summed. */
  if ((res = ncclRedOpCreatePreMulSum(&iop, &iscalar, ncclInt32, ncclScalarHostImmediate, comm)) !=
      ncclSuccess)
    return res;
  if ((res = ncclAllReduce(iin, iout, N, ncclInt32, iop, comm, NULL)) != ncclSuccess) return res;
  for (int i = 0; i < N; i++) {
    int32_t want = 0;
    for (int r = 0; r < NR; r++) want += (i + r) * (3 + r);
    if (iout[i] != want) return ncclInternalError;
  }
  /* NCCL's refusals: another type, a built-in, a destroyed operator. */
  if (ncclAllReduce(in, out, N, ncclFloat64, op, comm, NULL) != ncclInvalidArgument)
    return ncclInternalError;
  if (!strstr(ncclGetLastError(comm), "does not match")) return ncclInternalError;
  if (ncclRedOpDestroy(ncclSum, comm) != ncclInvalidArgument) return ncclInternalError;
  if ((res = ncclRedOpDestroy(op, comm)) != ncclSuccess) return res;
  if (ncclRedOpDestroy(op, comm) != ncclInvalidArgument) return ncclInternalError;
  if (ncclAllReduce(in, out, N, ncclFloat32, op, comm, NULL) != ncclInvalidArgument)
    return ncclInternalError;
  if (!strstr(ncclGetLastError(comm), "unknown to this communicator")) return ncclInternalError;
  ncclRedOpDestroy(dop, comm);
  ncclRedOpDestroy(iop, comm);
  cudaFree(dscalar);
  return ncclSuccess;
}

START_TEST(test_premulsum_exact) { run_ranks(NR, do_premulsum, NULL); }
END_TEST

/* ---- Shrink and Revoke -------------------------------------------------------------------------- */

static ncclResult_t do_shrink(int rank, ncclComm_t comm, void *arg) {
  (void)arg;
  int excl[1] = {1};
  ncclComm_t child = NULL;
  if (rank == 1) { /* the excluded rank may not call; if it does, NCCL refuses */
    if (ncclCommShrink(comm, excl, 1, &child, NULL, NCCL_SHRINK_DEFAULT) != ncclInvalidArgument)
      return ncclInternalError;
    return ncclSuccess;
  }
  ncclResult_t res = ncclCommShrink(comm, excl, 1, &child, NULL, NCCL_SHRINK_ABORT);
  if (res != ncclSuccess) return res;
  int n = 0, me = -1;
  ncclCommCount(child, &n);
  ncclCommUserRank(child, &me);
  if (n != NR - 1 || me != (rank < 1 ? rank : rank - 1)) return ncclInternalError;
  float x[64], y[64];
  for (int i = 0; i < 64; i++) x[i] = (float)(rank + i);
  if ((res = ncclAllReduce(x, y, 64, ncclFloat32, ncclSum, child, NULL)) != ncclSuccess) return res;
  for (int i = 0; i < 64; i++)
    if (y[i] != (float)(0 + 2 + 3 + 3 * i)) return ncclInternalError;
  /* Revoke: collectives refused, destroy still fine. */
  if ((res = ncclCommRevoke(child, NCCL_REVOKE_DEFAULT)) != ncclSuccess) return res;
  if (ncclAllReduce(x, y, 64, ncclFloat32, ncclSum, child, NULL) != ncclInvalidUsage)
    return ncclInternalError;
  if (!strstr(ncclGetLastError(child), "revoked")) return ncclInternalError;
  if (ncclCommRevoke(child, NCCL_REVOKE_DEFAULT) != ncclInvalidArgument) return ncclInternalError;
  if (ncclCommFinalize(child) != ncclInvalidUsage) return ncclInternalError;
  return ncclCommDestroy(child);
}

START_TEST(test_shrink_works) { run_ranks(NR, do_shrink, NULL); }
END_TEST

/* One thread shrinks the ranks it drives inside a group (no rank could finish alone). */
START_TEST(test_shrink_grouped) {
  ncclComm_t comms[NR], child[NR] = {NULL};
  ck_assert_int_eq(ncclCommInitAll(comms, NR, NULL), ncclSuccess);
  int excl[2] = {3, 0};
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  for (int k = 1; k <= 2; k++)
    ck_assert_int_eq(ncclCommShrink(comms[k], excl, 2, &child[k], NULL, NCCL_SHRINK_DEFAULT),
                     ncclSuccess);
  ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
  int x[2][8], y[2][8];
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  for (int k = 1; k <= 2; k++) {
    int me = -1;
    ck_assert_int_eq(ncclCommUserRank(child[k], &me), ncclSuccess);
    ck_assert_int_eq(me, k - 1);
    for (int i = 0; i < 8; i++) x[k - 1][i] = 10 * k + i;
    ck_assert_int_eq(ncclAllReduce(x[k - 1], y[k - 1], 8, ncclInt32, ncclSum, child[k], NULL),
                     ncclSuccess);
  }
  ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < 8; i++) ck_assert_int_eq(y[k][i], 30 + 2 * i);
  for (int k = 1; k <= 2; k++) ck_assert_int_eq(ncclCommDestroy(child[k]), ncclSuccess);
  for (int k = 0; k < NR; k++) ck_assert_int_eq(ncclCommDestroy(comms[k]), ncclSuccess);
}
END_TEST

/* ---- GroupSimulateEnd -------------------------------------------------------------------------- */

static ncclResult_t do_simulate(int rank, ncclComm_t comm, void *arg) {
  (void)arg;
  enum { N = 1 << 16 };
  static _Thread_local float x[N], y[N];
  for (int i = 0; i < N; i++) {
    x[i] = (float)rank;
    y[i] = -7;
  }
  ncclSimInfo_t info = NCCL_SIM_INFO_INITIALIZER;
  ncclGroupStart();
  ncclAllReduce(x, y, N, ncclFloat32, ncclSum, comm, NULL);
  ncclResult_t res = ncclGroupSimulateEnd(&info);
  if (res != ncclSuccess) return res;
  if (!(info.estimatedTime > 0) || y[0] != -7) return ncclInternalError; /* timed, not run */
  /* Only rank 0 simulates a second time: indices given back, so the real call still matches. */
  if (rank == 0) {
    ncclGroupStart();
    ncclAllReduce(x, y, N, ncclFloat32, ncclSum, comm, NULL);
    if ((res = ncclGroupSimulateEnd(&info)) != ncclSuccess) return res;
  }
  if ((res = ncclAllReduce(x, y, N, ncclFloat32, ncclSum, comm, NULL)) != ncclSuccess) return res;
  if (y[N - 1] != 6.0f) return ncclInternalError;
  ncclSimInfo_t bad = NCCL_SIM_INFO_INITIALIZER;
  bad.magic = 0;
  ncclGroupStart();
  if (ncclGroupSimulateEnd(&bad) != ncclInvalidArgument) return ncclInternalError;
  return ncclGroupEnd();
}

START_TEST(test_group_simulate) { run_ranks(NR, do_simulate, NULL); }
END_TEST

/* ---- memory and registration ------------------------------------------------------------------- */

START_TEST(test_mem_register_roundtrip) {
  ncclComm_t comm;
  ncclUniqueId id;
  ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  ck_assert_int_eq(ncclCommInitRank(&comm, 1, id, 0), ncclSuccess);
  void *p = NULL, *h1 = NULL, *h2 = NULL;
  ck_assert_int_eq(ncclMemAlloc(&p, 1 << 20), ncclSuccess);
  ck_assert_ptr_nonnull(p);
  struct cudaPointerAttributes at;
  ck_assert_int_eq(cudaPointerGetAttributes(&at, (char *)p + 100), cudaSuccess);
  ck_assert_int_eq(at.type, cudaMemoryTypeDevice);
  memset(p, 0x5a, 1 << 20); /* usable memory */
  ck_assert_int_eq(ncclCommRegister(comm, p, 1 << 20, &h1), ncclSuccess);
  ck_assert_int_eq(ncclCommRegister(comm, (char *)p + 4096, 4096, &h2), ncclSuccess);
  ck_assert_ptr_eq(h1, h2); /* inside a registered range: the same registration, counted */
  ck_assert_int_eq(ncclCommDeregister(comm, h1), ncclSuccess);
  ck_assert_int_eq(ncclCommDeregister(comm, h2), ncclSuccess);
  ck_assert_int_eq(ncclCommDeregister(comm, h1), ncclInvalidUsage);
  ck_assert_ptr_nonnull(strstr(ncclGetLastError(comm), "not registered"));
  ck_assert_int_eq(ncclCommDeregister(comm, NULL), ncclSuccess);
  ncclWindow_t win = NULL, win2 = NULL;
  ck_assert_int_eq(ncclCommWindowRegister(comm, p, 1 << 20, &win, NCCL_WIN_COLL_SYMMETRIC),
                   ncclSuccess);
  ck_assert_ptr_nonnull(win);
  ck_assert_int_eq(ncclCommWindowRegister(comm, NULL, 0, &win2, 0), ncclSuccess);
  ck_assert_ptr_null(win2);
  ck_assert_int_eq(ncclCommWindowRegister(comm, p, 64, &win2, 0x80), ncclInvalidArgument);
  ck_assert_int_eq(ncclCommWindowDeregister(comm, win), ncclSuccess);
  ck_assert_int_eq(ncclCommWindowDeregister(comm, win), ncclInvalidUsage);
  ck_assert_int_eq(ncclMemFree(p), ncclSuccess);
  ck_assert_int_eq(ncclMemFree(p), ncclUnhandledCudaError); /* freed twice: cudaFree refuses */
  ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
}
END_TEST

START_TEST(test_cuda_host_and_peer) {
  static char buf[8192];
  struct cudaPointerAttributes at;
  ck_assert_int_eq(cudaPointerGetAttributes(&at, buf), cudaSuccess);
  ck_assert_int_eq(at.type, cudaMemoryTypeUnregistered);
  ck_assert_int_eq(cudaHostRegister(buf, sizeof buf, cudaHostRegisterMapped), cudaSuccess);
  ck_assert_int_eq(cudaPointerGetAttributes(&at, buf + 10), cudaSuccess);
  ck_assert_int_eq(at.type, cudaMemoryTypeHost);
  ck_assert_ptr_eq(at.hostPointer, buf + 10);
  ck_assert_int_eq(cudaHostRegister(buf + 100, 10, 0), cudaErrorHostMemoryAlreadyRegistered);
  ck_assert_int_eq(cudaHostUnregister(buf), cudaSuccess);
  ck_assert_int_eq(cudaHostUnregister(buf), cudaErrorHostMemoryNotRegistered);
  ck_assert_int_eq(cudaGetLastError(), cudaErrorHostMemoryNotRegistered);
  int can = -1;
  ck_assert_int_eq(cudaDeviceCanAccessPeer(&can, 0, 1), cudaSuccess);
  ck_assert_int_eq(can, 1);
  ck_assert_int_eq(cudaDeviceCanAccessPeer(&can, 1, 1), cudaSuccess);
  ck_assert_int_eq(can, 0);
  ck_assert_int_eq(cudaDeviceCanAccessPeer(&can, 0, 99), cudaErrorInvalidDevice);
  ck_assert_int_eq(cudaSetDevice(0), cudaSuccess);
  ck_assert_int_eq(cudaDeviceEnablePeerAccess(1, 0), cudaSuccess);
  ck_assert_int_eq(cudaDeviceEnablePeerAccess(1, 0), cudaErrorPeerAccessAlreadyEnabled);
  ck_assert_int_eq(cudaDeviceDisablePeerAccess(1), cudaSuccess);
  ck_assert_int_eq(cudaDeviceDisablePeerAccess(1), cudaErrorPeerAccessNotEnabled);
  struct cudaDeviceProp prop;
  ck_assert_int_eq(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  ck_assert_int_eq(prop.major, 9);
}
END_TEST

/* ---- CUDA IPC between two processes -------------------------------------------------------------- */

START_TEST(test_ipc_two_processes) {
  int to_child[2], to_parent[2];
  ck_assert_int_eq(pipe(to_child), 0);
  ck_assert_int_eq(pipe(to_parent), 0);
  int *mem = NULL;
  ck_assert_int_eq(cudaMalloc((void **)&mem, 1 << 20), cudaSuccess);
  for (int i = 0; i < (1 << 18); i++) mem[i] = i;
  cudaIpcMemHandle_t h;
  ck_assert_int_eq(cudaIpcGetMemHandle(&h, mem + 1), cudaErrorInvalidValue); /* not the base */
  ck_assert_int_eq(cudaIpcGetMemHandle(&h, mem), cudaSuccess);
  void *self = NULL;
  ck_assert_int_eq(cudaIpcOpenMemHandle(&self, h, cudaIpcMemLazyEnablePeerAccess),
                   cudaErrorDeviceUninitialized);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) { /* importer: reads the exporter's data, writes its answer into the same pages */
    char go;
    int *peer = NULL, status = 1;
    if (read(to_child[0], &go, 1) == 1 &&
        cudaIpcOpenMemHandle((void **)&peer, h, cudaIpcMemLazyEnablePeerAccess) == cudaSuccess) {
      int *again = NULL;
      status =
          cudaIpcOpenMemHandle((void **)&again, h, cudaIpcMemLazyEnablePeerAccess) == cudaSuccess &&
                  again == peer
              ? 0
              : 2;
      for (int i = 0; i < (1 << 18) && status == 0; i++)
        if (peer[i] != i) status = 3;
      peer[12345] = -42;
      if (cudaIpcCloseMemHandle(again) != cudaSuccess || cudaIpcCloseMemHandle(peer) != cudaSuccess)
        status = 4;
      if (cudaIpcCloseMemHandle(peer) != cudaErrorInvalidValue) status = 5;
    }
    if (write(to_parent[1], "x", 1) != 1) status = 6;
    _exit(status);
  }
  ck_assert_int_eq(write(to_child[1], "g", 1), 1);
  char done;
  ck_assert_int_eq(read(to_parent[0], &done, 1), 1);
  int status = -1;
  ck_assert_int_eq(waitpid(pid, &status, 0), pid);
  ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "importer failed with %d",
                WEXITSTATUS(status));
  ck_assert_int_eq(mem[12345], -42); /* the importer's store is in the exporter's memory */
  ck_assert_int_eq(cudaFree(mem), cudaSuccess);
  /* A freed allocation's handle is stale: refused, from another process. */
  pid = fork();
  if (pid == 0) {
    void *p = NULL;
    _exit(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess) == cudaSuccess ? 1 : 0);
  }
  ck_assert_int_eq(waitpid(pid, &status, 0), pid);
  ck_assert_int_eq(WEXITSTATUS(status), 0);
  cudaEvent_t ev;
  cudaIpcEventHandle_t eh;
  ck_assert_int_eq(cudaEventCreateWithFlags(&ev, cudaEventInterprocess | cudaEventDisableTiming),
                   cudaSuccess);
  ck_assert_int_eq(cudaIpcGetEventHandle(&eh, ev), cudaErrorNotSupported);
  cudaEventDestroy(ev);
}
END_TEST

/* ---- version gating ---------------------------------------------------------------------------- */

/* Every function added after 2.19 either works or, under an older NCCLSIM_VERSION, is refused with
 * ncclInvalidUsage and a text naming the release that introduced it. */
/* ---- work in flight ------------------------------------------------------------------------------ */

/* sim/ runs a collective on its caller's thread; while it runs, its stream has work in flight, as
 * a GPU stream with a kernel still running: a query from another thread answers not-ready, and an
 * event recorded behind it completes when the collective does (what autoha's hang probes rely on). */
static _Atomic(cudaStream_t) behind_stream;

static ncclResult_t do_behind(int rank, ncclComm_t comm, void *arg) {
  (void)arg;
  float *buf;
  if (cudaMalloc((void **)&buf, 1024 * sizeof *buf) != cudaSuccess) return ncclSystemError;
  ncclResult_t res = ncclSuccess;
  if (rank == 0) {
    cudaStream_t s;
    if (cudaStreamCreate(&s) != cudaSuccess) return ncclSystemError;
    atomic_store(&behind_stream, s);
    res = ncclAllReduce(buf, buf, 1024, ncclFloat, ncclSum, comm, s); /* waits for rank 1 */
    if (res == ncclSuccess && cudaStreamQuery(s) != cudaSuccess) res = ncclInternalError;
  } else {
    cudaStream_t s0 = NULL;
    for (int t = 0; t < 5000 && !(s0 = atomic_load(&behind_stream)); t++) usleep(1000);
    int busy = 0;
    for (int t = 0; t < 5000 && s0 && !(busy = cudaStreamQuery(s0) == cudaErrorNotReady); t++)
      usleep(1000);
    cudaEvent_t e;
    if (!busy || cudaEventCreate(&e) != cudaSuccess || cudaEventRecord(e, s0) != cudaSuccess)
      return ncclInternalError;
    if (cudaEventQuery(e) != cudaErrorNotReady)
      return ncclInvalidUsage; /* behind the running call */
    res = ncclAllReduce(buf, buf, 1024, ncclFloat, ncclSum, comm, NULL);
    if (res == ncclSuccess &&
        (cudaEventSynchronize(e) != cudaSuccess || cudaEventQuery(e) != cudaSuccess))
      res = ncclInternalError;
    cudaEventDestroy(e);
  }
  cudaFree(buf);
  return res;
}

START_TEST(test_work_in_flight) { run_ranks(2, do_behind, NULL); }

START_TEST(test_version_gating) {
  int v = 0;
  ck_assert_int_eq(ncclGetVersion(&v), ncclSuccess);
  ncclComm_t comm;
  ncclUniqueId id;
  ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  ck_assert_int_eq(ncclCommInitRank(&comm, 1, id, 0), ncclSuccess);
  float x[4] = {1, 2, 3, 4}, y[4];
  ncclResult_t r = ncclAlltoAll(x, y, 4, ncclFloat32, comm, NULL);
  if (v < 22803) {
    ck_assert_int_eq(r, ncclInvalidUsage);
    ck_assert_ptr_nonnull(
        strstr(ncclGetLastError(comm), "ncclAlltoAll was introduced in NCCL 2.28.3"));
    ck_assert_int_eq(ncclGather(x, y, 4, ncclFloat32, 0, comm, NULL), ncclInvalidUsage);
  } else {
    ck_assert_int_eq(r, ncclSuccess);
    ck_assert(y[3] == 4);
  }
  r = ncclCommRevoke(comm, NCCL_REVOKE_DEFAULT);
  if (v < 22807) {
    ck_assert_int_eq(r, ncclInvalidUsage);
    ck_assert_ptr_nonnull(
        strstr(ncclGetLastError(comm), "ncclCommRevoke was introduced in NCCL 2.28.7"));
  } else {
    ck_assert_int_eq(r, ncclSuccess);
  }
  void *p = NULL;
  r = ncclMemAlloc(&p, 4096); /* 2.19.1: present in every version this test runs under */
  ck_assert_int_eq(r, v < 21901 ? ncclInvalidUsage : ncclSuccess);
  if (p) ncclMemFree(p);
  ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
}
END_TEST

int main(void) {
  Suite *s = suite_create("sim_api");
  struct {
    const char *name;
    const TTest *t;
  } cases[] = {{"alltoall", test_alltoall_exact},       {"alltoall", test_alltoall_one_thread},
               {"alltoall", test_gather_scatter_exact}, {"premulsum", test_premulsum_exact},
               {"shrink", test_shrink_works},           {"shrink", test_shrink_grouped},
               {"simulate", test_group_simulate},       {"memory", test_mem_register_roundtrip},
               {"memory", test_cuda_host_and_peer},     {"memory", test_ipc_two_processes},
               {"inflight", test_work_in_flight},       {"version", test_version_gating}};
  TCase *tc = NULL;
  const char *cur = "";
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    if (strcmp(cur, cases[i].name) != 0) {
      tc = tcase_create(cases[i].name);
      tcase_set_timeout(tc, 60);
      suite_add_tcase(s, tc);
      cur = cases[i].name;
    }
    tcase_add_test(tc, cases[i].t);
  }
  return ah_check_run(s);
}
