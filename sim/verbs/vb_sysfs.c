/* vb_sysfs.c: where the simulated node's NICs sit in its PCI tree, shown as a real host's sysfs shows
 * it. Each device's ibdev_path names <root>/class/infiniband/mlx5_K, whose `device` link resolves
 * to <root>/devices/pci0000:BB/<root port>/<switch up>/<switch down>/<NIC> holding `numa_node`, so
 * a reader of a real host's sysfs (autoha's backup-NIC choice, rdma/ah_ha_pci.c) reads sim/'s
 * topology with the same code. The key choice: the tree is named by a hash of its layout and built
 * idempotently by every process (mkdir, symlink, rename), so the processes of a job, and jobs of the
 * same layout, share it without a lock and nothing has to remove it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "vb_internal.h"

#define SW_MAX 31 /* a switch per root port, device numbers 1..31 */
#define NUMA_MAX 8

/* Fills sw[0..n) and numa[0..n) from NCCLSIM_VERBS_PCI ("SWITCH:NUMA,...", one item per NIC), or
 * the default: NICs 2k and 2k+1 share switch k, the first half on NUMA node 0, the rest on 1. A
 * bad value is reported once and the default kept. */
static void layout(int n, int *sw, int *numa) {
  for (int k = 0; k < n; k++) {
    sw[k] = k / 2;
    numa[k] = n >= 2 ? k * 2 / n : 0;
  }
  const char *s = vb_settings()->pci;
  if (!s[0]) return;
  int tsw[VB_SYSFS_NICS], tnuma[VB_SYSFS_NICS], swnuma[SW_MAX];
  for (int i = 0; i < SW_MAX; i++) swnuma[i] = -1;
  const char *p = s;
  int k = 0, ok = 1;
  while (ok && *p) {
    char *end;
    long a = strtol(p, &end, 10), b = -1;
    if (end == p || *end != ':') ok = 0;
    else {
      p = end + 1;
      b = strtol(p, &end, 10);
      if (end == p || (*end && *end != ',')) ok = 0;
    }
    if (ok && (a < 0 || a >= SW_MAX || b < 0 || b >= NUMA_MAX || k >= n ||
               (swnuma[a] >= 0 && swnuma[a] != b)))
      ok = 0;
    if (!ok) break;
    swnuma[a] = (int)b;
    tsw[k] = (int)a;
    tnuma[k++] = (int)b;
    p = *end ? end + 1 : end;
  }
  if (!ok || k != n) {
    vb_log(
        "invalid value for NCCLSIM_VERBS_PCI: '%s' (expected one SWITCH:NUMA per NIC, %d "
        "here, switch 0-%d, NUMA node 0-%d, one NUMA node per switch); using the default",
        s, n, SW_MAX - 1, NUMA_MAX - 1);
    return;
  }
  memcpy(sw, tsw, sizeof(int) * (size_t)n);
  memcpy(numa, tnuma, sizeof(int) * (size_t)n);
}

/* mkdir -p of dir (which it changes and restores). Returns 0 or -1. */
static int mkdirs(char *dir) {
  for (char *q = dir + 1;; q++) {
    if (*q != '/' && *q) continue;
    char c = *q;
    *q = '\0';
    int rc = mkdir(dir, 0755);
    *q = c;
    if (rc != 0 && errno != EEXIST) return -1;
    if (!c) return 0;
  }
}

int vb_sysfs_paths(int n, char paths[][VB_SYSFS_PATH]) {
  if (n <= 0 || n > VB_SYSFS_NICS) return -1;
  int sw[VB_SYSFS_NICS], numa[VB_SYSFS_NICS], slot[VB_SYSFS_NICS], used[SW_MAX] = {0};
  layout(n, sw, numa);
  /* the layout's name: FNV-1a over it */
  uint64_t h = 1469598103934665603ull;
  for (int k = 0; k < n; k++) {
    slot[k] = used[sw[k]]++;
    uint64_t v = (uint64_t)sw[k] << 8 | (uint64_t)numa[k];
    for (int b = 0; b < 2; b++) h = (h ^ ((v >> (8 * b)) & 0xff)) * 1099511628211ull;
  }
  const char *tmp = getenv("TMPDIR");
  char root[160];
  snprintf(root, sizeof root, "%s/ncclsim-%u-sysfs/%d-%016llx", tmp && *tmp ? tmp : "/tmp",
           (unsigned)getuid(), n, (unsigned long long)h);
  for (int k = 0; k < n; k++) {
    int rb = numa[k] * 0x20, ub = (0x10 + sw[k] * 8) & 0xff;
    char pci[160], dir[400], file[420], tmpf[440];
    snprintf(pci, sizeof pci,
             "pci0000:%02x/0000:%02x:%02x.0/0000:%02x:00.0/0000:%02x:%02x.0/0000:%02x:00.0", rb, rb,
             sw[k] + 1, ub, (ub + 1) & 0xff, slot[k], (ub + 2 + slot[k]) & 0xff);
    snprintf(dir, sizeof dir, "%s/devices/%s", root, pci);
    if (mkdirs(dir) != 0) goto fail;
    /* numa_node: written whole under another name, then renamed over (readers see all or none) */
    snprintf(file, sizeof file, "%s/numa_node", dir);
    snprintf(tmpf, sizeof tmpf, "%s.%d", file, (int)getpid());
    FILE *f = fopen(tmpf, "w");
    if (!f) goto fail;
    int wrote = fprintf(f, "%d\n", numa[k]) > 0;
    if (fclose(f) != 0 || !wrote || rename(tmpf, file) != 0) {
      unlink(tmpf);
      goto fail;
    }
    snprintf(paths[k], VB_SYSFS_PATH, "%s/class/infiniband/mlx5_%d", root, k);
    snprintf(dir, sizeof dir, "%s", paths[k]);
    if (mkdirs(dir) != 0) goto fail;
    snprintf(file, sizeof file, "%s/device", paths[k]);
    snprintf(tmpf, sizeof tmpf, "../../../devices/%s", pci);
    if (symlink(tmpf, file) != 0 && errno != EEXIST) goto fail;
  }
  return 0;
fail:
  vb_log("cannot build the NICs' sysfs tree under %s: %s; devices name /sys/class/infiniband", root,
         strerror(errno));
  return -1;
}
