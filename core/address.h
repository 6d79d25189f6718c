/* The address text every component accepts: a node's, a contact's, a
   cluster's public address; and the address ranges a site declares. */
#ifndef QCG_ADDRESS_H
#define QCG_ADDRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "proto.h"

/* An IPv4 or IPv6 address in text form (inet_pton), shorter than
   QCG_ADDR_MAX; false for NULL. */
bool address_valid(const char *text);

/* AF_INET or AF_INET6 for an address address_valid takes, 0 otherwise.  An
   IPv4-mapped IPv6 address ("::ffff:203.0.113.7") is AF_INET: it is that
   IPv4 host, and every check treats it so. */
int address_family(const char *text);

/* The usual text of an address: inet_ntop's (lowercase IPv6, zeros
   compressed), a mapped address as plain IPv4.  -1 (out empty) when text is
   not an address; len at least QCG_ADDR_MAX. */
int address_canonical(const char *text, char *out, size_t len);

/* Whether a and b are the same host ("2001:DB8::1" and "2001:db8:0::1";
   "::ffff:1.2.3.4" and "1.2.3.4"); false when either is not an address. */
bool address_equal(const char *a, const char *b);

/* address:port as a socket address (mapped addresses as AF_INET); its
   length, or 0 when address is not an address. */
socklen_t address_sockaddr(const char *address, uint16_t port, struct sockaddr_storage *sa);

/* A node's addresses, "198.18.1.5, 2001:db8:1::5" (commas, blanks
   around them): at most QCG_NODE_ADDRS, each canonical into out[], no two
   the same host, the first IPv4 one moved to the front (a contact's first
   address is what a peer of an older version reads).  Their count, or -1
   with a sentence in why. */
int address_list_parse(const char *text, char out[][QCG_ADDR_MAX], int max, char *why,
                       size_t whylen);

/* A message's further addresses (a node's or a contact's otherAddress):
   each canonical into out[], none equal to `first` or to another; at most
   max.  Their count, or -1 with a sentence in why. */
int address_others_take(int n, char *const *in, const char *first, char out[][QCG_ADDR_MAX],
                        int max, char *why, size_t whylen);
/* Whether address is one of list[0..n) (the same host). */
bool address_among(const char *address, const char list[][QCG_ADDR_MAX], int n);

/* "HOST:PORT" as configs, flags and URLs write it: an IPv4 address, or an
   IPv6 one in brackets ("[2001:db8::1]:7700").  host gets the canonical
   address (no brackets, at least QCG_ADDR_MAX), port 1-65535 (0 too when
   port_zero).  -1 with a sentence in why: a missing or bad port, an IPv6
   address without brackets, a zone id ("fe80::1%eth0": link-local
   addresses are not supported), a name instead of an address. */
int hostport_parse(const char *text, bool port_zero, char *host, size_t hostlen, int *port,
                   char *why, size_t whylen);

/* "203.0.113.5:7700" or "[2001:db8::1]:7700" (brackets when host holds a
   colon); snprintf's result.  HOSTPORT_MAX holds any address's. */
#define HOSTPORT_MAX 64 /* QCG_ADDR_MAX, brackets, ":65535" */
int hostport_format(const char *host, int port, char *out, size_t len);

/* A node's or a contact's addresses as log lines say them: first, then
   others[0..n), joined by " and "; each HOST:PORT (hostport_format) when
   port > 0, the bare address when 0.  snprintf's result and cut: the length
   of the whole text, out cut short (NUL-terminated) when len is less.
   ADDRESS_LIST_TEXT_MAX holds QCG_NODE_ADDRS addresses with a port. */
#define ADDRESS_LIST_TEXT_MAX (QCG_NODE_ADDRS * (HOSTPORT_MAX + 5))
int address_list_format(const char *first, const char others[][QCG_ADDR_MAX], int n, int port,
                        char *out, size_t len);

/* "https://HOST:PORT/" from an https URL: its host (canonical) and port
   (443 when absent).  -1 with why. */
int url_hostport(const char *url, char *host, size_t hostlen, int *port, char *why, size_t whylen);

/* "https://HOST:PORT/" where a tool on the same host reaches a service
   listening on `listen` (NULL, "" or 0.0.0.0: 127.0.0.1; "::": ::1);
   snprintf's result. */
int url_local(const char *listen, int port, char *out, size_t len);

/* A CIDR range, "198.51.100.0/26" or "2001:db8::/48"; a plain address is
   its own /32 or /128; a mapped IPv6 range (::ffff:198.51.100.0/120) is the
   IPv4 one. */
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
/* False for NULL, text that is not an address, or an address of the other
   family (a mapped address is IPv4). */
bool addr_range_contains(const struct addr_range *r, const char *address);
bool addr_range_overlap(const struct addr_range *a, const struct addr_range *b);
/* Whether r lies wholly inside one of list[0..n). */
bool addr_range_within_any(const struct addr_range *r, const struct addr_range *list, int n);
/* 127.0.0.0/8 or ::1: every host's own, never a route to another site. */
bool addr_range_loopback(const struct addr_range *r);
/* Whether a site may declare r as its nodes' range: not loopback, not wider
   than /8 (IPv6 /16).  -1 with why when not. */
int addr_range_declarable(const struct addr_range *r, char *why, size_t whylen);

#endif
