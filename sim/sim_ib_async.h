/* sim_ib_async.h: the devices' async events as sim/'s NCCL reads them (sim_ib_async.c), and what
 * they leave for the transport to check: fatal counts per device and QPs an event failed. */
#ifndef SIM_IB_ASYNC_H
#define SIM_IB_ASYNC_H

#include "sim_ib_verbs.h"

#define SIM_IB_ASYNC_MAX_DEVS 64

/* Starts one reader thread per device (nothing when the table has no async verbs). `tag` is the
 * qp_context of every QP this library creates. */
void sim_ib_async_start(const sim_verbs_table_t *t, sim_ib_dev_t *devs, int n, const void *tag);
/* Changes whenever a fatal event was counted: a cheap check before the look-ups below. */
unsigned sim_ib_async_gen(void);
/* DEVICE_FATAL and CQ_ERR events of device `devi` (sim_ib_devices' index) so far. */
unsigned sim_ib_async_dev_fatal(int devi);
/* Whether a QP_FATAL, QP_REQ_ERR or QP_ACCESS_ERR event named qp. */
int sim_ib_async_qp_fatal(const struct ibv_qp *qp);

#endif
