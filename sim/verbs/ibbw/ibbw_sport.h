/* ibbw_sport.h: ncclsim-ibbw's --check-sport (ibbw_sport.c). */
#ifndef IBBW_SPORT_H
#define IBBW_SPORT_H

#include "ibbw_verbs.h"

/* 0 when the QP's UDP source port is what `want` ("native" or "hooked") says, else -1. */
int ibbw_check_sport(const sim_verbs_table_t *v, struct ibv_qp *qp, const char *want);

#endif
