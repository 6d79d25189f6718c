/* Lowercase hex text of bytes: tokens, keys, SYNs, job ids. */
#ifndef QCG_HEX_H
#define QCG_HEX_H

#include <stdbool.h>
#include <stddef.h>

/* Writes 2 * n lowercase hex characters and a NUL into out. */
void hex_encode(const void *data, size_t n, char *out);
/* Decodes the first 2 * n characters of text into n bytes of out: lowercase
   digits only, or either case when allow_upper.  0, or -1 at the first
   character that is not one (out then holds part of the bytes). */
int hex_decode(const char *text, size_t n, void *out, bool allow_upper);
/* 1..max_len lowercase hex characters (any length parity); false for NULL. */
bool hex_lower_valid(const char *text, size_t max_len);

#endif
