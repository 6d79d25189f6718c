/* Logging for the daemons: levels, the component and the function in every line,
   to stderr (foreground) or syslog.  Thread-safe: one write per line. */
#ifndef QCG_LOG_H
#define QCG_LOG_H

#include <stdbool.h>
#include <stdnoreturn.h>

enum log_level { LOG_LEVEL_ERROR, LOG_LEVEL_WARN, LOG_LEVEL_INFO, LOG_LEVEL_DEBUG };

/* component: "broker", "frontend", ... ; use_syslog false = stderr.  With
   use_syslog but no syslog daemon listening, stderr (log_say_where says so). */
void log_init(const char *component, enum log_level level, bool use_syslog);
/* One line (info): where the lines go (stderr or syslog) and at which
   level; a warning when syslog was asked for and is not there.  Each daemon
   says it once at start, once its setup is known to be good. */
void log_say_where(void);
void log_set_level(enum log_level level);
enum log_level log_get_level(void);
/* "error", "warn", "info", "debug" -> level; -1 for anything else. */
int log_level_parse(const char *name);

void log_emit(enum log_level level, const char *func, int with_errno, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
noreturn void log_fatal(const char *func, int with_errno, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* log_warn and fatal append strerror(errno); the x variants do not. */
#define log_warn(...) log_emit(LOG_LEVEL_WARN, __func__, 1, __VA_ARGS__)
#define log_warnx(...) log_emit(LOG_LEVEL_WARN, __func__, 0, __VA_ARGS__)
#define log_error(...) log_emit(LOG_LEVEL_ERROR, __func__, 0, __VA_ARGS__)
#define log_info(...) log_emit(LOG_LEVEL_INFO, __func__, 0, __VA_ARGS__)
#define log_debug(...) log_emit(LOG_LEVEL_DEBUG, __func__, 0, __VA_ARGS__)
/* Only at start-up or for broken invariants. */
#define fatal(...) log_fatal(__func__, 1, __VA_ARGS__)
#define fatalx(...) log_fatal(__func__, 0, __VA_ARGS__)

#endif
