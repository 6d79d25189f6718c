/*
 * qcg-probe: what the grid can do from this node, and why not.
 *
 *   probe.c          options, the order of the checks, the exit status
 *   helper_ask.c     one request to the local helper (SITE, PROBE, OBSERVED)
 *   net.c            bounded TCP connects (refused vs no answer), listeners
 *   lines.c          the observers' one-line answers (MAPPED, DIALED)
 *   site.c           this node's site: mappings seen by two observers,
 *                    unsolicited inbound TCP, round trips, declared vs observed
 *   hairpin.c        does the NAT turn a connection to its own public mapping
 *                    back in?
 *   portmap.c        NAT-PMP, PCP and UPnP IGD on the default gateway
 *   peers.c          towards other sites: each technique against a test
 *                    endpoint the helpers start there, and the broker's choice;
 *                    encrypted as --encrypt says (inter-site by default)
 *   capture.c        --capture: the probe's own packets into a pcap file
 *   family.c         the same findings per address family (IPv4, IPv6)
 *   punching.c       each family's hole punching variant and hop count
 *   report.c         the human matrix and --json
 *
 * Everything is bounded by one deadline (--timeout); each network step has
 * its own shorter bound on top.
 */
#ifndef QCG_PROBE_H
#define QCG_PROBE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "localproto.h"
#include "qcgconn.h"

#define PROBE_TECHNIQUES (QCG_TECH_PROXY + 1)
#define PROBE_WHY_MAX 400
#define PROBE_RTT_MAX (4 + LOCAL_PROXIES_MAX) /* frontend, broker, reflector in each family */
#define PROBE_MISMATCH_MAX 4
#define PROBE_PORTMAP_PROTOCOLS 3 /* nat-pmp, pcp, upnp */

struct probe_opts {
    const char *helper_socket;
    const char *site;    /* NULL: every other site */
    const char *capture; /* pcap file, or NULL */
    int timeout_s;       /* the whole run */
    int encrypt;         /* enum qcg_encrypt of the test connections */
    bool json;
    bool progress; /* progress lines on stderr (a terminal) */
    bool report;   /* tell the broker what was observed */
};

/* Monotonic milliseconds, and what is left before a deadline (never < 0). */
double probe_now_ms(void);
int probe_left_ms(double deadline_ms);
/* "  checking mapping ..." on stderr when progress is on. */
void probe_progress(const struct probe_opts *o, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void probe_progress_done(const struct probe_opts *o);

/* --- net.c ---------------------------------------------------------------- */

struct sockaddr_in;
enum probe_outcome {
    PROBE_CONNECTED,
    PROBE_RESET, /* a TCP reset */
    PROBE_ICMP,  /* an ICMP error came back (port unreachable too) */
    PROBE_NO_ANSWER,
    PROBE_LOCAL_ERROR, /* nothing was sent: no route, no socket, bind failed */
};

/* addr (an IPv4 literal) and port.  0, or -1 when addr is not one. */
int probe_sockaddr(const char *addr, int port, struct sockaddr_in *sin);
/* A TCP connection to addr:port from local_addr:local_port (local_port 0:
   any; local_addr "0.0.0.0": the routing table's choice), within timeout_ms.  The connected
   non-blocking socket with *ms (may be NULL) the handshake time, or -1 with why set; *outcome (may
   be NULL) tells a refusal (RST, ICMP) from no answer. */
int probe_connect(const char *local_addr, int local_port, const char *addr, int port,
                  int timeout_ms, double *ms, enum probe_outcome *outcome, char *why,
                  size_t whylen);
/* A non-blocking listener on addr:port (0: any port; SO_REUSEADDR, so it may
   share the port with TIME_WAITs).  The socket with *bound_port (may be NULL)
   set, or -1 with why set. */
int probe_listen(const char *addr, int port, int *bound_port, char *why, size_t whylen);

/* --- helper_ask.c --------------------------------------------------------- */

/* Sends one request of `type` to the helper at socket_path and reads its
   reply into *reply (a LOCAL_ERROR's code and message go to *code / why).
   Returns the reply's type, or -1 with why set (helper unreachable, malformed
   reply). */
int helper_ask(const char *socket_path, uint16_t type, const void *payload, void *reply,
               size_t reply_size, int timeout_ms, int *code, char *why, size_t whylen);
/* The local protocol version the helper takes: LOCAL_VERSION, or an older
   one it named refusing this probe's HELLO (helper_ask.c says it again). */
uint32_t helper_version(void);
/* The helper's HELLO_OK to the probe's job: every address of this node.
   0, or -1 with why set. */
int helper_hello(const char *socket_path, struct local_hello_ok *ok, int timeout_ms, char *why,
                 size_t whylen);

/* --- site.c --------------------------------------------------------------- */

struct probe_rtt {
    char name[16]; /* frontend, broker, reflector, proxy */
    char endpoint[LOCAL_ENDPOINT_MAX];
    bool ok;
    double ms; /* median TCP handshake of PROBE_RTT_SAMPLES */
    char why[160];
};

/* What one observer saw of a connection from local_port. */
struct probe_mapping {
    char observer[16]; /* "reflector" or "proxy" */
    char endpoint[LOCAL_ENDPOINT_MAX];
    int local_port;
    bool ok;
    char addr[LOCAL_ADDR_MAX];
    int port;
    char why[160];
};

/* Whether the default gateway answers a port-mapping protocol. */
enum portmap_protocol { PORTMAP_NATPMP, PORTMAP_PCP, PORTMAP_UPNP };
struct probe_portmap {
    char name[8];     /* nat-pmp | pcp | upnp */
    int offered;      /* 1 yes, 0 no (refused, closed, or silent), -1 not asked */
    bool answered;    /* a server answered (offered, or refused with a result) */
    char detail[240]; /* what it answered, or why it is taken as absent */
};

/* Whether unsolicited inbound TCP gets in, over one family: the
   reflector dials back to a port the probe listens on. */
struct probe_inbound {
    int port;              /* where the reflector dialled */
    const char *state;     /* open | filtered | unknown */
    const char *filtering; /* dropped | reset | icmp | rejected (an older reflector) | NULL */
    char why[200];
    int syns_seen; /* by the capture; -1 without one */
};

struct probe_site {
    const char *helper_socket;
    struct local_site info; /* from the helper */
    /* Every address of this node (the helper's `address`), info.address
       first; the helper's HELLO_OK. */
    char addresses[QCG_NODE_ADDRS][LOCAL_ADDR_MAX];
    int naddresses;
    bool helper_ok;   /* the helper answered SITE */
    bool upstream_ok; /* the frontend (and through it the broker) answered */
    char upstream_why[LOCAL_MESSAGE_MAX];

    struct probe_mapping map[3]; /* reflector, proxy (same local port), reflector again
                                    from another port */
    int nmap;
    char public_address[LOCAL_ADDR_MAX];
    const char *mapping; /* none | endpoint-independent | endpoint-dependent | unknown */
    int port_preserving; /* 1, 0, -1 unknown */
    char mapping_why[200];

    /* The reflector's dial-back: over IPv4 (the site's kind is read from
       it), and over IPv6 from the node's IPv6 address when the reflector
       has one. */
    struct probe_inbound in4, in6;

    int hairpin; /* 1 yes, 0 no, -1 no NAT, or not measured */
    char hairpin_why[200];
    char gateway[LOCAL_ADDR_MAX]; /* the node's default gateway, "" when none */
    struct probe_portmap portmap[PROBE_PORTMAP_PROTOCOLS];

    const char *observed_kind; /* open | firewalled | nat | symnat | NULL (unknown) */
    char mismatch[PROBE_MISMATCH_MAX][240];
    int nmismatch;
    bool reported; /* the broker was told */
    char report_why[160];

    struct probe_rtt rtt[PROBE_RTT_MAX];
    int nrtt;

    /* Each family's punching variant: the helper's PUNCHING, or (an older
       helper, or it failed: punching_answered false) SITE_OK's IPv4 hop
       count and the reason in the families' why. */
    struct local_punching punching;
    bool punching_answered;
};

struct capture;
/* This node's addresses of family af (AF_INET, AF_INET6) into out; their
   count. */
int site_addresses_of(const struct probe_site *s, int af, const char *out[QCG_NODE_ADDRS]);
/* Asks the helper about this node and site.  0, or -1 when the helper or the
   grid services cannot be reached (helper_ok, upstream_why and the frontend's
   round trip say which). */
int site_probe(const struct probe_opts *o, struct probe_site *s, double deadline_ms);
/* Mappings, inbound, declared vs observed, round trips; reports the
   observation to the broker when o->report.  cap may be NULL. */
void site_measure(const struct probe_opts *o, struct probe_site *s, struct capture *cap,
                  double deadline_ms);

/* --- lines.c -------------------------------------------------------------- */

/* Sends req (len bytes), reads one '\n'-terminated line into line (without
   it) within timeout_ms.  0, or -1 with why. */
int probe_exchange_line(int fd, const void *req, size_t len, char *line, size_t llen,
                        int timeout_ms, char *why, size_t whylen);
/* An observer's "MAPPED <address> <port>": 0 with an IP address (addrlen >=
   LOCAL_ADDR_MAX) and a port 1..65535, or -1. */
int probe_mapped_parse(const char *line, char *addr, size_t addrlen, int *port);
/* The reflector's "DIALED <address> <port> <result>": 0 with an IP address,
   a port 1..65535 and the result word (open, refused, timeout, ...), or -1. */
int probe_dialed_parse(const char *line, char *addr, size_t addrlen, int *port, char *result,
                       size_t resultlen);

/* --- hairpin.c ----------------------------------------------------------- */

/* A connection from this node to its own public mapping (the reflector's
   first observation): does the NAT turn it back in? */
void hairpin_probe(const struct probe_opts *o, struct probe_site *s, double deadline_ms);

/* --- portmap.c ------------------------------------------------------------ */

/* NAT-PMP and PCP asked of the default gateway (resent at 250 and 750 ms),
   UPnP IGD by SSDP M-SEARCH to it and to the group: about 1.3 s. */
void portmap_probe(const struct probe_opts *o, struct probe_site *s, double deadline_ms);
/* What one datagram received for `proto` says: 1 the protocol is offered,
   0 a server answered without offering it (an error result, the other
   protocol's version), -1 not an answer of that protocol (ignored).  detail
   gets a printable line. */
int portmap_parse(enum portmap_protocol proto, const unsigned char *b, size_t n, char *detail,
                  size_t dlen);

/* --- peers.c -------------------------------------------------------------- */

struct probe_technique {
    int family;                   /* AF_INET or AF_INET6 of the connection made, 0: none */
    char address[LOCAL_ADDR_MAX]; /* the far end of that connection */
    bool tried;                   /* attempted, or the broker said why not */
    bool impossible;              /* the broker said it cannot work for this pair */
    bool works;
    double setup_ms;
    double echo_ms;         /* a round trip through the connection */
    const char *encryption; /* the connection's path (qcg_encryption_name), NULL: none made */
    char why[PROBE_WHY_MAX];
};

struct probe_peer {
    char site[LOCAL_NAME_MAX];
    char kind[LOCAL_KIND_MAX]; /* as declared */
    char node[LOCAL_NAME_MAX]; /* where the test endpoint ran */
    char address[LOCAL_ADDR_MAX];
    bool endpoint_ok;
    char why[PROBE_WHY_MAX]; /* when !endpoint_ok */
    struct probe_technique tech[PROBE_TECHNIQUES];
    enum qcg_technique chosen; /* what a plain connect used; NONE when it failed */
    int chosen_family;         /* its AF_INET or AF_INET6 */
    char chosen_address[LOCAL_ADDR_MAX];
    double chosen_ms;
    const char *chosen_encryption; /* as encryption above */
    char chosen_why[PROBE_WHY_MAX];
};

/* The peers to probe: every declared cluster but our own, or the one named.
   Returns how many (0 with why set when the named one is unknown). */
int peers_select(const struct probe_opts *o, const struct probe_site *s, struct probe_peer *out,
                 int max, char *why, size_t whylen);
/* cap (may be NULL): once the endpoint's node is known, its address joins
   `filter` (a buffer of flen bytes) and the capture's filter. */
void peer_probe(const struct probe_opts *o, const struct probe_site *s, struct probe_peer *p,
                struct capture *cap, char *filter, size_t flen, double deadline_ms);

/* --- capture.c ------------------------------------------------------------ */

/* Opens a capture on every interface, of TCP and ICMP to and from `hosts`
   ("host A or host B"), written to path.  NULL with why set. */
struct capture *capture_start(const char *path, const char *filter, char *why, size_t whylen);
/* Replaces the filter (e.g. once a peer's address is known).  0 or -1. */
int capture_refilter(struct capture *c, const char *filter, char *why, size_t whylen);
/* TCP SYNs without ACK seen towards local port `port` so far. */
int capture_syns_to(struct capture *c, int port);
/* Stops, flushes and closes the file; returns the packets written. */
long capture_stop(struct capture *c);
/* Appends to a hosts filter (" or host A "). */
void capture_filter_add(char *filter, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* --- family.c ------------------------------------------------------------- */

/* "IPv4" or "IPv6"; "ipv4" or "ipv6" as JSON keys (lower). */
const char *family_name(int af, bool lower);
/* The family of "addr:port", "[v6]:port" or a URL's host: AF_INET,
   AF_INET6 or 0. */
int family_of_endpoint(const char *endpoint);
/* The family and the address of a connected socket's far end: 0, or -1. */
int family_of_socket(int fd, int *af, char *addr, size_t addrlen);

struct probe_run;
/* "per family": for IPv4 and IPv6 each, this node's addresses, the grid's
   services it reached, unsolicited inbound, what connected to each site. */
void family_human(FILE *out, const struct probe_run *r);
/* ,"families":{"ipv4":{...},"ipv6":{...}} */
void family_json(FILE *out, const struct probe_run *r);

/* --- punching.c ----------------------------------------------------------- */

/* Asks the helper for each family's punching (it may measure first, a few
   seconds at most), into s->punching. */
void punching_ask(const struct probe_opts *o, struct probe_site *s, double deadline_ms);
/* The "hole punching" lines, a family each. */
void punching_human(FILE *out, const struct probe_site *s);
/* ,"punching":{...}: punch_ttl, IPv4's hops, first_syn_ttl and variant as
   before, then "ipv4" and "ipv6" objects. */
void punching_json(FILE *out, const struct probe_site *s);

/* --- report.c ------------------------------------------------------------- */

struct probe_run {
    const struct probe_opts *opts;
    struct probe_site site;
    struct probe_peer *peers;
    int npeers;
    const char *capture_file;
    long capture_packets;
    char capture_why[200];
    double elapsed_ms;
    bool timed_out;
};

void report_human(FILE *out, const struct probe_run *r);
void report_json(FILE *out, const struct probe_run *r);

#endif
