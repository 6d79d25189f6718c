/* What qcg-connect knows of Open MPI's runtime daemon command line.

   mpirun's rsh launcher runs `AGENT HOST orted ARGS...`, where ARGS were
   written for the remote shell ssh would start (values in double quotes).
   qcg-launch turns them into a plain argv the way that shell would, refusing
   anything but words and quotes; qcg-agent checks that it is asked for orted
   and points the daemon's contact of mpirun (orte_hnp_uri, orte_parent_uri:
   "JOBID.VPID;tcp://ADDR[,ADDR...]:PORT[;...]") at its own loopback port. */
#ifndef QCG_LAUNCH_ORTECMD_H
#define QCG_LAUNCH_ORTECMD_H

#include <stddef.h>
#include <stdint.h>

/* The words a POSIX shell would make of in[0..n-1] joined by spaces, with no
   expansion: into out (NULL-terminated, strings malloc'd; free with
   words_free).  The count, or -1 with why (shell syntax that needs a shell:
   ; & | < > ( ) $ ` *, an unclosed quote, more than max words). */
int shell_words(int n, const char *const *in, char **out, int max, char *why, size_t whylen);
void words_free(char **words);

/* Index in argv of the value of `-mca NAME VALUE` / `--mca NAME VALUE`, or -1. */
int mca_value_index(int argc, char *const *argv, const char *name);

/* 1 if argv[0] names Open MPI's daemon (orted, by any path), else 0. */
int is_orted(const char *arg0);

/* The first tcp:// endpoint of a runtime URI: its address list (text before
   the last ':', commas kept) and port.  0, or -1 if there is none. */
int uri_tcp_endpoint(const char *uri, char *addrs, size_t addrlen, uint16_t *port);
/* The URI with its endpoints replaced by tcp://127.0.0.1:PORT (the process
   name before ';' kept).  0, or -1 if it is not a runtime URI or out is small. */
int uri_point_to_loopback(const char *uri, uint16_t port, char *out, size_t outlen);

#endif
