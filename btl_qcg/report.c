/* What btl_qcg tells the user: verbose lines, failures (always, through
   show_help), and the connection log (btl_qcg_conn_log) that tools read
   back. */
#include "btl_qcg.h"
#include "help.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "opal/util/output.h"
#include "opal/util/proc.h"
#include "opal/util/show_help.h"

/* The clock of btl_qcg's bounds and deadlines (issue 32): monotonic time
   less the time the process spent away from MPI.  It is read at every
   progress call and every send, so a gap of more than AWAY_US between two
   readings is time away: the process was stopped (Slurm's suspend is
   SIGSTOP of every rank) or computing outside MPI.  A reconnect pending
   then must not come back with its bound spent and declare the peer lost
   without trying; the gap counts for AWAY_US only.  A busy or loaded host
   still calls progress well within that. */
#define AWAY_US 1000000u
static pthread_mutex_t clock_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t clock_last, clock_away;

uint64_t btl_qcg_now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t wall = (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
    pthread_mutex_lock(&clock_lock);
    if (clock_last != 0 && wall > clock_last + AWAY_US)
        clock_away += wall - clock_last - AWAY_US;
    if (wall > clock_last)
        clock_last = wall;
    uint64_t now = clock_last - clock_away;
    pthread_mutex_unlock(&clock_lock);
    return now;
}

void btl_qcg_log(int level, const char *fmt, ...)
{
    char line[1024];
    va_list ap;

    if (mca_btl_qcg_component.verbose < level)
        return;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    opal_output(0, "btl_qcg: rank %u: %s", OPAL_PROC_MY_NAME.vpid, line);
}

const char *btl_qcg_peer_host(const struct btl_qcg_endpoint *ep)
{
    /* One line's worth: each caller prints it at once. */
    static _Thread_local char buf[256];
    opal_process_name_t name = {.jobid = ep->module->jobid, .vpid = ep->vpid};
    const char *host = ep->proc != NULL ? opal_get_proc_hostname(ep->proc) : NULL;
    char *modex = NULL;
    int rc;

    if (host != NULL && strcmp(host, "unknown") != 0)
        return host;
    /* A peer that connected to us before the PML added it has no proc yet:
       its host is in the modex all the same. */
    BTL_QCG_MODEX_RECV_STRING(rc, BTL_QCG_MODEX_HOSTNAME, &name, &modex);
    snprintf(buf, sizeof(buf), "%s", rc == OPAL_SUCCESS && modex != NULL ? modex : "unknown");
    free(modex);
    return buf;
}

void btl_qcg_report_connected(struct btl_qcg_endpoint *ep)
{
    const char *tech = qcg_technique_name(ep->info.technique);
    const char *role = ep->initiator ? "initiator" : "acceptor";
    uint64_t setup = btl_qcg_now_us() - ep->t_start_us;
    const char *path = mca_btl_qcg_component.conn_log;

    if (mca_btl_qcg_component.verbose >= 1)
        opal_output(0, "btl_qcg: rank %u %s rank %u (host %s): %s, setup %.1f ms (qcg %.1f ms), %s",
                    ep->module->vpid, ep->initiator ? "->" : "<-", ep->vpid, btl_qcg_peer_host(ep),
                    tech, setup / 1000.0, ep->info.setup_us / 1000.0,
                    qcg_encryption_name(ep->info.encryption));
    if (path != NULL && path[0] != '\0') {
        char line[256];
        int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
        int len;

        if (fd < 0) {
            btl_qcg_log(1, "btl_qcg_conn_log %s: %s", path, strerror(errno));
            return;
        }
        len =
            snprintf(line, sizeof(line), "%u %u %s %s %llu %llu\n", ep->module->vpid, ep->vpid,
                     tech, role, (unsigned long long)ep->info.setup_us, (unsigned long long)setup);
        /* One write of one short line with O_APPEND: lines never mix. */
        if (write(fd, line, (size_t)len) != len)
            btl_qcg_log(1, "btl_qcg_conn_log %s: short write", path);
        close(fd);
    }
}

void btl_qcg_report_failure(struct btl_qcg_endpoint *ep, const char *what, const char *detail,
                            int sys_errno)
{
    /* libqcgconn's text for "no technique connects these clusters" starts
       with its QCG_ETECHNIQUE string; its errno tells this node's shortage
       of descriptors from the peer's side. */
    const char *technique = qcg_strerror(QCG_ETECHNIQUE);
    const char *topic = strncmp(detail, technique, strlen(technique)) == 0 ? "technique unavailable"
                        : sys_errno == EMFILE || sys_errno == ENFILE       ? "out of descriptors"
                                                                           : "unreachable";

    opal_show_help(BTL_QCG_HELP_FILE, topic, true, opal_process_info.nodename,
                   (int)ep->module->vpid, (int)ep->vpid, btl_qcg_peer_host(ep), what, detail);
}

void btl_qcg_report_gone(struct btl_qcg_endpoint *ep, const char *detail)
{
    opal_show_help(BTL_QCG_HELP_FILE, "peer gone", true, opal_process_info.nodename,
                   (int)ep->module->vpid, (int)ep->vpid, btl_qcg_peer_host(ep),
                   mca_btl_qcg_component.reconnect_timeout_ms / 1000.0, detail);
}
