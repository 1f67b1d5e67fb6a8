/* sim_fabric_faults.c: the fault schedule (NCCLSIM_FABRIC_FAULTS) — link down, up, degraded and NIC
 * port down/up events at a wall time (seconds since the job's epoch) or a virtual time (modelled
 * microseconds), and the fraction the schedule gives a link at a time.
 *
 * Grammar (docs/sim-fabric.md): events separated by ';' or newlines, '#' starts a comment,
 *   at=TIME[@wall|@virt]:ACTION:TARGET     TIME = NUMBER(s|ms|us)
 *   ACTION = down | up | degrade=F | portdown | portup | nicdown | nicup | nicfatal
 *            | wcerr=rnr | wcerr=access   (NIC ports only)
 *   TARGET = leafL-spineS | leafL->spineS | spineS->leafL | nodeN/mlx5_K:P | nodeN/mlx5_K:P->leafL | ...
 *            | nodeN/mlx5_K (nicdown, nicup, nicfatal only: every port of the NIC, both directions)
 * nicfatal is nicdown for good, and the NIC's device reports DEVICE_FATAL (firmware or PCIe
 * failure: a later nicup does not bring it back). wcerr=rnr and wcerr=access make every RC queue
 * pair of that port (existing at that time) with work outstanding complete its oldest work request
 * with IBV_WC_RNR_RETRY_EXC_ERR or IBV_WC_REM_ACCESS_ERR and go to ERR, once, as after a responder
 * that posted no receive (rnr_retry below 7) or refused a key; the link keeps its rate.
 * A spec is applied whole or not at all: the first bad event is quoted in the error. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim_fabric_internal.h"

/* Parses TIME[@clock]; returns 0 with the clock and the time in its unit (s or us), or -1. */
static int parse_time(char *t, int *clock_p, double *at_p) {
  int clock = SIM_FABRIC_CLOCK_WALL;
  char *at = strchr(t, '@');
  if (at) {
    *at++ = '\0';
    if (strcmp(at, "virt") == 0) clock = SIM_FABRIC_CLOCK_VIRT;
    else if (strcmp(at, "wall") != 0) return -1;
  }
  size_t n = strlen(t);
  double scale; /* to seconds */
  if (n > 2 && strcmp(t + n - 2, "ms") == 0) scale = 1e-3, t[n - 2] = '\0';
  else if (n > 2 && strcmp(t + n - 2, "us") == 0) scale = 1e-6, t[n - 2] = '\0';
  else if (n > 1 && t[n - 1] == 's') scale = 1.0, t[n - 1] = '\0';
  else return -1;
  double v;
  if (sim_fabric_parse_double(t, 0, 1e12, &v)) return -1;
  *clock_p = clock;
  *at_p = clock == SIM_FABRIC_CLOCK_VIRT ? v * scale * 1e6 : v * scale;
  return 0;
}

/* The links of a whole NIC, "nodeN/mlx5_K": both directions of each of its ports, into links[0..3].
 * Returns how many (2 per port), or -1 when the text names no NIC of this fabric. */
static int nic_links(const sim_fabric_t *f, const char *text, int links[4]) {
  int node, nic, used = 0;
  if (sscanf(text, "node%d/mlx5_%d%n", &node, &nic, &used) != 2 || text[used]) return -1;
  char want[64];
  snprintf(want, sizeof want, "node%d/mlx5_%d", node, nic); /* strict: no sign, no leading zero */
  if (strcmp(want, text) != 0) return -1;
  int n = 0;
  for (int p = 1; p <= f->ports; p++) {
    int a = sim_fabric_port_index(f, (sim_fabric_ep_t){node, nic, p});
    if (a < 0) return -1;
    links[n++] = 2 * a;
    links[n++] = 2 * a + 1;
  }
  return n;
}

/* Parses one event into ev[0..3]; returns how many (1 to 4) or -1 with the reason in *why_p. */
static int parse_event(const sim_fabric_t *f, char *text, sim_fabric_event_t ev[4],
                       const char **why_p) {
  char *c1 = strchr(text, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
  if (strncmp(text, "at=", 3) != 0 || !c1 || !c2) {
    *why_p = "expected at=TIME[@wall|@virt]:ACTION:TARGET";
    return -1;
  }
  *c1 = *c2 = '\0';
  char *action = c1 + 1, *target = c2 + 1;
  int clock, links[4], nic;
  double at, fraction;
  if (parse_time(text + 3, &clock, &at)) {
    *why_p = "time must be NUMBER followed by s, ms or us, then optionally @wall or @virt";
    return -1;
  }
  int wcerr = strcmp(action, "wcerr=rnr") == 0      ? SIM_FABRIC_WCERR_RNR
              : strcmp(action, "wcerr=access") == 0 ? SIM_FABRIC_WCERR_ACCESS
                                                    : SIM_FABRIC_WCERR_NONE;
  int port_action = strcmp(action, "portdown") == 0 || strcmp(action, "portup") == 0 || wcerr;
  int fatal = strcmp(action, "nicfatal") == 0;
  int nic_action = strcmp(action, "nicdown") == 0 || strcmp(action, "nicup") == 0 || fatal;
  if (strcmp(action, "down") == 0 || strcmp(action, "portdown") == 0 ||
      strcmp(action, "nicdown") == 0 || fatal)
    fraction = 0;
  else if (strcmp(action, "up") == 0 || strcmp(action, "portup") == 0 ||
           strcmp(action, "nicup") == 0 || wcerr)
    fraction = 1;
  else if (strncmp(action, "degrade=", 8) != 0 ||
           sim_fabric_parse_double(action + 8, 0, 1, &fraction)) {
    *why_p =
        "action must be down, up, degrade=FRACTION (0-1), portdown, portup, nicdown, nicup, "
        "nicfatal, wcerr=rnr or wcerr=access";
    return -1;
  }
  if (nic_action) {
    int n = nic_links(f, target, links);
    if (n < 0) {
      *why_p = "nicdown, nicup and nicfatal take a NIC (nodeN/mlx5_K, within this fabric)";
      return -1;
    }
    for (int i = 0; i < n; i++)
      ev[i] = (sim_fabric_event_t){clock, at, links[i], fraction, fatal, 0};
    return n;
  }
  int n = sim_fabric_parse_target(f, target, links, &nic);
  if (n < 0) {
    *why_p =
        "no such link (leafL-spineS, leafL->spineS, spineS->leafL, nodeN/mlx5_K:P, "
        "nodeN/mlx5_K:P->leafL or leafL->nodeN/mlx5_K:P, within this fabric)";
    return -1;
  }
  if (port_action && !nic) {
    *why_p = "portdown, portup and wcerr take a NIC port (nodeN/mlx5_K:P)";
    return -1;
  }
  if (wcerr) { /* one event, on the port's up link (the even one of its pair) */
    ev[0] = (sim_fabric_event_t){clock, at, links[0] & ~1, 1, 0, wcerr};
    return 1;
  }
  for (int i = 0; i < n; i++) ev[i] = (sim_fabric_event_t){clock, at, links[i], fraction, 0, 0};
  return n;
}

/* Reads "file:PATH" or returns a copy of the spec; NULL with err. */
static char *spec_text(const char *spec, char *err, size_t errlen) {
  if (strncmp(spec, "file:", 5) != 0) {
    char *t = strdup(spec);
    if (!t) snprintf(err, errlen, "NCCLSIM_FABRIC_FAULTS: out of memory");
    return t;
  }
  FILE *fp = fopen(spec + 5, "r");
  if (!fp) {
    snprintf(err, errlen, "NCCLSIM_FABRIC_FAULTS: cannot open '%s': %s", spec + 5, strerror(errno));
    return NULL;
  }
  size_t cap = 4096, n = 0;
  char *t = malloc(cap);
  while (t) {
    n += fread(t + n, 1, cap - 1 - n, fp);
    if (n < cap - 1) break;
    char *g = cap < ((size_t)1 << 24) ? realloc(t, cap *= 2) : NULL;
    if (!g) free(t);
    t = g;
  }
  fclose(fp);
  if (!t) {
    snprintf(err, errlen, "NCCLSIM_FABRIC_FAULTS: '%s' is too large or out of memory", spec + 5);
    return NULL;
  }
  t[n] = '\0';
  return t;
}

/* Sorts by time, keeping the order of events at the same time (later in the spec wins). */
static void sort_stable(sim_fabric_event_t *ev, int n) {
  for (int i = 1; i < n; i++) {
    sim_fabric_event_t e = ev[i];
    int j = i;
    while (j > 0 && ev[j - 1].at > e.at) {
      ev[j] = ev[j - 1];
      j--;
    }
    ev[j] = e;
  }
}

int sim_fabric_schedule(sim_fabric_t *f, const char *spec, char *err, size_t errlen) {
  if (errlen) err[0] = '\0';
  if (!spec || !*spec) return 0;
  char *text = spec_text(spec, err, errlen);
  if (!text) return -1;
  for (char *h = strchr(text, '#'); h; h = strchr(h, '#')) /* comments run to the end of a line */
    while (*h && *h != '\n') *h++ = ' ';
  int n = f->nevents, cap = n + 16, rc = -1;
  sim_fabric_event_t *ev = malloc((size_t)cap * sizeof *ev);
  if (!ev) goto oom;
  if (n) memcpy(ev, f->events, (size_t)n * sizeof *ev);
  char *save = NULL;
  for (char *item = strtok_r(text, ";\n", &save); item; item = strtok_r(NULL, ";\n", &save)) {
    while (*item == ' ' || *item == '\t' || *item == '\r') item++;
    size_t len = strlen(item);
    while (len && (item[len - 1] == ' ' || item[len - 1] == '\t' || item[len - 1] == '\r'))
      item[--len] = '\0';
    if (!len) continue;
    char quoted[256];
    const char *why = NULL;
    snprintf(quoted, sizeof quoted, "%s", item);
    if (n + 4 > cap) {
      sim_fabric_event_t *g = realloc(ev, (size_t)(cap *= 2) * sizeof *ev);
      if (!g) goto oom;
      ev = g;
    }
    int k = parse_event(f, item, ev + n, &why);
    if (k < 0) {
      snprintf(err, errlen, "NCCLSIM_FABRIC_FAULTS: invalid event '%s': %s", quoted, why);
      goto out;
    }
    n += k;
  }
  sort_stable(ev, n);
  free(f->events);
  f->events = ev;
  f->nevents = n;
  ev = NULL;
  rc = 0;
  goto out;
oom:
  snprintf(err, errlen, "NCCLSIM_FABRIC_FAULTS: out of memory");
out:
  free(ev);
  free(text);
  return rc;
}

double sim_fabric_scheduled_fraction(const sim_fabric_t *f, int link, double wall_s,
                                     double virt_us) {
  double v[2] = {1.0, 1.0}, now[2] = {wall_s, virt_us};
  int dead[2] = {0, 0}; /* a fatal NIC stays down */
  for (int i = 0; i < f->nevents; i++) {
    const sim_fabric_event_t *e = &f->events[i];
    if (e->link != link || e->at > now[e->clock] || e->wcerr) continue;
    dead[e->clock] |= e->fatal;
    v[e->clock] = dead[e->clock] ? 0 : e->fraction;
  }
  return v[0] < v[1] ? v[0] : v[1];
}

int sim_fabric_nic_fatal(const sim_fabric_t *f, int node, int nic, double wall_s, double virt_us) {
  double now[2] = {wall_s, virt_us};
  for (int i = 0; i < f->nevents; i++) {
    const sim_fabric_event_t *e = &f->events[i];
    sim_fabric_link_t li;
    if (!e->fatal || e->at > now[e->clock] || sim_fabric_link_info(f, e->link, &li) != 0) continue;
    if (li.ep.node == node && li.ep.nic == nic) return 1;
  }
  return 0;
}

int sim_fabric_port_wcerr(const sim_fabric_t *f, sim_fabric_ep_t ep, double wall_s, double virt_us,
                          double *at_p) {
  double now[2] = {wall_s, virt_us};
  int a = sim_fabric_port_index(f, ep), kind = SIM_FABRIC_WCERR_NONE;
  if (a < 0) return kind;
  for (int i = 0; i < f->nevents; i++) { /* sorted by time: the last one that struck wins */
    const sim_fabric_event_t *e = &f->events[i];
    if (!e->wcerr || e->link != 2 * a || e->at > now[e->clock]) continue;
    kind = e->wcerr;
    *at_p = e->at;
  }
  return kind;
}
