/* The TLS 1.3 PSK handshake between processes; see tls_psk.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>

#include "internal.h"
#include "tls_bio.h"
#include "tls_psk.h"
#include "tls_session.h"

/* ALPN, wire format (length byte, name). */
static const unsigned char alpn_tls[] = "\x09qcg/1-tls";
static const unsigned char alpn_plain[] = "\x0bqcg/1-plain";
/* TLS_OFFER_EITHER: both, the server's policy picks. */
static const unsigned char alpn_either[] = "\x09qcg/1-tls\x0bqcg/1-plain";
#define ALPN_TLS_LEN (sizeof(alpn_tls) - 1)
#define ALPN_PLAIN_LEN (sizeof(alpn_plain) - 1)
#define ALPN_EITHER_LEN (sizeof(alpn_either) - 1)
/* TLS_AES_128_GCM_SHA256: AES-NI here; the PSK's hash is SHA-256. */
/* The session's read buffer: four full records. */
#define TLS_READ_BUFFER (4 * (16384 + 256))
static const unsigned char cipher_id[2] = {0x13, 0x01};

/* HKDF labels: this PSK only (the services' verifier has its own). */
static const char psk_salt[] = "qcg-connect process-to-process PSK";
static const char psk_info[] = "qcg-connect/1 tls13-external-psk job=";

struct tls_hs {
    SSL *ssl;
    bool server;
    bool encrypt; /* the choice: ours (client) or the peer's (server) */
    bool either;  /* client: both offered, the server chose (encrypt set once done) */
    struct tls_self self;
    uint8_t psk[TLS_PSK_SIZE];
    int32_t expect_rank;
    uint8_t identity[HS_IDENTITY_SIZE]; /* ours, or the peer's as received */
    struct hs_hello peer;               /* server: the decoded identity */
    bool identity_seen;
    /* server: the first flight is out (SSL_read_early_data said so) */
    bool flight_sent;
    enum { CLAIM_NONE, CLAIM_WAIT, CLAIM_GO, CLAIM_REFUSED } claim;
    bool early;             /* server: a claim of a token allowed 0.5-RTT */
    enum hs_status refusal; /* server: ours, sent as an alert */
    int alert_in;           /* the peer's alert, or -1 */
    bool abandoned;         /* the peer gave up: closed, or its connect ended */
    char why[256];
};

int tls_psk_derive(uint8_t psk[TLS_PSK_SIZE], const char *secret, const char *job)
{
    char info[sizeof(psk_info) + HS_JOB_MAX];
    size_t outlen = TLS_PSK_SIZE;
    EVP_PKEY_CTX *pc = EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, NULL);
    int n = snprintf(info, sizeof(info), "%s%s", psk_info, job);
    int ok =
        pc != NULL && n > 0 && (size_t)n < sizeof(info) && EVP_PKEY_derive_init(pc) > 0 &&
        EVP_PKEY_CTX_set_hkdf_md(pc, EVP_sha256()) > 0 &&
        EVP_PKEY_CTX_set1_hkdf_salt(pc, (const unsigned char *)psk_salt, (int)strlen(psk_salt)) >
            0 &&
        EVP_PKEY_CTX_set1_hkdf_key(pc, (const unsigned char *)secret, (int)strlen(secret)) > 0 &&
        EVP_PKEY_CTX_add1_hkdf_info(pc, (const unsigned char *)info, n) > 0 &&
        EVP_PKEY_derive(pc, psk, &outlen) > 0 && outlen == TLS_PSK_SIZE;

    EVP_PKEY_CTX_free(pc);
    return ok ? 0 : -1;
}

static int client_hello_cb(SSL *ssl, int *al, void *arg);
static int alpn_select_cb(SSL *ssl, const unsigned char **out, unsigned char *outlen,
                          const unsigned char *in, unsigned int inlen, void *arg);

static void info_cb(const SSL *ssl, int where, int ret)
{
    struct tls_hs *t = SSL_get_app_data(ssl);

    if (t != NULL && (where & SSL_CB_READ_ALERT) == SSL_CB_READ_ALERT && t->alert_in < 0)
        t->alert_in = ret & 0xff;
}

SSL_CTX *tls_ctx_new(void)
{
    SSL_CTX *c = SSL_CTX_new(TLS_method());

    if (c == NULL)
        return NULL;
    /* TLS 1.3 only (a downgrade fails), no tickets or session cache (every
       connection authenticates afresh), no compatibility records. */
    if (SSL_CTX_set_min_proto_version(c, TLS1_3_VERSION) != 1 ||
        SSL_CTX_set_max_proto_version(c, TLS1_3_VERSION) != 1 ||
        SSL_CTX_set_ciphersuites(c, "TLS_AES_128_GCM_SHA256") != 1 ||
        SSL_CTX_set_num_tickets(c, 0) != 1) {
        SSL_CTX_free(c);
        return NULL;
    }
    SSL_CTX_set_session_cache_mode(c, SSL_SESS_CACHE_OFF);
    SSL_CTX_set_options(c, SSL_OP_NO_TICKET | SSL_OP_NO_RENEGOTIATION);
    SSL_CTX_clear_options(c, SSL_OP_ENABLE_MIDDLEBOX_COMPAT | SSL_OP_ALLOW_NO_DHE_KEX);
    /* Partial writes, like send(2). */
    SSL_CTX_set_mode(c, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    SSL_CTX_set_max_early_data(c, 0);
    /* Room for several records per read once read-ahead is on (encrypted
       sessions, tls_hs_take): fewer system calls per byte. */
    SSL_CTX_set_default_read_buffer_len(c, TLS_READ_BUFFER);
    /* No certificate is ever accepted: the PSK is the only authentication. */
    SSL_CTX_set_verify(c, SSL_VERIFY_PEER, NULL);
    /* Needed by a verifying server, even with no session cache. */
    SSL_CTX_set_session_id_context(c, (const unsigned char *)"qcg", 3);
    SSL_CTX_set_info_callback(c, info_cb);
    SSL_CTX_set_client_hello_cb(c, client_hello_cb, NULL);
    SSL_CTX_set_alpn_select_cb(c, alpn_select_cb, NULL);
    return c;
}

bool tls_policy_encrypts(const struct tls_self *self, const char *peer_cluster)
{
    switch (self->policy) {
    case QCG_ENCRYPT_ALWAYS:
        return true;
    case QCG_ENCRYPT_INTER_SITE:
        return strcmp(peer_cluster, self->cluster) != 0;
    default:
        return false;
    }
}

static SSL_SESSION *psk_session(SSL *ssl, const uint8_t psk[TLS_PSK_SIZE])
{
    const SSL_CIPHER *cipher = SSL_CIPHER_find(ssl, cipher_id);
    SSL_SESSION *s = SSL_SESSION_new();

    if (cipher == NULL || s == NULL || SSL_SESSION_set1_master_key(s, psk, TLS_PSK_SIZE) != 1 ||
        SSL_SESSION_set_cipher(s, cipher) != 1 ||
        SSL_SESSION_set_protocol_version(s, TLS1_3_VERSION) != 1 ||
        SSL_SESSION_set1_id_context(s, (const unsigned char *)"qcg", 3) != 1) {
        SSL_SESSION_free(s);
        return NULL;
    }
    return s;
}

static int use_session_cb(SSL *ssl, const EVP_MD *md, const unsigned char **id, size_t *idlen,
                          SSL_SESSION **sess)
{
    struct tls_hs *t = SSL_get_app_data(ssl);

    (void)md; /* SHA-256, the one suite we offer */
    *sess = psk_session(ssl, t->psk);
    if (*sess == NULL)
        return 0;
    *id = t->identity;
    *idlen = sizeof(t->identity);
    return 1;
}

static int find_session_cb(SSL *ssl, const unsigned char *id, size_t idlen, SSL_SESSION **sess)
{
    struct tls_hs *t = SSL_get_app_data(ssl);

    *sess = NULL;
    /* Only the identity the ClientHello callback checked. */
    if (!t->identity_seen || idlen != sizeof(t->identity) || memcmp(id, t->identity, idlen) != 0)
        return 1;
    *sess = psk_session(ssl, t->psk);
    return *sess != NULL;
}

/* The first identity of a pre_shared_key extension. */
static int first_identity(SSL *ssl, const unsigned char **id, size_t *len)
{
    const unsigned char *ext;
    size_t extlen, n;

    if (SSL_client_hello_get0_ext(ssl, TLSEXT_TYPE_psk, &ext, &extlen) != 1 || extlen < 4)
        return -1;
    n = (size_t)ext[2] << 8 | ext[3];
    if (n + 4 > extlen)
        return -1;
    *id = ext + 4;
    *len = n;
    return 0;
}

/* Whether the ClientHello's ALPN list holds proto (wire format). */
static bool alpn_offers(SSL *ssl, const unsigned char *proto, size_t plen)
{
    const unsigned char *ext;
    size_t extlen;

    if (SSL_client_hello_get0_ext(ssl, TLSEXT_TYPE_application_layer_protocol_negotiation, &ext,
                                  &extlen) != 1 ||
        extlen < 2)
        return false;
    for (size_t i = 2; i < extlen; i += 1 + ext[i]) {
        if (i + 1 + ext[i] > extlen)
            return false;
        if (1 + (size_t)ext[i] == plen && memcmp(ext + i, proto, plen) == 0)
            return true;
    }
    return false;
}

static int refuse(struct tls_hs *t, enum hs_status st, int alert, int *al)
{
    t->refusal = st;
    *al = alert;
    return SSL_CLIENT_HELLO_ERROR;
}

/* The acceptor's checks of the identity and the choice, before any key is
   made; the binder (checked next by OpenSSL) proves the secret. */
static int client_hello_cb(SSL *ssl, int *al, void *arg)
{
    struct tls_hs *t = SSL_get_app_data(ssl);
    const unsigned char *id;
    size_t idlen;
    enum hs_status st;
    bool want_tls, want_plain;

    (void)arg;
    if (t->claim == CLAIM_REFUSED)
        return refuse(t, HS_NO_WAITER, SSL_AD_USER_CANCELLED, al);
    if (t->claim == CLAIM_GO)
        return SSL_CLIENT_HELLO_SUCCESS;
    if (first_identity(ssl, &id, &idlen) < 0)
        return refuse(t, HS_MALFORMED, SSL_AD_HANDSHAKE_FAILURE, al);
    st = hs_identity_parse(id, idlen, &t->peer);
    if (st != HS_OK)
        return refuse(t, st, st == HS_BAD_VERSION ? SSL_AD_PROTOCOL_VERSION : SSL_AD_DECODE_ERROR,
                      al);
    memcpy(t->identity, id, HS_IDENTITY_SIZE);
    t->identity_seen = true;
    if (strcmp(t->peer.job, t->self.job) != 0)
        return refuse(t, HS_DENIED, SSL_AD_UNKNOWN_PSK_IDENTITY, al);
    if (t->peer.to_rank != t->self.rank ||
        (t->expect_rank >= 0 && t->peer.from_rank != t->expect_rank))
        return refuse(t, HS_WRONG_RANK, SSL_AD_ACCESS_DENIED, al);
    /* Tokens name our connects; a connection the helper handed over is no
       answer to one. */
    if (t->peer.token[0] != '\0' && t->expect_rank >= 0)
        return refuse(t, HS_MALFORMED, SSL_AD_DECODE_ERROR, al);
    want_tls = alpn_offers(ssl, alpn_tls, ALPN_TLS_LEN);
    want_plain = alpn_offers(ssl, alpn_plain, ALPN_PLAIN_LEN);
    if (!want_tls && !want_plain)
        return refuse(t, HS_MALFORMED, SSL_AD_NO_APPLICATION_PROTOCOL, al);
    if (want_tls && want_plain) {
        /* The client leaves it to us (a reversed connection's target whose
           policy is never): ours decides. */
        want_tls = tls_policy_encrypts(&t->self, t->peer.cluster);
        want_plain = !want_tls;
    }
    if (want_tls && t->self.policy == QCG_ENCRYPT_OFF)
        return refuse(t, HS_NO_TLS, SSL_AD_NO_APPLICATION_PROTOCOL, al);
    if (want_plain && tls_policy_encrypts(&t->self, t->peer.cluster))
        return refuse(t, HS_PLAIN_REFUSED, SSL_AD_INSUFFICIENT_SECURITY, al);
    t->encrypt = want_tls;
    if (t->encrypt)
        SSL_set_options(ssl, SSL_OP_ENABLE_KTLS);
    if (t->peer.token[0] != '\0') {
        t->claim = CLAIM_WAIT;
        return SSL_CLIENT_HELLO_RETRY;
    }
    return SSL_CLIENT_HELLO_SUCCESS;
}

static int alpn_select_cb(SSL *ssl, const unsigned char **out, unsigned char *outlen,
                          const unsigned char *in, unsigned int inlen, void *arg)
{
    struct tls_hs *t = SSL_get_app_data(ssl);
    const unsigned char *want = t->encrypt ? alpn_tls : alpn_plain;

    (void)in;
    (void)inlen;
    (void)arg;
    *out = want + 1;
    *outlen = want[0];
    return SSL_TLSEXT_ERR_OK;
}

static struct tls_hs *hs_new(const struct tls_self *self, int fd, bool server, char *why,
                             size_t len)
{
    struct tls_hs *t = calloc(1, sizeof(*t));
    BIO *bio;

    if (t == NULL) {
        snprintf(why, len, "out of memory");
        return NULL;
    }
    t->server = server;
    t->self = *self;
    memcpy(t->psk, self->psk, TLS_PSK_SIZE);
    t->self.psk = t->psk;
    t->alert_in = -1;
    t->expect_rank = -1;
    t->ssl = SSL_new(self->ssl_ctx);
    bio = t->ssl != NULL ? tls_bio_new(fd) : NULL;
    if (bio == NULL) {
        snprintf(why, len, "TLS: cannot make a session (out of memory)");
        tls_hs_free(t);
        return NULL;
    }
    SSL_set_bio(t->ssl, bio, bio);
    SSL_set_app_data(t->ssl, t);
    return t;
}

struct tls_hs *tls_hs_client(const struct tls_self *self, int fd, int32_t to_rank,
                             const char *token, uint16_t technique, int offer, char *why,
                             size_t len)
{
    struct tls_hs *t = hs_new(self, fd, false, why, len);
    struct hs_hello h;
    bool encrypt = offer == TLS_OFFER_TLS;

    if (t == NULL)
        return NULL;
    t->encrypt = encrypt;
    t->either = offer == TLS_OFFER_EITHER;
    if (hs_identity_build(t->identity, &h, self->job, self->rank, self->cluster, to_rank, token,
                          technique) < 0) {
        snprintf(why, len, "cannot build the handshake identity");
        tls_hs_free(t);
        return NULL;
    }
    SSL_set_psk_use_session_callback(t->ssl, use_session_cb);
    if (SSL_set_alpn_protos(t->ssl,
                            t->either ? alpn_either
                            : encrypt ? alpn_tls
                                      : alpn_plain,
                            t->either ? ALPN_EITHER_LEN
                            : encrypt ? ALPN_TLS_LEN
                                      : ALPN_PLAIN_LEN) != 0) {
        snprintf(why, len, "TLS: cannot set ALPN");
        tls_hs_free(t);
        return NULL;
    }
    if (encrypt)
        SSL_set_options(t->ssl, SSL_OP_ENABLE_KTLS);
    SSL_set_connect_state(t->ssl);
    return t;
}

struct tls_hs *tls_hs_server(const struct tls_self *self, int fd, int32_t expect_rank, char *why,
                             size_t len)
{
    struct tls_hs *t = hs_new(self, fd, true, why, len);

    if (t == NULL)
        return NULL;
    t->expect_rank = expect_rank;
    SSL_set_psk_find_session_callback(t->ssl, find_session_cb);
    SSL_set_accept_state(t->ssl);
    return t;
}

/* The connecting side: the acceptor's alert as a reason. */
static int client_refused(struct tls_hs *t)
{
    const char *why;
    int code;

    switch (t->alert_in) {
    /* OpenSSL's answer to a binder that does not verify. */
    case SSL_AD_ILLEGAL_PARAMETER:
    case SSL_AD_DECRYPT_ERROR:
        code = QCG_EDENIED;
        why = "the peer denied our handshake: not the same job secret";
        break;
    case SSL_AD_UNKNOWN_PSK_IDENTITY:
        code = QCG_EDENIED;
        why = "the peer denied our handshake: another job";
        break;
    case SSL_AD_ACCESS_DENIED:
        code = QCG_EPEER;
        why = "the process at the contact address is not the rank we asked for";
        break;
    case SSL_AD_USER_CANCELLED:
        code = QCG_EPEER;
        why = "the peer no longer waits for this connection (its connect ended)";
        t->abandoned = true;
        break;
    case SSL_AD_INSUFFICIENT_SECURITY:
        code = QCG_EDENIED;
        why = "the peer denied a plain connection: its policy demands encryption";
        break;
    case SSL_AD_NO_APPLICATION_PROTOCOL:
        code = QCG_EPROTO;
        why = "the peer refused encryption: its program reads plain sockets only";
        break;
    case SSL_AD_DECODE_ERROR:
    case SSL_AD_HANDSHAKE_FAILURE:
        code = QCG_EPROTO;
        why = "the peer refused our hello as malformed";
        break;
    case SSL_AD_PROTOCOL_VERSION:
        code = QCG_EPROTO;
        why = "the peer speaks another handshake or TLS version";
        break;
    default:
        code = QCG_EPROTO;
        snprintf(t->why, sizeof(t->why), "the peer refused our hello: TLS alert %s",
                 SSL_alert_desc_string_long(t->alert_in));
        return code;
    }
    snprintf(t->why, sizeof(t->why), "%s", why);
    return code;
}

static int failed(struct tls_hs *t, int err)
{
    unsigned long e = ERR_peek_error();
    int reason = ERR_GET_REASON(e);

    if (t->server && t->refusal != HS_OK) {
        snprintf(t->why, sizeof(t->why), "%s", hs_status_name(t->refusal));
        ERR_clear_error();
        return t->refusal == HS_DENIED || t->refusal == HS_PLAIN_REFUSED ? QCG_EDENIED : QCG_EPROTO;
    }
    if (!t->server && t->alert_in >= 0) {
        ERR_clear_error();
        return client_refused(t);
    }
    ERR_clear_error();
    if (err == SSL_ERROR_SYSCALL || err == SSL_ERROR_ZERO_RETURN ||
        reason == SSL_R_UNEXPECTED_EOF_WHILE_READING) {
        snprintf(t->why, sizeof(t->why), "the peer closed the connection during the handshake%s%s",
                 errno != 0 && err == SSL_ERROR_SYSCALL ? ": " : "",
                 errno != 0 && err == SSL_ERROR_SYSCALL ? strerror(errno) : "");
        t->abandoned = true;
        return QCG_EPEER;
    }
    if (reason == SSL_R_BINDER_DOES_NOT_VERIFY) {
        snprintf(t->why, sizeof(t->why), "wrong job secret (the PSK binder does not verify)");
        return QCG_EDENIED;
    }
    if (reason == SSL_R_UNSUPPORTED_PROTOCOL || reason == SSL_R_WRONG_VERSION_NUMBER ||
        reason == SSL_R_VERSION_TOO_LOW) {
        snprintf(t->why, sizeof(t->why), "not a TLS 1.3 handshake (downgrade refused)");
        return QCG_EPROTO;
    }
    snprintf(t->why, sizeof(t->why), "TLS handshake failed: %s",
             e != 0 ? ERR_reason_error_string(e) : "unknown error");
    if (t->why[strlen("TLS handshake failed: ")] == '\0' || e == 0 ||
        ERR_reason_error_string(e) == NULL)
        snprintf(t->why, sizeof(t->why), "TLS handshake failed (reason %d)", reason);
    return QCG_EPROTO;
}

/* Both sides: the handshake ended well; check it was ours. */
static int verified(struct tls_hs *t)
{
    const unsigned char *proto = NULL;
    unsigned int plen = 0;
    const unsigned char *want = t->encrypt ? alpn_tls : alpn_plain;

    SSL_get0_alpn_selected(t->ssl, &proto, &plen);
    if (t->either && plen == alpn_tls[0] && memcmp(proto, alpn_tls + 1, plen) == 0) {
        t->encrypt = true;
        want = alpn_tls;
    }
    if (SSL_version(t->ssl) != TLS1_3_VERSION || SSL_session_reused(t->ssl) != 1) {
        snprintf(t->why, sizeof(t->why), "the peer completed a handshake without our PSK");
        return QCG_EPROTO;
    }
    if (plen != want[0] || memcmp(proto, want + 1, plen) != 0) {
        snprintf(t->why, sizeof(t->why), "the peer did not confirm %s",
                 t->encrypt ? "encryption" : "a plain connection");
        return QCG_EPROTO;
    }
    return TLS_DONE;
}

/* The server's first steps go through SSL_read_early_data, which returns
   once the server's flight is out; the client sends no early data (none
   is allowed), so there is nothing to read.  1 the flight is out, 0 see
   SSL_get_error, QCG_EPROTO early data came. */
static int server_flight(struct tls_hs *t)
{
    unsigned char none;
    size_t n = 0;
    int r = SSL_read_early_data(t->ssl, &none, sizeof(none), &n);

    if (r == SSL_READ_EARLY_DATA_FINISH) {
        t->flight_sent = true;
        return 1;
    }
    if (r == SSL_READ_EARLY_DATA_SUCCESS) {
        snprintf(t->why, sizeof(t->why), "the peer sent early data, which we never allow");
        return QCG_EPROTO;
    }
    return 0;
}

int tls_hs_step(struct tls_hs *t)
{
    int r = 0, err;

    ERR_clear_error();
    errno = 0;
    if (t->server && !t->flight_sent) {
        r = server_flight(t);
        if (r < 0)
            return r;
        /* Done before the client's Finished (0.5-RTT, RFC 8446 §4.4.4): an
           encrypted answer to one of our connects.  Its ClientHello names
           the connect's one-time token under the binder, so it was made for
           this attempt by a holder of the job secret.  A copy replayed in
           time only gets records sealed with the key share of the
           ClientHello's maker, and never sends the Finished (qcg_tls_* then
           fail, tls_session.c); while two connections carry one token,
           the claim allows neither to go early (accept.c). */
        if (r == 1 && t->encrypt && t->early)
            return verified(t);
    }
    if (!t->server || t->flight_sent)
        r = SSL_do_handshake(t->ssl);
    if (r == 1)
        return verified(t);
    err = SSL_get_error(t->ssl, r);
    switch (err) {
    case SSL_ERROR_WANT_READ:
        return TLS_WANT_READ;
    case SSL_ERROR_WANT_WRITE:
        return TLS_WANT_WRITE;
    case SSL_ERROR_WANT_CLIENT_HELLO_CB:
        return TLS_CLAIM;
    default:
        return failed(t, err);
    }
}

bool tls_hs_answered(const struct tls_hs *t)
{
    return t->server && t->flight_sent;
}

bool tls_hs_heard(const struct tls_hs *t)
{
    return t->server && BIO_number_read(SSL_get_rbio(t->ssl)) > 0;
}

bool tls_hs_hello_seen(const struct tls_hs *t)
{
    return t->server && t->identity_seen;
}

const char *tls_hs_waits_for(const struct tls_hs *t)
{
    if (!t->identity_seen)
        return "no ClientHello came";
    if (!t->flight_sent)
        return "the ClientHello came, our answer is not out";
    return "our answer went out, the peer's Finished did not come";
}

bool tls_hs_abandoned(const struct tls_hs *t)
{
    return t->abandoned;
}

const char *tls_hs_why(const struct tls_hs *t)
{
    return t->why;
}

uint64_t tls_hs_bytes(const struct tls_hs *t)
{
    return BIO_number_read(SSL_get_rbio(t->ssl)) + BIO_number_written(SSL_get_wbio(t->ssl));
}

int tls_hs_fd(const struct tls_hs *t)
{
    return SSL_get_fd(t->ssl);
}

const struct hs_hello *tls_hs_peer(const struct tls_hs *t)
{
    return &t->peer;
}

void tls_hs_claim(struct tls_hs *t, bool claimed, bool early)
{
    t->claim = claimed ? CLAIM_GO : CLAIM_REFUSED;
    t->early = early;
}

int tls_hs_take(struct tls_hs *t, struct qcg_tls **session, unsigned *encryption)
{
    SSL *ssl = t->ssl;
    /* A server done early (tls_hs_step): the client's Finished is to come. */
    bool unfinished = !SSL_is_init_finished(ssl);

    *session = NULL;
    *encryption = 0;
    if (!t->encrypt) {
        /* Plain: nothing more goes through the session (no tickets, no
           close_notify), the raw socket carries the rest. */
        tls_hs_free(t);
        return 0;
    }
    SSL_set_app_data(ssl, NULL);
    /* Only now: during the handshake it could have read what follows a
       plain one's handshake.  An unfinished one keeps reading record by
       record until the Finished is in (tls_session.c). */
    if (!unfinished)
        SSL_set_read_ahead(ssl, 1);
    t->ssl = NULL;
    tls_hs_free(t);
    *encryption = tls_session_encryption(ssl);
    *session = tls_session_new(ssl, *encryption, unfinished);
    if (*session == NULL) {
        SSL_free(ssl);
        return QCG_ENOMEM;
    }
    return 0;
}

void tls_hs_free(struct tls_hs *t)
{
    if (t == NULL)
        return;
    SSL_free(t->ssl);
    OPENSSL_cleanse(t, sizeof(*t));
    free(t);
}
