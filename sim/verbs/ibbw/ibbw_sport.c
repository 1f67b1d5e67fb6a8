/* ibbw_sport.c: --check-sport, which UDP source port the client's QP ended up with. On the
 * simulator the provider tells (ncclsimVerbsQpFlow); the QP's flow label comes from ibv_query_qp.
 * "native": label 0 and the port the kernel derives from the two QP numbers (NCCL's);
 * "hooked": a port other than that, either from a label someone set (autoha's flow-label method)
 * or set directly (mlx5dv_modify_qp_udp_sport). The kernel's formulas are written out here as the
 * test's own oracle. */
#include <stdio.h>
#include <string.h>

#include "ibbw_sport.h"
#include "sim_fabric.h"

static uint16_t fold(uint32_t fl) {
  return (uint16_t)(((fl & 0x3FFF) ^ ((fl & 0xFC000) >> 14)) | 0xC000);
}

static uint32_t calc_label(uint32_t lqpn, uint32_t rqpn) {
  uint64_t v = (uint64_t)lqpn * rqpn;
  v ^= v >> 20;
  v ^= v >> 40;
  return (uint32_t)(v & 0xFFFFF);
}

int ibbw_check_sport(const sim_verbs_table_t *v, struct ibv_qp *qp, const char *want) {
  sim_fabric_flow_t f;
  struct ibv_qp_attr a;
  struct ibv_qp_init_attr ia;
  if (!v->qp_flow || v->qp_flow(qp, &f) != 0 ||
      v->query_qp(qp, &a, IBV_QP_AV | IBV_QP_DEST_QPN, &ia) != 0) {
    fprintf(stderr,
            "ncclsim-ibbw: --check-sport: the QP's flow is unknown (not on sim's libibverbs?)\n");
    return -1;
  }
  uint32_t fl = a.ah_attr.grh.flow_label;
  uint16_t native = fold(calc_label(qp->qp_num, a.dest_qp_num));
  int hooked = fl ? f.sport == fold(fl) && f.sport != native : f.sport != native;
  printf("ncclsim-ibbw: QP %u sport 0x%04x, flow label 0x%05x, NCCL's port 0x%04x: %s\n",
         qp->qp_num, f.sport, fl, native,
         hooked                         ? "hooked"
         : fl == 0 && f.sport == native ? "native"
                                        : "inconsistent");
  if (!strcmp(want, "hooked")) return hooked ? 0 : -1;
  return !strcmp(want, "native") && fl == 0 && f.sport == native ? 0 : -1;
}
