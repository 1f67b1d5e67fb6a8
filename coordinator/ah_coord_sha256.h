/* ah_coord_sha256.h: SHA-256 and HMAC-SHA256 (FIPS 180-4, RFC 2104), the only cryptography the
 * coordinator's handshake needs, built in so that libautoha.so brings no libcrypto into the
 * user's process (and none of its exit-time teardown or abort paths). */
#ifndef AH_COORD_SHA256_H
#define AH_COORD_SHA256_H

#include <stddef.h>
#include <stdint.h>

/* Writes SHA-256(msg) into out. */
void ah_coord_sha256(const void *msg, size_t len, uint8_t out[32]);

/* Writes HMAC-SHA256(key, msg) into out. Note that a key longer than the 64-byte block is hashed
 * first, as RFC 2104 says. */
void ah_coord_hmac_sha256(const void *key, size_t keylen, const void *msg, size_t len,
                          uint8_t out[32]);

#endif
