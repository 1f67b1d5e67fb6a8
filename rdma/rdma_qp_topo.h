/* rdma_qp_topo.h: where AUTOHA_QP_TOPO points (rdma_qp_topo.c), for the two files of rdma/ that
 * read the fabric's topology: the verbs hook's source-port planner and the failover layer's shadow
 * builder. */
#ifndef AH_RDMA_QP_TOPO_H
#define AH_RDMA_QP_TOPO_H

/* AUTOHA_QP_TOPO expanded for this process, "" when unset or malformed (logged once): the file the
 * source-port planner and the failover layer's backup ports both read. */
const char *ah_shim_qp_topo_path(void);

#endif
