/* qcg-agent's settings (agent_config.c). */
#ifndef QCG_LAUNCH_AGENT_H
#define QCG_LAUNCH_AGENT_H

#include "config.h"

struct agent_config {
    char *job;
    char *secret_file;
    char *node;
    char *orted;
    char *prted;
    char *helper_socket;
    char *encrypt;    /* the policy's name, as given */
    int encrypt_mode; /* enum qcg_encrypt, from encrypt */
    int idle_timeout; /* s */
    int persist;
    int max_launches;
    int launch_timeout; /* ms: a connection must ask within this */
    int grace;          /* ms: SIGTERM to SIGKILL */
    int allow_root;
    char *log_level;
};

extern const struct config_option agent_options[];

/* Fills what the environment gives (QCG_JOB, QCG_HELPER_SOCKET, the host
   name) and checks the rest; secret gets QCG_JOB_SECRET or the secret file.
   0, or -1 with a one-line reason. */
int agent_config_check(struct agent_config *cfg, char *secret, size_t secretlen, char *err,
                       size_t errlen);

#endif
