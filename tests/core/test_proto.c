/* core/proto.c: names round-trip, validators accept exactly the documented alphabet. */
#include "check.h"
#include "proto.h"

static void test_names(void)
{
    const char *roles[] = {"broker", "proxy", "frontend", "helper"};
    for (int i = 0; i < 4; i++)
        CHECK_STR(role_name(role_parse(roles[i])), roles[i]);
    CHECK(role_parse("ca") == QCG_ROLE_NONE);
    CHECK(role_parse("none") == QCG_ROLE_NONE);
    CHECK(role_parse("Broker") == QCG_ROLE_NONE);
    CHECK(role_parse(NULL) == QCG_ROLE_NONE);
    CHECK(role_parse("") == QCG_ROLE_NONE);

    const char *kinds[] = {"open", "firewalled", "nat", "symnat"};
    for (int i = 0; i < 4; i++) {
        CHECK(cluster_kind_parse(kinds[i]) == i);
        CHECK_STR(cluster_kind_name((enum cluster_kind)i), kinds[i]);
    }
    CHECK(cluster_kind_parse("NAT") == -1);
    CHECK(cluster_kind_parse("") == -1);
    CHECK(cluster_kind_parse(NULL) == -1);
    CHECK_STR(cluster_kind_name((enum cluster_kind)42), "unknown");
}

static void test_validators(void)
{
    CHECK(name_valid("a"));
    CHECK(name_valid("nata1"));
    CHECK(name_valid("A.b_c-9"));
    CHECK(name_valid("0"));
    CHECK(!name_valid(""));
    CHECK(!name_valid(NULL));
    CHECK(!name_valid("-a"));
    CHECK(!name_valid(".a"));
    CHECK(!name_valid("_a"));
    CHECK(!name_valid("a b"));
    CHECK(!name_valid("a/b"));
    CHECK(!name_valid("a\n"));
    CHECK(!name_valid("caf\xc3\xa9"));
    char n[80];
    memset(n, 'x', 63);
    n[63] = '\0';
    CHECK(name_valid(n));
    n[63] = 'x';
    n[64] = '\0';
    CHECK(!name_valid(n));

    CHECK(job_valid("job-42.1"));
    CHECK(!job_valid(""));
    CHECK(!job_valid("job 1"));
    CHECK(!job_valid("../x"));
    memset(n, 'j', 63);
    n[63] = '\0';
    CHECK(job_valid(n));
    n[63] = 'j';
    n[64] = '\0';
    CHECK(!job_valid(n));

    CHECK(secret_valid("s3cret with spaces & symbols!~"));
    CHECK(!secret_valid(""));
    CHECK(!secret_valid(NULL));
    CHECK(!secret_valid("tab\there"));
    CHECK(!secret_valid("del\x7f"));
    CHECK(!secret_valid("\xc3\xa9t\xc3\xa9"));
    char s[200];
    memset(s, 's', 127);
    s[127] = '\0';
    CHECK(secret_valid(s));
    s[127] = 's';
    s[128] = '\0';
    CHECK(!secret_valid(s));
}

int main(void)
{
    test_names();
    test_validators();
    return check_result("test_proto");
}
