/* The little JSON the command-line tools print (--json). */
#ifndef QCG_JSON_H
#define QCG_JSON_H

#include <stdio.h>

/* Writes s as a JSON string literal, quotes included; NULL as "". */
void json_string(FILE *out, const char *s);

#endif
