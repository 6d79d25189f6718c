/* Towards other sites: the helpers start a test endpoint there (rank 1 of a
   job the broker makes for the probe); this node, as rank 0, connects to it
   once per technique with that technique only, then once as any process
   would, which shows the broker's choice. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "probe.h"
#include "proto.h"

/* A little longer than the library's longest attempt (hole punching, 7 s). */
#define ATTEMPT_TIMEOUT_MS 9000
#define ECHO_TIMEOUT_MS 3000
#define ENDPOINT_SECONDS_MAX 90
#define HELPER_TIMEOUT_MS 15000

int peers_select(const struct probe_opts *o, const struct probe_site *s, struct probe_peer *out,
                 int max, char *why, size_t whylen)
{
    int n = 0;
    for (uint32_t i = 0; i < s->info.clusters && i < LOCAL_CLUSTERS_MAX && n < max; i++) {
        const struct local_cluster *c = &s->info.peer[i];
        if (o->site != NULL ? strcmp(c->name, o->site) != 0
                            : strcmp(c->name, s->info.cluster.name) == 0)
            continue;
        memset(&out[n], 0, sizeof(out[n]));
        snprintf(out[n].site, sizeof(out[n].site), "%s", c->name);
        snprintf(out[n].kind, sizeof(out[n].kind), "%s", c->kind);
        n++;
    }
    if (n == 0 && o->site != NULL)
        snprintf(why, whylen, "the broker knows no site named '%s'", o->site);
    return n;
}

/* Waits up to deadline for `events` on fd: 0, or -1 when the time is up. */
static int wait_for(int fd, short events, double deadline)
{
    struct pollfd p = {.fd = fd, .events = events};
    int left = probe_left_ms(deadline);

    return left > 0 && poll(&p, 1, left) > 0 ? 0 : -1;
}

/* Writes a line through the connection (its session when encrypted) and reads
   it back: the data path works, and what a round trip through it costs.  The
   socket is made non-blocking, so that an endpoint that stalls inside a
   record cannot hold us past ECHO_TIMEOUT_MS.  0 or -1 with why. */
static int echo_check(int fd, qcg_tls *tls, const char *line, double *ms, char *why, size_t whylen)
{
    char back[64];
    int n = (int)strlen(line);
    size_t got = 0;
    double start = probe_now_ms(), deadline = start + ECHO_TIMEOUT_MS;
    int flags = fcntl(fd, F_GETFL);

    if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
        snprintf(why, whylen, "connected, but the socket cannot be made non-blocking: %s",
                 strerror(errno));
        return -1;
    }
    /* A fresh connection's socket buffer takes a line at once; what the
       session could not send yet is flushed below. */
    long sent = qcg_conn_send(fd, tls, line, (size_t)n);
    if (sent != n) {
        snprintf(why, whylen, "connected, but sending failed: %s",
                 sent < 0 ? qcg_conn_strerror(tls, errno) : "the socket took part of a line");
        return -1;
    }
    while (tls != NULL && qcg_tls_flush(tls) < 0) {
        if ((errno != EAGAIN && errno != EINTR) || wait_for(fd, POLLOUT, deadline) < 0) {
            snprintf(why, whylen, "connected, but sending failed: %s",
                     errno == EAGAIN ? "the socket took nothing" : qcg_conn_strerror(tls, errno));
            return -1;
        }
    }
    while (got < (size_t)n) {
        long r = qcg_conn_recv(fd, tls, back + got, (size_t)n - got);
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
            /* Nothing whole in the session either (what it read ahead is part
               of a record): the rest comes through the socket. */
            if (wait_for(fd, POLLIN, deadline) == 0)
                continue;
            snprintf(why, whylen, "connected, but the echo did not come back in %d ms",
                     ECHO_TIMEOUT_MS);
            return -1;
        }
        if (r < 0) {
            snprintf(why, whylen, "connected, but reading the echo failed: %s",
                     qcg_conn_strerror(tls, errno));
            return -1;
        }
        if (r == 0) {
            snprintf(why, whylen, "connected, but the endpoint closed before echoing");
            return -1;
        }
        got += (size_t)r;
    }
    if (memcmp(line, back, (size_t)n) != 0) {
        snprintf(why, whylen, "connected, but the echo came back altered");
        return -1;
    }
    *ms = probe_now_ms() - start;
    return 0;
}

/* One connection to rank 1: `only` one technique, or QCG_TECH_NONE for a
   plain connect.  Returns the socket or a negative QCG_E* code (why set). */
static int attempt(qcg_ctx *ctx, enum qcg_technique only, double deadline_ms,
                   struct qcg_conn_info *info, char *why, size_t whylen)
{
    qcg_connect_op *op = NULL;
    int left = probe_left_ms(deadline_ms);
    int timeout = left < ATTEMPT_TIMEOUT_MS ? left : ATTEMPT_TIMEOUT_MS;
    int rc;

    if (timeout <= 0) {
        snprintf(why, whylen, "not tried: --timeout reached");
        return QCG_ETIMEDOUT;
    }
    rc = only == QCG_TECH_NONE ? qcg_connect_start(ctx, 1, timeout, &op)
                               : qcg_connect_start_only(ctx, 1, only, timeout, &op);
    if (rc < 0) {
        snprintf(why, whylen, "%s: %s", qcg_strerror(rc), qcg_last_error(ctx));
        return rc;
    }
    double until = probe_now_ms() + timeout + 1000;
    for (;;) {
        rc = qcg_connect_finish(op, info);
        if (rc != QCG_EAGAIN)
            break;
        struct pollfd p = {.fd = qcg_connect_pollfd(op), .events = POLLIN};
        int wait = probe_left_ms(until);
        if (wait == 0) {
            rc = QCG_ETIMEDOUT;
            break;
        }
        (void)poll(&p, 1, wait < 200 ? wait : 200);
    }
    qcg_connect_free(op);
    if (rc < 0) {
        const char *detail = qcg_last_error(ctx);
        if (rc == QCG_ETECHNIQUE && detail[0] != '\0')
            snprintf(why, whylen, "%s", detail);
        else
            snprintf(why, whylen, "%s%s%s", qcg_strerror(rc), detail[0] ? ": " : "", detail);
    }
    return rc;
}

/* Ends a connection attempt() returned: its session first, with a
   close_notify, so that the test endpoint sees an orderly end and does not
   log a truncated stream for every probe. */
static void conn_close(int fd, struct qcg_conn_info *info)
{
    if (info->tls != NULL)
        (void)qcg_tls_shutdown(info->tls);
    qcg_tls_free(info->tls);
    info->tls = NULL;
    close(fd);
}

static void test_technique(const struct probe_opts *o, qcg_ctx *ctx, struct probe_peer *p,
                           enum qcg_technique t, double deadline_ms)
{
    struct probe_technique *r = &p->tech[t];
    struct qcg_conn_info info;

    probe_progress(o, "site %s: %s", p->site, qcg_technique_name(t));
    r->tried = true;
    int fd = attempt(ctx, t, deadline_ms, &info, r->why, sizeof(r->why));
    if (fd < 0) {
        r->impossible = fd == QCG_ETECHNIQUE;
        return;
    }
    r->setup_ms = (double)info.setup_us / 1000.0;
    r->encryption = qcg_encryption_name(info.encryption);
    if (family_of_socket(fd, &r->family, r->address, sizeof(r->address)) < 0)
        r->family = 0;
    if (info.technique != t) {
        snprintf(r->why, sizeof(r->why), "connected by %s, not %s",
                 qcg_technique_name(info.technique), qcg_technique_name(t));
    } else {
        char line[64];
        snprintf(line, sizeof(line), "qcg-probe %s\n", qcg_technique_name(t));
        if (echo_check(fd, info.tls, line, &r->echo_ms, r->why, sizeof(r->why)) == 0)
            r->works = true;
    }
    conn_close(fd, &info);
}

void peer_probe(const struct probe_opts *o, const struct probe_site *s, struct probe_peer *p,
                struct capture *cap, char *filter, size_t flen, double deadline_ms)
{
    struct local_probe req;
    struct local_probe_ok ok;
    struct qcg_conn_info info;
    qcg_ctx *ctx = NULL;
    int code, rc;

    (void)s;
    memset(&req, 0, sizeof(req));
    snprintf(req.cluster, sizeof(req.cluster), "%s", p->site);
    int left_s = probe_left_ms(deadline_ms) / 1000 + 5;
    req.seconds = (uint32_t)(left_s < ENDPOINT_SECONDS_MAX ? left_s : ENDPOINT_SECONDS_MAX);
    probe_progress(o, "site %s: starting a test endpoint", p->site);
    int t = helper_ask(o->helper_socket, LOCAL_PROBE, &req, &ok, sizeof(ok), HELPER_TIMEOUT_MS,
                       &code, p->why, sizeof(p->why));
    if (t != LOCAL_PROBE_OK) {
        /* The helper's text says it all (busy, unknown site, no node
           there); the code's generic wording would mislead here. */
        return;
    }
    snprintf(p->node, sizeof(p->node), "%s", ok.node);
    snprintf(p->address, sizeof(p->address), "%s", ok.address);
    char term[LOCAL_ADDR_MAX + 16];
    snprintf(term, sizeof(term), " host %s ", ok.address);
    if (cap != NULL && ok.address[0] != '\0' && strstr(filter, term) == NULL) {
        char why[200];
        capture_filter_add(filter, flen, " or%s", term);
        if (capture_refilter(cap, filter, why, sizeof(why)) < 0)
            probe_progress(o, "%s", why);
    }

    struct qcg_options qo = {.job = ok.job,
                             .rank = 0,
                             .secret = ok.secret,
                             .helper_socket = o->helper_socket,
                             .encrypt = o->encrypt};
    if ((rc = qcg_open(&ctx, &qo)) < 0 || (rc = qcg_listen(ctx)) < 0) {
        snprintf(p->why, sizeof(p->why), "cannot take part as rank 0: %s: %s", qcg_strerror(rc),
                 qcg_last_error(ctx));
        qcg_close(ctx);
        return;
    }
    /* The endpoint publishes itself a moment after the order reaches its
       helper; the library waits for it.  This first connection is that wait,
       not a measurement. */
    probe_progress(o, "site %s: waiting for the endpoint on %s", p->site, ok.node);
    rc = attempt(ctx, QCG_TECH_NONE, deadline_ms, &info, p->why, sizeof(p->why));
    /* The broker's "no technique left" came after attempts failed (the
       relay's error is the code then): the endpoint is there; the tests
       below say what fails. */
    if (rc < 0 && rc != QCG_ETECHNIQUE && strstr(p->why, "no technique left") == NULL) {
        char detail[PROBE_WHY_MAX];
        snprintf(detail, sizeof(detail), "%s", p->why);
        snprintf(p->why, sizeof(p->why), "the test endpoint on %s could not be reached: %.250s",
                 ok.node, detail);
        qcg_close(ctx);
        return;
    }
    if (rc >= 0)
        conn_close(rc, &info);
    p->endpoint_ok = true;
    p->why[0] = '\0';
    for (enum qcg_technique tech = QCG_TECH_DIRECT; tech <= QCG_TECH_PROXY; tech++)
        test_technique(o, ctx, p, tech, deadline_ms);

    /* What any process of a job would get now, with what the broker has just
       learnt from the attempts above. */
    probe_progress(o, "site %s: as a job would connect", p->site);
    rc = attempt(ctx, QCG_TECH_NONE, deadline_ms, &info, p->chosen_why, sizeof(p->chosen_why));
    if (rc >= 0) {
        double ms;
        char why[PROBE_WHY_MAX];
        p->chosen = info.technique;
        p->chosen_ms = (double)info.setup_us / 1000.0;
        if (family_of_socket(rc, &p->chosen_family, p->chosen_address, sizeof(p->chosen_address)) <
            0)
            p->chosen_family = 0;
        p->chosen_encryption = qcg_encryption_name(info.encryption);
        /* The endpoint's work is over: it withdraws now rather than holding
           its slots for the rest of its seconds. */
        if (echo_check(rc, info.tls, QCG_PROBE_DONE_LINE, &ms, why, sizeof(why)) < 0)
            probe_progress(o, "site %s: the endpoint was not told it is done: %s", p->site, why);
        conn_close(rc, &info);
    }
    qcg_close(ctx);
}
