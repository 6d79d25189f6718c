/* libFuzzer harness for the parsers of what reaches qcg-agent and
   qcg-launch: the frame header and LAUNCH payload as they come off the
   connection, and the same bytes cut at their NULs into the strings of a
   command line and runtime URIs.  Built with clang only (tests/fuzz/
   CMakeLists.txt); scripts/fuzz runs it. */
#include "fuzz.h"
#include "ortecmd.h"
#include "wire.h"

#define STRINGS_MAX 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct wire_launch req;
    struct wire_header h;
    char why[256];

    if (size >= WIRE_HEADER && wire_header_get(data, &h) == 0 &&
        (h.type < WIRE_LAUNCH || h.type > WIRE_TYPE_LAST || h.len > WIRE_FRAME_MAX))
        abort();

    /* The payload in a buffer of exactly its size, as link.c hands it over. */
    uint8_t *payload = fuzz_copy(data, size);
    if (wire_launch_decode(payload, size, &req, why, sizeof(why)) == 0) {
        if (req.argc < 1 || req.argc > WIRE_ARGS_MAX || req.argv[req.argc] != NULL)
            abort();
        fuzz_touch(req.job);
        for (int i = 0; i < req.argc; i++)
            fuzz_touch(req.argv[i]);
    } else if (memchr(why, '\0', sizeof(why)) == NULL || why[0] == '\0') {
        abort();
    }
    free(payload);

    /* The bytes as strings, cut at NULs: each in a buffer of its own size. */
    char *strs[STRINGS_MAX];
    int n = 0;
    for (size_t at = 0; at < size && n < STRINGS_MAX; n++) {
        const uint8_t *nul = memchr(data + at, '\0', size - at);
        size_t len = nul != NULL ? (size_t)(nul - (data + at)) : size - at;
        strs[n] = malloc(len + 1);
        if (strs[n] == NULL)
            break;
        memcpy(strs[n], data + at, len);
        strs[n][len] = '\0';
        at += len + 1;
    }

    /* The word bound from the first byte, so that the fuzzer reaches it. */
    char *words[STRINGS_MAX + 2];
    int max = size > 0 ? 1 + data[0] % (STRINGS_MAX + 1) : STRINGS_MAX;
    int got = shell_words(n, (const char *const *)strs, words, max, why, sizeof(why));
    if (got > max || got < -1 || words[got < 0 ? 0 : got] != NULL)
        abort();
    for (int i = 0; i < got; i++)
        fuzz_touch(words[i]);
    if (got >= 1) {
        (void)runtime_of(words[0]);
        (void)runtime_of_line(got, words);
        (void)mca_value_index(&ompi_orte, got, words, "orte_hnp_uri");
        (void)mca_value_index(&ompi_prrte, got, words, "prte_hnp_uri");
    }
    words_free(words);

    static const struct ompi_runtime *const rts[] = {&ompi_orte, &ompi_prrte};
    for (int i = 0; i < n; i++) {
        char addrs[64], out[96], small[24];
        uint16_t port;
        for (int r = 0; r < 2; r++) {
            const struct ompi_runtime *rt = rts[r];
            if (uri_tcp_endpoint(rt, strs[i], addrs, sizeof(addrs), &port) == 0 &&
                (port == 0 || memchr(addrs, '\0', sizeof(addrs)) == NULL))
                abort();
            if (uri_point_to_loopback(rt, strs[i], 4242, out, sizeof(out)) == 0 &&
                (memchr(out, '\0', sizeof(out)) == NULL ||
                 strstr(out, ";tcp://127.0.0.1:4242") == NULL))
                abort();
            if (uri_point_to_loopback(rt, strs[i], 65535, small, sizeof(small)) == 0 &&
                memchr(small, '\0', sizeof(small)) == NULL)
                abort();
        }
        int pre = prrte_strip_preamble(strs[i], out, sizeof(out), why, sizeof(why));
        if (pre < -1 || pre > 1 || (pre == 1 && memchr(out, '\0', sizeof(out)) == NULL))
            abort();
        free(strs[i]);
    }
    return 0;
}
