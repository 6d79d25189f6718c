/* See jobhash.h. */
#include "jobhash.h"

#include <string.h>

#include <openssl/evp.h>

#include "sha256.h"

int job_secret_hash(const char *job, const char *secret, unsigned char out[JOB_HASH_LEN])
{
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    unsigned int len = 0;
    int ok = ctx != NULL && EVP_DigestInit_ex(ctx, sha256_md(), NULL) == 1 &&
             EVP_DigestUpdate(ctx, job, strlen(job)) == 1 && EVP_DigestUpdate(ctx, ":", 1) == 1 &&
             EVP_DigestUpdate(ctx, secret, strlen(secret)) == 1 &&
             EVP_DigestFinal_ex(ctx, out, &len) == 1 && len == JOB_HASH_LEN;
    EVP_MD_CTX_free(ctx);
    return ok ? 0 : -1;
}
