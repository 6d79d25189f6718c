/*
 * proxy-mapped: the relay's mapping observer.  A "QCGM" hello gets
 * "MAPPED 127.0.0.1 <the client's port>" and a close; a "QCGP" hello with a
 * bad token is still refused without an answer.  The relay on 127.0.0.1:18460.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "check.h"
#include "log.h"
#include "relay.h"

#define PORT 18460

static void *run(void *arg)
{
    relay_run(arg);
    return NULL;
}

/* Sends a hello with this magic; returns what came back before the close. */
static void hello(const char *magic, char *out, size_t outlen, int *local)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(PORT)};
    struct timeval tv = {3, 0};
    unsigned char buf[RELAY_HELLO_LEN];
    size_t got = 0;
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    out[0] = '\0';
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        close(fd);
        return;
    }
    socklen_t len = sizeof(sa);
    getsockname(fd, (struct sockaddr *)&sa, &len);
    *local = ntohs(sa.sin_port);
    memset(buf, 0, sizeof(buf));
    memcpy(buf, magic, 4);
    memset(buf + 4, 'a', 84); /* a token-shaped string the key did not sign */
    if (send(fd, buf, sizeof(buf), 0) == (ssize_t)sizeof(buf)) {
        for (int i = 0; i < 16 && got + 1 < outlen; i++) {
            ssize_t n = recv(fd, out + got, outlen - 1 - got, 0);
            if (n < 0 && errno == EINTR) /* a loop's io_uring teardown */
                continue;
            if (n <= 0)
                break;
            got += (size_t)n;
        }
    }
    out[got] = '\0';
    close(fd);
}

int main(void)
{
    struct proxy_key key;
    struct relay_config cfg = {.listen_addr = "127.0.0.1",
                               .port = PORT,
                               .key = &key,
                               .token_skew = 60,
                               .pair_timeout = 2,
                               .max_pairs = 16,
                               .pipe_size = 65536};
    char err[200], got[128], want[64];
    int local = 0;
    pthread_t t;

    log_init("proxy", LOG_LEVEL_ERROR, false);
    memset(&key, 7, sizeof(key));
    struct relay *r = relay_new(&cfg, err, sizeof(err));
    if (r == NULL) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    pthread_create(&t, NULL, run, r);

    hello(RELAY_MAP_MAGIC, got, sizeof(got), &local);
    snprintf(want, sizeof(want), "MAPPED 127.0.0.1 %d\n", local);
    CHECK_STR(got, want);
    hello(RELAY_MAGIC, got, sizeof(got), &local);
    CHECK_STR(got, "");
    hello("QCGX", got, sizeof(got), &local);
    CHECK_STR(got, "");

    relay_stop(r);
    pthread_join(t, NULL);
    relay_free(r);
    return check_result("proxy-mapped");
}
