/* qcg-probe against a helper of the local protocol before its own (8): a
   stand-in here, on a Unix socket of its own, refusing HELLO 9 as such a
   helper does ("this helper speaks 8") and closing on PUNCHING, a type it
   does not know.  The probe says HELLO again in 8, gets the site, asks no
   PUNCHING, and names IPv4's hop count from SITE_OK and, for IPv6, that
   the helper names none. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bounded_io.h"
#include "check.h"
#include "lmsg.h"
#include "probe.h"
#include "render.h"

#define OLD_VERSION 8

static void answer(int fd, const struct lmsg_reader *r, uint64_t deadline)
{
    union local_payload p;

    memset(&p, 0, sizeof(p));
    switch (r->hdr.type) {
    case LOCAL_HELLO:
        if (r->payload.hello.version != OLD_VERSION) {
            p.error.code = QCG_EPROTO;
            snprintf(p.error.message, sizeof(p.error.message),
                     "HELLO of protocol version %u; this helper speaks %d",
                     r->payload.hello.version, OLD_VERSION);
            lmsg_send(fd, LOCAL_ERROR, r->hdr.request_id, &p, deadline);
            return;
        }
        p.hello_ok.version = OLD_VERSION;
        p.hello_ok.port_low = 27000;
        p.hello_ok.port_high = 27999;
        strcpy(p.hello_ok.address, "198.18.1.11");
        strcpy(p.hello_ok.other_address[0], "2001:db8:3::11");
        lmsg_send(fd, LOCAL_HELLO_OK, r->hdr.request_id, &p, deadline);
        return;
    case LOCAL_SITE:
        strcpy(p.site.node, "nata1");
        strcpy(p.site.address, "198.18.1.11");
        strcpy(p.site.cluster.name, "nata");
        strcpy(p.site.cluster.kind, "nat");
        strcpy(p.site.reflector, "203.0.113.10:7704");
        strcpy(p.site.reflector6, "[2001:db8::10]:7704");
        p.site.punch_hops = 3;
        p.site.punch_first_ttl = 3;
        lmsg_send(fd, LOCAL_SITE_OK, r->hdr.request_id, &p, deadline);
        return;
    default:
        /* PUNCHING: a type a helper of version 8 does not know. */
        p.error.code = QCG_EPROTO;
        snprintf(p.error.message, sizeof(p.error.message), "unknown message type %u",
                 (unsigned)r->hdr.type);
        lmsg_send(fd, LOCAL_ERROR, r->hdr.request_id, &p, deadline);
        return;
    }
}

/* The stand-in: each connection read until it closes or errs. */
static void serve(int listener)
{
    for (;;) {
        int fd = accept(listener, NULL, NULL);
        if (fd < 0)
            _exit(1);
        struct lmsg_reader r;
        lmsg_reader_init(&r);
        for (;;) {
            uint64_t deadline = now_us() + 5000000u;
            if (lmsg_recv(fd, &r, deadline) != 0)
                break;
            answer(fd, &r, deadline);
            if (r.hdr.type != LOCAL_HELLO && r.hdr.type != LOCAL_SITE)
                break;
        }
        lmsg_reader_reset(&r);
        close(fd);
    }
}

int main(void)
{
    char dir[] = "/tmp/qcg-probe-old-helper.XXXXXX";
    struct sockaddr_un sun = {.sun_family = AF_UNIX};

    REQUIRE(mkdtemp(dir) != NULL);
    snprintf(sun.sun_path, sizeof(sun.sun_path), "%s/helper.sock", dir);
    int listener = socket(AF_UNIX, SOCK_STREAM, 0);
    REQUIRE(listener >= 0);
    REQUIRE(bind(listener, (struct sockaddr *)&sun, sizeof(sun)) == 0);
    REQUIRE(listen(listener, 8) == 0);
    pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0)
        serve(listener);
    close(listener);

    struct probe_opts opts = {.encrypt = QCG_ENCRYPT_INTER_SITE, .helper_socket = sun.sun_path};
    static struct probe_run run;
    run.opts = &opts;
    CHECK(site_probe(&opts, &run.site, probe_now_ms() + 20000) == 0);
    CHECK(helper_version() == OLD_VERSION);
    CHECK(strcmp(run.site.info.node, "nata1") == 0);
    CHECK(run.site.naddresses == 2);
    CHECK(!run.site.punching_answered);
    const struct local_punch_family *v4 = &run.site.punching.family[LOCAL_PUNCH_IPV4];
    const struct local_punch_family *v6 = &run.site.punching.family[LOCAL_PUNCH_IPV6];
    CHECK(v4->hops == 3 && v4->first_ttl == 3);
    CHECK(v6->hops == -1);
    char *h = render(report_human, &run);
    CHECK_HAS(h, "  hole punching  IPv4: first SYN with TTL 3 (3 hops to the reflector; punch-ttl "
                 "auto)\n                 IPv6: staggered: hop count unknown (the helper speaks "
                 "local protocol 8: it names no hop count but IPv4's; punch-ttl auto)\n");
    free(h);

    kill(child, SIGTERM);
    waitpid(child, NULL, 0);
    unlink(sun.sun_path);
    rmdir(dir);
    return check_result("probe-old-helper");
}
