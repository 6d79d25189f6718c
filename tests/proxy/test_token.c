/* proxy-token: issue/check round trip, every byte flip refused, expiry and
   skew, malformed texts, and the key file's permissions. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "token.h"

static const struct proxy_key test_key = {{
    0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f,
    0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f,
}};
static const unsigned char test_pair[16] = {0xde, 0xad, 0xbe, 0xef, 1, 2,  3,  4,
                                            5,    6,    7,    8,    9, 10, 11, 12};

static void test_round_trip(void)
{
    char tok[TOKEN_TEXT_LEN + 1], small[TOKEN_TEXT_LEN];
    unsigned char pair[16];
    uint64_t expiry = 0;
    int side = -1;

    CHECK(token_issue(&test_key, test_pair, TOKEN_SIDE_TARGET, 1700000060, tok, sizeof(tok)) == 0);
    CHECK(strlen(tok) == TOKEN_TEXT_LEN && TOKEN_TEXT_LEN == 84);
    CHECK(strspn(tok, "0123456789abcdef") == TOKEN_TEXT_LEN);
    CHECK(strncmp(tok, "01deadbeef", 10) == 0);
    CHECK(token_check(&test_key, tok, 1700000000, 300, pair, &side, &expiry) == TOKEN_OK);
    CHECK(memcmp(pair, test_pair, 16) == 0);
    CHECK(side == TOKEN_SIDE_TARGET);
    CHECK(expiry == 1700000060);
    CHECK(token_check(&test_key, tok, 1700000000, 300, NULL, NULL, NULL) == TOKEN_OK);

    /* The two sides of one pair differ; both check. */
    char tok0[TOKEN_TEXT_LEN + 1];
    CHECK(token_issue(&test_key, test_pair, TOKEN_SIDE_INITIATOR, 1700000060, tok0, sizeof(tok0)) ==
          0);
    CHECK(strcmp(tok0, tok) != 0);
    CHECK(token_check(&test_key, tok0, 1700000000, 0, NULL, &side, NULL) == 0 && side == 0);

    /* Bad arguments to issue. */
    CHECK(token_issue(&test_key, test_pair, 2, 1, tok, sizeof(tok)) == -1);
    CHECK(token_issue(&test_key, test_pair, -1, 1, tok, sizeof(tok)) == -1);
    CHECK(token_issue(&test_key, test_pair, 0, 1, small, sizeof(small)) == -1);

    /* Another key: bad MAC. */
    struct proxy_key other = test_key;
    other.bytes[31] ^= 1;
    CHECK(token_check(&other, tok0, 1700000000, 300, NULL, NULL, NULL) == TOKEN_EBADMAC);
}

/* Any change of any character (to another hex digit) must be refused. */
static void test_every_flip(void)
{
    char tok[TOKEN_TEXT_LEN + 1], bad[TOKEN_TEXT_LEN + 1];
    static const char digits[] = "0123456789abcdef";
    int accepted = 0, tried = 0;

    CHECK(token_issue(&test_key, test_pair, 0, 1700000060, tok, sizeof(tok)) == 0);
    for (int i = 0; i < TOKEN_TEXT_LEN; i++) {
        for (int d = 0; d < 16; d++) {
            if (digits[d] == tok[i])
                continue;
            memcpy(bad, tok, sizeof(tok));
            bad[i] = digits[d];
            tried++;
            int rc = token_check(&test_key, bad, 1700000000, 300, NULL, NULL, NULL);
            if (rc == TOKEN_OK) {
                fprintf(stderr, "flip at %d to %c accepted\n", i, digits[d]);
                accepted++;
            }
            /* A changed expiry can only be noticed by the MAC. */
            if (i >= 36 && i < 52 && rc != TOKEN_EBADMAC && rc != TOKEN_EEXPIRED)
                accepted++;
        }
    }
    CHECK(tried == TOKEN_TEXT_LEN * 15);
    CHECK(accepted == 0);
    /* Every single-bit flip of every decoded byte: the same, through the text. */
    for (int i = 0; i < TOKEN_BIN_LEN; i++) {
        for (int bit = 0; bit < 8; bit++) {
            unsigned v, nv;
            char hex[3] = {tok[2 * i], tok[2 * i + 1], 0};
            v = (unsigned)strtoul(hex, NULL, 16);
            nv = v ^ (1u << bit);
            memcpy(bad, tok, sizeof(tok));
            bad[2 * i] = digits[nv >> 4];
            bad[2 * i + 1] = digits[nv & 15];
            CHECK(token_check(&test_key, bad, 1700000000, 300, NULL, NULL, NULL) != TOKEN_OK);
        }
    }
}

static void test_expiry(void)
{
    char tok[TOKEN_TEXT_LEN + 1];

    CHECK(token_issue(&test_key, test_pair, 1, 1000, tok, sizeof(tok)) == 0);
    CHECK(token_check(&test_key, tok, 0, 0, NULL, NULL, NULL) == TOKEN_OK);
    CHECK(token_check(&test_key, tok, 1000, 0, NULL, NULL, NULL) == TOKEN_OK);
    CHECK(token_check(&test_key, tok, 1001, 0, NULL, NULL, NULL) == TOKEN_EEXPIRED);
    CHECK(token_check(&test_key, tok, 1300, 300, NULL, NULL, NULL) == TOKEN_OK);
    CHECK(token_check(&test_key, tok, 1301, 300, NULL, NULL, NULL) == TOKEN_EEXPIRED);
    CHECK(token_check(&test_key, tok, UINT64_MAX, 300, NULL, NULL, NULL) == TOKEN_EEXPIRED);
    /* A huge skew does not wrap around. */
    CHECK(token_check(&test_key, tok, UINT64_MAX, UINT64_MAX, NULL, NULL, NULL) == TOKEN_OK);
    CHECK(token_issue(&test_key, test_pair, 1, UINT64_MAX, tok, sizeof(tok)) == 0);
    CHECK(token_check(&test_key, tok, UINT64_MAX, 300, NULL, NULL, NULL) == TOKEN_OK);
    /* A forged (bad MAC) token is refused as such even when also expired. */
    tok[TOKEN_TEXT_LEN - 1] = tok[TOKEN_TEXT_LEN - 1] == '0' ? '1' : '0';
    CHECK(token_check(&test_key, tok, 5, 0, NULL, NULL, NULL) == TOKEN_EBADMAC);
}

static void test_malformed(void)
{
    char tok[TOKEN_TEXT_LEN + 1], bad[2 * TOKEN_TEXT_LEN];
    unsigned char pair[16];
    int side = 7;

    CHECK(token_issue(&test_key, test_pair, 0, 1700000060, tok, sizeof(tok)) == 0);
    CHECK(token_check(&test_key, NULL, 0, 0, NULL, NULL, NULL) == TOKEN_EMALFORMED);
    CHECK(token_check(&test_key, "", 0, 0, NULL, NULL, NULL) == TOKEN_EMALFORMED);
    for (size_t len = 0; len < TOKEN_TEXT_LEN; len++) {
        memcpy(bad, tok, len);
        bad[len] = 0;
        CHECK(token_check(&test_key, bad, 0, 0, NULL, NULL, NULL) == TOKEN_EMALFORMED);
    }
    snprintf(bad, sizeof(bad), "%s0", tok);
    CHECK(token_check(&test_key, bad, 0, 0, NULL, NULL, NULL) == TOKEN_EMALFORMED);
    snprintf(bad, sizeof(bad), "%s\n", tok);
    CHECK(token_check(&test_key, bad, 0, 0, NULL, NULL, NULL) == TOKEN_EMALFORMED);
    /* Uppercase, non-hex, spaces, high bytes. */
    const char subst[] = {'A', 'F', 'g', 'z', ' ', '-', '\x80', '\xff', '\t'};
    for (size_t k = 0; k < sizeof(subst); k++) {
        memcpy(bad, tok, sizeof(tok));
        bad[k * 9] = subst[k];
        CHECK(token_check(&test_key, bad, 0, 0, NULL, NULL, NULL) == TOKEN_EMALFORMED);
    }
    /* Upper-cased whole token: only the lowercase spelling is valid. */
    memcpy(bad, tok, sizeof(tok));
    for (int i = 0; i < TOKEN_TEXT_LEN; i++)
        if (bad[i] >= 'a' && bad[i] <= 'f')
            bad[i] = (char)(bad[i] - 'a' + 'A');
    if (strcmp(bad, tok) != 0)
        CHECK(token_check(&test_key, bad, 0, 0, NULL, NULL, NULL) == TOKEN_EMALFORMED);
    /* Outputs untouched on refusal. */
    memset(pair, 0x55, sizeof(pair));
    CHECK(token_check(&test_key, "zz", 0, 0, pair, &side, NULL) < 0);
    CHECK(side == 7 && pair[0] == 0x55);

    CHECK_STR(token_error(TOKEN_OK), "ok");
    CHECK_STR(token_error(TOKEN_EMALFORMED), "malformed");
    CHECK_STR(token_error(TOKEN_EBADMAC), "bad MAC");
    CHECK_STR(token_error(TOKEN_EEXPIRED), "expired");
    CHECK_STR(token_error(-99), "unknown error");
}

static int write_file(const char *path, const char *text, mode_t mode)
{
    FILE *f;

    unlink(path);
    f = fopen(path, "w");
    if (f == NULL)
        return -1;
    fputs(text, f);
    fclose(f);
    return chmod(path, mode);
}

static void test_key_file(void)
{
    char dir[] = "/tmp/qcg-proxy-token-XXXXXX", path[256], err[256];
    struct proxy_key key;
    const char *hex = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

    if (mkdtemp(dir) == NULL) {
        CHECK(!"mkdtemp");
        return;
    }
    snprintf(path, sizeof(path), "%s/proxy.key", dir);

    char line[80];
    snprintf(line, sizeof(line), "%s\n", hex);
    CHECK(write_file(path, line, 0600) == 0);
    CHECK(proxy_key_load(path, &key, err, sizeof(err)) == 0);
    CHECK(memcmp(key.bytes, test_key.bytes, 32) == 0);
    CHECK(write_file(path, hex, 0400) == 0);
    CHECK(proxy_key_load(path, &key, err, sizeof(err)) == 0);
    /* openssl rand -hex prints lowercase; uppercase is the same key. */
    CHECK(write_file(path, "000102030405060708090A0B0C0D0E0F101112131415161718191A1B1C1D1E1F\n",
                     0600) == 0);
    CHECK(proxy_key_load(path, &key, err, sizeof(err)) == 0);
    CHECK(memcmp(key.bytes, test_key.bytes, 32) == 0);

    /* Readable by others or group: refused, naming the problem. */
    CHECK(write_file(path, line, 0644) == 0);
    err[0] = 0;
    CHECK(proxy_key_load(path, &key, err, sizeof(err)) == -1);
    CHECK_HAS(err, "group or others");
    CHECK(write_file(path, line, 0640) == 0);
    CHECK(proxy_key_load(path, &key, err, sizeof(err)) == -1);
    CHECK(write_file(path, line, 0602) == 0);
    CHECK(proxy_key_load(path, &key, err, sizeof(err)) == -1);

    /* Wrong contents. */
    const char *bad[] = {"",
                         "\n",
                         "0001",
                         "zz0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\n",
                         "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f00\n",
                         "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\n\n",
                         " 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\n"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        CHECK(write_file(path, bad[i], 0600) == 0);
        err[0] = 0;
        CHECK(proxy_key_load(path, &key, err, sizeof(err)) == -1);
        CHECK_HAS(err, "hex characters");
    }
    unlink(path);

    /* Missing file, a directory. */
    CHECK(proxy_key_load(path, &key, err, sizeof(err)) == -1);
    CHECK_HAS(err, "No such file");
    CHECK(chmod(dir, 0700) == 0);
    CHECK(proxy_key_load(dir, &key, err, sizeof(err)) == -1);
    CHECK_HAS(err, "regular file");
    rmdir(dir);
}

/* Pair ids of one job share its tag, other jobs' do not, and the tag
   depends on the key (nobody without it can aim at a job's share). */
static void test_job_tag(void)
{
    struct proxy_key other = test_key;
    unsigned char a[TOKEN_PAIR_LEN], b[TOKEN_PAIR_LEN], c[TOKEN_PAIR_LEN], d[TOKEN_PAIR_LEN];
    char ta[TOKEN_JOB_TAG_TEXT], tb[TOKEN_JOB_TAG_TEXT], tc[TOKEN_JOB_TAG_TEXT],
        td[TOKEN_JOB_TAG_TEXT];

    other.bytes[0] ^= 1;
    CHECK(token_pair_new(&test_key, "job-1", a) == 0 && token_pair_new(&test_key, "job-1", b) == 0);
    CHECK(token_pair_new(&test_key, "job-2", c) == 0 && token_pair_new(&other, "job-1", d) == 0);
    token_pair_tag(a, ta);
    token_pair_tag(b, tb);
    token_pair_tag(c, tc);
    token_pair_tag(d, td);
    CHECK_STR(ta, tb);
    CHECK(strlen(ta) == 2 * TOKEN_JOB_TAG_LEN);
    CHECK(strcmp(ta, tc) != 0);
    CHECK(strcmp(ta, td) != 0);
    CHECK(memcmp(a, b, TOKEN_PAIR_LEN - TOKEN_JOB_TAG_LEN) != 0);
}

int main(void)
{
    test_round_trip();
    test_every_flip();
    test_expiry();
    test_malformed();
    test_key_file();
    test_job_tag();
    return check_result("proxy-token");
}
