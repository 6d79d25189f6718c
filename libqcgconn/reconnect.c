/* The helper connection across the helper's restarts.  A lost connection is
   made again with backoff while the context lives; on it we say HELLO again
   and publish the same listener again (connections already made never went
   through the helper and are untouched).  Nothing here has a thread: whoever
   pumps (qcg_accept, a connect operation waiting for the helper) moves it
   on, and the accept side's timer and the waiting operations' timers wake
   them when the next step is due. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "backoff.h"
#include "internal.h"

static unsigned next_backoff(qcg_ctx *ctx)
{
    return backoff_ms(ctx->helper_failures++, RECONNECT_BACKOFF_MIN_MS, RECONNECT_BACKOFF_MAX_MS);
}

void ctx_helper_lost(qcg_ctx *ctx, int why)
{
    int fd = ctx->helper_fd;
    uint64_t now = now_us();

    /* A helper that broke the protocol is an error worth telling the next
       qcg_accept (connected again all the same); one that went away is not:
       it is being restarted. */
    if (why == QCG_EPROTO && ctx->helper_error == 0)
        ctx->helper_error = why;
    if (fd >= 0) {
        if (ctx->io_epfd >= 0)
            accept_unwatch(ctx, fd);
        close(fd);
        ctx->helper_fd = -1;
    }
    lmsg_reader_reset(&ctx->ctl);
    /* Gone since the first loss, whatever attempts failed since. */
    if (ctx->hstate == H_UP)
        ctx->helper_gone_us = now;
    ctx->hstate = H_DOWN;
    ctx->helper_id = 0;
    ctx->helper_at_us = now + next_backoff(ctx) * 1000u;
    if (fd >= 0)
        connect_helper_lost(ctx, fd);
}

bool helper_ready(const qcg_ctx *ctx)
{
    return ctx->hstate == H_UP && ctx->helper_fd >= 0;
}

void helper_gone_text(const qcg_ctx *ctx, char *buf, size_t len)
{
    uint64_t now = now_us(), since = ctx->helper_gone_us ? ctx->helper_gone_us : now;

    snprintf(buf, len, "the helper at %s has been gone for %.1f s", ctx->helper_path,
             (double)(now - since) / 1e6);
}

/* The helper takes requests again. */
static void helper_up(qcg_ctx *ctx)
{
    ctx->hstate = H_UP;
    ctx->helper_id = 0;
    ctx->helper_gone_us = 0;
    ctx->helper_failures = 0;
    connect_helper_back(ctx);
}

/* Sends message type under a fresh id we wait for until HELPER_*_TIMEOUT. */
static int helper_ask(qcg_ctx *ctx, uint16_t type, const void *payload, unsigned timeout_ms)
{
    ctx->helper_id = ctx_next_id(ctx);
    ctx->helper_at_us = now_us() + timeout_ms * 1000u;
    return ctx_send(ctx, type, ctx->helper_id, payload);
}

static void republish(qcg_ctx *ctx)
{
    struct local_publish pub = {.port = ctx->listen_port, .addresses = ctx->listen_addresses};

    ctx->hstate = H_PUBLISH;
    (void)helper_ask(ctx, LOCAL_PUBLISH, &pub, HELPER_PUBLISH_TIMEOUT_MS);
}

/* The listener stays unpublished: the next qcg_accept says why. */
static void republish_give_up(qcg_ctx *ctx, int code, const char *why)
{
    ctx_seterr(ctx, "publishing port %u again after the helper's restart: %s", ctx->listen_port,
               why);
    ctx->helper_error = code;
    helper_up(ctx);
}

int helper_reply(qcg_ctx *ctx, struct lmsg_reader *r)
{
    char why[QCG_ERRMSG_MAX];
    int code;

    ctx->helper_id = 0;
    if (ctx->hstate == H_HELLO) {
        if (r->hdr.type == LOCAL_ERROR) {
            ctx_seterr(ctx, "helper at %s refused HELLO: %s", ctx->helper_path,
                       r->payload.error.message);
            return QCG_ENOHELPER;
        }
        if (r->hdr.type != LOCAL_HELLO_OK) {
            ctx_seterr(ctx, "helper answered HELLO with message type %u", r->hdr.type);
            return QCG_EPROTO;
        }
        if (ctx_check_hello_ok(ctx, &r->payload.hello_ok, why, sizeof(why)) < 0) {
            ctx_seterr(ctx, "%s", why);
            return QCG_EPROTO;
        }
        ctx->reconnects++;
        /* Our names and listener stay as they were: the node is the same. */
        if (ctx->published) {
            ctx->republish_until_us = now_us() + REPUBLISH_RETRY_MS * 1000u;
            republish(ctx);
        } else {
            helper_up(ctx);
        }
        return 0;
    }
    if (ctx->hstate != H_PUBLISH)
        return 0;
    if (r->hdr.type == LOCAL_OK) {
        helper_up(ctx);
        return 0;
    }
    code = r->hdr.type == LOCAL_ERROR ? local_error_code(r->payload.error.code) : QCG_EPROTO;
    snprintf(why, sizeof(why), "%s",
             r->hdr.type == LOCAL_ERROR ? r->payload.error.message : "unexpected answer");
    if ((code == QCG_EBUSY || code == QCG_EUPSTREAM || code == QCG_ETIMEDOUT) &&
        now_us() < ctx->republish_until_us) {
        /* The old contact is still known upstream, the helper refuses for
           the moment (LOCAL_ERETRY), or the new helper has not reached its
           frontend yet: ask again after the backoff. */
        ctx->helper_at_us = now_us() + next_backoff(ctx) * 1000u;
        return 0;
    }
    republish_give_up(ctx, code, why);
    return 0;
}

/* Connects again and says HELLO (the reply comes through ctx_read_helper). */
static void reconnect(qcg_ctx *ctx)
{
    struct local_hello hello;
    int fd = unix_connect(ctx->helper_path, RECONNECT_CONNECT_MS), rc;

    if (fd < 0) {
        ctx->helper_at_us = now_us() + next_backoff(ctx) * 1000u;
        return;
    }
    if (accept_watch(ctx, fd) < 0) {
        close(fd);
        ctx->helper_at_us = now_us() + next_backoff(ctx) * 1000u;
        return;
    }
    ctx->helper_fd = fd;
    ctx->hstate = H_HELLO;
    lmsg_reader_reset(&ctx->ctl);
    ctx_hello(ctx, &hello);
    rc = helper_ask(ctx, LOCAL_HELLO, &hello, HELPER_HELLO_TIMEOUT_MS);
    explicit_bzero(&hello, sizeof(hello));
    (void)rc; /* a failed send lost the connection: the next attempt is set */
}

void helper_tick(qcg_ctx *ctx)
{
    uint64_t now = now_us();

    if (ctx->hstate == H_DOWN && now >= ctx->helper_at_us)
        reconnect(ctx);
    if (ctx->helper_fd >= 0)
        (void)ctx_read_helper(ctx);
    now = now_us();
    if (ctx->hstate == H_UP || ctx->hstate == H_DOWN || now < ctx->helper_at_us)
        return;
    if (ctx->hstate == H_HELLO) {
        ctx_seterr(ctx, "no answer to HELLO from the helper at %s within %d ms", ctx->helper_path,
                   HELPER_HELLO_TIMEOUT_MS);
        ctx_helper_lost(ctx, QCG_ETIMEDOUT);
    } else if (ctx->helper_id == 0 || now < ctx->republish_until_us) {
        /* H_PUBLISH: the retry is due, or the answer is late (asked again:
           the late answer has an id nobody waits for). */
        republish(ctx);
    } else {
        republish_give_up(ctx, QCG_ETIMEDOUT, "no answer from the helper");
    }
}
