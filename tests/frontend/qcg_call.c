/*
 * frontend-call: performs one qcg operation against a frontend (or a broker)
 * with a given certificate and prints the outcome, for the shell tests.
 *
 *   frontend-call URL CA CERTKEY OPERATION [ARGS...]
 *
 *   registerNode NAME ADDRESS LOW HIGH [CAN_INTERCEPT]
 *   registerCluster NAME KIND [PUBLIC_ADDRESS...]
 *   SECRET: the job's, sent as its verifier; raw:TEXT sends TEXT (verifier_arg.h)
 *   publish JOB SECRET RANK ADDRESS PORT
 *   withdraw JOB SECRET RANK [NODE]
 *   lookup JOB SECRET FROM_RANK TO_RANK [TRIED|- [ONLY]]
 *   lookups [JOB SECRET FROM_RANK TO_RANK]...   (one call; answer.N=... per answer)
 *   poll EPOCH ACK WAIT_SECONDS
 *   reports [JOB SECRET FROM_RANK TO_RANK TECHNIQUE OK SETUP_MS WHY|-]...   (one call)
 *   siteInfo
 *   probe CLUSTER SECONDS [NODE]     (NODE: in the message, as a frontend sends it)
 *   observed CLUSTER NODE KIND PUBLIC_ADDRESS|- PORT_PRESERVING MAPPING INBOUND
 *   grid
 *   stats
 *
 * Prints "ok" then one "field=value" line per result field; a fault prints
 * "fault SUBCODE: TEXT" (exit 1), an unreachable service "unreachable: TEXT"
 * (exit 3); a bad command line exits 2.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "soapH.h"
#include "soap_client.h"
#include "verifier_arg.h"

static const char *s(const char *v)
{
    return v != NULL ? v : "";
}

static int need(int argc, int n, const char *usage)
{
    if (argc != n) {
        fprintf(stderr, "frontend-call: usage: ... %s\n", usage);
        exit(2);
    }
    return 0;
}

static int to_int(const char *text)
{
    char *end;
    long v = strtol(text, &end, 10);
    if (*text == '\0' || *end != '\0') {
        fprintf(stderr, "frontend-call: '%s' is not a number\n", text);
        exit(2);
    }
    return (int)v;
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: frontend-call URL CA CERTKEY OPERATION [ARGS...]\n");
        return 2;
    }
    const char *url = argv[1], *op = argv[4];
    struct soap_client_config cfg = {.url = url,
                                     .tls = {.ca = argv[2], .certkey = argv[3]},
                                     .connect_timeout = 5,
                                     .io_timeout = 10};
    char err[256];
    struct soap *soap = soap_client_new(&cfg, err, sizeof(err));
    if (soap == NULL) {
        fprintf(stderr, "frontend-call: %s\n", err);
        return 2;
    }
    int ac = argc - 5;
    char **av = argv + 5;
    int rc;
    const int v = QCG_PROTOCOL_VERSION;
    char vbuf[QCG_VERIFIER_LEN + 1];
    if (strcmp(op, "registerNode") == 0) {
        if (ac < 4 || ac > 6)
            need(0, 1, "registerNode NAME ADDRESS LOW HIGH [CAN_INTERCEPT [INCARNATION]]");
        struct qcg__node n = {av[0],
                              av[1],
                              to_int(av[2]),
                              to_int(av[3]),
                              ac >= 5 ? to_int(av[4]) : 0,
                              ac == 6 ? av[5] : NULL,
                              0,
                              NULL};
        struct qcg__registerResponse r = {0, 0};
        rc = soap_call_qcg__registerNode(soap, url, NULL, v, &n, &r);
        if (rc == SOAP_OK)
            printf("ok\nepoch=%llu\n", (unsigned long long)r.epoch);
    } else if (strcmp(op, "registerCluster") == 0) {
        if (ac < 2)
            need(0, 1, "registerCluster NAME KIND [PUBLIC_ADDRESS...]");
        struct qcg__cluster c = {av[0], av[1], ac - 2, av + 2, 0, 0, 0, NULL, 0, NULL};
        struct qcg__registerResponse r = {0, 0};
        rc = soap_call_qcg__registerCluster(soap, url, NULL, v, &c, &r);
        if (rc == SOAP_OK)
            printf("ok\nepoch=%llu\n", (unsigned long long)r.epoch);
    } else if (strcmp(op, "publish") == 0) {
        need(ac, 5, "publish JOB SECRET RANK ADDRESS PORT");
        struct qcg__contact c = {av[0],         verifier_arg(av[0], av[1], vbuf),
                                 to_int(av[2]), NULL,
                                 NULL,          av[3],
                                 to_int(av[4]), 0,
                                 NULL};
        struct qcg__ackResponse r = {0};
        rc = soap_call_qcg__publish(soap, url, NULL, v, &c, &r);
        if (rc == SOAP_OK)
            printf("ok\n");
    } else if (strcmp(op, "withdraw") == 0) {
        if (ac != 3 && ac != 4)
            need(0, 1, "withdraw JOB SECRET RANK [NODE]");
        struct qcg__ackResponse r = {0};
        rc = soap_call_qcg__withdraw(soap, url, NULL, v, av[0], verifier_arg(av[0], av[1], vbuf),
                                     to_int(av[2]), ac == 4 ? av[3] : NULL, &r);
        if (rc == SOAP_OK)
            printf("ok\n");
    } else if (strcmp(op, "lookup") == 0) {
        if (ac < 4 || ac > 6)
            need(0, 1, "lookup JOB SECRET FROM_RANK TO_RANK [TRIED|- [ONLY]]");
        struct qcg__lookupResponse r;
        memset(&r, 0, sizeof(r));
        char *tried = ac >= 5 && strcmp(av[4], "-") != 0 ? av[4] : NULL;
        rc = soap_call_qcg__lookup(soap, url, NULL, v, av[0], verifier_arg(av[0], av[1], vbuf),
                                   to_int(av[2]), to_int(av[3]), tried, ac == 6 ? av[5] : NULL, &r);
        if (rc == SOAP_OK)
            printf("ok\nstatus=%s\ntechnique=%s\ncluster=%s\nnode=%s\naddress=%s\nport=%d\n"
                   "token=%s\ncacheable=%d\nreason=%s\n",
                   s(r.plan.status), s(r.plan.technique), s(r.plan.cluster), s(r.plan.node),
                   s(r.plan.address), r.plan.port, s(r.plan.token), r.plan.cacheable,
                   s(r.plan.reason));
    } else if (strcmp(op, "lookups") == 0) {
        if (ac % 4 != 0)
            need(0, 1, "lookups [JOB SECRET FROM_RANK TO_RANK]...");
        int n = ac / 4;
        struct qcg__lookupAsks list = {
            .__sizeAsk = n, .ask = soap_malloc(soap, (size_t)(n + 1) * sizeof(*list.ask))};
        for (int i = 0; i < n; i++) {
            char **a = av + 4 * i;
            list.ask[i] = (struct qcg__lookupAsk){
                .job = a[0],
                .verifier = soap_strdup(soap, verifier_arg(a[0], a[1], vbuf)),
                .fromRank = to_int(a[2]),
                .toRank = to_int(a[3])};
        }
        struct qcg__lookupsResponse r;
        memset(&r, 0, sizeof(r));
        rc = soap_call_qcg__lookups(soap, url, NULL, v, &list, &r);
        if (rc == SOAP_OK) {
            printf("ok\nanswers=%d\n", r.__sizeAnswer);
            for (int i = 0; i < r.__sizeAnswer; i++) {
                const struct qcg__lookupAnswer *a = &r.answer[i];
                if (a->plan == NULL)
                    printf("answer.%d=fault %s: %s\n", i, s(a->fault), s(a->faultText));
                else
                    printf("answer.%d=%s %s %s:%d cacheable=%d reason=%s\n", i, s(a->plan->status),
                           s(a->plan->technique), s(a->plan->address), a->plan->port,
                           a->plan->cacheable, s(a->plan->reason));
            }
        }
    } else if (strcmp(op, "report") == 0) {
        need(ac, 8, "report JOB SECRET FROM_RANK TO_RANK TECHNIQUE OK SETUP_MS WHY");
        struct qcg__ackResponse r = {0};
        rc = soap_call_qcg__report(soap, url, NULL, v, av[0], verifier_arg(av[0], av[1], vbuf),
                                   to_int(av[2]), to_int(av[3]), av[4], to_int(av[5]),
                                   to_int(av[6]), av[7], &r);
        if (rc == SOAP_OK)
            printf("ok\n");
    } else if (strcmp(op, "reports") == 0) {
        if (ac % 8 != 0)
            return need(ac, 8,
                        "reports [JOB SECRET FROM_RANK TO_RANK TECHNIQUE OK SETUP_MS WHY|-]...");
        int n = ac / 8;
        struct qcg__attempts list = {
            .__sizeAttempt = n,
            .attempt = soap_malloc(soap, (size_t)(n + 1) * sizeof(*list.attempt))};
        for (int i = 0; i < n; i++) {
            char **a = av + 8 * i;
            list.attempt[i] =
                (struct qcg__attempt){.job = a[0],
                                      .verifier = soap_strdup(soap, verifier_arg(a[0], a[1], vbuf)),
                                      .fromRank = to_int(a[2]),
                                      .toRank = to_int(a[3]),
                                      .technique = a[4],
                                      .ok = to_int(a[5]),
                                      .setupMs = to_int(a[6]),
                                      .why = strcmp(a[7], "-") != 0 ? a[7] : NULL};
        }
        struct qcg__reportsResponse r = {0};
        rc = soap_call_qcg__reports(soap, url, NULL, v, &list, &r);
        if (rc == SOAP_OK)
            printf("ok\naccepted=%d\n", r.accepted);
    } else if (strcmp(op, "poll") == 0) {
        need(ac, 3, "poll EPOCH ACK WAIT_SECONDS");
        struct qcg__pollResponse r;
        memset(&r, 0, sizeof(r));
        int wait = to_int(av[2]);
        soap_client_set_wait(soap, wait);
        rc = soap_call_qcg__poll(soap, url, NULL, v, strtoull(av[0], NULL, 10),
                                 strtoull(av[1], NULL, 10), wait, &r);
        if (rc == SOAP_OK) {
            printf("ok\nepoch=%llu\ncommands=%d\n", (unsigned long long)r.epoch, r.__sizeCommand);
            for (int i = 0; i < r.__sizeCommand && r.command != NULL; i++) {
                const struct qcg__command *c = &r.command[i];
                printf("command=%llu %s job=%s rank=%d node=%s address=%s port=%d peer=%d "
                       "token=%s seconds=%d\n",
                       (unsigned long long)c->seq, s(c->kind), s(c->job), c->rank, s(c->node),
                       s(c->address), c->port, c->peerRank, s(c->token), c->seconds);
            }
        }
    } else if (strcmp(op, "siteInfo") == 0) {
        need(ac, 0, "siteInfo");
        struct qcg__siteInfoResponse r;
        memset(&r, 0, sizeof(r));
        rc = soap_call_qcg__siteInfo(soap, url, NULL, v, &r);
        if (rc == SOAP_OK) {
            printf("ok\ncluster=%s\nkind=%s\nbroker=%s\nseen_from=%s\n", s(r.cluster.name),
                   s(r.cluster.kind), s(r.broker), s(r.frontendSeenFrom));
            if (r.reflector != NULL)
                printf("reflector=%s:%d\n", s(r.reflector->address), r.reflector->port);
            for (int i = 0; i < r.__sizeProxy && r.proxy != NULL; i++)
                printf("proxy=%s:%d\n", s(r.proxy[i].address), r.proxy[i].port);
            for (int i = 0; i < r.__sizePeer && r.peer != NULL; i++)
                printf("peer=%s %s\n", s(r.peer[i].name), s(r.peer[i].kind));
        }
    } else if (strcmp(op, "probe") == 0) {
        if (ac != 3)
            need(ac, 2, "probe CLUSTER SECONDS [NODE]");
        struct qcg__probeResponse r;
        memset(&r, 0, sizeof(r));
        rc = soap_call_qcg__probe(soap, url, NULL, v, av[0], to_int(av[1]), ac > 2 ? av[2] : NULL,
                                  &r);
        if (rc == SOAP_OK)
            printf("ok\njob=%s\nsecret=%s\nrank=%d\ncluster=%s\nnode=%s\naddress=%s\n"
                   "seconds=%d\n",
                   s(r.job), s(r.secret), r.rank, s(r.cluster), s(r.node), s(r.address), r.seconds);
    } else if (strcmp(op, "observed") == 0) {
        need(ac, 7, "observed CLUSTER NODE KIND PUBLIC_ADDRESS|- PORT_PRESERVING MAPPING INBOUND");
        struct qcg__observation o = {
            av[0],         av[1], av[2], strcmp(av[3], "-") == 0 ? NULL : av[3],
            to_int(av[4]), av[5], av[6], 0};
        struct qcg__ackResponse r = {0};
        rc = soap_call_qcg__observed(soap, url, NULL, v, &o, &r);
        if (rc == SOAP_OK)
            printf("ok\n");
    } else if (strcmp(op, "grid") == 0) {
        need(ac, 0, "grid");
        struct qcg__gridResponse r;
        memset(&r, 0, sizeof(r));
        rc = soap_call_qcg__grid(soap, url, NULL, v, &r);
        if (rc == SOAP_OK) {
            printf("ok\n");
            for (int i = 0; i < r.__sizeCluster && r.cluster != NULL; i++) {
                const struct qcg__observation *o = r.cluster[i].observed;
                printf("cluster=%s nodes=%d observed=%s node=%s\n", s(r.cluster[i].declared.name),
                       r.cluster[i].nodes, o ? s(o->kind) : "-", o ? s(o->node) : "-");
            }
        }
    } else if (strcmp(op, "stats") == 0) {
        need(ac, 0, "stats");
        struct qcg__statsResponse r;
        memset(&r, 0, sizeof(r));
        rc = soap_call_qcg__stats(soap, url, NULL, v, &r);
        if (rc == SOAP_OK) {
            printf("ok\nrole=%s\nname=%s\n", s(r.role), s(r.name));
            for (int i = 0; i < r.__sizeCounter && r.counter != NULL; i++)
                printf("%s=%llu\n", s(r.counter[i].name), (unsigned long long)r.counter[i].value);
        }
    } else {
        fprintf(stderr, "frontend-call: unknown operation '%s'\n", op);
        soap_client_free(soap);
        return 2;
    }
    char sub[64], msg[512];
    enum call_status st = soap_call_status(soap, rc, sub, sizeof(sub), msg, sizeof(msg));
    int status = 0;
    if (st == CALL_FAULT) {
        printf("fault %s: %s\n", sub[0] ? sub : "-", msg);
        status = 1;
    } else if (st == CALL_UNREACHABLE) {
        printf("unreachable: %s\n", msg);
        status = 3;
    }
    soap_client_reset(soap);
    soap_client_free(soap);
    return status;
}
