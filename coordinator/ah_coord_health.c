/* Hang localisation from progress records (see ah_coord_health.h). Pure logic.
 *
 * The ranks are grouped by the calls they entered (their per-key counts). One group: every rank
 * entered the same calls, so either some have not completed the last one on their GPU (a hang
 * inside NCCL or the network) or the job waits outside NCCL. Several groups ordered by inclusion
 * (one group entered everything the others did, and more): if the ranks behind are idle, they
 * never entered the next call — the others wait for them (a stalled host); if they are busy in a
 * call, either the ranks ahead are busy too (their GPU stopped while their host went on, and the
 * others wait inside the next call for them) or ahead are idle (those behind never completed a
 * call the others completed). Groups that cross (one entered more of one key, another more of
 * another): ranks entered different calls, a program bug. */
#include "ah_coord_health.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ah_coord_internal.h"
#include "ah_names.h"
#include "ah_size.h"

#define MAX_KEYS 64   /* distinct keys compared (the ranks' latest 16 each, normally the same) */
#define MAX_GROUPS 64 /* distinct progress vectors (normally 2 or 3) */
#define NAMED 2       /* ranks named in a line; the rest are counted */

typedef struct {
  uint8_t coll, bin;
} hkey_t;

typedef struct {
  uint32_t first; /* lowest rank with this vector */
  uint32_t n;     /* ranks with it */
  int busy;       /* some of them has a call not completed */
  uint64_t e[MAX_KEYS];
  uint64_t known; /* bit per key: the count is known (listed, or the rank listed all its keys) */
} group_t;

static int key_index(hkey_t *keys, int *nkeys, uint8_t coll, uint8_t bin) {
  for (int i = 0; i < *nkeys; i++)
    if (keys[i].coll == coll && keys[i].bin == bin) return i;
  if (*nkeys == MAX_KEYS) return -1;
  keys[*nkeys] = (hkey_t){coll, bin};
  return (*nkeys)++;
}

/* The count of key k in rank r's record; *known_p says whether it is known. */
static uint64_t rank_count(const ah_health_rec_t *r, const hkey_t *k, int *known_p) {
  *known_p = 1;
  if (!r) return 0;
  for (int i = 0; i < r->nkeys; i++)
    if (r->keys[i].coll == k->coll && r->keys[i].bin == k->bin) return r->keys[i].entered;
  *known_p = r->nkeys < AH_HEALTH_KEYS; /* a full record may have left an older key out */
  return 0;
}

/* -1, 0 or 1 as a < b, a == b, a > b on every key both know; 2 when they cross. */
static int group_cmp(const group_t *a, const group_t *b, int nkeys) {
  int lt = 0, gt = 0;
  for (int k = 0; k < nkeys; k++) {
    if (!((a->known >> k) & (b->known >> k) & 1)) continue;
    lt |= a->e[k] < b->e[k];
    gt |= a->e[k] > b->e[k];
  }
  return lt && gt ? 2 : gt - lt;
}

/* Writes one finding's line, cut with "..." where it does not fit (rank lists are already bounded). */
static void __attribute__((format(printf, 2, 3))) say(char *text, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(text, AH_HEALTH_TEXT, fmt, ap);
  va_end(ap);
  if (n >= AH_HEALTH_TEXT) memcpy(text + AH_HEALTH_TEXT - 4, "...", 4);
}

/* Appends "coll <size>+ #index" for key k's call `index`. */
static int call_text(char *out, size_t len, const hkey_t *k, uint64_t index) {
  char size[32];
  ah_size_format(ah_size_bin_floor(k->bin), size, sizeof size);
  return snprintf(out, len, "%s %s+ #%llu", ah_coll_name(k->coll), size, (unsigned long long)index);
}

/* Writes the ranks r with sel[r] set, naming the first NAMED with host, pid and GPU and counting
 * the rest. */
static void ranks_text(char *out, size_t len, const ah_health_rank_t *ranks, uint32_t n,
                       const int *sel) {
  size_t off = 0;
  uint32_t named = 0, total = 0;
  out[0] = 0;
  for (uint32_t r = 0; r < n; r++) {
    if (!sel[r]) continue;
    total++;
    if (named == NAMED || off >= len) continue;
    const ah_health_rec_t *rec = ranks[r].rec;
    char gpu[8] = "?";
    if (rec && rec->gpu != 0xffff) snprintf(gpu, sizeof gpu, "%u", rec->gpu);
    if (rec)
      off += (size_t)snprintf(out + off, len - off, "%s%u (%s pid %u gpu %s)", named ? "," : "", r,
                              ranks[r].host ? ranks[r].host : "?", rec->pid, gpu);
    else
      off += (size_t)snprintf(out + off, len - off, "%s%u (never reported)", named ? "," : "", r);
    named++;
  }
  if (total > named && off < len) snprintf(out + off, len - off, " +%u more", total - named);
}

/* f's ranks at fault: those with sel[r] set. */
static void culprits(ah_finding_t *f, const ah_health_rank_t *ranks, uint32_t n, const int *sel) {
  f->nranks = 0;
  for (uint32_t r = 0; r < n; r++)
    if (sel[r]) ah_finding_add_rank(f, r, ranks[r].rec, ranks[r].host);
}

static void finding_call(ah_finding_t *f, const hkey_t *k, uint64_t index) {
  f->has_call = 1;
  f->coll = k->coll;
  f->bin = k->bin;
  f->index = index;
}

static int classify(uint64_t comm, const ah_health_rank_t *ranks, uint32_t n, double stalled_s,
                    ah_finding_t *f, group_t *groups, int *g_of, int *sel) {
  char *text = f->text;
  hkey_t keys[MAX_KEYS];
  int nkeys = 0, ng = 0;
  text[0] = 0;
  if (n == 0) return AH_FINDING_NONE;
  for (uint32_t r = 0; r < n; r++)
    if (ranks[r].rec)
      for (int i = 0; i < ranks[r].rec->nkeys; i++)
        (void)key_index(keys, &nkeys, ranks[r].rec->keys[i].coll, ranks[r].rec->keys[i].bin);
  /* group the ranks by their vector of counts; g_of[r] is rank r's group */
  for (uint32_t r = 0; r < n; r++) {
    group_t cand = {.first = r, .n = 1};
    const ah_health_rec_t *rec = ranks[r].rec;
    cand.busy = rec && rec->state == AH_HEALTH_BUSY;
    for (int k = 0; k < nkeys; k++) {
      int known;
      cand.e[k] = rank_count(rec, &keys[k], &known);
      if (known) cand.known |= 1ull << k;
    }
    int gi = -1;
    for (int i = 0; i < ng && gi < 0; i++)
      if (groups[i].known == cand.known && memcmp(groups[i].e, cand.e, sizeof cand.e) == 0) gi = i;
    if (gi < 0 && ng < MAX_GROUPS) groups[gi = ng++] = cand;
    else if (gi >= 0) {
      groups[gi].n++;
      groups[gi].busy |= cand.busy;
    }
    g_of[r] = gi; /* -1: beyond MAX_GROUPS distinct vectors, left out */
  }
  char who[200];
  char head[48];
  snprintf(head, sizeof head, "comm %016llx", (unsigned long long)comm);

  if (ng == 1) { /* every rank entered the same calls */
    if (!groups[0].busy) return AH_FINDING_NONE;
    /* the latest call: the key with the highest count names it well enough */
    int kmax = 0;
    for (int k = 1; k < nkeys; k++)
      if (groups[0].e[k] > groups[0].e[kmax]) kmax = k;
    char call[64] = "its calls";
    if (nkeys) {
      call_text(call, sizeof call, &keys[kmax], groups[0].e[kmax] - 1);
      finding_call(f, &keys[kmax], groups[0].e[kmax] - 1);
    }
    uint32_t nbusy = 0;
    for (uint32_t r = 0; r < n; r++)
      nbusy += sel[r] = ranks[r].rec && ranks[r].rec->state == AH_HEALTH_BUSY;
    /* All busy, some hosts back from the call and the rest still inside it (on sim/, waiting for
     * their peers' data): the ones back left it without taking part, their GPU stopped. Only a
     * minority: hosts wait inside NCCL for other reasons too (a full work queue). */
    uint32_t nout = 0, nin = 0;
    for (uint32_t r = 0; r < n; r++) {
      const ah_health_rec_t *rec = ranks[r].rec;
      nout += rec && rec->host == AH_HEALTH_HOST_OUTSIDE;
      nin += rec && rec->host == AH_HEALTH_HOST_IN_NCCL;
    }
    if (nbusy == n && nout > 0 && nout < nin && nout + nin == n) {
      for (uint32_t r = 0; r < n; r++) sel[r] = ranks[r].rec->host == AH_HEALTH_HOST_OUTSIDE;
      ranks_text(who, sizeof who, ranks, n, sel);
      culprits(f, ranks, n, sel);
      say(text,
          "hang on %s: the GPU of rank %s stopped in %s (its host went on and waits for it); the "
          "other %u wait inside it; stalled %.0f s",
          head, who, call, nin, stalled_s);
      return AH_FINDING_INCOMPLETE;
    }
    ranks_text(who, sizeof who, ranks, n, sel);
    if (nbusy < n) culprits(f, ranks, n, sel); /* all busy: no rank is singled out */
    if (nbusy == n)
      say(text,
          "hang on %s: every rank entered %s, none completed it in %.0f s (inside NCCL or "
          "the network)",
          head, call, stalled_s);
    else
      say(text,
          "hang on %s: every rank entered %s; rank %s did not complete it in %.0f s (the "
          "other %u did)",
          head, call, who, stalled_s, n - nbusy);
    return AH_FINDING_INCOMPLETE;
  }

  /* crossing groups: ranks entered different calls */
  for (int i = 0; i < ng; i++)
    for (int j = i + 1; j < ng; j++) {
      if (group_cmp(&groups[i], &groups[j], nkeys) != 2) continue;
      /* name, for each of the two, a call it entered that the other did not */
      if (groups[i].n < groups[j].n) { /* name the smaller group: the odd ones out */
        int t = i;
        i = j;
        j = t;
      }
      char ci[64] = "", cj[64] = "", wj[100];
      for (int k = 0; k < nkeys; k++) {
        if (!((groups[i].known >> k) & (groups[j].known >> k) & 1)) continue;
        if (!ci[0] && groups[i].e[k] > groups[j].e[k])
          call_text(ci, sizeof ci, &keys[k], groups[j].e[k]);
        if (!cj[0] && groups[j].e[k] > groups[i].e[k]) {
          call_text(cj, sizeof cj, &keys[k], groups[i].e[k]);
          finding_call(f, &keys[k], groups[i].e[k]); /* the odd ones' call */
        }
      }
      for (uint32_t r = 0; r < n; r++) sel[r] = g_of[r] == j;
      ranks_text(wj, sizeof wj, ranks, n, sel);
      culprits(f, ranks, n, sel);
      say(text,
          "hang on %s: ranks entered different calls (program bug): rank %s entered %s where "
          "%u others entered %s; stalled %.0f s",
          head, wj, cj, groups[i].n, ci, stalled_s);
      return AH_FINDING_MISMATCH;
    }

  /* ordered groups: the front one entered everything the others did */
  int front = 0;
  for (int i = 1; i < ng; i++)
    if (group_cmp(&groups[i], &groups[front], nkeys) > 0) front = i;
  int behind_busy = 0;
  for (int i = 0; i < ng; i++)
    if (i != front) behind_busy |= groups[i].busy;
  /* the call the ranks behind have not entered: on the first key they lag on, the next index */
  int lag = -1, lag_group = front == 0 && ng > 1 ? 1 : 0;
  for (int i = 0; i < ng && lag < 0; i++) {
    if (i == front) continue;
    for (int k = 0; k < nkeys && lag < 0; k++)
      if (((groups[i].known >> k) & 1) && groups[i].e[k] < groups[front].e[k]) {
        lag = k;
        lag_group = i;
      }
  }
  char call[64] = "a call";
  if (lag >= 0) {
    call_text(call, sizeof call, &keys[lag], groups[lag_group].e[lag]);
    finding_call(f, &keys[lag], groups[lag_group].e[lag]);
  }
  /* Both busy: whose GPU stopped? If the busy ranks behind wait inside NCCL (their host blocked in
   * a call), they wait for the front's GPU, whose host went on. If their hosts are back in the
   * program (in a stream synchronisation after their last call: every loop that logs a loss or
   * calls .item()), the GPU behind stopped in its last call: the front completed that call and
   * went on to the next one, where it waits. A host cannot pass a synchronisation its GPU has not
   * reached, so the front's hosts, ahead, cannot be the stopped ones in that shape. */
  int behind_outside = behind_busy;
  for (uint32_t r = 0; r < n && behind_outside; r++) {
    const ah_health_rec_t *rec = ranks[r].rec;
    if (g_of[r] >= 0 && g_of[r] != front && rec && rec->state == AH_HEALTH_BUSY)
      behind_outside = rec->host == AH_HEALTH_HOST_OUTSIDE;
  }
  int front_stopped = groups[front].busy && behind_busy && !behind_outside;
  char wf[100], wb[100];
  /* A group behind whose ranks are partly idle: those completed every call they entered, so its
   * busy ones did not (one thread driving several GPUs waits for the one that stopped, and enters
   * nothing more on the others: they are behind too, idle). */
  int idle_in[MAX_GROUPS] = {0}, mixed = 0;
  for (uint32_t r = 0; r < n; r++)
    if (g_of[r] >= 0 && ranks[r].rec && ranks[r].rec->state == AH_HEALTH_IDLE) idle_in[g_of[r]] = 1;
  for (int i = 0; i < ng; i++) mixed |= i != front && groups[i].busy && idle_in[i];
  for (int state = AH_HEALTH_IDLE; mixed && state <= AH_HEALTH_BUSY; state++) {
    for (uint32_t r = 0; r < n; r++)
      sel[r] = g_of[r] >= 0 && g_of[r] != front && groups[g_of[r]].busy && idle_in[g_of[r]] &&
               ranks[r].rec && ranks[r].rec->state == state;
    ranks_text(state == AH_HEALTH_IDLE ? wf : wb, sizeof wf, ranks, n, sel);
  }
  if (mixed) {
    culprits(f, ranks, n, sel); /* the busy ones, selected last */
    say(text,
        "hang on %s: rank %s did not complete its calls before %s, which rank %s completed; "
        "stalled %.0f s",
        head, wb, call, wf, stalled_s);
    return AH_FINDING_INCOMPLETE;
  }
  for (uint32_t r = 0; r < n; r++) sel[r] = g_of[r] == front;
  ranks_text(wf, sizeof wf, ranks, n, sel);
  if (front_stopped) culprits(f, ranks, n, sel); /* the GPU that stopped */
  for (uint32_t r = 0; r < n; r++)
    sel[r] = g_of[r] >= 0 && g_of[r] != front &&
             (!behind_outside || ranks[r].rec->state == AH_HEALTH_BUSY);
  ranks_text(wb, sizeof wb, ranks, n, sel);
  if (!front_stopped) culprits(f, ranks, n, sel); /* the ranks behind */
  if (behind_outside && groups[front].busy) {
    say(text,
        "hang on %s: the GPU of rank %s stopped in its last call (its host waits for it); %u "
        "ranks completed it and wait in %s; stalled %.0f s",
        head, wb, groups[front].n, call, stalled_s);
    return AH_FINDING_INCOMPLETE;
  }
  if (!behind_busy) {
    say(text, "hang on %s: rank %s never entered %s, which rank %s entered %.0f s ago", head, wb,
        call, wf, stalled_s);
    return AH_FINDING_MISSING;
  }
  if (groups[front].busy) { /* the front's host went on while its GPU stopped: the others wait */
    say(text,
        "hang on %s: the GPU of rank %s stopped (its host went on past %s); rank %s wait for "
        "it; stalled %.0f s",
        head, wf, call, wb, stalled_s);
    return AH_FINDING_INCOMPLETE;
  }
  say(text, "hang on %s: rank %s did not complete %s, which rank %s completed; stalled %.0f s",
      head, wb, call, wf, stalled_s);
  return AH_FINDING_INCOMPLETE;
}

int ah_health_classify(uint64_t comm, const ah_health_rank_t *ranks, uint32_t n, double stalled_s,
                       ah_finding_t *f) {
  memset(f, 0, sizeof *f);
  group_t *groups = calloc(MAX_GROUPS, sizeof *groups);
  int *g_of = calloc(n ? n : 1, sizeof *g_of), *sel = calloc(n ? n : 1, sizeof *sel);
  int kind = groups && g_of && sel ? classify(comm, ranks, n, stalled_s, f, groups, g_of, sel)
                                   : AH_FINDING_NONE;
  f->kind = kind;
  free(groups);
  free(g_of);
  free(sel);
  return kind;
}

void ah_health_rec_pack(const ah_health_rec_t *r, uint8_t *out) {
  memset(out, 0, AH_HEALTH_REC_BYTES);
  ah_coord_put_u32(out, r->rank);
  ah_coord_put_u32(out + 4, r->pid);
  out[8] = (uint8_t)(r->gpu >> 8);
  out[9] = (uint8_t)r->gpu;
  out[10] = (uint8_t)(r->state | r->host << 4);
  out[11] = r->nkeys;
  for (int i = 0; i < r->nkeys && i < AH_HEALTH_KEYS; i++) {
    uint8_t *k = out + 12 + 10 * i;
    k[0] = r->keys[i].coll;
    k[1] = r->keys[i].bin;
    ah_coord_put_u64(k + 2, r->keys[i].entered);
  }
}

int ah_health_rec_unpack(const uint8_t *in, ah_health_rec_t *r, char *err, size_t errlen) {
  memset(r, 0, sizeof *r);
  r->rank = ah_coord_get_u32(in);
  r->pid = ah_coord_get_u32(in + 4);
  r->gpu = (uint16_t)((in[8] << 8) | in[9]);
  r->state = in[10] & 0x0f;
  r->host = in[10] >> 4;
  r->nkeys = in[11];
  if (r->state > AH_HEALTH_UNKNOWN || r->host > AH_HEALTH_HOST_OUTSIDE) {
    snprintf(err, errlen, "progress state %u, host %u out of range", r->state, r->host);
    return -1;
  }
  if (r->nkeys > AH_HEALTH_KEYS) {
    snprintf(err, errlen, "progress record with %u keys (at most %d)", r->nkeys, AH_HEALTH_KEYS);
    return -1;
  }
  for (int i = 0; i < AH_HEALTH_KEYS; i++) {
    const uint8_t *k = in + 12 + 10 * i;
    if (i >= r->nkeys) {
      if (ah_coord_zero(k, 10)) continue;
      snprintf(err, errlen, "progress record: unused key slot %d is not zero", i);
      return -1;
    }
    if (k[0] >= AH_NUM_COLLS || k[1] >= 64) {
      snprintf(err, errlen, "progress record: key %d names collective %u bin %u (out of range)", i,
               k[0], k[1]);
      return -1;
    }
    r->keys[i] = (ah_health_key_t){k[0], k[1], ah_coord_get_u64(k + 2)};
  }
  return 0;
}

void ah_health_samples_pack(uint32_t rank, const ah_health_sample_t *x, int n, uint8_t *out) {
  memset(out, 0, AH_HEALTH_SAMPLES_BYTES);
  if (n > AH_HEALTH_SAMPLES) n = AH_HEALTH_SAMPLES;
  ah_coord_put_u32(out, rank);
  out[4] = (uint8_t)n;
  for (int i = 0; i < n; i++) {
    uint8_t *k = out + 5 + AH_HEALTH_SAMPLE_BYTES * i;
    k[0] = x[i].coll;
    k[1] = x[i].bin;
    ah_coord_put_u64(k + 2, x[i].index);
    uint32_t bits;
    memcpy(&bits, &x[i].us, sizeof bits);
    ah_coord_put_u32(k + 10, bits);
  }
}

int ah_health_samples_unpack(const uint8_t *in, uint32_t *rank, ah_health_sample_t *x, char *err,
                             size_t errlen) {
  *rank = ah_coord_get_u32(in);
  int n = in[4];
  if (n > AH_HEALTH_SAMPLES) {
    snprintf(err, errlen, "samples record with %d samples (at most %d)", n, AH_HEALTH_SAMPLES);
    return -1;
  }
  for (int i = 0; i < AH_HEALTH_SAMPLES; i++) {
    const uint8_t *k = in + 5 + AH_HEALTH_SAMPLE_BYTES * i;
    if (i >= n) {
      if (ah_coord_zero(k, AH_HEALTH_SAMPLE_BYTES)) continue;
      snprintf(err, errlen, "samples record: unused slot %d is not zero", i);
      return -1;
    }
    uint32_t bits = ah_coord_get_u32(k + 10);
    float us;
    memcpy(&us, &bits, sizeof us);
    if (k[0] >= AH_NUM_COLLS || k[1] >= 64) {
      snprintf(err, errlen, "samples record: sample %d names collective %u bin %u (out of range)",
               i, k[0], k[1]);
      return -1;
    }
    if (!(us >= 0) || !isfinite(us)) {
      snprintf(err, errlen, "samples record: sample %d has duration %g us", i, (double)us);
      return -1;
    }
    x[i] = (ah_health_sample_t){k[0], k[1], ah_coord_get_u64(k + 2), us};
  }
  return n;
}

void ah_finding_add_rank(ah_finding_t *f, uint32_t r, const ah_health_rec_t *rec,
                         const char *host) {
  if (f->nranks < AH_FINDING_RANKS) {
    ah_finding_rank_t *fr = &f->ranks[f->nranks];
    *fr = (ah_finding_rank_t){.rank = r, .gpu = 0xffff};
    if (rec) {
      fr->pid = rec->pid;
      fr->gpu = rec->gpu;
      snprintf(fr->host, sizeof fr->host, "%s", host ? host : "?");
    }
  }
  f->nranks++;
}

void ah_finding_pack(const ah_finding_t *f, uint8_t *out) {
  memset(out, 0, AH_FINDING_BYTES);
  out[0] = (uint8_t)f->kind;
  snprintf((char *)out + 1, AH_HEALTH_TEXT, "%s", f->text);
  uint8_t *p = out + 1 + AH_HEALTH_TEXT;
  ah_coord_put_u32(p, f->nranks);
  p += 4;
  for (uint32_t i = 0; i < f->nranks && i < AH_FINDING_RANKS; i++, p += AH_FINDING_RANK_BYTES) {
    ah_coord_put_u32(p, f->ranks[i].rank);
    ah_coord_put_u32(p + 4, f->ranks[i].pid);
    p[8] = (uint8_t)(f->ranks[i].gpu >> 8);
    p[9] = (uint8_t)f->ranks[i].gpu;
    snprintf((char *)p + 10, AH_FINDING_HOST, "%s", f->ranks[i].host);
  }
  p = out + 1 + AH_HEALTH_TEXT + 4 + AH_FINDING_RANKS * AH_FINDING_RANK_BYTES;
  p[0] = (uint8_t)(f->has_call != 0);
  if (f->has_call) {
    p[1] = f->coll;
    p[2] = f->bin;
    ah_coord_put_u64(p + 3, f->index);
  }
}

/* Whether p's n bytes hold printable ASCII up to a NUL. */
static int text_ok(const uint8_t *p, size_t n) {
  size_t len = strnlen((const char *)p, n);
  if (len == n) return 0;
  for (size_t i = 0; i < len; i++)
    if (p[i] < 0x20 || p[i] >= 0x7f) return 0;
  return 1;
}

int ah_finding_unpack(const uint8_t *in, ah_finding_t *f, char *err, size_t errlen) {
  memset(f, 0, sizeof *f);
  f->kind = in[0];
  if (f->kind < AH_FINDING_MISSING || f->kind > AH_FINDING_LAST) {
    snprintf(err, errlen, "finding kind %d out of range", f->kind);
    return -1;
  }
  if (!text_ok(in + 1, AH_HEALTH_TEXT)) {
    snprintf(err, errlen, "finding with %s text",
             strnlen((const char *)in + 1, AH_HEALTH_TEXT) < AH_HEALTH_TEXT ? "unprintable"
                                                                            : "unterminated");
    return -1;
  }
  memcpy(f->text, in + 1, AH_HEALTH_TEXT);
  const uint8_t *p = in + 1 + AH_HEALTH_TEXT;
  f->nranks = ah_coord_get_u32(p);
  p += 4;
  for (uint32_t i = 0; i < f->nranks && i < AH_FINDING_RANKS; i++, p += AH_FINDING_RANK_BYTES) {
    if (!text_ok(p + 10, AH_FINDING_HOST)) {
      snprintf(err, errlen, "finding: rank %u's host is not printable, terminated text", i);
      return -1;
    }
    f->ranks[i] = (ah_finding_rank_t){ah_coord_get_u32(p), ah_coord_get_u32(p + 4),
                                      (uint16_t)((p[8] << 8) | p[9]), ""};
    memcpy(f->ranks[i].host, p + 10, AH_FINDING_HOST);
  }
  p = in + 1 + AH_HEALTH_TEXT + 4 + AH_FINDING_RANKS * AH_FINDING_RANK_BYTES;
  if (p[0] > 1 || (p[0] && (p[1] >= AH_NUM_COLLS || p[2] >= 64))) {
    snprintf(err, errlen, "finding: call flag %u, collective %u, bin %u out of range", p[0], p[1],
             p[2]);
    return -1;
  }
  f->has_call = p[0];
  f->coll = p[1];
  f->bin = p[2];
  f->index = ah_coord_get_u64(p + 3);
  return 0;
}
