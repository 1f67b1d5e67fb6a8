/* ah_ha_pci.h: where an RDMA device sits in its host, as NCCL's topology sees it: its PCI path (the
 * chain of bridges from the root complex down to the device) and its NUMA node, read from the
 * sysfs directory libibverbs names for the device (ibv_device.ibdev_path), and how near two devices
 * are. Pure C (file reads only), for AUTOHA_HA=nic's choice of a backup NIC (ah_ha_nic.h). */
#ifndef AH_HA_PCI_H
#define AH_HA_PCI_H

#include <stddef.h>

/* A device's place: `pci` the resolved path of its `device` link below ".../devices/" (e.g.
 * "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:04.0/0000:05:00.0"; "" when unknown), `numa` its
 * NUMA node (-1 when unknown). */
typedef struct {
  char pci[240];
  int numa;
} ah_ha_pci_t;

/* How near two devices are: AH_HA_PCI_SWITCH when both paths are known and share a bridge below
 * their root port (a PCIe switch: traffic between them never crosses the CPU, NCCL's PIX or
 * PXB), else AH_HA_PCI_NUMA when both NUMA nodes are known and equal, else AH_HA_PCI_FAR. */
enum { AH_HA_PCI_FAR = 0, AH_HA_PCI_NUMA = 1, AH_HA_PCI_SWITCH = 2 };
int ah_ha_pci_near(const ah_ha_pci_t *a, const ah_ha_pci_t *b);

/* Fills *where_p from the sysfs directory `ibdev_path` (on a real host
 * "/sys/class/infiniband/mlx5_0"; sim/'s provider names a tree of the same shape): the target of
 * its `device` link and that directory's `numa_node`. Returns 0 when the PCI path was read, else
 * -1; either way *where_p is filled, unknown parts marked as such.
 *
 * Note that it reads the file system and allocates nothing that outlives the call; a missing or
 * unreadable entry is "unknown", never an error logged: a host without sysfs falls back to the
 * order of the device list. */
int ah_ha_pci_read(const char *ibdev_path, ah_ha_pci_t *where_p);

#endif
