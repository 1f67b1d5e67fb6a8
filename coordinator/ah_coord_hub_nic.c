/* ah_coord_hub_nic.c: the hub's NIC-down diagnosis (docs/diagnosis.md "A NIC port down"). A process
 * whose NIC reported one of its ports down (NIC_PORT, ah_coord_nic.h) names the GPUs of its own
 * queue pairs on that port; the hub turns them into ranks of every communicator it diagnoses and
 * sends each of those communicators' processes one finding, AH_FINDING_NIC_DOWN, as the hang and
 * slow-link findings go. Each port down stands until its PORT_ACTIVE: several stand side by side
 * (two hosts' NICs, two ports of one), and a port reported again while it stands is not named again.
 *
 * Key choice: the evidence is the NIC's own word about its port, never a queue pair's error. When
 * a port goes down, the queue pairs at both ends of each connection over it fail (retry exceeded on
 * one side, flushed on the other), so an error completion does not say which end broke; only the
 * process that opened the NIC with the dead port hears its PORT_ERR, and only its ranks are named. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ah_coord_hub_internal.h"
#include "ah_coord_nic.h"
#include "ah_log.h"

/* The ports standing down for a communicator, oldest first: each one's finding text (for autoha
 * status) and its ranks' place (for the line that names several), and the port's key — host, pid,
 * device, port. The pid is in the key because two processes of a host that opened the same NIC
 * each hear its PORT_ERR and each names its own ranks: one's report must not hide the other's. A
 * report of a port already standing is not a new finding (NCCL's thread can read PORT_ERR again:
 * a flapping port, a repeat after a reconnect). Note that it is not charged to the memory budget,
 * as the slow-link matrix is not: at most NIC_STANDING_MAX per communicator, made only once a NIC
 * of its ranks failed; a port beyond that is named but not kept (said once per communicator). */
#define NIC_STANDING_MAX 64
typedef struct hub_nic_port {
  char text[AH_HEALTH_TEXT];
  char who[160];
  char host[64];
  char dev[AH_LINK_DEV];
  uint32_t pid;
  uint8_t port;
  struct hub_nic_port *next;
} hub_nic_port_t;

struct hub_nic {
  hub_nic_port_t *ports; /* oldest first */
  int n;
  int full_said; /* the bound's message was logged */
};

/* m's standing entry for (host, x's pid, device, port), and the link that points at it; NULL when
 * the port does not stand down for m. */
static hub_nic_port_t *standing_find(const hub_comm_t *m, const char *host, const ah_nic_port_t *x,
                                     hub_nic_port_t ***link_p) {
  if (!m->nic) return NULL;
  for (hub_nic_port_t **l = &m->nic->ports; *l; l = &(*l)->next) {
    hub_nic_port_t *e = *l;
    if (e->pid == x->pid && e->port == x->port && strcmp(e->dev, x->dev) == 0 &&
        strcmp(e->host, host) == 0) {
      if (link_p) *link_p = l;
      return e;
    }
  }
  return NULL;
}

/* Keeps the finding f (its ranks' place who) as standing for m. Returns 0, or -1 when it is not kept
 * (out of memory, or NIC_STANDING_MAX ports already stand: logged once). */
static int standing_add(ah_coord_hub_t *h, hub_comm_t *m, const char *host, const ah_nic_port_t *x,
                        const char *who, const ah_finding_t *f) {
  if (!m->nic && !(m->nic = calloc(1, sizeof *m->nic))) return -1;
  struct hub_nic *st = m->nic;
  if (st->n >= NIC_STANDING_MAX) {
    if (!st->full_said)
      ah_log(AH_LOG_WARN,
             "coordinator hub %s: comm %016llx has %d NIC ports down at once; further ones are "
             "named to its processes but not kept for autoha status, and a repeat of theirs is "
             "named again",
             h->addr, (unsigned long long)m->comm, NIC_STANDING_MAX);
    st->full_said = 1;
    return -1;
  }
  hub_nic_port_t *e = calloc(1, sizeof *e);
  if (!e) return -1;
  snprintf(e->text, sizeof e->text, "%s", f->text);
  snprintf(e->who, sizeof e->who, "%s", who);
  snprintf(e->host, sizeof e->host, "%s", host);
  snprintf(e->dev, sizeof e->dev, "%s", x->dev);
  e->pid = x->pid;
  e->port = x->port;
  hub_nic_port_t **l = &st->ports;
  while (*l) l = &(*l)->next;
  *l = e;
  st->n++;
  return 0;
}

/* Whether x lists gpu among its queue pairs' GPUs (0xffff: a queue pair whose GPU is unknown). */
static int lists_gpu(const ah_nic_port_t *x, uint16_t gpu) {
  for (int i = 0; i < x->ngpus; i++)
    if (x->gpus[i] == gpu) return 1;
  return 0;
}

/* The ranks of m whose queue pairs are on x's port: of the process (host, x->pid), each rank on a
 * GPU x lists; a process's only rank in m also when its GPU, or every queue pair's, is unknown. Returns
 * how many (their numbers in out, at most max). */
static int ranks_on_port(const hub_comm_t *m, const char *host, const ah_nic_port_t *x,
                         uint32_t *out, int max) {
  int nproc = 0, n = 0;
  uint32_t only = 0;
  for (uint32_t r = 0; r < m->nranks; r++) {
    const hub_prog_t *s = &m->prog[r];
    if (!s->have || s->left || s->rec.pid != x->pid || strcmp(s->host, host) != 0) continue;
    nproc++;
    only = r;
    if (s->rec.gpu != 0xffff && lists_gpu(x, s->rec.gpu) && n < max) out[n++] = r;
  }
  /* the fallback only when the GPUs cannot be matched: the rank's is unknown, or x knows none of its
   * queue pairs' (one unknown among known ones must not name a rank on a GPU x does not list) */
  int known = 0;
  for (int i = 0; i < x->ngpus; i++) known |= x->gpus[i] != 0xffff;
  if (nproc == 1 && n == 0 && (m->prog[only].rec.gpu == 0xffff || !known) && max > 0)
    out[n++] = only;
  return n;
}

/* The ranks r[0..n) of one process, for the finding's text: "rank R (host pid P gpu G)" (the
 * place as every finding words it), or "ranks R1, R2 (host pid P)". */
static void nic_who(const hub_comm_t *m, const uint32_t *r, int n, char *out, size_t len) {
  char place[96];
  if (n == 1) {
    ah_coord_hub_rank_place(m, r[0], place, sizeof place);
    snprintf(out, len, "rank %u (%s)", r[0], place);
    return;
  }
  const hub_prog_t *s = &m->prog[r[0]];
  int o = snprintf(out, len, "ranks %u", r[0]);
  for (int i = 1; i < n && o > 0 && (size_t)o < len; i++)
    o += snprintf(out + o, len - (size_t)o, ", %u", r[i]);
  if (o > 0 && (size_t)o < len)
    snprintf(out + o, len - (size_t)o, " (%s pid %u)", s->host, s->rec.pid);
}

/* The finding's line: "NIC down on comm C: <who>'s NIC D port N is down ...". */
static void nic_text(const hub_comm_t *m, const char *who, const ah_nic_port_t *x, char *out,
                     size_t len) {
  /* a long host name cuts the line's tail, never its head: the comm, the ranks, the NIC */
  if (snprintf(out, len,
               "NIC down on comm %016llx: %s's NIC %s port %u is down (its own PORT_ERR or "
               "DEVICE_FATAL): its connections fail at both ends; the peers' errors follow from it",
               (unsigned long long)m->comm, who, x->dev, x->port) >= (int)len)
    out[len - 1] = 0;
}

void ah_coord_hub_on_nic_port(ah_coord_hub_t *h, hub_conn_t *c, const uint8_t *p) {
  ah_nic_port_t x;
  char err[160], host[64];
  if (ah_nic_port_unpack(p, &x, err, sizeof err) != 0) {
    ah_coord_hub_refuse(h, RATE_LINK, "refused a NIC_PORT from %s: %s; connection dropped", c->peer,
                        err);
    ah_coord_hub_conn_close_later(h, c);
    return;
  }
  ah_coord_hub_conn_host(c, host, sizeof host); /* as the progress records name it */
  int named = 0, standing = 0;
  for (hub_comm_t *m = h->comms; m; m = m->hh.next) {
    if (!m->prog) continue;
    hub_nic_port_t **link = NULL, *e = standing_find(m, host, &x, &link);
    if (x.up) { /* the port is back: its finding no longer stands for autoha status */
      if (e) {
        *link = e->next;
        free(e);
        m->nic->n--;
      }
      continue;
    }
    if (e) { /* named already and still down: the same finding, not a new one */
      standing++;
      continue;
    }
    uint32_t r[AH_FINDING_RANKS * 2];
    int n = ranks_on_port(m, host, &x, r, (int)(sizeof r / sizeof r[0]));
    if (!n) continue;
    ah_finding_t f = {.kind = AH_FINDING_NIC_DOWN};
    char who[160];
    nic_who(m, r, n, who, sizeof who);
    nic_text(m, who, &x, f.text, sizeof f.text);
    for (int i = 0; i < n; i++)
      ah_finding_add_rank(&f, r[i], &m->prog[r[i]].rec, m->prog[r[i]].host);
    ah_log(AH_LOG_DEBUG, "coordinator hub %s: %s", h->addr, f.text);
    ah_coord_hub_finding_send(h, m, &f);
    named++;
    (void)standing_add(h, m, host, &x, who, &f); /* sent either way */
  }
  if (!x.up && standing && !named)
    ah_log(AH_LOG_DEBUG,
           "coordinator hub %s: %s pid %u reports NIC %s port %u down again; its finding stands "
           "in %d communicator(s), not sent again",
           h->addr, host, x.pid, x.dev, x.port, standing);
  else if (!x.up && !named)
    ah_log(
        AH_LOG_DEBUG,
        "coordinator hub %s: %s pid %u reports NIC %s port %u down (%u queue pairs on it); no rank "
        "of a diagnosed communicator is on it",
        h->addr, host, x.pid, x.dev, x.port, x.nqps);
}

int ah_coord_hub_nic_status(const hub_comm_t *m, char *text, size_t len) {
  const struct hub_nic *st = m->nic;
  if (!st || !st->ports) return 0;
  if (st->n == 1) {
    snprintf(text, len, "%s", st->ports->text);
    return AH_FINDING_NIC_DOWN;
  }
  /* several: each port with its ranks, oldest first, as many as fit whole, then how many more */
  int o = snprintf(text, len,
                   "NIC down on comm %016llx: %d ports down:", (unsigned long long)m->comm, st->n);
  int shown = 0;
  for (const hub_nic_port_t *e = st->ports; e && o > 0 && (size_t)o < len; e = e->next) {
    char one[AH_HEALTH_TEXT];
    int k = snprintf(one, sizeof one, "%s %s's NIC %s port %u", shown ? ";" : "", e->who, e->dev,
                     e->port);
    /* room for this one and, if others follow, the tail " +NN more" */
    size_t tail = e->next ? 10 : 0;
    if (k < 0 || (size_t)o + (size_t)k + tail >= len) break;
    memcpy(text + o, one, (size_t)k + 1);
    o += k;
    shown++;
  }
  if (shown < st->n && o > 0 && (size_t)o < len)
    snprintf(text + o, len - (size_t)o, " +%d more", st->n - shown);
  return AH_FINDING_NIC_DOWN;
}

void ah_coord_hub_nic_comm_free(hub_comm_t *m) {
  if (!m->nic) return;
  for (hub_nic_port_t *e = m->nic->ports, *next; e; e = next) {
    next = e->next;
    free(e);
  }
  free(m->nic);
  m->nic = NULL;
}
