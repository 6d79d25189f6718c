/* core-lmsg: the library's reader of local messages against what a
   broken or hostile helper could send: split messages, bad headers, strings
   without NUL, descriptors on the wrong message, random bytes.  A clean
   error every time, never a crash or a leaked descriptor. */
#include <dirent.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* The exit-at-the-first-failure checks these tests were written with. */
#include "check.h"
#include "fixtures.h"
#include "fdpass.h"
#include "lmsg.h"
#include "qcgconn.h"

static void pair(int sp[2])
{
    REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sp) == 0);
}

/* Feeds raw bytes, then reads: the reader's verdict. */
static int feed(const void *buf, size_t len)
{
    struct lmsg_reader r;
    int sp[2], rc;

    pair(sp);
    lmsg_reader_init(&r);
    REQUIRE_EQ(write(sp[0], buf, len), (ssize_t)len);
    rc = lmsg_read(sp[1], &r);
    lmsg_reader_reset(&r);
    close(sp[0]);
    close(sp[1]);
    return rc;
}

static void test_split(void)
{
    struct {
        struct local_header h;
        struct local_plan p;
    } m;
    struct lmsg_reader r;
    int sp[2];

    memset(&m, 0, sizeof(m));
    m.h = (struct local_header){
        .magic = LOCAL_MAGIC, .type = LOCAL_PLAN, .length = sizeof(m.p), .request_id = 7};
    m.p.port = 99;
    strcpy(m.p.address, "127.0.0.1");
    pair(sp);
    lmsg_reader_init(&r);
    /* One byte at a time: not ready until the last byte. */
    for (size_t i = 0; i < sizeof(m); i++) {
        REQUIRE_EQ(write(sp[0], (char *)&m + i, 1), 1);
        REQUIRE_EQ(lmsg_read(sp[1], &r), i + 1 == sizeof(m) ? 1 : 0);
    }
    REQUIRE_EQ(r.hdr.request_id, 7);
    REQUIRE_EQ(r.payload.plan.port, 99);
    REQUIRE(strcmp(r.payload.plan.address, "127.0.0.1") == 0);
    lmsg_reader_reset(&r);
    /* EOF in the middle of a message. */
    REQUIRE_EQ(write(sp[0], &m, 10), 10);
    close(sp[0]);
    REQUIRE_EQ(lmsg_read(sp[1], &r), QCG_ENOHELPER);
    lmsg_reader_reset(&r);
    close(sp[1]);
}

static void test_bad(void)
{
    struct {
        struct local_header h;
        struct local_error e;
    } m;

    memset(&m, 0, sizeof(m));
    m.h = (struct local_header){.magic = LOCAL_MAGIC, .type = LOCAL_ERROR, .length = sizeof(m.e)};
    m.e.code = QCG_EDENIED;
    strcpy(m.e.message, "no");
    REQUIRE_EQ(feed(&m, sizeof(m)), 1);
    m.h.magic = 0;
    REQUIRE_EQ(feed(&m, sizeof(m)), QCG_EPROTO);
    m.h.magic = LOCAL_MAGIC;
    m.h.length = 0x7fffffff;
    REQUIRE_EQ(feed(&m, sizeof(m)), QCG_EPROTO);
    m.h.length = sizeof(m.e);
    m.h.type = 200;
    REQUIRE_EQ(feed(&m, sizeof(m)), QCG_EPROTO);
    m.h.type = LOCAL_ERROR;
    memset(m.e.message, 'A', sizeof(m.e.message));
    REQUIRE_EQ(feed(&m, sizeof(m)), QCG_EPROTO);
}

/* A descriptor may only come with LOCAL_INCOMING, and is closed otherwise. */
static void test_fd_on_wrong_message(void)
{
    struct local_header h = {.magic = LOCAL_MAGIC, .type = LOCAL_OK, .request_id = 1};
    struct lmsg_reader r;
    int sp[2], before;

    pair(sp);
    before = count_fds();
    REQUIRE_EQ(fdpass_send(sp[0], &h, sizeof(h), sp[0]), (ssize_t)sizeof(h));
    lmsg_reader_init(&r);
    REQUIRE_EQ(lmsg_read(sp[1], &r), QCG_EPROTO);
    lmsg_reader_reset(&r);
    REQUIRE_EQ(count_fds(), before);
    close(sp[0]);
    close(sp[1]);
}

/* Random bytes: any verdict but a crash, and no descriptor left behind. */
static void test_random(void)
{
    unsigned seed = 12345;
    int before = count_fds();

    for (int round = 0; round < 2000; round++) {
        unsigned char buf[600];
        size_t len = 1 + (seed % sizeof(buf));

        for (size_t i = 0; i < len; i++) {
            seed = seed * 1103515245u + 12345u;
            buf[i] = (unsigned char)(seed >> 16);
        }
        /* Half the rounds start with a valid magic, to get past it. */
        if (round % 2 == 0 && len >= 4) {
            uint32_t magic = LOCAL_MAGIC;

            memcpy(buf, &magic, 4);
        }
        int rc = feed(buf, len);
        REQUIRE(rc == 0 || rc == 1 || rc == QCG_EPROTO);
    }
    REQUIRE_EQ(count_fds(), before);
}

int main(void)
{
    test_split();
    test_bad();
    test_fd_on_wrong_message();
    test_random();
    return check_result("core-lmsg");
}
