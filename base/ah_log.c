/* Log lines in NCCL's shape ("host:pid:tid [rank] autoha LEVEL subsys: ..."), each one write(2) to
 * the current descriptor, and the info lines also through NCCL's logger once NCCL has handed the
 * tuner one. The
 * threshold comes from AUTOHA_LOG, read once; the rest of the settings (subsystems, timestamps,
 * file) are set by the env table when it has parsed them, so a bad value is reported once.
 *
 * Lines written while the log file cannot be named yet (AUTOHA_LOG_FILE names the rank) are held
 * in a fixed buffer and written out when the descriptor is set, so a file has every line. */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "ah_log.h"

static _Atomic int log_level = -1;
static _Atomic unsigned log_subsys = AH_LOG_SUBSYS_ALL;
static _Atomic int log_time;
static _Atomic(ah_log_nccl_fn) log_nccl;
static _Thread_local int log_rank = -1;

static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER; /* fd changes and the held lines */
static int out_fd = 2;
static char held[16384];
static size_t held_len;
static int held_lost; /* lines that did not fit: written to stderr instead */

static const char *level_names[] = {"ERROR", "WARN", "INFO", "DEBUG"};
static const char *sub_names[AH_SUB_COUNT] = {"init", "env",    "tune",  "coord",
                                              "qp",   "report", "health"};

/* NCCL's levels and its TUNING subsystem flag (nccl.h: NCCL_LOG_WARN 2, NCCL_LOG_INFO 3,
 * NCCL_TUNING 0x40). */
#define NCCL_LEVEL_INFO 3
#define NCCL_FLAG_TUNING 0x40UL

static int parse_level(const char *s) {
  for (int i = 0; i < 4; i++)
    if (strcasecmp(s, level_names[i]) == 0) return i;
  return -1;
}

int ah_log_level(void) {
  int l = atomic_load_explicit(&log_level, memory_order_relaxed);
  if (l >= 0) return l;
  /* Before the environment table has set the threshold: AUTOHA_LOG's level when it names one,
   * else warn. A bad value is the table's to report (ah_env.c), once, in its words. */
  const char *s = getenv("AUTOHA_LOG");
  int parsed = s && *s ? parse_level(s) : AH_LOG_WARN;
  int expected = -1;
  atomic_compare_exchange_strong(&log_level, &expected, parsed < 0 ? AH_LOG_WARN : parsed);
  return atomic_load(&log_level);
}

void ah_log_set_level(int level) {
  if (level >= AH_LOG_ERROR && level <= AH_LOG_DEBUG) atomic_store(&log_level, level);
}

void ah_log_set_subsys(unsigned mask) { atomic_store(&log_subsys, mask & AH_LOG_SUBSYS_ALL); }
void ah_log_set_time(int on) { atomic_store(&log_time, on != 0); }
void ah_log_set_rank(int rank) { log_rank = rank; }

static _Thread_local int log_rank_nranks;
void ah_log_set_rank_of(int rank, int nranks) {
  if (rank < 0 || nranks < log_rank_nranks) return;
  log_rank = rank;
  log_rank_nranks = nranks;
}

size_t ah_log_held(void) {
  pthread_mutex_lock(&out_lock);
  size_t n = held_len;
  pthread_mutex_unlock(&out_lock);
  return n;
}

void ah_log_set_nccl(ah_log_nccl_fn fn) {
  ah_log_nccl_fn none = NULL;
  if (fn) atomic_compare_exchange_strong(&log_nccl, &none, fn);
}

int ah_log_nccl_set(void) { return atomic_load_explicit(&log_nccl, memory_order_relaxed) != NULL; }

static void write_all(int fd, const char *p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    p += w;
    n -= (size_t)w;
  }
}

int ah_log_set_fd(int fd) {
  pthread_mutex_lock(&out_lock);
  int prev = out_fd;
  out_fd = fd;
  if (fd >= 0 && held_len) {
    write_all(fd, held, held_len);
    held_len = 0;
  }
  pthread_mutex_unlock(&out_lock);
  return prev;
}

static void emit(const char *line, size_t len) {
  pthread_mutex_lock(&out_lock);
  if (out_fd == AH_LOG_FD_HOLD && held_len + len <= sizeof held) {
    memcpy(held + held_len, line, len);
    held_len += len;
  } else if (out_fd == AH_LOG_FD_HOLD) {
    held_lost++;
    (void)!write(STDERR_FILENO, line, len);
  } else {
    (void)!write(out_fd, line, len);
  }
  pthread_mutex_unlock(&out_lock);
}

/* The host name, looked up once: a name change mid-job would only confuse the reader. */
static char host_buf[64];
static pthread_once_t host_once = PTHREAD_ONCE_INIT;
static void host_fill(void) {
  if (gethostname(host_buf, sizeof host_buf) != 0) strcpy(host_buf, "?");
  host_buf[sizeof host_buf - 1] = 0;
}

/* ---- the process's ranks, for lines of threads without one ------------------------------------ */

/* A process holds a few ranks (one per GPU); past this many the text says how many. */
#define AH_LOG_PROC_RANKS 64
#define AH_LOG_PROC_TEXT 32
static pthread_mutex_t proc_lock = PTHREAD_MUTEX_INITIALIZER;
static int proc_ranks[AH_LOG_PROC_RANKS], proc_n, proc_over, proc_nranks;
static char proc_text[AH_LOG_PROC_TEXT] = "-"; /* proc_ranks formatted (under proc_lock) */

static int int_cmp(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

char *ah_log_ranks_format(const int *ranks, int n, char *buf, size_t len) {
  if (len == 0) return buf;
  snprintf(buf, len, "-");
  if (n <= 0) return buf;
  int sorted[AH_LOG_PROC_RANKS];
  int m = n < AH_LOG_PROC_RANKS ? n : AH_LOG_PROC_RANKS;
  memcpy(sorted, ranks, (size_t)m * sizeof *sorted);
  qsort(sorted, (size_t)m, sizeof *sorted, int_cmp);
  int distinct = 0;
  for (int i = 0; i < m; i++) distinct += i == 0 || sorted[i] != sorted[i - 1];
  size_t o = 0;
  for (int i = 0; i < m;) {
    int j = i;
    while (j + 1 < m && sorted[j + 1] <= sorted[j] + 1) j++; /* a run, duplicates included */
    int w = sorted[j] == sorted[i]
                ? snprintf(buf + o, len - o, "%s%d", o ? "," : "", sorted[i])
                : snprintf(buf + o, len - o, "%s%d-%d", o ? "," : "", sorted[i], sorted[j]);
    if (w < 0 || (size_t)w >= len - o) {
      o = len; /* does not fit */
      break;
    }
    o += (size_t)w;
    i = j + 1;
  }
  if (o >= len || n > m) snprintf(buf, len, "%d ranks", n > m ? n : distinct);
  return buf;
}

void ah_log_set_proc_rank(int rank, int nranks) {
  if (rank < 0) return;
  pthread_mutex_lock(&proc_lock);
  if (nranks > proc_nranks) { /* the process's larger communicator: its ranks replace a split's */
    proc_nranks = nranks;
    proc_n = proc_over = 0;
  }
  int known = nranks < proc_nranks;
  for (int i = 0; i < proc_n && !known; i++) known = proc_ranks[i] == rank;
  if (!known && proc_n < AH_LOG_PROC_RANKS) proc_ranks[proc_n++] = rank;
  else if (!known) proc_over++;
  if (!known) {
    ah_log_ranks_format(proc_ranks, proc_n, proc_text, sizeof proc_text);
    if (proc_over) snprintf(proc_text, sizeof proc_text, "%d ranks", proc_n + proc_over);
  }
  pthread_mutex_unlock(&proc_lock);
}

/* Each local rank's device and its rank in the largest communicator the device has a rank in. */
#define DEV_MAX 64
static struct { int dev, rank, nranks; } dev_ranks[DEV_MAX];
static int dev_n;

void ah_log_set_dev_rank(int dev, int rank, int nranks) {
  if (dev < 0 || rank < 0) return;
  pthread_mutex_lock(&proc_lock);
  int i = 0;
  while (i < dev_n && dev_ranks[i].dev != dev) i++;
  if (i == dev_n && dev_n < DEV_MAX) dev_ranks[dev_n++].nranks = -1;
  if (i < dev_n && nranks >= dev_ranks[i].nranks) {
    dev_ranks[i].dev = dev;
    dev_ranks[i].rank = rank;
    dev_ranks[i].nranks = nranks;
  }
  pthread_mutex_unlock(&proc_lock);
}

/* Writes the rank of device dev into out; 0 when no rank of this process has said it runs there. */
static int dev_text(int dev, char out[AH_LOG_PROC_TEXT]) {
  int found = 0;
  if (dev < 0) return 0;
  pthread_mutex_lock(&proc_lock);
  for (int i = 0; i < dev_n && !found; i++)
    if (dev_ranks[i].dev == dev) {
      snprintf(out, AH_LOG_PROC_TEXT, "%d", dev_ranks[i].rank);
      found = 1;
    }
  pthread_mutex_unlock(&proc_lock);
  return found;
}

static void proc_text_copy(char out[AH_LOG_PROC_TEXT]) {
  pthread_mutex_lock(&proc_lock);
  memcpy(out, proc_text, AH_LOG_PROC_TEXT);
  pthread_mutex_unlock(&proc_lock);
}

/* proc: the line is the process's (its ranks in the prefix); dev >= 0: it concerns the rank of
 * that device, whichever thread writes it. */
__attribute__((format(printf, 5, 0))) static void log_v(int subsys, int level, int proc, int dev,
                                                        const char *fmt, va_list ap) {
  if ((unsigned)subsys >= AH_SUB_COUNT) subsys = AH_SUB_INIT;
  ah_log_nccl_fn nccl = atomic_load_explicit(&log_nccl, memory_order_acquire);
  int ours = level <= ah_log_level() &&
             (atomic_load_explicit(&log_subsys, memory_order_relaxed) >> subsys & 1u);
  /* NCCL's stream gets the info lines (NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING shows them);
   * warnings and errors autoha prints itself, and NCCL_DEBUG=WARN would show them twice */
  int theirs = nccl && level == AH_LOG_INFO;
  if (!ours && !theirs) return;
  int saved = errno;
  pthread_once(&host_once, host_fill);
  char rank[AH_LOG_PROC_TEXT] = "-", line[1280];
  if (dev_text(dev, rank))
    ; /* the rank of the device the line concerns */
  else if (log_rank >= 0 && !proc) snprintf(rank, sizeof rank, "%d", log_rank);
  else proc_text_copy(rank);
  int n = 0;
  if (atomic_load_explicit(&log_time, memory_order_relaxed)) {
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    localtime_r(&ts.tv_sec, &tm);
    n = (int)strftime(line, 32, "[%Y-%m-%d %H:%M:%S", &tm);
    n += snprintf(line + n, sizeof line - (size_t)n, ".%06ld] ", ts.tv_nsec / 1000);
  }
  int head = snprintf(line + n, sizeof line - (size_t)n, "%s:%d:%ld [%s] autoha %s %s: ", host_buf,
                      (int)getpid(), (long)syscall(SYS_gettid), rank, level_names[level],
                      sub_names[subsys]);
  if (head < 0) head = 0;
  n += head;
  size_t body = (size_t)n; /* where the message starts */
  int m = vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
  size_t len = m < 0 ? (size_t)n : (size_t)n + (size_t)m;
  if (len > sizeof line - 2) len = sizeof line - 2;
  line[len] = 0;
  /* A message quotes what it refuses (an environment value, a peer's text), which may hold control
   * bytes: each becomes '?', so a line stays one line and no escape sequence reaches a terminal. */
  for (size_t i = body; i < len; i++)
    if ((unsigned char)line[i] < 0x20 || line[i] == 0x7f) line[i] = '?';
  if (theirs) /* NCCL adds its own host:pid:tid [dev] prefix */
    nccl(NCCL_LEVEL_INFO, NCCL_FLAG_TUNING, "autoha", 0, "autoha [%s] %s: %s", rank,
         sub_names[subsys], line + body);
  if (ours) {
    line[len++] = '\n';
    emit(line, len);
  }
  errno = saved;
}

void ah_log_at(int subsys, int level, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  log_v(subsys, level, 0, -1, fmt, ap);
  va_end(ap);
}

void ah_log_proc_at(int subsys, int level, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  log_v(subsys, level, 1, -1, fmt, ap);
  va_end(ap);
}

void ah_log_dev_at(int subsys, int level, int dev, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  log_v(subsys, level, 0, dev, fmt, ap);
  va_end(ap);
}

const char *ah_log_subsys_name(int sub) {
  return sub >= 0 && sub < AH_SUB_COUNT ? sub_names[sub] : "?";
}

int ah_log_subsys_parse(const char *s, unsigned *mask_p, char *err, size_t errlen) {
  if (!s) s = "";
  int invert = *s == '^';
  if (invert) s++;
  unsigned mask = 0;
  const char *p = s;
  while (*p) {
    const char *e = strchr(p, ',');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    int found = 0;
    if (n == 3 && strncasecmp(p, "all", 3) == 0) {
      mask = AH_LOG_SUBSYS_ALL;
      found = 1;
    }
    for (int i = 0; i < AH_SUB_COUNT && !found; i++)
      if (strlen(sub_names[i]) == n && strncasecmp(p, sub_names[i], n) == 0) {
        mask |= 1u << i;
        found = 1;
      }
    if (!found) {
      if (err && errlen) snprintf(err, errlen, "unknown subsystem '%.*s'", (int)n, p);
      return -1;
    }
    if (!e) break;
    p = e + 1;
  }
  if (!*s) {
    if (err && errlen) snprintf(err, errlen, "no subsystem named");
    return -1;
  }
  *mask_p = invert ? AH_LOG_SUBSYS_ALL & ~mask : mask;
  return 0;
}

char *ah_log_subsys_format(unsigned mask, char *buf, size_t len) {
  mask &= AH_LOG_SUBSYS_ALL;
  if (len == 0) return buf;
  buf[0] = 0;
  if (mask == AH_LOG_SUBSYS_ALL) {
    snprintf(buf, len, "all");
    return buf;
  }
  size_t o = 0;
  for (int i = 0; i < AH_SUB_COUNT && o + 1 < len; i++)
    if (mask >> i & 1u) {
      int n = snprintf(buf + o, len - o, "%s%s", o ? "," : "", sub_names[i]);
      if (n < 0) break;
      o += (size_t)n;
    }
  if (o >= len) buf[len - 1] = 0;
  return buf;
}
