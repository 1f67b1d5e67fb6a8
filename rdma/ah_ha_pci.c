/* ah_ha_pci.c: a device's PCI path and NUMA node from sysfs (ah_ha_pci.h), and how near two devices
 * are. The key choice: "the same PCIe switch" is read from the paths alone — two devices whose
 * paths share a bridge below the root port — so it needs no PCI class or vendor file, and a
 * flat path (a VM, a device on a root port) simply shares no switch. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ah_ha_pci.h"

/* The number of leading '/'-separated components a and b share. */
static int common_components(const char *a, const char *b) {
  int n = 0;
  for (;;) {
    size_t la = strcspn(a, "/"), lb = strcspn(b, "/");
    if (la == 0 || la != lb || strncmp(a, b, la) != 0) return n;
    n++;
    if (!a[la] || !b[lb]) return n;
    a += la + 1;
    b += lb + 1;
  }
}

int ah_ha_pci_near(const ah_ha_pci_t *a, const ah_ha_pci_t *b) {
  /* components: the root complex (pciDDDD:BB), its root port, then bridges: three shared are a
   * bridge below the root port, the upstream port of a switch both hang off */
  if (a->pci[0] && b->pci[0] && common_components(a->pci, b->pci) >= 3) return AH_HA_PCI_SWITCH;
  if (a->numa >= 0 && a->numa == b->numa) return AH_HA_PCI_NUMA;
  return AH_HA_PCI_FAR;
}

int ah_ha_pci_read(const char *ibdev_path, ah_ha_pci_t *where_p) {
  ah_ha_pci_t w;
  memset(&w, 0, sizeof w);
  w.numa = -1;
  char p[PATH_MAX], real[PATH_MAX];
  if (ibdev_path && ibdev_path[0] &&
      snprintf(p, sizeof p, "%s/device/numa_node", ibdev_path) < (int)sizeof p) {
    FILE *f = fopen(p, "re");
    int v;
    if (f) {
      if (fscanf(f, "%d", &v) == 1 && v >= 0) w.numa = v;
      fclose(f);
    }
    p[strlen(p) - strlen("/numa_node")] = '\0';
    if (realpath(p, real)) {
      const char *below = strstr(real, "/devices/");
      below = below ? below + strlen("/devices/") : real + (real[0] == '/');
      if (strlen(below) < sizeof w.pci) snprintf(w.pci, sizeof w.pci, "%s", below);
    }
  }
  *where_p = w;
  return w.pci[0] ? 0 : -1;
}
