/*
 * Authenticated punch answers (issue 17).  The reflector's PEER answer says
 * where a node connects to, over plain TCP: an on-path attacker could
 * redirect the punched connection.  The token's MAC (util/token.h), which
 * the node received from the broker over TLS and the reflector recomputes
 * from its key, keys both directions, and never travels in clear:
 *
 *   node:      PUNCH <token with version 2 and, instead of its MAC, a proof> ...
 *              proof = HMAC-SHA256(MAC, "qcg punch request" | version 1..expiry)[:16]
 *   reflector: PEER <peer-addr> <peer-port> <own-addr> <own-port> <tag>
 *              tag   = HMAC-SHA256(MAC, "qcg punch answer" | the answer before " <tag>")[:16]
 *
 * Still one round trip.  A version 1 token (an older node) gets the answer
 * without a tag; nodes of this version accept only tagged answers.
 */
#ifndef QCG_PUNCH_AUTH_H
#define QCG_PUNCH_AUTH_H

#include <stddef.h>

#include "token.h"

#define PUNCH_AUTH_VERSION 2
#define PUNCH_AUTH_KEY_LEN TOKEN_MAC_LEN
#define PUNCH_AUTH_TAG_TEXT (2 * 16 + 1)

/* Node: the token as it goes to the reflector (wire, TOKEN_TEXT_LEN + 1
   bytes) and the key its answer is checked with.  0, or -1 when token is
   not a version 1 token. */
int punch_auth_request(const char *token, char *wire, size_t wirelen,
                       unsigned char key[PUNCH_AUTH_KEY_LEN]);
/* Reflector: a version 2 wire token with a valid proof becomes the token the
   broker issued (full, TOKEN_TEXT_LEN + 1 bytes, for token_check) and the
   answer key: 1.  A version 1 token is copied unchanged: 0.  -1 when the
   proof does not match or the text is malformed (why names it). */
int punch_auth_check(const struct proxy_key *pk, const char *wire, char *full, size_t fulllen,
                     unsigned char key[PUNCH_AUTH_KEY_LEN], const char **why);
/* The tag of an answer line (without its '\n'), as hex. */
void punch_auth_tag(const unsigned char key[PUNCH_AUTH_KEY_LEN], const char *answer,
                    char tag[PUNCH_AUTH_TAG_TEXT]);
/* Node: checks the tag at the end of line and cuts it off (line then reads
   as before).  0, or -1 with a reason in why. */
int punch_auth_answer(char *line, const unsigned char key[PUNCH_AUTH_KEY_LEN], char *why,
                      size_t whylen);

#endif
