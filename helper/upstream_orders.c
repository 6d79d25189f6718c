/* The orders a poll brings, checked before anything executes them. */
#include <stdio.h>
#include <string.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include "cmdqueue.h"
#include "proto.h"
#include "qcgconn.h"
#include "upstream.h"

/* An inject order's packet: lowercase hex of a SYN that fits our engine. */
static int packet_hex_ok(const char *p)
{
    size_t n = strlen(p);

    if (n < 2 * 40 || n > 2 * QCG_PACKET_MAX || n % 2 != 0)
        return 0;
    return strspn(p, "0123456789abcdef") == n;
}

/* probe-listen: a probe job's rank and secret on this node, for a while. */
static int probe_order_check(const struct command *c, const char *node, char *why, size_t whylen)
{
    if (strcmp(c->node, node) != 0)
        snprintf(why, whylen, "meant for node '%s', this is %s", c->node, node);
    else if (!job_valid(c->job) || c->rank < 0)
        snprintf(why, whylen, "malformed job id or rank");
    else if (strncmp(c->job, QCG_PROBE_JOB_PREFIX, QCG_PROBE_JOB_PREFIX_LEN) != 0)
        snprintf(why, whylen, "job '%s' is not a probe job (probe-...)", c->job);
    else if (!secret_valid(c->token) || strlen(c->token) >= LOCAL_SECRET_MAX)
        snprintf(why, whylen, "the job secret is missing or malformed");
    else if (c->seconds < 1)
        snprintf(why, whylen, "seconds %d: not a life", c->seconds);
    else
        return 0;
    return -1;
}

int upstream_order_check(const struct command *c, const char *node, char *why, size_t whylen)
{
    unsigned char addr[sizeof(struct in6_addr)];
    int back = strcmp(c->kind, "connect-back") == 0;
    int inject = strcmp(c->kind, "inject") == 0;
    size_t tlen = strlen(c->token);

    if (strcmp(c->kind, "probe-listen") == 0)
        return probe_order_check(c, node, why, whylen);
    if (!back && !inject && strcmp(c->kind, "proxy-connect") != 0 && strcmp(c->kind, "punch") != 0)
        snprintf(why, whylen, "unknown order \"%s\"", c->kind);
    else if (strcmp(c->node, node) != 0)
        snprintf(why, whylen, "meant for node '%s', this is %s", c->node, node);
    else if (!job_valid(c->job) || c->rank < 0 || c->peer_rank < 0)
        snprintf(why, whylen, "malformed job id or rank");
    else if (inet_pton(AF_INET, c->address, addr) != 1 &&
             inet_pton(AF_INET6, c->address, addr) != 1)
        snprintf(why, whylen, "address '%s' is not an IP address", c->address);
    else if (c->port < 1 || c->port > 65535)
        snprintf(why, whylen, "port %d outside 1-65535", c->port);
    /* The token goes into the process's hello (connect-back) or the proxy's
       preamble or the reflector's line: all have fixed fields. */
    else if (tlen == 0 || tlen >= (back ? (size_t)QCG_HELLO_TOKEN_MAX : (size_t)LOCAL_TOKEN_MAX))
        snprintf(why, whylen, "token missing or too long (%zu characters)", tlen);
    else if (inject && !packet_hex_ok(c->packet))
        snprintf(why, whylen, "packet is not the hex of 40 to %d bytes", QCG_PACKET_MAX);
    else
        return 0;
    return -1;
}
