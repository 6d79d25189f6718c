/* Authenticated punch answers; see punch_auth.h. */
#include "punch_auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>

#include "hex.h"
#include "sha256.h"

/* The bytes a token's MAC covers: version, pair, side, expiry. */
#define SIGNED_LEN (TOKEN_BIN_LEN - TOKEN_MAC_LEN)

static const char REQUEST_LABEL[] = "qcg punch request";
static const char ANSWER_LABEL[] = "qcg punch answer";

/* HMAC-SHA256(key, label | msg), first 16 bytes. */
#define KEYED_MAX 600 /* label and answer line: answers are at most 511 bytes */
static int keyed(const unsigned char key[PUNCH_AUTH_KEY_LEN], const char *label, const void *msg,
                 size_t len, unsigned char out[16])
{
    unsigned char buf[KEYED_MAX], md[SHA256_LEN];
    size_t llen = strlen(label);
    if (llen + len > sizeof(buf))
        return -1;
    memcpy(buf, label, llen);
    memcpy(buf + llen, msg, len);
    if (hmac_sha256(key, PUNCH_AUTH_KEY_LEN, buf, llen + len, md) < 0)
        return -1;
    memcpy(out, md, 16);
    OPENSSL_cleanse(md, sizeof(md));
    return 0;
}

int punch_auth_request(const char *token, char *wire, size_t wirelen,
                       unsigned char key[PUNCH_AUTH_KEY_LEN])
{
    unsigned char bin[TOKEN_BIN_LEN], proof[16];
    if (wirelen < TOKEN_TEXT_LEN + 1 || strlen(token) != TOKEN_TEXT_LEN ||
        hex_decode(token, TOKEN_BIN_LEN, bin, false) < 0 || bin[0] != TOKEN_VERSION)
        return -1;
    memcpy(key, bin + SIGNED_LEN, PUNCH_AUTH_KEY_LEN);
    if (keyed(key, REQUEST_LABEL, bin, SIGNED_LEN, proof) < 0)
        return -1;
    bin[0] = PUNCH_AUTH_VERSION;
    memcpy(bin + SIGNED_LEN, proof, sizeof(proof));
    hex_encode(bin, TOKEN_BIN_LEN, wire);
    OPENSSL_cleanse(bin, sizeof(bin));
    return 0;
}

int punch_auth_check(const struct proxy_key *pk, const char *wire, char *full, size_t fulllen,
                     unsigned char key[PUNCH_AUTH_KEY_LEN], const char **why)
{
    unsigned char bin[TOKEN_BIN_LEN], issued[TOKEN_BIN_LEN], proof[16];
    *why = "malformed token";
    if (fulllen < TOKEN_TEXT_LEN + 1 || strlen(wire) != TOKEN_TEXT_LEN ||
        hex_decode(wire, TOKEN_BIN_LEN, bin, false) < 0)
        return -1;
    if (bin[0] == TOKEN_VERSION) {
        memcpy(full, wire, TOKEN_TEXT_LEN + 1);
        return 0;
    }
    if (bin[0] != PUNCH_AUTH_VERSION || bin[1 + TOKEN_PAIR_LEN] > 1)
        return -1;
    /* The token the broker issued for these fields, hence its MAC. */
    uint64_t expiry = 0;
    for (int i = 0; i < 8; i++)
        expiry = expiry << 8 | bin[2 + TOKEN_PAIR_LEN + i];
    if (token_issue(pk, bin + 1, bin[1 + TOKEN_PAIR_LEN], expiry, full, fulllen) < 0 ||
        hex_decode(full, TOKEN_BIN_LEN, issued, false) < 0)
        return -1;
    memcpy(key, issued + SIGNED_LEN, PUNCH_AUTH_KEY_LEN);
    int ok = keyed(key, REQUEST_LABEL, issued, SIGNED_LEN, proof) == 0 &&
             CRYPTO_memcmp(proof, bin + SIGNED_LEN, sizeof(proof)) == 0;
    OPENSSL_cleanse(issued, sizeof(issued));
    if (!ok) {
        OPENSSL_cleanse(key, PUNCH_AUTH_KEY_LEN);
        *why = "bad MAC";
        return -1;
    }
    *why = NULL;
    return 1;
}

void punch_auth_tag(const unsigned char key[PUNCH_AUTH_KEY_LEN], const char *answer,
                    char tag[PUNCH_AUTH_TAG_TEXT])
{
    unsigned char t[16];
    tag[0] = '\0'; /* an untagged answer, refused by the node */
    if (keyed(key, ANSWER_LABEL, answer, strlen(answer), t) == 0)
        hex_encode(t, sizeof(t), tag);
}

int punch_auth_answer(char *line, const unsigned char key[PUNCH_AUTH_KEY_LEN], char *why,
                      size_t whylen)
{
    char want[PUNCH_AUTH_TAG_TEXT];
    char *sp = strrchr(line, ' ');
    if (sp == NULL || strlen(sp + 1) != PUNCH_AUTH_TAG_TEXT - 1) {
        snprintf(why, whylen,
                 "reflector: answer without its authentication tag (forged, or "
                 "a reflector older than this helper)");
        return -1;
    }
    *sp = '\0';
    punch_auth_tag(key, line, want);
    if (want[0] == '\0' || CRYPTO_memcmp(want, sp + 1, PUNCH_AUTH_TAG_TEXT - 1) != 0) {
        snprintf(why, whylen,
                 "reflector: answer with a wrong authentication tag (forged or "
                 "altered on the way): refused");
        return -1;
    }
    return 0;
}
