/* The broker's look at a SYN handed over for traversing: enough to check it
   matches the plan before ordering the target's helper to inject it (which
   checks it strictly again before anything reaches its stack). */
#ifndef BROKER_SYNCHECK_H
#define BROKER_SYNCHECK_H

#include <stddef.h>

#include "proto.h"

struct syn_info {
    char saddr[QCG_ADDR_MAX], daddr[QCG_ADDR_MAX];
    int sport, dport;
};

/* hex: lowercase hex of an IPv4 or IPv6 packet of at most QCG_PACKET_MAX
   bytes that must be a TCP SYN without ACK, with consistent header lengths
   (IPv6: TCP right after the fixed header).  0 and *out (the addresses as
   inet_ntop writes them), or -1 with why. */
int syn_check_hex(const char *hex, struct syn_info *out, char *why, size_t whylen);

#endif
