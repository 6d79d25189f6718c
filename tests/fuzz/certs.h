/* A grid CA and certificates for the harnesses that speak mutual TLS, made
   by certs/qcg-certs in a directory of their own, removed at exit. */
#ifndef QCG_FUZZ_CERTS_H
#define QCG_FUZZ_CERTS_H

/* Makes the CA and one certificate per `issue` (the arguments of
   "qcg-certs issue", e.g. "broker --san 127.0.0.1"); NULL ends the list.
   Also ignores SIGPIPE, as the daemons do. */
void certs_make(const char *const *issue);
/* A file of that directory ("ca.crt", "frontend-nata.pem"); the string
   lives until exit. */
const char *certs_path(const char *file);

#endif
