/* See soap_util.h. */
#include "soap_util.h"

#include <pthread.h>
#include <stdio.h>

#include "soapH.h"

static pthread_once_t ssl_once = PTHREAD_ONCE_INIT;

static void ssl_init(void)
{
    soap_ssl_init();
}

void soap_tls_init_once(void)
{
    pthread_once(&ssl_once, ssl_init);
}

void soap_error_text(struct soap *soap, char *buf, size_t len)
{
    soap_set_fault(soap);
    const char *s = soap_fault_string(soap);
    const char *d = soap_fault_detail(soap);
    snprintf(buf, len, "%s%s%s", s ? s : "unknown error", d && *d ? ": " : "", d && *d ? d : "");
    for (char *p = buf; *p; p++)
        if ((unsigned char)*p < 0x20)
            *p = ' ';
}
