/* One launch on the agent's side: a launcher's connection, the daemon it
   asked for (run as the agent's user, in a session of its own, no shell),
   the daemon's output and runtime connections carried back, and at the end
   the daemon's exit status.  When the connection breaks, the session waits
   resume_ms for the launcher to resume it over a new one (RESUME, wire.h);
   when the launcher is done (BYE) or does not come back, the daemon and
   every process it started are ended (SIGTERM, then SIGKILL). */
#ifndef QCG_LAUNCH_SESSION_H
#define QCG_LAUNCH_SESSION_H

#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "qcgconn.h"

struct session;

struct session_env {
    uv_loop_t *loop;
    const char *job;   /* the user's job id this agent serves */
    const char *orted; /* what runs when orted is asked for */
    const char *prted; /* what runs when prted (Open MPI 5) is asked for */
    char **environ;    /* the daemon's environment */
    int launch_ms;     /* a launcher must send LAUNCH within this */
    int grace_ms;      /* SIGTERM to SIGKILL */
    int resume_ms;     /* how long a broken session waits for its launcher */
    /* The running session whose token this is, or NULL. */
    struct session *(*find)(void *arg, const uint8_t *token);
    /* The session's last handle is closed: it is gone. */
    void (*gone)(void *arg, struct session *s);
    void *arg;
};

/* Takes over fd, a verified connection from rank `peer` of the agent's job,
   and tls, its session when encrypted (NULL: plain), also when it fails. */
struct session *session_new(const struct session_env *env, int fd, qcg_tls *tls, int peer,
                            unsigned id);
/* Ends the session now (the agent stops): the daemon's session is killed. */
void session_stop(struct session *s);
/* True once the daemon was started (a launch, not only a connection). */
int session_launched(const struct session *s);
/* True if the session can be resumed with this token (WIRE_TOKEN_LEN bytes). */
int session_has_token(const struct session *s, const uint8_t *token);

#endif
