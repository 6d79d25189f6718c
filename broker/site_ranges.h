/*
 * The address rules of docs/architecture.md "Addresses within a site": which
 * addresses a cluster's declaration covers, which declarations clash, and
 * which addresses the broker may put into an order.  Pure functions of the
 * declarations; the registry calls them under its lock.
 */
#ifndef BROKER_SITE_RANGES_H
#define BROKER_SITE_RANGES_H

#include <stdbool.h>
#include <stddef.h>
#include "registry.h"

/* The address lies in one of c's node ranges (declared, or the frontend's
   own address when it declared none). */
bool site_holds_node(const struct reg_cluster *c, const char *address);
/* The address is one c's nodes may appear from outside: a declared public
   address, or inside a node range of an open or firewalled site. */
bool site_holds_public(const struct reg_cluster *c, const char *address);
/* 0, or -1 with why when a range of decl overlaps one of other's and they are
   not both private (NATed node ranges); loopback never clashes. */
int site_ranges_clash(const struct reg_cluster *decl, const struct reg_cluster *other, char *why,
                      size_t whylen);
/* Whether the broker may order `to`'s helper to reach `address` on behalf of
   `from` (a connect-back's target, an inject's source): the address must be
   `from`'s (a node address when public is false, else a public one) and,
   for two clusters, outside `to`'s own node ranges, which would make the
   order a connection into to's LAN.  False with why. */
bool site_order_address_ok(const struct reg_cluster *from, const struct reg_cluster *to,
                           const char *address, bool public, const char *what, char *why,
                           size_t whylen);

#endif
