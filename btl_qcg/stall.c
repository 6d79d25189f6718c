/* Stalled channels: a NAT or stateful firewall on the way that forgets a
 * connection (reboot, failover, conntrack -F, an idle timeout) drops the
 * packets coming from outside without a reset.  The end behind it only
 * receives, so nothing re-creates the mapping until its keepalive (tens of
 * seconds), and the sender's retransmissions, backed off meanwhile, pass
 * later still: the channel stalls for minutes.
 *
 * The sender knows first: its kernel has data in flight and hears no ACK at
 * all.  Once that has lasted btl_qcg_stall_timeout, the channel is aborted
 * and re-established through the resume path (a new connection makes new
 * state on the way; what the peer missed is sent again).  The kernel's view
 * (TCP_INFO) rather than our frames' acks: the peer's kernel acks while its
 * process computes and reads nothing, and answers window probes while its
 * buffer is full, so neither is taken for a stall (TCP_USER_TIMEOUT would
 * abort such a zero window too).  Only channels written to since the last
 * check found every byte acknowledged are looked at: idle ones cost nothing.
 *
 * A proxy acks for the peer, so a proxy's far leg stalls unseen by the
 * sender.  The end behind the NAT helps instead: a channel with frames the
 * peer has not acknowledged and nothing heard from it for a second sends an
 * ACK asking for the peer's (a heartbeat, 16 bytes): it maps the connection
 * again on the way out, and the peer's ack ends the heartbeats.  Direct
 * channels gain too: the peer's next retransmission passes, usually before
 * the stall timeout (whose new connection may wait for a site's services,
 * themselves slowed by the same router).
 */
#include "btl_qcg.h"

#include <stdio.h>

#include "tcp_stall.h"

/* Checks per stall timeout, and their interval's bounds. */
#define CHECKS_PER_TIMEOUT 4
#define CHECK_MIN_US 50000u
#define CHECK_MAX_US 500000u
/* Silence before a heartbeat: short, as each costs 16 bytes and the peer's
   ack (which frees our copies anyway) ends them; the NAT's mapping is back
   before the sender's retransmissions have backed off far. */
#define HEARTBEAT_US 1000000u

/* Whether ep's socket has had data in flight with no ACK at all for the
   timeout (tcp_stall.h). */
static bool stalled(struct btl_qcg_endpoint *ep, uint64_t now, uint64_t timeout_us)
{
    enum tcp_stall st = tcp_stall_check(ep->fd, now, timeout_us, &ep->stall_since_us);

    if (st == TCP_STALL_IDLE)
        ep->in_flight = false;
    return st == TCP_STALL_YES;
}

/* The heartbeat (see the top): frames written and not acknowledged, and no
   read got bytes since the last check. */
static void maybe_heartbeat(struct btl_qcg_endpoint *ep, uint64_t now, uint64_t after_us)
{
    const struct resendq_item *oldest = resendq_first(&ep->sq);
    bool owed = ep->resumed && oldest != NULL && oldest->seq <= ep->written_seq;

    if (!owed || ep->reads != ep->reads_seen) {
        ep->reads_seen = ep->reads;
        ep->quiet_since_us = 0;
        return;
    }
    if (ep->quiet_since_us == 0)
        ep->quiet_since_us = now;
    else if (now - ep->quiet_since_us >= after_us) {
        ep->quiet_since_us = now;
        btl_qcg_endpoint_heartbeat(ep);
    }
}

void btl_qcg_check_stalls(struct btl_qcg_module *m, uint64_t now)
{
    int ms = mca_btl_qcg_component.stall_timeout_ms;
    uint64_t timeout_us = (uint64_t)(ms > 0 ? ms : 0) * 1000u,
             every = timeout_us / CHECKS_PER_TIMEOUT;
    char why[192];

    if (timeout_us == 0)
        return;
    every = every < CHECK_MIN_US ? CHECK_MIN_US : every > CHECK_MAX_US ? CHECK_MAX_US : every;
    m->next_stall_check_us = now + every;
    for (size_t i = 0; i < m->neps; i++) {
        struct btl_qcg_endpoint *ep = m->eps[i];

        if (ep == NULL || ep->state != EP_CONNECTED || ep->fd < 0)
            continue;
        maybe_heartbeat(ep, now, timeout_us / 4 < HEARTBEAT_US ? timeout_us / 4 : HEARTBEAT_US);
        if (ep->state != EP_CONNECTED || !ep->in_flight || !stalled(ep, now, timeout_us))
            continue;
        snprintf(why, sizeof(why),
                 "no acknowledgement from the peer's host for %d ms (btl_qcg_stall_timeout): a "
                 "NAT or firewall on the way forgot the connection?",
                 ms);
        ep->stall_since_us = 0;
        btl_qcg_endpoint_abort(ep, why);
    }
}
