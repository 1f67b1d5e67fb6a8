/* Topology of a simulated communicator: GPU model, NVLink and NIC bandwidths, nodes and ranks per
 * node, parsed from NCCLSIM_TOPO ("nodes=2,gpus=8,gpu=h100,nic=8x400"), a preset name ("h100",
 * "a100") or a file ("file:PATH" holding the same keys, separated by commas, spaces or newlines).
 * The key choice: every number has a documented default per GPU preset (docs/sim.md), so a
 * spec names only what differs; an unknown key or malformed value is an error naming the text. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "sim_model.h"

/* Achieved GB/s of one NIC from its line rate in Gb/s (400 -> 48, as nccl-tests measure). */
static double nic_gbytes(double gbits) { return gbits * 0.12; }

/* A NIC's achieved GB/s follows its line rate and its port count (a bonded dual-port NIC moves
 * twice a port's bytes). */
static void nic_set(sim_topo_t *t, double gbits, int ports) {
  t->nic_line_gbps = gbits;
  t->nic_ports = ports;
  t->nic_gbps = nic_gbytes(gbits) * ports;
}

static void preset(sim_topo_t *t, int gpu) {
  t->gpu = gpu;
  if (gpu == SIM_GPU_A100) {
    t->nvl_gbps = 235.0;
    t->nic_count = 8;
    nic_set(t, 200.0, t->nic_ports); /* 200 Gb/s HDR: ~24 GB/s achieved per NIC port */
  } else {
    t->nvl_gbps = 370.0;
    t->nic_count = 8;
    nic_set(t, 400.0, t->nic_ports); /* 400 Gb/s NDR: 46-48 GB/s achieved per NIC port */
  }
}

static int parse_int(const char *v, int lo, int hi, int *out_p) {
  char *end;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (errno || end == v || *end || x < lo || x > hi) return -1;
  *out_p = (int)x;
  return 0;
}

static int parse_double(const char *v, double lo, double hi, double *out_p) {
  char *end;
  errno = 0;
  double x = strtod(v, &end);
  if (errno || end == v || *end || !(x >= lo && x <= hi)) return -1;
  *out_p = x;
  return 0;
}

/* Applies one "key=value" (or bare preset name) token. Returns 0 or -1 with err filled. */
static int apply(sim_topo_t *t, const char *tok, int *nodes_p, int *gpus_p, int *nvls_set_p,
                 char *err, size_t errlen) {
  const char *eq = strchr(tok, '=');
  if (!eq) {
    if (strcasecmp(tok, "h100") == 0) preset(t, SIM_GPU_H100);
    else if (strcasecmp(tok, "a100") == 0) preset(t, SIM_GPU_A100);
    else goto bad;
    return 0;
  }
  char key[32];
  size_t kl = (size_t)(eq - tok);
  if (kl == 0 || kl >= sizeof key) goto bad;
  memcpy(key, tok, kl);
  key[kl] = 0;
  const char *v = eq + 1;
  if (strcasecmp(key, "nodes") == 0) {
    if (parse_int(v, 1, 4096, nodes_p)) goto bad;
  } else if (strcasecmp(key, "gpus") == 0) {
    if (parse_int(v, 1, 64, gpus_p)) goto bad;
  } else if (strcasecmp(key, "gpu") == 0) {
    if (strcasecmp(v, "h100") == 0) preset(t, SIM_GPU_H100);
    else if (strcasecmp(v, "a100") == 0) preset(t, SIM_GPU_A100);
    else goto bad;
  } else if (strcasecmp(key, "nic") == 0) { /* COUNTxGBITS[xPORTS], e.g. 8x400 or 8x200x2 */
    int count, ports = t->nic_ports;
    double gbits;
    char num[16], rate[24];
    const char *x = strpbrk(v, "xX");
    if (!x) goto bad;
    const char *x2 = strpbrk(x + 1, "xX");
    size_t nl = (size_t)(x - v), rl = x2 ? (size_t)(x2 - x - 1) : strlen(x + 1);
    if (nl == 0 || nl >= sizeof num || rl == 0 || rl >= sizeof rate) goto bad;
    memcpy(num, v, nl);
    num[nl] = 0;
    memcpy(rate, x + 1, rl);
    rate[rl] = 0;
    if (parse_int(num, 1, 64, &count) || parse_double(rate, 1, 100000, &gbits)) goto bad;
    if (x2 && parse_int(x2 + 1, 1, 2, &ports)) goto bad;
    t->nic_count = count;
    nic_set(t, gbits, ports);
  } else if (strcasecmp(key, "ports") == 0) {
    int ports;
    if (parse_int(v, 1, 2, &ports)) goto bad;
    nic_set(t, t->nic_line_gbps, ports);
  } else if (strcasecmp(key, "ib") == 0) {
    if (parse_int(v, 0, 1, &t->ib)) goto bad;
  } else if (strcasecmp(key, "nvlink") == 0) { /* achieved per-GPU NVLink GB/s */
    if (parse_double(v, 1, 100000, &t->nvl_gbps)) goto bad;
  } else if (strcasecmp(key, "nvls") == 0) {
    if (parse_int(v, 0, 1, &t->nvls)) goto bad;
    *nvls_set_p = 1;
  } else if (strcasecmp(key, "collnet") == 0) {
    if (parse_int(v, 0, 1, &t->collnet)) goto bad;
  } else if (strcasecmp(key, "cpu") == 0) {
    if (strcasecmp(v, "amd") == 0) t->cpu_amd = 1;
    else if (strcasecmp(v, "intel") == 0) t->cpu_amd = 0;
    else goto bad;
  } else if (strcasecmp(key, "netlat") == 0) {
    if (parse_double(v, 0, 1000, &t->net_lat_us)) goto bad;
  } else {
    goto bad;
  }
  return 0;
bad:
  snprintf(
      err, errlen,
      "invalid topology item '%s' (expected nodes=N, gpus=N, gpu=h100|a100, "
      "nic=COUNTxGBITS[xPORTS], ports=1|2, ib=0|1, nvlink=GBPS, nvls=0|1, collnet=0|1, cpu=intel|amd, netlat=US, or a "
      "preset h100|a100)",
      tok);
  return -1;
}

void sim_topo_set_layout(sim_topo_t *t, int nranks, int nnodes, int ranks_per_node) {
  if (nranks < 1) nranks = 1;
  if (nnodes < 1) nnodes = 1;
  if (ranks_per_node < 1) ranks_per_node = (nranks + nnodes - 1) / nnodes;
  t->nranks = nranks;
  t->nnodes = nnodes;
  t->ranks_per_node = ranks_per_node;
}

int sim_topo_parse(const char *spec, int nranks, sim_topo_t *topo_p, char *err, size_t errlen) {
  sim_topo_t t;
  memset(&t, 0, sizeof t);
  t.nic_ports = 1;
  preset(&t, SIM_GPU_H100);
  t.version = 22809;
  t.max_channels = SIM_MAX_CHANNELS;
  if (errlen) err[0] = 0;
  char *text = NULL;
  if (!spec) spec = "";
  if (strncmp(spec, "file:", 5) == 0) {
    FILE *f = fopen(spec + 5, "r");
    if (!f) {
      snprintf(err, errlen, "cannot open topology file '%s': %s", spec + 5, strerror(errno));
      return -1;
    }
    text = calloc(1, 8192);
    size_t n = text ? fread(text, 1, 8191, f) : 0;
    fclose(f);
    if (!text) {
      snprintf(err, errlen, "out of memory reading topology file '%s'", spec + 5);
      return -1;
    }
    text[n] = 0;
  } else {
    text = strdup(spec);
    if (!text) {
      snprintf(err, errlen, "out of memory parsing topology '%s'", spec);
      return -1;
    }
  }
  for (char *h = strchr(text, '#'); h; h = strchr(h, '#')) /* comments run to the end of a line */
    while (*h && *h != '\n') *h++ = ' ';
  int nodes = 0, gpus = 0, nvls_set = 0, rc = 0;
  char *save = NULL;
  for (char *tok = strtok_r(text, ", \t\r\n", &save); tok;
       tok = strtok_r(NULL, ", \t\r\n", &save)) {
    if (apply(&t, tok, &nodes, &gpus, &nvls_set, err, errlen)) {
      rc = -1;
      break;
    }
  }
  free(text);
  if (rc) return -1;
  if (nranks <= 0) nranks = (nodes ? nodes : 1) * (gpus ? gpus : 8);
  int rpn = gpus ? gpus : (nodes ? (nranks + nodes - 1) / nodes : (nranks < 8 ? nranks : 8));
  if (rpn > nranks) rpn = nranks;
  int nn = nodes ? nodes : (nranks + rpn - 1) / rpn;
  if (nodes && gpus && nodes * gpus != nranks) {
    snprintf(err, errlen, "topology nodes=%d,gpus=%d does not hold %d ranks", nodes, gpus, nranks);
    return -1;
  }
  if (nodes && !gpus) rpn = (nranks + nn - 1) / nn;
  if (!nvls_set) t.nvls = t.gpu == SIM_GPU_H100; /* NVLink SHARP: H100 NVSwitch systems */
  sim_topo_set_layout(&t, nranks, nn, rpn);
  *topo_p = t;
  return 0;
}
