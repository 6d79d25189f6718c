/* The ports range against the kernel's ephemeral range; see ephemeral.h. */
#include "ephemeral.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

/* Whether port is in the reserved list ("a-b,c,..."); -1 when malformed. */
static int reserved_has(const char *list, int port)
{
    const char *p = list;
    while (*p != '\0' && *p != '\n') {
        char *end;
        long a = strtol(p, &end, 10), b = a;
        if (end == p || a < 0 || a > 65535)
            return -1;
        p = end;
        if (*p == '-') {
            b = strtol(p + 1, &end, 10);
            if (end == p + 1 || b < a || b > 65535)
                return -1;
            p = end;
        }
        if (port >= a && port <= b)
            return 1;
        if (*p == ',')
            p++;
        else if (*p != '\0' && *p != '\n')
            return -1;
    }
    return 0;
}

int ephemeral_unreserved(int low, int high, const char *port_range, const char *reserved)
{
    int first, last, n = 0;
    if (sscanf(port_range, "%d %d", &first, &last) != 2 || first > last)
        return -1;
    for (int port = low > first ? low : first; port <= high && port <= last; port++) {
        int r = reserved_has(reserved, port);
        if (r < 0)
            return -1;
        n += r == 0;
    }
    return n;
}

static bool read_sysctl(const char *path, char *buf, size_t len)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return false;
    size_t n = fread(buf, 1, len - 1, f);
    fclose(f);
    buf[n] = '\0';
    return true;
}

void ephemeral_warn(int low, int high)
{
    char range[64], reserved[4096];
    if (!read_sysctl("/proc/sys/net/ipv4/ip_local_port_range", range, sizeof(range)) ||
        !read_sysctl("/proc/sys/net/ipv4/ip_local_reserved_ports", reserved, sizeof(reserved)))
        return;
    int n = ephemeral_unreserved(low, high, range, reserved);
    if (n > 0) {
        range[strcspn(range, "\n")] = '\0';
        for (char *p = range; *p != '\0'; p++)
            *p = *p == '\t' ? '-' : *p;
        log_warnx("ports %d-%d: %d of them are in the kernel's ephemeral range %s "
                  "(net.ipv4.ip_local_port_range) and not reserved: an outgoing connection may "
                  "take one before a rank listens on it; choose a range outside, or reserve it "
                  "(net.ipv4.ip_local_reserved_ports, docs/admin.md section 6)",
                  low, high, n, range);
    }
}
