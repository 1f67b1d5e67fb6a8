/* Collectives: real data movement through the segment's per-rank staging slots, in chunks of at
 * most one slot. Each chunk goes through two or three phases (deposit, reduce, gather), each
 * closed by a post and a wait for all ranks. AllReduce reduces a different segment of the chunk on
 * each rank and then every rank gathers the segments, so each rank touches O(bytes) data however
 * many ranks there are. Reductions run in rank order, so every rank computes the same result.
 *
 * The first chunk also carries each rank's description of the call; every rank checks that all
 * descriptions agree (collective, count, type, operator, root, and the configuration chosen) and
 * fails the call on every rank if not, where real NCCL would hang. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim_nccl.h"
#include "sim_nccl_net.h"
#include "sim_reduce.h"

enum { PH_DEPOSIT = 0, PH_REDUCE = 1, PH_GATHER = 2, PH_FAILED = 3, PH_CHUNK_DONE = 4 };

const char *sim_coll_name(int coll) {
  switch (coll) {
    case SIM_COLL_BROADCAST: return "Broadcast";
    case SIM_COLL_REDUCE: return "Reduce";
    case SIM_COLL_ALLGATHER: return "AllGather";
    case SIM_COLL_REDUCESCATTER: return "ReduceScatter";
    case SIM_COLL_ALLREDUCE: return "AllReduce";
    case SIM_COLL_SPLIT_EXCHANGE: return "CommSplit";
    default: return "Unknown";
  }
}

static int all_reached(const struct ncclComm *c, uint64_t s) {
  for (int k = 0; k < c->nranks; k++)
    if (atomic_load(&sim_seg_rank(c->seg, k)->seq) < s) return 0;
  return 1;
}

/* Posts the end of a phase. Only the rank whose post completes the phase rings the bell; with
 * sequentially consistent stores and loads, of two ranks posting at once at least one sees the
 * other's post, so a completed phase is always announced. */
static void post(struct ncclComm *c, sim_task_t *t) {
  c->seq++;
  atomic_store(&sim_seg_rank(c->seg, c->rank)->seq, c->seq);
  if (all_reached(c, c->seq)) sim_seg_ring(c->seg);
  t->wait_seq = c->seq;
  t->waiting = 1;
}

static void plan_chunks(sim_task_t *t) {
  size_t es = sim_dtype_size(t->dtype), slot = t->comm->seg->slot_bytes;
  int n = t->comm->nranks;
  size_t per = t->coll == SIM_COLL_REDUCESCATTER ? slot / ((size_t)n * es) : slot / es;
  if (per == 0) per = 1;
  t->elems_per_chunk = per;
  t->nchunks = (t->count + per - 1) / per;
}

static void describe(const sim_desc_t *d, char *buf, size_t len) {
  snprintf(buf, len, "%s count=%llu %s %s root=%d config=(%s/%s, nchannels %d, chunk %llu)",
           sim_coll_name(d->coll), (unsigned long long)d->count, sim_dtype_name(d->dtype),
           sim_redop_name(d->op), d->root, sim_model_algo_name(d->algo),
           sim_model_proto_name(d->proto), d->nchannels, (unsigned long long)d->chunk);
}

/* Compares every rank's description with rank 0's. Returns ncclSuccess or ncclInvalidUsage with
 * a text naming the communicator, the call index and each rank's call. */
static ncclResult_t validate(const struct ncclComm *c, const sim_task_t *t) {
  const sim_desc_t *d0 = &sim_seg_rank(c->seg, 0)->desc;
  int bad = -1, config_only = 1;
  for (int k = 1; k < c->nranks && bad < 0; k++) {
    const sim_desc_t *d = &sim_seg_rank(c->seg, k)->desc;
    if (d->coll != d0->coll || d->count != d0->count || d->dtype != d0->dtype || d->op != d0->op ||
        d->root != d0->root || d->call != d0->call) {
      bad = k;
      config_only = 0;
    } else if (d->algo != d0->algo || d->proto != d0->proto || d->nchannels != d0->nchannels ||
               d->chunk != d0->chunk) {
      bad = k;
    }
  }
  if (bad < 0) return ncclSuccess;
  char text[1800];
  int off = snprintf(text, sizeof text,
                     "ncclsim: ranks disagree on %s of communicator %016llx, "
                     "call #%llu (real NCCL would hang here):",
                     config_only ? "the configuration" : "the collective",
                     (unsigned long long)c->hash, (unsigned long long)t->desc.call);
  for (int k = 0; k < c->nranks && off < (int)sizeof text - 200; k++) {
    char one[200];
    describe(&sim_seg_rank(c->seg, k)->desc, one, sizeof one);
    off += snprintf(text + off, sizeof text - (size_t)off, " rank %d: %s;", k, one);
  }
  if (sim_fault_mismatch_hangs()) { /* NCCLSIM_MISMATCH=hang: as real NCCL, every rank stays */
    sim_log_warn("%s; rank %d blocks here (NCCLSIM_MISMATCH=hang)", text, c->rank);
    sim_fault_mismatch_block();
  }
  return sim_error(ncclInvalidUsage, "%s", text);
}

static void chunk_bounds(const sim_task_t *t, size_t *off_p, size_t *len_p) {
  size_t off = t->chunk * t->elems_per_chunk;
  size_t len = t->count - off < t->elems_per_chunk ? t->count - off : t->elems_per_chunk;
  *off_p = off;
  *len_p = len;
}

/* The bytes of this chunk in my slot (what crosses the network in the inter-node step). */
static size_t deposited_bytes(const sim_task_t *t) {
  size_t es = sim_dtype_size(t->dtype), off, len;
  chunk_bounds(t, &off, &len);
  if (t->coll == SIM_COLL_REDUCESCATTER) return (size_t)t->comm->nranks * t->elems_per_chunk * es;
  return len * es;
}

static void do_deposit(sim_task_t *t) {
  struct ncclComm *c = t->comm;
  size_t es = sim_dtype_size(t->dtype), off, len;
  chunk_bounds(t, &off, &len);
  char *mine = sim_seg_slot(c->seg, c->rank);
  const char *in = t->sendbuf;
  switch (t->coll) {
    case SIM_COLL_BROADCAST:
      if (c->rank == t->root) memcpy(mine, in + off * es, len * es);
      break;
    case SIM_COLL_REDUCESCATTER:
      for (int d = 0; d < c->nranks; d++)
        memcpy(mine + (size_t)d * t->elems_per_chunk * es, in + ((size_t)d * t->count + off) * es,
               len * es);
      break;
    default: /* AllReduce, Reduce, AllGather and the split exchange deposit their chunk */
      memcpy(mine, in + off * es, len * es);
      break;
  }
}

/* Reduces elements [s0, s1) of the chunk across every rank's slot into `acc`. */
static void reduce_range(const sim_task_t *t, size_t base, size_t s0, size_t s1, char *acc) {
  const struct ncclComm *c = t->comm;
  size_t es = sim_dtype_size(t->dtype);
  if (s1 <= s0) return;
  for (int k = 0; k < c->nranks; k++) {
    const char *src = (const char *)sim_seg_slot(c->seg, k) + (base + s0) * es;
    if (t->op == SIM_OP_PREMULSUM) { /* rank k's input times rank k's own scalar */
      sim_reduce_premul(acc, src, s1 - s0, t->dtype, &sim_seg_rank(c->seg, k)->desc.scalar, k == 0);
      continue;
    }
    if (k == 0) sim_reduce_first(acc, src, s1 - s0, t->dtype, t->op, c->nranks);
    else sim_reduce_accum(acc, src, s1 - s0, t->dtype, t->op, c->nranks);
  }
  if (t->op != SIM_OP_PREMULSUM) sim_reduce_finish(acc, s1 - s0, t->dtype, t->op, c->nranks);
}

/* Returns 1 when the collective has a reduce phase. */
static int has_reduce(int coll) {
  return coll == SIM_COLL_ALLREDUCE || coll == SIM_COLL_REDUCE || coll == SIM_COLL_REDUCESCATTER;
}

static void do_reduce(sim_task_t *t) {
  struct ncclComm *c = t->comm;
  size_t es = sim_dtype_size(t->dtype), off, len;
  chunk_bounds(t, &off, &len);
  int n = c->nranks, me = c->rank;
  if (t->coll == SIM_COLL_REDUCESCATTER) {
    reduce_range(t, (size_t)me * t->elems_per_chunk, 0, len, (char *)t->recvbuf + off * es);
    return;
  }
  size_t s0 = len * (size_t)me / (size_t)n, s1 = len * (size_t)(me + 1) / (size_t)n;
  if (s1 <= s0) return;
  /* Into the private output (AllReduce) or scratch (Reduce on a non-root), then published in my
   * slot for the gather. My slot's segment `me` is read by nobody else during this phase. */
  char *acc = t->coll == SIM_COLL_ALLREDUCE ? (char *)t->recvbuf + (off + s0) * es : t->scratch;
  reduce_range(t, 0, s0, s1, acc);
  memcpy((char *)sim_seg_slot(c->seg, me) + s0 * es, acc, (s1 - s0) * es);
}

static void do_gather(sim_task_t *t) {
  struct ncclComm *c = t->comm;
  size_t es = sim_dtype_size(t->dtype), off, len;
  chunk_bounds(t, &off, &len);
  int n = c->nranks, me = c->rank;
  char *out = t->recvbuf;
  switch (t->coll) {
    case SIM_COLL_BROADCAST:
      if (me != t->root) memcpy(out + off * es, sim_seg_slot(c->seg, t->root), len * es);
      else if (out != (const char *)t->sendbuf)
        memmove(out + off * es, (const char *)t->sendbuf + off * es, len * es);
      break;
    case SIM_COLL_ALLGATHER:
    case SIM_COLL_SPLIT_EXCHANGE:
      for (int k = 0; k < n; k++) {
        char *dst = out + ((size_t)k * t->count + off) * es;
        const char *src = sim_seg_slot(c->seg, k);
        if (k == me && dst == (const char *)t->sendbuf + off * es) continue; /* in place */
        memcpy(dst, src, len * es);
      }
      break;
    default: /* AllReduce everywhere, Reduce at the root: every rank's reduced segment */
      if (t->coll == SIM_COLL_REDUCE && me != t->root) break;
      for (int k = 0; k < n; k++) {
        size_t s0 = len * (size_t)k / (size_t)n, s1 = len * (size_t)(k + 1) / (size_t)n;
        if (k == me && t->coll == SIM_COLL_ALLREDUCE) continue; /* already in my output */
        memcpy(out + (off + s0) * es, (const char *)sim_seg_slot(c->seg, k) + s0 * es,
               (s1 - s0) * es);
      }
      break;
  }
}

static void begin(sim_task_t *t) {
  struct ncclComm *c = t->comm;
  t->started = 1;
  if (!t->selected) { /* no model at group launch (created in the same group): one-task bucket */
    t->desc.algo = t->desc.proto = t->desc.nchannels = t->desc.nthreads = -1;
    t->desc.chunk = 0;
    if (t->coll != SIM_COLL_SPLIT_EXCHANGE && c->has_model)
      t->result = sim_select_configs(c, &t, 1);
    t->selected = 1;
  }
  if (t->scalar_ptr) { /* ncclScalarDevice: dereferenced while the collective runs */
    t->desc.scalar = 0;
    memcpy(&t->desc.scalar, t->scalar_ptr, sim_dtype_size(t->dtype));
  }
  plan_chunks(t);
  t->desc.start_vt = t->stream ? sim_stream_time(t->stream) : 0;
  if (t->coll == SIM_COLL_REDUCE) t->scratch = malloc(t->comm->seg->slot_bytes);
  sim_seg_rank(c->seg, c->rank)->desc = t->desc;
}

/* Completes the virtual-time bookkeeping once every rank's description is known. */
static void time_call(sim_task_t *t) {
  struct ncclComm *c = t->comm;
  double start = 0;
  for (int k = 0; k < c->nranks; k++) {
    double s = sim_seg_rank(c->seg, k)->desc.start_vt;
    if (s > start) start = s;
  }
  double phi = c->phi;
  if (t->stream && t->stream->compute_phi > phi) phi = t->stream->compute_phi;
  double us = t->coll == SIM_COLL_SPLIT_EXCHANGE ? 0 : sim_coll_time_us(c, &t->desc, phi);
  t->end_vt = start + us;
  sim_trace_task(t, us);
}

int sim_coll_progress(sim_task_t *t) {
  struct ncclComm *c = t->comm;
  int moved = 0;
  if (!t->started) {
    begin(t);
    if (t->result != ncclSuccess) return SIM_PROGRESS_DONE; /* the tuner failed the call */
    if (t->coll == SIM_COLL_REDUCE && !t->scratch) {
      t->result = sim_error(ncclSystemError, "ncclsim: out of memory for a Reduce scratch buffer");
      return SIM_PROGRESS_DONE; /* before any post: peers see a stuck rank, as with a real OOM */
    }
    t->phase = PH_DEPOSIT;
  }
  for (;;) {
    if (t->waiting) {
      if (!all_reached(c, t->wait_seq)) return moved ? SIM_PROGRESS_MOVED : SIM_PROGRESS_STALLED;
      t->waiting = 0;
      moved = 1;
      if (t->phase == PH_FAILED) return SIM_PROGRESS_DONE;
      if (t->chunk == 0 && t->phase == PH_REDUCE) { /* descriptions are all posted now */
        t->result = validate(c, t);
        if (t->result !=
            ncclSuccess) { /* every rank fails here; one more phase keeps them in step */
          t->phase = PH_FAILED;
          post(c, t);
          continue;
        }
        time_call(t);
      }
    }
    if (t->net_todo && (t->phase == PH_REDUCE || t->phase == PH_GATHER)) {
      /* every rank deposited: the chunk crosses the node boundaries */
      double vt = t->desc.start_vt;
      if (t->end_vt > vt && t->nchunks)
        vt += (t->end_vt - vt) * (double)(t->chunk + 1) / (double)t->nchunks;
      int r = sim_net_step(c, deposited_bytes(t), vt, &t->result);
      if (r != SIM_PROGRESS_DONE) return moved ? SIM_PROGRESS_MOVED : SIM_PROGRESS_STALLED;
      t->net_todo = 0;
      if (t->result != ncclSuccess) return SIM_PROGRESS_DONE; /* the peers see their QPs fail */
      moved = 1;
    }
    switch (t->phase) {
      case PH_DEPOSIT:
        do_deposit(t);
        t->net_todo = c->net != NULL;
        t->phase = has_reduce(t->coll) ? PH_REDUCE : PH_GATHER;
        if (t->chunk == 0 && !has_reduce(t->coll)) t->phase = PH_REDUCE; /* validate first */
        post(c, t);
        break;
      case PH_REDUCE:
        if (has_reduce(t->coll)) {
          do_reduce(t);
          if (t->coll == SIM_COLL_REDUCESCATTER) {
            t->phase = PH_CHUNK_DONE; /* chunk done after this post */
            post(c, t);
            break;
          }
          t->phase = PH_GATHER;
          post(c, t);
          break;
        }
        /* no reduce phase: fall into the gather of chunk 0 */
        /* fallthrough */
      case PH_GATHER:
        do_gather(t);
        t->phase = PH_CHUNK_DONE;
        post(c, t);
        break;
      default: /* PH_CHUNK_DONE: the chunk is finished on every rank */
        if (++t->chunk < t->nchunks) {
          t->phase = PH_DEPOSIT;
          break;
        }
        if (t->stream) sim_stream_set_time(t->stream, t->end_vt);
        return SIM_PROGRESS_DONE;
    }
  }
}
