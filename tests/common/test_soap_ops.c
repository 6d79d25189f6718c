/*
 * The operations of a tiny test server: stats answers with the caller's role
 * and name as the server saw them in its certificate, poll long-polls a
 * cmdqueue; everything else is a qcg:invalid fault.
 */
#include "soapH.h"
#include "soap_server.h"
#include "test_soap_ops.h"

/* stats: the caller as the server saw it, and the limits in force on this
   connection's context, so the test can check that they are the safe ones. */
int qcg__stats(struct soap *soap, int version, struct qcg__statsResponse *response)
{
    if (soap_check_version(soap, version))
        return SOAP_FAULT;
    const struct identity *id = soap_caller(soap);
    response->version = QCG_PROTOCOL_VERSION;
    response->role = soap_strdup(soap, role_name(id->role));
    response->name = soap_strdup(soap, id->name);
    struct soap_stage_counts stage;
    soap_server_stage_counts(soap, &stage);
    struct {
        const char *name;
        unsigned long long value;
    } values[] = {
        {"state_seen", soap_server_state(soap) != NULL},
        {"recv_timeout", (unsigned long long)soap->recv_timeout},
        {"send_timeout", (unsigned long long)soap->send_timeout},
        {"transfer_timeout", (unsigned long long)soap->transfer_timeout},
        {"recv_maxlength", soap->recv_maxlength},
        {"maxlength", (unsigned long long)soap->maxlength},
        {"maxoccurs", soap->maxoccurs},
        {"maxlevel", soap->maxlevel},
        {"max_keep_alive", (unsigned long long)soap->max_keep_alive},
        {"socket_flags", (unsigned long long)soap->socket_flags},
        {"handshakes_expired", stage.expired},
        {"handshakes_cut", stage.cut},
        {"handshakes_refused_address", stage.refused_address},
        {"handshakes_refused_full", stage.refused_full},
    };
    int n = (int)(sizeof(values) / sizeof(values[0]));
    response->__sizeCounter = n;
    response->counter = soap_malloc(soap, (size_t)n * sizeof(*response->counter));
    for (int i = 0; i < n; i++) {
        response->counter[i].name = soap_strdup(soap, values[i].name);
        response->counter[i].value = values[i].value;
    }
    return SOAP_OK;
}

int qcg__poll(struct soap *soap, int version, ULONG64 epoch, ULONG64 ackSeq, int waitSeconds,
              struct qcg__pollResponse *response)
{
    if (soap_check_version(soap, version))
        return SOAP_FAULT;
    struct test_state *st = soap_server_state(soap);
    if (waitSeconds < 0 || waitSeconds > 25)
        return soap_qcg_fault(soap, "invalid", "waitSeconds %d is not in 0..25", waitSeconds);
    struct command cmds[8];
    atomic_fetch_add(&st->polls, 1);
    unsigned long long now = st->epoch;
    int n = 0;
    if (now == 0 || epoch == now) {
        if (st->forget_acks > 0 && st->forget_acks-- > 0)
            ackSeq = 0;
        n = cmdqueue_wait(st->queue, ackSeq, waitSeconds * 1000, cmds, 8);
    }
    /* Read after the wait: a restart during it answers with the new epoch. */
    now = st->epoch;
    response->version = QCG_PROTOCOL_VERSION;
    response->epoch = now != 0 ? now : epoch;
    response->__sizeCommand = n;
    response->command = n ? soap_malloc(soap, (size_t)n * sizeof(*response->command)) : NULL;
    for (int i = 0; i < n; i++) {
        struct qcg__command *c = &response->command[i];
        memset(c, 0, sizeof(*c));
        c->seq = cmds[i].seq;
        c->kind = soap_strdup(soap, cmds[i].kind);
        c->job = soap_strdup(soap, cmds[i].job);
        c->rank = cmds[i].rank;
    }
    return SOAP_OK;
}

static int not_here(struct soap *soap)
{
    return soap_qcg_fault(soap, "invalid", "not served by the test server");
}

int qcg__registerCluster(struct soap *soap, int version, struct qcg__cluster *cluster,
                         struct qcg__registerResponse *response)
{
    (void)version, (void)cluster, (void)response;
    return not_here(soap);
}

int qcg__registerNode(struct soap *soap, int version, struct qcg__node *node,
                      struct qcg__registerResponse *response)
{
    (void)version, (void)node, (void)response;
    return not_here(soap);
}

int qcg__publish(struct soap *soap, int version, struct qcg__contact *contact,
                 struct qcg__ackResponse *response)
{
    (void)version, (void)contact, (void)response;
    return not_here(soap);
}

int qcg__withdraw(struct soap *soap, int version, char *job, char *secret, int rank, char *node,
                  struct qcg__ackResponse *response)
{
    (void)version, (void)job, (void)secret, (void)rank, (void)node, (void)response;
    return not_here(soap);
}

int qcg__lookup(struct soap *soap, int version, char *job, char *secret, int fromRank, int toRank,
                char *tried, char *only, struct qcg__lookupResponse *response)
{
    (void)version, (void)job, (void)secret, (void)fromRank, (void)toRank, (void)tried, (void)only,
        (void)response;
    return not_here(soap);
}

int qcg__siteInfo(struct soap *soap, int version, struct qcg__siteInfoResponse *response)
{
    (void)version, (void)response;
    return not_here(soap);
}

int qcg__probe(struct soap *soap, int version, char *cluster, int seconds, char *node,
               struct qcg__probeResponse *response)
{
    (void)version, (void)cluster, (void)seconds, (void)node, (void)response;
    return not_here(soap);
}

int qcg__observed(struct soap *soap, int version, struct qcg__observation *observation,
                  struct qcg__ackResponse *response)
{
    (void)version, (void)observation, (void)response;
    return not_here(soap);
}

int qcg__grid(struct soap *soap, int version, struct qcg__gridResponse *response)
{
    (void)version, (void)response;
    return not_here(soap);
}

int qcg__traverse(struct soap *soap, int version, char *token, char *packet,
                  struct qcg__ackResponse *response)
{
    (void)version, (void)token, (void)packet, (void)response;
    return not_here(soap);
}

int qcg__report(struct soap *soap, int version, char *job, char *secret, int fromRank, int toRank,
                char *technique, int ok, int setupMs, char *why, struct qcg__ackResponse *response)
{
    (void)version, (void)job, (void)secret, (void)fromRank, (void)toRank, (void)technique;
    (void)ok, (void)setupMs, (void)why, (void)response;
    return not_here(soap);
}

/* As a service built before the operation existed answers: gSOAP's own
   fault for a method it does not know (soap_call_unknown_op's case). */
int qcg__lookups(struct soap *soap, int version, struct qcg__lookupAsks *asks,
                 struct qcg__lookupsResponse *response)
{
    (void)version, (void)asks, (void)response;
    return soap->error = SOAP_NO_METHOD;
}

int qcg__reports(struct soap *soap, int version, struct qcg__attempts *attempts,
                 struct qcg__reportsResponse *response)
{
    (void)version, (void)attempts, (void)response;
    return not_here(soap);
}

int qcg__proxyAlive(struct soap *soap, int version, int pairs, ULONG64 bytes,
                    struct qcg__ackResponse *response)
{
    (void)version, (void)pairs, (void)bytes, (void)response;
    return not_here(soap);
}
