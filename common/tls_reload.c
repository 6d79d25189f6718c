/*
 * The TLS contexts are made by gSOAP (a server's once, from the files at
 * start; a client's from no file, whenever one is needed) and shared by
 * every connection's thread, so a reload does not touch them: each
 * handshake takes the set in force when it starts (an info callback at
 * SSL_CB_HANDSHAKE_START keeps a reference in the SSL object and sets its
 * trust store), and presents its certificate and key from the certificate
 * callback.  A reload builds a whole new set and swaps one pointer, so no
 * handshake ever sees a new certificate with an old key; the SSL objects of
 * live connections hold their old set until they are freed.
 */
#include "tls_reload.h"

#include <errno.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crl.h"
#include "identity.h"
#include "log.h"
#include "soap_server.h"
#include "tls_peer_note.h"
#include "x509_text.h"

/* What a handshake uses; immutable once made, freed with its last reference. */
struct creds {
    atomic_int refs;
    X509 *cert;
    STACK_OF(X509) * chain; /* the certificates after the first in the file */
    EVP_PKEY *key;
    X509_STORE *store;              /* the CAs trusted, with the CRL lookup */
    STACK_OF(X509_NAME) * ca_names; /* what a server asks client certificates of */
};

/* The files of one or more contexts.  Sets live as long as the process. */
struct tls_set {
    char *certkey, *ca;
    struct tls_set *next;
    /* Guarded by lock: */
    bool server, client; /* the sides it is used on */
    struct creds *current;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
/* One reload at a time: the last one read is the one in force. */
static pthread_mutex_t reload_lock = PTHREAD_MUTEX_INITIALIZER;
static struct tls_set *sets; /* guarded by lock */
static pthread_once_t index_once = PTHREAD_ONCE_INIT;
static int ctx_index = -1; /* SSL_CTX -> struct tls_set */
static int ssl_index = -1; /* SSL -> struct creds (a reference) */

static struct creds *creds_ref(struct creds *c)
{
    atomic_fetch_add(&c->refs, 1);
    return c;
}

static void creds_unref(struct creds *c)
{
    if (c == NULL || atomic_fetch_sub(&c->refs, 1) != 1)
        return;
    X509_free(c->cert);
    sk_X509_pop_free(c->chain, X509_free);
    EVP_PKEY_free(c->key);
    X509_STORE_free(c->store);
    sk_X509_NAME_pop_free(c->ca_names, X509_NAME_free);
    free(c);
}

static void ssl_creds_free(void *parent, void *ptr, CRYPTO_EX_DATA *ad, int idx, long argl,
                           void *argp)
{
    (void)parent, (void)ad, (void)idx, (void)argl, (void)argp;
    creds_unref(ptr);
}

/* SSL_dup copies the pointer: one more reference. */
static int ssl_creds_dup(CRYPTO_EX_DATA *to, const CRYPTO_EX_DATA *from, void **from_d, int idx,
                         long argl, void *argp)
{
    (void)to, (void)from, (void)idx, (void)argl, (void)argp;
    if (*from_d != NULL)
        creds_ref(*from_d);
    return 1;
}

static void make_indexes(void)
{
    ctx_index = SSL_CTX_get_ex_new_index(0, NULL, NULL, NULL, NULL);
    ssl_index = SSL_get_ex_new_index(0, NULL, NULL, ssl_creds_dup, ssl_creds_free);
}

/* An encrypted key is refused rather than asked for on a terminal. */
static int no_passphrase(char *buf, int size, int rwflag, void *u)
{
    (void)buf, (void)size, (void)rwflag, (void)u;
    return 0;
}

/* Certificate, chain and key of the PEM file path into c. */
static int read_certkey(struct creds *c, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
        return -1;
    }
    int rc = -1;
    c->cert = PEM_read_X509(f, NULL, no_passphrase, NULL);
    c->chain = sk_X509_new_null();
    if (c->cert == NULL) {
        snprintf(err, errlen, "%s holds no PEM certificate", path);
    } else if (c->chain == NULL) {
        snprintf(err, errlen, "out of memory");
    } else {
        X509 *x;
        while ((x = PEM_read_X509(f, NULL, no_passphrase, NULL)) != NULL)
            if (sk_X509_push(c->chain, x) <= 0)
                X509_free(x);
        rewind(f);
        c->key = PEM_read_PrivateKey(f, NULL, no_passphrase, NULL);
        if (c->key == NULL)
            snprintf(err, errlen, "%s holds no private key (or only an encrypted one)", path);
        else if (X509_check_private_key(c->cert, c->key) != 1)
            snprintf(err, errlen, "the key in %s is not the one of its certificate", path);
        else
            rc = 0;
    }
    fclose(f);
    return rc;
}

/* The CAs of path into c, and their names (for a server). */
static int read_ca(struct creds *c, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        snprintf(err, errlen, "cannot read the CA file %s: %s", path, strerror(errno));
        return -1;
    }
    fclose(f);
    c->store = X509_STORE_new();
    if (c->store == NULL || X509_STORE_load_file(c->store, path) != 1) {
        snprintf(err, errlen, "the CA file %s holds no PEM certificate", path);
        return -1;
    }
    crl_store_hook(c->store);
    if ((c->ca_names = SSL_load_client_CA_file(path)) == NULL) {
        snprintf(err, errlen, "the CA file %s holds no CA name", path);
        return -1;
    }
    return 0;
}

/* Whether c->cert may replace old's on the sides given: issued by a CA of
   c->store and valid now, with the key usage of each side, and naming the
   same service. */
static int check_creds(const struct creds *c, const struct creds *old, bool server, bool client,
                       const char *path, const char *ca, char *err, size_t errlen)
{
    char why[200];
    X509_STORE_CTX *v = X509_STORE_CTX_new();
    int ok = v != NULL && X509_STORE_CTX_init(v, c->store, c->cert, c->chain) == 1 &&
             X509_verify_cert(v) == 1;
    if (!ok) {
        int code = v ? X509_STORE_CTX_get_error(v) : X509_V_ERR_OUT_OF_MEM;
        snprintf(err, errlen, "the certificate in %s does not verify with the CA file %s: %s", path,
                 ca, X509_verify_cert_error_string(code));
    }
    X509_STORE_CTX_free(v);
    if (!ok)
        return -1;
    if ((server && identity_cert_usage(c->cert, true, why, sizeof(why)) < 0) ||
        (client && identity_cert_usage(c->cert, false, why, sizeof(why)) < 0)) {
        snprintf(err, errlen, "%s: %s", path, why);
        return -1;
    }
    struct identity was, is;
    char was_text[2 * QCG_NAME_MAX + 16], is_text[2 * QCG_NAME_MAX + 16];
    if (identity_from_cert(old->cert, &was) < 0)
        return 0; /* not a qcg service's: nothing to compare */
    if (identity_from_cert(c->cert, &is) < 0 || is.role != was.role ||
        strcmp(is.name, was.name) != 0) {
        snprintf(err, errlen, "%s names %s, not %s", path,
                 is.role != QCG_ROLE_NONE ? identity_text(&is, is_text, sizeof(is_text))
                                          : "no qcg service",
                 identity_text(&was, was_text, sizeof(was_text)));
        return -1;
    }
    return 0;
}

/* A new set from the files; old NULL at the first load (nothing to compare
   with), else every check of check_creds.  NULL with a reason in err. */
static struct creds *creds_load(const struct tls_set *set, bool server, bool client,
                                const struct creds *old, char *err, size_t errlen)
{
    struct creds *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    atomic_init(&c->refs, 1);
    if (read_certkey(c, set->certkey, err, errlen) < 0 || read_ca(c, set->ca, err, errlen) < 0 ||
        (old != NULL &&
         (check_creds(c, old, server, client, set->certkey, set->ca, err, errlen) < 0 ||
          crl_check_file(set->ca, err, errlen) < 0))) {
        creds_unref(c);
        c = NULL;
    }
    /* This thread may be the one of a connection: no stale errors for it. */
    ERR_clear_error();
    return c;
}

/* "helper c1/n1, serial 1A2B, valid until DATE" */
static void creds_text(const struct creds *c, char *buf, size_t len)
{
    struct identity id;
    char who[2 * QCG_NAME_MAX + 16] = "", serial[80], until[64];
    if (identity_from_cert(c->cert, &id) == 0)
        snprintf(who, sizeof(who), "%s %s, ", role_name(id.role), id.name);
    x509_serial_text(c->cert, serial, sizeof(serial));
    x509_time_text(X509_get0_notAfter(c->cert), until, sizeof(until));
    snprintf(buf, len, "%sserial %s, valid until %s", who, serial, until);
}

/* At the start of each handshake: the set in force, kept for this
   connection, and the CAs it trusts.  And at every alert the peer sends:
   a fatal one is noted for the line that reports the failure. */
static void on_handshake(const SSL *cssl, int where, int ret)
{
    tls_note_alert(where, ret);
    if (!(where & SSL_CB_HANDSHAKE_START))
        return;
    /* OpenSSL passes the connection's own (mutable) object as const. */
    SSL *ssl = (SSL *)cssl;
    struct tls_set *set = SSL_CTX_get_ex_data(SSL_get_SSL_CTX(ssl), ctx_index);
    if (set == NULL || SSL_get_ex_data(ssl, ssl_index) != NULL)
        return; /* not ours, or a later handshake of this connection */
    pthread_mutex_lock(&lock);
    struct creds *c = creds_ref(set->current);
    pthread_mutex_unlock(&lock);
    if (SSL_set_ex_data(ssl, ssl_index, c) != 1) {
        creds_unref(c);
        return; /* the certificate callback refuses the handshake */
    }
    SSL_set1_verify_cert_store(ssl, c->store);
    if (SSL_is_server(ssl)) {
        STACK_OF(X509_NAME) *names = SSL_dup_CA_list(c->ca_names);
        if (names != NULL)
            SSL_set_client_CA_list(ssl, names);
    }
}

/* When the certificate is needed (a server at the ClientHello, a client at
   the server's request): the one of the set taken above, with its key. */
static int on_certificate(SSL *ssl, void *arg)
{
    (void)arg;
    const struct creds *c = SSL_get_ex_data(ssl, ssl_index);
    if (c == NULL) {
        log_warnx("TLS handshake without its certificate set (out of memory?): refused");
        return 0;
    }
    /* Cleared first: the context's certificate from the start would stay
       beside a renewed one of another key type, and could be chosen. */
    SSL_certs_clear(ssl);
    return SSL_use_cert_and_key(ssl, c->cert, c->key, c->chain, 1) == 1;
}

/* An error line when crl revokes set's certificate: peers that load the
   same list refuse this service, and so does the service its own
   --stats.  crl_path NULL: the CRL loaded at start. */
static void own_revoked(const struct tls_set *set, const X509_CRL *crl, const char *crl_path)
{
    if (crl == NULL || !crl_lists(crl, set->current->cert))
        return;
    char text[256];
    creds_text(set->current, text, sizeof(text));
    log_error("the CRL%s%s revokes this service's own certificate %s (%s): every peer that loads "
              "this CRL refuses it, and so does this service its own --stats; issue a new "
              "certificate (qcg-certs issue --force) and reload",
              crl_path ? " " : "", crl_path ? crl_path : "", set->certkey, text);
}

void tls_reload_own_revoked(const X509_CRL *crl, const char *crl_path)
{
    pthread_mutex_lock(&lock);
    for (struct tls_set *s = sets; s != NULL; s = s->next)
        own_revoked(s, crl, crl_path);
    pthread_mutex_unlock(&lock);
}

/* The set of these files, made and loaded at the first call; NULL with a
   reason in err.  Called with lock held. */
static struct tls_set *set_of(const struct tls_files *tls, bool server, char *err, size_t errlen)
{
    for (struct tls_set *s = sets; s != NULL; s = s->next)
        if (strcmp(s->certkey, tls->certkey) == 0 && strcmp(s->ca, tls->ca) == 0)
            return s;
    struct tls_set *s = calloc(1, sizeof(*s));
    if (s == NULL || (s->certkey = strdup(tls->certkey)) == NULL ||
        (s->ca = strdup(tls->ca)) == NULL) {
        snprintf(err, errlen, "out of memory");
    } else {
        s->current = creds_load(s, server, !server, NULL, err, errlen);
        if (s->current != NULL) {
            char text[256];
            creds_text(s->current, text, sizeof(text));
            /* Debug: command-line tools load a set too, and print info. */
            log_debug("certificate %s: %s", s->certkey, text);
            X509_CRL *crl = crl_current();
            own_revoked(s, crl, NULL);
            X509_CRL_free(crl);
            s->next = sets;
            sets = s;
            return s;
        }
    }
    if (s != NULL) {
        free(s->certkey);
        free(s->ca);
        free(s);
    }
    return NULL;
}

int tls_reload_attach(SSL_CTX *ctx, const struct tls_files *tls, bool server, char *err,
                      size_t errlen)
{
    pthread_once(&index_once, make_indexes);
    if (ctx == NULL || ctx_index < 0 || ssl_index < 0) {
        snprintf(err, errlen, "TLS setup: no context to load %s into", tls->certkey);
        return -1;
    }
    pthread_mutex_lock(&lock);
    struct tls_set *set = set_of(tls, server, err, errlen);
    if (set != NULL) {
        set->server |= server;
        set->client |= !server;
    }
    pthread_mutex_unlock(&lock);
    if (set == NULL)
        return -1;
    SSL_CTX_set_ex_data(ctx, ctx_index, set);
    SSL_CTX_set_info_callback(ctx, on_handshake);
    SSL_CTX_set_cert_cb(ctx, on_certificate, NULL);
    if (server) {
        /* Neither session IDs (TLS 1.2) nor tickets (1.3): every client
           shows its certificate again, to the CRL and after a reload. */
        SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
        SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET);
        SSL_CTX_set_num_tickets(ctx, 0);
    }
    return 0;
}

/* Reads set's files again; swaps them in or logs why not. */
static int reload_one(struct tls_set *set)
{
    pthread_mutex_lock(&lock);
    bool server = set->server, client = set->client;
    struct creds *old = creds_ref(set->current);
    pthread_mutex_unlock(&lock);

    char err[512], text[256];
    struct creds *fresh = creds_load(set, server, client, old, err, sizeof(err));
    if (fresh == NULL) {
        creds_text(old, text, sizeof(text));
        log_error("SIGHUP: certificate not reloaded: %s; still using %s (%s)", err, set->certkey,
                  text);
        creds_unref(old);
        return -1;
    }
    pthread_mutex_lock(&lock);
    struct creds *replaced = set->current;
    set->current = fresh;
    pthread_mutex_unlock(&lock);
    creds_text(fresh, text, sizeof(text));
    log_info("reloaded certificate %s: %s; CA file %s", set->certkey, text, set->ca);
    creds_unref(replaced);
    creds_unref(old);
    return 0;
}

int tls_reload_all(void)
{
    int refused = 0;
    pthread_mutex_lock(&reload_lock);
    pthread_mutex_lock(&lock);
    struct tls_set *set = sets;
    pthread_mutex_unlock(&lock);
    /* Sets are only ever added at the head: the rest of the list is fixed. */
    for (; set != NULL; set = set->next)
        refused += reload_one(set) < 0;
    pthread_mutex_unlock(&reload_lock);
    return refused;
}
