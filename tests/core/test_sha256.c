/* core/sha256.c: the fetched SHA-256 and HMAC-SHA256 give the published
   answers (FIPS 180-2 "abc", RFC 4231 test case 2, an empty key), from
   several threads at once as the broker's connections call them; a kept
   key's MAC is the same as a fresh one's, for more keys than are kept. */
#include <pthread.h>
#include <string.h>

#include "check.h"
#include "hex.h"
#include "sha256.h"

/* key NULL: "Jefe" as a kept key. */
static const char *hmac_hex(const char *key, const char *msg, char text[2 * SHA256_LEN + 1])
{
    unsigned char md[SHA256_LEN];
    if ((key != NULL ? hmac_sha256(key, strlen(key), msg, strlen(msg), md)
                     : hmac_sha256_kept("Jefe", 4, msg, strlen(msg), md)) < 0)
        return "failed";
    hex_encode(md, sizeof(md), text);
    return text;
}

static void *hammer(void *arg)
{
    char text[2 * SHA256_LEN + 1];
    int *bad = arg;
    for (int i = 0; i < 2000; i++)
        if (strcmp(hmac_hex(i % 2 ? "Jefe" : NULL, "what do ya want for nothing?", text),
                   "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843") != 0)
            (*bad)++;
    return NULL;
}

int main(void)
{
    char text[2 * SHA256_LEN + 1];
    unsigned char md[SHA256_LEN];
    unsigned int len = 0;

    CHECK(EVP_Digest("abc", 3, md, &len, sha256_md(), NULL) == 1 && len == SHA256_LEN);
    hex_encode(md, sizeof(md), text);
    CHECK_STR(text, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    CHECK_STR(hmac_hex("Jefe", "what do ya want for nothing?", text),
              "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    CHECK_STR(hmac_hex("", "", text),
              "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad");
    CHECK_STR(hmac_hex(NULL, "what do ya want for nothing?", text),
              "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    for (int k = 0; k < 10; k++) { /* more keys than are kept */
        unsigned char key[32], a[SHA256_LEN], b[SHA256_LEN];
        memset(key, 'a' + k, sizeof(key));
        for (int round = 0; round < 2; round++) {
            CHECK(hmac_sha256(key, sizeof(key), "msg", 3, a) == 0);
            CHECK(hmac_sha256_kept(key, sizeof(key), "msg", 3, b) == 0);
            CHECK(memcmp(a, b, SHA256_LEN) == 0);
        }
    }
    pthread_t t[4];
    int bad[4] = {0};
    for (int i = 0; i < 4; i++)
        CHECK(pthread_create(&t[i], NULL, hammer, &bad[i]) == 0);
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        CHECK(bad[i] == 0);
    }
    return check_result("test_sha256");
}
