/* libFuzzer harness for the metrics endpoint (util/metrics_http.c,
   util/metrics_text.c): a request head from anyone who reaches
   metrics-listen, in a buffer of exactly its size; and the same bytes as a
   label value and HELP text, which must stay one escaped line each.
   Input: the request. */
#include "fuzz.h"
#include "metrics_http.h"
#include "metrics_text.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *b = fuzz_copy(data, size);
    bool head;
    const char *why;
    int st = metrics_request_parse(b, size, &head, &why);
    FUZZ_ASSERT(st == 0 || st == METRICS_HTTP_MORE || st == 400 || st == 404 || st == 405 ||
                st == 431 || st == 505);
    FUZZ_ASSERT(st != METRICS_HTTP_MORE || size < METRICS_REQUEST_MAX);
    if (st != 0 && st != METRICS_HTTP_MORE)
        FUZZ_ASSERT(why[0] != '\0' && strchr(why, '\n') == NULL);
    FUZZ_ASSERT(metrics_status_text(st == METRICS_HTTP_MORE ? 200 : st) != NULL);

    /* As a label value (up to its first NUL): one line per sample. */
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = '\0';
    struct metrics_buf out = {0};
    metrics_family(&out, "qcg_fuzz_total", "counter", text);
    metrics_sample(&out, "qcg_fuzz_total", 1, "cluster", text, NULL);
    if (!out.failed) {
        size_t lines = 0;
        for (size_t i = 0; i < out.len; i++)
            lines += out.p[i] == '\n';
        FUZZ_ASSERT(lines == 3);
    }
    metrics_buf_free(&out);
    free(text);
    free(b);
    return 0;
}
