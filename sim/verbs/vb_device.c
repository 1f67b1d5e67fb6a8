/* vb_device.c: the simulated node's devices (mlx5_0..mlx5_<N-1>, N from the fabric), the registry
 * of open contexts, and the device, port, GID and P_Key queries (vb_context.c opens a context).
 *
 * Each context is a struct verbs_context with the extended-ABI marker, so verbs.h's inline
 * ibv_query_port reaches the extended query_port op and its ibv_post_send/ibv_poll_cq reach ours.
 * Each device's ibdev_path names its place in a sysfs-shaped tree (vb_sysfs.c). A port has a
 * one-entry GID table: the RoCEv2 IPv4-mapped GID of sim_fabric_gid (NCCL's default
 * GID scan reads sysfs gid_attrs, which does not exist here; with one entry, index 0 is right). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <endian.h>

#include "vb_internal.h"

#undef ibv_query_port
#undef ibv_get_device_list

#define VB_MAX_DEVS 64
static vb_dev_t *devs[VB_MAX_DEVS + 1];
static int ndevs = -1;
static pthread_mutex_t devs_lock = PTHREAD_MUTEX_INITIALIZER;

vb_dev_t *vb_dev(struct ibv_device *d) {
  vb_dev_t *v = (vb_dev_t *)d;
  return d && v->magic == VB_DEV_MAGIC ? v : NULL;
}

VB_API struct ibv_device **ibv_get_device_list(int *num_devices) {
  pthread_mutex_lock(&devs_lock);
  if (ndevs < 0) {
    ndevs = 0;
    if (vb_net_init(NULL, 0) == 0) {
      int n = vb_net_nics();
      for (int i = 0; i < n && i < VB_MAX_DEVS; i++) {
        vb_dev_t *d = calloc(1, sizeof *d);
        if (!d) break;
        d->magic = VB_DEV_MAGIC;
        d->node = vb_settings()->node;
        d->nic = i;
        d->dev.node_type = IBV_NODE_CA;
        d->dev.transport_type = IBV_TRANSPORT_IB;
        snprintf(d->dev.name, sizeof d->dev.name, "mlx5_%d", i);
        snprintf(d->dev.dev_name, sizeof d->dev.dev_name, "uverbs%d", i);
        snprintf(d->dev.dev_path, sizeof d->dev.dev_path, "/sys/class/infiniband_verbs/uverbs%d",
                 i);
        snprintf(d->dev.ibdev_path, sizeof d->dev.ibdev_path, "/sys/class/infiniband/mlx5_%d", i);
        devs[ndevs++] = d;
      }
      /* their place in the node's PCI tree, in a sysfs-shaped tree (vb_sysfs.c) */
      static char paths[VB_SYSFS_NICS][VB_SYSFS_PATH];
      if (ndevs > 0 && vb_sysfs_paths(ndevs, paths) == 0)
        for (int i = 0; i < ndevs; i++)
          snprintf(devs[i]->dev.ibdev_path, sizeof devs[i]->dev.ibdev_path, "%s", paths[i]);
    }
  }
  int n = ndevs;
  pthread_mutex_unlock(&devs_lock);
  struct ibv_device **list = calloc((size_t)n + 1, sizeof *list);
  if (!list) {
    errno = ENOMEM;
    return NULL;
  }
  for (int i = 0; i < n; i++) list[i] = &devs[i]->dev;
  if (num_devices) *num_devices = n;
  return list;
}

VB_API void ibv_free_device_list(struct ibv_device **list) { free(list); }

VB_API const char *ibv_get_device_name(struct ibv_device *device) {
  return device ? device->name : NULL;
}

static uint64_t guid_of(const vb_dev_t *d) {
  return 0x0002c90300000000ull | (uint64_t)d->node << 16 | (uint64_t)d->nic << 4;
}

VB_API __be64 ibv_get_device_guid(struct ibv_device *device) {
  vb_dev_t *d = vb_dev(device);
  return d ? htobe64(guid_of(d)) : 0;
}

VB_API int ibv_get_device_index(struct ibv_device *device) {
  vb_dev_t *d = vb_dev(device);
  return d ? d->nic : -1;
}

/* The process's open contexts, for ncclsimVerbsQpCarriers (a failover layer's shadow may live on
 * another device of the process). */
#define VB_MAX_CTXS 64
static vb_ctx_t *open_ctxs[VB_MAX_CTXS];
static int nopen;
static pthread_mutex_t open_lock = PTHREAD_MUTEX_INITIALIZER;

int vb_ctx_each(int (*fn)(vb_ctx_t *, void *), void *arg) {
  int r = 0;
  pthread_mutex_lock(&open_lock);
  for (int i = 0; i < nopen && !r; i++) r = fn(open_ctxs[i], arg);
  pthread_mutex_unlock(&open_lock);
  return r;
}

void vb_ctx_register(vb_ctx_t *ctx) {
  pthread_mutex_lock(&open_lock);
  if (nopen < VB_MAX_CTXS)
    open_ctxs[nopen++] = ctx; /* beyond: not seen as a carrier, nothing else */
  pthread_mutex_unlock(&open_lock);
}

void vb_ctx_unregister(vb_ctx_t *ctx) {
  pthread_mutex_lock(&open_lock);
  for (int i = 0; i < nopen; i++)
    if (open_ctxs[i] == ctx) {
      open_ctxs[i] = open_ctxs[--nopen];
      break;
    }
  pthread_mutex_unlock(&open_lock);
}

VB_API int ibv_query_device(struct ibv_context *c, struct ibv_device_attr *a) {
  vb_ctx_t *ctx = vb_ctx(c);
  memset(a, 0, sizeof *a);
  snprintf(a->fw_ver, sizeof a->fw_ver, "28.39.1002");
  a->node_guid = htobe64(guid_of(ctx->dev));
  a->sys_image_guid = htobe64(guid_of(ctx->dev));
  a->max_mr_size = ~0ull;
  a->page_size_cap = 0xfffff000;
  a->vendor_id = 0x02c9;
  a->vendor_part_id = 4129; /* ConnectX-7 */
  a->hw_ver = 0;
  a->max_qp = 1 << 17;
  a->max_qp_wr = 8192;
  a->device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_PORT_ACTIVE_EVENT |
                        IBV_DEVICE_SYS_IMAGE_GUID | IBV_DEVICE_CHANGE_PHY_PORT;
  a->max_sge = VB_MAX_SGE;
  a->max_sge_rd = VB_MAX_SGE;
  a->max_cq = 1 << 16;
  a->max_cqe = 1 << 22;
  a->max_mr = 1 << 20;
  a->max_pd = 1 << 16;
  a->max_qp_rd_atom = 16;
  a->max_qp_init_rd_atom = 16;
  a->max_res_rd_atom = 16 << 17;
  a->atomic_cap = IBV_ATOMIC_NONE;
  a->max_pkeys = 1;
  a->local_ca_ack_delay = 16;
  a->phys_port_cnt = (uint8_t)vb_net_nic_ports(ctx->dev->nic);
  return 0;
}

/* The IB speed and width whose product is the port's line rate (4X preferred). */
static void speed_width(double gbps, uint8_t *speed_p, uint8_t *width_p) {
  /* active_speed codes with their nominal lane rates: SDR .. NDR */
  static const struct {
    uint8_t code;
    double lane;
  } speeds[] = {{1, 2.5}, {2, 5}, {4, 10}, {16, 14}, {32, 25}, {64, 50}, {128, 100}};
  static const struct {
    uint8_t code;
    int lanes;
  } widths[] = {{2, 4}, {1, 1}, {16, 2}, {4, 8}, {8, 12}};
  double best = 1e30;
  for (size_t w = 0; w < sizeof widths / sizeof widths[0]; w++)
    for (size_t s = 0; s < sizeof speeds / sizeof speeds[0]; s++) {
      double err = gbps - speeds[s].lane * widths[w].lanes;
      err = err < 0 ? -err : err;
      if (err < best - 1e-9) {
        best = err;
        *speed_p = speeds[s].code;
        *width_p = widths[w].code;
      }
    }
}

static int fill_port(vb_ctx_t *ctx, uint8_t port, struct ibv_port_attr *a) {
  if (port < 1 || port > vb_net_nic_ports(ctx->dev->nic)) return EINVAL;
  memset(a, 0, sizeof *a);
  int up = vb_net_port_up(ctx->dev->node, ctx->dev->nic, port);
  a->state = up ? IBV_PORT_ACTIVE : IBV_PORT_DOWN;
  a->max_mtu = IBV_MTU_4096;
  a->active_mtu = IBV_MTU_4096;
  a->gid_tbl_len = 1;
  a->port_cap_flags = IBV_PORT_CM_SUP;
  a->max_msg_sz = 1u << 30;
  a->pkey_tbl_len = 1;
  a->max_vl_num = 4;
  a->phys_state = up ? 5 : 3; /* LinkUp, Disabled */
  speed_width(vb_net_port_gbps(), &a->active_speed, &a->active_width);
  if (vb_net_is_ib()) {
    a->link_layer = IBV_LINK_LAYER_INFINIBAND;
    a->lid = vb_net_lid(ctx->dev->node, ctx->dev->nic, port);
    a->sm_lid = vb_net_sm_lid(ctx->dev->node, ctx->dev->nic, port);
    a->lmc = 0; /* one LID per port: one path per destination */
    a->port_cap_flags |= IBV_PORT_SM;
  } else {
    a->link_layer = IBV_LINK_LAYER_ETHERNET;
    a->port_cap_flags |= IBV_PORT_IP_BASED_GIDS;
  }
  return 0;
}

int vb_query_port_ext(struct ibv_context *c, uint8_t port, struct ibv_port_attr *out, size_t len) {
  struct ibv_port_attr a;
  int rc = fill_port(vb_ctx(c), port, &a);
  if (rc) return rc;
  memcpy(out, &a, len < sizeof a ? len : sizeof a);
  return 0;
}

VB_API int ibv_query_port(struct ibv_context *c, uint8_t port, struct _compat_ibv_port_attr *out) {
  return fill_port(vb_ctx(c), port, (struct ibv_port_attr *)out);
}

VB_API int ibv_query_gid(struct ibv_context *c, uint8_t port, int index, union ibv_gid *gid) {
  vb_ctx_t *ctx = vb_ctx(c);
  if (port < 1 || port > vb_net_nic_ports(ctx->dev->nic) || index != 0) return EINVAL;
  vb_net_gid(ctx->dev->node, ctx->dev->nic, port, gid->raw);
  return 0;
}

VB_API int ibv_query_pkey(struct ibv_context *c, uint8_t port, int index, __be16 *pkey) {
  if (port < 1 || port > vb_net_nic_ports(vb_ctx(c)->dev->nic) || index != 0) return EINVAL;
  *pkey = htobe16(0xffff);
  return 0;
}

VB_API int ibv_get_pkey_index(struct ibv_context *c, uint8_t port, __be16 pkey) {
  if (port < 1 || port > vb_net_nic_ports(vb_ctx(c)->dev->nic)) return -EINVAL;
  return (be16toh(pkey) & 0x7fff) == 0x7fff ? 0 : -ENOENT;
}

VB_API int _ibv_query_gid_ex(struct ibv_context *c, uint32_t port, uint32_t index,
                             struct ibv_gid_entry *entry, uint32_t flags, size_t entry_size) {
  if (flags || entry_size < sizeof *entry) return EINVAL;
  union ibv_gid gid;
  int rc = ibv_query_gid(c, (uint8_t)port, (int)index, &gid);
  if (rc) return rc == EINVAL && index != 0 ? ENODATA : rc;
  memset(entry, 0, entry_size);
  entry->gid = gid;
  entry->gid_index = index;
  entry->port_num = port;
  entry->gid_type = vb_net_is_ib() ? IBV_GID_TYPE_IB : IBV_GID_TYPE_ROCE_V2;
  return 0;
}
