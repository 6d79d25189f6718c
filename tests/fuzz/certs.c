/* See certs.h. */
#include "certs.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PATHS_MAX 16

static char dir[] = "/tmp/qcg-fuzz-certs-XXXXXX";
static char *paths[PATHS_MAX];
static int npaths;

static void remove_dir(void)
{
    char cmd[128];

    for (int i = 0; i < npaths; i++)
        free(paths[i]);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "fuzz: could not remove %s\n", dir);
}

void certs_make(const char *const *issue)
{
    char cmd[1024];
    int n;

    /* As the daemons do (daemon_signals): a peer gone mid-write is an error
       of that write, not the end of the process. */
    signal(SIGPIPE, SIG_IGN);
    if (mkdtemp(dir) == NULL)
        abort();
    atexit(remove_dir);
    n = snprintf(cmd, sizeof(cmd), "t=%s; d=%s; exec >/dev/null 2>&1; $t --dir $d init",
                 QCG_CERTS_TOOL, dir);
    for (int i = 0; issue[i] != NULL && n > 0 && (size_t)n < sizeof(cmd); i++)
        n += snprintf(cmd + n, sizeof(cmd) - (size_t)n, " && $t --dir $d issue %s", issue[i]);
    if (n < 0 || (size_t)n >= sizeof(cmd) || system(cmd) != 0) {
        fprintf(stderr, "fuzz: %s failed\n", QCG_CERTS_TOOL);
        abort();
    }
}

const char *certs_path(const char *file)
{
    char path[256];

    if (npaths == PATHS_MAX)
        abort();
    snprintf(path, sizeof(path), "%s/%s", dir, file);
    paths[npaths] = strdup(path);
    if (paths[npaths] == NULL)
        abort();
    return paths[npaths++];
}
