/* The observers' one-line answers (the broker's reflector, a proxy): read
   from the network, so from whoever answers in their place. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "address.h"
#include "probe.h"

int probe_exchange_line(int fd, const void *req, size_t len, char *line, size_t llen,
                        int timeout_ms, char *why, size_t whylen)
{
    double deadline = probe_now_ms() + timeout_ms;
    size_t got = 0;

    if (send(fd, req, len, MSG_NOSIGNAL) != (ssize_t)len) {
        snprintf(why, whylen, "send: %s", strerror(errno));
        return -1;
    }
    while (got + 1 < llen) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int left = probe_left_ms(deadline);
        if (left == 0 || poll(&p, 1, left) <= 0) {
            snprintf(why, whylen, "no answer in %d ms", timeout_ms);
            return -1;
        }
        ssize_t n = recv(fd, line + got, llen - 1 - got, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            snprintf(why, whylen, "closed without an answer%s%s", n < 0 ? ": " : "",
                     n < 0 ? strerror(errno) : "");
            return -1;
        }
        got += (size_t)n;
        line[got] = '\0';
        char *nl = strchr(line, '\n');
        if (nl != NULL) {
            *nl = '\0';
            return 0;
        }
    }
    snprintf(why, whylen, "answer too long");
    return -1;
}

/* The address goes into the report, the JSON and the observation sent
   upstream: an IP address only, never text of the answerer's choosing. */
int probe_mapped_parse(const char *line, char *addr, size_t addrlen, int *port)
{
    char a[LOCAL_ADDR_MAX], extra;
    int p;

    if (sscanf(line, "MAPPED %45s %d %c", a, &p, &extra) != 2 || p < 1 || p > 65535 ||
        !address_valid(a) || strlen(a) >= addrlen)
        return -1;
    memcpy(addr, a, strlen(a) + 1);
    *port = p;
    return 0;
}

int probe_dialed_parse(const char *line, char *addr, size_t addrlen, int *port, char *result,
                       size_t resultlen)
{
    char a[LOCAL_ADDR_MAX], r[16], extra;
    int p;

    if (sscanf(line, "DIALED %45s %d %15s %c", a, &p, r, &extra) != 3 || p < 1 || p > 65535 ||
        !address_valid(a) || strlen(a) >= addrlen || strlen(r) >= resultlen)
        return -1;
    memcpy(addr, a, strlen(a) + 1);
    memcpy(result, r, strlen(r) + 1);
    *port = p;
    return 0;
}
