/* The observers' one-line answers (the broker's reflector, a proxy): read
   from the network, so from whoever answers in their place. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "address.h"
#include "number.h"
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

/* A port the answerer wrote: digits only, 1-65535 (sscanf's %d would
   overflow on a long one). */
static int port_of(const char *text, int *port)
{
    long p;
    if (number_parse(text, 1, 65535, &p) < 0)
        return -1;
    *port = (int)p;
    return 0;
}

/* The address goes into the report, the JSON and the observation sent
   upstream: an IP address only, never text of the answerer's choosing. */
int probe_mapped_parse(const char *line, char *addr, size_t addrlen, int *port)
{
    char a[LOCAL_ADDR_MAX], p[8], extra;

    if (sscanf(line, "MAPPED %45s %7s %c", a, p, &extra) != 2 || !address_valid(a) ||
        strlen(a) >= addrlen || port_of(p, port) < 0)
        return -1;
    memcpy(addr, a, strlen(a) + 1);
    return 0;
}

int probe_dialed_parse(const char *line, char *addr, size_t addrlen, int *port, char *result,
                       size_t resultlen)
{
    char a[LOCAL_ADDR_MAX], p[8], r[16], extra;

    if (sscanf(line, "DIALED %45s %7s %15s %c", a, p, r, &extra) != 3 || !address_valid(a) ||
        strlen(a) >= addrlen || strlen(r) >= resultlen || port_of(p, port) < 0)
        return -1;
    memcpy(addr, a, strlen(a) + 1);
    memcpy(result, r, strlen(r) + 1);
    return 0;
}
