/* The listen backlog from a server's configuration; see backlog.h. */
#include "backlog.h"

#include <stdio.h>

int backlog_for(long want)
{
    return want < BACKLOG_MIN ? BACKLOG_MIN : want > BACKLOG_MAX ? BACKLOG_MAX : (int)want;
}

int backlog_kernel_max(void)
{
    FILE *f = fopen("/proc/sys/net/core/somaxconn", "r");
    int n = -1;
    if (f != NULL) {
        if (fscanf(f, "%d", &n) != 1)
            n = -1;
        fclose(f);
    }
    return n;
}

void backlog_capped_text(int backlog, char *out, size_t outlen)
{
    int kernel_max = backlog_kernel_max();

    if (outlen > 0)
        out[0] = '\0';
    if (kernel_max > 0 && kernel_max < backlog)
        snprintf(out, outlen, ", of which the kernel keeps %d (net.core.somaxconn)", kernel_max);
}
