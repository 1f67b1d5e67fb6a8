/* model_check.h: what the sim/model tests share — byte units and a model built from an
 * NCCLSIM_TOPO text for one NCCL version, failing the test when either is refused. */
#ifndef AH_MODEL_CHECK_H
#define AH_MODEL_CHECK_H

#include <check.h>
#include <stddef.h>

#include "sim_model.h"

#define KiB ((size_t)1024)
#define MiB (KiB * 1024)
#define GiB (MiB * 1024)

static inline void model_for(sim_model_t *m, const char *spec, int version) {
  sim_topo_t t;
  char err[256];
  ck_assert_msg(sim_topo_parse(spec, 0, &t, err, sizeof err) == 0, "%s: %s", spec, err);
  t.version = version;
  sim_model_init(m, &t, 0, 0);
  ck_assert_str_eq(m->error, "");
}

#endif
