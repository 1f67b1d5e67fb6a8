/* Helpers shared by the coordinator tests (see coord_test_util.h). */
#include "coord_test_util.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

void rec_init(rec_t *r) {
  memset(r, 0, sizeof *r);
  pthread_mutex_init(&r->mu, NULL);
}

int rec_count(rec_t *r) {
  pthread_mutex_lock(&r->mu);
  int n = r->n;
  pthread_mutex_unlock(&r->mu);
  return n;
}

void rec_deliver(void *arg, const ah_key_t *key, const ah_segment_t *seg) {
  rec_t *r = arg;
  pthread_mutex_lock(&r->mu);
  if (r->n < REC_MAX) {
    r->keys[r->n] = *key;
    r->segs[r->n] = *seg;
    r->n++;
  }
  pthread_mutex_unlock(&r->mu);
}

void sleep_ms(int ms) {
  struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* 1 when thread tid sleeps (state S) in epoll_wait or epoll_pwait. */
static int thread_in_epoll(const char *tid) {
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/self/task/%s/stat", tid);
  FILE *f = fopen(path, "r");
  if (!f) return 1; /* the thread exited */
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  const char *paren = strrchr(buf, ')'); /* the name may hold spaces */
  if (!paren || paren[1] != ' ' || paren[2] != 'S') return 0;
  snprintf(path, sizeof path, "/proc/self/task/%s/syscall", tid);
  f = fopen(path, "r");
  if (!f) return 1;
  long nr = -1;
  int got = fscanf(f, "%ld", &nr);
  fclose(f);
  if (got != 1) return 0; /* "running" */
#ifdef SYS_epoll_wait
  if (nr == SYS_epoll_wait) return 1;
#endif
  return nr == SYS_epoll_pwait;
}

int threads_idle_wait(int ms) {
  char self[32];
  snprintf(self, sizeof self, "%ld", (long)syscall(SYS_gettid));
  for (int t = 0;; t += 2) {
    int idle = 1;
    DIR *d = opendir("/proc/self/task");
    if (!d) return 0;
    for (struct dirent *e; idle && (e = readdir(d));)
      if (e->d_name[0] != '.' && strcmp(e->d_name, self) != 0) idle = thread_in_epoll(e->d_name);
    closedir(d);
    if (idle) return 1;
    if (t >= ms) return 0;
    sleep_ms(2);
  }
}

pid_t fork_reporting(int *rd_p, int *wr_p) {
  int p[2];
  if (pipe(p) != 0) return -1;
  pid_t pid = threads_idle_wait(5000) ? fork() : -1;
  if (pid != 0) close(p[1]);
  if (pid == 0) close(p[0]);
  if (pid < 0) close(p[0]);
  *rd_p = p[0], *wr_p = p[1];
  return pid;
}

int rec_wait(rec_t *r, int n, int ms) {
  for (int t = 0; t < ms; t += 5) {
    if (rec_count(r) >= n) return 1;
    sleep_ms(5);
  }
  return rec_count(r) >= n;
}

ah_segment_t seg_make(uint64_t i) {
  ah_segment_t s;
  memset(&s, 0, sizeof s);
  s.first = 10 * i;
  s.count = 10;
  s.config.algo = (int8_t)(i % 2);
  s.config.proto = (int8_t)(i % 3);
  s.config.ndims = 2;
  s.config.res[0] = (int64_t)(i % 32 + 1);
  s.config.res[1] = 1 << 19;
  s.source = AH_SOURCE_TUNED;
  return s;
}

ah_key_t key_make(uint64_t comm) {
  ah_key_t k = {.comm = comm, .coll = AH_FUNC_ALLREDUCE, .bin = 20};
  return k;
}

static int saved_stderr = -1;
static FILE *log_file;
static char log_buf[1 << 20];

void log_start(void) {
  fflush(stderr);
  log_file = tmpfile();
  saved_stderr = dup(2);
  dup2(fileno(log_file), 2);
}

const char *log_text(void) {
  size_t n = 0;
  if (log_file) {
    fflush(log_file);
    rewind(log_file);
    n = fread(log_buf, 1, sizeof log_buf - 1, log_file);
    fseek(log_file, 0, SEEK_END);
  }
  log_buf[n] = 0;
  return log_buf;
}

void log_stop(void) {
  if (saved_stderr >= 0) {
    dup2(saved_stderr, 2);
    close(saved_stderr);
    saved_stderr = -1;
    /* echo what was captured, so a failing test's log is visible in the CTest output */
    fputs(log_text(), stderr);
  }
  if (log_file) fclose(log_file);
  log_file = NULL;
}

int log_wait(const char *needle, int ms) {
  for (int t = 0; t < ms; t += 10) {
    if (strstr(log_text(), needle)) return 1;
    sleep_ms(10);
  }
  return strstr(log_text(), needle) != NULL;
}

ah_coord_hub_t *hub_start_test(ah_coord_stamp_t *st_p) {
  uint8_t secret[16];
  for (int i = 0; i < 16; i++) secret[i] = (uint8_t)(0xa0 + i);
  ah_coord_hub_opts_t o;
  ah_coord_hub_opts_default(&o);
  o.auth_ms = 1500;
  o.frame_ms = 1000;
  o.join_ms = 1000;
  o.hang_ms = 1000;
  return ah_coord_hub_open("127.0.0.1:0", secret, &o, st_p);
}

void client_opts_test(ah_coord_client_opts_t *o_p) {
  ah_coord_client_opts_default(o_p);
  o_p->connect_ms = 5000;
  o_p->heartbeat_ms = 200;
  o_p->dead_ms = 2000;
  o_p->reconnect_ms = 3000;
}

int clients_join_complete(const ah_coord_stamp_t *st, ah_coord_t **cs, int nprocs,
                          const int *proc_of, int nranks, uint64_t comm) {
  ah_coord_client_opts_t co;
  client_opts_test(&co);
  for (int p = 0; p < nprocs; p++)
    if (!(cs[p] = ah_coord_client_open(st, NULL, &co, NULL, NULL))) return -1;
  for (int r = 0; r < nranks; r++)
    if (ah_coord_join_rank(cs[proc_of[r]], comm, (uint32_t)nranks, (uint32_t)r, NULL) != 0)
      return -1;
  for (int t = 0; t < 100 && ah_coord_verdict(cs[0], comm) != AH_COORD_VERDICT_COMPLETE; t++)
    sleep_ms(20);
  return ah_coord_verdict(cs[0], comm) == AH_COORD_VERDICT_COMPLETE ? 0 : -1;
}

int legit_roundtrip(const ah_coord_stamp_t *st, uint64_t comm) {
  static rec_t ra, rb;
  rec_init(&ra);
  rec_init(&rb);
  ah_coord_client_opts_t o;
  client_opts_test(&o);
  ah_coord_t *a = ah_coord_client_open(st, NULL, &o, rec_deliver, &ra);
  ah_coord_t *b = ah_coord_client_open(st, NULL, &o, rec_deliver, &rb);
  int ok = a && b;
  if (ok)
    ok = ah_coord_join_rank(a, comm, 2, 0, NULL) == 0 &&
         ah_coord_join_rank(b, comm, 2, 1, NULL) == 0;
  ah_key_t k = key_make(comm);
  for (uint64_t i = 0; ok && i < 3; i++) {
    ah_segment_t s = seg_make(i);
    ok = ah_coord_publish(a, &k, &s) == 0;
  }
  if (ok) ok = rec_wait(&rb, 3, 5000) && rec_count(&rb) == 3;
  for (int i = 0; ok && i < 3; i++) {
    ah_segment_t s = seg_make((uint64_t)i);
    ok = rb.segs[i].first == s.first && ah_config_equal(&rb.segs[i].config, &s.config);
  }
  ah_coord_client_close(a);
  ah_coord_client_close(b);
  return ok;
}

int raw_connect(const ah_coord_stamp_t *st) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  struct sockaddr_in in;
  memset(&in, 0, sizeof in);
  in.sin_family = AF_INET;
  in.sin_port = htons(st->port);
  memcpy(&in.sin_addr, st->addr, 4);
  if (connect(fd, (struct sockaddr *)&in, sizeof in) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

int raw_authed_connect(const ah_coord_stamp_t *st, uint64_t client_id) {
  char err[AH_NET_ERR_LEN];
  int fd = raw_connect(st);
  if (fd < 0) return -1;
  uint64_t dl = ah_coord_now_ns() + 2000000000ull;
  uint8_t hello[AH_COORD_HDR_BYTES + 32], auth[AH_COORD_HDR_BYTES + 72],
      wel[AH_COORD_HDR_BYTES + 40];
  ah_coord_hdr_encode(AH_MSG_AUTH, 72, auth);
  uint8_t *p = auth + AH_COORD_HDR_BYTES;
  memset(p, 0x5a, 32);
  ah_coord_put_u64(p + 32, client_id);
  if (ah_coord_net_nonblock_set(err, fd) != AH_NET_OK ||
      ah_coord_net_read_full(err, fd, hello, sizeof hello, dl) != AH_NET_OK ||
      ah_coord_mac(st->secret, "autoha-client", hello + AH_COORD_HDR_BYTES, p, client_id, p + 40) !=
          0 ||
      ah_coord_net_write_full(err, fd, auth, sizeof auth, dl) != AH_NET_OK ||
      ah_coord_net_read_full(err, fd, wel, sizeof wel, dl) != AH_NET_OK) {
    close(fd);
    return -1;
  }
  return fd;
}

int raw_ping(int fd) {
  char err[AH_NET_ERR_LEN];
  uint8_t f[AH_COORD_HDR_BYTES + AH_COORD_MAX_PAYLOAD];
  uint64_t dl = ah_coord_now_ns() + 2000000000ull;
  ah_coord_hdr_encode(AH_MSG_PING, 0, f);
  if (ah_coord_net_write_full(err, fd, f, AH_COORD_HDR_BYTES, dl) != AH_NET_OK) return 0;
  for (;;) { /* skip what was queued before the PONG */
    ah_coord_hdr_t h;
    if (ah_coord_net_read_full(err, fd, f, AH_COORD_HDR_BYTES, dl) != AH_NET_OK ||
        ah_coord_hdr_decode(f, &h, err, sizeof err) != 0 ||
        (h.len && ah_coord_net_read_full(err, fd, f + AH_COORD_HDR_BYTES, h.len, dl) != AH_NET_OK))
      return 0;
    if (h.type == AH_MSG_PONG) return 1;
  }
}

long proc_status_kb(int pid, const char *field) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/status", pid);
  FILE *f = fopen(path, "r");
  long kb = -1;
  size_t n = strlen(field);
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, field, n) && line[n] == ':') kb = atol(line + n + 1);
  if (f) fclose(f);
  return kb;
}

void *drain_fd(void *arg) {
  int fd = *(int *)arg;
  char b[65536];
  while (read(fd, b, sizeof b) > 0) {}
  return NULL;
}

enum { PUT_BYTES = AH_COORD_HDR_BYTES + 34 };
static uint8_t put_buf[2048 * PUT_BYTES];
static pthread_once_t put_once = PTHREAD_ONCE_INIT;

static void put_fill(void) {
  memset(put_buf, 0x7b, sizeof put_buf); /* the key's bytes */
  for (size_t i = 0; i < sizeof put_buf; i += PUT_BYTES) {
    ah_coord_hdr_encode(AH_MSG_DIR_PUT, 34, put_buf + i);
    put_buf[i + AH_COORD_HDR_BYTES + 32] = put_buf[i + AH_COORD_HDR_BYTES + 33] =
        0; /* vlen, big-endian */
  }
}

static void *put_flood_main(void *arg) {
  put_flood_t *f = arg;
  uint64_t end = ah_coord_now_ns() + 12000000000ull; /* under the test cases' timeouts */
  while (!atomic_load(&f->stop)) {
    if (ah_coord_now_ns() > end) {
      atomic_store(&f->capped, 1);
      break;
    }
    if (write(f->fd, put_buf, sizeof put_buf) != (ssize_t)sizeof put_buf)
      break; /* the other end dropped it */
    atomic_fetch_add(&f->batches, 1);
  }
  return NULL;
}

int put_flood_start(put_flood_t *f) {
  pthread_once(&put_once, put_fill);
  fcntl(f->fd, F_SETFL, fcntl(f->fd, F_GETFL) & ~O_NONBLOCK);
  if (pthread_create(&f->t, NULL, put_flood_main, f) != 0) return -1;
  for (int i = 0; i < 10000 && atomic_load(&f->batches) < 8; i++) sleep_ms(1);
  return atomic_load(&f->batches) >= 8 ? 0 : -1;
}

void put_flood_stop(put_flood_t *f) {
  atomic_store(&f->stop, 1);
  pthread_join(f->t, NULL);
}

size_t flood_joins(uint8_t *buf, uint64_t comm0, int batch) {
  for (int i = 0; i < FLOOD_FRAMES; i++) {
    uint8_t *f = buf + (size_t)i * FLOOD_JOIN_BYTES;
    memset(f, 0, FLOOD_JOIN_BYTES); /* since 0, settings digest 0 */
    ah_coord_hdr_encode(AH_MSG_JOIN, 48, f);
    ah_coord_put_u64(f + AH_COORD_HDR_BYTES, comm0 + (uint64_t)batch * FLOOD_FRAMES + (uint64_t)i);
    ah_coord_put_u32(f + AH_COORD_HDR_BYTES + 8, AH_COORD_MAX_RANKS);
  }
  return (size_t)FLOOD_FRAMES * FLOOD_JOIN_BYTES;
}

size_t flood_publishes(uint8_t *buf, uint64_t comm0, int batch) {
  for (int i = 0; i < FLOOD_FRAMES; i++) {
    uint64_t n = (uint64_t)batch * FLOOD_FRAMES + (uint64_t)i;
    uint8_t *f = buf + (size_t)i * FLOOD_PUB_BYTES;
    ah_coord_hdr_encode(AH_MSG_PUBLISH, 8 + AH_COORD_KEYSEG_BYTES, f);
    ah_coord_put_u64(f + AH_COORD_HDR_BYTES, n + 1);
    ah_key_t k = key_make(comm0 + n % FLOOD_FRAMES);
    ah_segment_t sg = seg_make(n);
    ah_coord_keyseg_pack(&k, &sg, f + AH_COORD_HDR_BYTES + 8);
  }
  return (size_t)FLOOD_FRAMES * FLOOD_PUB_BYTES;
}
