/* The descriptor limit; see nofile.h. */
#include "nofile.h"

#include <stdio.h>
#include <sys/resource.h>

#include "log.h"
#include "relay.h"

/* Descriptors kept for the control server, logs, the listener and such. */
#define NOFILE_RESERVE 256
/* Per pair: its own descriptors, and its two connections while unpaired. */
#define NOFILE_PER_PAIR (RELAY_FDS_PER_PAIR + 2)

int nofile_raise(int max_pairs)
{
    struct rlimit rl, was;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0) {
        log_warn("getrlimit(RLIMIT_NOFILE)");
        return max_pairs;
    }
    was = rl;
    rlim_t want = (rlim_t)max_pairs * NOFILE_PER_PAIR + NOFILE_RESERVE;
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < want) {
        /* Above the hard limit only with CAP_SYS_RESOURCE, and up to nr_open. */
        struct rlimit up = {.rlim_cur = want, .rlim_max = want};
        FILE *f = fopen("/proc/sys/fs/nr_open", "r");
        unsigned long nr_open = 0;
        if (f) {
            if (fscanf(f, "%lu", &nr_open) == 1 && nr_open > rl.rlim_max && nr_open < want)
                up.rlim_cur = up.rlim_max = nr_open;
            fclose(f);
        }
        if (setrlimit(RLIMIT_NOFILE, &up) == 0)
            rl = up;
    }
    if (rl.rlim_cur < want && rl.rlim_cur < rl.rlim_max) {
        struct rlimit up = {.rlim_cur = rl.rlim_max < want ? rl.rlim_max : want,
                            .rlim_max = rl.rlim_max};
        if (setrlimit(RLIMIT_NOFILE, &up) == 0)
            rl.rlim_cur = up.rlim_cur;
        else
            log_warn("setrlimit(RLIMIT_NOFILE, %llu)", (unsigned long long)up.rlim_cur);
    }
    long room = rl.rlim_cur == RLIM_INFINITY
                    ? (long)max_pairs
                    : ((long)rl.rlim_cur - NOFILE_RESERVE) / NOFILE_PER_PAIR;
    if (room < 1)
        room = 1;
    if (room < max_pairs) {
        log_warnx("file descriptors: %llu (was %llu, hard limit %llu): room for %ld pairs, not "
                  "max-pairs %d: raise the hard limit before the start (systemd: LimitNOFILE=, "
                  "already 1048576 in qcg-proxy.service; a shell, as root: ulimit -n 1048576; "
                  "Docker: --ulimit nofile=1048576:1048576; docs/admin.md, \"Without systemd\")",
                  (unsigned long long)rl.rlim_cur, (unsigned long long)was.rlim_cur,
                  (unsigned long long)rl.rlim_max, room, max_pairs);
        return (int)room;
    }
    log_info("file descriptors: %llu (was %llu): room for max-pairs %d",
             (unsigned long long)rl.rlim_cur, (unsigned long long)was.rlim_cur, max_pairs);
    return max_pairs;
}
