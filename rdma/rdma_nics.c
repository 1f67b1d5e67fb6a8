/* rdma_nics.c: the RDMA NICs NCCL may use on this host, for the report's topology (rdma.h): the
 * devices libibverbs lists that NCCL_IB_HCA selects and that have an active port, and the line rate
 * of the first one's first active port from its active speed and width.
 *
 * Key choice: asked of the same libibverbs NCCL uses (its handle, or the library its net_ib would
 * open), not of sysfs, so the figure is the devices NCCL sees — sim/'s included — and read once per
 * process, so a report and the profile check of the same process always agree. */
#include <infiniband/verbs.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ah_ha_nic.h"
#include "rdma.h"
#include "rdma_verbs.h"

/* The data rate of one lane in Gb/s for an active_speed code (SDR .. XDR), 0 when unknown. */
static double lane_gbps(unsigned speed) {
  switch (speed) {
    case 1: return 2.5;
    case 2: return 5;
    case 4:            /* QDR */
    case 8: return 10; /* FDR10 */
    case 16: return 14;
    case 32: return 25;
    case 64: return 50;
    case 128: return 100;
    case 256: return 200;
    default: return 0;
  }
}

/* The lanes of an active_width code (1X, 4X, 8X, 12X, 2X), 0 when unknown. */
static int lanes(unsigned width) {
  switch (width) {
    case 1: return 1;
    case 2: return 4;
    case 4: return 8;
    case 8: return 12;
    case 16: return 2;
    default: return 0;
  }
}

static struct {
  struct ibv_device **(*get_device_list)(int *);
  void (*free_device_list)(struct ibv_device **);
  struct ibv_context *(*open_device)(struct ibv_device *);
  int (*close_device)(struct ibv_context *);
  int (*query_device)(struct ibv_context *, struct ibv_device_attr *);
  int (*query_port)(struct ibv_context *, uint8_t, struct ibv_port_attr *);
} v;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int nics, nic_gbps;

/* The line rate in Gb/s of ctx's first active port (0: its rate is unknown), or -1 when no port
 * is active or the device cannot be queried. */
static int first_active_gbps(struct ibv_context *ctx) {
  struct ibv_device_attr d;
  memset(&d, 0, sizeof d);
  if (v.query_device(ctx, &d) != 0) return -1;
  for (int p = 1; p <= d.phys_port_cnt; p++) {
    struct ibv_port_attr a; /* the exported query_port fills its compat prefix, which has these */
    memset(&a, 0, sizeof a);
    if (v.query_port(ctx, (uint8_t)p, &a) != 0 || a.state != IBV_PORT_ACTIVE) continue;
    double g = lane_gbps(a.active_speed) * lanes(a.active_width);
    return g > 0 ? (int)(g + 0.5) : 0;
  }
  return -1;
}

static void count(void) {
#define R(f, n) *(void **)&v.f = ah_shim_verbs_lookup(n, "IBVERBS_1.1")
  R(get_device_list, "ibv_get_device_list");
  R(free_device_list, "ibv_free_device_list");
  R(open_device, "ibv_open_device");
  R(close_device, "ibv_close_device");
  R(query_device, "ibv_query_device");
  R(query_port, "ibv_query_port");
#undef R
  if (!v.get_device_list || !v.free_device_list || !v.open_device || !v.close_device ||
      !v.query_device || !v.query_port)
    return;
  int n = 0;
  struct ibv_device **list = v.get_device_list(&n);
  if (!list) return;
  const char *hca = getenv("NCCL_IB_HCA");
  for (int i = 0; i < n; i++) {
    if (!list[i] || !ah_ha_nic_selected(hca, list[i]->name)) continue;
    struct ibv_context *ctx = v.open_device(list[i]);
    if (!ctx) continue;
    int g = first_active_gbps(ctx);
    v.close_device(ctx);
    if (g < 0) continue;
    if (nics++ == 0) nic_gbps = g;
  }
  v.free_device_list(list);
}

int ah_shim_rdma_nics(int *gbps_p) {
  int saved = errno;
  pthread_once(&once, count);
  errno = saved;
  *gbps_p = nic_gbps;
  return nics;
}
