/* libFuzzer harness for the frontend's SOAP service (frontend/operations.c
   behind common/soap_server.c) in this process, fed raw bytes over loopback
   TCP as soap_feed.h says: what any host of the cluster's LAN, or a helper
   of the grid, could send the frontend's port.  The frontend's link to the
   broker is up; the broker is answer_server.h with a fixed, well-formed
   answer for each operation the frontend relays, so that registrations and
   publications hold and later requests find them.

   Input: byte 0 % 3 picks how the rest is sent:
     0: as it is, on a plain TCP connection (the server expects TLS);
     1: inside TLS as helper "nata/nata1" (a node of the frontend's cluster);
     2: inside TLS as helper "natb/natb1" (a node of another cluster). */
#include <stdlib.h>

#include "answer_server.h"
#include "certs.h"
#include "frontend.h"
#include "frontend_config.h"
#include "fuzz.h"
#include "log.h"
#include "soap_feed.h"
#include "store.h"

static struct frontend_config cfg;

/* What the broker answers each relayed operation with (qcg_service.h). */
static const struct {
    const char *op, *body;
} broker_answers[] = {
    {"registerNode",
     "<qcg:registerResponse><version>2</version><epoch>7</epoch></qcg:registerResponse>"},
    {"publish", "<qcg:ackResponse><version>2</version></qcg:ackResponse>"},
    {"withdraw", "<qcg:ackResponse><version>2</version></qcg:ackResponse>"},
    {"traverse", "<qcg:ackResponse><version>2</version></qcg:ackResponse>"},
    {"report", "<qcg:ackResponse><version>2</version></qcg:ackResponse>"},
    {"observed", "<qcg:ackResponse><version>2</version></qcg:ackResponse>"},
    {"lookup", "<qcg:lookupResponse><version>2</version><plan><status>ok</status>"
               "<technique>direct</technique><cluster>natb</cluster><node>natb1</node>"
               "<address>198.18.2.11</address><port>23001</port><cacheable>1</cacheable>"
               "</plan></qcg:lookupResponse>"},
    {"siteInfo", "<qcg:siteInfoResponse><version>2</version><cluster><name>nata</name>"
                 "<kind>nat</kind><publicAddress>203.0.113.20</publicAddress><portLow>0</portLow>"
                 "<portHigh>0</portHigh></cluster><frontendSeenFrom>203.0.113.20"
                 "</frontendSeenFrom></qcg:siteInfoResponse>"},
    {"probe", "<qcg:probeResponse><version>2</version>"
              "<job>probe-0123456789abcdef0123456789abcdef</job>"
              "<secret>0123456789abcdef0123456789abcdef</secret><rank>1</rank>"
              "<cluster>natb</cluster><node>natb1</node><address>198.18.2.11</address>"
              "<seconds>30</seconds></qcg:probeResponse>"},
};

static void frontend_stopped(void *fe)
{
    frontend_free(fe);
    frontend_config_free(&cfg);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    static const char *const issue[] = {"frontend nata --san 127.0.0.1", "broker --san 127.0.0.1",
                                        "helper nata/nata1", "helper natb/natb1", NULL};
    static const char *const as[] = {"helper-nata-nata1.pem", "helper-natb-natb1.pem", NULL};
    char err[512];

    (void)argc;
    (void)argv;
    certs_make(issue);
    struct answer_server *broker =
        answer_server_start(certs_path("ca.crt"), certs_path("broker-broker.pem"));
    for (size_t i = 0; i < sizeof(broker_answers) / sizeof(broker_answers[0]); i++)
        answer_server_set_op(broker, broker_answers[i].op, broker_answers[i].body);
    char url[64];
    snprintf(url, sizeof(url), "https://127.0.0.1:%d/", answer_server_port(broker));
    char *args[] = {"qcg-frontend",
                    "--ca",
                    (char *)certs_path("ca.crt"),
                    "--cert",
                    (char *)certs_path("frontend-nata.pem"),
                    "--broker",
                    url,
                    "--kind",
                    "nat",
                    "--public-address",
                    "203.0.113.20",
                    NULL};
    if (frontend_config_load(&cfg, 11, args, err, sizeof(err)) != CONFIG_OK) {
        fprintf(stderr, "fuzz-soap-frontend: %s\n", err);
        abort();
    }
    /* Errors only: the server logs every refused request. */
    log_init("frontend", LOG_LEVEL_ERROR, false);
    struct frontend *fe = frontend_new(&cfg, err, sizeof(err));
    if (fe == NULL) {
        fprintf(stderr, "fuzz-soap-frontend: %s\n", err);
        abort();
    }
    /* As the upstream loop does once registered: the link is up. */
    struct node_info *nodes;
    uint64_t version;
    store_nodes(fe->store, &nodes, &version);
    free(nodes);
    store_link_up_if(fe->store, version);
    soap_feed_clients(as);
    soap_feed_serve("frontend-nata.pem", SERVED_FRONTEND, fe, frontend_stopped);
    return 0;
}
