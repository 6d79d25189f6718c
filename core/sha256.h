/* SHA-256 and HMAC-SHA256 with their OpenSSL algorithms fetched once.
   OpenSSL 3 looks an algorithm up by name in a locked table on every
   EVP_sha256() digest and every HMAC() call; the broker hashed a verifier
   and keyed a token that way several times per connection (issue 29). */
#ifndef QCG_SHA256_H
#define QCG_SHA256_H

#include <stddef.h>

#include <openssl/evp.h>

#define SHA256_LEN 32

/* The SHA-256 digest, fetched on the first call (EVP_sha256() if the fetch
   failed). */
const EVP_MD *sha256_md(void);

/* HMAC-SHA256(key, msg) into out; -1 if it could not be computed. */
int hmac_sha256(const void *key, size_t keylen, const void *msg, size_t len,
                unsigned char out[SHA256_LEN]);

/* The same for a key the process keeps for its life (the proxy and punch
   keys): the first few such keys are keyed once and each call copies the
   keyed context (about 1.6 times faster); others as hmac_sha256. */
int hmac_sha256_kept(const void *key, size_t keylen, const void *msg, size_t len,
                     unsigned char out[SHA256_LEN]);

#endif
