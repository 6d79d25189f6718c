/*
 * How many of a shared resource each holder has: connections per source
 * address, table entries per address or per cluster.  Its users refuse a
 * holder that reached its share, so that one client, site or job cannot take
 * what every other one needs.  Keys are short strings (an address, a cluster
 * name); a key is forgotten when its count drops to zero.  Hashed with a
 * random seed: the keys come from the network.  Not thread-safe.
 */
#ifndef QCG_COMMON_TALLY_H
#define QCG_COMMON_TALLY_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

#define TALLY_KEY_MAX 64 /* longer keys are cut */

struct tally;

struct tally *tally_new(void);
void tally_free(struct tally *t);
/* What key holds now (0 when unknown). */
unsigned tally_count(const struct tally *t, const char *key);
/* One more for key unless it holds max already: false then, or when memory
   runs out. */
bool tally_take(struct tally *t, const char *key, unsigned max);
/* One less for key (one it took). */
void tally_give(struct tally *t, const char *key);
/* n less for key (n it took, e.g. a batch of entries forgotten at once). */
void tally_give_n(struct tally *t, const char *key, unsigned n);
/* Holders with a count now. */
size_t tally_holders(const struct tally *t);

/* The key a peer's address is counted under: its group (source_group.h:
   the IPv4 address, or the /64 of an IPv6 one, an IPv4-mapped address as
   IPv4), as text.  "?" when it cannot be shown. */
void tally_source_key(const struct sockaddr_storage *ss, socklen_t len, char out[TALLY_KEY_MAX]);
/* ... with IPv6 cut to prefix6 bits. */
void tally_source_key_prefix(const struct sockaddr_storage *ss, socklen_t len, unsigned prefix6,
                             char out[TALLY_KEY_MAX]);

#endif
