/* What qcg-connect knows of Open MPI's runtime daemon command line.

   mpirun's rsh/ssh launcher runs `AGENT HOST DAEMON ARGS...`, where ARGS were
   written for the remote shell ssh would start (values in double quotes).
   qcg-launch turns them into a plain argv the way that shell would, refusing
   anything but words and quotes; qcg-agent checks that it is asked for a
   runtime daemon and points the daemon's contact of mpirun at its own
   loopback port.  Open MPI 4.1 (ORTE) and 5.0 (PRRTE) differ in the daemon,
   the option word and the contact's form; `struct ompi_runtime` holds every
   difference, the functions below take the runtime they parse for. */
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

/* One line of Open MPI's runtime: what its daemon's command line looks like. */
struct ompi_runtime {
    const char *name;       /* "ORTE (Open MPI 4.1)", for messages */
    const char *daemon;     /* the daemon's program: orted, prted */
    const char *opt[2];     /* the words before NAME VALUE (NULL: none) */
    const char *hnp_uri;    /* mpirun's contact */
    const char *parent_uri; /* a tree-spawning parent's contact */
    /* A setting the agent gives every daemon, whatever mpirun said: ORTE's
       runtime interfaces, lo (nothing of the runtime on the LAN); PRRTE's
       reachability by address class (its default, by the kernel's routes,
       finds mpirun's contact, 127.0.0.1, unreachable from the node's
       interfaces, and PRRTE's daemons take no loopback interface). */
    const char *set_name, *set_value;
    /* Added by the agent when missing: keeps the daemon in the agent's
       session (ORTE's mpirun says it with a variable of its own). */
    const char *stay_attached;
    /* The contact's tcp address has a third field, prefix lengths:
       tcp://ADDRS:PORT:MASKS (PRRTE) instead of tcp://ADDRS:PORT (ORTE). */
    int masks;
};
extern const struct ompi_runtime ompi_orte, ompi_prrte;

/* The runtime whose daemon argv[0] names (orted or prted, by any path), or NULL. */
const struct ompi_runtime *runtime_of(const char *arg0);

/* The runtime of a daemon command line: argv[0]'s, else the one whose
   contact of mpirun is on the line (the agent then refuses the program by
   name); NULL if neither. */
const struct ompi_runtime *runtime_of_line(int argc, char *const *argv);

/* Index in argv of the value of `OPT NAME VALUE` (OPT: one of rt's option
   words, -mca/--mca or --prtemca), or -1. */
int mca_value_index(const struct ompi_runtime *rt, int argc, char *const *argv, const char *name);

/* The first tcp:// endpoint of a runtime URI of rt: its address list (commas
   kept) and port (the first of a list).  0, or -1 if there is none. */
int uri_tcp_endpoint(const struct ompi_runtime *rt, const char *uri, char *addrs, size_t addrlen,
                     uint16_t *port);
/* The URI with its endpoints replaced by tcp://127.0.0.1:PORT (with ":8" for
   a runtime whose addresses carry masks; the process name before ';' kept).
   0, or -1 if it is not a runtime URI of rt or out is small. */
int uri_point_to_loopback(const struct ompi_runtime *rt, const char *uri, uint16_t port, char *out,
                          size_t outlen);

/* PRRTE writes its daemon's command for a POSIX remote shell with a
   preamble: "( test ! -r ./.profile || . ./.profile; " ... " )" around it,
   and "NAME=VALUE;export NAME;" for PRTE_PREFIX, PMIX_PREFIX, LD_LIBRARY_PATH
   and DYLD_LIBRARY_PATH (the daemon's install prefix; the agent runs its own
   daemon with its own environment instead).  cmd is one launch agent
   argument; when it has that form, the command alone is copied into out and
   1 returned; 0 when cmd has no preamble, -1 (with why) when it has a
   preamble of another form or out is small. */
int prrte_strip_preamble(const char *cmd, char *out, size_t outlen, char *why, size_t whylen);

#endif
