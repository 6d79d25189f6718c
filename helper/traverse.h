/*
 * Traversing TCP, the packet side (docs/design.md, "Traversing TCP against
 * a stateful firewall"): the initiator's helper intercepts its process's
 * outgoing SYN and ships a copy out of band; the target's helper injects
 * that copy into its own stack and turns the exchange into a TCP
 * simultaneous open, so that a stateful firewall in front of the target sees
 * only outbound SYNs and their replies.
 *
 * Both sides need CAP_NET_ADMIN (NFQUEUE, rules) and CAP_NET_RAW (raw
 * socket).  Interception rules are narrow — only the SYN / SYN-ACK of one
 * planned connection, each with --queue-bypass so that a dead helper
 * black-holes nothing — live in the helper's own chains (raw table, named
 * after the queue number: see traverse_rules.h for why raw), are removed once
 * the exchange is over or timed out, and traverse_close removes the chains.
 * The data path is never queued.
 *
 * Adding a plan's rules blocks the loop ~1-3 ms (one iptables-restore), so
 * that they are in place when traverse_watch_syn / traverse_inject return.
 * Deleting costs ~15 ms per transaction whatever it holds, and holds up
 * additions meanwhile: finished plans' rules are deleted in batches on the
 * thread pool after 100 ms without a plan starting or ending (1 s at most).
 *
 * Everything runs on the helper's libuv loop; callbacks run on it too and are
 * called exactly once per successful traverse_watch_syn/traverse_inject.
 */
#ifndef QCG_HELPER_TRAVERSE_H
#define QCG_HELPER_TRAVERSE_H

#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "rawpkt.h"

/* The largest SYN we ship: IPv4 header with options + TCP header with
   options (an IPv6 SYN, 40 + 60 bytes at most, fits too). */
#define TRAVERSE_PACKET_MAX 120

struct traverse;

/* Traversing goes over either family: each plan's by its address.  The
   IPv6 rules go to ip6tables' raw table, the IPv6 packets out of an IPv6
   IPPROTO_RAW socket; a node without an IPv6 address sets up neither. */
struct traverse_config {
    uint16_t queue_num;       /* NFQUEUE number this helper owns */
    struct rawpkt_addr node;  /* this node's own IPv4 address (family 0: none) */
    struct rawpkt_addr node6; /* ... and IPv6 address (family 0: none) */
};

/* Opens the queue and creates this helper's chains (removing leftovers of a
   previous run first).  The queue is bound first: a second process given the
   same queue number fails here without touching the first one's chains.
   Blocks ~10-40 ms (iptables).  NULL with a one-line reason in err (no
   privileges, iptables missing, queue owned by another process). */
struct traverse *traverse_new(uv_loop_t *loop, const struct traverse_config *cfg, char *err,
                              size_t errlen);
/* Aborts what is in progress (callbacks get -ECANCELED), removes every rule
   and the chains (blocks ~50-100 ms), closes the queue.  Loop thread. */
void traverse_close(struct traverse *t);
/* Closes if not done yet; the memory goes once the loop has run the closes
   and the deletions in flight (run the loop after it). */
void traverse_free(struct traverse *t);

/* Initiator side, called before the local process connects to dst:dport:
   queue the first SYN towards dst:dport, let it leave (NF_ACCEPT: our own
   NAT must see it) and give the caller a copy (IPv4 or IPv6 + TCP, as it
   left the process).  cb(arg, 0, pkt, len) once, or cb(arg, negative, NULL, 0, why)
   after timeout_ms (-ETIMEDOUT; -EMSGSIZE for a SYN above
   TRAVERSE_PACKET_MAX).  The rule is removed after the first SYN or the
   timeout; retransmissions are not shipped.  With the watch comes a guard:
   until 5 s after the SYN (the initiator's connect waits that long), TCP
   resets from dst:dport and ICMP destination-unreachable errors about a
   packet to dst:dport are dropped, so that a firewall in front of the target
   that rejects the SYN (a reset or an ICMP port unreachable, which Linux
   reads as ECONNREFUSED) does not end the connect before the target's SYN
   arrives.  A connection to dst:dport established meanwhile loses a reset
   sent in those seconds (the peer's next one, after the guard, ends it).  Several watches of one
   dst:dport take its SYNs oldest first.  0, or -1 with why (closed, no
   address of dst's family on this node, iptables failed). */
typedef void (*traverse_syn_fn)(void *arg, int status, const uint8_t *pkt, size_t len,
                                const char *why);
int traverse_watch_syn(struct traverse *t, struct rawpkt_addr dst, uint16_t dport,
                       unsigned timeout_ms, traverse_syn_fn cb, void *arg, char *why,
                       size_t whylen);

/* Target side: `syn` is the initiator's SYN as captured there.  Checked: a
   TCP SYN without ACK of pub's family, well-formed lengths, destination this
   node's address of that family and port `allowed_port` (the port a process of the job published
   here), no payload, no fragment.  Its source is rewritten to pub:pub_port
   (the initiator's public mapping), checksums recomputed, and it is
   injected into our stack; our SYN/ACK is caught and sent out as a plain SYN;
   the initiator's SYN/ACK (checked: it acknowledges our SYN) is let in - our
   listener answers it with the ACK the initiator's connect() waits for - and
   the third ACK is injected "from" the initiator right after, so that our
   listener's accept() returns at once.  cb(arg, 0, "") once the ACK was
   injected, or cb(arg, -ETIMEDOUT, why) at timeout_ms.  0, or -1 with why
   (refused, logged: nothing was injected).  One plan per (pub, pub_port,
   allowed_port) at a time. */
typedef void (*traverse_done_fn)(void *arg, int status, const char *why);
int traverse_inject(struct traverse *t, const uint8_t *syn, size_t len, struct rawpkt_addr pub,
                    uint16_t pub_port, uint16_t allowed_port, unsigned timeout_ms,
                    traverse_done_fn cb, void *arg, char *why, size_t whylen);

/* Rules currently installed (for --status and tests). */
unsigned traverse_rules(const struct traverse *t);

#endif
