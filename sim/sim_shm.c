/* The shared segment a communicator's ranks meet in: creation and joining, the futex bell, and the
 * liveness check. The first rank to arrive creates the segment (O_EXCL decides who); the last rank
 * to join unlinks its name, so a finished or crashed job leaves nothing in /dev/shm once everyone
 * has joined (ncclsim-run also removes names with its prefix at exit, for jobs that died earlier). */
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "sim_nccl.h"

#define ALIGN_UP(x, a) (((x) + (a)-1) & ~((uint64_t)(a)-1))

static void layout(sim_seg_t *h, int nranks) {
  /* Staging: enough to move large messages in few rounds, bounded so that 64 ranks still map a
   * reasonable (sparse) segment. Pages are only backed once touched. */
  uint64_t slot = 4u << 20;
  if (nranks > 16) slot = (64u << 20) / (uint64_t)nranks;
  uint64_t p2p = (16u << 20) / ((uint64_t)nranks * (uint64_t)nranks);
  if (p2p < (64u << 10)) p2p = 64u << 10;
  if (p2p > (1u << 20)) p2p = 1u << 20;
  h->slot_bytes = slot;
  h->p2p_bytes = p2p;
  h->off_ranks = ALIGN_UP(sizeof(sim_seg_t), 4096);
  h->off_slots = ALIGN_UP(h->off_ranks + (uint64_t)nranks * sizeof(sim_rank_slot_t), 4096);
  h->off_p2p_ctl = ALIGN_UP(h->off_slots + (uint64_t)nranks * slot, 4096);
  h->off_p2p_buf =
      ALIGN_UP(h->off_p2p_ctl + (uint64_t)nranks * nranks * sizeof(sim_p2p_ctl_t), 4096);
  h->off_flows = ALIGN_UP(h->off_p2p_buf + (uint64_t)nranks * nranks * p2p, 4096);
  h->total_bytes = h->off_flows + (uint64_t)nranks * sizeof(sim_flow_row_t);
}

sim_rank_slot_t *sim_seg_rank(const sim_seg_t *seg, int rank) {
  return (sim_rank_slot_t *)((char *)seg + seg->off_ranks) + rank;
}
void *sim_seg_slot(const sim_seg_t *seg, int rank) {
  return (char *)seg + seg->off_slots + (uint64_t)rank * seg->slot_bytes;
}
sim_p2p_ctl_t *sim_seg_p2p_ctl(const sim_seg_t *seg, int src, int dst) {
  return (sim_p2p_ctl_t *)((char *)seg + seg->off_p2p_ctl) + (uint64_t)src * seg->nranks + dst;
}
sim_flow_row_t *sim_seg_flows(const sim_seg_t *seg, int rank) {
  return (sim_flow_row_t *)((char *)seg + seg->off_flows) + rank;
}
void *sim_seg_p2p_buf(const sim_seg_t *seg, int src, int dst) {
  return (char *)seg + seg->off_p2p_buf + ((uint64_t)src * seg->nranks + dst) * seg->p2p_bytes;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

void sim_seg_ring(sim_seg_t *seg) {
  atomic_fetch_add(&seg->bell, 1);
  syscall(SYS_futex, &seg->bell, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
}

void sim_seg_wait(sim_seg_t *seg, uint32_t seen, int timeout_ms) {
  struct timespec ts = {timeout_ms / 1000, (long)(timeout_ms % 1000) * 1000000L};
  int saved = errno;
  syscall(SYS_futex, &seg->bell, FUTEX_WAIT, seen, &ts, NULL, 0);
  errno = saved;
}

/* Opens or creates the named segment and returns its mapping. */
static ncclResult_t seg_map(const char *name, int nranks, sim_seg_t **seg_p, size_t *bytes_p) {
  double deadline = now_s() + sim_timeout_s();
  for (;;) {
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd >= 0) { /* we create it */
      sim_seg_t h;
      memset(&h, 0, sizeof h);
      layout(&h, nranks);
      if (ftruncate(fd, (off_t)h.total_bytes) != 0) {
        int e = errno;
        close(fd);
        shm_unlink(name);
        return sim_error(ncclSystemError, "ncclsim: ftruncate(%s, %llu) failed: %s", name,
                         (unsigned long long)h.total_bytes, strerror(e));
      }
      void *p = mmap(NULL, h.total_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      close(fd);
      if (p == MAP_FAILED) {
        shm_unlink(name);
        return sim_error(ncclSystemError, "ncclsim: mmap of %s failed: %s", name, strerror(errno));
      }
      sim_seg_t *seg = p;
      memcpy(seg, &h, sizeof h);
      seg->magic = SIM_SEG_MAGIC;
      seg->nranks = nranks;
      atomic_store(&seg->ready, 1);
      *seg_p = seg;
      *bytes_p = h.total_bytes;
      return ncclSuccess;
    }
    if (errno != EEXIST)
      return sim_error(ncclSystemError, "ncclsim: shm_open(%s) failed: %s", name, strerror(errno));
    fd = shm_open(name, O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) {
      if (errno == ENOENT) continue; /* unlinked between our two opens: try to create again */
      return sim_error(ncclSystemError, "ncclsim: shm_open(%s) failed: %s", name, strerror(errno));
    }
    struct stat st;
    while (fstat(fd, &st) == 0 && st.st_size == 0 && now_s() < deadline) usleep(500);
    if (st.st_size == 0) {
      close(fd);
      return sim_error(ncclSystemError, "ncclsim: segment %s was never initialised", name);
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED)
      return sim_error(ncclSystemError, "ncclsim: mmap of %s failed: %s", name, strerror(errno));
    sim_seg_t *seg = p;
    while (!atomic_load(&seg->ready) && now_s() < deadline) usleep(200);
    if (!atomic_load(&seg->ready) || seg->magic != SIM_SEG_MAGIC) {
      munmap(p, (size_t)st.st_size);
      return sim_error(ncclSystemError, "ncclsim: segment %s is not a communicator segment", name);
    }
    if (seg->nranks != nranks) {
      int theirs = seg->nranks;
      munmap(p, (size_t)st.st_size);
      return sim_error(ncclInvalidUsage,
                       "ncclsim: ranks disagree on the communicator size: this rank says %d, "
                       "another said %d",
                       nranks, theirs);
    }
    *seg_p = seg;
    *bytes_p = (size_t)st.st_size;
    return ncclSuccess;
  }
}

ncclResult_t sim_seg_join(struct ncclComm *comm, const char *name) {
  ncclResult_t res = seg_map(name, comm->nranks, &comm->seg, &comm->seg_bytes);
  if (res != ncclSuccess) return res;
  snprintf(comm->shm_name, sizeof comm->shm_name, "%s", name);
  sim_rank_slot_t *me = sim_seg_rank(comm->seg, comm->rank);
  int32_t expected = SIM_RANK_EMPTY;
  me->pid = (int32_t)getpid();
  me->node = comm->node;
  me->device = comm->device;
  if (!atomic_compare_exchange_strong(&me->state, &expected, SIM_RANK_JOINED)) {
    munmap(comm->seg, comm->seg_bytes);
    comm->seg = NULL;
    return sim_error(ncclInvalidUsage, "ncclsim: rank %d joined the communicator twice",
                     comm->rank);
  }
  if (atomic_fetch_add(&comm->seg->joined, 1) + 1 == comm->nranks) shm_unlink(name);
  sim_seg_ring(comm->seg);
  return ncclSuccess;
}

int sim_seg_all_joined(struct ncclComm *comm) {
  return atomic_load(&comm->seg->joined) >= comm->nranks;
}

void sim_seg_leave(struct ncclComm *comm, int state) {
  if (!comm->seg) return;
  atomic_store(&sim_seg_rank(comm->seg, comm->rank)->state, state);
  sim_seg_ring(comm->seg);
  munmap(comm->seg, comm->seg_bytes);
  comm->seg = NULL;
}

/* Whether a process is gone: no such pid, or a zombie its parent has not reaped yet (a launcher
 * that waits for its children in order leaves a killed rank in that state). */
static int process_gone(pid_t pid) {
  if (kill(pid, 0) != 0) return errno == ESRCH;
  char path[64], buf[256];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "re");
  if (!f) return 0;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  const char *paren = strrchr(buf, ')'); /* the command name may itself hold spaces or ')' */
  return paren && paren[1] == ' ' && (paren[2] == 'Z' || paren[2] == 'X');
}

ncclResult_t sim_seg_check_peers(struct ncclComm *comm, int only_rank) {
  pid_t self = getpid();
  for (int r = 0; r < comm->nranks; r++) {
    if (only_rank >= 0 && r != only_rank) continue;
    sim_rank_slot_t *s = sim_seg_rank(comm->seg, r);
    int st = atomic_load(&s->state);
    if (st == SIM_RANK_ABORTED)
      return sim_error(ncclRemoteError, "ncclsim: rank %d of communicator %016llx aborted", r,
                       (unsigned long long)comm->hash);
    if (st == SIM_RANK_DESTROYED)
      return sim_error(
          ncclInvalidUsage,
          "ncclsim: rank %d destroyed communicator %016llx while rank %d still uses it", r,
          (unsigned long long)comm->hash, comm->rank);
    if (st == SIM_RANK_JOINED && s->pid != self && process_gone(s->pid))
      return sim_error(ncclRemoteError,
                       "ncclsim: rank %d (pid %d) of communicator %016llx exited; its peers cannot "
                       "complete the call",
                       r, (int)s->pid, (unsigned long long)comm->hash);
  }
  return ncclSuccess;
}
