/* NCCL groups issued into a capturing stream: recorded at group launch, with the configuration
 * chosen then (the tuner is consulted once, at capture, as in NCCL), and replayed by every launch
 * of the graph as a group of the same tasks with that configuration.
 *
 * The key choice: a replay is an ordinary group launch of copies of the captured tasks, each with a
 * fresh per-communicator call index, so replayed collectives move data through the segment, take
 * modelled time on the launch stream and pass the same cross-rank check as eager ones: ranks whose
 * captures chose different configurations are refused at the first replay, where real NCCL would
 * hang. */
#include <stdlib.h>
#include <string.h>

#include "sim_graph.h"
#include "sim_nccl.h"

struct sim_graph_nccl {
  int ntasks;
  sim_task_t *tasks; /* the captured tasks, as configured at capture */
};

static void tasks_free(sim_task_t *head) {
  while (head) {
    sim_task_t *next = head->next;
    sim_task_free(head);
    head = next;
  }
}

/* Replays a captured group on `s` (sim_graph_nccl_ops_t's replay). */
static int nccl_replay(struct sim_graph_nccl *g, struct CUstream_st *s) {
  sim_task_t *head = NULL, **tail = &head;
  ncclResult_t res = ncclSuccess;
  for (sim_task_t *t = g->tasks; t && res == ncclSuccess; t = t->next) {
    struct ncclComm *c = t->comm;
    if (!sim_comm_usable(c)) {
      res = sim_error(ncclInvalidArgument,
                      "ncclsim: a graph replays a collective on a destroyed "
                      "communicator");
      break;
    }
    if (c->async_error != ncclSuccess) {
      res = sim_error(c->async_error,
                      "ncclsim: a graph replays a collective on communicator %016llx, "
                      "which failed earlier (%s)",
                      (unsigned long long)c->hash, ncclGetErrorString(c->async_error));
      break;
    }
    sim_task_t *u = sim_task_new();
    if (!u) {
      res = sim_error(ncclSystemError, "ncclsim: out of memory replaying a captured group");
      break;
    }
    *u = *t;
    u->stream = s;
    u->phase = u->waiting = u->started = 0;
    u->wait_seq = 0;
    u->chunk = u->nchunks = u->elems_per_chunk = u->done_bytes = 0;
    u->end_vt = 0;
    u->scratch = NULL;
    u->result = ncclSuccess;
    u->next = NULL;
    /* A replay is a new call on every rank, in the same order everywhere. */
    uint64_t captured_call = t->desc.call;
    if (u->kind == SIM_TASK_COLL) u->desc.call = c->coll_calls++;
    else if (u->kind == SIM_TASK_SEND) u->desc.call = c->p2p_sent[u->peer]++;
    else if (u->kind == SIM_TASK_RECV) u->desc.call = c->p2p_recvd[u->peer]++;
    u->bucket_call = u->desc.call - (captured_call - t->bucket_call);
    *tail = u;
    tail = &u->next;
  }
  if (res != ncclSuccess) {
    tasks_free(head);
  } else {
    res = sim_group_run(head);
  }
  if (res != ncclSuccess) {
    sim_log_warn("cudaGraphLaunch: a captured NCCL group failed on replay: %s",
                 ncclGetLastError(NULL));
    for (sim_task_t *t = g->tasks; t;
         t = t->next) /* the kernel failed: the communicator is broken */
      if (sim_comm_usable(t->comm) && t->comm->async_error == ncclSuccess)
        t->comm->async_error = res;
  }
  return (int)res;
}

static void nccl_free(struct sim_graph_nccl *g) {
  if (!g) return;
  tasks_free(g->tasks);
  free(g);
}

static const sim_graph_nccl_ops_t nccl_ops = {.replay = nccl_replay, .free = nccl_free};

int sim_graph_nccl_capture(sim_task_t *head, ncclResult_t *res_p) {
  struct sim_capture *cap = NULL;
  struct CUstream_st *cap_stream = NULL;
  int mixed = 0, n = 0;
  ncclResult_t first_err = ncclSuccess;
  for (sim_task_t *t = head; t; t = t->next) {
    struct sim_capture *c = t->stream ? __atomic_load_n(&t->stream->cap, __ATOMIC_ACQUIRE) : NULL;
    if (c && !cap) {
      cap = c;
      cap_stream = t->stream;
    }
    if (c != cap || (!c && cap)) mixed = 1;
    if (t->result != ncclSuccess && first_err == ncclSuccess) first_err = t->result;
    n++;
  }
  if (!cap) return 0;
  /* Tasks before the first captured one were not compared: check the list again from the top. */
  for (sim_task_t *t = head; t && !mixed; t = t->next)
    if (!t->stream || __atomic_load_n(&t->stream->cap, __ATOMIC_ACQUIRE) != cap) mixed = 1;
  if (mixed) {
    *res_p = sim_error(ncclInvalidUsage,
                       "ncclsim: a group mixes streams being captured with streams "
                       "that are not (or belong to another capture); NCCL does not support this");
  } else if (first_err != ncclSuccess) {
    *res_p = first_err; /* the group fails at launch, as an eager one would */
  } else if (!sim_capture_valid(cap)) {
    *res_p = sim_error(ncclUnhandledCudaError,
                       "ncclsim: Cuda failure 'operation failed due to a "
                       "previous error during capture' (the stream's capture was invalidated)");
  } else {
    struct sim_graph_nccl *g = calloc(1, sizeof *g);
    if (!g) {
      *res_p = sim_error(ncclSystemError, "ncclsim: out of memory recording a captured group");
    } else {
      g->ntasks = n;
      g->tasks = head;
      cudaError_t r = sim_capture_add_nccl(cap, cap_stream, g, &nccl_ops);
      if (r == cudaSuccess) {
        *res_p = ncclSuccess;
        return 1; /* the tasks now belong to the graph */
      }
      free(g);
      *res_p = sim_error(ncclUnhandledCudaError,
                         "ncclsim: Cuda failure '%s' recording a captured "
                         "group",
                         cudaGetErrorString(r));
    }
  }
  tasks_free(head);
  return 1;
}
