/* libFuzzer harness for the config files (util/config.c) as each daemon
   reads them, its own checks included (broker_config.c, frontend_config.c,
   proxy_config.c, helper/config.c), the proxy key file (util/token.c) and
   qcg-agent's config with its checks (launch/agent_config.c).
   Input: byte 0 % 6 picks the reader, the rest is the file. */
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent.h"
#include "broker_config.h"
#include "frontend_config.h"
#include "fuzz.h"
#include "helper.h"
#include "proxy_config.h"
#include "token.h"

static char dir[] = "/tmp/qcg-fuzz-config-XXXXXX";
static char path[64];

static void remove_dir(void)
{
    unlink(path);
    rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    if (mkdtemp(dir) == NULL)
        abort();
    snprintf(path, sizeof(path), "%s/qcg.conf", dir);
    atexit(remove_dir);
    /* qcg-agent: the job from its config only; a strong secret, so that
       its checks go on past it. */
    unsetenv("QCG_JOB");
    unsetenv("QCG_HELPER_SOCKET");
    setenv("QCG_JOB_SECRET", "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", 1);
    return 0;
}

/* The file, mode 0600 (the key file refuses any other). */
static void write_file(const uint8_t *data, size_t size)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || (size > 0 && write(fd, data, size) != (ssize_t)size))
        abort();
    close(fd);
}

/* What a loader promises: a verdict, and a one-line reason with an error. */
static void loaded(enum config_result rc, const char *err)
{
    FUZZ_ASSERT(rc == CONFIG_OK || rc == CONFIG_ERROR);
    if (rc == CONFIG_ERROR)
        FUZZ_ASSERT(err[0] != '\0' && memchr(err, '\0', 512) != NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512] = "";

    if (size == 0)
        return 0;
    write_file(data + 1, size - 1);
    char *argv[] = {"qcg-fuzz", "--config", path, NULL};
    switch (data[0] % 6) {
    case 0: {
        struct broker_config cfg;
        loaded(broker_config_load(&cfg, 3, argv, err, sizeof(err)), err);
        broker_config_free(&cfg);
        break;
    }
    case 1: {
        struct frontend_config cfg;
        loaded(frontend_config_load(&cfg, 3, argv, err, sizeof(err)), err);
        frontend_config_free(&cfg);
        break;
    }
    case 2: {
        struct proxy_config cfg;
        loaded(proxy_config_load(&cfg, 3, argv, err, sizeof(err)), err);
        proxy_config_free(&cfg);
        break;
    }
    case 3: {
        struct helper_config cfg;
        int first = 3;
        memset(&cfg, 0, sizeof(cfg));
        enum config_result rc =
            config_load(helper_options, &cfg, 3, argv, "qcg-helper", &first, err, sizeof(err));
        if (rc == CONFIG_OK && helper_config_check(&cfg, err, sizeof(err)) < 0)
            rc = CONFIG_ERROR;
        loaded(rc, err);
        config_free(helper_options, &cfg);
        break;
    }
    case 5: {
        struct agent_config cfg;
        char secret[QCG_SECRET_MAX];
        int first = 3;
        memset(&cfg, 0, sizeof(cfg));
        enum config_result rc =
            config_load(agent_options, &cfg, 3, argv, "qcg-agent", &first, err, sizeof(err));
        if (rc == CONFIG_OK &&
            agent_config_check(&cfg, secret, sizeof(secret), err, sizeof(err)) < 0)
            rc = CONFIG_ERROR;
        loaded(rc, err);
        config_free(agent_options, &cfg);
        break;
    }
    default: {
        struct proxy_key key;
        if (proxy_key_load(path, &key, err, sizeof(err)) < 0)
            FUZZ_REASON(err);
        break;
    }
    }
    return 0;
}
