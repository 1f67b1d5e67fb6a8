/* sim_fault_parse.h: the grammar of NCCLSIM_FAULT (docs/sim-faults.md), a pure function so that a
 * fuzz target can reach it (sim_fault_parse.c). */
#ifndef SIM_FAULT_PARSE_H
#define SIM_FAULT_PARSE_H

#include <stddef.h>

#define SIM_MAX_FAULTS 8

typedef enum { SIM_FAULT_HANG = 1, SIM_FAULT_SLOW = 2 } sim_fault_kind_t;

typedef struct {
  sim_fault_kind_t kind;
  long rank, nranks; /* nranks 0: any communicator */
  unsigned long long call;
  unsigned long long after; /* slow: from the process's N-th collective on (0: from the start) */
  double pct;
} sim_fault_t;

/* Parses "FAULT[,FAULT...]" into out[SIM_MAX_FAULTS]. Calls bad(arg, entry, why) for each entry it
 * ignores (malformed, or beyond SIM_MAX_FAULTS) and goes on. Returns the number of faults parsed. */
int sim_fault_parse(const char *text, sim_fault_t *out,
                    void (*bad)(void *arg, const char *entry, const char *why), void *arg);

#endif
