/* libFuzzer harness for the SOAP server (common/soap_server.c) with the
   broker's real operations (broker/service.c) in this process, fed raw bytes
   over loopback TCP as any host that reaches the broker's port could send
   them (soap_feed.h): a TLS handshake of its own, or, after a real
   mutual-TLS handshake with a certificate of the grid, an HTTP request
   (headers, SOAP envelope).

   Input: byte 0 % 3 picks how the rest is sent:
     0: as it is, on a plain TCP connection (the server expects TLS);
     1: inside TLS as frontend "nata";
     2: inside TLS as helper "nata/nata1". */
#include "broker.h"
#include "certs.h"
#include "fuzz.h"
#include "log.h"
#include "soap_feed.h"

static void broker_stopped(void *broker)
{
    broker_free(broker);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    static const char *const issue[] = {"broker --san 127.0.0.1", "frontend nata",
                                        "helper nata/nata1", NULL};
    static const char *const as[] = {"frontend-nata.pem", "helper-nata-nata1.pem", NULL};

    (void)argc;
    (void)argv;
    certs_make(issue);
    /* Errors only: the server logs every refused request. */
    log_init("broker", LOG_LEVEL_ERROR, false);
    const struct rate limits[RATE_KINDS] = {
        [RATE_LOOKUP] = {20000, 200000}, [RATE_REPORT] = {10000, 100000}, [RATE_PROBE] = {10, 600}};
    struct broker *broker = broker_new(1000, "broker", 600, limits);
    if (broker == NULL)
        abort();
    soap_feed_clients(as);
    soap_feed_serve("broker-broker.pem", SERVED_BROKER, broker, broker_stopped);
    return 0;
}
