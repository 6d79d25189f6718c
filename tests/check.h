/* Minimal assertions for the unit tests: report every failed check with its
   location and keep going; main returns check_result(). */
#ifndef QCG_TEST_CHECK_H
#define QCG_TEST_CHECK_H

#include <stdio.h>
#include <string.h>

static int check_failures;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);                        \
            check_failures++;                                                                      \
        }                                                                                          \
    } while (0)

#define CHECK_STR(got, want)                                                                       \
    do {                                                                                           \
        const char *g_ = (got), *w_ = (want);                                                      \
        if (g_ == NULL || strcmp(g_, w_) != 0) {                                                   \
            fprintf(stderr, "FAIL %s:%d: %s is \"%s\", expected \"%s\"\n", __FILE__, __LINE__,     \
                    #got, g_ ? g_ : "(null)", w_);                                                 \
            check_failures++;                                                                      \
        }                                                                                          \
    } while (0)

/* got contains the substring want. */
#define CHECK_HAS(got, want)                                                                       \
    do {                                                                                           \
        const char *g_ = (got), *w_ = (want);                                                      \
        if (g_ == NULL || strstr(g_, w_) == NULL) {                                                \
            fprintf(stderr, "FAIL %s:%d: %s is \"%s\", expected it to contain \"%s\"\n", __FILE__, \
                    __LINE__, #got, g_ ? g_ : "(null)", w_);                                       \
            check_failures++;                                                                      \
        }                                                                                          \
    } while (0)

static inline int check_result(const char *name)
{
    if (check_failures) {
        fprintf(stderr, "%s: %d check(s) failed\n", name, check_failures);
        return 1;
    }
    printf("%s: all checks passed\n", name);
    return 0;
}

#endif
