/* ibbw_verbs.h: the verbs ncclsim-ibbw calls (sim_verbs_table_t), filled from the library the
 * program is linked with (ncclsim-ibbw: ibbw_load_linked.c) or as libnccl loads it
 * (ncclsim-ibbw-dl: ibbw_load_dl.c). */
#ifndef IBBW_VERBS_H
#define IBBW_VERBS_H

#include "sim_verbs_table.h"

/* Fills the table; returns 0, or -1 with a message on stderr. */
int ibbw_verbs_load(sim_verbs_table_t *v);
/* The mode's name, for messages: "linked" or "dlopen". */
extern const char *ibbw_mode;

#endif
