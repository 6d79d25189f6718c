/* libFuzzer harness for what a proxy client sends first (proxy/relay.h): the
   hello (magic and NUL-padded token, proxy/hello.c) and the token in it
   (util/token.c), checked as the relay checks them.  Random bytes never
   carry a good MAC, so the first byte of an input may also ask for a token
   issued from the input's fields and then changed at one byte: it must pass
   unchanged and fail changed.

   Input: byte 0 even: a hello (the rest, cut or NUL-padded to its size);
          byte 0 odd: pair (16) | side (1) | expiry (8) | where (1) | byte (1). */
#include "fuzz.h"
#include "relay.h"
#include "token.h"

#define NOW 1700000000u
#define SKEW 30u

static const struct proxy_key key = {{1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11,
                                      12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22,
                                      23, 24, 25, 26, 27, 28, 29, 30, 31, 32}};

static void hello(const uint8_t *data, size_t size)
{
    unsigned char buf[RELAY_HELLO_LEN] = {0};
    char text[RELAY_HELLO_TOKEN + 1];
    unsigned char pair[TOKEN_PAIR_LEN];
    uint64_t expiry = 0;
    int side = -1;

    memcpy(buf, data, size < sizeof(buf) ? size : sizeof(buf));
    enum relay_hello kind = relay_hello_parse(buf, text);
    FUZZ_TERMINATED(text);
    if (kind != RELAY_HELLO_TOKEN_TEXT) {
        FUZZ_ASSERT(text[0] == '\0');
        return;
    }
    int rc = token_check(&key, text, NOW, SKEW, pair, &side, &expiry);
    FUZZ_ASSERT(strcmp(token_error(rc), "unknown error") != 0);
    if (rc == TOKEN_OK)
        FUZZ_ASSERT(side == TOKEN_SIDE_INITIATOR || side == TOKEN_SIDE_TARGET);
}

static void issued(const uint8_t *data, size_t size)
{
    unsigned char pair[TOKEN_PAIR_LEN], got_pair[TOKEN_PAIR_LEN];
    char text[TOKEN_TEXT_LEN + 1];
    uint64_t expiry = 0, got_expiry = 0;
    int got_side = -1;

    if (size < TOKEN_PAIR_LEN + 1 + 8 + 2)
        return;
    memcpy(pair, data, TOKEN_PAIR_LEN);
    int side = data[TOKEN_PAIR_LEN] & 1;
    for (int i = 0; i < 8; i++)
        expiry = expiry << 8 | data[TOKEN_PAIR_LEN + 1 + i];
    size_t where = data[TOKEN_PAIR_LEN + 9] % TOKEN_TEXT_LEN;
    char byte = (char)data[TOKEN_PAIR_LEN + 10];

    FUZZ_ASSERT(token_issue(&key, pair, side, expiry, text, sizeof(text)) == 0);
    int rc = token_check(&key, text, NOW, SKEW, got_pair, &got_side, &got_expiry);
    if (NOW > expiry && NOW - expiry > SKEW) {
        FUZZ_ASSERT(rc == TOKEN_EEXPIRED);
    } else {
        FUZZ_ASSERT(rc == TOKEN_OK && got_side == side && got_expiry == expiry &&
                    memcmp(got_pair, pair, TOKEN_PAIR_LEN) == 0);
    }
    if (text[where] == byte)
        return;
    text[where] = byte;
    rc = token_check(&key, text, NOW, SKEW, NULL, NULL, NULL);
    FUZZ_ASSERT(rc == TOKEN_EMALFORMED || rc == TOKEN_EBADMAC);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    if (data[0] & 1)
        issued(data + 1, size - 1);
    else
        hello(data + 1, size - 1);
    return 0;
}
