/* Point-to-point: ncclSend/ncclRecv through a single-slot mailbox per ordered pair of ranks. The
 * k-th send from A to B matches the k-th receive by B from A, as in NCCL; both sides must agree on
 * the size, and a receive of a different size fails with a text naming both sizes. A send finishes
 * once its last chunk is in the mailbox, so a rank may send before its peer has posted the
 * matching receive, as NCCL's buffered protocols allow for messages that fit. */
#include <string.h>

#include "sim_nccl.h"
#include "sim_reduce.h"

int sim_p2p_progress(sim_task_t *t) {
  struct ncclComm *c = t->comm;
  size_t total = t->count * sim_dtype_size(t->dtype);
  int send = t->kind == SIM_TASK_SEND;
  sim_p2p_ctl_t *ctl =
      send ? sim_seg_p2p_ctl(c->seg, c->rank, t->peer) : sim_seg_p2p_ctl(c->seg, t->peer, c->rank);
  void *buf =
      send ? sim_seg_p2p_buf(c->seg, c->rank, t->peer) : sim_seg_p2p_buf(c->seg, t->peer, c->rank);
  int moved = 0;
  if (!t->started) {
    t->started = 1;
    t->desc.start_vt = t->stream ? sim_stream_time(t->stream) : 0;
  }
  while (t->done_bytes < total) {
    uint64_t posted = atomic_load(&ctl->posted), consumed = atomic_load(&ctl->consumed);
    if (send) {
      if (posted != consumed) break; /* the receiver has not drained the slot yet */
      size_t len = total - t->done_bytes;
      if (len > c->seg->p2p_bytes) len = c->seg->p2p_bytes;
      memcpy(buf, (const char *)t->sendbuf + t->done_bytes, len);
      ctl->msg_bytes = total;
      ctl->chunk_bytes = len;
      if (t->done_bytes == 0) ctl->start_vt = t->desc.start_vt;
      t->done_bytes += len;
      atomic_store(&ctl->posted, posted + 1);
    } else {
      if (posted == consumed) break; /* nothing from the sender yet */
      if (ctl->msg_bytes != total) {
        t->result = sim_error(ncclInvalidUsage,
                              "ncclsim: rank %d receives %zu bytes from rank %d, which sends %llu "
                              "bytes (communicator %016llx)",
                              c->rank, total, t->peer, (unsigned long long)ctl->msg_bytes,
                              (unsigned long long)c->hash);
        return SIM_PROGRESS_DONE;
      }
      if (t->done_bytes == 0 && ctl->start_vt > t->desc.start_vt) t->desc.start_vt = ctl->start_vt;
      memcpy((char *)t->recvbuf + t->done_bytes, buf, ctl->chunk_bytes);
      t->done_bytes += ctl->chunk_bytes;
      atomic_store(&ctl->consumed, consumed + 1);
    }
    sim_seg_ring(c->seg);
    moved = 1;
  }
  if (t->done_bytes < total) return moved ? SIM_PROGRESS_MOVED : SIM_PROGRESS_STALLED;
  if (t->stream)
    sim_stream_set_time(t->stream, t->desc.start_vt + sim_p2p_time_us(c, t->peer, total));
  return SIM_PROGRESS_DONE;
}
