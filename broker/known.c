/* See known.h. */
#include "known.h"

#include "broker.h"
#include "log.h"
#include "registry.h"
#include "soap_server.h"

static void know(struct soap_server *srv, const char *cluster, const char *addr)
{
    char why[200];
    if (soap_server_know(srv, addr, why, sizeof(why)) < 0)
        log_warnx("cluster %s: frontend address %s not known before it logs in: %s", cluster, addr,
                  why);
}

static void know_each(void *arg, const char *cluster, const char (*addrs)[QCG_ADDR_MAX], int n)
{
    for (int i = 0; i < n; i++)
        know(arg, cluster, addrs[i]);
}

void broker_know_frontends(struct broker *b)
{
    struct soap_server *srv = __atomic_load_n(&b->server, __ATOMIC_ACQUIRE);
    if (srv != NULL)
        registry_frontends_each(b->reg, know_each, srv);
}

void broker_know_cluster(struct broker *b, const struct reg_cluster *c)
{
    struct soap_server *srv = __atomic_load_n(&b->server, __ATOMIC_ACQUIRE);
    for (int i = 0; srv != NULL && i < c->npublic; i++)
        know(srv, c->name, c->public_addr[i]);
}
