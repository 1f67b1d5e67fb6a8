/* test_verbs_host.c: the node's NICs as the host shows them — each device's ibdev_path names a
 * sysfs-shaped directory whose `device` link resolves to its PCI path, holding `numa_node`, laid
 * out by NCCLSIM_VERBS_PCI; and a node of mixed NICs, NCCLSIM_VERBS_PORTS hiding the second port of
 * one. Runs with nic=4x400x2, bond=0, NCCLSIM_VERBS_PCI=0:0,1:0,0:0,2:1, NCCLSIM_VERBS_PORTS=2,1. */
#include <check.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ah_check.h"
#include "sim_fabric.h"

/* The resolved PCI path of device d below ".../devices/", and its NUMA node. */
static void place(struct ibv_device *d, char pci[PATH_MAX], int *numa_p) {
  char p[PATH_MAX], real[PATH_MAX];
  snprintf(p, sizeof p, "%s/device", d->ibdev_path);
  ck_assert_ptr_nonnull(realpath(p, real));
  const char *below = strstr(real, "/devices/");
  ck_assert_ptr_nonnull(below);
  snprintf(pci, PATH_MAX, "%s", below + strlen("/devices/"));
  snprintf(p, sizeof p, "%s/device/numa_node", d->ibdev_path);
  FILE *f = fopen(p, "r");
  ck_assert_ptr_nonnull(f);
  ck_assert_int_eq(fscanf(f, "%d", numa_p), 1);
  fclose(f);
}

/* The number of leading '/'-separated components a and b share. */
static int shared(const char *a, const char *b) {
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

START_TEST(pci_tree_as_sysfs) {
  int n = -1;
  struct ibv_device **l = ibv_get_device_list(&n);
  ck_assert_int_eq(n, 4);
  char pci[4][PATH_MAX];
  int numa[4];
  for (int k = 0; k < 4; k++) {
    char tail[32];
    snprintf(tail, sizeof tail, "/class/infiniband/mlx5_%d", k);
    ck_assert_str_eq(l[k]->ibdev_path + strlen(l[k]->ibdev_path) - strlen(tail), tail);
    place(l[k], pci[k], &numa[k]);
    /* root complex, root port, switch up, switch down, the NIC */
    int parts = 1;
    for (const char *c = pci[k]; *c; c++) parts += *c == '/';
    ck_assert_int_eq(parts, 5);
  }
  ibv_free_device_list(l);
  ck_assert_int_eq(numa[0], 0);
  ck_assert_int_eq(numa[1], 0);
  ck_assert_int_eq(numa[2], 0);
  ck_assert_int_eq(numa[3], 1);
  /* 0 and 2 share switch 0 (three components: below the root port), 1 is on another switch of
   * the same root complex, 3 on another root complex */
  ck_assert_int_eq(shared(pci[0], pci[2]), 3);
  ck_assert_int_eq(shared(pci[0], pci[1]), 1);
  ck_assert_int_eq(shared(pci[0], pci[3]), 0);
  ck_assert_str_ne(pci[0], pci[2]);
  /* the same layout again: the same tree (a second list, as another process would build it) */
  l = ibv_get_device_list(&n);
  char again[PATH_MAX];
  int u;
  place(l[2], again, &u);
  ck_assert_str_eq(again, pci[2]);
  ibv_free_device_list(l);
}
END_TEST

START_TEST(mixed_ports) {
  int n = -1;
  struct ibv_device **l = ibv_get_device_list(&n);
  ck_assert_int_eq(n, 4);
  struct ibv_context *c[4];
  for (int k = 0; k < 4; k++) ck_assert_ptr_nonnull(c[k] = ibv_open_device(l[k]));
  ibv_free_device_list(l);
  static const int want[4] = {2, 1, 2, 2}; /* past the list: the fabric's 2 */
  for (int k = 0; k < 4; k++) {
    struct ibv_device_attr da;
    ck_assert_int_eq(ibv_query_device(c[k], &da), 0);
    ck_assert_int_eq(da.phys_port_cnt, want[k]);
    struct ibv_port_attr pa;
    union ibv_gid g;
    ck_assert_int_eq(ibv_query_port(c[k], 1, &pa), 0);
    ck_assert_int_eq(ibv_query_port(c[k], 2, &pa), want[k] == 2 ? 0 : EINVAL);
    ck_assert_int_eq(ibv_query_gid(c[k], 2, 0, &g) == 0, want[k] == 2);
  }
  /* a queue pair cannot be put on the hidden port */
  struct ibv_pd *pd = ibv_alloc_pd(c[1]);
  struct ibv_cq *cq = ibv_create_cq(c[1], 16, NULL, NULL, 0);
  ck_assert_ptr_nonnull(pd);
  ck_assert_ptr_nonnull(cq);
  struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC};
  ia.cap.max_send_wr = ia.cap.max_recv_wr = 4;
  ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
  struct ibv_qp *qp = ibv_create_qp(pd, &ia);
  ck_assert_ptr_nonnull(qp);
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 2};
  int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
  ck_assert_int_ne(ibv_modify_qp(qp, &a, mask), 0);
  a.port_num = 1;
  ck_assert_int_eq(ibv_modify_qp(qp, &a, mask), 0);
  ck_assert_int_eq(ibv_destroy_qp(qp), 0);
  ck_assert_int_eq(ibv_destroy_cq(cq), 0);
  ck_assert_int_eq(ibv_dealloc_pd(pd), 0);
  for (int k = 0; k < 4; k++) ck_assert_int_eq(ibv_close_device(c[k]), 0);
}
END_TEST

int main(void) {
  const TTest *const tests[] = {pci_tree_as_sysfs, mixed_ports};
  int rc = ah_check_main("verbs_host", (ah_check_case_t){.name = "host", .timeout = 30}, tests,
                         AH_CHECK_COUNT(tests));
  sim_fabric_unlink(getenv("NCCLSIM_FABRIC_SHM")); /* the job's link state: ours to remove */
  return rc;
}
