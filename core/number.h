/* Whole decimal numbers from text a user or a peer wrote: no blanks, no
   trailing characters, no silent overflow (atoi and sscanf's %d have all
   three). */
#ifndef QCG_NUMBER_H
#define QCG_NUMBER_H

/* *out = the number s is, in [min, max]; -1 (and *out untouched) if s is
   not one, or out of the range. */
int number_parse(const char *s, long min, long max, long *out);

#endif
