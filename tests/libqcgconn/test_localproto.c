/* libqcgconn-localproto: the header and payload checks every local message
   passes before use. */
#include <string.h>

#include "check.h"
#include "localproto.h"
#include "qcgconn.h"

static struct local_header header(uint16_t type, uint32_t length)
{
    struct local_header h = {.magic = LOCAL_MAGIC, .type = type, .length = length};
    return h;
}

static void test_headers(void)
{
    struct local_header h;

    for (uint16_t t = 1; t < LOCAL_TYPE_COUNT; t++) {
        size_t size = local_payload_size[t];

        h = header(t, (uint32_t)size);
        CHECK_EQ(local_header_check(&h), 0);
        h = header(t, (uint32_t)size + 1);
        CHECK_EQ(local_header_check(&h), QCG_EPROTO);
        if (size > 0) {
            h = header(t, (uint32_t)size - 1);
            CHECK_EQ(local_header_check(&h), QCG_EPROTO);
        }
        h = header(t, 0xffffffffu);
        CHECK_EQ(local_header_check(&h), QCG_EPROTO);
        h = header(t, (uint32_t)size);
        h.magic = 0x31474351u; /* "QCG1" the other way round */
        CHECK_EQ(local_header_check(&h), QCG_EPROTO);
        h = header(t, (uint32_t)size);
        h.reserved = 1;
        CHECK_EQ(local_header_check(&h), QCG_EPROTO);
    }
    h = header(0, 0);
    CHECK_EQ(local_header_check(&h), QCG_EPROTO);
    h = header(LOCAL_TYPE_COUNT, 0);
    CHECK_EQ(local_header_check(&h), QCG_EPROTO);
    h = header(0xffff, 0);
    CHECK_EQ(local_header_check(&h), QCG_EPROTO);
    CHECK_EQ(local_header_check(NULL), QCG_EPROTO);

    /* The sizes the helper and the library agree on. */
    CHECK_EQ(local_payload_size[LOCAL_HELLO], sizeof(struct local_hello));
    CHECK_EQ(local_payload_size[LOCAL_HELLO_OK], sizeof(struct local_hello_ok));
    CHECK_EQ(local_payload_size[LOCAL_PUBLISH], sizeof(struct local_publish));
    CHECK_EQ(local_payload_size[LOCAL_WITHDRAW], 0);
    CHECK_EQ(local_payload_size[LOCAL_LOOKUP], sizeof(struct local_lookup));
    CHECK_EQ(local_payload_size[LOCAL_PLAN], sizeof(struct local_plan));
    CHECK_EQ(local_payload_size[LOCAL_OK], 0);
    CHECK_EQ(local_payload_size[LOCAL_ERROR], sizeof(struct local_error));
    CHECK_EQ(local_payload_size[LOCAL_INCOMING], sizeof(struct local_incoming));
    CHECK_EQ(local_payload_size[LOCAL_STATUS], 0);
    CHECK_EQ(local_payload_size[LOCAL_STATUS_OK], sizeof(struct local_status));
}

/* A payload passes, then fails once the string field at [off, off+len) has
   no NUL left in it. */
static void check_string_field(uint16_t type, void *payload, size_t off, size_t len)
{
    char *field = (char *)payload + off;
    char saved[256];

    CHECK(len <= sizeof(saved));
    memcpy(saved, field, len);
    CHECK_EQ(local_payload_check(type, payload), 0);
    memset(field, 'x', len);
    CHECK_EQ(local_payload_check(type, payload), QCG_EPROTO);
    /* A NUL in the last byte is enough. */
    field[len - 1] = '\0';
    CHECK_EQ(local_payload_check(type, payload), 0);
    memcpy(field, saved, len);
}

#define FIELD(type, p, f) check_string_field(type, &(p), offsetof(__typeof__(p), f), sizeof((p).f))

static void test_payloads(void)
{
    struct local_hello hello = {.version = LOCAL_VERSION, .rank = 3};
    struct local_hello_ok ok = {.version = LOCAL_VERSION, .port_low = 1, .port_high = 2};
    struct local_publish pub = {.port = 1};
    struct local_lookup lk = {.to_rank = 1, .timeout_ms = 5};
    struct local_plan plan = {.technique = QCG_TECH_DIRECT};
    struct local_error err = {.code = QCG_EDENIED};
    struct local_incoming in = {.peer_rank = 1};
    struct local_status st = {0};

    strcpy(hello.job, "job");
    strcpy(hello.secret, "s");
    FIELD(LOCAL_HELLO, hello, job);
    FIELD(LOCAL_HELLO, hello, secret);
    hello.version = LOCAL_VERSION + 1;
    CHECK_EQ(local_payload_check(LOCAL_HELLO, &hello), QCG_EPROTO);
    hello.version = 0;
    CHECK_EQ(local_payload_check(LOCAL_HELLO, &hello), QCG_EPROTO);

    FIELD(LOCAL_HELLO_OK, ok, cluster);
    FIELD(LOCAL_HELLO_OK, ok, node);
    FIELD(LOCAL_HELLO_OK, ok, address);

    FIELD(LOCAL_PLAN, plan, cluster);
    FIELD(LOCAL_PLAN, plan, node);
    FIELD(LOCAL_PLAN, plan, address);
    FIELD(LOCAL_PLAN, plan, token);

    FIELD(LOCAL_ERROR, err, message);
    FIELD(LOCAL_INCOMING, in, token);

    FIELD(LOCAL_STATUS_OK, st, cluster);
    FIELD(LOCAL_STATUS_OK, st, node);
    FIELD(LOCAL_STATUS_OK, st, frontend);

    /* Integer-only payloads and empty ones. */
    CHECK_EQ(local_payload_check(LOCAL_PUBLISH, &pub), 0);
    CHECK_EQ(local_payload_check(LOCAL_LOOKUP, &lk), 0);
    CHECK_EQ(local_payload_check(LOCAL_WITHDRAW, NULL), 0);
    CHECK_EQ(local_payload_check(LOCAL_OK, NULL), 0);
    CHECK_EQ(local_payload_check(LOCAL_STATUS, NULL), 0);
    /* Unknown types and a missing payload. */
    CHECK_EQ(local_payload_check(0, &pub), QCG_EPROTO);
    CHECK_EQ(local_payload_check(LOCAL_TYPE_COUNT, &pub), QCG_EPROTO);
    CHECK_EQ(local_payload_check(LOCAL_PLAN, NULL), QCG_EPROTO);
}

int main(void)
{
    test_headers();
    test_payloads();
    printf("libqcgconn-localproto: ok\n");
    return 0;
}
