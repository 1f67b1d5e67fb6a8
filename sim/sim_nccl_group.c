/* Group semantics and the progress engine. Calls inside ncclGroupStart/End are queued per thread
 * and launched at the outermost ncclGroupEnd; a lone call is an implicit group of one. A launch
 * advances every task of the group a step at a time without blocking on any single one, which is
 * what lets one thread drive several ranks (ncclCommInitAll, grouped send/recv) the way NCCL's
 * kernels run concurrently on several GPUs. When nothing can move, the thread sleeps on the
 * segment's futex bell, waking at least every 100 ms to check that its peers are still alive. */
#include <stdlib.h>
#include <time.h>

#include "sim_nccl.h"
#include "sim_nccl_net.h"

static _Thread_local int group_depth;
static _Thread_local sim_task_t *group_head, *group_tail;

int sim_group_depth(void) { return group_depth; }

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Whether an earlier pending task of the group must finish before `t` may move: tasks of one rank
 * of one communicator run in issue order per stream of work (collectives in order, sends to a
 * peer in order, receives from a peer in order), and nothing runs before the rank's init. */
static int task_blocked(const sim_task_t *t, const sim_task_t *head) {
  for (const sim_task_t *e = head; e != t; e = e->next) {
    if (e->phase < 0 || e->comm != t->comm) continue; /* done, or another rank */
    if (e->kind == SIM_TASK_INIT) return 1;
    if (t->kind == SIM_TASK_COLL && e->kind == SIM_TASK_COLL) return 1;
    if (t->kind != SIM_TASK_COLL && e->kind == t->kind && e->peer == t->peer) return 1;
  }
  return 0;
}

static int task_progress(sim_task_t *t) {
  switch (t->kind) {
    case SIM_TASK_INIT:
      if (!t->started) {
        t->started = 1;
        t->result = sim_seg_join(t->comm, (const char *)t->scratch);
        if (t->result != ncclSuccess) return SIM_PROGRESS_DONE;
      }
      if (!t->waiting) { /* t->waiting: the network's handshake is under way */
        if (!sim_seg_all_joined(t->comm)) return SIM_PROGRESS_STALLED;
        sim_comm_joined(t->comm);
        t->result = sim_comm_model_init(t->comm); /* timing model and tuner plugin */
        if (t->result == ncclSuccess)
          t->result = sim_net_setup(t->comm); /* NCCL's net_ib connections */
        if (t->result != ncclSuccess) return SIM_PROGRESS_DONE;
        t->waiting = 1;
      }
      return sim_net_connect_progress(t->comm, &t->result);
    case SIM_TASK_COLL: return sim_coll_progress(t);
    default: return sim_p2p_progress(t);
  }
}

/* Runs every task of a list to completion (or failure). Returns the first error. */
static ncclResult_t group_launch(sim_task_t *head) {
  ncclResult_t first_err = ncclSuccess;
  int pending = 0;
  /* NCCLSIM_SKEW: each rank reaches its collectives late by its own draw, as a rank whose work
   * before the call ran longer would: on its stream before the tuner is asked, so a plugin that
   * times the call from that point (autoha records its start event there) sees the late arrival. */
  for (sim_task_t *t = head; t; t = t->next)
    if (t->kind == SIM_TASK_COLL && t->stream && t->result == ncclSuccess &&
        sim_comm_usable(t->comm)) {
      double d = sim_skew_delay_us(t->comm, t);
      if (d > 0) sim_stream_set_time(t->stream, sim_stream_time(t->stream) + d);
    }
  sim_select_group(head); /* NCCL configures every bucket at launch, before any kernel runs */
  ncclResult_t captured;
  if (sim_graph_nccl_capture(head, &captured)) return captured; /* recorded, not run */
  for (sim_task_t *t = head; t; t = t->next) {
    /* failed at enqueue: counts as done; queued behind work that never finishes: never runs */
    if (t->result != ncclSuccess || (t->stream && sim_stream_stuck(t->stream))) t->phase = -1;
    else pending++;
    if (t->phase != -1 && t->stream) sim_stream_launch_begin(t->stream);
    if (t->phase != -1 && t->kind == SIM_TASK_COLL &&
        t->comm->net) { /* its flows are on the wire */
      sim_traffic_busy(t->comm, +1);
      t->busy = 1;
    }
  }
  double start = now_s(), last_check = start;
  while (pending) {
    int moved = 0, segs = 0;
    sim_seg_t *wait_seg = NULL;
    uint32_t seen = 0;
    for (sim_task_t *t = head; t; t = t->next) {
      if (t->phase < 0 || !t->comm->seg) continue;
      if (!wait_seg) {
        wait_seg = t->comm->seg;
        seen = atomic_load(&wait_seg->bell);
        segs = 1;
      } else if (t->comm->seg != wait_seg) {
        segs = 2;
      }
    }
    for (sim_task_t *t = head; t; t = t->next) {
      if (t->phase < 0 || task_blocked(t, head)) continue;
      int r = task_progress(t);
      if (r == SIM_PROGRESS_DONE) {
        t->phase = -1;
        pending--;
        moved = 1;
      } else if (r == SIM_PROGRESS_MOVED) {
        moved = 1;
      }
    }
    if (!pending || moved) continue;
    double now = now_s();
    if (now - last_check >= 0.1) {
      last_check = now;
      for (sim_task_t *t = head; t; t = t->next) {
        if (t->phase < 0 || !t->comm->seg || !sim_seg_all_joined(t->comm)) continue;
        ncclResult_t r = sim_seg_check_peers(t->comm, t->kind == SIM_TASK_COLL ? -1 : t->peer);
        if (r != ncclSuccess && !task_blocked(t, head)) {
          /* A peer may have finished the call and left (destroyed, or exited) between this
           * task's last progress and the check: it could only finish once every rank had posted
           * the call's last phase, so the task completes now and nothing failed. */
          int pr;
          while ((pr = task_progress(t)) == SIM_PROGRESS_MOVED) {}
          if (pr == SIM_PROGRESS_DONE) {
            t->phase = -1;
            pending--;
            continue;
          }
        }
        if (r == ncclSuccess && atomic_load(&t->comm->revoked)) /* by another thread, meanwhile */
          r = sim_error(ncclInvalidUsage,
                        "ncclsim: rank %d of communicator %016llx: the "
                        "communicator was revoked while the call waited for its peers",
                        t->comm->rank, (unsigned long long)t->comm->hash);
        if (r == ncclSuccess && now - start > sim_timeout_s())
          r = sim_error(ncclSystemError,
                        "ncclsim: rank %d of communicator %016llx waited %.0f s for its peers "
                        "(NCCLSIM_TIMEOUT_S); giving up",
                        t->comm->rank, (unsigned long long)t->comm->hash, now - start);
        if (r != ncclSuccess) {
          t->result = r;
          t->comm->async_error = r;
          t->phase = -1;
          pending--;
        }
      }
      if (!pending) break;
      if (now - start > sim_timeout_s()) { /* a rank still joining: its peers may never come */
        for (sim_task_t *t = head; t; t = t->next) {
          if (t->phase < 0) continue;
          t->result = sim_error(ncclSystemError,
                                "ncclsim: rank %d gave up after %.0f s waiting for the other ranks "
                                "of its communicator to join (NCCLSIM_TIMEOUT_S)",
                                t->comm->rank, now - start);
          t->phase = -1;
          pending--;
        }
        break;
      }
    }
    if (sim_net_polling) { /* a task just waited for the verbs provider, which rings no bell */
      sim_net_polling = 0;
    } else if (wait_seg) {
      sim_seg_wait(wait_seg, seen, segs > 1 ? 1 : 100);
    }
  }
  for (sim_task_t *t = head; t; t = t->next)
    if (t->stream && atomic_load(&t->stream->running)) sim_stream_launch_end(t->stream);
  for (sim_task_t *t = head; t; t = t->next) /* NCCLSIM_FAULT=hang: its data moved, it never ends */
    if (t->kind == SIM_TASK_COLL && t->result == ncclSuccess)
      sim_fault_after_coll(t->comm, t->desc.call, t->stream);
  while (head) {
    sim_task_t *next = head->next;
    if (head->busy) sim_traffic_busy(head->comm, -1);
    if (head->result != ncclSuccess && first_err == ncclSuccess) first_err = head->result;
    /* A peer that died or a timeout leaves the ranks at different phases: the communicator
     * cannot be used again. Argument and usage errors leave every rank in step. */
    if (head->kind != SIM_TASK_INIT && sim_comm_usable(head->comm) &&
        (head->result == ncclRemoteError || head->result == ncclSystemError ||
         head->result == ncclInternalError))
      head->comm->async_error = head->result;
    sim_task_free(head);
    head = next;
  }
  return first_err;
}

ncclResult_t sim_group_run(sim_task_t *head) { return group_launch(head); }

ncclResult_t sim_group_submit(sim_task_t *task) {
  task->next = NULL;
  if (group_depth == 0) return group_launch(task);
  if (group_tail) group_tail->next = task;
  else group_head = task;
  group_tail = task;
  return ncclSuccess;
}

SIM_NCCL_API(ncclResult_t, ncclGroupStart, void) {
  group_depth++;
  return ncclSuccess;
}

SIM_NCCL_API(ncclResult_t, ncclGroupEnd, void) {
  if (group_depth == 0)
    return sim_error(ncclInvalidUsage, "ncclsim: ncclGroupEnd without a matching ncclGroupStart");
  if (--group_depth > 0) return ncclSuccess;
  sim_task_t *head = group_head;
  group_head = group_tail = NULL;
  return head ? group_launch(head) : ncclSuccess;
}

/* 2.22+: plans the group as ncclGroupEnd would (NCCL's buckets, the tuner consulted) and reports
 * the modelled time without running it: the longest per-communicator sum of the planned calls'
 * modelled times, in microseconds. As in NCCL the simulated operations are dropped; their call
 * indices are given back so the next real calls line up with the other ranks'. Communicator
 * creations queued in the group do run, since later groups need the communicators. */
SIM_NCCL_API(ncclResult_t, ncclGroupSimulateEnd, ncclSimInfo_t *simInfo) {
  ncclResult_t res = sim_nccl_since("ncclGroupSimulateEnd", SIM_SINCE_SIMULATE);
  if (res != ncclSuccess) return res;
  if (!simInfo || simInfo->magic != 0x74685283u)
    return sim_error(ncclInvalidArgument,
                     "ncclsim: ncclGroupSimulateEnd: simInfo %s: initialise "
                     "it with NCCL_SIM_INFO_INITIALIZER",
                     simInfo ? "has a bad magic" : "is NULL");
  if (group_depth == 0)
    return sim_error(ncclInvalidUsage,
                     "ncclsim: ncclGroupSimulateEnd without a matching ncclGroupStart");
  if (--group_depth > 0) return ncclSuccess;
  sim_task_t *head = group_head, *inits = NULL, **inits_tail = &inits, **pp = &head;
  group_head = group_tail = NULL;
  while (*pp) { /* creations run for real */
    sim_task_t *t = *pp;
    if (t->kind == SIM_TASK_INIT) {
      *pp = t->next;
      t->next = NULL;
      *inits_tail = t;
      inits_tail = &t->next;
    } else {
      pp = &t->next;
    }
  }
  if (inits) res = group_launch(inits);
  float worst = 0;
  if (head) {
    sim_select_group(head);
    for (sim_task_t *t = head; t; t = t->next) {
      if (t->kind != SIM_TASK_COLL || t->result != ncclSuccess) continue;
      double sum = 0;
      for (sim_task_t *u = head; u;
           u = u->next) /* this task's communicator, once: at its first task */
        if (u->comm == t->comm && u->kind == SIM_TASK_COLL && u->result == ncclSuccess)
          sum += sim_coll_time_us(u->comm, &u->desc, u->comm->phi);
      if (sum > worst) worst = (float)sum;
    }
  }
  while (head) { /* dropped: give the call indices back, newest first per communicator */
    sim_task_t *next = head->next;
    if (sim_comm_usable(head->comm)) {
      if (head->kind == SIM_TASK_COLL) head->comm->coll_calls--;
      else if (head->kind == SIM_TASK_SEND) head->comm->p2p_sent[head->peer]--;
      else if (head->kind == SIM_TASK_RECV) head->comm->p2p_recvd[head->peer]--;
    }
    if (head->result != ncclSuccess && res == ncclSuccess) res = head->result;
    sim_task_free(head);
    head = next;
  }
  simInfo->estimatedTime = worst;
  return res;
}
