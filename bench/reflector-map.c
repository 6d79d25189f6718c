/*
 * reflector-map: the broker's reflector under MAP requests, for
 * bench/reflector-map.sh.  Starts the reflector in this process (its own
 * thread, on 127.0.0.1, any port) and runs CLIENTS threads that each, for
 * SECONDS, connect, send "MAP\n", read the answer to the reflector's FIN
 * and close: one request per connection, as qcg-probe makes them, so the
 * figure is the reflector's cost per connection (accept, admission,
 * deadline, answer, linger).
 *
 *   reflector-map [SECONDS] [CLIENTS]      (default 5, 4)
 *
 * Output: one line, "maps_per_s X p50_us Y p99_us Z cpu_us_per_map C errors N":
 * C is the process's CPU time (user + system, the clients' share included,
 * the same code on both sides of a comparison) per MAP, which a busy
 * machine disturbs less than the rate.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "reflector.h"

#define MAX_SAMPLES 2000000

static int port;
static uint64_t end_us;
static atomic_uint_fast64_t done, errors;
static uint32_t *samples; /* microseconds per request */
static atomic_size_t nsamples;

static uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* One MAP on a connection of its own: 0, or -1. */
static int one_map(void)
{
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    char buf[128];
    size_t got = 0;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&to, sizeof(to)) < 0 ||
        send(fd, "MAP\n", 4, MSG_NOSIGNAL) != 4) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    for (;;) {
        ssize_t n = recv(fd, buf + got, sizeof(buf) - 1 - got, 0);
        if (n <= 0)
            break;
        got += (size_t)n;
        if (got == sizeof(buf) - 1)
            break;
    }
    close(fd);
    buf[got] = '\0';
    return strncmp(buf, "MAPPED 127.0.0.1 ", 17) == 0 ? 0 : -1;
}

static void *client(void *arg)
{
    (void)arg;
    while (now_us() < end_us) {
        uint64_t t0 = now_us();
        if (one_map() < 0) {
            errors++;
            continue;
        }
        size_t i = nsamples++;
        if (i < MAX_SAMPLES)
            samples[i] = (uint32_t)(now_us() - t0);
        done++;
    }
    return NULL;
}

static int by_value(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    int seconds = argc > 1 ? atoi(argv[1]) : 5;
    int clients = argc > 2 ? atoi(argv[2]) : 4;
    struct proxy_key key;
    char err[256];

    if (seconds <= 0 || clients <= 0 || clients > 64) {
        fprintf(stderr, "usage: reflector-map [SECONDS] [CLIENTS (1-64)]\n");
        return 2;
    }
    log_init("reflector-map", LOG_LEVEL_ERROR, false);
    memset(&key, 0x5a, sizeof(key));
    struct reflector *r = reflector_start("127.0.0.1:0", &key, NULL, NULL, err, sizeof(err));
    if (r == NULL) {
        fprintf(stderr, "reflector-map: %s\n", err);
        return 1;
    }
    port = reflector_port(r);
    samples = calloc(MAX_SAMPLES, sizeof(*samples));
    pthread_t tid[64];
    struct rusage ru0, ru1;
    getrusage(RUSAGE_SELF, &ru0);
    uint64_t start = now_us();
    end_us = start + (uint64_t)seconds * 1000000u;
    for (int i = 0; i < clients; i++)
        pthread_create(&tid[i], NULL, client, NULL);
    for (int i = 0; i < clients; i++)
        pthread_join(tid[i], NULL);
    double secs = (double)(now_us() - start) / 1e6;
    getrusage(RUSAGE_SELF, &ru1);
    reflector_stop(r);
    double cpu_us = (double)(ru1.ru_utime.tv_sec - ru0.ru_utime.tv_sec + ru1.ru_stime.tv_sec -
                             ru0.ru_stime.tv_sec) *
                        1e6 +
                    (double)(ru1.ru_utime.tv_usec - ru0.ru_utime.tv_usec + ru1.ru_stime.tv_usec -
                             ru0.ru_stime.tv_usec);

    size_t n = nsamples < MAX_SAMPLES ? nsamples : MAX_SAMPLES;
    if (n == 0) {
        fprintf(stderr, "reflector-map: no request answered\n");
        return 1;
    }
    qsort(samples, n, sizeof(*samples), by_value);
    printf("maps_per_s %.0f p50_us %u p99_us %u cpu_us_per_map %.1f errors %llu\n",
           (double)done / secs, samples[n / 2], samples[n * 99 / 100], cpu_us / (double)done,
           (unsigned long long)errors);
    free(samples);
    return 0;
}
