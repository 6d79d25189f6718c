/*
 * The data side of qcg-proxy: one event loop (util/engine.h, its own
 * thread) that accepts
 * plain TCP connections, reads each one's "QCGP" + token, checks the token
 * (format, MAC, expiry, single use), holds it until the other side of its pair
 * arrives, answers both with one 0x01 byte and then relays bytes both ways
 * (pair.h).  Every refusal closes the connection without an answer and logs
 * the reason with the client's address.
 */
#ifndef PROXY_RELAY_H
#define PROXY_RELAY_H

#include <stddef.h>
#include <stdint.h>

#include "token.h"

/* What a client sends first: the magic, then its token NUL-padded. */
#define RELAY_MAGIC "QCGP"
#define RELAY_HELLO_TOKEN 128
#define RELAY_HELLO_LEN (4 + RELAY_HELLO_TOKEN)
/* A hello with this magic (its 128 other bytes ignored) is a mapping probe:
   the proxy answers "MAPPED <addr> <port>\n", where the connection came from,
   and closes.  qcg-probe compares it with the broker reflector's MAP. */
#define RELAY_MAP_MAGIC "QCGM"
/* The proxy's one byte once both sides are there. */
#define RELAY_PAIRED 0x01
/* What a hello of RELAY_HELLO_LEN bytes is (hello.c). */
enum relay_hello {
    RELAY_HELLO_TOKEN_TEXT, /* RELAY_MAGIC and a NUL-padded token: token holds it */
    RELAY_HELLO_MAP,        /* RELAY_MAP_MAGIC */
    RELAY_HELLO_BAD_MAGIC,
    RELAY_HELLO_NOT_PADDED, /* bytes after the token's end that are not NUL */
};
/* token gets the token text (not checked: token_check's job), else "". */
enum relay_hello relay_hello_parse(const unsigned char buf[RELAY_HELLO_LEN],
                                   char token[RELAY_HELLO_TOKEN + 1]);
/* Descriptors a pair may hold: two sockets and two pipes. */
#define RELAY_FDS_PER_PAIR 6

struct relay_config {
    const char *listen_addr; /* NULL or "" = any */
    int port;                /* 0 = any free port (tests) */
    const struct proxy_key *key;
    unsigned token_skew;   /* seconds */
    unsigned pair_timeout; /* seconds */
    /* Seconds one side may hold data with no ACK at all before its pair is
       aborted (pair_stalled); 0 = never. */
    unsigned stall_timeout;
    int max_pairs;
    size_t pipe_size;
    /* Until a connection has sent its hello (the token), it is anyone's: it
       has hello_timeout seconds (at most pair_timeout) for its 132 bytes,
       and one source address (tally.h) holds at most hellos_per_address
       such connections.  When every connection slot is taken, the oldest
       of them is cut to make room.  0 = RELAY_DEFAULT_*. */
    unsigned hello_timeout;
    unsigned hellos_per_address;
    /* An address for both per-address bounds: an IPv6 /ipv6_prefix (0 =
       64). */
    unsigned ipv6_prefix;
    /* Bytes the seen tokens may take (seen.h; 0 = RELAY_DEFAULT_TOKEN_MEMORY),
       and how many of them one source address may hold (0 = a quarter of
       what the memory holds, at least 256); one job half of that. */
    size_t token_memory;
    unsigned tokens_per_address;
};
#define RELAY_DEFAULT_TOKEN_MEMORY ((size_t)64 << 20)
#define RELAY_DEFAULT_HELLO_TIMEOUT 5
#define RELAY_DEFAULT_HELLOS_PER_ADDRESS 1024

struct relay_counters {
    unsigned long long pairs_active, pairs_total, bytes_relayed;
    unsigned long long refused_bad_token, refused_replay, refused_expired;
    unsigned long long refused_full;           /* max-pairs, waiting or token table full */
    unsigned long long refused_peer_gone;      /* the other side came and left */
    unsigned long long unpaired_timeouts;      /* no token, or no peer, in time */
    unsigned long long unpaired_waiting;       /* connections waiting now */
    unsigned long long hellos_waiting;         /* connections that have not sent their hello, now */
    unsigned long long hello_timeouts;         /* no whole hello in time (also unpaired_timeouts) */
    unsigned long long hellos_cut;             /* the oldest hello cut for a new connection */
    unsigned long long refused_address_hellos; /* hellos-per-address reached */
    unsigned long long refused_address_tokens; /* tokens-per-address reached */
    unsigned long long refused_job_tokens;     /* a job's half of it reached */
    unsigned long long pairs_stalled;          /* aborted: a side acknowledged nothing */
    unsigned long long tokens_remembered;      /* (pair, side) kept against replay, now */
    unsigned long long token_bytes;            /* the memory they take, now */
    unsigned long long pipes_short;            /* pipes smaller than pipe_size: no allowance left */
};

struct relay;

/* Binds the listener; NULL with a one-line reason in err. */
struct relay *relay_new(const struct relay_config *cfg, char *err, size_t errlen);
int relay_port(const struct relay *r);
/* The data port's listen backlog: 2 x max-pairs, within backlog.h's
   bounds. */
int relay_backlog(const struct relay *r);
/* Runs until relay_stop; then closes every connection and pair (resetting the
   pairs, so no client takes the cut for a clean end).  0, or -1 on a fatal
   error of the loop itself. */
int relay_run(struct relay *r);
/* Async-signal-safe. */
void relay_stop(struct relay *r);
void relay_free(struct relay *r);
/* A consistent-enough snapshot, from any thread. */
void relay_counters(struct relay *r, struct relay_counters *out);

#endif
