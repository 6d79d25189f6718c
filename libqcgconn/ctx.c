/* A context: one process of one job and its control connection to the local
   helper (qcg_open, qcg_close). */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "address.h"
#include "internal.h"
#include "proto.h"
#include "verifier.h"

_Static_assert(sizeof(struct local_header) == 16, "local header layout");
/* qcgconn.h documents these bounds of the blocking calls. */
_Static_assert(QCG_OPEN_MAX_MS == 2 * HELPER_HELLO_TIMEOUT_MS, "qcg_open: unix_connect, HELLO");
_Static_assert(QCG_LISTEN_MAX_MS == HELPER_PUBLISH_TIMEOUT_MS, "qcg_listen: PUBLISH");
_Static_assert(QCG_CLOSE_MAX_MS == HELPER_WITHDRAW_TIMEOUT_MS, "qcg_close: WITHDRAW");
_Static_assert(QCG_HELPER_SEND_MAX_MS == HELPER_SEND_TIMEOUT_MS, "ctx_send");
_Static_assert(QCG_RECONNECT_MAX_MS == RECONNECT_CONNECT_MS, "reconnect.c");

static int parse_rank(const char *s, int32_t *rank)
{
    char *end;
    long v;

    if (s == NULL || *s == '\0')
        return -1;
    errno = 0;
    v = strtol(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < 0 || v > INT32_MAX)
        return -1;
    *rank = (int32_t)v;
    return 0;
}

/* Fills the identity fields of ctx from opts and the environment. */
static int ctx_identity(qcg_ctx *ctx, const struct qcg_options *opts)
{
    const char *job = opts && opts->job ? opts->job : getenv("QCG_JOB");
    const char *secret = opts && opts->secret ? opts->secret : getenv("QCG_JOB_SECRET");
    const char *sock =
        opts && opts->helper_socket ? opts->helper_socket : getenv("QCG_HELPER_SOCKET");
    /* Errors name the variable only when the value came from it. */
    const char *job_from = opts && opts->job ? "" : " (QCG_JOB)";
    const char *secret_from = opts && opts->secret ? "" : " (QCG_JOB_SECRET)";

    if (!job_valid(job)) {
        open_seterr("job id %s: want 1-%d characters [A-Za-z0-9._-]%s", job ? "invalid" : "missing",
                    QCG_JOB_MAX - 1, job_from);
        return QCG_EINVAL;
    }
    if (opts && opts->rank >= 0) {
        ctx->rank = opts->rank;
    } else if (parse_rank(getenv("QCG_RANK"), &ctx->rank) < 0) {
        open_seterr("rank missing or invalid: want a number >= 0 (QCG_RANK)");
        return QCG_EINVAL;
    }
    if (!secret_valid(secret)) {
        open_seterr("job secret %s: want 1-%d printable characters%s",
                    secret ? "invalid" : "missing", QCG_SECRET_MAX - 1, secret_from);
        return QCG_EINVAL;
    }
    /* The helper refuses it too; saying so here names the cause at once. */
    if (!secret_strong(secret)) {
        open_seterr("job secret too weak%s: about %d bits, at least %d needed; %s", secret_from,
                    secret_entropy_bits(secret), QCG_SECRET_MIN_BITS, QCG_SECRET_ADVICE);
        return QCG_EINVAL;
    }
    if (sock == NULL || *sock == '\0')
        sock = QCG_DEFAULT_HELPER_SOCKET;
    if (strlen(sock) >= sizeof(ctx->helper_path)) {
        open_seterr("helper socket path too long");
        return QCG_EINVAL;
    }
    if (opts && (opts->encrypt < QCG_ENCRYPT_OFF || opts->encrypt > QCG_ENCRYPT_NEVER)) {
        open_seterr("encrypt %d: want an enum qcg_encrypt", opts->encrypt);
        return QCG_EINVAL;
    }
    strcpy(ctx->job, job);
    strcpy(ctx->secret, secret);
    strcpy(ctx->helper_path, sock);
    ctx->encrypt = opts ? opts->encrypt : QCG_ENCRYPT_OFF;
    ctx->ssl_ctx = tls_ctx_new();
    if (ctx->ssl_ctx == NULL || tls_psk_derive(ctx->psk, ctx->secret, ctx->job) < 0) {
        open_seterr("OpenSSL: cannot set up TLS 1.3 with a PSK");
        return QCG_ESYS;
    }
    return 0;
}

void ctx_tls_self(const qcg_ctx *ctx, struct tls_self *self)
{
    self->job = ctx->job;
    self->rank = ctx->rank;
    self->cluster = ctx->cluster;
    self->psk = ctx->psk;
    self->ssl_ctx = ctx->ssl_ctx;
    self->policy = ctx->encrypt;
}

int ctx_check_info(qcg_ctx *ctx, const struct qcg_conn_info *info, size_t info_size)
{
    if (ctx->encrypt == QCG_ENCRYPT_OFF || (info != NULL && info_size >= sizeof(*info)))
        return 0;
    ctx_seterr(ctx, "encrypt is set: pass a struct qcg_conn_info to take the TLS session");
    return QCG_EINVAL;
}

/* The node's further addresses: each one, or "" and nothing after it. */
static bool others_valid(const struct local_hello_ok *ok)
{
    bool end = false;
    for (int i = 0; i < QCG_NODE_ADDRS - 1; i++) {
        if (ok->other_address[i][0] == '\0')
            end = true;
        else if (end || !address_valid(ok->other_address[i]))
            return false;
    }
    return true;
}

int ctx_check_hello_ok(const qcg_ctx *ctx, const struct local_hello_ok *ok, char *why, size_t len)
{
    if (ok->version != LOCAL_VERSION || ok->port_low == 0 || ok->port_low > ok->port_high ||
        !address_valid(ok->address) || !others_valid(ok)) {
        snprintf(why, len,
                 "helper at %s sent an invalid HELLO_OK (version %u, ports %u-%u, "
                 "address '%s')",
                 ctx->helper_path, ok->version, ok->port_low, ok->port_high, ok->address);
        return QCG_EPROTO;
    }
    return 0;
}

void ctx_hello(const qcg_ctx *ctx, struct local_hello *hello)
{
    memset(hello, 0, sizeof(*hello));
    hello->version = LOCAL_VERSION;
    hello->rank = ctx->rank;
    strcpy(hello->job, ctx->job);
    strcpy(hello->secret, ctx->secret);
}

static void ctx_free(qcg_ctx *ctx)
{
    if (ctx->helper_fd >= 0)
        close(ctx->helper_fd);
    if (ctx->listen_fd >= 0)
        close(ctx->listen_fd);
    accept_cleanup(ctx);
    lmsg_reader_reset(&ctx->ctl);
    explicit_bzero(ctx->secret, sizeof(ctx->secret));
    explicit_bzero(ctx->psk, sizeof(ctx->psk));
    SSL_CTX_free(ctx->ssl_ctx);
    free(ctx);
}

QCG_EXPORT int qcg_open_sized(qcg_ctx **ctxp, const struct qcg_options *opts, size_t opts_size)
{
    struct qcg_options known;
    struct local_hello hello;
    struct lmsg_reader reply;
    qcg_ctx *ctx;
    int rc;

    open_seterr("%s", "");
    if (ctxp == NULL) {
        open_seterr("ctx pointer is NULL");
        return QCG_EINVAL;
    }
    *ctxp = NULL;
    if (opts != NULL) {
        if (struct_in(&known, sizeof(known), opts, opts_size, OPTIONS_SIZE_0_1) < 0) {
            open_seterr("struct qcg_options of %zu bytes: libqcgconn %s knows %zu (no field "
                        "beyond them may be set), and none was smaller than %zu",
                        opts_size, QCG_VERSION_STRING, sizeof(known), OPTIONS_SIZE_0_1);
            return QCG_EINVAL;
        }
        opts = &known;
    }
    ctx = calloc(1, sizeof(*ctx));
    if (ctx == NULL)
        return QCG_ENOMEM;
    ctx->helper_fd = ctx->listen_fd = ctx->accept_epfd = ctx->accept_timer = -1;
    ctx->io_epfd = ctx->ready_efd = -1;
    ctx->next_request_id = 1;
    lmsg_reader_init(&ctx->ctl);
    if ((rc = ctx_identity(ctx, opts)) < 0)
        goto fail;
    if (accept_init(ctx) < 0) {
        open_seterr("epoll/timerfd: %s", keep_errno(errno));
        rc = QCG_ESYS;
        goto fail;
    }

    ctx->helper_fd = unix_connect(ctx->helper_path, HELPER_HELLO_TIMEOUT_MS);
    if (ctx->helper_fd < 0) {
        open_seterr("cannot connect to the helper at %s: %s", ctx->helper_path, keep_errno(errno));
        rc = QCG_ENOHELPER;
        goto fail;
    }
    if (accept_watch(ctx, ctx->helper_fd) < 0) {
        open_seterr("epoll: %s", keep_errno(errno));
        rc = QCG_ESYS;
        goto fail;
    }
    ctx_hello(ctx, &hello);
    rc = ctx_request(ctx, LOCAL_HELLO, &hello, HELPER_HELLO_TIMEOUT_MS, &reply);
    explicit_bzero(&hello, sizeof(hello));
    if (rc == 0 && reply.hdr.type != LOCAL_HELLO_OK) {
        ctx_seterr(ctx, "helper answered HELLO with message type %u", reply.hdr.type);
        rc = QCG_EPROTO;
    }
    if (rc < 0) {
        keep_cause(ctx->last_errno);
        open_seterr("helper at %s: %s", ctx->helper_path,
                    ctx->last_error[0] ? ctx->last_error : qcg_strerror(rc));
        goto fail;
    }
    if ((rc = ctx_check_hello_ok(ctx, &reply.payload.hello_ok, ctx->last_error,
                                 sizeof(ctx->last_error))) < 0) {
        open_seterr("%s", ctx->last_error);
        goto fail;
    }
    strcpy(ctx->cluster, reply.payload.hello_ok.cluster);
    strcpy(ctx->node, reply.payload.hello_ok.node);
    strcpy(ctx->address, reply.payload.hello_ok.address);
    memcpy(ctx->other_address, reply.payload.hello_ok.other_address, sizeof(ctx->other_address));
    ctx->port_low = reply.payload.hello_ok.port_low;
    ctx->port_high = reply.payload.hello_ok.port_high;
    *ctxp = ctx;
    return 0;
fail:
    ctx_free(ctx);
    return rc;
}

QCG_EXPORT int qcg_close(qcg_ctx *ctx)
{
    int open_ops;

    if (ctx == NULL)
        return 0;
    /* Operations left open are the caller's error; ended here, they never
       reach into the freed context, and a caller that ignores the result
       (written when qcg_close returned nothing) leaks nothing. */
    open_ops = connect_end_all(ctx);
    if (ctx->published && helper_ready(ctx)) {
        struct lmsg_reader reply;

        /* The helper withdraws on close anyway; asking first makes the
           withdrawal reach the grid before we are gone. */
        (void)ctx_request(ctx, LOCAL_WITHDRAW, NULL, HELPER_WITHDRAW_TIMEOUT_MS, &reply);
    }
    ctx_free(ctx);
    return open_ops > 0 ? QCG_EINUSE : 0;
}

int ctx_take_incoming(qcg_ctx *ctx, struct lmsg_reader *r)
{
    const struct local_incoming *in = &r->payload.incoming;

    if (r->fd < 0) {
        ctx_seterr(ctx, "helper sent INCOMING without a descriptor");
        return QCG_EPROTO;
    }
    if (in->peer_rank < 0 || in->technique == QCG_TECH_NONE || in->technique > QCG_TECH_PROXY ||
        (in->role == LOCAL_ROLE_HELLO &&
         (in->token[0] == '\0' || strlen(in->token) >= HS_TOKEN_MAX))) {
        ctx_seterr(ctx, "helper sent INCOMING with an invalid rank %d, technique %u or token",
                   in->peer_rank, in->technique);
        return QCG_EPROTO;
    }
    if (in->role == LOCAL_ROLE_HELLO)
        accept_add_hello(ctx, r->fd, in->peer_rank, in->technique, in->token);
    else
        accept_add_pending(ctx, r->fd, in->peer_rank, in->technique);
    r->fd = -1;
    return 0;
}

uint32_t ctx_next_id(qcg_ctx *ctx)
{
    uint32_t id = ctx->next_request_id++;

    if (ctx->next_request_id == 0)
        ctx->next_request_id = 1;
    return id;
}

int ctx_send(qcg_ctx *ctx, uint16_t type, uint32_t request_id, const void *payload)
{
    int rc;

    if (ctx->helper_fd < 0) {
        char gone[QCG_ERRMSG_MAX];

        helper_gone_text(ctx, gone, sizeof(gone));
        ctx_seterr(ctx, "%s", gone);
        return QCG_ENOHELPER;
    }
    /* The helper reads at its own pace (it bounds the requests it serves at
       once per connection and per uid); the socket buffer holds some 280
       LOOKUPs, so a caller keeps its connects in flight well below that
       (the BTL: btl_qcg_max_connects, 32). */
    rc = lmsg_send(ctx->helper_fd, type, request_id, payload,
                   now_us() + HELPER_SEND_TIMEOUT_MS * 1000u);
    if (rc < 0) {
        ctx_seterr(ctx, "sending to the helper: %s",
                   rc == QCG_ESYS ? keep_errno(errno) : qcg_strerror(rc));
        ctx_helper_lost(ctx, QCG_ENOHELPER);
        return QCG_ENOHELPER;
    }
    return 0;
}

/* One whole message in ctx->ctl: to its owner.  0, or an error that loses
   the connection. */
static int dispatch(qcg_ctx *ctx)
{
    struct lmsg_reader *r = &ctx->ctl;
    int rc;

    if (r->hdr.request_id == 0) {
        if (r->hdr.type == LOCAL_INCOMING)
            return ctx_take_incoming(ctx, r);
        if (r->hdr.type == LOCAL_ERROR) {
            /* Refused as a whole (uid not allowed, too many clients). */
            rc = r->payload.error.code;
            ctx_seterr(ctx, "%s", r->payload.error.message);
            return rc < 0 && rc >= QCG_EPEER ? rc : QCG_ENOHELPER;
        }
        ctx_seterr(ctx, "the helper sent an unexpected message (type %u)", r->hdr.type);
        return QCG_EPROTO;
    }
    if (ctx->helper_id != 0 && r->hdr.request_id == ctx->helper_id)
        return helper_reply(ctx, r);
    if (ctx->sync_id != 0 && r->hdr.request_id == ctx->sync_id) {
        *ctx->sync_reply = *r;
        lmsg_reader_init(r);
        ctx->sync_id = 0;
        ctx->sync_done = true;
        return 0;
    }
    /* A reply nobody waits for any more (a connect that moved on, a
       request that timed out) is dropped. */
    (void)connect_deliver(ctx, r);
    return 0;
}

/* Messages handled per call: a helper that floods us cannot keep us here. */
#define READ_HELPER_MAX 64

int ctx_read_helper(qcg_ctx *ctx)
{
    for (int i = 0; i < READ_HELPER_MAX && ctx->helper_fd >= 0; i++) {
        int rc = lmsg_read(ctx->helper_fd, &ctx->ctl);

        if (rc == 0)
            return 0;
        if (rc > 0) {
            rc = dispatch(ctx);
            lmsg_reader_reset(&ctx->ctl);
            if (rc == 0)
                continue;
        } else {
            ctx_seterr(ctx, "%s",
                       rc == QCG_ENOHELPER ? "the helper closed the connection"
                       : rc == QCG_EPROTO  ? "the helper sent an invalid message"
                                           : keep_errno(errno));
            rc = rc == QCG_EPROTO ? QCG_EPROTO : QCG_ENOHELPER;
        }
        ctx_helper_lost(ctx, rc);
        return rc;
    }
    return ctx->helper_fd >= 0 ? 0 : QCG_ENOHELPER;
}

int ctx_request(qcg_ctx *ctx, uint16_t type, const void *payload, int timeout_ms,
                struct lmsg_reader *reply)
{
    uint64_t deadline = now_us() + (uint64_t)timeout_ms * 1000u;
    uint32_t id;
    int rc;

    lmsg_reader_init(reply);
    id = ctx_next_id(ctx);
    if ((rc = ctx_send(ctx, type, id, payload)) < 0)
        return rc;
    ctx->sync_id = id;
    ctx->sync_done = false;
    ctx->sync_reply = reply;
    /* Bounded by the deadline, even against a helper that floods us. */
    for (;;) {
        rc = ctx_read_helper(ctx);
        if (ctx->sync_done || rc < 0)
            break;
        rc = wait_fd(ctx->helper_fd, POLLIN, deadline);
        if (rc <= 0) {
            /* A late reply has an id nobody waits for: it will be dropped. */
            if (rc == 0)
                ctx_seterr(ctx, "no answer from the helper within %d ms", timeout_ms);
            else
                ctx_seterr(ctx, "poll: %s", keep_errno(errno));
            rc = rc == 0 ? QCG_ETIMEDOUT : QCG_ESYS;
            break;
        }
    }
    ctx->sync_id = 0;
    ctx->sync_reply = NULL;
    if (!ctx->sync_done)
        return rc < 0 ? rc : QCG_ENOHELPER;
    ctx->sync_done = false;
    if (reply->hdr.type == LOCAL_ERROR) {
        ctx_seterr(ctx, "%s", reply->payload.error.message);
        return local_error_code(reply->payload.error.code);
    }
    return 0;
}

int local_error_code(int32_t code)
{
    if (code == LOCAL_ERETRY)
        return QCG_EBUSY;
    return code < 0 && code >= QCG_EPEER ? code : QCG_EPROTO;
}
