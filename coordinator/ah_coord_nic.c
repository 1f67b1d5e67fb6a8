/* The wire form of NIC_PORT (ah_coord_nic.h): fixed-size big-endian fields, and a check that
 * refuses, by name, anything no process of autoha would send, so that the hub can take a decoded
 * report as it is. */
#include "ah_coord_nic.h"

#include <stdio.h>
#include <string.h>

#include "ah_coord_internal.h"

void ah_nic_port_pack(const ah_nic_port_t *x, uint8_t *out) {
  memset(out, 0, AH_NIC_PORT_BYTES);
  uint8_t *p = out;
  ah_coord_put_u32(p, x->pid), p += 4;
  memcpy(p, x->dev, strnlen(x->dev, AH_LINK_DEV - 1)), p += AH_LINK_DEV;
  *p++ = x->port;
  *p++ = x->up;
  int n = x->ngpus > AH_NIC_GPUS ? AH_NIC_GPUS : x->ngpus;
  *p++ = (uint8_t)n;
  for (int i = 0; i < n; i++) ah_coord_put_u16(p + 2 * i, x->gpus[i]);
  p += 2 * AH_NIC_GPUS;
  ah_coord_put_u32(p, x->nqps);
}

int ah_nic_port_unpack(const uint8_t *in, ah_nic_port_t *x, char *err, size_t errlen) {
  const uint8_t *p = in;
  memset(x, 0, sizeof *x);
  x->pid = ah_coord_get_u32(p), p += 4;
  memcpy(x->dev, p, AH_LINK_DEV), p += AH_LINK_DEV;
  x->port = *p++;
  x->up = *p++;
  x->ngpus = *p++;
  const uint8_t *g = p;
  p += 2 * AH_NIC_GPUS;
  x->nqps = ah_coord_get_u32(p);
  if (!ah_link_dev_valid(x->dev)) {
    snprintf(err, errlen, "NIC_PORT of pid %u: its device name is not printable text", x->pid);
    return -1;
  }
  if (x->port == 0 || x->up > 1) {
    snprintf(err, errlen,
             "NIC_PORT of pid %u: %s port %u state %u (expected port 1.., state 0 down or 1 up)",
             x->pid, x->dev, x->port, x->up);
    return -1;
  }
  if (x->ngpus > AH_NIC_GPUS) {
    snprintf(err, errlen, "NIC_PORT of pid %u: %u GPUs (at most %d)", x->pid, x->ngpus,
             AH_NIC_GPUS);
    return -1;
  }
  for (int i = 0; i < AH_NIC_GPUS; i++) {
    uint16_t v = ah_coord_get_u16(g + 2 * i);
    if (i < x->ngpus) x->gpus[i] = v;
    else if (v) {
      snprintf(err, errlen, "NIC_PORT of pid %u: unused GPU slot %d is not zero", x->pid, i);
      return -1;
    }
  }
  return 0;
}
