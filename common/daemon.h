/* What every daemon does the same way: signals for a clean stop. */
#ifndef QCG_DAEMON_H
#define QCG_DAEMON_H

#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>

/* Installs SIGTERM/SIGINT handlers that set *stop and call on_stop(arg) (which
   must be async-signal-safe; *stop is an atomic: other threads read it, and
   a lock-free atomic may be set from a signal handler), a SIGHUP handler that has the CRL and the
   service's certificate, key and CAs reloaded at once by a thread started
   here (crl.h, tls_reload.h), and ignores SIGPIPE. */
void daemon_signals(atomic_int *stop, void (*on_stop)(void *), void *arg);
/* Why the daemon stops, for its "stopping" line: "SIGTERM from pid 812
   (systemd), uid 0", "SIGINT", or "asked to" when no signal came. */
void daemon_stop_cause(char *buf, size_t len);

/* Sleeps up to ms, returning early (1) once *stop is set; polls every 100 ms. */
int sleep_unless_stopped(unsigned ms, atomic_int *stop);

#endif
