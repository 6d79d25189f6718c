/* See sha256.h. */
#include "sha256.h"

#include <pthread.h>

#include <openssl/core_names.h>
#include <openssl/params.h>

/* Kept for the process's life: each is one reference, freed at exit by
   nobody (OpenSSL's own tables hold the same). */
static EVP_MD *md;
static EVP_MAC *mac;
static pthread_once_t fetched = PTHREAD_ONCE_INIT;

static void fetch(void)
{
    md = EVP_MD_fetch(NULL, "SHA256", NULL);
    mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
}

const EVP_MD *sha256_md(void)
{
    pthread_once(&fetched, fetch);
    return md != NULL ? md : EVP_sha256();
}

int hmac_sha256(const void *key, size_t keylen, const void *msg, size_t len,
                unsigned char out[SHA256_LEN])
{
    static const unsigned char none = 0;
    char digest[] = "SHA256";
    OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                           OSSL_PARAM_construct_end()};
    size_t outlen = 0;

    pthread_once(&fetched, fetch);
    if (mac == NULL)
        return -1;
    EVP_MAC_CTX *ctx = EVP_MAC_CTX_new(mac);
    /* A NULL key would mean "the previous key" to EVP_MAC_init. */
    int ok = ctx != NULL && EVP_MAC_init(ctx, keylen > 0 ? key : &none, keylen, params) == 1 &&
             EVP_MAC_update(ctx, msg, len) == 1 &&
             EVP_MAC_final(ctx, out, &outlen, SHA256_LEN) == 1 && outlen == SHA256_LEN;
    EVP_MAC_CTX_free(ctx);
    return ok ? 0 : -1;
}
