/* The reflector's request line parser; see reflector.h for the grammar. */
#include "reflector.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#define FIELDS_MAX 4

/* A port: 1..65535, digits only, no leading zero.  -1 otherwise. */
static int parse_port(const char *s, size_t len)
{
    int v = 0;

    if (len == 0 || len > 5 || s[0] == '0')
        return -1;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    return v >= 1 && v <= 65535 ? v : -1;
}

int reflector_parse(const char *line, size_t len, struct reflector_request *req, char *why,
                    size_t whylen)
{
    const char *field[FIELDS_MAX];
    size_t flen[FIELDS_MAX];
    size_t n = 0, start = 0;

    memset(req, 0, sizeof(*req));
    if (len == 0) {
        snprintf(why, whylen, "empty line");
        return -1;
    }
    if (len > REFLECTOR_LINE_MAX) {
        snprintf(why, whylen, "line longer than %d bytes", REFLECTOR_LINE_MAX);
        return -1;
    }
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)line[i];
        if (ch < 0x20 || ch > 0x7e) {
            snprintf(why, whylen, "byte 0x%02x at column %zu", ch, i + 1);
            return -1;
        }
    }
    /* Exactly one space between fields: an empty field is an error. */
    for (size_t i = 0; i <= len; i++) {
        if (i < len && line[i] != ' ')
            continue;
        if (i == start) {
            snprintf(why, whylen, "empty field at column %zu", i + 1);
            return -1;
        }
        if (n == FIELDS_MAX) {
            snprintf(why, whylen, "more than %d fields", FIELDS_MAX);
            return -1;
        }
        field[n] = line + start;
        flen[n] = i - start;
        n++;
        start = i + 1;
    }

    if (flen[0] == 3 && memcmp(field[0], "MAP", 3) == 0) {
        if (n != 1) {
            snprintf(why, whylen, "MAP takes no argument");
            return -1;
        }
        req->verb = REFLECTOR_MAP;
        return 0;
    }
    if (flen[0] == 4 && memcmp(field[0], "DIAL", 4) == 0) {
        if (n != 2 || (req->port = parse_port(field[1], flen[1])) < 0) {
            snprintf(why, whylen, "usage: DIAL <port 1..65535>");
            return -1;
        }
        req->verb = REFLECTOR_DIAL;
        return 0;
    }
    if (flen[0] == 5 && memcmp(field[0], "PUNCH", 5) == 0) {
        unsigned char bin[sizeof(struct in6_addr)];

        if (n != 4) {
            snprintf(why, whylen, "usage: PUNCH <token> <local-addr> <local-port>");
            return -1;
        }
        if (flen[1] != TOKEN_TEXT_LEN) {
            snprintf(why, whylen, "malformed token (%zu characters, not %d)", flen[1],
                     TOKEN_TEXT_LEN);
            return -1;
        }
        memcpy(req->token, field[1], flen[1]);
        if (flen[2] >= sizeof(req->local_addr)) {
            snprintf(why, whylen, "local address too long");
            return -1;
        }
        memcpy(req->local_addr, field[2], flen[2]);
        if (inet_pton(AF_INET, req->local_addr, bin) != 1 &&
            inet_pton(AF_INET6, req->local_addr, bin) != 1) {
            snprintf(why, whylen, "local address is not an IP address");
            return -1;
        }
        if ((req->port = parse_port(field[3], flen[3])) < 0) {
            snprintf(why, whylen, "local port is not 1..65535");
            return -1;
        }
        req->verb = REFLECTOR_PUNCH;
        return 0;
    }
    snprintf(why, whylen, "unknown request (MAP, PUNCH or DIAL)");
    return -1;
}
