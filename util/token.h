/*
 * One-time proxy tokens.  The broker issues one per side of a pair it sends
 * through a proxy; the proxy checks it.  Both hold the same 32-byte key.
 *
 * A token is text: lowercase hex of
 *   version (1 byte = 1) | pair id (16 bytes) | side (1 byte: 0 initiator, 1 target)
 *   | expiry (8 bytes, big-endian unix seconds) | MAC (16 bytes)
 * where MAC = the first 16 bytes of HMAC-SHA256(key, all preceding bytes).
 * That is 42 bytes, TOKEN_TEXT_LEN (84) characters.  Single use is the
 * proxy's job (it remembers (pair, side) until expiry + skew).
 *
 * The pair id is random but for its last TOKEN_JOB_TAG_LEN bytes: a keyed
 * hash of the job (token_pair_new), so that the proxy and the reflector can
 * give each job a share of their tables without learning which job it is.
 */
#ifndef QCG_TOKEN_H
#define QCG_TOKEN_H

#include <stddef.h>
#include <stdint.h>

#define TOKEN_VERSION 1
#define TOKEN_PAIR_LEN 16
#define TOKEN_MAC_LEN 16
#define TOKEN_BIN_LEN (1 + TOKEN_PAIR_LEN + 1 + 8 + TOKEN_MAC_LEN)
#define TOKEN_TEXT_LEN (2 * TOKEN_BIN_LEN)

#define TOKEN_JOB_TAG_LEN 4
#define TOKEN_JOB_TAG_TEXT (2 * TOKEN_JOB_TAG_LEN + 1)

enum token_side { TOKEN_SIDE_INITIATOR = 0, TOKEN_SIDE_TARGET = 1 };

/* Reasons token_check refuses a token (token_error names them). */
enum token_status {
    TOKEN_OK = 0,
    TOKEN_EMALFORMED = -1, /* length, characters, version or side */
    TOKEN_EBADMAC = -2,
    TOKEN_EEXPIRED = -3,
};

struct proxy_key {
    unsigned char bytes[32];
};

/* Reads a key file: 64 hex characters and an optional newline.  Refuses a file
   that group or others may read (the key forges tokens).  0, or -1 with a
   one-line reason in err. */
int proxy_key_load(const char *path, struct proxy_key *key, char *err, size_t errlen);

/* Writes the token text (TOKEN_TEXT_LEN characters + NUL) into out.  side is
   0 or 1.  0, or -1 when outlen is too small or side is invalid. */
int token_issue(const struct proxy_key *key, const unsigned char pair[16], int side,
                uint64_t expiry, char *out, size_t outlen);

/* Checks text (NUL-terminated): format, MAC (constant-time compare), and that
   now <= expiry + skew.  On success fills pair, side and expiry (any may be
   NULL) and returns 0; else a negative enum token_status. */
int token_check(const struct proxy_key *key, const char *text, uint64_t now, uint64_t skew,
                unsigned char pair[16], int *side, uint64_t *expiry);

/* A new pair id for a pair of `job`: random, tagged with HMAC(key, job).
   0, or -1 when there is no randomness. */
int token_pair_new(const struct proxy_key *key, const char *job,
                   unsigned char pair[TOKEN_PAIR_LEN]);
/* The pair's job tag as text (hex), the key of its job's share. */
void token_pair_tag(const unsigned char pair[TOKEN_PAIR_LEN], char out[TOKEN_JOB_TAG_TEXT]);

/* "ok", "malformed", "bad MAC", "expired", or "unknown error". */
const char *token_error(int code);

#endif
