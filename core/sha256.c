/* See sha256.h. */
#include "sha256.h"

#include <pthread.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
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

/* A new context keyed with key, or NULL. */
static EVP_MAC_CTX *keyed(const void *key, size_t keylen)
{
    static const unsigned char none = 0;
    char digest[] = "SHA256";
    OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                           OSSL_PARAM_construct_end()};

    pthread_once(&fetched, fetch);
    EVP_MAC_CTX *ctx = mac != NULL ? EVP_MAC_CTX_new(mac) : NULL;
    /* A NULL key would mean "the previous key" to EVP_MAC_init. */
    if (ctx != NULL && EVP_MAC_init(ctx, keylen > 0 ? key : &none, keylen, params) != 1) {
        EVP_MAC_CTX_free(ctx);
        ctx = NULL;
    }
    return ctx;
}

/* Ends ctx's MAC of msg into out and frees ctx. */
static int finish(EVP_MAC_CTX *ctx, const void *msg, size_t len, unsigned char out[SHA256_LEN])
{
    size_t outlen = 0;
    int ok = ctx != NULL && EVP_MAC_update(ctx, msg, len) == 1 &&
             EVP_MAC_final(ctx, out, &outlen, SHA256_LEN) == 1 && outlen == SHA256_LEN;
    EVP_MAC_CTX_free(ctx);
    return ok ? 0 : -1;
}

int hmac_sha256(const void *key, size_t keylen, const void *msg, size_t len,
                unsigned char out[SHA256_LEN])
{
    return finish(keyed(key, keylen), msg, len, out);
}

/* The kept keys' keyed contexts, filled once each, never freed. */
#define KEPT_SLOTS 4
#define KEPT_KEY_MAX 64
static struct kept {
    unsigned char key[KEPT_KEY_MAX];
    size_t len;
    EVP_MAC_CTX *ctx;
} kept[KEPT_SLOTS];
static pthread_mutex_t kept_lock = PTHREAD_MUTEX_INITIALIZER;

int hmac_sha256_kept(const void *key, size_t keylen, const void *msg, size_t len,
                     unsigned char out[SHA256_LEN])
{
    EVP_MAC_CTX *ctx = NULL;
    if (keylen > KEPT_KEY_MAX)
        return hmac_sha256(key, keylen, msg, len, out);
    pthread_mutex_lock(&kept_lock);
    int i = 0;
    while (i < KEPT_SLOTS && kept[i].ctx != NULL &&
           !(kept[i].len == keylen && CRYPTO_memcmp(kept[i].key, key, keylen) == 0))
        i++;
    if (i < KEPT_SLOTS && kept[i].ctx == NULL && (kept[i].ctx = keyed(key, keylen)) != NULL) {
        memcpy(kept[i].key, key, keylen);
        kept[i].len = keylen;
    }
    /* The copy under the lock: a context is not to be read by two threads. */
    if (i < KEPT_SLOTS && kept[i].ctx != NULL)
        ctx = EVP_MAC_CTX_dup(kept[i].ctx);
    pthread_mutex_unlock(&kept_lock);
    return i < KEPT_SLOTS ? finish(ctx, msg, len, out) : hmac_sha256(key, keylen, msg, len, out);
}
