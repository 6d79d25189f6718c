/* gSOAP's open hook on every upstream context (upstream_internal.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "identity.h"
#include "upstream_internal.h"

/*
 * Every upstream connection goes through gSOAP's open hook, installed as a
 * plugin on each context: the frontend's certificate must name our own
 * cluster, so the job verifiers we relay go to nobody else, even another
 * service of the same grid CA.
 */
static const char plugin_id[] = "qcg-helper-upstream";

struct hooks {
    struct upstream *u;
    SOAP_SOCKET (*next_open)(struct soap *, const char *, const char *, int);
};

static int plugin_copy(struct soap *soap, struct soap_plugin *dst, struct soap_plugin *src)
{
    struct hooks *h = malloc(sizeof(*h));

    (void)soap;
    if (h == NULL)
        return SOAP_EOM;
    *h = *(struct hooks *)src->data;
    *dst = *src;
    dst->data = h;
    return SOAP_OK;
}

static void plugin_delete(struct soap *soap, struct soap_plugin *p)
{
    (void)soap;
    free(p->data);
}

static SOAP_SOCKET hook_open(struct soap *soap, const char *endpoint, const char *host, int port);

static int plugin_init(struct soap *soap, struct soap_plugin *p, void *arg)
{
    struct hooks *h = malloc(sizeof(*h));

    if (h == NULL)
        return SOAP_EOM;
    h->u = arg;
    h->next_open = soap->fopen;
    soap->fopen = hook_open;
    p->id = plugin_id;
    p->data = h;
    p->fcopy = plugin_copy;
    p->fdelete = plugin_delete;
    return SOAP_OK;
}

/* Installs the hooks on a context once; -1 when out of memory. */
int hook(struct upstream *u, struct soap *soap)
{
    if (soap_lookup_plugin(soap, plugin_id) != NULL)
        return 0;
    return soap_register_plugin_arg(soap, plugin_init, u) == SOAP_OK ? 0 : -1;
}

/* 0 when the TLS peer is the frontend of our cluster; -1 with the reason. */
static int check_frontend(struct upstream *u, struct soap *soap, char *why, size_t whylen)
{
    struct identity id;

    if (soap->ssl == NULL || identity_from_ssl(soap->ssl, &id) < 0) {
        snprintf(why, whylen, "the peer presented no qcg-connect certificate");
        return -1;
    }
    if (id.role != QCG_ROLE_FRONTEND || strcmp(id.cluster, u->cfg->cluster) != 0) {
        snprintf(why, whylen, "the peer is %s %s, not the frontend of cluster %s",
                 role_name(id.role), id.name, u->cfg->cluster);
        return -1;
    }
    return 0;
}

static SOAP_SOCKET hook_open(struct soap *soap, const char *endpoint, const char *host, int port)
{
    struct hooks *h = soap_lookup_plugin(soap, plugin_id);
    struct upstream *u = h->u;
    SOAP_SOCKET fd = h->next_open(soap, endpoint, host, port);
    char why[256];

    if (!soap_valid_socket(fd))
        return fd;
    if (check_frontend(u, soap, why, sizeof(why)) < 0) {
        /* Nothing was sent yet: close (TLS and socket) and fail the call. */
        soap->socket = fd;
        soap->fclose(soap);
        soap->socket = SOAP_INVALID_SOCKET;
        soap->keep_alive = 0;
        /* gSOAP keeps the pointer: the text must live in its memory. */
        soap_set_receiver_error(soap, soap_strdup(soap, why), NULL, SOAP_SSL_ERROR);
        return SOAP_INVALID_SOCKET;
    }
    return fd;
}
