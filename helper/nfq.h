/*
 * One NFQUEUE queue on a libuv loop (libmnl + libnetfilter_queue's nlmsg
 * API): every packet the kernel queues is handed to a callback, which gives
 * the verdict, optionally with the packet rewritten.  Packets are copied
 * whole; the kernel completes partial (offloaded) checksums before copying.
 */
#ifndef QCG_HELPER_NFQ_H
#define QCG_HELPER_NFQ_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

struct nfq_queue;

/* hook: NF_INET_* (linux/netfilter.h) of the chain that queued the packet.
   The callback must give the verdict (nfq_queue_verdict) before it returns. */
typedef void (*nfq_packet_fn)(void *arg, uint32_t id, unsigned hook, const uint8_t *pkt,
                              size_t len);

/* Binds queue `num`; fails when another process owns it (the kernel says
   EPERM), so that a second helper cannot take over the first one's queue;
   err then starts with NFQ_BIND_FAILED. */
#define NFQ_BIND_FAILED "cannot bind NFQUEUE"

struct nfq_queue *nfq_queue_open(uv_loop_t *loop, uint16_t num, nfq_packet_fn cb, void *arg,
                                 char *err, size_t errlen);
/* NF_ACCEPT, or NF_DROP when accept is 0; pkt non-NULL replaces the packet.
   0, or -1 (logged). */
int nfq_queue_verdict(struct nfq_queue *q, uint32_t id, int accept, const uint8_t *pkt, size_t len);
/* Unbinds; the memory goes once the loop has run the close. */
void nfq_queue_close(struct nfq_queue *q);

#endif
