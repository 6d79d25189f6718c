/* Field checks; see validate.h. */
#include "validate.h"

#include <stdio.h>
#include <string.h>

#include "address.h"
#include "soapH.h"
#include "verifier.h"

_Static_assert(QCG_VERIFIER_LEN == 64, "the message below says 64");

static int bad(char *why, size_t whylen, const char *fmt, const char *field)
{
    snprintf(why, whylen, fmt, field);
    return -1;
}

static int check_name(const char *name, const char *field, char *why, size_t whylen)
{
    if (name == NULL || name[0] == '\0')
        return bad(why, whylen, "%s is missing", field);
    if (!name_valid(name))
        return bad(why, whylen, "%s is not a valid name (1-63 of [A-Za-z0-9._-])", field);
    return 0;
}

static int check_address(const char *addr, const char *field, char *why, size_t whylen)
{
    if (addr == NULL || addr[0] == '\0')
        return bad(why, whylen, "%s is missing", field);
    if (!address_valid(addr))
        return bad(why, whylen, "%s is not an IPv4 or IPv6 address", field);
    return 0;
}

static int check_port(int port, const char *field, char *why, size_t whylen)
{
    if (port < 1 || port > 65535)
        return bad(why, whylen, "%s is outside 1..65535", field);
    return 0;
}

int validate_job(const char *job, const char *verifier, char *why, size_t whylen)
{
    if (job == NULL || !job_valid(job))
        return bad(why, whylen, "%s is missing or not a valid job id", "job");
    if (verifier == NULL || !verifier_valid(verifier))
        return bad(why, whylen, "%s is missing or not 64 lowercase hex characters", "verifier");
    return 0;
}

int validate_rank(int rank, const char *field, char *why, size_t whylen)
{
    if (rank < 0)
        return bad(why, whylen, "%s is negative", field);
    return 0;
}

/* A list of CIDR ranges a site may declare (addr_range_declarable: a
   loopback range comes only implicitly, to a frontend on the broker's
   host) into out[]; their count, or -1 with why naming field. */
static int parse_ranges(int n, char *const *in, const char *field, struct addr_range *out,
                        char *why, size_t whylen)
{
    char err[160];
    if (n < 0 || n > REG_MAX_RANGES)
        return bad(why, whylen, "%s: at most 16 are accepted", field);
    if (n > 0 && in == NULL)
        return bad(why, whylen, "%s is missing", field);
    for (int i = 0; i < n; i++) {
        if (addr_range_parse(in[i], &out[i], err, sizeof(err)) < 0 ||
            addr_range_declarable(&out[i], err, sizeof(err)) < 0) {
            snprintf(why, whylen, "%s: %s", field, err);
            return -1;
        }
    }
    return n;
}

/* The node ranges, and the open ranges inside them (so that they name the
   site's own nodes and nothing else). */
static int validate_ranges(const struct qcg__cluster *in, struct reg_cluster *out, char *why,
                           size_t whylen)
{
    out->nranges = parse_ranges(in->__sizeNodeRange, in->nodeRange, "cluster.nodeRange",
                                out->ranges, why, whylen);
    if (out->nranges < 0)
        return -1;
    out->nopen = parse_ranges(in->__sizeOpenRange, in->openRange, "cluster.openRange", out->open,
                              why, whylen);
    if (out->nopen < 0)
        return -1;
    for (int i = 0; i < out->nopen; i++) {
        if (!addr_range_within_any(&out->open[i], out->ranges, out->nranges)) {
            char t[QCG_ADDR_MAX + 4];
            addr_range_format(&out->open[i], t, sizeof(t));
            snprintf(why, whylen, "cluster.openRange: %s lies in none of the cluster's node ranges",
                     t);
            return -1;
        }
    }
    return 0;
}

int validate_cluster(const struct qcg__cluster *in, struct reg_cluster *out, char *why,
                     size_t whylen)
{
    memset(out, 0, sizeof(*out));
    if (in == NULL)
        return bad(why, whylen, "%s is missing", "cluster");
    if (check_name(in->name, "cluster.name", why, whylen))
        return -1;
    int kind = in->kind != NULL ? cluster_kind_parse(in->kind) : -1;
    if (kind < 0)
        return bad(why, whylen, "%s is not one of open, firewalled, nat, symnat", "cluster.kind");
    if (in->__sizePublicAddress < 0 || in->__sizePublicAddress > REG_MAX_PUBLIC)
        return bad(why, whylen, "%s: at most 8 are accepted", "cluster.publicAddress");
    if (in->__sizePublicAddress > 0 && in->publicAddress == NULL)
        return bad(why, whylen, "%s is missing", "cluster.publicAddress");
    for (int i = 0; i < in->__sizePublicAddress; i++) {
        if (check_address(in->publicAddress[i], "cluster.publicAddress", why, whylen))
            return -1;
        snprintf(out->public_addr[i], sizeof(out->public_addr[i]), "%s", in->publicAddress[i]);
    }
    bool none = in->portLow == 0 && in->portHigh == 0;
    if (!none && (check_port(in->portLow, "cluster.portLow", why, whylen) ||
                  check_port(in->portHigh, "cluster.portHigh", why, whylen)))
        return -1;
    if (in->portLow > in->portHigh)
        return bad(why, whylen, "%s: portLow is above portHigh", "cluster");
    if (validate_ranges(in, out, why, whylen) < 0)
        return -1;
    snprintf(out->name, sizeof(out->name), "%s", in->name);
    out->kind = (enum cluster_kind)kind;
    out->npublic = in->__sizePublicAddress;
    out->port_low = in->portLow;
    out->port_high = in->portHigh;
    return 0;
}

/* A node's or contact's further addresses (after `first`) into other[],
   each checked and canonical; their count, or -1 with why naming FIELD. */
static int others_take(const char *field, int n, char *const *list, const char *first,
                       char other[][QCG_ADDR_MAX], char *why, size_t whylen)
{
    int got = address_others_take(n, list, first, other, QCG_NODE_ADDRS - 1, why, whylen);
    if (got < 0) {
        char msg[160];
        snprintf(msg, sizeof(msg), "%s: %s", field, why);
        snprintf(why, whylen, "%s", msg);
    }
    return got;
}

int validate_node(const struct qcg__node *in, struct reg_node *out, char *why, size_t whylen)
{
    memset(out, 0, sizeof(*out));
    if (in == NULL)
        return bad(why, whylen, "%s is missing", "node");
    if (check_name(in->name, "node.name", why, whylen) ||
        check_address(in->address, "node.address", why, whylen) ||
        check_port(in->portLow, "node.portLow", why, whylen) ||
        check_port(in->portHigh, "node.portHigh", why, whylen))
        return -1;
    if (in->portLow > in->portHigh)
        return bad(why, whylen, "%s: portLow is above portHigh", "node");
    if (in->canIntercept != 0 && in->canIntercept != 1)
        return bad(why, whylen, "%s must be 0 or 1", "node.canIntercept");
    if (in->incarnation != NULL) {
        size_t len = strnlen(in->incarnation, REG_INCARNATION_MAX);
        if (len >= REG_INCARNATION_MAX || strspn(in->incarnation, "0123456789abcdef") != len)
            return bad(why, whylen, "%s: at most 32 lowercase hex characters", "node.incarnation");
        snprintf(out->incarnation, sizeof(out->incarnation), "%s", in->incarnation);
    }
    snprintf(out->name, sizeof(out->name), "%s", in->name);
    address_canonical(in->address, out->address, sizeof(out->address));
    out->nother = others_take("node.otherAddress", in->__sizeOtherAddress, in->otherAddress,
                              out->address, out->other, why, whylen);
    if (out->nother < 0)
        return -1;
    out->port_low = in->portLow;
    out->port_high = in->portHigh;
    out->can_intercept = in->canIntercept == 1;
    return 0;
}

int validate_contact(const struct qcg__contact *in, struct reg_contact *out, char *why,
                     size_t whylen)
{
    memset(out, 0, sizeof(*out));
    if (in == NULL)
        return bad(why, whylen, "%s is missing", "contact");
    if (validate_job(in->job, in->verifier, why, whylen) ||
        validate_rank(in->rank, "contact.rank", why, whylen) ||
        check_name(in->node, "contact.node", why, whylen) ||
        check_address(in->address, "contact.address", why, whylen) ||
        check_port(in->port, "contact.port", why, whylen))
        return -1;
    if (in->cluster != NULL && in->cluster[0] != '\0') {
        if (check_name(in->cluster, "contact.cluster", why, whylen))
            return -1;
        snprintf(out->cluster, sizeof(out->cluster), "%s", in->cluster);
    }
    snprintf(out->job, sizeof(out->job), "%s", in->job);
    out->rank = in->rank;
    snprintf(out->node, sizeof(out->node), "%s", in->node);
    address_canonical(in->address, out->address, sizeof(out->address));
    out->port = in->port;
    out->nother = others_take("contact.otherAddress", in->__sizeOtherAddress, in->otherAddress,
                              out->address, out->other, why, whylen);
    return out->nother < 0 ? -1 : 0;
}

/* The index of text in a NULL-terminated list of words, or -1. */
static int word_index(const char *text, const char *const *words)
{
    for (int i = 0; text != NULL && words[i] != NULL; i++) {
        if (strcmp(text, words[i]) == 0)
            return i;
    }
    return -1;
}

int validate_observation(const struct qcg__observation *in, struct reg_observation *out, char *why,
                         size_t whylen)
{
    static const char *const mappings[] = {"none", "endpoint-independent", "endpoint-dependent",
                                           "unknown", NULL};
    memset(out, 0, sizeof(*out));
    if (in == NULL)
        return bad(why, whylen, "%s is missing", "observation");
    if (check_name(in->cluster, "observation.cluster", why, whylen) ||
        check_name(in->node, "observation.node", why, whylen))
        return -1;
    int kind = in->kind != NULL ? cluster_kind_parse(in->kind) : -1;
    if (kind < 0)
        return bad(why, whylen, "%s: not open, firewalled, nat or symnat", "observation.kind");
    if (word_index(in->mapping, mappings) < 0)
        return bad(why, whylen, "%s: not none, endpoint-independent, endpoint-dependent or unknown",
                   "observation.mapping");
    if (!observed_inbound_valid(in->inbound))
        return bad(why, whylen, "%s: not open, dropped, reset, icmp, rejected or unknown",
                   "observation.inbound");
    if (in->portPreserving < -1 || in->portPreserving > 1)
        return bad(why, whylen, "%s must be -1, 0 or 1", "observation.portPreserving");
    if (in->publicAddress != NULL && in->publicAddress[0] != '\0' &&
        check_address(in->publicAddress, "observation.publicAddress", why, whylen))
        return -1;
    snprintf(out->node, sizeof(out->node), "%s", in->node);
    out->kind = (enum cluster_kind)kind;
    snprintf(out->public_addr, sizeof(out->public_addr), "%s",
             in->publicAddress != NULL ? in->publicAddress : "");
    out->port_preserving = in->portPreserving;
    snprintf(out->mapping, sizeof(out->mapping), "%s", in->mapping);
    snprintf(out->inbound, sizeof(out->inbound), "%s", in->inbound);
    return 0;
}
