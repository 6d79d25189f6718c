/* core-fdpass: a passed descriptor arrives and works; extra
   descriptors are closed; truncated control data is refused without leaking. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* The exit-at-the-first-failure checks these tests were written with. */
#include "../libqcgconn/check.h"
#include "fdpass.h"

static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    int n = 0;

    CHECK(d != NULL);
    while ((e = readdir(d)) != NULL)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* Sends nfds descriptors with one message, bypassing fdpass_send. */
static void send_many(int sock, const int *fds, int nfds)
{
    char ctl[CMSG_SPACE(32 * sizeof(int))];
    char byte = 'm';
    struct iovec iov = {.iov_base = &byte, .iov_len = 1};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl,
                         .msg_controllen = CMSG_SPACE(nfds * sizeof(int))};
    struct cmsghdr *c;

    CHECK(nfds <= 32);
    memset(ctl, 0, sizeof(ctl));
    c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(nfds * sizeof(int));
    memcpy(CMSG_DATA(c), fds, nfds * sizeof(int));
    CHECK_EQ(sendmsg(sock, &msg, 0), 1);
}

/* A descriptor arrives, is close-on-exec, and is the same pipe. */
static void test_one(void)
{
    int sp[2], p[2], got = -2;
    char buf[16];

    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sp) == 0);
    CHECK(pipe(p) == 0);
    CHECK_EQ(fdpass_send(sp[0], "hello", 5, p[1]), 5);
    close(p[1]);
    CHECK_EQ(fdpass_recv(sp[1], buf, sizeof(buf), &got), 5);
    CHECK(memcmp(buf, "hello", 5) == 0);
    CHECK(got >= 0);
    CHECK(fcntl(got, F_GETFD) & FD_CLOEXEC);
    CHECK_EQ(write(got, "x", 1), 1);
    CHECK_EQ(read(p[0], buf, 1), 1);
    CHECK_EQ(buf[0], 'x');
    close(got);
    /* Our copy was the last write end: the reader now sees EOF. */
    CHECK_EQ(read(p[0], buf, 1), 0);

    /* No descriptor: *fd = -1. */
    CHECK_EQ(fdpass_send(sp[0], "ab", 2, -1), 2);
    CHECK_EQ(fdpass_recv(sp[1], buf, sizeof(buf), &got), 2);
    CHECK_EQ(got, -1);
    /* A descriptor needs data to ride on. */
    CHECK_EQ(fdpass_send(sp[0], "", 0, p[0]), -1);
    CHECK_EQ(errno, EINVAL);
    /* EOF. */
    close(sp[0]);
    CHECK_EQ(fdpass_recv(sp[1], buf, sizeof(buf), &got), 0);
    CHECK_EQ(got, -1);
    close(sp[1]);
    close(p[0]);
}

/* Three descriptors: the first is kept, the two others closed. */
static void test_extra(void)
{
    int sp[2], p[3][2], fds[3], got = -2, before;
    char buf[4];

    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sp) == 0);
    for (int i = 0; i < 3; i++) {
        CHECK(pipe(p[i]) == 0);
        fds[i] = p[i][1];
    }
    send_many(sp[0], fds, 3);
    for (int i = 0; i < 3; i++)
        close(p[i][1]);
    before = count_fds();
    CHECK_EQ(fdpass_recv(sp[1], buf, sizeof(buf), &got), 1);
    CHECK(got >= 0);
    CHECK_EQ(count_fds(), before + 1);
    /* The extra write ends are gone: their readers see EOF. */
    CHECK(fcntl(p[1][0], F_SETFL, O_NONBLOCK) == 0);
    CHECK(fcntl(p[2][0], F_SETFL, O_NONBLOCK) == 0);
    CHECK_EQ(read(p[1][0], buf, 1), 0);
    CHECK_EQ(read(p[2][0], buf, 1), 0);
    /* The kept one works. */
    CHECK_EQ(write(got, "k", 1), 1);
    CHECK_EQ(read(p[0][0], buf, 1), 1);
    close(got);
    for (int i = 0; i < 3; i++)
        close(p[i][0]);
    close(sp[0]);
    close(sp[1]);
}

/* More descriptors than the control buffer holds: MSG_CTRUNC, refused, and
   nothing leaks. */
static void test_truncated(void)
{
    int sp[2], fds[24], got = -2, before;
    char buf[4];

    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sp) == 0);
    for (int i = 0; i < 24; i++)
        fds[i] = dup(sp[0]);
    send_many(sp[0], fds, 24);
    for (int i = 0; i < 24; i++)
        close(fds[i]);
    before = count_fds();
    errno = 0;
    CHECK_EQ(fdpass_recv(sp[1], buf, sizeof(buf), &got), -1);
    CHECK_EQ(errno, EPROTO);
    CHECK_EQ(got, -1);
    CHECK_EQ(count_fds(), before);
    close(sp[0]);
    close(sp[1]);
}

/* EAGAIN on an empty non-blocking socket. */
static void test_empty(void)
{
    int sp[2], got = -2;
    char buf[4];

    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sp) == 0);
    CHECK_EQ(fdpass_recv(sp[1], buf, sizeof(buf), &got), -1);
    CHECK(errno == EAGAIN || errno == EWOULDBLOCK);
    close(sp[0]);
    close(sp[1]);
}

int main(void)
{
    test_one();
    test_extra();
    test_truncated();
    test_empty();
    printf("core-fdpass: ok\n");
    return 0;
}
