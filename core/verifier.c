/* See verifier.h. */
#include "verifier.h"

#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "hex.h"
#include "proto.h"
#include "sha256.h"

/* Apart from every other derivation from the secret (libqcgconn's). */
static const char verifier_label[] = "qcg-connect job verifier v1";

/* Hundredths of a bit per character, smallest class first. */
static int class_centibits(const char *s)
{
    bool digits = true, hex = true, alnum = true;
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        bool d = ch >= '0' && ch <= '9';
        bool h = d || (ch >= 'a' && ch <= 'f') || (ch >= 'A' && ch <= 'F');
        bool a = d || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                 strchr("+/=_-", ch) != NULL;
        digits = digits && d;
        hex = hex && h;
        alnum = alnum && a;
    }
    return digits ? 332 : hex ? 400 : alnum ? 595 : 650;
}

int secret_entropy_bits(const char *secret)
{
    if (secret == NULL)
        return 0;
    return (int)(strlen(secret) * (size_t)class_centibits(secret) / 100);
}

bool secret_strong(const char *secret)
{
    return secret_valid(secret) && secret_entropy_bits(secret) >= QCG_SECRET_MIN_BITS;
}

int job_verifier(const char *job, const char *secret, char out[QCG_VERIFIER_LEN + 1])
{
    unsigned char msg[sizeof(verifier_label) + QCG_JOB_MAX], md[SHA256_LEN];
    size_t jl = strlen(job);

    if (jl >= QCG_JOB_MAX)
        return -1;
    memcpy(msg, verifier_label, sizeof(verifier_label)); /* the NUL separates */
    memcpy(msg + sizeof(verifier_label), job, jl);
    _Static_assert(SHA256_LEN * 2 == QCG_VERIFIER_LEN, "a verifier is one HMAC-SHA256 in hex");
    int ok = hmac_sha256(secret, strlen(secret), msg, sizeof(verifier_label) + jl, md) == 0;
    if (ok)
        hex_encode(md, sizeof(md), out);
    OPENSSL_cleanse(md, sizeof(md));
    return ok ? 0 : -1;
}

bool verifier_valid(const char *verifier)
{
    return verifier != NULL && strlen(verifier) == QCG_VERIFIER_LEN &&
           hex_lower_valid(verifier, QCG_VERIFIER_LEN);
}
