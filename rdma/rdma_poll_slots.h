/* rdma_poll_slots.h: one poll wrapper per context slot, for the two layers that put their poll_cq
 * in front of a verbs context's: the failover layer (rdma_ha_data.c) and per-connection timing
 * (rdma_link_data.c). NCCL polls a CQ through its own context's ops, so a layer that gives the
 * context in its slot k the wrapper k finds that context with one load instead of a look-up. */
#ifndef AH_RDMA_POLL_SLOTS_H
#define AH_RDMA_POLL_SLOTS_H

#include <infiniband/verbs.h>

/* Context slots a layer has, one wrapper each (its context table's size). */
#define AH_POLL_SLOTS 32

/* Defines `table`, a const array of AH_POLL_SLOTS poll_cq functions: entry k is table_k (the name
 * a profile shows, as bench/ha_cost and bench/link_cost read it), which returns poll(k, cq, n, wc).
 *
 * Note that poll is meant to be the file's always-inline function of the slot: each wrapper is
 * then its body with the slot a constant, and the table is laid out by hand because clang-format
 * would indent each line under the last. Used as `AH_POLL_SLOTS_DEFINE(lk_poll_cq, poll_ctx);`. */
/* clang-format off */
#define AH_POLL_SLOT_(table, poll, k)                                                              \
  static int table##_##k(struct ibv_cq *cq, int n, struct ibv_wc *wc) { return poll(k, cq, n, wc); }
#define AH_POLL_SLOTS_DEFINE(table, poll)                                                          \
  AH_POLL_SLOT_(table, poll, 0) AH_POLL_SLOT_(table, poll, 1) AH_POLL_SLOT_(table, poll, 2)        \
  AH_POLL_SLOT_(table, poll, 3) AH_POLL_SLOT_(table, poll, 4) AH_POLL_SLOT_(table, poll, 5)        \
  AH_POLL_SLOT_(table, poll, 6) AH_POLL_SLOT_(table, poll, 7) AH_POLL_SLOT_(table, poll, 8)        \
  AH_POLL_SLOT_(table, poll, 9) AH_POLL_SLOT_(table, poll, 10) AH_POLL_SLOT_(table, poll, 11)      \
  AH_POLL_SLOT_(table, poll, 12) AH_POLL_SLOT_(table, poll, 13) AH_POLL_SLOT_(table, poll, 14)     \
  AH_POLL_SLOT_(table, poll, 15) AH_POLL_SLOT_(table, poll, 16) AH_POLL_SLOT_(table, poll, 17)     \
  AH_POLL_SLOT_(table, poll, 18) AH_POLL_SLOT_(table, poll, 19) AH_POLL_SLOT_(table, poll, 20)     \
  AH_POLL_SLOT_(table, poll, 21) AH_POLL_SLOT_(table, poll, 22) AH_POLL_SLOT_(table, poll, 23)     \
  AH_POLL_SLOT_(table, poll, 24) AH_POLL_SLOT_(table, poll, 25) AH_POLL_SLOT_(table, poll, 26)     \
  AH_POLL_SLOT_(table, poll, 27) AH_POLL_SLOT_(table, poll, 28) AH_POLL_SLOT_(table, poll, 29)     \
  AH_POLL_SLOT_(table, poll, 30) AH_POLL_SLOT_(table, poll, 31)                                    \
  static int (*const table[AH_POLL_SLOTS])(struct ibv_cq *, int, struct ibv_wc *) = {              \
      table##_0, table##_1, table##_2, table##_3, table##_4, table##_5, table##_6, table##_7,      \
      table##_8, table##_9, table##_10, table##_11, table##_12, table##_13, table##_14,            \
      table##_15, table##_16, table##_17, table##_18, table##_19, table##_20, table##_21,          \
      table##_22, table##_23, table##_24, table##_25, table##_26, table##_27, table##_28,          \
      table##_29, table##_30, table##_31}
/* clang-format on */

#endif
