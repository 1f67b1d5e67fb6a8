/* Progress records for the hub's hang diagnosis (docs/diagnosis.md). A thread of the shim's own,
 * started when a first communicator joins the hub, wakes once a second and sends, for every local
 * rank of every hub-joined communicator: the calls the rank entered per key (the keys' call
 * indices, which the decision path counts anyway: nothing is added to it but one store of the
 * call's stream), and whether the rank's GPU stream has completed them.
 *
 * Completion is probed, not tracked per call: once a rank's calls have not advanced for a tick,
 * the thread records one event on the stream of the rank's latest call (in the context the rank's
 * keys were created in, with the thread's capture mode relaxed, never on a capturing stream) and
 * queries it on later ticks. The rank is idle when the probe covering every call it entered has
 * completed, busy otherwise. So a hang's state is known one to two ticks after its calls stop. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stddef.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ah_coord_health.h"
#include "rdma.h"
#include "shim_control.h"
#include "shim_real.h"
#include "shim_thread.h"

/* Sampled call durations waiting for the next tick (a ring: the oldest go when it is full). */
#define SAMPLES_RING (8 * AH_HEALTH_SAMPLES)

typedef struct ah_comm_health {
  pthread_mutex_t samples_lock; /* the timing harvest (any thread) vs the tick */
  ah_health_sample_t samples[SAMPLES_RING];
  int samples_head, nsamples;
  uint64_t seen[AH_NUM_COLLS][AH_BINS];    /* each key's count at the last tick */
  uint64_t changed[AH_NUM_COLLS][AH_BINS]; /* the tick it last changed */
  uint64_t last_total;                     /* calls entered at the last tick */
  uint64_t done_total;                     /* calls a completed probe covered */
  uint64_t probe_total;                    /* calls the pending probe covers */
  CUevent probe;
  CUcontext probe_ctx;
  int pending;
} comm_health_t;

static uint64_t tick;
/* Held for each tick. At exit the thread is stopped between ticks, before the CUDA runtime's own
 * exit handlers (registered before ours, so run after) tear the driver down under it. */
static pthread_mutex_t tick_lock = PTHREAD_MUTEX_INITIALIZER;
static int stopping;

static void health_stop(void) {
  pthread_mutex_lock(&tick_lock);
  stopping = 1;
  pthread_mutex_unlock(&tick_lock);
}

/* Records a probe covering every call on the stream of c's latest call: the one it was bracketed
 * on, or, while that was a group's first stream, c's own as its wrapper noted it (shim_nccl.c).
 * Returns 0, or -1 when none can be recorded (no driver, no context, a capturing stream, a stream
 * of another device than c's, which would say nothing of c's GPU). */
static int probe_record(ah_comm_t *c, comm_health_t *hs) {
  if (!ah_shim_cuda_init() || !ah_cuda.CtxSetCurrent || !c->cuctx) return -1;
  CUstream s = c->last_stream, own = __atomic_load_n(&c->own_stream, __ATOMIC_RELAXED);
  if (own && s == __atomic_load_n(&c->own_group, __ATOMIC_RELAXED)) s = own;
  CUcontext sctx;
  if (ah_cuda.StreamGetCtx && ah_cuda.StreamGetCtx(s, &sctx) == CUDA_SUCCESS && sctx != c->cuctx)
    return -1;
  if (ah_cuda.CtxSetCurrent(c->cuctx) != CUDA_SUCCESS) return -1;
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  if (ah_cuda.StreamIsCapturing(s, &st) != CUDA_SUCCESS || st != CU_STREAM_CAPTURE_STATUS_NONE)
    return -1;
  if (hs->probe && hs->probe_ctx != c->cuctx) {
    ah_cuda.EventDestroy(hs->probe);
    hs->probe = NULL;
  }
  if (!hs->probe && ah_cuda.EventCreate(&hs->probe, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
    hs->probe = NULL;
    return -1;
  }
  hs->probe_ctx = c->cuctx;
  return ah_cuda.EventRecord(hs->probe, s) == CUDA_SUCCESS ? 0 : -1;
}

/* The rank's state after this tick's probe work (AH_HEALTH_*). */
static int probe_state(ah_comm_t *c, comm_health_t *hs, uint64_t total) {
  int unknown = 0;
  if (hs->pending) {
    CUresult q = ah_cuda.EventQuery(hs->probe);
    if (q == CUDA_SUCCESS) {
      hs->done_total = hs->probe_total;
      hs->pending = 0;
    } else if (q != CUDA_ERROR_NOT_READY) {
      hs->pending = 0;
      unknown = 1;
    }
  }
  if (!hs->pending && total == hs->last_total && hs->done_total != total) { /* quiet: probe it */
    if (probe_record(c, hs) == 0) {
      hs->pending = 1;
      hs->probe_total = total;
    } else {
      unknown = 1;
    }
  }
  if (hs->done_total == total) return AH_HEALTH_IDLE;
  return unknown ? AH_HEALTH_UNKNOWN : AH_HEALTH_BUSY;
}

/* Fills rec with the keys that changed last (AH_HEALTH_KEYS at most) and returns the calls entered. */
static uint64_t keys_fill(ah_comm_t *c, comm_health_t *hs, ah_health_rec_t *rec) {
  uint64_t total = 0;
  rec->nkeys = 0;
  for (int coll = 0; coll < AH_NUM_COLLS; coll++)
    for (int bin = 0; bin < AH_BINS; bin++) {
      ah_shim_rankkey_t *ck = __atomic_load_n(&c->keys[coll][bin], __ATOMIC_ACQUIRE);
      if (!ck) continue;
      uint64_t n = __atomic_load_n(&ck->next, __ATOMIC_RELAXED);
      total += n;
      if (n != hs->seen[coll][bin]) hs->changed[coll][bin] = tick;
      hs->seen[coll][bin] = n;
      /* keep the AH_HEALTH_KEYS most recently changed: replace the stalest when full */
      int slot = rec->nkeys < AH_HEALTH_KEYS ? rec->nkeys++ : -1;
      if (slot < 0) {
        uint64_t oldest = hs->changed[coll][bin];
        for (int i = 0; i < AH_HEALTH_KEYS; i++) {
          uint64_t t = hs->changed[rec->keys[i].coll][rec->keys[i].bin];
          if (t < oldest) oldest = t, slot = i;
        }
        if (slot < 0) continue;
      }
      rec->keys[slot] = (ah_health_key_t){(uint8_t)coll, (uint8_t)bin, n};
    }
  return total;
}

/* Where the host thread of c's latest call is (AH_HEALTH_HOST_*): inside an NCCL call while its
 * timing bracket is open. Read with process_vm_readv, which fails cleanly (EFAULT) where a plain
 * load would fault: the thread may have exited and its block been unmapped since. */
static int host_where(const ah_comm_t *c) {
  const ah_thread_t *t =
      __atomic_load_n((const ah_thread_t *const *)&c->last_caller, __ATOMIC_RELAXED);
  if (!t) return AH_HEALTH_HOST_UNKNOWN;
  int depth = 0;
  struct iovec local = {&depth, sizeof depth};
  struct iovec remote = {(void *)((const char *)t + offsetof(ah_thread_t, timing_depth)),
                         sizeof depth};
  if (process_vm_readv(getpid(), &local, 1, &remote, 1, 0) != (ssize_t)sizeof depth)
    return AH_HEALTH_HOST_UNKNOWN;
  return depth > 0 ? AH_HEALTH_HOST_IN_NCCL : AH_HEALTH_HOST_OUTSIDE;
}

typedef struct {
  ah_shim_coord_hooks_t h;
  uint32_t pid;
} tick_arg_t;

/* c's health state, created by whichever thread needs it first. NULL when out of memory. */
static comm_health_t *health_of(ah_comm_t *c) {
  comm_health_t *hs = __atomic_load_n(&c->health, __ATOMIC_ACQUIRE);
  if (hs) return hs;
  comm_health_t *fresh = calloc(1, sizeof *fresh);
  if (!fresh) return NULL;
  pthread_mutex_init(&fresh->samples_lock, NULL);
  if (__atomic_compare_exchange_n(&c->health, &hs, fresh, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
    return fresh;
  pthread_mutex_destroy(&fresh->samples_lock); /* another thread's is in place: hs */
  free(fresh);
  return hs;
}

/* Threads inside ah_shim_health_sample: a released context's state is freed only when none is
 * (ah_shim_health_release says why that is enough). */
static _Atomic int samplers;

void ah_shim_health_sample(ah_comm_t *c, int coll, int bin, uint64_t index, double us) {
  if (!ah_env_settings()->health) return;
  atomic_fetch_add(&samplers, 1); /* before the look at `finalized`: see ah_shim_health_release */
  comm_health_t *hs = atomic_load(&c->finalized) ? NULL : health_of(c);
  if (hs) {
    pthread_mutex_lock(&hs->samples_lock);
    int at = (hs->samples_head + hs->nsamples) % SAMPLES_RING;
    if (hs->nsamples == SAMPLES_RING) hs->samples_head = (hs->samples_head + 1) % SAMPLES_RING;
    else hs->nsamples++;
    hs->samples[at] = (ah_health_sample_t){(uint8_t)coll, (uint8_t)bin, index, (float)us};
    pthread_mutex_unlock(&hs->samples_lock);
  }
  atomic_fetch_sub(&samplers, 1);
}

/* ---- a released context's state ---------------------------------------------------------------- */

static pthread_mutex_t reap_lock = PTHREAD_MUTEX_INITIALIZER;
static ah_comm_t *reap; /* released contexts whose state waits for a moment without samplers */

/* Frees c's health state, and its key table, which the tick reads too (keys_fill). */
static void health_free(ah_comm_t *c) {
  ah_comm_keys_release(c);
  comm_health_t *hs = __atomic_exchange_n(&c->health, NULL, __ATOMIC_ACQ_REL);
  if (!hs) return;
  if (hs->probe && ah_cuda.EventDestroy) ah_cuda.EventDestroy(hs->probe);
  pthread_mutex_destroy(&hs->samples_lock);
  free(hs);
}

/* Frees the waiting states when no sampler runs. Called with tick_lock held. */
static void reap_now(void) {
  pthread_mutex_lock(&reap_lock);
  if (atomic_load(&samplers) == 0) {
    for (ah_comm_t *c = reap, *next; c; c = next) {
      next = c->reap_next;
      c->reap_next = NULL;
      health_free(c);
    }
    reap = NULL;
  }
  pthread_mutex_unlock(&reap_lock);
}

/* Note that two things may hold c's state: the tick and a sampler. The tick is excluded by
 * tick_lock, and takes its walk's snapshot under it, after c was released: no later tick sees c.
 * A sampler increments `samplers` before it reads c->finalized, which was set (sequentially
 * consistent, as both are) before c was released: so when `samplers` reads 0 here, every sampler
 * that saw c live has left, and every later one sees it finalized and leaves the state alone. A
 * state that cannot go now (a tick or a sampler runs) goes at a later tick's end. */
void ah_shim_health_release(ah_comm_t *c) {
  if (!c) return;
  /* never joined the hub: no sampler or tick ever makes its state or reads its keys
   * (ah_shim_record_time and comm_tick test rec->hub, set before its first call) */
  if (!__atomic_load_n(&c->health, __ATOMIC_ACQUIRE) && (!c->rec || !c->rec->hub)) {
    ah_comm_keys_release(c);
    return;
  }
  if (pthread_mutex_trylock(&tick_lock) == 0) {
    int now = atomic_load(&samplers) == 0;
    if (now) health_free(c);
    pthread_mutex_unlock(&tick_lock);
    if (now) return;
  }
  pthread_mutex_lock(&reap_lock);
  c->reap_next = reap;
  reap = c;
  pthread_mutex_unlock(&reap_lock);
}

/* Sends the samples queued since the last tick, AH_HEALTH_SAMPLES per message. */
static void samples_send(const ah_shim_coord_hooks_t *h, ah_comm_t *c, comm_health_t *hs) {
  ah_health_sample_t x[SAMPLES_RING];
  pthread_mutex_lock(&hs->samples_lock);
  int n = hs->nsamples;
  for (int i = 0; i < n; i++) x[i] = hs->samples[(hs->samples_head + i) % SAMPLES_RING];
  hs->samples_head = hs->nsamples = 0;
  pthread_mutex_unlock(&hs->samples_lock);
  for (int i = 0; i < n && h->samples; i += AH_HEALTH_SAMPLES)
    h->samples(h->arg, c->id, (uint32_t)c->rank, x + i,
               n - i < AH_HEALTH_SAMPLES ? n - i : AH_HEALTH_SAMPLES);
}

static void comm_tick(void *arg, ah_comm_t *c) {
  const tick_arg_t *t = arg;
  if (c->rank < 0 || !c->rec || !c->rec->hub || c->abi == 0) return;
  /* A finalized rank still reports (idle, its calls as they were): records that stop would read
   * as a process that stopped responding. Its streams are not probed any more. */
  int finalized = atomic_load(&c->finalized);
  comm_health_t *hs = health_of(c);
  if (!hs) return;
  /* The hub diagnoses COMPLETE communicators only: until its verdict arrives the samples wait in
   * their ring (a key's first 16, the densest, are often taken before the last rank has joined) */
  if (t->h.verdict && t->h.verdict(t->h.arg, c->id) != AH_VERDICT_COMPLETE) return;
  ah_health_rec_t rec = {.rank = (uint32_t)c->rank, .pid = t->pid, .gpu = 0xffff};
  uint64_t total = keys_fill(c, hs, &rec);
  rec.state = finalized ? AH_HEALTH_IDLE : (uint8_t)probe_state(c, hs, total);
  rec.host = finalized ? AH_HEALTH_HOST_OUTSIDE : (uint8_t)host_where(c);
  hs->last_total = total;
  if (c->cuctx && ah_cuda.CtxSetCurrent && ah_cuda.CtxSetCurrent(c->cuctx) == CUDA_SUCCESS) {
    CUdevice dev;
    if (ah_cuda.CtxGetDevice(&dev) == CUDA_SUCCESS) rec.gpu = (uint16_t)dev;
  }
  t->h.progress(t->h.arg, c->id, &rec);
  samples_send(&t->h, c, hs);
}

static void *health_main(void *arg) {
  (void)arg;
  pthread_setname_np(pthread_self(), "autoha-health");
  tick_arg_t t = {.pid = (uint32_t)getpid()};
  for (;;) {
    struct timespec ts = {1, 0};
    nanosleep(&ts, NULL);
    pthread_mutex_lock(&tick_lock);
    if (stopping) {
      pthread_mutex_unlock(&tick_lock);
      break;
    }
    tick++;
    t.h = ah_shim_hooks();
    if (!t.h.progress) {
      pthread_mutex_unlock(&tick_lock);
      continue;
    }
    ah_shim_stream_notes_request(); /* for the next tick's probes: each rank's own stream */
    /* relaxed for good (this thread captures nothing): its queries never invalidate a capture */
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    if (ah_shim_cuda_init() && ah_cuda.ThreadExchangeStreamCaptureMode)
      (void)ah_cuda.ThreadExchangeStreamCaptureMode(&mode);
    ah_comm_foreach(comm_tick, &t);
    reap_now();          /* released contexts' states: none of this tick's walk holds them */
    ah_shim_link_tick(); /* per-connection timing (rdma/rdma_link_qp.c) */
    pthread_mutex_unlock(&tick_lock);
  }
  return NULL;
}

static void health_start_once(void) {
  if (ah_shim_thread_detached(health_main, "the health thread: hangs are not diagnosed") == 0)
    atexit(health_stop);
}

void ah_shim_health_start(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  if (ah_env_settings()->health) pthread_once(&once, health_start_once);
}

/* ---- the findings received, for the report ---------------------------------------------------- */

static pthread_mutex_t findings_lock = PTHREAD_MUTEX_INITIALIZER;
static ah_report_health_t findings[AH_REPORT_HEALTH_MAX];
static int nfindings, first_finding;
_Static_assert(AH_REPORT_HEALTH_KINDS == AH_FINDING_LAST, "the report counts every finding kind");
static uint64_t kind_counts[AH_REPORT_HEALTH_KINDS + 1]; /* since the start, for the metrics */

void ah_shim_health_note(uint64_t comm, int kind, const char *text) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  pthread_mutex_lock(&findings_lock);
  int slot = (first_finding + nfindings) % AH_REPORT_HEALTH_MAX;
  if (nfindings == AH_REPORT_HEALTH_MAX) first_finding = (first_finding + 1) % AH_REPORT_HEALTH_MAX;
  else nfindings++;
  ah_report_health_t *h = &findings[slot];
  h->comm = comm;
  h->kind = kind;
  snprintf(h->text, sizeof h->text, "%s", text);
  h->time_s = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
  if (kind >= 1 && kind <= AH_REPORT_HEALTH_KINDS) kind_counts[kind]++;
  pthread_mutex_unlock(&findings_lock);
}

void ah_shim_health_counts(uint64_t counts_p[AH_REPORT_HEALTH_KINDS + 1]) {
  pthread_mutex_lock(&findings_lock);
  memcpy(counts_p, kind_counts, sizeof kind_counts);
  pthread_mutex_unlock(&findings_lock);
}

int ah_shim_health_findings(ah_report_health_t *out, int max) {
  pthread_mutex_lock(&findings_lock);
  int n = nfindings < max ? nfindings : max;
  for (int i = 0; i < n; i++)
    out[i] = findings[(first_finding + nfindings - n + i) % AH_REPORT_HEALTH_MAX];
  pthread_mutex_unlock(&findings_lock);
  return n;
}

/* ---- AUTOHA_HEALTH_CMD ------------------------------------------------------------------------ */

/* Appends s to out as a JSON string body (the text is printable ASCII: only quotes and
 * backslashes need escaping). */
static size_t json_text(char *out, size_t len, const char *s) {
  size_t o = 0;
  for (; *s && o + 2 < len; s++) {
    if (*s == '"' || *s == '\\') out[o++] = '\\';
    out[o++] = *s;
  }
  out[o] = 0;
  return o;
}

/* The finding's parts as JSON members: "ranks" (the ranks at fault, with host, pid and GPU),
 * "ranks_total" and "call" (null when it is about no single call). Returns the length written. */
static int json_parts(char *out, size_t len, const ah_finding_t *f) {
  int o = snprintf(out, len, "\"ranks\": [");
  for (uint32_t i = 0; i < f->nranks && i < AH_FINDING_RANKS && o > 0 && (size_t)o < len; i++) {
    const ah_finding_rank_t *r = &f->ranks[i];
    char gpu[8] = "null", host[2 * AH_FINDING_HOST];
    if (r->gpu != 0xffff) snprintf(gpu, sizeof gpu, "%u", r->gpu);
    json_text(host, sizeof host, r->host);
    if (r->host[0])
      o += snprintf(out + o, len - (size_t)o,
                    "%s{\"rank\": %u, \"host\": \"%s\", \"pid\": %u, \"gpu\": %s}", i ? ", " : "",
                    r->rank, host, r->pid, gpu);
    else
      o += snprintf(out + o, len - (size_t)o,
                    "%s{\"rank\": %u, \"host\": null, \"pid\": null, \"gpu\": null}", i ? ", " : "",
                    r->rank);
  }
  if (o <= 0 || (size_t)o >= len) return -1;
  if (!f->has_call)
    return o +
           snprintf(out + o, len - (size_t)o, "], \"ranks_total\": %u, \"call\": null", f->nranks);
  char size[32];
  ah_size_format(ah_size_bin_floor(f->bin), size, sizeof size);
  return o + snprintf(out + o, len - (size_t)o,
                      "], \"ranks_total\": %u, \"call\": {\"collective\": \"%s\", "
                      "\"size_bin\": \"%s+\", \"index\": %llu}",
                      f->nranks, ah_coll_name(f->coll), size, (unsigned long long)f->index);
}

void ah_shim_health_event(uint64_t comm, const ah_finding_t *f) {
  const ah_settings_t *s = ah_env_settings();
  if (!s->health_cmd[0]) return;
  char host[256] = "?", esc[2 * AH_REPORT_TEXT_MAX], parts[1024], line[4096];
  gethostname(host, sizeof host - 1);
  json_text(esc, sizeof esc, f->text);
  if (json_parts(parts, sizeof parts, f) < 0) return;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  const char *kind = ah_report_health_kind(f->kind);
  int n = snprintf(
      line, sizeof line,
      "{\"event\": \"autoha.health\", \"kind\": \"%s\", \"comm\": "
      "\"0x%016llx\", \"text\": \"%s\", %s, \"time\": %.3f, \"host\": \"%s\", \"pid\": %d}\n",
      kind ? kind : "none", (unsigned long long)comm, esc, parts,
      (double)ts.tv_sec + (double)ts.tv_nsec / 1e9, host, (int)getpid());
  if (n <= 0 || (size_t)n >= sizeof line) return;
  /* The command runs in the background of a shell that exits at once (so nothing is left to reap),
   * reading the event from fd 3, a pipe small enough events never block the write; in a session of
   * its own, so that a launcher ending the job's process group (often the next thing that happens
   * to a hung job) does not end the alert too. */
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) return;
  char script[AH_ENV_PATH_MAX + 64];
  snprintf(script, sizeof script, "( %s ) <&3 3<&- >/dev/null 2>&1 &", s->health_cmd);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, p[0], 3);
  char *argv[] = {"sh", "-c", script, NULL};
  extern char **environ;
  posix_spawnattr_t at;
  posix_spawnattr_init(&at);
  posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSID);
  pid_t pid;
  int rc = posix_spawn(&pid, "/bin/sh", &fa, &at, argv, environ);
  posix_spawnattr_destroy(&at);
  posix_spawn_file_actions_destroy(&fa);
  close(p[0]);
  if (rc == 0 && write(p[1], line, (size_t)n) != n)
    AH_LOG_CAPPED(3, AH_LOG_WARN, "AUTOHA_HEALTH_CMD: could not pass the event to the command");
  close(p[1]);
  if (rc != 0) {
    AH_LOG_CAPPED(3, AH_LOG_WARN, "AUTOHA_HEALTH_CMD: cannot start /bin/sh: %s", strerror(rc));
    return;
  }
  while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) { /* the shell exits at once */
  }
}
