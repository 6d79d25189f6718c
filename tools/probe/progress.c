/* Time and progress for every part of qcg-probe. */
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <time.h>

#include "probe.h"

double probe_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1000.0 + (double)ts.tv_nsec / 1e6;
}

int probe_left_ms(double deadline_ms)
{
    double left = deadline_ms - probe_now_ms();
    return left <= 0 ? 0 : left > INT_MAX ? INT_MAX : (int)left;
}

void probe_progress(const struct probe_opts *o, const char *fmt, ...)
{
    va_list ap;
    if (!o->progress)
        return;
    fputs("\r\033[K", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs(" ...", stderr);
    fflush(stderr);
}

void probe_progress_done(const struct probe_opts *o)
{
    if (o->progress)
        fputs("\r\033[K", stderr);
}
