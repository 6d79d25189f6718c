/* libFuzzer harness for our SOAP clients fed a hostile upstream's answers: a
   compromised frontend answering a helper, or a compromised broker answering
   a frontend.  answer_server.h answers every request with the input (HTTP
   status line, headers, SOAP envelope) over real mutual TLS, with the
   certificate the client expects; the client is the daemons' own code:
     helper:   the upstream_* calls of helper/upstream_calls.c (through the
               pool, the peer check of common/soap_client.c and the conversion of
               upstream_convert.c), and a poll of its long-poll client
               (common/longpoll.c) with the helper's command handling
               (upstream_poll.c: upstream_order_check, then the order);
     frontend: the relay_* calls of frontend/relay.c on a client context,
               and a poll of a long-poll client whose commands are checked
               here: the frontend's own handling (frontend/upstream.c) is
               not linked, its upstream_start/stop would clash with the
               helper's in one program.

   Input: byte 0 % 15 picks the call, the rest is the answer:
     0 lookup  1 lookup of one technique  2 siteInfo  3 probe  4 publish
     5 withdraw  6 traverse  7 report  8 observed  9 poll (epoch 1)    helper
     10 lookup  11 siteInfo  12 probe  13 registerCluster  14 poll (epoch 1)
                                                                    frontend */
#include "answer_server.h"
#include "certs.h"
#include "cmdqueue.h"
#include "fuzz.h"
#include "log.h"
#include "longpoll.h"
#include "longpoll_internal.h"
#include "qcgconn.h"
#include "relay.h"
#include "soapH.h"
#include "upstream_internal.h"

#define MODES 15
#define EPOCH 1

static struct answer_server *as_frontend, *as_broker;
static struct helper_config hcfg;
static struct contacts *cs;
static struct upstream *up;
static struct soap_client_config fcfg;
static char furl[64], hurl[64];
static struct soap *fsoap;
static struct longpoll *flp;

/* longpoll's promise for any command: a kind, every field terminated. */
static void command(void *arg, const struct command *c)
{
    (void)arg;
    FUZZ_TERMINATED(c->kind);
    FUZZ_TERMINATED(c->job);
    FUZZ_TERMINATED(c->node);
    FUZZ_TERMINATED(c->address);
    FUZZ_TERMINATED(c->token);
    FUZZ_TERMINATED(c->packet);
}

/* The helper's promise for an order it hands on (upstream_order_check said
   yes): that, for this node, with a port. */
static void order(void *arg, const struct command *c)
{
    command(arg, c);
    FUZZ_ASSERT(strcmp(c->node, hcfg.node) == 0);
    FUZZ_ASSERT(c->port >= 0 && c->port <= 65535);
}

static int never(void *arg, struct soap *soap, uint64_t *epoch, char *why, size_t whylen)
{
    (void)arg, (void)soap, (void)epoch;
    snprintf(why, whylen, "not used");
    return -1;
}

static const struct longpoll_ops frontend_ops = {.registered = never, .command = command};

static void stop_clients(void)
{
    upstream_free(up);
    contacts_free(cs);
    longpoll_free(flp);
    soap_client_free(fsoap);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    static const char *const issue[] = {"frontend nata --san 127.0.0.1", "broker --san 127.0.0.1",
                                        "helper nata/nata1", NULL};
    char err[512];

    (void)argc;
    (void)argv;
    certs_make(issue);
    /* Errors only: the clients log every refused answer. */
    log_init("fuzz", LOG_LEVEL_ERROR, false);
    const char *ca = certs_path("ca.crt");
    as_frontend = answer_server_start(ca, certs_path("frontend-nata.pem"));
    as_broker = answer_server_start(ca, certs_path("broker-broker.pem"));
    snprintf(hurl, sizeof(hurl), "https://127.0.0.1:%d/", answer_server_port(as_frontend));
    snprintf(furl, sizeof(furl), "https://127.0.0.1:%d/", answer_server_port(as_broker));

    hcfg.frontend = hurl;
    hcfg.ca = (char *)ca;
    hcfg.cert = (char *)certs_path("helper-nata-nata1.pem");
    hcfg.cluster = "nata";
    hcfg.node = "nata1";
    hcfg.address = "198.18.1.11";
    hcfg.ports[0] = 23000;
    hcfg.ports[1] = 23999;
    hcfg.threads = 1;
    cs = contacts_new(16);
    up = cs != NULL ? upstream_new(&hcfg, cs, 1, err, sizeof(err)) : NULL;
    if (up == NULL) {
        fprintf(stderr, "fuzz-upstream: %s\n", err);
        abort();
    }
    upstream_on_order(up, order, NULL);

    fcfg.url = furl;
    fcfg.tls.ca = ca;
    fcfg.tls.certkey = certs_path("frontend-nata.pem");
    fcfg.connect_timeout = 5;
    fcfg.io_timeout = 5;
    struct longpoll_config lc = {
        .client = &fcfg, .service = "broker", .wait = 1, .ops = &frontend_ops};
    fsoap = soap_client_new(&fcfg, err, sizeof(err));
    flp = fsoap != NULL ? longpoll_new(&lc, err, sizeof(err)) : NULL;
    if (flp == NULL) {
        fprintf(stderr, "fuzz-upstream: %s\n", err);
        abort();
    }
    atexit(stop_clients);
    return 0;
}

/* A helper call's promise: 0 or a QCG_E* code, with a reason when not 0. */
static void helper_said(int rc, const char *msg)
{
    FUZZ_ASSERT(rc == 0 || (rc >= QCG_ENOMEM && rc < 0));
    if (rc != 0)
        FUZZ_ASSERT(memchr(msg, '\0', LOCAL_MESSAGE_MAX) != NULL && msg[0] != '\0');
}

static void helper_plan(const struct local_plan *p)
{
    FUZZ_TERMINATED(p->cluster);
    FUZZ_TERMINATED(p->node);
    FUZZ_TERMINATED(p->address);
    FUZZ_TERMINATED(p->token);
    FUZZ_ASSERT(p->technique >= QCG_TECH_DIRECT && p->technique <= QCG_TECH_PROXY);
    if (p->technique == QCG_TECH_DIRECT)
        FUZZ_ASSERT(p->port != 0 && p->address[0] != '\0');
}

static void helper_site(const struct local_site *s)
{
    FUZZ_TERMINATED(s->cluster.name);
    FUZZ_TERMINATED(s->broker);
    FUZZ_TERMINATED(s->frontend_seen_from);
    FUZZ_TERMINATED(s->reflector);
    FUZZ_ASSERT(s->proxies <= LOCAL_PROXIES_MAX && s->clusters <= LOCAL_CLUSTERS_MAX);
    for (uint32_t i = 0; i < s->proxies; i++)
        FUZZ_TERMINATED(s->proxy[i]);
    for (uint32_t i = 0; i < s->clusters; i++) {
        FUZZ_TERMINATED(s->peer[i].name);
        FUZZ_TERMINATED(s->peer[i].kind);
        for (int j = 0; j < LOCAL_PUBLIC_MAX; j++)
            FUZZ_TERMINATED(s->peer[i].public_address[j]);
    }
}

static void helper(int mode)
{
    static const struct contact c = {
        .job = "job-42", .secret = "the job secret", .rank = 1, .port = 23001};
    static const struct local_probe probe = {.cluster = "natb", .seconds = 30};
    static const struct local_report report = {
        .to_rank = 2, .technique = TECH_PROXY, .why = "timed out"};
    static const struct local_observed obs = {.kind = "nat",
                                              .port_preserving = 1,
                                              .mapping = "endpoint-independent",
                                              .inbound = "dropped"};
    char msg[LOCAL_MESSAGE_MAX];
    struct local_plan plan;
    struct local_site site;
    struct local_probe_ok ok;
    int rc;

    memset(msg, 'x', sizeof(msg));
    switch (mode) {
    case 0:
    case 1:
        rc = upstream_lookup(up, &c, 2, 1u << TECH_DIRECT,
                             mode == 1 ? QCG_TECH_PROXY : QCG_TECH_NONE, &plan, msg, sizeof(msg));
        helper_said(rc, msg);
        if (rc == 0)
            helper_plan(&plan);
        break;
    case 2:
        memset(&site, 0, sizeof(site));
        rc = upstream_site(up, &site, msg, sizeof(msg));
        helper_said(rc, msg);
        if (rc == 0)
            helper_site(&site);
        break;
    case 3:
        rc = upstream_probe(up, &probe, &ok, msg, sizeof(msg));
        helper_said(rc, msg);
        if (rc == 0) {
            FUZZ_ASSERT(job_valid(ok.job) && secret_valid(ok.secret));
            FUZZ_TERMINATED(ok.cluster);
            FUZZ_TERMINATED(ok.node);
            FUZZ_TERMINATED(ok.address);
            FUZZ_ASSERT(ok.seconds >= 1 && ok.seconds <= QCG_PROBE_TTL_MAX && ok.rank >= 0);
        }
        break;
    case 4:
        helper_said(upstream_publish(up, &c, msg, sizeof(msg)), msg);
        break;
    case 5:
        helper_said(upstream_withdraw(up, &c, msg, sizeof(msg)), msg);
        break;
    case 6:
        helper_said(upstream_traverse(up, "0123abcd", "4500", msg, sizeof(msg)), msg);
        break;
    case 7:
        helper_said(upstream_report(up, &c, &report, msg, sizeof(msg)), msg);
        break;
    default:
        helper_said(upstream_observed(up, &obs, msg, sizeof(msg)), msg);
        break;
    }
}

/* A poll's promise: an answer, or a one-line reason; ack only moves up. */
static void poll_one(struct longpoll *lp)
{
    uint64_t ack = 0, server_epoch = 0;
    char why[300];

    memset(why, 'x', sizeof(why));
    if (longpoll_poll_once(lp, EPOCH, &ack, &server_epoch, why, sizeof(why)) < 0)
        FUZZ_REASON(why);
    else if (server_epoch != EPOCH)
        FUZZ_ASSERT(ack == 0);
}

/* A relay's promise: 0, or -1 with a status and a terminated reason. */
static void relay_said(int rc, const struct relay_error *err)
{
    FUZZ_ASSERT(rc == 0 || rc == -1);
    if (rc < 0) {
        FUZZ_ASSERT(err->status == CALL_UNREACHABLE || err->status == CALL_FAULT);
        FUZZ_TERMINATED(err->subcode);
        FUZZ_TERMINATED(err->msg);
    }
}

static void frontend(int mode)
{
    static const char *const publics[] = {"203.0.113.20"};
    static const struct cluster_decl decl = {
        .name = "nata", .kind = "nat", .naddrs = 1, .addrs = publics};
    struct soap *dst = soap_new1(SOAP_C_UTFSTRING);
    struct qcg__siteInfoResponse site;
    struct qcg__probeResponse probe;
    struct relay_error err;
    struct plan plan;
    uint64_t epoch = 0;
    int rc;

    if (dst == NULL)
        abort();
    memset(&err, 0, sizeof(err));
    switch (mode) {
    case 10:
        rc = relay_lookup(fsoap, furl, "job-42", "the job secret", 1, 2, "direct", NULL, &plan,
                          &err);
        relay_said(rc, &err);
        if (rc == 0) {
            FUZZ_TERMINATED(plan.status);
            FUZZ_TERMINATED(plan.technique);
            FUZZ_TERMINATED(plan.cluster);
            FUZZ_TERMINATED(plan.node);
            FUZZ_TERMINATED(plan.address);
            FUZZ_TERMINATED(plan.token);
            FUZZ_TERMINATED(plan.reason);
            FUZZ_ASSERT(plan.port >= 0 && plan.port <= 65535);
        }
        break;
    case 11:
        rc = relay_site_info(fsoap, furl, dst, &site, &err);
        relay_said(rc, &err);
        if (rc == 0) {
            /* What the frontend answers its helper with: sizes match arrays. */
            FUZZ_ASSERT(site.cluster.name != NULL);
            for (int i = 0; i < site.__sizeProxy; i++)
                fuzz_touch(site.proxy[i].address != NULL ? site.proxy[i].address : "");
            for (int i = 0; i < site.__sizePeer; i++)
                for (int j = 0; j < site.peer[i].__sizePublicAddress; j++)
                    if (site.peer[i].publicAddress[j] != NULL)
                        fuzz_touch(site.peer[i].publicAddress[j]);
        }
        break;
    case 12:
        memset(&probe, 0, sizeof(probe));
        rc = relay_probe(fsoap, furl, "natb", 30, "natb1", dst, &probe, &err);
        relay_said(rc, &err);
        if (rc == 0)
            FUZZ_ASSERT(probe.job != NULL && probe.secret != NULL && probe.node != NULL &&
                        probe.address != NULL);
        break;
    case 13:
        relay_said(relay_register_cluster(fsoap, furl, &decl, &epoch, &err), &err);
        break;
    default:
        poll_one(flp);
        break;
    }
    soap_client_reset(fsoap);
    soap_destroy(dst);
    soap_end(dst);
    soap_free(dst);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    int mode = data[0] % MODES;
    if (mode < 10) {
        answer_server_set(as_frontend, data + 1, size - 1);
        if (mode == 9)
            poll_one(up->lp);
        else
            helper(mode);
    } else {
        answer_server_set(as_broker, data + 1, size - 1);
        frontend(mode);
    }
    return 0;
}
