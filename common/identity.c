/*
 * The caller's identity from its certificate subject.  Authorization rests on
 * this, so anything ambiguous (a repeated OU or CN, a name that is not plain
 * ASCII, an embedded NUL) is refused rather than interpreted.
 */
#include "identity.h"

#include <errno.h>
#include <openssl/asn1.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <string.h>

#include "log.h"

int identity_from_fields(const char *ou, const char *cn, struct identity *id)
{
    memset(id, 0, sizeof(*id));
    if (ou == NULL || cn == NULL) {
        log_warnx("certificate subject without %s", ou == NULL ? "OU" : "CN");
        return -1;
    }
    enum qcg_role role = role_parse(ou);
    if (role == QCG_ROLE_NONE) {
        log_warnx("certificate OU \"%.64s\" is not a qcg role", ou);
        return -1;
    }
    if (strlen(cn) >= sizeof(id->name)) {
        log_warnx("certificate CN of %s is too long", role_name(role));
        return -1;
    }

    if (role == QCG_ROLE_HELPER) {
        const char *slash = strchr(cn, '/');
        if (slash == NULL || (size_t)(slash - cn) >= QCG_NAME_MAX) {
            log_warnx("helper certificate CN \"%.130s\" is not CLUSTER/NODE", cn);
            return -1;
        }
        char cluster[QCG_NAME_MAX];
        memcpy(cluster, cn, (size_t)(slash - cn));
        cluster[slash - cn] = '\0';
        if (!name_valid(cluster) || !name_valid(slash + 1)) {
            log_warnx("helper certificate CN \"%.130s\" is not CLUSTER/NODE with valid names", cn);
            return -1;
        }
        snprintf(id->cluster, sizeof(id->cluster), "%s", cluster);
        snprintf(id->node, sizeof(id->node), "%s", slash + 1);
    } else {
        if (!name_valid(cn)) {
            log_warnx("%s certificate CN \"%.130s\" is not a valid name", role_name(role), cn);
            return -1;
        }
        if (role == QCG_ROLE_FRONTEND)
            snprintf(id->cluster, sizeof(id->cluster), "%s", cn);
    }
    id->role = role;
    snprintf(id->name, sizeof(id->name), "%s", cn);
    return 0;
}

/* The single entry nid of name as UTF-8 into buf: 1 found, 0 absent, -1 bad. */
static int subject_field(X509_NAME *name, int nid, const char *what, char *buf, size_t len)
{
    int idx = X509_NAME_get_index_by_NID(name, nid, -1);
    if (idx < 0)
        return 0;
    if (X509_NAME_get_index_by_NID(name, nid, idx) >= 0) {
        log_warnx("certificate subject has more than one %s", what);
        return -1;
    }
    X509_NAME_ENTRY *entry = X509_NAME_get_entry(name, idx);
    ASN1_STRING *data = entry ? X509_NAME_ENTRY_get_data(entry) : NULL;
    if (data == NULL) {
        log_warnx("certificate subject %s is unreadable", what);
        return -1;
    }
    unsigned char *utf8 = NULL;
    int n = ASN1_STRING_to_UTF8(&utf8, data);
    if (n < 0) {
        log_warnx("certificate subject %s is not valid text", what);
        return -1;
    }
    int rc = 1;
    if ((size_t)n >= len) {
        log_warnx("certificate subject %s is too long (%d bytes)", what, n);
        rc = -1;
    } else if (memchr(utf8, '\0', (size_t)n) != NULL) {
        log_warnx("certificate subject %s contains a NUL byte", what);
        rc = -1;
    } else {
        memcpy(buf, utf8, (size_t)n);
        buf[n] = '\0';
    }
    OPENSSL_free(utf8);
    return rc;
}

int identity_from_cert(X509 *cert, struct identity *id)
{
    memset(id, 0, sizeof(*id));
    X509_NAME *subject = X509_get_subject_name(cert);
    char ou[QCG_NAME_MAX], cn[2 * QCG_NAME_MAX];
    int has_ou, has_cn;
    if (subject == NULL) {
        log_warnx("certificate has no subject");
        return -1;
    }
    if ((has_ou = subject_field(subject, NID_organizationalUnitName, "OU", ou, sizeof(ou))) < 0 ||
        (has_cn = subject_field(subject, NID_commonName, "CN", cn, sizeof(cn))) < 0)
        return -1; /* logged */
    return identity_from_fields(has_ou ? ou : NULL, has_cn ? cn : NULL, id);
}

int identity_from_ssl(SSL *ssl, struct identity *id)
{
    memset(id, 0, sizeof(*id));
    if (ssl == NULL) {
        log_warnx("no TLS session");
        return -1;
    }
    X509 *cert = SSL_get1_peer_certificate(ssl);
    if (cert == NULL) {
        log_warnx("peer presented no certificate");
        return -1;
    }
    int rc = identity_from_cert(cert, id);
    X509_free(cert);
    return rc;
}

int identity_from_file(const char *path, enum qcg_role expect, struct identity *id, char *err,
                       size_t errlen)
{
    memset(id, 0, sizeof(*id));
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        snprintf(err, errlen, "cert: cannot read %s: %s", path, strerror(errno));
        return -1;
    }
    X509 *x = PEM_read_X509(f, NULL, NULL, NULL);
    fclose(f);
    if (x == NULL) {
        snprintf(err, errlen, "cert: %s holds no PEM certificate", path);
        return -1;
    }
    char ou[QCG_NAME_MAX] = "", cn[2 * QCG_NAME_MAX] = "";
    X509_NAME *subject = X509_get_subject_name(x);
    int n_ou = X509_NAME_get_text_by_NID(subject, NID_organizationalUnitName, ou, sizeof(ou));
    int n_cn = X509_NAME_get_text_by_NID(subject, NID_commonName, cn, sizeof(cn));
    X509_free(x);
    if (n_ou <= 0 || n_cn <= 0 || (size_t)n_ou >= sizeof(ou) || (size_t)n_cn >= sizeof(cn) ||
        identity_from_fields(ou, cn, id) < 0) {
        snprintf(err, errlen, "cert: %s: subject is not O=qcg-connect/OU=<role>/CN=<name>", path);
        return -1;
    }
    if (expect != QCG_ROLE_NONE && id->role != expect) {
        snprintf(err, errlen, "cert: %s is not a %s certificate (OU=%s, CN=%s)", path,
                 role_name(expect), ou, cn);
        return -1;
    }
    return 0;
}

int identity_check_usage(SSL *ssl, bool peer_is_server, char *err, size_t errlen)
{
    X509 *cert = ssl ? SSL_get1_peer_certificate(ssl) : NULL;
    if (cert == NULL) {
        snprintf(err, errlen, "no peer certificate");
        return -1;
    }
    int rc = identity_cert_usage(cert, peer_is_server, err, errlen);
    X509_free(cert);
    return rc;
}

int identity_cert_usage(X509 *cert, bool server, char *err, size_t errlen)
{
    uint32_t xku = X509_get_extended_key_usage(cert);
    uint32_t want = server ? XKU_SSL_SERVER : XKU_SSL_CLIENT;
    if (xku == UINT32_MAX) {
        snprintf(err, errlen, "its certificate names no extended key usage (%s needed)",
                 server ? "serverAuth" : "clientAuth");
        return -1;
    }
    if (!(xku & want)) {
        snprintf(err, errlen, "its certificate is not for TLS %s (no %s)",
                 server ? "servers" : "clients", server ? "serverAuth" : "clientAuth");
        return -1;
    }
    return 0;
}

const char *identity_text(const struct identity *id, char *buf, size_t len)
{
    snprintf(buf, len, "%s %s", role_name(id->role), id->name);
    return buf;
}
