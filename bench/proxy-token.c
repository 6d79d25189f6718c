/*
 * proxy-token: mints the two tokens of a fresh pair with a proxy key, as the
 * broker would (debugging and bench/proxy-relay.sh).
 *
 *   proxy-token KEYFILE [VALID-SECONDS] [COUNT]
 *
 * Prints COUNT lines (default 1), each "INITIATOR-TOKEN TARGET-TOKEN" of one
 * new pair, valid for VALID-SECONDS (default 60) from now.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <openssl/rand.h>

#include "token.h"

int main(int argc, char **argv)
{
    struct proxy_key key;
    char err[256], t0[TOKEN_TEXT_LEN + 1], t1[TOKEN_TEXT_LEN + 1];
    unsigned char pair[TOKEN_PAIR_LEN];

    if (argc < 2 || argc > 4) {
        fprintf(stderr, "usage: proxy-token KEYFILE [VALID-SECONDS] [COUNT]\n");
        return 2;
    }
    if (proxy_key_load(argv[1], &key, err, sizeof(err)) != 0) {
        fprintf(stderr, "proxy-token: %s\n", err);
        return 1;
    }
    long valid = argc > 2 ? atol(argv[2]) : 60;
    long count = argc > 3 ? atol(argv[3]) : 1;
    uint64_t expiry = (uint64_t)(time(NULL) + valid);
    for (long i = 0; i < count; i++) {
        if (RAND_bytes(pair, sizeof(pair)) != 1 ||
            token_issue(&key, pair, TOKEN_SIDE_INITIATOR, expiry, t0, sizeof(t0)) != 0 ||
            token_issue(&key, pair, TOKEN_SIDE_TARGET, expiry, t1, sizeof(t1)) != 0) {
            fprintf(stderr, "proxy-token: cannot mint\n");
            return 1;
        }
        printf("%s %s\n", t0, t1);
    }
    return 0;
}
