/* The job's network traffic across communicators: a directory, shared by every process of the job,
 * of each connected rank's flows and whether that rank has a collective in flight. A call's network
 * time counts, besides its own communicator's flows, the flows of other communicators' ranks that
 * are busy at that moment, so communicators sharing links share them as the fabric's scheduler
 * says (strict priority or weights by DSCP).
 *
 * The key choice: "busy" is wall time, read when a rank times its call — a rank of a communicator
 * whose peers time the same call a moment later may see other traffic, so with concurrent
 * communicators their ranks' clocks can differ slightly; with one communicator nothing changes.
 * The directory is named like the fabric's state (<NCCLSIM_SHM_PREFIX>traffic, per job under
 * ncclsim-run); a slot whose process is gone is ignored. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "sim_nccl_net.h"

#define SLOTS 256

typedef struct {
  _Atomic uint64_t owner; /* 0: free; else pid << 20 | a per-process count */
  uint64_t comm;          /* the communicator's hash */
  _Atomic int32_t busy;   /* collectives in flight on this rank */
  _Atomic int32_t count;
  sim_fabric_flow_t flows[SIM_NET_MAX_FLOWS];
} slot_t;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static slot_t *dir;

static void map_dir(void) {
  char name[160], prefix[80];
  snprintf(name, sizeof name, "/%straffic", sim_shm_job_prefix(prefix, sizeof prefix));
  int fd = shm_open(name, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  size_t len = sizeof(slot_t) * SLOTS;
  if (fd < 0) {
    sim_log_warn("ncclsim: cannot open %s (%s); communicators do not see each other's traffic",
                 name, strerror(errno));
    return;
  }
  /* every process sizes it alike; a zero-filled extension is a directory of free slots */
  if (ftruncate(fd, (off_t)len) == 0) {
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p != MAP_FAILED) dir = p;
  }
  close(fd);
  if (!dir)
    sim_log_warn("ncclsim: cannot map %s; communicators do not see each other's traffic", name);
}

static int alive(uint64_t owner) {
  pid_t pid = (pid_t)(owner >> 20);
  return pid == getpid() || kill(pid, 0) == 0 || errno == EPERM;
}

void sim_traffic_publish(struct ncclComm *c, const sim_fabric_flow_t *flows, int n) {
  static _Atomic uint64_t seq;
  pthread_once(&once, map_dir);
  if (dir && c->traffic_slot >= 0) { /* published before: the flows changed, the slot stays ours */
    int i = c->traffic_slot;
    if (n > SIM_NET_MAX_FLOWS) n = SIM_NET_MAX_FLOWS;
    atomic_store(&dir[i].count, 0);
    memcpy(dir[i].flows, flows, sizeof *flows * (size_t)(n > 0 ? n : 0));
    atomic_store(&dir[i].count, n > 0 ? n : 0);
    return;
  }
  c->traffic_slot = -1;
  if (!dir || n <= 0) return;
  uint64_t me = (uint64_t)getpid() << 20 | ((atomic_fetch_add(&seq, 1) + 1) & 0xfffff);
  for (int i = 0; i < SLOTS; i++) {
    uint64_t cur = atomic_load(&dir[i].owner);
    if (cur && alive(cur)) continue;
    if (!atomic_compare_exchange_strong(&dir[i].owner, &cur, me)) continue;
    dir[i].comm = c->hash;
    atomic_store(&dir[i].busy, 0);
    memcpy(dir[i].flows, flows, sizeof *flows * (size_t)n);
    atomic_store(&dir[i].count, n);
    c->traffic_slot = i;
    return;
  }
  sim_log_warn(
      "ncclsim: the job's traffic directory is full (%d ranks' communicators); this one's traffic is "
      "invisible to the others",
      SLOTS);
}

void sim_traffic_busy(struct ncclComm *c, int delta) {
  if (dir && c->net && c->traffic_slot >= 0) atomic_fetch_add(&dir[c->traffic_slot].busy, delta);
}

int sim_traffic_others(const struct ncclComm *c, sim_fabric_flow_t *out, int max) {
  int n = 0;
  if (!dir) return 0;
  for (int i = 0; i < SLOTS && n < max; i++) {
    uint64_t owner = atomic_load(&dir[i].owner);
    if (!owner || dir[i].comm == c->hash || atomic_load(&dir[i].busy) <= 0 || !alive(owner))
      continue;
    int k = atomic_load(&dir[i].count);
    if (k > max - n) k = max - n;
    memcpy(out + n, dir[i].flows, sizeof *out * (size_t)k);
    n += k;
  }
  return n;
}

void sim_traffic_release(struct ncclComm *c) {
  if (!dir || c->traffic_slot < 0) return;
  atomic_store(&dir[c->traffic_slot].count, 0);
  atomic_store(&dir[c->traffic_slot].busy, 0);
  atomic_store(&dir[c->traffic_slot].owner, 0);
  c->traffic_slot = -1;
}
