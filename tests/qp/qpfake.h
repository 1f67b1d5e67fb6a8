/* qpfake.h: the recording side of tests/qp's fake libibverbs (qpfake.c). */
#ifndef QPFAKE_H
#define QPFAKE_H

#include <infiniband/verbs.h>

typedef struct {
  struct ibv_qp *qp;
  struct ibv_qp_attr attr;
  int mask;
} qpfake_call_t;

int qpfake_ncalls(void);
const qpfake_call_t *qpfake_call(int i);
void qpfake_reset(void);

#endif
