/* ah_quote.h: a value from outside (an environment variable, a file name) as one log line can show
 * it — control characters and bytes that are not UTF-8 escaped, so a value with a newline is never
 * logged as two lines whose first looks like the whole value, and no raw byte reaches a terminal. */
#ifndef AH_QUOTE_H
#define AH_QUOTE_H

#include <stddef.h>

/* Writes `in` to out (outlen bytes, NUL-terminated; cut short with "..." when it does not fit):
 * \n \r \t \\ and ' as such, other control characters, DEL and every byte of an invalid UTF-8
 * sequence as \xNN; valid UTF-8 unchanged. Returns out. */
char *ah_quote(const char *in, char *out, size_t outlen);
/* Length of the well-formed UTF-8 character at p (RFC 3629: no overlongs, no surrogates, at most
 * U+10FFFF), or 0 when p does not start one (a NUL ends a sequence too). */
size_t ah_utf8_len(const unsigned char *p);

#endif
