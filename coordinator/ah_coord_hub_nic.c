/* ah_coord_hub_nic.c: the hub's NIC-down diagnosis (docs/diagnosis.md "A NIC port down"). A process
 * whose NIC reported one of its ports down (NIC_PORT, ah_coord_nic.h) names the GPUs of its own
 * queue pairs on that port; the hub turns them into ranks of every communicator it diagnoses and
 * sends each of those communicators' processes one finding, AH_FINDING_NIC_DOWN, as the hang and
 * slow-link findings go.
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

/* A communicator's latest NIC-down finding, for autoha status: its text while the port it names is
 * down ("" none), and that port. Made at the communicator's first finding of the kind. Note that it
 * is not charged to the memory budget, as the slow-link matrix is not: one per communicator, and
 * only once a NIC of its ranks failed. */
struct hub_nic {
  char text[AH_HEALTH_TEXT];
  char host[64];
  char dev[AH_LINK_DEV];
  uint32_t pid;
  uint8_t port;
};

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

/* The finding's line: "NIC down on comm C: rank R (host pid P gpu G)'s NIC D port N is down ...",
 * or for several ranks of the process "ranks R1, R2 (host pid P)'s NIC ...". */
static void nic_text(const hub_comm_t *m, const uint32_t *r, int n, const ah_nic_port_t *x,
                     char *out, size_t len) {
  char who[160];
  const hub_prog_t *s = &m->prog[r[0]];
  if (n == 1 && s->rec.gpu != 0xffff)
    snprintf(who, sizeof who, "rank %u (%s pid %u gpu %u)", r[0], s->host, s->rec.pid, s->rec.gpu);
  else if (n == 1) snprintf(who, sizeof who, "rank %u (%s pid %u)", r[0], s->host, s->rec.pid);
  else {
    int o = snprintf(who, sizeof who, "ranks %u", r[0]);
    for (int i = 1; i < n && o > 0 && (size_t)o < sizeof who; i++)
      o += snprintf(who + o, sizeof who - (size_t)o, ", %u", r[i]);
    if (o > 0 && (size_t)o < sizeof who)
      snprintf(who + o, sizeof who - (size_t)o, " (%s pid %u)", s->host, s->rec.pid);
  }
  /* a long host name cuts the line's tail, never its head: the comm, the ranks, the NIC */
  if (snprintf(out, len,
               "NIC down on comm %016llx: %s's NIC %s port %u is down (PORT_ERR from the NIC "
               "itself): its connections fail at both ends; the peers' errors follow from it",
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
  int named = 0;
  for (hub_comm_t *m = h->comms; m; m = m->hh.next) {
    if (!m->prog) continue;
    struct hub_nic *st = m->nic;
    if (x.up) { /* the port is back: its finding no longer stands for autoha status */
      if (st && st->text[0] && st->pid == x.pid && st->port == x.port &&
          strcmp(st->dev, x.dev) == 0 && strcmp(st->host, host) == 0)
        st->text[0] = 0;
      continue;
    }
    uint32_t r[AH_FINDING_RANKS * 2];
    int n = ranks_on_port(m, host, &x, r, (int)(sizeof r / sizeof r[0]));
    if (!n) continue;
    ah_finding_t f = {.kind = AH_FINDING_NIC_DOWN};
    nic_text(m, r, n, &x, f.text, sizeof f.text);
    for (int i = 0; i < n; i++)
      ah_finding_add_rank(&f, r[i], &m->prog[r[i]].rec, m->prog[r[i]].host);
    ah_log(AH_LOG_DEBUG, "coordinator hub %s: %s", h->addr, f.text);
    ah_coord_hub_finding_send(h, m, &f);
    named++;
    if (!st && !(st = m->nic = calloc(1, sizeof *st))) continue; /* sent, not kept for status */
    snprintf(st->text, sizeof st->text, "%s", f.text);
    snprintf(st->dev, sizeof st->dev, "%s", x.dev);
    snprintf(st->host, sizeof st->host, "%s", host);
    st->pid = x.pid;
    st->port = x.port;
  }
  if (!x.up && !named)
    ah_log(
        AH_LOG_DEBUG,
        "coordinator hub %s: %s pid %u reports NIC %s port %u down (%u queue pairs on it); no rank "
        "of a diagnosed communicator is on it",
        h->addr, host, x.pid, x.dev, x.port, x.nqps);
}

int ah_coord_hub_nic_status(const hub_comm_t *m, char *text, size_t len) {
  if (!m->nic || !m->nic->text[0]) return 0;
  snprintf(text, len, "%s", m->nic->text);
  return AH_FINDING_NIC_DOWN;
}

void ah_coord_hub_nic_comm_free(hub_comm_t *m) {
  free(m->nic);
  m->nic = NULL;
}
