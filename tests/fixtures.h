/* Fixtures the C tests share: a TCP connection on loopback, and this
   process's open descriptors (to see that nothing leaks). */
#ifndef QCG_TEST_FIXTURES_H
#define QCG_TEST_FIXTURES_H

#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"

/* *a connected to *b, both blocking. */
static inline void tcp_pair(int *a, int *b)
{
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sin);
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    REQUIRE(l >= 0);
    REQUIRE(bind(l, (struct sockaddr *)&sin, sizeof(sin)) == 0);
    REQUIRE(listen(l, 1) == 0);
    REQUIRE(getsockname(l, (struct sockaddr *)&sin, &len) == 0);
    *a = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(*a >= 0);
    REQUIRE(connect(*a, (struct sockaddr *)&sin, sizeof(sin)) == 0);
    *b = accept4(l, NULL, NULL, SOCK_CLOEXEC);
    REQUIRE(*b >= 0);
    close(l);
}

static inline int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    int n = 0;

    REQUIRE(d != NULL);
    while ((e = readdir(d)) != NULL)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

#endif
