/* log.c: the line format, levels, and what cannot break a line. */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <syslog.h>
#include <unistd.h>

#include "check.h"
#include "log.h"

static char path[] = "/tmp/qcg-test-log-XXXXXX";

/* Everything logged since the last call. */
static void read_log(char *buf, size_t len)
{
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, len - 1, f) : 0;
    buf[n] = '\0';
    if (f)
        fclose(f);
    if (truncate(path, 0) < 0)
        perror("truncate");
}

int main(void)
{
    int fd = mkstemp(path);
    if (fd < 0) {
        perror("mkstemp");
        return 1;
    }
    int saved = dup(2);
    dup2(fd, 2);
    close(fd);
    /* O_APPEND-like behaviour after truncation: reopen stderr in append mode. */
    int afd = open(path, O_WRONLY | O_APPEND);
    dup2(afd, 2);
    close(afd);

    char buf[4096], want[256];
    log_init("broker", LOG_LEVEL_INFO, false);
    log_info("hello %d", 42);
    read_log(buf, sizeof(buf));
    snprintf(want, sizeof(want), " broker[%ld] info main: hello 42\n", (long)getpid());
    CHECK_HAS(buf, want);
    /* Timestamp first: 2024-01-02T03:04:05.678Z */
    CHECK(strlen(buf) > 24 && buf[4] == '-' && buf[10] == 'T' && buf[19] == '.' && buf[23] == 'Z');

    log_debug("hidden");
    read_log(buf, sizeof(buf));
    CHECK_STR(buf, "");
    log_set_level(LOG_LEVEL_DEBUG);
    CHECK(log_get_level() == LOG_LEVEL_DEBUG);
    log_debug("shown");
    read_log(buf, sizeof(buf));
    CHECK_HAS(buf, " debug main: shown\n");

    errno = ENOENT;
    log_warn("open %s", "x");
    read_log(buf, sizeof(buf));
    CHECK_HAS(buf, " warn main: open x: No such file or directory\n");
    CHECK(errno == ENOENT); /* logging does not clobber errno */
    log_warnx("plain");
    log_error("bad");
    read_log(buf, sizeof(buf));
    CHECK_HAS(buf, " warn main: plain\n");
    CHECK_HAS(buf, " error main: bad\n");

    /* A peer's text cannot forge a second line. */
    log_info("name=%s", "evil\n2024-01-01T00:00:00.000Z broker[1] error x: forged");
    read_log(buf, sizeof(buf));
    CHECK(strchr(buf, '\n') == buf + strlen(buf) - 1);

    /* An over-long message is cut, still one line. */
    char big[10000];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    log_info("%s", big);
    read_log(buf, sizeof(buf));
    CHECK(strlen(buf) > 1000 && strchr(buf, '\n') == buf + strlen(buf) - 1);

    /* Where it logs, said at start (issue 36). */
    log_say_where();
    read_log(buf, sizeof(buf));
    CHECK_HAS(buf, " info log_say_where: logging to stderr, level debug (syslog = no)\n");
    /* syslog asked for with no syslog daemon: the lines go to stderr, with
       a warning, instead of vanishing.  (Where one listens, nothing to see.) */
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", _PATH_LOG);
    int probe = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    bool listening = probe >= 0 && connect(probe, (struct sockaddr *)&sun, sizeof(sun)) == 0;
    if (probe >= 0)
        close(probe);
    if (!listening) {
        log_init("broker", LOG_LEVEL_INFO, true);
        log_say_where();
        log_info("still here");
        read_log(buf, sizeof(buf));
        CHECK_HAS(buf, " warn log_say_where: syslog = yes, but no syslog daemon listens on ");
        CHECK_HAS(buf, "logging to stderr instead (level info)");
        CHECK_HAS(buf, " info main: still here\n");
        log_init("broker", LOG_LEVEL_DEBUG, false);
    }

    CHECK(log_level_parse("error") == LOG_LEVEL_ERROR);
    CHECK(log_level_parse("warn") == LOG_LEVEL_WARN);
    CHECK(log_level_parse("info") == LOG_LEVEL_INFO);
    CHECK(log_level_parse("debug") == LOG_LEVEL_DEBUG);
    CHECK(log_level_parse("verbose") == -1);
    CHECK(log_level_parse(NULL) == -1);

    dup2(saved, 2);
    close(saved);
    unlink(path);
    return check_result("test_log");
}
