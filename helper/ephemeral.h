/*
 * Whether a node's ports range lies in the kernel's ephemeral range
 * (net.ipv4.ip_local_port_range) without being reserved
 * (net.ipv4.ip_local_reserved_ports): then an outgoing connection of anyone
 * on the node may take a port a rank is about to listen on.  A warning at
 * start, not an error: the admin may know better.
 */
#ifndef HELPER_EPHEMERAL_H
#define HELPER_EPHEMERAL_H

#include <stddef.h>

/* From the two sysctls' text: how many ports of low..high are ephemeral and
   not reserved (0: none), -1 when the text is not understood. */
int ephemeral_unreserved(int low, int high, const char *port_range, const char *reserved);

/* Reads the sysctls and logs a warning when ephemeral_unreserved > 0. */
void ephemeral_warn(int low, int high);

#endif
