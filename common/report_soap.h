/* Reports (report_batch.h) as the schema's list of attempts, for the
   qcg__reports call of the helper and of the frontend. */
#ifndef QCG_REPORT_SOAP_H
#define QCG_REPORT_SOAP_H

#include "report_batch.h"
#include "soapH.h"

/* Fills *list with n attempts pointing into items (which must outlive the
   call), the array in soap's memory: 0, or -1 when it runs out. */
int report_attempts(struct soap *soap, const struct report_item *items, int n,
                    struct qcg__attempts *list);

#endif
