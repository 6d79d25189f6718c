/* qcg-agent's settings: one table for the config file, the flags and --help. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent.h"
#include "jobid.h"
#include "log.h"
#include "proto.h"
#include "qcgconn.h"
#include "verifier.h"

#define OPT(n, t, f, lo, hi, d, h)                                                                 \
    {                                                                                              \
        n, t, offsetof(struct agent_config, f), lo, hi, d, h                                       \
    }

const struct config_option agent_options[] = {
    OPT("job", CONFIG_STRING, job, 0, 0, NULL,
        "the job id this agent serves (default: $QCG_JOB; qcg-mpirun --new-job makes one)"),
    OPT("secret-file", CONFIG_STRING, secret_file, 0, 0, NULL,
        "a file (mode 0600 or stricter) holding the job secret (default: $QCG_JOB_SECRET; "
        "never on the command line)"),
    OPT("node", CONFIG_STRING, node, 0, 0, NULL,
        "this node's name in host lists (default: the host name up to the first dot)"),
    OPT("orted", CONFIG_STRING, orted, 0, 0, "orted",
        "Open MPI 4.1's runtime daemon, run for each launch (searched in PATH)"),
    OPT("prted", CONFIG_STRING, prted, 0, 0, "prted",
        "Open MPI 5's runtime daemon (PRRTE), run for each launch (searched in PATH)"),
    OPT("helper-socket", CONFIG_STRING, helper_socket, 0, 0, NULL,
        "the node's qcg-helper socket (default: $QCG_HELPER_SOCKET, else /run/qcg/helper.sock)"),
    OPT("encrypt", CONFIG_STRING, encrypt, 0, 0, NULL,
        "which launch connections are encrypted: inter-site (when the launcher is in another "
        "cluster), always or never (default: $QCG_ENCRYPT, else inter-site)"),
    OPT("idle-timeout", CONFIG_INT, idle_timeout, 1, 7 * 24 * 3600, "600",
        "seconds to wait for a launch before exiting"),
    OPT("persist", CONFIG_BOOL, persist, 0, 0, "no",
        "keep serving after the last launch ends (until idle-timeout); default: exit then"),
    OPT("max-launches", CONFIG_INT, max_launches, 1, 256, "8", "launches served at once"),
    OPT("launch-timeout", CONFIG_INT, launch_timeout, 100, 600000, "10000",
        "ms a connected launcher has to say what it wants"),
    OPT("grace", CONFIG_INT, grace, 0, 600000, "3000",
        "ms between SIGTERM and SIGKILL when a launch is ended"),
    OPT("allow-root", CONFIG_BOOL, allow_root, 0, 0, "no",
        "run as root (refused by default: the agent runs what the job secret's holders ask)"),
    OPT("log-level", CONFIG_STRING, log_level, 0, 0, "info", "error, warn, info or debug"),
    {0},
};

static int set_default(char **field, const char *value)
{
    if (*field != NULL || value == NULL || value[0] == '\0')
        return 0;
    *field = strdup(value);
    return *field != NULL ? 0 : -1;
}

/* The secret from a file only its owner can read, first line. */
static int read_secret_file(const char *path, char *secret, size_t len, char *err, size_t errlen)
{
    struct stat st;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    ssize_t n;

    if (fd < 0 || fstat(fd, &st) < 0) {
        snprintf(err, errlen, "secret-file %s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    if (!S_ISREG(st.st_mode) || (st.st_mode & 077) != 0 || st.st_uid != getuid()) {
        snprintf(err, errlen,
                 "secret-file %s: must be a regular file of yours, mode 0600 or "
                 "stricter (it is %04o)",
                 path, (unsigned)(st.st_mode & 07777));
        close(fd);
        return -1;
    }
    n = read(fd, secret, len - 1);
    close(fd);
    if (n < 0) {
        snprintf(err, errlen, "secret-file %s: %s", path, strerror(errno));
        return -1;
    }
    secret[n] = '\0';
    secret[strcspn(secret, "\r\n")] = '\0';
    return 0;
}

int agent_config_check(struct agent_config *cfg, char *secret, size_t secretlen, char *err,
                       size_t errlen)
{
    char host[256];
    const char *env;

    if (geteuid() == 0 && !cfg->allow_root) {
        snprintf(err, errlen,
                 "refusing to run as root: the agent runs what holders of the job "
                 "secret ask, as its own user (start it as the job's user, or --allow-root)");
        return -1;
    }
    if (set_default(&cfg->job, getenv("QCG_JOB")) < 0 ||
        set_default(&cfg->encrypt, getenv("QCG_ENCRYPT")) < 0 ||
        set_default(&cfg->encrypt, "inter-site") < 0 ||
        set_default(&cfg->helper_socket, getenv("QCG_HELPER_SOCKET")) < 0)
        goto oom;
    if (cfg->job == NULL) {
        snprintf(err, errlen, "no job: set QCG_JOB or --job");
        return -1;
    }
    if (!user_job_valid(cfg->job)) {
        snprintf(err, errlen, "job '%.80s' is not 1..%d characters of A-Z a-z 0-9 . _ -", cfg->job,
                 USER_JOB_MAX);
        return -1;
    }
    if (cfg->node == NULL) {
        if (gethostname(host, sizeof(host)) < 0) {
            snprintf(err, errlen, "gethostname: %s", strerror(errno));
            return -1;
        }
        host[sizeof(host) - 1] = '\0';
        host[strcspn(host, ".")] = '\0';
        if (set_default(&cfg->node, host) < 0)
            goto oom;
    }
    if (!name_valid(cfg->node)) {
        snprintf(err, errlen, "node name '%.80s' is not a valid name (--node)", cfg->node);
        return -1;
    }
    if (cfg->secret_file != NULL) {
        if (read_secret_file(cfg->secret_file, secret, secretlen, err, errlen) < 0)
            return -1;
    } else if ((env = getenv("QCG_JOB_SECRET")) != NULL) {
        snprintf(secret, secretlen, "%s", env);
    } else {
        snprintf(err, errlen, "no job secret: set QCG_JOB_SECRET or --secret-file");
        return -1;
    }
    if (!secret_valid(secret)) {
        snprintf(err, errlen, "the job secret is empty or not 1..%d printable characters",
                 QCG_SECRET_MAX - 1);
        return -1;
    }
    if (!secret_strong(secret)) {
        snprintf(err, errlen, "the job secret is too weak (about %d bits, at least %d needed); %s",
                 secret_entropy_bits(secret), QCG_SECRET_MIN_BITS, QCG_SECRET_ADVICE);
        return -1;
    }
    cfg->encrypt_mode = qcg_encrypt_parse(cfg->encrypt);
    if (cfg->encrypt_mode < 0) {
        snprintf(err, errlen, "encrypt '%.40s' (or QCG_ENCRYPT) is not inter-site, always or never",
                 cfg->encrypt);
        return -1;
    }
    if (log_level_parse(cfg->log_level) < 0) {
        snprintf(err, errlen, "log-level '%.40s' is not error, warn, info or debug",
                 cfg->log_level);
        return -1;
    }
    return 0;
oom:
    snprintf(err, errlen, "out of memory");
    return -1;
}
