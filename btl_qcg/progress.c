/* Progress: one epoll set holds libqcgconn's accept descriptor, the pollable
   descriptors of pending connects and every socket.  Called from
   opal_progress, by any thread; never blocks (epoll_wait with a zero
   timeout, and a thread that finds progress running elsewhere returns). */
#include "btl_qcg.h"

#include <errno.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

/* The module progress runs for (one per process). */
struct btl_qcg_module *btl_qcg_active;

/* Events handled per call, and connections accepted per call: bounded so
   that one call stays short. */
#define EVENTS_MAX 64
#define ACCEPTS_MAX 16
/* How often pending connections are checked for their deadline. */
#define CHECK_INTERVAL_US 50000
/* At most one "cannot accept: out of descriptors" line per interval. */
#define SHORTAGE_LOG_INTERVAL_US 10000000u

int btl_qcg_watch(struct btl_qcg_module *m, int op, int fd, uint32_t events,
                  struct btl_qcg_watch *w)
{
    struct epoll_event ev = {.events = events, .data.ptr = w};

    if (fd < 0)
        return -1;
    if (epoll_ctl(m->epfd, op, fd, op == EPOLL_CTL_DEL ? NULL : &ev) < 0) {
        btl_qcg_log(2, "epoll_ctl(%d, fd %d): %s", op, fd, strerror(errno));
        return -1;
    }
    return 0;
}

static void accept_ready(struct btl_qcg_module *m)
{
    for (int i = 0; i < ACCEPTS_MAX; i++) {
        struct qcg_conn_info info;
        int fd = qcg_accept(m->ctx, &info);
        unsigned long refused = qcg_accept_refused(m->ctx);

        if (refused != m->refused) {
            /* The library drops refused peers quietly (a handshake late, with
               another secret, plain where we demand encryption): the peer
               hears why.  Said once per 10 s whatever the verbosity: a peer
               can repeat it at will. */
            unsigned left_out = 0;

            m->refused = refused;
            if (ratelimit_ok(&m->refused_log, btl_qcg_now_us() / 1000u, 10000, &left_out))
                btl_qcg_log(0,
                            "an incoming connection was refused: %s (%u more since the last "
                            "such line)",
                            qcg_last_error(m->ctx), left_out);
        }
        if (fd == QCG_EAGAIN)
            return;
        if (fd == QCG_ESYS &&
            (qcg_last_errno(m->ctx) == EMFILE || qcg_last_errno(m->ctx) == ENFILE)) {
            /* The library rests its listener a moment; peers wait meanwhile. */
            uint64_t now = btl_qcg_now_us();

            if (now >= m->next_shortage_log_us) {
                m->next_shortage_log_us = now + SHORTAGE_LOG_INTERVAL_US;
                btl_qcg_log(0,
                            "cannot accept connections: %s (raise the descriptor limit, ulimit -n)",
                            qcg_last_error(m->ctx));
            }
            return;
        }
        if (fd < 0) {
            /* A bad or replayed hello: the library dropped it; we go on. */
            btl_qcg_log(2, "an incoming connection was dropped: %s: %s", qcg_strerror(fd),
                        qcg_last_error(m->ctx));
            continue;
        }
        btl_qcg_incoming(m, fd, &info);
    }
}

static void check_deadlines(struct btl_qcg_module *m, uint64_t now)
{
    m->next_check_us = now + CHECK_INTERVAL_US;
    for (size_t i = 0; i < m->neps && m->pending > 0; i++) {
        struct btl_qcg_endpoint *ep = m->eps[i];

        if (ep != NULL)
            btl_qcg_endpoint_check_deadline(ep, now);
    }
}

/* One thread at a time runs progress, so that only it reads sockets (the
   frames it delivers stay put in the receive buffer).  The same thread,
   re-entering from a PML callback, returns too: the outer call carries on. */
static bool progress_enter(struct btl_qcg_module *m)
{
    if (opal_using_threads())
        return opal_mutex_trylock(&m->progress_lock) == 0;
    if (m->progressing)
        return false;
    m->progressing = true;
    return true;
}

static void progress_leave(struct btl_qcg_module *m)
{
    if (opal_using_threads())
        opal_mutex_unlock(&m->progress_lock);
    else
        m->progressing = false;
}

int btl_qcg_progress(void)
{
    struct btl_qcg_module *m = btl_qcg_active;
    struct epoll_event evs[EVENTS_MAX];
    int n;

    if (m == NULL || !progress_enter(m))
        return 0;
    btl_qcg_lock(m);
    n = epoll_wait(m->epfd, evs, EVENTS_MAX, 0);
    for (int i = 0; i < n; i++) {
        struct btl_qcg_watch *w = evs[i].data.ptr;

        if (w->kind == WATCH_ACCEPT)
            accept_ready(m);
        else
            btl_qcg_endpoint_event(w->endpoint, w->kind, evs[i].events);
    }
    if (m->pending > 0 || mca_btl_qcg_component.stall_timeout_ms > 0) {
        uint64_t now = btl_qcg_now_us();

        if (m->pending > 0 && now >= m->next_check_us)
            check_deadlines(m, now);
        if (now >= m->next_stall_check_us)
            btl_qcg_check_stalls(m, now);
    }
    btl_qcg_start_queued(m);
    btl_qcg_unlock(m);
    progress_leave(m);
    return n > 0 ? n : 0;
}
