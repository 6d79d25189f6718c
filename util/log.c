/*
 * Logging: one line per event, built in a local buffer and written with a
 * single write(2) so lines from several threads never interleave.
 */
#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#define LOG_LINE_MAX 2048

/* Set by log_init (normally once, before threads start); the level may change
   at any time, hence atomic. */
static char log_component[32] = "qcg";
static atomic_int log_level = LOG_LEVEL_INFO;
static atomic_bool log_syslog;
/* syslog asked for, but no syslog daemon listens: stderr instead. */
static bool log_syslog_missing;

static const char *const level_names[] = {
    [LOG_LEVEL_ERROR] = "error",
    [LOG_LEVEL_WARN] = "warn",
    [LOG_LEVEL_INFO] = "info",
    [LOG_LEVEL_DEBUG] = "debug",
};

static const int level_priorities[] = {
    [LOG_LEVEL_ERROR] = LOG_ERR,
    [LOG_LEVEL_WARN] = LOG_WARNING,
    [LOG_LEVEL_INFO] = LOG_INFO,
    [LOG_LEVEL_DEBUG] = LOG_DEBUG,
};

/* Whether a syslog daemon takes datagrams on _PATH_LOG: without one,
   syslog(3) drops every line without a word. */
static bool syslog_listens(void)
{
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    bool ok;

    if (fd < 0)
        return false;
    snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", _PATH_LOG);
    ok = connect(fd, (struct sockaddr *)&sun, sizeof(sun)) == 0;
    close(fd);
    return ok;
}

void log_init(const char *component, enum log_level level, bool use_syslog)
{
    snprintf(log_component, sizeof(log_component), "%s", component ? component : "qcg");
    log_set_level(level);
    log_syslog_missing = use_syslog && !syslog_listens();
    if (log_syslog_missing)
        use_syslog = false;
    if (log_syslog && !use_syslog)
        closelog();
    atomic_store(&log_syslog, use_syslog);
    if (use_syslog)
        openlog(log_component, LOG_PID | LOG_NDELAY, LOG_DAEMON);
}

void log_set_level(enum log_level level)
{
    if ((int)level < LOG_LEVEL_ERROR)
        level = LOG_LEVEL_ERROR;
    if (level > LOG_LEVEL_DEBUG)
        level = LOG_LEVEL_DEBUG;
    atomic_store(&log_level, (int)level);
}

enum log_level log_get_level(void)
{
    return (enum log_level)atomic_load(&log_level);
}

int log_level_parse(const char *name)
{
    if (name == NULL)
        return -1;
    for (int i = 0; i < (int)(sizeof(level_names) / sizeof(level_names[0])); i++)
        if (strcmp(name, level_names[i]) == 0)
            return i;
    return -1;
}

/* Messages may quote what a peer sent: control characters would forge or split
   lines, so they become '?'. */
static void sanitize(char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            *s = '?';
}

static void log_vemit(enum log_level level, const char *func, int with_errno, const char *fmt,
                      va_list ap)
{
    int saved_errno = errno;
    char msg[LOG_LINE_MAX];
    int n = vsnprintf(msg, sizeof(msg), fmt, ap);
    if (n < 0)
        snprintf(msg, sizeof(msg), "(unprintable log message)");
    if (with_errno) {
        size_t len = strlen(msg);
        snprintf(msg + len, sizeof(msg) - len, ": %s", strerror(saved_errno));
    }
    sanitize(msg);

    if (atomic_load(&log_syslog)) {
        syslog(level_priorities[level], "%s %s: %s", level_names[level], func, msg);
        errno = saved_errno;
        return;
    }

    struct timespec ts;
    struct tm tm;
    char stamp[40];
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    size_t sl = strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(stamp + sl, sizeof(stamp) - sl, ".%03ldZ", ts.tv_nsec / 1000000L);

    char line[LOG_LINE_MAX + 256];
    n = snprintf(line, sizeof(line), "%s %s[%ld] %s %s: %s\n", stamp, log_component, (long)getpid(),
                 level_names[level], func, msg);
    if (n < 0)
        return;
    if ((size_t)n >= sizeof(line)) {
        n = (int)sizeof(line) - 1;
        line[n - 1] = '\n';
    }
    /* One write per line; a short write to stderr is not worth a retry loop. */
    ssize_t w = write(STDERR_FILENO, line, (size_t)n);
    (void)w;
    errno = saved_errno;
}

void log_say_where(void)
{
    const char *level = level_names[log_get_level()];

    if (log_syslog_missing)
        log_emit(LOG_LEVEL_WARN, __func__, 0,
                 "syslog = yes, but no syslog daemon listens on %s: logging to stderr "
                 "instead (level %s); set syslog = no, or start a syslog daemon",
                 _PATH_LOG, level);
    else if (atomic_load(&log_syslog))
        log_emit(LOG_LEVEL_INFO, __func__, 0,
                 "logging to syslog (%s, facility daemon, tag %s), level %s", _PATH_LOG,
                 log_component, level);
    else
        log_emit(LOG_LEVEL_INFO, __func__, 0, "logging to stderr, level %s (syslog = no)", level);
}

void log_emit(enum log_level level, const char *func, int with_errno, const char *fmt, ...)
{
    if ((int)level < LOG_LEVEL_ERROR || level > LOG_LEVEL_DEBUG)
        level = LOG_LEVEL_ERROR;
    if ((int)level > atomic_load(&log_level))
        return;
    va_list ap;
    va_start(ap, fmt);
    log_vemit(level, func, with_errno, fmt, ap);
    va_end(ap);
}

noreturn void log_fatal(const char *func, int with_errno, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    log_vemit(LOG_LEVEL_ERROR, func, with_errno, fmt, ap);
    va_end(ap);
    exit(1);
}
