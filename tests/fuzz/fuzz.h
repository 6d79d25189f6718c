/* What the libFuzzer harnesses of tests/fuzz share: the entry points and the
   checks that turn a broken promise of a parser into a crash libFuzzer keeps. */
#ifndef QCG_FUZZ_H
#define QCG_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* A parser's promise that did not hold: abort, which libFuzzer reports with
   the input. */
#define FUZZ_ASSERT(cond)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: broken promise: %s\n", __FILE__, __LINE__, #cond);             \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* Reads every byte of s, so that ASan sees a string that does not end. */
extern volatile size_t fuzz_sink;
static inline void fuzz_touch(const char *s)
{
    fuzz_sink += strlen(s);
}

/* A copy of the input in a heap buffer of exactly its size (one byte for an
   empty input), so that ASan sees a read past its end.  Free it. */
void *fuzz_copy(const uint8_t *data, size_t size);

/* A Unix stream socket to read data from, then EOF: returns the reading
   end; *writer is the other end (half-closed, still open so that an answer
   can be written).  Close both. */
int fuzz_socket_holding(const uint8_t *data, size_t size, int *writer);

/* A string field of a fixed-size array holds its NUL. */
#define FUZZ_TERMINATED(field) FUZZ_ASSERT(memchr((field), '\0', sizeof(field)) != NULL)

/* A reason given with a refusal: one non-empty line. */
#define FUZZ_REASON(why)                                                                           \
    do {                                                                                           \
        FUZZ_TERMINATED(why);                                                                      \
        FUZZ_ASSERT((why)[0] != '\0' && strchr((why), '\n') == NULL);                              \
    } while (0)

#endif
