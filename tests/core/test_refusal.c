/* core-refusal: a connect refused by a TCP reset, by an ICMP port
   unreachable and by an ICMP administratively prohibited, over IPv4 and
   IPv6, each told for what it is.  Linux reports the first two alike
   (ECONNREFUSED).  Needs root and iptables: the rules live in a network
   namespace of the test's own (exit 77, skipped, otherwise). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>

#include "check.h"
#include "refusal.h"

enum { PORT_ICMP = 5001, PORT_RESET = 5002, PORT_PROHIBITED = 5003, PORT_CLOSED = 5004 };

/* A non-blocking connect to addr:port, its error once it is over, and
   how refusal_read reads it. */
static enum refusal_kind attempt(int family, const char *addr, int port, int *err,
                                 struct refusal *r)
{
    struct sockaddr_storage ss = {0};
    socklen_t len;
    if (family == AF_INET) {
        struct sockaddr_in *s = (struct sockaddr_in *)&ss;
        s->sin_family = AF_INET;
        s->sin_port = htons((uint16_t)port);
        inet_pton(AF_INET, addr, &s->sin_addr);
        len = sizeof(*s);
    } else {
        struct sockaddr_in6 *s = (struct sockaddr_in6 *)&ss;
        s->sin6_family = AF_INET6;
        s->sin6_port = htons((uint16_t)port);
        inet_pton(AF_INET6, addr, &s->sin6_addr);
        len = sizeof(*s);
    }
    int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK, 0);
    REQUIRE(fd >= 0);
    CHECK(refusal_watch(fd) == 0);
    *err = 0;
    if (connect(fd, (struct sockaddr *)&ss, len) < 0 && errno != EINPROGRESS)
        *err = errno;
    if (*err == 0) {
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        socklen_t elen = sizeof(*err);
        CHECK(poll(&p, 1, 3000) == 1);
        CHECK(getsockopt(fd, SOL_SOCKET, SO_ERROR, err, &elen) == 0);
    }
    enum refusal_kind k = refusal_read(fd, *err, r);
    close(fd);
    return k;
}

static void family(int fam, const char *addr, const char *tables, const char *icmp_reject,
                   const char *prohibited)
{
    char cmd[512];
    int err;
    struct refusal r;

    snprintf(cmd, sizeof(cmd),
             "%1$s -A INPUT -p tcp --dport %2$d -j REJECT --reject-with %3$s && "
             "%1$s -A INPUT -p tcp --dport %4$d -j REJECT --reject-with tcp-reset && "
             "%1$s -A INPUT -p tcp --dport %5$d -j REJECT --reject-with %6$s",
             tables, PORT_ICMP, icmp_reject, PORT_RESET, PORT_PROHIBITED, prohibited);
    REQUIRE(system(cmd) == 0);

    CHECK_EQ(attempt(fam, addr, PORT_ICMP, &err, &r), REFUSAL_ICMP);
    CHECK_EQ(err, ECONNREFUSED); /* what the errno alone would call a reset */
    CHECK_EQ(r.icmp6, fam == AF_INET6);
    CHECK_STR(refusal_icmp_text(&r), "port unreachable");
    CHECK_STR(r.from, addr);
    CHECK_STR(refusal_word(r.kind), "icmp");

    CHECK_EQ(attempt(fam, addr, PORT_RESET, &err, &r), REFUSAL_RESET);
    CHECK_EQ(err, ECONNREFUSED);
    CHECK_STR(refusal_word(r.kind), "reset");

    CHECK_EQ(attempt(fam, addr, PORT_CLOSED, &err, &r), REFUSAL_RESET); /* the kernel's own */

    CHECK_EQ(attempt(fam, addr, PORT_PROHIBITED, &err, &r), REFUSAL_ICMP);
    CHECK_STR(refusal_icmp_text(&r), "administratively prohibited");

    /* Not a refusal: nothing queued, no ECONNREFUSED. */
    CHECK_EQ(refusal_read(-1, ETIMEDOUT, &r), REFUSAL_NONE);
    CHECK(refusal_word(REFUSAL_NONE) == NULL);
}

int main(void)
{
    if (geteuid() != 0 || unshare(CLONE_NEWNET) < 0) {
        printf("SKIP: core-refusal needs root (a network namespace and iptables)\n");
        return 77;
    }
    if (system("ip link set lo up && iptables -L INPUT -n >/dev/null 2>&1 && "
               "ip6tables -L INPUT -n >/dev/null 2>&1") != 0) {
        printf("SKIP: core-refusal needs ip, iptables and ip6tables\n");
        return 77;
    }
    family(AF_INET, "127.0.0.1", "iptables", "icmp-port-unreachable", "icmp-admin-prohibited");
    family(AF_INET6, "::1", "ip6tables", "icmp6-port-unreachable", "icmp6-adm-prohibited");
    return check_result("core-refusal");
}
