/* ah_path_color.h: equitable edge colouring of a bipartite multigraph — the planner's balancing
 * step (choosing a NIC side for every flow, then a spine for every cross-pair flow), in
 * ah_path_color.c. Internal to path/. */
#ifndef AH_PATH_COLOR_H
#define AH_PATH_COLOR_H

/* Colours the edges (src base vertex, dst base vertex), taken in the given order (the plan's
 * priority order), so that every vertex has each colour at most ceil(degree / legal colours) times.
 * Without forbidden colours the first attempt is exact. With them (failed links), edges at a
 * constrained vertex go first, and when flows are still above ideal, up to 15 more attempts shuffle
 * the order with a fixed-seed generator (so every rank computes the same plan) and the best
 * colouring is kept. Returns 0 or -1 (out of memory). */
int ah_path_equitable_color(int nedges, const int *src, const int *dst, int nbase, const int *cap,
                            const unsigned char *forbid, int nc, int *color);

#endif
