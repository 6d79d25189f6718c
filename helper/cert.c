/* The helper's identity is its certificate: refuse to start as a node the
   certificate does not name, rather than be refused by the frontend later. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/pem.h>
#include <openssl/x509.h>

#include "helper.h"
#include "identity.h"

static int subject_field(X509_NAME *subject, int nid, char *out, size_t outlen)
{
    int len = X509_NAME_get_text_by_NID(subject, nid, out, (int)outlen);

    return (len <= 0 || (size_t)len >= outlen) ? -1 : 0;
}

static int set_or_match(char **field, const char *option, const char *from_cert, const char *cn,
                        char *err, size_t errlen)
{
    if (*field == NULL) {
        *field = strdup(from_cert);
        if (*field == NULL) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        return 0;
    }
    if (strcmp(*field, from_cert) != 0) {
        snprintf(err, errlen, "%s '%s' does not match the certificate (CN=%s)", option, *field,
                 cn);
        return -1;
    }
    return 0;
}

int helper_cert_check(struct helper_config *cfg, char *err, size_t errlen)
{
    char ou[64], cn[2 * QCG_NAME_MAX];
    struct identity id;
    FILE *f = fopen(cfg->cert, "r");

    if (f == NULL) {
        snprintf(err, errlen, "cert: cannot open %s: %s", cfg->cert, strerror(errno));
        return -1;
    }
    X509 *x = PEM_read_X509(f, NULL, NULL, NULL);
    fclose(f);
    if (x == NULL) {
        snprintf(err, errlen, "cert: %s holds no PEM certificate", cfg->cert);
        return -1;
    }
    X509_NAME *subject = X509_get_subject_name(x);
    int rc = -1;
    if (subject_field(subject, NID_organizationalUnitName, ou, sizeof(ou)) < 0 ||
        subject_field(subject, NID_commonName, cn, sizeof(cn)) < 0) {
        snprintf(err, errlen, "cert: %s: the subject lacks OU or CN (not a qcg-certs certificate)",
                 cfg->cert);
        goto out;
    }
    if (identity_from_fields(ou, cn, &id) < 0 || id.role != QCG_ROLE_HELPER) {
        snprintf(err, errlen, "cert: %s is not a helper certificate (OU=%s, CN=%s)", cfg->cert,
                 ou, cn);
        goto out;
    }
    if (set_or_match(&cfg->cluster, "cluster", id.cluster, cn, err, errlen) < 0 ||
        set_or_match(&cfg->node, "node", id.node, cn, err, errlen) < 0)
        goto out;
    rc = 0;
out:
    X509_free(x);
    return rc;
}
