/* coord_fake_hub.h: the hub's side of the coordinator's handshake, done by hand, for the tests and
 * the fuzz target that play a hub which misbehaves once the handshake is over (stays mute, sends a
 * bad verdict, sends whatever the fuzzer chose). */
#ifndef COORD_FAKE_HUB_H
#define COORD_FAKE_HUB_H

#include <stddef.h>
#include <stdint.h>

/* A blocking listener on a free 127.0.0.1 port, whose port (host order) goes to *port_p.
 * Returns the listening fd, or -1. */
int coord_fake_listen(uint16_t *port_p);
/* Reads exactly n bytes from fd (blocking). Returns 0, or -1 at EOF or on an error. */
int coord_fake_read(int fd, void *buf, size_t n);
/* On fd, connected to a client: sends a HELLO whose challenge is `fill` repeated, reads the
 * client's AUTH and answers WELCOME with the MAC of `secret`. Returns 0, or -1 when a read or a
 * write fails (fd is left open either way). */
int coord_fake_handshake(int fd, const uint8_t secret[16], uint8_t fill);

#endif
