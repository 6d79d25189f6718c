/* One-time proxy tokens: issue, check, and the shared key file. */
#include "token.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include "hex.h"
#include "sha256.h"

#define TOKEN_SIGNED_LEN (TOKEN_BIN_LEN - TOKEN_MAC_LEN)

static int token_mac(const struct proxy_key *key, const unsigned char *msg, size_t len,
                     unsigned char mac[TOKEN_MAC_LEN])
{
    unsigned char md[SHA256_LEN];

    _Static_assert(TOKEN_MAC_LEN <= SHA256_LEN, "a token's MAC is a prefix of HMAC-SHA256");
    if (hmac_sha256_kept(key->bytes, sizeof(key->bytes), msg, len, md) < 0)
        return -1;
    memcpy(mac, md, TOKEN_MAC_LEN);
    OPENSSL_cleanse(md, sizeof(md));
    return 0;
}

int proxy_key_load(const char *path, struct proxy_key *key, char *err, size_t errlen)
{
    /* One byte more than a valid file may hold, to notice trailing junk. */
    char buf[2 * sizeof(key->bytes) + 3];
    struct stat st;
    ssize_t n;
    size_t len;
    int fd, rc = -1;

    fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        snprintf(err, errlen, "proxy key %s: %s", path, strerror(errno));
        return -1;
    }
    if (fstat(fd, &st) < 0) {
        snprintf(err, errlen, "proxy key %s: %s", path, strerror(errno));
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "proxy key %s: not a regular file", path);
        goto out;
    }
    if (st.st_mode & (S_IRWXG | S_IRWXO)) {
        snprintf(err, errlen, "proxy key %s: mode %04o lets group or others access it (chmod 600)",
                 path, (unsigned)(st.st_mode & 07777));
        goto out;
    }
    len = 0;
    while (len < sizeof(buf)) {
        n = read(fd, buf + len, sizeof(buf) - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            snprintf(err, errlen, "proxy key %s: %s", path, strerror(errno));
            goto out;
        }
        if (n == 0)
            break;
        len += (size_t)n;
    }
    if (len > 0 && buf[len - 1] == '\n')
        len--;
    if (len > 0 && buf[len - 1] == '\r')
        len--;
    if (len != 2 * sizeof(key->bytes) ||
        hex_decode(buf, sizeof(key->bytes), key->bytes, true) < 0) {
        snprintf(err, errlen, "proxy key %s: expected %zu hex characters and a newline", path,
                 2 * sizeof(key->bytes));
        OPENSSL_cleanse(key->bytes, sizeof(key->bytes));
        goto out;
    }
    rc = 0;
out:
    OPENSSL_cleanse(buf, sizeof(buf));
    close(fd);
    return rc;
}

int token_issue(const struct proxy_key *key, const unsigned char pair[16], int side,
                uint64_t expiry, char *out, size_t outlen)
{
    unsigned char bin[TOKEN_BIN_LEN];
    size_t i;

    if (outlen < TOKEN_TEXT_LEN + 1 || (side != TOKEN_SIDE_INITIATOR && side != TOKEN_SIDE_TARGET))
        return -1;
    bin[0] = TOKEN_VERSION;
    memcpy(bin + 1, pair, TOKEN_PAIR_LEN);
    bin[1 + TOKEN_PAIR_LEN] = (unsigned char)side;
    for (i = 0; i < 8; i++)
        bin[2 + TOKEN_PAIR_LEN + i] = (unsigned char)(expiry >> (56 - 8 * i));
    if (token_mac(key, bin, TOKEN_SIGNED_LEN, bin + TOKEN_SIGNED_LEN) < 0)
        return -1;
    hex_encode(bin, TOKEN_BIN_LEN, out);
    return 0;
}

int token_check(const struct proxy_key *key, const char *text, uint64_t now, uint64_t skew,
                unsigned char pair[16], int *side, uint64_t *expiry)
{
    unsigned char bin[TOKEN_BIN_LEN], mac[TOKEN_MAC_LEN];
    uint64_t exp = 0;
    int s;

    /* Only one spelling (lowercase) of a token is valid. */
    if (text == NULL || strnlen(text, TOKEN_TEXT_LEN + 1) != TOKEN_TEXT_LEN ||
        hex_decode(text, TOKEN_BIN_LEN, bin, false) < 0)
        return TOKEN_EMALFORMED;
    if (bin[0] != TOKEN_VERSION)
        return TOKEN_EMALFORMED;
    s = bin[1 + TOKEN_PAIR_LEN];
    if (s != TOKEN_SIDE_INITIATOR && s != TOKEN_SIDE_TARGET)
        return TOKEN_EMALFORMED;
    if (token_mac(key, bin, TOKEN_SIGNED_LEN, mac) < 0)
        return TOKEN_EBADMAC;
    if (CRYPTO_memcmp(mac, bin + TOKEN_SIGNED_LEN, TOKEN_MAC_LEN) != 0)
        return TOKEN_EBADMAC;
    for (int i = 0; i < 8; i++)
        exp = exp << 8 | bin[2 + TOKEN_PAIR_LEN + i];
    /* expiry + skew without overflow. */
    if (now > exp && now - exp > skew)
        return TOKEN_EEXPIRED;
    if (pair)
        memcpy(pair, bin + 1, TOKEN_PAIR_LEN);
    if (side)
        *side = s;
    if (expiry)
        *expiry = exp;
    return TOKEN_OK;
}

const char *token_error(int code)
{
    switch (code) {
    case TOKEN_OK:
        return "ok";
    case TOKEN_EMALFORMED:
        return "malformed";
    case TOKEN_EBADMAC:
        return "bad MAC";
    case TOKEN_EEXPIRED:
        return "expired";
    default:
        return "unknown error";
    }
}

int token_pair_new(const struct proxy_key *key, const char *job, unsigned char pair[TOKEN_PAIR_LEN])
{
    /* A label apart from tokens' bytes (which begin with the version, 1). */
    unsigned char msg[16 + 256], mac[TOKEN_MAC_LEN];
    size_t n = strlen(job);
    if (n > 256 || RAND_bytes(pair, TOKEN_PAIR_LEN - TOKEN_JOB_TAG_LEN) != 1)
        return -1;
    memcpy(msg, "qcg job tag\n", 12);
    memcpy(msg + 12, job, n);
    if (token_mac(key, msg, 12 + n, mac) < 0)
        return -1;
    memcpy(pair + TOKEN_PAIR_LEN - TOKEN_JOB_TAG_LEN, mac, TOKEN_JOB_TAG_LEN);
    OPENSSL_cleanse(mac, sizeof(mac));
    return 0;
}

void token_pair_tag(const unsigned char pair[TOKEN_PAIR_LEN], char out[TOKEN_JOB_TAG_TEXT])
{
    hex_encode(pair + TOKEN_PAIR_LEN - TOKEN_JOB_TAG_LEN, TOKEN_JOB_TAG_LEN, out);
}
