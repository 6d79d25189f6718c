/* Which capabilities a helper process holds: whether the node may
   intercept (NFQUEUE) and inject (raw socket) packets goes to the frontend
   as canIntercept.  Giving them up is util/privdrop.c's. */
#include <linux/capability.h>
#include <stdio.h>

#include "helper.h"
#include "privdrop.h"

int helper_caps_missing(pid_t pid, char *out, size_t outlen)
{
    static const struct {
        int cap;
        const char *name;
    } caps[] = {{CAP_NET_ADMIN, "CAP_NET_ADMIN"}, {CAP_NET_RAW, "CAP_NET_RAW"}};
    size_t used = 0;
    int missing = 0;

    if (outlen > 0)
        out[0] = '\0';
    int64_t effective = privdrop_effective(pid);
    if (effective < 0) {
        snprintf(out, outlen, "CAP_NET_ADMIN and CAP_NET_RAW (capget failed)");
        return 2;
    }
    for (size_t i = 0; i < sizeof(caps) / sizeof(caps[0]); i++) {
        if ((uint64_t)effective & (1ull << caps[i].cap))
            continue;
        int n = snprintf(out + used, outlen - used, "%s%s", missing ? " and " : "", caps[i].name);
        if (n > 0 && (size_t)n < outlen - used)
            used += (size_t)n;
        missing++;
    }
    return missing;
}

int helper_can_intercept(pid_t pid)
{
    char unused[64];

    return helper_caps_missing(pid, unused, sizeof(unused)) == 0;
}
