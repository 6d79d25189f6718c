/* The request parser of the metrics endpoint; see metrics_http.h. */
#include "metrics_http.h"

#include <string.h>

/* Where the head ends (after its blank line), or NULL. */
static const char *head_end(const char *buf, size_t len)
{
    for (size_t i = 0; i + 1 < len; i++) {
        if (buf[i] == '\n' && buf[i + 1] == '\n')
            return buf + i + 2;
        if (buf[i] == '\n' && i + 2 < len && buf[i + 1] == '\r' && buf[i + 2] == '\n')
            return buf + i + 3;
    }
    return NULL;
}

static bool starts(const char *p, const char *end, const char *word)
{
    size_t n = strlen(word);
    return (size_t)(end - p) >= n && memcmp(p, word, n) == 0;
}

/* Header lines: "name: value", visible ASCII and tabs only. */
static bool headers_ok(const char *p, const char *end)
{
    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (eol == NULL)
            return false;
        const char *last = eol > p && eol[-1] == '\r' ? eol - 1 : eol;
        if (last == p)
            return true; /* the blank line */
        const char *colon = memchr(p, ':', (size_t)(last - p));
        if (colon == NULL || colon == p)
            return false;
        for (const char *c = p; c < last; c++) {
            unsigned char u = (unsigned char)*c;
            if ((u < 0x20 && u != '\t') || u == 0x7f)
                return false;
            if (c < colon && (u == ' ' || u == '\t'))
                return false;
        }
        p = eol + 1;
    }
    return false;
}

int metrics_request_parse(const char *buf, size_t len, bool *head, const char **why)
{
    *head = false;
    *why = "";
    if (memchr(buf, '\0', len) != NULL) {
        *why = "a NUL byte in the request";
        return 400;
    }
    const char *end = head_end(buf, len);
    if (end == NULL) {
        if (len >= METRICS_REQUEST_MAX) {
            *why = "request head too large";
            return 431;
        }
        return METRICS_HTTP_MORE;
    }
    if (end - buf > METRICS_REQUEST_MAX) {
        *why = "request head too large";
        return 431;
    }
    const char *eol = memchr(buf, '\n', (size_t)(end - buf));
    const char *line_end = eol > buf && eol[-1] == '\r' ? eol - 1 : eol;
    const char *sp1 = memchr(buf, ' ', (size_t)(line_end - buf));
    const char *sp2 = sp1 ? memchr(sp1 + 1, ' ', (size_t)(line_end - sp1 - 1)) : NULL;
    if (sp1 == NULL || sp2 == NULL || sp1 == buf || sp2 == sp1 + 1) {
        *why = "not an HTTP request line";
        return 400;
    }
    const char *version = sp2 + 1;
    if (!(line_end - version == 8 &&
          (starts(version, line_end, "HTTP/1.1") || starts(version, line_end, "HTTP/1.0")))) {
        *why = starts(version, line_end, "HTTP/") ? "only HTTP/1.0 and HTTP/1.1"
                                                  : "not an HTTP request line";
        return starts(version, line_end, "HTTP/") ? 505 : 400;
    }
    for (const char *c = buf; c < sp2; c++) {
        if ((unsigned char)*c <= 0x20 && c != sp1) {
            *why = "a control character in the request line";
            return 400;
        }
    }
    if (!headers_ok(eol + 1, end)) {
        *why = "a malformed header line";
        return 400;
    }
    size_t mlen = (size_t)(sp1 - buf);
    if (mlen == 4 && memcmp(buf, "HEAD", 4) == 0)
        *head = true;
    else if (!(mlen == 3 && memcmp(buf, "GET", 3) == 0)) {
        *why = "only GET and HEAD";
        return 405;
    }
    const char *target = sp1 + 1;
    size_t tlen = (size_t)(sp2 - target);
    if (!(tlen >= 8 && memcmp(target, "/metrics", 8) == 0 && (tlen == 8 || target[8] == '?'))) {
        *why = "only /metrics is served here";
        return 404;
    }
    return 0;
}

const char *metrics_status_text(int status)
{
    switch (status) {
    case 200:
        return "OK";
    case 400:
        return "Bad Request";
    case 403:
        return "Forbidden";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 408:
        return "Request Timeout";
    case 431:
        return "Request Header Fields Too Large";
    case 503:
        return "Service Unavailable";
    case 505:
        return "HTTP Version Not Supported";
    default:
        return "Internal Server Error";
    }
}
