/* test_ha_nic.c: unit tests of AUTOHA_HA=nic's pure logic (rdma/ah_ha_nic.c, rdma/ah_ha_pci.c):
 * which NIC backs which (same PCIe switch, else same NUMA node, else any, among NCCL_IB_HCA's
 * devices; the neighbour i^1 within the nearest group), where a device sits, read from a tree
 * shaped as sysfs, and the key translation table that turns a memory key of one key space into the
 * key of the same memory on the backup NIC. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ah_check.h"
#include "ah_ha_nic.h"

static const char *const eight[] = {"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3",
                                    "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7"};

START_TEST(backup_is_the_neighbour) {
  for (int i = 0; i < 8; i++)
    ck_assert_int_eq(ah_ha_nic_backup(eight, NULL, 8, eight[i], NULL, NULL), i ^ 1);
  ck_assert_int_eq(ah_ha_nic_backup(eight, NULL, 8, "mlx5_4", "", NULL), 5);
  /* an odd count: the last is backed by the first */
  ck_assert_int_eq(ah_ha_nic_backup(eight, NULL, 3, "mlx5_2", NULL, NULL), 0);
  ck_assert_int_eq(ah_ha_nic_backup(eight, NULL, 3, "mlx5_1", NULL, NULL), 0);
  /* one NIC, or a name that is not there: no backup */
  ck_assert_int_eq(ah_ha_nic_backup(eight, NULL, 1, "mlx5_0", NULL, NULL), -1);
  ck_assert_int_eq(ah_ha_nic_backup(eight, NULL, 8, "mlx5_9", NULL, NULL), -1);
  ck_assert_int_eq(ah_ha_nic_backup(NULL, NULL, 0, "mlx5_0", NULL, NULL), -1);
}
END_TEST

START_TEST(backup_within_nccl_ib_hca) {
  /* the pairs are formed among the devices NCCL may use, in the order given */
  ck_assert_int_eq(ah_ha_nic_backup(eight, NULL, 8, "mlx5_0", "mlx5_0,mlx5_2,mlx5_4,mlx5_6", NULL),
                   2);
  ck_assert_int_eq(
      ah_ha_nic_backup(eight, NULL, 8, "mlx5_6", "mlx5_0:1,mlx5_2:1,mlx5_4:1,mlx5_6:1", NULL), 4);
  /* prefix match (NCCL's), and exact with '=' */
  ck_assert_int_eq(ah_ha_nic_backup(eight, NULL, 8, "mlx5_3", "mlx5", NULL), 2);
  ck_assert_int_eq(ah_ha_nic_backup(eight, NULL, 8, "mlx5_1", "=mlx5_1,mlx5_5", NULL), 5);
  ck_assert_int_eq(ah_ha_nic_backup(eight, NULL, 8, "mlx5_1", "=mlx5_1,mlx5", NULL),
                   -1); /* exact: mlx5 names none */
  /* exclusion: without mlx5_1, mlx5_0 pairs with mlx5_2 */
  ck_assert_int_eq(ah_ha_nic_backup(eight, NULL, 8, "mlx5_0", "^mlx5_1", NULL), 2);
  ck_assert_int_eq(ah_ha_nic_backup(eight, NULL, 8, "mlx5_7", "^mlx5_1", NULL),
                   0); /* 7 candidates: the last wraps */
  /* a primary outside the list is backed as if appended to it */
  ck_assert_int_eq(ah_ha_nic_backup(eight, NULL, 8, "mlx5_5", "mlx5_0,mlx5_2", NULL), 0);
  ck_assert_int_eq(ah_ha_nic_backup(eight, NULL, 8, "mlx5_5", "mlx5_0,mlx5_2,mlx5_4", NULL), 4);
}
END_TEST

/* A device at `sw` (its PCIe switch, -1: straight on a root port) of root complex `rc`, NUMA `numa`. */
static ah_ha_pci_t at(int rc, int sw, int fn, int numa) {
  ah_ha_pci_t w;
  memset(&w, 0, sizeof w);
  if (sw < 0)
    snprintf(w.pci, sizeof w.pci, "pci0000:%02x/0000:%02x:01.0/0000:%02x:00.%d", rc, rc, rc + 1,
             fn);
  else
    snprintf(w.pci, sizeof w.pci,
             "pci0000:%02x/0000:%02x:%02x.0/0000:%02x:00.0/0000:%02x:%02x.0/0000:%02x:00.0", rc, rc,
             sw + 1, 0x10 * sw + 1, 0x10 * sw + 2, fn, 0x10 * sw + 3 + fn);
  w.numa = numa;
  return w;
}

START_TEST(backup_same_switch_first) {
  /* 8 NICs, switch k holds mlx5_k and mlx5_(k+4); switches 0, 1 on NUMA 0, 2, 3 on NUMA 1 */
  ah_ha_pci_t w[8];
  for (int i = 0; i < 8; i++) w[i] = at((i % 4) < 2 ? 0 : 0x80, i % 4, i / 4, (i % 4) < 2 ? 0 : 1);
  for (int i = 0; i < 8; i++) {
    int near = -1;
    ck_assert_int_eq(ah_ha_nic_backup(eight, w, 8, eight[i], NULL, &near), (i + 4) % 8);
    ck_assert_int_eq(near, AH_HA_PCI_SWITCH);
  }
  /* the switch mate outside NCCL_IB_HCA: the same NUMA node's next best, by the list's order */
  int near = -1;
  ck_assert_int_eq(ah_ha_nic_backup(eight, w, 8, "mlx5_0", "^mlx5_4", &near), 1);
  ck_assert_int_eq(near, AH_HA_PCI_NUMA);
  /* a switch mate wins over a NUMA neighbour listed before it */
  ah_ha_pci_t m[3] = {at(0, 0, 0, 0), at(0, 1, 0, 0), at(0, 0, 1, 0)};
  ck_assert_int_eq(ah_ha_nic_backup(eight, m, 3, "mlx5_0", NULL, &near), 2);
  ck_assert_int_eq(near, AH_HA_PCI_SWITCH);
  ck_assert_int_eq(ah_ha_nic_backup(eight, m, 3, "mlx5_2", NULL, &near), 0);
  /* mlx5_1 has no switch mate: its NUMA node's group {0, 1, 2}, position 1 -> 0 */
  ck_assert_int_eq(ah_ha_nic_backup(eight, m, 3, "mlx5_1", NULL, &near), 0);
  ck_assert_int_eq(near, AH_HA_PCI_NUMA);
}
END_TEST

START_TEST(backup_same_numa_then_any) {
  /* each NIC alone on its switch (single-port NICs, one per switch), NUMA nodes interleaved */
  ah_ha_pci_t w[8];
  for (int i = 0; i < 8; i++) w[i] = at(i % 2 ? 0x80 : 0, i, 0, i % 2);
  int near = -1;
  /* NUMA 0 holds 0, 2, 4, 6: pairs (0, 2), (4, 6) */
  ck_assert_int_eq(ah_ha_nic_backup(eight, w, 8, "mlx5_0", NULL, &near), 2);
  ck_assert_int_eq(near, AH_HA_PCI_NUMA);
  ck_assert_int_eq(ah_ha_nic_backup(eight, w, 8, "mlx5_6", NULL, NULL), 4);
  ck_assert_int_eq(ah_ha_nic_backup(eight, w, 8, "mlx5_3", NULL, NULL), 1);
  ck_assert_int_eq(ah_ha_nic_backup(eight, w, 8, "mlx5_7", NULL, NULL), 5);
  /* alone on its NUMA node among NCCL's devices: any other, by the list's order (i^1) */
  ck_assert_int_eq(ah_ha_nic_backup(eight, w, 8, "mlx5_0", "mlx5_0,mlx5_1,mlx5_3", &near), 1);
  ck_assert_int_eq(near, AH_HA_PCI_FAR);
  /* two functions straight on one root port share no switch: NUMA, not switch */
  ah_ha_pci_t f[3] = {at(0, -1, 0, 0), at(0, 3, 0, 1), at(0, -1, 1, 0)};
  ck_assert_int_eq(ah_ha_pci_near(&f[0], &f[2]), AH_HA_PCI_NUMA);
  ck_assert_int_eq(ah_ha_nic_backup(eight, f, 3, "mlx5_0", NULL, &near), 2);
  ck_assert_int_eq(near, AH_HA_PCI_NUMA);
  /* nothing known (sysfs absent): the list's order, as with no topology at all */
  ah_ha_pci_t u[8];
  for (int i = 0; i < 8; i++) {
    memset(&u[i], 0, sizeof u[i]);
    u[i].numa = -1;
  }
  for (int i = 0; i < 8; i++) {
    ck_assert_int_eq(ah_ha_nic_backup(eight, u, 8, eight[i], NULL, &near), i ^ 1);
    ck_assert_int_eq(near, AH_HA_PCI_FAR);
  }
  /* two unknown NUMA nodes (-1) are not "the same" */
  ck_assert_int_eq(ah_ha_pci_near(&u[0], &u[1]), AH_HA_PCI_FAR);
}
END_TEST

START_TEST(backup_never_itself_and_deterministic) {
  /* three on one switch: 0 <-> 1, the odd one (2) by the first; the same answer every time */
  ah_ha_pci_t w[3] = {at(0, 0, 0, 0), at(0, 0, 1, 0), at(0, 0, 2, 0)};
  for (int k = 0; k < 3; k++) {
    ck_assert_int_eq(ah_ha_nic_backup(eight, w, 3, "mlx5_0", NULL, NULL), 1);
    ck_assert_int_eq(ah_ha_nic_backup(eight, w, 3, "mlx5_1", NULL, NULL), 0);
    ck_assert_int_eq(ah_ha_nic_backup(eight, w, 3, "mlx5_2", NULL, NULL), 0);
  }
  /* the other device has the primary's name: nothing, never itself; near_p untouched */
  const char *const twice[] = {"mlx5_0", "mlx5_0"};
  int near = 7;
  ck_assert_int_eq(ah_ha_nic_backup(twice, w, 2, "mlx5_0", NULL, &near), -1);
  ck_assert_int_eq(near, 7);
  /* NCCL_IB_HCA leaves only the primary */
  ck_assert_int_eq(ah_ha_nic_backup(eight, w, 3, "mlx5_0", "=mlx5_0", &near), -1);
  ck_assert_int_eq(near, 7);
  /* a candidate with no place known is FAR: the known switch mate wins */
  ah_ha_pci_t v[3] = {at(0, 0, 0, 0), {"", -1}, at(0, 0, 1, 0)};
  ck_assert_int_eq(ah_ha_nic_backup(eight, v, 3, "mlx5_0", NULL, &near), 2);
  ck_assert_int_eq(near, AH_HA_PCI_SWITCH);
  ck_assert_int_eq(ah_ha_nic_backup(eight, v, 3, "mlx5_1", NULL, &near), 0);
  ck_assert_int_eq(near, AH_HA_PCI_FAR);
}
END_TEST

/* Writes `text` to path. */
static void put(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fputs(text, f);
  fclose(f);
}

START_TEST(pci_read_from_a_sysfs_tree) {
  char root[] = "/tmp/test_ha_nic_XXXXXX", p[512], q[512];
  ck_assert_ptr_nonnull(mkdtemp(root));
  const char *dev = "devices/pci0000:3a/0000:3a:02.0/0000:3b:00.0/0000:3c:04.0/0000:3d:00.0";
  const char *dev2 = "devices/pci0000:3a/0000:3a:02.0/0000:3b:00.0/0000:3c:08.0/0000:3e:00.0";
  const char *parts[] = {"devices",
                         "devices/pci0000:3a",
                         "devices/pci0000:3a/0000:3a:02.0",
                         "devices/pci0000:3a/0000:3a:02.0/0000:3b:00.0",
                         "devices/pci0000:3a/0000:3a:02.0/0000:3b:00.0/0000:3c:04.0",
                         dev,
                         "devices/pci0000:3a/0000:3a:02.0/0000:3b:00.0/0000:3c:08.0",
                         dev2,
                         "class",
                         "class/infiniband",
                         "class/infiniband/mlx5_0",
                         "class/infiniband/mlx5_1",
                         "class/infiniband/mlx5_2"};
  for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
    snprintf(p, sizeof p, "%s/%s", root, parts[i]);
    ck_assert_int_eq(mkdir(p, 0755), 0);
  }
  snprintf(p, sizeof p, "%s/%s/numa_node", root, dev);
  put(p, "1\n");
  snprintf(p, sizeof p, "%s/%s/numa_node", root, dev2);
  put(p, "-1\n");
  /* relative links, as sysfs has them */
  snprintf(q, sizeof q, "../../../%s", dev);
  snprintf(p, sizeof p, "%s/class/infiniband/mlx5_0/device", root);
  ck_assert_int_eq(symlink(q, p), 0);
  snprintf(q, sizeof q, "../../../%s", dev2);
  snprintf(p, sizeof p, "%s/class/infiniband/mlx5_1/device", root);
  ck_assert_int_eq(symlink(q, p), 0);
  ah_ha_pci_t a, b, c;
  snprintf(p, sizeof p, "%s/class/infiniband/mlx5_0", root);
  ck_assert_int_eq(ah_ha_pci_read(p, &a), 0);
  ck_assert_str_eq(a.pci, dev + strlen("devices/"));
  ck_assert_int_eq(a.numa, 1);
  snprintf(p, sizeof p, "%s/class/infiniband/mlx5_1", root);
  ck_assert_int_eq(ah_ha_pci_read(p, &b), 0);
  ck_assert_int_eq(b.numa, -1); /* sysfs's "no NUMA node" */
  ck_assert_int_eq(ah_ha_pci_near(&a, &b), AH_HA_PCI_SWITCH);
  /* no device link: nothing known */
  snprintf(p, sizeof p, "%s/class/infiniband/mlx5_2", root);
  ck_assert_int_eq(ah_ha_pci_read(p, &c), -1);
  ck_assert_str_eq(c.pci, "");
  ck_assert_int_eq(c.numa, -1);
  ck_assert_int_eq(ah_ha_pci_read(NULL, &c), -1);
  ck_assert_int_eq(ah_ha_pci_read("/nonexistent/class/infiniband/mlx5_0", &c), -1);
  ck_assert_int_eq(ah_ha_pci_near(&a, &c), AH_HA_PCI_FAR);
  /* the backup choice from what was read: mlx5_0's switch mate is mlx5_1, not the unknown mlx5_2 */
  ah_ha_pci_t w[3] = {c, a, b};
  const char *const names[] = {"mlx5_2", "mlx5_0", "mlx5_1"};
  int near = -1;
  ck_assert_int_eq(ah_ha_nic_backup(names, w, 3, "mlx5_0", NULL, &near), 2);
  ck_assert_int_eq(near, AH_HA_PCI_SWITCH);
  snprintf(p, sizeof p, "rm -rf '%s'", root);
  ck_assert_int_eq(system(p), 0);
}
END_TEST

static ah_ha_keyspace_t space(int a, int b) {
  ah_ha_keyspace_t s;
  memset(&s, 0, sizeof s);
  s.b[0] = (uint8_t)a;
  s.b[15] = (uint8_t)b;
  return s;
}

START_TEST(keys_translate_per_space) {
  ah_ha_keys_t *t = ah_ha_keys_new();
  ck_assert_ptr_nonnull(t);
  ah_ha_keyspace_t a = space(1, 0), b = space(1, 1), c = space(2, 0);
  uint32_t to = 7;
  ck_assert_int_eq(ah_ha_keys_get(t, &a, 0x100, &to), -1);
  ck_assert_uint_eq(to, 7); /* a miss leaves the output alone */
  /* the same key number in two spaces (two contexts, two processes) maps apart */
  ck_assert_int_eq(ah_ha_keys_put(t, &a, 0x100, 0xa100), 0);
  ck_assert_int_eq(ah_ha_keys_put(t, &b, 0x100, 0xb100), 0);
  ck_assert_int_eq(ah_ha_keys_get(t, &a, 0x100, &to), 0);
  ck_assert_uint_eq(to, 0xa100);
  ck_assert_int_eq(ah_ha_keys_get(t, &b, 0x100, &to), 0);
  ck_assert_uint_eq(to, 0xb100);
  ck_assert_int_eq(ah_ha_keys_get(t, &c, 0x100, &to), -1);
  ck_assert_int_eq(ah_ha_keys_get(t, &a, 0x101, &to), -1);
  /* a re-registration under the same key replaces the mapping */
  ck_assert_int_eq(ah_ha_keys_put(t, &a, 0x100, 0xa200), 0);
  ck_assert_int_eq(ah_ha_keys_get(t, &a, 0x100, &to), 0);
  ck_assert_uint_eq(to, 0xa200);
  ck_assert_uint_eq(ah_ha_keys_count(t), 2);
  /* deregistration forgets one key; a second delete finds nothing */
  ck_assert_int_eq(ah_ha_keys_del(t, &a, 0x100), 1);
  ck_assert_int_eq(ah_ha_keys_del(t, &a, 0x100), 0);
  ck_assert_int_eq(ah_ha_keys_get(t, &a, 0x100, &to), -1);
  ck_assert_int_eq(ah_ha_keys_get(t, &b, 0x100, &to), 0);
  ah_ha_keys_free(t);
}
END_TEST

START_TEST(keys_many_and_by_space) {
  ah_ha_keys_t *t = ah_ha_keys_new();
  ck_assert_ptr_nonnull(t);
  ah_ha_keyspace_t s[4] = {space(1, 0), space(2, 0), space(3, 0), space(3, 1)};
  for (int k = 0; k < 4; k++)
    for (uint32_t i = 0; i < 5000; i++)
      ck_assert_int_eq(ah_ha_keys_put(t, &s[k], i << 8 | 0x5a, i * 4 + (uint32_t)k), 0);
  ck_assert_uint_eq(ah_ha_keys_count(t), 20000);
  for (int k = 0; k < 4; k++)
    for (uint32_t i = 0; i < 5000; i += 97) {
      uint32_t to = 0;
      ck_assert_int_eq(ah_ha_keys_get(t, &s[k], i << 8 | 0x5a, &to), 0);
      ck_assert_uint_eq(to, i * 4 + (uint32_t)k);
    }
  /* a peer's keys go together, nobody else's */
  ck_assert_int_eq(ah_ha_keys_del_space(t, &s[2]), 5000);
  ck_assert_uint_eq(ah_ha_keys_count(t), 15000);
  uint32_t to = 0;
  ck_assert_int_eq(ah_ha_keys_get(t, &s[2], 0x5a, &to), -1);
  ck_assert_int_eq(ah_ha_keys_get(t, &s[3], 0x5a, &to), 0);
  ck_assert_uint_eq(to, 3);
  ah_ha_keys_free(t);
  ah_ha_keys_free(NULL);
  ck_assert_uint_eq(ah_ha_keys_count(NULL), 0);
}
END_TEST

int main(void) {
  const TTest *const tests[] = {backup_is_the_neighbour,
                                backup_within_nccl_ib_hca,
                                backup_same_switch_first,
                                backup_same_numa_then_any,
                                backup_never_itself_and_deterministic,
                                pci_read_from_a_sysfs_tree,
                                keys_translate_per_space,
                                keys_many_and_by_space};
  return ah_check_main("ha_nic", (ah_check_case_t){.name = "ha_nic", .timeout = 60}, tests,
                       AH_CHECK_COUNT(tests));
}
