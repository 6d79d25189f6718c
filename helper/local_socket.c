/* The socket file: its directory, a stale file of a dead helper, its mode,
   and removing only the file this helper made. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "local_internal.h"
#include "log.h"

static int make_parent(const char *path, char *err, size_t errlen)
{
    char dir[sizeof(((struct sockaddr_un *)0)->sun_path)];

    snprintf(dir, sizeof(dir), "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash == NULL || slash == dir)
        return 0;
    *slash = '\0';
    for (char *p = dir + 1; *p != '\0'; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(dir, 0755) < 0 && errno != EEXIST)
            goto fail;
        *p = '/';
    }
    if (mkdir(dir, 0755) < 0 && errno != EEXIST)
        goto fail;
    return 0;
fail:
    if (errno == EACCES || errno == EPERM)
        snprintf(err, errlen,
                 "socket: cannot create the directory %s: %s (this helper runs as uid %u): make "
                 "it writable by the helper's user, e.g. install -d -o qcg -g qcg -m 0755 %s "
                 "(docs/admin.md, \"Without systemd\")",
                 dir, strerror(errno), (unsigned)geteuid(), dir);
    else
        snprintf(err, errlen, "socket: cannot create %s: %s", dir, strerror(errno));
    return -1;
}

void local_socket_bind_error(const char *path, int uv_err, const char *why, char *err,
                             size_t errlen)
{
    char dir[sizeof(((struct sockaddr_un *)0)->sun_path)];
    snprintf(dir, sizeof(dir), "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash != NULL && slash != dir)
        *slash = '\0';
    if (uv_err == -EACCES || uv_err == -EPERM)
        snprintf(err, errlen,
                 "socket: cannot bind %s: %s: the directory %s is not writable by this helper's "
                 "uid %u: give it to the helper's user, e.g. install -d -o qcg -g qcg -m 0755 %s "
                 "(docs/admin.md, \"Without systemd\")",
                 path, why, dir, (unsigned)geteuid(), dir);
    else
        snprintf(err, errlen, "socket: cannot bind %s: %s", path, why);
}

/* A socket file left by a helper that died is removed; one a live helper
   listens on is not ours to take. */
static int remove_stale(const char *path, char *err, size_t errlen)
{
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    struct stat st;

    if (lstat(path, &st) < 0)
        return errno == ENOENT
                   ? 0
                   : (snprintf(err, errlen, "socket: %s: %s", path, strerror(errno)), -1);
    if (!S_ISSOCK(st.st_mode)) {
        snprintf(err, errlen, "socket: %s exists and is not a socket", path);
        return -1;
    }
    snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(err, errlen, "socket: %s", strerror(errno));
        return -1;
    }
    int rc = connect(fd, (struct sockaddr *)&sun, sizeof(sun));
    int saved = errno;
    close(fd);
    if (rc == 0) {
        snprintf(err, errlen, "socket: a helper is already listening on %s", path);
        return -1;
    }
    if (saved != ECONNREFUSED) {
        snprintf(err, errlen, "socket: %s: %s", path, strerror(saved));
        return -1;
    }
    if (unlink(path) < 0) {
        snprintf(err, errlen, "socket: cannot remove the stale %s: %s", path, strerror(errno));
        return -1;
    }
    log_info("removed the stale socket %s", path);
    return 0;
}

int local_socket_prepare(const char *path, char *err, size_t errlen)
{
    return make_parent(path, err, errlen) < 0 || remove_stale(path, err, errlen) < 0 ? -1 : 0;
}

int local_socket_claim(const char *path, mode_t mode, dev_t *dev, ino_t *ino, char *err,
                       size_t errlen)
{
    struct stat st;

    if (chmod(path, mode) < 0 || stat(path, &st) < 0) {
        snprintf(err, errlen, "socket: %s: %s", path, strerror(errno));
        unlink(path);
        return -1;
    }
    *dev = st.st_dev;
    *ino = st.st_ino;
    return 0;
}

void local_socket_release(const char *path, dev_t dev, ino_t ino)
{
    struct stat st;

    if (stat(path, &st) == 0 && st.st_dev == dev && st.st_ino == ino)
        unlink(path);
}
