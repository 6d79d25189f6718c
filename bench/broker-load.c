/*
 * Load generator for qcg-broker: acts as the frontend of one cluster, registers
 * it and one node, publishes N contacts of one job, then has T threads look up
 * random ranks over mutual TLS with keep-alive for S seconds and prints the rate.
 * A benchmark, not a test: it asserts nothing about speed.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <getopt.h>

#include "soapH.h"
#include "proto.h"
#include "soap_client.h"

struct load {
    struct soap_client_config client;
    const char *cluster;
    const char *node;
    const char *address;
    int contacts;
    int threads;
    double seconds;
    atomic_ulong lookups;
    atomic_ulong failures;
    atomic_int stop;
};

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static struct soap *client_or_die(const struct load *ld)
{
    char err[256];
    struct soap *soap = soap_client_new(&ld->client, err, sizeof(err));
    if (!soap) {
        fprintf(stderr, "broker-load: %s\n", err);
        exit(1);
    }
    return soap;
}

static int check(struct soap *soap, int rc, const char *what)
{
    char sub[64], msg[256];
    if (soap_call_status(soap, rc, sub, sizeof(sub), msg, sizeof(msg)) == CALL_OK)
        return 0;
    fprintf(stderr, "broker-load: %s: %s %s\n", what, sub, msg);
    return -1;
}

static int setup(struct load *ld)
{
    struct soap *soap = client_or_die(ld);
    const char *url = ld->client.url;
    char *public_address = (char *)ld->address;
    struct qcg__cluster cluster = {
        .name = (char *)ld->cluster, .kind = "open",
        .__sizePublicAddress = 1, .publicAddress = &public_address,
    };
    struct qcg__registerResponse reg;
    if (check(soap, soap_call_qcg__registerCluster(soap, url, NULL, QCG_PROTOCOL_VERSION,
                                                   &cluster, &reg), "registerCluster"))
        return -1;
    soap_client_reset(soap);
    struct qcg__node node = {.name = (char *)ld->node, .address = (char *)ld->address,
                             .portLow = 1, .portHigh = 65535};
    if (check(soap, soap_call_qcg__registerNode(soap, url, NULL, QCG_PROTOCOL_VERSION, &node,
                                                &reg), "registerNode"))
        return -1;
    soap_client_reset(soap);
    double t0 = now_seconds();
    for (int rank = 0; rank < ld->contacts; rank++) {
        struct qcg__contact c = {.job = "bench", .secret = "bench-secret", .rank = rank,
                                 .cluster = (char *)ld->cluster, .node = (char *)ld->node,
                                 .address = (char *)ld->address, .port = 1 + rank % 65535};
        struct qcg__ackResponse ack;
        int rc = soap_call_qcg__publish(soap, url, NULL, QCG_PROTOCOL_VERSION, &c, &ack);
        if (check(soap, rc, "publish"))
            return -1;
        soap_client_reset(soap);
    }
    double t = now_seconds() - t0;
    printf("published   %d contacts in %.2f s (%.0f/s, one connection)\n", ld->contacts, t,
           ld->contacts / t);
    soap_client_free(soap);
    return 0;
}

static void *lookup_thread(void *arg)
{
    struct load *ld = arg;
    struct soap *soap = client_or_die(ld);
    unsigned seed = (unsigned)(uintptr_t)&seed ^ (unsigned)time(NULL);
    while (!atomic_load(&ld->stop)) {
        struct qcg__lookupResponse res;
        int to = (int)(rand_r(&seed) % (unsigned)ld->contacts);
        int rc = soap_call_qcg__lookup(soap, ld->client.url, NULL, QCG_PROTOCOL_VERSION, "bench",
                                       "bench-secret", 0, to, NULL, NULL, &res);
        if (rc == SOAP_OK && res.plan.status && strcmp(res.plan.status, "ok") == 0)
            atomic_fetch_add(&ld->lookups, 1);
        else
            atomic_fetch_add(&ld->failures, 1);
        soap_client_reset(soap);
    }
    soap_client_free(soap);
    return NULL;
}

static void usage(FILE *out)
{
    fprintf(out, "usage: broker-load --url URL --ca CA.crt --cert FRONTEND.pem --cluster NAME\n"
                 "                   [--node NAME] [--address A] [--contacts N] [--threads T]\n"
                 "                   [--seconds S]\n");
}

int main(int argc, char **argv)
{
    static struct load ld = {
        .client = {.connect_timeout = 5, .io_timeout = 10},
        .node = "n1", .address = "127.0.0.1", .contacts = 1000, .threads = 2, .seconds = 5,
    };
    static const struct option opts[] = {
        {"url", 1, 0, 'u'}, {"ca", 1, 0, 'a'}, {"cert", 1, 0, 'c'}, {"cluster", 1, 0, 'C'},
        {"node", 1, 0, 'n'}, {"address", 1, 0, 'A'}, {"contacts", 1, 0, 'N'},
        {"threads", 1, 0, 't'}, {"seconds", 1, 0, 's'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    int o;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (o) {
        case 'u': ld.client.url = optarg; break;
        case 'a': ld.client.tls.ca = optarg; break;
        case 'c': ld.client.tls.certkey = optarg; break;
        case 'C': ld.cluster = optarg; break;
        case 'n': ld.node = optarg; break;
        case 'A': ld.address = optarg; break;
        case 'N': ld.contacts = atoi(optarg); break;
        case 't': ld.threads = atoi(optarg); break;
        case 's': ld.seconds = atof(optarg); break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (!ld.client.url || !ld.client.tls.ca || !ld.client.tls.certkey || !ld.cluster ||
        ld.contacts < 1 || ld.threads < 1 || ld.threads > 64 || ld.seconds <= 0) {
        usage(stderr);
        return 2;
    }
    if (setup(&ld))
        return 1;
    pthread_t tids[64];
    double t0 = now_seconds();
    for (int i = 0; i < ld.threads; i++)
        pthread_create(&tids[i], NULL, lookup_thread, &ld);
    struct timespec nap = {.tv_sec = (time_t)ld.seconds,
                           .tv_nsec = (long)((ld.seconds - (double)(time_t)ld.seconds) * 1e9)};
    nanosleep(&nap, NULL);
    atomic_store(&ld.stop, 1);
    for (int i = 0; i < ld.threads; i++)
        pthread_join(tids[i], NULL);
    double t = now_seconds() - t0;
    unsigned long n = atomic_load(&ld.lookups), f = atomic_load(&ld.failures);
    printf("lookups     %lu in %.2f s with %d connections: %.0f/s (%lu failed)\n", n, t,
           ld.threads, (double)n / t, f);
    return f ? 1 : 0;
}
