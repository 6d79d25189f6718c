/* What the SOAP server and client glue share (internal to common/). */
#ifndef QCG_SOAP_UTIL_H
#define QCG_SOAP_UTIL_H

#include <stddef.h>

struct soap;

/* soap_ssl_init() exactly once per process, before any TLS context. */
void soap_tls_init_once(void);
/* One-line text for the error held in soap (for logs and err buffers). */
void soap_error_text(struct soap *soap, char *buf, size_t len);

#endif
