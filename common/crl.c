/*
 * One CRL per process behind a lock.  The TLS contexts do not hold it in
 * their X509_STORE (a store's objects cannot be replaced while handshakes
 * use it): their store asks lookup_crls() for it, so a reload is a pointer
 * swap and every handshake after it sees the new list.  No CRL found for the
 * issuer fails the handshake (OpenSSL: "unable to get certificate CRL").
 */
#include "crl.h"

#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "tls_reload.h"
#include "x509_text.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char *crl_path; /* guarded by lock, as are the two below */
static char *ca_path;
static X509_CRL *current;
static bool accept_older; /* crl-accept-older: a reload takes any CRL the CA signed */

/* Who hears of a new CRL (crl_watch): the servers and long-poll clients
   that cut revoked peers. */
#define CRL_WATCHERS 32
struct watcher {
    void (*fn)(void *, const X509_CRL *);
    void *arg;
};
static pthread_mutex_t watch_lock = PTHREAD_MUTEX_INITIALIZER;
static struct watcher watchers[CRL_WATCHERS]; /* guarded by watch_lock */

static X509 *read_cert(const char *path)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return NULL;
    X509 *x = PEM_read_X509(f, NULL, NULL, NULL);
    fclose(f);
    return x;
}

/* The CRL in path, signed by the CA in ca; NULL with a reason in err. */
static X509_CRL *load(const char *path, const char *ca, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        snprintf(err, errlen, "crl: cannot read %s: %m", path);
        return NULL;
    }
    X509_CRL *crl = PEM_read_X509_CRL(f, NULL, NULL, NULL);
    fclose(f);
    if (crl == NULL) {
        snprintf(err, errlen, "crl: %s holds no PEM CRL", path);
        return NULL;
    }
    X509 *cax = read_cert(ca);
    EVP_PKEY *key = cax ? X509_get0_pubkey(cax) : NULL;
    if (key == NULL) {
        snprintf(err, errlen, "crl: cannot read the CA certificate %s", ca);
    } else if (X509_NAME_cmp(X509_CRL_get_issuer(crl), X509_get_subject_name(cax)) != 0 ||
               X509_CRL_verify(crl, key) != 1) {
        snprintf(err, errlen, "crl: %s is not signed by the CA in %s", path, ca);
    } else {
        X509_free(cax);
        return crl;
    }
    X509_free(cax);
    X509_CRL_free(crl);
    return NULL;
}

/* "N revoked, next update DATE" and a warning when that date has passed:
   OpenSSL then refuses every certificate. */
static void crl_report(const char *what, const char *path, X509_CRL *crl)
{
    STACK_OF(X509_REVOKED) *revoked = X509_CRL_get_REVOKED(crl);
    int n = revoked ? sk_X509_REVOKED_num(revoked) : 0;
    const ASN1_TIME *next = X509_CRL_get0_nextUpdate(crl);
    char date[64];
    x509_time_text(next, date, sizeof(date));
    log_info("%s CRL %s: %d revoked, next update %s", what, path, n, date);
    if (next != NULL && X509_cmp_time(next, NULL) < 0)
        log_warnx("CRL %s expired on %s: every peer certificate is refused until a fresh one "
                  "(qcg-certs crl) is loaded",
                  path, date);
}

/* The CRL number of crl; -1 when it has none. */
static long crl_number(X509_CRL *crl)
{
    ASN1_INTEGER *n = X509_CRL_get_ext_d2i(crl, NID_crl_number, NULL, NULL);
    long v = n != NULL ? ASN1_INTEGER_get(n) : -1;
    ASN1_INTEGER_free(n);
    return v;
}

/* Why fresh must not replace old (a backup restored, a copy from the wrong
   directory): expired, or older by its number or its thisUpdate.  Loading
   it would refuse every peer, or let revoked certificates back in.  0 when
   it may. */
static int stale(X509_CRL *fresh, X509_CRL *old, char *why, size_t len)
{
    char date[64];
    const ASN1_TIME *next = X509_CRL_get0_nextUpdate(fresh);
    if (next != NULL && X509_cmp_time(next, NULL) < 0) {
        x509_time_text(next, date, sizeof(date));
        snprintf(why, len, "it expired on %s", date);
        return -1;
    }
    if (old == NULL)
        return 0;
    long nf = crl_number(fresh), no = crl_number(old);
    if (nf >= 0 && no >= 0) {
        if (nf >= no)
            return 0;
        snprintf(why, len, "it is older than the CRL in force (CRL number %ld < %ld)", nf, no);
        return -1;
    }
    int day, sec;
    if (ASN1_TIME_diff(&day, &sec, X509_CRL_get0_lastUpdate(old),
                       X509_CRL_get0_lastUpdate(fresh)) == 1 &&
        (day < 0 || sec < 0)) {
        x509_time_text(X509_CRL_get0_lastUpdate(fresh), date, sizeof(date));
        snprintf(why, len, "it is older than the CRL in force (issued %s)", date);
        return -1;
    }
    return 0;
}

bool crl_lists(const X509_CRL *crl, X509 *cert)
{
    X509_REVOKED *rev = NULL;
    return crl != NULL && cert != NULL &&
           X509_NAME_cmp(X509_CRL_get_issuer(crl), X509_get_issuer_name(cert)) == 0 &&
           X509_CRL_get0_by_cert((X509_CRL *)crl, &rev, cert) == 1;
}

X509_CRL *crl_current(void)
{
    pthread_mutex_lock(&lock);
    X509_CRL *c = current != NULL && X509_CRL_up_ref(current) == 1 ? current : NULL;
    pthread_mutex_unlock(&lock);
    return c;
}

void crl_set_accept_older(bool yes)
{
    pthread_mutex_lock(&lock);
    accept_older = yes;
    pthread_mutex_unlock(&lock);
}

int crl_watch(void (*fn)(void *, const X509_CRL *), void *arg)
{
    int rc = -1;
    pthread_mutex_lock(&watch_lock);
    for (int i = 0; i < CRL_WATCHERS && rc < 0; i++) {
        if (watchers[i].fn == NULL) {
            watchers[i] = (struct watcher){fn, arg};
            rc = 0;
        }
    }
    pthread_mutex_unlock(&watch_lock);
    return rc;
}

void crl_unwatch(void (*fn)(void *, const X509_CRL *), void *arg)
{
    pthread_mutex_lock(&watch_lock);
    for (int i = 0; i < CRL_WATCHERS; i++)
        if (watchers[i].fn == fn && watchers[i].arg == arg)
            watchers[i] = (struct watcher){NULL, NULL};
    pthread_mutex_unlock(&watch_lock);
}

/* Tells the watchers; watch_lock is held so that none is freed meanwhile. */
static void tell_watchers(const X509_CRL *crl)
{
    pthread_mutex_lock(&watch_lock);
    for (int i = 0; i < CRL_WATCHERS; i++)
        if (watchers[i].fn != NULL)
            watchers[i].fn(watchers[i].arg, crl);
    pthread_mutex_unlock(&watch_lock);
}

static STACK_OF(X509_CRL) * lookup_crls(const X509_STORE_CTX *ctx, const X509_NAME *issuer)
{
    (void)ctx;
    STACK_OF(X509_CRL) *sk = sk_X509_CRL_new_null();
    if (sk == NULL)
        return NULL;
    pthread_mutex_lock(&lock);
    if (current != NULL && X509_NAME_cmp(X509_CRL_get_issuer(current), issuer) == 0 &&
        X509_CRL_up_ref(current) == 1 && sk_X509_CRL_push(sk, current) <= 0)
        X509_CRL_free(current);
    pthread_mutex_unlock(&lock);
    return sk;
}

void crl_store_hook(X509_STORE *store)
{
    X509_STORE_set_lookup_crls(store, lookup_crls);
}

int crl_attach(SSL_CTX *ctx, const char *path, const char *ca, char *err, size_t errlen)
{
    if (path == NULL || path[0] == '\0')
        return 0;
    if (ctx == NULL) {
        snprintf(err, errlen, "crl: no TLS context to attach %s to", path);
        return -1;
    }
    pthread_mutex_lock(&lock);
    int rc = 0;
    if (crl_path == NULL) {
        X509_CRL *crl = load(path, ca, err, errlen);
        crl_path = crl ? strdup(path) : NULL;
        ca_path = crl ? strdup(ca) : NULL;
        if (crl == NULL || crl_path == NULL || ca_path == NULL) {
            if (crl != NULL)
                snprintf(err, errlen, "out of memory");
            X509_CRL_free(crl);
            free(crl_path);
            free(ca_path);
            crl_path = ca_path = NULL;
            rc = -1;
        } else {
            current = crl;
            crl_report("loaded", path, crl);
        }
    } else if (strcmp(crl_path, path) != 0) {
        snprintf(err, errlen, "crl: %s is loaded already; one CRL per process", crl_path);
        rc = -1;
    }
    pthread_mutex_unlock(&lock);
    if (rc < 0)
        return -1;

    X509_STORE *store = SSL_CTX_get_cert_store(ctx);
    crl_store_hook(store);
    X509_STORE_set_flags(store, X509_V_FLAG_CRL_CHECK);
    X509_VERIFY_PARAM_set_flags(SSL_CTX_get0_param(ctx), X509_V_FLAG_CRL_CHECK);
    return 0;
}

int crl_check_file(const char *ca, char *err, size_t errlen)
{
    pthread_mutex_lock(&lock);
    X509_CRL *crl = crl_path != NULL ? load(crl_path, ca, err, errlen) : NULL;
    int rc = crl_path == NULL || crl != NULL ? 0 : -1;
    pthread_mutex_unlock(&lock);
    X509_CRL_free(crl);
    return rc;
}

void crl_reload(bool skip)
{
    pthread_mutex_lock(&lock);
    if (crl_path == NULL) {
        pthread_mutex_unlock(&lock);
        log_info("SIGHUP: no CRL configured: the crl setting is read at start only; restart the "
                 "service to load one (crl = PATH)");
        return;
    }
    if (skip) {
        log_warnx("SIGHUP: CRL %s not reloaded either: it stays with the CAs in force", crl_path);
        pthread_mutex_unlock(&lock);
        return;
    }
    char err[512], why[256];
    X509_CRL *crl = load(crl_path, ca_path, err, sizeof(err));
    if (crl == NULL) {
        log_warnx("SIGHUP: %s; keeping the CRL loaded before", err);
        pthread_mutex_unlock(&lock);
        return;
    }
    if (!accept_older && stale(crl, current, why, sizeof(why)) < 0) {
        long n = crl_number(current);
        char date[64];
        x509_time_text(X509_CRL_get0_lastUpdate(current), date, sizeof(date));
        log_error("SIGHUP: CRL %s NOT loaded: %s; the CRL in force stays (CRL number %ld, issued "
                  "%s). Copy the CA's current crl.pem (qcg-certs crl writes a fresh one), or set "
                  "crl-accept-older = yes and restart to take this one anyway",
                  crl_path, why, n, date);
        X509_CRL_free(crl);
        pthread_mutex_unlock(&lock);
        return;
    }
    X509_CRL_free(current);
    current = crl;
    X509_CRL_up_ref(crl);
    crl_report("reloaded", crl_path, crl);
    char *path = strdup(crl_path);
    pthread_mutex_unlock(&lock);
    tls_reload_own_revoked(crl, path ? path : "?");
    free(path);
    tell_watchers(crl);
    X509_CRL_free(crl);
}
