/*
 * The iptables rules of traversing TCP (internal to traverse.c).
 *
 * They live in the raw table (iptables', and ip6tables' for a node with an
 * IPv6 address: the same chains and rules in each family's form), in three
 * chains per queue number:
 * QCG-TRAVERSE-OUT-<q> (jumped to from OUTPUT) and QCG-TRAVERSE-IN-<q> (from
 * PREROUTING), the jumps taken by SYN-carrying TCP packets only, and
 * QCG-TRAVERSE-GUARD-<q> (from PREROUTING, for TCP resets and ICMP or
 * ICMPv6 destination-unreachable errors only): the initiator's guard, which drops
 * the reset or ICMP error a rejecting firewall in front of the target sends
 * for the initiator's SYN, so that the connect stays in SYN-SENT until the
 * target's SYN comes (the exchange is a simultaneous open; traverse.c).  Why raw:
 * its hooks run before conntrack and NAT (priority -300 against -200 and
 * -100), so a SYN/ACK we turn into a SYN is turned before this host's own
 * conntrack (if a host firewall loaded it) sees it: the host then tracks the
 * same simultaneous open that the routers track, instead of a SYN/ACK
 * followed by a second SYN/ACK from the peer, which it would call INVALID.
 * On the initiator the SYN is caught with the addresses the process used,
 * before any local NAT.  Raw has no INPUT chain; PREROUTING with the node's
 * own address as destination is the same thing for us.
 *
 * Chains are made and removed with `iptables -w 5 -t raw ...`, per-connection
 * rules changed with `iptables-restore -w 5 --noflush` (several rules, one
 * transaction), both run by posix_spawnp (no shell), exit status checked,
 * stderr kept for the error message, bounded in time.  Each rule carries a comment naming the
 * helper, the queue and a rule id, so that deleting one rule never deletes another's.
 */
#ifndef QCG_HELPER_TRAVERSE_RULES_H
#define QCG_HELPER_TRAVERSE_RULES_H

#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>

#include "rawpkt.h"

enum tvrule_kind {
    TVR_QUEUE,      /* a SYN or SYN/ACK to the queue (inbound, synack say which) */
    TVR_GUARD_RST,  /* drop TCP resets from dst:dport (the GUARD chain) */
    TVR_GUARD_ICMP, /* drop ICMP destination-unreachable errors quoting a packet to
                       dst:dport (the u32 match; the GUARD chain) */
};

/* One rule.  An address of family 0 or a zero port is not matched on (a
   guard's dst and dport must be set: the remote end of the watched connect).
   dst's family says the rule's: iptables or ip6tables (src, when set, is of
   the same family). */
struct tvrule {
    enum tvrule_kind kind;
    int inbound; /* TVR_QUEUE: 1 the IN chain (PREROUTING), 0 the OUT chain (OUTPUT) */
    int synack;  /* TVR_QUEUE: 1 SYN and ACK set, 0 SYN alone (--syn) */
    struct rawpkt_addr src, dst;
    uint16_t sport, dport;
    unsigned id;
};

/* Removes this queue's jumps and chains if present (a previous run's
   leftovers), then creates them: iptables', and with v6 ip6tables' too.
   icmp_guard[0] (IPv4), [1] (IPv6): 1 when the kernel takes the u32 match
   TVR_GUARD_ICMP needs (tried once), else 0.  Blocks (~tens of ms). */
int tvrules_setup(uint16_t queue, int v6, int icmp_guard[2], char *err, size_t errlen);
/* Removes this queue's jumps and chains of both families, whatever they
   hold.  Blocks.  Returns the number of commands that failed with something
   else than "not there". */
int tvrules_sweep(uint16_t queue);
/* Most rules in one change. */
#define TVRULES_BATCH_MAX 64

/* Appends (add 1) or deletes (add 0) n rules in one iptables-restore
   --noflush transaction per family (IPv4 first, then IPv6): all or none of
   a family.  Blocks: ~3 ms to add; a deletion
   costs ~15 ms however many rules it holds (the kernel waits for an RCU
   grace period per transaction that removes rules), hence batches. */
int tvrules_apply(uint16_t queue, const struct tvrule *r, size_t n, int add, char *err,
                  size_t errlen);
/* Runs argv (argv[0] looked up in PATH) with input (may be NULL) on its
   stdin and waits at most timeout_ms; 0 on exit status 0, else -1 with the
   command's stderr (or why) in err. */
int tvrules_run(char *const argv[], const char *input, unsigned timeout_ms, char *err,
                size_t errlen);

#endif
