/* ah_coord_hub_mem.c: the hub's memory budget (AUTOHA_HUB_MEM_MB). What a job makes the hub keep
 * for it — communicators and their members, rank bitmaps, retained segments, progress and
 * straggler slots, search calls being gathered, queue pairs, directory entries and waiters — grows
 * with the job, and every growth is charged here before it is allocated; what would take the hub
 * past its budget is refused with one line naming it, its size, the budget and what runs instead.
 *
 * Key choice: one budget in bytes instead of a cap per table. Fixed counts either stop a large job
 * (4,096 communicators, 65,536 ranks with progress) or, raised, let a holder of the job secret grow
 * the hub without bound (issue 33); bytes bound the sum whatever the job's shape. The send buffers
 * keep their own budget (max_outbuf_job): those drain as clients read, these are held. */
#include <stdarg.h>
#include <stdio.h>

#include "ah_coord_hub_internal.h"

int ah_coord_hub_mem_take(ah_coord_hub_t *h, size_t bytes) {
  if (bytes > h->o.mem_bytes || h->mem_bytes > h->o.mem_bytes - bytes) return -1;
  h->mem_bytes += bytes;
  atomic_store_explicit(&h->mem_seen, h->mem_bytes, memory_order_relaxed);
  if (h->mem_bytes > atomic_load_explicit(&h->mem_peak, memory_order_relaxed))
    atomic_store_explicit(&h->mem_peak, h->mem_bytes, memory_order_relaxed);
  return 0;
}

void ah_coord_hub_mem_give(ah_coord_hub_t *h, size_t bytes) {
  h->mem_bytes = bytes < h->mem_bytes ? h->mem_bytes - bytes : 0;
  atomic_store_explicit(&h->mem_seen, h->mem_bytes, memory_order_relaxed);
}

/* "12.3 MiB", "4.0 KiB", "96 bytes". */
static void size_text(size_t n, char *buf, size_t len) {
  if (n >= (1u << 20)) snprintf(buf, len, "%.1f MiB", (double)n / (1u << 20));
  else if (n >= 1024) snprintf(buf, len, "%.1f KiB", (double)n / 1024);
  else snprintf(buf, len, "%zu bytes", n);
}

void ah_coord_hub_mem_refuse(ah_coord_hub_t *h, int kind, size_t bytes, const char *instead,
                             const char *fmt, ...) {
  char what[256], need[32], held[32], budget[32];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  size_text(bytes, need, sizeof need);
  size_text(h->mem_bytes, held, sizeof held);
  size_text(h->o.mem_bytes, budget, sizeof budget);
  ah_coord_hub_refuse(h, kind,
                      "%s (%s) does not fit the hub's memory budget (%s of %s held; "
                      "AUTOHA_HUB_MEM_MB sets it); %s",
                      what, need, held, budget, instead);
}

size_t ah_coord_hub_mem_held(ah_coord_hub_t *h, size_t *peak_p) {
  if (peak_p) *peak_p = atomic_load_explicit(&h->mem_peak, memory_order_relaxed);
  return atomic_load_explicit(&h->mem_seen, memory_order_relaxed);
}
