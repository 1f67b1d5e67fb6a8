/* vb_ring.c: a QP's inbound ring in shared memory, and an engine's doorbell.
 *
 * A ring has one producer (the engine of the connected peer QP's process) and one consumer (the
 * engine of the QP's own process), so head and tail each have a single writer. Packets are 64-byte
 * aligned records that never wrap: when the end of the data area is too short, the producer fills
 * it with a PAD record. The doorbell is a futex word in its own small segment, one per engine; a
 * producer bumps it after a put so a sleeping engine wakes (shared futex, never a busy wait). */
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "vb_internal.h"

/* Every name this process created, unlinked at exit if still there (a program that never destroys
 * its QPs or closes its devices leaves nothing in /dev/shm). */
typedef struct owned {
  char name[128];
  struct owned *next;
} owned_t;
static owned_t *owned_names;
static pthread_mutex_t owned_lock = PTHREAD_MUTEX_INITIALIZER;

static void own(const char *name) {
  owned_t *o = malloc(sizeof *o);
  if (!o) return;
  snprintf(o->name, sizeof o->name, "%s", name);
  pthread_mutex_lock(&owned_lock);
  o->next = owned_names;
  owned_names = o;
  pthread_mutex_unlock(&owned_lock);
}

static void disown_unlink(const char *name) {
  pthread_mutex_lock(&owned_lock);
  for (owned_t **p = &owned_names; *p; p = &(*p)->next)
    if (!strcmp((*p)->name, name)) {
      owned_t *o = *p;
      *p = o->next;
      free(o);
      break;
    }
  pthread_mutex_unlock(&owned_lock);
  shm_unlink(name);
}

__attribute__((destructor)) static void unlink_owned(void) {
  pthread_mutex_lock(&owned_lock);
  for (owned_t *o = owned_names; o; o = o->next) shm_unlink(o->name);
  pthread_mutex_unlock(&owned_lock);
}

#define REC(len) (((uint64_t)sizeof(vb_pkt_t) + (len) + 63) & ~(uint64_t)63)

void vb_ring_name(char *buf, size_t len, int node, int nic, uint32_t qpn) {
  snprintf(buf, len, "/%sverbs-n%d-mlx5_%d-qp%06x", vb_settings()->prefix, node, nic, qpn);
}

static int map_ring(vb_ring_t *r, int fd, size_t len) {
  void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return -1;
  r->h = p;
  r->data = (uint8_t *)p + VB_RING_HDR;
  r->map_len = len;
  return 0;
}

/* Creates the ring of QP `qpn`; fails with EEXIST when another QP of the device holds the number
 * (this is how QP numbers stay unique across the processes of a job). */
int vb_ring_create(vb_ring_t *r, int node, int nic, uint32_t qpn, const char *bell_name) {
  vb_ring_name(r->name, sizeof r->name, node, nic, qpn);
  int fd = shm_open(r->name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) return -1;
  size_t len = VB_RING_HDR + vb_settings()->ring_bytes;
  if (ftruncate(fd, (off_t)len) != 0 || map_ring(r, fd, len) != 0) {
    int e = errno;
    close(fd);
    shm_unlink(r->name);
    errno = e == EEXIST ? ENOMEM : e;
    return -1;
  }
  close(fd);
  own(r->name);
  r->h->owner_pid = (int32_t)getpid();
  r->h->qpn = qpn;
  r->h->size = vb_settings()->ring_bytes;
  snprintf(r->h->doorbell, sizeof r->h->doorbell, "%s", bell_name);
  atomic_store(&r->h->owner_state, IBV_QPS_RESET);
  atomic_store_explicit((_Atomic uint32_t *)&r->h->magic, VB_RING_MAGIC, memory_order_release);
  return 0;
}

int vb_ring_open(vb_ring_t *r, int node, int nic, uint32_t qpn) {
  vb_ring_name(r->name, sizeof r->name, node, nic, qpn);
  int fd = shm_open(r->name, O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) return -1;
  struct stat st;
  int rc = -1;
  if (fstat(fd, &st) == 0 && (size_t)st.st_size > VB_RING_HDR &&
      map_ring(r, fd, (size_t)st.st_size) == 0) {
    if (atomic_load_explicit((_Atomic uint32_t *)&r->h->magic, memory_order_acquire) ==
            VB_RING_MAGIC &&
        r->h->size + VB_RING_HDR <= (uint64_t)st.st_size) {
      rc = 0;
    } else {
      munmap(r->h, r->map_len);
      r->h = NULL;
    }
  }
  close(fd);
  return rc;
}

void vb_ring_close(vb_ring_t *r, int unlink_it) {
  if (!r->h) return;
  if (unlink_it) {
    atomic_store(&r->h->owner_state, VB_RING_GONE);
    disown_unlink(r->name);
  }
  munmap(r->h, r->map_len);
  r->h = NULL;
}

int vb_ring_can_put(vb_ring_t *r, uint32_t len) {
  uint64_t head = atomic_load_explicit(&r->h->head, memory_order_relaxed);
  uint64_t tail = atomic_load_explicit(&r->h->tail, memory_order_acquire);
  uint64_t need = REC(len), size = r->h->size, off = head % size;
  if (off + need > size) need += size - off; /* the PAD before it */
  if (need > size || size - (head - tail) < need) {
    atomic_store(&r->h->prod_waiting, 1);
    /* re-check: the consumer may have freed room before it saw the flag */
    tail = atomic_load_explicit(&r->h->tail, memory_order_acquire);
    return need <= size && size - (head - tail) >= need;
  }
  return 1;
}

/* Writes a packet whose payload is `len1` bytes of `payload` followed by p->len - len1 bytes of
 * `payload2` (two pieces: a segment that straddles two SGEs). The caller checked vb_ring_can_put. */
void vb_ring_put(vb_ring_t *r, const vb_pkt_t *p, const void *payload, const void *payload2,
                 uint32_t len1) {
  uint64_t head = atomic_load_explicit(&r->h->head, memory_order_relaxed);
  uint64_t size = r->h->size, off = head % size, need = REC(p->len);
  if (off + need > size) {
    vb_pkt_t *pad = (vb_pkt_t *)(r->data + off);
    memset(pad, 0, sizeof *pad);
    pad->type = VB_PKT_PAD;
    pad->total = size - off;
    head += size - off;
    off = 0;
  }
  vb_pkt_t *dst = (vb_pkt_t *)(r->data + off);
  *dst = *p;
  if (len1 > p->len) len1 = p->len;
  if (len1) memcpy(dst + 1, payload, len1);
  if (p->len > len1) memcpy((uint8_t *)(dst + 1) + len1, payload2, p->len - len1);
  atomic_store_explicit(&r->h->head, head + need, memory_order_release);
}

vb_pkt_t *vb_ring_peek(vb_ring_t *r) {
  for (;;) {
    uint64_t tail = atomic_load_explicit(&r->h->tail, memory_order_relaxed);
    uint64_t head = atomic_load_explicit(&r->h->head, memory_order_acquire);
    if (tail == head) return NULL;
    vb_pkt_t *p = (vb_pkt_t *)(r->data + tail % r->h->size);
    if (p->type != VB_PKT_PAD) return p;
    atomic_store_explicit(&r->h->tail, tail + p->total, memory_order_release);
  }
}

void vb_ring_pop(vb_ring_t *r) {
  uint64_t tail = atomic_load_explicit(&r->h->tail, memory_order_relaxed);
  vb_pkt_t *p = (vb_pkt_t *)(r->data + tail % r->h->size);
  atomic_store_explicit(&r->h->tail, tail + REC(p->len), memory_order_release);
}

/* ---- doorbells ---------------------------------------------------------------------------- */

static vb_bell_t *bell_map(const char *name, int flags) {
  int fd = shm_open(name, flags | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) return NULL;
  if ((flags & O_CREAT) && ftruncate(fd, 4096) != 0) {
    close(fd);
    shm_unlink(name);
    return NULL;
  }
  void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    if (flags & O_CREAT) shm_unlink(name);
    return NULL;
  }
  if (flags & O_CREAT) own(name);
  return p;
}

vb_bell_t *vb_bell_create(const char *name) { return bell_map(name, O_CREAT | O_EXCL); }
vb_bell_t *vb_bell_open(const char *name) { return bell_map(name, 0); }

void vb_bell_close(vb_bell_t *b, const char *name_to_unlink) {
  if (name_to_unlink) disown_unlink(name_to_unlink);
  if (b) munmap(b, 4096);
}

void vb_bell_ring(vb_bell_t *b) {
  atomic_fetch_add_explicit(&b->seq, 1, memory_order_seq_cst);
  if (atomic_load_explicit(&b->waiters, memory_order_seq_cst))
    syscall(SYS_futex, &b->seq, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* Sleeps until the bell's sequence moves past `seen` or the timeout passes. */
void vb_bell_wait(vb_bell_t *b, uint32_t seen, double timeout_s) {
  if (timeout_s <= 0) return;
  struct timespec ts = {(time_t)timeout_s, (long)((timeout_s - (double)(time_t)timeout_s) * 1e9)};
  atomic_fetch_add(&b->waiters, 1);
  if (atomic_load(&b->seq) == seen) syscall(SYS_futex, &b->seq, FUTEX_WAIT, seen, &ts, NULL, 0);
  atomic_fetch_sub(&b->waiters, 1);
}
