/* Shared by the MPI test programs: deterministic payloads, checksums and the
   PASS/FAIL verdict.  Header-only (static functions). */
#ifndef MPITEST_H
#define MPITEST_H

#include <mpi.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Payload bytes that depend on who sent what: a wrong, doubled or swapped
   message shows up as a checksum mismatch. */
static inline uint64_t mt_seed(int src, int dst, size_t size, int seq)
{
    uint64_t x = 0x9e3779b97f4a7c15ull;

    x ^= (uint64_t)(unsigned)src * 0xbf58476d1ce4e5b9ull;
    x ^= (uint64_t)(unsigned)dst * 0x94d049bb133111ebull;
    x ^= (uint64_t)size * 0x2545f4914f6cdd1dull;
    x ^= (uint64_t)(unsigned)seq * 0x9e3779b97f4a7c15ull;
    return x ? x : 1;
}

static inline void mt_fill(unsigned char *buf, size_t size, uint64_t seed)
{
    uint64_t x = seed;
    size_t i = 0;

    for (; i + 8 <= size; i += 8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        memcpy(buf + i, &x, 8);
    }
    for (; i < size; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        buf[i] = (unsigned char)x;
    }
}

/* FNV-1a over the bytes. */
static inline uint64_t mt_sum(const unsigned char *buf, size_t size)
{
    uint64_t h = 0xcbf29ce484222325ull;

    for (size_t i = 0; i < size; i++) {
        h ^= buf[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

/* The checksum the receiver expects for (src, dst, size, seq). */
static inline uint64_t mt_expected(int src, int dst, size_t size, int seq, unsigned char *scratch)
{
    mt_fill(scratch, size, mt_seed(src, dst, size, seq));
    return mt_sum(scratch, size);
}

static int mt_errors;

static inline void mt_error(int rank, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline void mt_error(int rank, const char *fmt, ...)
{
    va_list ap;

    if (mt_errors++ < 10) {
        fprintf(stderr, "rank %d: ", rank);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputc('\n', stderr);
    }
}

static inline double mt_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static inline void *mt_alloc(size_t size)
{
    void *p = malloc(size ? size : 1);

    if (p == NULL) {
        fprintf(stderr, "out of memory (%zu bytes)\n", size);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    return p;
}

/* Every rank's errors summed; rank 0 prints one PASS or FAIL line.  Returns
   the process's exit status (non-zero on any failure anywhere). */
static inline int mt_verdict(const char *name, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static inline int mt_verdict(const char *name, const char *fmt, ...)
{
    int rank, size, total = 0;
    char detail[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(detail, sizeof(detail), fmt, ap);
    va_end(ap);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Allreduce(&mt_errors, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("%s %s: %d ranks, %s%s%d errors\n", total ? "FAIL" : "PASS", name, size, detail,
               detail[0] ? ", " : "", total);
        fflush(stdout);
    }
    return total ? 1 : 0;
}

#endif
