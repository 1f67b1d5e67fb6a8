/* sim_fabric_text.c: the fabric written as autoha's planner topology file (docs/qp.md, "Topology
 * file"), so that AUTOHA_QP_SPORT=plan plans against exactly the fabric sim/ routes on. Only the
 * fabric's part is written (spines, pairs, seeds, hosts, NICs, failed links); jobs and classes are
 * the bench's to append. */
#include <stdarg.h>
#include <stdio.h>

#include "sim_fabric_internal.h"

typedef struct {
  char *buf;
  size_t len, at; /* at: the length the whole text would have */
} out_t;

__attribute__((format(printf, 2, 3))) static void put(out_t *o, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  size_t room = o->at < o->len ? o->len - o->at : 0;
  int n = vsnprintf(room ? o->buf + o->at : NULL, room, fmt, ap);
  va_end(ap);
  if (n > 0) o->at += (size_t)n;
}

int sim_fabric_topo_text(const sim_fabric_t *f, const char *const *hostnames, char *buf,
                         size_t len) {
  if (!f->bond) return -1;
  out_t o = {buf, len, 0};
  if (len) buf[0] = '\0';
  put(&o,
      "# sim/fabric: %d nodes x %d dual-port NICs of 2x%g Gb/s, %d leaf pairs x %d spines of %g Gb/s\n",
      f->nnodes, f->nics, f->port_gbps, f->npairs, f->nspines, f->up_gbps);
  put(&o, "spines %d\npairs %d\nseeds 0x%x 0x%x 0x%x\n", f->nspines, f->npairs,
      (unsigned)f->seed_leaf, (unsigned)f->seed_spine, (unsigned)f->seed_lag);
  for (int h = 0; h < f->nnodes; h++) {
    char def[32];
    snprintf(def, sizeof def, "node%d", h);
    const char *name = hostnames && hostnames[h] ? hostnames[h] : def;
    put(&o, "host %s %d\n", name, h / f->hostsperpair);
    for (int n = 0; n < f->nics; n++) {
      uint8_t g[16];
      sim_fabric_gid((sim_fabric_ep_t){h, n, 1}, g);
      put(&o, "nic %s mlx5_%d %u.%u.%u.%u\n", name, n, g[12], g[13], g[14], g[15]);
    }
  }
  for (int leaf = 0; leaf < 2 * f->npairs; leaf++)
    for (int sp = 0; sp < f->nspines; sp++)
      if (f->failed[sim_fabric_spine_link(f, leaf, sp, 0)]) put(&o, "fail %d %d\n", leaf, sp);
  return (int)o.at;
}
