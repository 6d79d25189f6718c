/*
 * A CRL loaded at a reload takes effect on live connections too: each
 * connection whose kept certificate it revokes is shut down at once (its
 * peer reads the end of the connection; a thread waiting in a long-poll
 * finds the socket dead when it answers), and a peer left with no
 * connection of a valid certificate is handed to the daemon, which drops
 * its state (soap_server_on_revoked).  A peer renewed before its old
 * certificate was revoked keeps its state and its new connections.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "crl.h"
#include "log.h"
#include "soap_server.h"
#include "soap_server_internal.h"
#include "x509_text.h"

bool soap_server_revoked_now(const struct conn *c)
{
    X509_CRL *crl = crl_current();
    bool revoked = crl_lists(crl, c->cert);
    X509_CRL_free(crl);
    return revoked;
}

/* One revoked certificate's peer: its connections closed, whether another
   connection of the same identity, of a valid certificate, lives on. */
struct cut {
    struct identity id;
    char serial[80];
    int closed;
    bool still_connected;
};

static bool same_identity(const struct identity *a, const struct identity *b)
{
    return a->role == b->role && strcmp(a->name, b->name) == 0;
}

static void on_crl(void *arg, const X509_CRL *crl)
{
    struct soap_server *srv = arg;
    struct cut *cuts = NULL;
    size_t n = 0, cap = 0;
    pthread_mutex_lock(&srv->lock);
    for (struct dlink *l = srv->conns.head; l != NULL; l = l->next) {
        struct conn *c = dlist_entry(l, struct conn, link);
        if (c->cert == NULL || c->revoked || !crl_lists(crl, c->cert))
            continue;
        c->revoked = true;
        if (c->fd >= 0)
            shutdown(c->fd, SHUT_RDWR);
        size_t k = 0;
        while (k < n && !same_identity(&cuts[k].id, &c->identity))
            k++;
        if (k == n) {
            if (n == cap) {
                size_t ncap = cap ? 2 * cap : 8;
                struct cut *more = realloc(cuts, ncap * sizeof(*cuts));
                if (more == NULL)
                    continue; /* closed all the same; its state stays */
                cuts = more;
                cap = ncap;
            }
            memset(&cuts[n], 0, sizeof(cuts[n]));
            cuts[n].id = c->identity;
            x509_serial_text(c->cert, cuts[n].serial, sizeof(cuts[n].serial));
            n++;
        }
        cuts[k].closed++;
    }
    for (struct dlink *l = srv->conns.head; l != NULL && n > 0; l = l->next) {
        const struct conn *c = dlist_entry(l, struct conn, link);
        if (c->cert == NULL || c->revoked)
            continue;
        for (size_t k = 0; k < n; k++)
            if (same_identity(&cuts[k].id, &c->identity))
                cuts[k].still_connected = true;
    }
    pthread_mutex_unlock(&srv->lock);

    for (size_t k = 0; k < n; k++) {
        const struct cut *t = &cuts[k];
        log_warnx("CRL: %s %s (certificate serial %s) is revoked: %d connection%s closed%s",
                  role_name(t->id.role), t->id.name, t->serial, t->closed,
                  t->closed == 1 ? "" : "s",
                  t->still_connected ? "; it stays connected with another certificate" : "");
        if (!t->still_connected && srv->on_revoked != NULL)
            srv->on_revoked(srv->user, &t->id);
    }
    free(cuts);
}

void soap_server_watch_crl(struct soap_server *srv)
{
    if (crl_watch(on_crl, srv) < 0)
        log_warnx("too many servers in this process: a CRL reload will not close their "
                  "revoked peers' connections");
}

void soap_server_unwatch_crl(struct soap_server *srv)
{
    crl_unwatch(on_crl, srv);
}
