/* ah_path_text.h: line-oriented text helpers shared by the path catalog and topology parsers
 * (path/ah_path_text.c holds them; ah_path_policy.c and ah_path_plan.c use them). Internal to path/. */
#ifndef AH_PATH_TEXT_H
#define AH_PATH_TEXT_H

#include <stddef.h>
#include <stdint.h>

/* Reads a whole file into a malloc'd NUL-terminated string; logs (naming `what` and the path) and
 * returns NULL on failure. */
char *ah_path_text_read(const char *path, const char *what);
/* Returns the next line of the buffer at *cur (terminated in place, comment after '#' cut) and
 * advances *cur and *lineno_p; NULL at the end. `orig` receives the uncut line for messages. */
char *ah_path_text_line(char **cur, int *lineno_p, char *orig, unsigned orig_size);
/* Splits `line` in place into at most `max` blank-separated words; returns the count, or max + 1
 * when there are more. */
int ah_path_text_words(char *line, char **w, int max);
/* Strict integer: the whole text, in [lo, hi]. Returns 0 and sets *v_p, or -1. */
int ah_path_text_long(const char *s, long lo, long hi, long *v_p);

/* CRC-32 (IEEE, reflected) of n bytes continuing from crc: the hash model's and the spread rule's
 * mixing function. */
uint32_t ah_path_crc32_update(uint32_t crc, const uint8_t *p, size_t n);

#endif
