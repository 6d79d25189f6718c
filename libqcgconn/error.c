/* Error codes, technique names and the detail of a context's last failure:
   its message and the errno behind it. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"
#include "technique.h"

/* The detail of a failed qcg_open, which has no context to hold it. */
static _Thread_local char open_error[QCG_ERRMSG_MAX];
static _Thread_local int open_errno;
/* The errno named by keep_errno for the failure being recorded. */
static _Thread_local int cause;

QCG_EXPORT const char *qcg_strerror(int err)
{
    switch (err) {
    case QCG_OK:
        return "success";
    case QCG_EAGAIN:
        return "operation in progress, try again";
    case QCG_EINVAL:
        return "invalid argument";
    case QCG_ENOHELPER:
        return "local qcg-helper not running or refused the connection";
    case QCG_EPROTO:
        return "protocol error";
    case QCG_EDENIED:
        return "permission denied (wrong job secret?)";
    case QCG_ENOTFOUND:
        return "no such rank in this job";
    case QCG_EBUSY:
        return "rank already published by another process";
    case QCG_ETECHNIQUE:
        return "the peer needs a connection technique that is not available";
    case QCG_ETIMEDOUT:
        return "timed out";
    case QCG_EUPSTREAM:
        return "grid services unreachable";
    case QCG_ESYS:
        return "system call failed";
    case QCG_ENOMEM:
        return "out of memory";
    case QCG_EPEER:
        return "the peer refused the connection or hung up";
    case QCG_EINUSE:
        return "connect operations of the context were still open";
    }
    return "unknown error";
}

/* The public enum is the core's (technique.h), value for value: the local
   protocol carries either, and the helper and the broker read them as the
   core's. */
_Static_assert(QCG_TECH_NONE == (int)TECH_NONE && QCG_TECH_DIRECT == (int)TECH_DIRECT &&
                   QCG_TECH_REVERSED == (int)TECH_REVERSED &&
                   QCG_TECH_TRAVERSING == (int)TECH_TRAVERSING &&
                   QCG_TECH_HOLEPUNCH == (int)TECH_HOLEPUNCH && QCG_TECH_PROXY == (int)TECH_PROXY,
               "enum qcg_technique and enum technique differ");

QCG_EXPORT const char *qcg_technique_name(enum qcg_technique t)
{
    return technique_name((enum technique)t);
}

QCG_EXPORT const char *qcg_last_error(const qcg_ctx *ctx)
{
    if (ctx == NULL)
        return open_error;
    return ctx->last_error;
}

QCG_EXPORT int qcg_last_errno(const qcg_ctx *ctx)
{
    return ctx == NULL ? open_errno : ctx->last_errno;
}

const char *keep_errno(int err)
{
    cause = err;
    return strerror(err);
}

void keep_cause(int err)
{
    cause = err;
}

int take_cause(void)
{
    int err = cause;

    cause = 0;
    return err;
}

void ctx_seterr(qcg_ctx *ctx, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(ctx->last_error, sizeof(ctx->last_error), fmt, ap);
    va_end(ap);
    ctx->last_errno = take_cause();
}

void ctx_clearerr(qcg_ctx *ctx)
{
    ctx->last_error[0] = '\0';
    ctx->last_errno = 0;
}

void open_seterr(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(open_error, sizeof(open_error), fmt, ap);
    va_end(ap);
    open_errno = take_cause();
}

const char *open_lasterr(void)
{
    return open_error;
}
