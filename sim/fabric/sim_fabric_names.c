/* sim_fabric_names.c: what each link number is, and its name both ways — "node0/mlx5_2:1->leaf0",
 * "leaf0->node0/mlx5_2:1", "leaf3->spine1", "spine1->leaf3" — plus the shorter undirected names a
 * fault schedule uses ("leaf3-spine1", "node0/mlx5_2:1"). Names are parsed strictly: a name is
 * accepted only when printing the link it denotes gives the same text back. */
#include <errno.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim_fabric_internal.h"

int sim_fabric_parse_long(const char *s, long lo, long hi, long *v_p) {
  if (!s || !*s || isspace((unsigned char)*s) || *s == '-' || *s == '+') return -1;
  char *end = NULL;
  errno = 0;
  long long v = strtoll(s, &end, 0);
  if (errno || *end || v < lo || v > hi) return -1;
  *v_p = (long)v;
  return 0;
}

int sim_fabric_parse_double(const char *s, double lo, double hi, double *v_p) {
  if (!s || !*s || isspace((unsigned char)*s)) return -1;
  char *end = NULL;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || *end || !(v >= lo && v <= hi)) return -1;
  *v_p = v;
  return 0;
}

int sim_fabric_port_index(const sim_fabric_t *f, sim_fabric_ep_t ep) {
  if (ep.node < 0 || ep.node >= f->nnodes || ep.nic < 0 || ep.nic >= f->nics || ep.port < 1 ||
      ep.port > f->ports)
    return -1;
  return (ep.node * f->nics + ep.nic) * f->ports + ep.port - 1;
}

/* Cabling: a dual-port NIC has port 1 on its pair's left leaf and port 2 on the right one; a
 * single-port NIC n is on the left leaf when n is even, the right one when odd. */
int sim_fabric_ep_leaf(const sim_fabric_t *f, sim_fabric_ep_t ep) {
  int pair = ep.node / f->hostsperpair;
  return 2 * pair + (f->ports == 2 ? ep.port - 1 : ep.nic % 2);
}

int sim_fabric_link_info(const sim_fabric_t *f, int link, sim_fabric_link_t *info_p) {
  sim_fabric_link_t in = {.spine = -1, .ep = {-1, -1, -1}};
  if (link < 0 || link >= f->nlinks) return -1;
  if (link < f->nport_links) {
    int port = link / 2;
    in.kind = link % 2 ? SIM_FABRIC_LINK_NIC_DOWN : SIM_FABRIC_LINK_NIC_UP;
    in.ep.port = port % f->ports + 1;
    in.ep.nic = port / f->ports % f->nics;
    in.ep.node = port / f->ports / f->nics;
    in.leaf = sim_fabric_ep_leaf(f, in.ep);
    in.gbps = f->port_gbps;
    in.latency_us = f->host_lat_us;
  } else {
    int k = link - f->nport_links;
    in.kind = k % 2 ? SIM_FABRIC_LINK_SPINE_DOWN : SIM_FABRIC_LINK_LEAF_UP;
    in.spine = k / 2 % f->nspines;
    in.leaf = k / 2 / f->nspines;
    in.gbps = f->up_gbps;
    in.latency_us = f->spine_lat_us;
  }
  *info_p = in;
  return 0;
}

const char *sim_fabric_link_name(const sim_fabric_t *f, int link, char *buf, size_t len) {
  sim_fabric_link_t in;
  if (sim_fabric_link_info(f, link, &in)) {
    snprintf(buf, len, "link%d?", link);
    return buf;
  }
  char nic[48];
  snprintf(nic, sizeof nic, "node%d/mlx5_%d:%d", in.ep.node, in.ep.nic, in.ep.port);
  switch (in.kind) {
    case SIM_FABRIC_LINK_NIC_UP: snprintf(buf, len, "%s->leaf%d", nic, in.leaf); break;
    case SIM_FABRIC_LINK_NIC_DOWN: snprintf(buf, len, "leaf%d->%s", in.leaf, nic); break;
    case SIM_FABRIC_LINK_LEAF_UP: snprintf(buf, len, "leaf%d->spine%d", in.leaf, in.spine); break;
    default: snprintf(buf, len, "spine%d->leaf%d", in.spine, in.leaf); break;
  }
  return buf;
}

/* Reads "nodeN/mlx5_K:P" at the start of s; returns the port index and sets *end_p, or -1. */
static int scan_port(const sim_fabric_t *f, const char *s, const char **end_p) {
  sim_fabric_ep_t ep;
  int n = 0;
  if (sscanf(s, "node%d/mlx5_%d:%d%n", &ep.node, &ep.nic, &ep.port, &n) != 3) return -1;
  *end_p = s + n;
  return sim_fabric_port_index(f, ep);
}

/* Reads "leafL" or "spineS" at the start of s (kind 0 leaf, 1 spine); returns the index or -1. */
static int scan_switch(const sim_fabric_t *f, const char *s, int kind, const char **end_p) {
  int v, n = 0;
  if (sscanf(s, kind ? "spine%d%n" : "leaf%d%n", &v, &n) != 1) return -1;
  if (v < 0 || v >= (kind ? f->nspines : 2 * f->npairs)) return -1;
  *end_p = s + n;
  return v;
}

/* The link an undirected or directed name denotes, before the round-trip check. */
static int parse_name(const sim_fabric_t *f, const char *s, int links[2], int *nic_p) {
  const char *e = s;
  int a, b;
  *nic_p = 0;
  if ((a = scan_port(f, s, &e)) >= 0) {
    *nic_p = 1;
    if (!*e) {
      links[0] = 2 * a;
      links[1] = 2 * a + 1;
      return 2;
    }
    links[0] = 2 * a;
    return strncmp(e, "->", 2) == 0 ? 1 : -1;
  }
  if ((a = scan_switch(f, s, 1, &e)) >= 0) { /* spineS->leafL */
    if (strncmp(e, "->", 2) || (b = scan_switch(f, e + 2, 0, &e)) < 0 || *e) return -1;
    links[0] = sim_fabric_spine_link(f, b, a, 1);
    return 1;
  }
  if ((a = scan_switch(f, s, 0, &e)) < 0) return -1;
  if (*e == '-' && e[1] != '>') { /* leafL-spineS */
    if ((b = scan_switch(f, e + 1, 1, &e)) < 0 || *e) return -1;
    links[0] = sim_fabric_spine_link(f, a, b, 0);
    links[1] = sim_fabric_spine_link(f, a, b, 1);
    return 2;
  }
  if (strncmp(e, "->", 2)) return -1;
  if ((b = scan_switch(f, e + 2, 1, &e)) >= 0 && !*e) {
    links[0] = sim_fabric_spine_link(f, a, b, 0);
    return 1;
  }
  if ((b = scan_port(f, e + 2, &e)) < 0 || *e) return -1;
  *nic_p = 1;
  links[0] = 2 * b + 1;
  return 1;
}

int sim_fabric_parse_target(const sim_fabric_t *f, const char *text, int links[2], int *nic_p) {
  int n = parse_name(f, text, links, nic_p);
  if (n < 0) return -1;
  char want[128];
  if (n == 1) {
    sim_fabric_link_name(f, links[0], want, sizeof want);
  } else if (*nic_p) {
    sim_fabric_link_name(f, links[0], want, sizeof want);
    *strstr(want, "->") = '\0';
  } else {
    sim_fabric_link_t in;
    sim_fabric_link_info(f, links[0], &in);
    snprintf(want, sizeof want, "leaf%d-spine%d", in.leaf, in.spine);
  }
  return strcmp(want, text) == 0 ? n : -1;
}

int sim_fabric_link_find(const sim_fabric_t *f, const char *name) {
  int links[2], nic;
  return name && sim_fabric_parse_target(f, name, links, &nic) == 1 ? links[0] : -1;
}
