/*
 * Load generator for qcg-broker: acts as the frontend of one cluster, registers
 * it and one node, publishes N contacts of one job, then has T threads look up
 * random ranks over mutual TLS with keep-alive for S seconds and prints the rate.
 * With --rate each thread paces its lookups (a frontend's traffic, not a
 * saturating load) and the latency of every lookup is kept: p50/p99 printed,
 * all of them written to --latency FILE (microseconds, one a line) for a
 * caller that merges several instances (bench/service-load.sh).
 * With --batch B each call is one lookups call of B random ranks (what a
 * frontend relays for a busy node); a latency is then a batch's.
 * With --forge-reports JOB each call is instead one reports call of --batch
 * failures of random pairs of JOB, another cluster's job this one got no
 * plan for (a forged REPORT storm); the counts are then reports the broker
 * accepted and refused.
 * A benchmark, not a test: it asserts nothing about speed.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <getopt.h>

#include "soapH.h"
#include "proto.h"
#include "soap_client.h"

/* What a helper would send for the benchmark job (any 64 lowercase hex). */
#define BENCH_VERIFIER "bebebebebebebebebebebebebebebebebebebebebebebebebebebebebebebebe"

struct load {
    struct soap_client_config client;
    const char *cluster;
    const char *node;
    const char *address;
    const char *job;
    const char *bind; /* source address of its connections, NULL = any */
    const char *latency_file;
    double rate; /* lookups per second per thread; 0 = as fast as possible */
    int contacts;
    int threads;
    int batch;             /* lookups per call: 1 = the lookup operation */
    const char *forge_job; /* reports of this job's pairs instead of lookups */
    double seconds;
    atomic_ulong lookups;
    atomic_ulong failures;
    atomic_int stop;
    pthread_mutex_t lock; /* protects what follows */
    unsigned *lat_us;     /* every lookup's latency */
    size_t nlat, caplat;
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
    /* gSOAP binds to this before each connect it makes. */
    soap->client_addr = ld->bind;
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
        .name = (char *)ld->cluster,
        .kind = "open",
        .__sizePublicAddress = 1,
        .publicAddress = &public_address,
    };
    struct qcg__registerResponse reg;
    if (check(soap,
              soap_call_qcg__registerCluster(soap, url, NULL, QCG_PROTOCOL_VERSION, &cluster, &reg),
              "registerCluster"))
        return -1;
    soap_client_reset(soap);
    struct qcg__node node = {
        .name = (char *)ld->node, .address = (char *)ld->address, .portLow = 1, .portHigh = 65535};
    if (check(soap, soap_call_qcg__registerNode(soap, url, NULL, QCG_PROTOCOL_VERSION, &node, &reg),
              "registerNode"))
        return -1;
    soap_client_reset(soap);
    double t0 = now_seconds();
    for (int rank = 0; rank < ld->contacts; rank++) {
        struct qcg__contact c = {.job = (char *)ld->job,
                                 .verifier = BENCH_VERIFIER,
                                 .rank = rank,
                                 .cluster = (char *)ld->cluster,
                                 .node = (char *)ld->node,
                                 .address = (char *)ld->address,
                                 .port = 1 + rank % 65535};
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

static void keep_latency(struct load *ld, const unsigned *us, size_t n)
{
    pthread_mutex_lock(&ld->lock);
    if (ld->nlat + n > ld->caplat) {
        size_t cap = ld->caplat ? ld->caplat : 4096;
        while (cap < ld->nlat + n)
            cap *= 2;
        unsigned *p = realloc(ld->lat_us, cap * sizeof(*p));
        if (p == NULL) {
            pthread_mutex_unlock(&ld->lock);
            return;
        }
        ld->lat_us = p;
        ld->caplat = cap;
    }
    memcpy(ld->lat_us + ld->nlat, us, n * sizeof(*us));
    ld->nlat += n;
    pthread_mutex_unlock(&ld->lock);
}

static void sleep_until(double t)
{
    double d = t - now_seconds();
    if (d > 0) {
        struct timespec nap = {.tv_sec = (time_t)d,
                               .tv_nsec = (long)((d - (double)(time_t)d) * 1e9)};
        nanosleep(&nap, NULL);
    }
}

/* One reports call of ld->batch failures of random pairs of ld->forge_job:
   how many the broker accepted. */
static int forged_reports(struct load *ld, struct soap *soap, unsigned *seed)
{
    struct qcg__attempt att[QCG_REPORTS_MAX];
    struct qcg__attempts list = {.__sizeAttempt = ld->batch, .attempt = att};
    struct qcg__reportsResponse res;
    for (int i = 0; i < ld->batch; i++)
        att[i] = (struct qcg__attempt){.job = (char *)ld->forge_job,
                                       .verifier = BENCH_VERIFIER,
                                       .fromRank = (int)(rand_r(seed) % (unsigned)ld->contacts),
                                       .toRank = (int)(rand_r(seed) % (unsigned)ld->contacts),
                                       .technique = "direct",
                                       .ok = 0,
                                       .setupMs = 1,
                                       .why = "connection refused"};
    if (soap_call_qcg__reports(soap, ld->client.url, NULL, QCG_PROTOCOL_VERSION, &list, &res) !=
        SOAP_OK)
        return 0;
    return res.accepted;
}

/* One call of ld->batch lookups of random ranks: how many were planned. */
static int lookup_call(struct load *ld, struct soap *soap, unsigned *seed)
{
    if (ld->forge_job != NULL)
        return forged_reports(ld, soap, seed);
    if (ld->batch == 1) {
        struct qcg__lookupResponse res;
        int to = (int)(rand_r(seed) % (unsigned)ld->contacts);
        int rc = soap_call_qcg__lookup(soap, ld->client.url, NULL, QCG_PROTOCOL_VERSION,
                                       (char *)ld->job, BENCH_VERIFIER, 0, to, NULL, NULL, &res);
        return rc == SOAP_OK && res.plan.status && strcmp(res.plan.status, "ok") == 0;
    }
    struct qcg__lookupAsk asks[QCG_LOOKUPS_MAX];
    struct qcg__lookupAsks list = {.__sizeAsk = ld->batch, .ask = asks};
    struct qcg__lookupsResponse res;
    for (int i = 0; i < ld->batch; i++)
        asks[i] = (struct qcg__lookupAsk){.job = (char *)ld->job,
                                          .verifier = BENCH_VERIFIER,
                                          .fromRank = 0,
                                          .toRank = (int)(rand_r(seed) % (unsigned)ld->contacts)};
    int ok = 0;
    if (soap_call_qcg__lookups(soap, ld->client.url, NULL, QCG_PROTOCOL_VERSION, &list, &res) ==
        SOAP_OK)
        for (int i = 0; i < res.__sizeAnswer; i++)
            ok += res.answer[i].plan != NULL && res.answer[i].plan->status != NULL &&
                  strcmp(res.answer[i].plan->status, "ok") == 0;
    return ok;
}

static void *lookup_thread(void *arg)
{
    struct load *ld = arg;
    struct soap *soap = client_or_die(ld);
    unsigned seed = (unsigned)(uintptr_t)&seed ^ (unsigned)time(NULL);
    unsigned batch[256];
    size_t nb = 0;
    double next = now_seconds();
    while (!atomic_load(&ld->stop)) {
        double t0 = now_seconds();
        int ok = lookup_call(ld, soap, &seed);
        double t1 = now_seconds();
        atomic_fetch_add(&ld->lookups, (unsigned long)ok);
        atomic_fetch_add(&ld->failures, (unsigned long)(ld->batch - ok));
        if (ok > 0) {
            batch[nb++] = (unsigned)((t1 - t0) * 1e6);
            if (nb == sizeof(batch) / sizeof(batch[0])) {
                keep_latency(ld, batch, nb);
                nb = 0;
            }
        }
        soap_client_reset(soap);
        if (ld->rate > 0) {
            /* A fixed schedule; a late call does not make the next ones
               burst to catch up. */
            next += 1.0 / ld->rate;
            if (next < t1)
                next = t1;
            sleep_until(next);
        }
    }
    keep_latency(ld, batch, nb);
    soap_client_free(soap);
    return NULL;
}

static int cmp_unsigned(const void *a, const void *b)
{
    unsigned x = *(const unsigned *)a, y = *(const unsigned *)b;
    return x < y ? -1 : x > y;
}

/* p50 and p99 on stdout; every latency in the file when one was asked for. */
static int report_latency(struct load *ld)
{
    if (ld->nlat == 0)
        return 0;
    qsort(ld->lat_us, ld->nlat, sizeof(*ld->lat_us), cmp_unsigned);
    printf("latency_us  p50 %u p99 %u max %u of %zu\n", ld->lat_us[ld->nlat / 2],
           ld->lat_us[ld->nlat * 99 / 100], ld->lat_us[ld->nlat - 1], ld->nlat);
    if (ld->latency_file == NULL)
        return 0;
    FILE *f = fopen(ld->latency_file, "w");
    if (f == NULL) {
        fprintf(stderr, "broker-load: %s: %s\n", ld->latency_file, strerror(errno));
        return -1;
    }
    for (size_t i = 0; i < ld->nlat; i++)
        fprintf(f, "%u\n", ld->lat_us[i]);
    return fclose(f) == 0 ? 0 : -1;
}

static atomic_int *stop_flag;

/* SIGTERM ends the run early, with its summary: a caller that runs it as
   background load for as long as it measures something else. */
static void on_term(int sig)
{
    (void)sig;
    atomic_store(stop_flag, 1);
}

static void usage(FILE *out)
{
    fprintf(out, "usage: broker-load --url URL --ca CA.crt --cert FRONTEND.pem --cluster NAME\n"
                 "                   [--node NAME] [--address A] [--contacts N] [--threads T]\n"
                 "                   [--seconds S] [--job ID] [--rate LOOKUPS/S/THREAD]\n"
                 "                   [--latency FILE] [--bind ADDRESS] [--batch B]\n"
                 "                   [--forge-reports JOB]\n");
}

int main(int argc, char **argv)
{
    static struct load ld = {
        .client = {.connect_timeout = 5, .io_timeout = 10},
        .node = "n1",
        .job = "bench",
        .address = "127.0.0.1",
        .contacts = 1000,
        .threads = 2,
        .seconds = 5,
        .batch = 1,
    };
    static const struct option opts[] = {{"url", 1, 0, 'u'},
                                         {"ca", 1, 0, 'a'},
                                         {"cert", 1, 0, 'c'},
                                         {"cluster", 1, 0, 'C'},
                                         {"node", 1, 0, 'n'},
                                         {"address", 1, 0, 'A'},
                                         {"contacts", 1, 0, 'N'},
                                         {"threads", 1, 0, 't'},
                                         {"seconds", 1, 0, 's'},
                                         {"job", 1, 0, 'j'},
                                         {"rate", 1, 0, 'r'},
                                         {"latency", 1, 0, 'l'},
                                         {"bind", 1, 0, 'b'},
                                         {"batch", 1, 0, 'B'},
                                         {"forge-reports", 1, 0, 'F'},
                                         {"help", 0, 0, 'h'},
                                         {0, 0, 0, 0}};
    int o;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (o) {
        case 'u':
            ld.client.url = optarg;
            break;
        case 'a':
            ld.client.tls.ca = optarg;
            break;
        case 'c':
            ld.client.tls.certkey = optarg;
            break;
        case 'C':
            ld.cluster = optarg;
            break;
        case 'n':
            ld.node = optarg;
            break;
        case 'A':
            ld.address = optarg;
            break;
        case 'N':
            ld.contacts = atoi(optarg);
            break;
        case 't':
            ld.threads = atoi(optarg);
            break;
        case 's':
            ld.seconds = atof(optarg);
            break;
        case 'j':
            ld.job = optarg;
            break;
        case 'r':
            ld.rate = atof(optarg);
            break;
        case 'l':
            ld.latency_file = optarg;
            break;
        case 'b':
            ld.bind = optarg;
            break;
        case 'B':
            ld.batch = atoi(optarg);
            break;
        case 'F':
            ld.forge_job = optarg;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (!ld.client.url || !ld.client.tls.ca || !ld.client.tls.certkey || !ld.cluster ||
        ld.contacts < 1 || ld.threads < 1 || ld.threads > 64 || ld.seconds <= 0 || ld.rate < 0 ||
        ld.batch < 1 || ld.batch > (ld.forge_job ? QCG_REPORTS_MAX : QCG_LOOKUPS_MAX)) {
        usage(stderr);
        return 2;
    }
    pthread_mutex_init(&ld.lock, NULL);
    stop_flag = &ld.stop;
    struct sigaction term = {.sa_handler = on_term};
    sigaction(SIGTERM, &term, NULL);
    /* A connection the broker cut is an error to count, not the end. */
    signal(SIGPIPE, SIG_IGN);
    if (setup(&ld))
        return 1;
    pthread_t tids[64];
    double t0 = now_seconds();
    for (int i = 0; i < ld.threads; i++)
        pthread_create(&tids[i], NULL, lookup_thread, &ld);
    struct timespec nap = {.tv_sec = (time_t)ld.seconds,
                           .tv_nsec = (long)((ld.seconds - (double)(time_t)ld.seconds) * 1e9)};
    if (!atomic_load(&ld.stop))
        nanosleep(&nap, NULL); /* EINTR: a SIGTERM */
    atomic_store(&ld.stop, 1);
    for (int i = 0; i < ld.threads; i++)
        pthread_join(tids[i], NULL);
    double t = now_seconds() - t0;
    unsigned long n = atomic_load(&ld.lookups), f = atomic_load(&ld.failures);
    printf("lookups     %lu in %.2f s with %d connections: %.0f/s (%lu failed)\n", n, t, ld.threads,
           (double)n / t, f);
    if (report_latency(&ld) < 0)
        return 1;
    free(ld.lat_us);
    return f ? 1 : 0;
}
