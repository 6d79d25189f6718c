/*
 * How many routers lie between this node and the broker's reflector, found the
 * way traceroute finds them, with TCP connects: a connect with TTL k dies at
 * the k-th router (its ICMP time-exceeded ends the connect with
 * EHOSTUNREACH) or reaches the reflector's host (it connects, or that host
 * refuses).  The first k that reaches it gives hops = k - 1.  No privileges;
 * each step is bounded in time (a router that sends no ICMP counts as a hop).
 *
 * What hole punching does with it (punch.c): the first SYN of a punch leaves
 * with TTL = hops, so that it crosses this site's own NAT and firewall (which
 * make their state for the flow) and expires at the last router before the
 * reflector, on the internet between the sites, short of the peer's firewall:
 * a firewall that answers an unsolicited SYN with a reset or an ICMP error
 * never sees it, and the peer's own SYN then finds our state.  The lab's
 * reflector sits on the emulated internet between every pair of sites; a
 * reflector placed inside one site would make its nodes' TTL too short for
 * the others (the punch then degrades to the plain variant's retries).
 *
 * The punch's opener takes no packet below PUNCH_MIN_TTL while it waits, so
 * that the time-exceeded its first SYN draws cannot end its connect.  Over
 * IPv4 Linux compares an ICMP error's quoted header with that floor (our
 * SYN's TTL where it expired: 1), so every time-exceeded stays out.  Over
 * IPv6 it compares the ICMPv6 packet's own hop limit: a router that sends
 * its errors with 255 (as some routers do; Linux uses 64) gets through and
 * ends the punch.  So once an IPv6 count is known, one more connect with
 * hop limit = hops under that floor checks it: an error that still comes
 * back makes the result carry a note, and the punch goes without the limit
 * (punch_first_ttl: staggered).
 *
 * One result is kept per family (its reflector address) for PUNCH_HOPS_KEEP_MS; a punch
 * that finds none measures (concurrent ones each measure: a few connects).
 */
#ifndef QCG_HELPER_PUNCH_HOPS_H
#define QCG_HELPER_PUNCH_HOPS_H

#include <netinet/in.h>
#include <stdint.h>
#include <uv.h>

#define PUNCH_HOPS_MAX 16          /* the highest TTL tried */
#define PUNCH_HOPS_STEP_MS 500     /* a silent router's share */
#define PUNCH_HOPS_KEEP_MS 600000u /* how long a result holds */
#define PUNCH_MIN_TTL 128          /* the opener's floor (IP_MINTTL) */
#define PUNCH_HOPS_NOTE_MAX 96

struct punch_hops;

/* hops >= 0 with the round trip to the reflector in ms, and why NULL or why
   the first SYN cannot be TTL-limited on this path; or -1 and why. */
typedef void (*punch_hops_fn)(void *arg, int hops, unsigned rtt_ms, const char *why);

/* Starts a measurement from local (port 0: chosen by the kernel) towards to,
   both IPv4 or both IPv6 (the TTL is then the hop limit);
   cb is called once, from the loop, unless cancelled first.  NULL (why
   says) when it cannot start. */
struct punch_hops *punch_hops_start(uv_loop_t *loop, const struct sockaddr_storage *local,
                                    const struct sockaddr_storage *to, punch_hops_fn cb, void *arg,
                                    char *why, size_t whylen);
void punch_hops_cancel(struct punch_hops *h);

/* The kept result for to (0 and *hops, *rtt_ms, note: "" or why the first
   SYN cannot be TTL-limited, PUNCH_HOPS_NOTE_MAX bytes) or -1 (none, or too
   old). */
int punch_hops_cached(uv_loop_t *loop, const struct sockaddr_storage *to, int *hops,
                      unsigned *rtt_ms, char *note);

/* Sets a socket's TTL (IPv6: unicast hop limit) for family; -1 puts the
   default back.  0, or -1 with errno. */
int punch_set_ttl(int fd, int family, int ttl);
/* The least TTL (IPv6: hop limit) a packet must arrive with for the socket
   to take it, ICMP errors about it included (0: any); 0 or -1. */
int punch_set_min_ttl(int fd, int family, int ttl);

/* The TTL of a punch's first SYN for a hop count: 0 (the plain variant, the
   first SYN with the normal TTL) when the path is too short to stop a SYN
   between the two sites (fewer than 2 routers: our own router would drop
   it before making any state). */
int punch_ttl_for_hops(int hops);
/* The same, 0 too when the hop count came with a note (the router there
   sends ICMP errors the opener's floor lets through). */
int punch_first_ttl(int hops, const char *note);

#endif
