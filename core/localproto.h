/*
 * The local protocol between libqcgconn and qcg-helper over the helper's Unix
 * stream socket: the one definition of every message.
 *
 * Each message is a header followed by exactly header.length payload bytes,
 * whose size must equal local_payload_size[type] (checked before any copy).
 * Strings are fixed-size, NUL-terminated arrays; a payload whose string has no
 * NUL inside its array is rejected.  A connection starts with HELLO; the
 * helper answers every request but REPORT with exactly one reply carrying the
 * same request_id, not necessarily in the order of the requests (several
 * LOOKUPs of one connection run at once), so a client gives every request
 * an id of its own.  A holepunch or traversing PLAN is the start of
 * an attempt the helper takes part in: for holepunch it later sends an
 * INCOMING with the connected socket (role HELLO), for either an ERROR when
 * the attempt failed on its side, both with the LOOKUP's request_id.
 * Descriptors travel with SCM_RIGHTS attached to the header of an INCOMING
 * message.
 */
#ifndef QCG_LOCALPROTO_H
#define QCG_LOCALPROTO_H

#include <stddef.h>
#include <stdint.h>

#include "proto.h"

#define LOCAL_MAGIC 0x51434731u /* "QCG1" */
/* 2: LOOKUP carries tried_mask, INCOMING carries role.
   3: REPORT; a LOOKUP answered with a holepunch or traversing plan may be
      followed by an INCOMING (holepunch: the connected socket) or an ERROR
      (the attempt failed) carrying the same request_id.
   4: LOOKUP carries `only`; SITE, PROBE and OBSERVED for qcg-probe.
   5: a node's further addresses (HELLO_OK), which of them a listener takes
      (PUBLISH), a direct plan's IPv4 fallback (PLAN).
   6: LOCAL_ERETRY for the helper's refusals for the moment; QCG_EBUSY no
      longer means them.
   7: STATUS_OK carries every address of the node; SITE_OK the helper's
      punch-ttl and the hop count it last measured.
   8: hole punching over IPv6 apart (TECH_PUNCH6): its bit in LOOKUP's
      tried_mask, its value in REPORT's technique.
   9: PUNCHING for qcg-probe: the punching variant and hop count of each
      family.  Version 9 only adds that request: a helper takes a HELLO of
      LOCAL_VERSION_OLDEST too (a process started before the helper's
      upgrade) and answers it in the version it was asked in. */
#define LOCAL_VERSION 9
/* The oldest HELLO a helper of this version takes: its messages are this
   version's but for the requests added since. */
#define LOCAL_VERSION_OLDEST 8

#define LOCAL_JOB_MAX 64
#define LOCAL_SECRET_MAX 128
#define LOCAL_NAME_MAX 64
#define LOCAL_ADDR_MAX 48
#define LOCAL_TOKEN_MAX 128
#define LOCAL_MESSAGE_MAX 256
/* A job, a secret, a name or an address that passes the rules of proto.h
   fits into the wire's fields. */
_Static_assert(LOCAL_JOB_MAX >= QCG_JOB_MAX && LOCAL_SECRET_MAX >= QCG_SECRET_MAX &&
                   LOCAL_NAME_MAX >= QCG_NAME_MAX && LOCAL_ADDR_MAX >= QCG_ADDR_MAX &&
                   LOCAL_TOKEN_MAX >= QCG_TOKEN_MAX,
               "local protocol fields shorter than the limits");

enum local_type {
    LOCAL_HELLO = 1, /* lib -> helper: struct local_hello */
    LOCAL_HELLO_OK,  /* helper -> lib: struct local_hello_ok */
    LOCAL_PUBLISH,   /* lib -> helper: struct local_publish; reply LOCAL_OK */
    LOCAL_WITHDRAW,  /* lib -> helper: no payload; reply LOCAL_OK */
    LOCAL_LOOKUP,    /* lib -> helper: struct local_lookup; reply LOCAL_PLAN */
    LOCAL_PLAN,      /* helper -> lib: struct local_plan */
    LOCAL_OK,        /* helper -> lib: no payload */
    LOCAL_ERROR,     /* helper -> lib: struct local_error */
    LOCAL_INCOMING,  /* helper -> lib, unsolicited: struct local_incoming + one fd */
    LOCAL_STATUS,    /* tool -> helper: no payload, allowed before HELLO; reply LOCAL_STATUS_OK */
    LOCAL_STATUS_OK, /* helper -> tool: struct local_status */
    LOCAL_REPORT,    /* lib -> helper: struct local_report; no reply */
    /* qcg-probe.  SITE and PROBE after a HELLO (any job of the caller's: it is
       not published), at most probes-per-uid a minute (QCG_EBUSY beyond);
       OBSERVED also before one.  Errors: LOCAL_ERROR, QCG_EUPSTREAM when the
       frontend or the broker cannot be reached. */
    LOCAL_SITE,     /* tool -> helper: no payload; reply LOCAL_SITE_OK */
    LOCAL_SITE_OK,  /* helper -> tool: struct local_site */
    LOCAL_PROBE,    /* tool -> helper: struct local_probe; reply LOCAL_PROBE_OK */
    LOCAL_PROBE_OK, /* helper -> tool: struct local_probe_ok */
    LOCAL_OBSERVED, /* tool -> helper: struct local_observed; reply LOCAL_OK.  Only from
                       root or the helper's own user (QCG_EDENIED otherwise) */
    /* Version 9, after a HELLO and a SITE (whose answer names the
       reflector): the helper measures the hop count of a family it has
       none for, then answers.  An older helper closes the connection
       (an unknown type). */
    LOCAL_PUNCHING,    /* tool -> helper: no payload; reply LOCAL_PUNCHING_OK */
    LOCAL_PUNCHING_OK, /* helper -> tool: struct local_punching */
    LOCAL_TYPE_COUNT
};

struct local_header {
    uint32_t magic;
    uint16_t type;
    uint16_t reserved;   /* 0 */
    uint32_t length;     /* payload bytes that follow */
    uint32_t request_id; /* echoed in the reply; 0 for unsolicited messages */
};

struct local_hello {
    uint32_t version;
    int32_t rank;
    char job[LOCAL_JOB_MAX];
    char secret[LOCAL_SECRET_MAX];
};

struct local_hello_ok {
    uint32_t version;
    uint16_t port_low; /* the node's listening port range */
    uint16_t port_high;
    char cluster[LOCAL_NAME_MAX];
    char node[LOCAL_NAME_MAX];
    char address[LOCAL_ADDR_MAX]; /* the node's address inside its site */
    /* Its further addresses ("" when unused): another family's. */
    char other_address[QCG_NODE_ADDRS - 1][LOCAL_ADDR_MAX];
};

struct local_publish {
    uint16_t port;
    uint16_t addresses; /* bit i: the listener takes the node's address i (0 the
                           first, 1.. the others of HELLO_OK); 0 = the first only */
};

struct local_lookup {
    int32_t to_rank;
    uint32_t timeout_ms;
    uint32_t tried_mask; /* 1 << enum technique for each technique that
                            failed for this peer, 1 << TECH_PUNCH6 for the
                            IPv6 punch (holepunch's bit: the IPv4 one): the
                            broker plans the next */
    uint32_t only;       /* enum technique: plan exactly this one, whatever
                            the broker remembers (qcg-probe); 0 = normal */
};

struct local_plan {
    uint32_t technique; /* enum technique */
    uint16_t port;
    uint16_t reserved;
    char cluster[LOCAL_NAME_MAX];
    char node[LOCAL_NAME_MAX];
    char address[LOCAL_ADDR_MAX];
    char token[LOCAL_TOKEN_MAX];
    char fallback_address[LOCAL_ADDR_MAX]; /* direct over IPv6: the IPv4 address to try
                                              when IPv6 fails; "" none */
};

struct local_error {
    int32_t code; /* a negative QCG_E* code, or LOCAL_ERETRY */
    char message[LOCAL_MESSAGE_MAX];
};
/* The helper refuses the request for the moment: past the uid's share
   (publishes-, lookups-, probes-per-uid) or the rank being withdrawn.  The
   same request may succeed later; QCG_EBUSY is final (another live process
   holds the rank).  The library's callers never see it: QCG_EBUSY to them
   when the library gives up. */
#define LOCAL_ERETRY (-100)

/* Which side of the process-to-process handshake the receiving process takes
   on a handed-over connection. */
enum local_role {
    LOCAL_ROLE_ACCEPT = 0, /* wait for the peer's hello (proxy) */
    LOCAL_ROLE_HELLO = 1,  /* send a hello carrying `token` to peer_rank (reversed:
                              our helper was the TCP client) */
};

struct local_incoming {
    int32_t peer_rank;           /* the initiator */
    uint32_t technique;          /* enum technique */
    uint32_t role;               /* enum local_role */
    char token[LOCAL_TOKEN_MAX]; /* LOCAL_ROLE_HELLO: the plan's token */
};

/* How a connection attempt to to_rank ended (the broker remembers it per
   cluster pair and plans the next ones from it). */
struct local_report {
    int32_t to_rank;
    uint32_t technique; /* enum technique, or TECH_PUNCH6: a punch over IPv6 */
    uint32_t ok;        /* 1 connected, 0 failed */
    uint32_t setup_ms;
    char why[LOCAL_MESSAGE_MAX]; /* failed: the reason, one line */
};

struct local_status {
    uint32_t upstream_connected; /* 1 while registered with the frontend */
    uint32_t clients;            /* local connections open now */
    uint32_t contacts;           /* contacts published through this helper */
    uint32_t refused;            /* connections and requests refused, requests dropped */
    uint64_t upstream_epoch;     /* the frontend's epoch */
    uint64_t lookups;            /* lookups relayed since start */
    char cluster[LOCAL_NAME_MAX];
    char node[LOCAL_NAME_MAX];
    char frontend[LOCAL_MESSAGE_MAX];             /* the frontend's URL */
    char address[QCG_NODE_ADDRS][LOCAL_ADDR_MAX]; /* the node's addresses, "" when unused */
};

#define LOCAL_KIND_MAX 16
#define LOCAL_ENDPOINT_MAX 56 /* "address:port" */
#define LOCAL_PUBLIC_MAX 4    /* declared public addresses carried */
#define LOCAL_PROXIES_MAX 8
#define LOCAL_CLUSTERS_MAX 32

/* A cluster as its frontend declared it. */
struct local_cluster {
    char name[LOCAL_NAME_MAX];
    char kind[LOCAL_KIND_MAX];                             /* open | firewalled | nat | symnat */
    char public_address[LOCAL_PUBLIC_MAX][LOCAL_ADDR_MAX]; /* "" when unused */
    uint16_t open_low, open_high;                          /* open inbound range, 0-0 = none */
};

/* The node, its site and the grid's services, for qcg-probe. */
struct local_site {
    char node[LOCAL_NAME_MAX];
    char address[LOCAL_ADDR_MAX];            /* the node's address inside its site */
    uint16_t port_low, port_high;            /* the node's port range */
    uint32_t upstream_ms;                    /* how long the helper's siteInfo call took */
    struct local_cluster cluster;            /* this node's cluster, as declared */
    char frontend[LOCAL_MESSAGE_MAX];        /* the frontend's URL */
    char broker[LOCAL_MESSAGE_MAX];          /* the broker's URL as the frontend reaches it */
    char frontend_seen_from[LOCAL_ADDR_MAX]; /* the frontend's address as the broker sees it */
    char reflector[LOCAL_ENDPOINT_MAX];      /* "" when hole punching is off */
    char reflector6[LOCAL_ENDPOINT_MAX];     /* its IPv6 address, "" when it has none */
    uint32_t proxies;
    char proxy[LOCAL_PROXIES_MAX][LOCAL_ENDPOINT_MAX];
    uint32_t can_intercept;            /* 1: the helper can intercept and inject */
    uint32_t nfqueue;                  /* its NFQUEUE number (0 when it cannot) */
    char intercept[LOCAL_MESSAGE_MAX]; /* why it can or cannot, one line */
    uint32_t clusters;                 /* entries in peer[] (at most LOCAL_CLUSTERS_MAX) */
    uint32_t clusters_total;           /* how many the broker knows */
    struct local_cluster peer[LOCAL_CLUSTERS_MAX]; /* every cluster, this one included */
    int32_t punch_ttl;   /* the helper's punch-ttl: 0 auto, -1 plain, else the first SYN's TTL */
    uint32_t punch_hops; /* auto: the hops to the reflector it last measured, 0 none yet */
    uint32_t punch_first_ttl; /* auto: the first SYN's TTL for those hops, 0 the normal one */
};

/* One family's hole punching, for qcg-probe. */
struct local_punch_family {
    char reflector[LOCAL_ENDPOINT_MAX]; /* the reflector in this family, "" none */
    char address[LOCAL_ADDR_MAX];       /* the node's address punches leave from, "" none */
    int32_t hops;                       /* routers to the reflector, -1 unknown */
    uint32_t first_ttl;          /* the first SYN's TTL (hop limit) for them, 0 the normal one */
    uint32_t rtt_ms;             /* to the reflector, with hops */
    uint32_t measured;           /* 1: measured for this request, 0: kept from an earlier one */
    char why[LOCAL_MESSAGE_MAX]; /* hops -1: why; else "" or why first_ttl is 0 */
};

#define LOCAL_PUNCH_IPV4 0
#define LOCAL_PUNCH_IPV6 1

struct local_punching {
    int32_t punch_ttl; /* as SITE_OK's: 0 auto, -1 plain, else the first SYN's TTL */
    uint32_t reserved;
    struct local_punch_family family[2]; /* LOCAL_PUNCH_IPV4, LOCAL_PUNCH_IPV6 */
};

/* The longest life of a probe's test endpoint: QCG_PROBE_TTL_MAX of
   proto.h, which the schema's callers check. */
#define LOCAL_PROBE_SECONDS_MAX 120
_Static_assert(LOCAL_PROBE_SECONDS_MAX == QCG_PROBE_TTL_MAX,
               "the local protocol and the schema agree on a probe's longest life");

struct local_probe {
    char cluster[LOCAL_NAME_MAX]; /* where the test endpoint should run */
    uint32_t seconds;             /* its life, 1..QCG_PROBE_TTL_MAX */
};

struct local_probe_ok {
    char job[LOCAL_JOB_MAX]; /* the probe's job: the prober is rank 0 */
    char secret[LOCAL_SECRET_MAX];
    int32_t rank; /* the endpoint's rank */
    uint32_t seconds;
    char cluster[LOCAL_NAME_MAX]; /* where the endpoint runs */
    char node[LOCAL_NAME_MAX];
    char address[LOCAL_ADDR_MAX];
};

struct local_observed {
    char kind[LOCAL_KIND_MAX]; /* open | firewalled | nat | symnat */
    char public_address[LOCAL_ADDR_MAX];
    int32_t port_preserving; /* 1, 0, -1 unknown */
    char mapping[24];        /* none | endpoint-independent | endpoint-dependent | unknown */
    char inbound[16];        /* open | dropped | reset | icmp | unknown (proto.h) */
};

/* Room for the payload of any message. */
union local_payload {
    struct local_hello hello;
    struct local_hello_ok hello_ok;
    struct local_publish publish;
    struct local_lookup lookup;
    struct local_plan plan;
    struct local_error error;
    struct local_incoming incoming;
    struct local_status status;
    struct local_report report;
    struct local_site site;
    struct local_probe probe;
    struct local_probe_ok probe_ok;
    struct local_observed observed;
    struct local_punching punching;
};

/* Payload size of each type; 0 for types with no payload. */
extern const size_t local_payload_size[LOCAL_TYPE_COUNT];

/* Checks a received header: magic, known type, exact payload length.  Returns
   0, or a negative QCG_E* code. */
int local_header_check(const struct local_header *h);
/* Checks that every string field of a payload of `type` is NUL-terminated
   inside its array (and, for HELLO, that the version is one a helper of
   this version takes: LOCAL_VERSION_OLDEST..LOCAL_VERSION), and the
   ranges and words of the fields that have them (LOOKUP's only, PROBE's
   cluster and seconds, OBSERVED's words, SITE_OK's counts, PUNCHING_OK's
   numbers).  0 or QCG_EPROTO. */
int local_payload_check(uint16_t type, const void *payload);

#endif
