/* Signalling a launch's session (proctree.h). */
#include "proctree.h"

#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The session of process pid from /proc/PID/stat, or -1. */
static long session_of(const char *pid)
{
    char path[64], buf[512], *p;
    long session = -1;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%s/stat", pid);
    f = fopen(path, "re");
    if (f == NULL)
        return -1;
    if (fgets(buf, sizeof(buf), f) != NULL && (p = strrchr(buf, ')')) != NULL) {
        char state;
        long ppid, pgrp;
        /* After the command name: state ppid pgrp session. */
        if (sscanf(p + 1, " %c %ld %ld %ld", &state, &ppid, &pgrp, &session) != 4 || state == 'Z')
            session = -1;
    }
    fclose(f);
    return session;
}

int session_signal(pid_t sid, int sig)
{
    DIR *d;
    struct dirent *e;
    int n = 0;

    if (sid <= 1)
        return 0;
    d = opendir("/proc");
    if (d == NULL)
        return kill(-sid, sig) == 0;
    while ((e = readdir(d)) != NULL) {
        char *end;
        long pid = strtol(e->d_name, &end, 10);
        if (*end != '\0' || pid <= 1)
            continue;
        if (session_of(e->d_name) == sid && kill((pid_t)pid, sig) == 0)
            n++;
    }
    closedir(d);
    return n;
}
