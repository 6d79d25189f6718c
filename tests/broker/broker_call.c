/*
 * broker-call: one SOAP call to a broker over mutual TLS, for the service test.
 * Prints one line: the answer as key=value pairs, "fault SUBCODE: text"
 * (exit 3) or "unreachable: text" (exit 4).
 *
 *   broker-call --url URL --ca CA --cert PEM [--version N] OPERATION ARGS...
 *     register-cluster NAME KIND LOW HIGH [PUBLIC-ADDRESS|NODE-RANGE/BITS...]
 *     register-node NAME ADDRESS LOW HIGH CAN-INTERCEPT [INCARNATION]
 *   SECRET: the job's, sent as its verifier; raw:TEXT sends TEXT (verifier_arg.h)
 *     publish JOB SECRET RANK CLUSTER|- NODE ADDRESS PORT
 *     withdraw JOB SECRET RANK [NODE]
 *     lookup JOB SECRET FROM-RANK TO-RANK [TRIED|- [ONLY]]
 *     lookups [JOB SECRET FROM-RANK TO-RANK]...   (one call; one line per answer)
 *     poll EPOCH ACK-SEQ WAIT-SECONDS
 *     report JOB SECRET FROM-RANK TO-RANK TECHNIQUE OK SETUP-MS [WHY]
 *     reports [JOB SECRET FROM-RANK TO-RANK TECHNIQUE OK SETUP-MS]...   (one call)
 *     site-info
 *     probe CLUSTER SECONDS [NODE]
 *     observed CLUSTER NODE KIND PUBLIC-ADDRESS|- PORT-PRESERVING MAPPING INBOUND
 *     grid
 *     stats
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "proto.h"
#include "soapH.h"
#include "soap_client.h"
#include "verifier_arg.h"

static const char *str(const char *s)
{
    return s != NULL ? s : "";
}

static int usage(void)
{
    fprintf(stderr, "usage: broker-call --url URL --ca CA --cert PEM [--version N] OPERATION "
                    "ARGS...\n");
    return 2;
}

/* Makes the call; *known = 0 for an unknown operation or wrong arguments.
   Returns the gSOAP status (SOAP_EOF is -1, so it cannot be a sentinel). */
static int call(struct soap *soap, const char *url, int version, int argc, char **argv, int *known)
{
    char vbuf[QCG_VERIFIER_LEN + 1];
    *known = 1;
    const char *op = argv[0];
    int rc;
    if (strcmp(op, "register-cluster") == 0 && argc >= 5) {
        /* Arguments with a '/' are node ranges, the others public addresses. */
        char *pub[32], *ranges[32];
        int npub = 0, nranges = 0;
        for (int i = 5; i < argc && i < 5 + 32; i++) {
            if (strchr(argv[i], '/') != NULL)
                ranges[nranges++] = argv[i];
            else
                pub[npub++] = argv[i];
        }
        struct qcg__cluster c = {argv[1],
                                 argv[2],
                                 npub,
                                 npub ? pub : NULL,
                                 atoi(argv[3]),
                                 atoi(argv[4]),
                                 nranges,
                                 nranges ? ranges : NULL,
                                 0,
                                 NULL};
        struct qcg__registerResponse r;
        rc = soap_call_qcg__registerCluster(soap, url, NULL, version, &c, &r);
        if (rc == SOAP_OK)
            printf("ok version=%d epoch=%llu\n", r.version, (unsigned long long)r.epoch);
    } else if (strcmp(op, "register-node") == 0 && (argc == 6 || argc == 7)) {
        struct qcg__node n = {argv[1],
                              argv[2],
                              atoi(argv[3]),
                              atoi(argv[4]),
                              atoi(argv[5]),
                              argc == 7 ? argv[6] : NULL,
                              0,
                              NULL};
        struct qcg__registerResponse r;
        rc = soap_call_qcg__registerNode(soap, url, NULL, version, &n, &r);
        if (rc == SOAP_OK)
            printf("ok version=%d epoch=%llu\n", r.version, (unsigned long long)r.epoch);
    } else if (strcmp(op, "publish") == 0 && argc == 8) {
        struct qcg__contact c = {argv[1],       verifier_arg(argv[1], argv[2], vbuf),
                                 atoi(argv[3]), strcmp(argv[4], "-") == 0 ? NULL : argv[4],
                                 argv[5],       argv[6],
                                 atoi(argv[7]), 0,
                                 NULL};
        struct qcg__ackResponse r;
        rc = soap_call_qcg__publish(soap, url, NULL, version, &c, &r);
        if (rc == SOAP_OK)
            printf("ok version=%d\n", r.version);
    } else if (strcmp(op, "withdraw") == 0 && (argc == 4 || argc == 5)) {
        struct qcg__ackResponse r;
        rc = soap_call_qcg__withdraw(soap, url, NULL, version, argv[1],
                                     verifier_arg(argv[1], argv[2], vbuf), atoi(argv[3]),
                                     argc == 5 ? argv[4] : NULL, &r);
        if (rc == SOAP_OK)
            printf("ok version=%d\n", r.version);
    } else if (strcmp(op, "lookup") == 0 && argc >= 5 && argc <= 7) {
        struct qcg__lookupResponse r;
        char *tried = argc >= 6 && strcmp(argv[5], "-") != 0 ? argv[5] : NULL;
        rc = soap_call_qcg__lookup(soap, url, NULL, version, argv[1],
                                   verifier_arg(argv[1], argv[2], vbuf), atoi(argv[3]),
                                   atoi(argv[4]), tried, argc == 7 ? argv[6] : NULL, &r);
        if (rc == SOAP_OK)
            printf("ok status=%s technique=%s cluster=%s node=%s address=%s port=%d "
                   "cacheable=%d token=%s reason=%s\n",
                   str(r.plan.status), str(r.plan.technique), str(r.plan.cluster), str(r.plan.node),
                   str(r.plan.address), r.plan.port, r.plan.cacheable, str(r.plan.token),
                   str(r.plan.reason));
    } else if (strcmp(op, "lookups") == 0 && (argc - 1) % 4 == 0) {
        struct qcg__lookupsResponse r;
        int n = (argc - 1) / 4;
        struct qcg__lookupAsks list = {
            .__sizeAsk = n, .ask = soap_malloc(soap, (size_t)(n + 1) * sizeof(*list.ask))};
        for (int i = 0; i < n; i++) {
            char **a = argv + 1 + 4 * i;
            list.ask[i] = (struct qcg__lookupAsk){
                .job = a[0],
                .verifier = soap_strdup(soap, verifier_arg(a[0], a[1], vbuf)),
                .fromRank = atoi(a[2]),
                .toRank = atoi(a[3])};
        }
        rc = soap_call_qcg__lookups(soap, url, NULL, version, &list, &r);
        if (rc == SOAP_OK) {
            printf("ok answers=%d\n", r.__sizeAnswer);
            for (int i = 0; i < r.__sizeAnswer; i++) {
                const struct qcg__lookupAnswer *a = &r.answer[i];
                if (a->plan == NULL)
                    printf("%d: fault %s: %s\n", i, str(a->fault), str(a->faultText));
                else
                    printf("%d: status=%s technique=%s address=%s port=%d cacheable=%d token=%s\n",
                           i, str(a->plan->status), str(a->plan->technique), str(a->plan->address),
                           a->plan->port, a->plan->cacheable, str(a->plan->token));
            }
        }
    } else if (strcmp(op, "poll") == 0 && argc == 4) {
        struct qcg__pollResponse r;
        int wait = atoi(argv[3]);
        soap_client_set_wait(soap, wait);
        rc = soap_call_qcg__poll(soap, url, NULL, version, strtoull(argv[1], NULL, 10),
                                 strtoull(argv[2], NULL, 10), wait, &r);
        if (rc == SOAP_OK) {
            printf("ok epoch=%llu commands=%d", (unsigned long long)r.epoch, r.__sizeCommand);
            for (int i = 0; i < r.__sizeCommand; i++) {
                const struct qcg__command *c = &r.command[i];
                printf(" %llu:%s:%s:%d", (unsigned long long)c->seq, str(c->kind), str(c->job),
                       c->rank);
                /* Orders for a node: node, initiator, address, port, token. */
                if (c->node != NULL)
                    printf(":%s:%d:%s:%d:%s", c->node, c->peerRank, str(c->address), c->port,
                           str(c->token));
                if (c->seconds != 0)
                    printf(":%ds", c->seconds);
            }
            printf("\n");
        }
    } else if (strcmp(op, "report") == 0 && (argc == 8 || argc == 9)) {
        struct qcg__ackResponse r;
        rc = soap_call_qcg__report(
            soap, url, NULL, version, argv[1], verifier_arg(argv[1], argv[2], vbuf), atoi(argv[3]),
            atoi(argv[4]), argv[5], atoi(argv[6]), atoi(argv[7]), argc == 9 ? argv[8] : NULL, &r);
        if (rc == SOAP_OK)
            printf("ok version=%d\n", r.version);
    } else if (strcmp(op, "reports") == 0 && (argc - 1) % 7 == 0) {
        struct qcg__reportsResponse r;
        int n = (argc - 1) / 7;
        struct qcg__attempts list = {
            .__sizeAttempt = n,
            .attempt = soap_malloc(soap, (size_t)(n + 1) * sizeof(*list.attempt))};
        for (int i = 0; i < n; i++) {
            char **a = argv + 1 + 7 * i;
            list.attempt[i] =
                (struct qcg__attempt){.job = a[0],
                                      .verifier = soap_strdup(soap, verifier_arg(a[0], a[1], vbuf)),
                                      .fromRank = atoi(a[2]),
                                      .toRank = atoi(a[3]),
                                      .technique = a[4],
                                      .ok = atoi(a[5]),
                                      .setupMs = atoi(a[6])};
        }
        rc = soap_call_qcg__reports(soap, url, NULL, version, &list, &r);
        if (rc == SOAP_OK)
            printf("ok version=%d accepted=%d\n", r.version, r.accepted);
    } else if (strcmp(op, "site-info") == 0 && argc == 1) {
        struct qcg__siteInfoResponse r;
        rc = soap_call_qcg__siteInfo(soap, url, NULL, version, &r);
        if (rc == SOAP_OK) {
            printf("ok cluster=%s kind=%s broker=%s seen-from=%s reflector=%s:%d proxies=",
                   str(r.cluster.name), str(r.cluster.kind), str(r.broker), str(r.frontendSeenFrom),
                   r.reflector ? str(r.reflector->address) : "",
                   r.reflector ? r.reflector->port : 0);
            for (int i = 0; i < r.__sizeProxy; i++)
                printf("%s%s:%d", i ? "," : "", str(r.proxy[i].address), r.proxy[i].port);
            printf(" peers=");
            for (int i = 0; i < r.__sizePeer; i++)
                printf("%s%s/%s", i ? "," : "", str(r.peer[i].name), str(r.peer[i].kind));
            printf("\n");
        }
    } else if (strcmp(op, "probe") == 0 && (argc == 3 || argc == 4)) {
        /* Without NODE: what a frontend older than per-node probe slots sends. */
        struct qcg__probeResponse r;
        rc = soap_call_qcg__probe(soap, url, NULL, version, argv[1], atoi(argv[2]),
                                  argc == 4 ? argv[3] : NULL, &r);
        if (rc == SOAP_OK)
            printf("ok job=%s secret=%s rank=%d cluster=%s node=%s address=%s seconds=%d\n",
                   str(r.job), str(r.secret), r.rank, str(r.cluster), str(r.node), str(r.address),
                   r.seconds);
    } else if (strcmp(op, "observed") == 0 && argc == 8) {
        struct qcg__observation o = {
            argv[1],       argv[2], argv[3], strcmp(argv[4], "-") == 0 ? NULL : argv[4],
            atoi(argv[5]), argv[6], argv[7], 0};
        struct qcg__ackResponse r;
        rc = soap_call_qcg__observed(soap, url, NULL, version, &o, &r);
        if (rc == SOAP_OK)
            printf("ok version=%d\n", r.version);
    } else if (strcmp(op, "grid") == 0 && argc == 1) {
        struct qcg__gridResponse r;
        rc = soap_call_qcg__grid(soap, url, NULL, version, &r);
        if (rc == SOAP_OK) {
            printf("ok clusters=%d outcomes=%d", r.__sizeCluster, r.__sizeOutcome);
            for (int i = 0; i < r.__sizeCluster; i++)
                printf(" %s:%d:%s", str(r.cluster[i].declared.name), r.cluster[i].nodes,
                       r.cluster[i].observed ? str(r.cluster[i].observed->kind) : "-");
            printf("\n");
        }
    } else if (strcmp(op, "stats") == 0 && argc == 1) {
        struct qcg__statsResponse r;
        rc = soap_call_qcg__stats(soap, url, NULL, version, &r);
        if (rc == SOAP_OK) {
            printf("ok role=%s name=%s", str(r.role), str(r.name));
            for (int i = 0; i < r.__sizeCounter; i++)
                printf(" %s=%llu", str(r.counter[i].name), (unsigned long long)r.counter[i].value);
            printf("\n");
        }
    } else {
        *known = 0;
        return SOAP_OK;
    }
    return rc;
}

int main(int argc, char **argv)
{
    struct soap_client_config cc = {.connect_timeout = 5, .io_timeout = 10};
    int version = QCG_PROTOCOL_VERSION;
    int i = 1;
    for (; i + 1 < argc && strncmp(argv[i], "--", 2) == 0; i += 2) {
        if (strcmp(argv[i], "--url") == 0)
            cc.url = argv[i + 1];
        else if (strcmp(argv[i], "--ca") == 0)
            cc.tls.ca = argv[i + 1];
        else if (strcmp(argv[i], "--cert") == 0)
            cc.tls.certkey = argv[i + 1];
        else if (strcmp(argv[i], "--version") == 0)
            version = atoi(argv[i + 1]);
        else
            return usage();
    }
    if (cc.url == NULL || cc.tls.ca == NULL || cc.tls.certkey == NULL || i >= argc)
        return usage();
    log_init("broker-call", LOG_LEVEL_ERROR, false);
    /* TLS writes to a server that refused us would otherwise kill us. */
    signal(SIGPIPE, SIG_IGN);

    char err[256], sub[64], msg[512];
    struct soap *soap = soap_client_new(&cc, err, sizeof(err));
    if (soap == NULL) {
        printf("unreachable: %s\n", err);
        return 4;
    }
    int known;
    int rc = call(soap, cc.url, version, argc - i, argv + i, &known);
    int status = 0;
    if (!known) {
        status = usage();
    } else {
        switch (soap_call_status(soap, rc, sub, sizeof(sub), msg, sizeof(msg))) {
        case CALL_OK:
            break;
        case CALL_FAULT:
            printf("fault %s: %s\n", sub, msg);
            status = 3;
            break;
        case CALL_UNREACHABLE:
            printf("unreachable: %s\n", msg);
            status = 4;
            break;
        }
    }
    soap_client_reset(soap);
    soap_client_free(soap);
    return status;
}
