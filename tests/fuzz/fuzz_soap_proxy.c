/* libFuzzer harness for the proxy's control endpoint (proxy/service.c behind
   common/soap_server.c: stats, every other operation refused) in this
   process, fed raw bytes over loopback TCP as soap_feed.h says: what any
   host reaching the proxy's control port could send.  The relay whose
   counters stats reads is made, not run.

   Input: byte 0 % 3 picks how the rest is sent:
     0: as it is, on a plain TCP connection (the server expects TLS);
     1: inside TLS as helper "nata/nata1";
     2: inside TLS as frontend "nata". */
#include <stdlib.h>

#include "certs.h"
#include "fuzz.h"
#include "log.h"
#include "relay.h"
#include "service.h"
#include "soap_feed.h"
#include "token.h"

static struct proxy_service svc = {.name = "px1"};

static void relay_stopped(void *service)
{
    relay_free(((struct proxy_service *)service)->relay);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    static const char *const issue[] = {"proxy px1 --san 127.0.0.1", "helper nata/nata1",
                                        "frontend nata", NULL};
    static const char *const as[] = {"helper-nata-nata1.pem", "frontend-nata.pem", NULL};
    static const struct proxy_key key = {{1}};
    char err[512];

    (void)argc;
    (void)argv;
    certs_make(issue);
    /* Errors only: the server logs every refused request. */
    log_init("proxy", LOG_LEVEL_ERROR, false);
    struct relay_config rc = {.listen_addr = "127.0.0.1",
                              .key = &key,
                              .token_skew = 5,
                              .pair_timeout = 5,
                              .max_pairs = 16,
                              .pipe_size = 65536};
    svc.relay = relay_new(&rc, err, sizeof(err));
    if (svc.relay == NULL) {
        fprintf(stderr, "fuzz-soap-proxy: %s\n", err);
        abort();
    }
    soap_feed_clients(as);
    soap_feed_serve("proxy-px1.pem", SERVED_PROXY, &svc, relay_stopped);
    return 0;
}
