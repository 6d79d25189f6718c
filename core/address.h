/* The address text every component accepts: a node's, a contact's, a
   cluster's public address. */
#ifndef QCG_ADDRESS_H
#define QCG_ADDRESS_H

#include <stdbool.h>

/* An IPv4 or IPv6 address in text form (inet_pton), shorter than
   QCG_ADDR_MAX; false for NULL. */
bool address_valid(const char *text);

#endif
