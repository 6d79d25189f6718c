/* identity.c: roles and names from a certificate subject's OU and CN. */
#include "check.h"
#include "identity.h"
#include "log.h"

static void test_good(void)
{
    struct identity id;
    CHECK(identity_from_fields("broker", "broker", &id) == 0);
    CHECK(id.role == QCG_ROLE_BROKER);
    CHECK_STR(id.name, "broker");
    CHECK_STR(id.cluster, "");
    CHECK_STR(id.node, "");

    CHECK(identity_from_fields("proxy", "proxy-1", &id) == 0);
    CHECK(id.role == QCG_ROLE_PROXY);
    CHECK_STR(id.name, "proxy-1");

    CHECK(identity_from_fields("frontend", "nata", &id) == 0);
    CHECK(id.role == QCG_ROLE_FRONTEND);
    CHECK_STR(id.name, "nata");
    CHECK_STR(id.cluster, "nata");
    CHECK_STR(id.node, "");

    CHECK(identity_from_fields("helper", "nata/nata1", &id) == 0);
    CHECK(id.role == QCG_ROLE_HELPER);
    CHECK_STR(id.name, "nata/nata1");
    CHECK_STR(id.cluster, "nata");
    CHECK_STR(id.node, "nata1");

    /* Longest names on both sides of the slash. */
    char cn[200];
    memset(cn, 'c', 63);
    cn[63] = '/';
    memset(cn + 64, 'n', 63);
    cn[127] = '\0';
    CHECK(identity_from_fields("helper", cn, &id) == 0);
    CHECK(strlen(id.cluster) == 63 && strlen(id.node) == 63);
}

static void expect_refused(const char *ou, const char *cn)
{
    struct identity id;
    memset(&id, 0x77, sizeof(id));
    int rc = identity_from_fields(ou, cn, &id);
    if (rc != -1)
        fprintf(stderr, "accepted OU=%s CN=%s\n", ou ? ou : "(none)", cn ? cn : "(none)");
    CHECK(rc == -1);
    /* Nothing half-filled that a careless caller could act on. */
    CHECK(id.role == QCG_ROLE_NONE);
    CHECK(id.name[0] == '\0' && id.cluster[0] == '\0' && id.node[0] == '\0');
}

static void test_refused(void)
{
    expect_refused(NULL, "broker");
    expect_refused("broker", NULL);
    expect_refused("ca", "qcg-connect grid CA");
    expect_refused("none", "x");
    expect_refused("Helper", "a/b");
    expect_refused("", "a");
    expect_refused("frontend", "");
    expect_refused("frontend", "a/b");
    expect_refused("frontend", "-a");
    expect_refused("broker", "my broker");
    expect_refused("helper", "nata");
    expect_refused("helper", "nata/");
    expect_refused("helper", "/nata1");
    expect_refused("helper", "nata/nata1/x");
    expect_refused("helper", "nata//nata1");
    expect_refused("helper", "na ta/nata1");
    expect_refused("helper", "nata/nata1\n");
    expect_refused("frontend", "caf\xc3\xa9");
    char cn[300];
    memset(cn, 'c', 64);
    cn[64] = '/';
    memcpy(cn + 65, "n", 2);
    expect_refused("helper", cn);
    memset(cn, 'c', 200);
    cn[200] = '\0';
    expect_refused("frontend", cn);
    expect_refused("helper", cn);
}

int main(void)
{
    log_init("test", LOG_LEVEL_ERROR, false);
    test_good();
    test_refused();
    return check_result("test_identity");
}
