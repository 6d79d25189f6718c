/*
 * The broker's lease on what a frontend publishes (issue 32): a frontend
 * that dies would keep its cluster's contacts, and the plans to them, at the
 * broker until it came back.  Every poll (and registration) renews its
 * cluster's lease; a cluster not heard from for `cluster-lease` seconds is
 * dropped as a revoked one is (revoked.h): its contacts withdrawn, its
 * nodes and queue gone.  Its frontend, back, finds its cluster unknown
 * (poll: notfound), registers again and publishes every live contact again.
 */
#ifndef BROKER_LEASE_H
#define BROKER_LEASE_H

#include <stddef.h>
#include <stdint.h>

/* The shortest lease: a frontend polls again at once after each answer, and
   an answer comes within the broker's longest wait (25 s). */
#define LEASE_MIN_S 30

struct lease;

/* seconds 0: no lease (clusters stay until their frontend's certificate is
   revoked or the broker stops).  NULL on ENOMEM. */
struct lease *lease_new(unsigned seconds);
void lease_free(struct lease *l);
unsigned lease_seconds(const struct lease *l);
/* The frontend of `cluster` called (poll, registerCluster) at now_ms.
   Thread-safe. */
void lease_heard(struct lease *l, const char *cluster, uint64_t now_ms);
/* Calls expired(arg, cluster, silent_ms) for each cluster not heard from
   for the lease by now_ms, and forgets it; how many.  Thread-safe; expired
   runs without the lease's lock. */
size_t lease_sweep(struct lease *l, uint64_t now_ms,
                   void (*expired)(void *arg, const char *cluster, uint64_t silent_ms), void *arg);

#endif
