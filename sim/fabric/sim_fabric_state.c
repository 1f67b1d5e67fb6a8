/* sim_fabric_state.c: the link state that changes while a job runs, and the job's clock. Each
 * link's capacity fraction set by sim_fabric_set_link lives in a POSIX shared memory object every
 * process of the job maps (or in private memory until one is attached), one lock-free atomic per
 * link, so a fault injected in one process is seen by the next read in every other.
 *
 * The key choice: the first process to create the object records CLOCK_MONOTONIC as the job's
 * epoch, so wall times in fault schedules mean the same instant in every process. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "sim_fabric_internal.h"

#define SHM_MAGIC 0x46414231u /* "FAB1" */
#define ATTACH_WAIT_MS 2000   /* how long a late process waits for the creator to initialise */

_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2, "shared link state needs lock-free 64-bit atomics");

double sim_fabric_load_fraction(const _Atomic uint64_t *slot) {
  uint64_t bits = atomic_load_explicit((_Atomic uint64_t *)slot, memory_order_acquire);
  double v;
  memcpy(&v, &bits, sizeof v);
  return v;
}

void sim_fabric_store_fraction(_Atomic uint64_t *slot, double v) {
  uint64_t bits;
  memcpy(&bits, &v, sizeof bits);
  atomic_store_explicit(slot, bits, memory_order_release);
}

int64_t sim_fabric_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

double sim_fabric_wall_s(const sim_fabric_t *f) {
  return (double)(sim_fabric_now_ns() - f->epoch_ns) * 1e-9;
}

static void sleep_ms(int ms) {
  struct timespec ts = {0, (long)ms * 1000000L};
  while (nanosleep(&ts, &ts) && errno == EINTR) {}
}

/* shm_open wants "/name"; the caller may give either form. */
static void shm_path(const char *name, char *buf, size_t len) {
  snprintf(buf, len, "%s%s", name[0] == '/' ? "" : "/", name);
}

void sim_fabric_detach(sim_fabric_t *f) {
  if (!f->shm) return;
  munmap(f->shm, f->shm_len);
  f->shm = NULL;
  f->fraction = f->private_fraction;
}

/* Maps an object another process created, once it is big enough and initialised. Returns the
 * mapping or NULL with err. */
static sim_fabric_shm_t *map_existing(const char *path, size_t len, char *err, size_t errlen) {
  int fd = shm_open(path, O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) {
    snprintf(err, errlen, "shm_open('%s'): %s", path, strerror(errno));
    return NULL;
  }
  struct stat st;
  int waited = 0;
  while (fstat(fd, &st) == 0 && st.st_size == 0 &&
         waited < ATTACH_WAIT_MS) { /* the creator's ftruncate */
    sleep_ms(1);
    waited++;
  }
  if ((size_t)st.st_size != len) {
    snprintf(err, errlen,
             "shared fabric state '%s' has %lld bytes, this fabric needs %zu (a different fabric?)",
             path, (long long)st.st_size, len);
    close(fd);
    return NULL;
  }
  sim_fabric_shm_t *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (m == MAP_FAILED) {
    snprintf(err, errlen, "mmap of '%s': %s", path, strerror(errno));
    return NULL;
  }
  while (atomic_load_explicit(&m->magic, memory_order_acquire) != SHM_MAGIC &&
         waited < ATTACH_WAIT_MS) {
    sleep_ms(1);
    waited++;
  }
  if (atomic_load_explicit(&m->magic, memory_order_acquire) != SHM_MAGIC) {
    snprintf(err, errlen, "shared fabric state '%s' was never initialised", path);
    munmap(m, len);
    return NULL;
  }
  return m;
}

int sim_fabric_attach(sim_fabric_t *f, const char *shm_name, char *err, size_t errlen) {
  char path[256];
  if (!shm_name || !*shm_name || strchr(shm_name + 1, '/')) {
    snprintf(err, errlen, "invalid shared state name '%s' (one name, no '/' inside)",
             shm_name ? shm_name : "");
    return -1;
  }
  shm_path(shm_name, path, sizeof path);
  size_t len = sizeof(sim_fabric_shm_t) + (size_t)f->nlinks * sizeof(uint64_t);
  sim_fabric_shm_t *m;
  int fd = shm_open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd >= 0) {
    if (ftruncate(fd, (off_t)len)) {
      snprintf(err, errlen, "ftruncate of '%s': %s", path, strerror(errno));
      close(fd);
      shm_unlink(path);
      return -1;
    }
    m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
      snprintf(err, errlen, "mmap of '%s': %s", path, strerror(errno));
      shm_unlink(path);
      return -1;
    }
    m->nlinks = (uint32_t)f->nlinks;
    m->epoch_ns = sim_fabric_now_ns();
    for (int l = 0; l < f->nlinks; l++)
      sim_fabric_store_fraction(&m->fraction[l], sim_fabric_load_fraction(&f->fraction[l]));
    atomic_store_explicit(&m->magic, SHM_MAGIC, memory_order_release);
  } else if (errno == EEXIST) {
    if (!(m = map_existing(path, len, err, errlen))) return -1;
    if (m->nlinks != (uint32_t)f->nlinks) {
      snprintf(err, errlen, "shared fabric state '%s' has %u links, this fabric %d", path,
               m->nlinks, f->nlinks);
      munmap(m, len);
      return -1;
    }
  } else {
    snprintf(err, errlen, "shm_open('%s'): %s", path, strerror(errno));
    return -1;
  }
  sim_fabric_detach(f);
  f->shm = m;
  f->shm_len = len;
  f->fraction = m->fraction;
  f->epoch_ns = m->epoch_ns;
  return 0;
}

int sim_fabric_unlink(const char *shm_name) {
  char path[256];
  if (!shm_name || !*shm_name) return -1;
  shm_path(shm_name, path, sizeof path);
  return shm_unlink(path);
}

int sim_fabric_set_link(sim_fabric_t *f, int link, double fraction) {
  if (link < 0 || link >= f->nlinks || !(fraction >= 0 && fraction <= 1)) return -1;
  sim_fabric_store_fraction(&f->fraction[link], fraction);
  return 0;
}

double sim_fabric_link_fraction(const sim_fabric_t *f, int link, double wall_s, double virt_us) {
  if (link < 0 || link >= f->nlinks || f->failed[link]) return 0;
  double now = sim_fabric_load_fraction(&f->fraction[link]);
  double sched = sim_fabric_scheduled_fraction(f, link, wall_s, virt_us);
  return now < sched ? now : sched;
}
