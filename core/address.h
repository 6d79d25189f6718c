/* The address text every component accepts: a node's, a contact's, a
   cluster's public address; and the address ranges a site declares. */
#ifndef QCG_ADDRESS_H
#define QCG_ADDRESS_H

#include <stdbool.h>
#include <stddef.h>

/* An IPv4 or IPv6 address in text form (inet_pton), shorter than
   QCG_ADDR_MAX; false for NULL. */
bool address_valid(const char *text);

/* A CIDR range, "198.51.100.0/26" or "2001:db8::/48"; a plain address is
   its own /32 or /128. */
struct addr_range {
    int family; /* AF_INET or AF_INET6 */
    int bits;
    unsigned char addr[16]; /* network byte order; host bits zero */
};

/* 0, or -1 with a sentence in why (not an address, a prefix out of range,
   host bits set). */
int addr_range_parse(const char *text, struct addr_range *out, char *why, size_t whylen);
/* "a.b.c.d/n"; len at least QCG_ADDR_MAX + 4. */
void addr_range_format(const struct addr_range *r, char *out, size_t len);
/* False for NULL or text that is not an address. */
bool addr_range_contains(const struct addr_range *r, const char *address);
bool addr_range_overlap(const struct addr_range *a, const struct addr_range *b);
/* 127.0.0.0/8 or ::1: every host's own, never a route to another site. */
bool addr_range_loopback(const struct addr_range *r);
/* Whether a site may declare r as its nodes' range: not loopback, not wider
   than /8 (IPv6 /16).  -1 with why when not. */
int addr_range_declarable(const struct addr_range *r, char *why, size_t whylen);

#endif
