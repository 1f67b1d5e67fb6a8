/* ah_cluster_b64.c: base64 both ways, for the keys and values etcd's JSON gateway carries.
 * Strict on decoding, since the text comes from the network: anything but canonical padded
 * base64 is refused rather than guessed at. */
#include <string.h>

#include "ah_cluster_b64.h"

static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t ah_cluster_b64_len(size_t n) { return (n + 2) / 3 * 4; }

void ah_cluster_b64_encode(const void *in, size_t n, char *out) {
  const unsigned char *s = in;
  size_t o = 0;
  for (size_t i = 0; i < n; i += 3) {
    unsigned v = (unsigned)s[i] << 16;
    if (i + 1 < n) v |= (unsigned)s[i + 1] << 8;
    if (i + 2 < n) v |= s[i + 2];
    out[o++] = alphabet[(v >> 18) & 63];
    out[o++] = alphabet[(v >> 12) & 63];
    out[o++] = i + 1 < n ? alphabet[(v >> 6) & 63] : '=';
    out[o++] = i + 2 < n ? alphabet[v & 63] : '=';
  }
  out[o] = 0;
}

static int value_of(char c) {
  const char *p = c ? strchr(alphabet, c) : NULL;
  return p ? (int)(p - alphabet) : -1;
}

long ah_cluster_b64_decode(const char *in, unsigned char *out) {
  size_t n = strlen(in), o = 0;
  if (n % 4) return -1;
  for (size_t i = 0; i < n; i += 4) {
    int last = i + 4 == n;
    int pad = (in[i + 3] == '=') + (in[i + 2] == '=' && in[i + 3] == '=');
    if (pad && !last) return -1;
    int a = value_of(in[i]), b = value_of(in[i + 1]);
    int c = pad == 2 ? 0 : value_of(in[i + 2]), d = pad ? 0 : value_of(in[i + 3]);
    if (a < 0 || b < 0 || c < 0 || d < 0) return -1;
    unsigned v = (unsigned)a << 18 | (unsigned)b << 12 | (unsigned)c << 6 | (unsigned)d;
    out[o++] = (unsigned char)(v >> 16);
    if (pad < 2) out[o++] = (unsigned char)(v >> 8);
    if (pad < 1) out[o++] = (unsigned char)v;
  }
  out[o] = 0;
  return (long)o;
}
