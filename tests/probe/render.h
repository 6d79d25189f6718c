/* The probe tests' capture of one report (report_human or report_json) of
   a run, as text to search; the caller frees it. */
#ifndef TESTS_PROBE_RENDER_H
#define TESTS_PROBE_RENDER_H

#include <stdio.h>

#include "probe.h"

static inline char *render(void (*report)(FILE *, const struct probe_run *),
                           const struct probe_run *run)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    report(f, run);
    fclose(f);
    return text;
}

#endif
