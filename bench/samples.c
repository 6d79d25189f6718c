/* See samples.h. */
#include "samples.h"

#include <stdlib.h>

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

void samples_sort(uint64_t *v, size_t n)
{
    if (n > 1)
        qsort(v, n, sizeof(*v), cmp_u64);
}

uint64_t samples_percentile(const uint64_t *sorted, size_t n, unsigned pct)
{
    if (n == 0)
        return 0;
    size_t rank = (n * pct + 99) / 100; /* 1-based, rounded up */
    return sorted[rank > 0 ? rank - 1 : 0];
}

uint64_t samples_median(uint64_t *v, size_t n)
{
    if (n == 0)
        return 0;
    samples_sort(v, n);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}
