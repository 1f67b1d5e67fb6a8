/* Loading libibverbs as NCCL's net_ib does (src/misc/ibvsymbols.cc): dlopen of
 * $NCCL_IBVERBS_LIB, else libibverbs.so.1, then every required verb by dlvsym(…, "IBVERBS_1.1");
 * one miss disables IB for the process. Then the devices NCCL_IB_HCA selects, each opened once with
 * its first active port and the GID NCCL would pick. */
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim_ib_verbs.h"
#include "sim_internal.h"

#define SIM_IB_MAX_DEVS 64

static pthread_once_t once = PTHREAD_ONCE_INIT;
static sim_verbs_table_t table;
static int table_ok;
static sim_ib_dev_t devs[SIM_IB_MAX_DEVS];
static int ndevs;

/* NCCL_IB_HCA: optional '^' (exclude) then optional '=' (exact), comma-separated name[:port];
 * names match as prefixes unless exact. */
static int hca_selected(const char *spec, const char *name, int port) {
  if (!spec || !*spec) return 1;
  int exclude = 0, exact = 0;
  if (*spec == '^') exclude = 1, spec++;
  if (*spec == '=') exact = 1, spec++;
  char buf[512];
  snprintf(buf, sizeof buf, "%s", spec);
  int hit = 0;
  for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok && !hit;
       tok = strtok_r(NULL, ",", &save)) {
    char *colon = strchr(tok, ':');
    int want_port = -1;
    if (colon) *colon = '\0', want_port = atoi(colon + 1);
    int match = exact ? strcmp(tok, name) == 0 : strncmp(tok, name, strlen(tok)) == 0;
    hit = match && (want_port < 0 || want_port == port);
  }
  return exclude ? !hit : hit;
}

/* The GID NCCL 2.21+ picks on RoCE by default: the IPv4-mapped one (its RoCEv2 GID). */
static int pick_gid(sim_ib_dev_t *d, int tbl_len) {
  int forced = sim_env_int("NCCL_IB_GID_INDEX", -1, -1, 255);
  if (forced >= 0 || d->link_layer != IBV_LINK_LAYER_ETHERNET) {
    d->gid_index = forced >= 0 ? forced : 0;
    return table.query_gid(d->ctx, (uint8_t)d->port, d->gid_index, &d->gid);
  }
  for (int i = 0; i < tbl_len; i++) {
    union ibv_gid g;
    if (table.query_gid(d->ctx, (uint8_t)d->port, i, &g) != 0) continue;
    static const uint8_t v4map[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (memcmp(g.raw, v4map, 12) == 0) {
      d->gid_index = i;
      d->gid = g;
      return 0;
    }
  }
  return -1;
}

static void open_devices(void) {
  int n = 0;
  struct ibv_device **list = table.get_device_list(&n);
  if (!list) return;
  const char *hca = getenv("NCCL_IB_HCA");
  for (int i = 0; i < n && ndevs < SIM_IB_MAX_DEVS; i++) {
    const char *name = table.get_device_name(list[i]);
    struct ibv_context *ctx = table.open_device(list[i]);
    if (!ctx) continue;
    sim_ib_dev_t *d = &devs[ndevs];
    memset(d, 0, sizeof *d);
    snprintf(d->name, sizeof d->name, "%s", name ? name : "?");
    d->ctx = ctx;
    for (int p = 1; p <= 2 && !d->port; p++) {
      struct ibv_port_attr pa;
      memset(&pa, 0, sizeof pa);
      if (table.query_port(ctx, (uint8_t)p, &pa) != 0) break;
      if (pa.state != IBV_PORT_ACTIVE || !hca_selected(hca, d->name, p)) continue;
      d->port = p;
      d->link_layer = pa.link_layer;
      d->lid = pa.lid;
      if (pick_gid(d, pa.gid_tbl_len) != 0) d->port = 0;
    }
    if (d->port && (d->pd = table.alloc_pd(ctx)) != NULL) {
      ndevs++;
      continue;
    }
    table.close_device(ctx);
  }
  table.free_device_list(list);
}

static void load(void) {
  if (sim_env_int("NCCL_IB_DISABLE", 0, INT_MIN, INT_MAX) == 1) return;
  const char *lib = getenv("NCCL_IBVERBS_LIB");
  char err[300];
  if (sim_verbs_table_load(lib && *lib ? lib : "libibverbs.so.1", &table, err, sizeof err) != 0) {
    sim_log_info("NET/IB: %s; inter-node traffic is modelled without verbs", err);
    return;
  }
  open_devices();
  table_ok = ndevs > 0;
  if (!table_ok)
    sim_log_info("NET/IB: no active device; inter-node traffic is modelled without verbs");
}

const sim_verbs_table_t *sim_ib_verbs(void) {
  pthread_once(&once, load);
  return table_ok ? &table : NULL;
}

sim_ib_dev_t *sim_ib_devices(int *n_p) {
  pthread_once(&once, load);
  *n_p = table_ok ? ndevs : 0;
  return devs;
}
