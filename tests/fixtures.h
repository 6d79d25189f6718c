/* Fixtures the C tests share: a TCP connection on loopback, and the
   entries of a directory (this process's descriptors: nothing leaks). */
#ifndef QCG_TEST_FIXTURES_H
#define QCG_TEST_FIXTURES_H

#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"

/* Job secrets strong enough for libqcgconn and the helper (64 hex, 256
   bits), and two jobs' apart. */
#define TEST_SECRET "5ec2e70123456789abcdef0123456789abcdef0123456789abcdef0123456789"
#define TEST_SECRET_2 "07e425fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876"

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

/* The entries of a directory, but . and ..; count_fds: this process's descriptors. */
#define count_fds() count_entries("/proc/self/fd")
static inline int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;

    REQUIRE(d != NULL);
    while ((e = readdir(d)) != NULL)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

#endif
