/* Relaying one pair with splice(2); see pair.h. */
#include "pair.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "hex.h"
#include "tcp_stall.h"

/* Socket -> pipe -> socket rounds per direction per call: a busy pair yields
   to the others after this many. */
#define PAIR_ROUNDS 8
/* The kernel's size of a new pipe (16 pages). */
#define PAIR_PIPE_DEFAULT 65536

struct pair *pair_new(const unsigned char id[TOKEN_PAIR_LEN], int fd0, const char *addr0, int fd1,
                      const char *addr1, uint64_t now_ms)
{
    struct pair *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return NULL;
    memcpy(p->id, id, TOKEN_PAIR_LEN);
    for (int i = 0; i < 2; i++) {
        p->end[i].pair = p;
        p->dir[i].pipe[0] = p->dir[i].pipe[1] = -1;
    }
    p->end[0].fd = fd0;
    p->end[1].fd = fd1;
    snprintf(p->end[0].addr, sizeof(p->end[0].addr), "%s", addr0);
    snprintf(p->end[1].addr, sizeof(p->end[1].addr), "%s", addr1);
    p->started_ms = p->active_ms = now_ms;
    return p;
}

/* A pipe starts at the kernel's default or pipe_size, the smaller, and grows
   to pipe_size only once it fills up (dir_grow): pipes are charged to the
   user's allowance (fs.pipe-user-pages-soft) by their size, so pairs that
   exchange messages leave it to those that stream. */
static int dir_open_pipe(struct pair *p, struct pair_dir *d, size_t pipe_size)
{
    if (pipe2(d->pipe, O_NONBLOCK | O_CLOEXEC) < 0)
        return -1;
    int got = fcntl(d->pipe[1], F_GETPIPE_SZ);
    if (got > 0 && (size_t)got > pipe_size) {
        int set = fcntl(d->pipe[1], F_SETPIPE_SZ, (int)pipe_size);
        if (set > 0)
            got = set;
    }
    d->pipecap = got > 0 ? (size_t)got : 4096;
    /* The kernel's default is 16 pages; 2 when the allowance is spent. */
    if (d->pipecap < pipe_size && d->pipecap < PAIR_PIPE_DEFAULT)
        p->short_pipe = d->pipecap;
    return 0;
}

/* A full pipe grows to pipe_size (a stream: fewer, larger splices), best
   effort: the kernel refuses beyond pipe-max-size or the user's allowance,
   and the pipe keeps its size. */
static void dir_grow(struct pair *p, struct pair_dir *d, size_t pipe_size)
{
    if (d->pipecap >= pipe_size || d->nogrow)
        return;
    int got = fcntl(d->pipe[1], F_SETPIPE_SZ, (int)pipe_size);
    if (got > 0 && (size_t)got > d->pipecap) {
        d->pipecap = (size_t)got;
    } else {
        d->nogrow = true;
        p->short_pipe = d->pipecap;
    }
}

static void dir_close_pipe(struct pair_dir *d)
{
    if (d->pipe[0] >= 0) {
        close(d->pipe[0]);
        close(d->pipe[1]);
    }
    d->pipe[0] = d->pipe[1] = -1;
    d->inpipe = 0;
    d->pipecap = 0;
    d->nogrow = false;
}

static void set_err(char *err, size_t errlen, const char *what, const char *addr, int e)
{
    snprintf(err, errlen, "%s %s: %s", what, addr, strerror(e));
}

/* Whether src has a byte or its FIN to read: a pipe is made only then, so a
   pair that is told "maybe readable" (every new pair) but has nothing holds
   none.  Pipes are charged to the user's allowance (fs.pipe-user-pages-soft)
   whether they hold data or not.  1 = yes, 0 = nothing now, -1 = error. */
static int has_input(int fd)
{
    char b;
    ssize_t n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);

    if (n >= 0)
        return 1;
    return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
}

/* One direction: as many rounds as allowed.  0 = waits for an event, 1 = has
   more to do, -1 = failed. */
static int dir_run(struct pair *p, int d, size_t pipe_size, uint64_t *moved, char *err,
                   size_t errlen)
{
    struct pair_dir *dir = &p->dir[d];
    struct pair_end *src = &p->end[d], *dst = &p->end[1 - d];
    const unsigned flags = SPLICE_F_MOVE | SPLICE_F_NONBLOCK;

    if (dir->done)
        return 0;
    for (int round = 0; round < PAIR_ROUNDS; round++) {
        bool progress = false;

        bool fill = !dir->eof && src->readable && (dir->pipe[0] < 0 || dir->inpipe < dir->pipecap);
        if (fill && dir->pipe[0] < 0) {
            int in = has_input(src->fd);
            if (in < 0) {
                set_err(err, errlen, "receiving from", src->addr, errno);
                return -1;
            }
            if (in == 0) {
                src->readable = false;
                fill = false;
            } else if (dir_open_pipe(p, dir, pipe_size) < 0) {
                set_err(err, errlen, "pipe for data from", src->addr, errno);
                return -1;
            }
        }
        if (fill) {
            ssize_t n =
                splice(src->fd, NULL, dir->pipe[1], NULL, dir->pipecap - dir->inpipe, flags);
            if (n > 0) {
                dir->inpipe += (size_t)n;
                progress = true;
                if (dir->inpipe == dir->pipecap)
                    dir_grow(p, dir, pipe_size);
            } else if (n == 0) {
                dir->eof = true;
                progress = true;
            } else if (errno == EAGAIN) {
                /* With bytes in the pipe this may mean the pipe is out of
                   slots, not that the socket is empty: keep trying after
                   the pipe drains. */
                if (dir->inpipe == 0)
                    src->readable = false;
                else
                    dir_grow(p, dir, pipe_size);
            } else if (errno != EINTR) {
                set_err(err, errlen, "receiving from", src->addr, errno);
                return -1;
            }
        }
        if (dir->inpipe > 0 && dst->writable) {
            ssize_t n = splice(dir->pipe[0], NULL, dst->fd, NULL, dir->inpipe, flags);
            if (n > 0) {
                dir->inpipe -= (size_t)n;
                dir->bytes += (uint64_t)n;
                *moved += (uint64_t)n;
                progress = true;
            } else if (n < 0 && errno == EAGAIN) {
                dst->writable = false;
            } else if (n < 0 && errno != EINTR) {
                set_err(err, errlen, "sending to", dst->addr, errno);
                return -1;
            }
        }
        if (dir->eof && dir->inpipe == 0) {
            /* Every byte delivered: pass the close on as a half-close. */
            if (shutdown(dst->fd, SHUT_WR) < 0 && errno != ENOTCONN) {
                set_err(err, errlen, "passing the close on to", dst->addr, errno);
                return -1;
            }
            dir->done = true;
            dir_close_pipe(dir);
            return 0;
        }
        if (!progress)
            return 0;
    }
    return 1;
}

enum pair_result pair_run(struct pair *p, size_t pipe_size, uint64_t *moved, char *err,
                          size_t errlen)
{
    bool more = false;

    *moved = 0;
    for (int d = 0; d < 2; d++) {
        int rc = dir_run(p, d, pipe_size, moved, err, errlen);
        if (rc < 0)
            return PAIR_FAILED;
        more |= rc > 0;
    }
    if (p->dir[0].done && p->dir[1].done)
        return PAIR_DONE;
    return more ? PAIR_MORE : PAIR_WAIT;
}

void pair_trim(struct pair *p)
{
    for (int d = 0; d < 2; d++)
        if (p->dir[d].pipe[0] >= 0 && p->dir[d].inpipe == 0)
            dir_close_pipe(&p->dir[d]);
}

void pair_close(struct pair *p, bool abort)
{
    for (int i = 0; i < 2; i++) {
        dir_close_pipe(&p->dir[i]);
        if (p->end[i].fd >= 0) {
            if (abort) {
                struct linger lg = {.l_onoff = 1, .l_linger = 0};
                setsockopt(p->end[i].fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
            }
            close(p->end[i].fd);
            p->end[i].fd = -1;
        }
    }
    p->closed = true;
}

void pair_id_text(const unsigned char id[TOKEN_PAIR_LEN], char out[9])
{
    hex_encode(id, 4, out);
}

int pair_stalled(struct pair *p, uint64_t now_ms, uint64_t timeout_ms)
{
    int stalled = -1;

    for (int i = 0; i < 2; i++) {
        if (p->end[i].fd >= 0 && tcp_stall_check(p->end[i].fd, now_ms * 1000u, timeout_ms * 1000u,
                                                 &p->end[i].stall_since_us) == TCP_STALL_YES)
            stalled = i;
    }
    return stalled;
}
