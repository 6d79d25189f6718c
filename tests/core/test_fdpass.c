/* core-fdpass: a passed descriptor arrives and works; extra
   descriptors are closed; truncated control data is refused without leaking. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* The exit-at-the-first-failure checks these tests were written with. */
#include "check.h"
#include "fixtures.h"
#include "fdpass.h"

/* Sends nfds descriptors with one message, bypassing fdpass_send. */
static void send_many(int sock, const int *fds, int nfds)
{
    char ctl[CMSG_SPACE(32 * sizeof(int))];
    char byte = 'm';
    struct iovec iov = {.iov_base = &byte, .iov_len = 1};
    struct msghdr msg = {.msg_iov = &iov,
                         .msg_iovlen = 1,
                         .msg_control = ctl,
                         .msg_controllen = CMSG_SPACE(nfds * sizeof(int))};
    struct cmsghdr *c;

    REQUIRE(nfds <= 32);
    memset(ctl, 0, sizeof(ctl));
    c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(nfds * sizeof(int));
    memcpy(CMSG_DATA(c), fds, nfds * sizeof(int));
    REQUIRE_EQ(sendmsg(sock, &msg, 0), 1);
}

/* A descriptor arrives, is close-on-exec, and is the same pipe. */
static void test_one(void)
{
    int sp[2], p[2], got = -2;
    char buf[16];

    REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, sp) == 0);
    REQUIRE(pipe(p) == 0);
    REQUIRE_EQ(fdpass_send(sp[0], "hello", 5, p[1]), 5);
    close(p[1]);
    REQUIRE_EQ(fdpass_recv(sp[1], buf, sizeof(buf), &got), 5);
    REQUIRE(memcmp(buf, "hello", 5) == 0);
    REQUIRE(got >= 0);
    REQUIRE(fcntl(got, F_GETFD) & FD_CLOEXEC);
    REQUIRE_EQ(write(got, "x", 1), 1);
    REQUIRE_EQ(read(p[0], buf, 1), 1);
    REQUIRE_EQ(buf[0], 'x');
    close(got);
    /* Our copy was the last write end: the reader now sees EOF. */
    REQUIRE_EQ(read(p[0], buf, 1), 0);

    /* No descriptor: *fd = -1. */
    REQUIRE_EQ(fdpass_send(sp[0], "ab", 2, -1), 2);
    REQUIRE_EQ(fdpass_recv(sp[1], buf, sizeof(buf), &got), 2);
    REQUIRE_EQ(got, -1);
    /* A descriptor needs data to ride on. */
    REQUIRE_EQ(fdpass_send(sp[0], "", 0, p[0]), -1);
    REQUIRE_EQ(errno, EINVAL);
    /* EOF. */
    close(sp[0]);
    REQUIRE_EQ(fdpass_recv(sp[1], buf, sizeof(buf), &got), 0);
    REQUIRE_EQ(got, -1);
    close(sp[1]);
    close(p[0]);
}

/* Three descriptors: the first is kept, the two others closed. */
static void test_extra(void)
{
    int sp[2], p[3][2], fds[3], got = -2, before;
    char buf[4];

    REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, sp) == 0);
    for (int i = 0; i < 3; i++) {
        REQUIRE(pipe(p[i]) == 0);
        fds[i] = p[i][1];
    }
    send_many(sp[0], fds, 3);
    for (int i = 0; i < 3; i++)
        close(p[i][1]);
    before = count_fds();
    REQUIRE_EQ(fdpass_recv(sp[1], buf, sizeof(buf), &got), 1);
    REQUIRE(got >= 0);
    REQUIRE_EQ(count_fds(), before + 1);
    /* The extra write ends are gone: their readers see EOF. */
    REQUIRE(fcntl(p[1][0], F_SETFL, O_NONBLOCK) == 0);
    REQUIRE(fcntl(p[2][0], F_SETFL, O_NONBLOCK) == 0);
    REQUIRE_EQ(read(p[1][0], buf, 1), 0);
    REQUIRE_EQ(read(p[2][0], buf, 1), 0);
    /* The kept one works. */
    REQUIRE_EQ(write(got, "k", 1), 1);
    REQUIRE_EQ(read(p[0][0], buf, 1), 1);
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

    REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, sp) == 0);
    for (int i = 0; i < 24; i++)
        fds[i] = dup(sp[0]);
    send_many(sp[0], fds, 24);
    for (int i = 0; i < 24; i++)
        close(fds[i]);
    before = count_fds();
    errno = 0;
    REQUIRE_EQ(fdpass_recv(sp[1], buf, sizeof(buf), &got), -1);
    REQUIRE_EQ(errno, EPROTO);
    REQUIRE_EQ(got, -1);
    REQUIRE_EQ(count_fds(), before);
    close(sp[0]);
    close(sp[1]);
}

/* EAGAIN on an empty non-blocking socket. */
static void test_empty(void)
{
    int sp[2], got = -2;
    char buf[4];

    REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sp) == 0);
    REQUIRE_EQ(fdpass_recv(sp[1], buf, sizeof(buf), &got), -1);
    REQUIRE(errno == EAGAIN || errno == EWOULDBLOCK);
    close(sp[0]);
    close(sp[1]);
}

int main(void)
{
    test_one();
    test_extra();
    test_truncated();
    test_empty();
    return check_result("core-fdpass");
}
