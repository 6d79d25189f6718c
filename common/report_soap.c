/* Reports as the schema's attempts; see report_soap.h. */
#include "report_soap.h"

int report_attempts(struct soap *soap, const struct report_item *items, int n,
                    struct qcg__attempts *list)
{
    list->__sizeAttempt = n;
    list->attempt = soap_malloc(soap, (size_t)n * sizeof(*list->attempt));
    if (list->attempt == NULL)
        return -1;
    for (int i = 0; i < n; i++) {
        const struct report_item *r = &items[i];
        list->attempt[i] = (struct qcg__attempt){.job = (char *)r->job,
                                                 .verifier = (char *)r->verifier,
                                                 .fromRank = r->from_rank,
                                                 .toRank = r->to_rank,
                                                 .technique = (char *)r->technique,
                                                 .ok = r->ok,
                                                 .setupMs = r->setup_ms,
                                                 .why = r->why[0] != '\0' ? (char *)r->why : NULL};
    }
    return 0;
}
