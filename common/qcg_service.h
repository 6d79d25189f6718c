/*
 * qcg-connect control plane: the one definition of every SOAP message.
 *
 * soapcpp2 -c generates the C stubs, the WSDL and the XSD from this file at build
 * time (see common/CMakeLists.txt); nothing generated is committed.  The broker
 * and the frontend serve this service; the frontend and the helper call it.
 * Which role may call which operation is decided by the server from the caller's
 * certificate (OU = role, CN = name), never from the message.
 *
 * Every request carries `version` (QCG_PROTOCOL_VERSION in common/proto.h) and
 * every response echoes the server's; a mismatch is refused with a fault whose
 * subcode is qcg:version and whose text names both versions.
 *
 * Faults use these subcodes: qcg:version, qcg:denied (caller may not do this,
 * or wrong job verifier), qcg:invalid (malformed field), qcg:busy (rank already
 * published by a live process: final), qcg:retry (a rate or a full queue for
 * the moment: ask again later; older services said qcg:busy), qcg:notfound,
 * qcg:unavailable (upstream down).
 */

/* Laid out by hand: clang-format would write "//gsoap" as "// gsoap", which
   soapcpp2 does not read as a directive. */
// clang-format off

//gsoap qcg service name: qcg
//gsoap qcg service namespace: urn:qcg-connect:1
//gsoap qcg service location: https://localhost:7700/
//gsoap qcg service style: document
//gsoap qcg service encoding: literal
//gsoap qcg schema namespace: urn:qcg-connect:1
//gsoap qcg schema form: unqualified

/* A cluster as its frontend declares it.  kind: open | firewalled | nat | symnat. */
struct qcg__cluster {
    char *name;                 /* must equal the frontend certificate's CN */
    char *kind;
    int __sizePublicAddress;
    char **publicAddress;       /* the addresses the site's nodes appear from */
    int portLow;                /* open inbound port range, 0-0 when none */
    int portHigh;
    int __sizeNodeRange;
    char **nodeRange;           /* CIDR ranges the nodes' addresses lie in (option
                                   `addresses`); absent from an older frontend: the
                                   broker then accepts nodes at the frontend's own
                                   address only (docs/architecture.md) */
    int __sizeOpenRange;
    char **openRange;           /* CIDR ranges (IPv6 ones, typically) whose nodes accept
                                   connections from outside whatever `kind` says of
                                   IPv4 (option `open-addresses`); inside nodeRange.
                                   Absent when none: an older broker never sees it */
};

/* A compute node as its helper declares it. */
struct qcg__node {
    char *name;                 /* must equal the node part of the helper's CN */
    char *address;              /* the node's address inside its site */
    int portLow;                /* the node's own listening/ephemeral port range */
    int portHigh;
    int canIntercept;           /* 1 when the helper holds NET_ADMIN/NET_RAW */
    char *incarnation;          /* random per helper start (32 hex); another one than
                                   the node registered with drops the node's contacts.
                                   NULL from an older helper: contacts kept */
    int __sizeOtherAddress;
    char **otherAddress;        /* the node's further addresses (another family), each
                                   inside the cluster's node ranges; absent when the node
                                   has one address, so an older service sees nothing new */
};

/* A process's listening contact. `node` and `cluster` are filled by the service
   that relays the call from what it knows of the caller, never trusted from below. */
struct qcg__contact {
    char *job;
    char *verifier;             /* the job's verifier (core/verifier.h: 64 hex, derived
                                   from the secret on the node); the broker keeps only
                                   its hash.  The secret never leaves the node */
    int rank;
    char *cluster;
    char *node;
    char *address;              /* the first of the node's addresses (IPv4 if it has one) */
    int port;
    int __sizeOtherAddress;
    char **otherAddress;        /* the others the process listens on, at the same port;
                                   each one of its node's.  Absent when none */
};

/* How to reach a peer.  status: ok | unavailable | notfound.
   technique: direct | reversed | traversing | holepunch | proxy.
   When status is unavailable, technique names the technique that would be needed
   and reason says why it cannot be used.
   direct: connect to address:port.  reversed: wait on the own listener for
   the peer's connection whose hello carries `token`.  proxy: connect to the
   proxy at address:port and present `token`.  A plan with a token is never
   cacheable. */
struct qcg__plan {
    char *status;
    char *technique;
    char *cluster;              /* the target's cluster and node */
    char *node;
    char *address;              /* where to connect (direct) */
    int port;
    char *token;                /* one-time token (later techniques); never cached */
    int cacheable;              /* 1: a frontend may cache this plan */
    char *reason;
    char *fallbackAddress;      /* direct over IPv6: the target's IPv4 address, tried at
                                   the same port when IPv6 fails (happy eyeballs).  Absent
                                   otherwise, so an older frontend never sees it */
};

/* An order sent down a long-poll.  kind:
   invalidate (job, rank)  a contact was withdrawn or replaced;
   flush                   forget every cached plan;
   connect-back            for `node`: connect to address:port (the initiator
                           peerRank's listener) and hand the socket to the
                           local process (job, rank), which sends the hello
                           carrying `token` (reversed technique);
   proxy-connect           for `node`: connect to the proxy at address:port,
                           present `token`, and hand the paired socket to
                           (job, rank), which then waits for peerRank's hello;
   punch                   for `node`: punch a hole towards peerRank through
                           the broker's reflector at address:port with `token`
                           (helper/punch.h) and hand the connected socket to
                           (job, rank), which then waits for peerRank's hello;
   inject                  for `node`: inject `packet` (the initiator's SYN,
                           hex) into the node's stack with its source rewritten
                           to address:port (the initiator's public mapping) and
                           complete the simultaneous open (helper/traverse.h);
                           only towards the port (job, rank) published there.
   probe-listen            for `node`: publish a test endpoint for qcg-probe as
                           (job, rank) with job secret `token`, for `seconds`
                           (at most QCG_PROBE_TTL_MAX); it accepts connections
                           by every technique and echoes what it reads. */
struct qcg__command {
    unsigned long long seq;     /* increasing per queue, within one epoch */
    char *kind;
    char *job;
    int rank;
    char *node;                 /* the node the order is for, when it is for one */
    char *address;
    int port;
    char *token;
    int peerRank;               /* connect-back, proxy-connect, punch, inject: the initiator */
    char *packet;               /* inject: the SYN, lowercase hex, at most 2 x 120 characters */
    int seconds;                /* probe-listen: how long the endpoint lives */
};

struct qcg__counter {
    char *name;
    unsigned long long value;
};

struct qcg__registerResponse {
    int version;
    unsigned long long epoch;   /* changes when the server restarts: re-register */
};

struct qcg__ackResponse {
    int version;
};

/* One attempt's end, as qcg__report gives it, in a batch of qcg__reports. */
struct qcg__attempt {
    char *job;
    char *verifier;
    int fromRank;
    int toRank;
    char *technique;
    int ok;
    int setupMs;
    char *why;                  /* NULL when it worked */
};

struct qcg__attempts {
    int __sizeAttempt;          /* at most QCG_REPORTS_MAX (core/proto.h) */
    struct qcg__attempt *attempt;
};

struct qcg__reportsResponse {
    int version;
    int accepted;               /* how many were recorded; the others are counted and
                                   logged at the broker, not faulted */
};

/* One lookup of a qcg__lookups batch: as qcg__lookup's arguments, without
   tried and only (a retry or a test of one technique goes alone). */
struct qcg__lookupAsk {
    char *job;
    char *verifier;
    int fromRank;
    int toRank;
};

struct qcg__lookupAsks {
    int __sizeAsk;              /* at most QCG_LOOKUPS_MAX (core/proto.h) */
    struct qcg__lookupAsk *ask;
};

/* The answer to one ask, in the asks' order: its plan, or the fault
   qcg__lookup would have raised for it (fault: the subcode without "qcg:",
   e.g. "retry"; faultText: why), plan then NULL. */
struct qcg__lookupAnswer {
    struct qcg__plan *plan;
    char *fault;
    char *faultText;
};

struct qcg__lookupsResponse {
    int version;
    int __sizeAnswer;
    struct qcg__lookupAnswer *answer;
};

struct qcg__lookupResponse {
    int version;
    struct qcg__plan plan;
};

struct qcg__pollResponse {
    int version;
    unsigned long long epoch;
    int __sizeCommand;
    struct qcg__command *command;
};

struct qcg__statsResponse {
    int version;
    char *role;
    char *name;
    int __sizeCounter;
    struct qcg__counter *counter;
};

/* A service endpoint, "address" and TCP port. */
struct qcg__endpoint {
    char *address;
    int port;
};

/* What qcg-probe needs to know about the caller's site and the grid. */
struct qcg__siteInfoResponse {
    int version;
    struct qcg__cluster cluster;    /* the caller's cluster as its frontend declared it */
    char *broker;                   /* the broker's URL as the frontend reaches it (set by
                                       the frontend; NULL from the broker) */
    char *frontendSeenFrom;         /* the address the broker sees the frontend connect from */
    struct qcg__endpoint *reflector; /* NULL when hole punching is off */
    struct qcg__endpoint *reflector6; /* its IPv6 address, NULL when it has none (older
                                         services send none) */
    int __sizeProxy;
    struct qcg__endpoint *proxy;    /* each configured proxy's data endpoints (its QCGM
                                       observer): a dual-stack proxy's two, one after the
                                       other, its first configured one first */
    int __sizePeer;
    struct qcg__cluster *peer;      /* every registered cluster, the caller's included */
};

/* A test endpoint started for a probe. */
struct qcg__probeResponse {
    int version;
    char *job;                      /* a fresh job, "probe-<32 hex>": the prober is rank 0 */
    char *secret;                   /* its secret (random, 32 hex): the broker makes
                                       it, so a probe job's secret is the one the
                                       broker may know */
    int rank;                       /* the endpoint's rank: 1 */
    char *cluster;                  /* where the endpoint runs */
    char *node;
    char *address;                  /* that node's address inside its site */
    int seconds;                    /* how long it lives */
};

/* What a probe observed of its site (kind: open | firewalled | nat | symnat;
   mapping: none | endpoint-independent | endpoint-dependent | unknown;
   inbound: open | dropped | reset | icmp | unknown, or rejected from older
   probes).  `cluster` and `node` are set
   by the frontend from the caller's certificate, never trusted from below;
   `when` (unix seconds) by the broker. */
struct qcg__observation {
    char *cluster;
    char *node;
    char *kind;
    char *publicAddress;
    int portPreserving;             /* 1, 0, or -1 unknown */
    char *mapping;
    char *inbound;
    unsigned long long when;
};

/* The outcomes the broker remembers for one ordered cluster pair and technique. */
struct qcg__outcome {
    char *from;
    char *to;
    char *technique;
    unsigned long long ok;
    unsigned long long failed;
    int lastOk;                     /* 1: the last attempt connected */
    int lastSetupMs;                /* of the last success */
    unsigned long long age;         /* seconds since the last attempt */
};

/* One cluster of the grid picture. */
struct qcg__gridCluster {
    struct qcg__cluster declared;
    int nodes;                      /* registered nodes */
    struct qcg__observation *observed; /* the last probe's observation, NULL when none */
    int punchesPreserved;           /* reflector: punches whose observed port was the local one */
    int punchesChanged;             /* ... and whose port was changed by a NAT */
};

/* A proxy the broker is configured with.  state: alive (heard from within
   the broker's proxy-dead-after), dead (heard from once, silent since),
   unknown (not heard from since the broker started). */
struct qcg__gridProxy {
    char *name;
    char *address; /* its data endpoint */
    int port;
    int __sizeOther;
    struct qcg__endpoint *other; /* its data endpoint in the other family (a dual-stack
                                    proxy's); absent from an older broker */
    char *state;
    unsigned long long lastSeen; /* seconds since its last beat; 0 when never heard */
    int pairs;                   /* pairs it relayed at its last beat */
    unsigned long long bytes;    /* bytes it relayed since it started, at its last beat */
    unsigned long long planned;  /* pairs the broker planned through it since it started */
};

struct qcg__gridResponse {
    int version;
    int __sizeCluster;
    struct qcg__gridCluster *cluster;
    int __sizeOutcome;
    struct qcg__outcome *outcome;
    int __sizeProxy;
    struct qcg__gridProxy *proxy; /* absent from an older broker */
};

/* frontend -> broker */
int qcg__registerCluster(int version, struct qcg__cluster *cluster,
                         struct qcg__registerResponse *response);
/* helper -> frontend, frontend -> broker (the frontend relays its nodes) */
int qcg__registerNode(int version, struct qcg__node *node, struct qcg__registerResponse *response);
/* helper -> frontend -> broker */
int qcg__publish(int version, struct qcg__contact *contact, struct qcg__ackResponse *response);
int qcg__withdraw(int version, char *job, char *verifier, int rank, char *node,
                  struct qcg__ackResponse *response);
/* tried: the techniques the caller already tried for this pair and that
   failed, comma-separated (NULL or "" for a first lookup); the plan is the
   next technique in the preference order that is not among them.  A lookup
   with tried techniques is never answered from a cache.
   only: NULL or "" for a normal lookup; else a technique name: the plan is
   that technique, whatever the broker remembers of failures between the two
   clusters, or status unavailable with the reason it cannot work for this
   pair (qcg-probe tests each technique this way).  Never cached. */
int qcg__lookup(int version, char *job, char *verifier, int fromRank, int toRank, char *tried,
                char *only, struct qcg__lookupResponse *response);
/* Many lookups in one call (helper -> frontend -> broker), each checked and
   planned as qcg__lookup would (the cluster's lookup rate takes one token
   per ask) and answered apart: one ask refused leaves the others planned.
   The helper and the frontend gather the lookups that wait at once. */
int qcg__lookups(int version, struct qcg__lookupAsks *asks, struct qcg__lookupsResponse *response);
/* Long-poll: returns the caller's queued commands with seq > ackSeq, waiting up to
   waitSeconds for one.  Commands stay queued until acknowledged by a later poll,
   so a lost response loses nothing.  A caller whose epoch differs gets the
   server's epoch and no commands: it must re-register and restart at ackSeq 0. */
int qcg__poll(int version, unsigned long long epoch, unsigned long long ackSeq, int waitSeconds,
              struct qcg__pollResponse *response);
/* helper -> frontend -> broker, traversing: the initiator's helper hands over
   the SYN its process sent towards a traversing plan's target (lowercase hex
   of the IPv4 packet); `token` is the plan's.  The broker orders the target's
   helper to inject it.  Once per token. */
int qcg__traverse(int version, char *token, char *packet, struct qcg__ackResponse *response);
/* helper -> frontend -> broker: how an attempt from fromRank to toRank ended
   (technique, ok 1/0, setup time, the process's reason when it failed).  The
   broker remembers outcomes per ordered cluster pair and plans from them. */
int qcg__report(int version, char *job, char *verifier, int fromRank, int toRank, char *technique,
                int ok, int setupMs, char *why, struct qcg__ackResponse *response);
/* frontend -> broker: many reports in one call, each checked as qcg__report
   checks it (the cluster's report rate takes one token per attempt).  The
   frontend gathers its nodes' reports for up to QCG_REPORTS_FLUSH_MS. */
int qcg__reports(int version, struct qcg__attempts *attempts,
                 struct qcg__reportsResponse *response);
/* helper -> frontend -> broker: the caller's site, the broker's reflector and
   proxies, and every registered cluster (qcg-probe). */
int qcg__siteInfo(int version, struct qcg__siteInfoResponse *response);
/* helper -> frontend -> broker: start a test endpoint in `cluster` for the
   caller's probe, living `seconds` (1..QCG_PROBE_TTL_MAX).  The broker makes a
   fresh job, picks a registered node of `cluster` (not the caller's node) and
   orders its helper (probe-listen) to publish rank 1; the caller publishes
   rank 0 and connects.  At most QCG_PROBES_PER_CLUSTER probe jobs per calling
   cluster live at once, and at most the broker's `probes-per-node` of them
   per calling node (qcg:retry beyond).  qcg:notfound: no such cluster or no
   node there.  `node`: the calling node, which the frontend sets from the
   helper's certificate (a helper's own is ignored); absent from an older
   frontend, whose probes then count against the cluster's bound only. */
int qcg__probe(int version, char *cluster, int seconds, char *node,
               struct qcg__probeResponse *response);
/* helper -> frontend -> broker: what a probe observed of its site; the broker
   keeps the last one per cluster for the grid picture. */
int qcg__observed(int version, struct qcg__observation *observation,
                  struct qcg__ackResponse *response);
/* broker or frontend role (qcg-broker --grid): the clusters, declared and
   observed, and the remembered outcomes between them. */
int qcg__grid(int version, struct qcg__gridResponse *response);
/* proxy -> broker, every few seconds (qcg-proxy's alive-interval): the proxy
   named by the caller's certificate is alive and relays `pairs` pairs now,
   `bytes` since it started.  The broker plans pairs only through proxies heard
   from lately, the least loaded first.  qcg:notfound: no proxy of that name
   is configured at the broker. */
int qcg__proxyAlive(int version, int pairs, unsigned long long bytes,
                    struct qcg__ackResponse *response);
/* any authenticated member of the grid */
int qcg__stats(int version, struct qcg__statsResponse *response);
