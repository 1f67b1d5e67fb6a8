/* shim_coord.h: where the NCCL wrappers hand unique ids to the coordinator — the stamp written
 * into every id this process makes, and the connection made from the stamp of every id a rank
 * initialises with (shim_coord.c). */
#ifndef AH_SHIM_COORD_H
#define AH_SHIM_COORD_H

#include <stdint.h>

#include <nccl.h>

#include "ah_coord_health.h"

/* After a successful ncclGetUniqueId (not inside ncclCommInitAll): starts the hub and stamps the
 * id. Every mode (ranks compare their settings at the hub); on any failure the id is left as NCCL
 * made it (logged). */
void ah_shim_coord_stamp(ncclUniqueId *id);
/* Before a communicator is initialised from `id`: connects to the hub its stamp names (once per
 * stamp) and remembers which coordinator carries that communicator. A communicator made from an id
 * without a stamp runs NCCL's own choices if it spans processes, with one warning. */
void ah_shim_coord_seen(const ncclUniqueId *id);
/* What the process does with the hub's findings (after the line is logged): fn(comm, f), on the
 * coordinator's I/O thread. */
void ah_shim_coord_on_finding(void (*fn)(uint64_t comm, const ah_finding_t *f));
/* 1 when a hub of this process can be heard from soon: a connection is up, or one lost with its
 * host relay is being re-made (ah_coord_reachable). */
int ah_shim_coord_reachable(void);

#endif
